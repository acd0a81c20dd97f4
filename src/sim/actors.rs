//! The actors that play the rest of the cluster, each a small state machine on the virtual
//! clock:
//!
//! - **Karpenter**: provisions claims for unschedulable pods of a pool (placeholders and evicted
//!   workload) after a provisioning delay, or never (shortage), within `spec.limits`; static pools
//!   keep `replicas`; forced expiry at `creation + expireAfter`; on any claim deletion taints and
//!   drains the node (workload pods evicted and recreated Pending by their ReplicaSet) for a drain
//!   delay cut off at tGP, then deletes the Node and removes the `karpenter.sh/termination`
//!   finalizer; deletes claims that never register (`delays.registrationTimeout`, 15m) and, with
//!   node repair on (`karpenter.nodeRepair`, off by default), nodes that stay NotReady (30m); a
//!   shortage of some zones sends a pod that admits another zone there.
//! - **kubelet/scheduler**: nodes turn Ready after registration; Pending pods bind to Ready,
//!   uncordoned, untainted nodes of their pool with free capacity (requests against allocatable),
//!   Running at once; workload pods preempt placeholders (negative priority), placeholders
//!   preempt nothing; the placeholder's required node affinity is honoured.
//! - **operator**: the scenario's script.
//! - **faults**: the world side of `--faults`.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, Taint};
use kube::ResourceExt;

use super::scenario::{ActionKind, NodePick, Resources};
use super::world::{
    ARCH_LABEL, BUFFER, CAPACITY_TYPE_LABEL, DISRUPTED_TAINT, Ev, Injected, PodKey, REPAIR_AFTER,
    TERMINATION_FINALIZER, TERMINATION_TIMESTAMP, World, ZONE_LABEL, add, fits, pod_requests,
    run_on, sub,
};
use super::world_faults::{WorldFault, key};
use crate::cluster::{CacheView, ObjectKind, ObjectRef};
use crate::engine::Key;
use crate::karpenter::NODEPOOL_LABEL;
use crate::placeholder::required_node_terms;
use crate::policy::duration::format_human;
use crate::policy::resolve::to_time;
use crate::reconcile::slots::slot_key;

// The keys the simulated actors and the checker read, spelled by the annotation reference.
pub const FREEZE_ANNOTATION: &str = Key::Freeze.full();
pub const DO_NOT_DISRUPT: &str = Key::DoNotDisrupt.full();
pub const SURGE_FOR: &str = Key::SurgeFor.full();
pub const CLAIM_STATE: &str = Key::State.full();
pub const STARTED_AT: &str = Key::StartedAt.full();
pub const OWNED_MARKER: &str = Key::DoNotDisruptOwned.full();
pub const CORDONED_MARKER: &str = Key::Cordoned.full();

/// Who acted, for the trace.
pub const KARPENTER: &str = "karpenter";
pub const KUBELET: &str = "kubelet";
pub const SCHEDULER: &str = "scheduler";
pub const OPERATOR: &str = "operator";
pub const FAULTS: &str = "faults";

/// Every rotation in flight in a pool: each anchored slot and the claim it names, by slot.
pub fn anchors(np: &crate::karpenter::NodePool) -> BTreeMap<usize, &str> {
    crate::reconcile::slots::anchors(&np.metadata)
}

/// The first anchored claim of a pool (lowest slot) that `live` accepts.
pub fn first_anchor(
    np: Option<&crate::karpenter::NodePool>,
    live: impl Fn(&str) -> bool,
) -> Option<String> {
    np.and_then(|p| anchors(p).into_values().find(|a| live(a)).map(str::to_string))
}

/// A per-rotation annotation of one slot (`rules/annotations.ron`, `per_rotation`).
pub fn slot_annotation(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: crate::engine::Key,
    slot: usize,
) -> Option<&str> {
    annotation(meta, &crate::reconcile::slots::slot_key(key, slot))
}

pub fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn claim_ref(name: &str) -> ObjectRef {
    ObjectRef::cluster(ObjectKind::NodeClaim, name)
}

pub fn placeholder_node(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn node_unschedulable(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// Required node affinity (terms ORed, expressions ANDed) and nodeSelector against `labels`.
pub fn affinity_admits(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = &pod.spec else { return true };
    if let Some(sel) = &spec.node_selector
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let terms = required_node_terms(spec);
    if terms.is_empty() {
        return true;
    }
    terms.iter().any(|term| {
        term.match_fields.is_none()
            && term.match_expressions.iter().flatten().all(|e| {
                let value = labels.get(&e.key);
                let values = e.values.as_deref().unwrap_or_default();
                let num = |v: &str| v.parse::<i64>().ok();
                match e.operator.as_str() {
                    "In" => value.is_some_and(|v| values.contains(v)),
                    "NotIn" => !value.is_some_and(|v| values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    "Gt" => matches!((value.and_then(|v| num(v)), values.first().and_then(|v| num(v))), (Some(a), Some(b)) if a > b),
                    "Lt" => matches!((value.and_then(|v| num(v)), values.first().and_then(|v| num(v))), (Some(a), Some(b)) if a < b),
                    _ => false,
                }
            })
    })
}

/// Every NoSchedule/NoExecute taint of the node is tolerated by the pod.
pub fn tolerates(pod: &Pod, taints: &[Taint]) -> bool {
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    taints.iter().filter(|t| t.effect != "PreferNoSchedule").all(|t| {
        tolerations.iter().any(|tol| {
            let key_ok = match tol.operator.as_deref() {
                Some("Exists") => tol.key.as_deref().is_none_or(|k| k == t.key),
                _ => {
                    tol.key.as_deref() == Some(t.key.as_str())
                        && tol.value.as_deref() == t.value.as_deref()
                }
            };
            key_ok && tol.effect.as_deref().is_none_or(|e| e == t.effect)
        })
    })
}

impl World {
    /// Runs one world event; returns who acted.
    pub fn handle(&mut self, ev: Ev) -> &'static str {
        let now = self.now();
        match ev {
            Ev::Launch(name) => {
                let live = self.claims.get(&name).is_some_and(|c| c.deleting.is_none());
                if live {
                    self.launch(&name, now);
                    let d = self.draw(self.plan.registration);
                    self.at(now + d, Ev::Register(name));
                }
                KARPENTER
            }
            Ev::Register(name) => {
                let Some(c) = self.claims.get(&name) else { return KUBELET };
                if c.deleting.is_some() {
                    return KUBELET;
                }
                let never_ready = c.never_ready;
                self.register(&name, now);
                if never_ready && self.plan.node_repair {
                    self.note(format!("{name}: node will never turn Ready"));
                    self.at(now + REPAIR_AFTER, Ev::RepairCheck(name));
                } else if never_ready {
                    self.note(format!(
                        "{name}: node will never turn Ready (node repair off: it stays until its claim is deleted)"
                    ));
                } else {
                    let d = self.draw(self.plan.ready);
                    self.at(now + d, Ev::Ready(name));
                }
                KUBELET
            }
            Ev::Ready(name) => {
                let Some(c) = self.claims.get(&name) else { return KUBELET };
                if c.deleting.is_some() {
                    return KUBELET;
                }
                self.make_ready(&name, now);
                self.request_scheduling();
                KUBELET
            }
            Ev::ClaimObserved(name) => {
                if self.observe_claim(&name, now).is_some() {
                    self.note(format!("{name}: status caught up with its node (registration lag)"));
                }
                KARPENTER
            }
            Ev::RegistrationTtl(name) => {
                let stale = self.claims.get(&name).is_some_and(|c| {
                    c.deleting.is_none() && c.phase < super::world::Phase::Registered
                });
                if stale {
                    self.note(format!(
                        "{name}: not registered after {}",
                        format_human(self.plan.registration_timeout)
                    ));
                    self.delete_claim(&name);
                }
                KARPENTER
            }
            Ev::RepairCheck(name) => {
                let stale = self.claims.get(&name).is_some_and(|c| {
                    c.deleting.is_none() && c.phase == super::world::Phase::Registered
                });
                if stale {
                    self.note(format!(
                        "{name}: node NotReady for {}: repair",
                        format_human(REPAIR_AFTER)
                    ));
                    self.delete_claim(&name);
                }
                KARPENTER
            }
            Ev::Expire(name) => {
                self.force_expire(&name, "forced expiry (creationTimestamp + expireAfter)");
                KARPENTER
            }
            Ev::Terminate(name) => {
                self.begin_termination(&name, false);
                KARPENTER
            }
            Ev::DrainDone(name) => {
                self.finalize(&name);
                KARPENTER
            }
            Ev::DrainStep(pool) => {
                self.drain_step_done(pool);
                self.drain_step(pool);
                KARPENTER
            }
            Ev::Provision(pool) => {
                self.provisioning_done(pool);
                self.provision(pool);
                KARPENTER
            }
            Ev::Schedule => {
                self.scheduling_done();
                self.schedule_pass();
                SCHEDULER
            }
            Ev::Operator(i) => {
                self.operate(i);
                OPERATOR
            }
            Ev::OperatorEnd(i) => {
                self.lift_refusal(i);
                OPERATOR
            }
            Ev::EmptyCheck(node) => {
                self.consolidate_if_empty(&node);
                KARPENTER
            }
            Ev::Inject(x) => {
                self.inject(x);
                FAULTS
            }
            Ev::FaultMinute => {
                self.fault_minute();
                FAULTS
            }
        }
    }

    // -- Karpenter -----------------------------------------------------------------------------

    /// A deletion by the world (Karpenter, operator): the API server sets the deletionTimestamp
    /// and the termination controller picks it up.
    pub fn delete_claim(&mut self, name: &str) {
        if self.cluster.delete_object(&claim_ref(name)) {
            let now = self.now();
            self.at(now, Ev::Terminate(name.to_string()));
        }
    }

    fn force_expire(&mut self, name: &str, why: &str) {
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
    pub fn begin_termination(&mut self, name: &str, immediate: bool) {
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
        let registered = c.phase >= super::world::Phase::Registered;
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
            c.paced = Some(super::world::PacedDrain { stuck, ending: false });
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
    fn in_workload_zone(&self, pool: usize, node: &str) -> bool {
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
    pub fn drain_step(&mut self, pool: usize) -> usize {
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
            let ns = super::world::CONTROLLER_NS;
            if self.cluster.delete_object(&ObjectRef::pod(ns, &name)) {
                self.note(format!("evicted placeholder {name} from {node}"));
                n += 1;
            }
        }
        n
    }

    /// Drain done (or nothing to drain): the Node goes, the finalizer comes off, the claim is
    /// gone.
    pub fn finalize(&mut self, name: &str) {
        let now = self.now();
        let Some(c) = self.claims.get(name) else { return };
        let pool = c.pool;
        let launched = c.phase >= super::world::Phase::Launched;
        let registered = c.phase >= super::world::Phase::Registered;
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
                self.cluster.delete_now(&ObjectRef::pod(super::world::CONTROLLER_NS, &ph));
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
    fn consolidate_if_empty(&mut self, node: &str) {
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

    fn placeholder_requests(&mut self, pod: &Pod) -> Arc<Resources> {
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
    fn provision(&mut self, pool: usize) {
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
            .filter(|c| c.phase < super::world::Phase::Ready)
            .flat_map(|c| c.nominated.iter().cloned())
            .collect();
        // (pod, requests, admissible zones)
        let mut want: Vec<(PodKey, Arc<Resources>, Vec<String>)> = Vec::new();
        let placeholders: Vec<Arc<Pod>> = self.snap.placeholders.values().cloned().collect();
        for ph in placeholders {
            let key = (super::world::CONTROLLER_NS.to_string(), ph.name_any());
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
                if c.phase == super::world::Phase::Ready {
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
        if key.0 != super::world::CONTROLLER_NS {
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
            && c.phase >= super::world::Phase::Registered
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
        let ph =
            self.snap.placeholders.get(&key.1).filter(|_| key.0 == super::world::CONTROLLER_NS)?;
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

    // -- kubelet / scheduler ---------------------------------------------------------------------

    /// Nodes a pod of `pool` may land on, with their free capacity.
    fn usable_nodes(&mut self) -> BTreeMap<String, (usize, Resources)> {
        let mut out = BTreeMap::new();
        let snap = Arc::clone(&self.snap);
        // The three maps are keyed by node name: walked side by side instead of looked up.
        let mut cached = snap.nodes.iter().peekable();
        let mut bound = self.node_pods.iter().peekable();
        for (name, n) in &self.nodes {
            if !n.ready || n.disrupted {
                continue;
            }
            while cached.next_if(|(k, _)| k.as_str() < name.as_str()).is_some() {}
            let Some(node) = cached.peek().filter(|(k, _)| *k == name).map(|(_, v)| *v) else {
                continue;
            };
            if node_unschedulable(node) || node.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let mut free = self.plan.pools[n.pool].allocatable.clone();
            while bound.next_if(|(k, _)| k.as_str() < name.as_str()).is_some() {}
            let pods = bound.peek().filter(|(k, _)| *k == name).map(|(_, v)| *v);
            for key in pods.into_iter().flatten() {
                if let Some(p) = self.pods.get(key) {
                    sub(&mut free, &p.requests);
                }
            }
            out.insert(name.clone(), (n.pool, free));
        }
        let bound: Vec<(String, Arc<Pod>)> = snap
            .placeholders
            .values()
            .filter_map(|p| Some((placeholder_node(p)?.to_string(), Arc::clone(p))))
            .collect();
        for (node, ph) in bound {
            let req = self.placeholder_requests(&ph);
            if let Some((_, free)) = out.get_mut(&node) {
                sub(free, &req);
            }
        }
        out
    }

    fn schedule_pass(&mut self) {
        let now = self.now();
        let snap = Arc::clone(&self.snap);
        let pending_placeholders: Vec<Arc<Pod>> = snap
            .placeholders
            .values()
            .filter(|p| placeholder_node(p).is_none() && p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        if self.pending.is_empty() && pending_placeholders.is_empty() {
            return;
        }
        let mut nodes = self.usable_nodes();
        let best = |nodes: &BTreeMap<String, (usize, Resources)>,
                    ok: &dyn Fn(&str, usize) -> bool,
                    req: &Resources| {
            nodes
                .iter()
                // The cheap resource check first: most nodes of a big pool are full.
                .filter(|(name, (pool, free))| fits(free, req) && ok(name, *pool))
                // The most free CPU, then the first name: compared in place, not cloned.
                .max_by(|(a, (_, fa)), (b, (_, fb))| {
                    let cpu = |f: &Resources| f.get("cpu").copied().unwrap_or(0);
                    cpu(fa).cmp(&cpu(fb)).then_with(|| b.cmp(a))
                })
                .map(|(name, _)| name.clone())
        };
        // Workload first: it has the higher priority and may preempt placeholders.
        let pending: Vec<PodKey> = self.pending.iter().cloned().collect();
        for key in pending {
            let Some(pod) = self.pods.get(&key) else { continue };
            let pool = pod.pool;
            let req = Arc::clone(&pod.requests);
            let same_pool = |node: &str, p: usize| p == pool && self.in_workload_zone(pool, node);
            let mut target = best(&nodes, &same_pool, &req);
            if target.is_none() {
                target = self.preempt_for(&mut nodes, pool, &req);
            }
            match target {
                Some(node) => {
                    if let Some((_, free)) = nodes.get_mut(&node) {
                        sub(free, &req);
                    }
                    self.bind_pod(&key, &node, now);
                }
                None => {
                    if let Some(p) = self.pods.get_mut(&key)
                        && !p.marked_unschedulable
                    {
                        p.marked_unschedulable = true;
                        self.cluster.update_pod(&key.0, &key.1, |pod| {
                            pod.status.get_or_insert_default().conditions =
                                Some(vec![unschedulable(now)]);
                        });
                    }
                    // Karpenter looks at every pending pod on each batch, not only new ones.
                    self.request_provisioning(pool);
                }
            }
        }
        let mut bound = 0;
        for ph in pending_placeholders {
            let name = ph.name_any();
            let Some(pool_name) = ph
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|s| s.get(NODEPOOL_LABEL))
                .cloned()
            else {
                continue;
            };
            let Some(pool) = self.pool_index(&pool_name) else { continue };
            let req = self.placeholder_requests(&ph);
            let admits = |node: &str, p: usize| {
                p == pool
                    && snap.nodes.get(node).is_some_and(|n| {
                        affinity_admits(&ph, n.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                            && tolerates(
                                &ph,
                                n.spec
                                    .as_ref()
                                    .and_then(|s| s.taints.as_deref())
                                    .unwrap_or_default(),
                            )
                    })
            };
            match best(&nodes, &admits, &req) {
                Some(node) => {
                    if let Some((_, free)) = nodes.get_mut(&node) {
                        sub(free, &req);
                    }
                    let ns = super::world::CONTROLLER_NS;
                    let target = node.clone();
                    self.cluster.update_pod(ns, &name, |pod| run_on(pod, target, now));
                    self.note(format!("placeholder {name} bound to {node}, Running"));
                    bound += 1;
                }
                None => {
                    let marked = ph
                        .status
                        .iter()
                        .flat_map(|s| s.conditions.iter().flatten())
                        .any(|c| c.type_ == "PodScheduled" && c.status == "False");
                    if !marked {
                        let ns = super::world::CONTROLLER_NS;
                        self.cluster.update_pod(ns, &name, |pod| {
                            pod.status.get_or_insert_default().conditions =
                                Some(vec![unschedulable(now)]);
                        });
                        self.note(format!("placeholder {name}: Unschedulable"));
                    }
                    self.request_provisioning(pool);
                }
            }
        }
        let _ = bound;
    }

    /// Scheduler preemption: a workload pod evicts placeholders (negative priority) from the
    /// node where that frees enough, fewest victims first.
    fn preempt_for(
        &mut self,
        nodes: &mut BTreeMap<String, (usize, Resources)>,
        pool: usize,
        req: &Resources,
    ) -> Option<String> {
        let snap = Arc::clone(&self.snap);
        // The placeholders by the node they run on, in the cache's order (one pass over them,
        // not one per node).
        let mut on_node: BTreeMap<&str, Vec<Arc<Pod>>> = BTreeMap::new();
        for ph in snap.placeholders.values() {
            if let Some(node) = placeholder_node(ph) {
                on_node.entry(node).or_default().push(Arc::clone(ph));
            }
        }
        let mut choice: Option<(usize, String, Vec<Arc<Pod>>)> = None;
        for (name, (p, free)) in nodes.iter() {
            if *p != pool || !self.in_workload_zone(pool, name) {
                continue;
            }
            let Some(victims) = on_node.get(name.as_str()).cloned() else { continue };
            let mut freed = free.clone();
            for v in &victims {
                add(&mut freed, &pod_requests(v));
            }
            if fits(&freed, req) && choice.as_ref().is_none_or(|c| victims.len() < c.0) {
                choice = Some((victims.len(), name.clone(), victims));
            }
        }
        let (_, node, victims) = choice?;
        for v in victims {
            let name = v.name_any();
            let ns = super::world::CONTROLLER_NS;
            // Only live placeholders are in the snapshot; a deleted one is already gone.
            if self.cluster.delete_object(&ObjectRef::pod(ns, &name)) {
                let req = pod_requests(&v);
                if let Some((_, free)) = nodes.get_mut(&node) {
                    add(free, &req);
                }
                self.metrics.preemptions += 1;
                self.note(format!("preempted placeholder {name} on {node}"));
            }
        }
        Some(node)
    }

    // -- operator ------------------------------------------------------------------------------

    /// `kubectl edit nodepool`: the template and limits in the store, and what Karpenter uses
    /// from now on (new claims take the template's values; the limits apply at once).
    fn edit_pool(&mut self, pool: usize, edit: &super::scenario::PoolEdit) {
        let plan = Arc::make_mut(&mut self.plan);
        let p = &mut plan.pools[pool];
        let mut what = Vec::new();
        if let Some(e) = edit.expire_after {
            p.expire_after = e;
            p.expire_after_go = match e {
                crate::policy::duration::ExpireAfter::Never => "Never".into(),
                crate::policy::duration::ExpireAfter::After(d) => {
                    crate::policy::duration::format(d)
                }
            };
            what.push(format!("expireAfter {}", p.expire_after_go));
        }
        if let Some(tgp) = edit.tgp {
            p.tgp = Some(tgp);
            p.tgp_go = Some(crate::policy::duration::format(tgp));
            what.push(format!("terminationGracePeriod {}", format_human(tgp)));
        }
        if let Some(limits) = &edit.limits {
            p.limits.clone_from(limits);
            what.push(format!("limits {limits:?}"));
        }
        let (name, expire, tgp_go, limits) =
            (p.name.clone(), p.expire_after_go.clone(), p.tgp_go.clone(), p.limits.clone());
        self.cluster.update_pool(&name, |np| {
            let t = &mut np.spec.template.spec;
            t.expire_after = Some(expire);
            t.termination_grace_period = tgp_go;
            np.spec.limits = (!limits.is_empty()).then(|| {
                limits
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.clone()),
                        )
                    })
                    .collect()
            });
        });
        self.note(format!("kubectl edit nodepool {name}: {}", what.join(", ")));
        // Room under new limits: pending pods may get a claim now.
        self.request_provisioning(pool);
    }

    fn pick_claim(&mut self, pool: usize, pick: &NodePick) -> Option<String> {
        let mut live: Vec<(DateTime<Utc>, String)> = self
            .claims
            .iter()
            .filter(|(_, c)| {
                c.pool == pool && c.deleting.is_none() && c.phase == super::world::Phase::Ready
            })
            .map(|(n, c)| (c.created, n.clone()))
            .collect();
        live.sort();
        match pick {
            NodePick::Oldest => live.first().map(|x| x.1.clone()),
            NodePick::Newest => live.last().map(|x| x.1.clone()),
            NodePick::Random => self.rng.pick(&live).map(|x| x.1.clone()),
            NodePick::Anchored => {
                // The rotation in flight (the lowest slot's, with several).
                let np = self.snap.pools.get(self.pool_name(pool));
                first_anchor(np.map(|p| p.as_ref()), |a| {
                    self.claims.get(a).is_some_and(|c| c.deleting.is_none())
                })
                .or_else(|| live.first().map(|x| x.1.clone()))
            }
            NodePick::Name(name) => live.iter().any(|x| x.1 == *name).then(|| name.clone()),
        }
    }

    /// `rejectPlaceholder` and `timeOutPodList`: the API server refuses from now on (until the
    /// step's `for` ends). Not an edit of the pool: the start gates do not see it.
    fn refuse(&mut self, i: usize) {
        use super::world::Refusal;
        use crate::cluster::memory::Rejected;
        let plan = Arc::clone(&self.plan);
        let Some(step) = plan.script.get(i) else { return };
        let Some(pool) = step.pool.as_deref().and_then(|p| self.pool_index(p)) else { return };
        let pool_name = self.pool_name(pool).to_string();
        let refusal = match (step.action, step.rotation) {
            (ActionKind::RejectPlaceholder, Some(nth)) => {
                Refusal::Placeholder(Rejected::Nth { pool: pool_name.clone(), nth })
            }
            _ => {
                let Some(claim) = self.pick_claim(pool, &step.node) else {
                    self.note(format!(
                        "no Ready claim of pool {pool_name} to refuse: nothing done"
                    ));
                    return;
                };
                if step.action == ActionKind::RejectPlaceholder {
                    Refusal::Placeholder(Rejected::Claim(claim))
                } else {
                    let node = self.claims.get(&claim).map(|c| c.node.clone()).unwrap_or_default();
                    Refusal::PodList(node)
                }
            }
        };
        match &refusal {
            Refusal::Placeholder(rule) => {
                self.cluster.reject_placeholder(
                    rule.clone(),
                    "exceeded quota: placeholders, requested: pods=1, used: pods=0, limited: pods=0",
                );
                self.note(format!("admission rejects every placeholder of {rule:?} (403)"));
            }
            Refusal::PodList(node) => {
                self.cluster.time_out_pod_list(node, true);
                self.note(format!("every list of the pods on node {node} times out"));
            }
        }
        if let Some(until) = step.until {
            self.at(until, Ev::OperatorEnd(i));
        }
        self.refusals.insert(i, refusal);
    }

    /// The end of a script step's refusal.
    fn lift_refusal(&mut self, i: usize) {
        use super::world::Refusal;
        match self.refusals.remove(&i) {
            Some(Refusal::Placeholder(rule)) => {
                self.cluster.admit_placeholder(&rule);
                self.note(format!("admission admits the placeholder of {rule:?} again"));
            }
            Some(Refusal::PodList(node)) => {
                self.cluster.time_out_pod_list(&node, false);
                self.note(format!("the pods on node {node} list again"));
            }
            None => {}
        }
    }

    fn operate(&mut self, i: usize) {
        let now = self.now();
        let plan = Arc::clone(&self.plan);
        let Some(step) = plan.script.get(i) else { return };
        let pool = step.pool.as_deref().and_then(|p| self.pool_index(p));
        let pool_name = step.pool.clone().unwrap_or_default();
        match step.action {
            ActionKind::RejectPlaceholder | ActionKind::TimeOutPodList => {
                // The cluster's behaviour, not an operator's edit of the pool: return before the
                // pool is marked as touched (the invariants' tolerance for operator edits).
                self.refuse(i);
                return;
            }
            ActionKind::Freeze => {
                let until = step.until.unwrap_or(now).to_rfc3339_opts(SecondsFormat::Secs, true);
                self.cluster.update_pool(&pool_name, |p| {
                    p.metadata
                        .annotations
                        .get_or_insert_default()
                        .insert(FREEZE_ANNOTATION.into(), until);
                });
            }
            ActionKind::Unfreeze => {
                self.cluster.update_pool(&pool_name, |p| {
                    if let Some(a) = p.metadata.annotations.as_mut() {
                        a.remove(FREEZE_ANNOTATION);
                    }
                });
            }
            ActionKind::ApplyPolicy => {
                if let Some(policy) = &step.policy
                    && let Err(e) = self.cluster.apply_policy(policy.clone())
                {
                    self.note(format!("apply policy failed: {e}"));
                }
            }
            ActionKind::DeletePolicy => {
                let name = step.name.clone().unwrap_or_default();
                self.cluster.delete_now(&ObjectRef::cluster(ObjectKind::RotationPolicy, &name));
            }
            ActionKind::Cordon | ActionKind::DoNotDisrupt | ActionKind::DeleteClaim => {
                let Some(pool) = pool else { return };
                let Some(claim) = self.pick_claim(pool, &step.node) else {
                    let why = match &step.node {
                        NodePick::Name(n) => format!(
                            "nodeclaim {n} is not a Ready claim of pool {pool_name}: nothing done"
                        ),
                        _ => "no node to act on".to_string(),
                    };
                    self.note(why);
                    return;
                };
                let node = self.claims.get(&claim).map(|c| c.node.clone()).unwrap_or_default();
                match step.action {
                    ActionKind::Cordon => {
                        let already =
                            self.snap.nodes.get(&node).is_some_and(|n| node_unschedulable(n));
                        if !already {
                            self.cluster.update_node(&node, |n| {
                                n.spec.get_or_insert_default().unschedulable = Some(true);
                            });
                            self.operator_cordons.insert(node.clone());
                            self.note(format!("cordoned {node} ({claim})"));
                        }
                    }
                    ActionKind::DoNotDisrupt => {
                        self.cluster.update_node(&node, |n| {
                            n.metadata
                                .annotations
                                .get_or_insert_default()
                                .insert(DO_NOT_DISRUPT.into(), "true".into());
                        });
                        self.operator_protected.insert(node.clone());
                        self.operator_opted_out.insert(claim.clone());
                        self.note(format!("do-not-disrupt on {node} ({claim})"));
                    }
                    _ => {
                        self.note(format!("kubectl delete nodeclaim {claim}"));
                        self.delete_claim(&claim);
                    }
                }
            }
            ActionKind::EditNodePool => {
                let (Some(pool), Some(edit)) = (pool, step.edit.as_ref()) else { return };
                self.edit_pool(pool, edit);
            }
            ActionKind::RemoveAnchor | ActionKind::ReplaceNodePool | ActionKind::DeleteNodePool => {
                let Some(pool) = pool else { return };
                // The rotation in flight (the lowest slot's, with several) and its slot.
                let stage = |claim: &str| {
                    let state = self.snap.claims.get(claim).and_then(|c| {
                        c.metadata.annotations.as_ref()?.get(CLAIM_STATE).map(String::as_str)
                    });
                    step.stage.as_deref().is_none_or(|want| state == Some(want))
                };
                let anchored = self.snap.pools.get(&pool_name).and_then(|p| {
                    anchors(p)
                        .into_iter()
                        .find(|(_, a)| stage(a))
                        .map(|(slot, a)| (slot, a.to_string()))
                });
                let anchor = anchored.as_ref().map(|(_, a)| a.clone());
                let key = slot_key(Key::ActiveRotation, anchored.map_or(0, |(slot, _)| slot));
                // Mid-rotation: wait for one (every 10s, for up to a day).
                if anchor.is_none() && now - step.at < Duration::days(1) {
                    self.at(now + Duration::seconds(10), Ev::Operator(i));
                    return;
                }
                if let Some(claim) = &anchor {
                    self.operator_unanchored.insert(pool_name.clone(), (claim.clone(), now));
                }
                match step.action {
                    ActionKind::RemoveAnchor => {
                        self.cluster.update_pool(&pool_name, |p| {
                            if let Some(a) = p.metadata.annotations.as_mut() {
                                a.remove(&key);
                            }
                        });
                        self.note(format!("removed the anchor ({anchor:?}) of pool {pool_name}"));
                    }
                    ActionKind::ReplaceNodePool => {
                        self.cluster.update_pool(&pool_name, |p| {
                            if let Some(a) = p.metadata.annotations.as_mut() {
                                a.retain(|k, _| !k.starts_with("noderotation.io/"));
                            }
                        });
                        self.note(format!(
                            "replaced pool {pool_name} from a manifest without our annotations (anchor {anchor:?})"
                        ));
                    }
                    _ => {
                        self.deleted_pools.insert(pool);
                        self.cluster
                            .delete_now(&ObjectRef::cluster(ObjectKind::NodePool, &pool_name));
                        let claims: Vec<String> = self
                            .claims
                            .iter()
                            .filter(|(_, c)| c.pool == pool && c.deleting.is_none())
                            .map(|(n, _)| n.clone())
                            .collect();
                        self.note(format!(
                            "kubectl delete nodepool {pool_name} (anchor {anchor:?}): Karpenter deletes its {} claims",
                            claims.len()
                        ));
                        for c in claims {
                            self.delete_claim(&c);
                        }
                    }
                }
            }
            ActionKind::ImpersonatePlaceholder => {
                let Some(pool) = pool else { return };
                let anchor =
                    first_anchor(self.snap.pools.get(&pool_name).map(|p| p.as_ref()), |a| {
                        self.claims.get(a).is_some_and(|c| c.deleting.is_none())
                    });
                let Some(claim) = anchor else {
                    if now - step.at < Duration::days(1) {
                        self.at(now + Duration::seconds(10), Ev::Operator(i));
                    }
                    return;
                };
                self.impersonate_placeholder(pool, &claim);
            }
            ActionKind::Uncordon | ActionKind::AllowDisrupt => {
                let Some(pool) = pool else { return };
                let set = if step.action == ActionKind::Uncordon {
                    &self.operator_cordons
                } else {
                    &self.operator_protected
                };
                let node = set
                    .iter()
                    .find(|n| self.nodes.get(*n).is_some_and(|x| x.pool == pool))
                    .cloned();
                let Some(node) = node else { return };
                if step.action == ActionKind::Uncordon {
                    self.operator_cordons.remove(&node);
                    self.cluster.update_node(&node, |n| {
                        n.spec.get_or_insert_default().unschedulable = None;
                    });
                } else {
                    self.operator_protected.remove(&node);
                    self.cluster.update_node(&node, |n| {
                        if let Some(a) = n.metadata.annotations.as_mut() {
                            a.remove(DO_NOT_DISRUPT);
                        }
                    });
                }
            }
        }
        self.operator_touched.insert(pool, now);
        self.request_scheduling();
    }

    /// Replaces `claim`'s placeholder with a pod of the same name, managed-by label and
    /// `surge-for`, Running on another Ready node of the pool (the newest): capacity the
    /// controller did not reserve.
    fn impersonate_placeholder(&mut self, pool: usize, claim: &str) {
        let name = crate::placeholder::placeholder_name(claim);
        let ns = super::world::CONTROLLER_NS;
        if self.cluster.delete_now(&ObjectRef::pod(ns, &name)) {
            self.note(format!("deleted the controller's {name}"));
        }
        let own = self.claims.get(claim).map(|c| c.node.clone());
        let host = self
            .claims
            .iter()
            .filter(|(n, c)| {
                c.pool == pool
                    && c.deleting.is_none()
                    && c.phase == super::world::Phase::Ready
                    && n.as_str() != claim
                    && Some(&c.node) != own.as_ref()
            })
            .max_by_key(|(n, c)| (c.created, (*n).clone()))
            .map(|(_, c)| c.node.clone());
        let Some(host) = host else {
            self.note(format!(
                "no other Ready node in pool {}: nothing impersonated",
                self.pool_name(pool)
            ));
            return;
        };
        let pod: Pod = match serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "namespace": super::world::CONTROLLER_NS,
                "labels": {crate::cluster::MANAGED_BY_LABEL: crate::cluster::MANAGED_BY_VALUE},
                "annotations": {SURGE_FOR: claim},
            },
            "spec": {
                "nodeName": host,
                "nodeSelector": {NODEPOOL_LABEL: self.pool_name(pool)},
                "containers": [{"name": "pause", "image": "pause",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
            },
            "status": {"phase": "Running"},
        })) {
            Ok(p) => p,
            Err(e) => {
                self.note(format!("impersonation pod: {e}"));
                return;
            }
        };
        match self.cluster.apply_pod(pod) {
            Ok(_) => {
                self.note(format!("created {name} for {claim} on {host}: not the controller's"))
            }
            Err(e) => self.note(format!("impersonation pod: {e}")),
        }
    }

    // -- faults --------------------------------------------------------------------------------

    fn inject(&mut self, x: Injected) {
        match x {
            Injected::ExpireNow(claim) => {
                self.force_expire(&claim, "forced expiry while pending (injected)")
            }
            Injected::FinalizeNow(claim) => {
                if self.claims.get(&claim).is_some_and(|c| c.deleting.is_none()) {
                    self.note(format!("{claim}: interrupted and finalized at once (injected)"));
                    self.cluster.delete_object(&claim_ref(&claim));
                    self.begin_termination(&claim, true);
                }
            }
            Injected::Preempt(ph) => {
                let ns = super::world::CONTROLLER_NS;
                if self.cluster.delete_object(&ObjectRef::pod(ns, &ph)) {
                    self.metrics.preemptions += 1;
                    self.note(format!("placeholder {ph} preempted (injected)"));
                    self.request_scheduling();
                }
            }
            Injected::DeleteHost(claim) => {
                if self.claims.get(&claim).is_some_and(|c| c.deleting.is_none()) {
                    self.note(format!("{claim}: instance interrupted (injected)"));
                    self.delete_claim(&claim);
                }
            }
        }
    }

    /// After any step: with `--faults` and a rotation in flight anywhere, the next whole virtual
    /// minute rolls the faults aimed at rotations (once, however many steps come before it).
    pub fn arm_fault_minute(&mut self) {
        if self.faults.is_none() || self.fault_minute_queued {
            return;
        }
        if self.snap.pools.values().any(|np| !anchors(np).is_empty()) {
            self.fault_minute_queued = true;
            let minute = self.now().timestamp().div_euclid(60) + 1;
            let at = DateTime::from_timestamp(minute * 60, 0).unwrap_or(self.now());
            self.at(at, Ev::FaultMinute);
        }
    }

    /// The minute's draws: world faults aimed at every rotation in flight (pools in the
    /// scenario's order, each slot's in slot order), each class about (its claim, this minute).
    fn fault_minute(&mut self) {
        self.fault_minute_queued = false;
        let snap = Arc::clone(&self.snap);
        let minute = self.now().timestamp().div_euclid(60);
        for pool in 0..self.plan.pools.len() {
            let Some(np) = snap.pools.get(self.pool_name(pool)) else { continue };
            let anchored = anchors(np);
            if anchored.is_empty() {
                continue;
            }
            let ready_timeout = self.gov.of(&snap, np).settings().map(|s| s.ready_timeout);
            for anchor in anchored.into_values() {
                self.inject_at(&snap, anchor, ready_timeout, minute);
            }
        }
    }

    /// World faults aimed at the rotation of `anchor`.
    fn inject_at(
        &mut self,
        snap: &CacheView,
        anchor: &str,
        ready_timeout: Option<Duration>,
        minute: i64,
    ) {
        let now = self.now();
        let k = key(anchor, Some(minute));
        let Some(cand) = snap.claims.get(anchor) else { return };
        if cand.metadata.deletion_timestamp.is_some() {
            return;
        }
        let state = annotation(&cand.metadata, CLAIM_STATE);
        if state == Some("pending") {
            if self.fault(WorldFault::ExpirePending, k, 1.0) {
                self.at(now, Ev::Inject(Injected::ExpireNow(anchor.to_string())));
            }
            let started = annotation(&cand.metadata, STARTED_AT)
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|t| t.with_timezone(&Utc));
            if let (Some(started), Some(rt)) = (started, ready_timeout) {
                let elapsed = now - started;
                // Past readyTimeout with the claim still pending: the rollback was cut short.
                let p = if elapsed > rt {
                    1.0
                } else if elapsed > rt - Duration::minutes(1) {
                    0.25
                } else {
                    0.0
                };
                if p > 0.0 && self.fault(WorldFault::FinalizeInRollback, k, p) {
                    self.at(now, Ev::Inject(Injected::FinalizeNow(anchor.to_string())));
                }
            }
        }
        let ph = snap
            .placeholders
            .iter()
            .find(|(_, p)| annotation(&p.metadata, SURGE_FOR) == Some(anchor))
            .map(|(n, p)| (n.clone(), Arc::clone(p)));
        if let Some((name, ph)) = ph
            && crate::placeholder::running(&ph)
        {
            if self.fault(WorldFault::PreemptPlaceholder, k, 1.0) {
                self.at(now, Ev::Inject(Injected::Preempt(name)));
            } else if self.fault(WorldFault::DeleteHost, k, 1.0)
                && let Some(host) = placeholder_node(&ph)
                && let Some(n) = self.nodes.get(host)
            {
                let claim = n.claim.clone();
                self.at(now, Ev::Inject(Injected::DeleteHost(claim)));
            }
        }
    }
}

fn unschedulable(now: DateTime<Utc>) -> PodCondition {
    PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/N nodes are available: insufficient cpu".into()),
        last_transition_time: Some(to_time(now)),
        ..PodCondition::default()
    }
}
