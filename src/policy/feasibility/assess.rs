//! [`assess`]: layers 1 and 2 of feasibility for one pool (the policy against the pool template,
//! then throughput), and the layer-1 findings about the age threshold it builds.
use chrono::{DateTime, Duration, Utc};

use super::throughput::{Check, Throughput, lanes_hint, lanes_reason};
use super::{Assessment, Cause, Derived, Finding, HARD_LIFETIME_CAP, PoolFacts, ZONE_KEY};
use crate::policy::chances;
use crate::policy::derive;
use crate::policy::duration::{ExpireAfter, format_human};
use crate::policy::settings::{AgeThreshold, Effective, MaxUnavailable};

/// Layers 1 and 2 for a pool governed by `settings`, with the window horizon anchored at `now`.
pub(crate) fn assess(settings: &Effective, pool: &PoolFacts, now: DateTime<Utc>) -> Assessment {
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
                    let most =
                        usize::try_from(crate::policy::crd::MAX_UNAVAILABLE).unwrap_or(usize::MAX);
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
