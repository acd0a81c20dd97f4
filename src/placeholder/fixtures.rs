//! Shared fixtures of the placeholder unit tests.
use chrono::{DateTime, TimeZone, Utc};
use k8s_openapi::api::core::v1::{Node, NodeAffinity, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::karpenter::{self, NodeClaim, NodePool};
use crate::policy::settings::Effective;
use crate::policy::settings::tests::spec_with;
pub(super) use serde_json::{Value, json};

pub(super) fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn t(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 3, h, m, 0).single().unwrap_or_else(|| panic!("time"))
}

pub(super) const NODE: &str = "ip-10-0-1-1";

/// A running pod on NODE with one container requesting `cpu` / `memory`.
pub(super) fn pod(name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "app"},
        "spec": {"nodeName": NODE, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ]},
        "status": {"phase": "Running"}
    })
}

pub(super) fn with(mut base: Value, pointer: &str, value: Value) -> Value {
    // Create intermediate objects as needed, then set.
    let mut cur = &mut base;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            cur[*part] = value;
            break;
        }
        if cur.get(*part).is_none() {
            cur[*part] = json!({});
        }
        cur = &mut cur[*part];
    }
    base
}

pub(super) fn owned_by(p: Value, kind: &str) -> Value {
    with(
        p,
        "/metadata/ownerReferences",
        json!([{"apiVersion": "apps/v1", "kind": kind, "name": "x", "uid": "u", "controller": true}]),
    )
}

pub(super) fn m(s: &str) -> i128 {
    karpenter::quantity_millis(&Quantity(s.into())).unwrap_or_else(|| panic!("{s}"))
}

pub(super) fn res(pairs: &[(&str, &str)]) -> Resources {
    pairs.iter().map(|(k, v)| (k.to_string(), m(v))).collect()
}

pub(super) fn pool() -> NodePool {
    from(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {
            "template": {"spec": {
                "requirements": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In",
                     "values": ["ap-northeast-1a", "ap-northeast-1c"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
                    {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["3"]}
                ],
                "taints": [
                    {"key": "dedicated", "value": "api", "effect": "NoSchedule"},
                    {"key": "gpu", "effect": "NoExecute"}
                ]
            }},
            "limits": {"cpu": "100", "memory": "400Gi", "nodes": "10"}
        },
        "status": {"resources": {"cpu": "90", "memory": "300Gi", "nodes": "9"}}
    }))
}

pub(super) fn claim() -> NodeClaim {
    from(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "general-x7k2p", "labels": {"karpenter.sh/nodepool": "general"},
                     "creationTimestamp": "2026-05-20T03:04:05Z"},
        "spec": {"requirements": [
            {"key": "topology.kubernetes.io/zone", "operator": "In",
             "values": ["ap-northeast-1a", "ap-northeast-1b"]},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
            {"key": "karpenter.k8s.aws/instance-memory", "operator": "Gt", "values": ["8191"]},
            {"key": "karpenter.k8s.aws/instance-memory", "operator": "Lt", "values": ["65537"]}
        ]},
        "status": {"nodeName": NODE, "providerID": "aws:///ap-northeast-1a/i-1",
                   "allocatable": {"cpu": "3920m", "memory": "14162Mi", "pods": "58",
                                   "ephemeral-storage": "17Gi"}}
    }))
}

pub(super) fn node(labels: Value) -> Node {
    from(json!({
        "metadata": {"name": NODE, "labels": labels},
        "spec": {"providerID": "aws:///ap-northeast-1a/i-1"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

pub(super) fn settings(whole_node: bool, required: &[&str], preferred: &[&str]) -> Effective {
    let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
    spec.surge.whole_node_reservation.enabled = whole_node;
    spec.surge.match_node_requirements.required = required.iter().map(|s| s.to_string()).collect();
    spec.surge.match_node_requirements.preferred =
        preferred.iter().map(|s| s.to_string()).collect();
    Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn build(
    pool: &NodePool,
    claim: &NodeClaim,
    node: Option<&Node>,
    pods: &[Pod],
    settings: &Effective,
) -> Result<Placeholder, PlaceholderRefused> {
    build_placeholder(&PlaceholderInput {
        pool,
        claim,
        node,
        pods,
        settings,
        namespace: "noderotation-system",
        priority_class: "noderotation-placeholder",
        pause_image: "registry.k8s.io/pause:3.10",
    })
}

pub(super) fn built(r: Result<Placeholder, PlaceholderRefused>) -> Placeholder {
    r.unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn affinity_of(p: &Placeholder) -> NodeAffinity {
    p.pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.clone())
        .and_then(|a| a.node_affinity)
        .unwrap_or_default()
}

pub(super) fn required_exprs(p: &Placeholder) -> Vec<(String, String, Vec<String>)> {
    affinity_of(p)
        .required_during_scheduling_ignored_during_execution
        .map(|r| r.node_selector_terms)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|t| t.match_expressions.unwrap_or_default())
        .map(|r| (r.key, r.operator, r.values.unwrap_or_default()))
        .collect()
}

pub(super) fn placed(phase: &str, node_name: Option<&str>) -> Pod {
    let mut v = json!({
        "metadata": {"name": "noderotation-surge-general-x7k2p", "namespace": "noderotation-system",
                     "labels": {"app.kubernetes.io/managed-by": "noderotation"}},
        "spec": {"containers": [{"name": "pause"}]},
        "status": {"phase": phase}
    });
    if let Some(n) = node_name {
        v = with(v, "/spec/nodeName", json!(n));
    }
    from(v)
}

pub(super) fn host(name: &str, pool: &str, ready: &str) -> Node {
    from(json!({
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
        "spec": {"providerID": format!("aws:///ap-northeast-1a/{name}")},
        "status": {"conditions": [{"type": "Ready", "status": ready}]}
    }))
}
