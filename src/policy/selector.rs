//! Label selectors as policies use them to pick NodePools (spec §5.4): specificity, the problems
//! that keep one from being evaluated, and matching.
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector problem; `field` is relative to the selector (`matchExpressions[0].operator`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelectorProblem {
    pub field: String,
    pub problem: String,
}

/// Number of `matchLabels` entries plus number of `matchExpressions` entries.
pub(crate) fn specificity(selector: &LabelSelector) -> usize {
    selector.match_labels.as_ref().map_or(0, BTreeMap::len)
        + selector.match_expressions.as_ref().map_or(0, Vec::len)
}

/// What keeps a selector from being evaluated: an unknown operator, or values that do not fit
/// the operator (the rules the apiserver applies to built-in selectors).
pub(crate) fn selector_problems(selector: &LabelSelector) -> Vec<SelectorProblem> {
    let mut out = Vec::new();
    for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let values = expr.values.as_ref().map_or(0, Vec::len);
        if expr.key.is_empty() {
            out.push(SelectorProblem {
                field: format!("matchExpressions[{i}].key"),
                problem: "must not be empty".into(),
            });
        }
        match expr.operator.as_str() {
            "In" | "NotIn" if values == 0 => out.push(SelectorProblem {
                field: format!("matchExpressions[{i}].values"),
                problem: format!("operator {} needs at least one value", expr.operator),
            }),
            "Exists" | "DoesNotExist" if values > 0 => out.push(SelectorProblem {
                field: format!("matchExpressions[{i}].values"),
                problem: format!("operator {} takes no values", expr.operator),
            }),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => out.push(SelectorProblem {
                field: format!("matchExpressions[{i}].operator"),
                problem: format!(
                    "unknown operator {other:?} (use In, NotIn, Exists or DoesNotExist)"
                ),
            }),
        }
    }
    out
}

/// Whether `selector` matches `labels`; `None` when the selector cannot be evaluated.
pub(crate) fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    if !selector_problems(selector).is_empty() {
        return None;
    }
    let labels_ok = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|e| {
        let value = labels.get(&e.key);
        let listed = |v: &String| e.values.iter().flatten().any(|x| x == v);
        match e.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => !value.is_some_and(listed),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    Some(labels_ok && expressions_ok)
}
