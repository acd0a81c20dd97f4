//! What a RotationPolicy will do to a NodePool, before it is applied: the report behind
//! `noderotation plan` (the command itself, with its files, flags and exit codes, is
//! `crate::cli::plan`).
//!
//! P, A, t_rot, t_rot_est, C, G, every finding with severity and fix, and the next occurrences in
//! the policy's time zones and UTC. Pure: the caller reads the files and passes `now`.
//!
//! - `input.rs`: the manifests read: RotationPolicies (strict field validation included), the
//!   policy to plan, the pool from a NodePool.
//! - `report.rs`: [`PlanReport`], as `--output json` and `yaml` print it, and how it is built
//!   from an assessment.
//! - `render.rs`: the human rendering ([`render_human`]).
use anyhow::anyhow;
use chrono::{DateTime, Duration, Utc};

use super::chances;
use super::crd::RotationPolicy;
use super::derive;
use super::feasibility::{self, Assessment, PoolFacts};
use super::settings::{AgeThreshold, Effective};
use super::window::{HORIZON, Occurrence, Schedule};

mod input;
mod render;
mod report;

pub(crate) use input::{parse_policies, pick_policy, pool_from_manifest, pool_from_nodepool};
pub(crate) use render::render_human;
use report::build_report;
pub use report::{
    DerivedReport, LifetimeReport, LocalOccurrence, OccurrenceReport, PlanReport, PoolInput,
    SettingsReport, local_occurrences,
};

/// Exit code when the plan was printed and a fatal finding exists: no rotation would start.
pub(crate) const EXIT_INFEASIBLE: i32 = 3;

/// The policy's effective settings, or every invalid field named with `file`.
pub(crate) fn settings_of(policy: &RotationPolicy, file: &str) -> anyhow::Result<Effective> {
    let policy_name = policy.metadata.name.clone().unwrap_or_default();
    Effective::from_spec(&policy.spec).map_err(|invalid| {
        let lines: Vec<String> =
            invalid.errors.iter().map(|e| format!("{file}: {}: {}", e.field, e.problem)).collect();
        anyhow!("RotationPolicy {policy_name} is invalid:\n{}", lines.join("\n"))
    })
}

/// The report for `policy` (read from `file`) on the pool `facts` describe, at `now`.
pub(crate) fn report(
    policy: &RotationPolicy,
    file: &str,
    settings: &Effective,
    pool_input: PoolInput,
    facts: &PoolFacts,
    now: DateTime<Utc>,
    occurrences: usize,
) -> PlanReport {
    let policy_name = policy.metadata.name.clone().unwrap_or_default();
    let assessment = feasibility::assess(settings, facts, now);
    // Open 24/7: there is nothing to list (the one run is clipped to the horizon).
    let next = if assessment.derived.always_open {
        Vec::new()
    } else {
        upcoming(&settings.schedule, now, occurrences)
    };
    let lifetimes = lifetimes(settings, facts, &assessment, now);
    let mut report =
        build_report(&policy_name, file, pool_input, settings, &assessment, &next, now);
    report.derived.lifetime_used = lifetimes;
    report
}

/// The share of expireAfter a node lives under each age-threshold mode, so that `plan` shows
/// what `auto` and `windows` would give (and the override, when the policy has one). Empty
/// without a deadline or windows.
fn lifetimes(
    settings: &Effective,
    facts: &PoolFacts,
    assessment: &Assessment,
    now: DateTime<Utc>,
) -> Vec<LifetimeReport> {
    let d = &assessment.derived;
    let (Some(e), Some(p)) = (facts.expire_after.duration(), d.period) else { return Vec::new() };
    let k = settings.min_rotation_chances;
    // Replaced at the first window after A: between A and A + P.
    let after = |a: Duration| (a > Duration::zero()).then(|| (a, (a + p).min(e)));
    let auto = after(e - derive::lead_time(k, p, d.t_rot));
    let windows = if settings.schedule.has_gaps() {
        // Replaced as its K-th last chance opens: E minus the longest to the shortest lead.
        chances::pool_chances(&settings.schedule, now, e, d.t_rot, k)
            .filter(|pc| pc.fewest >= k.max(1))
            .and_then(|pc| pc.lead)
            .map(|(short, long)| ((e - long).max(Duration::zero()), e - short))
    } else {
        auto
    };
    let entry = |mode: &str, in_use: bool, ages: Option<(Duration, Duration)>| {
        let pct = |a: Duration| a.num_seconds() * 100 / e.num_seconds().max(1);
        LifetimeReport {
            mode: mode.to_string(),
            in_use,
            min_age_seconds: ages.map(|(lo, _)| lo.num_seconds()),
            max_age_seconds: ages.map(|(_, hi)| hi.num_seconds()),
            min_percent: ages.map(|(lo, _)| pct(lo)),
            max_percent: ages.map(|(_, hi)| pct(hi)),
        }
    };
    let mut out = vec![
        entry(AgeThreshold::AUTO, settings.age_threshold == AgeThreshold::Auto, auto),
        entry(AgeThreshold::WINDOWS, settings.age_threshold == AgeThreshold::Windows, windows),
    ];
    if let AgeThreshold::Override(a) = settings.age_threshold {
        out.push(entry("override", true, after(a)));
    }
    out
}

/// The next `count` occurrences starting from the one in progress at `now`, if any.
fn upcoming(schedule: &Schedule, now: DateTime<Utc>, count: usize) -> Vec<Occurrence> {
    if schedule.is_empty() || count == 0 {
        return Vec::new();
    }
    let mut reach = Duration::weeks(5);
    loop {
        let found = schedule.occurrences(now, now + reach);
        if found.len() >= count || reach >= HORIZON {
            return found.into_iter().take(count).collect();
        }
        reach = (reach * 4).min(HORIZON);
    }
}
