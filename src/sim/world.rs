//! The simulated cluster around the controller: a [`MemoryCluster`] on a [`VirtualClock`], the
//! actors' bookkeeping (claims, nodes, workload pods), a queue of timed world events, and the
//! measurements that only the world can take (pending-pod-seconds, overlap node-hours).
//!
//! The store is the truth. The actors keep mirrors of what only they write (a claim's phase, a
//! node's readiness, where workload pods run) so that a scheduling pass does not re-parse every
//! pod; anything the controller writes (cordon, annotations, placeholders) is read from the
//! store's snapshot ([`World::snap`]), refreshed after every step.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::{
    Affinity, Container, Node, NodeAffinity, NodeCondition, NodeSelector,
    NodeSelectorRequirement as K8sRequirement, NodeSelectorTerm, NodeSpec, NodeStatus, Pod,
    PodCondition, PodSpec, PodStatus, ResourceRequirements, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::gov::Gov;
use super::scenario::{Compiled, Resources};
use super::trace::Trace;
use super::world_faults::{WorldFault, WorldFaults, key};
use crate::clock::{Clock, VirtualClock};
use crate::cluster::memory::{MemoryCluster, Rng};
use crate::cluster::{CacheView, Cluster};
use crate::karpenter::{
    ClaimCondition, NODEPOOL_LABEL, NodeClaim, NodeClaimSpec, NodePool, NodePoolSpec,
    NodeSelectorRequirement, quantity_millis,
};
use crate::policy::resolve::to_time;

/// The controller's namespace (placeholders live here).
pub const CONTROLLER_NS: &str = "noderotation-system";
/// Workload pods.
pub const APPS_NS: &str = "apps";
/// DaemonSet pods.
pub const SYSTEM_NS: &str = "kube-system";
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
pub const TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// Node repair (`karpenter.nodeRepair`): a node NotReady this long is replaced.
pub const REPAIR_AFTER: Duration = Duration::minutes(30);
/// `buffer` of §3.2.
pub const BUFFER: Duration = Duration::minutes(2);

pub type PodKey = (String, String);

/// What Karpenter knows about one of its claims.
#[derive(Debug, Clone)]
pub struct ClaimSim {
    pub pool: usize,
    pub node: String,
    pub zone: String,
    pub created: DateTime<Utc>,
    pub deadline: Option<DateTime<Utc>>,
    /// `spec.terminationGracePeriod`, copied from the template when the claim was created.
    pub tgp: Option<Duration>,
    pub phase: Phase,
    /// Termination began (deletionTimestamp observed).
    pub deleting: Option<DateTime<Utc>>,
    pub never_launch: bool,
    pub never_ready: bool,
    /// `registration_lag` fault: the claim's status is written only after its Node is Ready.
    pub status_lag: bool,
    /// Pods this claim is being provisioned for.
    pub nominated: BTreeSet<PodKey>,
    /// Every rotation (`surge-for`) whose placeholder Karpenter launched this claim for or
    /// nominated to it, ever: what invariants I19 and I20 attribute the claim by.
    pub placeholders_for: BTreeSet<String>,
    /// Row in the report's timeline.
    pub lane: usize,
    /// Forced expiry deleted it.
    pub expired: bool,
    /// A drain paced by the workload's PDB is under way.
    pub paced: Option<PacedDrain>,
}

/// A drain that evicts only what the workload's PodDisruptionBudget allows.
#[derive(Debug, Clone, Copy, Default)]
pub struct PacedDrain {
    /// The drain hangs (a volume that does not detach): only the deadline drawn at its start
    /// ends it, whenever the last pod leaves.
    pub stuck: bool,
    /// Every workload pod is gone; the node's end is scheduled.
    pub ending: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Provisioning,
    Launched,
    Registered,
    Ready,
}

/// A workload or DaemonSet pod, as the world placed it.
#[derive(Debug, Clone)]
pub struct PodSim {
    pub pool: usize,
    pub daemonset: bool,
    pub requests: Arc<Resources>,
    pub node: Option<String>,
    pub pending_since: Option<DateTime<Utc>>,
    /// Seconds of the current Pending spell already counted by [`World::settle_metrics`] (which
    /// moves `pending_since` up to its `now`), so that the longest-Pending figure sees the whole
    /// spell.
    pub pending_settled: f64,
    /// `PodScheduled=False/Unschedulable` written.
    pub marked_unschedulable: bool,
}

/// A node, as the world placed it.
#[derive(Debug, Clone)]
pub struct NodeSim {
    pub claim: String,
    pub pool: usize,
    pub ready: bool,
    /// Karpenter's termination tainted it.
    pub disrupted: bool,
    pub zone: String,
}

/// One claim's life, for the report.
#[derive(Debug, Clone)]
pub struct Lifetime {
    pub pool: usize,
    pub name: String,
    pub lane: usize,
    pub created: DateTime<Utc>,
    pub gone: Option<DateTime<Utc>>,
    pub deadline: Option<DateTime<Utc>>,
    pub expired_at: Option<DateTime<Utc>>,
}

/// What the world measures.
#[derive(Debug, Clone, Default)]
pub struct WorldMetrics {
    /// Forced expiries: (time, pool, claim).
    pub forced_expiries: Vec<(DateTime<Utc>, usize, String)>,
    pub pending_pod_seconds: Vec<f64>,
    /// The longest any one workload pod was Pending, per pool (seconds; a pod still Pending
    /// counts up to the last [`World::settle_metrics`]).
    pub longest_pending_seconds: Vec<f64>,
    /// Node-seconds above the base count, per pool.
    pub overlap_node_seconds: Vec<f64>,
    /// Launched (billed) claims per pool and when that count last changed.
    pub billed: Vec<(u32, DateTime<Utc>)>,
    pub lifetimes: BTreeMap<String, Lifetime>,
    /// Pods evicted by drains.
    pub evictions: u64,
    pub preemptions: u64,
    pub claims_created: u64,
    /// `--faults`: the world faults injected, per class name.
    pub world_faults: BTreeMap<&'static str, u64>,
}

/// A timed world event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ev {
    Launch(String),
    Register(String),
    Ready(String),
    RegistrationTtl(String),
    /// Karpenter catches up on a lagging claim's status (`registration_lag` fault).
    ClaimObserved(String),
    RepairCheck(String),
    Expire(String),
    Terminate(String),
    DrainDone(String),
    /// Karpenter's eviction queue retries the paced drains of a pool (a pod of its workload
    /// started running, so its PDB may allow another eviction).
    DrainStep(usize),
    Provision(usize),
    Schedule,
    /// Emptiness consolidation check of a node.
    EmptyCheck(String),
    Operator(usize),
    /// A script step's refusal (`rejectPlaceholder`, `timeOutPodList`) ends (its `for`).
    OperatorEnd(usize),
    /// An injected fault decided by the driver (applied by the world).
    Inject(Injected),
    /// `--faults`: the once-a-minute draws of the faults aimed at rotations in flight.
    FaultMinute,
}

/// World-side faults the driver injects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injected {
    /// Karpenter force-expires this claim now (mid-pending).
    ExpireNow(String),
    /// Delete and finalize this claim at once (finalized mid-rollback).
    FinalizeNow(String),
    /// A higher-priority pod preempts this placeholder.
    Preempt(String),
    /// The instance behind this claim is interrupted.
    DeleteHost(String),
}

pub struct World {
    pub clock: VirtualClock,
    /// World writes and the no-lag observer view (client 0).
    pub cluster: MemoryCluster,
    pub plan: Arc<Compiled>,
    pub end: DateTime<Utc>,
    queue: BTreeMap<(DateTime<Utc>, u64), Ev>,
    seq: u64,
    /// Delays and the scenario's own failures.
    pub rng: Rng,
    /// `--faults` world faults (streams of their own, so the scenario's draws stay put).
    pub faults: Option<WorldFaults>,
    /// A `FaultMinute` event is queued.
    pub fault_minute_queued: bool,
    /// The governing policies, for the faults that depend on a rotation's readyTimeout.
    pub gov: Gov,
    pub claims: BTreeMap<String, ClaimSim>,
    pub nodes: BTreeMap<String, NodeSim>,
    pub pods: BTreeMap<PodKey, PodSim>,
    pub node_pods: BTreeMap<String, BTreeSet<PodKey>>,
    pub pending: BTreeSet<PodKey>,
    /// Placeholder requests parsed once per incarnation (uid).
    pub placeholder_requests: BTreeMap<String, Arc<Resources>>,
    /// Pools with a `Provision` event queued.
    provision_queued: BTreeSet<usize>,
    /// Pools with a `DrainStep` event queued.
    drain_step_queued: BTreeSet<usize>,
    schedule_queued: bool,
    /// The store after the last step.
    pub snap: Arc<CacheView>,
    pub metrics: WorldMetrics,
    pub trace: Trace,
    /// Lanes per pool: the claim in each row.
    lanes: Vec<Vec<Option<String>>>,
    /// Per pool: a sequence for names.
    names: Vec<u64>,
    pod_seq: u64,
    /// When the operator last touched each pool (index) or any policy (`None` key).
    pub operator_touched: BTreeMap<Option<usize>, DateTime<Utc>>,
    /// Nodes the operator cordoned / protected.
    pub operator_cordons: BTreeSet<String>,
    pub operator_protected: BTreeSet<String>,
    /// Claims whose node ever carried the operator's do-not-disrupt (their forced expiry is the
    /// operator's choice, not a missed rotation).
    pub operator_opted_out: BTreeSet<String>,
    /// Claims whose drain Karpenter got stuck past tGP + buffer (a volume that does not detach),
    /// with when that drain ends: no controller can finish their rotation earlier.
    pub stuck_drains: BTreeMap<String, DateTime<Utc>>,
    /// Note of the step in progress (what the actor did, for the trace).
    pub notes: Vec<String>,
    /// Pools the operator deleted (Karpenter provisions nothing more for them).
    pub deleted_pools: BTreeSet<usize>,
    /// Anchors the operator removed by hand, per pool: the claim and when. A pass that read the
    /// pool before the edit may still act on it for a moment (invariant I3's tolerance).
    pub operator_unanchored: BTreeMap<String, (String, DateTime<Utc>)>,
    /// The API server's standing refusals the script installed, by script step, until their
    /// `for` ends.
    pub refusals: BTreeMap<usize, Refusal>,
    /// Claims Karpenter launched for a placeholder, until they are finalized (invariant I20
    /// watches them).
    pub surge_launched: BTreeSet<String>,
    /// `Nominated` Events recorded so far (for their names).
    pub nominations: u64,
}

/// A standing refusal of the API server a script step installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Every create of this placeholder is rejected (403).
    Placeholder(crate::cluster::memory::Rejected),
    /// Every list of the pods on this node times out.
    PodList(String),
}

pub fn parse_resources(map: Option<&BTreeMap<String, Quantity>>) -> Resources {
    map.into_iter().flatten().filter_map(|(k, v)| Some((k.clone(), quantity_millis(v)?))).collect()
}

pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    r.iter()
        .map(|(k, v)| {
            let q = if v % 1000 == 0 { format!("{}", v / 1000) } else { format!("{v}m") };
            (k.clone(), Quantity(q))
        })
        .collect()
}

/// A pod's requests (sum over containers; enough for the pods this world creates and for the
/// placeholder).
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut out = Resources::new();
    for c in pod.spec.iter().flat_map(|s| &s.containers) {
        for (k, v) in parse_resources(c.resources.as_ref().and_then(|r| r.requests.as_ref())) {
            *out.entry(k).or_insert(0) += v;
        }
    }
    out
}

pub fn fits(free: &Resources, want: &Resources) -> bool {
    want.iter().all(|(k, v)| free.get(k).copied().unwrap_or(0) >= *v)
}

pub fn add(acc: &mut Resources, r: &Resources) {
    for (k, v) in r {
        // The key is cloned only when it is new (not on every pod).
        match acc.get_mut(k) {
            Some(x) => *x += v,
            None => {
                acc.insert(k.clone(), *v);
            }
        }
    }
}

pub fn sub(acc: &mut Resources, r: &Resources) {
    for (k, v) in r {
        match acc.get_mut(k) {
            Some(x) => *x -= v,
            None => {
                acc.insert(k.clone(), -*v);
            }
        }
    }
}

fn condition(type_: &str, status: bool, now: DateTime<Utc>) -> ClaimCondition {
    ClaimCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: None,
        message: None,
        last_transition_time: Some(to_time(now)),
    }
}

fn node_condition(ready: bool, now: DateTime<Utc>) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: if ready { "True" } else { "False" }.into(),
        reason: Some(if ready { "KubeletReady" } else { "KubeletNotReady" }.into()),
        last_transition_time: Some(to_time(now)),
        ..NodeCondition::default()
    }
}

/// What the scheduler and the kubelet write when a pod lands on `node`: bound there, Running,
/// scheduled as of `now`.
pub fn run_on(pod: &mut Pod, node: String, now: DateTime<Utc>) {
    pod.spec.get_or_insert_default().node_name = Some(node);
    let st = pod.status.get_or_insert_default();
    st.phase = Some("Running".into());
    st.conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "True".into(),
        last_transition_time: Some(to_time(now)),
        ..PodCondition::default()
    }]);
}

impl World {
    pub fn new(plan: Arc<Compiled>, seed: u64, end: DateTime<Utc>, faults: bool) -> World {
        let clock = VirtualClock::new(plan.start);
        let cluster = MemoryCluster::new(Arc::new(clock.clone()), CONTROLLER_NS);
        let mut root = Rng::new(seed);
        let fleet_rng = root.fork();
        let rng = root.fork();
        let fault_seed = root.next_u64();
        let pools = plan.pools.len();
        let mut world = World {
            clock,
            snap: cluster.cache(),
            cluster,
            end,
            queue: BTreeMap::new(),
            seq: 0,
            rng,
            faults: faults.then(|| WorldFaults::new(fault_seed, plan.faults.rates.clone())),
            fault_minute_queued: false,
            gov: Gov::default(),
            claims: BTreeMap::new(),
            nodes: BTreeMap::new(),
            pods: BTreeMap::new(),
            node_pods: BTreeMap::new(),
            pending: BTreeSet::new(),
            placeholder_requests: BTreeMap::new(),
            provision_queued: BTreeSet::new(),
            drain_step_queued: BTreeSet::new(),
            schedule_queued: false,
            metrics: WorldMetrics {
                pending_pod_seconds: vec![0.0; pools],
                longest_pending_seconds: vec![0.0; pools],
                overlap_node_seconds: vec![0.0; pools],
                billed: vec![(0, plan.start); pools],
                ..WorldMetrics::default()
            },
            trace: Trace::default(),
            lanes: vec![Vec::new(); pools],
            names: vec![0; pools],
            pod_seq: 0,
            operator_touched: BTreeMap::new(),
            operator_cordons: BTreeSet::new(),
            operator_protected: BTreeSet::new(),
            operator_opted_out: BTreeSet::new(),
            stuck_drains: BTreeMap::new(),
            notes: Vec::new(),
            deleted_pools: BTreeSet::new(),
            operator_unanchored: BTreeMap::new(),
            refusals: BTreeMap::new(),
            surge_launched: BTreeSet::new(),
            nominations: 0,
            plan,
        };
        world.build_fleet(fleet_rng);
        world.snap = world.cluster.cache();
        world
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    // -- the event queue -----------------------------------------------------------------------

    pub fn at(&mut self, t: DateTime<Utc>, ev: Ev) {
        self.seq += 1;
        self.queue.insert((t, self.seq), ev);
    }

    pub fn next_time(&self) -> Option<DateTime<Utc>> {
        self.queue.keys().next().map(|(t, _)| *t)
    }

    pub fn pop(&mut self) -> Option<(DateTime<Utc>, Ev)> {
        self.queue.pop_first().map(|((t, _), ev)| (t, ev))
    }

    /// Karpenter launched `claim` for (`launched`), or nominated to it, the placeholder of the
    /// rotation `surge_for`: the world's record of what the claim is for. I19 accepts a reap of
    /// either; I20 bounds the life of the claims launched for a placeholder. A claim launched for
    /// other pods that a placeholder was only counted against is theirs: it may be nominated
    /// after the rotation ended (a placeholder whose delete failed), when no record of the
    /// rotation is left to attribute it by.
    pub fn attribute(&mut self, claim: &str, surge_for: &str, launched: bool) {
        if let Some(c) = self.claims.get_mut(claim) {
            c.placeholders_for.insert(surge_for.to_string());
            if launched {
                self.surge_launched.insert(claim.to_string());
            }
        }
    }

    /// Karpenter's nomination of a placeholder to the claim launched for it ends when the pod
    /// is deleted or bound.
    pub fn forget_nomination(&mut self, placeholder: &str) {
        let key = (CONTROLLER_NS.to_string(), placeholder.to_string());
        for c in self.claims.values_mut() {
            c.nominated.remove(&key);
        }
    }

    pub fn request_provisioning(&mut self, pool: usize) {
        if self.provision_queued.insert(pool) {
            // Karpenter batches pending pods for about a second.
            let t = self.now() + Duration::seconds(1);
            self.at(t, Ev::Provision(pool));
        }
    }

    pub fn provisioning_done(&mut self, pool: usize) {
        self.provision_queued.remove(&pool);
    }

    /// A pod of `pool`'s workload started running: the eviction queue retries the pool's paced
    /// drains a second later (its retry and the PDB controller's status update).
    pub fn request_drain_step(&mut self, pool: usize) {
        if self.plan.pools[pool].pdb_max_unavailable.is_some()
            && self.drain_step_queued.insert(pool)
        {
            let t = self.now() + Duration::seconds(1);
            self.at(t, Ev::DrainStep(pool));
        }
    }

    pub fn drain_step_done(&mut self, pool: usize) {
        self.drain_step_queued.remove(&pool);
    }

    pub fn request_scheduling(&mut self) {
        if !self.schedule_queued {
            self.schedule_queued = true;
            let t = self.now();
            self.at(t, Ev::Schedule);
        }
    }

    pub fn scheduling_done(&mut self) {
        self.schedule_queued = false;
    }

    pub fn draw(&mut self, range: (Duration, Duration)) -> Duration {
        let (lo, hi) = range;
        let span = u64::try_from((hi - lo).num_milliseconds()).unwrap_or(0);
        lo + Duration::milliseconds(i64::try_from(self.rng.below(span + 1)).unwrap_or(0))
    }

    /// A world-fault draw of `class` about `key` ([`key`]) at its rate times `scale`; `false`
    /// without `--faults`. Hits are counted per class for the figures.
    pub fn fault(&mut self, class: WorldFault, key: u64, scale: f64) -> bool {
        let hit = self.faults.as_ref().is_some_and(|f| f.hits(class, key, scale));
        if hit {
            *self.metrics.world_faults.entry(class.name()).or_insert(0) += 1;
        }
        hit
    }

    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    pub fn pool_name(&self, pool: usize) -> &str {
        self.plan.pools.get(pool).map_or("", |p| p.name.as_str())
    }

    pub fn pool_index(&self, name: &str) -> Option<usize> {
        self.plan.pools.iter().position(|p| p.name == name)
    }

    // -- the fleet -----------------------------------------------------------------------------

    fn build_fleet(&mut self, mut rng: Rng) {
        let now = self.now();
        let plan = Arc::clone(&self.plan);
        for (i, p) in plan.pools.iter().enumerate() {
            let mut pool = NodePool::new(&p.name, NodePoolSpec::default());
            pool.metadata.labels = Some(p.labels.clone());
            let t = &mut pool.spec.template.spec;
            t.expire_after = Some(p.expire_after_go.clone());
            t.termination_grace_period.clone_from(&p.tgp_go);
            t.taints.clone_from(&p.taints);
            t.requirements = vec![
                NodeSelectorRequirement {
                    key: ARCH_LABEL.into(),
                    operator: "In".into(),
                    values: vec!["amd64".into()],
                    min_values: None,
                },
                NodeSelectorRequirement {
                    key: CAPACITY_TYPE_LABEL.into(),
                    operator: "In".into(),
                    values: vec!["on-demand".into()],
                    min_values: None,
                },
                NodeSelectorRequirement {
                    key: ZONE_LABEL.into(),
                    operator: "In".into(),
                    values: p.zones.clone(),
                    min_values: None,
                },
            ];
            if !p.limits.is_empty() {
                pool.spec.limits =
                    Some(p.limits.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect());
            }
            pool.spec.replicas = p.replicas;
            if let Err(e) = self.cluster.apply_pool(pool) {
                self.note(format!("cannot create pool {}: {e}", p.name));
            }
            let total = match p.replicas {
                Some(r) => u32::try_from(r.max(0)).unwrap_or(0),
                None => p.nodes + p.spare_nodes,
            };
            for n in 0..total {
                let age = match p.batch {
                    Some(batch) => {
                        let j = u64::try_from(p.jitter.num_milliseconds()).unwrap_or(0);
                        batch + Duration::milliseconds(i64::try_from(rng.below(j + 1)).unwrap_or(0))
                    }
                    None => {
                        let span =
                            u64::try_from((p.age_max - p.age_min).num_milliseconds()).unwrap_or(0);
                        p.age_min
                            + Duration::milliseconds(
                                i64::try_from(rng.below(span + 1)).unwrap_or(0),
                            )
                    }
                };
                let loaded = n < p.nodes;
                let zones = if loaded && !p.workload_zones.is_empty() {
                    &p.workload_zones
                } else {
                    &p.zones
                };
                let zone = zones[usize::try_from(n).unwrap_or(0) % zones.len()].clone();
                let name = self.new_claim(i, zone, now - age, false, false);
                self.launch(&name, now);
                self.register(&name, now);
                self.make_ready(&name, now);
                if loaded {
                    let node = self.claims.get(&name).map(|c| c.node.clone()).unwrap_or_default();
                    for _ in 0..p.pods_per_node {
                        let key = self.create_workload_pod(i);
                        self.bind_pod(&key, &node, now);
                    }
                }
            }
            self.update_pool_status(i);
        }
        for (i, policy) in plan.policies.iter().enumerate() {
            if let Err(e) = self.cluster.apply_policy(policy.clone()) {
                self.note(format!("cannot create policy #{i}: {e}"));
            }
        }
        for (i, step) in plan.script.iter().enumerate() {
            self.at(step.at, Ev::Operator(i));
        }
        // Shortages end: pending pods may provision again.
        for s in plan.shortages.clone() {
            if let Some(i) = self.pool_index(&s.pool) {
                self.at(s.until, Ev::Provision(i));
            }
        }
        self.notes.clear();
    }

    // -- object builders -----------------------------------------------------------------------

    /// Creates a NodeClaim (Karpenter's provisioning decision) and queues its expiry.
    /// The name [`World::new_claim`] gives the next claim of `pool`.
    pub fn next_claim_name(&self, pool: usize) -> String {
        format!("{}-{:05}", self.plan.pools[pool].name, self.names[pool] + 1)
    }

    pub fn new_claim(
        &mut self,
        pool: usize,
        zone: String,
        created: DateTime<Utc>,
        never_launch: bool,
        never_ready: bool,
    ) -> String {
        let plan = Arc::clone(&self.plan);
        let p = &plan.pools[pool];
        let name = self.next_claim_name(pool);
        self.names[pool] += 1;
        let seq = self.names[pool];
        let node = format!("ip-10-{pool}-{}-{}.internal", seq / 250, seq % 250 + 1);
        let labels = BTreeMap::from([
            (NODEPOOL_LABEL.to_string(), p.name.clone()),
            (ZONE_LABEL.to_string(), zone.clone()),
            (ARCH_LABEL.to_string(), "amd64".to_string()),
            (CAPACITY_TYPE_LABEL.to_string(), "on-demand".to_string()),
        ]);
        let mut requirements = vec![NodeSelectorRequirement {
            key: NODEPOOL_LABEL.into(),
            operator: "In".into(),
            values: vec![p.name.clone()],
            min_values: None,
        }];
        requirements.push(NodeSelectorRequirement {
            key: ZONE_LABEL.into(),
            operator: "In".into(),
            values: vec![zone.clone()],
            min_values: None,
        });
        let mut claim = NodeClaim::new(
            &name,
            NodeClaimSpec {
                requirements,
                expire_after: Some(p.expire_after_go.clone()),
                termination_grace_period: p.tgp_go.clone(),
            },
        );
        claim.metadata.labels = Some(labels);
        claim.metadata.finalizers = Some(vec![TERMINATION_FINALIZER.into()]);
        claim.metadata.creation_timestamp = Some(to_time(created));
        if let Err(e) = self.cluster.apply_claim(claim) {
            self.note(format!("cannot create claim {name}: {e}"));
        }
        let deadline = p.expire_after.duration().map(|e| created + e);
        let lane = {
            let lanes = &mut self.lanes[pool];
            match lanes.iter().position(Option::is_none) {
                Some(l) => {
                    lanes[l] = Some(name.clone());
                    l
                }
                None => {
                    lanes.push(Some(name.clone()));
                    lanes.len() - 1
                }
            }
        };
        self.claims.insert(
            name.clone(),
            ClaimSim {
                pool,
                node,
                zone,
                created,
                deadline,
                tgp: p.tgp,
                phase: Phase::Provisioning,
                deleting: None,
                never_launch,
                never_ready,
                status_lag: false,
                nominated: BTreeSet::new(),
                placeholders_for: BTreeSet::new(),
                lane,
                expired: false,
                paced: None,
            },
        );
        self.metrics.lifetimes.insert(
            name.clone(),
            Lifetime {
                pool,
                name: name.clone(),
                lane,
                created,
                gone: None,
                deadline,
                expired_at: None,
            },
        );
        self.metrics.claims_created += 1;
        if let Some(d) = deadline {
            self.at(d.max(self.now()), Ev::Expire(name.clone()));
        }
        name
    }

    /// The instance is running: providerID, capacity, billing starts.
    pub fn launch(&mut self, name: &str, now: DateTime<Utc>) {
        let Some(c) = self.claims.get_mut(name) else { return };
        if c.phase != Phase::Provisioning {
            return;
        }
        c.phase = Phase::Launched;
        let pool = c.pool;
        let provider = format!("aws:///{}/i-{:016x}", c.zone, fnv(name));
        let alloc = quantities(&self.plan.pools[pool].allocatable);
        let lag = self.fault(WorldFault::RegistrationLag, key(name, None), 1.0);
        if let Some(c) = self.claims.get_mut(name) {
            c.status_lag = lag;
        }
        self.cluster.update_claim(name, |cl| {
            let st = cl.status.get_or_insert_default();
            st.provider_id = Some(provider);
            st.allocatable = alloc;
            st.conditions = vec![condition("Launched", true, now)];
        });
        self.bill(pool, 1);
    }

    /// The kubelet registered the Node (not Ready yet).
    pub fn register(&mut self, name: &str, now: DateTime<Utc>) {
        let plan = Arc::clone(&self.plan);
        let Some(c) = self.claims.get_mut(name) else { return };
        if c.phase != Phase::Launched {
            return;
        }
        c.phase = Phase::Registered;
        let p = &plan.pools[c.pool];
        let node_name = c.node.clone();
        let zone = c.zone.clone();
        let pool = c.pool;
        let lag = c.status_lag;
        let provider = format!("aws:///{zone}/i-{:016x}", fnv(name));
        let labels = BTreeMap::from([
            (NODEPOOL_LABEL.to_string(), p.name.clone()),
            (ZONE_LABEL.to_string(), zone.clone()),
            (ARCH_LABEL.to_string(), "amd64".to_string()),
            (CAPACITY_TYPE_LABEL.to_string(), "on-demand".to_string()),
            (HOSTNAME_LABEL.to_string(), node_name.clone()),
            ("karpenter.sh/registered".to_string(), "true".to_string()),
        ]);
        let node = Node {
            metadata: ObjectMeta {
                name: Some(node_name.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider),
                taints: (!p.taints.is_empty()).then(|| p.taints.clone()),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(quantities(&p.allocatable)),
                capacity: Some(quantities(&p.allocatable)),
                conditions: Some(vec![node_condition(false, now)]),
                ..NodeStatus::default()
            }),
        };
        if let Err(e) = self.cluster.apply_node(node) {
            self.note(format!("cannot create node {node_name}: {e}"));
        }
        if !lag {
            self.cluster.update_claim(name, |cl| {
                let st = cl.status.get_or_insert_default();
                st.node_name = Some(node_name.clone());
                st.conditions.push(condition("Registered", true, now));
            });
        }
        self.nodes.insert(
            node_name,
            NodeSim { claim: name.to_string(), pool, ready: false, disrupted: false, zone },
        );
    }

    /// The Node turns Ready; the claim becomes Initialized and Ready; the DaemonSet pod lands.
    pub fn make_ready(&mut self, name: &str, now: DateTime<Utc>) {
        let Some(c) = self.claims.get_mut(name) else { return };
        if c.phase != Phase::Registered {
            return;
        }
        c.phase = Phase::Ready;
        let node_name = c.node.clone();
        let pool = c.pool;
        let lag = c.status_lag;
        self.cluster.update_node(&node_name, |n| {
            if let Some(st) = n.status.as_mut() {
                st.conditions = Some(vec![node_condition(true, now)]);
            }
        });
        if lag {
            // The claim catches up within 90 s; a placeholder may bind to the node meanwhile.
            let ms = self
                .faults
                .as_ref()
                .map_or(0, |f| f.below(WorldFault::RegistrationLag, key(name, None), 90_000));
            let at = now + Duration::milliseconds(i64::try_from(ms).unwrap_or(0) + 1);
            self.at(at, Ev::ClaimObserved(name.to_string()));
        } else {
            self.cluster.update_claim(name, |cl| {
                let st = cl.status.get_or_insert_default();
                st.conditions.push(condition("Initialized", true, now));
                st.conditions.push(condition("Ready", true, now));
            });
        }
        if let Some(n) = self.nodes.get_mut(&node_name) {
            n.ready = true;
        }
        // Ready capacity now: no longer a surge claim that may outlive its rotation (I20).
        self.surge_launched.remove(name);
        let key = self.create_daemonset_pod(pool, &node_name);
        self.bind_pod(&key, &node_name, now);
        self.watch_empty(&node_name);
    }

    /// `registration_lag`: Karpenter writes the status it held back (nodeName and the conditions
    /// of the phase the claim reached; the providerID came with the launch).
    pub fn observe_claim(&mut self, name: &str, now: DateTime<Utc>) -> Option<usize> {
        let c = self.claims.get_mut(name)?;
        if !std::mem::take(&mut c.status_lag) {
            return None;
        }
        let (pool, phase, node) = (c.pool, c.phase, c.node.clone());
        self.cluster.update_claim(name, |cl| {
            let st = cl.status.get_or_insert_default();
            if phase >= Phase::Registered {
                st.node_name = Some(node);
                st.conditions.push(condition("Registered", true, now));
            }
            if phase >= Phase::Ready {
                st.conditions.push(condition("Initialized", true, now));
                st.conditions.push(condition("Ready", true, now));
            }
        });
        Some(pool)
    }

    /// Karpenter's emptiness consolidation looks at `node` after `consolidateAfter`.
    pub fn watch_empty(&mut self, node: &str) {
        let Some(n) = self.nodes.get(node) else { return };
        if let Some(after) = self.plan.pools[n.pool].consolidate_after {
            let t = self.now() + after;
            self.at(t, Ev::EmptyCheck(node.to_string()));
        }
    }

    pub fn create_workload_pod(&mut self, pool: usize) -> PodKey {
        let plan = Arc::clone(&self.plan);
        let p = &plan.pools[pool];
        self.pod_seq += 1;
        let name = format!("{}-app-{:06}", p.name, self.pod_seq);
        let tolerations: Vec<Toleration> = p
            .taints
            .iter()
            .map(|t: &Taint| Toleration {
                key: Some(t.key.clone()),
                operator: Some("Exists".into()),
                effect: Some(t.effect.clone()),
                ..Toleration::default()
            })
            .collect();
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(APPS_NS.into()),
                labels: Some(BTreeMap::from([("app".to_string(), p.name.clone())])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: format!("{}-app", p.name),
                    uid: format!("rs-{}", p.name),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(quantities(&p.pod_requests)),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                node_selector: Some(BTreeMap::from([(NODEPOOL_LABEL.to_string(), p.name.clone())])),
                affinity: zone_affinity(&p.workload_zones),
                tolerations: (!tolerations.is_empty()).then_some(tolerations),
                priority: Some(0),
                ..PodSpec::default()
            }),
            status: Some(PodStatus { phase: Some("Pending".into()), ..PodStatus::default() }),
        };
        if let Err(e) = self.cluster.apply_pod(pod) {
            self.note(format!("cannot create pod {name}: {e}"));
        }
        let key = (APPS_NS.to_string(), name);
        let now = self.now();
        self.pods.insert(
            key.clone(),
            PodSim {
                pool,
                daemonset: false,
                requests: Arc::new(p.pod_requests.clone()),
                node: None,
                pending_since: Some(now),
                pending_settled: 0.0,
                marked_unschedulable: false,
            },
        );
        self.pending.insert(key.clone());
        key
    }

    fn create_daemonset_pod(&mut self, pool: usize, node: &str) -> PodKey {
        let plan = Arc::clone(&self.plan);
        let p = &plan.pools[pool];
        let name = format!("node-agent-{}", node.replace('.', "-"));
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(SYSTEM_NS.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "DaemonSet".into(),
                    name: "node-agent".into(),
                    uid: "ds-node-agent".into(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "agent".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(quantities(&p.daemonset)),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus { phase: Some("Pending".into()), ..PodStatus::default() }),
        };
        if let Err(e) = self.cluster.apply_pod(pod) {
            self.note(format!("cannot create pod {name}: {e}"));
        }
        let key = (SYSTEM_NS.to_string(), name);
        self.pods.insert(
            key.clone(),
            PodSim {
                pool,
                daemonset: true,
                requests: Arc::new(p.daemonset.clone()),
                node: None,
                pending_since: None,
                pending_settled: 0.0,
                marked_unschedulable: false,
            },
        );
        key
    }

    /// Binds a world pod and marks it Running; ends its pending time.
    pub fn bind_pod(&mut self, key: &PodKey, node: &str, now: DateTime<Utc>) {
        let Some(p) = self.pods.get_mut(key) else { return };
        p.node = Some(node.to_string());
        if let Some(since) = p.pending_since.take() {
            let secs = (now - since).num_milliseconds() as f64 / 1000.0;
            if let Some(acc) = self.metrics.pending_pod_seconds.get_mut(p.pool) {
                *acc += secs;
            }
            let spell = std::mem::take(&mut p.pending_settled) + secs;
            if let Some(longest) = self.metrics.longest_pending_seconds.get_mut(p.pool) {
                *longest = longest.max(spell);
            }
        }
        p.marked_unschedulable = false;
        let (pool, workload) = (p.pool, !p.daemonset);
        self.pending.remove(key);
        if workload {
            self.request_drain_step(pool);
        }
        self.node_pods.entry(node.to_string()).or_default().insert(key.clone());
        for c in self.claims.values_mut() {
            c.nominated.remove(key);
        }
        let node = node.to_string();
        self.cluster.update_pod(&key.0, &key.1, |pod| run_on(pod, node, now));
    }

    /// Removes a world pod from the store and the mirrors.
    pub fn remove_pod(&mut self, key: &PodKey) {
        if let Some(p) = self.pods.remove(key)
            && let Some(node) = &p.node
            && let Some(set) = self.node_pods.get_mut(node)
        {
            set.remove(key);
            if set.is_empty() {
                self.node_pods.remove(node);
            }
        }
        self.pending.remove(key);
        self.cluster.delete_now(&crate::cluster::ObjectRef::pod(&key.0, &key.1));
    }

    /// Billing: `delta` claims of `pool` started (+1) or stopped (-1) running.
    pub fn bill(&mut self, pool: usize, delta: i32) {
        let now = self.now();
        let base = f64::from(self.plan.pools[pool].base_count());
        let (count, since) = self.metrics.billed[pool];
        let above = (f64::from(count) - base).max(0.0);
        self.metrics.overlap_node_seconds[pool] +=
            above * (now - since).num_milliseconds() as f64 / 1000.0;
        let count = u32::try_from(i64::from(count) + i64::from(delta)).unwrap_or(0);
        self.metrics.billed[pool] = (count, now);
    }

    /// Frees a finished claim's lane and closes its lifetime.
    pub fn close_lifetime(&mut self, name: &str, now: DateTime<Utc>) {
        if let Some(c) = self.claims.get(name)
            && let Some(slot) = self.lanes[c.pool].get_mut(c.lane)
        {
            *slot = None;
        }
        if let Some(l) = self.metrics.lifetimes.get_mut(name) {
            l.gone = Some(now);
        }
    }

    /// Karpenter's `status.resources`: the capacity of every claim it holds (deleting ones
    /// too), and their count.
    pub fn pool_usage(&self, pool: usize) -> Resources {
        let mut used = Resources::new();
        let per_node = &self.plan.pools[pool].allocatable;
        let mut n: i128 = 0;
        for _ in self.claims.values().filter(|c| c.pool == pool) {
            add(&mut used, per_node);
            n += 1;
        }
        used.insert("nodes".into(), n * 1000);
        used
    }

    pub fn update_pool_status(&mut self, pool: usize) {
        let used = quantities(&self.pool_usage(pool));
        let name = self.pool_name(pool).to_string();
        let unchanged = self
            .cluster
            .pool(&name)
            .is_some_and(|p| p.status.as_ref().is_some_and(|s| s.resources == used));
        if !unchanged {
            self.cluster.update_pool(&name, |p| {
                p.status.get_or_insert_default().resources = used;
            });
        }
    }

    /// Closes the measurements at `now` (pending pods still waiting, overlap so far; a pod still
    /// Pending counts in the longest-Pending figure with its wait so far).
    pub fn settle_metrics(&mut self) {
        let now = self.now();
        for pool in 0..self.plan.pools.len() {
            self.bill(pool, 0);
        }
        let pending: Vec<PodKey> = self.pending.iter().cloned().collect();
        for key in pending {
            if let Some(p) = self.pods.get_mut(&key)
                && let Some(since) = p.pending_since
            {
                let secs = (now - since).num_milliseconds() as f64 / 1000.0;
                self.metrics.pending_pod_seconds[p.pool] += secs;
                p.pending_since = Some(now);
                p.pending_settled += secs;
                let longest = &mut self.metrics.longest_pending_seconds[p.pool];
                *longest = longest.max(p.pending_settled);
            }
        }
    }
}

/// FNV-1a: stable fake instance ids.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A required node affinity to `zones` (none when empty).
pub fn zone_affinity(zones: &[String]) -> Option<Affinity> {
    (!zones.is_empty()).then(|| Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![K8sRequirement {
                        key: ZONE_LABEL.into(),
                        operator: "In".into(),
                        values: Some(zones.to_vec()),
                    }]),
                    ..NodeSelectorTerm::default()
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    })
}
