//! The decision-path fleet: 1,000 NodePools x 100 NodeClaims on the in-memory cluster, with the
//! annotations a running fleet carries (rotations in flight in each state, gates closed for each
//! reason), driven into that state by the real controller and a hand-played Karpenter.
use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Duration, TimeZone, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use noderotation::clock::{Clock, VirtualClock};
use noderotation::cluster::Cluster;
use noderotation::cluster::memory::{CacheLag, MemoryCluster, Rng};
use noderotation::engine::{Engine, Key};
use noderotation::karpenter::{NodeClaim, NodePool};
use noderotation::placeholder::placeholder_name;
use noderotation::policy::crd::RotationPolicy;
use noderotation::policy::resolve::to_time;
use noderotation::reconcile::{Controller, ControllerConfig};

pub const NS: &str = "noderotation-system";
const POOL_LABEL: &str = "karpenter.sh/nodepool";
const GROUP_LABEL: &str = "bench.noderotation.io/group";

/// Saturday 2026-11-28 03:00 UTC: 12:00 in Tokyo, outside the Wed/Sat 02:00-06:00 windows.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 28, 3, 0, 0).single().unwrap_or(DateTime::UNIX_EPOCH)
}

/// What a pool is doing in the steady state the bench measures. One pool in twenty of each
/// kind after `Closed` (half the fleet) and `Ungoverned` (a tenth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PoolKind {
    /// Governed, window closed now (Tokyo Wed/Sat nights, auto age threshold).
    Closed,
    /// No policy selects it.
    Ungoverned,
    /// In window, operator freeze until tomorrow.
    Frozen,
    /// In window, cooldownAfter since the last success not over.
    Cooldown,
    /// In window, failurePause after a failure not over; one claim `failed` in backoff.
    FailurePause,
    /// Rotation anchored, placeholder created and not yet scheduled (`pending`).
    Pending,
    /// Rotation anchored, surge node ready, old claim deleted and draining (`draining`).
    Draining,
    /// In window, every claim younger than the age threshold.
    NoCandidate,
    /// Selected by two equally specific policies.
    Conflict,
}

impl PoolKind {
    pub fn of(index: usize) -> PoolKind {
        match index % 20 {
            0..=9 => PoolKind::Closed,
            10 | 11 => PoolKind::Ungoverned,
            12 => PoolKind::Frozen,
            13 => PoolKind::Cooldown,
            14 => PoolKind::FailurePause,
            15 | 16 => PoolKind::Pending,
            17 => PoolKind::Draining,
            18 => PoolKind::NoCandidate,
            _ => PoolKind::Conflict,
        }
    }

    fn group(self) -> &'static str {
        match self {
            PoolKind::Closed => "tokyo-nights",
            PoolKind::Ungoverned => "nobody",
            PoolKind::Conflict => "contested",
            _ => "always",
        }
    }
}

pub struct Fleet {
    pub clock: VirtualClock,
    pub world: MemoryCluster,
    pub client: MemoryCluster,
    pub ctl: Controller,
    pub pools: Vec<String>,
    pub claims: usize,
}

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> anyhow::Result<T> {
    serde_norway::from_str(text).with_context(|| format!("bench fixture:\n{text}"))
}

fn policy(name: &str, group: &str, age: &str, windows: &str) -> anyhow::Result<RotationPolicy> {
    yaml(&format!(
        r#"
apiVersion: noderotation.io/v1alpha1
kind: RotationPolicy
metadata: {{name: {name}, uid: {name}-uid, generation: 1}}
spec:
  nodePoolSelector: {{matchLabels: {{{GROUP_LABEL}: {group}}}}}
  ageThreshold: {age}
  maintenanceWindows: {windows}
  surge: {{readyTimeout: 15m, cooldownAfter: 10m, retryBackoff: 30m, failurePause: 1h}}
"#
    ))
}

/// The fleet's policies: Tokyo nights (closed now), 24/7 (open), and two that tie on
/// `contested`.
pub fn policies() -> anyhow::Result<Vec<RotationPolicy>> {
    let tokyo = r#"[{timezone: Asia/Tokyo, days: [Wed, Sat], start: "02:00", end: "06:00"}]"#;
    let always = r#"[{timezone: UTC, days: [Mon, Tue, Wed, Thu, Fri, Sat, Sun], start: "00:00", end: "00:00"}]"#;
    Ok(vec![
        policy("tokyo-nights", "tokyo-nights", "auto", tokyo)?,
        policy("always", "always", "24h", always)?,
        policy("contested-a", "contested", "24h", always)?,
        policy("contested-b", "contested", "24h", always)?,
    ])
}

pub fn pool_obj(name: &str, group: &str) -> anyhow::Result<NodePool> {
    yaml(&format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}, labels: {{{GROUP_LABEL}: {group}}}}}
spec:
  template:
    spec:
      expireAfter: 336h
      terminationGracePeriod: 1h
      requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}]
"#
    ))
}

/// Template claim and node (the shapes of `tests/support`), cloned per object.
pub struct Templates {
    claim: NodeClaim,
    node: Node,
    pod: Pod,
}

impl Templates {
    pub fn new() -> anyhow::Result<Templates> {
        let claim = yaml(
            r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: template
  labels: {karpenter.sh/nodepool: template}
  finalizers: [karpenter.sh/termination]
spec:
  expireAfter: 336h
  terminationGracePeriod: 1h
  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
  nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
status:
  {nodeName: template, providerID: 'kwok://template', allocatable: {cpu: "4", memory: 16Gi, pods: "110"}, conditions: [{type: Ready, status: "True"}]}
"#,
        )?;
        let node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "template", "labels": {
                "karpenter.sh/nodepool": "template", "kubernetes.io/hostname": "template",
                "topology.kubernetes.io/zone": "zone-a", "kubernetes.io/arch": "amd64",
                "karpenter.sh/capacity-type": "on-demand"}},
            "spec": {"providerID": "kwok://template"},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))?;
        let pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "template", "namespace": "apps",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]},
            "spec": {"nodeName": "template", "containers": [{"name": "app", "image": "app",
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]},
            "status": {"phase": "Running"}
        }))?;
        Ok(Templates { claim, node, pod })
    }

    pub fn claim(&self, name: &str, pool: &str, created: DateTime<Utc>, node: &str) -> NodeClaim {
        let mut c = self.claim.clone();
        c.metadata.name = Some(name.to_string());
        c.metadata.labels = Some(BTreeMap::from([(POOL_LABEL.to_string(), pool.to_string())]));
        c.metadata.creation_timestamp = Some(to_time(created));
        if let Some(s) = c.status.as_mut() {
            s.node_name = Some(node.to_string());
            s.provider_id = Some(format!("kwok://{node}"));
        }
        c
    }

    /// A workload pod (1 CPU, 2Gi) bound to `node`.
    pub fn pod(&self, name: &str, node: &str) -> Pod {
        let mut p = self.pod.clone();
        p.metadata.name = Some(name.to_string());
        if let Some(spec) = p.spec.as_mut() {
            spec.node_name = Some(node.to_string());
        }
        p
    }

    pub fn node(&self, name: &str, pool: &str) -> Node {
        let mut n = self.node.clone();
        n.metadata.name = Some(name.to_string());
        if let Some(labels) = n.metadata.labels.as_mut() {
            labels.insert(POOL_LABEL.to_string(), pool.to_string());
            labels.insert("kubernetes.io/hostname".to_string(), name.to_string());
        }
        if let Some(spec) = n.spec.as_mut() {
            spec.provider_id = Some(format!("kwok://{name}"));
        }
        n
    }
}

fn set_ann(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: Key,
    v: &str,
) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.full().to_string(), v.to_string());
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Builds the fleet in the store, connects the controller (a fresh list, like a starting
/// operator), and runs the start-up sweep. Rotations are not started yet: see [`Fleet::settle`].
pub fn build(pools: usize, claims_per_pool: usize) -> anyhow::Result<(Fleet, std::time::Duration)> {
    let clock = VirtualClock::new(t0());
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let now = clock.now();
    let world = MemoryCluster::new(shared.clone(), NS);
    for p in policies()? {
        world.apply_policy(p)?;
    }
    let tpl = Templates::new()?;
    let mut rng = Rng::new(8);
    let mut names = Vec::with_capacity(pools);
    for i in 0..pools {
        let kind = PoolKind::of(i);
        let name = format!("pool-{i:04}");
        let mut pool = pool_obj(&name, kind.group())?;
        match kind {
            PoolKind::Frozen => {
                set_ann(&mut pool.metadata, Key::Freeze, &rfc3339(now + Duration::days(1)))
            }
            PoolKind::Cooldown => set_ann(
                &mut pool.metadata,
                Key::LastRotationAt,
                &rfc3339(now - Duration::minutes(3)),
            ),
            PoolKind::FailurePause => set_ann(
                &mut pool.metadata,
                Key::LastFailureAt,
                &rfc3339(now - Duration::minutes(5)),
            ),
            _ => {}
        }
        world.apply_pool(pool)?;
        for j in 0..claims_per_pool {
            let claim = format!("{name}-c{j:03}");
            let node = format!("node-{claim}");
            // Ages up to 12 days (E = 14d); the no-candidate pools are all under a day old.
            let max_minutes = if kind == PoolKind::NoCandidate { 20 * 60 } else { 12 * 24 * 60 };
            let age = Duration::minutes(i64::try_from(rng.below(max_minutes)).unwrap_or(0) + 1);
            world.apply_node(tpl.node(&node, &name))?;
            world.apply_pod(tpl.pod(&format!("web-{claim}"), &node))?;
            let mut c = tpl.claim(&claim, &name, now - age, &node);
            if kind == PoolKind::FailurePause && j == 0 {
                set_ann(&mut c.metadata, Key::State, "failed");
                set_ann(&mut c.metadata, Key::FailedAt, &rfc3339(now - Duration::minutes(5)));
                set_ann(&mut c.metadata, Key::RetryCount, "1");
            }
            world.apply_claim(c)?;
        }
        names.push(name);
    }
    let client = world.connect_controller(CacheLag::None);
    let ctl = Controller::new(
        Arc::new(client.clone()),
        shared,
        Arc::new(Engine::embedded().clone()),
        ControllerConfig::default(),
    );
    let mut fleet =
        Fleet { clock, world, client, ctl, pools: names, claims: pools * claims_per_pool };
    let start = std::time::Instant::now();
    fleet.ctl.startup_sweep();
    Ok((fleet, start.elapsed()))
}

impl Fleet {
    /// One pass over every pool, as the tick does; the number of passes that failed.
    pub fn pass(&mut self) -> usize {
        let mut errors = 0;
        for pool in &self.pools {
            if self.ctl.reconcile_pool(pool).is_err() {
                errors += 1;
            }
        }
        errors
    }

    /// Brings the fleet to the steady state the bench measures: passes start the in-window
    /// rotations; Karpenter (played here) provisions a Ready surge node for the `Draining` pools'
    /// placeholders, the next passes delete their old claims, whose finalizer keeps them
    /// draining. Stops when a pass writes nothing. Returns (passes, writes).
    pub fn settle(&mut self) -> anyhow::Result<(usize, u64)> {
        let before = self.ctl.writes();
        for round in 1..=12 {
            let writes = self.ctl.writes();
            self.client.flush_cache();
            self.pass();
            self.client.flush_cache();
            self.provision_surges()?;
            if round > 1 && self.ctl.writes() == writes {
                return Ok((round, self.ctl.writes() - before));
            }
        }
        anyhow::bail!("the fleet did not settle in 12 passes")
    }

    fn provision_surges(&self) -> anyhow::Result<()> {
        let tpl = Templates::new()?;
        let now = self.clock.now();
        for (i, pool) in self.pools.iter().enumerate() {
            if PoolKind::of(i) != PoolKind::Draining {
                continue;
            }
            let Some(p) = self.world.pool(pool) else { continue };
            let Some(cand) = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(Key::ActiveRotation.full()))
                .cloned()
            else {
                continue;
            };
            let pod = placeholder_name(&cand);
            let Some(ph) = self.world.pod(NS, &pod) else { continue };
            if ph.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                continue;
            }
            let surge = format!("{pool}-surge");
            let node = format!("node-{surge}");
            self.world.apply_node(tpl.node(&node, pool))?;
            self.world.apply_claim(tpl.claim(&surge, pool, now, &node))?;
            self.world.update_pod(NS, &pod, |p| {
                p.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
                p.status.get_or_insert_with(Default::default).phase = Some("Running".into());
            });
        }
        Ok(())
    }

    /// Pools by the state their annotations show now: (kind, anchored, claim states).
    pub fn census(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        let cache = self.client.cache();
        for (i, pool) in self.pools.iter().enumerate() {
            let kind = PoolKind::of(i);
            let anchored = cache.pools.get(pool).and_then(|p| {
                p.metadata.annotations.as_ref()?.get(Key::ActiveRotation.full()).cloned()
            });
            let state = anchored
                .as_ref()
                .and_then(|c| cache.claims.get(c))
                .and_then(|c| c.metadata.annotations.as_ref()?.get(Key::State.full()).cloned());
            let label = match (&anchored, state) {
                (Some(_), Some(s)) => format!("{kind:?}: rotation {s}"),
                (Some(_), None) => format!("{kind:?}: anchored"),
                (None, _) => format!("{kind:?}: idle"),
            };
            *out.entry(label).or_insert(0) += 1;
        }
        out
    }
}
