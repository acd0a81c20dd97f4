//! Karpenter: the termination controller (taint, drain under the PDB or at once, finalize),
//! forced expiry, emptiness consolidation, and the provisioner (claims for unschedulable pods,
//! within `spec.limits`, with its `Nominated` Events).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::{Pod, Taint};
use kube::ResourceExt;

use super::{DO_NOT_DISRUPT, SURGE_FOR, affinity_admits, annotation, claim_ref, placeholder_node};
use crate::cluster::{ObjectKind, ObjectRef};
use crate::karpenter::NODEPOOL_LABEL;
use crate::policy::duration::format_human;
use crate::policy::resolve::to_time;
use crate::sim::scenario::Resources;
use crate::sim::world::{
    self, ARCH_LABEL, BUFFER, CAPACITY_TYPE_LABEL, DISRUPTED_TAINT, Ev, PodKey,
    TERMINATION_FINALIZER, TERMINATION_TIMESTAMP, World, ZONE_LABEL, fits, pod_requests, sub,
};
use crate::sim::world_faults::{WorldFault, key};

impl World {
    // -- Karpenter -----------------------------------------------------------------------------

    /// A deletion by the world (Karpenter, operator): the API server sets the deletionTimestamp
    /// and the termination controller picks it up.
    pub(crate) fn delete_claim(&mut self, name: &str) {
        if self.cluster.delete_object(&claim_ref(name)) {
            let now = self.now();
            self.at(now, Ev::Terminate(name.to_string()));
        }
    }

    pub(super) fn force_expire(&mut self, name: &str, why: &str) {
        let now = self.now();
        let Some(c) = self.claims.get_mut(name) else { return };
        if c.deleting.is_some() {
            return; // already terminating: the tGP countdown runs
        }
        let due = c.deadline.is_none_or(|d| d <= now);
        if !due && why.starts_with("forced expiry (") {
            return;
        }
        c.expired = true;
        let pool = c.pool;
        self.metrics.forced_expiries.push((now, pool, name.to_string()));
        if let Some(l) = self.metrics.lifetimes.get_mut(name) {
            l.expired_at = Some(now);
        }
        self.note(format!("{name}: {why}"));
        self.delete_claim(name);
    }

    /// The termination controller starts on a claim with a deletionTimestamp.
    pub(crate) fn begin_termination(&mut self, name: &str, immediate: bool) {
        let now = self.now();
        let plan = Arc::clone(&self.plan);
        let Some(c) = self.claims.get_mut(name) else { return };
        if c.deleting.is_some() {
            return;
        }
        c.deleting = Some(now);
        self.surge_launched.remove(name);
        let Some(c) = self.claims.get_mut(name) else { return };
        let pool = c.pool;
        let registered = c.phase >= world::Phase::Registered;
        let node = c.node.clone();
        let had_nominations = !std::mem::take(&mut c.nominated).is_empty();
        let p = &plan.pools[pool];
        if had_nominations || p.replicas.is_some() {
            self.request_provisioning(pool);
        }
        if !registered {
            self.finalize(name);
            return;
        }
        let tgp = self.claims.get(name).and_then(|c| c.tgp);
        self.cluster.update_node(&node, |n| {
            let taints = n.spec.get_or_insert_default().taints.get_or_insert_default();
            if !taints.iter().any(|t| t.key == DISRUPTED_TAINT) {
                taints.push(Taint {
                    key: DISRUPTED_TAINT.into(),
                    effect: "NoSchedule".into(),
                    value: None,
                    time_added: None,
                });
            }
        });
        if let Some(n) = self.nodes.get_mut(&node) {
            n.disrupted = true;
        }
        if let Some(tgp) = tgp {
            let at = (now + tgp).to_rfc3339_opts(SecondsFormat::Secs, true);
            self.cluster.update_claim(name, |cl| {
                cl.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert(TERMINATION_TIMESTAMP.into(), at);
            });
        }
        if p.pdb_max_unavailable.is_some() && !immediate {
            self.begin_paced_drain(name, pool, &node, tgp);
            return;
        }
        let evicted = self.evict_node(&node);
        let mut d = self.draw(plan.drain);
        if let Some(tgp) = tgp {
            d = d.min(tgp);
        }
        if let Some(stuck) = self.draw_stuck(name, tgp, !immediate) {
            d = stuck;
        }
        if immediate {
            d = Duration::zero();
        }
        self.note(format!(
            "{name}: draining {node}: evicted {evicted} pods, done in {}",
            format_human(d)
        ));
        self.at(now + d, Ev::DrainDone(name.to_string()));
        self.request_scheduling();
    }

    /// A drain under the workload's PDB: placeholders go at once, workload pods as the budget
    /// allows ([`World::drain_step`]); the node goes `delays.drain` after its last workload pod,
    /// or at `terminationGracePeriod` with whatever is left (or when a stuck drain ends).
    fn begin_paced_drain(&mut self, name: &str, pool: usize, node: &str, tgp: Option<Duration>) {
        let now = self.now();
        let stuck_for = self.draw_stuck(name, tgp, true);
        let stuck = stuck_for.is_some();
        let cutoff = stuck_for.or(tgp);
        if let Some(c) = self.claims.get_mut(name) {
            c.paced = Some(world::PacedDrain { stuck, ending: false });
        }
        if let Some(d) = cutoff {
            self.at(now + d, Ev::DrainDone(name.to_string()));
        }
        let placeholders = self.evict_placeholders(node);
        let before = self.workload_on(node).len();
        self.drain_step(pool);
        let left = self.workload_on(node).len();
        self.note(format!(
            "{name}: draining {node} under its PDB: evicted {} pods and {placeholders} placeholders, {left} wait for the budget",
            before - left
        ));
        // Karpenter schedules the pods of a node being deleted at once (on room elsewhere, or on
        // new claims), not only once they are evicted.
        if left > 0 {
            self.request_provisioning(pool);
        }
        self.request_scheduling();
    }

    /// Whether this drain hangs past tGP + buffer (a volume that does not detach), and for how
    /// long; `record` keeps its end for the invariants.
    fn draw_stuck(&mut self, name: &str, tgp: Option<Duration>, record: bool) -> Option<Duration> {
        let stuck_p = self.plan.failures.stuck_drain;
        let failed = self.rng.chance(stuck_p);
        let k = key(name, None);
        let faulted = self.fault(WorldFault::StuckDrain, k, 1.0);
        if !failed && !faulted {
            return None;
        }
        let (lo, hi) = (Duration::minutes(1), Duration::minutes(20));
        let extra = if failed {
            self.draw((lo, hi))
        } else {
            // An injected hang's length comes from its own stream, as its draw did.
            let span = u64::try_from((hi - lo).num_milliseconds()).unwrap_or(0);
            let ms =
                self.faults.as_ref().map_or(0, |f| f.below(WorldFault::StuckDrain, k, span + 1));
            lo + Duration::milliseconds(i64::try_from(ms).unwrap_or(0))
        };
        let d = tgp.unwrap_or(Duration::hours(1)) + BUFFER + extra;
        self.note(format!("{name}: drain stuck (volume detach) for {}", format_human(d)));
        if record {
            let now = self.now();
            self.stuck_drains.insert(name.to_string(), now + d);
        }
        Some(d)
    }

    /// The node runs in a zone `pool`'s workload pods admit (`workload.zones`; empty: any).
    pub(super) fn in_workload_zone(&self, pool: usize, node: &str) -> bool {
        let zones = &self.plan.pools[pool].workload_zones;
        zones.is_empty() || self.nodes.get(node).is_some_and(|n| zones.contains(&n.zone))
    }

    /// The workload pods bound to `node`.
    fn workload_on(&self, node: &str) -> Vec<PodKey> {
        self.node_pods
            .get(node)
            .into_iter()
            .flatten()
            .filter(|k| self.pods.get(*k).is_some_and(|p| !p.daemonset))
            .cloned()
            .collect()
    }

    /// Karpenter's eviction queue on the paced drains of `pool`: evicts, oldest drain first,
    /// as many workload pods as the PDB allows (`maxUnavailable` minus the workload's pods not
    /// running), and schedules the end of each drain whose node has no workload left. Returns
    /// the pods evicted.
    pub(crate) fn drain_step(&mut self, pool: usize) -> usize {
        let Some(max) = self.plan.pools[pool].pdb_max_unavailable else { return 0 };
        let mut draining: Vec<(DateTime<Utc>, String)> = self
            .claims
            .iter()
            .filter(|(_, c)| c.pool == pool && c.paced.is_some_and(|d| !d.ending))
            .filter_map(|(n, c)| Some((c.deleting?, n.clone())))
            .collect();
        if draining.is_empty() {
            return 0;
        }
        draining.sort();
        let unavailable = self
            .pending
            .iter()
            .filter(|k| self.pods.get(*k).is_some_and(|p| p.pool == pool && !p.daemonset))
            .count();
        let mut allowed = usize::try_from(max).unwrap_or(0).saturating_sub(unavailable);
        let mut evicted = 0;
        for (_, name) in draining {
            let Some(node) = self.claims.get(&name).map(|c| c.node.clone()) else { continue };
            let pods = self.workload_on(&node);
            let take = pods.len().min(allowed);
            for key in &pods[..take] {
                self.remove_pod(key);
                self.create_workload_pod(pool);
                self.metrics.evictions += 1;
            }
            allowed -= take;
            evicted += take;
            if take == pods.len() {
                let Some(c) = self.claims.get_mut(&name) else { continue };
                let Some(paced) = c.paced.as_mut() else { continue };
                paced.ending = true;
                if !paced.stuck {
                    let d = self.draw(self.plan.drain);
                    self.at(self.now() + d, Ev::DrainDone(name.clone()));
                }
            }
        }
        if evicted > 0 {
            self.request_scheduling();
        }
        evicted
    }

    /// Evicts the workload (recreated Pending by its ReplicaSet) and placeholders of a node.
    fn evict_node(&mut self, node: &str) -> usize {
        let keys: Vec<PodKey> = self.node_pods.get(node).into_iter().flatten().cloned().collect();
        let mut n = 0;
        for key in keys {
            let Some(p) = self.pods.get(&key) else { continue };
            if p.daemonset {
                continue;
            }
            let pool = p.pool;
            self.remove_pod(&key);
            self.create_workload_pod(pool);
            self.metrics.evictions += 1;
            n += 1;
        }
        n + self.evict_placeholders(node)
    }

    /// Evicts the placeholders bound to `node` (no PDB covers them).
    fn evict_placeholders(&mut self, node: &str) -> usize {
        let mut n = 0;
        let placeholders: Vec<String> = self
            .snap
            .placeholders
            .iter()
            .filter(|(_, p)| placeholder_node(p) == Some(node))
            .map(|(name, _)| name.clone())
            .collect();
        for name in placeholders {
            let ns = world::CONTROLLER_NS;
            if self.cluster.delete_object(&ObjectRef::pod(ns, &name)) {
                self.note(format!("evicted placeholder {name} from {node}"));
                n += 1;
            }
        }
        n
    }

    /// Drain done (or nothing to drain): the Node goes, the finalizer comes off, the claim is
    /// gone.
    pub(crate) fn finalize(&mut self, name: &str) {
        let now = self.now();
        let Some(c) = self.claims.get(name) else { return };
        let pool = c.pool;
        let launched = c.phase >= world::Phase::Launched;
        let registered = c.phase >= world::Phase::Registered;
        let node = c.node.clone();
        if registered {
            let keys: Vec<PodKey> =
                self.node_pods.get(&node).into_iter().flatten().cloned().collect();
            for key in keys {
                let workload = self.pods.get(&key).is_some_and(|p| !p.daemonset);
                self.remove_pod(&key);
                if workload {
                    self.create_workload_pod(pool);
                    self.metrics.evictions += 1;
                }
            }
            let placeholders: Vec<String> = self
                .snap
                .placeholders
                .iter()
                .filter(|(_, p)| placeholder_node(p) == Some(node.as_str()))
                .map(|(n, _)| n.clone())
                .collect();
            for ph in placeholders {
                self.cluster.delete_now(&ObjectRef::pod(world::CONTROLLER_NS, &ph));
            }
            self.cluster.delete_now(&ObjectRef::cluster(ObjectKind::Node, &node));
            self.nodes.remove(&node);
        }
        // A claim deleted before anything else touched it still needs its deletionTimestamp.
        self.cluster.delete_object(&claim_ref(name));
        self.cluster.remove_finalizer(&claim_ref(name), TERMINATION_FINALIZER);
        self.close_lifetime(name, now);
        self.claims.remove(name);
        self.surge_launched.remove(name);
        if launched {
            self.bill(pool, -1);
        }
        self.update_pool_status(pool);
        // Capacity went away, and with it room under spec.limits: pending pods (and pending
        // placeholders) may get a claim now.
        if self.pending.iter().any(|k| self.pods.get(k).is_some_and(|p| p.pool == pool)) {
            self.request_scheduling();
        }
        self.request_provisioning(pool);
    }

    /// Emptiness consolidation: a Ready node running only DaemonSet pods, without
    /// `karpenter.sh/do-not-disrupt: "true"`, is deleted (a voluntary disruption, so the
    /// annotation blocks it).
    pub(super) fn consolidate_if_empty(&mut self, node: &str) {
        let Some(n) = self.nodes.get(node) else { return };
        if !n.ready || n.disrupted {
            return;
        }
        let claim = n.claim.clone();
        let busy = self
            .node_pods
            .get(node)
            .into_iter()
            .flatten()
            .any(|k| self.pods.get(k).is_some_and(|p| !p.daemonset));
        let placeholder =
            self.snap.placeholders.values().any(|p| placeholder_node(p) == Some(node));
        let protected = self
            .snap
            .nodes
            .get(node)
            .is_some_and(|x| annotation(&x.metadata, DO_NOT_DISRUPT) == Some("true"));
        let deleting = self.claims.get(&claim).is_none_or(|c| c.deleting.is_some());
        if busy || placeholder || deleting {
            return;
        }
        if protected {
            self.note(format!("{node} is empty but do-not-disrupt: not consolidated"));
            self.watch_empty(node);
            return;
        }
        self.note(format!("{claim}: node {node} empty: consolidated"));
        self.delete_claim(&claim);
    }

    fn in_shortage(&self, pool: usize, zone: &str, now: DateTime<Utc>) -> bool {
        let name = self.pool_name(pool);
        self.plan.shortages.iter().any(|s| s.covers(name, zone, now))
    }

    /// Zones of the pool a pending pod could land in.
    fn admissible_zones(&self, pool: usize, pod: Option<&Pod>) -> Vec<String> {
        let p = &self.plan.pools[pool];
        p.zones
            .iter()
            .filter(|z| match pod {
                None => true,
                Some(pod) => {
                    let labels = BTreeMap::from([
                        (NODEPOOL_LABEL.to_string(), p.name.clone()),
                        (ZONE_LABEL.to_string(), (*z).clone()),
                        (ARCH_LABEL.to_string(), "amd64".to_string()),
                        (CAPACITY_TYPE_LABEL.to_string(), "on-demand".to_string()),
                    ]);
                    affinity_admits(pod, &labels)
                }
            })
            .cloned()
            .collect()
    }

    pub(super) fn placeholder_requests(&mut self, pod: &Pod) -> Arc<Resources> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(r) = self.placeholder_requests.get(&uid) {
            return Arc::clone(r);
        }
        let r = Arc::new(pod_requests(pod));
        if self.placeholder_requests.len() > 256 {
            self.placeholder_requests.clear();
        }
        self.placeholder_requests.insert(uid, Arc::clone(&r));
        r
    }

    /// Karpenter's provisioner for one pool: new claims for its unschedulable pods.
    pub(super) fn provision(&mut self, pool: usize) {
        if self.deleted_pools.contains(&pool) {
            return;
        }
        let now = self.now();
        let plan = Arc::clone(&self.plan);
        let p = &plan.pools[pool];
        let live: Vec<String> = self
            .claims
            .iter()
            .filter(|(_, c)| c.pool == pool && c.deleting.is_none())
            .map(|(n, _)| n.clone())
            .collect();
        // A nomination holds while the claim is in flight; a pod still pending once its claim's
        // node is Ready (another pod took the room) is provisioned for again.
        let nominated: BTreeSet<PodKey> = live
            .iter()
            .filter_map(|n| self.claims.get(n))
            .filter(|c| c.phase < world::Phase::Ready)
            .flat_map(|c| c.nominated.iter().cloned())
            .collect();
        // (pod, requests, admissible zones)
        let mut want: Vec<(PodKey, Arc<Resources>, Vec<String>)> = Vec::new();
        let placeholders: Vec<Arc<Pod>> = self.snap.placeholders.values().cloned().collect();
        for ph in placeholders {
            let key = (world::CONTROLLER_NS.to_string(), ph.name_any());
            let unschedulable = ph
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "PodScheduled" && c.status == "False");
            let for_pool = ph
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|s| s.get(NODEPOOL_LABEL))
                .is_some_and(|n| *n == p.name);
            if for_pool
                && unschedulable
                && placeholder_node(&ph).is_none()
                && ph.metadata.deletion_timestamp.is_none()
                && !nominated.contains(&key)
            {
                let zones = self.admissible_zones(pool, Some(&ph));
                let req = self.placeholder_requests(&ph);
                want.push((key, req, zones));
            }
        }
        // The workload's pods: the zones their affinity admits.
        let zones_all: Vec<String> = self
            .admissible_zones(pool, None)
            .into_iter()
            .filter(|z| p.workload_zones.is_empty() || p.workload_zones.contains(z))
            .collect();
        for key in &self.pending {
            let Some(pod) = self.pods.get(key) else { continue };
            if pod.pool == pool && pod.marked_unschedulable && !nominated.contains(key) {
                want.push((key.clone(), Arc::clone(&pod.requests), zones_all.clone()));
            }
        }
        let mut node_free = p.allocatable.clone();
        sub(&mut node_free, &p.daemonset);
        // Static pools: keep `replicas`, whatever is pending.
        let mut bins: Vec<(String, Resources, Vec<PodKey>)> = Vec::new();
        if let Some(replicas) = p.replicas {
            let missing = usize::try_from(replicas).unwrap_or(0).saturating_sub(live.len());
            for i in 0..missing {
                let zone = p.zones[(live.len() + i) % p.zones.len()].clone();
                bins.push((zone, node_free.clone(), Vec::new()));
            }
            for (key, req, zones) in want {
                if let Some(bin) =
                    bins.iter_mut().find(|b| zones.contains(&b.0) && fits(&b.1, &req))
                {
                    sub(&mut bin.1, &req);
                    bin.2.push(key);
                }
            }
        } else {
            // Claims in flight (not Ready yet): the room their nominated pods leave.
            let mut inflight: Vec<(String, String, Resources)> = Vec::new();
            for name in &live {
                let Some(c) = self.claims.get(name) else { continue };
                if c.phase == world::Phase::Ready {
                    continue;
                }
                let (zone, keys) = (c.zone.clone(), c.nominated.clone());
                let mut free = node_free.clone();
                for key in &keys {
                    if let Some(r) = self.requests_of(key) {
                        sub(&mut free, &r);
                    }
                }
                inflight.push((name.clone(), zone, free));
            }
            // The workload still on nodes being deleted (a drain paced by a PDB): scheduled now,
            // on room the pool's other nodes have (no preemption), else with the pending pods.
            let leaving: Vec<PodKey> = self
                .claims
                .values()
                .filter(|c| c.pool == pool && c.paced.is_some())
                .flat_map(|c| self.workload_on(&c.node))
                .filter(|k| !nominated.contains(k))
                .collect();
            if !leaving.is_empty() {
                let usable = self.usable_nodes();
                let mut room: Vec<Resources> = usable
                    .into_iter()
                    .filter(|(name, (p, _))| *p == pool && self.in_workload_zone(pool, name))
                    .map(|(_, (_, free))| free)
                    .collect();
                for key in leaving {
                    let Some(req) = self.pods.get(&key).map(|p| Arc::clone(&p.requests)) else {
                        continue;
                    };
                    if let Some(r) = room.iter_mut().find(|r| fits(r, &req)) {
                        sub(r, &req);
                        continue;
                    }
                    want.push((key, req, zones_all.clone()));
                }
            }
            for (key, req, zones) in want {
                if let Some((claim, _, free)) =
                    inflight.iter_mut().find(|f| zones.contains(&f.1) && fits(&f.2, &req))
                {
                    sub(free, &req);
                    let surge_for = self.surge_of(&key);
                    if let Some(s) = &surge_for {
                        self.attribute(claim, s, false);
                        self.nominate(&key, claim, now);
                    }
                    if let Some(c) = self.claims.get_mut(claim.as_str()) {
                        c.nominated.insert(key);
                    }
                    continue;
                }
                if let Some(bin) =
                    bins.iter_mut().find(|b| zones.contains(&b.0) && fits(&b.1, &req))
                {
                    sub(&mut bin.1, &req);
                    bin.2.push(key);
                    continue;
                }
                if zones.is_empty() {
                    self.note(format!(
                        "{}: no zone of pool {} satisfies its requirements",
                        key.1, p.name
                    ));
                    continue;
                }
                if !fits(&node_free, &req) {
                    self.note(format!("{}: larger than any node of pool {}", key.1, p.name));
                    continue;
                }
                // Karpenter launches where an offering is available when the pod admits it
                // (short zones are cached as unavailable); the list is unchanged without one.
                let open: Vec<String> =
                    zones.iter().filter(|z| !self.in_shortage(pool, z, now)).cloned().collect();
                let zones = if open.is_empty() || open.len() == zones.len() { zones } else { open };
                let zone = self.rng.pick(&zones).cloned().unwrap_or_default();
                let mut free = node_free.clone();
                sub(&mut free, &req);
                bins.push((zone, free, vec![key]));
            }
        }
        for (zone, _, pods) in bins {
            if let Some(resource) = self.limit_reached(pool) {
                self.note(format!(
                    "pool {}: limits.{resource} reached; {} pods wait",
                    p.name,
                    pods.len()
                ));
                break;
            }
            let shortage = self.in_shortage(pool, &zone, now);
            let k = key(&self.next_claim_name(pool), None);
            let never_launch = self.rng.chance(plan.failures.provisioning_never_completes)
                | self.fault(WorldFault::ProvisioningNeverCompletes, k, 1.0)
                | shortage;
            let never_ready = self.rng.chance(plan.failures.node_never_ready)
                | self.fault(WorldFault::NodeNeverReady, k, 1.0);
            let name = self.new_claim(pool, zone, now, never_launch, never_ready);
            let count = pods.len();
            for key in &pods {
                if let Some(rotation) = self.surge_of(key) {
                    self.attribute(&name, &rotation, true);
                    self.nominate(key, &name, now);
                }
            }
            if let Some(c) = self.claims.get_mut(&name) {
                c.nominated = pods.into_iter().collect();
            }
            if never_launch {
                let why = if shortage { "capacity shortage" } else { "launch fails" };
                self.note(format!("{name}: created for {count} pods; {why}: never launches"));
            } else {
                let d = self.draw(plan.provisioning);
                self.at(now + d, Ev::Launch(name.clone()));
                self.note(format!("{name}: created for {count} pods"));
            }
            self.at(now + plan.registration_timeout, Ev::RegistrationTtl(name));
        }
        self.update_pool_status(pool);
    }

    /// What a pod a claim is nominated for requests (`None` once the pod is gone).
    fn requests_of(&mut self, key: &PodKey) -> Option<Arc<Resources>> {
        if let Some(p) = self.pods.get(key) {
            return Some(Arc::clone(&p.requests));
        }
        if key.0 != world::CONTROLLER_NS {
            return None;
        }
        let ph = Arc::clone(self.snap.placeholders.get(&key.1)?);
        Some(self.placeholder_requests(&ph))
    }

    /// Karpenter's `Nominated` Event on the placeholder `key`, naming the claim it launched for
    /// it (or counted it against while in flight, with its node once registered): what the real
    /// provisioner records right after it creates a claim, and for pods it schedules onto a claim
    /// in flight. Events live an hour in the API server; older ones go as a new one comes.
    fn nominate(&mut self, key: &PodKey, claim: &str, now: DateTime<Utc>) {
        use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
        let Some(ph) = self.snap.placeholders.get(&key.1) else { return };
        let uid = ph.metadata.uid.clone();
        let mut targets = format!("nodeclaim/{claim}");
        if let Some(c) = self.claims.get(claim)
            && c.phase >= world::Phase::Registered
        {
            targets.push_str(&format!(", node/{}", c.node));
        }
        self.nominations += 1;
        let name = format!("{}.{:016x}", key.1, self.nominations);
        let stamp = to_time(now);
        let event = Event {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(key.0.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(key.0.clone()),
                name: Some(key.1.clone()),
                uid,
                ..Default::default()
            },
            reason: Some(crate::cluster::NOMINATED_REASON.into()),
            message: Some(format!("Pod should schedule on: {targets}")),
            type_: Some("Normal".into()),
            source: Some(EventSource { component: Some("karpenter".into()), host: None }),
            first_timestamp: Some(stamp.clone()),
            last_timestamp: Some(stamp),
            count: Some(1),
            ..Default::default()
        };
        let ttl = Duration::hours(1);
        for old in self.cluster.events_in(&key.0) {
            let born = old.first_timestamp.as_ref().and_then(crate::cluster::chrono_time);
            if born.is_some_and(|t| now - t >= ttl)
                && let Some(n) = old.metadata.name.as_deref()
            {
                self.cluster.delete_now(&ObjectRef::event(&key.0, n));
            }
        }
        if let Err(e) = self.cluster.apply_event(event) {
            self.note(format!("cannot record Event {name}: {e}"));
        }
    }

    /// The rotation a placeholder serves (`surge-for`), if `key` is one.
    fn surge_of(&self, key: &PodKey) -> Option<String> {
        let ph = self.snap.placeholders.get(&key.1).filter(|_| key.0 == world::CONTROLLER_NS)?;
        annotation(&ph.metadata, SURGE_FOR).map(str::to_string)
    }

    /// The first `spec.limits` resource another node would exceed.
    fn limit_reached(&self, pool: usize) -> Option<String> {
        let p = &self.plan.pools[pool];
        let used = self.pool_usage(pool);
        for (resource, limit) in &p.limits {
            let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(limit.clone());
            let Some(limit) = crate::karpenter::quantity_millis(&q) else { continue };
            let add = if resource == "nodes" {
                1000
            } else {
                p.allocatable.get(resource).copied().unwrap_or(0)
            };
            if used.get(resource).copied().unwrap_or(0) + add > limit {
                return Some(resource.clone());
            }
        }
        None
    }
}
