//! After creation (§3.3): `surge_ready`, the surge path (provisioned or absorbed), and the
//! scheduler's explanation while the placeholder cannot be placed.
use std::fmt;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use crate::karpenter::{NODEPOOL_LABEL, node_ready};

/// The placeholder is `Running` and not terminating: the edge that wakes its pool (§5.2) and
/// the first condition of [`surge_ready`].
pub(crate) fn running(placeholder: &Pod) -> bool {
    placeholder.metadata.deletion_timestamp.is_none()
        && placeholder.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// §3.3 `surge_ready`: the placeholder is `Running`, not terminating, and bound to
/// `host`, a Ready node that is not being deleted, is not the candidate's node, and whose
/// `karpenter.sh/nodepool` label is `pool`. `host` must be the Node named by the placeholder's
/// `spec.nodeName` (a mismatched or missing host is not ready).
pub(crate) fn surge_ready(
    placeholder: &Pod,
    host: Option<&Node>,
    candidate_node: Option<&str>,
    pool: &str,
) -> bool {
    let Some(bound) = placeholder.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
        return false;
    };
    let Some(host) = host else { return false };
    running(placeholder)
        && host.metadata.name.as_deref() == Some(bound)
        && candidate_node != Some(bound)
        && host_usable(host, pool)
}

/// A node that can hold surge capacity for a rotation of `pool`: Ready, not being deleted, and
/// labelled `karpenter.sh/nodepool: <pool>`. What [`surge_ready`] asks of the placeholder's host,
/// and what a draining rotation asks of its recorded host before it re-issues its delete.
pub(crate) fn host_usable(host: &Node, pool: &str) -> bool {
    host.metadata.deletion_timestamp.is_none()
        && host.labels().get(NODEPOOL_LABEL).map(String::as_str) == Some(pool)
        && node_ready(host)
}

/// How the surge capacity came about (§3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SurgePath {
    /// Karpenter provisioned a new node for the placeholder.
    Provisioned,
    /// The scheduler packed the placeholder onto spare capacity that already existed.
    Absorbed,
}

impl SurgePath {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SurgePath::Provisioned => "provisioned",
            SurgePath::Absorbed => "absorbed",
        }
    }
}

impl fmt::Display for SurgePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `provisioned` when the host's claim was created at or after the rotation's `started-at`,
/// `absorbed` when before, `None` when the host claim (or its creation time) is unknown.
pub(crate) fn surge_path(
    host_claim_created: Option<DateTime<Utc>>,
    started_at: DateTime<Utc>,
) -> Option<SurgePath> {
    host_claim_created.map(|created| {
        if created >= started_at { SurgePath::Provisioned } else { SurgePath::Absorbed }
    })
}

/// The scheduler's explanation while the placeholder cannot be placed: from a `PodScheduled`
/// condition with status `False`, `"<reason>: <message>"` (either part alone when the other is
/// empty). `None` when the pod is scheduled or the scheduler has not reported yet. The text is
/// the detail for the deduplicated `SurgeUnschedulable` event.
pub(crate) fn unschedulable_reason(placeholder: &Pod) -> Option<String> {
    let cond = placeholder
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    let reason = cond.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    let message = cond.message.as_deref().map(str::trim).filter(|m| !m.is_empty());
    Some(match (reason, message) {
        (Some(r), Some(m)) => format!("{r}: {m}"),
        (Some(r), None) => r.to_string(),
        (None, Some(m)) => m.to_string(),
        (None, None) => "Unschedulable".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placeholder::fixtures::*;

    #[test]
    fn surge_ready_cases() {
        let h = host("new", "general", "True");
        let ok = placed("Running", Some("new"));
        assert!(surge_ready(&ok, Some(&h), Some(NODE), "general"));
        assert!(surge_ready(&ok, Some(&h), None, "general"));
        // Not running yet.
        assert!(!surge_ready(&placed("Pending", Some("new")), Some(&h), Some(NODE), "general"));
        // Unbound, or host unknown / mismatched.
        assert!(!surge_ready(&placed("Running", None), Some(&h), Some(NODE), "general"));
        assert!(!surge_ready(&ok, None, Some(NODE), "general"));
        assert!(!surge_ready(&ok, Some(&host("other", "general", "True")), Some(NODE), "general"));
        // Terminating placeholder.
        let mut dying = ok.clone();
        dying.metadata.deletion_timestamp = from(json!("2026-06-03T01:00:00Z"));
        assert!(!surge_ready(&dying, Some(&h), Some(NODE), "general"));
        // Host not Ready, other pool, or the candidate itself.
        assert!(!surge_ready(&ok, Some(&host("new", "general", "False")), Some(NODE), "general"));
        assert!(!surge_ready(&ok, Some(&host("new", "other", "True")), Some(NODE), "general"));
        assert!(!surge_ready(&ok, Some(&h), Some("new"), "general"));
        // Host being deleted.
        let mut going = h.clone();
        going.metadata.deletion_timestamp = from(json!("2026-06-03T01:00:00Z"));
        assert!(!surge_ready(&ok, Some(&going), Some(NODE), "general"));
    }

    #[test]
    fn surge_path_by_host_claim_age() {
        let start = t(2, 0);
        assert_eq!(surge_path(Some(t(2, 3)), start), Some(SurgePath::Provisioned));
        assert_eq!(surge_path(Some(start), start), Some(SurgePath::Provisioned));
        assert_eq!(surge_path(Some(t(1, 59)), start), Some(SurgePath::Absorbed));
        assert_eq!(surge_path(None, start), None);
        assert_eq!(SurgePath::Provisioned.as_str(), "provisioned");
        assert_eq!(SurgePath::Absorbed.to_string(), "absorbed");
    }

    #[test]
    fn unschedulable_reason_from_pod_scheduled_false() {
        let mut p = placed("Pending", None);
        assert_eq!(unschedulable_reason(&p), None);
        p.status = Some(from(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/5 nodes are available: 5 Insufficient cpu."}]})));
        assert_eq!(
            unschedulable_reason(&p).as_deref(),
            Some("Unschedulable: 0/5 nodes are available: 5 Insufficient cpu.")
        );
        p.status = Some(from(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})));
        assert_eq!(unschedulable_reason(&p).as_deref(), Some("SchedulingGated"));
        p.status = Some(from(json!({"phase": "Running", "conditions": [{
            "type": "PodScheduled", "status": "True"}]})));
        assert_eq!(unschedulable_reason(&p), None);
    }
}
