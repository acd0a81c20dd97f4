//! What a pass reports after its writes: the per-pool gauges (§4.2) and the level-triggered
//! warnings of the pool's feasibility and short-lead claims (§4.3). Observability only.
use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use super::snapshot::annotation;
use super::{Controller, GovernanceView, Latched, Snapshot};
use crate::engine::Key;
use crate::policy::feasibility;

impl Controller {
    /// Level-triggered warnings of the pool's feasibility (layers 1-2) and of its short-lead
    /// claims (layer 3): an Event on entry into the condition, again only after it cleared
    /// (§4.3). Observability only: no decision depends on them.
    pub(super) fn level_warnings(&mut self, snap: &Snapshot) {
        use crate::cluster::{EventRecord, ObjectKind, ObjectRef};
        let pool = snap.pool_name().to_string();
        let mut raised: BTreeSet<(Latched, &'static str)> = BTreeSet::new();
        let mut events = Vec::new();
        if let Some(a) = snap.assessment() {
            // Reasons the rules raise themselves (StaticNodePool at step 1a) stay theirs.
            let warnings = a.findings.iter().filter(|f| {
                f.severity == feasibility::Severity::Warning
                    && crate::engine::Reason::from_name(f.reason.event_reason()).is_none()
            });
            for f in warnings {
                let reason = f.reason.event_reason();
                let key = (Latched::Finding { pool: pool.clone(), claim: None }, reason);
                raised.insert(key.clone());
                // Latched on the remedy, not the message: the message carries the node count,
                // which moves with every scale-up or consolidation and must not re-raise it.
                if self.ctx.latch.should_fire(key, &f.fix) {
                    let object = ObjectRef::cluster(ObjectKind::NodePool, pool.clone());
                    let msg = format!("{} Fix: {}", f.message, f.fix);
                    events.push((object, reason.to_string(), msg));
                }
            }
        }
        let short_leads = snap.short_leads();
        for (c, f) in snap.short_lead_claims(&short_leads) {
            let Some(name) = c.metadata.name.clone() else { continue };
            let reason = f.reason.event_reason();
            let key = (Latched::Finding { pool: pool.clone(), claim: Some(name.clone()) }, reason);
            raised.insert(key.clone());
            if self.ctx.latch.should_fire(key, &f.fix) {
                let object = ObjectRef::cluster(ObjectKind::NodeClaim, name);
                events.push((object, reason.to_string(), format!("{} Fix: {}", f.message, f.fix)));
            }
        }
        // This pool's findings, and no other pool's: pool names hold no NUL, so every name
        // that starts with this one and goes on sorts after `{pool}\0`.
        let first = (Latched::Finding { pool: pool.clone(), claim: None }, "");
        let beyond = (Latched::Finding { pool: format!("{pool}\0"), claim: None }, "");
        self.ctx.latch.retain_range(first..beyond, |k| raised.contains(k));
        for (object, reason, message) in events {
            let event = EventRecord { object, reason, message, warning: true, time: snap.now };
            if let Err(e) = self.ctx.cluster.record_event(&event) {
                tracing::warn!(error = %e, "event not recorded");
            }
        }
    }
}

/// Per-pool gauges after a pass (§4.2).
pub(super) fn gauges(snap: &Snapshot) -> crate::telemetry::PoolGauges {
    let now = snap.now;
    let mut g = crate::telemetry::PoolGauges {
        candidates: snap.census.max(0) as u64,
        in_progress: snap.anchored_claims().count() as u64,
        policy_conflict: matches!(snap.governance, GovernanceView::Conflict(_)),
        infeasible: snap.fatal(),
        ..Default::default()
    };
    if let Some(p) = snap.policy() {
        g.window_active = p.in_window(now);
        g.window_period = p.period;
        g.max_unavailable = Some(snap.lanes() as u64);
        g.next_window = p.current_or_next(now).map(|o| o.start);
        g.short_lead_nodes = snap.short_leads().iter().filter(|f| f.is_some()).count() as u64;
    }
    if let Some(a) = snap.assessment() {
        g.age_threshold = a.derived.age_threshold;
        g.rotation_chances = a.derived.chances;
        g.throughput_capacity = a.derived.starts_per_occurrence;
        g.t_rot_estimate = Some(a.derived.t_rot_est);
        g.t_rot_bound = Some(a.derived.t_rot);
    }
    g.nearest_deadline = snap.nearest_deadline();
    if let Some(pool) = &snap.pool {
        g.freeze_until = annotation(&pool.metadata, Key::Freeze)
            .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
            .map(|t| t.with_timezone(&Utc))
            .filter(|t| *t > now);
    }
    // With several rotations in flight: the highest retry count, and how many drains are stuck.
    for cand in snap.anchored_claims() {
        let count =
            crate::policy::derive::parse_retry_count(annotation(&cand.metadata, Key::RetryCount));
        g.retry_count = g.retry_count.max(count);
    }
    g.drain_stuck = snap.stuck_drains() as u64;
    g
}
