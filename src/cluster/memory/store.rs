//! The store: the objects of each kind, the server-managed fields (resourceVersion, generation,
//! uid), and the watch events every mutation sends to the controllers' caches.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use super::admission::Admission;
use super::cache::{Change, ClientCache};
use super::{CallCounts, Faults};
use crate::cluster::{
    ApiError, CacheView, EventRecord, MANAGED_BY_LABEL, MANAGED_BY_VALUE, NOMINATED_REASON,
    ObjectKind, ObjectRef,
};
use crate::karpenter::{NodeClaim, NodePool};
use crate::policy::crd::RotationPolicy;

/// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
pub(super) type Key = (String, String);

#[derive(Debug, Default)]
pub(super) struct Store {
    pub(super) pools: BTreeMap<Key, Arc<NodePool>>,
    pub(super) claims: BTreeMap<Key, Arc<NodeClaim>>,
    pub(super) nodes: BTreeMap<Key, Arc<Node>>,
    pub(super) pods: BTreeMap<Key, Arc<Pod>>,
    pub(super) policies: BTreeMap<Key, Arc<RotationPolicy>>,
    /// Events the world records (Karpenter's `Nominated`); the controller's own go to
    /// [`State::events`].
    pub(super) events: BTreeMap<Key, Arc<Event>>,
    /// `spec.nodeName` -> pods bound there, so `pods_on_node` does not scan every pod.
    pub(super) pods_by_node: BTreeMap<String, BTreeSet<Key>>,
}

/// A placeholder is what the controller's pod reflector watches: the managed-by label, in the
/// controller's namespace.
fn is_placeholder(controller_namespace: &str, key: &Key, pod: &Pod) -> bool {
    key.0 == controller_namespace
        && pod.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).map(String::as_str)
            == Some(MANAGED_BY_VALUE)
}

/// A nomination is what the controller's Event reflector watches: reason `Nominated`, in the
/// controller's namespace.
fn is_nomination(controller_namespace: &str, key: &Key, event: &Event) -> bool {
    key.0 == controller_namespace && event.reason.as_deref() == Some(NOMINATED_REASON)
}

/// The objects of one namespaced kind in `ns`, in key order.
pub(super) fn in_namespace<'a, T>(
    table: &'a BTreeMap<Key, Arc<T>>,
    ns: &'a str,
) -> impl Iterator<Item = (&'a Key, &'a Arc<T>)> {
    table.range((ns.to_string(), String::new())..).take_while(move |(key, _)| key.0 == ns)
}

/// What the store needs to know about each stored type.
pub(super) trait Kind: Resource + Clone + PartialEq + Send + Sync + 'static {
    const KIND: ObjectKind;
    /// Custom resources bump `metadata.generation` when their spec changes.
    const TRACKS_GENERATION: bool = false;

    fn table(store: &Store) -> &BTreeMap<Key, Arc<Self>>;
    fn table_mut(store: &mut Store) -> &mut BTreeMap<Key, Arc<Self>>;
    fn spec_changed(_old: &Self, _new: &Self) -> bool {
        false
    }
    fn set_unschedulable(&mut self, _unschedulable: bool) {}
    fn reindex(_store: &mut Store, _key: &Key, _old: Option<&Self>, _new: Option<&Self>) {}
    /// The watch event showing a controller cache the object `name` as it now is (`None`: gone).
    fn event(name: String, obj: Option<Arc<Self>>) -> Change;
    /// The watch event this mutation sends to a controller cache, if it watches it: by default
    /// the cache watches every object of the kind.
    fn change(
        _ns: &str,
        key: &Key,
        _old: Option<&Arc<Self>>,
        new: Option<&Arc<Self>>,
    ) -> Option<Change> {
        Some(Self::event(key.1.clone(), new.cloned()))
    }
}

/// The members of [`Kind`] that name where a kind lives: its [`ObjectKind`] (the variant named
/// like the type), its table in the store, its [`Change`] variant.
macro_rules! stored {
    ($kind:ident in $field:ident, $variant:ident) => {
        const KIND: ObjectKind = ObjectKind::$kind;

        fn table(store: &Store) -> &BTreeMap<Key, Arc<Self>> {
            &store.$field
        }
        fn table_mut(store: &mut Store) -> &mut BTreeMap<Key, Arc<Self>> {
            &mut store.$field
        }
        fn event(name: String, obj: Option<Arc<Self>>) -> Change {
            Change::$variant(name, obj)
        }
    };
}

/// A custom resource: its generation moves when its spec changes.
macro_rules! custom_resource {
    ($kind:ident in $field:ident, $variant:ident) => {
        impl Kind for $kind {
            stored!($kind in $field, $variant);
            const TRACKS_GENERATION: bool = true;

            fn spec_changed(old: &Self, new: &Self) -> bool {
                old.spec != new.spec
            }
        }
    };
}

custom_resource!(NodePool in pools, Pool);
custom_resource!(NodeClaim in claims, Claim);
custom_resource!(RotationPolicy in policies, Policy);

impl Kind for Node {
    stored!(Node in nodes, Node);

    fn set_unschedulable(&mut self, unschedulable: bool) {
        // Go's `omitempty`: false is never stored, only absent.
        self.spec.get_or_insert_default().unschedulable = unschedulable.then_some(true);
    }
}

fn node_name_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

impl Kind for Pod {
    stored!(Pod in pods, Placeholder);

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
        selected(key, old, new, |p| is_placeholder(ns, key, p), Change::Placeholder)
    }
}

/// The watch event a selected watch (label or field selector) sends: the object while it
/// matches, DELETED when it stops matching, nothing about objects that never matched.
fn selected<T>(
    key: &Key,
    old: Option<&Arc<T>>,
    new: Option<&Arc<T>>,
    matches: impl Fn(&T) -> bool,
    wrap: fn(String, Option<Arc<T>>) -> Change,
) -> Option<Change> {
    let new = new.filter(|o| matches(o)).cloned();
    let was = old.is_some_and(|o| matches(o));
    (was || new.is_some()).then(|| wrap(key.1.clone(), new))
}

impl Kind for Event {
    stored!(Event in events, Nomination);

    fn change(
        ns: &str,
        key: &Key,
        old: Option<&Arc<Self>>,
        new: Option<&Arc<Self>>,
    ) -> Option<Change> {
        selected(key, old, new, |e| is_nomination(ns, key, e), Change::Nomination)
    }
}

/// Runs `$body` with `$t` bound to the stored type of `$kind`.
macro_rules! with_kind {
    ($kind:expr, $t:ident => $body:expr) => {
        with_kind!($kind, $t => $body;
            NodePool: $crate::karpenter::NodePool,
            NodeClaim: $crate::karpenter::NodeClaim,
            Node: k8s_openapi::api::core::v1::Node,
            Pod: k8s_openapi::api::core::v1::Pod,
            RotationPolicy: $crate::policy::crd::RotationPolicy,
            Event: k8s_openapi::api::core::v1::Event)
    };
    ($kind:expr, $t:ident => $body:expr; $($variant:ident: $ty:ty),+) => {
        match $kind {
            $($crate::cluster::ObjectKind::$variant => {
                type $t = $ty;
                $body
            })+
        }
    };
}
pub(super) use with_kind;

pub(super) fn key_for(target: &ObjectRef) -> Result<Key, ApiError> {
    if target.name.is_empty() {
        return Err(ApiError::Invalid(format!("{target}: empty name")));
    }
    match (target.kind.namespaced(), &target.namespace) {
        (true, Some(ns)) if !ns.is_empty() => Ok((ns.clone(), target.name.clone())),
        (true, _) => Err(ApiError::Invalid(format!("{target}: a namespaced kind"))),
        (_, None) => Ok((String::new(), target.name.clone())),
        (_, Some(_)) => Err(ApiError::Invalid(format!("{target}: not a namespaced kind"))),
    }
}

pub(super) fn key_of<T: Kind>(obj: &T) -> Result<Key, ApiError> {
    let meta = obj.meta();
    key_for(&ObjectRef {
        kind: T::KIND,
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
    })
}

pub(super) fn cluster_key(name: &str) -> Key {
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

pub(super) fn has_finalizers(meta: &ObjectMeta) -> bool {
    meta.finalizers.as_ref().is_some_and(|f| !f.is_empty())
}

pub(super) struct State {
    pub(super) controller_namespace: String,
    /// The clock's reading when the lock was taken; every write of one call shares it.
    pub(super) now: DateTime<Utc>,
    pub(super) store: Store,
    /// The global resourceVersion counter (etcd's revision).
    pub(super) revision: u64,
    pub(super) next_uid: u64,
    pub(super) clients: Vec<ClientCache>,
    pub(super) events: Vec<EventRecord>,
    pub(super) writes: CallCounts,
    pub(super) faults: Option<Box<dyn Faults>>,
    /// The placeholders' PriorityClass, when a test sets one (none by default: nothing to judge).
    pub(super) placeholder_class: Option<Arc<PriorityClass>>,
    /// The API server's standing refusals (a rejected placeholder, a pod list that times out).
    pub(super) admission: Admission,
}

impl State {
    pub(super) fn get<T: Kind>(&self, key: &Key) -> Option<Arc<T>> {
        T::table(&self.store).get(key).cloned()
    }

    pub(super) fn new_uid(&mut self) -> String {
        self.next_uid += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.next_uid)
    }

    pub(super) fn view(&self) -> CacheView {
        fn cluster<T>((key, obj): (&Key, &Arc<T>)) -> (String, Arc<T>) {
            (key.1.clone(), Arc::clone(obj))
        }
        let ns = &self.controller_namespace;
        CacheView {
            pools: self.store.pools.iter().map(cluster).collect(),
            claims: self.store.claims.iter().map(cluster).collect(),
            nodes: self.store.nodes.iter().map(cluster).collect(),
            placeholders: in_namespace(&self.store.pods, ns)
                .filter(|(k, p)| is_placeholder(ns, k, p))
                .map(cluster)
                .collect(),
            policies: self.store.policies.iter().map(cluster).collect(),
            placeholder_class: self.placeholder_class.clone(),
            nominations: in_namespace(&self.store.events, ns)
                .filter(|(k, e)| is_nomination(ns, k, e))
                .map(cluster)
                .collect(),
        }
    }

    /// Stores `next` at `key`: server-managed fields (resourceVersion, generation) are set
    /// here, a no-op write changes nothing (unless `force`, which still bumps the
    /// resourceVersion), and a deleting object whose last finalizer is gone is removed. Returns
    /// the object as written.
    pub(super) fn write<T: Kind>(&mut self, key: &Key, mut next: T, force: bool) -> Arc<T> {
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
    pub(super) fn remove<T: Kind>(&mut self, key: &Key) -> Option<Arc<T>> {
        let old = T::table_mut(&mut self.store).remove(key)?;
        self.revision += 1;
        T::reindex(&mut self.store, key, Some(&old), None);
        self.emit::<T>(key, Some(&old), None);
        Some(old)
    }

    pub(super) fn emit<T: Kind>(&mut self, key: &Key, old: Option<&Arc<T>>, new: Option<&Arc<T>>) {
        let Some(change) = T::change(&self.controller_namespace, key, old, new) else {
            return;
        };
        let now = self.now;
        // Projected once for every controller's cache, not once per cache.
        let mut projected = None;
        for client in &mut self.clients {
            let change = if client.whole() {
                change.clone()
            } else {
                projected.get_or_insert_with(|| change.clone().projected()).clone()
            };
            client.push(T::KIND, change, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::cluster::memory::fixtures::*;

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
}
