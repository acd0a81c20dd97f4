//! What a watch cache keeps of the Nodes and NodeClaims it stores: the fields the controller
//! reads, nothing else. A cluster's Nodes and NodeClaims are most of what the controller caches
//! (an EKS Node under Karpenter is about 17.5 KB of JSON, its NodeClaim about 10 KB), and most of
//! each is written for others: managed fields, the image list, Karpenter's labels and
//! annotations, condition messages.
//!
//! One definition for both caches: the kube reflectors project every object before it enters a
//! store, and the in-memory cluster projects what it delivers to a controller's cache, so the
//! simulation and every test decide on exactly the fields production decides on. A field a
//! future reader needs is added here; a reader of a field projected away sees it absent, in the
//! simulation as in production. Fresh reads (`get_*`) are never projected: a write is decided
//! on whole objects there. Every write is a merge patch of named keys, so what a cached copy
//! lacks is never written back as absent.
//!
//! Kept:
//! - every object: name, namespace, uid, resourceVersion, generation, creation and deletion
//!   timestamps, finalizers; managed fields never;
//! - annotations: only the keys of the rules' annotation vocabulary (`rules/annotations.ron`,
//!   ours and Karpenter's `do-not-disrupt`); no other annotation is read;
//! - Node: the `karpenter.sh/nodepool` label (the placeholder's affinity, which may name any
//!   label key, is built from a fresh read of the node), the whole spec (providerID, taints,
//!   unschedulable), of the status `allocatable` and the `Ready` condition's type and status;
//! - NodeClaim: the `karpenter.sh/nodepool` label, the whole spec (requirements, expireAfter,
//!   terminationGracePeriod), of the status `nodeName`, `providerID`, `allocatable` and the
//!   conditions [`CLAIM_CONDITIONS`] (type and status); no owner references.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::engine::Key;
use crate::karpenter::{CLAIM_CONDITIONS, NODEPOOL_LABEL, NodeClaim, READY};

/// Managed fields go from every cached object (all kinds).
pub(crate) fn metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
}

/// Keeps the entries of `map` whose key `keep` accepts (an empty map becomes none).
fn retain_keys(map: &mut Option<BTreeMap<String, String>>, keep: impl Fn(&str) -> bool) {
    if let Some(entries) = map.as_mut() {
        entries.retain(|k, _| keep(k));
    }
    if map.as_ref().is_some_and(BTreeMap::is_empty) {
        *map = None;
    }
}

/// Keeps the annotations of the rules' vocabulary only.
fn vocabulary_annotations(meta: &mut ObjectMeta) {
    retain_keys(&mut meta.annotations, |k| Key::ALL.iter().any(|key| key.full() == k));
}

/// Keeps the `karpenter.sh/nodepool` label only.
fn pool_label(meta: &mut ObjectMeta) {
    retain_keys(&mut meta.labels, |k| k == NODEPOOL_LABEL);
}

/// A Node as a watch cache keeps it (see the module docs).
pub(crate) fn node(node: &mut Node) {
    metadata(&mut node.metadata);
    vocabulary_annotations(&mut node.metadata);
    pool_label(&mut node.metadata);
    if let Some(status) = node.status.take() {
        let ready = status.conditions.map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == READY)
                .map(|c| NodeCondition { type_: c.type_, status: c.status, ..Default::default() })
                .collect()
        });
        node.status = Some(NodeStatus {
            allocatable: status.allocatable,
            conditions: ready,
            ..NodeStatus::default()
        });
    }
}

/// A NodeClaim as a watch cache keeps it (see the module docs).
pub(crate) fn claim(claim: &mut NodeClaim) {
    metadata(&mut claim.metadata);
    vocabulary_annotations(&mut claim.metadata);
    claim.metadata.owner_references = None;
    pool_label(&mut claim.metadata);
    if let Some(status) = claim.status.as_mut() {
        status.conditions.retain(|c| CLAIM_CONDITIONS.contains(&c.type_.as_str()));
        for c in &mut status.conditions {
            (c.reason, c.message, c.last_transition_time) = (None, None, None);
        }
    }
}
