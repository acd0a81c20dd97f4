//! The readable history of a run: one line per change, `time actor object change`. The last
//! entries are kept for violation reports; `--trace` streams every entry to stdout.
use std::collections::VecDeque;
use std::fmt;

use chrono::{DateTime, Utc};

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub time: DateTime<Utc>,
    pub actor: String,
    pub object: String,
    pub change: String,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}  {:<14} {:<44} {}",
            self.time.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            self.actor,
            self.object,
            self.change
        )
    }
}

/// Entries kept for a violation report.
pub(crate) const KEEP: usize = 400;

#[derive(Debug, Default)]
pub struct Trace {
    recent: VecDeque<Entry>,
    /// Print every entry as it is recorded (`--trace`).
    pub stream: bool,
    /// Total entries recorded.
    pub count: u64,
}

impl Trace {
    pub(crate) fn record(
        &mut self,
        time: DateTime<Utc>,
        actor: &str,
        object: impl Into<String>,
        change: impl Into<String>,
    ) {
        let entry =
            Entry { time, actor: actor.to_string(), object: object.into(), change: change.into() };
        if self.stream {
            println!("{entry}");
        }
        self.count += 1;
        if self.recent.len() == KEEP {
            self.recent.pop_front();
        }
        self.recent.push_back(entry);
    }

    /// The last `n` entries, oldest first.
    pub(crate) fn tail(&self, n: usize) -> Vec<Entry> {
        let skip = self.recent.len().saturating_sub(n);
        self.recent.iter().skip(skip).cloned().collect()
    }

    /// The recent entries that mention `needle` (an object name), oldest first.
    pub(crate) fn about(&self, needle: &str, n: usize) -> Vec<Entry> {
        let hits: Vec<&Entry> = self
            .recent
            .iter()
            .filter(|e| e.object.contains(needle) || e.change.contains(needle))
            .collect();
        let skip = hits.len().saturating_sub(n);
        hits.into_iter().skip(skip).cloned().collect()
    }
}
