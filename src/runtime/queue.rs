//! The work queue of `noderotation run`: pool names with due times, one blocking consumer.
//!
//! A key is held at most once, at its earliest due time: a watch event (due now) overtakes a
//! requeue timer, and a longer requeue never postpones an earlier one. The consumer is the
//! single reconcile worker (a blocking thread), so a pool is never reconciled twice at once.
use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct State {
    due: HashMap<String, Instant>,
    /// When the policy status view is due for a recompute (a pool or policy changed).
    status: Option<Instant>,
    stopped: bool,
}

/// What [`WorkQueue::next`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// This pool is due: reconcile it.
    Key(String),
    /// A pool or policy changed: recompute the policy status view.
    Status,
    /// The deadline (the tick) passed. It comes before keys that are due, so passes requeued
    /// back to back cannot starve the tick's work; it also answers a pending status request.
    Deadline,
    /// [`WorkQueue::stop`] was called.
    Stopped,
}

#[derive(Debug, Default)]
pub struct WorkQueue {
    state: Mutex<State>,
    wake: Condvar,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Schedules `key` at `at`, unless it is already due earlier.
    pub fn add_at(&self, key: &str, at: Instant) {
        let mut state = self.lock();
        let entry = state.due.entry(key.to_string()).or_insert(at);
        if at < *entry {
            *entry = at;
        }
        drop(state);
        self.wake.notify_all();
    }

    pub fn add_now(&self, key: &str) {
        self.add_at(key, Instant::now());
    }

    pub fn add_after(&self, key: &str, after: Duration) {
        self.add_at(key, Instant::now() + after);
    }

    /// Asks for a policy status recompute `after` from now, unless one is already due sooner:
    /// a burst of changes is answered once.
    pub fn request_status_after(&self, after: Duration) {
        let at = Instant::now() + after;
        let mut state = self.lock();
        if state.status.is_none_or(|due| at < due) {
            state.status = Some(at);
        }
        drop(state);
        self.wake.notify_all();
    }

    pub fn len(&self) -> usize {
        self.lock().due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes `next` return `Stopped` until `resume`.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.wake.notify_all();
    }

    pub fn resume(&self) {
        self.lock().stopped = false;
    }

    /// Blocks until `deadline` passes (first: the tick is never starved), a status recompute is
    /// due, a key is due (the earliest first; ties by name), or the queue is stopped.
    pub fn next(&self, deadline: Instant) -> Next {
        let mut state = self.lock();
        loop {
            if state.stopped {
                return Next::Stopped;
            }
            let now = Instant::now();
            if deadline <= now {
                state.status = None;
                return Next::Deadline;
            }
            if state.status.is_some_and(|at| at <= now) {
                state.status = None;
                return Next::Status;
            }
            let earliest = state.due.iter().min_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)));
            if let Some((key, at)) = earliest
                && *at <= now
            {
                let key = key.clone();
                state.due.remove(&key);
                return Next::Key(key);
            }
            let wake_at = earliest.map_or(deadline, |(_, at)| (*at).min(deadline));
            let wake_at = state.status.map_or(wake_at, |at| at.min(wake_at));
            let (guard, _) = self
                .wake
                .wait_timeout(state, wake_at.saturating_duration_since(now))
                .unwrap_or_else(|e| e.into_inner());
            state = guard;
        }
    }
}

/// Capped exponential backoff after `failures` consecutive failed passes of one pool:
/// 1s, 2s, 4s, ... up to 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    const CAP: Duration = Duration::from_secs(300);
    let exp = failures.saturating_sub(1).min(16);
    Duration::from_secs(1u64 << exp).min(CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_due_wins_and_keys_are_unique() {
        let q = WorkQueue::new();
        let now = Instant::now();
        q.add_at("b", now + Duration::from_secs(60));
        q.add_at("b", now);
        q.add_at("b", now + Duration::from_secs(120));
        q.add_at("a", now + Duration::from_secs(30));
        assert_eq!(q.len(), 2);
        assert_eq!(q.next(now + Duration::from_millis(10)), Next::Key("b".into()));
        assert_eq!(q.next(now), Next::Deadline);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn waits_for_a_due_key_and_stops() {
        let q = std::sync::Arc::new(WorkQueue::new());
        q.add_after("x", Duration::from_millis(30));
        let start = Instant::now();
        assert_eq!(q.next(start + Duration::from_secs(5)), Next::Key("x".into()));
        assert!(start.elapsed() >= Duration::from_millis(25));
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.next(Instant::now() + Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
        q.stop();
        assert_eq!(t.join().ok(), Some(Next::Stopped));
        q.resume();
        q.add_now("y");
        assert_eq!(q.next(Instant::now() + Duration::from_secs(5)), Next::Key("y".into()));
    }

    #[test]
    fn a_passed_deadline_is_not_starved_by_keys_that_are_always_due() {
        let q = WorkQueue::new();
        let now = Instant::now();
        // Pools requeued back to back (errors, a flood of watch events) are always due.
        q.add_at("a", now - Duration::from_secs(1));
        q.add_at("b", now - Duration::from_secs(1));
        assert_eq!(q.next(now - Duration::from_millis(1)), Next::Deadline, "the tick first");
        assert_eq!(q.next(now + Duration::from_secs(60)), Next::Key("a".into()));
    }

    #[test]
    fn a_status_request_is_served_once_between_keys_and_coalesced() {
        let q = WorkQueue::new();
        let later = Instant::now() + Duration::from_secs(60);
        q.request_status_after(Duration::ZERO);
        q.request_status_after(Duration::ZERO);
        q.add_now("a");
        assert_eq!(q.next(later), Next::Status);
        assert_eq!(q.next(later), Next::Key("a".into()));
        // A burst of changes asks once; the tick's own status write answers a pending request.
        let start = Instant::now();
        q.request_status_after(Duration::from_millis(20));
        q.request_status_after(Duration::from_millis(20));
        assert_eq!(q.next(later), Next::Status);
        assert!(start.elapsed() >= Duration::from_millis(15), "held for more changes");
        assert_eq!(q.next(Instant::now() + Duration::from_millis(40)), Next::Deadline, "once");
        q.request_status_after(Duration::from_secs(30));
        assert_eq!(q.next(Instant::now()), Next::Deadline);
        assert_eq!(q.next(Instant::now() + Duration::from_millis(30)), Next::Deadline);
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
}
