//! The API server's verbs on the store: resourceVersion and uid preconditions (409 Conflict),
//! 404 NotFound, finalizers holding a deleting object, the fields a create sets.
use std::sync::Arc;

use super::store::{Key, Kind, State, cluster_key, has_finalizers, key_for, key_of, with_kind};
use crate::cluster::{ApiError, ObjectRef, Patch};
use crate::policy::crd::{RotationPolicy, RotationPolicyStatus};
use crate::policy::resolve::to_time;

impl State {
    /// The object at `key` if it meets the write's preconditions: `NotFound` when there is none,
    /// `Conflict` when its uid or resourceVersion is not the one given.
    fn precondition<T: Kind>(
        &self,
        key: &Key,
        uid: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<Arc<T>, ApiError> {
        let current = self.get::<T>(key).ok_or(ApiError::NotFound)?;
        let meta = current.meta();
        let differs = |given: Option<&str>, stored: &Option<String>| {
            given.is_some_and(|given| stored.as_deref() != Some(given))
        };
        if differs(uid, &meta.uid) || differs(resource_version, &meta.resource_version) {
            return Err(ApiError::Conflict);
        }
        Ok(current)
    }

    pub(super) fn patch<T: Kind>(
        &mut self,
        key: &Key,
        patch: &Patch,
        resource_version: Option<&str>,
    ) -> Result<Option<String>, ApiError> {
        let current = self.precondition::<T>(key, None, resource_version)?;
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
        Ok(self.write(key, next, false).meta().resource_version.clone())
    }

    pub(super) fn delete<T: Kind>(
        &mut self,
        key: &Key,
        uid: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<(), ApiError> {
        let current = self.precondition::<T>(key, uid, resource_version)?;
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

    pub(super) fn create<T: Kind>(&mut self, obj: &T) -> Result<Arc<T>, ApiError> {
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

    pub(super) fn update_policy_status(
        &mut self,
        name: &str,
        status: &RotationPolicyStatus,
        resource_version: Option<&str>,
    ) -> Result<(), ApiError> {
        let key = cluster_key(name);
        let current = self.precondition::<RotationPolicy>(&key, None, resource_version)?;
        let mut next = (*current).clone();
        next.status = Some(status.clone());
        self.write(&key, next, false);
        Ok(())
    }

    /// An injected conflict: someone else wrote the object, so its resourceVersion moves on.
    pub(super) fn touch(&mut self, target: &ObjectRef) {
        let Ok(key) = key_for(target) else { return };
        with_kind!(target.kind, T => {
            if let Some(current) = self.get::<T>(&key) {
                self.write(&key, (*current).clone(), true);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use chrono::Duration;

    use super::*;
    use crate::clock::Clock;
    use crate::cluster::memory::fixtures::*;
    use crate::cluster::{Cluster, ObjectKind};
    use crate::policy::crd::RotationPolicySpec;

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
        assert_eq!(c.call_counts().patch, 3);
        assert_eq!(c.call_counts().failed, 1);
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
        let counts = c.call_counts();
        assert_eq!((counts.create, counts.failed), (2, 3));
    }

    #[test]
    fn policy_status_write_is_preconditioned() {
        let (c, _) = cluster();
        let spec: RotationPolicySpec = serde_norway::from_str("nodePoolSelector: {}\n").unwrap();
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
        assert_eq!(c.call_counts().status, 1);
    }
}
