//! Feasibility of a policy for one NodePool (§3.2): layer 1 (fatal findings and
//! warnings about the policy and the pool template), layer 2 (throughput), and layer 3 (one
//! claim's short lead). Each finding is a typed value with the Event reason of §4.3, a severity,
//! a message with the numbers, and a fix hint. Pure: `now` only anchors the window horizon.
//!
//! This file holds the vocabulary: [`Severity`], [`Layer`], the generated [`Cause`], [`Finding`],
//! what is known of the pool ([`PoolFacts`]) and the result ([`Derived`], [`Assessment`]).
//!
//! - `assess.rs`: [`assess()`], layers 1 and 2 for a pool, and the layer-1 findings it builds.
//! - `throughput.rs`: layer 2's arithmetic: the throughput checks, the `surge.maxUnavailable`
//!   that clears them, why the pool has the lanes it has ([`smallest_percent`]).
//! - `short_lead.rs`: layer 3, one claim's short lead ([`short_lead()`]).
use std::fmt;

use chrono::Duration;
use serde::{Deserialize, Serialize};

use super::duration::ExpireAfter;

mod assess;
mod short_lead;
mod throughput;

pub(crate) use assess::assess;
pub(crate) use short_lead::short_lead;
pub(crate) use throughput::smallest_percent;

/// EKS Auto Mode's maximum node lifetime, `expireAfter + tGP` (§2).
pub(crate) const HARD_LIFETIME_CAP: Duration = Duration::days(21);

/// The label key whose absence from `matchNodeRequirements.required` is warned about (§3.7).
pub(crate) const ZONE_KEY: &str = "topology.kubernetes.io/zone";

/// Fatal findings block new starts and the failed->pending retry in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Severity {
    Fatal,
    Warning,
}

/// Where a finding comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Layer {
    /// Layer 1: the policy against the pool template.
    Policy,
    /// Layer 2: throughput.
    Throughput,
    /// Layer 3: one claim at runtime.
    Claim,
}

// `Cause`: what a finding is about, generated from `findings` in rules/vocabulary.ron with
// its name, severity and layer.
include!(concat!(env!("OUT_DIR"), "/causes.rs"));

impl Cause {
    /// The Event reason (§4.3): `Infeasible` for every fatal finding, else the reason itself.
    pub(crate) fn event_reason(self) -> &'static str {
        match self.severity() {
            Severity::Fatal => "Infeasible",
            Severity::Warning => self.as_str(),
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One feasibility finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub reason: Cause,
    pub severity: Severity,
    /// What is wrong, with the numbers.
    pub message: String,
    /// What to change.
    pub fix: String,
}

impl Finding {
    fn new(reason: Cause, message: String, fix: impl Into<String>) -> Finding {
        Finding { reason, severity: reason.severity(), message, fix: fix.into() }
    }
}

/// What feasibility needs to know about the pool (its template values stand in for its claims).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolFacts {
    /// Template `expireAfter` (Karpenter default 720h when unset).
    pub expire_after: ExpireAfter,
    /// Template `terminationGracePeriod`.
    pub termination_grace_period: Option<Duration>,
    /// `N`, claims in the pool; `None` skips the throughput checks.
    pub nodes: Option<u64>,
    /// Resources of `spec.limits` with less than one node's worth left (`limit -
    /// status.resources` below what one of the pool's nodes takes; used up, without nodes).
    pub exhausted_limits: Vec<String>,
    /// `spec.replicas` is set.
    pub static_pool: bool,
}

/// The derived quantities, for metrics and `plan`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Derived {
    /// `P`; `None` without windows.
    pub period: Option<Duration>,
    /// The union is open 24/7 (`P` is the 1m tick).
    pub always_open: bool,
    pub t_rot: Duration,
    pub t_rot_est: Duration,
    pub provisioning_estimate: Duration,
    pub drain_estimate: Duration,
    /// `A`: auto (may be <= 0) or the override; with `windows`, the earliest age a node falls
    /// due at (0 when a node can be due as it is created; `E` minus the expireAfter K chances
    /// need, so negative, when infeasible). `None`: E = Never with auto or windows, or no
    /// windows.
    pub age_threshold: Option<Duration>,
    /// `A` is the operator's override.
    pub age_threshold_overridden: bool,
    /// How long before the deadline a claim becomes due (`K*P + t_rot` for auto, `E - A` for an
    /// override, the longest for windows); `None` without a deadline or windows.
    pub lead_time: Option<Duration>,
    /// Guaranteed chances: `K` for auto with `A > 0` and for feasible windows (the fewest a
    /// node gets when infeasible), `G` for an override; `None` when unbounded (E = Never with an
    /// override) or undefined.
    pub chances: Option<i64>,
    /// `C` for the shortest occurrence, with the policy's lanes (`m`); `None` when 24/7
    /// (continuous) or without windows.
    pub starts_per_occurrence: Option<u64>,
    /// `m`: rotations in flight at once, the policy's `maxUnavailable` resolved against the
    /// pool's nodes (a pool of unknown size counts as none: a percentage gives 1).
    pub lanes: usize,
    /// The smallest `m` whose capacity per window period covers the nodes that fall due per
    /// period at the auto age threshold (`m*C1*A >= N*P`, `C1` one lane's starts per occurrence;
    /// open 24/7: `m*A >= N*slot`), whatever the policy's mode. `None` without a node count, a
    /// deadline, windows, or a positive auto age threshold.
    pub lanes_needed: Option<usize>,
    /// With `maxUnavailable: auto`, its `maxUnavailableLimit` resolved against the pool's nodes:
    /// `lanes` is `lanes_needed` up to this.
    pub lanes_limit: Option<usize>,
    /// Why `lanes` is what it is: the policy's value, or what `auto` chose and why.
    pub lanes_reason: String,
    /// `D` of `C`: the shortest occurrence over the horizon.
    pub shortest_occurrence: Option<Duration>,
    /// The shortest closed gap between occurrences.
    pub shortest_gap: Option<Duration>,
}

/// Feasibility of one pool: derived quantities and findings (fatal first, then by reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assessment {
    pub derived: Derived,
    pub findings: Vec<Finding>,
}

impl Assessment {
    /// A fatal finding exists: no new starts and no failed->pending retry in the pool.
    pub(crate) fn has_fatal(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Fatal)
    }
}

#[cfg(test)]
mod tests;
