//! The stalled pass (`stalledPass`): a controller's view of the cluster that holds one write's
//! response, the pass blocked in it on a thread of its own while the Lease moves on, and its
//! resumption; the driver waits for it at both ends, so the history stays one exact sequence.
use std::sync::Mutex;
use std::sync::mpsc;

use chrono::{DateTime, Duration, Utc};

use super::{Driver, DriverStep, DrvEv};
use crate::cluster::Cluster;
use crate::cluster::memory::MemoryCluster;
use crate::reconcile::{Controller, ReconcileError};

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
pub(crate) struct Stall {
    inner: MemoryCluster,
    armed: Mutex<Option<Armed>>,
}

impl Stall {
    pub(super) fn new(inner: MemoryCluster) -> Stall {
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

/// A pass held inside its stalled write, on its own thread.
pub(super) struct Stalled {
    label: String,
    pool: usize,
    seen: usize,
    resume: mpsc::Sender<()>,
    rx: mpsc::Receiver<StallMsg>,
    thread: std::thread::JoinHandle<()>,
}

impl Driver {
    /// The leader's pass over `pool` with one of its first three writes stalled
    /// (`stalledPass`). A pass that makes fewer writes simply completes; else the Lease moves
    /// to the other instance while the pass waits, and [`Driver::resume`] lets it go on.
    pub(super) fn stalled_pass(&mut self, now: DateTime<Utc>, pool: usize) -> DriverStep {
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
    pub(super) fn resume(&mut self) -> DriverStep {
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
