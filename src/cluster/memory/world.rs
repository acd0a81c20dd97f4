//! The world side: the simulated Karpenter, kubelet, scheduler and operator (and tests) read and
//! write the store directly, without faults, preconditions or counting.
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Resource;

use super::MemoryCluster;
use super::store::{Key, Kind, State, cluster_key, key_for, key_of, with_kind};
use crate::cluster::{ApiError, ObjectRef};
use crate::karpenter::{NodeClaim, NodePool};
use crate::policy::crd::RotationPolicy;
use crate::policy::resolve::to_time;

impl State {
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

impl MemoryCluster {
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

    /// Pods whose `spec.nodeName` is `node` (the world's view of
    /// [`Cluster::pods_on_node`](crate::cluster::Cluster::pods_on_node)).
    #[cfg(test)]
    pub(crate) fn pods_bound_to(&self, node: &str) -> Vec<Arc<Pod>> {
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

    /// Sets (or removes) the PriorityClass placeholders name, as every controller's watch of it
    /// sees it at once (a cluster-scoped singleton: no lag is modelled).
    pub fn set_placeholder_class(&self, class: Option<PriorityClass>) {
        let mut st = self.lock();
        let class = class.map(Arc::new);
        st.placeholder_class.clone_from(&class);
        for client in &mut st.clients {
            Arc::make_mut(&mut client.view).placeholder_class.clone_from(&class);
        }
    }

    /// An Event another component records (Karpenter's `Nominated`).
    pub fn apply_event(&self, event: Event) -> Result<Arc<Event>, ApiError> {
        self.lock().apply(event)
    }

    /// The Events the world recorded in `namespace` (oldest name first).
    pub fn events_in(&self, namespace: &str) -> Vec<Arc<Event>> {
        let st = self.lock();
        st.store.events.iter().filter(|(k, _)| k.0 == namespace).map(|(_, e)| e.clone()).collect()
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

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::clock::Clock;
    use crate::cluster::memory::fixtures::*;

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
}
