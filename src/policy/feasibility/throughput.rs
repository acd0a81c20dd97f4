//! Layer 2's arithmetic: the throughput checks (arrivals and a burst, against what the lanes
//! start), which `surge.maxUnavailable` would clear them, and why the pool has its lanes.
use chrono::Duration;

use super::{Derived, PoolFacts};
use crate::policy::duration::ExpireAfter;
use crate::policy::settings::{Effective, IntOrPercent, MaxUnavailable};

/// What the throughput checks need: one lane's starts per occurrence (`None`: open 24/7, one
/// start per slot), the slot, and the pool's nodes.
pub(super) struct Throughput {
    pub(super) per_lane_starts: Option<u64>,
    pub(super) slot: Duration,
    pub(super) nodes: u64,
}

/// One throughput check: it fires when `lanes * per_lane < demand`.
pub(super) struct Check {
    per_lane: i128,
    demand: i128,
}

impl Throughput {
    /// Arrivals at age threshold `a`: `m*C1*A` against `N*P` (24/7: `m*A` against `N*slot`).
    /// `None` unless `a` is positive.
    pub(super) fn arrival(&self, a: Duration, p: Duration) -> Option<Check> {
        let n = i128::from(self.nodes);
        (a > Duration::zero()).then(|| match self.per_lane_starts {
            Some(c) => Check {
                per_lane: i128::from(c) * i128::from(a.num_seconds()),
                demand: n * i128::from(p.num_seconds()),
            },
            None => Check {
                per_lane: i128::from(a.num_seconds()),
                demand: n * i128::from(self.slot.num_seconds()),
            },
        })
    }

    /// All N nodes sharing one deadline, with `g` chances: `m*G*C1` rotations against `N`
    /// (24/7: each lane starts one per slot over `G*P`).
    pub(super) fn burst(&self, g: i64, p: Duration) -> Check {
        let per_lane = match self.per_lane_starts {
            Some(c) => i128::from(g) * i128::from(c),
            None => {
                let span = (i128::from(p.num_seconds()) * i128::from(g)).max(0);
                let s = i128::from(self.slot.num_seconds().max(1));
                (span + s - 1) / s
            }
        };
        Check { per_lane, demand: i128::from(self.nodes) }
    }
}

impl Check {
    /// What `lanes` lanes give.
    pub(super) fn capacity(&self, lanes: usize) -> i128 {
        self.per_lane.saturating_mul(i128::try_from(lanes).unwrap_or(i128::MAX))
    }

    /// The check fires with `lanes` lanes.
    pub(super) fn short(&self, lanes: usize) -> bool {
        self.capacity(lanes) < self.demand
    }

    /// The fewest lanes (at least 1) for which the check does not fire; `None` when no number
    /// of lanes helps.
    pub(super) fn lanes_needed(&self) -> Option<usize> {
        if self.demand <= 0 {
            return Some(1);
        }
        (self.per_lane > 0)
            .then(|| (self.demand + self.per_lane - 1) / self.per_lane)
            .and_then(|m| usize::try_from(m).ok())
            .map(|m| m.max(1))
    }
}

/// Which `surge.maxUnavailable` would clear a throughput finding, in the policy's own form (a
/// percentage of the `nodes` when the policy gives one and one up to 100% is enough). With
/// `auto` (now `lanes`), the limit to raise when the need is above it; a need auto does not size
/// for (a burst) names a fixed value.
pub(super) fn lanes_hint(
    check: &Check,
    policy: MaxUnavailable,
    nodes: u64,
    lanes: usize,
) -> String {
    let Some(m) = check.lanes_needed() else {
        return "no surge.maxUnavailable is enough".into();
    };
    let most = usize::try_from(crate::policy::crd::MAX_UNAVAILABLE).unwrap_or(usize::MAX);
    if m > most {
        return format!(
            "it needs {m} rotations at once, more than surge.maxUnavailable allows ({most}): \
             lengthen or add maintenance windows, or split the pool"
        );
    }
    let (field, written) = match policy {
        MaxUnavailable::Auto { limit } if m > lanes => ("surge.maxUnavailableLimit", limit),
        MaxUnavailable::Auto { .. } => {
            return format!(
                "surge.maxUnavailable {m} or more would fix it (auto sizes for the steady \
                 arrivals: {lanes} here)"
            );
        }
        MaxUnavailable::Fixed(n) => ("surge.maxUnavailable", n),
    };
    let percent = match written {
        IntOrPercent::Percent(_) => smallest_percent(m, nodes),
        IntOrPercent::Count(_) => None,
    };
    match percent {
        Some(p) => {
            format!("{field} \"{p}%\" ({m} of {nodes} nodes at once) or more would fix it")
        }
        None => format!("{field} {m} or more would fix it"),
    }
}

/// Why the pool has `d.lanes` lanes: the policy's value, or what `auto` chose and why, for
/// `plan`, `noderotation status` and the policy status ([`Derived::lanes_reason`]).
pub(super) fn lanes_reason(settings: &Effective, d: &Derived, pool: &PoolFacts) -> String {
    let k = settings.min_rotation_chances;
    let nodes = pool.nodes;
    let of = |n: Option<u64>| n.map_or("an unknown number of".to_string(), |n| n.to_string());
    match settings.max_unavailable {
        MaxUnavailable::Fixed(IntOrPercent::Count(n)) => format!("maxUnavailable {n}"),
        MaxUnavailable::Fixed(IntOrPercent::Percent(p)) => {
            format!("maxUnavailable {p}% of {} nodes", of(nodes))
        }
        MaxUnavailable::Auto { limit } => {
            let cap = d.lanes_limit.unwrap_or(1);
            match d.lanes_needed {
                Some(m) if m > cap => format!(
                    "auto: {m} needed for {} nodes, capped at maxUnavailableLimit {limit} ({cap})",
                    of(nodes)
                ),
                Some(m) => format!(
                    "auto: the fewest that keep every node's {k} chance(s) for {} nodes: {m} \
                     (maxUnavailableLimit {limit}: {cap})",
                    of(nodes)
                ),
                None => format!("auto: 1, the need is unknown ({})", unknown_need(d, pool)),
            }
        }
    }
}

/// Why `lanes_needed` is `None`.
fn unknown_need(d: &Derived, pool: &PoolFacts) -> &'static str {
    if pool.nodes.is_none() {
        "node count unknown"
    } else if d.period.is_none() {
        "no maintenance windows"
    } else if pool.expire_after == ExpireAfter::Never {
        "expireAfter Never"
    } else {
        "expireAfter leaves no positive auto age threshold"
    }
}

/// The smallest percentage of `nodes` that resolves to at least `lanes`
/// ([`IntOrPercent::resolve`]), if one up to 100% does (never more lanes than
/// [`crate::policy::crd::MAX_UNAVAILABLE`]).
pub(crate) fn smallest_percent(lanes: usize, nodes: u64) -> Option<u32> {
    if !u32::try_from(lanes).is_ok_and(|l| l <= crate::policy::crd::MAX_UNAVAILABLE) {
        return None;
    }
    let n = u128::from(nodes);
    let m = u128::try_from(lanes.max(1)).ok()?;
    // ceil(n * p / 100) >= m  <=>  n * p > (m - 1) * 100.
    let p = ((m - 1) * 100).checked_div(n)? + 1;
    u32::try_from(p).ok().filter(|p| *p <= 100)
}
