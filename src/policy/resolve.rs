//! Which policy governs a NodePool (spec §5.4 "Targeting and conflicts"), and the status view of
//! a policy.
//!
//! Specificity = matchLabels entries + matchExpressions entries. Among the policies whose
//! selector matches a pool's labels, the most specific governs; several at the top specificity
//! are a conflict (that pool is not rotated); none is "ungoverned" (no implicit default; a
//! catch-all `{}` selector has specificity 0 and loses to any keyed selector).
//!
//! An `Invalid` policy still takes part: if it is the most specific match, it governs the pool and
//! the pool does not rotate. Excluding it would silently hand the pool to a broader policy the
//! moment someone mistypes a duration (`docs/decisions/policy-resolution.md`). A selector that
//! cannot be evaluated (bad operator) matches nothing.
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::jiff::Timestamp;

use super::crd::RotationPolicyStatus;
use super::invalid::InvalidPolicy;
use super::selector::{selector_matches, specificity};

/// The condition type of the status view.
pub(crate) const READY: &str = "Ready";
/// `Ready` reasons (spec §5.4).
pub(crate) const ACCEPTED: &str = "Accepted";
pub(crate) const INVALID: &str = "Invalid";
pub(crate) const CONFLICT: &str = "Conflict";

/// A policy's name and selector, as resolution sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PolicySelector<'a> {
    pub name: &'a str,
    pub selector: &'a LabelSelector,
}

/// The outcome of resolution for one NodePool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Governance {
    /// Exactly one most specific policy.
    Governed { policy: String, specificity: usize },
    /// Several policies tie at the top specificity (sorted by name): hard error for the pool,
    /// `PolicyConflict` Event, `noderotation_policy_conflict{nodepool} = 1`.
    Conflict { policies: Vec<String>, specificity: usize },
    /// No policy matches: the pool is left alone.
    Ungoverned,
}

impl Governance {
    /// The governing policy's name, if exactly one.
    pub(crate) fn policy(&self) -> Option<&str> {
        match self {
            Governance::Governed { policy, .. } => Some(policy),
            _ => None,
        }
    }
}

/// Resolves the governing policy of a pool with `labels` (most specific wins, ties conflict).
pub(crate) fn resolve(
    policies: &[PolicySelector<'_>],
    labels: &BTreeMap<String, String>,
) -> Governance {
    let matching: Vec<(usize, &str)> = policies
        .iter()
        .filter(|p| selector_matches(p.selector, labels) == Some(true))
        .map(|p| (specificity(p.selector), p.name))
        .collect();
    let Some(top) = matching.iter().map(|(s, _)| *s).max() else {
        return Governance::Ungoverned;
    };
    let mut winners: Vec<String> =
        matching.iter().filter(|(s, _)| *s == top).map(|(_, n)| n.to_string()).collect();
    winners.sort();
    winners.dedup();
    match winners.len() {
        1 => Governance::Governed { policy: winners.remove(0), specificity: top },
        _ => Governance::Conflict { policies: winners, specificity: top },
    }
}

/// One NodePool as the status view of a policy sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolView<'a> {
    pub name: &'a str,
    pub governance: &'a Governance,
    /// A rotation is anchored on the pool.
    pub anchored: bool,
}

/// Inputs of [`desired_status`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatusInputs<'a> {
    pub policy: &'a str,
    /// `metadata.generation` of the policy that was evaluated.
    pub generation: Option<i64>,
    /// The reconcile-time validation result.
    pub invalid: Option<&'a InvalidPolicy>,
    /// Every NodePool, resolved against every policy.
    pub pools: &'a [PoolView<'a>],
    /// The current status, to keep `lastTransitionTime` when `Ready`'s status did not change.
    pub previous: Option<&'a RotationPolicyStatus>,
    pub now: DateTime<Utc>,
}

/// Names listed in a conflict message before the rest is counted.
pub(crate) const LISTED_POLICIES: usize = 3;
/// Conflicting NodePools listed in a policy's `Ready` message before the rest is counted.
pub(crate) const LISTED_POOLS: usize = 5;

/// `a, b, c and 7 more`: at most `max` of `names` (which holds `total`), the rest counted, so a
/// message stays short however many policies tie.
pub(crate) fn capped_list<'a>(
    names: impl Iterator<Item = &'a str>,
    total: usize,
    max: usize,
) -> String {
    let shown: Vec<&str> = names.take(max).collect();
    let rest = total.saturating_sub(shown.len());
    match rest {
        0 => shown.join(", "),
        _ => format!("{} and {rest} more", shown.join(", ")),
    }
}

/// Whether `policy` is one of a conflict's tied policies (sorted by name, as [`resolve`]
/// returns them).
pub(crate) fn ties_in(policies: &[String], policy: &str) -> bool {
    policies.binary_search_by(|n| n.as_str().cmp(policy)).is_ok()
}

/// The pools whose status a policy's view depends on: those it governs and those where it
/// ties, grouped by policy in one pass over every pool's resolution (linear in pools × tied
/// policies, instead of every policy scanning every pool).
pub(crate) fn pools_by_policy<'a>(pools: &[PoolView<'a>]) -> BTreeMap<&'a str, Vec<PoolView<'a>>> {
    let mut out: BTreeMap<&'a str, Vec<PoolView<'a>>> = BTreeMap::new();
    for p in pools {
        match p.governance {
            Governance::Governed { policy, .. } => out.entry(policy.as_str()).or_default().push(*p),
            Governance::Conflict { policies, .. } => {
                for name in policies {
                    out.entry(name.as_str()).or_default().push(*p);
                }
            }
            Governance::Ungoverned => {}
        }
    }
    out
}

/// The status the policy should have: `matchedNodePools` (pools it governs),
/// `rotatingNodePools` (of those, anchored), `Ready` (Accepted / Invalid / Conflict, Invalid
/// wins), `observedGeneration`. `pools` may hold every pool or only this policy's share of
/// [`pools_by_policy`]; the work is linear in it, and the messages list a bounded number of
/// names.
pub(crate) fn desired_status(input: &StatusInputs<'_>) -> RotationPolicyStatus {
    let mut pools: Vec<&PoolView<'_>> = input.pools.iter().collect();
    pools.sort_by_key(|p| p.name);
    let governed: Vec<&&PoolView<'_>> =
        pools.iter().filter(|p| p.governance.policy() == Some(input.policy)).collect();
    let matched = governed.len();
    let rotating = governed.iter().filter(|p| p.anchored).count();
    let conflicting: Vec<(&str, &[String], usize)> = pools
        .iter()
        .filter_map(|p| match p.governance {
            Governance::Conflict { policies, specificity } if ties_in(policies, input.policy) => {
                Some((p.name, policies.as_slice(), *specificity))
            }
            _ => None,
        })
        .collect();
    let conflicts: Vec<String> = conflicting
        .iter()
        .take(LISTED_POOLS)
        .map(|(pool, policies, specificity)| {
            let others = policies.iter().map(String::as_str).filter(|n| *n != input.policy);
            format!(
                "NodePool {pool} (ties with {} at specificity {specificity})",
                capped_list(others, policies.len().saturating_sub(1), LISTED_POLICIES)
            )
        })
        .collect();

    let (status, reason, message) = match (input.invalid, conflicts.is_empty()) {
        (Some(invalid), _) => ("False", INVALID, invalid.to_string()),
        (None, false) => (
            "False",
            CONFLICT,
            format!(
                "equally specific policies select the same NodePool, which is not rotated: {}{}",
                conflicts.join("; "),
                match conflicting.len().saturating_sub(LISTED_POOLS) {
                    0 => String::new(),
                    more => format!("; and {more} more NodePools"),
                }
            ),
        ),
        (None, true) => ("True", ACCEPTED, format!("governs {matched} NodePool(s)")),
    };
    let previous_ready =
        input.previous.and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
    let last_transition_time = match previous_ready {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => to_time(input.now),
    };
    let mut conditions: Vec<Condition> = input
        .previous
        .map(|s| s.conditions.iter().filter(|c| c.type_ != READY).cloned().collect())
        .unwrap_or_default();
    conditions.insert(
        0,
        Condition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            last_transition_time,
            observed_generation: input.generation,
        },
    );
    RotationPolicyStatus {
        observed_generation: input.generation,
        matched_node_pools: i32::try_from(matched).unwrap_or(i32::MAX),
        rotating_node_pools: i32::try_from(rotating).unwrap_or(i32::MAX),
        conditions,
        // The per-pool view is the controller's to add (it reads the pools' claims).
        ..RotationPolicyStatus::default()
    }
}

/// chrono -> `metav1.Time`.
pub fn to_time(t: DateTime<Utc>) -> Time {
    let nanos = i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0);
    Time(Timestamp::new(t.timestamp(), nanos).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::invalid::FieldError;
    use chrono::TimeZone;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sel(match_labels: &[(&str, &str)], exprs: &[(&str, &str, &[&str])]) -> LabelSelector {
        LabelSelector {
            match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
            match_expressions: (!exprs.is_empty()).then(|| {
                exprs
                    .iter()
                    .map(|(k, op, vs)| LabelSelectorRequirement {
                        key: k.to_string(),
                        operator: op.to_string(),
                        values: (!vs.is_empty())
                            .then(|| vs.iter().map(|v| v.to_string()).collect()),
                    })
                    .collect()
            }),
        }
    }

    #[test]
    fn matching_semantics() {
        let pool = labels(&[("workload", "api"), ("tier", "gold")]);
        assert_eq!(selector_matches(&sel(&[], &[]), &pool), Some(true));
        assert_eq!(selector_matches(&sel(&[("workload", "api")], &[]), &pool), Some(true));
        assert_eq!(selector_matches(&sel(&[("workload", "web")], &[]), &pool), Some(false));
        assert_eq!(
            selector_matches(&sel(&[], &[("tier", "In", &["gold", "silver"])]), &pool),
            Some(true)
        );
        assert_eq!(
            selector_matches(&sel(&[], &[("tier", "NotIn", &["gold"])]), &pool),
            Some(false)
        );
        assert_eq!(selector_matches(&sel(&[], &[("zone", "NotIn", &["a"])]), &pool), Some(true));
        assert_eq!(selector_matches(&sel(&[], &[("tier", "Exists", &[])]), &pool), Some(true));
        assert_eq!(
            selector_matches(&sel(&[], &[("tier", "DoesNotExist", &[])]), &pool),
            Some(false)
        );
        assert_eq!(selector_matches(&sel(&[], &[("tier", "Equals", &["gold"])]), &pool), None);
        assert_eq!(selector_matches(&sel(&[], &[("tier", "In", &[])]), &pool), None);
        assert_eq!(selector_matches(&sel(&[], &[("tier", "Exists", &["x"])]), &pool), None);
    }

    #[test]
    fn specificity_counts_entries() {
        assert_eq!(specificity(&sel(&[], &[])), 0);
        assert_eq!(specificity(&sel(&[("a", "1"), ("b", "2")], &[("c", "Exists", &[])])), 3);
    }

    #[test]
    fn most_specific_wins_and_catch_all_loses() {
        let all = sel(&[], &[]);
        let api = sel(&[("workload", "api")], &[]);
        let api_gold = sel(&[("workload", "api")], &[("tier", "In", &["gold"])]);
        let policies = [
            PolicySelector { name: "catch-all", selector: &all },
            PolicySelector { name: "api", selector: &api },
            PolicySelector { name: "api-gold", selector: &api_gold },
        ];
        let gov = |pairs: &[(&str, &str)]| resolve(&policies, &labels(pairs));
        assert_eq!(
            gov(&[("workload", "api"), ("tier", "gold")]),
            Governance::Governed { policy: "api-gold".into(), specificity: 2 }
        );
        assert_eq!(
            gov(&[("workload", "api")]),
            Governance::Governed { policy: "api".into(), specificity: 1 }
        );
        assert_eq!(
            gov(&[("workload", "batch")]),
            Governance::Governed { policy: "catch-all".into(), specificity: 0 }
        );
        assert_eq!(
            resolve(&policies[1..], &labels(&[("workload", "batch")])),
            Governance::Ungoverned
        );
        assert_eq!(resolve(&[], &labels(&[])), Governance::Ungoverned);
    }

    #[test]
    fn ties_conflict() {
        let a = sel(&[("workload", "api")], &[]);
        let b = sel(&[], &[("tier", "Exists", &[])]);
        let all1 = sel(&[], &[]);
        let all2 = sel(&[], &[]);
        let policies = [
            PolicySelector { name: "zeta", selector: &a },
            PolicySelector { name: "alpha", selector: &b },
            PolicySelector { name: "all-1", selector: &all1 },
            PolicySelector { name: "all-2", selector: &all2 },
        ];
        assert_eq!(
            resolve(&policies, &labels(&[("workload", "api"), ("tier", "x")])),
            Governance::Conflict { policies: vec!["alpha".into(), "zeta".into()], specificity: 1 }
        );
        // Only one keyed match: it wins over the two tied catch-alls.
        assert_eq!(resolve(&policies, &labels(&[("tier", "x")])).policy(), Some("alpha"));
        // Two catch-alls tie for a pool nothing else selects.
        assert_eq!(
            resolve(&policies, &labels(&[])),
            Governance::Conflict { policies: vec!["all-1".into(), "all-2".into()], specificity: 0 }
        );
        // An unevaluable selector matches nothing and cannot cause a conflict.
        let bad = sel(&[("workload", "api")], &[("tier", "Equals", &["x"])]);
        let with_bad = [
            PolicySelector { name: "zeta", selector: &a },
            PolicySelector { name: "bad", selector: &bad },
        ];
        assert_eq!(
            resolve(&with_bad, &labels(&[("workload", "api"), ("tier", "x")])).policy(),
            Some("zeta")
        );
    }

    #[test]
    fn capped_lists_count_what_they_leave_out() {
        let names = ["a", "b", "c", "d", "e"];
        assert_eq!(capped_list(names.into_iter(), 5, 3), "a, b, c and 2 more");
        assert_eq!(capped_list(names.into_iter().take(2), 2, 3), "a, b");
        let tie = Governance::Conflict {
            policies: vec!["a".into(), "b".into(), "c".into()],
            specificity: 1,
        };
        let mine = Governance::Governed { policy: "a".into(), specificity: 2 };
        let pools = [
            PoolView { name: "p1", governance: &tie, anchored: false },
            PoolView { name: "p2", governance: &mine, anchored: true },
            PoolView { name: "p3", governance: &Governance::Ungoverned, anchored: false },
        ];
        let by = pools_by_policy(&pools);
        let names = |p: &str| by.get(p).map(|v| v.iter().map(|x| x.name).collect::<Vec<_>>());
        assert_eq!(names("a"), Some(vec!["p1", "p2"]));
        assert_eq!(names("c"), Some(vec!["p1"]));
        assert_eq!(names("z"), None);
        assert!(ties_in(&["a".into(), "b".into()], "b") && !ties_in(&["a".into()], "b"));
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().unwrap_or_else(|| panic!("date"))
    }

    #[test]
    fn status_view() {
        let mine = Governance::Governed { policy: "api".into(), specificity: 1 };
        let other = Governance::Governed { policy: "web".into(), specificity: 1 };
        let tie =
            Governance::Conflict { policies: vec!["api".into(), "api-2".into()], specificity: 1 };
        let pools = [
            PoolView { name: "p1", governance: &mine, anchored: true },
            PoolView { name: "p2", governance: &mine, anchored: false },
            PoolView { name: "p3", governance: &other, anchored: true },
            PoolView { name: "p4", governance: &Governance::Ungoverned, anchored: false },
        ];
        let input = StatusInputs {
            policy: "api",
            generation: Some(3),
            invalid: None,
            pools: &pools,
            previous: None,
            now: now(),
        };
        let status = desired_status(&input);
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!((status.matched_node_pools, status.rotating_node_pools), (2, 1));
        let ready = &status.conditions[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str(), ready.reason.as_str()),
            ("Ready", "True", "Accepted")
        );
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(ready.last_transition_time, to_time(now()));

        // Conflict on p5; the transition time moves because the status flips.
        let mut with_tie = pools.to_vec();
        with_tie.push(PoolView { name: "p5", governance: &tie, anchored: false });
        let later = now() + chrono::Duration::hours(1);
        let input2 =
            StatusInputs { pools: &with_tie, previous: Some(&status), now: later, ..input };
        let conflict = desired_status(&input2);
        let ready = &conflict.conditions[0];
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Conflict"));
        assert!(
            ready.message.contains("NodePool p5 (ties with api-2 at specificity 1)"),
            "{}",
            ready.message
        );
        assert_eq!(ready.last_transition_time, to_time(later));
        assert_eq!(conflict.matched_node_pools, 2);

        // Invalid wins over Conflict; the status stays False so the time is kept.
        let invalid = InvalidPolicy {
            errors: vec![FieldError {
                field: "spec.maintenanceWindows[0].timezone".into(),
                problem: "unknown IANA time zone \"Asia/Tokio\"".into(),
            }],
        };
        let input3 = StatusInputs {
            invalid: Some(&invalid),
            previous: Some(&conflict),
            now: later + chrono::Duration::hours(1),
            ..input2
        };
        let status3 = desired_status(&input3);
        let ready = &status3.conditions[0];
        assert_eq!(ready.reason, "Invalid");
        assert!(
            ready.message.starts_with("spec.maintenanceWindows[0].timezone: "),
            "{}",
            ready.message
        );
        assert_eq!(ready.last_transition_time, to_time(later));
        assert_eq!(status3.conditions.len(), 1);
    }
}
