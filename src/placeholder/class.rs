//! The placeholder's PriorityClass (§3.3): what makes it safe. A placeholder requests a node's
//! worth of resources; it must yield to every workload (a negative value, so every pod of the
//! default priority 0 preempts it) and never preempt one itself (`preemptionPolicy: Never`).
//! The preflight refuses to start on a class that is neither, and the controller stops creating
//! placeholders when the class it watches turns unsafe while it runs.
use k8s_openapi::api::scheduling::v1::PriorityClass;

/// The preemption policy that keeps a placeholder from preempting anything.
pub(crate) const NEVER: &str = "Never";

/// What is wrong with a PriorityClass for placeholders: one sentence per problem, each saying
/// what to change. Empty when it is safe.
pub(crate) fn class_problems(class: &PriorityClass) -> Vec<String> {
    let mut problems = Vec::new();
    if class.value >= 0 {
        problems.push(format!(
            "its value is {} (it must be negative, below every workload, so that any pod preempts a placeholder: -10 is what the manifests ship)",
            class.value
        ));
    }
    // Unset is the API server's default, PreemptLowerPriority.
    let policy = class.preemption_policy.as_deref().unwrap_or("PreemptLowerPriority");
    if policy != NEVER {
        problems.push(format!(
            "its preemptionPolicy is {policy} (it must be Never, so that a placeholder never preempts a workload)"
        ));
    }
    problems
}

/// Whether placeholders may use `class`.
pub(crate) fn class_safe(class: &PriorityClass) -> bool {
    class_problems(class).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(value: i32, policy: Option<&str>) -> PriorityClass {
        PriorityClass {
            value,
            preemption_policy: policy.map(str::to_string),
            ..PriorityClass::default()
        }
    }

    #[test]
    fn only_a_negative_never_preempting_class_is_safe() {
        assert!(class_safe(&class(-10, Some("Never"))));
        assert!(class_problems(&class(-1, Some("Never"))).is_empty());
        let zero = class_problems(&class(0, Some("Never")));
        assert_eq!(zero.len(), 1);
        assert!(zero[0].contains("its value is 0 (it must be negative"), "{zero:?}");
        let preempting = class_problems(&class(-10, Some("PreemptLowerPriority")));
        assert_eq!(preempting.len(), 1);
        assert!(
            preempting[0].contains("preemptionPolicy is PreemptLowerPriority"),
            "{preempting:?}"
        );
        let unset = class_problems(&class(1000, None));
        assert_eq!(unset.len(), 2, "{unset:?}");
        assert!(unset[1].contains("PreemptLowerPriority (it must be Never"), "{unset:?}");
    }
}
