//! The reap guard (§3.8): whether a surge claim may be deleted. Which claims are surge claims
//! at all is the controller's `launched-for` mark, from Karpenter's nomination of the placeholder
//! (docs/decisions/reap-attribution.md).
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;

use super::census::{is_completed, is_mirror, is_owned_by};
use crate::karpenter::NodeClaim;

/// The readyTimeout reap guard (§3.8): the surge claim may be deleted only if it was
/// created at or after `started_at` (an absorbing host, created before, is never reaped; an
/// unknown creation time is not reaped) AND its node hosts nothing but the placeholder the
/// controller created (`placeholder_uid`, the uid recorded on the claim; a pod that merely
/// carries its name and label is somebody's pod; no recorded uid: no pod is ours) and pods that
/// belong to the node itself: DaemonSet pods, static (mirror) pods, and completed pods, which
/// hold nothing.
pub(crate) fn reap_allowed(
    surge_claim: &NodeClaim,
    started_at: DateTime<Utc>,
    pods_on_host: &[Pod],
    placeholder_uid: Option<&str>,
) -> bool {
    let fresh = surge_claim.created().is_some_and(|t| t >= started_at);
    fresh
        && hosts_nothing_but(pods_on_host, |p| {
            placeholder_uid.is_some() && p.metadata.uid.as_deref() == placeholder_uid
        })
}

/// A node's pods strand nothing if it goes: each is `ours` or belongs to the node itself
/// (DaemonSet, static (mirror) and completed pods).
pub(crate) fn hosts_nothing_but(pods_on_host: &[Pod], ours: impl Fn(&Pod) -> bool) -> bool {
    pods_on_host
        .iter()
        .all(|p| ours(p) || is_owned_by(p, "DaemonSet") || is_mirror(p) || is_completed(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placeholder::fixtures::*;

    fn surge_claim(name: &str, created: &str, node_name: Option<&str>, pool: &str) -> NodeClaim {
        let mut v = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool},
                         "creationTimestamp": created},
            "spec": {},
            "status": {}
        });
        if let Some(n) = node_name {
            v = with(v, "/status/nodeName", json!(n));
            v = with(v, "/status/providerID", json!(format!("aws:///ap-northeast-1a/{n}")));
        }
        from(v)
    }

    #[test]
    fn reap_guard() {
        let start = t(2, 0);
        let name = "noderotation-surge-general-x7k2p";
        let uid = Some("placeholder-uid-1");
        let fresh = surge_claim("general-new", "2026-06-03T02:01:00Z", Some("new"), "general");
        let mut ph = placed("Running", Some("new"));
        ph.metadata.uid = uid.map(str::to_string);
        let ds: Pod = from(owned_by(pod("ds", "100m", "1Mi"), "DaemonSet"));
        let mirror: Pod = from(with(
            pod("static", "100m", "1Mi"),
            "/metadata/annotations",
            json!({"kubernetes.io/config.mirror": "x"}),
        ));
        let done: Pod = from(with(pod("job", "1", "1Mi"), "/status/phase", json!("Succeeded")));
        let workload: Pod = from(pod("web", "1", "1Gi"));
        assert!(reap_allowed(&fresh, start, &[ph.clone(), ds.clone(), mirror, done], uid));
        assert!(reap_allowed(&fresh, start, &[], uid));
        // A workload landed: keep.
        assert!(!reap_allowed(&fresh, start, &[ph.clone(), ds.clone(), workload], uid));
        // Someone else's pod that merely shares the name (no managed-by label): keep.
        let impostor: Pod = from(pod(name, "1", "1Gi"));
        assert!(!reap_allowed(&fresh, start, &[impostor], uid));
        // Name and label too, but not the pod the controller created (another uid): keep.
        let mut lookalike = placed("Running", Some("new"));
        lookalike.metadata.uid = Some("someone-else".into());
        assert!(!reap_allowed(&fresh, start, std::slice::from_ref(&lookalike), uid));
        // No recorded uid: nothing on the node is known to be ours.
        assert!(!reap_allowed(&fresh, start, std::slice::from_ref(&ph), None));
        // An absorbing host (created before started-at) is never reaped, even if empty.
        let absorbing = surge_claim("general-old", "2026-06-03T01:00:00Z", Some("old"), "general");
        assert!(!reap_allowed(&absorbing, start, std::slice::from_ref(&ph), uid));
        // Unknown creation time: not reaped.
        assert!(!reap_allowed(&NodeClaim::default(), start, &[ph], uid));
        // Created exactly at started-at counts as induced.
        let same = surge_claim("general-same", "2026-06-03T02:00:00Z", Some("n"), "general");
        assert!(reap_allowed(&same, start, &[ds], uid));
    }
}
