//! The placeholder's node affinity from `matchNodeRequirements` (§3.7), and the tolerations of
//! the pool template's taints.
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorTerm, PreferredSchedulingTerm,
    Toleration,
};
use kube::ResourceExt;

use super::census::HOSTNAME_LABEL;
use crate::karpenter::{NODEPOOL_LABEL, NodeClaim, NodePool, NodeSelectorRequirement};
use crate::policy::settings::NodeRequirementKeys;

/// Weight of each preferred `matchNodeRequirements` term (all keys weigh the same).
pub(crate) const PREFERRED_KEY_WEIGHT: i32 = 50;

/// How one `matchNodeRequirements` key was turned into a placeholder requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyResolution {
    /// From the candidate node's label, admitted by the pool template.
    NodeLabel,
    /// From the claim's `spec.requirements` (`In` values intersected with the pool template, or
    /// `Gt`/`Lt` carried over exactly).
    ClaimRequirement,
    /// Neither the node nor the claim has it: skipped, never guessed.
    Absent,
    /// Karpenter rejects pods that name this label (a restricted label domain): skipped, since
    /// naming it would stop Karpenter from provisioning for the placeholder at all.
    RestrictedByKarpenter,
    /// The source values are not admitted by the pool template's requirements for the key. The
    /// source values are required anyway (never loosened), so the placeholder cannot schedule.
    Unsatisfiable,
}

/// One key of `matchNodeRequirements`, as resolved for this placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyReport {
    pub key: String,
    /// From `required` (else `preferred`).
    pub required: bool,
    pub resolution: KeyResolution,
}

type K8sRequirement = k8s_openapi::api::core::v1::NodeSelectorRequirement;

/// The placeholder's node affinity (§3.7): every `matchNodeRequirements` key resolved by
/// [`resolve_key`], the `required` keys ANDed in one required term, each `preferred` key a term
/// of its own weighing [`PREFERRED_KEY_WEIGHT`]; `None` when no key yields a requirement. With
/// it, every key (required first, then preferred) and how it resolved.
pub(super) fn node_affinity(
    mnr: &NodeRequirementKeys,
    node: Option<&Node>,
    claim: &NodeClaim,
    pool: &NodePool,
) -> (Option<Affinity>, Vec<KeyReport>) {
    let mut keys = Vec::new();
    let mut required = Vec::new();
    let mut preferred = Vec::new();
    for (list, is_required) in [(&mnr.required, true), (&mnr.preferred, false)] {
        for key in list {
            let (reqs, resolution) = resolve_key(key, node, claim, pool);
            keys.push(KeyReport { key: key.clone(), required: is_required, resolution });
            if reqs.is_empty() {
                continue;
            }
            if is_required {
                required.extend(reqs);
            } else {
                preferred.push(PreferredSchedulingTerm {
                    weight: PREFERRED_KEY_WEIGHT,
                    preference: NodeSelectorTerm {
                        match_expressions: Some(reqs),
                        match_fields: None,
                    },
                });
            }
        }
    }
    let affinity = (!required.is_empty() || !preferred.is_empty()).then(|| Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: (!required.is_empty()).then(
                || NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(required),
                        match_fields: None,
                    }],
                },
            ),
            preferred_during_scheduling_ignored_during_execution: (!preferred.is_empty())
                .then_some(preferred),
        }),
        ..Affinity::default()
    });
    (affinity, keys)
}

/// Resolves one key: the node label (authoritative), else the claim's `In` values, intersected
/// with what the pool template admits; else the claim's `Gt`/`Lt` carried over exactly.
fn resolve_key(
    key: &str,
    node: Option<&Node>,
    claim: &NodeClaim,
    pool: &NodePool,
) -> (Vec<K8sRequirement>, KeyResolution) {
    if karpenter_rejects_label(key) {
        return (Vec::new(), KeyResolution::RestrictedByKarpenter);
    }
    let pool_reqs: Vec<&NodeSelectorRequirement> =
        pool.spec.template.spec.requirements.iter().filter(|r| r.key == key).collect();
    let claim_reqs: Vec<&NodeSelectorRequirement> =
        claim.spec.requirements.iter().filter(|r| r.key == key).collect();

    let (values, source) = if let Some(v) = node.and_then(|n| n.labels().get(key)) {
        (vec![v.clone()], KeyResolution::NodeLabel)
    } else {
        let mut values: Option<Vec<String>> = None;
        for r in claim_reqs.iter().filter(|r| r.operator == "In" && !r.values.is_empty()) {
            values = Some(match values {
                None => r.values.clone(),
                Some(acc) => acc.into_iter().filter(|v| r.values.contains(v)).collect(),
            });
        }
        match values {
            Some(values) => (values, KeyResolution::ClaimRequirement),
            None => {
                let numeric: Vec<K8sRequirement> = claim_reqs
                    .iter()
                    .filter(|r| r.operator == "Gt" || r.operator == "Lt")
                    .map(|r| requirement(key, &r.operator, r.values.clone()))
                    .collect();
                if numeric.is_empty() {
                    return (Vec::new(), KeyResolution::Absent);
                }
                return (numeric, KeyResolution::ClaimRequirement);
            }
        }
    };
    let admitted: Vec<String> =
        values.iter().filter(|v| pool_reqs.iter().all(|r| admits(r, v))).cloned().collect();
    if admitted.is_empty() {
        (vec![requirement(key, "In", dedup(values))], KeyResolution::Unsatisfiable)
    } else {
        (vec![requirement(key, "In", dedup(admitted))], source)
    }
}

fn dedup(values: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    values.into_iter().filter(|v| seen.insert(v.clone())).collect()
}

fn requirement(key: &str, operator: &str, values: Vec<String>) -> K8sRequirement {
    K8sRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: if values.is_empty() { None } else { Some(values) },
    }
}

/// Whether a pool template requirement admits a node label value (node-selector semantics;
/// `Gt`/`Lt` compare integers, a non-integer never matches). An unknown operator admits.
fn admits(req: &NodeSelectorRequirement, value: &str) -> bool {
    let bound = || req.values.first().and_then(|b| b.parse::<i64>().ok());
    match req.operator.as_str() {
        "In" => req.values.iter().any(|v| v == value),
        "NotIn" => !req.values.iter().any(|v| v == value),
        "Exists" => true,
        "DoesNotExist" => false,
        "Gt" => matches!((value.parse::<i64>().ok(), bound()), (Some(v), Some(b)) if v > b),
        "Lt" => matches!((value.parse::<i64>().ok(), bound()), (Some(v), Some(b)) if v < b),
        _ => true,
    }
}

/// Whether Karpenter refuses to provision for a pod whose node selector or node affinity
/// (required or preferred) names `key`: mirrors `IsRestrictedLabel` of karpenter.sh/v1
/// (aliases normalized; well-known labels allowed; the `kubernetes.io`, `k8s.io` and
/// `karpenter.sh` domains restricted except `node.kubernetes.io`,
/// `node-restriction.kubernetes.io` and `kops.k8s.io`; `kubernetes.io/hostname` restricted).
pub(crate) fn karpenter_rejects_label(key: &str) -> bool {
    let key = match key {
        "failure-domain.beta.kubernetes.io/zone" => "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region" => "topology.kubernetes.io/region",
        "beta.kubernetes.io/arch" => "kubernetes.io/arch",
        "beta.kubernetes.io/os" => "kubernetes.io/os",
        "beta.kubernetes.io/instance-type" => "node.kubernetes.io/instance-type",
        other => other,
    };
    const WELL_KNOWN: [&str; 8] = [
        NODEPOOL_LABEL,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        "node.kubernetes.io/windows-build",
    ];
    if WELL_KNOWN.contains(&key) {
        return false;
    }
    let domain = key.split_once('/').map_or("", |(d, _)| d);
    if ["kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"]
        .iter()
        .any(|e| domain.ends_with(e))
    {
        return false;
    }
    ["kubernetes.io", "k8s.io", "karpenter.sh"].iter().any(|r| domain.ends_with(r))
        || key == HOSTNAME_LABEL
}

/// Tolerations for the pool template's taints: `Equal` with the value, or `Exists` when the
/// taint has none. Startup taints need no toleration (Karpenter's contract), and the placeholder
/// deliberately tolerates nothing else (not `karpenter.sh/disrupted`, not the cordon).
pub(crate) fn pool_tolerations(pool: &NodePool) -> Vec<Toleration> {
    pool.spec
        .template
        .spec
        .taints
        .iter()
        .map(|t| {
            let value = t.value.clone().filter(|v| !v.is_empty());
            Toleration {
                key: Some(t.key.clone()),
                operator: Some(if value.is_some() { "Equal" } else { "Exists" }.to_string()),
                value,
                effect: Some(t.effect.clone()),
                toleration_seconds: None,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The placeholder

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::placeholder::fixtures::*;

    #[test]
    fn tolerations_come_from_the_pool_taints() {
        let tol = pool_tolerations(&pool());
        let s = |v: &str| Some(v.to_string());
        let want = [
            Toleration {
                key: s("dedicated"),
                operator: s("Equal"),
                value: s("api"),
                effect: s("NoSchedule"),
                toleration_seconds: None,
            },
            Toleration {
                key: s("gpu"),
                operator: s("Exists"),
                value: None,
                effect: s("NoExecute"),
                toleration_seconds: None,
            },
        ];
        assert_eq!(tol, want);
        let mut bare = pool();
        bare.spec.template.spec.taints.clear();
        let (c, pods) = (claim(), vec![from::<Pod>(pod("a", "1", "1Gi"))]);
        let ph = built(build(&bare, &c, None, &pods, &settings(false, &[], &[])));
        assert!(ph.pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()).is_none());
    }

    #[test]
    fn node_label_wins_and_is_checked_against_the_pool() {
        let (p, c) = (pool(), claim());
        let n = node(json!({"topology.kubernetes.io/zone": "ap-northeast-1a",
                            "kubernetes.io/arch": "arm64",
                            "karpenter.sh/capacity-type": "on-demand"}));
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s = settings(
            false,
            &["topology.kubernetes.io/zone", "kubernetes.io/arch", "karpenter.sh/capacity-type"],
            &[],
        );
        let ph = built(build(&p, &c, Some(&n), &pods, &s));
        let v = |x: &str| vec![x.to_string()];
        assert_eq!(
            required_exprs(&ph),
            [
                ("topology.kubernetes.io/zone".into(), "In".into(), v("ap-northeast-1a")),
                ("kubernetes.io/arch".into(), "In".into(), v("arm64")),
                ("karpenter.sh/capacity-type".into(), "In".into(), v("on-demand")),
            ]
        );
        assert!(ph.keys.iter().all(|k| k.resolution == KeyResolution::NodeLabel && k.required));
    }

    #[test]
    fn claim_values_are_intersected_with_the_pool_and_absent_keys_skipped() {
        let (p, c) = (pool(), claim());
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s = settings(
            false,
            &["topology.kubernetes.io/zone", "karpenter.sh/capacity-type"],
            &["kubernetes.io/arch"],
        );
        // No node: values from the claim. zone In [1a, 1b] ∩ pool In [1a, 1c] = [1a].
        let ph = built(build(&p, &c, None, &pods, &s));
        assert_eq!(
            required_exprs(&ph),
            [("topology.kubernetes.io/zone".into(), "In".into(), vec!["ap-northeast-1a".into()])]
        );
        let pref = affinity_of(&ph)
            .preferred_during_scheduling_ignored_during_execution
            .unwrap_or_default();
        assert_eq!(pref.len(), 1);
        assert_eq!(pref[0].weight, PREFERRED_KEY_WEIGHT);
        let expr = &pref[0].preference.match_expressions.clone().unwrap_or_default()[0];
        assert_eq!(expr.key, "kubernetes.io/arch");
        assert_eq!(expr.values, Some(vec!["amd64".into(), "arm64".into()]));
        let res: Vec<(&str, &KeyResolution)> =
            ph.keys.iter().map(|k| (k.key.as_str(), &k.resolution)).collect();
        assert_eq!(
            res,
            [
                ("topology.kubernetes.io/zone", &KeyResolution::ClaimRequirement),
                ("karpenter.sh/capacity-type", &KeyResolution::Absent),
                ("kubernetes.io/arch", &KeyResolution::ClaimRequirement),
            ]
        );
    }

    #[test]
    fn gt_lt_are_carried_exactly_and_pool_gt_filters_labels() {
        let (p, c) = (pool(), claim());
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s = settings(false, &["karpenter.k8s.aws/instance-memory"], &[]);
        let ph = built(build(&p, &c, None, &pods, &s));
        assert_eq!(
            required_exprs(&ph),
            [
                ("karpenter.k8s.aws/instance-memory".into(), "Gt".into(), vec!["8191".into()]),
                ("karpenter.k8s.aws/instance-memory".into(), "Lt".into(), vec!["65537".into()]),
            ]
        );
        // A node label checked against the pool's `instance-cpu Gt 3`.
        let s = settings(false, &["karpenter.k8s.aws/instance-cpu"], &[]);
        let n4 = node(json!({"karpenter.k8s.aws/instance-cpu": "4"}));
        let ph = built(build(&p, &c, Some(&n4), &pods, &s));
        assert_eq!(ph.keys[0].resolution, KeyResolution::NodeLabel);
        let n2 = node(json!({"karpenter.k8s.aws/instance-cpu": "2"}));
        let ph = built(build(&p, &c, Some(&n2), &pods, &s));
        assert_eq!(ph.keys[0].resolution, KeyResolution::Unsatisfiable);
        assert_eq!(
            required_exprs(&ph),
            [("karpenter.k8s.aws/instance-cpu".into(), "In".into(), vec!["2".into()])]
        );
    }

    #[test]
    fn a_value_the_pool_no_longer_admits_is_kept_not_loosened() {
        let (p, c) = (pool(), claim());
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s =
            settings(false, &["topology.kubernetes.io/zone", "karpenter.sh/capacity-type"], &[]);
        let n = node(json!({"topology.kubernetes.io/zone": "ap-northeast-1d",
                            "karpenter.sh/capacity-type": "spot"}));
        let ph = built(build(&p, &c, Some(&n), &pods, &s));
        assert_eq!(
            required_exprs(&ph),
            [
                ("topology.kubernetes.io/zone".into(), "In".into(), vec!["ap-northeast-1d".into()]),
                ("karpenter.sh/capacity-type".into(), "In".into(), vec!["spot".into()]),
            ]
        );
        assert!(ph.keys.iter().all(|k| k.resolution == KeyResolution::Unsatisfiable));
    }

    #[test]
    fn keys_karpenter_rejects_are_skipped() {
        assert!(karpenter_rejects_label("kubernetes.io/hostname"));
        assert!(karpenter_rejects_label("k8s.io/something"));
        assert!(karpenter_rejects_label("karpenter.sh/registered"));
        assert!(!karpenter_rejects_label("topology.kubernetes.io/zone"));
        assert!(!karpenter_rejects_label("failure-domain.beta.kubernetes.io/zone"));
        assert!(!karpenter_rejects_label("node.kubernetes.io/instance-type"));
        assert!(!karpenter_rejects_label("karpenter.sh/capacity-type"));
        assert!(!karpenter_rejects_label("karpenter.k8s.aws/instance-family"));
        assert!(!karpenter_rejects_label("team"));
        let (p, c) = (pool(), claim());
        let n = node(json!({"kubernetes.io/hostname": NODE}));
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s = settings(false, &[], &["kubernetes.io/hostname"]);
        let ph = built(build(&p, &c, Some(&n), &pods, &s));
        assert_eq!(ph.keys[0].resolution, KeyResolution::RestrictedByKarpenter);
        assert!(ph.pod.spec.as_ref().and_then(|s| s.affinity.as_ref()).is_none());
    }
}
