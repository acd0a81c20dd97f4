//! What a RotationPolicy will do to a NodePool, before it is applied: the report behind
//! `noderotation plan` (the command itself, with its files, flags and exit codes, is
//! `crate::cli::plan`).
//!
//! P, A, t_rot, t_rot_est, C, G, every finding with severity and fix, and the next occurrences in
//! the policy's time zones and UTC. Pure: the caller reads the files and passes `now`.
use std::fmt::Write as _;

use anyhow::{anyhow, bail};
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use super::chances;
use super::crd::RotationPolicy;
use super::derive;
use super::duration::{self, format_human};
use super::feasibility::{self, Assessment, Finding, PoolFacts, Severity};
use super::selector;
use super::settings::{AgeThreshold, Effective, MaxUnavailable};
use super::strict;
use super::window::{HORIZON, Occurrence, Schedule};
use crate::karpenter::NodePool;

/// Exit code when the plan was printed and a fatal finding exists: no rotation would start.
pub const EXIT_INFEASIBLE: i32 = 3;

/// The policy's effective settings, or every invalid field named with `file`.
pub fn settings_of(policy: &RotationPolicy, file: &str) -> anyhow::Result<Effective> {
    let policy_name = policy.metadata.name.clone().unwrap_or_default();
    Effective::from_spec(&policy.spec).map_err(|invalid| {
        let lines: Vec<String> =
            invalid.errors.iter().map(|e| format!("{file}: {}: {}", e.field, e.problem)).collect();
        anyhow!("RotationPolicy {policy_name} is invalid:\n{}", lines.join("\n"))
    })
}

/// The report for `policy` (read from `file`) on the pool `facts` describe, at `now`.
pub fn report(
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

/// Every RotationPolicy in a (possibly multi-document) YAML manifest. Errors name the document
/// and the field (`spec.surge.readyTimeout: invalid type ... at line 12 column 19`).
pub fn parse_policies(text: &str) -> anyhow::Result<Vec<RotationPolicy>> {
    let mut kinds = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = serde_norway::Value::deserialize(doc)
            .map_err(|e| anyhow!("document {}: {e}", i + 1))?;
        if value.is_null() {
            kinds.push(None); // an empty document (`---` at the end)
            continue;
        }
        let meta: TypeMeta =
            serde_norway::from_value(value).map_err(|e| anyhow!("document {}: {e}", i + 1))?;
        kinds.push(Some(meta));
    }
    let mut policies = Vec::new();
    let schema = strict_schema()?;
    let values: Vec<serde_norway::Value> = serde_norway::Deserializer::from_str(text)
        .map(|doc| serde_norway::Value::deserialize(doc).unwrap_or_default())
        .collect();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let Some(Some(meta)) = kinds.get(i) else { continue };
        if meta.kind != "RotationPolicy" || meta.api_version != "noderotation.io/v1alpha1" {
            bail!(
                "document {}: apiVersion/kind: expected noderotation.io/v1alpha1 RotationPolicy, \
                 got {:?} {:?}",
                i + 1,
                meta.api_version,
                meta.kind
            );
        }
        let policy =
            RotationPolicy::deserialize(doc).map_err(|e| anyhow!("document {}: {e}", i + 1))?;
        if policy.metadata.name.as_deref().is_none_or(str::is_empty) {
            bail!("document {}: metadata.name: required", i + 1);
        }
        let unknown = values.get(i).map(|v| strict::unknown_fields(v, &schema)).unwrap_or_default();
        if !unknown.is_empty() {
            bail!(
                "document {}: unknown field{} {} (strict field validation, as kubectl apply)",
                i + 1,
                if unknown.len() == 1 { "" } else { "s" },
                unknown.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            );
        }
        policies.push(policy);
    }
    if policies.is_empty() {
        bail!("no RotationPolicy in the file");
    }
    Ok(policies)
}

/// The CRD's `openAPIV3Schema`, what strict field validation checks a manifest against.
fn strict_schema() -> anyhow::Result<serde_json::Value> {
    let crd = super::crd::crd()?;
    let schema = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .ok_or_else(|| anyhow!("the RotationPolicy CRD has no schema"))?;
    Ok(serde_json::to_value(schema)?)
}

/// The policy named `name`, or the only one.
pub fn pick_policy(
    policies: Vec<RotationPolicy>,
    name: Option<&str>,
) -> anyhow::Result<RotationPolicy> {
    let names: Vec<String> =
        policies.iter().map(|p| p.metadata.name.clone().unwrap_or_default()).collect();
    match name {
        Some(name) => {
            policies.into_iter().find(|p| p.metadata.name.as_deref() == Some(name)).ok_or_else(
                || anyhow!("no RotationPolicy named {name:?} (found: {})", names.join(", ")),
            )
        }
        None if policies.len() == 1 => {
            policies.into_iter().next().ok_or_else(|| anyhow!("no RotationPolicy in the file"))
        }
        None => bail!(
            "holds {} RotationPolicies ({}); choose one with --name",
            policies.len(),
            names.join(", ")
        ),
    }
}

/// The pool of a `karpenter.sh/v1` NodePool manifest `text` read from `file`; `nodes` overrides
/// its node count.
pub fn pool_from_manifest(
    file: &str,
    text: &str,
    policy: &RotationPolicy,
    nodes: Option<u64>,
) -> anyhow::Result<(PoolInput, PoolFacts)> {
    let file = file.to_string();
    let meta: TypeMeta = serde_norway::from_str(text).map_err(|e| anyhow!("{file}: {e}"))?;
    if meta.kind != "NodePool" || meta.api_version != "karpenter.sh/v1" {
        bail!(
            "{file}: apiVersion/kind: expected karpenter.sh/v1 NodePool, got {:?} {:?}",
            meta.api_version,
            meta.kind
        );
    }
    let pool: NodePool = serde_norway::from_str(text).map_err(|e| anyhow!("{file}: {e}"))?;
    pool_from_nodepool(&file, &pool, policy, nodes)
}

/// The pool of a NodePool read from `source` (a file, or the cluster); `nodes` overrides its
/// node count.
pub fn pool_from_nodepool(
    source: &str,
    pool: &NodePool,
    policy: &RotationPolicy,
    nodes: Option<u64>,
) -> anyhow::Result<(PoolInput, PoolFacts)> {
    let file = source.to_string();
    let expire_after =
        pool.expire_after().map_err(|e| anyhow!("{file}: spec.template.spec.expireAfter: {e}"))?;
    let tgp = pool
        .termination_grace_period()
        .map_err(|e| anyhow!("{file}: spec.template.spec.terminationGracePeriod: {e}"))?;
    let labels = pool.metadata.labels.clone().unwrap_or_default();
    let selected = selector::selector_matches(&policy.spec.node_pool_selector, &labels);
    let nodes = nodes.or_else(|| pool.node_count());
    let input = PoolInput {
        source: file,
        name: pool.metadata.name.clone(),
        expire_after: expire_after.to_string(),
        termination_grace_period: tgp.map(duration::format),
        nodes,
        selected_by_policy: selected,
    };
    let facts = PoolFacts {
        expire_after,
        termination_grace_period: tgp,
        nodes,
        exhausted_limits: pool.exhausted_limits(),
        static_pool: pool.is_static(),
    };
    Ok((input, facts))
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

fn build_report(
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

fn human_secs(s: i64) -> String {
    format_human(Duration::seconds(s))
}

/// The human rendering of a report.
pub fn render_human(r: &PlanReport) -> String {
    let mut out = String::new();
    let d = &r.derived;
    let s = &r.settings;
    let p = &r.node_pool;
    let _ = writeln!(out, "RotationPolicy {} ({})", r.policy, r.policy_file);
    let pool = match &p.name {
        Some(name) => format!("NodePool {name} ({})", p.source),
        None => "NodePool (from flags)".to_string(),
    };
    let with_days = |s: &str| match duration::parse(s) {
        Ok(d) if d >= Duration::days(1) => format!("{s} ({})", format_human(d)),
        _ => s.to_string(),
    };
    let _ = writeln!(
        out,
        "{pool}: expireAfter {}, terminationGracePeriod {}, nodes {}",
        with_days(&p.expire_after),
        p.termination_grace_period.as_deref().unwrap_or("unset"),
        p.nodes.map_or("unknown".to_string(), |n| n.to_string())
    );
    if p.selected_by_policy == Some(false) {
        let _ = writeln!(
            out,
            "note: the policy's nodePoolSelector does not match this NodePool's labels; it would \
             not govern it"
        );
    }
    let _ = writeln!(out, "Evaluated at {}", r.evaluated_at);

    let _ = writeln!(out, "\nWindows (union)");
    if r.windows.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for w in &r.windows {
        let _ = writeln!(out, "  {w}");
    }

    let _ = writeln!(out, "\nDerived");
    let row = |out: &mut String, sym: &str, what: &str, value: String, note: String| {
        let line = format!("  {sym:<10} {what:<32} {value}");
        let _ = if note.is_empty() {
            writeln!(out, "{line}")
        } else {
            writeln!(out, "{:<62} {note}", line)
        };
    };
    let period = match d.window_period_seconds {
        None => "undefined".to_string(),
        Some(secs) if d.always_open => {
            format!("{} (open 24/7: the reconcile tick)", human_secs(secs))
        }
        Some(secs) => human_secs(secs),
    };
    row(&mut out, "P", "window period (worst case)", period, String::new());
    row(&mut out, "K", "minRotationChances", s.min_rotation_chances.to_string(), String::new());
    row(
        &mut out,
        "t_rot",
        "rotation bound",
        human_secs(d.t_rot_seconds),
        format!(
            "readyTimeout {} + tGP {} + buffer 2m",
            human_secs(s.ready_timeout_seconds),
            match &p.termination_grace_period {
                Some(t) => duration::parse(t).map(format_human).unwrap_or_else(|_| t.clone()),
                None => "1h (unset)".into(),
            }
        ),
    );
    row(
        &mut out,
        "t_rot_est",
        "expected rotation time",
        human_secs(d.t_rot_estimate_seconds),
        format!(
            "provisioning {} + drain {}",
            human_secs(d.provisioning_estimate_seconds),
            human_secs(d.drain_estimate_seconds)
        ),
    );
    let windows = s.age_threshold == AgeThreshold::WINDOWS;
    let (a_value, a_note) = match (d.age_threshold_seconds, d.age_threshold_overridden) {
        (Some(a), false) if d.counts_occurrences && d.lead_time_seconds.is_some() => {
            (human_secs(a), "windows: the earliest age a node falls due at (see life)".to_string())
        }
        (Some(a), false) if d.counts_occurrences => {
            (human_secs(a), "windows: E minus the expireAfter K chances need".to_string())
        }
        (Some(a), false) if windows => {
            (human_secs(a), "windows, open 24/7 (as auto): E - (K*P + t_rot)".to_string())
        }
        (Some(a), false) => (human_secs(a), "auto: E - (K*P + t_rot)".to_string()),
        (Some(a), true) => (human_secs(a), "override".to_string()),
        (None, _) if p.expire_after == "Never" => (
            "none".to_string(),
            format!("{} with expireAfter Never: no node is ever due", s.age_threshold),
        ),
        (None, _) => ("undefined".to_string(), String::new()),
    };
    row(&mut out, "A", "age threshold", a_value, a_note);
    if let Some(lead) = d.lead_time_seconds {
        let value = if d.counts_occurrences {
            format!("up to {}", human_secs(lead))
        } else {
            human_secs(lead)
        };
        row(&mut out, "lead", "due this long before expiry", value, String::new());
    }
    // What the lead costs, under each mode: the share of expireAfter a node lives.
    for l in &r.derived.lifetime_used {
        let what = format!("lifetime used, {}{}", l.mode, if l.in_use { " (in use)" } else { "" });
        let expire = duration::parse(&p.expire_after).map(format_human).unwrap_or_default();
        let (value, note) =
            match (l.min_age_seconds, l.max_age_seconds, l.min_percent, l.max_percent) {
                (Some(lo), Some(hi), Some(plo), Some(phi)) => {
                    let ages = format!("age {}-{}", human_secs(lo), human_secs(hi));
                    let how = match l.mode.as_str() {
                        "windows" if d.always_open => "as auto when open 24/7".to_string(),
                        "windows" => format!(
                            "replaced in the first of its last {} usable windows",
                            s.min_rotation_chances
                        ),
                        _ => "replaced at the first window after A".to_string(),
                    };
                    (format!("{plo}%-{phi}%"), format!("{ages} of expireAfter {expire}: {how}"))
                }
                _ => (
                    "infeasible".to_string(),
                    match l.mode.as_str() {
                        "windows" => "a node can get fewer than K usable windows".to_string(),
                        "auto" => "E <= K*P + t_rot".to_string(),
                        _ => "A is not positive".to_string(),
                    },
                ),
            };
        row(&mut out, "life", &what, value, note);
    }
    row(&mut out, "m", "rotations at once", lanes_value(r), lanes_note(r));
    let lanes = d.rotation_lanes;
    let c = match (d.starts_per_occurrence, d.shortest_occurrence_seconds) {
        (Some(c), Some(len)) => (
            c.to_string(),
            format!(
                "{}ceil(shortest occurrence {} / (t_rot_est {} + cooldownAfter {}))",
                if lanes > 1 { format!("m {lanes} * ") } else { String::new() },
                human_secs(len),
                human_secs(d.t_rot_estimate_seconds),
                human_secs(s.cooldown_after_seconds)
            ),
        ),
        _ if d.always_open => (
            "continuous".to_string(),
            format!(
                "{} every {}",
                if lanes > 1 { format!("{lanes} starts") } else { "one start".to_string() },
                human_secs(d.t_rot_estimate_seconds + s.cooldown_after_seconds)
            ),
        ),
        _ => ("undefined".to_string(), String::new()),
    };
    row(&mut out, "C", "rotation starts per occurrence", c.0, c.1);
    let g = match (d.guaranteed_chances, d.age_threshold_overridden) {
        (Some(g), false) if d.counts_occurrences && d.lead_time_seconds.is_none() => {
            (g.to_string(), "the fewest a node gets, below K".to_string())
        }
        (Some(g), false) => (g.to_string(), "= K".to_string()),
        (Some(g), true) => (g.to_string(), "floor((E - A - t_rot) / P)".to_string()),
        (None, true) if p.expire_after == "Never" => {
            ("unbounded".to_string(), "expireAfter Never".to_string())
        }
        (None, _) => ("none".to_string(), String::new()),
    };
    row(&mut out, "G", "guaranteed chances", g.0, g.1);

    let _ = writeln!(out, "\nSettings");
    let _ = writeln!(
        out,
        "  ageThreshold {}, readyTimeout {}, cooldownAfter {}, failurePause {}",
        s.age_threshold,
        human_secs(s.ready_timeout_seconds),
        human_secs(s.cooldown_after_seconds),
        human_secs(s.failure_pause_seconds)
    );
    let _ = writeln!(
        out,
        "  retryBackoff {} doubling to {}, forcefulFallback {}, wholeNodeReservation {}",
        human_secs(s.retry_backoff_seconds),
        human_secs(s.max_retry_backoff_seconds),
        on_off(s.forceful_fallback),
        on_off(s.whole_node_reservation)
    );
    let _ = writeln!(
        out,
        "  replacement matches node labels: required [{}], preferred [{}]",
        s.required_node_labels.join(", "),
        s.preferred_node_labels.join(", ")
    );

    let _ = writeln!(out, "\nFindings");
    if r.findings.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for f in &r.findings {
        let severity = match f.severity {
            Severity::Fatal => "FATAL",
            Severity::Warning => "WARNING",
        };
        let _ = writeln!(out, "  {severity:<8} {}: {}", f.reason, f.message);
        let _ = writeln!(out, "           fix: {}", f.fix);
    }

    let _ = writeln!(out, "\nNext occurrences");
    if d.always_open {
        let _ = writeln!(out, "  open 24/7");
    } else if r.next_occurrences.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for o in &r.next_occurrences {
        let _ = writeln!(
            out,
            "  {} - {} UTC ({})",
            short_time(&o.start, true, false),
            short_time(&o.end, false, false),
            human_secs(o.duration_seconds)
        );
        for l in &o.local {
            let _ = writeln!(
                out,
                "      {:<20} {} - {}",
                l.timezone,
                short_time(&l.start, true, true),
                short_time(&l.end, false, true)
            );
        }
    }

    let warnings = r.findings.iter().filter(|f| f.severity == Severity::Warning).count();
    let fatal = r.findings.len() - warnings;
    let _ = writeln!(
        out,
        "\n{}",
        if r.fatal {
            format!(
                "INFEASIBLE: {fatal} fatal finding(s), {warnings} warning(s); no rotation would \
                 start in this pool (exit code {EXIT_INFEASIBLE})"
            )
        } else {
            format!("Feasible: {warnings} warning(s)")
        }
    );
    out
}

/// `m`'s value: the lanes, with the percentage or `auto` they come from.
fn lanes_value(r: &PlanReport) -> String {
    let (m, written) = (r.derived.rotation_lanes, &r.settings.max_unavailable);
    match r.node_pool.nodes {
        _ if r.settings.max_unavailable_limit.is_some() => format!("{m} ({written})"),
        Some(n) if written.ends_with('%') => format!("{m} ({written} of {n})"),
        None if written.ends_with('%') => format!("{m} ({written} of an unknown pool)"),
        _ => m.to_string(),
    }
}

/// `m`'s note: the policy's `maxUnavailable` and what the pool needs (with `auto`: why it chose
/// `m`, and the limit to raise when the need is above it).
fn lanes_note(r: &PlanReport) -> String {
    /// What to do when the need is above what `maxUnavailable` (or `auto`) may ever choose.
    const BEYOND: &str = "lengthen or add maintenance windows, or split the pool";
    let most = u64::from(crate::policy::crd::MAX_UNAVAILABLE);
    let d = &r.derived;
    let written = &r.settings.max_unavailable;
    if let Some(limit) = &r.settings.max_unavailable_limit {
        return match (d.rotation_lanes_needed, r.node_pool.nodes, d.rotation_lanes_suffice) {
            (Some(needed), Some(_), Some(false)) if needed > most => format!(
                "{}: too few, and more than auto ever uses ({most}): {BEYOND}",
                d.rotation_lanes_reason
            ),
            (Some(needed), Some(n), Some(false)) => {
                let raise = match feasibility::smallest_percent(to_usize(needed), n) {
                    Some(p) if limit.ends_with('%') => format!("\"{p}%\""),
                    _ => needed.to_string(),
                };
                format!(
                    "{}: too few, raise maxUnavailableLimit to {raise}",
                    d.rotation_lanes_reason
                )
            }
            _ => d.rotation_lanes_reason.clone(),
        };
    }
    match (d.rotation_lanes_needed, r.node_pool.nodes) {
        (Some(needed), Some(n)) => {
            let verdict = if d.rotation_lanes_suffice == Some(true) {
                "enough".to_string()
            } else if needed > most {
                format!("too few, and more than maxUnavailable allows ({most}): {BEYOND}")
            } else {
                match feasibility::smallest_percent(to_usize(needed), n) {
                    Some(p) if written.ends_with('%') => {
                        format!("too few, raise it to \"{p}%\"")
                    }
                    _ => format!("too few, raise it to {needed}"),
                }
            };
            format!(
                "maxUnavailable {written} (needs {needed} for {n} nodes at the auto A): {verdict}"
            )
        }
        (_, None) => format!("maxUnavailable {written} (node count unknown: --nodes)"),
        (None, Some(_)) => format!("maxUnavailable {written}"),
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// `Wed 2026-06-03 02:00 +09:00` (with the date) or `Wed 06:00 +09:00`, from an RFC 3339
/// string; without the offset for UTC lines.
fn short_time(rfc: &str, with_date: bool, with_offset: bool) -> String {
    let format = match (with_date, with_offset) {
        (true, true) => "%a %Y-%m-%d %H:%M %:z",
        (true, false) => "%a %Y-%m-%d %H:%M",
        (false, true) => "%a %H:%M %:z",
        (false, false) => "%a %H:%M",
    };
    match DateTime::parse_from_rfc3339(rfc) {
        Ok(t) => t.format(format).to_string(),
        Err(_) => rfc.to_string(),
    }
}
