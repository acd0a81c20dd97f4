//! The fault hook installed in the cluster: it crashes a controller process around a write,
//! injects Conflict and transient errors, fails every call of a dead process, and logs the writes
//! (those of an instance that lost the Lease among them, for invariant I22).
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use super::Driver;
use crate::cluster::memory::{ApiVerb, Call, Fault, Faults, RandomFaults};

/// One controller call, as the hook saw it.
#[derive(Debug, Clone)]
pub(crate) struct CallRecord {
    pub client: usize,
    pub verb: ApiVerb,
    pub target: String,
    pub fault: Fault,
}

/// State shared with the fault hook installed in the cluster.
#[derive(Debug)]
pub(crate) struct HookState {
    pub faults_on: bool,
    /// Crash around a write, drawn from `api`'s generator.
    pub(super) crash: f64,
    /// Conflicts and transient errors (and the one generator of every draw).
    pub(super) api: RandomFaults,
    /// Clients whose process is dead: every call fails.
    pub(super) dead: BTreeSet<usize>,
    /// A crash happened during the current step (the client).
    pub crashed: Option<usize>,
    /// Faults injected during the current step.
    pub injected: u32,
    /// Write calls of the current step (kept for the trace).
    pub calls: Vec<CallRecord>,
    /// Clients of instances that lost the Lease to a newer leader: none of their writes may
    /// land from then on (the write fence's promise).
    pub(super) stale: BTreeSet<usize>,
    /// Writes of those clients that the API server applied anyway (two leaders writing).
    pub stale_writes: Vec<CallRecord>,
}

impl HookState {
    pub(crate) fn begin_step(&mut self) {
        self.crashed = None;
        self.injected = 0;
        self.calls.clear();
    }
}

/// The [`Faults`] hook: crashes, API errors, and a log of the writes.
pub(crate) struct Hook(pub Arc<Mutex<HookState>>);

pub(super) fn lock(state: &Mutex<HookState>) -> MutexGuard<'_, HookState> {
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

impl Driver {
    /// Clears the hook's per-step record (before a step).
    pub(crate) fn hook_begin(&self) {
        lock(&self.hook).begin_step();
    }

    /// Whether a fault was injected during the step, and its write calls.
    pub(crate) fn hook_take(&self) -> (bool, Vec<CallRecord>) {
        let mut st = lock(&self.hook);
        (st.injected > 0 || st.crashed.is_some(), std::mem::take(&mut st.calls))
    }

    /// Writes of an instance that had lost the Lease, applied since the last call.
    pub(crate) fn take_stale_writes(&self) -> Vec<CallRecord> {
        std::mem::take(&mut lock(&self.hook).stale_writes)
    }

    pub(super) fn crashed(&self) -> Option<usize> {
        lock(&self.hook).crashed
    }
}
