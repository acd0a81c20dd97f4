//! How the world's controllers react to a step's changes, whoever made them: Karpenter's
//! termination controller takes up a claim deleted by someone else, a placeholder gone or bound
//! is nominated to no claim in flight any more, a node a placeholder left is watched for
//! emptiness, and the scheduler runs again when a placeholder or a cordon changed.
use chrono::{DateTime, Utc};

use super::{Ev, World};
use crate::sim::actors::placeholder_node;
use crate::sim::observe::{self, Diff};

impl World {
    /// The reactions to `d`, the changes of the step that ended at `now`.
    pub(crate) fn react(&mut self, d: &Diff, now: DateTime<Utc>) {
        // Karpenter's termination controller sees deletions it did not make; the
        // scheduler sees placeholder and cordon changes.
        let mut reschedule = !d.placeholders.is_empty();
        // A placeholder that is gone or bound is nominated to no in-flight claim any more (a
        // new incarnation under the same name needs capacity of its own).
        for (name, _, b) in &d.placeholders {
            if b.as_deref().is_none_or(|p| placeholder_node(p).is_some()) {
                self.forget_nomination(name);
            }
        }
        // A placeholder leaving a node may leave it empty (emptiness consolidation).
        for (_, a, b) in &d.placeholders {
            if let Some(host) = a.as_deref().and_then(placeholder_node)
                && b.as_deref().and_then(placeholder_node) != Some(host)
            {
                let host = host.to_string();
                self.watch_empty(&host);
            }
        }
        for (name, a, b) in &d.claims {
            if let Some(b) = b
                && b.is_deleting()
                && a.as_ref().is_none_or(|a| !a.is_deleting())
                && self.claims.get(name).is_some_and(|c| c.deleting.is_none())
            {
                self.at(now, Ev::Terminate(name.clone()));
            }
        }
        for (_, a, b) in &d.nodes {
            if let (Some(a), Some(b)) = (a, b)
                && observe::unschedulable(a) != observe::unschedulable(b)
            {
                reschedule = true;
            }
        }
        if reschedule {
            self.request_scheduling();
        }
    }
}
