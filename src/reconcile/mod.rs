//! The reconciler: one non-blocking pass per NodePool, decided by the rules (spec §5.2–§5.4).
//!
//! [`Controller`] is synchronous and owns no threads: `noderotation run` drives it from a work
//! queue fed by watches (on a blocking thread), `simulate` and the tests drive it step by step
//! on a virtual clock. Both hand it the same [`Cluster`] interface.
//!
//! This file holds [`Controller`], its construction, governance and feasibility, and the pool
//! pass; by concern: `sweep.rs` (the sweep at leader start and on every tick), `status.rs` (the
//! RotationPolicy status view and the pool summaries), `gauges.rs` (the per-pool gauges and
//! the level-triggered warnings after a pass).
mod gauges;
mod known;
pub mod slots;
mod snapshot;
mod status;
pub(crate) mod summary;
mod sweep;
mod verbs;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};

use chrono::{DateTime, Duration, Utc};

use crate::clock::Clock;
use crate::cluster::{ApiError, CacheView, Cluster, ObjectKind, ObjectRef};
use crate::engine::{Engine, EngineError};
use crate::karpenter::NodePool;
use crate::policy::crd::{NodePoolStatus, RotationPolicy};
use crate::policy::feasibility;
use crate::policy::invalid::InvalidPolicy;
use crate::policy::resolve::{self, Governance, PolicySelector};
use crate::policy::settings::Effective;
use crate::telemetry::{Telemetry, WarningLatch};

use gauges::gauges;
pub(crate) use known::Known;
use snapshot::IndexCache;
pub(crate) use snapshot::{GovernanceView, PolicyView, Snapshot, SweepSubject};
use status::StatusKey;
pub use sweep::SweepReport;
use verbs::PassHost;
pub(crate) use verbs::release_patch;

/// Deployment-specific settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// Namespace of the controller; placeholder pods live here.
    pub namespace: String,
    /// The negative-priority, `preemptionPolicy: Never` class shipped with the manifests.
    pub priority_class: String,
    /// The placeholder's container image (a pause image).
    pub pause_image: String,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            namespace: "noderotation-system".into(),
            priority_class: "noderotation-placeholder".into(),
            pause_image: "registry.k8s.io/pause:3.10".into(),
        }
    }
}

/// Why a pass did not finish; the caller requeues with backoff, no later than
/// [`ReconcileError::requeue`].
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("pool {pool}: {source}")]
    Engine { pool: String, source: EngineError },
    #[error("pool {pool}: {source}")]
    Api { pool: String, source: ApiError },
    /// The runs of some rotation slots failed; every other slot of the pass ran to its end
    /// (one slot's failure is not the pool's, docs/decisions/parallel-rotations.md).
    #[error("pool {pool}: {}", slot_errors(.failed))]
    Slots {
        pool: String,
        /// Each failed slot and why, in slot order.
        failed: Vec<(usize, EngineError)>,
        /// The earliest requeue the slots that finished asked for (`None`: none finished).
        requeue: Option<Duration>,
    },
}

impl ReconcileError {
    /// When the slots of the pass that did finish asked to come back: a retry after the
    /// failure's backoff never postpones their work past it.
    pub fn requeue(&self) -> Option<Duration> {
        match self {
            ReconcileError::Slots { requeue, .. } => *requeue,
            ReconcileError::Engine { .. } | ReconcileError::Api { .. } => None,
        }
    }
}

fn slot_errors(failed: &[(usize, EngineError)]) -> String {
    let each: Vec<String> =
        failed.iter().map(|(slot, e)| format!("rotation slot {slot}: {e}")).collect();
    each.join("; ")
}

/// One announcement (metric + log line, or Event) made after a won write: what tests and the
/// simulation's at-most-once invariant read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub time: DateTime<Utc>,
    pub pool: String,
    pub claim: Option<String>,
    /// `emit:<signal>` or `event:<reason>`.
    pub what: String,
    /// The rule row that announced.
    pub row: String,
}

/// What a level-triggered warning is latched on (§4.3), beside its reason: the warning fires
/// once per key and reason until its condition is seen false.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Latched {
    /// A `warn_once` about no object of the cluster.
    Unnamed,
    /// A warning about the pool, a node or a pod.
    Object(ObjectRef),
    /// A pool's feasibility findings (`claim: None`) and its claims' short-lead findings: the
    /// pass over the pool raises them all again and re-arms the others.
    Finding { pool: String, claim: Option<String> },
    /// A warning about a claim (`warn_once`, `SurgeClamped`): forgotten with the claim.
    Claim(String),
}

impl Latched {
    /// The key of a warning about `object`.
    pub(crate) fn about(object: Option<ObjectRef>) -> Self {
        match object {
            Some(r) if r.kind == ObjectKind::NodeClaim && r.namespace.is_none() => {
                Latched::Claim(r.name)
            }
            Some(r) => Latched::Object(r),
            None => Latched::Unnamed,
        }
    }
}

impl std::fmt::Display for Latched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Latched::Unnamed => Ok(()),
            Latched::Object(r) => r.fmt(f),
            Latched::Finding { pool, claim: None } => write!(f, "{pool}|feasibility"),
            Latched::Finding { pool, claim: Some(c) } => write!(f, "{pool}|claim/{c}"),
            Latched::Claim(name) => write!(f, "{:?} {name}", ObjectKind::NodeClaim),
        }
    }
}

/// What passes share: the cluster, telemetry, dedup latches and the announcement log.
pub(crate) struct Ctx {
    pub cluster: Arc<dyn Cluster>,
    pub config: ControllerConfig,
    pub telemetry: Telemetry,
    pub latch: WarningLatch<(Latched, &'static str)>,
    pub announcements: Vec<Announcement>,
    /// Ids of every rule row that has fired in this process (tests list the ones that never did).
    pub coverage: BTreeSet<String>,
    /// Successful writes made by verbs.
    pub writes: u64,
    /// Why the last placeholder of a claim's rotation was not created (refused by the clamp,
    /// rejected by the API server), for its `RotationFailed` message; cleared when one is.
    pub placeholder_trouble: BTreeMap<String, String>,
    /// The versions this process last read fresh, for the conditional writes.
    pub known: Known,
}

/// The controller's state between passes: caches and dedup latches only, never decisions
/// (those live in annotations, so a restart loses nothing).
pub struct Controller {
    ctx: Ctx,
    clock: Arc<dyn Clock>,
    engine: Arc<Engine>,
    /// Policy views by policy name, keyed by (uid, generation, day) so the 53-week window
    /// horizon moves on daily.
    policies: HashMap<String, (PolicyKey, Result<Arc<PolicyView>, String>)>,
    /// Validation errors by policy name, keyed by (uid, generation), for the status view.
    #[allow(clippy::type_complexity)]
    validity: HashMap<String, ((String, Option<i64>), Option<Arc<InvalidPolicy>>)>,
    /// Each pool's governance, with the cached pool and policies it was resolved from.
    resolved: HashMap<String, (ResolvedKey, Governance)>,
    /// Feasibility by pool, keyed by what it depends on.
    assessments: HashMap<String, (AssessmentKey, Arc<feasibility::Assessment>)>,
    /// The cache's claims by pool and by node, rebuilt when the cache changes.
    index: IndexCache,
    /// Each pool's entry of its policy's status, with the cache version, day and window it was
    /// computed for: recomputed only when one of them moves.
    pool_status: HashMap<String, (StatusKey, NodePoolStatus)>,
}

impl Controller {
    pub fn new(
        cluster: Arc<dyn Cluster>,
        clock: Arc<dyn Clock>,
        engine: Arc<Engine>,
        config: ControllerConfig,
    ) -> Self {
        let ctx = Ctx {
            cluster,
            config,
            telemetry: Telemetry::new(),
            latch: WarningLatch::default(),
            announcements: Vec::new(),
            coverage: BTreeSet::new(),
            writes: 0,
            placeholder_trouble: BTreeMap::new(),
            known: Known::default(),
        };
        Controller {
            ctx,
            clock,
            engine,
            policies: HashMap::new(),
            validity: HashMap::new(),
            resolved: HashMap::new(),
            assessments: HashMap::new(),
            index: IndexCache::default(),
            pool_status: HashMap::new(),
        }
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.ctx.telemetry
    }

    pub fn announcements(&self) -> &[Announcement] {
        &self.ctx.announcements
    }

    /// Rule rows that fired at least once in this controller's life.
    pub fn coverage(&self) -> &BTreeSet<String> {
        &self.ctx.coverage
    }

    /// Successful writes made by verbs so far.
    pub fn writes(&self) -> u64 {
        self.ctx.writes
    }

    /// The warnings latched now, as `object reason` (tests: nothing of a gone object stays).
    pub fn latched_warnings(&self) -> Vec<String> {
        self.ctx.latch.keys().map(|(object, reason)| format!("{object} {reason}")).collect()
    }

    /// The lanes `maxUnavailable: auto` chose for `pool` at its last pass (`None` for a fixed
    /// value or a pool not passed yet): what `simulate` reports as the N in use.
    pub fn lanes_chosen(&self, pool: &str) -> Option<usize> {
        let (_, a) = self.assessments.get(pool)?;
        a.derived.lanes_limit.map(|_| a.derived.lanes)
    }

    fn policy_view(
        &mut self,
        policy: &RotationPolicy,
        now: DateTime<Utc>,
    ) -> Result<Arc<PolicyView>, String> {
        let name = policy.metadata.name.as_deref().unwrap_or_default();
        let uid = policy.metadata.uid.as_deref().unwrap_or("");
        let generation = policy.metadata.generation.unwrap_or(0);
        let day = now.date_naive();
        if let Some(((u, g, d), v)) = self.policies.get(name)
            && (u.as_str(), *g, *d) == (uid, generation, day)
        {
            return v.clone();
        }
        let name = name.to_string();
        let revision = format!("{uid}/{generation}");
        let key = (uid.to_string(), generation, day);
        let view = Effective::from_spec(&policy.spec)
            .map(|settings| {
                let period = settings.schedule.period(now);
                let open = crate::policy::lookahead::OpenTime::of(&settings.schedule, now);
                let lookahead = Default::default();
                Arc::new(PolicyView {
                    name: name.clone(),
                    revision,
                    settings,
                    period,
                    open,
                    lookahead,
                    window: Default::default(),
                })
            })
            .map_err(|e| e.to_string());
        self.policies.insert(name, (key, view.clone()));
        view
    }

    fn governance(
        &mut self,
        cache: &CacheView,
        pool: &Arc<NodePool>,
        now: DateTime<Utc>,
    ) -> GovernanceView {
        match self.resolved(cache, pool) {
            Governance::Governed { policy, .. } => match cache.policies.get(&policy) {
                Some(p) => match self.policy_view(p, now) {
                    Ok(view) => GovernanceView::Governed(view),
                    Err(e) => GovernanceView::Invalid(e),
                },
                None => GovernanceView::Ungoverned,
            },
            Governance::Conflict { policies, .. } => GovernanceView::Conflict(policies),
            Governance::Ungoverned => GovernanceView::Ungoverned,
        }
    }

    /// Which policy governs `pool` ([`resolve::resolve`]), kept while the pool and the policies
    /// are the same cached objects: it reads only their labels and selectors.
    fn resolved(&mut self, cache: &CacheView, pool: &Arc<NodePool>) -> Governance {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let same = |key: &ResolvedKey| {
            key.pool.upgrade().is_some_and(|p| Arc::ptr_eq(&p, pool))
                && key.policies.len() == cache.policies.len()
                && (key.policies.iter().zip(cache.policies.values()))
                    .all(|(k, p)| k.upgrade().is_some_and(|k| Arc::ptr_eq(&k, p)))
        };
        if let Some((key, governance)) = self.resolved.get(name)
            && same(key)
        {
            return governance.clone();
        }
        let none = BTreeMap::new();
        let labels = pool.metadata.labels.as_ref().unwrap_or(&none);
        let governance = resolve::resolve(&policy_selectors(cache), labels);
        let key = ResolvedKey {
            pool: Arc::downgrade(pool),
            policies: cache.policies.values().map(Arc::downgrade).collect(),
        };
        self.resolved.insert(name.to_string(), (key, governance.clone()));
        governance
    }

    /// Feasibility of the pool; `nodes` is `N` ([`Snapshot::pool_nodes`]), `short_limits` the
    /// resources of `spec.limits` with less than one of its nodes' worth left. Cached until the
    /// policy (its revision: an edit of maxUnavailable changes the lanes at once), the pool, the
    /// day or what the pool's facts say moves.
    fn assessment(
        &mut self,
        pool: &NodePool,
        policy: &PolicyView,
        nodes: usize,
        short_limits: Vec<String>,
        now: DateTime<Utc>,
    ) -> Arc<feasibility::Assessment> {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let (generation, day, replicas) =
            (pool.metadata.generation, now.date_naive(), pool.spec.replicas);
        if let Some((k, v)) = self.assessments.get(name)
            && (k.policy.as_str(), k.revision.as_str()) == (&policy.name, &policy.revision)
            && (k.generation, k.day, k.nodes, k.replicas) == (generation, day, nodes, replicas)
            && k.short_limits == short_limits
        {
            return v.clone();
        }
        let name = name.to_string();
        let key = AssessmentKey {
            policy: policy.name.clone(),
            revision: policy.revision.clone(),
            generation,
            day,
            nodes,
            short_limits: short_limits.clone(),
            replicas,
        };
        let facts = feasibility::PoolFacts {
            expire_after: pool
                .expire_after()
                .unwrap_or(crate::policy::duration::ExpireAfter::Never),
            termination_grace_period: pool.termination_grace_period().ok().flatten(),
            nodes: Some(nodes as u64),
            exhausted_limits: short_limits,
            static_pool: pool.is_static(),
        };
        let assessment = Arc::new(feasibility::assess(&policy.settings, &facts, now));
        self.assessments.insert(name, (key, assessment.clone()));
        assessment
    }

    fn snapshot(
        &mut self,
        cache: Arc<CacheView>,
        pool: Arc<NodePool>,
        now: DateTime<Utc>,
    ) -> Snapshot {
        let mut snap = self.prepared(cache, pool, now);
        snap.select_candidates();
        snap
    }

    /// A pool's snapshot with its governance, feasibility and lanes, candidates not selected.
    fn prepared(
        &mut self,
        cache: Arc<CacheView>,
        pool: Arc<NodePool>,
        now: DateTime<Utc>,
    ) -> Snapshot {
        let governance = self.governance(&cache, &pool, now);
        let index = self.index.of(&cache);
        let snap = Snapshot::for_pool(now, cache, index, pool, governance);
        let Some((policy, pool)) = snap.policy().cloned().zip(snap.pool.as_ref()) else {
            return snap;
        };
        let nodes = snap.pool_nodes();
        let short = pool.limits_without_room_for(snap.node_worth());
        let assessment = self.assessment(pool, &policy, nodes, short, now);
        snap.assessed(assessment)
    }

    /// One pass over a pool; returns when to come back (zero: the pool is gone).
    pub fn reconcile_pool(&mut self, pool: &str) -> Result<Duration, ReconcileError> {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        let Some(np) = cache.pools.get(pool).cloned() else {
            self.ctx.telemetry.forget_pool(pool);
            return Ok(Duration::zero());
        };
        let snap = self.snapshot(cache, np, now);
        // Governed pools, and pools whose policies tie (their conflict gauge is 1), report
        // gauges; the series of ungoverned or invalid pools are removed (§4.2).
        let governed =
            snap.policy().is_some() || matches!(snap.governance, GovernanceView::Conflict(_));
        let engine = self.engine.clone();
        // One run of the rules per rotation slot (docs/decisions/parallel-rotations.md): every
        // anchored slot, then a free one while fewer than `lanes` are anchored. Each run sees
        // the pool through its slot's lens and this pass's earlier writes; with one lane it is
        // the single run over slot 0, as before slots existed.
        // Each slot's run is isolated: an error ends that run only (a placeholder an admission
        // webhook rejects, a pod list that times out), the next slot runs on the pass's copy
        // with what the earlier runs wrote, and the errors are reported after the last run.
        let slots =
            snap.pool.as_ref().map_or(vec![0], |p| slots::to_run(&p.metadata, snap.lanes()));
        let ran = slots.len();
        let mut snap = snap;
        let mut requeue: Option<Duration> = None;
        let mut failed: Vec<(usize, EngineError)> = Vec::new();
        let last = slots.len().saturating_sub(1);
        for (i, slot) in slots.into_iter().enumerate() {
            let mut host = PassHost::through_lens(snap, &mut self.ctx, slot);
            // Only a start reads `pick`: the free slot runs last, after the earlier runs' writes.
            if i == last {
                host.snap.select_candidates();
            }
            let pass = engine.run(&mut host);
            snap = host.into_snapshot();
            match pass {
                Ok(pass) => requeue = Some(requeue.map_or(pass.requeue, |r| r.min(pass.requeue))),
                Err(source) => {
                    tracing::warn!(nodepool = %pool, slot, error = %source, "rotation slot's run failed");
                    failed.push((slot, source));
                }
            }
        }
        self.forget_gone_claims(&snap);
        if governed {
            // Gauges describe the pool after this pass's writes (a started claim is no longer
            // a candidate).
            snap.select_candidates();
            self.ctx.telemetry.set_pool_gauges(pool, &gauges(&snap));
            self.level_warnings(&snap);
        } else {
            self.ctx.telemetry.forget_pool(pool);
        }
        let pool = pool.to_string();
        match failed.len() {
            0 => Ok(requeue.unwrap_or_else(|| Duration::minutes(1))),
            // The single run of the pass (one slot): the error as it always was.
            1 if ran == 1 => {
                let (_, source) = failed.remove(0);
                Err(ReconcileError::Engine { pool, source })
            }
            _ => Err(ReconcileError::Slots { pool, failed, requeue }),
        }
    }

    /// Drops what the controller remembers about claims that no longer exist: their warning
    /// latches (which would otherwise grow for the life of the process) and placeholder
    /// trouble. Claim-scoped latch keys ([`Latched::Claim`]) sort last: one range of the latch.
    fn forget_gone_claims(&mut self, snap: &Snapshot) {
        use std::ops::Bound;
        let range = (Bound::Included((Latched::Claim(String::new()), "")), Bound::Unbounded);
        self.ctx.latch.retain_range(range, |(latched, _)| match latched {
            Latched::Claim(name) => snap.claim(name).is_some(),
            _ => true,
        });
        self.ctx.placeholder_trouble.retain(|name, _| snap.claim(name).is_some());
    }
}

/// What a [`PolicyView`] is built from besides the policy's name: its uid, generation and the
/// day (the 53-week window horizon moves on daily).
type PolicyKey = (String, i64, chrono::NaiveDate);

/// The cached objects a pool's governance was resolved from (a `Weak` keeps an address from
/// being reused: the same allocation is the same, unchanged object).
struct ResolvedKey {
    pool: Weak<NodePool>,
    policies: Vec<Weak<RotationPolicy>>,
}

/// What a pool's feasibility is assessed from besides its name.
struct AssessmentKey {
    policy: String,
    revision: String,
    generation: Option<i64>,
    day: chrono::NaiveDate,
    nodes: usize,
    short_limits: Vec<String>,
    replicas: Option<i64>,
}

/// Every cached RotationPolicy's name and selector, as policy resolution reads them.
fn policy_selectors(cache: &CacheView) -> Vec<PolicySelector<'_>> {
    cache
        .policies
        .values()
        .map(|p| PolicySelector {
            name: p.metadata.name.as_deref().unwrap_or(""),
            selector: &p.spec.node_pool_selector,
        })
        .collect()
}
