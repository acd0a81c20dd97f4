//! The readyTimeout reap (§3.8): the fallback that finds the surge claim of a rotation whose
//! placeholder never bound, and the guard that decides whether a surge claim may be deleted.
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;

use super::census::{is_completed, is_mirror, is_owned_by};
use crate::karpenter::NodeClaim;

/// The §3.8 fallback of the readyTimeout reap, for a rotation whose placeholder is not bound (or
/// gone) and whose `surge-claim` was never recorded: the claim of `pool` created at or after
/// `started_at` that is not Ready (its `Ready` condition is not True: the node has not
/// registered, or registered and never turned Ready) and not being deleted, if there is exactly
/// one. Several is `None`: an ordinary scale-up raced the surge, and a claim that cannot be
/// attributed is never reaped. A node that never turns Ready never gets the placeholder bound
/// (the scheduler skips it), so without this fallback it would be billed until Karpenter's own
/// repair, far past readyTimeout (§4.4).
///
/// While the placeholder is bound, the induced claim is its host's claim instead, resolved by
/// the reconciler (`Snapshot::induced_claim`) as the `induced_claim` predicate reads it.
pub fn not_ready_surge_claim<'a>(
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    pool: &str,
    started_at: DateTime<Utc>,
) -> Option<&'a NodeClaim> {
    let mut fresh = claims.into_iter().filter(|c| {
        c.node_pool() == Some(pool)
            && c.created().is_some_and(|t| t >= started_at)
            && !c.is_deleting()
            && !c.is_ready()
    });
    match (fresh.next(), fresh.next()) {
        (Some(only), None) => Some(only),
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
    use kube::ResourceExt;

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
    fn not_ready_surge_claim_resolution() {
        let start = t(2, 0);
        let old = surge_claim("general-old", "2026-06-01T00:00:00Z", Some("old"), "general");
        let fresh =
            ready(surge_claim("general-new", "2026-06-03T02:01:00Z", Some("new"), "general"));
        let pending = surge_claim("general-pend", "2026-06-03T02:02:00Z", None, "general");
        let other_pool = surge_claim("other-x", "2026-06-03T02:02:00Z", None, "other");
        let claims = [old.clone(), fresh.clone(), pending.clone(), other_pool.clone()];
        let name = |c: Option<&NodeClaim>| c.map(|c| c.name_any());

        // The only fresh claim of the pool that is not Ready (a fresh Ready claim is an
        // ordinary scale-up that already serves pods; other pools' claims are not ours).
        let got = not_ready_surge_claim(&claims, "general", start);
        assert_eq!(name(got), Some("general-pend".into()));
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
        let got = not_ready_surge_claim([&old, &fresh, &registered], "general", start);
        assert_eq!(name(got), Some("general-pend".into()));
        // Once Ready it is capacity like any other, not attributable by age alone.
        let now_ready = ready(registered);
        assert_eq!(name(not_ready_surge_claim([&old, &now_ready], "general", start)), None);
        // Created before started-at: not ours.
        let early = surge_claim("general-early", "2026-06-03T01:59:00Z", None, "general");
        assert_eq!(name(not_ready_surge_claim([&early], "general", start)), None);
        // Being deleted: not ours to reap.
        let mut going = pending.clone();
        going.metadata.deletion_timestamp = from(json!("2026-06-03T02:05:00Z"));
        assert_eq!(name(not_ready_surge_claim([&going], "general", start)), None);
        // Two candidates: ambiguous, no guess.
        let pending2 = surge_claim("general-pend2", "2026-06-03T02:03:00Z", None, "general");
        assert_eq!(name(not_ready_surge_claim([&pending, &pending2], "general", start)), None);
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
