//! The start gates and liveness: no rotation starts while a gate is closed (I2), every
//! rotation finishes within its bound and no claim that had its window chances is
//! force-expired (I8).

use chrono::{DateTime, Duration, Utc};

use super::{Checker, I2, I8, LAST_FAILURE_AT, StepInfo, fmt, parse_time, slot_of, state_of};
use crate::cluster::CacheView;
use crate::engine::Key;
use crate::policy::chances;
use crate::policy::settings::AgeThreshold;
use crate::sim::actors::{FREEZE_ANNOTATION, anchors, annotation, slot_annotation};
use crate::sim::gov::{self, Governed};
use crate::sim::observe::Diff;
use crate::sim::world::{BUFFER, World};

impl Checker {
    /// Why a start at `now` in `slot` of `pool` (judged on the store before the step) breaks a
    /// gate (the cooldown is the slot's own).
    fn gate_broken(
        &mut self,
        prev: &CacheView,
        (pool, slot): (&str, usize),
        now: DateTime<Utc>,
        world: &World,
    ) -> Option<String> {
        let np = prev.pools.get(pool)?;
        let recent = |key: Option<usize>| {
            world.operator_touched.get(&key).is_some_and(|t| now - *t <= self.tolerance)
        };
        let operator_recent = recent(world.pool_index(pool)) || recent(None);
        let governed = self.gov.of(prev, np);
        let settings = match governed {
            Governed::Policy { settings, .. } => settings,
            other if !operator_recent => {
                return Some(format!(
                    "the pool is not governed by exactly one valid policy ({other:?})"
                ));
            }
            _ => return None,
        };
        if np.spec.replicas.is_some() {
            return Some("static pool (spec.replicas)".into());
        }
        if !operator_recent {
            if gov::fatal(&settings, np, now) {
                return Some("a layer-1 fatal finding holds".into());
            }
            if !settings.schedule.in_window(now) {
                return Some("outside every window occurrence".into());
            }
            if let Some(f) = annotation(&np.metadata, FREEZE_ANNOTATION) {
                match parse_time(f) {
                    Some(until) if now < until => return Some(format!("frozen until {f}")),
                    None => return Some(format!("frozen (unreadable freeze {f:?})")),
                    _ => {}
                }
            }
        }
        if let Some(t) = slot_annotation(&np.metadata, Key::LastRotationAt, slot) {
            let since = parse_time(t).map_or(Duration::zero(), |t| now - t);
            if since < settings.cooldown_after {
                return Some(format!(
                    "{} after the last success (cooldownAfter {})",
                    fmt(since),
                    fmt(settings.cooldown_after)
                ));
            }
        }
        if let Some(t) = annotation(&np.metadata, LAST_FAILURE_AT) {
            let since = parse_time(t).map_or(Duration::zero(), |t| now - t);
            if since < settings.failure_pause {
                return Some(format!(
                    "{} after the last failure (failurePause {})",
                    fmt(since),
                    fmt(settings.failure_pause)
                ));
            }
        }
        None
    }

    /// I2: no rotation (or retry) starts while a gate is closed.
    pub(super) fn starts(
        &mut self,
        prev: &CacheView,
        d: &Diff,
        step: &StepInfo<'_>,
        world: &World,
    ) {
        let now = step.now;
        let mut started: Vec<(String, usize, String, &'static str)> = Vec::new();
        for (pool, a, b) in &d.pools {
            let before = a.as_deref().map(anchors).unwrap_or_default();
            for (slot, y) in b.as_deref().map(anchors).unwrap_or_default() {
                if before.get(&slot) != Some(&y) {
                    started.push((pool.clone(), slot, y.to_string(), "anchored"));
                }
            }
        }
        for (claim, a, b) in &d.claims {
            let was = a.as_deref().and_then(state_of);
            let is = b.as_deref().and_then(state_of);
            if was == Some("failed")
                && is == Some("pending")
                && let Some(pool) = self.claim_pool.get(claim)
            {
                // The slot that anchors the retry (after the step), else the one that did.
                let after =
                    d.pools.iter().find(|(p, _, _)| p == pool).and_then(|(_, _, b)| b.clone());
                let slot = after
                    .as_deref()
                    .and_then(|np| slot_of(np, claim))
                    .or_else(|| prev.pools.get(pool).and_then(|np| slot_of(np, claim)))
                    .unwrap_or(0);
                started.push((pool.clone(), slot, claim.clone(), "retried (failed -> pending)"));
            }
        }
        for (pool, slot, claim, how) in started {
            if let Some(why) = self.gate_broken(prev, (&pool, slot), now, world) {
                self.fail(
                    I2,
                    now,
                    format!("{} {how} {claim} in pool {pool} although {why}", step.actor),
                    vec![claim, pool],
                );
            }
        }
    }

    /// I8: every rotation finishes within readyTimeout + tGP + buffer (and slack for requeues).
    pub(super) fn durations(&mut self, post: &CacheView, world: &World, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        // The anchors of `post`, kept per pool by `anchors` this very step.
        let kept = self.pool_anchors.take().unwrap_or_default();
        let live = |pool: &str, slot: usize| {
            kept.get(pool).is_some_and(|f| f.anchors.iter().any(|(s, _)| *s == slot))
        };
        self.anchor_since.retain(|(pool, slot), _| live(pool, *slot));
        for (pool, f) in &kept {
            let Some(np) = post.pools.get(pool) else { continue };
            for (slot, a) in &f.anchors {
                let key = (pool.clone(), *slot);
                let known = self.anchor_since.get(&key).is_some_and(|(c, _, _)| c == a);
                if !known {
                    let bound = self.gov.of(post, np).settings().map(|s| {
                        let tgp = np.termination_grace_period().ok().flatten();
                        s.ready_timeout
                            + tgp.unwrap_or(Duration::hours(1))
                            + BUFFER
                            + Duration::minutes(5)
                    });
                    self.anchor_since.insert(key.clone(), (a.to_string(), now, bound));
                }
                let Some((_, since, Some(bound))) = self.anchor_since.get(&key).cloned() else {
                    continue;
                };
                let since = self.calm_since.map_or(since, |c| since.max(c));
                // A drain Karpenter got stuck past tGP + buffer (injected before the calm phase, or
                // a scenario failure) bounds the rotation from when it ends, not from its start.
                let since = world.stuck_drains.get(a).map_or(since, |end| since.max(*end));
                if now - since > bound && self.flagged.insert((pool.clone(), a.to_string())) {
                    let calm =
                        if self.calm_since.is_some() { " after the faults stopped" } else { "" };
                    bad.push((
                    format!(
                        "rotation of {a} in pool {pool} has not finished {}{calm} (bound readyTimeout + tGP + buffer + 5m = {})",
                        fmt(now - since),
                        fmt(bound)
                    ),
                    a.to_string(),
                ));
                }
            }
        }
        self.pool_anchors = Some(kept);
        for (detail, claim) in bad {
            self.fail(I8, now, detail, vec![claim]);
        }
    }

    /// I8: no forced expiry of a claim that had its chances.
    pub(super) fn expiries(&mut self, post: &CacheView, world: &World, now: DateTime<Utc>) {
        let fresh: Vec<(DateTime<Utc>, usize, String)> =
            world.metrics.forced_expiries.iter().skip(self.expiries_seen).cloned().collect();
        self.expiries_seen = world.metrics.forced_expiries.len();
        for (t, pool, claim) in fresh {
            let name = world.pool_name(pool).to_string();
            let Some(np) = post.pools.get(&name) else { continue };
            let Some(settings) = self.gov.of(post, np).settings().cloned() else { continue };
            if np.spec.replicas.is_some() || gov::fatal(&settings, np, t) {
                continue;
            }
            let protected = world.operator_opted_out.contains(&claim);
            if protected {
                continue;
            }
            let life = world.metrics.lifetimes.get(&claim);
            let deadline = life.and_then(|l| l.deadline);
            let lead = self.lead.get(&name).copied().flatten();
            // A claim of the starting fleet had its chances when its lead started after the
            // simulation did and the pool's lanes could reach it, the claims due before it
            // taking a slot each (the burst lookahead's own model). With ageThreshold
            // windows the lead is the claim's own: its K-th last chance opened in the run.
            let windows =
                settings.age_threshold == AgeThreshold::Windows && settings.schedule.has_gaps();
            let in_run = if windows {
                life.zip(deadline).is_some_and(|(l, dl)| {
                    let tgp = np.termination_grace_period().ok().flatten();
                    let k = settings.min_rotation_chances;
                    let s = &settings.schedule;
                    let last = chances::last_chances(s, &[], l.created, dl, settings.t_rot(tgp), k);
                    last.kth_start.is_some_and(|opens| opens >= self.plan.start)
                })
            } else {
                matches!((deadline, lead), (Some(dl), Some(l)) if dl - self.plan.start >= l)
            };
            let had_chances = in_run && !self.unreachable.contains(&claim);
            if had_chances {
                self.fail(
                    I8,
                    now,
                    format!("claim {claim} of pool {name} was force-expired although it had its window chances"),
                    vec![claim],
                );
            }
        }
    }
}
