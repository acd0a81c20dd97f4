//! The world side of `--faults`: each whole virtual minute with a rotation in flight, the
//! faults aimed at it (an expiry or an interruption while pending, a preempted placeholder, a
//! deleted host), and what each does when it strikes.
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::{CLAIM_STATE, STARTED_AT, SURGE_FOR, anchors, annotation, claim_ref, placeholder_node};
use crate::cluster::{CacheView, ObjectRef};
use crate::sim::world::{self, Ev, Injected, World};
use crate::sim::world_faults::{WorldFault, key};

impl World {
    // -- faults --------------------------------------------------------------------------------

    pub(super) fn inject(&mut self, x: Injected) {
        match x {
            Injected::ExpireNow(claim) => {
                self.force_expire(&claim, "forced expiry while pending (injected)")
            }
            Injected::FinalizeNow(claim) => {
                if self.claims.get(&claim).is_some_and(|c| c.deleting.is_none()) {
                    self.note(format!("{claim}: interrupted and finalized at once (injected)"));
                    self.cluster.delete_object(&claim_ref(&claim));
                    self.begin_termination(&claim, true);
                }
            }
            Injected::Preempt(ph) => {
                let ns = world::CONTROLLER_NS;
                if self.cluster.delete_object(&ObjectRef::pod(ns, &ph)) {
                    self.metrics.preemptions += 1;
                    self.note(format!("placeholder {ph} preempted (injected)"));
                    self.request_scheduling();
                }
            }
            Injected::DeleteHost(claim) => {
                if self.claims.get(&claim).is_some_and(|c| c.deleting.is_none()) {
                    self.note(format!("{claim}: instance interrupted (injected)"));
                    self.delete_claim(&claim);
                }
            }
        }
    }

    /// After any step: with `--faults` and a rotation in flight anywhere, the next whole virtual
    /// minute rolls the faults aimed at rotations (once, however many steps come before it).
    pub(crate) fn arm_fault_minute(&mut self) {
        if self.faults.is_none() || self.fault_minute_queued {
            return;
        }
        if self.snap.pools.values().any(|np| !anchors(np).is_empty()) {
            self.fault_minute_queued = true;
            let minute = self.now().timestamp().div_euclid(60) + 1;
            let at = DateTime::from_timestamp(minute * 60, 0).unwrap_or(self.now());
            self.at(at, Ev::FaultMinute);
        }
    }

    /// The minute's draws: world faults aimed at every rotation in flight (pools in the
    /// scenario's order, each slot's in slot order), each class about (its claim, this minute).
    pub(super) fn fault_minute(&mut self) {
        self.fault_minute_queued = false;
        let snap = Arc::clone(&self.snap);
        let minute = self.now().timestamp().div_euclid(60);
        for pool in 0..self.plan.pools.len() {
            let Some(np) = snap.pools.get(self.pool_name(pool)) else { continue };
            let anchored = anchors(np);
            if anchored.is_empty() {
                continue;
            }
            let ready_timeout = self.gov.of(&snap, np).settings().map(|s| s.ready_timeout);
            for anchor in anchored.into_values() {
                self.inject_at(&snap, anchor, ready_timeout, minute);
            }
        }
    }

    /// World faults aimed at the rotation of `anchor`.
    fn inject_at(
        &mut self,
        snap: &CacheView,
        anchor: &str,
        ready_timeout: Option<Duration>,
        minute: i64,
    ) {
        let now = self.now();
        let k = key(anchor, Some(minute));
        let Some(cand) = snap.claims.get(anchor) else { return };
        if cand.metadata.deletion_timestamp.is_some() {
            return;
        }
        let state = annotation(&cand.metadata, CLAIM_STATE);
        if state == Some("pending") {
            if self.fault(WorldFault::ExpirePending, k, 1.0) {
                self.at(now, Ev::Inject(Injected::ExpireNow(anchor.to_string())));
            }
            let started = annotation(&cand.metadata, STARTED_AT)
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|t| t.with_timezone(&Utc));
            if let (Some(started), Some(rt)) = (started, ready_timeout) {
                let elapsed = now - started;
                // Past readyTimeout with the claim still pending: the rollback was cut short.
                let p = if elapsed > rt {
                    1.0
                } else if elapsed > rt - Duration::minutes(1) {
                    0.25
                } else {
                    0.0
                };
                if p > 0.0 && self.fault(WorldFault::FinalizeInRollback, k, p) {
                    self.at(now, Ev::Inject(Injected::FinalizeNow(anchor.to_string())));
                }
            }
        }
        let ph = snap
            .placeholders
            .iter()
            .find(|(_, p)| annotation(&p.metadata, SURGE_FOR) == Some(anchor))
            .map(|(n, p)| (n.clone(), Arc::clone(p)));
        if let Some((name, ph)) = ph
            && crate::placeholder::running(&ph)
        {
            if self.fault(WorldFault::PreemptPlaceholder, k, 1.0) {
                self.at(now, Ev::Inject(Injected::Preempt(name)));
            } else if self.fault(WorldFault::DeleteHost, k, 1.0)
                && let Some(host) = placeholder_node(&ph)
                && let Some(n) = self.nodes.get(host)
            {
                let claim = n.claim.clone();
                self.at(now, Ev::Inject(Injected::DeleteHost(claim)));
            }
        }
    }
}
