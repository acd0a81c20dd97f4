//! The in-memory cluster: the [`Cluster`] that `noderotation simulate` and every test run the
//! controller against. Production code, not a mock: it is faithful where the spec depends on the
//! API server's behaviour (resourceVersion and 409 Conflict, 404 NotFound, uid preconditions,
//! finalizers holding a deleting object with its `deletionTimestamp`, a reflector cache that lags
//! the store) and nothing else.
//!
//! Two sides, kept apart by name:
//!
//! - **Controller side**: the [`Cluster`] trait. Every call is consulted by the fault hook
//!   ([`Faults`]), counted in [`WriteCounts`] when it writes, and sees the store through the
//!   preconditions a real API server checks. Reads through [`Cluster::cache`] see this handle's
//!   lagging [`CacheView`].
//! - **World side**: the inherent methods (`apply_*`, `update_*`, `delete_object`, `delete_now`,
//!   `remove_finalizer`, `pool`, `claims`, ...), used by the simulated Karpenter, kubelet,
//!   scheduler and operator, and by tests to arrange and inspect state. They act on the store
//!   directly: no faults, no preconditions, not counted as controller writes. Their mutations
//!   still bump resourceVersions and produce watch events, exactly like the controller's.
//!
//! Everything is deterministic: ordered maps, counter-based uids, time from the injected
//! [`Clock`], randomness only from a seeded [`Rng`].
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use super::{
    ApiError, CacheView, Cluster, EventRecord, MANAGED_BY_LABEL, MANAGED_BY_VALUE, ObjectKind,
    ObjectRef, Patch,
};
use crate::clock::Clock;
use crate::karpenter::{NodeClaim, NodePool};
use crate::policy::crd::{RotationPolicy, RotationPolicyStatus};
use crate::policy::resolve::to_time;

// ---------------------------------------------------------------------------------------------
// Deterministic randomness
// ---------------------------------------------------------------------------------------------

/// A small, fast, seedable PRNG (xoshiro256** seeded through SplitMix64). One seed gives one
/// exact sequence on every platform, so a simulation run replays from its seed. Not for
/// cryptography.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s =
            [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        Rng { s }
    }

    pub fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = &mut self.s;
        let result = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = *s1 << 17;
        *s2 ^= *s0;
        *s3 ^= *s1;
        *s1 ^= *s2;
        *s0 ^= *s3;
        *s2 ^= t;
        *s3 = s3.rotate_left(45);
        result
    }

    /// Uniform in `0..n` (unbiased, Lemire's method); `0` when `n == 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            // The low half decides rejection; the high half is the result.
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `true` with probability `p` (clamped to `[0, 1]`). Always consumes one draw, so the
    /// sequence does not depend on `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// A uniformly chosen element, `None` for an empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        let n = u64::try_from(items.len()).ok()?;
        items.get(usize::try_from(self.below(n)).ok()?)
    }

    /// An independent generator derived from this one, for giving an actor its own stream
    /// without coupling its draws to everyone else's.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------------------------
// Fault injection
// ---------------------------------------------------------------------------------------------

/// The kind of API call the controller made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApiVerb {
    /// `get_pool` / `get_claim` / `get_node`.
    Get,
    /// `pods_on_node` (the target is the Node).
    List,
    Patch,
    Delete,
    /// `create_pod`.
    Create,
    /// `update_policy_status`.
    UpdateStatus,
    /// `record_event` (the target is the event's object).
    RecordEvent,
}

impl ApiVerb {
    pub fn is_write(self) -> bool {
        !matches!(self, ApiVerb::Get | ApiVerb::List)
    }
}

/// One controller call, as shown to the fault hook.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// Which controller handle made the call ([`MemoryCluster::client_id`]).
    pub client: usize,
    pub verb: ApiVerb,
    pub target: &'a ObjectRef,
    /// The write carries a resourceVersion or uid precondition.
    pub precondition: bool,
    pub now: DateTime<Utc>,
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    #[default]
    Proceed,
    /// 409 without applying. On a preconditioned write the target's resourceVersion is also
    /// bumped (a concurrent writer touched it), so the controller's copy really is stale. On a
    /// read it is ignored (a GET does not conflict).
    Conflict,
    /// 5xx / timeout before anything was applied.
    Transient,
    /// The server applied the call, then the response was lost: the controller sees
    /// `Transient` ("may or may not have been applied"). On a read, same as `Transient`.
    ApplyThenTransient,
    /// 403 without applying: an admission webhook or a ResourceQuota refused the call.
    Forbidden,
}

/// Decides, per controller call, whether it proceeds or fails. Called with the cluster's lock
/// held: it must not call back into the cluster.
pub trait Faults: Send {
    fn decide(&mut self, call: &Call<'_>) -> Fault;
}

impl<F> Faults for F
where
    F: FnMut(&Call<'_>) -> Fault + Send,
{
    fn decide(&mut self, call: &Call<'_>) -> Fault {
        self(call)
    }
}

/// Seed-driven faults with fixed probabilities, one draw per call. `conflict` applies only to
/// writes with a precondition (an unconditional write cannot lose a race); `transient` to every
/// call; `apply_then_transient` to writes (on reads it is folded into `transient`).
#[derive(Debug, Clone)]
pub struct RandomFaults {
    pub rng: Rng,
    pub conflict: f64,
    pub transient: f64,
    pub apply_then_transient: f64,
}

impl Faults for RandomFaults {
    fn decide(&mut self, call: &Call<'_>) -> Fault {
        let u = self.rng.next_f64();
        let conflict = if call.verb.is_write() && call.precondition { self.conflict } else { 0.0 };
        if u < conflict {
            Fault::Conflict
        } else if u < conflict + self.transient {
            Fault::Transient
        } else if u < conflict + self.transient + self.apply_then_transient {
            if call.verb.is_write() { Fault::ApplyThenTransient } else { Fault::Transient }
        } else {
            Fault::Proceed
        }
    }
}

/// The message of every injected transient error: the same whether or not the write applied,
/// since the controller cannot tell either.
pub const INJECTED_TRANSIENT: &str = "injected: request timed out";
/// The message of an injected 403.
pub const INJECTED_FORBIDDEN: &str = "injected: exceeded quota";

// ---------------------------------------------------------------------------------------------
// Cache lag
// ---------------------------------------------------------------------------------------------

/// How long a store mutation takes to reach a controller's [`CacheView`]. Whatever the delays,
/// events of one kind are delivered in the order they happened (one watch stream per resource),
/// so a later event may wait behind an earlier, slower one; the lag stays bounded by the max.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheLag {
    /// The cache always equals the store (as of the last `cache()` call).
    #[default]
    None,
    /// Every event arrives exactly this long after the mutation.
    Fixed(Duration),
    /// Each event arrives after a delay drawn uniformly (millisecond steps) from `[0, max]`
    /// by an [`Rng`] seeded with `seed`.
    UpTo { max: Duration, seed: u64 },
}

impl CacheLag {
    fn rng(self) -> Rng {
        match self {
            CacheLag::UpTo { seed, .. } => Rng::new(seed),
            _ => Rng::new(0),
        }
    }

    /// The delay of the next event; draws from `rng` only for `UpTo`.
    pub fn next_delay(self, rng: &mut Rng) -> Duration {
        match self {
            CacheLag::None => Duration::zero(),
            CacheLag::Fixed(d) => d.max(Duration::zero()),
            CacheLag::UpTo { max, .. } => {
                let max_ms = u64::try_from(max.num_milliseconds()).unwrap_or(0);
                let ms = rng.below(max_ms.saturating_add(1));
                Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Write counters
// ---------------------------------------------------------------------------------------------

/// Controller writes through the trait. The per-verb counts are writes the store applied
/// (including no-op patches and writes whose response an injected fault then lost); `failed`
/// counts write calls that returned an error to the controller (genuine or injected). A write
/// that applied and then reported `Transient` is in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteCounts {
    pub patch: u64,
    pub delete: u64,
    pub create: u64,
    pub status: u64,
    pub event: u64,
    pub failed: u64,
}

impl WriteCounts {
    /// Applied writes of every verb, Events included.
    pub fn applied(&self) -> u64 {
        self.patch + self.delete + self.create + self.status + self.event
    }

    fn count(&mut self, verb: ApiVerb) {
        match verb {
            ApiVerb::Patch => self.patch += 1,
            ApiVerb::Delete => self.delete += 1,
            ApiVerb::Create => self.create += 1,
            ApiVerb::UpdateStatus => self.status += 1,
            ApiVerb::RecordEvent => self.event += 1,
            ApiVerb::Get | ApiVerb::List => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------------

/// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
type Key = (String, String);

const KINDS: usize = 5;

fn slot(kind: ObjectKind) -> usize {
    match kind {
        ObjectKind::NodePool => 0,
        ObjectKind::NodeClaim => 1,
        ObjectKind::Node => 2,
        ObjectKind::Pod => 3,
        ObjectKind::RotationPolicy => 4,
    }
}

#[derive(Debug, Default)]
struct Store {
    pools: BTreeMap<Key, Arc<NodePool>>,
    claims: BTreeMap<Key, Arc<NodeClaim>>,
    nodes: BTreeMap<Key, Arc<Node>>,
    pods: BTreeMap<Key, Arc<Pod>>,
    policies: BTreeMap<Key, Arc<RotationPolicy>>,
    /// `spec.nodeName` -> pods bound there, so `pods_on_node` does not scan every pod.
    pods_by_node: BTreeMap<String, BTreeSet<Key>>,
}

/// One watch event on its way to a controller's cache: the object's state after the mutation
/// (`None`: gone from the view).
#[derive(Debug, Clone)]
enum Change {
    Pool(String, Option<Arc<NodePool>>),
    Claim(String, Option<Arc<NodeClaim>>),
    Node(String, Option<Arc<Node>>),
    Placeholder(String, Option<Arc<Pod>>),
    Policy(String, Option<Arc<RotationPolicy>>),
}

fn set_or_remove<T>(map: &mut BTreeMap<String, Arc<T>>, name: String, obj: Option<Arc<T>>) {
    match obj {
        Some(obj) => {
            map.insert(name, obj);
        }
        None => {
            map.remove(&name);
        }
    }
}

impl Change {
    fn apply(self, view: &mut CacheView) {
        match self {
            Change::Pool(name, obj) => set_or_remove(&mut view.pools, name, obj),
            Change::Claim(name, obj) => set_or_remove(&mut view.claims, name, obj),
            Change::Node(name, obj) => set_or_remove(&mut view.nodes, name, obj),
            Change::Placeholder(name, obj) => set_or_remove(&mut view.placeholders, name, obj),
            Change::Policy(name, obj) => set_or_remove(&mut view.policies, name, obj),
        }
    }
}

/// A placeholder is what the controller's pod reflector watches: the managed-by label, in the
/// controller's namespace.
fn is_placeholder(controller_namespace: &str, key: &Key, pod: &Pod) -> bool {
    key.0 == controller_namespace
        && pod.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).map(String::as_str)
            == Some(MANAGED_BY_VALUE)
}

/// What the store needs to know about each stored type.
trait Kind: Resource + Clone + PartialEq + Send + Sync + 'static {
    const KIND: ObjectKind;
    /// Custom resources bump `metadata.generation` when their spec changes.
    const TRACKS_GENERATION: bool;

    fn table(store: &Store) -> &BTreeMap<Key, Arc<Self>>;
    fn table_mut(store: &mut Store) -> &mut BTreeMap<Key, Arc<Self>>;
    fn spec_changed(_old: &Self, _new: &Self) -> bool {
        false
    }
    fn set_unschedulable(&mut self, _unschedulable: bool) {}
    fn reindex(_store: &mut Store, _key: &Key, _old: Option<&Self>, _new: Option<&Self>) {}
    /// The watch event this mutation sends to a controller cache, if it watches it.
    fn change(
        ns: &str,
        key: &Key,
        old: Option<&Arc<Self>>,
        new: Option<&Arc<Self>>,
    ) -> Option<Change>;
}

macro_rules! cluster_kind {
    ($ty:ty, $kind:ident, $field:ident, $variant:ident, $generation:expr) => {
        impl Kind for $ty {
            const KIND: ObjectKind = ObjectKind::$kind;
            const TRACKS_GENERATION: bool = $generation;

            fn table(store: &Store) -> &BTreeMap<Key, Arc<Self>> {
                &store.$field
            }
            fn table_mut(store: &mut Store) -> &mut BTreeMap<Key, Arc<Self>> {
                &mut store.$field
            }
            fn spec_changed(old: &Self, new: &Self) -> bool {
                old.spec != new.spec
            }
            fn change(
                _ns: &str,
                key: &Key,
                _old: Option<&Arc<Self>>,
                new: Option<&Arc<Self>>,
            ) -> Option<Change> {
                Some(Change::$variant(key.1.clone(), new.cloned()))
            }
        }
    };
}

cluster_kind!(NodePool, NodePool, pools, Pool, true);
cluster_kind!(NodeClaim, NodeClaim, claims, Claim, true);
cluster_kind!(RotationPolicy, RotationPolicy, policies, Policy, true);

impl Kind for Node {
    const KIND: ObjectKind = ObjectKind::Node;
    const TRACKS_GENERATION: bool = false;

    fn table(store: &Store) -> &BTreeMap<Key, Arc<Self>> {
        &store.nodes
    }
    fn table_mut(store: &mut Store) -> &mut BTreeMap<Key, Arc<Self>> {
        &mut store.nodes
    }
    fn set_unschedulable(&mut self, unschedulable: bool) {
        // Go's `omitempty`: false is never stored, only absent.
        self.spec.get_or_insert_default().unschedulable = unschedulable.then_some(true);
    }
    fn change(
        _ns: &str,
        key: &Key,
        _old: Option<&Arc<Self>>,
        new: Option<&Arc<Self>>,
    ) -> Option<Change> {
        Some(Change::Node(key.1.clone(), new.cloned()))
    }
}

fn node_name_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

impl Kind for Pod {
    const KIND: ObjectKind = ObjectKind::Pod;
    const TRACKS_GENERATION: bool = false;

    fn table(store: &Store) -> &BTreeMap<Key, Arc<Self>> {
        &store.pods
    }
    fn table_mut(store: &mut Store) -> &mut BTreeMap<Key, Arc<Self>> {
        &mut store.pods
    }
    fn reindex(store: &mut Store, key: &Key, old: Option<&Self>, new: Option<&Self>) {
        let before = old.and_then(node_name_of);
        let after = new.and_then(node_name_of);
        if before == after {
            return;
        }
        if let Some(node) = before
            && let Some(set) = store.pods_by_node.get_mut(node)
        {
            set.remove(key);
            if set.is_empty() {
                store.pods_by_node.remove(node);
            }
        }
        if let Some(node) = after {
            store.pods_by_node.entry(node.to_string()).or_default().insert(key.clone());
        }
    }
    fn change(
        ns: &str,
        key: &Key,
        old: Option<&Arc<Self>>,
        new: Option<&Arc<Self>>,
    ) -> Option<Change> {
        // A label-selected watch sends DELETED when an object stops matching.
        let new = new.filter(|p| is_placeholder(ns, key, p)).cloned();
        let was = old.is_some_and(|p| is_placeholder(ns, key, p));
        (was || new.is_some()).then(|| Change::Placeholder(key.1.clone(), new))
    }
}

/// Runs `$body` with `$t` bound to the stored type of `$kind`.
macro_rules! with_kind {
    ($kind:expr, $t:ident => $body:expr) => {
        match $kind {
            ObjectKind::NodePool => {
                type $t = NodePool;
                $body
            }
            ObjectKind::NodeClaim => {
                type $t = NodeClaim;
                $body
            }
            ObjectKind::Node => {
                type $t = Node;
                $body
            }
            ObjectKind::Pod => {
                type $t = Pod;
                $body
            }
            ObjectKind::RotationPolicy => {
                type $t = RotationPolicy;
                $body
            }
        }
    };
}

fn key_for(target: &ObjectRef) -> Result<Key, ApiError> {
    if target.name.is_empty() {
        return Err(ApiError::Invalid(format!("{target}: empty name")));
    }
    match (target.kind, &target.namespace) {
        (ObjectKind::Pod, Some(ns)) if !ns.is_empty() => Ok((ns.clone(), target.name.clone())),
        (ObjectKind::Pod, _) => Err(ApiError::Invalid(format!("{target}: pods are namespaced"))),
        (_, None) => Ok((String::new(), target.name.clone())),
        (_, Some(_)) => Err(ApiError::Invalid(format!("{target}: not a namespaced kind"))),
    }
}

fn key_of<T: Kind>(obj: &T) -> Result<Key, ApiError> {
    let meta = obj.meta();
    key_for(&ObjectRef {
        kind: T::KIND,
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    })
}

fn cluster_key(name: &str) -> Key {
    (String::new(), name.to_string())
}

/// The API server never returns an empty map or list for these (Go `omitempty`), so an emptied
/// one compares equal to an absent one.
fn normalize(meta: &mut ObjectMeta) {
    if meta.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.annotations = None;
    }
    if meta.labels.as_ref().is_some_and(BTreeMap::is_empty) {
        meta.labels = None;
    }
    if meta.finalizers.as_ref().is_some_and(Vec::is_empty) {
        meta.finalizers = None;
    }
}

fn has_finalizers(meta: &ObjectMeta) -> bool {
    meta.finalizers.as_ref().is_some_and(|f| !f.is_empty())
}

/// One controller's reflector view and the watch events still in flight to it.
struct ClientCache {
    view: Arc<CacheView>,
    queues: [VecDeque<Pending>; KINDS],
    lag: CacheLag,
    rng: Rng,
}

struct Pending {
    due: DateTime<Utc>,
    change: Change,
}

impl ClientCache {
    fn new(view: CacheView, lag: CacheLag) -> Self {
        ClientCache { view: Arc::new(view), queues: Default::default(), lag, rng: lag.rng() }
    }

    fn push(&mut self, kind: ObjectKind, change: Change, now: DateTime<Utc>) {
        let queue = &mut self.queues[slot(kind)];
        let mut due = now + self.lag.next_delay(&mut self.rng);
        if let Some(last) = queue.back() {
            due = due.max(last.due); // one watch stream per kind: never overtake
        }
        queue.push_back(Pending { due, change });
    }

    fn deliver(&mut self, now: DateTime<Utc>) {
        if self.queues.iter().all(|q| q.front().is_none_or(|p| p.due > now)) {
            return; // keep sharing the current view
        }
        let view = Arc::make_mut(&mut self.view);
        for queue in &mut self.queues {
            while let Some(pending) = queue.pop_front_if(|p| p.due <= now) {
                pending.change.apply(view);
            }
        }
    }

    fn pending(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }
}

struct State {
    controller_namespace: String,
    /// The clock's reading when the lock was taken; every write of one call shares it.
    now: DateTime<Utc>,
    store: Store,
    /// The global resourceVersion counter (etcd's revision).
    revision: u64,
    next_uid: u64,
    clients: Vec<ClientCache>,
    events: Vec<EventRecord>,
    writes: WriteCounts,
    faults: Option<Box<dyn Faults>>,
}

impl State {
    fn get<T: Kind>(&self, key: &Key) -> Option<Arc<T>> {
        T::table(&self.store).get(key).cloned()
    }

    fn new_uid(&mut self) -> String {
        self.next_uid += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.next_uid)
    }

    fn view(&self) -> CacheView {
        fn cluster<T>((key, obj): (&Key, &Arc<T>)) -> (String, Arc<T>) {
            (key.1.clone(), Arc::clone(obj))
        }
        let ns = &self.controller_namespace;
        CacheView {
            pools: self.store.pools.iter().map(cluster).collect(),
            claims: self.store.claims.iter().map(cluster).collect(),
            nodes: self.store.nodes.iter().map(cluster).collect(),
            placeholders: self
                .store
                .pods
                .range((ns.clone(), String::new())..)
                .take_while(|(key, _)| &key.0 == ns)
                .filter(|(key, pod)| is_placeholder(ns, key, pod))
                .map(cluster)
                .collect(),
            policies: self.store.policies.iter().map(cluster).collect(),
        }
    }

    /// Stores `next` at `key`: server-managed fields (resourceVersion, generation) are set
    /// here, a no-op write changes nothing (unless `force`, which still bumps the
    /// resourceVersion), and a deleting object whose last finalizer is gone is removed. Returns
    /// the object as written.
    fn write<T: Kind>(&mut self, key: &Key, mut next: T, force: bool) -> Arc<T> {
        let old = self.get::<T>(key);
        normalize(next.meta_mut());
        if let Some(old) = &old {
            next.meta_mut().resource_version.clone_from(&old.meta().resource_version);
        }
        if T::TRACKS_GENERATION {
            let generation = match &old {
                None => 1,
                Some(old) => {
                    let current = old.meta().generation.unwrap_or(1);
                    if T::spec_changed(old, &next) { current + 1 } else { current }
                }
            };
            next.meta_mut().generation = Some(generation);
        }
        if let Some(old) = &old
            && !force
            && **old == next
        {
            return Arc::clone(old);
        }
        self.revision += 1;
        next.meta_mut().resource_version = Some(self.revision.to_string());
        let next = Arc::new(next);
        let finalized = next.meta().deletion_timestamp.is_some() && !has_finalizers(next.meta());
        let stored = if finalized {
            T::table_mut(&mut self.store).remove(key);
            None
        } else {
            T::table_mut(&mut self.store).insert(key.clone(), Arc::clone(&next));
            Some(&next)
        };
        T::reindex(&mut self.store, key, old.as_deref(), stored.map(|a| &**a));
        self.emit(key, old.as_ref(), stored);
        next
    }

    /// Removes the object now, finalizers or not.
    fn remove<T: Kind>(&mut self, key: &Key) -> Option<Arc<T>> {
        let old = T::table_mut(&mut self.store).remove(key)?;
        self.revision += 1;
        T::reindex(&mut self.store, key, Some(&old), None);
        self.emit::<T>(key, Some(&old), None);
        Some(old)
    }

    fn emit<T: Kind>(&mut self, key: &Key, old: Option<&Arc<T>>, new: Option<&Arc<T>>) {
        let Some(change) = T::change(&self.controller_namespace, key, old, new) else {
            return;
        };
        let now = self.now;
        for client in &mut self.clients {
            client.push(T::KIND, change.clone(), now);
        }
    }

    // -- the API server's verbs --------------------------------------------------------------

    fn patch<T: Kind>(
        &mut self,
        key: &Key,
        patch: &Patch,
        resource_version: Option<&str>,
    ) -> Result<(), ApiError> {
        let current = self.get::<T>(key).ok_or(ApiError::NotFound)?;
        if let Some(rv) = resource_version
            && current.meta().resource_version.as_deref() != Some(rv)
        {
            return Err(ApiError::Conflict);
        }
        let mut next = (*current).clone();
        if !patch.set.is_empty() || !patch.remove.is_empty() {
            let annotations = next.meta_mut().annotations.get_or_insert_default();
            for key in &patch.remove {
                annotations.remove(key);
            }
            for (key, value) in &patch.set {
                annotations.insert(key.clone(), value.clone());
            }
        }
        if let Some(unschedulable) = patch.unschedulable {
            next.set_unschedulable(unschedulable);
        }
        self.write(key, next, false);
        Ok(())
    }

    fn delete<T: Kind>(
        &mut self,
        key: &Key,
        uid: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<(), ApiError> {
        let current = self.get::<T>(key).ok_or(ApiError::NotFound)?;
        if let Some(uid) = uid
            && current.meta().uid.as_deref() != Some(uid)
        {
            return Err(ApiError::Conflict);
        }
        if let Some(rv) = resource_version
            && current.meta().resource_version.as_deref() != Some(rv)
        {
            return Err(ApiError::Conflict);
        }
        if !has_finalizers(current.meta()) {
            self.remove::<T>(key);
        } else if current.meta().deletion_timestamp.is_none() {
            let mut next = (*current).clone();
            next.meta_mut().deletion_timestamp = Some(to_time(self.now));
            self.write(key, next, false);
        }
        // Already deleting: nothing changes, as on a real API server.
        Ok(())
    }

    fn create<T: Kind>(&mut self, obj: &T) -> Result<Arc<T>, ApiError> {
        let key = key_of(obj)?;
        if obj.meta().resource_version.is_some() {
            return Err(ApiError::Invalid(
                "resourceVersion should not be set on objects to be created".to_string(),
            ));
        }
        if self.get::<T>(&key).is_some() {
            return Err(ApiError::AlreadyExists);
        }
        let mut obj = obj.clone();
        let uid = self.new_uid();
        let meta = obj.meta_mut();
        meta.uid = Some(uid);
        meta.creation_timestamp = Some(to_time(self.now));
        meta.deletion_timestamp = None;
        Ok(self.write(&key, obj, false))
    }

    fn update_policy_status(
        &mut self,
        name: &str,
        status: &RotationPolicyStatus,
        resource_version: Option<&str>,
    ) -> Result<(), ApiError> {
        let key = cluster_key(name);
        let current = self.get::<RotationPolicy>(&key).ok_or(ApiError::NotFound)?;
        if let Some(rv) = resource_version
            && current.metadata.resource_version.as_deref() != Some(rv)
        {
            return Err(ApiError::Conflict);
        }
        let mut next = (*current).clone();
        next.status = Some(status.clone());
        self.write(&key, next, false);
        Ok(())
    }

    /// An injected conflict: someone else wrote the object, so its resourceVersion moves on.
    fn touch(&mut self, target: &ObjectRef) {
        let Ok(key) = key_for(target) else { return };
        with_kind!(target.kind, T => {
            if let Some(current) = self.get::<T>(&key) {
                self.write(&key, (*current).clone(), true);
            }
        });
    }

    // -- the world's verbs -------------------------------------------------------------------

    fn apply<T: Kind>(&mut self, mut obj: T) -> Result<Arc<T>, ApiError> {
        let key = key_of(&obj)?;
        let old = self.get::<T>(&key);
        let fresh_uid =
            if old.is_none() && obj.meta().uid.is_none() { Some(self.new_uid()) } else { None };
        let now = to_time(self.now);
        let meta = obj.meta_mut();
        match &old {
            Some(old) => {
                let was = old.meta();
                if meta.uid.is_none() {
                    meta.uid.clone_from(&was.uid);
                }
                if meta.creation_timestamp.is_none() {
                    meta.creation_timestamp.clone_from(&was.creation_timestamp);
                }
                if was.deletion_timestamp.is_some() {
                    meta.deletion_timestamp.clone_from(&was.deletion_timestamp);
                }
            }
            None => {
                if let Some(uid) = fresh_uid {
                    meta.uid = Some(uid);
                }
                meta.creation_timestamp.get_or_insert(now);
            }
        }
        Ok(self.write(&key, obj, false))
    }

    fn update<T: Kind>(&mut self, key: &Key, f: impl FnOnce(&mut T)) -> Option<Arc<T>> {
        let current = self.get::<T>(key)?;
        let mut next = (*current).clone();
        f(&mut next);
        let meta = next.meta_mut();
        meta.name = Some(key.1.clone());
        meta.namespace = (!key.0.is_empty()).then(|| key.0.clone());
        if current.meta().deletion_timestamp.is_some() {
            meta.deletion_timestamp.clone_from(&current.meta().deletion_timestamp);
        }
        Some(self.write(key, next, false))
    }
}

// ---------------------------------------------------------------------------------------------
// The cluster
// ---------------------------------------------------------------------------------------------

struct Shared {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

/// The in-memory cluster. A handle: clones share the store and this handle's cache;
/// [`MemoryCluster::connect_controller`] opens a second controller with its own cache (leader
/// change). See the module docs for the controller side (the [`Cluster`] trait) versus the
/// world side (the inherent methods).
#[derive(Clone)]
pub struct MemoryCluster {
    shared: Arc<Shared>,
    client: usize,
}

impl std::fmt::Debug for MemoryCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("MemoryCluster")
            .field("client", &self.client)
            .field("revision", &st.revision)
            .field("pending_watch_events", &st.clients[self.client].pending())
            .finish_non_exhaustive()
    }
}

impl MemoryCluster {
    /// An empty cluster. `controller_namespace` is where the controller's placeholder pods live
    /// (what its pod reflector watches). No cache lag, no faults.
    pub fn new(clock: Arc<dyn Clock>, controller_namespace: impl Into<String>) -> Self {
        let now = clock.now();
        let state = State {
            controller_namespace: controller_namespace.into(),
            now,
            store: Store::default(),
            revision: 0,
            next_uid: 0,
            clients: vec![ClientCache::new(CacheView::default(), CacheLag::None)],
            events: Vec::new(),
            writes: WriteCounts::default(),
            faults: None,
        };
        MemoryCluster { shared: Arc::new(Shared { clock, state: Mutex::new(state) }), client: 0 }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        let now = self.shared.clock.now();
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.now = now;
        st
    }

    /// One controller call: consults the fault hook, runs `op` against the store, counts it.
    fn call<R>(
        &self,
        verb: ApiVerb,
        target: &ObjectRef,
        precondition: bool,
        op: impl FnOnce(&mut State) -> Result<R, ApiError>,
    ) -> Result<R, ApiError> {
        let mut st = self.lock();
        let st = &mut *st;
        let now = st.now;
        let fault = match st.faults.as_mut() {
            Some(faults) => {
                faults.decide(&Call { client: self.client, verb, target, precondition, now })
            }
            None => Fault::Proceed,
        };
        let write = verb.is_write();
        let run = |st: &mut State| {
            let result = op(st);
            if write && result.is_ok() {
                st.writes.count(verb);
            }
            result
        };
        let transient = || Err(ApiError::Transient(INJECTED_TRANSIENT.to_string()));
        let result = match fault {
            Fault::Proceed => run(st),
            Fault::Conflict if !write => run(st),
            Fault::Conflict => {
                if precondition {
                    st.touch(target);
                }
                Err(ApiError::Conflict)
            }
            Fault::Transient => transient(),
            Fault::Forbidden => Err(ApiError::Forbidden(INJECTED_FORBIDDEN.to_string())),
            Fault::ApplyThenTransient => {
                let _lost = run(st);
                transient()
            }
        };
        if write && result.is_err() {
            st.writes.failed += 1;
        }
        result
    }

    // -- handles and configuration ---------------------------------------------------------

    /// This handle's controller (cache) id, as passed to [`Faults`] in [`Call::client`].
    pub fn client_id(&self) -> usize {
        self.client
    }

    /// A second controller instance on the same store (leader change): its own cache, starting
    /// from a fresh list of the store, with `lag`.
    pub fn connect_controller(&self, lag: CacheLag) -> MemoryCluster {
        let mut st = self.lock();
        let cache = ClientCache::new(st.view(), lag);
        st.clients.push(cache);
        let client = st.clients.len() - 1;
        MemoryCluster { shared: Arc::clone(&self.shared), client }
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.shared.clock.now()
    }

    pub fn controller_namespace(&self) -> String {
        self.lock().controller_namespace.clone()
    }

    /// Installs the fault hook consulted on every controller call (all handles).
    pub fn set_faults(&self, faults: impl Faults + 'static) {
        self.lock().faults = Some(Box::new(faults));
    }

    pub fn clear_faults(&self) {
        self.lock().faults = None;
    }

    /// Sets this handle's cache lag (and reseeds its delay generator). Events already in flight
    /// keep their delivery times.
    pub fn set_cache_lag(&self, lag: CacheLag) {
        let mut st = self.lock();
        let cache = &mut st.clients[self.client];
        cache.lag = lag;
        cache.rng = lag.rng();
    }

    /// Applies to this handle's cache every watch event due by `now`, in order per kind.
    /// [`Cluster::cache`] does this with the clock's time.
    pub fn deliver(&self, now: DateTime<Utc>) {
        let client = self.client;
        self.lock().clients[client].deliver(now);
    }

    /// Delivers every event in flight to this handle's cache, whatever its due time.
    pub fn flush_cache(&self) {
        let client = self.client;
        self.lock().clients[client].deliver(DateTime::<Utc>::MAX_UTC);
    }

    /// Drops the events in flight and re-lists the store: what a restarted controller's
    /// reflectors see (in-memory state lost, fresh initial list).
    pub fn resync_cache(&self) {
        let mut st = self.lock();
        let view = st.view();
        let cache = &mut st.clients[self.client];
        cache.view = Arc::new(view);
        cache.queues = Default::default();
    }

    /// Watch events not yet delivered to this handle's cache.
    pub fn pending_watch_events(&self) -> usize {
        self.lock().clients[self.client].pending()
    }

    // -- observation -----------------------------------------------------------------------

    /// Controller writes so far (all handles).
    pub fn write_counts(&self) -> WriteCounts {
        self.lock().writes
    }

    /// The Events the controller recorded, oldest first.
    pub fn events(&self) -> Vec<EventRecord> {
        self.lock().events.clone()
    }

    /// Removes and returns the recorded Events (long simulations drain the log as they go).
    pub fn take_events(&self) -> Vec<EventRecord> {
        std::mem::take(&mut self.lock().events)
    }

    /// The current global resourceVersion: it moves on every store mutation.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    // -- world side: reads -------------------------------------------------------------------

    pub fn pool(&self, name: &str) -> Option<Arc<NodePool>> {
        self.lock().get(&cluster_key(name))
    }

    pub fn claim(&self, name: &str) -> Option<Arc<NodeClaim>> {
        self.lock().get(&cluster_key(name))
    }

    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.lock().get(&cluster_key(name))
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.lock().get(&(namespace.to_string(), name.to_string()))
    }

    pub fn policy(&self, name: &str) -> Option<Arc<RotationPolicy>> {
        self.lock().get(&cluster_key(name))
    }

    pub fn pools(&self) -> Vec<Arc<NodePool>> {
        self.lock().store.pools.values().cloned().collect()
    }

    pub fn claims(&self) -> Vec<Arc<NodeClaim>> {
        self.lock().store.claims.values().cloned().collect()
    }

    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.lock().store.nodes.values().cloned().collect()
    }

    /// Every pod, all namespaces, ordered by (namespace, name).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.lock().store.pods.values().cloned().collect()
    }

    pub fn policies(&self) -> Vec<Arc<RotationPolicy>> {
        self.lock().store.policies.values().cloned().collect()
    }

    /// Pods whose `spec.nodeName` is `node` (the world's view of [`Cluster::pods_on_node`]).
    pub fn pods_bound_to(&self, node: &str) -> Vec<Arc<Pod>> {
        let st = self.lock();
        st.store
            .pods_by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|key| st.store.pods.get(key).cloned())
            .collect()
    }

    // -- world side: writes ------------------------------------------------------------------
    //
    // Create or replace unconditionally. A new object keeps a uid and creationTimestamp it
    // carries (so a fleet can be seeded pre-aged), else gets fresh ones; a replacement keeps the
    // stored uid and creationTimestamp unless it sets its own, and never clears a
    // deletionTimestamp. The resourceVersion and generation are always the server's. `Invalid`
    // when the object has no name (or a pod no namespace).

    pub fn apply_pool(&self, pool: NodePool) -> Result<Arc<NodePool>, ApiError> {
        self.lock().apply(pool)
    }

    pub fn apply_claim(&self, claim: NodeClaim) -> Result<Arc<NodeClaim>, ApiError> {
        self.lock().apply(claim)
    }

    pub fn apply_node(&self, node: Node) -> Result<Arc<Node>, ApiError> {
        self.lock().apply(node)
    }

    pub fn apply_pod(&self, pod: Pod) -> Result<Arc<Pod>, ApiError> {
        self.lock().apply(pod)
    }

    pub fn apply_policy(&self, policy: RotationPolicy) -> Result<Arc<RotationPolicy>, ApiError> {
        self.lock().apply(policy)
    }

    // Read-modify-write in one step. `None` when the object does not exist; otherwise the
    // object as written (if the closure removed the last finalizer of a deleting object, it is
    // gone from the store and this is its final state). The name, namespace and any
    // deletionTimestamp cannot be changed this way.

    pub fn update_pool(&self, name: &str, f: impl FnOnce(&mut NodePool)) -> Option<Arc<NodePool>> {
        self.lock().update(&cluster_key(name), f)
    }

    pub fn update_claim(
        &self,
        name: &str,
        f: impl FnOnce(&mut NodeClaim),
    ) -> Option<Arc<NodeClaim>> {
        self.lock().update(&cluster_key(name), f)
    }

    pub fn update_node(&self, name: &str, f: impl FnOnce(&mut Node)) -> Option<Arc<Node>> {
        self.lock().update(&cluster_key(name), f)
    }

    pub fn update_pod(
        &self,
        namespace: &str,
        name: &str,
        f: impl FnOnce(&mut Pod),
    ) -> Option<Arc<Pod>> {
        self.lock().update(&(namespace.to_string(), name.to_string()), f)
    }

    pub fn update_policy(
        &self,
        name: &str,
        f: impl FnOnce(&mut RotationPolicy),
    ) -> Option<Arc<RotationPolicy>> {
        self.lock().update(&cluster_key(name), f)
    }

    /// Removes `finalizer` from the object; a deleting object whose last finalizer goes is
    /// removed from the store. `true` if the finalizer was there.
    pub fn remove_finalizer(&self, target: &ObjectRef, finalizer: &str) -> bool {
        let Ok(key) = key_for(target) else { return false };
        let mut st = self.lock();
        with_kind!(target.kind, T => {
            let present = st.get::<T>(&key).is_some_and(|obj| {
                obj.meta().finalizers.iter().flatten().any(|f| f == finalizer)
            });
            if present {
                st.update::<T>(&key, |obj| {
                    if let Some(finalizers) = obj.meta_mut().finalizers.as_mut() {
                        finalizers.retain(|f| f != finalizer);
                    }
                });
            }
            present
        })
    }

    /// Deletes as the API server would (finalizers hold the object with a deletionTimestamp),
    /// without precondition, faults or counting: Karpenter's forced expiry, an operator's
    /// `kubectl delete`. `false` if it does not exist.
    pub fn delete_object(&self, target: &ObjectRef) -> bool {
        let Ok(key) = key_for(target) else { return false };
        let mut st = self.lock();
        with_kind!(target.kind, T => st.delete::<T>(&key, None, None).is_ok())
    }

    /// Removes the object at once, ignoring finalizers. `false` if it does not exist.
    pub fn delete_now(&self, target: &ObjectRef) -> bool {
        let Ok(key) = key_for(target) else { return false };
        let mut st = self.lock();
        with_kind!(target.kind, T => st.remove::<T>(&key).is_some())
    }
}

// ---------------------------------------------------------------------------------------------
// Controller side
// ---------------------------------------------------------------------------------------------

impl Cluster for MemoryCluster {
    fn cache(&self) -> Arc<CacheView> {
        let mut st = self.lock();
        let now = st.now;
        let cache = &mut st.clients[self.client];
        cache.deliver(now);
        Arc::clone(&cache.view)
    }

    fn get_pool(&self, name: &str) -> Result<Option<NodePool>, ApiError> {
        let target = ObjectRef::cluster(ObjectKind::NodePool, name);
        self.call(ApiVerb::Get, &target, false, |st| {
            Ok(st.get::<NodePool>(&cluster_key(name)).map(|o| (*o).clone()))
        })
    }

    fn get_claim(&self, name: &str) -> Result<Option<NodeClaim>, ApiError> {
        let target = ObjectRef::cluster(ObjectKind::NodeClaim, name);
        self.call(ApiVerb::Get, &target, false, |st| {
            Ok(st.get::<NodeClaim>(&cluster_key(name)).map(|o| (*o).clone()))
        })
    }

    fn get_node(&self, name: &str) -> Result<Option<Node>, ApiError> {
        let target = ObjectRef::cluster(ObjectKind::Node, name);
        self.call(ApiVerb::Get, &target, false, |st| {
            Ok(st.get::<Node>(&cluster_key(name)).map(|o| (*o).clone()))
        })
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, ApiError> {
        let target = ObjectRef::pod(namespace, name);
        self.call(ApiVerb::Get, &target, false, |st| {
            let key = key_for(&target)?;
            Ok(st.get::<Pod>(&key).map(|o| (*o).clone()))
        })
    }

    fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ApiError> {
        let target = ObjectRef::cluster(ObjectKind::Node, node);
        self.call(ApiVerb::List, &target, false, |st| {
            Ok(st
                .store
                .pods_by_node
                .get(node)
                .into_iter()
                .flatten()
                .filter_map(|key| st.store.pods.get(key).map(|p| (**p).clone()))
                .collect())
        })
    }

    fn patch(
        &self,
        target: &ObjectRef,
        patch: &Patch,
        resource_version: Option<&str>,
    ) -> Result<(), ApiError> {
        self.call(ApiVerb::Patch, target, resource_version.is_some(), |st| {
            let key = key_for(target)?;
            if let Some(both) = patch.set.keys().find(|k| patch.remove.contains(*k)) {
                return Err(ApiError::Invalid(format!("annotation {both} both set and removed")));
            }
            if patch.unschedulable.is_some() && target.kind != ObjectKind::Node {
                return Err(ApiError::Invalid(format!("{target}: unschedulable is for nodes")));
            }
            with_kind!(target.kind, T => st.patch::<T>(&key, patch, resource_version))
        })
    }

    fn delete(
        &self,
        target: &ObjectRef,
        uid: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<(), ApiError> {
        let precondition = uid.is_some() || resource_version.is_some();
        self.call(ApiVerb::Delete, target, precondition, |st| {
            let key = key_for(target)?;
            with_kind!(target.kind, T => st.delete::<T>(&key, uid, resource_version))
        })
    }

    fn create_pod(&self, pod: &Pod) -> Result<Pod, ApiError> {
        let target = ObjectRef {
            kind: ObjectKind::Pod,
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone().unwrap_or_default(),
        };
        self.call(ApiVerb::Create, &target, false, |st| st.create(pod).map(|p| (*p).clone()))
    }

    fn update_policy_status(
        &self,
        name: &str,
        status: &RotationPolicyStatus,
        resource_version: Option<&str>,
    ) -> Result<(), ApiError> {
        let target = ObjectRef::cluster(ObjectKind::RotationPolicy, name);
        self.call(ApiVerb::UpdateStatus, &target, resource_version.is_some(), |st| {
            st.update_policy_status(name, status, resource_version)
        })
    }

    fn record_event(&self, event: &EventRecord) -> Result<(), ApiError> {
        self.call(ApiVerb::RecordEvent, &event.object, false, |st| {
            st.events.push(event.clone());
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use chrono::TimeZone;
    use k8s_openapi::api::core::v1::{NodeSpec, PodSpec};

    use super::*;
    use crate::clock::VirtualClock;
    use crate::karpenter::{NODEPOOL_LABEL, NodeClaimSpec, NodePoolSpec};
    use crate::policy::crd::RotationPolicySpec;

    const NS: &str = "noderotation-system";
    const TERMINATION: &str = "karpenter.sh/termination";

    fn cluster() -> (MemoryCluster, VirtualClock) {
        let start = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).single().unwrap();
        let clock = VirtualClock::new(start);
        (MemoryCluster::new(Arc::new(clock.clone()), NS), clock)
    }

    fn claim(name: &str) -> NodeClaim {
        let mut c = NodeClaim::new(name, NodeClaimSpec::default());
        c.metadata.finalizers = Some(vec![TERMINATION.to_string()]);
        c.metadata.labels = Some(BTreeMap::from([(NODEPOOL_LABEL.into(), "general".into())]));
        c
    }

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: Some(NodeSpec::default()),
            ..Default::default()
        }
    }

    fn pod(ns: &str, name: &str, node: Option<&str>, placeholder: bool) -> Pod {
        let labels = placeholder
            .then(|| BTreeMap::from([(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into())]));
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels,
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: node.map(Into::into), ..Default::default() }),
            ..Default::default()
        }
    }

    fn claim_ref(name: &str) -> ObjectRef {
        ObjectRef::cluster(ObjectKind::NodeClaim, name)
    }

    fn annotate(key: &str, value: &str) -> Patch {
        Patch { set: BTreeMap::from([(key.into(), value.into())]), ..Default::default() }
    }

    fn rv_of(c: &MemoryCluster, name: &str) -> String {
        c.claim(name).unwrap().metadata.resource_version.clone().unwrap()
    }

    fn annotation(c: &NodeClaim, key: &str) -> Option<String> {
        c.metadata.annotations.as_ref()?.get(key).cloned()
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MemoryCluster>();
        let (c, _) = cluster();
        let _: Arc<dyn Cluster> = Arc::new(c);
    }

    #[test]
    fn stale_resource_version_conflicts() {
        let (c, _) = cluster();
        c.apply_claim(claim("a")).unwrap();
        let rv1 = rv_of(&c, "a");
        c.patch(&claim_ref("a"), &annotate("k", "1"), Some(&rv1)).unwrap();
        let rv2 = rv_of(&c, "a");
        assert_ne!(rv1, rv2);
        assert_eq!(
            c.patch(&claim_ref("a"), &annotate("k", "2"), Some(&rv1)),
            Err(ApiError::Conflict)
        );
        assert_eq!(annotation(&c.claim("a").unwrap(), "k").as_deref(), Some("1"));
        assert_eq!(rv_of(&c, "a"), rv2, "a rejected write changes nothing");
        // Without a precondition the write goes through; removing works too.
        c.patch(&claim_ref("a"), &annotate("k", "3"), None).unwrap();
        let remove = Patch { remove: BTreeSet::from(["k".to_string()]), ..Default::default() };
        c.patch(&claim_ref("a"), &remove, Some(&rv_of(&c, "a"))).unwrap();
        assert_eq!(c.claim("a").unwrap().metadata.annotations, None);
        assert_eq!(c.write_counts().patch, 3);
        assert_eq!(c.write_counts().failed, 1);
    }

    #[test]
    fn noop_patch_keeps_resource_version() {
        let (c, _) = cluster();
        c.apply_claim(claim("a")).unwrap();
        c.patch(&claim_ref("a"), &annotate("k", "1"), None).unwrap();
        let rv = rv_of(&c, "a");
        c.patch(&claim_ref("a"), &annotate("k", "1"), Some(&rv)).unwrap();
        assert_eq!(rv_of(&c, "a"), rv);
    }

    #[test]
    fn missing_objects_are_not_found() {
        let (c, _) = cluster();
        assert_eq!(c.get_claim("x"), Ok(None));
        assert_eq!(c.get_pool("x"), Ok(None));
        assert_eq!(c.get_node("x"), Ok(None));
        assert_eq!(c.patch(&claim_ref("x"), &annotate("k", "v"), None), Err(ApiError::NotFound));
        assert_eq!(c.delete(&claim_ref("x"), None, None), Err(ApiError::NotFound));
        let status = RotationPolicyStatus::default();
        assert_eq!(c.update_policy_status("x", &status, None), Err(ApiError::NotFound));
        assert_eq!(c.pods_on_node("x"), Ok(vec![]));
    }

    #[test]
    fn finalizer_holds_a_deleting_claim_until_removed() {
        let (c, clock) = cluster();
        c.apply_claim(claim("a")).unwrap();
        clock.advance(Duration::minutes(5));
        c.delete(&claim_ref("a"), None, None).unwrap();
        let deleting = c.get_claim("a").unwrap().unwrap();
        assert!(deleting.is_deleting());
        assert_eq!(deleting.metadata.deletion_timestamp, Some(to_time(clock.now())));
        assert!(c.cache().claims["a"].is_deleting(), "the cache sees the deletionTimestamp");
        // A second delete is accepted and changes nothing; metadata writes still work.
        let rv = rv_of(&c, "a");
        c.delete(&claim_ref("a"), None, None).unwrap();
        assert_eq!(rv_of(&c, "a"), rv);
        c.patch(&claim_ref("a"), &annotate("k", "v"), Some(&rv)).unwrap();
        // The world's update cannot clear the deletionTimestamp.
        c.update_claim("a", |c| c.metadata.deletion_timestamp = None);
        assert!(c.claim("a").unwrap().is_deleting());
        // Karpenter finalizes: gone from store and cache.
        assert!(c.remove_finalizer(&claim_ref("a"), TERMINATION));
        assert_eq!(c.get_claim("a"), Ok(None));
        assert!(!c.cache().claims.contains_key("a"));
        assert_eq!(c.delete(&claim_ref("a"), None, None), Err(ApiError::NotFound));
    }

    #[test]
    fn objects_without_finalizers_vanish() {
        let (c, _) = cluster();
        c.apply_node(node("n1")).unwrap();
        c.apply_pod(pod(NS, "p", Some("n1"), true)).unwrap();
        c.delete(&ObjectRef::cluster(ObjectKind::Node, "n1"), None, None).unwrap();
        assert_eq!(c.get_node("n1"), Ok(None));
        c.delete(&ObjectRef::pod(NS, "p"), None, None).unwrap();
        assert!(c.pod(NS, "p").is_none());
        assert!(c.pods_on_node("n1").unwrap().is_empty());
        assert!(c.cache().placeholders.is_empty());
    }

    #[test]
    fn uid_precondition_guards_the_incarnation() {
        let (c, _) = cluster();
        let first = c.apply_claim(claim("a")).unwrap();
        let old_uid = first.metadata.uid.clone().unwrap();
        assert_eq!(c.delete(&claim_ref("a"), Some("someone-else"), None), Err(ApiError::Conflict));
        assert!(!c.claim("a").unwrap().is_deleting());
        // A new incarnation under the same name.
        assert!(c.delete_now(&claim_ref("a")));
        let second = c.apply_claim(claim("a")).unwrap();
        let new_uid = second.metadata.uid.clone().unwrap();
        assert_ne!(old_uid, new_uid);
        assert_eq!(c.delete(&claim_ref("a"), Some(&old_uid), None), Err(ApiError::Conflict));
        let rv = c.get_claim("a").unwrap().unwrap().metadata.resource_version.unwrap();
        let stale = Some("1");
        assert_ne!(Some(rv.as_str()), stale);
        assert_eq!(c.delete(&claim_ref("a"), Some(&new_uid), stale), Err(ApiError::Conflict));
        c.delete(&claim_ref("a"), Some(&new_uid), Some(&rv)).unwrap();
        assert!(c.claim("a").unwrap().is_deleting());
    }

    #[test]
    fn create_pod_sets_server_fields_and_rejects_duplicates() {
        let (c, clock) = cluster();
        let p = pod(NS, "surge-a", None, true);
        c.create_pod(&p).unwrap();
        let stored = c.pod(NS, "surge-a").unwrap();
        assert!(stored.metadata.uid.is_some());
        assert!(stored.metadata.resource_version.is_some());
        assert_eq!(stored.metadata.creation_timestamp, Some(to_time(clock.now())));
        assert_eq!(c.create_pod(&p), Err(ApiError::AlreadyExists));
        // Same name in another namespace is another pod.
        c.create_pod(&pod("other", "surge-a", None, false)).unwrap();
        assert!(matches!(c.create_pod(&(*stored).clone()), Err(ApiError::Invalid(_))));
        let mut no_ns = pod(NS, "x", None, true);
        no_ns.metadata.namespace = None;
        assert!(matches!(c.create_pod(&no_ns), Err(ApiError::Invalid(_))));
        let counts = c.write_counts();
        assert_eq!((counts.create, counts.failed), (2, 3));
    }

    #[test]
    fn cache_with_fixed_lag_sees_writes_late() {
        let (c, clock) = cluster();
        c.set_cache_lag(CacheLag::Fixed(Duration::seconds(10)));
        c.apply_claim(claim("a")).unwrap();
        assert!(c.cache().claims.is_empty());
        clock.advance(Duration::seconds(9));
        assert!(c.cache().claims.is_empty());
        clock.advance(Duration::seconds(1));
        assert!(c.cache().claims.contains_key("a"));
        // Conditional writes are checked against the store, not the cache.
        let cached_rv = c.cache().claims["a"].metadata.resource_version.clone().unwrap();
        c.patch(&claim_ref("a"), &annotate("k", "1"), Some(&cached_rv)).unwrap();
        assert_eq!(
            c.patch(&claim_ref("a"), &annotate("k", "2"), Some(&cached_rv)),
            Err(ApiError::Conflict)
        );
        assert_eq!(annotation(&c.cache().claims["a"], "k"), None);
        assert_eq!(c.pending_watch_events(), 1);
        clock.advance(Duration::seconds(10));
        assert_eq!(annotation(&c.cache().claims["a"], "k").as_deref(), Some("1"));
        assert_eq!(c.pending_watch_events(), 0);
    }

    #[test]
    fn cache_with_random_lag_preserves_order() {
        let (c, clock) = cluster();
        c.set_cache_lag(CacheLag::UpTo { max: Duration::seconds(30), seed: 7 });
        c.apply_claim(claim("a")).unwrap();
        let mut last_seen = -1i64;
        let mut lagged = false;
        for i in 0..200i64 {
            c.update_claim("a", |cl| {
                cl.metadata.annotations = Some(BTreeMap::from([("n".into(), i.to_string())]));
            });
            clock.advance(Duration::milliseconds(250));
            let seen = c.cache().claims.get("a").and_then(|cl| annotation(cl, "n"));
            let seen = seen.map_or(-1, |s| s.parse::<i64>().unwrap());
            assert!(seen >= last_seen, "cache went back from {last_seen} to {seen}");
            lagged |= seen < i;
            last_seen = seen;
        }
        assert!(lagged, "a 30s lag must show up");
        clock.advance(Duration::seconds(30));
        assert_eq!(annotation(&c.cache().claims["a"], "n").as_deref(), Some("199"));
    }

    #[test]
    fn lag_is_deterministic_per_seed() {
        let run = |seed| {
            let (c, clock) = cluster();
            c.set_cache_lag(CacheLag::UpTo { max: Duration::seconds(5), seed });
            let mut trace = vec![];
            for i in 0..50 {
                c.apply_node(node(&format!("n{i}"))).unwrap();
                clock.advance(Duration::milliseconds(300));
                trace.push(c.cache().nodes.len());
            }
            trace
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn no_lag_cache_equals_store_and_is_shared() {
        let (c, _) = cluster();
        c.apply_pool(NodePool::new("general", NodePoolSpec::default())).unwrap();
        c.apply_claim(claim("a")).unwrap();
        c.patch(&claim_ref("a"), &annotate("k", "v"), None).unwrap();
        let view = c.cache();
        assert_eq!(*view.claims["a"], *c.claim("a").unwrap());
        assert_eq!(*view.pools["general"], *c.pool("general").unwrap());
        assert!(Arc::ptr_eq(&view, &c.cache()), "no change, no copy");
        c.patch(&claim_ref("a"), &annotate("k", "w"), None).unwrap();
        let after = c.cache();
        assert!(!Arc::ptr_eq(&view, &after));
        assert_eq!(
            annotation(&view.claims["a"], "k").as_deref(),
            Some("v"),
            "old views are stable"
        );
    }

    #[test]
    fn placeholders_are_managed_pods_in_the_controller_namespace() {
        let (c, _) = cluster();
        c.apply_pod(pod(NS, "surge", None, true)).unwrap();
        c.apply_pod(pod(NS, "app", None, false)).unwrap();
        c.apply_pod(pod("default", "lookalike", None, true)).unwrap();
        let names: Vec<_> = c.cache().placeholders.keys().cloned().collect();
        assert_eq!(names, ["surge"]);
        // Losing the label removes it from the view, as a label-selected watch would.
        c.update_pod(NS, "surge", |p| p.metadata.labels = None);
        assert!(c.cache().placeholders.is_empty());
        // A second controller lists the store afresh.
        c.update_pod(NS, "app", |p| {
            p.metadata.labels =
                Some(BTreeMap::from([(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into())]));
        });
        let other = c.connect_controller(CacheLag::Fixed(Duration::hours(1)));
        assert_eq!(other.cache().placeholders.keys().collect::<Vec<_>>(), ["app"]);
    }

    #[test]
    fn pods_on_node_follows_binding() {
        let (c, _) = cluster();
        c.apply_pod(pod("b", "p2", Some("n1"), false)).unwrap();
        c.apply_pod(pod("a", "p1", Some("n1"), false)).unwrap();
        c.apply_pod(pod("a", "p3", Some("n2"), false)).unwrap();
        let names = |pods: Vec<Pod>| -> Vec<String> {
            pods.into_iter().map(|p| p.metadata.name.unwrap()).collect()
        };
        assert_eq!(names(c.pods_on_node("n1").unwrap()), ["p1", "p2"]);
        c.update_pod("a", "p3", |p| p.spec.get_or_insert_default().node_name = Some("n1".into()));
        assert_eq!(names(c.pods_on_node("n1").unwrap()), ["p1", "p3", "p2"]);
        assert!(c.pods_on_node("n2").unwrap().is_empty());
        assert!(c.delete_now(&ObjectRef::pod("a", "p1")));
        assert_eq!(c.pods_bound_to("n1").len(), 2);
    }

    #[test]
    fn cordon_is_for_nodes_only() {
        let (c, _) = cluster();
        c.apply_node(node("n1")).unwrap();
        c.apply_claim(claim("a")).unwrap();
        let cordon = Patch { unschedulable: Some(true), ..Default::default() };
        let uncordon = Patch { unschedulable: Some(false), ..Default::default() };
        let node_ref = ObjectRef::cluster(ObjectKind::Node, "n1");
        c.patch(&node_ref, &cordon, None).unwrap();
        assert_eq!(c.node("n1").unwrap().spec.as_ref().unwrap().unschedulable, Some(true));
        c.patch(&node_ref, &uncordon, None).unwrap();
        assert_eq!(c.node("n1").unwrap().spec.as_ref().unwrap().unschedulable, None);
        assert!(matches!(c.patch(&claim_ref("a"), &cordon, None), Err(ApiError::Invalid(_))));
        let both = Patch {
            set: BTreeMap::from([("k".into(), "v".into())]),
            remove: BTreeSet::from(["k".into()]),
            unschedulable: None,
        };
        assert!(matches!(c.patch(&claim_ref("a"), &both, None), Err(ApiError::Invalid(_))));
    }

    #[test]
    fn policy_status_write_is_preconditioned() {
        let (c, _) = cluster();
        let spec: RotationPolicySpec = serde_yaml::from_str("nodePoolSelector: {}\n").unwrap();
        let p = c.apply_policy(RotationPolicy::new("default", spec)).unwrap();
        assert_eq!(p.metadata.generation, Some(1));
        let rv = p.metadata.resource_version.clone().unwrap();
        let status = RotationPolicyStatus { matched_node_pools: 3, ..Default::default() };
        c.update_policy_status("default", &status, Some(&rv)).unwrap();
        let after = c.policy("default").unwrap();
        assert_eq!(after.status.as_ref().unwrap().matched_node_pools, 3);
        assert_eq!(after.metadata.generation, Some(1), "status does not bump generation");
        assert_eq!(c.update_policy_status("default", &status, Some(&rv)), Err(ApiError::Conflict));
        let bumped = c.update_policy("default", |p| p.spec.min_rotation_chances = 3);
        assert_eq!(bumped.unwrap().metadata.generation, Some(2));
        assert_eq!(c.write_counts().status, 1);
    }

    #[test]
    fn apply_then_transient_applies_the_write() {
        let (c, _) = cluster();
        c.apply_claim(claim("a")).unwrap();
        c.set_faults(|call: &Call<'_>| match call.verb {
            ApiVerb::Patch => Fault::ApplyThenTransient,
            ApiVerb::Delete => Fault::Transient,
            _ => Fault::Proceed,
        });
        let err = c.patch(&claim_ref("a"), &annotate("k", "v"), None);
        assert!(matches!(err, Err(ApiError::Transient(_))));
        assert_eq!(annotation(&c.claim("a").unwrap(), "k").as_deref(), Some("v"));
        let err = c.delete(&claim_ref("a"), None, None);
        assert!(matches!(err, Err(ApiError::Transient(_))));
        assert!(!c.claim("a").unwrap().is_deleting(), "transient before applying");
        assert!(c.get_claim("a").unwrap().is_some(), "reads proceed");
        let counts = c.write_counts();
        assert_eq!((counts.patch, counts.delete, counts.failed), (1, 0, 2));
        c.clear_faults();
        c.delete(&claim_ref("a"), None, None).unwrap();
    }

    #[test]
    fn injected_conflict_moves_the_resource_version() {
        let (c, _) = cluster();
        c.apply_claim(claim("a")).unwrap();
        let rv = rv_of(&c, "a");
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        c.set_faults(move |call: &Call<'_>| {
            seen.fetch_add(1, Ordering::SeqCst);
            if call.precondition { Fault::Conflict } else { Fault::Proceed }
        });
        assert_eq!(
            c.patch(&claim_ref("a"), &annotate("k", "v"), Some(&rv)),
            Err(ApiError::Conflict)
        );
        assert_ne!(rv_of(&c, "a"), rv, "someone else wrote it");
        assert_eq!(annotation(&c.claim("a").unwrap(), "k"), None);
        c.record_event(&EventRecord {
            object: claim_ref("a"),
            reason: "Test".into(),
            message: String::new(),
            warning: false,
            time: c.now(),
        })
        .unwrap();
        assert_eq!(c.events().len(), 1);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn random_faults_are_seeded() {
        let outcomes = |seed| {
            let (c, _) = cluster();
            c.apply_claim(claim("a")).unwrap();
            c.set_faults(RandomFaults {
                rng: Rng::new(seed),
                conflict: 0.2,
                transient: 0.2,
                apply_then_transient: 0.2,
            });
            (0..100)
                .map(|i| {
                    let rv = rv_of(&c, "a");
                    c.patch(&claim_ref("a"), &annotate("n", &i.to_string()), Some(&rv))
                })
                .collect::<Vec<_>>()
        };
        let a = outcomes(3);
        assert_eq!(a, outcomes(3));
        assert!(a.contains(&Err(ApiError::Conflict)));
        assert!(a.iter().any(Result::is_ok));
        assert!(a.iter().any(|r| matches!(r, Err(ApiError::Transient(_)))));
    }

    #[test]
    fn restart_relists_and_second_controller_has_its_own_cache() {
        let (c, clock) = cluster();
        c.set_cache_lag(CacheLag::Fixed(Duration::seconds(60)));
        c.apply_claim(claim("a")).unwrap();
        let fresh = c.connect_controller(CacheLag::None);
        assert!(fresh.cache().claims.contains_key("a"));
        assert!(c.cache().claims.is_empty());
        c.resync_cache();
        assert!(c.cache().claims.contains_key("a"));
        assert_eq!(c.pending_watch_events(), 0);
        c.apply_claim(claim("b")).unwrap();
        c.flush_cache();
        assert!(c.cache().claims.contains_key("b"));
        clock.advance(Duration::seconds(1));
        assert_eq!(fresh.cache().claims.len(), 2);
        assert_ne!(fresh.client_id(), c.client_id());
    }

    #[test]
    fn world_apply_keeps_identity_and_allows_pre_aged_objects() {
        let (c, clock) = cluster();
        let mut old = claim("old");
        let born = clock.now() - Duration::days(20);
        old.metadata.creation_timestamp = Some(to_time(born));
        let stored = c.apply_claim(old).unwrap();
        assert_eq!(stored.created(), Some(born));
        let uid = stored.metadata.uid.clone();
        let replaced = c.apply_claim(claim("old")).unwrap();
        assert_eq!(replaced.metadata.uid, uid);
        assert_eq!(replaced.created(), Some(born));
        assert!(matches!(c.apply_claim(NodeClaim::default()), Err(ApiError::Invalid(_))));
        let first = c.apply_claim(claim("x")).unwrap();
        let second = c.apply_claim(claim("y")).unwrap();
        assert!(first.metadata.uid < second.metadata.uid);
    }

    #[test]
    fn rng_is_deterministic_and_bounded() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        let mut sm = 0;
        assert_eq!(splitmix64(&mut sm), 0xE220_A839_7B1D_CDAF);
        let mut r = Rng::new(9);
        let mut hits = [0u32; 6];
        for _ in 0..6000 {
            let v = r.below(6);
            hits[usize::try_from(v).unwrap()] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
        assert_eq!(r.below(0), 0);
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
        assert!((0..1000).map(|_| r.next_f64()).all(|f| (0.0..1.0).contains(&f)));
        assert_eq!(r.pick::<u8>(&[]), None);
        assert!(r.pick(&[1, 2, 3]).is_some());
    }
}
