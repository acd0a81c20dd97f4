//! The human rendering of a [`PlanReport`]: the pool, the windows, the derived quantities with
//! how each was computed, the settings, the findings and the next occurrences.
use std::fmt::Write as _;

use chrono::{DateTime, Duration};

use super::{EXIT_INFEASIBLE, PlanReport};
use crate::policy::duration::{self, format_human};
use crate::policy::feasibility::{self, Severity};
use crate::policy::settings::AgeThreshold;

fn human_secs(s: i64) -> String {
    format_human(Duration::seconds(s))
}

/// The human rendering of a report.
pub(crate) fn render_human(r: &PlanReport) -> String {
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
