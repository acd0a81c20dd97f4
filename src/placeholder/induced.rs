//! The induced surge claim and the readyTimeout reap guard (§3.8).
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use super::census::{is_completed, is_mirror, is_owned_by};
use crate::karpenter::NodeClaim;

/// The claim behind a node: the one whose `status.nodeName` is `node_name`, else the one whose
/// `status.providerID` is the Node's `spec.providerID`.
pub fn claim_of_node<'a>(
    node_name: &str,
    node: Option<&Node>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
) -> Option<&'a NodeClaim> {
    let claims: Vec<&NodeClaim> = claims.into_iter().collect();
    let by_name = claims
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name));
    if let Some(c) = by_name {
        return Some(c);
    }
    let provider_id = node.and_then(|n| n.spec.as_ref()).and_then(|s| s.provider_id.as_deref())?;
    claims
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
}

/// How the induced surge claim was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InducedVia {
    /// The claim of the node the placeholder is bound to.
    Placeholder,
    /// §3.8 fallback: the pool's only claim created at or after `started-at` that is not Ready:
    /// its node has not registered, or registered and never turned Ready.
    NotReadyClaim,
}

/// The surge claim a rotation induced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InducedClaim {
    pub name: String,
    pub via: InducedVia,
}

/// Resolves the induced surge claim (§3.8), for the `surge-claim` annotation and the
/// readyTimeout reap. Only claims of `pool` are considered.
///
/// 1. A placeholder bound to a node: that node's claim ([`claim_of_node`]; `host` is the Node
///    of the placeholder's `spec.nodeName`, for the providerID match). If the claim is not
///    found, `None`: a bound placeholder means the surge host is registered, so an
///    unregistered claim would be somebody else's.
/// 2. Otherwise (no placeholder, or not bound yet): the pool's claim created at or after
///    `started_at` that is not Ready (its `Ready` condition is not True: the node has not
///    registered, or registered and never turned Ready), not being deleted, if there is exactly
///    one. Several is `None`: an ordinary scale-up raced the surge, and a claim that cannot be
///    attributed is never reaped. A node that never turns Ready never gets the placeholder
///    bound (the scheduler skips it), so without this fallback it would be billed until
///    Karpenter's own repair, far past readyTimeout (§4.4).
///
/// The result may be an absorbing host (created before `started_at`); [`reap_allowed`] keeps
/// those.
pub fn induced_claim<'a>(
    placeholder: Option<&Pod>,
    host: Option<&Node>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    pool: &str,
    started_at: DateTime<Utc>,
) -> Option<InducedClaim> {
    let pool_claims: Vec<&NodeClaim> =
        claims.into_iter().filter(|c| c.node_pool() == Some(pool)).collect();
    if let Some(bound) =
        placeholder.and_then(|p| p.spec.as_ref()).and_then(|s| s.node_name.as_deref())
    {
        return claim_of_node(bound, host, pool_claims)
            .map(|c| InducedClaim { name: c.name_any(), via: InducedVia::Placeholder });
    }
    let mut fresh = pool_claims.into_iter().filter(|c| {
        c.created().is_some_and(|t| t >= started_at) && !c.is_deleting() && !c.is_ready()
    });
    match (fresh.next(), fresh.next()) {
        (Some(only), None) => {
            Some(InducedClaim { name: only.name_any(), via: InducedVia::NotReadyClaim })
        }
        _ => None,
    }
}

/// The readyTimeout reap guard (§3.8): the surge claim may be deleted only if it was
/// created at or after `started_at` (an absorbing host, created before, is never reaped; an
/// unknown creation time is not reaped) AND its node hosts nothing but the placeholder the
/// controller created (`placeholder_uid`, the uid recorded on the claim; a pod that merely
/// carries its name and label is somebody's pod; no recorded uid: no pod is ours) and pods that
/// belong to the node itself: DaemonSet pods, static (mirror) pods, and completed pods, which
/// hold nothing.
pub fn reap_allowed(
    surge_claim: &NodeClaim,
    started_at: DateTime<Utc>,
    pods_on_host: &[Pod],
    placeholder_uid: Option<&str>,
) -> bool {
    let fresh = surge_claim.created().is_some_and(|t| t >= started_at);
    fresh
        && pods_on_host.iter().all(|p| {
            let ours = placeholder_uid.is_some() && p.metadata.uid.as_deref() == placeholder_uid;
            ours || is_owned_by(p, "DaemonSet") || is_mirror(p) || is_completed(p)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::karpenter;
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

    fn ready(mut claim: NodeClaim) -> NodeClaim {
        if let Some(s) = claim.status.as_mut() {
            s.conditions.push(karpenter::ClaimCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            });
        }
        claim
    }

    #[test]
    fn induced_claim_resolution() {
        let start = t(2, 0);
        let old = surge_claim("general-old", "2026-06-01T00:00:00Z", Some("old"), "general");
        let fresh =
            ready(surge_claim("general-new", "2026-06-03T02:01:00Z", Some("new"), "general"));
        let pending = surge_claim("general-pend", "2026-06-03T02:02:00Z", None, "general");
        let other_pool = surge_claim("other-x", "2026-06-03T02:02:00Z", None, "other");
        let claims = [old.clone(), fresh.clone(), pending.clone(), other_pool.clone()];

        // Bound placeholder: the bind target's claim, by status.nodeName ...
        let bound = placed("Running", Some("new"));
        let got = induced_claim(Some(&bound), None, &claims, "general", start);
        assert_eq!(
            got,
            Some(InducedClaim { name: "general-new".into(), via: InducedVia::Placeholder })
        );
        // ... or by providerID when the claim does not name the node yet.
        let mut no_name = fresh.clone();
        if let Some(s) = no_name.status.as_mut() {
            s.node_name = None;
        }
        let h = host("new", "general", "True");
        let got = induced_claim(Some(&bound), Some(&h), [&old, &no_name], "general", start);
        assert_eq!(got.map(|c| c.name), Some("general-new".into()));
        // An absorbing host resolves too (the reap guard keeps it).
        let absorbed = placed("Running", Some("old"));
        let got = induced_claim(Some(&absorbed), None, &claims, "general", start);
        assert_eq!(got.map(|c| c.name), Some("general-old".into()));
        // Bound to a node whose claim is not visible: no guess.
        let lost = placed("Running", Some("ghost"));
        assert_eq!(induced_claim(Some(&lost), None, &claims, "general", start), None);

        // Fallback: no placeholder (or unbound): the only fresh claim of the pool that is not
        // Ready (a fresh Ready claim is an ordinary scale-up that already serves pods).
        let got = induced_claim(None, None, &claims, "general", start);
        assert_eq!(
            got,
            Some(InducedClaim { name: "general-pend".into(), via: InducedVia::NotReadyClaim })
        );
        let unbound = placed("Pending", None);
        let got = induced_claim(Some(&unbound), None, &claims, "general", start);
        assert_eq!(got.map(|c| c.name), Some("general-pend".into()));
        // Registered with a node that never turned Ready: still the surge's claim (the
        // scheduler never binds the placeholder there, so only this fallback finds it).
        let mut registered = pending.clone();
        if let Some(s) = registered.status.as_mut() {
            s.node_name = Some("never-ready".into());
            s.conditions.push(karpenter::ClaimCondition {
                type_: "Registered".into(),
                status: "True".into(),
                ..Default::default()
            });
        }
        let got = induced_claim(None, None, [&old, &fresh, &registered], "general", start);
        assert_eq!(got.map(|c| c.name), Some("general-pend".into()));
        // Once Ready it is capacity like any other, not attributable by age alone.
        assert_eq!(induced_claim(None, None, [&old, &ready(registered)], "general", start), None);
        // Created before started-at: not ours.
        let early = surge_claim("general-early", "2026-06-03T01:59:00Z", None, "general");
        assert_eq!(induced_claim(None, None, [&early], "general", start), None);
        // Two candidates: ambiguous, no guess.
        let pending2 = surge_claim("general-pend2", "2026-06-03T02:03:00Z", None, "general");
        assert_eq!(induced_claim(None, None, [&pending, &pending2], "general", start), None);
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
