//! The one interface through which the controller touches a cluster (spec §5.1–§5.3).
//!
//! Two implementations: [`memory::MemoryCluster`] (the in-memory cluster used by `simulate` and
//! every test) and the kube-rs client (`noderotation run`). The reconcile reads the cached view
//! ([`Cluster::cache`], which may lag the store, like a reflector), reads fresh copies for the
//! conditional writes it must verify (`get_*`), and writes through `patch` / `delete` /
//! `create_pod` with the precondition the spec calls for.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;

use crate::karpenter::{NodeClaim, NodePool};
use crate::policy::crd::{RotationPolicy, RotationPolicyStatus};

pub mod access;
pub(crate) mod change;
pub(crate) mod events;
pub(crate) mod fence;
pub mod kube;
pub(crate) mod lease;
pub mod memory;
pub(crate) mod projection;

/// Label on every placeholder pod (§3.3).
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub(crate) const MANAGED_BY_VALUE: &str = "noderotation";

/// What the API server answered instead of success.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 404: the object does not exist (a finalized claim is gone).
    #[error("not found")]
    NotFound,
    /// 409 on update: the resourceVersion or uid precondition failed.
    #[error("conflict")]
    Conflict,
    /// 409 on create.
    #[error("already exists")]
    AlreadyExists,
    /// 403.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 422 / 400: the request itself is wrong (a bug, not a race).
    #[error("invalid: {0}")]
    Invalid(String),
    /// 5xx, timeout, connection reset: the write may or may not have been applied.
    #[error("transient: {0}")]
    Transient(String),
    /// Not sent: this replica's leader Lease deadline has passed ([`fence::Fence`]).
    #[error("fenced: {0}")]
    Fenced(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    NodePool,
    NodeClaim,
    Node,
    Pod,
    RotationPolicy,
    /// A core/v1 Event: the controller reads only Karpenter's `Nominated` Events on the pods of
    /// its namespace ([`CacheView::nominations`]); it records its own through
    /// [`Cluster::record_event`].
    Event,
}

impl ObjectKind {
    /// Pods and Events are namespaced; the other kinds are cluster-scoped.
    pub(crate) fn namespaced(self) -> bool {
        matches!(self, ObjectKind::Pod | ObjectKind::Event)
    }
}

/// Names one object. Only pods and Events are namespaced.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub kind: ObjectKind,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn cluster(kind: ObjectKind, name: impl Into<String>) -> Self {
        ObjectRef { kind, namespace: None, name: name.into() }
    }
    pub fn pod(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef { kind: ObjectKind::Pod, namespace: Some(namespace.into()), name: name.into() }
    }
    pub(crate) fn event(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef { kind: ObjectKind::Event, namespace: Some(namespace.into()), name: name.into() }
    }
}

/// The reason of the Event Karpenter's provisioner records on a pod when it launches a
/// NodeClaim for it, or counts it against a claim still in flight (or a node), with the message
/// `Pod should schedule on: nodeclaim/<name>` (`, node/<name>` when the claim has a node).
pub(crate) const NOMINATED_REASON: &str = "Nominated";

/// The NodeClaim a `Nominated` Event names (see [`NOMINATED_REASON`]), if it is one.
pub(crate) fn nominated_claim(event: &Event) -> Option<&str> {
    if event.reason.as_deref() != Some(NOMINATED_REASON) {
        return None;
    }
    let targets = event.message.as_deref()?.split_once("Pod should schedule on:")?.1;
    targets.split(',').find_map(|t| t.trim().strip_prefix("nodeclaim/")).filter(|n| !n.is_empty())
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{:?} {ns}/{}", self.kind, self.name),
            None => write!(f, "{:?} {}", self.kind, self.name),
        }
    }
}

/// One write to an object's metadata (and, for nodes, `spec.unschedulable`), applied as a
/// single update. On the kube side this is a JSON merge patch; with a precondition, the patch
/// carries `metadata.resourceVersion`, so the API server rejects it with 409 if the object
/// changed since that version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patch {
    /// Annotations to set (full keys).
    pub set: BTreeMap<String, String>,
    /// Annotations to remove (full keys).
    pub remove: BTreeSet<String>,
    /// Nodes only: cordon (`true`) or uncordon (`false`).
    pub unschedulable: Option<bool>,
}

impl Patch {
    pub(crate) fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty() && self.unschedulable.is_none()
    }
}

/// A Kubernetes Event (core/v1 or events.k8s.io on the kube side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    pub object: ObjectRef,
    pub reason: String,
    pub message: String,
    pub warning: bool,
    pub time: DateTime<Utc>,
}

/// The controller's cached view: what its reflectors hold. It may lag the store.
#[derive(Debug, Clone, Default)]
pub struct CacheView {
    pub pools: BTreeMap<String, Arc<NodePool>>,
    pub claims: BTreeMap<String, Arc<NodeClaim>>,
    pub nodes: BTreeMap<String, Arc<Node>>,
    /// Placeholder pods: label `app.kubernetes.io/managed-by=noderotation` in the controller's
    /// namespace, keyed by name.
    pub placeholders: BTreeMap<String, Arc<Pod>>,
    pub policies: BTreeMap<String, Arc<RotationPolicy>>,
    /// The PriorityClass placeholders name (`--priority-class`), when the cluster watches it
    /// and it exists: the controller creates no placeholder while it is unsafe (§3.3).
    pub placeholder_class: Option<Arc<PriorityClass>>,
    /// Karpenter's `Nominated` Events ([`NOMINATED_REASON`]) on pods of the controller's
    /// namespace (field-selected on the reason), keyed by the Event's name: which claim
    /// Karpenter launched for (or counted) each placeholder. Empty when the cluster does not
    /// watch them (only the controller does).
    pub nominations: BTreeMap<String, Arc<Event>>,
}

/// What every [`Cluster`] call returns.
pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// The cluster as the controller sees it.
pub trait Cluster: Send + Sync {
    /// The cached view (cheap: shared, not copied).
    fn cache(&self) -> Arc<CacheView>;

    /// Fresh reads from the API server, for the conditional writes that must verify state.
    fn get_pool(&self, name: &str) -> ApiResult<Option<NodePool>>;
    fn get_claim(&self, name: &str) -> ApiResult<Option<NodeClaim>>;
    fn get_node(&self, name: &str) -> ApiResult<Option<Node>>;
    fn get_pod(&self, namespace: &str, name: &str) -> ApiResult<Option<Pod>>;
    /// Pods bound to a node, all namespaces (listed on demand with a field selector: the
    /// controller never caches every pod in the cluster).
    fn pods_on_node(&self, node: &str) -> ApiResult<Vec<Pod>>;
    /// The node of `pool` (its `karpenter.sh/nodepool` label) that carries `provider_id`, listed
    /// on demand: for a claim whose node the cache does not show yet (it registered a moment
    /// ago).
    fn node_with_provider_id(&self, pool: &str, provider_id: &str) -> ApiResult<Option<Node>>;
    /// Karpenter's `Nominated` Events on the pod with uid `pod_uid` in the controller's
    /// namespace, listed on demand (field selectors on the reason and the pod's uid): what the
    /// cache may not show yet when a rotation ends.
    fn nominations(&self, pod_uid: &str) -> ApiResult<Vec<Event>>;

    /// Applies `patch` to the object; with a resourceVersion `rv`, only if the object still has
    /// it (else `Conflict`). `NotFound` when the object does not exist. Answers the object's
    /// resourceVersion after the patch, when the server said it.
    fn patch(
        &self,
        target: &ObjectRef,
        patch: &Patch,
        rv: Option<&str>,
    ) -> ApiResult<Option<String>>;

    /// Deletes the object; with `uid`, only that incarnation, with a resourceVersion `rv`, only
    /// if the object still has it (else `Conflict`). `NotFound` when it does not exist. Objects
    /// with finalizers get a deletionTimestamp and stay until finalized.
    fn delete(&self, target: &ObjectRef, uid: Option<&str>, rv: Option<&str>) -> ApiResult<()>;

    /// Creates a pod (the placeholder) and returns it as the API server stored it (its
    /// `metadata.uid` identifies what the controller created). `AlreadyExists` when the name is
    /// taken.
    fn create_pod(&self, pod: &Pod) -> ApiResult<Pod>;

    /// Writes a RotationPolicy's status subresource, only at resourceVersion `rv` if given.
    fn update_policy_status(
        &self,
        name: &str,
        status: &RotationPolicyStatus,
        rv: Option<&str>,
    ) -> ApiResult<()>;

    /// Records an Event. Best effort: failures are logged by the caller, never retried.
    fn record_event(&self, event: &EventRecord) -> ApiResult<()>;
}

/// `metadata.resourceVersion` of any object, for preconditions.
pub(crate) fn resource_version(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&str> {
    meta.resource_version.as_deref()
}

/// `metav1.Time` -> chrono.
pub(crate) fn chrono_time(
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), u32::try_from(t.0.subsec_nanosecond()).ok()?)
}

/// The read methods of a [`Cluster`] that wraps another one (the field `$inner`) and guards or
/// observes only its writes: every read goes to the wrapped cluster unchanged.
macro_rules! delegate_reads {
    ($inner:ident) => {
        fn cache(&self) -> std::sync::Arc<$crate::cluster::CacheView> {
            self.$inner.cache()
        }
        fn get_pool(
            &self,
            name: &str,
        ) -> $crate::cluster::ApiResult<Option<$crate::karpenter::NodePool>> {
            self.$inner.get_pool(name)
        }
        fn get_claim(
            &self,
            name: &str,
        ) -> $crate::cluster::ApiResult<Option<$crate::karpenter::NodeClaim>> {
            self.$inner.get_claim(name)
        }
        fn get_node(
            &self,
            name: &str,
        ) -> $crate::cluster::ApiResult<Option<k8s_openapi::api::core::v1::Node>> {
            self.$inner.get_node(name)
        }
        fn pods_on_node(
            &self,
            node: &str,
        ) -> $crate::cluster::ApiResult<Vec<k8s_openapi::api::core::v1::Pod>> {
            self.$inner.pods_on_node(node)
        }
        fn get_pod(
            &self,
            namespace: &str,
            name: &str,
        ) -> $crate::cluster::ApiResult<Option<k8s_openapi::api::core::v1::Pod>> {
            self.$inner.get_pod(namespace, name)
        }
        fn node_with_provider_id(
            &self,
            pool: &str,
            provider_id: &str,
        ) -> $crate::cluster::ApiResult<Option<k8s_openapi::api::core::v1::Node>> {
            self.$inner.node_with_provider_id(pool, provider_id)
        }
        fn nominations(
            &self,
            pod_uid: &str,
        ) -> $crate::cluster::ApiResult<Vec<k8s_openapi::api::core::v1::Event>> {
            self.$inner.nominations(pod_uid)
        }
    };
}
pub(crate) use delegate_reads;

/// The write methods of a [`Cluster`] that wraps another one (the field `$inner`): every write
/// goes to the wrapped cluster inside the wrapper's method `$guard`
/// (`fn<T>(&self, write: impl FnOnce() -> ApiResult<T>) -> ApiResult<T>`), which may refuse it,
/// hold it or observe it. With `$other`, the policy status and Event writes go through that
/// method instead.
macro_rules! delegate_writes {
    ($inner:ident, $guard:ident) => {
        $crate::cluster::delegate_writes!($inner, $guard, $guard);
    };
    ($inner:ident, $guard:ident, $other:ident) => {
        fn patch(
            &self,
            target: &$crate::cluster::ObjectRef,
            patch: &$crate::cluster::Patch,
            rv: Option<&str>,
        ) -> $crate::cluster::ApiResult<Option<String>> {
            self.$guard(|| self.$inner.patch(target, patch, rv))
        }
        fn delete(
            &self,
            target: &$crate::cluster::ObjectRef,
            uid: Option<&str>,
            rv: Option<&str>,
        ) -> $crate::cluster::ApiResult<()> {
            self.$guard(|| self.$inner.delete(target, uid, rv))
        }
        fn create_pod(
            &self,
            pod: &k8s_openapi::api::core::v1::Pod,
        ) -> $crate::cluster::ApiResult<k8s_openapi::api::core::v1::Pod> {
            self.$guard(|| self.$inner.create_pod(pod))
        }
        fn update_policy_status(
            &self,
            name: &str,
            status: &$crate::policy::crd::RotationPolicyStatus,
            rv: Option<&str>,
        ) -> $crate::cluster::ApiResult<()> {
            self.$other(|| self.$inner.update_policy_status(name, status, rv))
        }
        fn record_event(
            &self,
            event: &$crate::cluster::EventRecord,
        ) -> $crate::cluster::ApiResult<()> {
            self.$other(|| self.$inner.record_event(event))
        }
    };
}
pub(crate) use delegate_writes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nomination_names_the_claim_karpenter_launched_or_counted() {
        let event = |reason: &str, message: &str| Event {
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..Event::default()
        };
        let new = event("Nominated", "Pod should schedule on: nodeclaim/general-abc12");
        assert_eq!(nominated_claim(&new), Some("general-abc12"));
        // A claim in flight that already has its node.
        let node =
            event("Nominated", "Pod should schedule on: nodeclaim/general-x, node/ip-10-0-1-2");
        assert_eq!(nominated_claim(&node), Some("general-x"));
        // An existing node without a claim (not Karpenter's), another reason, another message.
        assert_eq!(nominated_claim(&event("Nominated", "Pod should schedule on: node/n1")), None);
        assert_eq!(nominated_claim(&event("Scheduled", "nodeclaim/general-x")), None);
        assert_eq!(
            nominated_claim(&event("Nominated", "Pod should schedule on: nodeclaim/")),
            None
        );
    }
}
