//! A controller instance's life: its view of the cluster (stalls, then the write fence on the
//! clock its writes are sent by), its start (relist, the start-up sweep), a crash around a write,
//! its Lease renewals, when the standby takes the Lease on its own skewed clock, and the deposed
//! leader's last pass.
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

use super::hook::lock;
use super::stall::Stall;
use super::{Driver, DriverStep, DrvEv, sweep_summary};
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::cluster::fence::{self, Fence, Fenced};
use crate::cluster::lease::{self, Elector, Step, Timing};
use crate::reconcile::{Controller, ControllerConfig};
use crate::trigger::{Mapper, Retries, Schedule};

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

/// `1.2s`: a short span, to a tenth of a second.
fn tenths(d: Duration) -> String {
    format!("{:.1}s", d.num_milliseconds().unsigned_abs() as f64 / 1000.0)
}

/// `1.2s ahead`, `0.4s behind`: a standby's clock against the deposed leader's.
pub(super) fn skew_words(skew: Duration) -> String {
    let ahead = if skew >= Duration::zero() { "ahead" } else { "behind" };
    format!("{} {ahead}", tenths(skew))
}

impl Driver {
    /// Handles a crash during the step that just ran.
    pub(super) fn after_controller(
        &mut self,
        pool: Option<usize>,
        ok: bool,
        what: String,
    ) -> DriverStep {
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

    pub(super) fn start(&mut self, now: DateTime<Utc>) -> DriverStep {
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
    pub(super) fn renew(&mut self, now: DateTime<Utc>) {
        if let Some(f) = &self.fence {
            f.open_until(now + lease_duration() - fence_margin());
            self.last_renew = now;
        }
    }

    /// When the standby takes the Lease, as `run` decides it ([`Elector`]): it reads the Lease
    /// once a renewal period, at a seed-chosen phase, on its own clock (`skew` ahead of the
    /// deposed leader's, behind when negative), and takes it once it has read the deposed
    /// leader's last renewal unchanged for a whole duration. The skew moves nothing.
    pub(super) fn takeover(&mut self, now: DateTime<Utc>) -> (DateTime<Utc>, Duration) {
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

    pub(super) fn zombie_pass(&mut self) -> DriverStep {
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
