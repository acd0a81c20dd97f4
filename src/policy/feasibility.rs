//! Feasibility of a policy for one NodePool (§3.2): layer 1 (fatal findings and
//! warnings about the policy and the pool template), layer 2 (throughput), and layer 3 (one
//! claim's short lead). Each finding is a typed value with the Event reason of §4.3, a severity,
//! a message with the numbers, and a fix hint. Pure: `now` only anchors the window horizon.
use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::chances;
use super::derive;
use super::duration::{ExpireAfter, format_human};
use super::settings::{AgeThreshold, Effective, IntOrPercent, MaxUnavailable};
use super::window::Occurrence;

/// EKS Auto Mode's maximum node lifetime, `expireAfter + tGP` (§2).
pub const HARD_LIFETIME_CAP: Duration = Duration::days(21);

/// The label key whose absence from `matchNodeRequirements.required` is warned about (§3.7).
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";

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
    pub fn event_reason(self) -> &'static str {
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
pub struct PoolFacts {
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
pub struct Derived {
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
pub struct Assessment {
    pub derived: Derived,
    pub findings: Vec<Finding>,
}

impl Assessment {
    /// A fatal finding exists: no new starts and no failed->pending retry in the pool.
    pub fn has_fatal(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Fatal)
    }
}

/// Layers 1 and 2 for a pool governed by `settings`, with the window horizon anchored at `now`.
pub fn assess(settings: &Effective, pool: &PoolFacts, now: DateTime<Utc>) -> Assessment {
    let mut findings = Vec::new();
    let k = settings.min_rotation_chances;
    let tgp = pool.termination_grace_period;
    let t_rot = settings.t_rot(tgp);
    let drain_estimate = settings.drain_estimate(tgp);
    let t_rot_est = settings.t_rot_est(tgp);
    let slot = t_rot_est + settings.cooldown_after;
    let profile = settings.schedule.profile(now);
    let h = format_human;

    if profile.is_none() {
        findings.push(Finding::new(
            Cause::NoWindows,
            "spec.maintenanceWindows is empty: there is no window to rotate in".into(),
            "add at least one maintenance window",
        ));
    }
    if k < 1 {
        findings.push(Finding::new(
            Cause::KBelowOne,
            "minRotationChances is below 1".into(),
            "set minRotationChances to 1 or more (2 leaves one retry)",
        ));
    } else if k == 1 {
        findings.push(Finding::new(
            Cause::KBelowTwo,
            "minRotationChances is 1: a node whose one window is missed or fails reaches forced \
             expiry"
                .into(),
            "set minRotationChances to 2 or more",
        ));
    }

    let period = profile.map(|p| p.period);
    let mut age_threshold = None;
    let mut lead_time = None;
    let mut chances = None;
    // Windows on a 24/7 union counts the ticks, as auto does.
    let counts_windows =
        settings.age_threshold == AgeThreshold::Windows && settings.schedule.has_gaps();
    match (settings.age_threshold, pool.expire_after, period) {
        (AgeThreshold::Windows, ExpireAfter::After(e), Some(p)) if counts_windows => {
            let chances_of = chances::pool_chances(&settings.schedule, now, e, t_rot, k);
            if let Some(pc) = chances_of {
                if pc.fewest < k.max(1) {
                    age_threshold = pc.expire_after_needed.map(|needed| e - needed);
                    chances = Some(i64::from(pc.fewest));
                    findings.push(windows_below_k(&pc, e, k, t_rot));
                } else if let Some((_, longest)) = pc.lead {
                    let a = (e - longest).max(Duration::zero());
                    age_threshold = Some(a);
                    lead_time = Some(longest);
                    chances = Some(i64::from(k));
                    if a < p {
                        let subject = format!("a node can fall due at age {}, which is", h(a));
                        findings.push(aggressive(subject, p));
                    }
                }
            }
        }
        (AgeThreshold::Auto | AgeThreshold::Windows, ExpireAfter::After(e), Some(p)) => {
            let lead = derive::lead_time(k, p, t_rot);
            let a = e - lead;
            age_threshold = Some(a);
            lead_time = Some(lead);
            if a <= Duration::zero() {
                findings.push(Finding::new(
                    Cause::AgeThresholdNotPositive,
                    format!(
                        "auto ageThreshold A = E - (K*P + t_rot) = {} - ({k}*{} + {}) = {} is not \
                         positive: nodes cannot get {k} window chances before their forced expiry",
                        h(e),
                        h(p),
                        h(t_rot),
                        h(a)
                    ),
                    format!(
                        "raise the NodePool's expireAfter above {}, add maintenance windows to \
                         shorten P, or lower minRotationChances",
                        h(lead)
                    ),
                ));
            } else {
                chances = Some(i64::from(k));
                if a < p {
                    findings.push(aggressive(threshold_is(a), p));
                }
            }
        }
        (AgeThreshold::Override(a), ExpireAfter::After(e), Some(p)) => {
            age_threshold = Some(a);
            lead_time = Some(e - a);
            let g = derive::guaranteed_chances(e, a, p, t_rot);
            chances = Some(g);
            if g < 1 {
                findings.push(Finding::new(
                    Cause::OverrideBelowOneChance,
                    format!(
                        "ageThreshold {} guarantees G = floor((E - A - t_rot) / P) = floor(({} - \
                         {} - {}) / {}) = {g} window chances before forced expiry",
                        h(a),
                        h(e),
                        h(a),
                        h(t_rot),
                        h(p)
                    ),
                    lower_age_threshold(
                        e - derive::lead_time(k.max(1), p, t_rot),
                        "or use auto, or add maintenance windows",
                    ),
                ));
            } else if g < i64::from(k) {
                findings.push(Finding::new(
                    Cause::OverrideGBelowK,
                    format!(
                        "ageThreshold {} guarantees only {g} window chance(s), fewer than \
                         minRotationChances {k}",
                        h(a)
                    ),
                    lower_age_threshold(e - derive::lead_time(k, p, t_rot), "or use auto"),
                ));
            }
            if g >= 1 && a < p {
                findings.push(aggressive(threshold_is(a), p));
            }
        }
        (AgeThreshold::Override(a), ExpireAfter::Never, p) => {
            age_threshold = Some(a);
            if let Some(p) = p
                && a < p
            {
                findings.push(aggressive(threshold_is(a), p));
            }
        }
        (AgeThreshold::Auto | AgeThreshold::Windows, ExpireAfter::Never, _) | (_, _, None) => {}
    }

    let hard_cap_exceeded = match pool.expire_after {
        ExpireAfter::Never => true,
        ExpireAfter::After(e) => e + tgp.unwrap_or(Duration::zero()) > HARD_LIFETIME_CAP,
    };
    if hard_cap_exceeded {
        findings.push(Finding::new(
            Cause::HardCapExceeded,
            format!(
                "expireAfter {} + terminationGracePeriod {} exceeds 21d, the maximum node \
                 lifetime EKS Auto Mode enforces",
                pool.expire_after,
                tgp.map_or("(unset)".to_string(), h)
            ),
            "on EKS Auto Mode keep expireAfter + terminationGracePeriod <= 21d; elsewhere ignore",
        ));
    }
    if tgp.is_none() {
        findings.push(Finding::new(
            Cause::TGPUnset,
            "the NodePool has no terminationGracePeriod: a drain blocked by a PodDisruptionBudget \
             never ends, and t_rot assumes 1h"
                .into(),
            "set spec.template.spec.terminationGracePeriod on the NodePool",
        ));
    }
    if settings.retry_backoff < settings.ready_timeout {
        findings.push(Finding::new(
            Cause::RetryBackoffShort,
            format!(
                "retryBackoff {} is shorter than readyTimeout {}: a systematic failure is retried \
                 before the previous attempt could have succeeded",
                h(settings.retry_backoff),
                h(settings.ready_timeout)
            ),
            format!("raise surge.retryBackoff to at least {}", h(settings.ready_timeout)),
        ));
    }
    if let (Some(d), Some(t)) = (settings.drain_estimate_override, tgp)
        && d > t
    {
        findings.push(Finding::new(
            Cause::DrainEstimateAboveTGP,
            format!(
                "drainEstimate {} exceeds the terminationGracePeriod {}, which cuts every \
                 drain off",
                h(d),
                h(t)
            ),
            format!("lower surge.drainEstimate to at most {}", h(t)),
        ));
    }
    if !pool.exhausted_limits.is_empty() {
        findings.push(Finding::new(
            Cause::NoLimitsHeadroom,
            format!(
                "spec.limits leaves less than one node's worth of {}: Karpenter cannot launch a \
                 surge node",
                pool.exhausted_limits.join(", ")
            ),
            "raise the NodePool's spec.limits by at least one node's worth",
        ));
    }
    if pool.static_pool {
        findings.push(Finding::new(
            Cause::StaticNodePool,
            "the NodePool is static (spec.replicas): a surge can never complete there, so its \
             nodes are not rotated"
                .into(),
            "rotate static pools by other means, or select only dynamic NodePools",
        ));
    }
    if !settings.match_node_requirements.required.iter().any(|k| k == ZONE_KEY) {
        findings.push(Finding::new(
            Cause::ZoneNotRequired,
            format!(
                "surge.matchNodeRequirements.required lacks {ZONE_KEY}: a replacement may come up \
                 in another zone than the node it replaces"
            ),
            format!("add {ZONE_KEY} back unless the pool's workloads are zone-agnostic"),
        ));
    }

    // Layer 2. `C` of one lane; the pool's is `lanes` times it.
    let per_lane_starts = match profile {
        Some(p) if !p.always_open => p
            .shortest_occurrence
            .map(|d| derive::starts_per_occurrence(d, t_rot_est, settings.cooldown_after, 1)),
        _ => None,
    };
    let throughput = Throughput { per_lane_starts, slot, nodes: pool.nodes.unwrap_or(0) };
    // The lanes the pool needs at the auto age threshold, whatever the policy's mode.
    let lanes_needed = match (pool.expire_after, period, pool.nodes) {
        (ExpireAfter::After(e), Some(p), Some(_)) => throughput
            .arrival(e - derive::lead_time(k, p, t_rot), p)
            .and_then(|check| check.lanes_needed()),
        _ => None,
    };
    // The policy's lanes: `maxUnavailable` resolved against the pool's nodes (`auto`: the need,
    // within its limit).
    let nodes = pool.nodes.map_or(0, to_usize);
    let lanes = settings.max_unavailable.lanes(nodes, lanes_needed);
    let lanes_limit = match settings.max_unavailable {
        MaxUnavailable::Auto { limit } => Some(limit.resolve(nodes)),
        MaxUnavailable::Fixed(_) => None,
    };
    let starts_per_occurrence = per_lane_starts.map(|c| c.saturating_mul(to_u64(lanes)));
    let hint = |check: &Check| lanes_hint(check, settings.max_unavailable, throughput.nodes, lanes);
    let raise = match settings.max_unavailable {
        MaxUnavailable::Auto { .. } => "raise surge.maxUnavailableLimit",
        MaxUnavailable::Fixed(_) => "raise surge.maxUnavailable",
    };
    if let (Some(profile), Some(a), Some(n)) = (profile, age_threshold, pool.nodes)
        && n > 0
    {
        let p = profile.period;
        // Arrivals: N claims per A. Capacity: C starts per P (24/7: m per slot).
        if let Some(check) = throughput.arrival(a, p)
            && check.short(lanes)
        {
            findings.push(Finding::new(
                Cause::ThroughputBelowArrival,
                match starts_per_occurrence {
                    Some(c) => format!(
                        "{n} nodes arrive every A = {} but the windows start at most C = {c} \
                         rotations per P = {}: C*A < N*P; {}",
                        h(a),
                        h(p),
                        hint(&check)
                    ),
                    None => format!(
                        "{n} nodes arrive every A = {} but one rotation takes t_rot_est + \
                         cooldownAfter = {}{}; {}",
                        h(a),
                        h(slot),
                        at_once(lanes),
                        hint(&check)
                    ),
                },
                {
                    // Past the bound of 100 at once, no maxUnavailable or limit is the fix.
                    let most = usize::try_from(super::crd::MAX_UNAVAILABLE).unwrap_or(usize::MAX);
                    let raise = match check.lanes_needed() {
                        Some(m) if m > most => String::new(),
                        _ => format!("{raise}, "),
                    };
                    format!(
                        "{raise}lengthen or add maintenance windows, lower surge.cooldownAfter, or \
                         raise expireAfter"
                    )
                },
            ));
        }
        if a > Duration::zero()
            && let Some(g) = chances.filter(|g| *g > 0)
            && let check = throughput.burst(g, p)
            && check.short(lanes)
        {
            findings.push(Finding::new(
                Cause::ThroughputBurstShortfall,
                format!(
                    "if the pool's {n} nodes were created together (one scale-up), they would \
                     share one deadline, but its {g} chance(s) allow only {} rotation(s) before \
                     it{}: the others would be started earlier than the age threshold, one \
                     rotation slot apart; {}",
                    check.capacity(lanes),
                    at_once(lanes),
                    hint(&check)
                ),
                if starts_per_occurrence.is_some() {
                    "raise surge.maxUnavailable or minRotationChances, lengthen the windows, or \
                     use an ageThreshold override that starts earlier"
                } else {
                    "open 24/7, auto ageThreshold leaves only K minutes of lead: raise \
                     surge.maxUnavailable, use an ageThreshold override that starts earlier, or \
                     raise minRotationChances"
                },
            ));
        }
    }
    if let Some(gap) = profile.and_then(|p| p.shortest_gap)
        && slot > gap
    {
        findings.push(Finding::new(
            Cause::RotationSpansNextWindow,
            format!(
                "one rotation (t_rot_est + cooldownAfter = {}) outlasts the shortest gap \
                 between occurrences ({}): a rotation spills into the next occurrence; no \
                 surge.maxUnavailable changes that (every lane's rotation is as long)",
                h(slot),
                h(gap)
            ),
            "merge windows that are close together, or lower surge.cooldownAfter",
        ));
    }

    findings.sort_by_key(|f| (f.severity, f.reason));
    let mut assessment = Assessment {
        derived: Derived {
            period,
            always_open: profile.is_some_and(|p| p.always_open),
            t_rot,
            t_rot_est,
            provisioning_estimate: settings.provisioning_estimate,
            drain_estimate,
            age_threshold,
            age_threshold_overridden: matches!(settings.age_threshold, AgeThreshold::Override(_)),
            lead_time,
            chances,
            starts_per_occurrence,
            lanes,
            lanes_needed,
            lanes_limit,
            lanes_reason: String::new(),
            shortest_occurrence: profile.and_then(|p| p.shortest_occurrence),
            shortest_gap: profile.and_then(|p| p.shortest_gap),
        },
        findings,
    };
    assessment.derived.lanes_reason = lanes_reason(settings, &assessment.derived, pool);
    assessment
}

/// What the throughput checks need: one lane's starts per occurrence (`None`: open 24/7, one
/// start per slot), the slot, and the pool's nodes.
struct Throughput {
    per_lane_starts: Option<u64>,
    slot: Duration,
    nodes: u64,
}

/// One throughput check: it fires when `lanes * per_lane < demand`.
struct Check {
    per_lane: i128,
    demand: i128,
}

impl Throughput {
    /// Arrivals at age threshold `a`: `m*C1*A` against `N*P` (24/7: `m*A` against `N*slot`).
    /// `None` unless `a` is positive.
    fn arrival(&self, a: Duration, p: Duration) -> Option<Check> {
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
    fn burst(&self, g: i64, p: Duration) -> Check {
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
    fn capacity(&self, lanes: usize) -> i128 {
        self.per_lane.saturating_mul(i128::try_from(lanes).unwrap_or(i128::MAX))
    }

    /// The check fires with `lanes` lanes.
    fn short(&self, lanes: usize) -> bool {
        self.capacity(lanes) < self.demand
    }

    /// The fewest lanes (at least 1) for which the check does not fire; `None` when no number
    /// of lanes helps.
    fn lanes_needed(&self) -> Option<usize> {
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
fn lanes_hint(check: &Check, policy: MaxUnavailable, nodes: u64, lanes: usize) -> String {
    let Some(m) = check.lanes_needed() else {
        return "no surge.maxUnavailable is enough".into();
    };
    let most = usize::try_from(super::crd::MAX_UNAVAILABLE).unwrap_or(usize::MAX);
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
fn lanes_reason(settings: &Effective, d: &Derived, pool: &PoolFacts) -> String {
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
/// [`super::crd::MAX_UNAVAILABLE`]).
pub fn smallest_percent(lanes: usize, nodes: u64) -> Option<u32> {
    if !u32::try_from(lanes).is_ok_and(|l| l <= super::crd::MAX_UNAVAILABLE) {
        return None;
    }
    let n = u128::from(nodes);
    let m = u128::try_from(lanes.max(1)).ok()?;
    // ceil(n * p / 100) >= m  <=>  n * p > (m - 1) * 100.
    let p = ((m - 1) * 100).checked_div(n)? + 1;
    u32::try_from(p).ok().filter(|p| *p <= 100)
}

/// ` (m at once)` for more than one lane.
fn at_once(lanes: usize) -> String {
    if lanes > 1 { format!(" ({lanes} at once)") } else { String::new() }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `AVeryAggressive`: `subject` (the age threshold, or with windows the earliest due age) is
/// shorter than `P`.
fn aggressive(subject: String, p: Duration) -> Finding {
    Finding::new(
        Cause::AVeryAggressive,
        format!(
            "{subject} shorter than the window period P = {}: nodes are replaced soon after they \
             arrive",
            format_human(p)
        ),
        "raise expireAfter, or use fewer windows chances (minRotationChances)",
    )
}

/// `ageThreshold <a> is`, the subject of [`aggressive`] for auto and overrides.
fn threshold_is(a: Duration) -> String {
    format!("ageThreshold {} is", format_human(a))
}

/// The fatal finding of `ageThreshold: windows` when a node's life can hold fewer than K
/// chances.
fn windows_below_k(pc: &chances::PoolChances, e: Duration, k: u32, t_rot: Duration) -> Finding {
    let h = format_human;
    let fewest = pc.fewest;
    let needed = match pc.expire_after_needed {
        Some(needed) => format!(" (K chances for every node need expireAfter >= {})", h(needed)),
        None => String::new(),
    };
    let lower = if fewest >= 1 {
        format!("lower minRotationChances to {fewest}")
    } else {
        "lower minRotationChances".to_string()
    };
    Finding::new(
        Cause::WindowChancesBelowK,
        format!(
            "ageThreshold windows: with expireAfter {}, a node created as a window closes gets \
             only {fewest} window occurrence(s) in which a rotation can start and finish (t_rot \
             = {}) before its forced expiry, fewer than minRotationChances {k}{needed}",
            h(e),
            h(t_rot)
        ),
        match pc.expire_after_needed {
            Some(needed) => format!(
                "raise the NodePool's expireAfter to at least {}, add maintenance windows, or \
                 {lower}",
                h(needed)
            ),
            None => format!(
                "add maintenance windows (fewer than {} open in a year), or {lower}",
                u64::from(k) + 1
            ),
        },
    )
}

/// The remedy for an override with too few chances. With expireAfter shorter than the lead
/// K chances need, no ageThreshold helps: say what does instead of a negative duration.
fn lower_age_threshold(bound: Duration, otherwise: &str) -> String {
    if bound > Duration::zero() {
        format!("lower ageThreshold to at most {}, {otherwise}", format_human(bound))
    } else {
        "expireAfter is shorter than the lead minRotationChances needs: raise the NodePool's \
         expireAfter, lower minRotationChances, or add maintenance windows"
            .into()
    }
}

/// Layer 3 for one claim: its own `E <= K*P + t_rot` (auto or override alike) means it cannot
/// get K chances; it is counted, announced with `ShortLead`, and rotated at the first chance.
/// With `ageThreshold: windows` the claim's own life (from `created`) is what counts: fewer
/// than K chances in it ([`chances::last_chances`], searching `listed` first).
pub fn short_lead(
    settings: &Effective,
    expire_after: ExpireAfter,
    termination_grace_period: Option<Duration>,
    period: Duration,
    created: Option<DateTime<Utc>>,
    listed: &[Occurrence],
) -> Option<Finding> {
    let e = expire_after.duration()?;
    let k = settings.min_rotation_chances;
    if settings.age_threshold == AgeThreshold::Windows && settings.schedule.has_gaps() {
        let t_rot = settings.t_rot(termination_grace_period);
        let created = created?;
        let deadline = created.checked_add_signed(e)?;
        let got =
            chances::last_chances(&settings.schedule, listed, created, deadline, t_rot, k).count;
        return (got < k.max(1)).then(|| {
            Finding::new(
                Cause::ShortLead,
                format!(
                    "expireAfter {} leaves this node {got} window occurrence(s) in which a \
                     rotation can start and finish (t_rot = {}) before its forced expiry: it \
                     cannot get {k} window chances",
                    format_human(e),
                    format_human(t_rot)
                ),
                SHORT_LEAD_FIX,
            )
        });
    }
    let lead = derive::lead_time(k, period, settings.t_rot(termination_grace_period));
    (e <= lead).then(|| {
        Finding::new(
            Cause::ShortLead,
            format!(
                "expireAfter {} is not longer than K*P + t_rot = {}: this node cannot get {k} \
                 window chances",
                format_human(e),
                format_human(lead)
            ),
            SHORT_LEAD_FIX,
        )
    })
}

/// What `ShortLead` advises (the warning latch keys on it: one per claim, whatever the mode).
const SHORT_LEAD_FIX: &str =
    "it is rotated at its first chance; raise the NodePool's expireAfter for new nodes";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::settings::tests::spec_with;
    use chrono::TimeZone;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().unwrap_or_else(|| panic!("date"))
    }

    fn pool(e_days: i64, tgp: Option<Duration>, nodes: u64) -> PoolFacts {
        PoolFacts {
            expire_after: ExpireAfter::After(Duration::days(e_days)),
            termination_grace_period: tgp,
            nodes: Some(nodes),
            exhausted_limits: vec![],
            static_pool: false,
        }
    }

    fn reasons(a: &Assessment) -> Vec<Cause> {
        a.findings.iter().map(|f| f.reason).collect()
    }

    fn settings(windows: &[(&str, &[&str], &str, &str)]) -> Effective {
        Effective::from_spec(&spec_with(windows)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn worked_example_is_feasible() {
        let s = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let a = assess(&s, &pool(14, Some(Duration::hours(1)), 10), now());
        let d = &a.derived;
        assert_eq!(d.period, Some(Duration::days(4)));
        assert_eq!(d.t_rot, Duration::minutes(77));
        assert_eq!(d.t_rot_est, Duration::minutes(15));
        assert_eq!(
            d.age_threshold,
            Some(Duration::days(14) - (Duration::days(8) + Duration::minutes(77)))
        );
        assert_eq!(d.lead_time, Some(Duration::days(8) + Duration::minutes(77)));
        assert_eq!(d.starts_per_occurrence, Some(10));
        assert_eq!(d.chances, Some(2));
        assert!(!a.has_fatal(), "{:?}", a.findings);
        assert_eq!(reasons(&a), Vec::<Cause>::new());
    }

    #[test]
    fn weekly_window_is_fatal() {
        let s = settings(&[("Asia/Tokyo", &["Sat"], "02:00", "06:00")]);
        let a = assess(&s, &pool(14, Some(Duration::hours(1)), 20), now());
        assert!(a.has_fatal());
        assert_eq!(reasons(&a), [Cause::AgeThresholdNotPositive]);
        let f = &a.findings[0];
        assert_eq!(f.severity, Severity::Fatal);
        assert_eq!(f.reason.event_reason(), "Infeasible");
        assert!(f.message.contains("14d - (2*7d + 1h17m) = -1h17m"), "{}", f.message);
    }

    #[test]
    fn no_windows_and_k_below_one_are_fatal() {
        let mut spec = spec_with(&[]);
        spec.min_rotation_chances = 0;
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let a = assess(&s, &pool(14, Some(Duration::hours(1)), 20), now());
        assert_eq!(reasons(&a), [Cause::NoWindows, Cause::KBelowOne]);
        assert_eq!(a.derived.period, None);
    }

    #[test]
    fn layer_one_warnings() {
        let mut spec = spec_with(&[("UTC", &["Mon", "Wed", "Fri"], "02:00", "06:00")]);
        spec.min_rotation_chances = 1;
        spec.surge.retry_backoff = "10m".into();
        spec.surge.drain_estimate = Some("45m".into());
        spec.surge.match_node_requirements.required = vec!["kubernetes.io/arch".into()];
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let mut p = pool(21, Some(Duration::minutes(30)), 0);
        p.exhausted_limits = vec!["cpu".into()];
        p.static_pool = true;
        let a = assess(&s, &p, now());
        assert_eq!(
            reasons(&a),
            [
                Cause::KBelowTwo,
                Cause::HardCapExceeded,
                Cause::RetryBackoffShort,
                Cause::DrainEstimateAboveTGP,
                Cause::NoLimitsHeadroom,
                Cause::StaticNodePool,
                Cause::ZoneNotRequired,
            ]
        );
        let p = pool(14, None, 0);
        let a = assess(
            &settings(&[("UTC", &["Mon"], "02:00", "06:00")]),
            &PoolFacts { expire_after: ExpireAfter::Never, ..p },
            now(),
        );
        assert_eq!(reasons(&a), [Cause::HardCapExceeded, Cause::TGPUnset]);
        assert_eq!(a.derived.age_threshold, None);
    }

    #[test]
    fn very_aggressive_auto_threshold() {
        // Daily 1h window, E = 3d, K = 2: P = 1d, A = 3d - (2d + 1h17m) = 22h43m < P.
        let all: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        let s = settings(&[("UTC", all, "02:00", "03:00")]);
        let a = assess(&s, &pool(3, Some(Duration::hours(1)), 1), now());
        assert_eq!(reasons(&a), [Cause::AVeryAggressive]);
    }

    #[test]
    fn override_chances() {
        let mut spec = spec_with(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let t = Some(Duration::hours(1));
        spec.age_threshold = "120h".into(); // G = floor((14d - 5d - 1h17m) / 4d) = 2
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let a = assess(&s, &pool(14, t, 2), now());
        assert_eq!(a.derived.chances, Some(2));
        assert!(a.findings.is_empty(), "{:?}", a.findings);
        spec.age_threshold = "168h".into(); // G = floor((7d - 1h17m) / 4d) = 1
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reasons(&assess(&s, &pool(14, t, 2), now())), [Cause::OverrideGBelowK]);
        spec.age_threshold = "264h".into(); // G = floor((3d - 1h17m) / 4d) = 0
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let a = assess(&s, &pool(14, t, 2), now());
        assert_eq!(reasons(&a), [Cause::OverrideBelowOneChance]);
        assert!(a.has_fatal());
        assert!(a.findings[0].fix.contains("at most 5d22h43m"), "{}", a.findings[0].fix);
        // E = 8d < K*P + t_rot: no ageThreshold gives K chances; never advise a negative one.
        spec.age_threshold = "24h".into();
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let a = assess(&s, &pool(8, t, 2), now());
        let f = a.findings.iter().find(|f| f.reason == Cause::OverrideGBelowK);
        let fix = &f.unwrap_or_else(|| panic!("{:?}", a.findings)).fix;
        assert!(fix.contains("raise the NodePool's expireAfter") && !fix.contains('-'), "{fix}");
    }

    #[test]
    fn throughput() {
        // Worked example with 200 nodes: C*A = 10 * 5.9d < 200 * 4d; K*C = 20 < 200.
        let s = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let a = assess(&s, &pool(14, Some(Duration::hours(1)), 200), now());
        assert_eq!(reasons(&a), [Cause::ThroughputBelowArrival, Cause::ThroughputBurstShortfall]);
        // 14 nodes: arrivals fine (10 * 5d22h43m >= 14 * 4d), burst 20 >= 14.
        let a = assess(&s, &pool(14, Some(Duration::hours(1)), 14), now());
        assert!(a.findings.is_empty(), "{:?}", a.findings);
        // Two windows 30 minutes apart: a 25m rotation slot fits, 45m does not.
        let mut spec =
            spec_with(&[("UTC", &["Sat"], "02:00", "04:00"), ("UTC", &["Sat"], "04:30", "06:00")]);
        spec.surge.cooldown_after = "30m".into();
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let a = assess(&s, &pool(20, Some(Duration::hours(1)), 1), now());
        assert!(reasons(&a).contains(&Cause::RotationSpansNextWindow), "{:?}", a.findings);
        let gap = a.derived.shortest_gap;
        assert_eq!(gap, Some(Duration::minutes(30)));
    }

    #[test]
    fn always_open_throughput_uses_the_rotation_rate() {
        let all: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        let s = settings(&[("UTC", all, "00:00", "00:00")]);
        let a = assess(&s, &pool(14, Some(Duration::hours(1)), 3), now());
        assert!(a.derived.always_open);
        assert_eq!(a.derived.period, Some(Duration::minutes(1)));
        assert_eq!(a.derived.starts_per_occurrence, None);
        // Lead time is K*1m + t_rot: a batch of 3 sharing a deadline cannot all finish.
        assert_eq!(reasons(&a), [Cause::ThroughputBurstShortfall]);
        let a = assess(&s, &pool(14, Some(Duration::hours(1)), 1), now());
        assert!(a.findings.is_empty(), "{:?}", a.findings);
    }

    #[test]
    fn short_lead_per_claim() {
        let s = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let p = Duration::days(4);
        let tgp = Some(Duration::hours(1));
        let short = |e| short_lead(&s, e, tgp, p, None, &[]);
        assert_eq!(short(ExpireAfter::After(Duration::days(14))), None);
        let f = short(ExpireAfter::After(Duration::days(8) + Duration::minutes(77)));
        assert_eq!(f.map(|f| f.reason), Some(Cause::ShortLead));
        assert_eq!(short(ExpireAfter::Never), None);
    }

    fn windows_mode(windows: &[(&str, &[&str], &str, &str)]) -> Effective {
        let mut spec = spec_with(windows);
        spec.age_threshold = "windows".into();
        Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn windows_mode_guarantees_k_and_says_how_early() {
        // The worked example under windows: K = 2 guaranteed, due 3d1h17m to 7d1h17m before the
        // deadline, so a node falls due at 6d22h43m at the earliest (auto: 5d22h43m).
        let s = windows_mode(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let t = Some(Duration::hours(1));
        let a = assess(&s, &pool(14, t, 10), now());
        assert_eq!(a.derived.chances, Some(2));
        assert_eq!(a.derived.lead_time, Some(Duration::days(7) + Duration::minutes(77)));
        assert_eq!(
            a.derived.age_threshold,
            Some(Duration::days(7) - Duration::minutes(77)),
            "the earliest due age"
        );
        assert!(a.findings.is_empty(), "{:?}", a.findings);
        // E = 7d: infeasible for auto (8d1h17m of lead), feasible here, but a node created in
        // a window that is already one of its last two is due at once.
        let a = assess(&s, &pool(7, t, 1), now());
        assert_eq!(reasons(&a), [Cause::AVeryAggressive]);
        assert_eq!(a.derived.age_threshold, Some(Duration::zero()));
        assert!(a.findings[0].message.starts_with("a node can fall due at age 0s"));
        let auto = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        assert_eq!(
            reasons(&assess(&auto, &pool(7, t, 1), now())),
            [Cause::AgeThresholdNotPositive]
        );
    }

    #[test]
    fn windows_mode_with_fewer_than_k_chances_is_fatal_and_says_what_to_change() {
        // E = 6d: a node created as Wednesday's window closes sees only Saturday's before its
        // deadline (the Wednesday after is 6d20h away). Every node needs 6d20h + t_rot.
        let s = windows_mode(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let a = assess(&s, &pool(6, Some(Duration::hours(1)), 1), now());
        assert_eq!(reasons(&a), [Cause::WindowChancesBelowK]);
        assert!(a.has_fatal());
        assert_eq!(a.derived.chances, Some(1));
        let f = &a.findings[0];
        assert_eq!(f.reason.event_reason(), "Infeasible");
        assert!(f.message.contains("gets only 1 window occurrence(s)"), "{}", f.message);
        assert_eq!(
            f.fix,
            "raise the NodePool's expireAfter to at least 6d21h17m, add maintenance windows, or \
             lower minRotationChances to 1"
        );
        let short_by = Duration::hours(21) + Duration::minutes(17);
        assert_eq!(a.derived.age_threshold, Some(-short_by), "E minus what K chances need");
        // A weekly window cannot give every node two chances in 8 days.
        let monthly = windows_mode(&[("UTC", &["Sat"], "02:00", "06:00")]);
        let a = assess(&monthly, &pool(8, Some(Duration::hours(1)), 1), now());
        assert_eq!(reasons(&a), [Cause::WindowChancesBelowK]);
        assert_eq!(a.derived.chances, Some(1));
    }

    #[test]
    fn windows_mode_open_around_the_clock_is_auto() {
        let all: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        let w = assess(&windows_mode(&[("UTC", all, "00:00", "00:00")]), &pool(14, None, 1), now());
        let a = assess(&settings(&[("UTC", all, "00:00", "00:00")]), &pool(14, None, 1), now());
        assert_eq!(w, a);
    }

    #[test]
    fn short_lead_per_claim_under_windows_counts_its_own_life() {
        // Wed and Sat 02:00-06:00 UTC, K = 2, E = 4d: created on a Wednesday at 05:00 (inside
        // the window) a claim has two chances, created at 07:00 only Saturday's.
        let s = windows_mode(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
        let tgp = Some(Duration::hours(1));
        let e = ExpireAfter::After(Duration::days(4));
        let p = Duration::days(4);
        let at = |h| Utc.with_ymd_and_hms(2026, 6, 3, h, 0, 0).single();
        assert_eq!(short_lead(&s, e, tgp, p, at(5), &[]), None);
        let f = short_lead(&s, e, tgp, p, at(7), &[]).unwrap_or_else(|| panic!("short"));
        assert_eq!(f.reason, Cause::ShortLead);
        assert!(f.message.contains("leaves this node 1 window occurrence(s)"), "{}", f.message);
        assert_eq!(short_lead(&s, ExpireAfter::Never, tgp, p, at(7), &[]), None);
        // Auto judges E alone: 4d <= 2*4d + 1h17m.
        let auto = settings(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
        assert!(short_lead(&auto, e, tgp, p, at(5), &[]).is_some());
    }

    #[test]
    fn reason_names_round_trip() {
        for r in [Cause::TGPUnset, Cause::DrainEstimateAboveTGP, Cause::ShortLead] {
            let json = serde_json::to_string(&r).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
        }
    }

    fn with_max_unavailable(windows: &[(&str, &[&str], &str, &str)], m: IntOrString) -> Effective {
        let mut spec = spec_with(windows);
        spec.surge.max_unavailable = m;
        Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"))
    }

    fn message(a: &Assessment, reason: Cause) -> String {
        let f = a.findings.iter().find(|f| f.reason == reason);
        f.map(|f| f.message.clone()).unwrap_or_else(|| panic!("no {reason}: {:?}", a.findings))
    }

    #[test]
    fn throughput_findings_say_which_max_unavailable_fixes_them() {
        // Worked example with 200 nodes: one lane starts 10 per occurrence. Arrivals need
        // ceil(200 * 4d / (10 * 5d22h43m)) = 14 lanes, a burst ceil(200 / (2 * 10)) = 10.
        const TOKYO: &[(&str, &[&str], &str, &str)] =
            &[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")];
        let t = Some(Duration::hours(1));
        let assess_with =
            |m: IntOrString| assess(&with_max_unavailable(TOKYO, m), &pool(14, t, 200), now());
        let one = assess_with(IntOrString::Int(1));
        assert_eq!(one.derived.lanes, 1);
        assert_eq!(one.derived.lanes_needed, Some(14));
        assert_eq!(one.derived.starts_per_occurrence, Some(10));
        let arrival = message(&one, Cause::ThroughputBelowArrival);
        assert!(arrival.ends_with("surge.maxUnavailable 14 or more would fix it"), "{arrival}");
        let burst = message(&one, Cause::ThroughputBurstShortfall);
        assert!(burst.ends_with("surge.maxUnavailable 10 or more would fix it"), "{burst}");
        // The smallest lane count that fixes each is exactly the one it names.
        let reasons_with = |m: i32| reasons(&assess_with(IntOrString::Int(m)));
        assert_eq!(
            reasons_with(9),
            [Cause::ThroughputBelowArrival, Cause::ThroughputBurstShortfall]
        );
        assert_eq!(reasons_with(10), [Cause::ThroughputBelowArrival]);
        assert_eq!(reasons_with(13), [Cause::ThroughputBelowArrival]);
        assert_eq!(reasons_with(14), []);
        let fourteen = assess_with(IntOrString::Int(14));
        assert_eq!(fourteen.derived.starts_per_occurrence, Some(140), "C = m * 10");
        assert_eq!(fourteen.derived.lanes_needed, Some(14), "what the pool needs, not the policy");
        // A percentage is resolved against the nodes and advised as one: 5% of 200 is 10 lanes,
        // 7% (14) is the smallest that fixes the arrivals.
        let five = assess_with(IntOrString::String("5%".into()));
        assert_eq!(five.derived.lanes, 10);
        assert_eq!(reasons(&five), [Cause::ThroughputBelowArrival]);
        let arrival = message(&five, Cause::ThroughputBelowArrival);
        assert!(
            arrival.ends_with(
                "surge.maxUnavailable \"7%\" (14 of 200 nodes at once) or more would fix it"
            ),
            "{arrival}"
        );
        assert_eq!(reasons(&assess_with(IntOrString::String("7%".into()))), []);
        assert_eq!(reasons(&assess_with(IntOrString::String("6%".into()))).len(), 1);
    }

    /// `maxUnavailable: auto` uses exactly the lanes the pool needs (so no throughput finding),
    /// within its limit; a limit below the need leaves the arrival warning, which names the
    /// limit to raise, in the limit's own form.
    #[test]
    fn auto_uses_the_need_within_its_limit_and_names_the_limit_to_raise() {
        const TOKYO: &[(&str, &[&str], &str, &str)] =
            &[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")];
        let t = Some(Duration::hours(1));
        let auto = |limit: Option<IntOrString>, nodes: u64| {
            let mut spec = spec_with(TOKYO);
            spec.surge.max_unavailable = IntOrString::String("auto".into());
            spec.surge.max_unavailable_limit = limit;
            let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
            let facts = pool(14, t, nodes);
            let a = assess(&s, &facts, now());
            let why = a.derived.lanes_reason.clone();
            (a, why)
        };
        // 200 nodes need 14 (the worked example above); 10% of 200 is 20.
        let (a, why) = auto(None, 200);
        assert_eq!(
            (a.derived.lanes, a.derived.lanes_needed, a.derived.lanes_limit),
            (14, Some(14), Some(20))
        );
        assert_eq!(reasons(&a), [], "auto sizes the pool: no throughput finding");
        assert_eq!(
            why,
            "auto: the fewest that keep every node's 2 chance(s) for 200 nodes: 14 \
             (maxUnavailableLimit 10%: 20)"
        );
        // The pool grows: auto follows it.
        let (bigger, _) = auto(None, 240);
        assert_eq!(bigger.derived.lanes, 17, "what plan advises for 240 nodes");
        // A count limit below the need: capped, and the warning names the limit.
        let (capped, why) = auto(Some(IntOrString::Int(10)), 200);
        assert_eq!(capped.derived.lanes, 10);
        assert_eq!(why, "auto: 14 needed for 200 nodes, capped at maxUnavailableLimit 10 (10)");
        let arrival = message(&capped, Cause::ThroughputBelowArrival);
        assert!(
            arrival.ends_with("surge.maxUnavailableLimit 14 or more would fix it"),
            "{arrival}"
        );
        let finding = capped.findings.iter().find(|f| f.reason == Cause::ThroughputBelowArrival);
        assert!(
            finding.is_some_and(|f| f.fix.starts_with("raise surge.maxUnavailableLimit,")),
            "{finding:?}"
        );
        // A percentage limit is advised as one: 7% of 200 is the smallest that holds 14.
        let (five, _) = auto(Some(IntOrString::String("5%".into())), 200);
        assert_eq!(five.derived.lanes, 10);
        let arrival = message(&five, Cause::ThroughputBelowArrival);
        assert!(
            arrival.ends_with(
                "surge.maxUnavailableLimit \"7%\" (14 of 200 nodes at once) or more would fix it"
            ),
            "{arrival}"
        );
        // More than 100 needed: auto stops at 100 even under a 100% limit, and the warning says
        // that no limit fixes it.
        let (huge, why) = auto(Some(IntOrString::String("100%".into())), 2000);
        assert_eq!((huge.derived.lanes, huge.derived.lanes_limit), (100, Some(100)));
        let needed = huge.derived.lanes_needed.unwrap_or_default();
        assert!(needed > 100, "{needed}");
        assert_eq!(
            why,
            format!(
                "auto: {needed} needed for 2000 nodes, capped at maxUnavailableLimit 100% (100)"
            )
        );
        let arrival = message(&huge, Cause::ThroughputBelowArrival);
        assert!(
            arrival.ends_with(&format!(
                "it needs {needed} rotations at once, more than surge.maxUnavailable allows \
                 (100): lengthen or add maintenance windows, or split the pool"
            )),
            "{arrival}"
        );
        let finding = huge.findings.iter().find(|f| f.reason == Cause::ThroughputBelowArrival);
        assert!(
            finding.is_some_and(|f| f.fix.starts_with("lengthen or add maintenance windows,")),
            "no limit to raise: {finding:?}"
        );
        // No node count: one lane, and why.
        let mut spec = spec_with(TOKYO);
        spec.surge.max_unavailable = IntOrString::String("auto".into());
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let mut facts = pool(14, t, 1);
        facts.nodes = None;
        let a = assess(&s, &facts, now());
        assert_eq!(a.derived.lanes, 1);
        assert_eq!(a.derived.lanes_reason, "auto: 1, the need is unknown (node count unknown)");
    }

    #[test]
    fn windows_mode_counts_lanes_in_its_burst_capacity_too() {
        // ageThreshold windows on the worked example: K = 2 chances of 10 starts per lane; the
        // earliest due age 6d22h43m makes arrivals need ceil(200 * 4d / (10 * 6d22h43m)) = 12.
        let mut spec = spec_with(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        spec.age_threshold = "windows".into();
        let t = Some(Duration::hours(1));
        let reasons_with = |m: i32| {
            let mut spec = spec.clone();
            spec.surge.max_unavailable = IntOrString::Int(m);
            let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
            reasons(&assess(&s, &pool(14, t, 200), now()))
        };
        let both = [Cause::ThroughputBelowArrival, Cause::ThroughputBurstShortfall];
        assert_eq!(reasons_with(9), both);
        assert_eq!(reasons_with(10), [Cause::ThroughputBelowArrival]);
        assert_eq!(reasons_with(11), [Cause::ThroughputBelowArrival]);
        assert_eq!(reasons_with(12), []);
    }

    #[test]
    fn lanes_open_around_the_clock_start_one_each_per_slot() {
        // 24/7, K = 2: the lead is 2m + t_rot, a 25m slot gives each lane one start in it, so
        // three nodes created together need three lanes.
        const ALL: &[(&str, &[&str], &str, &str)] =
            &[("UTC", &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], "00:00", "00:00")];
        let t = Some(Duration::hours(1));
        let one = assess(&with_max_unavailable(ALL, IntOrString::Int(1)), &pool(14, t, 3), now());
        let burst = message(&one, Cause::ThroughputBurstShortfall);
        assert!(burst.ends_with("surge.maxUnavailable 3 or more would fix it"), "{burst}");
        let two = assess(&with_max_unavailable(ALL, IntOrString::Int(2)), &pool(14, t, 3), now());
        let burst = message(&two, Cause::ThroughputBurstShortfall);
        assert!(burst.contains("allow only 2 rotation(s) before it (2 at once)"), "{burst}");
        let three = assess(&with_max_unavailable(ALL, IntOrString::Int(3)), &pool(14, t, 3), now());
        assert!(three.findings.is_empty(), "{:?}", three.findings);
        assert_eq!(three.derived.starts_per_occurrence, None, "continuous");
        // Arrivals open 24/7: one lane rotates a node per 25m slot; 14d of lead holds plenty.
        assert_eq!(three.derived.lanes_needed, Some(1));
    }

    #[test]
    fn lanes_do_not_shorten_a_rotation_that_spans_the_next_window() {
        let mut spec =
            spec_with(&[("UTC", &["Sat"], "02:00", "04:00"), ("UTC", &["Sat"], "04:30", "06:00")]);
        spec.surge.cooldown_after = "30m".into();
        spec.surge.max_unavailable = IntOrString::Int(4);
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let a = assess(&s, &pool(20, Some(Duration::hours(1)), 1), now());
        let spans = message(&a, Cause::RotationSpansNextWindow);
        assert!(spans.contains("no surge.maxUnavailable changes that"), "{spans}");
    }

    #[test]
    fn smallest_percent_resolves_to_at_least_the_lanes() {
        for nodes in [1u64, 3, 7, 10, 99, 200, 241, 1000] {
            for lanes in 1..=usize::try_from(nodes).unwrap_or(0).min(100) {
                let p = smallest_percent(lanes, nodes).unwrap_or_else(|| panic!("{lanes}/{nodes}"));
                let n = usize::try_from(nodes).unwrap_or(0);
                assert!(IntOrPercent::Percent(p).resolve(n) >= lanes, "{p}% of {nodes}");
                if p > 1 {
                    assert!(IntOrPercent::Percent(p - 1).resolve(n) < lanes, "{p}% of {nodes}");
                }
            }
        }
        assert_eq!(smallest_percent(11, 10), None, "more lanes than nodes");
        assert_eq!(smallest_percent(101, 1000), None, "more lanes than maxUnavailable allows");
        assert_eq!(smallest_percent(1, 0), None);
    }
}
