//! One slot's failure is not the pool's (I21): what one exact pass owed every rotation of its
//! pool, and the pool's next start.
use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};

use super::{Checker, I21, StepInfo, fmt, parse_time, state_of};
use crate::cluster::CacheView;
use crate::engine::Key;
use crate::karpenter::NodePool;
use crate::policy::settings::AgeThreshold;
use crate::sim::actors::{
    DO_NOT_DISRUPT, FREEZE_ANNOTATION, OWNED_MARKER, STARTED_AT, anchors, annotation,
    placeholder_node, slot_annotation,
};
use crate::sim::gov;
use crate::sim::world::World;

impl Checker {
    /// I21 over one exact pass without injected faults: for every rotation of its pool, what is
    /// due (the completion of a rotation whose claim is gone, the rollback of one past
    /// readyTimeout, the escalation of one whose own placeholder is ready on a host of its own),
    /// and the pool's next start (a free lane, the start gates open, a claim due), is done by
    /// the pass, whatever another slot's run met.
    pub(super) fn slots_isolated(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        step: &StepInfo<'_>,
        world: &World,
    ) {
        let Some(pool) = step.pool.and_then(|p| self.plan.pools.get(p)).map(|p| p.name.clone())
        else {
            return;
        };
        let Some(np) = prev.pools.get(&pool).cloned() else { return };
        let Some(settings) = self.gov.of(prev, &np).settings().cloned() else { return };
        let now = step.now;
        let before = anchors(&np);
        let after = post.pools.get(&pool).map(|p| anchors(p)).unwrap_or_default();
        let mut owed: Vec<(String, String)> = Vec::new();
        for (slot, claim) in &before {
            if after.get(slot) == Some(claim)
                && let Some(what) = owed_rotation(prev, post, &np, *slot, claim, &settings, now)
            {
                owed.push((what, claim.to_string()));
            }
        }
        let started = after.iter().any(|(slot, c)| before.get(slot) != Some(c));
        if !started && let Some(what) = self.owed_start(prev, post, &np, &settings, now, world) {
            owed.push((what, pool.clone()));
        }
        let outcome = if step.ok { "returned" } else { "failed" };
        for (what, object) in owed {
            let key = (I21.to_string(), format!("{pool}: {what}"));
            if self.flagged.insert(key) {
                self.fail(
                    I21,
                    now,
                    format!("{}'s pass over pool {pool} {outcome} without {what}", step.actor),
                    vec![object, pool.clone()],
                );
            }
        }
    }

    /// I21: why the pass owed the pool a start (a lane free, the start gates open on the store
    /// before and after the pass, a claim due by a margin the controller's cached window
    /// horizon cannot miss), or `None`. Judged only where it is sure: an integer
    /// `maxUnavailable`, no `spec.limits` (headroom), the auto or an override age threshold,
    /// no operator edit a moment ago.
    fn owed_start(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        np: &NodePool,
        settings: &crate::policy::settings::Effective,
        now: DateTime<Utc>,
        world: &World,
    ) -> Option<String> {
        use crate::policy::derive::{self, Candidacy, ClaimFacts};
        use crate::policy::settings::{IntOrPercent, MaxUnavailable};
        const MARGIN: Duration = Duration::minutes(10);
        let pool = np.metadata.name.as_deref()?;
        let MaxUnavailable::Fixed(IntOrPercent::Count(lanes)) = settings.max_unavailable else {
            return None;
        };
        let lanes = usize::try_from(lanes).ok()?.max(1);
        let in_flight = anchors(np);
        if in_flight.len() >= lanes
            || np.spec.replicas.is_some()
            || np.spec.limits.as_ref().is_some_and(|l| !l.is_empty())
            || settings.age_threshold == AgeThreshold::Windows
            || !settings.schedule.in_window(now)
            || gov::fatal(settings, np, now)
        {
            return None;
        }
        let touched = |key: Option<usize>| {
            world.operator_touched.get(&key).is_some_and(|t| now - *t <= Duration::minutes(2))
        };
        if touched(world.pool_index(pool)) || touched(None) {
            return None;
        }
        let slot = *crate::reconcile::slots::to_run(&np.metadata, lanes).last()?;
        if in_flight.contains_key(&slot) {
            return None;
        }
        // A gate stamp closes the gate while it is younger than its pause, or unreadable.
        let closed = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                      key: Key,
                      slot: usize,
                      pause: Duration| {
            slot_annotation(meta, key, slot)
                .is_some_and(|t| parse_time(t).is_none_or(|t| now - t < pause))
        };
        for p in [Some(np), post.pools.get(pool).map(|p| p.as_ref())] {
            let meta = p.map(|p| &p.metadata)?;
            let frozen = annotation(meta, FREEZE_ANNOTATION)
                .is_some_and(|f| parse_time(f).is_none_or(|until| now < until));
            if frozen
                || closed(meta, Key::LastRotationAt, slot, settings.cooldown_after)
                || closed(meta, Key::LastFailureAt, 0, settings.failure_pause)
            {
                return None;
            }
        }
        let period = settings.schedule.period(now).unwrap_or(Duration::minutes(1));
        let open = crate::policy::lookahead::OpenTime::of(&settings.schedule, now);
        let anchored: BTreeSet<&str> =
            prev.pools.values().flat_map(|p| anchors(p).into_values()).collect();
        let due = prev.claims.iter().find(|(name, c)| {
            if c.node_pool() != Some(pool) || anchored.contains(name.as_str()) {
                return false;
            }
            if state_of(c).is_some() {
                return false;
            }
            let node_opted_out = c
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .and_then(|n| prev.nodes.get(n))
                .is_some_and(|n| {
                    annotation(&n.metadata, DO_NOT_DISRUPT) == Some("true")
                        && annotation(&n.metadata, OWNED_MARKER).is_none()
                });
            let (Some(created), Ok(expire)) = (c.created(), c.expire_after()) else {
                return false;
            };
            let tgp = c.termination_grace_period().ok().flatten();
            let facts = ClaimFacts {
                ready: c.is_ready(),
                deleting: c.is_deleting(),
                operator_do_not_disrupt: node_opted_out,
                ..ClaimFacts::idle(created, expire, tgp)
            };
            let due_after = derive::due_after_listed(&facts, settings, period, open.occurrences());
            derive::candidacy_due(&facts, settings, due_after, now - MARGIN) == Candidacy::Candidate
        });
        let (claim, _) = due?;
        Some(format!(
            "a start in its free slot {slot} ({} of {lanes} lanes in flight, the start gates open, \
             {claim} due)",
            in_flight.len()
        ))
    }
}

/// I21: what one exact pass owed the rotation of `claim` in `slot` of `np` and did not do:
/// its completion (the claim is gone), its rollback (pending past readyTimeout), or its
/// escalation (pending, not frozen, its own placeholder ready on a node that is not another
/// rotation's recorded surge host and whose claim is known); `None` when the pass did it or
/// nothing was due. A forceful rotation and a claim of another pool are left to other checks.
fn owed_rotation(
    prev: &CacheView,
    post: &CacheView,
    np: &NodePool,
    slot: usize,
    claim: &str,
    settings: &crate::policy::settings::Effective,
    now: DateTime<Utc>,
) -> Option<String> {
    let pool = np.metadata.name.as_deref()?;
    let Some(c) = prev.claims.get(claim) else {
        return Some(format!("the completion of {claim}, whose claim is gone"));
    };
    if c.node_pool() != Some(pool)
        || slot_annotation(&np.metadata, Key::RotationMode, slot).is_some()
        || state_of(c) != Some("pending")
        || c.is_deleting()
    {
        return None;
    }
    let state_after = post.claims.get(claim).and_then(|c| state_of(c));
    let started = annotation(&c.metadata, STARTED_AT).and_then(parse_time)?;
    if now - started > settings.ready_timeout {
        return (state_after == Some("pending")).then(|| {
            format!(
                "the rollback of {claim} (pending since {}, readyTimeout {})",
                started.to_rfc3339(),
                fmt(settings.ready_timeout)
            )
        });
    }
    let frozen = annotation(&np.metadata, FREEZE_ANNOTATION)
        .is_some_and(|f| parse_time(f).is_none_or(|until| now < until));
    if frozen || state_after == Some("draining") {
        return None;
    }
    let ph = prev.placeholders.get(&crate::placeholder::placeholder_name(claim))?;
    let recorded = annotation(&c.metadata, Key::PlaceholderUid.full());
    if recorded.is_none() || ph.metadata.uid.as_deref() != recorded {
        return None;
    }
    let host = placeholder_node(ph)?;
    let own_node = c.status.as_ref().and_then(|s| s.node_name.as_deref());
    if !crate::placeholder::surge_ready(
        ph,
        prev.nodes.get(host).map(|n| n.as_ref()),
        own_node,
        pool,
    ) {
        return None;
    }
    let hosts = crate::reconcile::slots::by_slot(&np.metadata, Key::SurgeHost);
    let others = anchors(np);
    let taken = hosts.iter().any(|(s, h)| *s != slot && *h == host && others.contains_key(s));
    let host_claim = prev.claims.values().any(|hc| {
        hc.node_pool() == Some(pool)
            && hc.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(host)
    });
    (!taken && host_claim).then(|| {
        format!("the escalation of {claim}, whose placeholder is ready on {host}, to draining")
    })
}
