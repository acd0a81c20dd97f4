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
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

use super::scenario::FaultRates;
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::cluster::fence::{self, Fence, Fenced};
use crate::cluster::lease::{self, Elector, Step, Timing};
use crate::cluster::memory::{
    ApiVerb, CacheLag, Call, Fault, Faults, MemoryCluster, RandomFaults, Rng,
};
use crate::engine::Engine;
use crate::karpenter::NodeClaim;
use crate::reconcile::{Announcement, Controller, ControllerConfig, ReconcileError, SweepReport};
use crate::trigger::{Keys, Mapper, Next, Retries, STATUS_COALESCE, Schedule, affects_status};

/// One controller call, as the hook saw it.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub client: usize,
    pub verb: ApiVerb,
    pub target: String,
    pub fault: Fault,
}

/// State shared with the fault hook installed in the cluster.
#[derive(Debug)]
pub struct HookState {
    pub faults_on: bool,
    /// Crash around a write, drawn from `api`'s generator.
    crash: f64,
    /// Conflicts and transient errors (and the one generator of every draw).
    api: RandomFaults,
    /// Clients whose process is dead: every call fails.
    dead: BTreeSet<usize>,
    /// A crash happened during the current step (the client).
    pub crashed: Option<usize>,
    /// Faults injected during the current step.
    pub injected: u32,
    /// Write calls of the current step (kept for the trace).
    pub calls: Vec<CallRecord>,
    /// Clients of instances that lost the Lease to a newer leader: none of their writes may
    /// land from then on (the write fence's promise).
    stale: BTreeSet<usize>,
    /// Writes of those clients that the API server applied anyway (two leaders writing).
    pub stale_writes: Vec<CallRecord>,
}

impl HookState {
    pub fn begin_step(&mut self) {
        self.crashed = None;
        self.injected = 0;
        self.calls.clear();
    }
}

/// The [`Faults`] hook: crashes, API errors, and a log of the writes.
pub struct Hook(pub Arc<Mutex<HookState>>);

fn lock(state: &Mutex<HookState>) -> MutexGuard<'_, HookState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Faults for Hook {
    fn decide(&mut self, call: &Call<'_>) -> Fault {
        let mut st = lock(&self.0);
        let fault = if st.dead.contains(&call.client) {
            Fault::Transient
        } else if !st.faults_on {
            Fault::Proceed
        } else if call.verb.is_write() && {
            let p = st.crash;
            st.api.rng.chance(p)
        } {
            // The process dies around this write: before it applies, or after.
            st.dead.insert(call.client);
            st.crashed = Some(call.client);
            if st.api.rng.chance(0.5) { Fault::ApplyThenTransient } else { Fault::Transient }
        } else {
            st.api.decide(call)
        };
        if (fault != Fault::Proceed && !st.dead.contains(&call.client))
            || st.crashed == Some(call.client)
        {
            st.injected += 1;
        }
        if call.verb.is_write() {
            let record = CallRecord {
                client: call.client,
                verb: call.verb,
                target: call.target.to_string(),
                fault,
            };
            let applied = matches!(fault, Fault::Proceed | Fault::ApplyThenTransient);
            if applied && st.stale.contains(&call.client) {
                st.stale_writes.push(record.clone());
            }
            st.calls.push(record);
        }
        fault
    }
}

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

/// What a stalled pass's thread tells the driver.
enum StallMsg {
    /// The armed write was applied and its response is held.
    Stalled,
    /// The pass returned (it made fewer writes than the armed one, or it was resumed).
    Done(Box<Controller>, Result<Duration, ReconcileError>),
}

/// The stalled write of one pass, armed by the driver.
struct Armed {
    /// Writes to let through before the one that stalls (counting it: 1 = the first).
    left: usize,
    tx: mpsc::Sender<StallMsg>,
    resume: mpsc::Receiver<()>,
}

/// A controller's view of the cluster that can hold one write's response (`stalledPass`): the
/// write is applied, then the calling thread blocks until the driver resumes it. Disarmed, it
/// only forwards.
pub struct Stall {
    inner: MemoryCluster,
    armed: Mutex<Option<Armed>>,
}

impl Stall {
    fn new(inner: MemoryCluster) -> Stall {
        Stall { inner, armed: Mutex::new(None) }
    }

    fn arm(&self, armed: Armed) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = Some(armed);
    }

    fn disarm(&self) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// A write that passes straight through.
    fn unstalled<T>(&self, call: impl FnOnce() -> T) -> T {
        call()
    }

    /// A write that stalls if it is the armed one.
    fn write<T>(&self, call: impl FnOnce() -> T) -> T {
        let result = call();
        let fired = {
            let mut guard = self.armed.lock().unwrap_or_else(|e| e.into_inner());
            let hit = guard.as_mut().is_some_and(|a| {
                a.left = a.left.saturating_sub(1);
                a.left == 0
            });
            if hit { guard.take() } else { None }
        };
        if let Some(a) = fired {
            // A driver that went away (a run that ended) resumes every stalled pass.
            let _ = a.tx.send(StallMsg::Stalled);
            let _ = a.resume.recv();
        }
        result
    }
}

impl Cluster for Stall {
    crate::cluster::delegate_reads!(inner);
    // Only object writes stall: policy status and Events pass straight through.
    crate::cluster::delegate_writes!(inner, write, unstalled);
}

/// The clock an instance's write fence reads: the virtual clock less the time its writes spend
/// in flight (set for the deposed leader's last pass: it checks the fence when it sends a write,
/// which lands later).
struct SendClock {
    clock: Arc<dyn Clock>,
    in_flight_ms: Arc<AtomicI64>,
}

impl Clock for SendClock {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now() - Duration::milliseconds(self.in_flight_ms.load(Ordering::Relaxed))
    }
}

/// A pass held inside its stalled write, on its own thread.
struct Stalled {
    label: String,
    pool: usize,
    seen: usize,
    resume: mpsc::Sender<()>,
    rx: mpsc::Receiver<StallMsg>,
    thread: std::thread::JoinHandle<()>,
}

/// What a driver step did.
#[derive(Debug, Clone)]
pub struct DriverStep {
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

pub struct Driver {
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

/// The Lease of `noderotation run`'s defaults.
fn lease_duration() -> Duration {
    Duration::seconds(i64::try_from(fence::DEFAULT_LEASE_DURATION_SECS).unwrap_or(15))
}

/// `run`'s default request bound: how long a write sent before the fence closes may take to
/// land.
fn request_timeout() -> Duration {
    Duration::seconds(i64::try_from(fence::DEFAULT_API_REQUEST_TIMEOUT_SECS).unwrap_or(5))
}

/// How long before the Lease expires a leader stops writing, at `run`'s default request bound.
fn fence_margin() -> Duration {
    fence::margin(request_timeout())
}

/// The election's timing at `run`'s defaults.
fn lease_timing() -> Timing {
    let grace = i64::try_from(fence::DEFAULT_LEASE_GRACE_SECS).unwrap_or(10);
    Timing {
        duration: lease_duration(),
        period: lease_duration() - Duration::seconds(grace),
        margin: fence_margin(),
        retry: Duration::seconds(1),
    }
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

/// `1.2s`: a short span, to a tenth of a second.
fn tenths(d: Duration) -> String {
    format!("{:.1}s", d.num_milliseconds().unsigned_abs() as f64 / 1000.0)
}

/// `1.2s ahead`, `0.4s behind`: a standby's clock against the deposed leader's.
fn skew_words(skew: Duration) -> String {
    let ahead = if skew >= Duration::zero() { "ahead" } else { "behind" };
    format!("{} {ahead}", tenths(skew))
}

fn ceil_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    let secs = t.timestamp();
    let rem = secs.rem_euclid(60);
    let base = DateTime::from_timestamp(secs - rem, 0).unwrap_or(t);
    if base == t { t } else { base + Duration::minutes(1) }
}

/// How a [`Driver`] is set up.
pub struct Setup {
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
    pub fn new(world: &MemoryCluster, setup: Setup) -> Driver {
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
    pub fn calm(&mut self) {
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
    pub fn lanes_chosen(&self, pool: &str) -> Option<usize> {
        self.ctl.as_ref()?.lanes_chosen(pool)
    }

    /// Announcements made since the last call, by any instance.
    pub fn take_announcements(&mut self) -> Vec<Announcement> {
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
    pub fn all_coverage(&self) -> BTreeSet<String> {
        let mut out = self.coverage.clone();
        if let Some(ctl) = &self.ctl {
            out.extend(ctl.coverage().iter().cloned());
        }
        out
    }

    /// Clears the hook's per-step record (before a step).
    pub fn hook_begin(&self) {
        lock(&self.hook).begin_step();
    }

    /// Whether a fault was injected during the step, and its write calls.
    pub fn hook_take(&self) -> (bool, Vec<CallRecord>) {
        let mut st = lock(&self.hook);
        (st.injected > 0 || st.crashed.is_some(), std::mem::take(&mut st.calls))
    }

    pub fn faults_on(&self) -> bool {
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

    /// The leader's watch changes up to `now`, through the runtime's [`Mapper`]: each pool
    /// they wake is due at once (subject to `--faults`); a pool or policy change asks for a
    /// policy status recompute, coalesced as in `run`.
    pub fn watch(&mut self, now: DateTime<Utc>) {
        let handle = &self.handles[self.leader];
        handle.deliver(now);
        let changes = handle.take_changes();
        if changes.is_empty() || self.ctl.is_none() {
            return;
        }
        let view = handle.cache();
        let pool_of_claim = |claim: &str| {
            view.claims.get(claim).and_then(|c| NodeClaim::node_pool(c).map(str::to_string))
        };
        let coalesce = Duration::from_std(STATUS_COALESCE).unwrap_or(Duration::seconds(1));
        let mut woken = Vec::new();
        for change in &changes {
            if affects_status(change) {
                self.schedule.request_status_at(now + coalesce);
            }
            match self.mapper.keys(change, &pool_of_claim) {
                Keys::None => {}
                Keys::Pool(name) => woken.extend(self.pools.iter().position(|p| *p == name)),
                Keys::All => woken.extend(0..self.pools.len()),
            }
        }
        for pool in woken {
            self.wake(pool, now);
        }
    }

    /// When the leader's cache next receives a watch event.
    fn next_delivery(&self) -> Option<DateTime<Utc>> {
        self.ctl.as_ref().and(self.handles[self.leader].next_delivery())
    }

    /// A watch change that wakes `pool` at once (subject to `--faults`: lost, late or twice).
    fn wake(&mut self, pool: usize, now: DateTime<Utc>) {
        if let Some(r) = self.rates.clone() {
            let lag_ms = u64::try_from(self.lag.num_milliseconds()).unwrap_or(0);
            let late = |rng: &mut Rng| {
                Duration::milliseconds(i64::try_from(rng.below(lag_ms + 1)).unwrap_or(0))
            };
            let u = self.rng.next_f64();
            if u < r.wake_drop {
                return;
            } else if u < r.wake_drop + r.wake_late {
                let t = now + late(&mut self.rng);
                self.at(t, DrvEv::Wake(pool));
                return;
            } else if u < r.wake_drop + r.wake_late + r.wake_duplicate {
                let t = now + late(&mut self.rng);
                self.at(t, DrvEv::Wake(pool));
            }
        }
        self.set_due(pool, now);
    }

    /// When the driver next has something to do.
    pub fn next_time(&self) -> Option<DateTime<Utc>> {
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

    fn new_controller(&self, handle: usize) -> (Controller, Arc<Stall>, Arc<Fence>) {
        let stall = Arc::new(Stall::new(self.handles[handle].clone()));
        let sent = SendClock {
            clock: Arc::clone(&self.clock),
            in_flight_ms: Arc::clone(&self.in_flight_ms[handle]),
        };
        let fence = Arc::new(Fence::new(Arc::new(sent)));
        let cluster: Arc<dyn Cluster> = Arc::new(Fenced::new(stall.clone(), fence.clone()));
        let ctl = Controller::new(
            cluster,
            Arc::clone(&self.clock),
            Arc::clone(&self.engine),
            ControllerConfig::default(),
        );
        (ctl, stall, fence)
    }

    /// The leader's Lease renewal at `now`: its fence moves to `now + duration - margin`.
    fn renew(&mut self, now: DateTime<Utc>) {
        if let Some(f) = &self.fence {
            f.open_until(now + lease_duration() - fence_margin());
            self.last_renew = now;
        }
    }

    /// When the standby takes the Lease, as `run` decides it ([`Elector`]): it reads the Lease
    /// once a renewal period, at a seed-chosen phase, on its own clock (`skew` ahead of the
    /// deposed leader's, behind when negative), and takes it once it has read the deposed
    /// leader's last renewal unchanged for a whole duration. The skew moves nothing.
    fn takeover(&mut self, now: DateTime<Utc>) -> (DateTime<Utc>, Duration) {
        let period = lease_timing().period;
        let phase_ms = u64::try_from(period.num_milliseconds()).unwrap_or(0);
        let phase = Duration::milliseconds(i64::try_from(self.rng.below(phase_ms)).unwrap_or(0));
        let skew = self.standby_skew();
        let mut last = Lease::default();
        last.metadata.resource_version = Some("1".into());
        last.spec = Some(LeaseSpec {
            holder_identity: Some("deposed".into()),
            renew_time: lease::micro_time(self.last_renew),
            lease_duration_seconds: i32::try_from(lease_duration().num_seconds()).ok(),
            ..LeaseSpec::default()
        });
        let mut standby = Elector::new("standby", lease_timing());
        // Real time of the standby's next step, from its first read after the last renewal.
        let mut t = self.last_renew + phase;
        for _ in 0..1000 {
            let local = t + skew;
            match standby.next(local) {
                Step::Wait(until) => t = until - skew,
                Step::Read => standby.read(Some(&last), local),
                Step::Acquire | Step::Renew => break,
            }
        }
        (t.max(now), skew)
    }

    /// The standby's clock less the deposed leader's at a leader change: uniform within
    /// `clockSkew` either way.
    fn standby_skew(&mut self) -> Duration {
        let max = u64::try_from(self.skew.num_milliseconds()).unwrap_or(0);
        let drawn = i64::try_from(self.skew_rng.below(2 * max + 1)).unwrap_or(0);
        Duration::milliseconds(drawn - i64::try_from(max).unwrap_or(0))
    }

    /// Writes of an instance that had lost the Lease, applied since the last call.
    pub fn take_stale_writes(&self) -> Vec<CallRecord> {
        std::mem::take(&mut lock(&self.hook).stale_writes)
    }

    fn crashed(&self) -> Option<usize> {
        lock(&self.hook).crashed
    }

    /// Runs the next driver step at `now` (the caller set the clock).
    pub fn step(&mut self, now: DateTime<Utc>) -> DriverStep {
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

    /// Handles a crash during the step that just ran.
    fn after_controller(&mut self, pool: Option<usize>, ok: bool, what: String) -> DriverStep {
        let actor = self.label.clone();
        let mut what = what;
        if let Some(client) = self.crashed()
            && client == self.handles[self.leader].client_id()
            && self.ctl.is_some()
        {
            if let Some(old) = self.ctl.take() {
                self.retire(&old, self.seen);
            }
            self.fence = None;
            self.seen = 0;
            self.restarts += 1;
            let now = self.clock.now();
            let t = now + Duration::seconds(5 + i64::try_from(self.rng.below(25)).unwrap_or(0));
            self.at(t, DrvEv::Start);
            what.push_str(" -- CRASH: process died around a write");
        }
        DriverStep { actor, pool, ok, what, controller: true, zombie: false }
    }

    fn start(&mut self, now: DateTime<Utc>) -> DriverStep {
        if self.ctl.is_some() {
            return self.quiet("already leading");
        }
        self.incarnation += 1;
        self.label = format!("controller#{}", self.incarnation);
        let handle = self.leader;
        // A new process: its reflectors list afresh, its queue and trigger memory start empty.
        self.handles[handle].watch_changes(true);
        self.mapper = Mapper::default();
        self.schedule = Schedule::default();
        self.retries = Retries::default();
        self.handles[handle].resync_cache();
        let client = self.handles[handle].client_id();
        let other = self.handles[1 - handle].client_id();
        {
            // The Lease is this instance's now: the other one's writes must not land any more.
            let mut hook = lock(&self.hook);
            hook.dead.remove(&client);
            hook.stale.remove(&client);
            hook.stale.insert(other);
        }
        let (mut ctl, stall, fence) = self.new_controller(handle);
        self.fence = Some(fence);
        self.renew(now);
        let report = ctl.startup_sweep();
        self.ctl = Some(ctl);
        self.stall = Some(stall);
        self.seen = 0;
        for pool in 0..self.pools.len() {
            self.set_due(pool, now);
        }
        let what = format!(
            "start (cache {}), sweep: {}",
            if handle == 0 { "A" } else { "B" },
            sweep_summary(&report).unwrap_or_else(|| "nothing to do".into()),
        );
        let ok = report.errors.is_empty();
        self.after_controller(None, ok, what)
    }

    fn zombie_pass(&mut self) -> DriverStep {
        let Some((mut ctl, label, handle, seen)) = self.zombie.take() else {
            return self.quiet("no zombie");
        };
        self.zombie_passes += 1;
        let pool = usize::try_from(self.rng.below(self.pools.len() as u64)).unwrap_or(0);
        let name = self.pools[pool].clone();
        // Its writes were sent (and passed the fence) up to one request bound before they land.
        let bound = u64::try_from(request_timeout().num_milliseconds()).unwrap_or(0);
        let in_flight = i64::try_from(self.skew_rng.below(bound + 1)).unwrap_or(0);
        self.in_flight_ms[handle].store(in_flight, Ordering::Relaxed);
        let result = ctl.reconcile_pool(&name);
        self.in_flight_ms[handle].store(0, Ordering::Relaxed);
        self.retire(&ctl, seen);
        drop(ctl);
        let sent = tenths(Duration::milliseconds(in_flight));
        let what = match result {
            Ok(_) => format!("deposed leader's last pass over {name} (writes sent {sent} earlier)"),
            Err(e) => format!(
                "deposed leader's last pass over {name} (writes sent {sent} earlier): error: {e}"
            ),
        };
        DriverStep {
            actor: format!("{label}(old)"),
            pool: Some(pool),
            ok: true,
            what,
            controller: true,
            zombie: true,
        }
    }
}

impl Driver {
    /// The leader's pass over `pool` with one of its first three writes stalled
    /// (`stalledPass`). A pass that makes fewer writes simply completes; else the Lease moves
    /// to the other instance while the pass waits, and [`Driver::resume`] lets it go on.
    fn stalled_pass(&mut self, now: DateTime<Utc>, pool: usize) -> DriverStep {
        let (Some(mut ctl), Some(stall)) = (self.ctl.take(), self.stall.clone()) else {
            return self.quiet("no leader");
        };
        let left = 1 + usize::try_from(self.rng.below(3)).unwrap_or(0);
        let (tx, rx) = mpsc::channel();
        let (resume, resume_rx) = mpsc::channel();
        stall.arm(Armed { left, tx: tx.clone(), resume: resume_rx });
        let name = self.pools[pool].clone();
        let thread = std::thread::spawn(move || {
            let result = ctl.reconcile_pool(&name);
            let _ = tx.send(StallMsg::Done(Box::new(ctl), result));
        });
        match rx.recv() {
            Ok(StallMsg::Done(ctl, result)) => {
                // Fewer writes than the armed one: an ordinary pass.
                let _ = thread.join();
                stall.disarm();
                self.ctl = Some(*ctl);
                let (ok, what) = self.requeue(pool, now, &result);
                self.after_controller(Some(pool), ok, what)
            }
            Ok(StallMsg::Stalled) => {
                self.stalled_passes += 1;
                self.leader_changes += 1;
                let label = self.label.clone();
                self.stalled = Some(Stalled {
                    label: label.clone(),
                    pool,
                    seen: self.seen,
                    resume,
                    rx,
                    thread,
                });
                self.stall = None;
                self.fence = None;
                self.unwatch(self.leader);
                self.leader = 1 - self.leader;
                self.seen = 0;
                // The Lease renewals stall with the pass: the standby takes the Lease once it
                // expires; the stalled response comes back 30s to 15m after it was sent.
                let (takeover, _) = self.takeover(now);
                self.at(takeover, DrvEv::Start);
                let stall_for =
                    Duration::seconds(30 + i64::try_from(self.rng.below(870)).unwrap_or(0));
                self.at(now + stall_for, DrvEv::Resume);
                self.set_due(pool, now);
                DriverStep {
                    actor: label,
                    pool: Some(pool),
                    ok: true,
                    what: format!(
                        "pass {}: a write's response stalls for {}; the Lease moves to the other instance",
                        self.pools[pool],
                        crate::policy::duration::format_human(stall_for)
                    ),
                    controller: true,
                    zombie: true,
                }
            }
            Err(_) => {
                let _ = thread.join();
                self.quiet("stalled pass lost")
            }
        }
    }

    /// The stalled write answers: the deposed leader's pass goes on from where it stopped.
    fn resume(&mut self) -> DriverStep {
        let Some(st) = self.stalled.take() else { return self.quiet("nothing stalled") };
        let _ = st.resume.send(());
        let done = st.rx.recv();
        let _ = st.thread.join();
        let name = self.pools[st.pool].clone();
        let what = match done {
            Ok(StallMsg::Done(ctl, result)) => {
                self.retire(&ctl, st.seen);
                match result {
                    Ok(_) => format!("stalled pass over {name} resumed and finished"),
                    Err(e) => format!("stalled pass over {name} resumed: error: {e}"),
                }
            }
            _ => format!("stalled pass over {name} lost"),
        };
        DriverStep {
            actor: format!("{}(stalled)", st.label),
            pool: Some(st.pool),
            ok: true,
            what,
            controller: true,
            zombie: true,
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(st) = self.stalled.take() {
            let _ = st.resume.send(());
            let _ = st.thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::TimeZone;
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};

    use super::*;
    use crate::clock::VirtualClock;
    use crate::karpenter::{NODEPOOL_LABEL, NodePool, NodePoolSpec};

    /// Runs every driver step due at the clock's time, watching after each as `simulate` does.
    fn settle(d: &mut Driver, clock: &VirtualClock) {
        let now = clock.now();
        while d.next_time().is_some_and(|t| t <= now) {
            d.step(now);
            d.watch(now);
        }
    }

    fn node(ready: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels = Some(BTreeMap::from([(NODEPOOL_LABEL.into(), "general".into())]));
        let status = if ready { "True" } else { "False" };
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
        n
    }

    /// The simulation wakes a pool only through the runtime's mapping of watch changes: a Node
    /// turning Ready wakes its pool; the same Node not Ready, or Ready again, does not.
    #[test]
    fn a_watch_change_wakes_its_pool_as_the_runtime_maps_it() {
        let start = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).single().unwrap();
        let clock = VirtualClock::new(start);
        let world = MemoryCluster::new(Arc::new(clock.clone()), "noderotation-system");
        world.apply_pool(NodePool::new("general", NodePoolSpec::default())).unwrap();
        let mut d = Driver::new(
            &world,
            Setup {
                engine: Arc::new(Engine::embedded().clone()),
                clock: Arc::new(clock.clone()),
                pools: vec!["general".into()],
                seed: 1,
                rates: None,
                lag: Duration::zero(),
                hook_always: false,
                skew: Duration::zero(),
            },
        );
        settle(&mut d, &clock);
        assert!(d.passes > 0, "the first leader started and passed over the pool");
        clock.advance(Duration::seconds(1));
        let now = clock.now();
        let due = |d: &Driver| d.schedule.due("general");
        assert!(due(&d).is_some_and(|t| t > now), "requeued for later: {:?}", due(&d));
        world.apply_node(node(false)).unwrap();
        d.watch(now);
        assert!(due(&d).is_some_and(|t| t > now), "a Node not Ready wakes nothing");
        world.update_node("n1", |n| *n = node(true));
        d.watch(now);
        assert_eq!(due(&d), Some(now), "a Node turning Ready wakes its pool");
        settle(&mut d, &clock);
        assert!(due(&d).is_some_and(|t| t > now));
        world.update_node("n1", |n| n.metadata.annotations = Some(BTreeMap::new()));
        d.watch(now);
        assert!(due(&d).is_some_and(|t| t > now), "Ready again is no edge");
    }
}
