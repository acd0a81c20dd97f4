//! Limits headroom (§3.3): whether a surge fits in the pool's `spec.limits`.
use std::collections::BTreeMap;
use std::fmt;

use super::requests::{Resources, add_into, millis_quantity, parse_list};
use crate::karpenter::{self, NodeClaim, NodePool};

/// `nodes` in a pool's `spec.limits` / `status.resources`.
pub(crate) const NODES_RESOURCE: &str = "nodes";

/// What a surge for `candidate` may add to its pool's `status.resources`: a node like the
/// candidate (its `status.allocatable`, every resource, since Karpenter sums node resources
/// per pool) plus `nodes: 1`, because the surge may need a new node (whether the placeholder
/// will be absorbed instead is unknown when the check runs). An estimate: Karpenter counts the
/// new node's capacity, a little more than its allocatable, and may pick a smaller instance
/// when the placeholder is smaller than the candidate.
pub(crate) fn footprint(candidate: &NodeClaim) -> Resources {
    let mut out = parse_list(candidate.status.as_ref().map(|s| &s.allocatable));
    *out.entry(NODES_RESOURCE.to_string()).or_insert(0) += 1000;
    out
}

/// What several surges may add together: the sum of their [`footprint`]s (a start judged with
/// the other rotations' surges still to come, §3.3 with several rotations in flight).
pub(crate) fn footprints<'a>(candidates: impl IntoIterator<Item = &'a NodeClaim>) -> Resources {
    let mut total = Resources::new();
    for c in candidates {
        add_into(&mut total, &footprint(c));
    }
    total
}

/// One node's worth of the pool's resources, from its claims' [`footprint`]s: per resource, the
/// largest among them (at least one node). What a surge would take from `spec.limits`
/// (`NoLimitsHeadroom`).
pub(crate) fn worth_of<'a>(footprints: impl Iterator<Item = &'a Resources>) -> Resources {
    let mut out = Resources::from([(NODES_RESOURCE.to_string(), 1000)]);
    for footprint in footprints {
        for (resource, amount) in footprint {
            // The key is cloned only when it is new (not on every claim).
            match out.get_mut(resource) {
                Some(held) => *held = (*held).max(*amount),
                None => {
                    out.insert(resource.clone(), 0.max(*amount));
                }
            }
        }
    }
    out
}

/// `InsufficientHeadroom(resource, want, remaining, limit)`, amounts in thousandths. Compare
/// whole values to deduplicate the warning per distinct tuple.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Shortfall {
    pub resource: String,
    /// The footprint's amount of `resource`.
    pub want: i128,
    /// `limit - status.resources`, floored at 0.
    pub remaining: i128,
    pub limit: i128,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: the surge needs {} but only {} of the limit {} remains",
            self.resource,
            millis_quantity(self.want).0,
            millis_quantity(self.remaining).0,
            millis_quantity(self.limit).0
        )
    }
}

/// §3.3: for each resource in the pool's `spec.limits`,
/// `status.resources + footprint <= limit`; else the first shortfall in resource-name order. A
/// limit that does not parse is skipped (Karpenter rejects it itself); a resource missing from
/// `status.resources` is in use 0.
pub(crate) fn surge_headroom(pool: &NodePool, footprint: &Resources) -> Result<(), Shortfall> {
    let empty = BTreeMap::new();
    let used = pool.status.as_ref().map_or(&empty, |s| &s.resources);
    for (resource, limit) in pool.spec.limits.iter().flatten() {
        let Some(limit) = karpenter::quantity_millis(limit) else { continue };
        let in_use = used.get(resource).and_then(karpenter::quantity_millis).unwrap_or(0);
        let want = footprint.get(resource).copied().unwrap_or(0);
        if in_use + want > limit {
            return Err(Shortfall {
                resource: resource.clone(),
                want,
                remaining: (limit - in_use).max(0),
                limit,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::placeholder::fixtures::*;

    #[test]
    fn footprint_is_a_node_like_the_candidate() {
        let f = footprint(&claim());
        assert_eq!(
            f,
            res(&[
                ("cpu", "3920m"),
                ("memory", "14162Mi"),
                ("pods", "58"),
                ("ephemeral-storage", "17Gi"),
                ("nodes", "1"),
            ])
        );
        assert_eq!(footprint(&NodeClaim::default()), res(&[("nodes", "1")]));
    }

    #[test]
    fn headroom_shortfall_tuple() {
        let p = pool();
        assert_eq!(surge_headroom(&p, &res(&[("cpu", "10"), ("nodes", "1")])), Ok(()));
        assert_eq!(
            surge_headroom(&p, &res(&[("cpu", "10500m"), ("nodes", "1")])),
            Err(Shortfall {
                resource: "cpu".into(),
                want: 10_500,
                remaining: 10_000,
                limit: 100_000
            })
        );
        let mut full = pool();
        if let Some(s) = full.status.as_mut() {
            s.resources.insert("nodes".into(), Quantity("10".into()));
        }
        let err = surge_headroom(&full, &res(&[("cpu", "1"), ("nodes", "1")]));
        assert_eq!(
            err,
            Err(Shortfall { resource: "nodes".into(), want: 1000, remaining: 0, limit: 10_000 })
        );
        assert_eq!(
            err.err().map(|s| s.to_string()).unwrap_or_default(),
            "nodes: the surge needs 1 but only 0 of the limit 10 remains"
        );
        // No limits: always room. Unlimited resources are not checked.
        let mut unlimited = pool();
        unlimited.spec.limits = None;
        assert_eq!(surge_headroom(&unlimited, &res(&[("cpu", "1000")])), Ok(()));
        assert_eq!(surge_headroom(&p, &res(&[("nvidia.com/gpu", "8")])), Ok(()));
    }
}
