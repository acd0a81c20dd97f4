//! The cached claims grouped the way passes read them ([`ClaimIndex`]), with what passes derive
//! from each claim's spec and status ([`Derived`]), built once per cache version ([`IndexCache`]).
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::Node;

use super::{
    KARPENTER_POOL_LABEL, PolicyView, annotation, deleting_or_draining, operator_do_not_disrupt,
    time_annotation,
};
use crate::cluster::CacheView;
use crate::engine::Key;
use crate::karpenter::NodeClaim;
use crate::placeholder;
use crate::policy::derive::{self, ClaimFacts};
use crate::policy::duration::ExpireAfter;
use crate::policy::feasibility::Finding;
use crate::policy::settings::Effective;

/// The cached claims grouped the way passes read them, built once per cache version instead of
/// scanning every claim in the cluster on every pool's pass. Each grouping is built on first
/// use, in the cache's (name) order, so it gives exactly what the scan it replaces gave. A pool
/// whose claims and their nodes are the very objects of the previous version keeps that
/// version's entry, with what was derived from them: a watch event about one pool re-derives
/// that pool only.
#[derive(Debug, Default)]
pub(crate) struct ClaimIndex {
    /// Label `karpenter.sh/nodepool` -> its claims, in name order.
    by_pool: OnceLock<HashMap<String, Arc<PoolClaims>>>,
    /// The index of the cache version before this one, until `by_pool` is built from it.
    previous: Mutex<Option<Arc<ClaimIndex>>>,
    /// What this version's cache held, recorded with `by_pool` for the next version's index.
    seen: OnceLock<Seen>,
    /// The nodes that differ from the previous version's, found with `by_pool`.
    moved: OnceLock<MovedNodes>,
    /// `status.nodeName` -> the first claim (in name order) that names the node.
    by_node: OnceLock<HashMap<String, Arc<NodeClaim>>>,
    /// `status.providerID` -> the first claim (in name order) with that instance.
    by_provider: OnceLock<HashMap<String, Arc<NodeClaim>>>,
}

/// What one cache version held, kept with its index: the next version's index walks it in step
/// with its own cache (both in name order), comparing objects by address, to find what changed
/// without looking each name up.
#[derive(Debug, Default)]
struct Seen {
    /// Every cached claim, with its `karpenter.sh/nodepool` label.
    claims: Vec<(Arc<NodeClaim>, Option<Arc<str>>)>,
    /// Every cached node (a cache keys its nodes by name).
    nodes: Vec<Arc<Node>>,
}

/// The names of the nodes that are not the previous version's objects (changed, added or gone),
/// sorted; `None` when no previous version was seen, and every node is looked up.
type MovedNodes = Option<Vec<String>>;

/// One pool's cached claims, and what passes derive from their spec and status.
#[derive(Debug, Default)]
struct PoolClaims {
    claims: Vec<Arc<NodeClaim>>,
    /// Parallel to `claims`, computed on the first pass over the pool in this cache version.
    derived: OnceLock<Vec<Derived>>,
    /// The pool's entry of the cache version before, until `derived` is computed: a claim
    /// still the same object on the same node object keeps what was derived of it there.
    before: Mutex<Option<Arc<PoolClaims>>>,
    /// One node's worth of `claims` ([`placeholder::worth_of`] their derived footprints), computed
    /// once per cache version.
    worth: OnceLock<placeholder::Resources>,
    /// The candidate facts and dues of a pass that wrote no claim and no node, and what else
    /// they were computed from.
    unwritten: Mutex<Option<(UnwrittenKey, Arc<FactsDues>)>>,
    /// Each claim's short-lead finding (layer 3, parallel to `claims`) under one policy view:
    /// it reads the claim's `expireAfter`, tGP and creation, and the view's settings, period
    /// and listed occurrences, nothing a pass writes.
    short_leads: Mutex<Option<(Weak<PolicyView>, ShortLeads)>>,
    /// The earliest deadline of `claims` not being deleted ([`Snapshot::nearest_deadline`](super::Snapshot::nearest_deadline)).
    nearest_deadline: OnceLock<Option<DateTime<Utc>>>,
    /// The indices of `claims` being deleted or marked draining, as cached
    /// ([`Snapshot::claims_in_flight`](super::Snapshot::claims_in_flight)).
    marked: OnceLock<Box<[usize]>>,
}

/// Each claim's short-lead finding ([`short_lead`](crate::policy::feasibility::short_lead)), parallel to a pool's claims.
pub(super) type ShortLeads = Arc<[Option<Finding>]>;

/// The pool's claims' candidate facts and their due instants (the burst lookahead's), parallel
/// to its claims.
#[derive(Debug)]
pub(super) struct FactsDues {
    pub(super) facts: Vec<Option<ClaimFacts>>,
    pub(super) dues: Vec<Option<DateTime<Utc>>>,
    /// The claims with facts in rotation order ([`FactsDues::in_order`]).
    order: OnceLock<Box<[usize]>>,
    /// When each claim becomes a candidate ([`FactsDues::census`]).
    since: OnceLock<CensusIndex>,
}

/// The claims with facts by [`derive::CandidateSince`]: the due instants of those that become
/// candidates once `now` reaches them, sorted, and the failed ones, asked each time.
#[derive(Debug)]
struct CensusIndex {
    due: Box<[DateTime<Utc>]>,
    ask: Box<[usize]>,
}

impl FactsDues {
    pub(super) fn new(facts: Vec<Option<ClaimFacts>>, dues: Vec<Option<DateTime<Utc>>>) -> Self {
        FactsDues { facts, dues, order: OnceLock::new(), since: OnceLock::new() }
    }

    /// How many of the claims are candidates at `now` ([`derive::candidacy_due`] says
    /// `Candidate`), counted without asking each: the facts stay the same from pass to pass,
    /// and only the failed claims' verdict depends on `now` other than through their due
    /// instant.
    pub(super) fn census(&self, settings: &Effective, now: DateTime<Utc>) -> usize {
        let index = self.since.get_or_init(|| {
            let (mut due, mut ask) = (Vec::new(), Vec::new());
            for (i, f) in self.facts.iter().enumerate() {
                let Some(f) = f else { continue };
                match derive::candidate_since(f, self.dues[i]) {
                    derive::CandidateSince::Never => {}
                    derive::CandidateSince::Due(at) => due.push(at),
                    derive::CandidateSince::Ask => ask.push(i),
                }
            }
            due.sort_unstable();
            CensusIndex { due: due.into(), ask: ask.into() }
        });
        let reached = index.due.partition_point(|at| derive::due_reached(settings, *at, now));
        let asked = index.ask.iter().filter(|&&i| {
            self.facts[i].as_ref().is_some_and(|f| {
                derive::candidacy_due(f, settings, self.dues[i], now)
                    == derive::Candidacy::Candidate
            })
        });
        reached + asked.count()
    }

    /// The indices of the claims with facts, in [`RotationOrder`](derive::RotationOrder) (their
    /// deadline, creation and name; names are unique: a total order), sorted once: a pass that
    /// selects walks them in order instead of comparing every candidate to find the first.
    /// `derived` is the pool's, parallel to `facts`.
    pub(super) fn in_order(&self, derived: &[Derived]) -> &[usize] {
        self.order.get_or_init(|| {
            let mut keyed: Vec<(derive::RotationOrder<'_>, usize)> = (self.facts.iter())
                .zip(derived)
                .enumerate()
                .filter_map(|(i, (f, d))| {
                    let f = f.as_ref()?;
                    let deadline = derive::deadline(f.created, f.expire_after);
                    Some((derive::RotationOrder { deadline, created: f.created, name: &d.name }, i))
                })
                .collect();
            keyed.sort_unstable();
            keyed.into_iter().map(|(_, i)| i).collect()
        })
    }
}

/// What a pool's unwritten [`FactsDues`] depend on besides its claims and their nodes: the
/// policy view (its settings, window-open time and lookahead; a `Weak` keeps its address from
/// being reused), the lanes and the pool's tGP.
#[derive(Debug)]
pub(super) struct UnwrittenKey {
    policy: Weak<PolicyView>,
    lanes: usize,
    tgp: Option<Duration>,
}

impl UnwrittenKey {
    pub(super) fn new(policy: &Arc<PolicyView>, lanes: usize, tgp: Option<Duration>) -> Self {
        UnwrittenKey { policy: Arc::downgrade(policy), lanes, tgp }
    }

    fn matches(&self, other: &UnwrittenKey) -> bool {
        self.policy.ptr_eq(&other.policy)
            && self.policy.strong_count() > 0
            && self.lanes == other.lanes
            && self.tgp == other.tgp
    }
}

/// What a pass reads of a claim apart from its annotations: a pass's own writes change only
/// annotations (see [`apply_patch`]), so these hold for its overlay copy as well.
///
/// [`apply_patch`]: super::apply_patch
#[derive(Debug, Clone)]
pub(crate) struct Derived {
    /// `metadata.name` (empty when unset).
    pub(super) name: String,
    /// `cache.nodes[status.nodeName]`.
    pub(super) node: Option<Arc<Node>>,
    created: Option<DateTime<Utc>>,
    /// `spec.expireAfter`, `None` when it does not parse.
    pub expire_after: Option<ExpireAfter>,
    /// `spec.terminationGracePeriod`, `None` when unset or unparseable.
    pub termination_grace_period: Option<Duration>,
    ready: bool,
    deleting: bool,
    /// The candidate facts of the cached claim and node: those of a pass that wrote neither.
    pub(super) cached: Option<ClaimFacts>,
    /// [`placeholder::footprint`] of the claim (its `status.allocatable`, which no pass writes).
    footprint: Arc<placeholder::Resources>,
}

impl Derived {
    /// `metadata.creationTimestamp`, `None` when unset.
    pub(crate) fn created(&self) -> Option<DateTime<Utc>> {
        self.created
    }

    fn of(claim: &NodeClaim, cache: &CacheView, shapes: &mut Shapes) -> Derived {
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
            footprint: shapes.share(placeholder::footprint(claim)),
        };
        d.cached = d.facts(claim, d.node.as_deref());
        d
    }

    /// `claim`'s node in `cache` is the node object this was derived with, for a `self` that
    /// held in the previous version's cache: a node not `moved` since is still that object.
    fn on_same_node(&self, claim: &NodeClaim, cache: &CacheView, moved: &MovedNodes) -> bool {
        let node = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
        if let (Some(n), Some(moved)) = (node, moved)
            && moved.binary_search_by(|m| m.as_str().cmp(n)).is_err()
        {
            return true;
        }
        match (node.and_then(|n| cache.nodes.get(n)), &self.node) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The candidate facts of `claim` (§3.2; this claim, as cached or as written) on `node`:
    /// the one place a pass builds them.
    pub(super) fn facts(&self, claim: &NodeClaim, node: Option<&Node>) -> Option<ClaimFacts> {
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

/// The distinct footprints of a pool's claims, up to [`Shapes::MAX`]: claims of one shape share
/// one footprint, so that a pool's worth folds each shape once (an instance type or two in most
/// pools), not each claim.
#[derive(Default)]
struct Shapes(Vec<Arc<placeholder::Resources>>);

impl Shapes {
    const MAX: usize = 16;

    /// The distinct footprints among `footprints` (by address), up to [`Shapes::MAX`].
    fn of<'a>(footprints: impl Iterator<Item = &'a Arc<placeholder::Resources>>) -> Self {
        let mut shapes = Shapes::default();
        for f in footprints {
            if shapes.0.len() == Self::MAX {
                break;
            }
            if !shapes.holds(f) {
                shapes.0.push(Arc::clone(f));
            }
        }
        shapes
    }

    fn holds(&self, footprint: &Arc<placeholder::Resources>) -> bool {
        self.0.iter().any(|s| Arc::ptr_eq(s, footprint))
    }

    /// `footprint`, shared with an equal one already held.
    fn share(&mut self, footprint: placeholder::Resources) -> Arc<placeholder::Resources> {
        if let Some(same) = self.0.iter().find(|s| ***s == footprint) {
            return Arc::clone(same);
        }
        let footprint = Arc::new(footprint);
        if self.0.len() < Self::MAX {
            self.0.push(Arc::clone(&footprint));
        }
        footprint
    }
}

impl PoolClaims {
    /// `claims` are this entry's claims, the same objects in the same order, each on the same
    /// node object as when this entry derived its facts (an entry not derived yet is not kept).
    fn same_objects(
        &self,
        claims: &[Arc<NodeClaim>],
        cache: &CacheView,
        moved: &MovedNodes,
    ) -> bool {
        let Some(derived) = self.derived.get() else { return false };
        self.claims.len() == claims.len()
            && self.claims.iter().zip(claims).all(|(a, b)| Arc::ptr_eq(a, b))
            && derived.iter().zip(claims).all(|(d, c)| d.on_same_node(c, cache, moved))
    }

    /// What is derived of `claims` in `cache`, this entry's (an earlier version's) kept for each
    /// claim that is still the same object on the same node object: [`Derived::of`] reads
    /// nothing else. Both lists are in name order.
    fn rederive(
        &self,
        claims: &[Arc<NodeClaim>],
        cache: &CacheView,
        moved: &MovedNodes,
    ) -> Vec<Derived> {
        let old = self.derived.get().map(Vec::as_slice).unwrap_or_default();
        let mut shapes = Shapes::of(old.iter().map(|d| &d.footprint));
        let mut at = 0;
        claims
            .iter()
            .map(|c| {
                // The very object next in line needs no name compared.
                if self.claims.get(at).is_none_or(|o| !Arc::ptr_eq(o, c)) {
                    let name = c.metadata.name.as_deref().unwrap_or_default();
                    while at < old.len() && old[at].name.as_str() < name {
                        at += 1;
                    }
                }
                let same = old.get(at).filter(|d| {
                    Arc::ptr_eq(&self.claims[at], c) && d.on_same_node(c, cache, moved)
                });
                match same {
                    Some(d) => {
                        at += 1;
                        d.clone()
                    }
                    None => Derived::of(c, cache, &mut shapes),
                }
            })
            .collect()
    }
}

impl ClaimIndex {
    fn by_pool(&self, cache: &CacheView) -> &HashMap<String, Arc<PoolClaims>> {
        self.by_pool.get_or_init(|| {
            let previous = self.previous.lock().unwrap_or_else(|e| e.into_inner()).take();
            let seen_before = previous.as_ref().and_then(|p| p.seen.get());
            let (seen, map) = group_by_pool(cache, seen_before);
            let moved = seen_before.map(|before| moved_nodes(&before.nodes, cache));
            let moved = self.moved.get_or_init(|| moved);
            let _ = self.seen.set(seen);
            let before = previous.as_ref().and_then(|p| p.by_pool.get());
            map.into_iter()
                .map(|(pool, claims)| {
                    let old = before.and_then(|b| b.get(&*pool));
                    let entry = match old {
                        Some(old) if old.same_objects(&claims, cache, moved) => Arc::clone(old),
                        _ => Arc::new(PoolClaims {
                            claims,
                            before: Mutex::new(old.filter(|o| o.derived.get().is_some()).cloned()),
                            ..Default::default()
                        }),
                    };
                    (pool.to_string(), entry)
                })
                .collect()
        })
    }

    /// The nodes moved since the previous version's index ([`MovedNodes`]; `None` before
    /// `by_pool` is built).
    fn moved(&self) -> &MovedNodes {
        self.moved.get().unwrap_or(&None)
    }

    pub(super) fn pool(&self, cache: &CacheView, pool: &str) -> &[Arc<NodeClaim>] {
        self.by_pool(cache).get(pool).map(|p| p.claims.as_slice()).unwrap_or_default()
    }

    /// The pool's claims with their derived facts.
    pub(super) fn pool_derived(
        &self,
        cache: &CacheView,
        pool: &str,
    ) -> (&[Arc<NodeClaim>], &[Derived]) {
        let Some(p) = self.by_pool(cache).get(pool) else { return (&[], &[]) };
        let derived = p.derived.get_or_init(|| {
            let before = p.before.lock().unwrap_or_else(|e| e.into_inner()).take();
            match before.as_deref() {
                Some(b) => b.rederive(&p.claims, cache, self.moved()),
                None => {
                    let mut shapes = Shapes::default();
                    p.claims.iter().map(|c| Derived::of(c, cache, &mut shapes)).collect()
                }
            }
        });
        (&p.claims, derived)
    }

    /// The pool's claims' [`FactsDues`] for a pass that wrote no claim and no node: `compute`'s,
    /// kept while `key` matches.
    pub(super) fn pool_unwritten(
        &self,
        cache: &CacheView,
        pool: &str,
        key: UnwrittenKey,
        compute: impl FnOnce() -> Arc<FactsDues>,
    ) -> Arc<FactsDues> {
        let Some(p) = self.by_pool(cache).get(pool) else { return compute() };
        kept(&p.unwritten, key, UnwrittenKey::matches, compute)
    }

    /// The pool's [`ShortLeads`] under `policy`: `compute`'s, kept while the view is the same.
    pub(super) fn pool_short_leads(
        &self,
        cache: &CacheView,
        pool: &str,
        policy: &Arc<PolicyView>,
        compute: impl FnOnce() -> ShortLeads,
    ) -> ShortLeads {
        let Some(p) = self.by_pool(cache).get(pool) else { return compute() };
        // Alive, so its address is not reused: the same allocation is the same view.
        let same = |kept: &Weak<PolicyView>, view: &Weak<PolicyView>| {
            kept.ptr_eq(view) && kept.strong_count() > 0
        };
        kept(&p.short_leads, Arc::downgrade(policy), same, compute)
    }

    /// The pool's `nearest_deadline`: `compute`'s, once per cache version.
    pub(super) fn pool_nearest_deadline(
        &self,
        cache: &CacheView,
        pool: &str,
        compute: impl FnOnce() -> Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        let Some(p) = self.by_pool(cache).get(pool) else { return compute() };
        *p.nearest_deadline.get_or_init(compute)
    }

    /// The pool's claims and the indices of those being deleted or marked draining in the
    /// cache ([`deleting_or_draining`]), found once per cache version.
    pub(super) fn pool_marked(
        &self,
        cache: &CacheView,
        pool: &str,
    ) -> (&[Arc<NodeClaim>], &[usize]) {
        let Some(p) = self.by_pool(cache).get(pool) else { return (&[], &[]) };
        let marked = p.marked.get_or_init(|| {
            (p.claims.iter().enumerate())
                .filter(|(_, c)| deleting_or_draining(c))
                .map(|(i, _)| i)
                .collect()
        });
        (&p.claims, marked)
    }

    /// One node's worth of the pool's resources ([`placeholder::worth_of`] its claims' footprints).
    pub(super) fn pool_worth<'a>(
        &'a self,
        cache: &CacheView,
        pool: &str,
    ) -> &'a placeholder::Resources {
        // A pool without claims: only the node itself is known of its nodes.
        static NONE: std::sync::LazyLock<placeholder::Resources> =
            std::sync::LazyLock::new(|| placeholder::worth_of(std::iter::empty()));
        let Some(p) = self.by_pool(cache).get(pool) else { return &NONE };
        p.worth.get_or_init(|| {
            let (_, derived) = self.pool_derived(cache, pool);
            let shapes = Shapes::of(derived.iter().map(|d| &d.footprint));
            let rest = derived.iter().map(|d| &d.footprint).filter(|f| !shapes.holds(f));
            placeholder::worth_of(shapes.0.iter().chain(rest).map(Arc::as_ref))
        })
    }

    pub(super) fn by_node(&self, cache: &CacheView) -> &HashMap<String, Arc<NodeClaim>> {
        self.by_node.get_or_init(|| {
            index_claims(cache, |c| c.status.as_ref().and_then(|s| s.node_name.as_ref()))
        })
    }

    pub(super) fn by_provider(&self, cache: &CacheView) -> &HashMap<String, Arc<NodeClaim>> {
        self.by_provider.get_or_init(|| {
            index_claims(cache, |c| c.status.as_ref().and_then(|s| s.provider_id.as_ref()))
        })
    }
}

/// `compute`'s value, kept in `slot` with `key` and returned again while `same(kept, key)`.
fn kept<K, V: Clone>(
    slot: &Mutex<Option<(K, V)>>,
    key: K,
    same: impl FnOnce(&K, &K) -> bool,
    compute: impl FnOnce() -> V,
) -> V {
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((k, v)) = slot.as_ref()
        && same(k, &key)
    {
        return v.clone();
    }
    let value = compute();
    *slot = Some((key, value.clone()));
    value
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

/// Each pool's label and its claims, in name order.
type PoolGroups = Vec<(Arc<str>, Vec<Arc<NodeClaim>>)>;

/// The cached claims grouped by their `karpenter.sh/nodepool` label, in name order, and what the
/// cache held ([`Seen`]). A claim that is the very object `before` held keeps the label read
/// there: only the claims that changed are looked into.
fn group_by_pool(cache: &CacheView, before: Option<&Seen>) -> (Seen, PoolGroups) {
    let before = before.map(|b| b.claims.as_slice()).unwrap_or_default();
    let mut seen = Seen {
        claims: Vec::with_capacity(cache.claims.len()),
        nodes: cache.nodes.values().cloned().collect(),
    };
    // The groups in order of appearance; a label is one shared string, so a claim of the pool
    // of the claim before it is placed by address.
    let mut groups: PoolGroups = Vec::new();
    let mut group_of: HashMap<Arc<str>, usize> = HashMap::new();
    let mut last: Option<usize> = None;
    let mut at = 0;
    for (name, c) in &cache.claims {
        let mut kept = None;
        while let Some((old, label)) = before.get(at) {
            if Arc::ptr_eq(old, c) {
                kept = Some(label.clone());
                at += 1;
                break;
            }
            if old.metadata.name.as_deref().unwrap_or_default() >= name.as_str() {
                break;
            }
            at += 1;
        }
        let pool = kept.unwrap_or_else(|| {
            let labels = c.metadata.labels.as_ref();
            labels.and_then(|l| l.get(KARPENTER_POOL_LABEL)).map(|p| Arc::from(p.as_str()))
        });
        if let Some(pool) = &pool {
            let g = match last.filter(|&g| Arc::ptr_eq(&groups[g].0, pool)) {
                Some(g) => g,
                None => *group_of.entry(Arc::clone(pool)).or_insert_with(|| {
                    groups.push((Arc::clone(pool), Vec::new()));
                    groups.len() - 1
                }),
            };
            groups[g].1.push(Arc::clone(c));
            last = Some(g);
        }
        // The group's own string, shared by every claim of the pool from now on.
        let pool = last.filter(|_| pool.is_some()).map(|g| Arc::clone(&groups[g].0));
        seen.claims.push((Arc::clone(c), pool));
    }
    (seen, groups)
}

/// The names of the nodes of `cache` that are not the objects `before` held, and of those
/// `before` held that `cache` no longer has, sorted: both lists walked in step, in name order,
/// comparing addresses (a name is compared only where they differ).
fn moved_nodes(before: &[Arc<Node>], cache: &CacheView) -> Vec<String> {
    let name = |n: &Arc<Node>| n.metadata.name.clone().unwrap_or_default();
    let mut moved = Vec::new();
    let mut at = 0;
    for (key, node) in &cache.nodes {
        debug_assert_eq!(node.metadata.name.as_ref(), Some(key), "a cache keys nodes by name");
        loop {
            let Some(old) = before.get(at) else {
                moved.push(key.clone()); // added
                break;
            };
            if Arc::ptr_eq(old, node) {
                at += 1;
                break;
            }
            match old.metadata.name.as_deref().unwrap_or_default().cmp(key.as_str()) {
                std::cmp::Ordering::Less => moved.push(name(old)), // gone
                std::cmp::Ordering::Equal => {
                    moved.push(key.clone()); // changed
                    at += 1;
                    break;
                }
                std::cmp::Ordering::Greater => {
                    moved.push(key.clone()); // added
                    break;
                }
            }
            at += 1;
        }
    }
    moved.extend(before[at..].iter().map(name));
    moved.sort_unstable();
    moved
}

/// The [`ClaimIndex`] of the last cache version a controller read. The version is the view's
/// identity: a `Weak` keeps its address from being reused, and a view cannot change in place
/// while a `Weak` to it exists (`Arc::make_mut` moves it out, `Arc::get_mut` refuses).
#[derive(Debug, Default)]
pub(crate) struct IndexCache {
    view: Weak<CacheView>,
    index: Arc<ClaimIndex>,
}

impl IndexCache {
    pub(crate) fn of(&mut self, cache: &Arc<CacheView>) -> Arc<ClaimIndex> {
        let same =
            std::ptr::eq(self.view.as_ptr(), Arc::as_ptr(cache)) && self.view.strong_count() > 0;
        if !same {
            self.view = Arc::downgrade(cache);
            let previous = std::mem::take(&mut self.index);
            // One version back at most: the previous index lets go of its own.
            previous.previous.lock().unwrap_or_else(|e| e.into_inner()).take();
            self.index =
                Arc::new(ClaimIndex { previous: Mutex::new(Some(previous)), ..Default::default() });
        }
        Arc::clone(&self.index)
    }
}

#[cfg(test)]
mod tests;
