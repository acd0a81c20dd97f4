//! The allocatable clamp (§3.3): no placeholder asks for more than a node like the candidate
//! offers once its DaemonSets run.
use k8s_openapi::api::core::v1::Node;

use super::requests::{Resources, parse_list};
use crate::karpenter::NodeClaim;

/// The result of the allocatable clamp.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Clamp {
    /// The clamped requests, zero entries dropped.
    pub requests: Resources,
    /// Resources whose request was lowered, in name order (for `SurgeClamped`).
    pub clamped: Vec<String>,
}

/// The per-resource ceiling of the placeholder: `allocatable - overhead`, floored at 0. `None`
/// when `allocatable` is empty (unknown).
pub(crate) fn clamp_limit(allocatable: &Resources, overhead: &Resources) -> Option<Resources> {
    if allocatable.is_empty() {
        return None;
    }
    Some(
        allocatable
            .iter()
            .map(|(name, a)| (name.clone(), (a - overhead.get(name).copied().unwrap_or(0)).max(0)))
            .collect(),
    )
}

/// Clamps `requests` per resource to `min(request, allocatable - overhead)`, floored at 0. An
/// empty `allocatable` (unknown) clamps nothing. A requested resource missing from a known
/// allocatable is clamped to 0: no node of this size offers it, and Karpenter cannot provision
/// for a request it does not know an instance type for.
pub(crate) fn clamp(requests: &Resources, allocatable: &Resources, overhead: &Resources) -> Clamp {
    let limit = clamp_limit(allocatable, overhead);
    let mut out = Clamp::default();
    for (name, want) in requests {
        let want = (*want).max(0);
        let got = match &limit {
            None => want,
            Some(limit) => {
                let ceiling = limit.get(name).copied().unwrap_or(0);
                if want > ceiling {
                    out.clamped.push(name.clone());
                    ceiling
                } else {
                    want
                }
            }
        };
        if got > 0 {
            out.requests.insert(name.clone(), got);
        }
    }
    out
}

/// Whether a resource name may appear in a container's `resources` (`cpu`, `memory`,
/// `ephemeral-storage`, `hugepages-*`, and extended resources: a qualified name outside the
/// `kubernetes.io` domain). Allocatable also lists `pods` and the like, which may not.
pub(crate) fn is_container_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage")
        || name.starts_with("hugepages-")
        || (name.contains('/')
            && !name.contains("kubernetes.io/")
            && !name.starts_with("requests."))
}

/// The claim's `status.allocatable`, else the Node's; empty when neither reports it.
pub(super) fn allocatable(claim: &NodeClaim, node: Option<&Node>) -> Resources {
    let from_claim = parse_list(claim.status.as_ref().map(|s| &s.allocatable));
    if !from_claim.is_empty() {
        return from_claim;
    }
    parse_list(node.and_then(|n| n.status.as_ref()).and_then(|s| s.allocatable.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placeholder::fixtures::*;

    #[test]
    fn clamp_rules() {
        let alloc = res(&[("cpu", "4"), ("memory", "16Gi"), ("pods", "58")]);
        let ds = res(&[("cpu", "500m"), ("memory", "1Gi")]);
        // Under the limit: untouched.
        let c = clamp(&res(&[("cpu", "2"), ("memory", "8Gi")]), &alloc, &ds);
        assert_eq!(c.requests, res(&[("cpu", "2"), ("memory", "8Gi")]));
        assert!(c.clamped.is_empty());
        // Over: lowered to allocatable - overhead, and reported.
        let c = clamp(&res(&[("cpu", "6"), ("memory", "8Gi")]), &alloc, &ds);
        assert_eq!(c.requests, res(&[("cpu", "3500m"), ("memory", "8Gi")]));
        assert_eq!(c.clamped, ["cpu"]);
        // Overhead above allocatable floors at 0 and drops the resource.
        let c = clamp(&res(&[("cpu", "1"), ("memory", "1Gi")]), &alloc, &res(&[("cpu", "5")]));
        assert_eq!(c.requests, res(&[("memory", "1Gi")]));
        assert_eq!(c.clamped, ["cpu"]);
        // Unknown allocatable: nothing is clamped.
        let c = clamp(&res(&[("cpu", "64")]), &Resources::new(), &ds);
        assert_eq!(c.requests, res(&[("cpu", "64")]));
        assert!(c.clamped.is_empty());
        // A resource the node does not offer is clamped to 0.
        let c = clamp(&res(&[("cpu", "1"), ("example.com/fpga", "1")]), &alloc, &ds);
        assert_eq!(c.requests, res(&[("cpu", "1")]));
        assert_eq!(c.clamped, ["example.com/fpga"]);
    }

    #[test]
    fn container_resources() {
        assert!(is_container_resource("nvidia.com/gpu"));
        assert!(is_container_resource("hugepages-2Mi"));
        assert!(!is_container_resource("pods"));
        assert!(!is_container_resource("attachable-volumes-aws-ebs"));
        assert!(!is_container_resource("kubernetes.io/batch"));
    }
}
