//! The work queue of `noderotation run`: the shared [`Schedule`] on the wall clock, one
//! blocking consumer. The consumer is the single reconcile worker (a blocking thread), so a pool
//! is never reconciled twice at once. What is due next is decided by [`Schedule::take_due`],
//! the same code the simulation driver runs on its virtual clock.
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub(crate) use crate::trigger::Next;
use crate::trigger::Schedule;

#[derive(Debug, Default)]
struct State {
    schedule: Schedule<Instant>,
    stopped: bool,
}

#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    state: Mutex<State>,
    wake: Condvar,
}

impl WorkQueue {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Schedules `key` at `at`, unless it is already due earlier.
    pub(crate) fn add_at(&self, key: &str, at: Instant) {
        self.lock().schedule.add_at(key, at);
        self.wake.notify_all();
    }

    pub(crate) fn add_now(&self, key: &str) {
        self.add_at(key, Instant::now());
    }

    pub(crate) fn add_after(&self, key: &str, after: Duration) {
        self.add_at(key, Instant::now() + after);
    }

    /// Asks for a policy status recompute `after` from now, unless one is already due sooner:
    /// a burst of changes is answered once.
    pub(crate) fn request_status_after(&self, after: Duration) {
        self.lock().schedule.request_status_at(Instant::now() + after);
        self.wake.notify_all();
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().schedule.len()
    }

    /// Makes `next` return `Stopped` until `resume`.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.wake.notify_all();
    }

    pub(crate) fn resume(&self) {
        self.lock().stopped = false;
    }

    /// Blocks until `deadline` passes (first: the tick is never starved), a status recompute is
    /// due, a key is due (the earliest first; ties by name), or the queue is stopped.
    pub(crate) fn next(&self, deadline: Instant) -> Next {
        let mut state = self.lock();
        loop {
            if state.stopped {
                return Next::Stopped;
            }
            let now = Instant::now();
            if let Some(next) = state.schedule.take_due(now, deadline) {
                return next;
            }
            let wake_at = state.schedule.wake_at(deadline);
            let (guard, _) = self
                .wake
                .wait_timeout(state, wake_at.saturating_duration_since(now))
                .unwrap_or_else(|e| e.into_inner());
            state = guard;
        }
    }
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
}
