//! Capacity first: the surge path a rotation reports (I9), the placeholder it escalates on
//! (I10), what a failed surge bills (I11, I20), the nodes rotations drain onto kept (I16), and
//! an old claim deleted without a Ready surge only as the policy's forceful fallback (I17).
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use super::{
    Checker, I9, I10, I11, I16, I17, I20, I20_GRACE, RETRY_COUNT, StepInfo, anchored, fmt,
    parse_time, slot_of, state_of,
};
use crate::cluster::CacheView;
use crate::engine::Key;
use crate::sim::actors::{
    DO_NOT_DISRUPT, STARTED_AT, SURGE_FOR, anchors, annotation, slot_annotation,
};
use crate::sim::observe::{Diff, unschedulable};
use crate::sim::world::World;

/// A slot's `rotation-mode` that marks a rotation without a surge: the forceful fallback, or a
/// node with nothing to reserve.
fn surge_less(mode: Option<&str>) -> bool {
    matches!(mode, Some("forceful-fallback" | "nothing-to-reserve"))
}

/// A node a rotation drains onto (I16).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Landing {
    /// The rotation's old claim.
    claim: String,
    /// The node receiving its pods.
    host: String,
}

/// The claim's node: its `status.nodeName`, else the world's record of it.
fn node_of(view: &CacheView, world: &World, claim: &str) -> Option<String> {
    view.claims
        .get(claim)
        .and_then(|c| c.status.as_ref()?.node_name.clone())
        .or_else(|| world.claims.get(claim).map(|c| c.node.clone()))
}

/// I16: every node a rotation drains onto in `view`: for each claim marked `state=draining`
/// that still exists and is being deleted or anchored (one whose anchor is gone before its
/// delete was sent never drains: the sweep rolls it back), the surge host its slot records (while anchored, not surge-less) and every
/// node frozen for it (`surge-for`) other than its own old node. Read off the claims and nodes,
/// so a landing outlives a lost anchor.
fn landings(view: &CacheView, world: &World) -> BTreeSet<Landing> {
    let mut out = BTreeSet::new();
    let anchored: BTreeSet<&str> =
        view.pools.values().flat_map(|np| anchors(np).into_values()).collect();
    let draining: BTreeSet<&str> = view
        .claims
        .iter()
        .filter(|(_, c)| state_of(c) == Some("draining"))
        .filter(|(n, c)| c.metadata.deletion_timestamp.is_some() || anchored.contains(n.as_str()))
        .map(|(n, _)| n.as_str())
        .collect();
    if draining.is_empty() {
        return out;
    }
    for np in view.pools.values() {
        let m = &np.metadata;
        for (slot, claim) in anchors(np) {
            // A surge-less drain (the forceful fallback, nothing to reserve) lands nowhere: a host
            // an earlier escalation of the attempt recorded is kept only for the cleanup to find.
            let lands = !surge_less(slot_annotation(m, Key::RotationMode, slot));
            let host = slot_annotation(m, Key::SurgeHost, slot).filter(|h| !h.is_empty());
            if let (true, true, Some(host)) = (lands, draining.contains(claim), host) {
                out.insert(Landing { claim: claim.to_string(), host: host.to_string() });
            }
        }
    }
    for (name, n) in &view.nodes {
        if let Some(claim) = annotation(&n.metadata, SURGE_FOR)
            && draining.contains(claim)
            && node_of(view, world, claim).as_deref() != Some(name.as_str())
        {
            out.insert(Landing { claim: claim.to_string(), host: name.clone() });
        }
    }
    out
}

/// I17: the pods on `node` other than DaemonSet pods that request some resource (a rotation with
/// nothing to reserve has none).
fn requesting_pods(world: &World, node: Option<&str>) -> usize {
    let Some(node) = node else { return 0 };
    world
        .pods
        .values()
        .filter(|p| p.node.as_deref() == Some(node) && !p.daemonset)
        .filter(|p| p.requests.values().any(|v| *v > 0))
        .count()
}

/// The surge host a rotation's slot records, if the pool anchors `claim` (before or after).
fn recorded_host<'v>(views: [&'v CacheView; 2], pool: &str, claim: &str) -> Option<&'v str> {
    views.into_iter().find_map(|v| {
        let np = v.pools.get(pool)?;
        let slot = slot_of(np, claim)?;
        slot_annotation(&np.metadata, Key::SurgeHost, slot).filter(|h| !h.is_empty())
    })
}

/// The rotation mode a pool's slot records for `claim` (before or after the step).
fn mode_of<'v>(views: [&'v CacheView; 2], pool: &str, claim: &str) -> Option<&'v str> {
    views.into_iter().find_map(|v| {
        let np = v.pools.get(pool)?;
        let slot = slot_of(np, claim)?;
        slot_annotation(&np.metadata, Key::RotationMode, slot)
    })
}

/// A pool's anchors (by slot) and its readyTimeout, for I20.
type PoolSurgeFacts<'a> = (Option<BTreeMap<usize, &'a str>>, Option<Duration>);

impl Checker {
    /// I9: a surge rotation that reached draining says how its capacity came about: the mirror
    /// and `surge-path` are one write, and the path is known (`provisioned` or `absorbed`).
    pub(super) fn surge_paths(&mut self, d: &Diff, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        for (pool, _, np) in &d.pools {
            let Some(np) = np else { continue };
            let m = &np.metadata;
            for slot in crate::reconcile::slots::used(m) {
                let surge_draining = slot_annotation(m, Key::ActiveRotationState, slot)
                    == Some("draining")
                    && !surge_less(slot_annotation(m, Key::RotationMode, slot));
                let path = slot_annotation(m, Key::SurgePath, slot);
                if surge_draining && !matches!(path, Some("provisioned" | "absorbed")) {
                    let claim = slot_annotation(m, Key::ActiveRotation, slot)
                        .unwrap_or_default()
                        .to_string();
                    if self.flagged.insert((I9.to_string(), claim.clone())) {
                        bad.push((
                            format!("pool {pool} drains {claim} with surge-path {path:?}"),
                            claim,
                        ));
                    }
                }
            }
        }
        for (detail, claim) in bad {
            self.fail(I9, now, detail, vec![claim]);
        }
    }

    /// I10: a surge rotation escalates to draining only on the placeholder the controller
    /// created (a pod that appeared during one of its steps), never on a pod merely named like
    /// it.
    pub(super) fn identity(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        now: DateTime<Utc>,
    ) {
        let mut bad = Vec::new();
        for (claim, a, b) in &d.claims {
            let was = a.as_deref().and_then(state_of);
            let is = b.as_deref().and_then(state_of);
            if was == Some("draining") || is != Some("draining") {
                continue;
            }
            let pool = self.claim_pool.get(claim);
            let forceful = pool
                .and_then(|p| post.pools.get(p).or_else(|| prev.pools.get(p)))
                .is_some_and(|np| {
                    let slot = slot_of(np, claim).unwrap_or(0);
                    surge_less(slot_annotation(&np.metadata, Key::RotationMode, slot))
                });
            if forceful {
                continue;
            }
            let name = crate::placeholder::placeholder_name(claim);
            let Some(ph) = prev.placeholders.get(&name) else { continue };
            let uid = ph.metadata.uid.clone().unwrap_or_default();
            if !self.controller_placeholders.contains(&uid) {
                bad.push((
                    format!(
                        "claim {claim} escalated to draining while {name} (uid {uid}) is a pod the controller did not create"
                    ),
                    claim.clone(),
                ));
            }
        }
        for (detail, claim) in bad {
            self.fail(I10, now, detail, vec![claim]);
        }
    }

    /// I11: the readyTimeout rollback of an attempt (pending -> failed with the retry count
    /// raised) leaves no claim Karpenter launched for (or nominated) its placeholder during the
    /// attempt, and for no other rotation's, that is launched, not Ready and billed, unless its
    /// node holds pods, or it is too new for the controller to have seen the nomination (within
    /// the cache lag). What is left later is I20's to judge.
    pub(super) fn surge_cost(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        world: &World,
        now: DateTime<Utc>,
    ) {
        use crate::sim::world::Phase;
        let mut bad = Vec::new();
        for (claim, a, b) in &d.claims {
            let (Some(a), Some(b)) = (a, b) else { continue };
            let count = |c: &crate::karpenter::NodeClaim| {
                annotation(&c.metadata, RETRY_COUNT)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let rollback = state_of(a) == Some("pending")
                && state_of(b) == Some("failed")
                && count(b) > count(a);
            if !rollback {
                continue;
            }
            let Some(started) = annotation(&a.metadata, STARTED_AT).and_then(parse_time) else {
                continue;
            };
            for (s, sc) in &world.claims {
                let launched = sc.phase >= Phase::Launched && sc.phase < Phase::Ready;
                if !sc.placeholders_for.contains(claim) || !launched || sc.created < started {
                    continue;
                }
                let billed = post.claims.get(s).is_some_and(|c| !c.is_deleting());
                // A claim Karpenter counted several placeholders against is the first one's
                // (the controller marks it once): I20 bounds it, not this rollback.
                let excused = now - sc.created <= self.tolerance
                    || sc.placeholders_for.len() > 1
                    || prev.claims.get(s).is_some_and(|c| c.is_deleting())
                    || world
                        .node_pods
                        .get(&sc.node)
                        .into_iter()
                        .flatten()
                        .any(|k| world.pods.get(k).is_some_and(|p| !p.daemonset));
                if billed && !excused {
                    bad.push((
                        format!(
                            "the rollback of {claim} left its surge claim {s} (launched {}, never Ready) billed: a failed surge may bill one node for at most readyTimeout",
                            sc.created.to_rfc3339()
                        ),
                        s.clone(),
                    ));
                }
            }
        }
        for (detail, s) in bad {
            self.fail(I11, now, detail, vec![s]);
        }
    }

    /// I16 over a controller step: what it did to the nodes rotations drain onto (before the
    /// step, and still draining after it: a claim marked failed or unanchored drains on), and
    /// that a landing it began is frozen for its rotation. Governance lost does not end a drain
    /// either: §5.4's rollback leaves a draining claim's landing node frozen.
    pub(super) fn landing_nodes(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        step: &StepInfo<'_>,
        world: &World,
    ) {
        if d.nodes.is_empty() && d.claims.is_empty() && d.pools.is_empty() {
            return;
        }
        let now = step.now;
        let before = landings(prev, world);
        let after = landings(post, world);
        // A rotation that drains ends only when its old claim is gone: marking the claim failed
        // (the sweep, a lost anchor) does not stop the drain onto its landing node.
        let still_draining = |claim: &str| post.claims.contains_key(claim);
        let mut bad = Vec::new();
        let deleted_now: BTreeSet<&str> = d
            .claims
            .iter()
            .filter(|(_, a, b)| {
                a.as_ref().is_some_and(|a| !a.is_deleting())
                    && b.as_ref().is_none_or(|b| b.is_deleting())
            })
            .map(|(n, _, _)| n.as_str())
            .collect();
        for l in before.iter().filter(|l| still_draining(&l.claim)) {
            let (Some(a), Some(b)) = (prev.nodes.get(&l.host), post.nodes.get(&l.host)) else {
                continue;
            };
            let frozen = |n: &k8s_openapi::api::core::v1::Node| {
                annotation(&n.metadata, SURGE_FOR) == Some(l.claim.as_str())
                    && annotation(&n.metadata, DO_NOT_DISRUPT) == Some("true")
            };
            if frozen(a) && !frozen(b) {
                bad.push(format!(
                    "{} took the freeze of {} off node {} (surge-for {:?}, do-not-disrupt {:?}) while {} drains onto it",
                    step.actor,
                    l.claim,
                    l.host,
                    annotation(&b.metadata, SURGE_FOR),
                    annotation(&b.metadata, DO_NOT_DISRUPT),
                    l.claim
                ));
            }
            if !unschedulable(a) && unschedulable(b) {
                bad.push(format!(
                    "{} cordoned node {} while {} drains onto it",
                    step.actor, l.host, l.claim
                ));
            }
            let host_claim = world.nodes.get(&l.host).map(|n| n.claim.as_str());
            if let Some(c) = host_claim.filter(|c| deleted_now.contains(c)) {
                bad.push(format!(
                    "{} deleted claim {c} of node {} while {} drains onto it",
                    step.actor, l.host, l.claim
                ));
            }
        }
        for l in after.difference(&before) {
            let Some(n) = post.nodes.get(&l.host) else { continue };
            let surge_for = annotation(&n.metadata, SURGE_FOR);
            let dnd = annotation(&n.metadata, DO_NOT_DISRUPT);
            if surge_for != Some(l.claim.as_str()) || dnd != Some("true") {
                bad.push(format!(
                    "{} drains {} onto node {}, which is not frozen for it (surge-for {surge_for:?}, do-not-disrupt {dnd:?})",
                    step.actor, l.claim, l.host
                ));
            }
        }
        for detail in bad {
            if self.flagged.insert((I16.to_string(), detail.clone())) {
                let node = detail.split(" node ").nth(1).unwrap_or("").split_whitespace().next();
                let about = node.map(|n| n.trim_end_matches(',').to_string()).into_iter().collect();
                self.fail(I16, now, detail, about);
            }
        }
    }

    /// I17 over a controller step: every old claim it deleted (anchored, or marked draining) had
    /// a Ready surge host frozen for it, or is a forceful fallback its policy allows at that
    /// instant; every claim it marked draining as a forceful fallback was inside the fallback;
    /// and every `ForcefulFallback` Event it announced went with such a mark in its pool (the
    /// Event follows the mark, which the delete follows: a delete that fails is re-issued later).
    pub(super) fn surge_less_deletes(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        step: &StepInfo<'_>,
        world: &World,
    ) {
        let now = step.now;
        let mut bad = Vec::new();
        let tolerance = self.tolerance;
        let recent = |key: Option<usize>| {
            world.operator_touched.get(&key).is_some_and(|t| now - *t <= tolerance)
        };
        for (name, a, b) in &d.claims {
            let Some(a) = a else { continue };
            let pool = self.claim_pool.get(name).cloned().unwrap_or_default();
            let forceful = mode_of([post, prev], &pool, name) == Some("forceful-fallback");
            let marked = b.as_deref().and_then(state_of) == Some("draining")
                && state_of(a) != Some("draining");
            if recent(world.pool_index(&pool)) || recent(None) {
                // Not judged while a person's edit settles, but its Event is still accounted.
                if forceful && marked {
                    self.forceful_marks.entry(pool.clone()).or_default().insert(name.clone());
                }
                continue;
            }
            let deleted = !a.is_deleting() && b.as_ref().is_none_or(|b| b.is_deleting());
            let anchored = anchored(prev.pools.get(&pool)).contains(name)
                || anchored(post.pools.get(&pool)).contains(name);
            let old_claim_deleted = deleted && (anchored || state_of(a) == Some("draining"));
            if !(old_claim_deleted || forceful && marked) {
                continue;
            }
            let verdict = self.fallback_verdict(prev, post, &pool, a, now);
            if forceful && marked {
                match &verdict {
                    Ok(()) => {
                        self.forceful_marks.entry(pool.clone()).or_default().insert(name.clone());
                    }
                    Err(why) => bad.push((
                        format!(
                            "{} started {name} of pool {pool} as a forceful fallback although {why}",
                            step.actor
                        ),
                        name.clone(),
                    )),
                }
            }
            if !old_claim_deleted {
                continue;
            }
            // A reap is held to I6: only the delete of a rotation's old claim is judged here.
            let host = recorded_host([post, prev], &pool, name);
            let ready_surge = host.is_some_and(|h| {
                post.nodes.get(h).is_some_and(|n| {
                    crate::karpenter::node_ready(n)
                        && annotation(&n.metadata, SURGE_FOR) == Some(name.as_str())
                })
            });
            let unreserved = mode_of([post, prev], &pool, name) == Some("nothing-to-reserve");
            if unreserved && !ready_surge {
                match requesting_pods(world, node_of(prev, world, name).as_deref()) {
                    0 => continue,
                    n => bad.push((
                        format!(
                            "{} deleted {name} of pool {pool} as having nothing to reserve although {n} of its node's pods request resources",
                            step.actor
                        ),
                        name.clone(),
                    )),
                }
                continue;
            }
            let why = match (ready_surge, forceful, verdict) {
                (true, _, _) | (false, true, Ok(())) => continue,
                (false, false, _) => "the rotation is not a forceful fallback".to_string(),
                (false, true, Err(why)) => why,
            };
            bad.push((
                format!(
                    "{} deleted {name} of pool {pool} without a Ready surge (recorded host {host:?}) although {why}",
                    step.actor
                ),
                name.clone(),
            ));
        }
        for (pool, claim) in step.forceful_events {
            let marks = self.forceful_marks.entry(pool.clone()).or_default();
            let taken = match claim {
                Some(c) => marks.remove(c),
                None => marks.pop_first().is_some(),
            };
            if !taken {
                bad.push((
                    format!(
                        "{} announced ForcefulFallback for {} in pool {pool} without a forceful start its policy allowed",
                        step.actor,
                        claim.as_deref().unwrap_or("a claim")
                    ),
                    pool.to_string(),
                ));
            }
        }
        for (detail, about) in bad {
            self.fail(I17, now, detail, vec![about]);
        }
    }

    /// Whether the governing policy of `pool` allows the forceful fallback for `claim` at `now`
    /// (§3.6: enabled, and `deadline - now < t_rot` with the claim's tGP, else the pool's), and
    /// why not.
    fn fallback_verdict(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        pool: &str,
        claim: &crate::karpenter::NodeClaim,
        now: DateTime<Utc>,
    ) -> Result<(), String> {
        let np = prev.pools.get(pool).or_else(|| post.pools.get(pool)).cloned();
        let settings = np.as_ref().and_then(|np| self.gov.of(prev, np).settings().cloned());
        let Some(s) = settings else {
            return Err("its pool is not governed by one valid policy".into());
        };
        if !s.forceful_fallback {
            return Err("forcefulFallback is not enabled".into());
        }
        let tgp = claim
            .termination_grace_period()
            .ok()
            .flatten()
            .or_else(|| np.as_ref()?.termination_grace_period().ok().flatten());
        let deadline = claim
            .created()
            .zip(claim.expire_after().ok())
            .and_then(|(c, e)| crate::policy::derive::deadline(c, e));
        if inside_fallback(deadline, s.t_rot(tgp), now) {
            Ok(())
        } else {
            Err(format!(
                "the claim is not inside the fallback (deadline {deadline:?}, t_rot {})",
                fmt(s.t_rot(tgp))
            ))
        }
    }

    /// I20: a claim Karpenter launched for a placeholder that is neither
    /// Ready nor being deleted, more than readyTimeout + [`I20_GRACE`] after the last rotation it
    /// served stopped being in flight (its anchor released, or its claim failed or expired).
    pub(super) fn surge_lifetimes(&mut self, post: &CacheView, world: &World, now: DateTime<Utc>) {
        let default_timeout = Duration::minutes(15);
        self.surge_in_use.retain(|c, _| world.surge_launched.contains(c));
        let mut bad = Vec::new();
        // Per pool, once per step: its anchors and its readyTimeout.
        let mut pools: BTreeMap<usize, PoolSurgeFacts<'_>> = BTreeMap::new();
        for name in &world.surge_launched {
            let Some(sc) = world.claims.get(name) else { continue };
            let (rotations, ready_timeout) = pools.entry(sc.pool).or_insert_with(|| {
                let np = post.pools.get(world.pool_name(sc.pool));
                let ready_timeout =
                    np.and_then(|np| self.gov.of(post, np).settings().map(|s| s.ready_timeout));
                (np.map(|np| anchors(np)), ready_timeout)
            });
            let ready_timeout = *ready_timeout;
            let in_flight = rotations.as_ref().is_some_and(|rotations| {
                sc.placeholders_for.iter().any(|r| {
                    rotations.values().any(|a| a == r)
                        && post
                            .claims
                            .get(r)
                            .is_none_or(|c| !matches!(state_of(c), Some("failed" | "expired")))
                })
            });
            let entry = self
                .surge_in_use
                .entry(name.clone())
                .or_insert((now, ready_timeout.unwrap_or(default_timeout)));
            if in_flight {
                *entry = (now, ready_timeout.unwrap_or(entry.1));
                continue;
            }
            let (ended, timeout) = *entry;
            let billed = post.claims.get(name).is_some_and(|c| !c.is_deleting());
            if billed && now - ended > timeout + I20_GRACE {
                bad.push((
                    format!(
                        "claim {name} (launched {} for {}, never Ready) outlived its rotation by {} (bound readyTimeout {} + {})",
                        sc.created.to_rfc3339(),
                        sc.placeholders_for.iter().cloned().collect::<Vec<_>>().join(", "),
                        fmt(now - ended),
                        fmt(timeout),
                        fmt(I20_GRACE)
                    ),
                    name.clone(),
                ));
            }
        }
        for (detail, name) in bad {
            if self.flagged.insert((I20.to_string(), name.clone())) {
                self.fail(I20, now, detail, vec![name]);
            }
        }
    }
}

/// §3.6 as the checker states it, apart from the rules that decide it: a claim is inside the
/// forceful fallback when a graceful surge can no longer finish before its forced expiry
/// (`deadline - now < t_rot`); a claim without a deadline never is.
fn inside_fallback(deadline: Option<DateTime<Utc>>, t_rot: Duration, now: DateTime<Utc>) -> bool {
    deadline.is_some_and(|d| d - now < t_rot)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn the_fallback_starts_strictly_inside_t_rot() {
        let now = Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().unwrap_or_else(|| panic!());
        let t = Duration::minutes(77);
        assert!(inside_fallback(Some(now + Duration::minutes(76)), t, now));
        assert!(!inside_fallback(Some(now + Duration::minutes(77)), t, now));
        assert!(!inside_fallback(None, t, now));
    }
}
