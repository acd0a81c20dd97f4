//! Each controller's reflector view and the watch events in flight to it, delivered after a
//! [`CacheLag`], in order per kind.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::Resource;

use super::{MemoryCluster, Rng};
use crate::cluster::change::{self as watch, Watched};
use crate::cluster::{CacheView, ObjectKind, projection};
use crate::karpenter::{NodeClaim, NodePool};
use crate::policy::crd::RotationPolicy;

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
    pub(crate) fn next_delay(self, rng: &mut Rng) -> Duration {
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

const KINDS: usize = 6;

fn slot(kind: ObjectKind) -> usize {
    match kind {
        ObjectKind::NodePool => 0,
        ObjectKind::NodeClaim => 1,
        ObjectKind::Node => 2,
        ObjectKind::Pod => 3,
        ObjectKind::RotationPolicy => 4,
        ObjectKind::Event => 5,
    }
}

/// One watch event on its way to a controller's cache: the object's state after the mutation
/// (`None`: gone from the view).
#[derive(Debug, Clone)]
pub(super) enum Change {
    Pool(String, Option<Arc<NodePool>>),
    Claim(String, Option<Arc<NodeClaim>>),
    Node(String, Option<Arc<Node>>),
    Placeholder(String, Option<Arc<Pod>>),
    Policy(String, Option<Arc<RotationPolicy>>),
    Nomination(String, Option<Arc<Event>>),
}

/// Stores or removes `name`, and says what a reflector's watch would: the object applied, or
/// the last state of the one deleted (nothing when it was not in the view).
fn set_or_remove<T>(
    map: &mut BTreeMap<String, Arc<T>>,
    name: String,
    obj: Option<Arc<T>>,
    wrap: fn(Arc<T>) -> Watched,
) -> Option<watch::Change> {
    match obj {
        Some(obj) => {
            map.insert(name, Arc::clone(&obj));
            Some(watch::Change::Applied(wrap(obj)))
        }
        None => map.remove(&name).map(|old| watch::Change::Deleted(wrap(old))),
    }
}

/// `obj` as `project` leaves it, in an allocation of its own (the store's copy stays whole).
fn project<T: Clone>(obj: &Arc<T>, project: fn(&mut T)) -> Arc<T> {
    let mut copy = T::clone(obj);
    project(&mut copy);
    Arc::new(copy)
}

/// `view` with its Nodes and NodeClaims as a controller's reflectors keep them
/// ([`projection`]), reusing the copies of `kept` at the same resourceVersion (the projection
/// of the same stored object).
fn projected(mut view: CacheView, kept: Option<&CacheView>) -> CacheView {
    fn reuse<T: Resource + Clone>(
        objects: &mut BTreeMap<String, Arc<T>>,
        kept: Option<&BTreeMap<String, Arc<T>>>,
        projection: fn(&mut T),
    ) {
        for (name, obj) in objects.iter_mut() {
            let version = obj.meta().resource_version.as_deref();
            *obj = match kept.and_then(|k| k.get(name)) {
                Some(copy) if copy.meta().resource_version.as_deref() == version => {
                    Arc::clone(copy)
                }
                _ => project(obj, projection),
            };
        }
    }
    reuse(&mut view.claims, kept.map(|k| &k.claims), projection::claim);
    reuse(&mut view.nodes, kept.map(|k| &k.nodes), projection::node);
    view
}

impl Change {
    /// The change as a controller's reflector stores it ([`projection`]).
    pub(super) fn projected(self) -> Change {
        match self {
            Change::Claim(name, Some(c)) => {
                Change::Claim(name, Some(project(&c, projection::claim)))
            }
            Change::Node(name, Some(n)) => Change::Node(name, Some(project(&n, projection::node))),
            other => other,
        }
    }

    fn apply(self, view: &mut CacheView) -> Option<watch::Change> {
        match self {
            Change::Pool(name, obj) => set_or_remove(&mut view.pools, name, obj, Watched::Pool),
            Change::Claim(name, obj) => set_or_remove(&mut view.claims, name, obj, Watched::Claim),
            Change::Node(name, obj) => set_or_remove(&mut view.nodes, name, obj, Watched::Node),
            Change::Placeholder(name, obj) => {
                set_or_remove(&mut view.placeholders, name, obj, Watched::Placeholder)
            }
            Change::Policy(name, obj) => {
                set_or_remove(&mut view.policies, name, obj, Watched::Policy)
            }
            Change::Nomination(name, obj) => {
                set_or_remove(&mut view.nominations, name, obj, Watched::Nomination)
            }
        }
    }
}

/// One controller's reflector view and the watch events still in flight to it.
pub(super) struct ClientCache {
    pub(super) view: Arc<CacheView>,
    /// The view holds whole objects, not what a controller's reflectors keep
    /// ([`MemoryCluster::see_whole_objects`]: the simulated world's own view).
    whole: bool,
    queues: [VecDeque<Pending>; KINDS],
    lag: CacheLag,
    rng: Rng,
    /// What this cache's reflectors saw, for the trigger seam: recorded once
    /// [`MemoryCluster::watch_changes`] asked for it, until taken.
    outbox: Option<Vec<watch::Change>>,
}

struct Pending {
    due: DateTime<Utc>,
    change: Change,
}

impl ClientCache {
    /// A controller's cache over `view` (the store's objects, projected here).
    pub(super) fn new(view: CacheView, lag: CacheLag) -> Self {
        ClientCache {
            view: Arc::new(projected(view, None)),
            whole: false,
            queues: Default::default(),
            lag,
            rng: lag.rng(),
            outbox: None,
        }
    }

    /// The view holds whole objects (else as a controller's reflectors keep them).
    pub(super) fn whole(&self) -> bool {
        self.whole
    }

    pub(super) fn push(&mut self, kind: ObjectKind, change: Change, now: DateTime<Utc>) {
        let queue = &mut self.queues[slot(kind)];
        let mut due = now + self.lag.next_delay(&mut self.rng);
        if let Some(last) = queue.back() {
            due = due.max(last.due); // one watch stream per kind: never overtake
        }
        queue.push_back(Pending { due, change });
    }

    pub(super) fn deliver(&mut self, now: DateTime<Utc>) {
        if self.queues.iter().all(|q| q.front().is_none_or(|p| p.due > now)) {
            return; // keep sharing the current view
        }
        let view = Arc::make_mut(&mut self.view);
        for queue in &mut self.queues {
            while let Some(pending) = queue.pop_front_if(|p| p.due <= now) {
                let seen = pending.change.apply(view);
                if let (Some(out), Some(seen)) = (self.outbox.as_mut(), seen) {
                    out.push(seen);
                }
            }
        }
    }

    pub(super) fn pending(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// When the next watch event in flight reaches the cache.
    fn next_delivery(&self) -> Option<DateTime<Utc>> {
        self.queues.iter().filter_map(|q| q.front().map(|p| p.due)).min()
    }
}

impl MemoryCluster {
    /// This handle's cache shows whole objects from now on, not what a controller's reflectors
    /// keep of them ([`projection`]): for the simulated world's own view (its actors, the
    /// invariant checker, the trace), never for a controller's. It relists, so what it holds
    /// already is whole too.
    pub(crate) fn see_whole_objects(&self) {
        let client = self.client;
        self.lock().clients[client].whole = true;
        self.resync_cache();
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

    /// Sets this handle's cache lag (and reseeds its delay generator). Events already in flight
    /// keep their delivery times.
    pub fn set_cache_lag(&self, lag: CacheLag) {
        let mut st = self.lock();
        let cache = &mut st.clients[self.client];
        cache.lag = lag;
        cache.rng = lag.rng();
    }

    /// Applies to this handle's cache every watch event due by `now`, in order per kind.
    /// [`Cluster::cache`](crate::cluster::Cluster::cache) does this with the clock's time.
    pub(crate) fn deliver(&self, now: DateTime<Utc>) {
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
    pub(crate) fn resync_cache(&self) {
        let mut st = self.lock();
        let view = st.view();
        let cache = &mut st.clients[self.client];
        cache.view = Arc::new(if cache.whole { view } else { projected(view, Some(&cache.view)) });
        cache.queues = Default::default();
        if let Some(out) = cache.outbox.as_mut() {
            // A fresh list of every kind: each reflector reports its initial list done.
            out.extend(
                [
                    ObjectKind::NodePool,
                    ObjectKind::NodeClaim,
                    ObjectKind::Node,
                    ObjectKind::Pod,
                    ObjectKind::RotationPolicy,
                    ObjectKind::Event,
                ]
                .map(watch::Change::Resynced),
            );
        }
    }

    /// Starts (`on`) or stops recording what this handle's reflectors see, dropping what was
    /// recorded: every watch event as it reaches the cache, and a relist of every kind on
    /// [`MemoryCluster::resync_cache`]. [`MemoryCluster::take_changes`] hands them over.
    pub(crate) fn watch_changes(&self, on: bool) {
        let client = self.client;
        self.lock().clients[client].outbox = on.then(Vec::new);
    }

    /// What this handle's reflectors saw since the last call, in order (empty unless
    /// [`MemoryCluster::watch_changes`] was called).
    pub(crate) fn take_changes(&self) -> Vec<watch::Change> {
        let client = self.client;
        self.lock().clients[client].outbox.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// When the next watch event in flight reaches this handle's cache.
    pub(crate) fn next_delivery(&self) -> Option<DateTime<Utc>> {
        self.lock().clients[self.client].next_delivery()
    }

    /// Watch events not yet delivered to this handle's cache.
    #[cfg(test)]
    pub(crate) fn pending_watch_events(&self) -> usize {
        self.lock().clients[self.client].pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::memory::fixtures::*;
    use crate::cluster::{ApiError, Cluster, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
    use crate::engine::Key;
    use crate::karpenter::NodePoolSpec;
    use kube::ResourceExt;

    /// Keys of the rules' vocabulary: what a controller's cache keeps of annotations.
    const KEY: &str = Key::State.full();
    const COUNT: &str = Key::RetryCount.full();

    /// A controller's cache holds what the production reflectors keep (`projection`), on its
    /// first list, on each watch event and on a relist; the simulated world's own view holds
    /// whole objects.
    #[test]
    fn a_controller_cache_keeps_what_the_reflectors_keep_the_world_sees_everything() {
        let (c, _) = cluster();
        let annotate_both = |name: &str| {
            c.update_claim(name, |cl| {
                let a = cl.metadata.annotations.get_or_insert_default();
                a.insert(KEY.into(), "pending".into());
                a.insert("karpenter.sh/nodeclaim-termination-timestamp".into(), "x".into());
            })
        };
        c.apply_claim(claim("listed")).unwrap();
        annotate_both("listed");
        let late = c.connect_controller(CacheLag::None);
        c.apply_claim(claim("watched")).unwrap();
        annotate_both("watched");
        let world = c.connect_controller(CacheLag::None);
        world.see_whole_objects();
        for name in ["listed", "watched"] {
            for cache in [c.cache(), late.cache()] {
                let kept: Vec<&String> = cache.claims[name].annotations().keys().collect();
                assert_eq!(kept, [KEY], "{name}: the vocabulary's keys only");
            }
            assert_eq!(world.cache().claims[name].annotations().len(), 2, "{name}: whole");
            assert_eq!(*world.cache().claims[name], *c.claim(name).unwrap());
        }
        late.resync_cache();
        assert_eq!(late.cache().claims["watched"].annotations().len(), 1, "a relist too");
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
        c.patch(&claim_ref("a"), &annotate(KEY, "1"), Some(&cached_rv)).unwrap();
        assert_eq!(
            c.patch(&claim_ref("a"), &annotate(KEY, "2"), Some(&cached_rv)),
            Err(ApiError::Conflict)
        );
        assert_eq!(annotation(&c.cache().claims["a"], KEY), None);
        assert_eq!(c.pending_watch_events(), 1);
        clock.advance(Duration::seconds(10));
        assert_eq!(annotation(&c.cache().claims["a"], KEY).as_deref(), Some("1"));
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
                cl.metadata.annotations = Some(BTreeMap::from([(COUNT.into(), i.to_string())]));
            });
            clock.advance(Duration::milliseconds(250));
            let seen = c.cache().claims.get("a").and_then(|cl| annotation(cl, COUNT));
            let seen = seen.map_or(-1, |s| s.parse::<i64>().unwrap());
            assert!(seen >= last_seen, "cache went back from {last_seen} to {seen}");
            lagged |= seen < i;
            last_seen = seen;
        }
        assert!(lagged, "a 30s lag must show up");
        clock.advance(Duration::seconds(30));
        assert_eq!(annotation(&c.cache().claims["a"], COUNT).as_deref(), Some("199"));
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
        c.patch(&claim_ref("a"), &annotate(KEY, "v"), None).unwrap();
        let view = c.cache();
        assert_eq!(*view.claims["a"], *c.claim("a").unwrap());
        assert_eq!(*view.pools["general"], *c.pool("general").unwrap());
        assert!(Arc::ptr_eq(&view, &c.cache()), "no change, no copy");
        c.patch(&claim_ref("a"), &annotate(KEY, "w"), None).unwrap();
        let after = c.cache();
        assert!(!Arc::ptr_eq(&view, &after));
        assert_eq!(
            annotation(&view.claims["a"], KEY).as_deref(),
            Some("v"),
            "old views are stable"
        );
    }

    /// Karpenter's `Nominated` Events on pods of the controller's namespace, as a watch
    /// field-selected on the reason sees them; `nominations` lists a pod's on demand.
    #[test]
    fn nominations_are_nominated_events_in_the_controller_namespace() {
        use crate::cluster::Cluster;
        let event = |ns: &str, name: &str, reason: &str, uid: &str| {
            let mut e = k8s_openapi::api::core::v1::Event {
                reason: Some(reason.into()),
                message: Some("Pod should schedule on: nodeclaim/general-x".into()),
                ..Default::default()
            };
            e.metadata.name = Some(name.into());
            e.metadata.namespace = Some(ns.into());
            e.involved_object.uid = Some(uid.into());
            e
        };
        let (c, _) = cluster();
        c.apply_event(event(NS, "a.1", "Nominated", "u1")).unwrap();
        c.apply_event(event(NS, "a.2", "FailedScheduling", "u1")).unwrap();
        c.apply_event(event("default", "b.1", "Nominated", "u1")).unwrap();
        c.apply_event(event(NS, "c.1", "Nominated", "u2")).unwrap();
        let names: Vec<_> = c.cache().nominations.keys().cloned().collect();
        assert_eq!(names, ["a.1", "c.1"]);
        let listed = c.nominations("u1").unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(crate::cluster::nominated_claim(&listed[0]), Some("general-x"));
        c.delete_now(&crate::cluster::ObjectRef::event(NS, "a.1"));
        assert!(c.nominations("u1").unwrap().is_empty());
        assert_eq!(c.cache().nominations.keys().collect::<Vec<_>>(), ["c.1"]);
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
    fn a_watching_handle_reports_what_its_reflectors_saw_when_it_saw_it() {
        use crate::clock::Clock;
        use crate::cluster::change::{Change as Seen, Watched};
        let name = |seen: &Seen| match seen {
            Seen::Applied(Watched::Claim(c)) => format!("+{}", c.metadata.name.clone().unwrap()),
            Seen::Deleted(Watched::Claim(c)) => format!("-{}", c.metadata.name.clone().unwrap()),
            Seen::Resynced(kind) => format!("relist {kind:?}"),
            other => format!("{other:?}"),
        };
        let (c, clock) = cluster();
        c.set_cache_lag(CacheLag::Fixed(Duration::seconds(10)));
        c.apply_claim(claim("before")).unwrap();
        assert!(c.take_changes().is_empty(), "nothing is recorded before watching");
        c.watch_changes(true);
        c.apply_claim(claim("a")).unwrap();
        assert_eq!(c.next_delivery(), Some(clock.now() + Duration::seconds(10)));
        clock.advance(Duration::seconds(10));
        c.deliver(clock.now());
        let seen: Vec<_> = c.take_changes().iter().map(name).collect();
        assert_eq!(seen, ["+before", "+a"], "in order, once delivered");
        c.delete_now(&claim_ref("a"));
        c.flush_cache();
        let seen: Vec<_> = c.take_changes().iter().map(name).collect();
        assert_eq!(seen, ["-a"], "a deletion carries the last state the cache held");
        c.resync_cache();
        assert_eq!(c.take_changes().len(), 6, "a relist of every kind");
        c.watch_changes(false);
        c.apply_claim(claim("b")).unwrap();
        c.flush_cache();
        assert!(c.take_changes().is_empty(), "nothing is recorded after watching stopped");
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
}
