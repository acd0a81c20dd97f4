//! The plan as data: [`PlanReport`] and its parts, as `--output json` and `yaml` print them,
//! built from a policy's settings, its assessment and the upcoming occurrences.
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::policy::duration;
use crate::policy::feasibility::{Assessment, Finding};
use crate::policy::settings::{AgeThreshold, Effective, MaxUnavailable};
use crate::policy::window::Occurrence;

/// The plan, as `--output json` prints it. Durations are whole seconds; instants RFC 3339.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    pub policy: String,
    pub policy_file: String,
    pub evaluated_at: String,
    pub node_pool: PoolInput,
    pub settings: SettingsReport,
    pub windows: Vec<String>,
    pub derived: DerivedReport,
    pub findings: Vec<Finding>,
    /// A fatal finding exists (exit code 3).
    pub fatal: bool,
    pub next_occurrences: Vec<OccurrenceReport>,
}

/// The pool the plan is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolInput {
    /// The NodePool file, or `flags`.
    pub source: String,
    pub name: Option<String>,
    pub expire_after: String,
    pub termination_grace_period: Option<String>,
    pub nodes: Option<u64>,
    /// Whether the policy's selector matches the NodePool's labels (NodePool file only).
    pub selected_by_policy: Option<bool>,
}

/// The policy's effective surge settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsReport {
    pub min_rotation_chances: u32,
    /// `surge.maxUnavailable` as written: `1`, `3`, `10%` or `auto`.
    #[serde(default)]
    pub max_unavailable: String,
    /// With `auto`: `surge.maxUnavailableLimit` as in effect (`10%` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable_limit: Option<String>,
    /// `auto` or the override as a Go duration.
    pub age_threshold: String,
    pub ready_timeout_seconds: i64,
    pub cooldown_after_seconds: i64,
    pub failure_pause_seconds: i64,
    pub retry_backoff_seconds: i64,
    pub max_retry_backoff_seconds: i64,
    pub forceful_fallback: bool,
    pub whole_node_reservation: bool,
    pub required_node_labels: Vec<String>,
    pub preferred_node_labels: Vec<String>,
}

/// The derived quantities (§3.2 symbols in the comments).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DerivedReport {
    /// `P`.
    pub window_period_seconds: Option<i64>,
    pub always_open: bool,
    /// `t_rot`.
    pub t_rot_seconds: i64,
    /// `t_rot_est`.
    pub t_rot_estimate_seconds: i64,
    pub provisioning_estimate_seconds: i64,
    pub drain_estimate_seconds: i64,
    /// `A`.
    pub age_threshold_seconds: Option<i64>,
    pub age_threshold_overridden: bool,
    pub lead_time_seconds: Option<i64>,
    /// `G` (`K` for auto).
    pub guaranteed_chances: Option<i64>,
    /// `ageThreshold: windows` counts the real occurrences (false for auto, an override, or a
    /// union open 24/7, where windows is auto).
    #[serde(default)]
    pub counts_occurrences: bool,
    /// The share of expireAfter a node lives under each mode (auto, windows, and the override).
    #[serde(default)]
    pub lifetime_used: Vec<LifetimeReport>,
    /// `m`: rotations in flight at once, `maxUnavailable` resolved against the pool's nodes.
    #[serde(default)]
    pub rotation_lanes: u64,
    /// The smallest `m` the pool needs: its capacity per window period covers the nodes that
    /// fall due per period at the auto age threshold. `None` without a node count, a deadline,
    /// windows or a positive auto age threshold.
    #[serde(default)]
    pub rotation_lanes_needed: Option<u64>,
    /// `rotation_lanes >= rotation_lanes_needed`.
    #[serde(default)]
    pub rotation_lanes_suffice: Option<bool>,
    /// With `maxUnavailable: auto`: its limit resolved against the pool's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation_lanes_limit: Option<u64>,
    /// Why `m` is what it is: the policy's value, or what `auto` chose and why.
    #[serde(default)]
    pub rotation_lanes_reason: String,
    /// `C`, with the `m` lanes.
    pub starts_per_occurrence: Option<u64>,
    pub shortest_occurrence_seconds: Option<i64>,
    pub shortest_gap_seconds: Option<i64>,
}

/// How long a node lives under one age-threshold mode: the age range at which it is replaced.
/// The ages and shares are `None` when the mode is infeasible for the pool (no rotation starts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifetimeReport {
    /// `auto`, `windows` or `override`.
    pub mode: String,
    /// The policy's own mode.
    pub in_use: bool,
    pub min_age_seconds: Option<i64>,
    pub max_age_seconds: Option<i64>,
    /// The ages as whole percent of expireAfter (rounded down).
    pub min_percent: Option<i64>,
    pub max_percent: Option<i64>,
}

/// One upcoming occurrence, in UTC and in each of the policy's zones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OccurrenceReport {
    pub start: String,
    pub end: String,
    pub duration_seconds: i64,
    pub local: Vec<LocalOccurrence>,
}

/// An occurrence in one zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalOccurrence {
    pub timezone: String,
    pub start: String,
    pub end: String,
}

/// `o` in each of `zones`, RFC 3339 with the zone's offset.
pub fn local_occurrences(o: &Occurrence, zones: &[chrono_tz::Tz]) -> Vec<LocalOccurrence> {
    zones
        .iter()
        .map(|tz| LocalOccurrence {
            timezone: tz.name().to_string(),
            start: o.start.with_timezone(tz).to_rfc3339_opts(SecondsFormat::Secs, true),
            end: o.end.with_timezone(tz).to_rfc3339_opts(SecondsFormat::Secs, true),
        })
        .collect()
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(super) fn build_report(
    policy: &str,
    file: &str,
    node_pool: PoolInput,
    s: &Effective,
    a: &Assessment,
    next: &[Occurrence],
    now: DateTime<Utc>,
) -> PlanReport {
    let d = &a.derived;
    let secs = |d: Duration| d.num_seconds();
    let zones = s.schedule.timezones();
    PlanReport {
        policy: policy.to_string(),
        policy_file: file.to_string(),
        evaluated_at: rfc3339(now),
        node_pool,
        settings: SettingsReport {
            min_rotation_chances: s.min_rotation_chances,
            max_unavailable: s.max_unavailable.to_string(),
            max_unavailable_limit: match s.max_unavailable {
                MaxUnavailable::Auto { limit } => Some(limit.to_string()),
                MaxUnavailable::Fixed(_) => None,
            },
            age_threshold: match s.age_threshold {
                AgeThreshold::Auto => AgeThreshold::AUTO.into(),
                AgeThreshold::Windows => AgeThreshold::WINDOWS.into(),
                AgeThreshold::Override(d) => duration::format(d),
            },
            ready_timeout_seconds: secs(s.ready_timeout),
            cooldown_after_seconds: secs(s.cooldown_after),
            failure_pause_seconds: secs(s.failure_pause),
            retry_backoff_seconds: secs(s.retry_backoff),
            max_retry_backoff_seconds: secs(s.backoff(u32::MAX)),
            forceful_fallback: s.forceful_fallback,
            whole_node_reservation: s.whole_node_reservation,
            required_node_labels: s.match_node_requirements.required.clone(),
            preferred_node_labels: s.match_node_requirements.preferred.clone(),
        },
        windows: s.schedule.entries().iter().map(ToString::to_string).collect(),
        derived: DerivedReport {
            window_period_seconds: d.period.map(secs),
            always_open: d.always_open,
            t_rot_seconds: secs(d.t_rot),
            t_rot_estimate_seconds: secs(d.t_rot_est),
            provisioning_estimate_seconds: secs(d.provisioning_estimate),
            drain_estimate_seconds: secs(d.drain_estimate),
            age_threshold_seconds: d.age_threshold.map(secs),
            age_threshold_overridden: d.age_threshold_overridden,
            lead_time_seconds: d.lead_time.map(secs),
            guaranteed_chances: d.chances,
            counts_occurrences: s.age_threshold == AgeThreshold::Windows && s.schedule.has_gaps(),
            lifetime_used: Vec::new(),
            rotation_lanes: u64::try_from(d.lanes).unwrap_or(u64::MAX),
            rotation_lanes_needed: d.lanes_needed.and_then(|m| u64::try_from(m).ok()),
            rotation_lanes_suffice: d.lanes_needed.map(|needed| d.lanes >= needed),
            rotation_lanes_limit: d.lanes_limit.and_then(|m| u64::try_from(m).ok()),
            rotation_lanes_reason: d.lanes_reason.clone(),
            starts_per_occurrence: d.starts_per_occurrence,
            shortest_occurrence_seconds: d.shortest_occurrence.map(secs),
            shortest_gap_seconds: d.shortest_gap.map(secs),
        },
        findings: a.findings.clone(),
        fatal: a.has_fatal(),
        next_occurrences: next
            .iter()
            .map(|o| OccurrenceReport {
                start: rfc3339(o.start),
                end: rfc3339(o.end),
                duration_seconds: secs(o.duration()),
                local: local_occurrences(o, &zones),
            })
            .collect(),
    }
}
