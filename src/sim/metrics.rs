//! The outcome figures of a run (guide: "Outcome figures the simulation should print"), taken
//! from what actually happened in the store, not from what the controller says about itself:
//! a rotation is the life of one `active-rotation` anchor in one slot of its pool, its outcome is
//! read from the write that cleared it.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::actors::{CLAIM_STATE, anchors, annotation, slot_annotation};
use super::gov::Gov;
use super::observe::Diff;
use super::world::World;
use crate::cluster::CacheView;
use crate::engine::Key;
use crate::policy::duration::format_human;
use crate::policy::settings::AgeThreshold;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// Still anchored when the run ended.
    Open,
    Success,
    Failure,
    Expired,
    /// Anchor cleared without an outcome (governance lost).
    Aborted,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Open => "in flight",
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Expired => "expired",
            Outcome::Aborted => "aborted",
        }
    }
}

/// One rotation attempt (one anchor).
#[derive(Debug, Clone)]
pub struct Rotation {
    pub pool: usize,
    /// The pool's slot the rotation ran in (0 with one lane).
    pub slot: usize,
    pub claim: String,
    pub start: DateTime<Utc>,
    pub draining_at: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
    pub outcome: Outcome,
    /// `provisioned` / `absorbed`; `None` for forceful fallback or unresolved.
    pub path: Option<String>,
    pub forceful: bool,
    /// The claim's creation and forced expiry (`None`: never).
    pub created: Option<DateTime<Utc>>,
    pub deadline: Option<DateTime<Utc>>,
    /// Started inside a window occurrence of the governing policy.
    pub in_window: bool,
}

/// Follows anchors through the store.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub rotations: Vec<Rotation>,
    /// The open rotation of each (pool, slot).
    open: BTreeMap<(String, usize), usize>,
}

impl Recorder {
    pub(crate) fn observe(
        &mut self,
        d: &Diff,
        post: &CacheView,
        now: DateTime<Utc>,
        world: &World,
        gov: &mut Gov,
    ) {
        for (name, a, b) in &d.pools {
            let slots = |p: &Option<Arc<crate::karpenter::NodePool>>| {
                p.as_deref()
                    .map(|p| {
                        anchors(p).into_iter().map(|(s, c)| (s, c.to_string())).collect::<BTreeMap<
                            usize,
                            String,
                        >>(
                        )
                    })
                    .unwrap_or_default()
            };
            let (before, after) = (slots(a), slots(b));
            let Some(pool) = world.pool_index(name) else { continue };
            let mut touched: Vec<usize> = before.keys().chain(after.keys()).copied().collect();
            touched.sort_unstable();
            touched.dedup();
            for slot in touched {
                let (pa, qa) = (before.get(&slot), after.get(&slot));
                self.slot(name, pool, slot, (pa, qa), (a, b), post, now, world, gov);
            }
        }
    }

    /// One slot of a pool across a step: the rotation it ends, the one it starts, and what the
    /// open one reached.
    #[allow(clippy::too_many_arguments)]
    fn slot(
        &mut self,
        name: &str,
        pool: usize,
        slot: usize,
        (pa, qa): (Option<&String>, Option<&String>),
        (a, b): (
            &Option<Arc<crate::karpenter::NodePool>>,
            &Option<Arc<crate::karpenter::NodePool>>,
        ),
        post: &CacheView,
        now: DateTime<Utc>,
        world: &World,
        gov: &mut Gov,
    ) {
        let key = (name.to_string(), slot);
        if pa != qa {
            if let (Some(x), Some(i)) = (pa, self.open.remove(&key)) {
                let last = |p: &Option<Arc<crate::karpenter::NodePool>>| {
                    p.as_ref().and_then(|p| {
                        slot_annotation(&p.metadata, Key::LastRotationAt, slot).map(str::to_string)
                    })
                };
                let stamped = last(a) != last(b) && last(b).is_some();
                let state = post.claims.get(x).and_then(|c| annotation(&c.metadata, CLAIM_STATE));
                let outcome = if stamped {
                    Outcome::Success
                } else {
                    match state {
                        Some("failed") => Outcome::Failure,
                        Some("expired") => Outcome::Expired,
                        _ if !post.claims.contains_key(x) => Outcome::Expired,
                        _ => Outcome::Aborted,
                    }
                };
                if let Some(r) = self.rotations.get_mut(i) {
                    r.outcome = outcome;
                    r.end = Some(now);
                }
            }
            if let (Some(y), Some(np)) = (qa, b) {
                let in_window =
                    gov.of(post, np).settings().is_some_and(|s| s.schedule.in_window(now));
                let life = world.metrics.lifetimes.get(y);
                let deadline = life.and_then(|l| l.deadline);
                self.open.insert(key.clone(), self.rotations.len());
                self.rotations.push(Rotation {
                    pool,
                    slot,
                    claim: y.clone(),
                    start: now,
                    draining_at: None,
                    end: None,
                    outcome: Outcome::Open,
                    path: None,
                    forceful: false,
                    created: life.map(|l| l.created),
                    deadline,
                    in_window,
                });
            }
        }
        if let (Some(i), Some(np)) = (self.open.get(&key), b)
            && let Some(r) = self.rotations.get_mut(*i)
        {
            let m = &np.metadata;
            if r.draining_at.is_none()
                && slot_annotation(m, Key::ActiveRotationState, slot) == Some("draining")
            {
                r.draining_at = Some(now);
            }
            if let Some(p) = slot_annotation(m, Key::SurgePath, slot) {
                r.path = Some(p.to_string());
            }
            match slot_annotation(m, Key::RotationMode, slot) {
                Some("forceful-fallback") => r.forceful = true,
                Some("nothing-to-reserve") => r.path = Some(NOTHING_TO_RESERVE.to_string()),
                _ => {}
            }
        }
    }
}

/// The figures of one run.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Attempts by outcome (forceful fallbacks counted under `forceful`, not `success`).
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Successful surge rotations by path.
    pub paths: BTreeMap<&'static str, u64>,
    pub attempts: u64,
    /// The most rotations in flight at once (of the pool; of the whole cluster in the run's
    /// figures).
    pub max_in_flight: u64,
    /// Old nodes replaced: successful rotations, forceful fallbacks, forced expiries.
    pub replacements: u64,
    pub replacements_in_window: u64,
    pub forced_expiries: u64,
    /// Smallest `deadline - time the old claim was deleted` over replacements.
    pub min_margin: Option<Duration>,
    /// Lifetime used: `age when the old claim was deleted / expireAfter` over the controller's
    /// replacements (successful rotations, forceful fallbacks included) of claims with a
    /// deadline; the sum and count for the mean, and the minimum.
    pub lifetime_used_sum: f64,
    pub lifetime_used_count: u64,
    pub lifetime_used_min: Option<f64>,
    /// The summary table shows lifetime used (a policy of the scenario uses ageThreshold
    /// windows; the default run's table stays as it was).
    pub show_lifetime: bool,
    pub pending_pod_seconds: f64,
    /// The longest any one workload pod was Pending (seconds): of the pool, or the most over the
    /// pools. A pod still Pending when the figures are taken counts until then.
    pub longest_pending_seconds: f64,
    pub overlap_node_hours: f64,
    /// Controller writes the store applied (Events excluded), and Events.
    pub writes: u64,
    pub events: u64,
    /// Fresh reads of one object (GETs) the store answered the controller (whole cluster only).
    pub reads: u64,
    pub claims_created: u64,
    pub evictions: u64,
    /// `--faults`: the world faults injected, per class (counted for the whole cluster only).
    pub world_faults: BTreeMap<&'static str, u64>,
    /// The same figures per pool, by name (empty inside a pool's own figures). Writes, Events,
    /// claims created and evictions are counted for the whole cluster only.
    pub per_pool: BTreeMap<String, Figures>,
    /// A pool under `maxUnavailable: auto`: the fewest and the most lanes the controller chose
    /// over the run (per pool only).
    pub lanes_chosen: Option<(u64, u64)>,
}

impl Figures {
    pub fn collect(
        world: &World,
        rotations: &[Rotation],
        writes: u64,
        events: u64,
        gov: &mut Gov,
    ) -> Figures {
        let mut f = Figures::scoped(world, rotations, gov, None);
        f.show_lifetime =
            world.plan.policies.iter().any(|p| p.spec.age_threshold == AgeThreshold::WINDOWS);
        f.writes = writes;
        f.events = events;
        f.claims_created = world.metrics.claims_created;
        f.evictions = world.metrics.evictions;
        f.world_faults = world.metrics.world_faults.clone();
        for pool in 0..world.plan.pools.len() {
            let name = world.pool_name(pool).to_string();
            f.per_pool.insert(name, Figures::scoped(world, rotations, gov, Some(pool)));
        }
        f
    }

    /// The rotation, replacement, margin, pending and overlap figures of one pool, or of all.
    fn scoped(
        world: &World,
        rotations: &[Rotation],
        gov: &mut Gov,
        pool: Option<usize>,
    ) -> Figures {
        let mine = |p: usize| pool.is_none_or(|q| q == p);
        let mut f = Figures::default();
        for r in rotations.iter().filter(|r| mine(r.pool)) {
            f.attempts += 1;
            let key = match (r.outcome, r.forceful) {
                (Outcome::Success, true) => "forceful",
                (o, _) => o.as_str(),
            };
            *f.outcomes.entry(key).or_insert(0) += 1;
            if r.outcome == Outcome::Success {
                f.replacements += 1;
                if r.in_window {
                    f.replacements_in_window += 1;
                }
                let path = if r.forceful {
                    "none"
                } else {
                    r.path.as_deref().map_or("unresolved", path_name)
                };
                *f.paths.entry(path).or_insert(0) += 1;
                if let (Some(dl), Some(at)) = (r.deadline, r.draining_at) {
                    let m = dl - at;
                    f.min_margin = Some(f.min_margin.map_or(m, |x| x.min(m)));
                    if let Some(created) = r.created.filter(|c| *c < dl) {
                        let used =
                            (at - created).as_seconds_f64() / (dl - created).as_seconds_f64();
                        f.lifetime_used_sum += used;
                        f.lifetime_used_count += 1;
                        f.lifetime_used_min =
                            Some(f.lifetime_used_min.map_or(used, |x| x.min(used)));
                    }
                }
            }
        }
        for (t, pool, _) in world.metrics.forced_expiries.iter().filter(|(_, p, _)| mine(*p)) {
            f.forced_expiries += 1;
            f.replacements += 1;
            let name = world.pool_name(*pool);
            let in_window = world
                .snap
                .pools
                .get(name)
                .map(|np| gov.of(&world.snap, np))
                .and_then(|g| g.settings().map(|s| s.schedule.in_window(*t)))
                .unwrap_or(false);
            if in_window {
                f.replacements_in_window += 1;
            }
            f.min_margin = Some(f.min_margin.map_or(Duration::zero(), |x| x.min(Duration::zero())));
        }
        f.max_in_flight = max_in_flight(rotations.iter().filter(|r| mine(r.pool)));
        let in_scope = |v: &Vec<f64>| -> f64 {
            v.iter().enumerate().filter(|(p, _)| mine(*p)).map(|(_, x)| x).sum()
        };
        f.pending_pod_seconds = in_scope(&world.metrics.pending_pod_seconds);
        f.longest_pending_seconds = world
            .metrics
            .longest_pending_seconds
            .iter()
            .enumerate()
            .filter(|(p, _)| mine(*p))
            .map(|(_, x)| *x)
            .fold(0.0, f64::max);
        f.overlap_node_hours = in_scope(&world.metrics.overlap_node_seconds) / 3600.0;
        f
    }

    /// Records the lanes `maxUnavailable: auto` chose, by pool.
    pub(crate) fn set_lanes_chosen(&mut self, chosen: &BTreeMap<String, (u64, u64)>) {
        for (pool, range) in chosen {
            if let Some(f) = self.per_pool.get_mut(pool) {
                f.lanes_chosen = Some(*range);
            }
        }
    }

    pub fn in_window_share(&self) -> Option<f64> {
        (self.replacements > 0)
            .then(|| self.replacements_in_window as f64 / self.replacements as f64)
    }

    /// The mean of lifetime used; `None` without a replacement by the controller.
    pub fn lifetime_used_mean(&self) -> Option<f64> {
        (self.lifetime_used_count > 0)
            .then(|| self.lifetime_used_sum / self.lifetime_used_count as f64)
    }

    pub(crate) fn writes_per_rotation(&self) -> Option<f64> {
        (self.attempts > 0).then(|| self.writes as f64 / self.attempts as f64)
    }

    pub(crate) fn reads_per_rotation(&self) -> Option<f64> {
        (self.attempts > 0).then(|| self.reads as f64 / self.attempts as f64)
    }
}

/// The most of `rotations` in flight at one instant (one that ends at the instant another starts
/// does not overlap it).
fn max_in_flight<'a>(rotations: impl Iterator<Item = &'a Rotation>) -> u64 {
    let mut edges: Vec<(DateTime<Utc>, i64)> = Vec::new();
    for r in rotations {
        edges.push((r.start, 1));
        if let Some(end) = r.end {
            edges.push((end, -1));
        }
    }
    edges.sort();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as u64
}

/// The path of a rotation whose old node's pods requested nothing: no surge was needed.
const NOTHING_TO_RESERVE: &str = "none needed";

fn path_name(p: &str) -> &'static str {
    match p {
        "provisioned" => "provisioned",
        "absorbed" => "absorbed",
        NOTHING_TO_RESERVE => NOTHING_TO_RESERVE,
        _ => "unresolved",
    }
}

/// One row of the summary table: label, ours, Karpenter alone.
pub(crate) fn rows(ours: &Figures, alone: Option<&Figures>) -> Vec<(String, String, String)> {
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.1}%", v * 100.0));
    let dash = || "-".to_string();
    let alone_or = |g: &dyn Fn(&Figures) -> String| alone.map_or_else(dash, g);
    let mut out = Vec::new();
    out.push(("rotations started".into(), ours.attempts.to_string(), dash()));
    for key in ["success", "forceful", "failure", "expired", "aborted", "in flight"] {
        let n = ours.outcomes.get(key).copied().unwrap_or(0);
        if n > 0 || key == "success" || key == "failure" || key == "expired" {
            out.push((format!("  {key}"), n.to_string(), dash()));
        }
    }
    for key in ["provisioned", "absorbed", "none", NOTHING_TO_RESERVE, "unresolved"] {
        let n = ours.paths.get(key).copied().unwrap_or(0);
        if n > 0 || key == "provisioned" || key == "absorbed" {
            out.push((format!("  surge path {key}"), n.to_string(), dash()));
        }
    }
    // Several rotations of one pool at once only: with one lane the table stays as it was.
    let several = if ours.per_pool.is_empty() {
        ours.max_in_flight > 1
    } else {
        ours.per_pool.values().any(|f| f.max_in_flight > 1)
    };
    if several {
        out.push(("rotations in flight at most".into(), ours.max_in_flight.to_string(), dash()));
        for (pool, f) in &ours.per_pool {
            out.push((format!("  in pool {pool}"), f.max_in_flight.to_string(), dash()));
        }
    }
    // `maxUnavailable: auto`: the N the controller chose (the fewest and the most, when it moved).
    for (pool, f) in &ours.per_pool {
        if let Some((lo, hi)) = f.lanes_chosen {
            let n = if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") };
            out.push((format!("maxUnavailable auto chose, pool {pool}"), n, dash()));
        }
    }
    out.push((
        "nodes replaced".into(),
        ours.replacements.to_string(),
        alone_or(&|a| a.replacements.to_string()),
    ));
    out.push((
        "replacements inside windows".into(),
        pct(ours.in_window_share()),
        alone_or(&|a| pct(a.in_window_share())),
    ));
    out.push((
        "forced expiries".into(),
        ours.forced_expiries.to_string(),
        alone_or(&|a| a.forced_expiries.to_string()),
    ));
    let margin = |f: &Figures| f.min_margin.map_or("-".to_string(), format_human);
    out.push(("minimum deadline margin".into(), margin(ours), alone_or(&|a| margin(a))));
    if ours.show_lifetime {
        let used = match (ours.lifetime_used_mean(), ours.lifetime_used_min) {
            (Some(mean), Some(min)) => format!("{} / {}", pct(Some(mean)), pct(Some(min))),
            _ => dash(),
        };
        out.push(("lifetime used (mean / min)".into(), used, dash()));
    }
    out.push((
        "pending-pod-seconds".into(),
        format!("{:.0}", ours.pending_pod_seconds),
        alone_or(&|a| format!("{:.0}", a.pending_pod_seconds)),
    ));
    out.push((
        "longest Pending (s)".into(),
        format!("{:.0}", ours.longest_pending_seconds),
        alone_or(&|a| format!("{:.0}", a.longest_pending_seconds)),
    ));
    out.push((
        "overlap node-hours".into(),
        format!("{:.1}", ours.overlap_node_hours),
        alone_or(&|a| format!("{:.1}", a.overlap_node_hours)),
    ));
    out.push((
        "API writes per rotation".into(),
        ours.writes_per_rotation().map_or("-".into(), |w| format!("{w:.1}")),
        dash(),
    ));
    out.push((
        "API GETs per rotation".into(),
        ours.reads_per_rotation().map_or("-".into(), |r| format!("{r:.1}")),
        dash(),
    ));
    out.push(("Events recorded".into(), ours.events.to_string(), dash()));
    out
}

/// The summary table as aligned text.
pub fn table(ours: &Figures, alone: Option<&Figures>) -> String {
    let rows = rows(ours, alone);
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(28);
    let mut s = String::new();
    let _ = writeln!(s, "{:<w0$}  {:>14}  {:>16}", "", "noderotation", "Karpenter alone");
    for (label, a, b) in rows {
        let _ = writeln!(s, "{label:<w0$}  {a:>14}  {b:>16}");
    }
    s
}
