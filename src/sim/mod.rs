//! The deterministic simulation behind `noderotation simulate`: the real controller, on a
//! [`MemoryCluster`](crate::cluster::memory::MemoryCluster) and a virtual clock, against actors that play Karpenter, the kubelet and
//! scheduler, and an operator. One seed gives one exact history; with `--faults` the same seed
//! also decides every crash, conflict, lag, clock skew and misbehaving node, and the invariants
//! I1–I22 are checked after every step.
//!
//! - [`scenario`]: the fleet file; [`world`] and [`actors`]: the cluster model;
//! - [`driver`]: the controller's work queue, restarts and leader changes;
//! - [`observe`]: what a step changed (for the trace); [`invariants`]: the checks;
//! - [`metrics`]: outcome figures; [`report`]: the HTML report; `src/cli/simulate.rs`: the subcommand.
//!
//! Nothing here reads the wall clock; the subcommand does, to print the elapsed time.
pub(crate) mod actors;
pub(crate) mod driver;
pub mod gov;
pub(crate) mod invariants;
pub mod metrics;
pub(crate) mod observe;
pub mod report;
pub mod scenario;
pub(crate) mod trace;
pub mod world;
pub(crate) mod world_faults;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::cluster::memory::Fault;
use crate::engine::Engine;
use crate::policy::window::Occurrence;
use driver::Driver;
use gov::Gov;
use invariants::{Announced, Checker, StepInfo, Violation};
use metrics::{Figures, Recorder, Rotation};
use scenario::Compiled;
use world::{Lifetime, World};

/// How one run is made.
#[derive(Clone)]
pub struct Options {
    pub seed: u64,
    /// Simulated span.
    pub span: Duration,
    pub faults: bool,
    /// `false`: Karpenter alone (no controller).
    pub controller: bool,
    pub engine: Arc<Engine>,
    /// Stream the trace to stdout.
    pub trace: bool,
    /// Stop at the first violation.
    pub stop_on_violation: bool,
}

/// What a run produced.
pub struct RunResult {
    pub seed: u64,
    pub faults: bool,
    pub controller: bool,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub figures: Figures,
    pub rotations: Vec<Rotation>,
    pub lifetimes: Vec<Lifetime>,
    pub forced_expiries: Vec<(DateTime<Utc>, usize, String)>,
    /// Window occurrences per pool (governing policy at the start).
    pub windows: Vec<Vec<Occurrence>>,
    pub violations: Vec<Violation>,
    /// World events plus controller steps.
    pub steps: u64,
    pub passes: u64,
    pub restarts: u64,
    pub leader_changes: u64,
    pub zombie_passes: u64,
    /// Leader changes where the deposed leader's pass stalled in a write (`stalledPass`).
    pub stalled_passes: u64,
    /// Rule rows that fired in any controller instance of the run.
    pub coverage: std::collections::BTreeSet<String>,
}

/// How long the calm phase may run at most after the faults stop.
const CALM_LIMIT: Duration = Duration::hours(12);

/// The completion outcome an announcement reports, by source: the metric and log line
/// (`emit`) and the Event are counted apart, each at most once per transition.
fn announced(a: &crate::reconcile::Announcement) -> Option<Announced> {
    let (what, source) = match a.what.as_str() {
        "emit:success" => ("success", "emit"),
        "emit:failure" => ("failure", "emit"),
        "emit:expired" => ("expired", "emit"),
        "event:RotationCompleted" => ("success", "event"),
        "event:RotationFailed" => ("failure", "event"),
        "event:RotationExpired" => ("expired", "event"),
        _ => return None,
    };
    Some(Announced {
        pool: a.pool.clone(),
        claim: a.claim.clone(),
        what,
        source: format!("{source} (row {})", a.row),
        kind: source,
    })
}

/// Fills each violation's trace: the last entries, plus those about its objects.
fn attach_traces(violations: &mut [Violation], world: &World) {
    for v in violations {
        let mut lines = world.trace.tail(40);
        for about in &v.about {
            for e in world.trace.about(about, 30) {
                if !lines.contains(&e) {
                    lines.push(e);
                }
            }
        }
        lines.sort_by_key(|e| e.time);
        v.trace = lines;
    }
}

/// Runs one simulation. `progress` is told the fraction of simulated time done now and then.
pub fn run(plan: Arc<Compiled>, opts: &Options, progress: &mut dyn FnMut(f64)) -> RunResult {
    let start = plan.start;
    let end = start + opts.span;
    let mut world = World::new(Arc::clone(&plan), opts.seed, end, opts.faults && opts.controller);
    world.trace.stream = opts.trace;
    let clock: Arc<dyn Clock> = Arc::new(world.clock.clone());
    let pools: Vec<String> = plan.pools.iter().map(|p| p.name.clone()).collect();
    let lag = plan.faults.cache_lag;
    let mut driver = opts.controller.then(|| {
        Driver::new(
            &world.cluster,
            driver::Setup {
                engine: Arc::clone(&opts.engine),
                clock: Arc::clone(&clock),
                pools: pools.clone(),
                seed: opts.seed,
                rates: opts.faults.then(|| plan.faults.rates.clone()),
                lag,
                hook_always: opts.trace,
                skew: plan.faults.clock_skew,
            },
        )
    });
    let mut gov = Gov::default();
    let mut checker = Checker::new(
        Arc::clone(&plan),
        opts.faults,
        if opts.faults { lag } else { Duration::zero() },
        &world.snap,
    );
    let mut recorder = Recorder::default();
    let windows: Vec<Vec<Occurrence>> = plan
        .pools
        .iter()
        .map(|p| {
            world
                .snap
                .pools
                .get(&p.name)
                .and_then(|np| gov.of(&world.snap, np).settings().cloned())
                .map(|s| s.schedule.occurrences(start, end))
                .unwrap_or_default()
        })
        .collect();
    let mut steps: u64 = 0;
    let mut figures: Option<Figures> = None;
    let mut calm_until: Option<DateTime<Utc>> = None;
    let mut last_progress = start;
    let mut events_total: u64 = 0;
    // The lanes `maxUnavailable: auto` chose per pool over the measured span (fewest, most).
    let mut lanes_chosen: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    loop {
        let tw = world.next_time();
        let td = driver.as_ref().and_then(Driver::next_time);
        let Some(t) = [tw, td].into_iter().flatten().min() else { break };
        if t > end && figures.is_none() {
            // The measured span is over: take the figures, then calm down and check quiescence.
            world.clock.set(end.max(world.now()));
            world.settle_metrics();
            let writes = world.cluster.call_counts();
            let applied = writes.patch + writes.delete + writes.create + writes.status;
            let mut f =
                Figures::collect(&world, &recorder.rotations, applied, events_total, &mut gov);
            f.events = writes.event;
            f.reads = writes.get;
            f.set_lanes_chosen(&lanes_chosen);
            figures = Some(f);
            if driver.is_none() || (opts.stop_on_violation && !checker.violations.is_empty()) {
                break;
            }
            if let Some(d) = driver.as_mut() {
                d.calm();
            }
            world.faults = None;
            checker.calm_since = Some(world.now());
            calm_until = Some(world.now() + CALM_LIMIT);
            continue;
        }
        if let Some(limit) = calm_until {
            let anchored = world.snap.pools.values().any(|p| !actors::anchors(p).is_empty());
            if t > limit || (!anchored && t > limit - CALM_LIMIT + Duration::minutes(2)) {
                // Quiescence: faults off, every pool released, timers past.
                let snap = Arc::clone(&world.snap);
                let before = checker.violations.len();
                checker.final_check(&snap, world.now(), &world);
                attach_traces(&mut checker.violations[before..], &world);
                break;
            }
        }
        if t > world.now() {
            world.clock.set(t);
        }
        let now = world.now();
        // One step: the earliest world event, else the driver (world first on ties).
        let world_first = tw.is_some_and(|w| td.is_none_or(|d| w <= d));
        if let Some(d) = driver.as_ref() {
            d.hook_begin();
        }
        let (actor, info_controller, pool, ok, what, zombie) = if world_first {
            let Some((_, ev)) = world.pop() else { break };
            let actor = world.handle(ev);
            (actor.to_string(), false, None, true, String::new(), false)
        } else {
            let Some(d) = driver.as_mut() else { break };
            let s = d.step(now);
            (s.actor, s.controller, s.pool, s.ok, s.what, s.zombie)
        };
        steps += 1;
        let post = world.cluster.cache();
        let prev = Arc::clone(&world.snap);
        let d = observe::diff(&prev, &post);
        // Trace: what the actor said, the writes the controller sent, what changed.
        let routine = (what.starts_with("tick") || what.starts_with("pass")) && ok && d.is_empty();
        if !what.is_empty() && !routine && what != "housekeeping" && what != "idle" {
            let obj =
                pool.map_or(String::from("-"), |p| format!("NodePool {}", world.pool_name(p)));
            world.trace.record(now, &actor, obj, what.clone());
        }
        let notes = std::mem::take(&mut world.notes);
        for n in notes {
            world.trace.record(now, &actor, "-", n);
        }
        let (faulted, calls) = driver.as_ref().map_or((false, Vec::new()), Driver::hook_take);
        for c in calls.iter().filter(|c| c.fault != Fault::Proceed) {
            world.trace.record(
                now,
                &actor,
                c.target.clone(),
                format!("{:?} -> injected {:?}", c.verb, c.fault),
            );
        }
        for (obj, change) in observe::describe(&d) {
            world.trace.record(now, &actor, obj, change);
        }
        let events = world.cluster.take_events();
        events_total += events.len() as u64;
        for e in &events {
            world.trace.record(
                now,
                &actor,
                e.object.to_string(),
                format!("Event {} {}", e.reason, e.message),
            );
        }
        let announcements = driver.as_mut().map(Driver::take_announcements).unwrap_or_default();
        let mut announced_now = Vec::new();
        for a in &announcements {
            if a.what.starts_with("emit:") {
                let claim = a.claim.as_deref().unwrap_or("-");
                world.trace.record(
                    now,
                    &actor,
                    format!("NodePool {}", a.pool),
                    format!("announced {} for {claim} (row {})", a.what, a.row),
                );
            }
            if let Some(x) = announced(a) {
                announced_now.push(x);
            }
        }
        world.react(&d, now);
        world.snap = Arc::clone(&post);
        recorder.observe(&d, &post, now, &world, &mut gov);
        let exact = driver.as_ref().is_some_and(|dr| !dr.faults_on());
        let forceful_events: Vec<(String, Option<String>)> = announcements
            .iter()
            .filter(|a| a.what == "event:ForcefulFallback")
            .map(|a| (a.pool.clone(), a.claim.clone()))
            .collect();
        let info = StepInfo {
            now,
            actor: &actor,
            controller: info_controller,
            pool,
            ok,
            faulted,
            exact,
            zombie,
            forceful_events: &forceful_events,
        };
        if let Some(dr) = driver.as_ref() {
            let before = checker.violations.len();
            checker.fenced_writes(now, &actor, &dr.take_stale_writes());
            checker.check(&prev, &post, &d, &info, &announced_now, &world);
            attach_traces(&mut checker.violations[before..], &world);
            if opts.stop_on_violation && checker.violations.len() > before {
                break;
            }
        }
        if let (Some(dr), Some(p), true) =
            (driver.as_ref(), pool, info_controller && figures.is_none())
            && let Some(n) = dr.lanes_chosen(world.pool_name(p))
        {
            let n = n as u64;
            let e = lanes_chosen.entry(world.pool_name(p).to_string()).or_insert((n, n));
            *e = (e.0.min(n), e.1.max(n));
        }
        // Wake-ups: the leader's watch changes, mapped to pools as `run` maps them.
        if let Some(dr) = driver.as_mut() {
            dr.watch(now);
        }
        world.arm_fault_minute();
        if now - last_progress > Duration::hours(6) {
            last_progress = now;
            let span = (end - start).num_seconds().max(1) as f64;
            progress(((now - start).num_seconds() as f64 / span).min(1.0));
        }
    }
    let figures = figures.unwrap_or_else(|| {
        world.settle_metrics();
        let writes = world.cluster.call_counts();
        let mut f = Figures::collect(
            &world,
            &recorder.rotations,
            writes.patch + writes.delete + writes.create + writes.status,
            writes.event,
            &mut gov,
        );
        f.reads = writes.get;
        f.set_lanes_chosen(&lanes_chosen);
        f
    });
    let (passes, restarts, leader_changes, zombie_passes) = driver
        .as_ref()
        .map_or((0, 0, 0, 0), |d| (d.passes, d.restarts, d.leader_changes, d.zombie_passes));
    let stalled_passes = driver.as_ref().map_or(0, |d| d.stalled_passes);
    let coverage = driver.as_ref().map(Driver::all_coverage).unwrap_or_default();
    let end_rotations = recorder.rotations.into_iter().filter(|r| r.start <= end).collect();
    RunResult {
        seed: opts.seed,
        faults: opts.faults,
        controller: opts.controller,
        start,
        end,
        figures,
        rotations: end_rotations,
        lifetimes: world.metrics.lifetimes.values().cloned().collect(),
        forced_expiries: world
            .metrics
            .forced_expiries
            .iter()
            .filter(|(t, _, _)| *t <= end)
            .cloned()
            .collect(),
        windows,
        violations: checker.violations,
        steps,
        passes,
        restarts,
        leader_changes,
        zombie_passes,
        stalled_passes,
        coverage,
    }
}
