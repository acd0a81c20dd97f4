//! The controller side: the [`Cluster`] impl. Every call passes the fault hook and is counted
//! in [`CallCounts`].
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, Node, Pod};

use super::faults::{INJECTED_FORBIDDEN, INJECTED_TRANSIENT};
use super::store::{State, cluster_key, key_for, with_kind};
use super::{ApiVerb, Call, Fault, MemoryCluster};
use crate::cluster::{
    ApiError, ApiResult, CacheView, Cluster, EventRecord, NOMINATED_REASON, ObjectKind, ObjectRef,
    Patch,
};
use crate::karpenter::{NODEPOOL_LABEL, NodeClaim, NodePool};
use crate::policy::crd::RotationPolicyStatus as Status;

/// Controller calls through the trait. The per-verb write counts are writes the store applied
/// (including no-op patches and writes whose response an injected fault then lost); `failed`
/// counts write calls that returned an error to the controller (genuine or injected). A write
/// that applied and then reported `Transient` is in both. `get` and `list` count the reads the
/// store answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallCounts {
    pub patch: u64,
    pub delete: u64,
    pub create: u64,
    pub status: u64,
    pub event: u64,
    pub failed: u64,
    /// Fresh reads of one object (`get_pool`, `get_claim`, `get_node`, `get_pod`).
    pub get: u64,
    /// Lists on demand (pods on a node, a node by providerID, nominations).
    pub list: u64,
}

impl CallCounts {
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
            ApiVerb::Get => self.get += 1,
            ApiVerb::List => self.list += 1,
        }
    }
}

impl MemoryCluster {
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
            if result.is_ok() {
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
}

impl Cluster for MemoryCluster {
    fn cache(&self) -> Arc<CacheView> {
        let mut st = self.lock();
        let now = st.now;
        let cache = &mut st.clients[self.client];
        cache.deliver(now);
        Arc::clone(&cache.view)
    }

    fn get_pool(&self, name: &str) -> ApiResult<Option<NodePool>> {
        let target = ObjectRef::cluster(ObjectKind::NodePool, name);
        self.call(ApiVerb::Get, &target, false, |st| {
            Ok(st.get::<NodePool>(&cluster_key(name)).map(|o| (*o).clone()))
        })
    }

    fn get_claim(&self, name: &str) -> ApiResult<Option<NodeClaim>> {
        let target = ObjectRef::cluster(ObjectKind::NodeClaim, name);
        self.call(ApiVerb::Get, &target, false, |st| {
            Ok(st.get::<NodeClaim>(&cluster_key(name)).map(|o| (*o).clone()))
        })
    }

    fn get_node(&self, name: &str) -> ApiResult<Option<Node>> {
        let target = ObjectRef::cluster(ObjectKind::Node, name);
        self.call(ApiVerb::Get, &target, false, |st| {
            Ok(st.get::<Node>(&cluster_key(name)).map(|o| (*o).clone()))
        })
    }

    fn get_pod(&self, namespace: &str, name: &str) -> ApiResult<Option<Pod>> {
        let target = ObjectRef::pod(namespace, name);
        self.call(ApiVerb::Get, &target, false, |st| {
            let key = key_for(&target)?;
            Ok(st.get::<Pod>(&key).map(|o| (*o).clone()))
        })
    }

    fn node_with_provider_id(&self, pool: &str, provider_id: &str) -> ApiResult<Option<Node>> {
        let target = ObjectRef::cluster(ObjectKind::Node, provider_id);
        self.call(ApiVerb::List, &target, false, |st| {
            Ok(st.store.nodes.values().find_map(|n| {
                let labelled = n.metadata.labels.as_ref().and_then(|l| l.get(NODEPOOL_LABEL));
                let id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
                (labelled.map(String::as_str) == Some(pool) && id == Some(provider_id))
                    .then(|| (**n).clone())
            }))
        })
    }

    fn pods_on_node(&self, node: &str) -> ApiResult<Vec<Pod>> {
        let target = ObjectRef::cluster(ObjectKind::Node, node);
        self.call(ApiVerb::List, &target, false, |st| {
            st.admission.list(node)?;
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

    fn nominations(&self, pod_uid: &str) -> ApiResult<Vec<Event>> {
        let target = ObjectRef::event(self.controller_namespace(), pod_uid);
        self.call(ApiVerb::List, &target, false, |st| {
            Ok(super::store::in_namespace(&st.store.events, &st.controller_namespace)
                .map(|(_, e)| e)
                .filter(|e| {
                    e.reason.as_deref() == Some(NOMINATED_REASON)
                        && e.involved_object.uid.as_deref() == Some(pod_uid)
                })
                .map(|e| (**e).clone())
                .collect())
        })
    }

    fn patch(
        &self,
        target: &ObjectRef,
        patch: &Patch,
        rv: Option<&str>,
    ) -> ApiResult<Option<String>> {
        self.call(ApiVerb::Patch, target, rv.is_some(), |st| {
            let key = key_for(target)?;
            if let Some(both) = patch.set.keys().find(|k| patch.remove.contains(*k)) {
                return Err(ApiError::Invalid(format!("annotation {both} both set and removed")));
            }
            if patch.unschedulable.is_some() && target.kind != ObjectKind::Node {
                return Err(ApiError::Invalid(format!("{target}: unschedulable is for nodes")));
            }
            with_kind!(target.kind, T => st.patch::<T>(&key, patch, rv))
        })
    }

    fn delete(&self, target: &ObjectRef, uid: Option<&str>, rv: Option<&str>) -> ApiResult<()> {
        let precondition = uid.is_some() || rv.is_some();
        self.call(ApiVerb::Delete, target, precondition, |st| {
            let key = key_for(target)?;
            with_kind!(target.kind, T => st.delete::<T>(&key, uid, rv))
        })
    }

    fn create_pod(&self, pod: &Pod) -> ApiResult<Pod> {
        let target = ObjectRef {
            kind: ObjectKind::Pod,
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone().unwrap_or_default(),
        };
        self.call(ApiVerb::Create, &target, false, |st| {
            st.admission.admit(pod)?;
            st.create(pod).map(|p| (*p).clone())
        })
    }

    fn update_policy_status(&self, name: &str, status: &Status, rv: Option<&str>) -> ApiResult<()> {
        let target = ObjectRef::cluster(ObjectKind::RotationPolicy, name);
        self.call(ApiVerb::UpdateStatus, &target, rv.is_some(), |st| {
            st.update_policy_status(name, status, rv)
        })
    }

    fn record_event(&self, event: &EventRecord) -> ApiResult<()> {
        self.call(ApiVerb::RecordEvent, &event.object, false, |st| {
            st.events.push(event.clone());
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::cluster::memory::fixtures::*;

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MemoryCluster>();
        let (c, _) = cluster();
        let _: Arc<dyn Cluster> = Arc::new(c);
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
        let counts = c.call_counts();
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
}
