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
    stopped: bool,
}

/// What [`WorkQueue::next`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// This pool is due: reconcile it.
    Key(String),
    /// The deadline passed with nothing due.
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

    /// Blocks until a key is due (the earliest first; ties by name), `deadline` passes, or the
    /// queue is stopped.
    pub fn next(&self, deadline: Instant) -> Next {
        let mut state = self.lock();
        loop {
            if state.stopped {
                return Next::Stopped;
            }
            let now = Instant::now();
            let earliest = state.due.iter().min_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)));
            if let Some((key, at)) = earliest
                && *at <= now
            {
                let key = key.clone();
                state.due.remove(&key);
                return Next::Key(key);
            }
            if deadline <= now {
                return Next::Deadline;
            }
            let wake_at = earliest.map_or(deadline, |(_, at)| (*at).min(deadline));
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
        assert_eq!(q.next(Instant::now()), Next::Key("y".into()));
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
