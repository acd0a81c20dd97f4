//! The only source of time. Everything else receives a [`Clock`]; `Utc::now` is banned elsewhere
//! by `clippy.toml` so that simulation and tests replay exactly.
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

/// Where "now" comes from.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// Wall-clock time, for `noderotation run`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one permitted call site
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Wall-clock time when it was made plus the monotonic time since: it never steps when the wall
/// clock is corrected. The leader election and its write fence time the Lease with it, where
/// only the rate of a clock matters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SteadyClock {
    origin: DateTime<Utc>,
    start: std::time::Instant,
}

impl SteadyClock {
    pub(crate) fn new() -> Self {
        SteadyClock { origin: SystemClock.now(), start: std::time::Instant::now() }
    }
}

impl Default for SteadyClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SteadyClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = Duration::from_std(self.start.elapsed()).unwrap_or(Duration::MAX);
        self.origin.checked_add_signed(elapsed).unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// A clock that only moves when told to: simulation and tests.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl VirtualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        Self { now: Arc::new(Mutex::new(start)) }
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
