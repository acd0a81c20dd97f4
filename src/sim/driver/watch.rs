//! The leader's watch changes to wake-ups, through the runtime's `trigger::Mapper`: the pools
//! they wake are due at once (with `--faults`, late, twice or not at all), a pool or policy change
//! asks for a policy status recompute.
use chrono::{DateTime, Duration, Utc};

use super::{Driver, DrvEv};
use crate::cluster::Cluster;
use crate::cluster::memory::Rng;
use crate::karpenter::NodeClaim;
use crate::trigger::{Keys, STATUS_COALESCE};

impl Driver {
    /// The leader's watch changes up to `now`, through the runtime's [`Mapper`]: each pool
    /// they wake is due at once (subject to `--faults`); a pool or policy change asks for a
    /// policy status recompute, coalesced as in `run`.
    ///
    /// [`Mapper`]: crate::trigger::Mapper
    pub(crate) fn watch(&mut self, now: DateTime<Utc>) {
        let handle = &self.handles[self.leader];
        handle.deliver(now);
        let changes = handle.take_changes();
        if changes.is_empty() || self.ctl.is_none() {
            return;
        }
        let view = handle.cache();
        let pool_of_claim = |claim: &str| {
            view.claims.get(claim).and_then(|c| NodeClaim::node_pool(c).map(str::to_string))
        };
        let coalesce = Duration::from_std(STATUS_COALESCE).unwrap_or(Duration::seconds(1));
        let mut woken = Vec::new();
        for change in &changes {
            let wake = self.mapper.map(change, &pool_of_claim);
            if wake.status {
                self.schedule.request_status_at(now + coalesce);
            }
            match wake.pools {
                Keys::None => {}
                Keys::Pool(name) => woken.extend(self.pools.iter().position(|p| *p == name)),
                Keys::All => woken.extend(0..self.pools.len()),
            }
        }
        for pool in woken {
            self.wake(pool, now);
        }
    }

    /// When the leader's cache next receives a watch event.
    pub(super) fn next_delivery(&self) -> Option<DateTime<Utc>> {
        self.ctl.as_ref().and(self.handles[self.leader].next_delivery())
    }

    /// A watch change that wakes `pool` at once (subject to `--faults`: lost, late or twice).
    fn wake(&mut self, pool: usize, now: DateTime<Utc>) {
        if let Some(r) = self.rates.clone() {
            let lag_ms = u64::try_from(self.lag.num_milliseconds()).unwrap_or(0);
            let late = |rng: &mut Rng| {
                Duration::milliseconds(i64::try_from(rng.below(lag_ms + 1)).unwrap_or(0))
            };
            let u = self.rng.next_f64();
            if u < r.wake_drop {
                return;
            } else if u < r.wake_drop + r.wake_late {
                let t = now + late(&mut self.rng);
                self.at(t, DrvEv::Wake(pool));
                return;
            } else if u < r.wake_drop + r.wake_late + r.wake_duplicate {
                let t = now + late(&mut self.rng);
                self.at(t, DrvEv::Wake(pool));
            }
        }
        self.set_due(pool, now);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use chrono::TimeZone;
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};

    use super::*;
    use crate::clock::{Clock, VirtualClock};
    use crate::cluster::memory::MemoryCluster;
    use crate::engine::Engine;
    use crate::karpenter::{NODEPOOL_LABEL, NodePool, NodePoolSpec};
    use crate::sim::driver::Setup;

    /// Runs every driver step due at the clock's time, watching after each as `simulate` does.
    fn settle(d: &mut Driver, clock: &VirtualClock) {
        let now = clock.now();
        while d.next_time().is_some_and(|t| t <= now) {
            d.step(now);
            d.watch(now);
        }
    }

    fn node(ready: bool) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels = Some(BTreeMap::from([(NODEPOOL_LABEL.into(), "general".into())]));
        let status = if ready { "True" } else { "False" };
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
        n
    }

    /// The simulation wakes a pool only through the runtime's mapping of watch changes: a Node
    /// turning Ready wakes its pool; the same Node not Ready, or Ready again, does not.
    #[test]
    fn a_watch_change_wakes_its_pool_as_the_runtime_maps_it() {
        let start = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).single().unwrap();
        let clock = VirtualClock::new(start);
        let world = MemoryCluster::new(Arc::new(clock.clone()), "noderotation-system");
        world.apply_pool(NodePool::new("general", NodePoolSpec::default())).unwrap();
        let mut d = Driver::new(
            &world,
            Setup {
                engine: Arc::new(Engine::embedded().clone()),
                clock: Arc::new(clock.clone()),
                pools: vec!["general".into()],
                seed: 1,
                rates: None,
                lag: Duration::zero(),
                hook_always: false,
                skew: Duration::zero(),
            },
        );
        settle(&mut d, &clock);
        assert!(d.passes > 0, "the first leader started and passed over the pool");
        clock.advance(Duration::seconds(1));
        let now = clock.now();
        let due = |d: &Driver| d.schedule.due("general");
        assert!(due(&d).is_some_and(|t| t > now), "requeued for later: {:?}", due(&d));
        world.apply_node(node(false)).unwrap();
        d.watch(now);
        assert!(due(&d).is_some_and(|t| t > now), "a Node not Ready wakes nothing");
        world.update_node("n1", |n| *n = node(true));
        d.watch(now);
        assert_eq!(due(&d), Some(now), "a Node turning Ready wakes its pool");
        settle(&mut d, &clock);
        assert!(due(&d).is_some_and(|t| t > now));
        world.update_node("n1", |n| n.metadata.annotations = Some(BTreeMap::new()));
        d.watch(now);
        assert!(due(&d).is_some_and(|t| t > now), "Ready again is no edge");
    }
}
