//! What the world bills and measures: launched claims over time (overlap node-seconds), each
//! claim's lane and lifetime, Karpenter's pool `status.resources`, and the pending-pod and
//! overlap figures settled up to now.
use chrono::{DateTime, Utc};

use super::{PodKey, World, add, quantities};
use crate::sim::scenario::Resources;

impl World {
    /// Billing: `delta` claims of `pool` started (+1) or stopped (-1) running.
    pub(crate) fn bill(&mut self, pool: usize, delta: i32) {
        let now = self.now();
        let base = f64::from(self.plan.pools[pool].base_count());
        let (count, since) = self.metrics.billed[pool];
        let above = (f64::from(count) - base).max(0.0);
        self.metrics.overlap_node_seconds[pool] +=
            above * (now - since).num_milliseconds() as f64 / 1000.0;
        let count = u32::try_from(i64::from(count) + i64::from(delta)).unwrap_or(0);
        self.metrics.billed[pool] = (count, now);
    }

    /// Frees a finished claim's lane and closes its lifetime.
    pub(crate) fn close_lifetime(&mut self, name: &str, now: DateTime<Utc>) {
        if let Some(c) = self.claims.get(name)
            && let Some(slot) = self.lanes[c.pool].get_mut(c.lane)
        {
            *slot = None;
        }
        if let Some(l) = self.metrics.lifetimes.get_mut(name) {
            l.gone = Some(now);
        }
    }

    /// Karpenter's `status.resources`: the capacity of every claim it holds (deleting ones
    /// too), and their count.
    pub(crate) fn pool_usage(&self, pool: usize) -> Resources {
        let mut used = Resources::new();
        let per_node = &self.plan.pools[pool].allocatable;
        let mut n: i128 = 0;
        for _ in self.claims.values().filter(|c| c.pool == pool) {
            add(&mut used, per_node);
            n += 1;
        }
        used.insert("nodes".into(), n * 1000);
        used
    }

    pub(crate) fn update_pool_status(&mut self, pool: usize) {
        let used = quantities(&self.pool_usage(pool));
        let name = self.pool_name(pool).to_string();
        let unchanged = self
            .cluster
            .pool(&name)
            .is_some_and(|p| p.status.as_ref().is_some_and(|s| s.resources == used));
        if !unchanged {
            self.cluster.update_pool(&name, |p| {
                p.status.get_or_insert_default().resources = used;
            });
        }
    }

    /// Closes the measurements at `now` (pending pods still waiting, overlap so far; a pod still
    /// Pending counts in the longest-Pending figure with its wait so far).
    pub fn settle_metrics(&mut self) {
        let now = self.now();
        for pool in 0..self.plan.pools.len() {
            self.bill(pool, 0);
        }
        let pending: Vec<PodKey> = self.pending.iter().cloned().collect();
        for key in pending {
            if let Some(p) = self.pods.get_mut(&key)
                && let Some(since) = p.pending_since
            {
                let secs = (now - since).num_milliseconds() as f64 / 1000.0;
                self.metrics.pending_pod_seconds[p.pool] += secs;
                p.pending_since = Some(now);
                p.pending_settled += secs;
                let longest = &mut self.metrics.longest_pending_seconds[p.pool];
                *longest = longest.max(p.pending_settled);
            }
        }
    }
}
