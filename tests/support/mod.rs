//! A governed pool on the in-memory cluster, and the world's side of it (Karpenter, kubelet,
//! scheduler, operator) played by hand, for the reconciler's scenario tests.
//!
//! `NODEROTATION_RULES_DIR` makes the controller run a rules copy instead of the embedded rules
//! (`NODEROTATION_RULES_DIR=dir cargo test --test reconcile`, to try a rules change on every
//! scenario); the mutation run (`every_rule_guard_matters` in tests/reconcile/coverage.rs) swaps
//! its copies in-process with [`with_engine`].
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use noderotation::clock::{Clock, VirtualClock};
use noderotation::cluster::memory::{CacheLag, MemoryCluster};
use noderotation::cluster::{Cluster, ObjectKind, ObjectRef};
use noderotation::engine::{Engine, Key};
use noderotation::karpenter::{NodeClaim, NodePool};
use noderotation::placeholder::placeholder_name;
use noderotation::policy::crd::RotationPolicy;
use noderotation::reconcile::{Controller, ControllerConfig};

pub const POOL: &str = "pool-a";
pub const NS: &str = "noderotation-system";
pub const FINALIZER: &str = "karpenter.sh/termination";

pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 28, 3, 0, 0).single().expect("valid time")
}

thread_local! {
    /// A rules copy for this thread's fixtures (the in-process mutation run).
    static ENGINE: std::cell::RefCell<Option<Arc<Engine>>> = const { std::cell::RefCell::new(None) };
}

/// Rows fired by every controller any fixture of this process created.
static COVERAGE: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Runs `f` with fixtures using `engine` instead of the embedded rules.
pub fn with_engine<R>(engine: Arc<Engine>, f: impl FnOnce() -> R) -> R {
    ENGINE.with(|e| *e.borrow_mut() = Some(engine));
    let out = f();
    ENGINE.with(|e| *e.borrow_mut() = None);
    out
}

pub fn coverage() -> std::collections::BTreeSet<String> {
    COVERAGE.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn record(ctl: &Controller) {
    COVERAGE.lock().unwrap_or_else(|e| e.into_inner()).extend(ctl.coverage().iter().cloned());
}

pub fn engine() -> Arc<Engine> {
    if let Some(e) = ENGINE.with(|e| e.borrow().clone()) {
        return e;
    }
    match std::env::var_os("NODEROTATION_RULES_DIR") {
        Some(dir) => Arc::new(
            Engine::load_dir(std::path::Path::new(&dir))
                .unwrap_or_else(|e| panic!("rules copy: {e}")),
        ),
        None => Arc::new(Engine::embedded().clone()),
    }
}

/// A policy governing `team: a`; `windows` is YAML for `maintenanceWindows` (default: 24/7 UTC).
pub fn policy_yaml(extra_surge: &str, windows: Option<&str>) -> RotationPolicy {
    let windows = windows.unwrap_or(
        r#"[{timezone: UTC, days: [Mon, Tue, Wed, Thu, Fri, Sat, Sun], start: "00:00", end: "00:00"}]"#,
    );
    let yaml = format!(
        r#"
apiVersion: noderotation.io/v1alpha1
kind: RotationPolicy
metadata: {{name: rotate-a, uid: policy-uid, generation: 1}}
spec:
  nodePoolSelector: {{matchLabels: {{team: a}}}}
  ageThreshold: 24h
  maintenanceWindows: {windows}
  surge: {{readyTimeout: 15m, cooldownAfter: 10m, retryBackoff: 30m{extra_surge}}}
"#
    );
    serde_norway::from_str(&yaml).unwrap_or_else(|e| panic!("policy yaml: {e}\n{yaml}"))
}

pub fn pool_yaml(extra_spec: &str) -> NodePool {
    let yaml = format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {POOL}, labels: {{team: a}}}}
spec:
  template:
    spec:
      expireAfter: 336h
      terminationGracePeriod: 1h
      requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}]
{extra_spec}
"#
    );
    serde_norway::from_str(&yaml).unwrap_or_else(|e| panic!("pool yaml: {e}\n{yaml}"))
}

pub fn claim_obj(name: &str, created: DateTime<Utc>, node: Option<&str>) -> NodeClaim {
    let node_line =
        node.map(|n| format!("nodeName: {n}, providerID: 'kwok://{n}', ")).unwrap_or_default();
    let yaml = format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}
  labels: {{karpenter.sh/nodepool: {POOL}}}
  finalizers: [{FINALIZER}]
  creationTimestamp: "{}"
spec:
  expireAfter: 336h
  terminationGracePeriod: 1h
  requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}]
  nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
status:
  {{{node_line}allocatable: {{cpu: "4", memory: 16Gi, pods: "110"}}, conditions: [{{type: Ready, status: "True"}}]}}
"#,
        created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    serde_norway::from_str(&yaml).unwrap_or_else(|e| panic!("claim yaml: {e}\n{yaml}"))
}

pub fn node_obj(name: &str, ready: bool) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {
            "karpenter.sh/nodepool": POOL, "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": "zone-a", "kubernetes.io/arch": "amd64",
            "karpenter.sh/capacity-type": "on-demand"}},
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    }))
    .unwrap_or_else(|e| panic!("node json: {e}"))
}

pub fn workload_pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "apps",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app",
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap_or_else(|e| panic!("pod json: {e}"))
}

/// The fixture: world, the controller's client, the controller.
pub struct Fx {
    pub clock: VirtualClock,
    pub world: MemoryCluster,
    pub client: MemoryCluster,
    pub ctl: Controller,
}

impl Fx {
    /// Pool `pool-a` governed 24/7 by `rotate-a` (ageThreshold 24h, readyTimeout 15m).
    pub fn new() -> Fx {
        Fx::with(policy_yaml("", None), pool_yaml(""))
    }

    pub fn with(policy: RotationPolicy, pool: NodePool) -> Fx {
        let clock = VirtualClock::new(t0());
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let world = MemoryCluster::new(shared.clone(), NS);
        world.apply_pool(pool).expect("pool");
        world.apply_policy(policy).expect("policy");
        let client = world.connect_controller(CacheLag::None);
        let ctl = Controller::new(
            Arc::new(client.clone()),
            shared,
            engine(),
            ControllerConfig::default(),
        );
        Fx { clock, world, client, ctl }
    }

    /// A Ready claim `name` on node `node-<name>`, created `age` ago, with one workload pod.
    pub fn claim(&self, name: &str, age: Duration) -> &Self {
        let node = format!("node-{name}");
        self.world.apply_node(node_obj(&node, true)).expect("node");
        self.world
            .apply_claim(claim_obj(name, self.clock.now() - age, Some(&node)))
            .expect("claim");
        self.world.apply_pod(workload_pod(&format!("web-{name}"), &node)).expect("pod");
        self
    }

    /// Restarts the controller process: a fresh `Controller` (in-memory state lost).
    pub fn restart(&mut self) {
        record(&self.ctl);
        let shared: Arc<dyn Clock> = Arc::new(self.clock.clone());
        self.ctl = Controller::new(
            Arc::new(self.client.clone()),
            shared,
            engine(),
            ControllerConfig::default(),
        );
    }

    /// One pass over the pool with an up-to-date cache.
    pub fn pass(&mut self) -> Duration {
        self.client.flush_cache();
        self.ctl.reconcile_pool(POOL).unwrap_or_else(|e| panic!("pass failed: {e}"))
    }

    /// The periodic tick (policy status, and whatever else the controller does between passes),
    /// with an up-to-date cache.
    pub fn tick(&mut self) -> noderotation::reconcile::SweepReport {
        self.client.flush_cache();
        self.ctl.tick()
    }

    /// One pass reading whatever the (possibly lagging) cache holds.
    pub fn stale_pass(&mut self) -> Duration {
        self.ctl.reconcile_pool(POOL).unwrap_or_else(|e| panic!("pass failed: {e}"))
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    pub fn pool_ann(&self, key: Key) -> Option<String> {
        self.world.pool(POOL)?.metadata.annotations.as_ref()?.get(key.full()).cloned()
    }

    pub fn claim_ann(&self, claim: &str, key: Key) -> Option<String> {
        self.world.claim(claim)?.metadata.annotations.as_ref()?.get(key.full()).cloned()
    }

    pub fn node_ann(&self, node: &str, key: Key) -> Option<String> {
        self.world.node(node)?.metadata.annotations.as_ref()?.get(key.full()).cloned()
    }

    pub fn cordoned(&self, node: &str) -> bool {
        self.world.node(node).and_then(|n| n.spec.as_ref()?.unschedulable).unwrap_or(false)
    }

    pub fn placeholder(&self, claim: &str) -> Option<Arc<Pod>> {
        self.world.pod(NS, &placeholder_name(claim))
    }

    /// Karpenter + kubelet: a new claim and Ready node for the placeholder, which binds and runs.
    pub fn provision_surge(&self, for_claim: &str, surge: &str) {
        let node = format!("node-{surge}");
        self.world.apply_node(node_obj(&node, true)).expect("surge node");
        self.world
            .apply_claim(claim_obj(surge, self.clock.now(), Some(&node)))
            .expect("surge claim");
        let name = placeholder_name(for_claim);
        self.world
            .update_pod(NS, &name, |p| {
                p.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
                p.status.get_or_insert_with(Default::default).phase = Some("Running".into());
            })
            .expect("placeholder exists");
    }

    /// Karpenter's provisioner launched `surge` for the claim's placeholder (or counted the
    /// placeholder against it while in flight): the `Nominated` Event it records on the pod,
    /// `Pod should schedule on: nodeclaim/<surge>`.
    pub fn nominate(&self, for_claim: &str, surge: &str) {
        let name = placeholder_name(for_claim);
        let pod = self.world.pod(NS, &name).expect("placeholder exists");
        let seq = self.world.events_in(NS).len();
        let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{name}.{seq:016x}"), "namespace": NS},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": NS, "name": name,
                "uid": pod.metadata.uid},
            "reason": "Nominated",
            "message": format!("Pod should schedule on: nodeclaim/{surge}"),
            "type": "Normal",
            "source": {"component": "karpenter"}
        }))
        .unwrap_or_else(|e| panic!("event json: {e}"));
        self.world.apply_event(event).expect("event");
    }

    /// Karpenter launched `name` now; its node `node-<name>` registered and never turns Ready.
    pub fn never_ready_surge(&self, name: &str) {
        let node = format!("node-{name}");
        self.world.apply_node(node_obj(&node, false)).expect("node");
        let mut claim = claim_obj(name, self.clock.now(), Some(&node));
        if let Some(st) = claim.status.as_mut() {
            st.conditions = serde_json::from_value(serde_json::json!([
                {"type": "Launched", "status": "True"},
                {"type": "Registered", "status": "True"},
                {"type": "Ready", "status": "False"}]))
            .expect("conditions");
        }
        self.world.apply_claim(claim).expect("claim");
    }

    /// Karpenter's `Initialized` condition on the claim: its node turned Ready once.
    pub fn initialized(&self, claim: &str) {
        self.world
            .update_claim(claim, |c| {
                let cond = serde_json::from_value(serde_json::json!(
                    {"type": "Initialized", "status": "True"}))
                .expect("condition");
                c.status.get_or_insert_with(Default::default).conditions.push(cond);
            })
            .expect("claim");
    }

    /// Karpenter finishes the drain of a deleting claim: node and claim go.
    pub fn finalize(&self, claim: &str) {
        let node = self.world.claim(claim).and_then(|c| c.status.as_ref()?.node_name.clone());
        if let Some(node) = node {
            self.world.delete_now(&ObjectRef::cluster(ObjectKind::Node, node));
        }
        self.world.remove_finalizer(&ObjectRef::cluster(ObjectKind::NodeClaim, claim), FINALIZER);
    }

    /// Karpenter's forced expiry (or any delete by someone else).
    pub fn delete_claim(&self, claim: &str) {
        self.world.delete_object(&ObjectRef::cluster(ObjectKind::NodeClaim, claim));
    }

    pub fn deleting(&self, claim: &str) -> bool {
        self.world.claim(claim).is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    }

    /// How many times `what` (`emit:success`, `event:RotationFailed`, ...) was announced.
    pub fn announced(&self, what: &str) -> usize {
        self.ctl.announcements().iter().filter(|a| a.what == what).count()
    }

    /// Events recorded in the cluster with this reason.
    pub fn events(&self, reason: &str) -> usize {
        self.world.events().iter().filter(|e| e.reason == reason).count()
    }

    pub fn event_messages(&self, reason: &str) -> Vec<String> {
        self.world
            .events()
            .iter()
            .filter(|e| e.reason == reason)
            .map(|e| e.message.clone())
            .collect()
    }

    pub fn set_pool(&self, f: impl FnOnce(&mut NodePool)) {
        self.world.update_pool(POOL, f).expect("pool exists");
    }

    pub fn set_pool_ann(&self, key: Key, value: Option<&str>) {
        self.set_pool(|p| {
            let ann = p.metadata.annotations.get_or_insert_with(BTreeMap::new);
            match value {
                Some(v) => ann.insert(key.full().to_string(), v.to_string()),
                None => ann.remove(key.full()),
            };
        });
    }

    pub fn set_claim_ann(&self, claim: &str, key: Key, value: Option<&str>) {
        self.world
            .update_claim(claim, |c| {
                let ann = c.metadata.annotations.get_or_insert_with(BTreeMap::new);
                match value {
                    Some(v) => ann.insert(key.full().to_string(), v.to_string()),
                    None => ann.remove(key.full()),
                };
            })
            .expect("claim exists");
    }

    pub fn set_node_ann(&self, node: &str, key: Key, value: Option<&str>) {
        self.world
            .update_node(node, |n| {
                let ann = n.metadata.annotations.get_or_insert_with(BTreeMap::new);
                match value {
                    Some(v) => ann.insert(key.full().to_string(), v.to_string()),
                    None => ann.remove(key.full()),
                };
            })
            .expect("node exists");
    }

    pub fn cache(&self) -> Arc<noderotation::cluster::CacheView> {
        self.client.cache()
    }
}

/// An edited cached object is an older version of it, as a lagging reflector shows one: one
/// the edit changed but left at the live resourceVersion gets another (content and version go
/// together in the API server; the controller trusts a copy at a version it read fresh).
fn lagging_versions(
    live: &noderotation::cluster::CacheView,
    edited: &mut noderotation::cluster::CacheView,
) {
    fn older<K: Ord, T: Clone + kube::Resource>(
        live: &std::collections::BTreeMap<K, Arc<T>>,
        edited: &mut std::collections::BTreeMap<K, Arc<T>>,
    ) {
        for (k, obj) in edited.iter_mut() {
            let Some(was) = live.get(k) else { continue };
            let rv = &was.meta().resource_version;
            if !Arc::ptr_eq(was, obj) && rv.is_some() && obj.meta().resource_version == *rv {
                let mut copy = (**obj).clone();
                copy.meta_mut().resource_version = rv.as_ref().map(|v| format!("{v}-lagging"));
                *obj = Arc::new(copy);
            }
        }
    }
    older(&live.pools, &mut edited.pools);
    older(&live.claims, &mut edited.claims);
    older(&live.nodes, &mut edited.nodes);
}

/// The real in-memory cluster with three test hooks: every call is logged, a world action
/// can run just before the first write that matches a predicate (something happening between
/// two writes of one pass), and the cached view can be edited (a reflector lagging on some
/// objects and not on others).
pub struct Intercept {
    pub inner: MemoryCluster,
    pub log: std::sync::Mutex<Vec<String>>,
    #[allow(clippy::type_complexity)]
    pub before:
        std::sync::Mutex<Option<(Box<dyn Fn(&str) -> bool + Send>, Box<dyn FnOnce() + Send>)>>,
    #[allow(clippy::type_complexity)]
    pub stale: std::sync::Mutex<Option<Box<dyn Fn(&mut noderotation::cluster::CacheView) + Send>>>,
}

impl Intercept {
    pub fn new(inner: MemoryCluster) -> Arc<Intercept> {
        Arc::new(Intercept {
            inner,
            log: Default::default(),
            before: Default::default(),
            stale: Default::default(),
        })
    }

    /// From now on the controller's cache is the real one edited by `edit` (until
    /// [`Intercept::fresh_cache`]).
    pub fn stale_cache(
        &self,
        edit: impl Fn(&mut noderotation::cluster::CacheView) + Send + 'static,
    ) {
        *self.stale.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(edit));
    }

    pub fn fresh_cache(&self) {
        *self.stale.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Runs `action` right before the first write whose description satisfies `when`.
    pub fn before_write(
        &self,
        when: impl Fn(&str) -> bool + Send + 'static,
        action: impl FnOnce() + Send + 'static,
    ) {
        *self.before.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Box::new(when), Box::new(action)));
    }

    fn write(&self, what: String) {
        let hook = {
            let mut guard = self.before.lock().unwrap_or_else(|e| e.into_inner());
            match guard.as_ref() {
                Some((when, _)) if when(&what) => guard.take(),
                _ => None,
            }
        };
        if let Some((_, action)) = hook {
            action();
        }
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(what);
    }

    pub fn writes(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Where the first write whose description contains `needle` stands in [`Self::writes`].
    pub fn position(&self, needle: &str) -> usize {
        let writes = self.writes();
        writes
            .iter()
            .position(|w| w.contains(needle))
            .unwrap_or_else(|| panic!("no {needle} in {writes:#?}"))
    }
}

impl Cluster for Intercept {
    fn cache(&self) -> Arc<noderotation::cluster::CacheView> {
        let view = self.inner.cache();
        match self.stale.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(edit) => {
                let mut edited = (*view).clone();
                edit(&mut edited);
                lagging_versions(&view, &mut edited);
                Arc::new(edited)
            }
            None => view,
        }
    }
    fn get_pool(&self, name: &str) -> Result<Option<NodePool>, noderotation::cluster::ApiError> {
        self.inner.get_pool(name)
    }
    fn get_claim(&self, name: &str) -> Result<Option<NodeClaim>, noderotation::cluster::ApiError> {
        self.inner.get_claim(name)
    }
    fn get_node(&self, name: &str) -> Result<Option<Node>, noderotation::cluster::ApiError> {
        self.inner.get_node(name)
    }
    fn node_with_provider_id(
        &self,
        pool: &str,
        provider_id: &str,
    ) -> Result<Option<Node>, noderotation::cluster::ApiError> {
        self.inner.node_with_provider_id(pool, provider_id)
    }
    fn get_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Pod>, noderotation::cluster::ApiError> {
        self.inner.get_pod(namespace, name)
    }
    fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, noderotation::cluster::ApiError> {
        self.inner.pods_on_node(node)
    }
    fn nominations(
        &self,
        pod_uid: &str,
    ) -> Result<Vec<k8s_openapi::api::core::v1::Event>, noderotation::cluster::ApiError> {
        self.inner.nominations(pod_uid)
    }
    fn patch(
        &self,
        target: &ObjectRef,
        patch: &noderotation::cluster::Patch,
        rv: Option<&str>,
    ) -> Result<Option<String>, noderotation::cluster::ApiError> {
        let mut keys: Vec<String> = patch.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        keys.extend(patch.remove.iter().map(|k| format!("-{k}")));
        if let Some(u) = patch.unschedulable {
            keys.push(format!("unschedulable={u}"));
        }
        self.write(format!("patch {target} {}", keys.join(" ")));
        self.inner.patch(target, patch, rv)
    }
    fn delete(
        &self,
        target: &ObjectRef,
        uid: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<(), noderotation::cluster::ApiError> {
        self.write(format!("delete {target}"));
        self.inner.delete(target, uid, resource_version)
    }
    fn create_pod(&self, pod: &Pod) -> Result<Pod, noderotation::cluster::ApiError> {
        self.write(format!("create Pod {}", pod.metadata.name.clone().unwrap_or_default()));
        self.inner.create_pod(pod)
    }
    fn update_policy_status(
        &self,
        name: &str,
        status: &noderotation::policy::crd::RotationPolicyStatus,
        rv: Option<&str>,
    ) -> Result<(), noderotation::cluster::ApiError> {
        self.inner.update_policy_status(name, status, rv)
    }
    fn record_event(
        &self,
        event: &noderotation::cluster::EventRecord,
    ) -> Result<(), noderotation::cluster::ApiError> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(format!("event {}", event.reason));
        self.inner.record_event(event)
    }
}

impl Fx {
    /// Puts an [`Intercept`] between the controller and its client.
    pub fn intercept(&mut self) -> Arc<Intercept> {
        record(&self.ctl);
        let hook = Intercept::new(self.client.clone());
        let shared: Arc<dyn Clock> = Arc::new(self.clock.clone());
        self.ctl = Controller::new(hook.clone(), shared, engine(), ControllerConfig::default());
        hook
    }
}

impl Drop for Fx {
    fn drop(&mut self) {
        record(&self.ctl);
    }
}
