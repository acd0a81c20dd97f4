//! `simulate --report out.html`: one self-contained page (inline CSS and SVG, no scripts, no
//! fonts or images to fetch). Per pool a timeline: window occurrences shaded, one row per node
//! slot with each claim's life, every rotation as a bar coloured by its outcome, deadlines
//! ticked and forced expiries marked; below them one row per rotation slot of the pool (its
//! lanes), so rotations in flight at once show side by side; then the summary table next to
//! Karpenter alone.
//!
//! Structure that tests rely on: one `<svg class="timeline" data-pool="..">` per pool, one
//! element with class `rotation` per rotation attempt, and summary rows carrying
//! `data-figure` (`rotations-started` holds the attempt count).
use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Duration, Utc};

use super::RunResult;
use super::metrics::{Figures, Outcome, rows};
use super::scenario::Compiled;
use crate::policy::duration::format_human;

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 8.0;
const LANE: f64 = 7.0;
const TOP: f64 = 22.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn slug(label: &str) -> String {
    label
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

fn class_of(o: Outcome, forceful: bool) -> &'static str {
    match (o, forceful) {
        (Outcome::Success, true) => "forceful",
        (Outcome::Success, false) => "success",
        (Outcome::Failure, _) => "failure",
        (Outcome::Expired, _) => "expired",
        (Outcome::Aborted, _) => "aborted",
        (Outcome::Open, _) => "open",
    }
}

fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

const STYLE: &str = r#"
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; } h3 { font-size: 15px; margin: 18px 0 4px; }
.meta { color: #555; }
table.summary { border-collapse: collapse; }
table.summary td, table.summary th { padding: 3px 12px; border-bottom: 1px solid #ddd; text-align: right; }
table.summary td:first-child, table.summary th:first-child { text-align: left; }
svg text { font: 10px sans-serif; fill: #444; }
.window { fill: #cfe3fb; }
.grid { stroke: #e4e4e4; stroke-width: 1; }
.week { stroke: #bbb; stroke-width: 1; }
.lifetime { stroke: #c8c8c8; stroke-width: 1.5; }
.rotation.success { fill: #2e9d4e; } .rotation.forceful { fill: #7b4fc9; }
.rotation.failure { fill: #e08a00; } .rotation.expired { fill: #d62728; }
.rotation.aborted { fill: #888; } .rotation.open { fill: #4a90d9; }
.deadline { stroke: #111; stroke-width: 1; }
.deadline.replaced { stroke: #aaa; }
.expiry { fill: #d62728; }
.lane-label { fill: #777; }
.slot.success { fill: #2e9d4e; } .slot.forceful { fill: #7b4fc9; }
.slot.failure { fill: #e08a00; } .slot.expired { fill: #d62728; }
.slot.aborted { fill: #888; } .slot.open { fill: #4a90d9; }
.legend span { display: inline-block; margin-right: 14px; }
.sw { display: inline-block; width: 12px; height: 10px; margin-right: 4px; vertical-align: middle; }
"#;

/// The report for `ours` (and, when given, the Karpenter-alone figures).
pub fn html(plan: &Compiled, ours: &RunResult, alone: Option<&Figures>) -> String {
    let mut s = String::new();
    let title = format!("noderotation simulate: {}", plan.name);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n",
        esc(&title)
    );
    let _ = writeln!(s, "<h1>{}</h1>", esc(&title));
    let _ = writeln!(
        s,
        "<p class=\"meta\">{} &middot; seed {} &middot; {} to {} ({}) &middot; faults {}</p>",
        esc(&plan.description),
        ours.seed,
        ts(ours.start),
        ts(ours.end),
        format_human(ours.end - ours.start),
        if ours.faults { "on" } else { "off" }
    );
    let _ = writeln!(s, "<h2>Summary</h2>");
    let _ = writeln!(
        s,
        "<table class=\"summary\" id=\"summary\"><thead><tr><th></th><th>noderotation</th><th>Karpenter alone</th></tr></thead><tbody>"
    );
    for (label, a, b) in rows(&ours.figures, alone) {
        let _ = writeln!(
            s,
            "<tr data-figure=\"{}\"><td>{}</td><td>{}</td><td>{}</td></tr>",
            slug(&label),
            esc(&label),
            esc(&a),
            esc(&b)
        );
    }
    let _ = writeln!(s, "</tbody></table>");
    if !ours.violations.is_empty() {
        let _ = writeln!(s, "<h2>Invariant violations</h2><ul class=\"violations\">");
        for v in &ours.violations {
            let _ = writeln!(
                s,
                "<li><b>{}</b> at {}: {}</li>",
                esc(v.invariant),
                ts(v.time),
                esc(&v.detail)
            );
        }
        let _ = writeln!(s, "</ul>");
    }
    let _ = writeln!(s, "<h2>Timelines</h2>");
    let _ = writeln!(
        s,
        "<p class=\"legend\"><span><i class=\"sw\" style=\"background:#cfe3fb\"></i>window occurrence</span>\
         <span><i class=\"sw\" style=\"background:#2e9d4e\"></i>rotation: success</span>\
         <span><i class=\"sw\" style=\"background:#7b4fc9\"></i>forceful fallback</span>\
         <span><i class=\"sw\" style=\"background:#e08a00\"></i>failure</span>\
         <span><i class=\"sw\" style=\"background:#d62728\"></i>expired / forced expiry &#9660;</span>\
         <span><i class=\"sw\" style=\"background:#4a90d9\"></i>in flight</span>\
         <span><i class=\"sw\" style=\"background:#111;width:2px\"></i>deadline (grey: of a node already replaced)</span>\
         <span><i class=\"sw\" style=\"background:#c8c8c8;height:2px\"></i>a node's life (one row per node slot); below, one row per rotation slot (lane)</span></p>"
    );
    for (i, pool) in plan.pools.iter().enumerate() {
        timeline(&mut s, i, &pool.name, ours);
    }
    let _ = writeln!(s, "</body></html>");
    s
}

fn timeline(s: &mut String, pool: usize, name: &str, r: &RunResult) {
    let span = (r.end - r.start).num_seconds().max(1) as f64;
    let x = |t: DateTime<Utc>| {
        let t = t.clamp(r.start, r.end);
        LEFT + (t - r.start).num_seconds() as f64 / span * WIDTH
    };
    let lifetimes: Vec<_> = r.lifetimes.iter().filter(|l| l.pool == pool).collect();
    let lanes = lifetimes.iter().map(|l| l.lane + 1).max().unwrap_or(1);
    let lane_of: BTreeMap<&str, usize> =
        lifetimes.iter().map(|l| (l.name.as_str(), l.lane)).collect();
    let rotations: Vec<_> = r.rotations.iter().filter(|x| x.pool == pool).collect();
    // The rotation slots, below the node rows after a gap of one row.
    let slots = rotations.iter().map(|x| x.slot + 1).max().unwrap_or(1);
    let slot_top = TOP + (lanes + 1) as f64 * LANE;
    let height = slot_top + slots as f64 * LANE + 6.0;
    let expiries: Vec<_> = r.forced_expiries.iter().filter(|e| e.1 == pool).collect();
    let _ = writeln!(
        s,
        "<section class=\"pool\" data-pool=\"{n}\"><h3>NodePool {n}: {} rotations, {} forced expiries</h3>",
        rotations.len(),
        expiries.len(),
        n = esc(name)
    );
    let _ = writeln!(
        s,
        "<svg class=\"timeline\" data-pool=\"{}\" data-rotations=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" viewBox=\"0 0 {} {height}\">",
        esc(name),
        rotations.len(),
        WIDTH + 2.0 * LEFT,
        WIDTH + 2.0 * LEFT
    );
    let bottom = height - 4.0;
    for w in r.windows.get(pool).into_iter().flatten() {
        let (a, b) = (x(w.start), x(w.end));
        let _ = writeln!(
            s,
            "<rect class=\"window\" x=\"{a:.2}\" y=\"{TOP}\" width=\"{:.2}\" height=\"{:.2}\"><title>window {} - {}</title></rect>",
            (b - a).max(0.8),
            bottom - TOP,
            ts(w.start),
            ts(w.end)
        );
    }
    let days = (r.end - r.start).num_days();
    for d in 0..=days {
        let t = r.start + Duration::days(d);
        let xx = x(t);
        let class = if d % 7 == 0 { "week" } else { "grid" };
        let _ = writeln!(
            s,
            "<line class=\"{class}\" x1=\"{xx:.2}\" y1=\"{}\" x2=\"{xx:.2}\" y2=\"{bottom}\"/>",
            TOP - 4.0
        );
        if d % 7 == 0 && d < days {
            let _ = writeln!(
                s,
                "<text x=\"{:.2}\" y=\"12\">week {} ({})</text>",
                xx + 2.0,
                d / 7 + 1,
                t.format("%b %d")
            );
        }
    }
    let y = |lane: usize| TOP + lane as f64 * LANE + LANE / 2.0;
    for l in &lifetimes {
        let from = l.created.max(r.start);
        let to = l.gone.unwrap_or(r.end).min(r.end);
        if to < r.start || from > r.end {
            continue;
        }
        let yy = y(l.lane);
        let _ = writeln!(
            s,
            "<line class=\"lifetime\" x1=\"{:.2}\" y1=\"{yy:.2}\" x2=\"{:.2}\" y2=\"{yy:.2}\"><title>{} created {}</title></line>",
            x(from),
            x(to),
            esc(&l.name),
            ts(l.created)
        );
        if let Some(dl) = l.deadline
            && dl >= r.start
            && dl <= r.end
        {
            // A node replaced before its deadline: the tick is faint (its row now holds the
            // successor); one alive at its deadline, or force-expired, is black.
            let replaced = l.gone.is_some_and(|g| g < dl) && l.expired_at.is_none();
            let class = if replaced { "deadline replaced" } else { "deadline" };
            let xx = x(dl);
            let _ = writeln!(
                s,
                "<line class=\"{class}\" x1=\"{xx:.2}\" y1=\"{:.2}\" x2=\"{xx:.2}\" y2=\"{:.2}\"><title>{} deadline {}</title></line>",
                yy - LANE / 2.0 + 0.5,
                yy + LANE / 2.0 - 0.5,
                esc(&l.name),
                ts(dl)
            );
        }
    }
    for rot in &rotations {
        let lane = lane_of.get(rot.claim.as_str()).copied().unwrap_or(0);
        let a = x(rot.start);
        let b = x(rot.end.unwrap_or(r.end));
        let class = class_of(rot.outcome, rot.forceful);
        let margin = match (rot.deadline, rot.draining_at) {
            (Some(dl), Some(at)) => format!(", deadline margin {}", format_human(dl - at)),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "<rect class=\"rotation {class}\" data-claim=\"{}\" x=\"{a:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\"><title>{}: {} from {}{}{}{}</title></rect>",
            esc(&rot.claim),
            y(lane) - LANE / 2.0 + 0.5,
            (b - a).max(2.0),
            LANE - 1.0,
            esc(&rot.claim),
            class,
            ts(rot.start),
            rot.end.map_or(String::new(), |e| format!(" to {}", ts(e))),
            rot.path.as_ref().map_or(String::new(), |p| format!(", surge {p}")),
            margin
        );
    }
    for slot in 0..slots {
        let yy = slot_top + slot as f64 * LANE + LANE - 1.0;
        let _ = writeln!(
            s,
            "<text class=\"lane-label\" x=\"{:.2}\" y=\"{yy:.2}\" font-size=\"7\">slot {slot}</text>",
            WIDTH - 30.0
        );
    }
    for rot in &rotations {
        let (a, b) = (x(rot.start), x(rot.end.unwrap_or(r.end)));
        let _ = writeln!(
            s,
            "<rect class=\"slot {}\" data-slot=\"{}\" x=\"{a:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\"><title>slot {}: {}</title></rect>",
            class_of(rot.outcome, rot.forceful),
            rot.slot,
            slot_top + rot.slot as f64 * LANE + 0.5,
            (b - a).max(2.0),
            LANE - 1.0,
            rot.slot,
            esc(&rot.claim)
        );
    }
    for (t, _, claim) in &expiries {
        let lane = lane_of.get(claim.as_str()).copied().unwrap_or(0);
        let (xx, yy) = (x(*t), y(lane));
        let _ = writeln!(
            s,
            "<path class=\"expiry\" d=\"M{:.2} {:.2} L{:.2} {:.2} L{xx:.2} {:.2} Z\"><title>{} force-expired {}</title></path>",
            xx - 3.5,
            yy - 3.5,
            xx + 3.5,
            yy - 3.5,
            yy + 3.5,
            esc(claim),
            ts(*t)
        );
    }
    let _ = writeln!(s, "</svg></section>");
}
