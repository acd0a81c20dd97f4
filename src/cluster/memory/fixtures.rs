//! What the unit tests of the in-memory cluster share: a cluster on a virtual clock and a few
//! objects.
use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::MemoryCluster;
use crate::clock::VirtualClock;
use crate::cluster::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, ObjectKind, ObjectRef, Patch};
use crate::karpenter::{NODEPOOL_LABEL, NodeClaim, NodeClaimSpec};

pub(super) const NS: &str = "noderotation-system";
pub(super) const TERMINATION: &str = "karpenter.sh/termination";

pub(super) fn cluster() -> (MemoryCluster, VirtualClock) {
    let start = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).single().unwrap();
    let clock = VirtualClock::new(start);
    (MemoryCluster::new(Arc::new(clock.clone()), NS), clock)
}

pub(super) fn claim(name: &str) -> NodeClaim {
    let mut c = NodeClaim::new(name, NodeClaimSpec::default());
    c.metadata.finalizers = Some(vec![TERMINATION.to_string()]);
    c.metadata.labels = Some(BTreeMap::from([(NODEPOOL_LABEL.into(), "general".into())]));
    c
}

pub(super) fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(NodeSpec::default()),
        ..Default::default()
    }
}

pub(super) fn pod(ns: &str, name: &str, node: Option<&str>, placeholder: bool) -> Pod {
    let labels =
        placeholder.then(|| BTreeMap::from([(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into())]));
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

pub(super) fn claim_ref(name: &str) -> ObjectRef {
    ObjectRef::cluster(ObjectKind::NodeClaim, name)
}

pub(super) fn annotate(key: &str, value: &str) -> Patch {
    Patch { set: BTreeMap::from([(key.into(), value.into())]), ..Default::default() }
}

pub(super) fn rv_of(c: &MemoryCluster, name: &str) -> String {
    c.claim(name).unwrap().metadata.resource_version.clone().unwrap()
}

pub(super) fn annotation(c: &NodeClaim, key: &str) -> Option<String> {
    c.metadata.annotations.as_ref()?.get(key).cloned()
}
