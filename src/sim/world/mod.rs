//! The simulated cluster around the controller: a [`MemoryCluster`] on a [`VirtualClock`], the
//! actors' bookkeeping (claims, nodes, workload pods), a queue of timed world events, and the
//! measurements that only the world can take (pending-pod-seconds, overlap node-hours).
//!
//! The store is the truth. The actors keep mirrors of what only they write (a claim's phase, a
//! node's readiness, where workload pods run) so that a scheduling pass does not re-parse every
//! pod; anything the controller writes (cordon, annotations, placeholders) is read from the
//! store's snapshot ([`World::snap`]), refreshed after every step.
//!
//! One concern a file: `fleet.rs` (the starting fleet), `claims.rs` (a claim's life: created,
//! launched, registered, Ready), `pods.rs` (workload and DaemonSet pods, binding),
//! `accounting.rs` (billing, lifetimes, Karpenter's pool status, the settled measurements),
//! `reactions.rs` (what the world's controllers do about a step's changes) and `resources.rs`
//! (requests arithmetic); this file holds the state, its objects and the queue of
//! timed world events.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::gov::Gov;
use super::scenario::{Compiled, Resources};
use super::trace::Trace;
use super::world_faults::{WorldFault, WorldFaults};
use crate::clock::{Clock, VirtualClock};
use crate::cluster::memory::{MemoryCluster, Rng};
use crate::cluster::{CacheView, Cluster};

mod accounting;
mod claims;
mod fleet;
mod pods;
mod reactions;
mod resources;

pub(crate) use pods::run_on;
pub(crate) use resources::{add, fits, pod_requests, quantities, sub};

/// The controller's namespace (placeholders live here).
pub(crate) const CONTROLLER_NS: &str = "noderotation-system";
/// Workload pods.
pub(crate) const APPS_NS: &str = "apps";
/// DaemonSet pods.
pub(crate) const SYSTEM_NS: &str = "kube-system";
pub(crate) const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
pub(crate) const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub(crate) const ARCH_LABEL: &str = "kubernetes.io/arch";
pub(crate) const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
pub(crate) const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
pub(crate) const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
pub(crate) const TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// Node repair (`karpenter.nodeRepair`): a node NotReady this long is replaced.
pub(crate) const REPAIR_AFTER: Duration = Duration::minutes(30);
/// `buffer` of §3.2.
pub(crate) const BUFFER: Duration = Duration::minutes(2);

pub(crate) type PodKey = (String, String);

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
pub(crate) enum Ev {
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
pub(crate) enum Injected {
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
    /// The requests of each node's `node_pods` summed, kept with the set: the scheduler's free
    /// capacity of a node is its allocatable minus this, without a lookup per bound pod.
    pub node_requests: BTreeMap<String, Resources>,
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

impl World {
    pub fn new(plan: Arc<Compiled>, seed: u64, end: DateTime<Utc>, faults: bool) -> World {
        let clock = VirtualClock::new(plan.start);
        let cluster = MemoryCluster::new(Arc::new(clock.clone()), CONTROLLER_NS);
        cluster.see_whole_objects();
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
            node_requests: BTreeMap::new(),
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

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    // -- the event queue -----------------------------------------------------------------------

    pub(crate) fn at(&mut self, t: DateTime<Utc>, ev: Ev) {
        self.seq += 1;
        self.queue.insert((t, self.seq), ev);
    }

    pub(crate) fn next_time(&self) -> Option<DateTime<Utc>> {
        self.queue.keys().next().map(|(t, _)| *t)
    }

    pub(crate) fn pop(&mut self) -> Option<(DateTime<Utc>, Ev)> {
        self.queue.pop_first().map(|((t, _), ev)| (t, ev))
    }

    /// Karpenter launched `claim` for (`launched`), or nominated to it, the placeholder of the
    /// rotation `surge_for`: the world's record of what the claim is for. I19 accepts a reap of
    /// either; I20 bounds the life of the claims launched for a placeholder. A claim launched for
    /// other pods that a placeholder was only counted against is theirs: it may be nominated
    /// after the rotation ended (a placeholder whose delete failed), when no record of the
    /// rotation is left to attribute it by.
    pub(crate) fn attribute(&mut self, claim: &str, surge_for: &str, launched: bool) {
        if let Some(c) = self.claims.get_mut(claim) {
            c.placeholders_for.insert(surge_for.to_string());
            if launched {
                self.surge_launched.insert(claim.to_string());
            }
        }
    }

    /// Karpenter's nomination of a placeholder to the claim launched for it ends when the pod
    /// is deleted or bound.
    pub(crate) fn forget_nomination(&mut self, placeholder: &str) {
        let key = (CONTROLLER_NS.to_string(), placeholder.to_string());
        for c in self.claims.values_mut() {
            c.nominated.remove(&key);
        }
    }

    pub(crate) fn request_provisioning(&mut self, pool: usize) {
        if self.provision_queued.insert(pool) {
            // Karpenter batches pending pods for about a second.
            let t = self.now() + Duration::seconds(1);
            self.at(t, Ev::Provision(pool));
        }
    }

    pub(crate) fn provisioning_done(&mut self, pool: usize) {
        self.provision_queued.remove(&pool);
    }

    /// A pod of `pool`'s workload started running: the eviction queue retries the pool's paced
    /// drains a second later (its retry and the PDB controller's status update).
    pub(crate) fn request_drain_step(&mut self, pool: usize) {
        if self.plan.pools[pool].pdb_max_unavailable.is_some()
            && self.drain_step_queued.insert(pool)
        {
            let t = self.now() + Duration::seconds(1);
            self.at(t, Ev::DrainStep(pool));
        }
    }

    pub(crate) fn drain_step_done(&mut self, pool: usize) {
        self.drain_step_queued.remove(&pool);
    }

    pub(crate) fn request_scheduling(&mut self) {
        if !self.schedule_queued {
            self.schedule_queued = true;
            let t = self.now();
            self.at(t, Ev::Schedule);
        }
    }

    pub(crate) fn scheduling_done(&mut self) {
        self.schedule_queued = false;
    }

    pub(crate) fn draw(&mut self, range: (Duration, Duration)) -> Duration {
        let (lo, hi) = range;
        let span = u64::try_from((hi - lo).num_milliseconds()).unwrap_or(0);
        lo + Duration::milliseconds(i64::try_from(self.rng.below(span + 1)).unwrap_or(0))
    }

    /// A world-fault draw of `class` about `key` ([`key`](super::world_faults::key)) at its rate
    /// times `scale`; `false` without `--faults`. Hits are counted per class for the figures.
    pub(crate) fn fault(&mut self, class: WorldFault, key: u64, scale: f64) -> bool {
        let hit = self.faults.as_ref().is_some_and(|f| f.hits(class, key, scale));
        if hit {
            *self.metrics.world_faults.entry(class.name()).or_insert(0) += 1;
        }
        hit
    }

    pub(crate) fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    pub(crate) fn pool_name(&self, pool: usize) -> &str {
        self.plan.pools.get(pool).map_or("", |p| p.name.as_str())
    }

    pub(crate) fn pool_index(&self, name: &str) -> Option<usize> {
        self.plan.pools.iter().position(|p| p.name == name)
    }
}
