//! The reconciler: one non-blocking pass per NodePool, decided by the rules (spec §5.2–§5.4).
//!
//! [`Controller`] is synchronous and owns no threads: `noderotation run` drives it from a work
//! queue fed by watches (on a blocking thread), `simulate` and the tests drive it step by step
//! on a virtual clock. Both hand it the same [`Cluster`] interface.
mod known;
pub mod slots;
mod snapshot;
pub mod summary;
mod verbs;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};

use chrono::{DateTime, Duration, Utc};

use crate::clock::Clock;
use crate::cluster::{ApiError, CacheView, Cluster, ObjectKind, ObjectRef, resource_version};
use crate::engine::{Engine, EngineError, Handler, Key, ReportTag};
use crate::karpenter::NodePool;
use crate::policy::crd::{NodePoolStatus, RotationPolicy, RotationPolicyStatus};
use crate::policy::feasibility;
use crate::policy::invalid::InvalidPolicy;
use crate::policy::resolve::{self, Governance, PolicySelector, PoolView, StatusInputs};
use crate::policy::settings::Effective;
use crate::telemetry::{Telemetry, WarningLatch};

pub use known::Known;
use known::{Lookup, Seen};
use snapshot::IndexCache;
use snapshot::annotation;
pub use snapshot::{
    BUFFER, ClaimIndex, DEFAULT_TGP, GovernanceView, PolicyView, Snapshot, SweepSubject,
};
use verbs::PassHost;
pub use verbs::release_patch;

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

/// Reads of one pool's anchor a sweep makes before it gives up (transient errors only).
const ANCHOR_READS: usize = 3;

/// What a sweep (§5.3, at leader start and on every tick) did, for the log and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub placeholders_deleted: Vec<String>,
    pub nodes_released: Vec<String>,
    pub claims_failed: Vec<String>,
    pub pools_cleaned: Vec<String>,
    pub errors: Vec<String>,
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

/// What passes share: the cluster, telemetry, dedup latches and the announcement log.
pub struct Ctx {
    pub cluster: Arc<dyn Cluster>,
    pub config: ControllerConfig,
    pub telemetry: Telemetry,
    pub latch: WarningLatch,
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
    policies: HashMap<String, (String, Result<Arc<PolicyView>, String>)>,
    /// Validation errors by policy name, keyed by (uid, generation), for the status view.
    #[allow(clippy::type_complexity)]
    validity: HashMap<String, ((String, Option<i64>), Option<Arc<InvalidPolicy>>)>,
    /// Feasibility by pool, keyed by what it depends on.
    assessments: HashMap<String, (String, Arc<feasibility::Assessment>)>,
    /// The cache's claims by pool and by node, rebuilt when the cache changes.
    index: IndexCache,
    /// Each pool's entry of its policy's status, with the cache version, day and window it was
    /// computed for: recomputed only when one of them moves.
    pool_status: HashMap<String, (StatusKey, NodePoolStatus)>,
}

/// What a pool's status entry depends on: the cache version (the pool, its claims, the
/// policies), the day (the policy view's window horizon), and the window open now or next.
#[derive(Debug, Clone)]
struct StatusKey {
    cache: Weak<CacheView>,
    day: chrono::NaiveDate,
    window: Option<crate::policy::window::Occurrence>,
}

impl StatusKey {
    fn matches(
        &self,
        cache: &Arc<CacheView>,
        day: chrono::NaiveDate,
        window: Option<crate::policy::window::Occurrence>,
    ) -> bool {
        std::ptr::eq(self.cache.as_ptr(), Arc::as_ptr(cache))
            && self.cache.strong_count() > 0
            && self.day == day
            && self.window == window
    }
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
        let name = policy.metadata.name.clone().unwrap_or_default();
        let revision = format!(
            "{}/{}",
            policy.metadata.uid.as_deref().unwrap_or(""),
            policy.metadata.generation.unwrap_or(0)
        );
        let key = format!("{revision}/{}", now.date_naive());
        if let Some((k, v)) = self.policies.get(&name)
            && *k == key
        {
            return v.clone();
        }
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
                })
            })
            .map_err(|e| e.to_string());
        self.policies.insert(name, (key, view.clone()));
        view
    }

    /// The policy's validation errors, once per (uid, generation): parsing every policy's
    /// windows on every status pass would dominate it with many policies.
    fn validity(&mut self, policy: &RotationPolicy) -> Option<Arc<InvalidPolicy>> {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let key = (policy.metadata.uid.clone().unwrap_or_default(), policy.metadata.generation);
        if let Some((k, v)) = self.validity.get(&name)
            && *k == key
        {
            return v.clone();
        }
        let invalid = Effective::from_spec(&policy.spec).err().map(Arc::new);
        self.validity.insert(name, (key, invalid.clone()));
        invalid
    }

    fn governance(
        &mut self,
        cache: &CacheView,
        pool: &NodePool,
        now: DateTime<Utc>,
    ) -> GovernanceView {
        let selectors = policy_selectors(cache);
        let labels = pool.metadata.labels.clone().unwrap_or_default();
        match resolve::resolve(&selectors, &labels) {
            Governance::Governed { policy, .. } => match cache.policies.get(&policy) {
                Some(p) => {
                    let p = p.clone();
                    match self.policy_view(&p, now) {
                        Ok(view) => GovernanceView::Governed(view),
                        Err(e) => GovernanceView::Invalid(e),
                    }
                }
                None => GovernanceView::Ungoverned,
            },
            Governance::Conflict { policies, .. } => GovernanceView::Conflict(policies),
            Governance::Ungoverned => GovernanceView::Ungoverned,
        }
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
        let name = pool.metadata.name.clone().unwrap_or_default();
        let key = format!(
            "{}/{}/{:?}/{}/{nodes}/{:?}/{:?}",
            policy.name,
            policy.revision,
            pool.metadata.generation,
            now.date_naive(),
            short_limits,
            pool.spec.replicas
        );
        if let Some((k, v)) = self.assessments.get(&name)
            && *k == key
        {
            return v.clone();
        }
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

    fn snapshot(&mut self, cache: Arc<CacheView>, pool: NodePool, now: DateTime<Utc>) -> Snapshot {
        let mut snap = self.prepared(cache, pool, now);
        snap.select_candidates();
        snap
    }

    /// A pool's snapshot with its governance, feasibility and lanes, candidates not selected.
    fn prepared(&mut self, cache: Arc<CacheView>, pool: NodePool, now: DateTime<Utc>) -> Snapshot {
        let governance = self.governance(&cache, &pool, now);
        let index = self.index.of(&cache);
        let namespace = self.ctx.config.namespace.clone();
        let snap = Snapshot::for_pool(now, cache, index, namespace, pool, governance);
        let Some((policy, pool)) = snap.policy().cloned().zip(snap.pool.as_ref()) else {
            return snap;
        };
        let nodes = snap.pool_nodes();
        let short = pool.limits_without_room_for(&snap.node_worth());
        let assessment = self.assessment(pool, &policy, nodes, short, now);
        snap.assessed(assessment)
    }

    /// What the pool looks like to the controller now (read-only; no rule runs):
    /// [`summary::PoolSummary`]. `None` when the pool is not in the cache.
    pub fn pool_summary(&mut self, pool: &str) -> Option<summary::PoolSummary> {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        self.summary_of(&cache, pool, now)
    }

    /// [`Controller::pool_summary`] of every cached pool, by name.
    pub fn pool_summaries(&mut self) -> Vec<summary::PoolSummary> {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        let names: Vec<String> = cache.pools.keys().cloned().collect();
        names.iter().filter_map(|p| self.summary_of(&cache, p, now)).collect()
    }

    fn summary_of(
        &mut self,
        cache: &Arc<CacheView>,
        pool: &str,
        now: DateTime<Utc>,
    ) -> Option<summary::PoolSummary> {
        let np = cache.pools.get(pool)?.as_ref().clone();
        let labels = np.metadata.labels.clone().unwrap_or_default();
        let resolved = resolve::resolve(&policy_selectors(cache), &labels);
        let snap = self.prepared(cache.clone(), np, now);
        let governance = match (&snap.governance, resolved) {
            (GovernanceView::Governed(p), _) => {
                summary::GovernanceSummary::Ready { policy: p.name.clone() }
            }
            (GovernanceView::Conflict(policies), _) => {
                summary::GovernanceSummary::Conflict { policies: policies.clone() }
            }
            (GovernanceView::Invalid(message), Governance::Governed { policy, .. }) => {
                summary::GovernanceSummary::Invalid { policy, message: message.clone() }
            }
            (GovernanceView::Invalid(_) | GovernanceView::Ungoverned, _) => {
                summary::GovernanceSummary::Ungoverned
            }
        };
        Some(summary::of(&snap, governance))
    }

    /// The pool's entry of its governing policy's status (`view` is that policy's), recomputed
    /// only when the cache, the day or the window open now or next moved.
    fn pool_status(
        &mut self,
        cache: &Arc<CacheView>,
        pool: &str,
        view: &PolicyView,
        now: DateTime<Utc>,
    ) -> Option<NodePoolStatus> {
        let schedule = &view.settings.schedule;
        // Open 24/7, what is due follows the clock: no window edge to key it on.
        let window = summary::current_or_next(schedule, now);
        let keyed = !schedule.is_always_open();
        if keyed
            && let Some((key, status)) = self.pool_status.get(pool)
            && key.matches(cache, now.date_naive(), window)
        {
            return Some(status.clone());
        }
        let status = self.summary_of(cache, pool, now)?.status();
        let key = StatusKey { cache: Arc::downgrade(cache), day: now.date_naive(), window };
        self.pool_status.insert(pool.to_string(), (key, status.clone()));
        Some(status)
    }

    /// One pass over a pool; returns when to come back (zero: the pool is gone).
    pub fn reconcile_pool(&mut self, pool: &str) -> Result<Duration, ReconcileError> {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        let Some(np) = cache.pools.get(pool).map(|p| p.as_ref().clone()) else {
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
            if let Some(p) = snap.pool.as_mut() {
                slots::swap_meta(&mut p.metadata, slot);
            }
            // Only a start reads `pick`: the free slot runs last, after the earlier runs' writes.
            if i == last {
                snap.select_candidates();
            }
            let mut host = PassHost::for_slot(snap, &mut self.ctx, slot);
            let pass = engine.run(&mut host);
            snap = host.snap;
            if let Some(p) = snap.pool.as_mut() {
                slots::swap_meta(&mut p.metadata, slot);
            }
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
    /// trouble. Claim-scoped latch keys are `NodeClaim <name>`: one range of the latch.
    fn forget_gone_claims(&mut self, snap: &Snapshot) {
        let prefix = "NodeClaim ";
        let range = (prefix.to_string(), String::new())..("NodeClaim!".to_string(), String::new());
        self.ctx.latch.retain_range(range, |(object, _)| {
            object.strip_prefix(prefix).is_none_or(|name| snap.claim(name).is_some())
        });
        self.ctx.placeholder_trouble.retain(|name, _| snap.claim(name).is_some());
    }

    /// The §5.3 start-up sweep. Run once per leadership, before the first `reconcile_pool`:
    /// cleans only markers no anchor refers to; per-item errors are logged, never fatal.
    pub fn startup_sweep(&mut self) -> SweepReport {
        // Another process may have led meanwhile: what this one read before proves nothing.
        self.ctx.known.clear();
        let report = self.sweep();
        tracing::info!(?report, "start-up sweep done");
        report
    }

    /// The periodic work between pool passes (the 1-minute tick of `noderotation run` and of
    /// the simulation's driver): the RotationPolicy status view, and the sweep's orphan checks
    /// again, so that what no anchor refers to any more is repaired within a tick rather than at
    /// the next leader start: an anchor removed by hand (`kubectl annotate`, `kubectl replace`,
    /// a GitOps sync with `Replace=true`), a NodePool deleted mid-rotation, markers a pass could
    /// not reach.
    pub fn tick(&mut self) -> SweepReport {
        self.update_policy_status();
        let cache = self.ctx.cluster.cache();
        self.ctx.known.retain(|r| match r.kind {
            ObjectKind::NodePool => cache.pools.get(&r.name).map(|p| resource_version(&p.metadata)),
            ObjectKind::NodeClaim => {
                cache.claims.get(&r.name).map(|c| resource_version(&c.metadata))
            }
            ObjectKind::Node => cache.nodes.get(&r.name).map(|n| resource_version(&n.metadata)),
            _ => None,
        });
        let report = self.sweep();
        if report != SweepReport::default() {
            tracing::info!(?report, "orphans repaired");
        }
        report
    }

    /// The sweep's rows over every object that can carry one of our markers: placeholder pods,
    /// nodes with `surge-for`, `do-not-disrupt-owned` or `cordoned`, claims `pending` or
    /// `draining` (no sweep row acts on another state: `none`, `failed`, `expired`) or with a
    /// `launched-for` that never initialized (seen with the governance of their pool, whose
    /// readyTimeout they are held to), and every pool.
    ///
    /// The anchor set is read fresh, pool by pool, after the cached view that lists the
    /// subjects: every marker in that view was written after the anchor it belongs to, so a
    /// marker whose anchor the fresh read does not show is an orphan, however far the cache lags
    /// the pools. A pool that is gone has no anchor. If an anchor cannot be read, nothing is
    /// swept (the next tick tries again): an unknown anchor set could make a live marker look
    /// orphaned. A cached pool at the version this process last read fresh, unwritten since
    /// ([`Known`]), stands in for its fresh read: it shows every anchor this process wrote.
    fn sweep(&mut self) -> SweepReport {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        let index = self.index.of(&cache);
        let mut report = SweepReport::default();
        // Pools are visited first; their subjects (a copy of the pool per slot) are built only
        // once the sweep knows it has something to visit.
        let mut subjects: Vec<(Handler, SweepSubject, Option<NodePool>, usize)> = Vec::new();
        // The governance of the pool of each surge claim the sweep may reap (its readyTimeout).
        let mut governance: BTreeMap<String, GovernanceView> = BTreeMap::new();
        for (name, c) in &cache.claims {
            // A surge claim that never initialized (docs/decisions/reap-attribution.md): the
            // sweep reaps it once its rotation is over.
            let surge = annotation(&c.metadata, Key::LaunchedFor).is_some()
                && !c.is_initialized()
                && !c.is_deleting();
            if surge && let Some(pool) = c.node_pool().and_then(|p| cache.pools.get(p)) {
                let view = self.governance(&cache, pool, now);
                governance.insert(name.clone(), view);
            }
            // Only a claim some sweep row can act on: `failed` and `expired` keep their
            // annotations (row `sweep_claim_kept`), so a fleet with a failure in its history
            // does not read every pool's anchor on every tick for them.
            let in_flight =
                matches!(annotation(&c.metadata, Key::State), Some("pending" | "draining"));
            if surge || in_flight {
                subjects.push((Handler::SweepClaim, SweepSubject::Claim(name.clone()), None, 0));
            }
        }
        let ours = Key::ALL.iter().copied().filter(|k| k.is_ours() && k.on_nodes());
        for (name, n) in &cache.nodes {
            if ours.clone().any(|k| annotation(&n.metadata, k).is_some()) {
                subjects.push((Handler::SweepNode, SweepSubject::Node(name.clone()), None, 0));
            }
        }
        for (name, pod) in &cache.placeholders {
            let ns =
                pod.metadata.namespace.clone().unwrap_or_else(|| self.ctx.config.namespace.clone());
            subjects.push((Handler::SweepPod, SweepSubject::Pod(ns, name.clone()), None, 0));
        }
        let marked = |p: &NodePool| !slots::sweepable(&p.metadata).is_empty();
        if subjects.is_empty() && !cache.pools.values().any(|p| marked(p)) {
            return report;
        }
        let mut pools = Vec::new();
        for (name, p) in &cache.pools {
            // Slot 0 always; another slot only where a key the pool's sweep rows clear is set
            // (a pool with many slots holds many keys).
            let leftover = slots::sweepable(&p.metadata);
            let visit = std::iter::once(0).chain(leftover.into_iter().filter(|s| *s != 0));
            for slot in visit {
                let mut pool = p.as_ref().clone();
                slots::swap_meta(&mut pool.metadata, slot);
                pools.push((
                    Handler::SweepPool,
                    SweepSubject::Pool(name.clone()),
                    Some(pool),
                    slot,
                ));
            }
        }
        pools.append(&mut subjects);
        let subjects = pools;
        let mut anchors = BTreeSet::new();
        for (name, cached) in &cache.pools {
            let target = ObjectRef::cluster(ObjectKind::NodePool, name.clone());
            // The cached pool at the version this process last read fresh, unwritten since, has
            // every anchor a fresh read would show but for what others changed unwatched (an
            // anchor removed by hand is then swept a tick later).
            match self.ctx.known.lookup(&target, Some(&cached.metadata)) {
                Lookup::Cached => {
                    add_anchors(&cache, cached, &mut anchors);
                    continue;
                }
                Lookup::Copy(Seen::Pool(own)) => {
                    add_anchors(&cache, own, &mut anchors);
                    continue;
                }
                Lookup::Copy(_) | Lookup::Untouched | Lookup::Fresh => {}
            }
            // A transient error is retried at once (a skipped sweep waits a whole tick).
            let mut read = self.ctx.cluster.get_pool(name);
            for _ in 1..ANCHOR_READS {
                if !matches!(read, Err(ApiError::Transient(_))) {
                    break;
                }
                read = self.ctx.cluster.get_pool(name);
            }
            let pool = match read {
                Ok(pool) => pool,
                Err(e) => {
                    tracing::warn!(nodepool = %name, error = %e, "sweep skipped: anchor not read");
                    report.errors.push(format!("NodePool {name}: anchor not read: {e}"));
                    return report;
                }
            };
            let seen = pool.clone().map(|p| Seen::Pool(Arc::new(p)));
            self.ctx.known.read(target, seen, resource_version(&cached.metadata));
            let Some(pool) = pool else { continue };
            add_anchors(&cache, &pool, &mut anchors);
        }
        let anchors = Arc::new(anchors);
        for (handler, subject, pool, slot) in subjects {
            let label = match &subject {
                SweepSubject::Pool(n)
                | SweepSubject::Claim(n)
                | SweepSubject::Node(n)
                | SweepSubject::Pod(_, n) => n.clone(),
            };
            let governed = match &subject {
                SweepSubject::Claim(n) => governance.remove(n),
                _ => None,
            };
            let snap = Snapshot::for_sweep(
                now,
                cache.clone(),
                index.clone(),
                self.ctx.config.namespace.clone(),
                pool,
                governed.unwrap_or(GovernanceView::Ungoverned),
                subject,
                anchors.clone(),
            );
            let mut host = PassHost::for_slot(snap, &mut self.ctx, slot);
            match self.engine.run_from(handler, &mut host) {
                Ok(pass) => {
                    for tag in pass.reports {
                        let line = match tag {
                            ReportTag::PlaceholderDeleted => &mut report.placeholders_deleted,
                            ReportTag::NodeReleased => &mut report.nodes_released,
                            ReportTag::ClaimFailed => &mut report.claims_failed,
                            ReportTag::PoolCleaned => &mut report.pools_cleaned,
                        };
                        line.push(label.clone());
                    }
                }
                Err(e) => {
                    tracing::warn!(subject = %label, error = %e, "sweep item failed");
                    report.errors.push(format!("{label}: {e}"));
                }
            }
        }
        report
    }

    /// Level-triggered warnings of the pool's feasibility (layers 1-2) and of its short-lead
    /// claims (layer 3): an Event on entry into the condition, again only after it cleared
    /// (§4.3). Observability only: no decision depends on them.
    fn level_warnings(&mut self, snap: &Snapshot) {
        use crate::cluster::{EventRecord, ObjectKind, ObjectRef};
        let pool = snap.pool_name().to_string();
        let mut raised: BTreeSet<(String, String)> = BTreeSet::new();
        let mut events = Vec::new();
        if let Some(a) = snap.assessment() {
            // Reasons the rules raise themselves (StaticNodePool at step 1a) stay theirs.
            let warnings = a.findings.iter().filter(|f| {
                f.severity == feasibility::Severity::Warning
                    && crate::engine::Reason::from_name(f.reason.event_reason()).is_none()
            });
            for f in warnings {
                let key = (format!("{pool}|feasibility"), f.reason.event_reason().to_string());
                raised.insert(key.clone());
                // Latched on the remedy, not the message: the message carries the node count,
                // which moves with every scale-up or consolidation and must not re-raise it.
                if self.ctx.latch.should_fire(key, &f.fix) {
                    let object = ObjectRef::cluster(ObjectKind::NodePool, pool.clone());
                    let msg = format!("{} Fix: {}", f.message, f.fix);
                    events.push((object, f.reason.event_reason().to_string(), msg));
                }
            }
        }
        if let Some(p) = snap.policy() {
            let period = p.period.unwrap_or(Duration::minutes(1));
            for (c, d) in snap.pool_claims_derived() {
                let expire = d.expire_after.unwrap_or(crate::policy::duration::ExpireAfter::Never);
                let tgp = d.termination_grace_period;
                let listed = p.open.occurrences();
                let short =
                    feasibility::short_lead(&p.settings, expire, tgp, period, d.created(), listed);
                let Some(f) = short else { continue };
                let Some(name) = c.metadata.name.clone() else { continue };
                let reason = f.reason.event_reason().to_string();
                let key = (format!("{pool}|claim/{name}"), reason.clone());
                raised.insert(key.clone());
                if self.ctx.latch.should_fire(key, &f.fix) {
                    let object = ObjectRef::cluster(ObjectKind::NodeClaim, name);
                    events.push((object, reason, format!("{} Fix: {}", f.message, f.fix)));
                }
            }
        }
        let feasibility_key = format!("{pool}|feasibility");
        let claim_prefix = format!("{pool}|claim/");
        // Both kinds of key start with "{pool}|": they sort between it and "{pool}}" ('|' + 1).
        let range = (format!("{pool}|"), String::new())..(format!("{pool}}}"), String::new());
        self.ctx.latch.retain_range(range, |k| {
            let ours = k.0 == feasibility_key || k.0.starts_with(&claim_prefix);
            !ours || raised.contains(k)
        });
        for (object, reason, message) in events {
            let event = EventRecord { object, reason, message, warning: true, time: snap.now };
            if let Err(e) = self.ctx.cluster.record_event(&event) {
                tracing::warn!(error = %e, "event not recorded");
            }
        }
    }

    /// The RotationPolicy status view (§5.4); a conflict is a silent requeue. Linear in
    /// policies × pools: every pool is resolved once, and each policy reads only the pools it
    /// governs or ties for.
    pub fn update_policy_status(&mut self) {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        let selectors = policy_selectors(&cache);
        let pools: Vec<(String, Governance, bool)> = cache
            .pools
            .values()
            .map(|p| {
                let labels = p.metadata.labels.clone().unwrap_or_default();
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    resolve::resolve(&selectors, &labels),
                    !slots::anchors(&p.metadata).is_empty(),
                )
            })
            .collect();
        let views: Vec<PoolView<'_>> = pools
            .iter()
            .map(|(name, g, anchored)| PoolView { name, governance: g, anchored: *anchored })
            .collect();
        let by_policy = resolve::pools_by_policy(&views);
        // Caches of objects that are gone.
        self.validity.retain(|n, _| cache.policies.contains_key(n));
        self.policies.retain(|n, _| cache.policies.contains_key(n));
        self.assessments.retain(|n, _| cache.pools.contains_key(n));
        self.pool_status.retain(|n, _| cache.pools.contains_key(n));
        for (name, policy) in &cache.policies {
            let invalid = self.validity(policy);
            let pools = by_policy.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            let mut status = resolve::desired_status(&StatusInputs {
                policy: name,
                generation: policy.metadata.generation,
                invalid: invalid.as_ref().map(|e| e.as_ref()),
                pools,
                previous: policy.status.as_ref(),
                now,
            });
            if invalid.is_none()
                && let Ok(view) = self.policy_view(policy, now)
            {
                let governed =
                    pools.iter().filter(|p| p.governance.policy() == Some(name.as_str()));
                let names: Vec<String> = governed.map(|p| p.name.to_string()).collect();
                status.node_pools =
                    names.iter().filter_map(|p| self.pool_status(&cache, p, &view, now)).collect();
                status.node_pools.sort_by(|a, b| a.name.cmp(&b.name));
                add_policy_summary(&mut status, &view, now);
            }
            if policy.status.as_ref() == Some(&status) {
                continue;
            }
            match self.ctx.cluster.update_policy_status(
                name,
                &status,
                policy.metadata.resource_version.as_deref(),
            ) {
                Ok(()) | Err(ApiError::Conflict) | Err(ApiError::NotFound) => {}
                Err(e) => tracing::warn!(policy = %name, error = %e, "policy status not written"),
            }
        }
    }
}

/// The policy-wide columns of the status: the window open now or next, and the rotations in
/// flight against those allowed, summed over the governed pools.
fn add_policy_summary(status: &mut RotationPolicyStatus, view: &PolicyView, now: DateTime<Utc>) {
    status.next_window = summary::current_or_next(&view.settings.schedule, now)
        .map(|o| o.start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    if !status.node_pools.is_empty() {
        let in_flight: i64 = status.node_pools.iter().map(|p| i64::from(p.in_flight)).sum();
        let allowed: i64 =
            status.node_pools.iter().map(|p| i64::from(p.max_unavailable.unwrap_or(0))).sum();
        status.in_flight = Some(format!("{in_flight}/{allowed}"));
    }
}

/// Per-pool gauges after a pass (§4.2).
fn gauges(snap: &Snapshot) -> crate::telemetry::PoolGauges {
    let now = snap.now;
    let mut g = crate::telemetry::PoolGauges {
        candidates: snap.census.max(0) as u64,
        in_progress: snap.anchored_claims().count() as u64,
        policy_conflict: matches!(snap.governance, GovernanceView::Conflict(_)),
        infeasible: snap.fatal(),
        ..Default::default()
    };
    if let Some(p) = snap.policy() {
        g.window_active = p.settings.schedule.in_window(now);
        g.window_period = p.period;
        g.max_unavailable = Some(snap.lanes() as u64);
        g.next_window = summary::current_or_next(&p.settings.schedule, now).map(|o| o.start);
        let period = p.period.unwrap_or(Duration::minutes(1));
        let short = |(_, d): &(&crate::karpenter::NodeClaim, &snapshot::Derived)| {
            let expire = d.expire_after.unwrap_or(crate::policy::duration::ExpireAfter::Never);
            let tgp = d.termination_grace_period;
            let listed = p.open.occurrences();
            feasibility::short_lead(&p.settings, expire, tgp, period, d.created(), listed).is_some()
        };
        g.short_lead_nodes = snap.pool_claims_derived().filter(short).count() as u64;
    }
    if let Some(a) = snap.assessment() {
        g.age_threshold = a.derived.age_threshold;
        g.rotation_chances = a.derived.chances;
        g.throughput_capacity = a.derived.starts_per_occurrence;
        g.t_rot_estimate = Some(a.derived.t_rot_est);
        g.t_rot_bound = Some(a.derived.t_rot);
    }
    g.nearest_deadline = snap
        .pool_claims_derived()
        .filter(|(c, _)| !c.is_deleting())
        .filter_map(|(_, d)| crate::policy::derive::deadline(d.created()?, d.expire_after?))
        .min();
    if let Some(pool) = &snap.pool {
        g.freeze_until = annotation(&pool.metadata, Key::Freeze)
            .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
            .map(|t| t.with_timezone(&Utc))
            .filter(|t| *t > now);
    }
    // With several rotations in flight: the highest retry count, and how many drains are stuck.
    for cand in snap.anchored_claims() {
        let count =
            crate::policy::derive::parse_retry_count(annotation(&cand.metadata, Key::RetryCount));
        g.retry_count = g.retry_count.max(count);
    }
    g.drain_stuck = snap.stuck_drains() as u64;
    g
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

/// The anchors of `pool` into `anchors`, but for one naming another pool's claim (a copied
/// NodePool): that pool clears it, and an orphan it hid would never be swept.
fn add_anchors(cache: &CacheView, pool: &NodePool, anchors: &mut BTreeSet<String>) {
    for anchor in slots::anchors(&pool.metadata).into_values() {
        let foreign = cache
            .claims
            .get(anchor)
            .is_some_and(|c| c.node_pool() != pool.metadata.name.as_deref());
        if !foreign {
            anchors.insert(anchor.to_string());
        }
    }
}
