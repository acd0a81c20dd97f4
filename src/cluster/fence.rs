//! Fencing a leader that may have lost its Lease without knowing it.
//!
//! A leader whose requests stall (an API server that accepts and answers late, a client
//! retrying 429s) may still believe it leads while the standby takes the Lease once it expires.
//! [`Fence`] is the leader's own deadline for writing: the send time of its last acquire or
//! renewal that won, plus the Lease duration, less the [`margin`], on its own clock (see
//! [`super::lease`]); [`Fenced`] checks it, on the injected clock, before every write and
//! refuses the write once it has passed ([`ApiError::Fenced`]). A standby takes the Lease only
//! after it saw the same record for a whole duration on its clock, which started after that
//! write was sent; with a per-request timeout no longer than the margin less the [`SLACK`], a
//! write sent before the deadline completes or is abandoned before the standby can hold the
//! Lease, whatever the two clocks read. A write that waits longer between the check and the
//! send (a paused process) is stopped by its own precondition.
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use super::{ApiError, ApiResult, Cluster};
use crate::clock::Clock;

/// Default Lease duration (seconds): how long a dead leader blocks the standby.
pub(crate) const DEFAULT_LEASE_DURATION_SECS: u64 = 15;
/// Default Lease grace (seconds): the leader renews this long before the Lease would expire,
/// so every `duration - grace` seconds.
pub(crate) const DEFAULT_LEASE_GRACE_SECS: u64 = 10;
/// Default bound of one API request (seconds).
pub(crate) const DEFAULT_API_REQUEST_TIMEOUT_SECS: u64 = 5;
/// Default bound of establishing a connection to the API server (seconds).
pub(crate) const DEFAULT_API_CONNECT_TIMEOUT_SECS: u64 = 5;
/// What the fence keeps beyond one request's bound: the two clocks' rates over a Lease
/// duration, and the time from reading the clock to sending a request. Not the clocks'
/// difference, which no decision depends on.
pub(crate) const SLACK: Duration = Duration::seconds(1);

/// How long before the Lease could pass to a standby the leader stops writing: one request's
/// bound plus the [`SLACK`].
pub(crate) fn margin(request_timeout: Duration) -> Duration {
    request_timeout + SLACK
}

/// The leader's write deadline. Closed (no write) until opened.
pub(crate) struct Fence {
    clock: Arc<dyn Clock>,
    deadline: Mutex<Option<DateTime<Utc>>>,
}

impl Fence {
    /// A closed fence.
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Fence {
        Fence { clock, deadline: Mutex::new(None) }
    }

    /// Writes are allowed until `deadline` (exclusive).
    pub(crate) fn open_until(&self, deadline: DateTime<Utc>) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Some(deadline);
    }

    /// No write from now on (the Lease is someone else's, or leadership was lost).
    pub(crate) fn close(&self) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    pub(crate) fn deadline(&self) -> Option<DateTime<Utc>> {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a write may be sent now.
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        self.check().is_ok()
    }

    /// `Ok` while the clock is before the deadline.
    pub(crate) fn check(&self) -> Result<(), ApiError> {
        let now = self.clock.now();
        match self.deadline() {
            Some(d) if now < d => Ok(()),
            Some(d) => Err(ApiError::Fenced(format!(
                "the leader Lease deadline {} has passed",
                d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ))),
            None => Err(ApiError::Fenced("this replica does not hold the leader Lease".into())),
        }
    }
}

/// A [`Cluster`] whose writes pass the [`Fence`] first; reads are never fenced.
pub(crate) struct Fenced {
    inner: Arc<dyn Cluster>,
    fence: Arc<Fence>,
}

impl Fenced {
    pub(crate) fn new(inner: Arc<dyn Cluster>, fence: Arc<Fence>) -> Fenced {
        Fenced { inner, fence }
    }

    /// Sends `write` only while the fence is open.
    fn fenced<T>(&self, write: impl FnOnce() -> ApiResult<T>) -> ApiResult<T> {
        self.fence.check()?;
        write()
    }
}

impl Cluster for Fenced {
    crate::cluster::delegate_reads!(inner);
    crate::cluster::delegate_writes!(inner, fenced);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::cluster::memory::{CacheLag, MemoryCluster};
    use crate::cluster::{EventRecord, ObjectKind, ObjectRef, Patch};
    use chrono::TimeZone;
    use k8s_openapi::api::core::v1::Pod;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().expect("time")
    }

    #[test]
    fn the_margin_is_one_request_and_the_slack() {
        assert_eq!(margin(Duration::seconds(5)), Duration::seconds(6));
    }

    #[test]
    fn the_fence_opens_until_its_deadline_on_the_injected_clock() {
        let clock = VirtualClock::new(t0());
        let fence = Fence::new(Arc::new(clock.clone()));
        assert!(matches!(fence.check(), Err(ApiError::Fenced(_))), "closed until opened");
        fence.open_until(t0() + Duration::seconds(9));
        assert!(fence.is_open());
        clock.advance(Duration::milliseconds(8999));
        assert!(fence.is_open());
        clock.advance(Duration::milliseconds(1));
        assert!(matches!(fence.check(), Err(ApiError::Fenced(m)) if m.contains("has passed")));
        fence.open_until(t0() + Duration::seconds(20)); // a renewal seen
        assert!(fence.is_open());
        fence.close();
        assert!(!fence.is_open());
    }

    #[test]
    fn a_fenced_cluster_refuses_every_write_past_the_deadline_and_still_reads() {
        let clock = VirtualClock::new(t0());
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let world = MemoryCluster::new(shared.clone(), "ns");
        world
            .apply_pool(crate::karpenter::NodePool::new(
                "p",
                crate::karpenter::NodePoolSpec::default(),
            ))
            .expect("pool");
        let client: Arc<dyn Cluster> = Arc::new(world.connect_controller(CacheLag::None));
        let fence = Arc::new(Fence::new(shared));
        fence.open_until(t0() + Duration::seconds(9));
        let fenced = Fenced::new(client, fence.clone());
        let pool = ObjectRef::cluster(ObjectKind::NodePool, "p");
        let mut patch = Patch::default();
        patch.set.insert("noderotation.io/freeze".into(), "x".into());
        fenced.patch(&pool, &patch, None).expect("before the deadline");
        clock.advance(Duration::seconds(10));
        patch.set.insert("noderotation.io/freeze".into(), "y".into());
        assert!(matches!(fenced.patch(&pool, &patch, None), Err(ApiError::Fenced(_))));
        assert!(matches!(fenced.delete(&pool, None, None), Err(ApiError::Fenced(_))));
        assert!(matches!(fenced.create_pod(&Pod::default()), Err(ApiError::Fenced(_))));
        let event = EventRecord {
            object: pool.clone(),
            reason: "R".into(),
            message: "m".into(),
            warning: false,
            time: clock.now(),
        };
        assert!(matches!(fenced.record_event(&event), Err(ApiError::Fenced(_))));
        let read = fenced.get_pool("p").expect("reads are not fenced").expect("pool");
        let ann = read.metadata.annotations.unwrap_or_default();
        assert_eq!(ann.get("noderotation.io/freeze").map(String::as_str), Some("x"));
        assert_eq!(world.call_counts().patch, 1, "the refused writes never reached the store");
    }
}
