//! Pool keys with due times, the policy status request, and the tick's deadline: what the
//! single reconcile worker does next. Generic over the time type (`Instant` in `run`, the
//! virtual clock's `DateTime<Utc>` in `simulate`).
//!
//! A key is held at most once, at its earliest due time: a watch change (due now) overtakes a
//! requeue timer, and a longer requeue never postpones an earlier one.
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What the worker does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// This pool is due: reconcile it.
    Key(String),
    /// A pool or policy changed: recompute the policy status view.
    Status,
    /// The deadline (the tick) passed. It comes before keys that are due, so passes requeued
    /// back to back cannot starve the tick's work; it also answers a pending status request.
    Deadline,
    /// The queue was stopped (leadership lost); only the blocking queue of `run` says this.
    Stopped,
}

#[derive(Debug, Clone)]
pub(crate) struct Schedule<T> {
    due: BTreeMap<String, T>,
    /// When the policy status view is due for a recompute (a pool or policy changed).
    status: Option<T>,
}

impl<T> Default for Schedule<T> {
    fn default() -> Self {
        Schedule { due: BTreeMap::new(), status: None }
    }
}

impl<T: Ord + Copy> Schedule<T> {
    /// Schedules `key` at `at`, unless it is already due earlier.
    pub(crate) fn add_at(&mut self, key: &str, at: T) {
        match self.due.get_mut(key) {
            Some(due) => *due = (*due).min(at),
            None => {
                self.due.insert(key.to_string(), at);
            }
        }
    }

    /// Asks for a policy status recompute at `at`, unless one is already due sooner: a burst
    /// of changes is answered once.
    pub(crate) fn request_status_at(&mut self, at: T) {
        if self.status.is_none_or(|due| at < due) {
            self.status = Some(at);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.due.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.due.is_empty()
    }

    /// When `key` is due, if it is held.
    #[cfg(test)]
    pub(crate) fn due(&self, key: &str) -> Option<T> {
        self.due.get(key).copied()
    }

    /// What is due at `now`, and takes it: the deadline first (it answers a pending status
    /// request too), then a status request, then the earliest key (ties by name). `None`:
    /// nothing is due before [`Schedule::wake_at`].
    pub(crate) fn take_due(&mut self, now: T, deadline: T) -> Option<Next> {
        if deadline <= now {
            self.status = None;
            return Some(Next::Deadline);
        }
        if self.status.is_some_and(|at| at <= now) {
            self.status = None;
            return Some(Next::Status);
        }
        let (key, at) = self.earliest()?;
        if at > now {
            return None;
        }
        let key = key.to_string();
        self.due.remove(&key);
        Some(Next::Key(key))
    }

    fn earliest(&self) -> Option<(&str, T)> {
        self.due
            .iter()
            .min_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)))
            .map(|(k, t)| (k.as_str(), *t))
    }

    /// When something is next due: the earliest key, status request or `deadline`.
    pub(crate) fn wake_at(&self, deadline: T) -> T {
        let at = self.earliest().map_or(deadline, |(_, at)| at.min(deadline));
        self.status.map_or(at, |s| s.min(at))
    }
}

/// Capped exponential backoff after `failures` consecutive failed passes of one pool:
/// 1s, 2s, 4s, ... up to 5 minutes.
pub(crate) fn backoff(failures: u32) -> Duration {
    const CAP: Duration = Duration::from_secs(300);
    let exp = failures.saturating_sub(1).min(16);
    Duration::from_secs(1u64 << exp).min(CAP)
}

/// How long a status request waits for more changes to answer them together: a burst of pool
/// writes (a rotation's annotations) asks once.
pub(crate) const STATUS_COALESCE: Duration = Duration::from_secs(1);

/// The shortest requeue: a pass asking for less (or a clock skew) waits this long.
pub(crate) const MIN_REQUEUE: Duration = Duration::from_millis(500);

/// Consecutive failed passes per pool, and when a pool is due again after its pass.
#[derive(Debug, Default, Clone)]
pub(crate) struct Retries {
    failures: HashMap<String, u32>,
}

impl Retries {
    /// A pass of `pool` asked to come back after `requeue`. Zero is the engine's "no requeue":
    /// the pool is gone (or the handler ended `Done`), so nothing is scheduled; a watch change
    /// or the tick brings it back if it exists again.
    pub(crate) fn passed(&mut self, pool: &str, requeue: chrono::Duration) -> Option<Duration> {
        self.failures.remove(pool);
        if requeue <= chrono::Duration::zero() {
            return None;
        }
        Some(requeue.to_std().unwrap_or(MIN_REQUEUE).max(MIN_REQUEUE))
    }

    /// A pass of `pool` failed (an API error or a panic): back off.
    pub(crate) fn failed(&mut self, pool: &str) -> Duration {
        self.failed_after(pool, None)
    }

    /// A pass of `pool` failed in some of its rotation slots while the others finished and
    /// asked to come back after `requeue`: back off, but no later than that. A slot that
    /// keeps failing (an admission webhook rejecting its placeholder) is then retried as
    /// often as the others need a pass, never blocking their work for the backoff's 5 minutes;
    /// the failure count still grows, so the pool's failures stay visible.
    pub(crate) fn failed_after(
        &mut self,
        pool: &str,
        requeue: Option<chrono::Duration>,
    ) -> Duration {
        let n = self.failures.entry(pool.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        let after = backoff(*n);
        match requeue.filter(|r| *r > chrono::Duration::zero()) {
            Some(r) => after.min(r.to_std().unwrap_or(MIN_REQUEUE).max(MIN_REQUEUE)),
            None => after,
        }
    }

    /// Consecutive failures of `pool` so far.
    pub(crate) fn failures(&self, pool: &str) -> u32 {
        self.failures.get(pool).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_due_wins_and_keys_are_unique() {
        let mut s = Schedule::default();
        s.add_at("b", 60);
        s.add_at("b", 0);
        s.add_at("b", 120);
        s.add_at("a", 30);
        assert_eq!(s.len(), 2);
        assert_eq!(s.take_due(0, 1000), Some(Next::Key("b".into())));
        assert_eq!(s.take_due(0, 1000), None);
        assert_eq!(s.wake_at(1000), 30);
        assert_eq!(s.take_due(30, 30), Some(Next::Deadline), "the deadline first");
        assert_eq!(s.take_due(30, 1000), Some(Next::Key("a".into())));
        assert!(s.is_empty());
    }

    #[test]
    fn ties_go_by_name() {
        let mut s = Schedule::default();
        s.add_at("web", 5);
        s.add_at("api", 5);
        assert_eq!(s.take_due(5, 100), Some(Next::Key("api".into())));
        assert_eq!(s.take_due(5, 100), Some(Next::Key("web".into())));
    }

    #[test]
    fn a_status_request_is_coalesced_and_the_deadline_answers_it() {
        let mut s: Schedule<u32> = Schedule::default();
        s.request_status_at(20);
        s.request_status_at(25);
        s.add_at("a", 0);
        assert_eq!(s.wake_at(100), 0);
        assert_eq!(s.take_due(0, 100), Some(Next::Key("a".into())));
        assert_eq!(s.wake_at(100), 20);
        assert_eq!(s.take_due(20, 100), Some(Next::Status));
        assert_eq!(s.take_due(20, 100), None, "once");
        s.request_status_at(50);
        assert_eq!(s.take_due(40, 40), Some(Next::Deadline));
        assert_eq!(s.take_due(60, 100), None, "the deadline answered it");
    }

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(9), Duration::from_secs(256));
        assert_eq!(backoff(10), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn a_gone_pool_is_not_requeued_and_success_resets_the_backoff() {
        let mut r = Retries::default();
        // A deleted NodePool's pass returns zero: requeueing it would reconcile a pool that is
        // not there every half second, forever.
        assert_eq!(r.passed("gone", chrono::Duration::zero()), None);
        assert_eq!(r.passed("p", chrono::Duration::milliseconds(1)), Some(MIN_REQUEUE));
        assert_eq!(r.passed("p", chrono::Duration::seconds(30)), Some(Duration::from_secs(30)));
        assert_eq!(r.failed("p"), Duration::from_secs(1));
        assert_eq!(r.failed("p"), Duration::from_secs(2));
        assert_eq!(r.failures("p"), 2);
        assert_eq!(r.passed("p", chrono::Duration::seconds(30)), Some(Duration::from_secs(30)));
        assert_eq!(r.failed("p"), Duration::from_secs(1));
    }

    #[test]
    fn a_pass_that_failed_in_one_slot_comes_back_when_the_others_asked() {
        let mut r = Retries::default();
        let thirty = Some(chrono::Duration::seconds(30));
        for _ in 0..8 {
            r.failed_after("p", thirty);
        }
        assert_eq!(r.failures("p"), 8, "every failed pass counts");
        assert_eq!(r.failed_after("p", thirty), Duration::from_secs(30), "not 256s");
        assert_eq!(r.failed_after("p", None), Duration::from_secs(300), "no other slot finished");
        assert_eq!(r.failed_after("q", thirty), Duration::from_secs(1), "the backoff if sooner");
        let zero = Some(chrono::Duration::zero());
        assert_eq!(r.failed_after("q", zero), Duration::from_secs(2), "no requeue asked");
    }
}
