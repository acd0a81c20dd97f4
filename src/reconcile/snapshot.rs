//! What one pass reads: the cached view plus the objects this pass wrote (its own writes are
//! fresher than the cache), and the facts derived from them (§5.2). Implements [`Facts`].
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock, Weak};

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::{CacheView, Patch};
use crate::engine::{Facts, Field, Key, ObjRef, Pred, Root, Value};
use crate::karpenter::{NodeClaim, NodePool};
use crate::placeholder;
use crate::policy::derive::{self, ClaimFacts, RotationOrder};
use crate::policy::duration::ExpireAfter;
use crate::policy::feasibility::Assessment;
use crate::policy::lookahead::{self, OpenTime};
use crate::policy::settings::Effective;

/// Detection lag allowance (§3.2 `buffer`).
pub const BUFFER: Duration = Duration::minutes(2);
/// tGP when the claim and the pool leave it unset.
pub const DEFAULT_TGP: Duration = Duration::hours(1);
/// "Forever" for a gate whose anchor is absent.
const FOREVER: Duration = Duration::days(365 * 100);

pub const KARPENTER_POOL_LABEL: &str = "karpenter.sh/nodepool";

/// The governing policy of a pool, evaluated once per policy change (and per day, so the
/// 53-week window horizon moves on).
#[derive(Debug)]
pub struct PolicyView {
    pub name: String,
    /// The policy's uid and generation: what is derived from the view (a pool's feasibility
    /// assessment, its lanes) is recomputed when it changes.
    pub revision: String,
    pub settings: Effective,
    /// `P`, the worst-case window period from now (§3.1).
    pub period: Option<Duration>,
    /// Window-open time around now, for the burst lookahead.
    pub open: OpenTime,
    /// The lookahead's answers over `open`, per pool (they go with the view).
    pub lookahead: lookahead::Memo,
}

/// The pool's governance, as the rules see it.
#[derive(Debug, Clone)]
pub enum GovernanceView {
    Governed(Arc<PolicyView>),
    Conflict(Vec<String>),
    Ungoverned,
    Invalid(String),
}

impl GovernanceView {
    pub fn symbol(&self) -> &'static str {
        match self {
            GovernanceView::Governed(_) => "governed",
            GovernanceView::Conflict(_) => "conflict",
            GovernanceView::Ungoverned => "ungoverned",
            GovernanceView::Invalid(_) => "invalid",
        }
    }

    pub fn policy(&self) -> Option<&Arc<PolicyView>> {
        match self {
            GovernanceView::Governed(p) => Some(p),
            _ => None,
        }
    }
}

/// The thing a sweep visits (§5.3), with the anchor set read when the sweep started.
#[derive(Debug, Clone)]
pub enum SweepSubject {
    Pool(String),
    Claim(String),
    Node(String),
    Pod(String, String),
}

/// The cached claims grouped the way passes read them, built once per cache version instead of
/// scanning every claim in the cluster on every pool's pass. Each grouping is built on first
/// use, in the cache's (name) order, so it gives exactly what the scan it replaces gave.
#[derive(Debug, Default)]
pub struct ClaimIndex {
    /// Label `karpenter.sh/nodepool` -> its claims, in name order.
    by_pool: OnceLock<HashMap<String, PoolClaims>>,
    /// `status.nodeName` -> the first claim (in name order) that names the node.
    by_node: OnceLock<HashMap<String, Arc<NodeClaim>>>,
    /// `status.providerID` -> the first claim (in name order) with that instance.
    by_provider: OnceLock<HashMap<String, Arc<NodeClaim>>>,
}

/// One pool's cached claims, and what passes derive from their spec and status.
#[derive(Debug, Default)]
struct PoolClaims {
    claims: Vec<Arc<NodeClaim>>,
    /// Parallel to `claims`, computed on the first pass over the pool in this cache version.
    derived: OnceLock<Vec<Derived>>,
    /// [`placeholder::node_worth`] of `claims` (their `status.allocatable`, which no pass
    /// writes), computed once per cache version.
    worth: OnceLock<placeholder::Resources>,
}

/// What a pass reads of a claim apart from its annotations: a pass's own writes change only
/// annotations (see [`apply_patch`]), so these hold for its overlay copy as well.
#[derive(Debug)]
pub struct Derived {
    /// `metadata.name` (empty when unset).
    name: String,
    /// `cache.nodes[status.nodeName]`.
    node: Option<Arc<Node>>,
    created: Option<DateTime<Utc>>,
    /// `spec.expireAfter`, `None` when it does not parse.
    pub expire_after: Option<ExpireAfter>,
    /// `spec.terminationGracePeriod`, `None` when unset or unparseable.
    pub termination_grace_period: Option<Duration>,
    ready: bool,
    deleting: bool,
    /// The candidate facts of the cached claim and node: those of a pass that wrote neither.
    cached: Option<ClaimFacts>,
}

impl Derived {
    /// `metadata.creationTimestamp`, `None` when unset.
    pub fn created(&self) -> Option<DateTime<Utc>> {
        self.created
    }

    fn of(claim: &NodeClaim, cache: &CacheView) -> Derived {
        let mut d = Derived {
            name: claim.metadata.name.clone().unwrap_or_default(),
            node: claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| cache.nodes.get(n))
                .cloned(),
            created: claim.created(),
            expire_after: claim.expire_after().ok(),
            termination_grace_period: claim.termination_grace_period().ok().flatten(),
            ready: claim.is_ready(),
            deleting: claim.is_deleting(),
            cached: None,
        };
        d.cached = d.facts(claim, d.node.as_deref());
        d
    }

    /// The candidate facts of `claim` (§3.2; this claim, as cached or as written) on `node`:
    /// the one place a pass builds them.
    fn facts(&self, claim: &NodeClaim, node: Option<&Node>) -> Option<ClaimFacts> {
        Some(ClaimFacts {
            created: self.created?,
            expire_after: self.expire_after?,
            termination_grace_period: self.termination_grace_period,
            ready: self.ready,
            deleting: self.deleting,
            state: crate::engine::claim_state(annotation(&claim.metadata, Key::State)).into(),
            retry_count: derive::retry_count_u32(annotation(&claim.metadata, Key::RetryCount)),
            failed_at: time_annotation(&claim.metadata, Key::FailedAt),
            operator_do_not_disrupt: node.is_some_and(|n| operator_do_not_disrupt(&n.metadata)),
        })
    }
}

impl ClaimIndex {
    fn by_pool(&self, cache: &CacheView) -> &HashMap<String, PoolClaims> {
        self.by_pool.get_or_init(|| {
            let mut map: HashMap<String, PoolClaims> = HashMap::new();
            for c in cache.claims.values() {
                let Some(pool) =
                    c.metadata.labels.as_ref().and_then(|l| l.get(KARPENTER_POOL_LABEL))
                else {
                    continue;
                };
                match map.get_mut(pool) {
                    Some(p) => p.claims.push(Arc::clone(c)),
                    None => {
                        let claims = vec![Arc::clone(c)];
                        map.insert(pool.clone(), PoolClaims { claims, ..Default::default() });
                    }
                }
            }
            map
        })
    }

    fn pool(&self, cache: &CacheView, pool: &str) -> &[Arc<NodeClaim>] {
        self.by_pool(cache).get(pool).map(|p| p.claims.as_slice()).unwrap_or_default()
    }

    /// The pool's claims with their derived facts.
    fn pool_derived(&self, cache: &CacheView, pool: &str) -> (&[Arc<NodeClaim>], &[Derived]) {
        match self.by_pool(cache).get(pool) {
            Some(p) => {
                let derived = p
                    .derived
                    .get_or_init(|| p.claims.iter().map(|c| Derived::of(c, cache)).collect());
                (&p.claims, derived)
            }
            None => (&[], &[]),
        }
    }

    /// One node's worth of the pool's resources ([`placeholder::node_worth`] of its claims).
    fn pool_worth(&self, cache: &CacheView, pool: &str) -> placeholder::Resources {
        match self.by_pool(cache).get(pool) {
            Some(p) => p
                .worth
                .get_or_init(|| placeholder::node_worth(p.claims.iter().map(|c| c.as_ref())))
                .clone(),
            None => placeholder::node_worth(std::iter::empty()),
        }
    }

    fn by_node(&self, cache: &CacheView) -> &HashMap<String, Arc<NodeClaim>> {
        self.by_node.get_or_init(|| {
            index_claims(cache, |c| c.status.as_ref().and_then(|s| s.node_name.as_ref()))
        })
    }

    fn by_provider(&self, cache: &CacheView) -> &HashMap<String, Arc<NodeClaim>> {
        self.by_provider.get_or_init(|| {
            index_claims(cache, |c| c.status.as_ref().and_then(|s| s.provider_id.as_ref()))
        })
    }
}

/// The cached claims keyed by `key`, the first claim (in name order) winning a shared key.
fn index_claims(
    cache: &CacheView,
    key: impl Fn(&NodeClaim) -> Option<&String>,
) -> HashMap<String, Arc<NodeClaim>> {
    let mut map = HashMap::new();
    for c in cache.claims.values() {
        if let Some(k) = key(c) {
            map.entry(k.clone()).or_insert_with(|| Arc::clone(c));
        }
    }
    map
}

/// The [`ClaimIndex`] of the last cache version a controller read. The version is the view's
/// identity: a `Weak` keeps its address from being reused, and a view cannot change in place
/// while a `Weak` to it exists (`Arc::make_mut` moves it out, `Arc::get_mut` refuses).
#[derive(Debug, Default)]
pub struct IndexCache {
    view: Weak<CacheView>,
    index: Arc<ClaimIndex>,
}

impl IndexCache {
    pub fn of(&mut self, cache: &Arc<CacheView>) -> Arc<ClaimIndex> {
        let same =
            std::ptr::eq(self.view.as_ptr(), Arc::as_ptr(cache)) && self.view.strong_count() > 0;
        if !same {
            self.view = Arc::downgrade(cache);
            self.index = Arc::new(ClaimIndex::default());
        }
        Arc::clone(&self.index)
    }
}

/// A claim of the pool, its candidate facts and the instant it is due
/// ([`Snapshot::claim_dues`]).
pub type ClaimDue<'a> = (&'a NodeClaim, Option<ClaimFacts>, Option<DateTime<Utc>>);

/// The snapshot one pass reads.
pub struct Snapshot {
    pub now: DateTime<Utc>,
    pub cache: Arc<CacheView>,
    /// `cache`'s claims grouped by pool and by node.
    pub index: Arc<ClaimIndex>,
    /// The controller's namespace (placeholders).
    pub namespace: String,
    /// The pool of a pool pass (owned: this pass's writes are applied to it).
    pub pool: Option<NodePool>,
    /// Objects this pass wrote, as written (they shadow the cache).
    pub claims: BTreeMap<String, NodeClaim>,
    pub nodes: BTreeMap<String, Node>,
    pub governance: GovernanceView,
    /// Whether feasibility has a fatal finding for this pool (step 1b).
    fatal: bool,
    /// The pool's feasibility (governed pools).
    assessment: Option<Arc<Assessment>>,
    /// pick_earliest_deadline_eligible and the census (§3.2, §4.2), at `now`.
    pub pick: Option<String>,
    pub census: i64,
    /// What a sweep pass visits, with the anchors read when the sweep began; `None` in a pool
    /// pass.
    sweep: Option<(SweepSubject, Arc<BTreeSet<String>>)>,
    /// `lanes(np)`: the rotations the pool may have in flight (`spec.surge.maxUnavailable`
    /// resolved against its nodes); 1 outside a governed pool pass.
    lanes: usize,
    /// Bumped by every [`Snapshot::apply`]; `pick` and `census` were computed at `selected`.
    version: u64,
    selected: Option<u64>,
}

impl Snapshot {
    /// A pool pass's snapshot, with nothing written yet and no candidates selected; a governed
    /// pool's feasibility comes with [`Snapshot::assessed`].
    pub fn for_pool(
        now: DateTime<Utc>,
        cache: Arc<CacheView>,
        index: Arc<ClaimIndex>,
        namespace: String,
        pool: NodePool,
        governance: GovernanceView,
    ) -> Snapshot {
        Snapshot {
            pool: Some(pool),
            ..Snapshot::unwritten(now, cache, index, namespace, governance)
        }
    }

    /// A sweep pass's snapshot over `subject`, with the `anchors` read when the sweep began
    /// (`pool`: the pool subject's copy through its slot's lens).
    #[allow(clippy::too_many_arguments)]
    pub fn for_sweep(
        now: DateTime<Utc>,
        cache: Arc<CacheView>,
        index: Arc<ClaimIndex>,
        namespace: String,
        pool: Option<NodePool>,
        governance: GovernanceView,
        subject: SweepSubject,
        anchors: Arc<BTreeSet<String>>,
    ) -> Snapshot {
        let sweep = Some((subject, anchors));
        Snapshot { pool, sweep, ..Snapshot::unwritten(now, cache, index, namespace, governance) }
    }

    /// What both kinds of pass start from: no pool, nothing written, no candidates selected.
    fn unwritten(
        now: DateTime<Utc>,
        cache: Arc<CacheView>,
        index: Arc<ClaimIndex>,
        namespace: String,
        governance: GovernanceView,
    ) -> Snapshot {
        Snapshot {
            now,
            cache,
            index,
            namespace,
            pool: None,
            claims: BTreeMap::new(),
            nodes: BTreeMap::new(),
            governance,
            fatal: false,
            assessment: None,
            pick: None,
            census: 0,
            sweep: None,
            lanes: 1,
            version: 0,
            selected: None,
        }
    }

    /// The pool's feasibility, and what it decides: whether a fatal finding holds starts back
    /// (step 1b), and `lanes(np)`, `maxUnavailable` for the pool's nodes (`auto`: what the pool
    /// needs, within its limit).
    pub fn assessed(mut self, assessment: Arc<Assessment>) -> Snapshot {
        self.fatal = assessment.has_fatal();
        self.lanes = assessment.derived.lanes;
        self.assessment = Some(assessment);
        self
    }

    /// The pool's feasibility (governed pools).
    pub fn assessment(&self) -> Option<&Arc<Assessment>> {
        self.assessment.as_ref()
    }

    /// Whether feasibility has a fatal finding for this pool (step 1b).
    pub fn fatal(&self) -> bool {
        self.fatal
    }

    /// `lanes(np)`: the rotations the pool may have in flight; 1 outside a governed pool pass.
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// The anchors a sweep pass read when the sweep began; `None` in a pool pass.
    pub fn sweep_anchors(&self) -> Option<&Arc<BTreeSet<String>>> {
        self.sweep.as_ref().map(|(_, anchors)| anchors)
    }

    pub fn pool_name(&self) -> &str {
        self.pool.as_ref().and_then(|p| p.metadata.name.as_deref()).unwrap_or("")
    }

    /// The governing policy's view (shared: cloning it is a reference count).
    pub fn policy(&self) -> Option<&Arc<PolicyView>> {
        self.governance.policy()
    }

    pub fn claim(&self, name: &str) -> Option<&NodeClaim> {
        self.claims.get(name).or_else(|| self.cache.claims.get(name).map(|c| c.as_ref()))
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name).or_else(|| self.cache.nodes.get(name).map(|n| n.as_ref()))
    }

    /// The cached pod holding the rotation's placeholder name, whoever created it.
    pub fn placeholder_named(&self, claim: &str) -> Option<&Pod> {
        self.cache.placeholders.get(&placeholder::placeholder_name(claim)).map(|p| p.as_ref())
    }

    /// The rotation's placeholder: the pod holding its name that the controller created for the
    /// claim's current attempt (its uid recorded on the claim as `placeholder-uid`, or the
    /// attempt's `started-at` on the pod: [`placeholder::created_for_attempt`]). A pod merely
    /// named like it, or one of an earlier attempt, is not surge capacity.
    pub fn placeholder_for(&self, claim: &str) -> Option<&Pod> {
        let pod = self.placeholder_named(claim)?;
        placeholder::created_for_attempt(pod, self.claim(claim)?).then_some(pod)
    }

    /// The uid of the rotation's placeholder: the pod [`Snapshot::placeholder_for`] finds, else
    /// the uid recorded on the claim (the pod may be gone already); the claim itself gone (a
    /// completion), the pod holding the placeholder's name for it (`surge-for`). What
    /// Karpenter's nominations are matched against.
    pub fn placeholder_uid(&self, claim: &str) -> Option<&str> {
        let Some(c) = self.claim(claim) else {
            return self
                .placeholder_named(claim)
                .filter(|p| placeholder::surge_for(p) == Some(claim))
                .and_then(|p| p.metadata.uid.as_deref());
        };
        self.placeholder_for(claim)
            .and_then(|p| p.metadata.uid.as_deref())
            .or_else(|| annotation(&c.metadata, Key::PlaceholderUid))
    }

    /// The pool's anchor as written, whether or not the claim it names still exists.
    pub fn anchor_name(&self) -> Option<&str> {
        annotation(&self.pool.as_ref()?.metadata, Key::ActiveRotation)
    }

    /// The claim the anchor names (`cand`), among this pool's own claims (label
    /// `karpenter.sh/nodepool`): an anchor copied from another pool never drives its claim.
    pub fn anchored_claim(&self) -> Option<&str> {
        let name = self.anchor_name()?;
        self.claim(name).filter(|c| c.node_pool() == Some(self.pool_name())).map(|_| name)
    }

    /// The anchor names a live claim that is not this pool's (`foreign_anchor`). A name no
    /// claim has is not foreign: this pool's claim was finalized (the completion path).
    pub fn foreign_anchor(&self) -> Option<&NodeClaim> {
        let claim = self.claim(self.anchor_name()?)?;
        (claim.node_pool() != Some(self.pool_name())).then_some(claim)
    }

    /// Every claim of this pool an anchor of any slot names (live or not), by slot.
    pub fn anchors(&self) -> BTreeMap<usize, &str> {
        self.pool.as_ref().map(|p| super::slots::anchors(&p.metadata)).unwrap_or_default()
    }

    /// The live claims of this pool the anchors of all slots name (the pool's rotations).
    pub fn anchored_claims(&self) -> impl Iterator<Item = &NodeClaim> {
        let pool = self.pool_name();
        self.anchors()
            .into_values()
            .filter_map(move |n| self.claim(n).filter(|c| c.node_pool() == Some(pool)))
    }

    /// `host` is the `surge-host` a slot of the pool records for a rotation other than `claim`'s.
    fn surge_host_of_another(&self, claim: &str, host: &str) -> bool {
        let Some(meta) = self.pool.as_ref().map(|p| &p.metadata) else { return false };
        let anchors = super::slots::anchors(meta);
        super::slots::by_slot(meta, Key::SurgeHost)
            .into_iter()
            .any(|(slot, h)| h == host && anchors.get(&slot).is_some_and(|a| *a != claim))
    }

    /// `node` is where a rotation other than `claim`'s stands or lands: a slot of the pool
    /// records it as its surge host, it is frozen (`surge-for`) for another claim still in
    /// flight (anchored, marked draining, or being deleted), or it is the node of another
    /// anchored claim. No rotation picks its claim, escalates onto it or freezes it for itself:
    /// cordoning it would drain the pods another rotation is moving onto it.
    pub fn node_of_another(&self, claim: &str, node: &str) -> bool {
        if self.surge_host_of_another(claim, node) {
            return true;
        }
        let anchors = self.anchors();
        let frozen_for = self.node(node).and_then(|n| annotation(&n.metadata, Key::SurgeFor));
        let frozen_for_another =
            frozen_for.is_some_and(|other| other != claim && self.in_flight_claim(other));
        frozen_for_another
            || anchors.values().any(|a| {
                *a != claim && self.claim(a).and_then(|c| self.claim_node(c)) == Some(node)
            })
    }

    /// `surge` is the surge of a rotation of the pool other than `rotation`'s: another claim
    /// records it as its `surge-claim`, or its node (by `status.nodeName`, else by providerID)
    /// is the `surge-host` another slot records. Such a claim is never `rotation`'s to reap,
    /// even while its node looks empty (the other rotation deleted its placeholder with its old
    /// claim, and the old node's pods have not arrived yet).
    pub fn surge_of_another(&self, rotation: &str, surge: &NodeClaim) -> bool {
        let name = surge.metadata.name.as_deref().unwrap_or("");
        let recorded = self.pool_claims().any(|c| {
            c.metadata.name.as_deref() != Some(rotation)
                && annotation(&c.metadata, Key::SurgeClaim) == Some(name)
        });
        recorded
            || self.registered_node(surge).is_some_and(|n| self.surge_host_of_another(rotation, n))
    }

    /// The node a claim registered as: its `status.nodeName`, else the node carrying its
    /// providerID (Karpenter writes the nodeName a moment after the Node registers).
    pub fn registered_node<'a>(&'a self, claim: &'a NodeClaim) -> Option<&'a str> {
        let status = claim.status.as_ref()?;
        status
            .node_name
            .as_deref()
            .or_else(|| self.node_with_provider_id(status.provider_id.as_deref()?))
    }

    /// The claims of the pool's other rotations whose surge is still to come: a surge rotation
    /// (no `rotation-mode`) whose slot has no `surge-host` yet and whose placeholder is not on a
    /// node, so `status.resources` does not count it (§3.3 headroom with several rotations in
    /// flight). Empty with one slot.
    fn surges_waiting<'a>(&'a self, except: Option<&'a str>) -> Vec<&'a NodeClaim> {
        let Some(meta) = self.pool.as_ref().map(|p| &p.metadata) else { return Vec::new() };
        let has = |key: Key, slot: usize| {
            meta.annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(&super::slots::slot_key(key, slot)))
        };
        let pool = self.pool_name();
        super::slots::anchors(meta)
            .into_iter()
            .filter(|(slot, name)| {
                Some(*name) != except
                    && !has(Key::RotationMode, *slot)
                    && !has(Key::SurgeHost, *slot)
            })
            .filter_map(|(_, name)| self.claim(name).filter(|c| c.node_pool() == Some(pool)))
            .filter(|c| {
                let name = c.metadata.name.as_deref().unwrap_or("");
                let placed = self
                    .placeholder_for(name)
                    .is_some_and(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some());
                !placed
            })
            .collect()
    }

    /// One node's worth of this pool's resources ([`placeholder::node_worth`]), per cache version.
    pub fn node_worth(&self) -> placeholder::Resources {
        self.index.pool_worth(&self.cache, self.pool_name())
    }

    /// Claims of this pool, by label.
    pub fn pool_claims(&self) -> impl Iterator<Item = &NodeClaim> {
        self.index.pool(&self.cache, self.pool_name()).iter().map(|c| self.live(c))
    }

    /// `N` of the throughput checks (§3.2 layer 2): the pool's claims, each in-flight rotation
    /// counted once. While an anchored claim still exists, a claim created at or after the
    /// rotation started (`started-at`, or the slot's forceful `draining-at`) is its replacement,
    /// not another node: counting it made the burst warning flip on and off with every rotation.
    /// With several rotations in flight, the claims created since the earliest start count as
    /// replacements, at most one per rotation.
    pub fn pool_nodes(&self) -> usize {
        let total = self.pool_claims().count();
        let anchors = self.anchors();
        let meta = self.pool.as_ref().map(|p| &p.metadata);
        let mut starts = Vec::new();
        for (slot, name) in &anchors {
            let Some(cand) = self.claim(name).filter(|c| c.node_pool() == Some(self.pool_name()))
            else {
                continue;
            };
            let drained = || super::slots::time_at(meta?, Key::DrainingAt, *slot);
            if let Some(t) = stamp_at(&cand.metadata, Key::StartedAt, self.now).or_else(drained) {
                starts.push(t);
            }
        }
        let Some(earliest) = starts.iter().min().copied() else { return total };
        let anchored: BTreeSet<&str> = anchors.values().copied().collect();
        let replacements = self
            .pool_claims()
            .filter(|c| !anchored.contains(c.metadata.name.as_deref().unwrap_or("")))
            .filter(|c| c.created().is_some_and(|t| t >= earliest))
            .count();
        total - replacements.min(starts.len())
    }

    /// Claims of this pool with what passes derive from their spec and status.
    pub fn pool_claims_derived(&self) -> impl Iterator<Item = (&NodeClaim, &Derived)> {
        let (claims, derived) = self.index.pool_derived(&self.cache, self.pool_name());
        claims.iter().map(|c| self.live(c)).zip(derived)
    }

    /// This pass's copy of a cached claim if it wrote one, else the cached claim.
    fn live<'a>(&'a self, cached: &'a Arc<NodeClaim>) -> &'a NodeClaim {
        self.claims.get(cached.metadata.name.as_deref().unwrap_or("")).unwrap_or(cached.as_ref())
    }

    /// The claim's node, if registered.
    pub fn claim_node<'a>(&self, claim: &'a NodeClaim) -> Option<&'a str> {
        claim.status.as_ref().and_then(|s| s.node_name.as_deref())
    }

    /// Applies a write that won to this pass's copy of the object.
    pub fn apply(&mut self, obj: &ObjRef, patch: &Patch) {
        self.version += 1;
        let meta = match obj {
            ObjRef::Pool => self.pool.as_mut().map(|p| &mut p.metadata),
            ObjRef::Claim(n) => {
                if !self.claims.contains_key(n) {
                    let Some(c) = self.cache.claims.get(n) else { return };
                    self.claims.insert(n.clone(), c.as_ref().clone());
                }
                self.claims.get_mut(n).map(|c| &mut c.metadata)
            }
            ObjRef::Node(n) => {
                if !self.nodes.contains_key(n) {
                    let Some(x) = self.cache.nodes.get(n) else { return };
                    self.nodes.insert(n.clone(), x.as_ref().clone());
                }
                let node = self.nodes.get_mut(n);
                if let (Some(node), Some(u)) = (node, patch.unschedulable) {
                    node.spec.get_or_insert_with(Default::default).unschedulable = Some(u);
                }
                self.nodes.get_mut(n).map(|x| &mut x.metadata)
            }
            ObjRef::Policy | ObjRef::Pod(..) => None,
        };
        if let Some(meta) = meta {
            apply_patch(meta, patch);
        }
    }

    /// Computes `pick` and `census` from the pool's claims (again only after an `apply`).
    pub fn select_candidates(&mut self) {
        if self.selected == Some(self.version) {
            return;
        }
        self.selected = Some(self.version);
        let Some(policy) = self.policy().cloned() else { return };
        let mut census = 0;
        let mut pick: Option<RotationOrder<'_>> = None;
        let (facts, derived, dues) = self.facts_and_dues(&policy);
        // A claim another slot already rotates is never picked again (slots: N > 1).
        let anchored: BTreeSet<String> = self.anchors().into_values().map(str::to_string).collect();
        for ((f, d), due) in facts.iter().zip(derived).zip(dues) {
            let Some(f) = f else { continue };
            let candidacy = derive::candidacy_due(f, &policy.settings, due, self.now);
            if candidacy != derive::Candidacy::Candidate {
                continue;
            }
            census += 1;
            let order = RotationOrder {
                deadline: derive::deadline(f.created, f.expire_after),
                created: f.created,
                name: &d.name,
            };
            // The first of the candidates in rotation order (names are unique: a total order),
            // never one whose node another rotation stands or lands on.
            if pick.is_none_or(|p| order < p)
                && !anchored.contains(&d.name)
                && !self.lands_another(&d.name)
            {
                pick = Some(order);
            }
        }
        let pick = pick.map(|p| p.name.to_string());
        self.census = census;
        self.pick = pick;
    }

    /// `claim` is in a rotation: an anchor of the pool names it, or it is marked draining or
    /// being deleted (a drain goes on after its anchor is lost).
    pub fn in_flight_claim(&self, claim: &str) -> bool {
        self.anchors().values().any(|a| *a == claim)
            || self.claim(claim).is_some_and(|c| {
                c.is_deleting() || annotation(&c.metadata, Key::State) == Some("draining")
            })
    }

    /// The claims of the pool marked pending or draining without an anchor naming them (an
    /// anchor removed by hand, the pool replaced, governance lost): being deleted, or about to be
    /// (a pass whose view still shows the anchor re-issues the delete). A `pending` one counts
    /// too: the claims view may lag the pool's (it still shows the state before the delete that
    /// made it `draining`). They count against `maxUnavailable` until they are gone or the sweep
    /// marks them failed.
    pub fn unanchored_drains(&self) -> usize {
        let anchors = self.anchors();
        self.pool_claims()
            .filter(|c| marked_in_flight(c))
            .filter(|c| !anchors.values().any(|a| Some(*a) == c.metadata.name.as_deref()))
            .count()
    }

    /// The claims of the pool in a rotation ([`Snapshot::in_flight_claim`]).
    pub fn claims_in_flight(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.anchors().into_values().map(str::to_string).collect();
        out.extend(
            self.pool_claims()
                .filter(|c| {
                    c.is_deleting() || annotation(&c.metadata, Key::State) == Some("draining")
                })
                .filter_map(|c| c.metadata.name.clone()),
        );
        out
    }

    /// The claim's node is where another rotation stands or lands ([`Snapshot::node_of_another`]).
    fn lands_another(&self, claim: &str) -> bool {
        let node = self.claim(claim).and_then(|c| self.claim_node(c));
        node.is_some_and(|n| self.node_of_another(claim, n))
    }

    /// The pool's claims' candidate facts (after this pass's writes) and due instants (the
    /// burst lookahead's), parallel to the claims the index holds for the pool.
    #[allow(clippy::type_complexity)]
    fn facts_and_dues(
        &self,
        policy: &PolicyView,
    ) -> (Vec<Option<ClaimFacts>>, &[Derived], Vec<Option<DateTime<Utc>>>) {
        let period = policy.period.unwrap_or(Duration::minutes(1));
        let (claims, derived) = self.index.pool_derived(&self.cache, self.pool_name());
        // A pass that wrote nothing reads the cached claims and nodes: their facts are derived.
        let unwritten = self.claims.is_empty() && self.nodes.is_empty();
        let facts: Vec<Option<ClaimFacts>> = claims
            .iter()
            .zip(derived)
            .map(
                |(cached, d)| {
                    if unwritten { d.cached.clone() } else { self.written_facts(cached, d) }
                },
            )
            .collect();
        let dues = self.lookahead_dues(policy, period, &facts, derived);
        (facts, derived, dues)
    }

    /// Every claim of the pool with its candidate facts and the instant it is due, as a start
    /// reads them ([`Snapshot::select_candidates`]): what the policy status and `noderotation
    /// status` count as due. Empty outside a governed pool.
    pub fn claim_dues(&self) -> Vec<ClaimDue<'_>> {
        let Some(policy) = self.policy() else { return Vec::new() };
        let (facts, _, dues) = self.facts_and_dues(policy);
        let (claims, _) = self.index.pool_derived(&self.cache, self.pool_name());
        claims
            .iter()
            .map(|c| self.live(c))
            .zip(facts)
            .zip(dues)
            .map(|((c, f), d)| (c, f, d))
            .collect()
    }

    /// Each claim's due instant (parallel to `facts`): §3.2's, or earlier where the burst
    /// lookahead needs the room ([`lookahead::effective_dues`] over the claims that still need
    /// a rotation, in rotation order, one slot `t_rot_est + cooldownAfter` each).
    fn lookahead_dues(
        &self,
        policy: &PolicyView,
        period: Duration,
        facts: &[Option<ClaimFacts>],
        derived: &[Derived],
    ) -> Vec<Option<DateTime<Utc>>> {
        let settings = &policy.settings;
        let listed = policy.open.occurrences();
        let mut dues: Vec<Option<DateTime<Utc>>> = facts
            .iter()
            .map(|f| f.as_ref().and_then(|f| derive::due_after_listed(f, settings, period, listed)))
            .collect();
        let mut queue: Vec<(RotationOrder<'_>, usize)> = facts
            .iter()
            .zip(derived)
            .enumerate()
            .filter_map(|(i, (f, d))| {
                let f = f.as_ref().filter(|f| derive::needs_slot(f, dues[i]))?;
                let order = RotationOrder {
                    deadline: derive::deadline(f.created, f.expire_after),
                    created: f.created,
                    name: &d.name,
                };
                Some((order, i))
            })
            .collect();
        if queue.len() < 2 {
            return dues;
        }
        queue.sort();
        let tgp = self.pool.as_ref().and_then(|p| p.termination_grace_period().ok().flatten());
        let slot = settings.t_rot_est(tgp) + settings.cooldown_after;
        let ordered: Vec<DateTime<Utc>> = queue.iter().filter_map(|(_, i)| dues[*i]).collect();
        let effective = policy.lookahead.effective_dues_lanes(
            self.pool_name(),
            &ordered,
            &policy.open,
            slot,
            self.lanes,
        );
        for ((_, i), due) in queue.iter().zip(effective) {
            dues[*i] = Some(due);
        }
        dues
    }

    /// [`Derived::facts`] of a cached claim after this pass's writes.
    fn written_facts(&self, cached: &Arc<NodeClaim>, d: &Derived) -> Option<ClaimFacts> {
        let claim = self.live(cached);
        let node = match self.claim_node(claim).and_then(|n| self.nodes.get(n)) {
            Some(written) => Some(written),
            None => d.node.as_deref(),
        };
        d.facts(claim, node)
    }

    /// The pool's rotations in flight whose drain is stuck: the old claim deleting for longer
    /// than [`Snapshot::drain_bound`] (`stuck_drains`, and the `noderotation_drain_stuck` gauge).
    pub fn stuck_drains(&self) -> usize {
        self.anchored_claims().filter(|c| self.drain_stuck(c)).count()
    }

    /// The claim has been deleting for longer than its [`Snapshot::drain_bound`].
    pub fn drain_stuck(&self, claim: &NodeClaim) -> bool {
        let deleted =
            claim.metadata.deletion_timestamp.as_ref().and_then(crate::cluster::chrono_time);
        deleted.is_some_and(|t| self.now - t > self.drain_bound(claim))
    }

    /// `drain_bound` (§4.2): the claim's tGP, else its pool's, else 1h, plus the buffer. The rule
    /// `draining_stuck` and the `noderotation_drain_stuck` gauge both read it.
    pub fn drain_bound(&self, claim: &NodeClaim) -> Duration {
        derive::drain_bound(self.tgp(claim))
    }

    fn tgp(&self, claim: &NodeClaim) -> Option<Duration> {
        claim.termination_grace_period().ok().flatten().or_else(|| {
            self.pool.as_ref().and_then(|p| p.termination_grace_period().ok().flatten())
        })
    }

    fn meta_of(&self, obj: &ObjRef) -> Option<&ObjectMeta> {
        match obj {
            ObjRef::Pool => self.pool.as_ref().map(|p| &p.metadata),
            ObjRef::Claim(n) => self.claim(n).map(|c| &c.metadata),
            ObjRef::Node(n) => self.node(n).map(|c| &c.metadata),
            ObjRef::Pod(_, n) => self.cache.placeholders.get(n).map(|p| &p.metadata),
            ObjRef::Policy => None,
        }
    }

    fn claim_of(&self, v: &Value) -> Option<&NodeClaim> {
        match v {
            Value::Object(ObjRef::Claim(n)) => self.claim(n),
            _ => None,
        }
    }

    /// The host of the claim's placeholder, if bound.
    pub fn placeholder_host(&self, claim: &str) -> Option<&str> {
        self.placeholder_for(claim)?.spec.as_ref()?.node_name.as_deref()
    }

    /// The cached Node whose `spec.providerID` is `provider_id` (a scan: only the reap asks, and
    /// only for a claim whose `status.nodeName` is not written yet).
    pub fn node_with_provider_id(&self, provider_id: &str) -> Option<&str> {
        self.cache.nodes.iter().find_map(|(name, n)| {
            let id = n.spec.as_ref()?.provider_id.as_deref()?;
            (id == provider_id).then_some(name.as_str())
        })
    }

    /// The claim backing a node: the claim whose `status.nodeName` is `node`, else the one whose
    /// `status.providerID` is the Node's `spec.providerID`. Karpenter writes `status.nodeName` a moment after the Node registers,
    /// so for that moment only the providerID (set at launch) connects the two.
    pub fn claim_on_node(&self, node: &str) -> Option<&NodeClaim> {
        if let Some(c) = self.index.by_node(&self.cache).get(node) {
            return Some(self.live(c));
        }
        let provider = self.node(node)?.spec.as_ref()?.provider_id.as_deref()?;
        let c = self.index.by_provider(&self.cache).get(provider)?;
        // A claim that names another node is that node's, whatever its providerID says.
        let named = c.status.as_ref().and_then(|s| s.node_name.as_deref());
        named.is_none_or(|n| n == node).then(|| self.live(c))
    }

    /// The induced surge claim, once observable (§3.8; §5.3 `surge-claim`): the claim of the node
    /// the rotation's placeholder is bound to ([`Snapshot::claim_on_node`]), if it is one of this
    /// pool's. `None` while the placeholder is missing or unbound, or while its host's claim is
    /// not visible. The one definition behind the `induced_claim` predicate, the surge path (an
    /// absorbing host's claim is this claim too) and the readyTimeout reap.
    pub fn induced_claim(&self, claim: &str) -> Option<&NodeClaim> {
        let c = self.claim_on_node(self.placeholder_host(claim)?)?;
        (c.node_pool() == Some(self.pool_name())).then_some(c)
    }

    /// The claims Karpenter's `Nominated` Events in the cache name for the pod with uid
    /// `pod_uid` (the placeholder a rotation recorded as its `placeholder-uid`), in Event-name
    /// order, each once.
    pub fn nominated_for(&self, pod_uid: &str) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for e in self.cache.nominations.values() {
            if e.involved_object.uid.as_deref() != Some(pod_uid) {
                continue;
            }
            if let Some(c) = crate::cluster::nominated_claim(e)
                && !names.contains(&c)
            {
                names.push(c);
            }
        }
        names
    }

    /// A claim of this pool that Karpenter nominated the rotation `claim`'s placeholder to and
    /// that is still to be marked (`launched-for`): it never initialized, is not being deleted
    /// and carries no mark (docs/decisions/reap-attribution.md).
    pub fn nominated_unmarked(&self, claim: &str) -> bool {
        let Some(uid) = self.placeholder_uid(claim) else { return false };
        self.nominated_for(uid).into_iter().any(|n| {
            n != claim
                && self.claim(n).is_some_and(|c| {
                    c.node_pool() == Some(self.pool_name())
                        && !c.is_deleting()
                        && !c.is_initialized()
                        && annotation(&c.metadata, Key::LaunchedFor).is_none()
                })
        })
    }

    /// The claims of this pool whose `launched-for` names the rotation `claim` (this pass's
    /// copies), in name order.
    pub fn launched_for(&self, claim: &str) -> Vec<String> {
        self.pool_claims()
            .filter(|c| annotation(&c.metadata, Key::LaunchedFor) == Some(claim))
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    }

    /// readyTimeout of the governing policy has passed since the claim's creation (at once
    /// when none governs; an unknown creation time has not passed).
    pub fn surge_claim_due(&self, claim: &NodeClaim) -> bool {
        match self.policy() {
            None => true,
            Some(p) => claim.created().is_some_and(|t| self.now - t >= p.settings.ready_timeout),
        }
    }
}

/// An annotation's raw value.
pub fn annotation(meta: &ObjectMeta, key: Key) -> Option<&str> {
    meta.annotations.as_ref()?.get(key.full()).map(String::as_str)
}

fn time_annotation(meta: &ObjectMeta, key: Key) -> Option<DateTime<Utc>> {
    annotation(meta, key)
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// A stamp (the instant something happened) as the rules read it at `now`: `None` when absent,
/// unreadable, or later than `now` beyond the clock-skew tolerance.
fn stamp_at(meta: &ObjectMeta, key: Key, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    time_annotation(meta, key).filter(|t| !derive::in_the_future(*t, now))
}

/// The claim carries our `state` of a rotation in flight: `pending` or `draining`.
pub fn marked_in_flight(claim: &NodeClaim) -> bool {
    matches!(annotation(&claim.metadata, Key::State), Some("pending" | "draining"))
}

/// `karpenter.sh/do-not-disrupt: "true"` set by someone else (no owned marker reading "true",
/// §3.4; a person hands it back by setting the marker to `false`).
pub fn operator_do_not_disrupt(meta: &ObjectMeta) -> bool {
    annotation(meta, Key::DoNotDisrupt) == Some("true")
        && annotation(meta, Key::DoNotDisruptOwned) != Some("true")
}

/// Applies annotation changes to metadata (the overlay after a won write).
pub fn apply_patch(meta: &mut ObjectMeta, patch: &Patch) {
    let ann = meta.annotations.get_or_insert_with(BTreeMap::new);
    for k in &patch.remove {
        ann.remove(k);
    }
    for (k, v) in &patch.set {
        ann.insert(k.clone(), v.clone());
    }
}

impl Facts for Snapshot {
    fn root(&self, root: Root) -> Value {
        let sweep = self.sweep.as_ref().map(|(s, _)| s);
        match root {
            Root::Now => Value::Time(self.now),
            Root::Np => match (&self.pool, sweep) {
                (Some(_), None | Some(SweepSubject::Pool(_))) => Value::Object(ObjRef::Pool),
                _ => Value::Nil,
            },
            Root::Policy => match self.policy() {
                Some(_) => Value::Object(ObjRef::Policy),
                None => Value::Nil,
            },
            Root::Cand => match self.anchored_claim() {
                Some(n) => Value::Object(ObjRef::Claim(n.to_string())),
                None => Value::Nil,
            },
            Root::Pick => match &self.pick {
                Some(n) => Value::Object(ObjRef::Claim(n.clone())),
                None => Value::Nil,
            },
            Root::Claim => match sweep {
                Some(SweepSubject::Claim(n)) => Value::Object(ObjRef::Claim(n.clone())),
                _ => Value::Nil,
            },
            Root::Node => match sweep {
                Some(SweepSubject::Node(n)) => Value::Object(ObjRef::Node(n.clone())),
                _ => Value::Nil,
            },
            Root::Pod => match sweep {
                Some(SweepSubject::Pod(ns, n)) => Value::Object(ObjRef::Pod(ns.clone(), n.clone())),
                _ => Value::Nil,
            },
        }
    }

    fn field(&self, obj: &ObjRef, field: Field) -> Value {
        let name = |s: Option<&String>| s.map(|n| Value::Name(n.clone())).unwrap_or(Value::Nil);
        match (field, obj) {
            (Field::NodePoolName, ObjRef::Pool) => {
                name(self.pool.as_ref().and_then(|p| p.metadata.name.as_ref()))
            }
            (Field::NodePoolReplicas, ObjRef::Pool) => self
                .pool
                .as_ref()
                .and_then(|p| p.spec.replicas)
                .map(Value::Int)
                .unwrap_or(Value::Nil),
            (Field::NodePoolGovernance, ObjRef::Pool) => {
                Value::Sym(self.governance.symbol().into())
            }
            (Field::NodeClaimName, ObjRef::Claim(n)) => Value::Name(n.clone()),
            (Field::NodeClaimState, ObjRef::Claim(n)) => {
                // Absent, or a value this version does not know, reads as `none` (the entry
                // write then claims it as pending, which the conditional writes re-check).
                let raw = self.claim(n).and_then(|c| annotation(&c.metadata, Key::State));
                Value::Sym(crate::engine::claim_state(raw).name().to_string())
            }
            (Field::NodeClaimDeletionTimestamp, ObjRef::Claim(n)) => self
                .claim(n)
                .and_then(|c| c.metadata.deletion_timestamp.as_ref())
                .and_then(crate::cluster::chrono_time)
                .map(Value::Time)
                .unwrap_or(Value::Nil),
            (Field::NodeClaimNode, ObjRef::Claim(n)) => self
                .claim(n)
                .and_then(|c| self.claim_node(c))
                .map(|node| Value::Object(ObjRef::Node(node.to_string())))
                .unwrap_or(Value::Nil),
            (Field::NodeClaimInitialized, ObjRef::Claim(n)) => {
                self.claim(n).map(|c| Value::Bool(c.is_initialized())).unwrap_or(Value::Nil)
            }
            (Field::NodeName, ObjRef::Node(n)) => Value::Name(n.clone()),
            (Field::NodeClaim, ObjRef::Node(n)) => {
                name(self.claim_on_node(n).and_then(|c| c.metadata.name.as_ref()))
            }
            (Field::PodName, ObjRef::Pod(_, n)) => Value::Name(n.clone()),
            (Field::PolicyReadyTimeout, ObjRef::Policy) => self
                .policy()
                .map(|p| Value::Duration(p.settings.ready_timeout))
                .unwrap_or(Value::Nil),
            (Field::PolicyCooldownAfter, ObjRef::Policy) => self
                .policy()
                .map(|p| Value::Duration(p.settings.cooldown_after))
                .unwrap_or(Value::Nil),
            (Field::PolicyFailurePause, ObjRef::Policy) => self
                .policy()
                .map(|p| Value::Duration(p.settings.failure_pause))
                .unwrap_or(Value::Nil),
            (Field::PolicyForcefulFallback, ObjRef::Policy) => self
                .policy()
                .map(|p| Value::Bool(p.settings.forceful_fallback))
                .unwrap_or(Value::Nil),
            // A field asked of the wrong kind of object: the checker types fields by kind, so
            // this is a host bug; nil makes the guard fail loudly rather than guess.
            (
                Field::NodePoolName
                | Field::NodePoolReplicas
                | Field::NodePoolGovernance
                | Field::NodeClaimName
                | Field::NodeClaimState
                | Field::NodeClaimDeletionTimestamp
                | Field::NodeClaimNode
                | Field::NodeClaimInitialized
                | Field::NodeName
                | Field::NodeClaim
                | Field::PodName
                | Field::PolicyReadyTimeout
                | Field::PolicyCooldownAfter
                | Field::PolicyFailurePause
                | Field::PolicyForcefulFallback,
                _,
            ) => Value::Nil,
        }
    }

    fn annotation(&self, obj: &ObjRef, key: Key) -> Option<String> {
        annotation(self.meta_of(obj)?, key).map(str::to_string)
    }

    fn call(&self, pred: Pred, args: &[Value]) -> Value {
        let now = self.now;
        let pool_meta = self.pool.as_ref().map(|p| &p.metadata);
        let since = |key: Key| -> Value {
            match pool_meta.and_then(|m| annotation(m, key)) {
                None => Value::Duration(FOREVER),
                // Unreadable (or in the future): treated as just now, so a corrupted anchor
                // never lifts a gate, and re-stamped by the rows that warn about it.
                Some(_) => match pool_meta.and_then(|m| stamp_at(m, key, now)) {
                    Some(t) => Value::Duration(now - t),
                    None => Value::Duration(Duration::zero()),
                },
            }
        };
        let claim = args.first().and_then(|a| self.claim_of(a));
        match pred {
            Pred::InWindow => match (self.policy(), args.first().and_then(Value::as_time)) {
                (Some(p), Some(t)) => Value::Bool(p.settings.schedule.in_window(t)),
                _ => Value::Nil,
            },
            Pred::Frozen => match pool_meta.and_then(|m| annotation(m, Key::Freeze)) {
                None => Value::Bool(false),
                Some(_) => match pool_meta.and_then(|m| time_annotation(m, Key::Freeze)) {
                    Some(until) => Value::Bool(now < until),
                    None => Value::Bool(true),
                },
            },
            Pred::FreezeUnreadable => Value::Bool(
                pool_meta.and_then(|m| annotation(m, Key::Freeze)).is_some()
                    && pool_meta.and_then(|m| time_annotation(m, Key::Freeze)).is_none(),
            ),
            Pred::SinceLastRotation => since(Key::LastRotationAt),
            Pred::SinceLastFailure => since(Key::LastFailureAt),
            Pred::Census => Value::Int(self.census),
            Pred::FatalFinding => Value::Bool(self.fatal),
            Pred::Deadline => claim
                .and_then(|c| Some(derive::deadline(c.created()?, c.expire_after().ok()?)))
                .flatten()
                .map(Value::Time)
                .unwrap_or(Value::Nil),
            Pred::TRot => match (self.policy(), claim) {
                (Some(p), Some(c)) => Value::Duration(p.settings.t_rot(self.tgp(c))),
                _ => Value::Nil,
            },
            Pred::SurgeHeadroom => {
                let claim = args.get(1).and_then(|a| self.claim_of(a));
                match (&self.pool, claim) {
                    (Some(pool), Some(c)) => {
                        let others = self.surges_waiting(c.metadata.name.as_deref());
                        let want = placeholder::footprints(std::iter::once(c).chain(others));
                        Value::Bool(placeholder::surge_headroom(pool, &want).is_ok())
                    }
                    _ => Value::Nil,
                }
            }
            Pred::Elapsed => match args.first().and_then(Value::as_time) {
                Some(t) => Value::Duration(now - t),
                None => Value::Nil,
            },
            Pred::EffectiveBackoff => match (self.policy(), claim) {
                (Some(p), Some(c)) => {
                    let Some(failed_at) = stamp_at(&c.metadata, Key::FailedAt, now) else {
                        return Value::Duration(Duration::zero());
                    };
                    let count = derive::retry_count_u32(annotation(&c.metadata, Key::RetryCount));
                    let at = derive::eligible_at(
                        failed_at,
                        count,
                        p.settings.retry_backoff,
                        &p.settings.schedule,
                    );
                    Value::Duration(at - failed_at)
                }
                _ => Value::Nil,
            },
            Pred::PlaceholderClassUnsafe => Value::Bool(
                self.cache
                    .placeholder_class
                    .as_deref()
                    .is_some_and(|c| !placeholder::class_safe(c)),
            ),
            Pred::HasPlaceholder => match claim {
                Some(c) => Value::Bool(
                    self.placeholder_named(c.metadata.name.as_deref().unwrap_or(""))
                        .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
                ),
                None => Value::Nil,
            },
            Pred::PlaceholderOwned => match claim {
                Some(c) => Value::Bool(
                    self.placeholder_for(c.metadata.name.as_deref().unwrap_or("")).is_some(),
                ),
                None => Value::Nil,
            },
            Pred::SurgeReady => match claim {
                Some(c) => {
                    let name = c.metadata.name.as_deref().unwrap_or("");
                    let ready = self.placeholder_for(name).is_some_and(|pod| {
                        let host = pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_deref())
                            .and_then(|n| self.node(n));
                        placeholder::surge_ready(pod, host, self.claim_node(c), self.pool_name())
                    });
                    Value::Bool(ready)
                }
                None => Value::Nil,
            },
            Pred::SurgeHostTaken => match args.first() {
                Some(Value::Name(name)) => Value::Bool(
                    self.placeholder_host(name)
                        .is_some_and(|host| self.node_of_another(name, host)),
                ),
                Some(Value::Nil) => Value::Bool(false),
                _ => Value::Nil,
            },
            Pred::SurgeUnschedulable => match claim {
                Some(c) => Value::Bool(
                    self.placeholder_for(c.metadata.name.as_deref().unwrap_or(""))
                        .is_some_and(|p| placeholder::unschedulable_reason(p).is_some()),
                ),
                None => Value::Nil,
            },
            Pred::PlaceholderNode => claim
                .and_then(|c| self.placeholder_host(c.metadata.name.as_deref().unwrap_or("")))
                .map(|n| Value::Object(ObjRef::Node(n.to_string())))
                .unwrap_or(Value::Nil),
            Pred::InducedClaim => claim
                .and_then(|c| self.induced_claim(c.metadata.name.as_deref().unwrap_or("")))
                .and_then(|c| c.metadata.name.clone())
                .map(Value::Name)
                .unwrap_or(Value::Nil),
            Pred::SurgePath => {
                let Some(c) = claim else { return Value::Nil };
                let Some(started) = stamp_at(&c.metadata, Key::StartedAt, now) else {
                    return Value::Nil;
                };
                let host_created = self
                    .induced_claim(c.metadata.name.as_deref().unwrap_or(""))
                    .and_then(|hc| hc.created());
                match placeholder::surge_path(host_created, started) {
                    Some(path) => Value::Sym(path.as_str().to_string()),
                    None => Value::Nil,
                }
            }
            Pred::DrainBound => match claim {
                Some(c) => Value::Duration(self.drain_bound(c)),
                None => Value::Nil,
            },
            Pred::Anchored => match (args.first(), &self.sweep) {
                (Some(Value::Name(n)), Some((_, anchors))) => Value::Bool(anchors.contains(n)),
                (Some(Value::Name(n)), None) => {
                    Value::Bool(self.anchors().values().any(|a| *a == n.as_str()))
                }
                (Some(Value::Nil), _) => Value::Bool(false),
                _ => Value::Nil,
            },
            Pred::InFlight => Value::Int((self.anchors().len() + self.unanchored_drains()) as i64),
            Pred::Rotating => match args.first() {
                Some(Value::Name(n)) => {
                    let anchored = match &self.sweep {
                        Some((_, anchors)) => anchors.contains(n),
                        None => self.anchors().values().any(|a| *a == n.as_str()),
                    };
                    Value::Bool(anchored || self.claim(n).is_some_and(draining_unfinished))
                }
                Some(Value::Nil) => Value::Bool(false),
                _ => Value::Nil,
            },
            Pred::StuckDrains => Value::Int(self.stuck_drains() as i64),
            Pred::Lanes => Value::Int(self.lanes as i64),
            Pred::ForeignAnchor => Value::Bool(self.foreign_anchor().is_some()),
            Pred::NominatedUnmarked => match claim {
                Some(c) => {
                    Value::Bool(self.nominated_unmarked(c.metadata.name.as_deref().unwrap_or("")))
                }
                None => Value::Nil,
            },
            Pred::SurgeClaimDue => match claim {
                Some(c) => Value::Bool(self.surge_claim_due(c)),
                None => Value::Nil,
            },
            Pred::Latest => {
                let times: Vec<DateTime<Utc>> = args.iter().filter_map(Value::as_time).collect();
                times.into_iter().max().map(Value::Time).unwrap_or(Value::Nil)
            }
        }
    }
}

/// A claim marked draining whose delete is under way: its drain goes on whatever happened to its
/// anchor, until it is gone.
fn draining_unfinished(claim: &NodeClaim) -> bool {
    claim.is_deleting() && annotation(&claim.metadata, Key::State) == Some("draining")
}
