//! Which pods on the candidate node the sizing counts (§3.3): the pod census behind the
//! placeholder's requests (not the §3.2 candidate census). Each pod gets one [`PodClass`]; only
//! [`PodClass::Reschedulable`] pods need capacity elsewhere.
use k8s_openapi::api::core::v1::{NodeSelectorTerm, Pod, PodSpec};
use kube::ResourceExt;

/// The kubelet marks mirror pods of static pods with this annotation.
pub(crate) const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The node label that names one host.
pub(crate) const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// How the sizing treats one pod found on the candidate node. The first rule that matches wins,
/// in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodClass {
    /// `spec.nodeName` is not the candidate node: not on it (defensive; the caller lists the
    /// node's pods).
    OtherNode,
    /// Phase `Succeeded` or `Failed`: holds no resources and is not recreated by a drain.
    Completed,
    /// A static pod's mirror (annotation `kubernetes.io/config.mirror`, or owned by the Node):
    /// it belongs to the machine, not to the scheduler, and is never evicted.
    Mirror,
    /// Owned by a DaemonSet (owner kind `DaemonSet`, any API group: OpenKruise's Advanced
    /// DaemonSet behaves the same). The replacement runs its own copy; counted in
    /// [`daemonset_overhead`](crate::placeholder::requests::daemonset_overhead) instead.
    DaemonSet,
    /// `deletionTimestamp` set and not owned by a StatefulSet: its controller has already
    /// replaced it. A terminating StatefulSet pod is counted, because its successor is only
    /// created after it is gone (Karpenter's `IsReschedulable` makes the same exception).
    Terminating,
    /// Pinned to specific hosts, so it cannot follow its capacity to a node that does not exist
    /// yet: a `nodeSelector` on `kubernetes.io/hostname`, or a required node affinity whose every
    /// term (terms are ORed) names hosts with `kubernetes.io/hostname In` or
    /// `metadata.name In` (matchFields). A bare `spec.nodeName` is not a pin: every bound pod
    /// has one. Pods bound to a node by a local PersistentVolume are not detected (that needs
    /// the volume objects); they are counted, which over-reserves and is safe.
    Pinned,
    /// Everything else: will be evicted by the drain and rescheduled, so it needs capacity.
    /// Bare pods (no owner) are included, as Karpenter does.
    Reschedulable,
}

/// Classifies one pod on `node_name`. See [`PodClass`] for the rules and their order.
pub(crate) fn classify(pod: &Pod, node_name: &str) -> PodClass {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.node_name.as_deref()) != Some(node_name) {
        return PodClass::OtherNode;
    }
    if is_completed(pod) {
        return PodClass::Completed;
    }
    if is_mirror(pod) {
        return PodClass::Mirror;
    }
    if is_owned_by(pod, "DaemonSet") {
        return PodClass::DaemonSet;
    }
    if pod.metadata.deletion_timestamp.is_some() && !is_owned_by(pod, "StatefulSet") {
        return PodClass::Terminating;
    }
    if spec.is_some_and(is_pinned) {
        return PodClass::Pinned;
    }
    PodClass::Reschedulable
}

pub(super) fn is_completed(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

pub(super) fn is_mirror(pod: &Pod) -> bool {
    pod.annotations().contains_key(MIRROR_POD_ANNOTATION) || is_owned_by(pod, "Node")
}

pub(super) fn is_owned_by(pod: &Pod, kind: &str) -> bool {
    pod.owner_references().iter().any(|o| o.kind == kind)
}

fn is_pinned(spec: &PodSpec) -> bool {
    if spec.node_selector.as_ref().is_some_and(|s| s.contains_key(HOSTNAME_LABEL)) {
        return true;
    }
    let terms = required_node_terms(spec);
    !terms.is_empty() && terms.iter().all(term_pins_host)
}

/// The terms of a pod's required node affinity (ORed by the scheduler); empty when it has none.
pub(crate) fn required_node_terms(spec: &PodSpec) -> &[NodeSelectorTerm] {
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default()
}

fn term_pins_host(term: &NodeSelectorTerm) -> bool {
    let by_label = term
        .match_expressions
        .iter()
        .flatten()
        .any(|r| r.key == HOSTNAME_LABEL && r.operator == "In");
    let by_field =
        term.match_fields.iter().flatten().any(|r| r.key == "metadata.name" && r.operator == "In");
    by_label || by_field
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placeholder::fixtures::*;

    #[test]
    fn each_exclusion_rule() {
        let base = pod("p", "100m", "10Mi");
        let cases: Vec<(Value, PodClass)> = vec![
            (base.clone(), PodClass::Reschedulable),
            (with(base.clone(), "/spec/nodeName", json!("other")), PodClass::OtherNode),
            (with(base.clone(), "/status/phase", json!("Succeeded")), PodClass::Completed),
            (with(base.clone(), "/status/phase", json!("Failed")), PodClass::Completed),
            (with(base.clone(), "/status/phase", json!("Pending")), PodClass::Reschedulable),
            (
                with(
                    base.clone(),
                    "/metadata/annotations",
                    json!({"kubernetes.io/config.mirror": "abc"}),
                ),
                PodClass::Mirror,
            ),
            (owned_by(base.clone(), "Node"), PodClass::Mirror),
            (owned_by(base.clone(), "DaemonSet"), PodClass::DaemonSet),
            (owned_by(base.clone(), "ReplicaSet"), PodClass::Reschedulable),
            (
                with(base.clone(), "/metadata/deletionTimestamp", json!("2026-06-03T01:00:00Z")),
                PodClass::Terminating,
            ),
            (
                owned_by(
                    with(
                        base.clone(),
                        "/metadata/deletionTimestamp",
                        json!("2026-06-03T01:00:00Z"),
                    ),
                    "StatefulSet",
                ),
                PodClass::Reschedulable,
            ),
            (
                with(base.clone(), "/spec/nodeSelector", json!({"kubernetes.io/hostname": NODE})),
                PodClass::Pinned,
            ),
            (
                with(
                    base.clone(),
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}}}),
                ),
                PodClass::Pinned,
            ),
            (
                with(
                    base.clone(),
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}),
                ),
                PodClass::Pinned,
            ),
            // One term could land anywhere in the zone: not pinned.
            (
                with(
                    base.clone(),
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]},
                        {"matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}
                    ]}}}),
                ),
                PodClass::Reschedulable,
            ),
            // NotIn on the hostname is avoidance, not a pin.
            (
                with(
                    base.clone(),
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["x"]}]}]}}}),
                ),
                PodClass::Reschedulable,
            ),
        ];
        for (i, (p, want)) in cases.into_iter().enumerate() {
            assert_eq!(classify(&from(p), NODE), want, "case {i}");
        }
    }
}
