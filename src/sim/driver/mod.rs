//! Drives the real [`Controller`] the way `noderotation run` does, on the virtual clock: one
//! leader on its own cache (`connect_controller(lag)`), the start-up sweep before its first
//! pass, a queue of pool due times fed by the requeues it returns, watch-triggered wake-ups,
//! and the 1-minute tick over every pool. Nothing sleeps: the simulation jumps to the next due
//! instant.
//!
//! With `--faults` it also crashes the controller between two effects (the fault hook fails
//! every call of a dead process; a new instance re-lists and sweeps), hands leadership to the
//! second instance with its own cache (the deposed one may still run one pass), injects
//! Conflict and transient errors that did or did not apply, lags the caches, and delivers
//! wake-ups late, twice or not at all. Each instance writes through a [`Fenced`] view: the
//! leader's fence is renewed at each of its steps, as its Lease renewals would move it, and a
//! deposed leader keeps the deadline of its last renewal; the standby starts only once it has
//! read that renewal unchanged for a whole Lease duration on its own clock (`run`'s
//! [`Elector`]), which the `clockSkew` fault sets off the deposed leader's, and the deposed
//! leader's last pass sends its writes up to one request bound before they land. Every write the API server applies for an instance after the other one took the
//! Lease is recorded (invariant I22). A stalled pass (the `stalledPass` fault) runs on a thread
//! of its own: it blocks inside its stalled write while the simulation goes on (the standby takes
//! the Lease and leads), and resumes when the driver says so; the driver waits for it at both
//! ends, so the history stays one exact sequence.
//!
//! One concern a file: `hook.rs` (the fault hook: crashes, API errors, the log of the writes),
//! `instance.rs` (a controller instance's life: its fenced view, start, crash, Lease renewals,
//! the standby's takeover, the deposed leader's last pass), `stall.rs` (the stalled pass on its
//! own thread) and `watch.rs` (the leader's watch changes to wake-ups); this file holds the
//! driver's state, its set-up and the step loop.
//!
//! [`Fenced`]: crate::cluster::fence::Fenced
//! [`Elector`]: crate::cluster::lease::Elector
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use super::scenario::FaultRates;
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::cluster::fence::Fence;
use crate::cluster::memory::{CacheLag, MemoryCluster, RandomFaults, Rng};
use crate::engine::Engine;
use crate::reconcile::{Announcement, Controller, ReconcileError, SweepReport};
use crate::trigger::{Mapper, Next, Retries, Schedule};
use hook::lock;
use instance::skew_words;
use stall::Stalled;

mod hook;
mod instance;
mod stall;
mod watch;

pub(crate) use hook::{CallRecord, Hook, HookState};
pub(crate) use stall::Stall;

/// Driver-side timed events.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DrvEv {
    /// A controller instance starts (after a crash or a leader change): relist, sweep.
    Start,
    /// A late or duplicated wake-up for a pool.
    Wake(usize),
    /// The deposed leader runs one more pass.
    Zombie,
    /// The stalled write of the deposed leader's pass answers; the pass goes on.
    Resume,
}

/// What a driver step did.
#[derive(Debug, Clone)]
pub(crate) struct DriverStep {
    /// `controller#3`.
    pub actor: String,
    /// The pool reconciled, if a pass ran.
    pub pool: Option<usize>,
    /// The pass (or sweep) returned without error.
    pub ok: bool,
    pub what: String,
    /// The step touched the cluster through the controller.
    pub controller: bool,
    /// The step was the deposed leader's pass.
    pub zombie: bool,
}

pub(crate) struct Driver {
    engine: Arc<Engine>,
    clock: Arc<dyn Clock>,
    handles: [MemoryCluster; 2],
    leader: usize,
    ctl: Option<Controller>,
    /// The stall hook of the current leader's cluster view.
    stall: Option<Arc<Stall>>,
    /// The current leader's write fence, and when it last renewed its Lease.
    fence: Option<Arc<Fence>>,
    last_renew: DateTime<Utc>,
    /// The deposed leader's pass, held in its stalled write (at most one at a time).
    stalled: Option<Stalled>,
    /// Announcements of the current leader already handed out.
    seen: usize,
    /// Announcements not yet handed out (from crashed or deposed instances too).
    stash: Vec<Announcement>,
    /// Rule rows fired by any instance so far.
    pub coverage: BTreeSet<String>,
    incarnation: u32,
    label: String,
    zombie: Option<(Controller, String, usize, usize)>,
    pools: Vec<String>,
    /// The runtime's trigger seam on the virtual clock: pool due times, the status request.
    schedule: Schedule<DateTime<Utc>>,
    /// The leader's watch changes to pool keys (a new instance starts with a fresh one).
    mapper: Mapper,
    /// Consecutive failed passes per pool (the runtime's backoff).
    retries: Retries,
    events: BTreeMap<(DateTime<Utc>, u64), DrvEv>,
    seq: u64,
    next_tick: DateTime<Utc>,
    next_housekeeping: DateTime<Utc>,
    pub hook: Arc<Mutex<HookState>>,
    rng: Rng,
    /// The clock skew and write-in-flight draws: a stream of their own, so that they leave
    /// every other draw where it was.
    skew_rng: Rng,
    /// The bound of the standby's clock skew (`clockSkew`).
    skew: Duration,
    /// Per handle: how long before they land the writes of its instance were sent.
    in_flight_ms: [Arc<AtomicI64>; 2],
    rates: Option<FaultRates>,
    lag: Duration,
    pub passes: u64,
    pub restarts: u64,
    pub leader_changes: u64,
    pub zombie_passes: u64,
    pub stalled_passes: u64,
}

/// What a sweep did, for the trace; `None` when it did nothing.
fn sweep_summary(report: &SweepReport) -> Option<String> {
    let parts: Vec<String> = [
        (report.placeholders_deleted.len(), "placeholders deleted"),
        (report.nodes_released.len(), "nodes released"),
        (report.claims_failed.len(), "claims failed"),
        (report.pools_cleaned.len(), "pools cleaned"),
        (report.errors.len(), "errors"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn ceil_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    let secs = t.timestamp();
    let rem = secs.rem_euclid(60);
    let base = DateTime::from_timestamp(secs - rem, 0).unwrap_or(t);
    if base == t { t } else { base + Duration::minutes(1) }
}

/// How a [`Driver`] is set up.
pub(crate) struct Setup {
    pub engine: Arc<Engine>,
    pub clock: Arc<dyn Clock>,
    pub pools: Vec<String>,
    pub seed: u64,
    /// `Some` with `--faults`.
    pub rates: Option<FaultRates>,
    /// Cache lag bound (with faults).
    pub lag: Duration,
    /// Install the hook (and log write calls) even without faults (`--trace`).
    pub hook_always: bool,
    /// The bound of the standby's clock skew at a leader change (with faults).
    pub skew: Duration,
}

impl Driver {
    /// A driver for the pools on `world` (the world's handle); the first leader starts at once.
    pub(crate) fn new(world: &MemoryCluster, setup: Setup) -> Driver {
        let Setup { engine, clock, pools, seed, rates, lag, hook_always, skew } = setup;
        let mut rng = Rng::new(seed ^ 0x5eed_d21e);
        let lag_mode = |rng: &mut Rng| match rates {
            Some(_) if lag > Duration::zero() => CacheLag::UpTo { max: lag, seed: rng.next_u64() },
            _ => CacheLag::None,
        };
        let a = world.connect_controller(lag_mode(&mut rng));
        let b = world.connect_controller(lag_mode(&mut rng));
        let now = clock.now();
        let r = rates.clone().unwrap_or_default();
        let hook = Arc::new(Mutex::new(HookState {
            faults_on: rates.is_some(),
            crash: r.crash,
            api: RandomFaults {
                rng: rng.fork(),
                conflict: r.conflict,
                transient: r.transient,
                apply_then_transient: r.apply_then_transient,
            },
            dead: BTreeSet::new(),
            crashed: None,
            injected: 0,
            calls: Vec::new(),
            stale: BTreeSet::new(),
            stale_writes: Vec::new(),
        }));
        if rates.is_some() || hook_always {
            world.set_faults(Hook(Arc::clone(&hook)));
        }
        let mut d = Driver {
            engine,
            clock,
            handles: [a, b],
            leader: 0,
            ctl: None,
            stall: None,
            fence: None,
            last_renew: now,
            stalled: None,
            seen: 0,
            stash: Vec::new(),
            coverage: BTreeSet::new(),
            incarnation: 0,
            label: "controller#0".into(),
            zombie: None,
            pools,
            schedule: Schedule::default(),
            mapper: Mapper::default(),
            retries: Retries::default(),
            events: BTreeMap::new(),
            seq: 0,
            next_tick: ceil_minute(now),
            next_housekeeping: now + Duration::hours(1),
            hook,
            rng,
            skew_rng: Rng::new(seed ^ 0x5ce3_c10c),
            skew,
            in_flight_ms: [Arc::new(AtomicI64::new(0)), Arc::new(AtomicI64::new(0))],
            rates,
            lag,
            passes: 0,
            restarts: 0,
            leader_changes: 0,
            zombie_passes: 0,
            stalled_passes: 0,
        };
        d.at(now, DrvEv::Start);
        d
    }

    /// Turns every fault off and removes the cache lag (the quiescence phase).
    pub(crate) fn calm(&mut self) {
        self.rates = None;
        lock(&self.hook).faults_on = false;
        // A pass still held in its stalled write answers now: its effects belong to the faults.
        if self.stalled.is_some() {
            self.events.retain(|_, ev| *ev != DrvEv::Resume);
            let now = self.clock.now();
            self.at(now, DrvEv::Resume);
        }
        for h in &self.handles {
            h.set_cache_lag(CacheLag::None);
            h.flush_cache();
        }
    }

    /// The lanes `maxUnavailable: auto` chose for `pool` in the leader's last pass over it.
    pub(crate) fn lanes_chosen(&self, pool: &str) -> Option<usize> {
        self.ctl.as_ref()?.lanes_chosen(pool)
    }

    /// Announcements made since the last call, by any instance.
    pub(crate) fn take_announcements(&mut self) -> Vec<Announcement> {
        if let Some(ctl) = &self.ctl {
            let new = ctl.announcements().get(self.seen..).unwrap_or_default();
            self.stash.extend(new.iter().cloned());
            self.seen = ctl.announcements().len();
        }
        std::mem::take(&mut self.stash)
    }

    /// Keeps what a dying instance announced and fired.
    fn retire(&mut self, ctl: &Controller, seen: usize) {
        self.stash.extend(ctl.announcements().get(seen..).unwrap_or_default().iter().cloned());
        self.coverage.extend(ctl.coverage().iter().cloned());
    }

    /// Rule rows fired by any instance, the live one included.
    pub(crate) fn all_coverage(&self) -> BTreeSet<String> {
        let mut out = self.coverage.clone();
        if let Some(ctl) = &self.ctl {
            out.extend(ctl.coverage().iter().cloned());
        }
        out
    }

    pub(crate) fn faults_on(&self) -> bool {
        self.rates.is_some()
    }

    fn at(&mut self, t: DateTime<Utc>, ev: DrvEv) {
        self.seq += 1;
        self.events.insert((t, self.seq), ev);
    }

    /// Schedules `pool` at `t`, unless it is already due earlier.
    fn set_due(&mut self, pool: usize, t: DateTime<Utc>) {
        if let Some(name) = self.pools.get(pool) {
            self.schedule.add_at(name, t);
        }
    }

    /// When the driver next has something to do.
    pub(crate) fn next_time(&self) -> Option<DateTime<Utc>> {
        let ev = self.events.keys().next().map(|(t, _)| *t);
        if self.ctl.is_none() {
            return ev;
        }
        let next = self.schedule.wake_at(self.next_tick);
        [ev, Some(next), self.next_delivery(), Some(self.next_housekeeping)]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs the next driver step at `now` (the caller set the clock).
    pub(crate) fn step(&mut self, now: DateTime<Utc>) -> DriverStep {
        let ev_due = self.events.keys().next().is_some_and(|(t, _)| *t <= now);
        if ev_due && let Some((_, ev)) = self.events.pop_first() {
            return match ev {
                DrvEv::Start => self.start(now),
                DrvEv::Wake(pool) => {
                    self.set_due(pool, now);
                    self.quiet("late wake-up delivered")
                }
                DrvEv::Zombie => self.zombie_pass(),
                DrvEv::Resume => self.resume(),
            };
        }
        if self.next_housekeeping <= now {
            self.next_housekeeping = now + Duration::hours(1);
            // Standby caches would hold every event since they last led: drop them.
            for (i, h) in self.handles.iter().enumerate() {
                let zombie_here = self.zombie.as_ref().is_some_and(|z| z.2 == i)
                    || (self.stalled.is_some() && i != self.leader);
                if i != self.leader && !zombie_here {
                    h.resync_cache();
                }
            }
            return self.quiet("housekeeping");
        }
        if self.ctl.is_none() {
            return self.quiet("no leader");
        }
        let name = match self.schedule.take_due(now, self.next_tick) {
            None | Some(Next::Stopped) => return self.quiet("idle"),
            Some(Next::Deadline) => {
                let tick = self.next_tick;
                self.next_tick = tick + Duration::minutes(1);
                for pool in 0..self.pools.len() {
                    self.set_due(pool, tick);
                }
                self.renew(now);
                let report = self.ctl.as_mut().map(Controller::tick).unwrap_or_default();
                let what = match sweep_summary(&report) {
                    Some(s) => format!("tick: status, sweep: {s}"),
                    None => "tick: status".into(),
                };
                return self.after_controller(None, report.errors.is_empty(), what);
            }
            Some(Next::Status) => {
                self.renew(now);
                if let Some(ctl) = self.ctl.as_mut() {
                    ctl.update_policy_status();
                }
                return self.after_controller(None, true, "status".into());
            }
            Some(Next::Key(name)) => name,
        };
        let Some(pool) = self.pools.iter().position(|p| *p == name) else {
            return self.quiet("idle");
        };
        // Leader change before the pass: the lease moves to the other instance (not while a
        // deposed leader's pass is still held in a stalled write: one split brain at a time).
        if let Some(r) = self.rates.clone()
            && self.rng.chance(r.leader_change)
            && self.stalled.is_none()
        {
            self.leader_changes += 1;
            let old = self.ctl.take();
            self.stall = None;
            self.fence = None;
            let old_handle = self.leader;
            self.leader = 1 - self.leader;
            if let Some(old) = old {
                if self.rng.chance(r.zombie_pass) {
                    let t = now + Duration::seconds(i64::try_from(self.rng.below(20)).unwrap_or(0));
                    self.zombie = Some((old, self.label.clone(), old_handle, self.seen));
                    self.at(t, DrvEv::Zombie);
                } else {
                    self.retire(&old, self.seen);
                }
            }
            self.seen = 0;
            let (t, skew) = self.takeover(now);
            self.at(t, DrvEv::Start);
            self.set_due(pool, now);
            self.unwatch(old_handle);
            return self.quiet(&format!(
                "leader lost: lease moves to the other instance (its clock {})",
                skew_words(skew)
            ));
        }
        self.passes += 1;
        self.renew(now);
        if let Some(r) = self.rates.clone()
            && self.stalled.is_none()
            && self.handles[self.leader]
                .cache()
                .pools
                .get(&name)
                .is_some_and(|p| !super::actors::anchors(p).is_empty())
            && self.rng.chance(r.stalled_pass)
        {
            return self.stalled_pass(now, pool);
        }
        let result = match self.ctl.as_mut() {
            Some(ctl) => ctl.reconcile_pool(&name),
            None => return self.quiet("no leader"),
        };
        let (ok, what) = self.requeue(pool, now, &result);
        self.after_controller(Some(pool), ok, what)
    }

    /// Schedules `pool` again after its pass, as `run` does ([`Retries`]), and says so.
    fn requeue(
        &mut self,
        pool: usize,
        now: DateTime<Utc>,
        result: &Result<Duration, ReconcileError>,
    ) -> (bool, String) {
        let name = self.pools[pool].clone();
        match result {
            Ok(d) => match self.retries.passed(&name, *d) {
                None => (true, "pass: pool gone".to_string()),
                Some(after) => {
                    let after = Duration::from_std(after).unwrap_or(*d);
                    self.set_due(pool, now + after);
                    let d = crate::policy::duration::format_human(after);
                    (true, format!("pass {name}: requeue {d}"))
                }
            },
            Err(e) => {
                let after = self.retries.failed_after(&name, e.requeue());
                self.set_due(pool, now + Duration::from_std(after).unwrap_or(Duration::seconds(1)));
                (false, format!("pass {name}: error: {e}"))
            }
        }
    }

    /// Stops taking `handle`'s watch changes (it no longer leads).
    fn unwatch(&self, handle: usize) {
        self.handles[handle].watch_changes(false);
    }

    fn quiet(&self, what: &str) -> DriverStep {
        DriverStep {
            actor: self.label.clone(),
            pool: None,
            ok: true,
            what: what.to_string(),
            controller: false,
            zombie: false,
        }
    }
}
