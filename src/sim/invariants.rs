//! The simulation's invariants (I1–I15, I22), each a named check over one step:
//! the store before and after it, what the controller announced during it, and what the world
//! knows (which pods run where, which claims ever existed). Safety checks run after every step;
//! the quiescence and liveness checks run where their premise holds (no faults, or the calm
//! phase after the faults are switched off). A pool may have several rotations in flight, one per
//! slot (`reconcile::slots`): every check that reads an anchor reads every slot's.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::actors::{
    CLAIM_STATE, CORDONED_MARKER, DO_NOT_DISRUPT, FREEZE_ANNOTATION, OWNED_MARKER, STARTED_AT,
    SURGE_FOR, anchors, annotation, placeholder_node, slot_annotation,
};
use super::driver::CallRecord;
use super::gov::{self, Gov, Governed};
use super::observe::{Diff, unschedulable};
use super::scenario::Compiled;
use super::trace::Entry;
use super::world::{BUFFER, World};
use crate::cluster::CacheView;
use crate::engine::Key;
use crate::karpenter::NodePool;
use crate::policy::chances;
use crate::policy::settings::AgeThreshold;

/// Each anchor (of every slot) names a claim of its own pool.
pub const I1: &str = "I1 one-anchor-per-pool";
pub const I2: &str = "I2 start-gates";
pub const I3: &str = "I3 delete-only-the-anchored-candidate";
pub const I4: &str = "I4 announce-at-most-once";
pub const I5: &str = "I5 foreign-protection-untouched";
pub const I6: &str = "I6 reap-guard";
pub const I7: &str = "I7 quiescence";
pub const I8: &str = "I8 liveness";
/// Not in the guide's list: the surge path a rotation reports is observed, never guessed.
pub const I9: &str = "I9 surge-path-recorded";
/// Not in the guide's list: a surge rotation drains the old node only on the placeholder the
/// controller created, never on a pod merely named like it.
pub const I10: &str = "I10 placeholder-identity";
/// Not in the guide's list: the cost bound of §4.4, a failed surge bills one node for
/// at most readyTimeout: the rollback reaps a surge claim that never turned Ready.
pub const I11: &str = "I11 failed-surge-cost";
/// Not in the guide's list: a pool starts a rotation only while fewer than `lanes(np)`
/// (`spec.surge.maxUnavailable`) are in flight. Rotations started under a larger N may finish,
/// so only a start is held to it.
pub const I12: &str = "I12 lanes-in-flight";
/// Not in the guide's list: a pool's rotations hold at most `lanes(np)` surge nodes at once
/// (nodes whose `surge-for` names one of its anchors, the old node and a former host whose
/// placeholder moved to the slot's recorded `surge-host` excepted), or as many as rotations
/// are in flight when more were started under a larger N.
pub const I13: &str = "I13 surge-nodes-per-lane";
/// Not in the guide's list: no claim is in two rotations: no two slots, of one pool or of
/// two, anchor the same claim at one instant.
pub const I14: &str = "I14 one-rotation-per-claim";
/// Not in the guide's list: no node is the surge host of two rotations at once: no two anchored
/// slots of a pool record the same `surge-host`. A host reserves one old node's worth; a second
/// rotation draining onto it leaves pods without room (a drain paced by a PDB leaves the host
/// empty for a while, so a new placeholder fits there).
pub const I15: &str = "I15 one-rotation-per-surge-host";
/// Not in the guide's list: one leader writes at a time. Once an instance holds the Lease, no
/// write of the instance it took the Lease from lands: the deposed leader's write fence closed
/// before the Lease could change hands, whatever the two replicas' clocks said.
pub const I22: &str = "I22 one-leader-writes";
/// The invariants the simulation checks, for the summary line.
pub const ALL: &str = "I1-I15, I22";

const LAST_FAILURE_AT: &str = "noderotation.io/last-failure-at";
const RETRY_COUNT: &str = "noderotation.io/retry-count";
const SURGE_CLAIM: &str = "noderotation.io/surge-claim";

/// How long debris may stay (I7) before the controller must have repaired it: a tick (1m, when
/// the sweep runs) and slack; with faults, a crash and restart or a failed anchor read too.
const DEBRIS_GRACE: Duration = Duration::minutes(2);
const DEBRIS_GRACE_FAULTS: Duration = Duration::minutes(5);

/// One piece of I7 debris: what it is, the object to pull from the trace, since when.
#[derive(Debug, Clone)]
struct Debris {
    detail: String,
    object: String,
    since: DateTime<Utc>,
}

/// Which new debris a step answers for (I7).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answers {
    /// A clean controller step without faults in the run: all of it.
    Any,
    /// A clean pass in a run with faults: its own pool's.
    Pool(String),
    /// Not a clean controller step.
    Nothing,
}

/// I8: the claim a slot anchors, since when, and the bound its rotation is held to.
type Since = (String, DateTime<Utc>, Option<Duration>);

/// A broken invariant.
#[derive(Debug, Clone)]
pub struct Violation {
    pub invariant: &'static str,
    pub time: DateTime<Utc>,
    pub detail: String,
    /// The trace around it (filled by the runner).
    pub trace: Vec<Entry>,
    /// Object names to pull from the trace.
    pub about: Vec<String>,
}

/// A completion outcome the controller announced (log line + metric, or its Event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announced {
    pub pool: String,
    pub claim: Option<String>,
    /// `success`, `failure` or `expired`.
    pub what: &'static str,
    pub source: String,
    /// `emit` (metric + log line) or `event`: each is held to at most once per transition.
    pub kind: &'static str,
}

/// What the step was.
#[derive(Debug, Clone, Copy)]
pub struct StepInfo<'a> {
    pub now: DateTime<Utc>,
    pub actor: &'a str,
    /// A controller pass, sweep or status write (not a world actor).
    pub controller: bool,
    pub pool: Option<usize>,
    /// The pass returned without error.
    pub ok: bool,
    /// A fault was injected during the step.
    pub faulted: bool,
    /// The controller's cache equals the store (no lag) and no fault is active.
    pub exact: bool,
    /// The deposed leader's pass (split brain: its effects are not held to quiescence).
    pub zombie: bool,
}

pub struct Checker {
    plan: Arc<Compiled>,
    /// Invariant 8 applies.
    pub liveness: bool,
    /// Invariant 7 is checked after every clean controller step (no faults in the run).
    pub continuous_quiescence: bool,
    /// The calm phase: faults off, quiescence checked after every step.
    pub calm_since: Option<DateTime<Utc>>,
    calm_checked: bool,
    /// Operator edits closer than this are not held against the start gates (the controller
    /// may not have seen them yet).
    pub tolerance: Duration,
    claim_pool: BTreeMap<String, String>,
    reached_draining: BTreeSet<String>,
    transitions: BTreeMap<(String, &'static str), u64>,
    announced: BTreeMap<(String, &'static str, &'static str), u64>,
    /// I8: per (pool, slot), the anchored claim, since when, and its bound.
    anchor_since: BTreeMap<(String, usize), Since>,
    flagged: BTreeSet<(String, String)>,
    /// I7: what the store holds without the anchor that references it, keyed by detail, since
    /// when.
    debris: BTreeMap<String, Debris>,
    /// How long debris may stay.
    debris_grace: Duration,
    /// I10: uids of the placeholder pods that appeared during controller steps.
    controller_placeholders: BTreeSet<String>,
    expiries_seen: usize,
    /// leadTime per pool at the start, for invariant 8.
    lead: BTreeMap<String, Option<Duration>>,
    /// Claims of the starting fleet one rotation at a time cannot reach in time (their
    /// deadlines start out crowded), for invariant 8.
    unreachable: BTreeSet<String>,
    gov: Gov,
    pub violations: Vec<Violation>,
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc))
}

/// The claims a pool's slots anchor (none without the pool).
fn anchored(np: Option<&Arc<NodePool>>) -> BTreeSet<String> {
    np.map(|p| anchors(p).into_values().map(str::to_string).collect()).unwrap_or_default()
}

/// The slot of a pool that anchors `claim`.
fn slot_of(np: &NodePool, claim: &str) -> Option<usize> {
    anchors(np).into_iter().find(|(_, a)| *a == claim).map(|(slot, _)| slot)
}

/// I12 for one pool across a step: a rotation started (a slot's anchor appeared or changed)
/// while the pool, the start included, holds more than `lanes` anchors.
fn lane_breach(pool: &str, a: Option<&NodePool>, b: &NodePool, lanes: usize) -> Option<String> {
    let before = a.map(anchors).unwrap_or_default();
    let after = anchors(b);
    let started: Vec<&str> =
        after.iter().filter(|(slot, c)| before.get(slot) != Some(*c)).map(|(_, c)| *c).collect();
    (!started.is_empty() && after.len() > lanes).then(|| {
        format!(
            "pool {pool} started {} with {} rotations in flight ({}), over its {lanes} lane(s)",
            started.join(", "),
            after.len(),
            after.values().copied().collect::<Vec<_>>().join(", ")
        )
    })
}

/// I13 for one pool: the surge nodes of its rotations (nodes whose `surge-for` names one of its
/// anchors, other than that claim's own node) when there are more than `lanes` of them and
/// more than rotations in flight.
fn surge_breach(
    view: &CacheView,
    pool: &str,
    np: &NodePool,
    lanes: impl FnOnce() -> usize,
) -> Option<String> {
    let rotations = anchors(np);
    let mut hosts = crate::reconcile::slots::by_slot(&np.metadata, crate::engine::Key::SurgeHost);
    hosts.retain(|_, h| !h.is_empty());
    // The host a rotation recorded: a former host (its placeholder preempted and re-created on
    // another node) keeps its freeze until the rotation ends and is not counted again.
    let recorded = |claim: &str| {
        rotations.iter().find(|(_, a)| **a == claim).and_then(|(slot, _)| hosts.get(slot)).copied()
    };
    let old_node =
        |claim: &str| view.claims.get(claim).and_then(|c| c.status.as_ref()?.node_name.clone());
    let surge: Vec<&str> = view
        .nodes
        .iter()
        .filter(|(name, n)| {
            annotation(&n.metadata, SURGE_FOR).is_some_and(|s| {
                rotations.values().any(|a| *a == s)
                    && old_node(s).as_deref() != Some(name.as_str())
                    && recorded(s).is_none_or(|host| host == name.as_str())
            })
        })
        .map(|(name, _)| name.as_str())
        .collect();
    if surge.len() <= rotations.len() {
        return None;
    }
    let lanes = lanes();
    (surge.len() > lanes).then(|| {
        format!(
            "pool {pool} holds {} surge nodes ({}) for {} rotation(s) in {lanes} lane(s)",
            surge.len(),
            surge.join(", "),
            rotations.len()
        )
    })
}

/// I15 for one pool: a surge host two anchored slots record, with the rotations.
fn shared_host(pool: &str, np: &NodePool) -> Option<String> {
    let rotations = anchors(np);
    let hosts = crate::reconcile::slots::by_slot(&np.metadata, crate::engine::Key::SurgeHost);
    let mut by_host: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (slot, host) in hosts {
        if let Some(claim) = rotations.get(&slot).filter(|_| !host.is_empty()) {
            by_host.entry(host).or_default().push(claim);
        }
    }
    by_host.into_iter().find(|(_, c)| c.len() > 1).map(|(host, claims)| {
        format!("pool {pool}: node {host} is the surge host of {}", claims.join(" and "))
    })
}

/// I14: every claim two slots anchor at once, with the (pool, slot)s naming it.
fn shared_claims(view: &CacheView) -> Vec<(String, Vec<String>)> {
    let mut by_claim: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (pool, np) in &view.pools {
        for (slot, claim) in anchors(np) {
            by_claim.entry(claim).or_default().push(format!("{pool} slot {slot}"));
        }
    }
    by_claim.into_iter().filter(|(_, v)| v.len() > 1).map(|(c, v)| (c.to_string(), v)).collect()
}

fn state_of(c: &crate::karpenter::NodeClaim) -> Option<&str> {
    annotation(&c.metadata, CLAIM_STATE)
}

impl Checker {
    pub fn new(plan: Arc<Compiled>, faults: bool, lag: Duration, start: &CacheView) -> Checker {
        let mut gov = Gov::default();
        let mut lead = BTreeMap::new();
        let mut unreachable = BTreeSet::new();
        for (name, np) in &start.pools {
            let settings = gov.of(start, np).settings().cloned();
            let l = settings.as_ref().and_then(|s| gov::lead_time(s, np, plan.start));
            lead.insert(name.clone(), l);
            if let Some(s) = settings {
                unreachable.extend(gov::unreachable_at_start(&s, start, np, plan.start));
            }
        }
        let mut claim_pool = BTreeMap::new();
        for (name, c) in &start.claims {
            if let Some(p) = c.node_pool() {
                claim_pool.insert(name.clone(), p.to_string());
            }
        }
        Checker {
            liveness: plan.expect.liveness && !faults,
            continuous_quiescence: !faults,
            calm_since: None,
            calm_checked: false,
            tolerance: lag + Duration::minutes(1),
            plan,
            claim_pool,
            reached_draining: BTreeSet::new(),
            transitions: BTreeMap::new(),
            announced: BTreeMap::new(),
            anchor_since: BTreeMap::new(),
            flagged: BTreeSet::new(),
            debris: BTreeMap::new(),
            debris_grace: if faults { DEBRIS_GRACE_FAULTS } else { DEBRIS_GRACE },
            controller_placeholders: BTreeSet::new(),
            expiries_seen: 0,
            lead,
            unreachable,
            gov,
            violations: Vec::new(),
        }
    }

    fn fail(
        &mut self,
        invariant: &'static str,
        now: DateTime<Utc>,
        detail: String,
        about: Vec<String>,
    ) {
        self.violations.push(Violation { invariant, time: now, detail, trace: Vec::new(), about });
    }

    /// I22: writes the API server applied for an instance after another one had taken the
    /// Lease from it (the driver's record of the step).
    pub fn fenced_writes(&mut self, now: DateTime<Utc>, actor: &str, stale: &[CallRecord]) {
        for w in stale {
            let detail = format!(
                "{actor}: {:?} {} (client {}) landed after the other instance had taken the Lease",
                w.verb, w.target, w.client
            );
            self.fail(I22, now, detail, vec![w.target.clone()]);
        }
    }

    /// Checks one step.
    pub fn check(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        step: &StepInfo<'_>,
        announced: &[Announced],
        world: &World,
    ) {
        let now = step.now;
        for (name, _, b) in &d.claims {
            if let Some(p) = b.as_ref().and_then(|c| c.node_pool()) {
                self.claim_pool.entry(name.clone()).or_insert_with(|| p.to_string());
            }
        }
        self.anchors(post, now);
        self.lanes(d, post, now);
        self.surge_paths(d, now);
        if step.controller {
            for (_, a, b) in &d.placeholders {
                if a.is_none()
                    && let Some(uid) = b.as_ref().and_then(|p| p.metadata.uid.clone())
                {
                    self.controller_placeholders.insert(uid);
                }
            }
            self.starts(prev, d, step, world);
            self.deletions(prev, post, d, step, world);
            self.protections(d, now);
            self.identity(prev, post, d, now);
            if !step.zombie {
                self.surge_cost(prev, post, d, world, now);
            }
        }
        self.announcements(prev, post, d, announced, now);
        // The calm phase starts checking once a restart scheduled before it has run.
        let calm = self.calm_since.is_some_and(|c| now - c >= Duration::minutes(2));
        // Debris can only appear when the store changed (or when the calm phase begins). A clean
        // controller step must not add any (without faults, any at all; with faults, of its own
        // pool); whatever else leaves it (an operator's edit, a crash, a deposed leader) must be
        // repaired within the grace (the tick's sweep runs every minute).
        let fresh_calm = self.calm_since.is_some() && !self.calm_checked;
        let clean = step.controller && step.ok && !step.faulted && !step.zombie;
        if !d.is_empty() || fresh_calm {
            let pool = step.pool.and_then(|p| self.plan.pools.get(p)).map(|p| p.name.clone());
            let answers = match (clean, self.continuous_quiescence, pool) {
                (false, _, _) => Answers::Nothing,
                (true, true, _) => Answers::Any,
                (true, false, Some(p)) => Answers::Pool(p),
                (true, false, None) => Answers::Nothing,
            };
            self.track_debris(post, now, world, &answers);
        }
        self.aged_debris(now);
        if calm && (!d.is_empty() || fresh_calm) {
            self.calm_checked = true;
            self.quiescence(post, now, world);
        }
        // A stalled pass has not ended: it is not the clean pass that owes the release.
        if step.controller && step.ok && !step.faulted && step.exact && !step.zombie {
            self.gone_anchor(prev, post, step);
        }
        if self.liveness || calm {
            self.durations(post, world, now);
        }
        if self.liveness {
            self.expiries(post, world, now);
        }
    }

    /// I1: every anchor names a claim of its own pool; I14: no claim is anchored twice.
    fn anchors(&mut self, post: &CacheView, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        for (pool, np) in &post.pools {
            for a in anchors(np).into_values() {
                match self.claim_pool.get(a) {
                    Some(p) if p == pool => {}
                    Some(p) => bad.push((
                        format!("pool {pool} is anchored on {a}, a claim of pool {p}"),
                        a.to_string(),
                    )),
                    None => bad.push((
                        format!("pool {pool} is anchored on {a}, which never was a claim"),
                        a.to_string(),
                    )),
                }
            }
        }
        for (detail, claim) in bad {
            self.fail(I1, now, detail, vec![claim]);
        }
        for (claim, holders) in shared_claims(post) {
            let detail = format!("claim {claim} is anchored by {}", holders.join(" and "));
            if self.flagged.insert((I14.to_string(), detail.clone())) {
                self.fail(I14, now, detail, vec![claim]);
            }
        }
    }

    /// I12 at every start and I13 after every change of a pool: the lanes of the pool's
    /// governing policy at that instant bound its rotations and their surge nodes.
    fn lanes(&mut self, d: &Diff, post: &CacheView, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        for (pool, a, b) in &d.pools {
            // One rotation fits every pool's lanes (at least one).
            let Some(b) = b.as_ref().filter(|b| anchors(b).len() > 1) else { continue };
            if let Some(detail) = shared_host(pool, b)
                && self.flagged.insert((I15.to_string(), detail.clone()))
            {
                bad.push((I15, detail, pool.clone()));
            }
            let Some(settings) = self.gov.of(post, b).settings().cloned() else { continue };
            let lanes = gov::lanes(&settings, post, pool);
            if let Some(detail) = lane_breach(pool, a.as_deref(), b, lanes) {
                bad.push((I12, detail, pool.clone()));
            }
        }
        // Surge nodes change on node writes: judged over every pool after any change.
        if !d.nodes.is_empty() || !d.pools.is_empty() {
            for (pool, np) in &post.pools {
                if anchors(np).is_empty() {
                    continue;
                }
                let gov = &mut self.gov;
                let lanes = || {
                    gov.of(post, np).settings().map_or(usize::MAX, |s| gov::lanes(s, post, pool))
                };
                if let Some(detail) = surge_breach(post, pool, np, lanes)
                    && self.flagged.insert((I13.to_string(), detail.clone()))
                {
                    bad.push((I13, detail, pool.clone()));
                }
            }
        }
        for (invariant, detail, pool) in bad {
            self.fail(invariant, now, detail, vec![pool]);
        }
    }

    /// I9: a surge rotation that reached draining says how its capacity came about: the mirror
    /// and `surge-path` are one write, and the path is known (`provisioned` or `absorbed`).
    fn surge_paths(&mut self, d: &Diff, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        for (pool, _, np) in &d.pools {
            let Some(np) = np else { continue };
            let m = &np.metadata;
            for slot in crate::reconcile::slots::used(m) {
                let surge_draining = slot_annotation(m, Key::ActiveRotationState, slot)
                    == Some("draining")
                    && slot_annotation(m, Key::RotationMode, slot) != Some("forceful-fallback");
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
    fn starts(&mut self, prev: &CacheView, d: &Diff, step: &StepInfo<'_>, world: &World) {
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

    /// I3 and I6: the controller deletes only its anchored candidate, or reaps a surge claim it
    /// induced that hosts nothing but the placeholder and DaemonSet pods.
    fn deletions(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        step: &StepInfo<'_>,
        world: &World,
    ) {
        let now = step.now;
        for (name, a, b) in &d.claims {
            let Some(a) = a else { continue };
            let deleted = !a.is_deleting() && b.as_ref().is_none_or(|b| b.is_deleting());
            if !deleted {
                continue;
            }
            let pool = self.claim_pool.get(name).cloned().unwrap_or_default();
            let anchor_pre = anchored(prev.pools.get(&pool));
            let anchor_post = anchored(post.pools.get(&pool));
            // An anchor the operator removed a moment ago: a pass that read the pool before the
            // edit still drives that rotation (its writes re-check the claim, not the anchor).
            let unanchored = world
                .operator_unanchored
                .get(&pool)
                .filter(|(_, t)| now - *t <= self.tolerance)
                .map(|(c, _)| c.clone());
            if anchor_pre.contains(name)
                || anchor_post.contains(name)
                || unanchored.as_deref() == Some(name.as_str())
            {
                continue;
            }
            // Not a candidate: only a §3.8 reap may delete it, for a rotation of the pool in
            // flight whose surge it can be: created at or after that rotation's started-at, its
            // node hosting nothing but that rotation's placeholder and DaemonSet pods. Which
            // rotation reaped it is not observable (several can roll back in one pass, and a
            // rollback's own record can fail), so any rotation of the pool in flight may have;
            // the message names the likeliest: the one that recorded it as its surge claim, else
            // the one whose placeholder ran on its node, else the one Karpenter launched it for,
            // else the pool's first.
            let recorded = prev.claims.iter().find_map(|(c, obj)| {
                (annotation(&obj.metadata, SURGE_CLAIM) == Some(name.as_str())).then(|| c.clone())
            });
            let node = world.claims.get(name).map(|c| c.node.clone()).unwrap_or_default();
            let hosted = prev.placeholders.values().find_map(|p| {
                (placeholder_node(p) == Some(node.as_str()))
                    .then(|| annotation(&p.metadata, SURGE_FOR).map(str::to_string))
                    .flatten()
            });
            let surged = world.claims.get(name).and_then(|c| c.surge_for.clone());
            let mut cands: Vec<String> = [recorded, hosted, surged]
                .into_iter()
                .flatten()
                .filter(|s| anchor_pre.contains(s))
                .collect();
            let in_flight = prev.pools.get(&pool).map(|p| anchors(p)).unwrap_or_default();
            for c in in_flight.into_values().map(str::to_string).chain(unanchored) {
                if c != *name && !cands.contains(&c) {
                    cands.push(c);
                }
            }
            if cands.is_empty() {
                self.fail(
                    I3,
                    now,
                    format!(
                        "{} deleted claim {name} of pool {pool}, which has no anchored rotation",
                        step.actor
                    ),
                    vec![name.clone()],
                );
                continue;
            }
            let workload: Vec<String> = world
                .node_pods
                .get(&node)
                .into_iter()
                .flatten()
                .filter(|k| world.pods.get(*k).is_some_and(|p| !p.daemonset))
                .map(|k| k.1.clone())
                .collect();
            let created = a.created();
            let verdict = |cand: &String| -> Option<String> {
                let started = prev
                    .claims
                    .get(cand)
                    .and_then(|c| annotation(&c.metadata, STARTED_AT))
                    .and_then(parse_time);
                if !matches!((created, started), (Some(c), Some(s)) if c >= s) {
                    return Some(format!(
                        "{} reaped claim {name} (created {}) for the rotation of {cand} (started-at {}): not created after started-at",
                        step.actor,
                        created.map_or("?".into(), |t| t.to_rfc3339()),
                        started.map_or("absent".into(), |t| t.to_rfc3339()),
                    ));
                }
                let mut foreign = workload.clone();
                foreign.extend(
                    prev.placeholders
                        .iter()
                        .filter(|(_, p)| placeholder_node(p) == Some(node.as_str()))
                        .filter(|(_, p)| annotation(&p.metadata, SURGE_FOR) != Some(cand.as_str()))
                        .map(|(n, _)| n.clone()),
                );
                (!foreign.is_empty()).then(|| {
                    format!(
                        "{} reaped claim {name} for the rotation of {cand} while its node {node} hosts {}",
                        step.actor,
                        foreign.join(", ")
                    )
                })
            };
            // Up to the first rotation that could have reaped it; all of them: a violation.
            let refusals: Vec<String> = cands.iter().map_while(verdict).collect();
            if refusals.len() == cands.len() {
                self.fail(I6, now, refusals[0].clone(), vec![name.clone(), cands[0].clone()]);
            }
        }
    }

    /// I5: never remove (or adopt) a cordon or do-not-disrupt the controller did not set.
    fn protections(&mut self, d: &Diff, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        for (name, a, b) in &d.nodes {
            let (Some(a), Some(b)) = (a, b) else { continue };
            let marker = |n: &k8s_openapi::api::core::v1::Node, k: &str| {
                annotation(&n.metadata, k) == Some("true")
            };
            if unschedulable(a) && !unschedulable(b) && !marker(a, CORDONED_MARKER) {
                bad.push(format!("uncordoned node {name}, whose cordon it did not set"));
            }
            let dnd = |n: &k8s_openapi::api::core::v1::Node| {
                annotation(&n.metadata, DO_NOT_DISRUPT) == Some("true")
            };
            if dnd(a) && !dnd(b) && !marker(a, OWNED_MARKER) {
                bad.push(format!("removed the operator's do-not-disrupt from node {name}"));
            }
            if unschedulable(a) && !marker(a, CORDONED_MARKER) && marker(b, CORDONED_MARKER) {
                bad.push(format!("adopted a foreign cordon on node {name}"));
            }
            if dnd(a) && !marker(a, OWNED_MARKER) && marker(b, OWNED_MARKER) {
                bad.push(format!("adopted the operator's do-not-disrupt on node {name}"));
            }
        }
        for detail in bad {
            let node = detail.split_whitespace().last().unwrap_or("").to_string();
            self.fail(I5, now, detail, vec![node]);
        }
    }

    /// I4: each completion outcome is announced at most once per transition that wrote it, and
    /// success only for a rotation that reached draining.
    fn announcements(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        announced: &[Announced],
        now: DateTime<Utc>,
    ) {
        let mut released: BTreeMap<String, String> = BTreeMap::new();
        for (pool, a, b) in &d.pools {
            let before = a.as_deref().map(anchors).unwrap_or_default();
            let after = b.as_deref().map(anchors).unwrap_or_default();
            if let Some(b) = b {
                for (slot, q) in &after {
                    if slot_annotation(&b.metadata, Key::ActiveRotationState, *slot)
                        == Some("draining")
                    {
                        self.reached_draining.insert(q.to_string());
                    }
                }
            }
            for (slot, x) in &before {
                if after.get(slot) == Some(x) {
                    continue;
                }
                let (slot, x) = (*slot, x.to_string());
                released.entry(pool.clone()).or_insert_with(|| x.clone());
                let last = |p: &Option<Arc<NodePool>>| {
                    p.as_ref().and_then(|p| {
                        slot_annotation(&p.metadata, Key::LastRotationAt, slot).map(str::to_string)
                    })
                };
                let key = if last(a) != last(b) && last(b).is_some() {
                    Some("success")
                } else if !post.claims.contains_key(&x) {
                    Some("expired")
                } else {
                    None
                };
                if let Some(k) = key {
                    *self.transitions.entry((pool.clone(), k)).or_insert(0) += 1;
                }
            }
        }
        for (claim, a, b) in &d.claims {
            let was = a.as_deref().and_then(state_of);
            let is = b.as_deref().and_then(state_of);
            if is == Some("draining") {
                self.reached_draining.insert(claim.clone());
            }
            // A retry that fails in the same pass (failed -> pending -> failed) leaves the state
            // as it was; its failure write shows as a higher retry-count.
            let retries = |c: &Option<Arc<crate::karpenter::NodeClaim>>| {
                crate::policy::derive::parse_retry_count(
                    c.as_deref().and_then(|c| annotation(&c.metadata, RETRY_COUNT)),
                )
            };
            let failed_again = is == Some("failed") && retries(b) > retries(a);
            if (was != is || failed_again)
                && let Some(k) = match is {
                    Some("failed") => Some("failure"),
                    Some("expired") => Some("expired"),
                    _ => None,
                }
                && let Some(pool) = self.claim_pool.get(claim).cloned()
            {
                *self.transitions.entry((pool, k)).or_insert(0) += 1;
            }
        }
        let _ = prev;
        for a in announced {
            // The start-up sweep announces without a pool: the claim names it.
            let pool = match (&a.claim, a.pool.is_empty()) {
                (Some(c), true) => self.claim_pool.get(c).cloned().unwrap_or_default(),
                _ => a.pool.clone(),
            };
            let a = &Announced { pool, ..a.clone() };
            let key = (a.pool.clone(), a.what);
            let n = {
                let e = self.announced.entry((a.pool.clone(), a.what, a.kind)).or_insert(0);
                *e += 1;
                *e
            };
            let allowed = self.transitions.get(&key).copied().unwrap_or(0);
            if n > allowed {
                self.fail(
                    I4,
                    now,
                    format!(
                        "{} announced {} #{n} in pool {} but only {allowed} such transition(s) were written{}",
                        a.source,
                        a.what,
                        a.pool,
                        a.claim.as_ref().map_or(String::new(), |c| format!(" (claim {c})"))
                    ),
                    vec![a.pool.clone()],
                );
            }
            if a.what == "success" {
                let claim = a.claim.clone().or_else(|| released.get(&a.pool).cloned());
                match claim {
                    Some(c) if self.reached_draining.contains(&c) => {}
                    Some(c) => self.fail(
                        I4,
                        now,
                        format!(
                            "{} announced success for {c} in pool {}, which never reached draining",
                            a.source, a.pool
                        ),
                        vec![c],
                    ),
                    None => self.fail(
                        I4,
                        now,
                        format!(
                            "{} announced success in pool {} while no rotation was released",
                            a.source, a.pool
                        ),
                        vec![a.pool.clone()],
                    ),
                }
            }
        }
    }

    /// The end of the calm phase: quiescence over the whole store.
    pub fn final_check(&mut self, post: &CacheView, now: DateTime<Utc>, world: &World) {
        self.quiescence(post, now, world);
    }

    /// I7 debris in `post`: a placeholder, `surge-for`, owned do-not-disrupt or owned cordon
    /// without the anchor that references it, and a claim left `pending` (or `draining` with no
    /// delete issued) without its pool's anchor, which nothing would ever pick again.
    fn debris_in(&self, post: &CacheView, world: &World) -> Vec<(String, String, Option<String>)> {
        // Legitimate when any slot of the pool anchors what it serves.
        let anchors_of: BTreeMap<&str, BTreeSet<String>> =
            post.pools.iter().map(|(n, p)| (n.as_str(), anchored(Some(p)))).collect();
        let none = BTreeSet::new();
        let anchor = |pool: &str| anchors_of.get(pool).unwrap_or(&none);
        let mut bad = Vec::new();
        for (name, ph) in &post.placeholders {
            let target = annotation(&ph.metadata, SURGE_FOR);
            let pool = target.and_then(|c| self.claim_pool.get(c));
            let ok = matches!((target, pool), (Some(c), Some(p)) if anchor(p).contains(c));
            if !ok {
                bad.push((
                    format!(
                        "placeholder {name} (surge-for {target:?}) without the anchor it serves"
                    ),
                    name.clone(),
                    pool.cloned(),
                ));
            }
        }
        for (name, node) in &post.nodes {
            let pool =
                node.metadata.labels.as_ref().and_then(|l| l.get(crate::karpenter::NODEPOOL_LABEL));
            let a = pool.map_or(&none, |p| anchor(p));
            let surge_for = annotation(&node.metadata, SURGE_FOR);
            if let Some(s) = surge_for
                && !a.contains(s)
            {
                bad.push((
                    format!("node {name} frozen for {s} (surge-for) without that anchor"),
                    name.clone(),
                    pool.cloned(),
                ));
            }
            if annotation(&node.metadata, OWNED_MARKER) == Some("true") && surge_for.is_none() {
                bad.push((
                    format!("node {name} keeps our do-not-disrupt without surge-for"),
                    name.clone(),
                    pool.cloned(),
                ));
            }
            if annotation(&node.metadata, CORDONED_MARKER) == Some("true") {
                let claim = world.nodes.get(name).map(|n| n.claim.as_str());
                let refers = |c: Option<&str>| c.is_some_and(|c| a.contains(c));
                if !refers(claim) && !refers(surge_for) {
                    bad.push((
                        format!("node {name} keeps our cordon without an anchor referencing it"),
                        name.clone(),
                        pool.cloned(),
                    ));
                }
            }
        }
        for (name, c) in &post.claims {
            let state = state_of(c);
            let stranded =
                state == Some("pending") || (state == Some("draining") && !c.is_deleting());
            let pool = self.claim_pool.get(name);
            if stranded && !pool.is_some_and(|p| anchor(p).contains(name)) {
                bad.push((
                    format!(
                        "claim {name} is {} without its pool's anchor: never picked again",
                        state.unwrap_or_default()
                    ),
                    name.clone(),
                    pool.cloned(),
                ));
            }
        }
        bad
    }

    /// I7 after a step that changed the store: records when each piece of debris appeared, and
    /// fails a clean controller step that added some it answers for.
    fn track_debris(
        &mut self,
        post: &CacheView,
        now: DateTime<Utc>,
        world: &World,
        answers: &Answers,
    ) {
        let found = self.debris_in(post, world);
        let mut next = BTreeMap::new();
        let mut added = Vec::new();
        for (detail, object, pool) in found {
            let since = match self.debris.get(&detail) {
                Some(d) => d.since,
                None => {
                    added.push((detail.clone(), object.clone(), pool));
                    now
                }
            };
            next.insert(detail.clone(), Debris { detail, object, since });
        }
        self.debris = next;
        for (detail, object, pool) in added {
            let ours = match answers {
                Answers::Any => true,
                Answers::Pool(p) => pool.as_ref() == Some(p),
                Answers::Nothing => false,
            };
            // A pass that read the pool before the operator removed its anchor may still act on
            // that rotation for a moment (its writes re-check the claim, not the anchor); the
            // tick repairs what it leaves, which the grace holds it to.
            let unanchored = pool.as_ref().and_then(|p| world.operator_unanchored.get(p));
            let ours = ours && unanchored.is_none_or(|(_, t)| now - *t > self.tolerance);
            if ours && self.flagged.insert((I7.to_string(), detail.clone())) {
                self.fail(I7, now, format!("a clean pass left {detail}"), vec![object]);
            }
        }
    }

    /// I7: debris older than the grace was not repaired within a tick.
    fn aged_debris(&mut self, now: DateTime<Utc>) {
        let grace = self.debris_grace;
        let old: Vec<Debris> =
            self.debris.values().filter(|d| now - d.since > grace).cloned().collect();
        for d in old {
            if self.flagged.insert((I7.to_string(), d.detail.clone())) {
                self.fail(
                    I7,
                    now,
                    format!(
                        "{} for {} (repair within {})",
                        d.detail,
                        fmt(now - d.since),
                        fmt(grace)
                    ),
                    vec![d.object],
                );
            }
        }
    }

    /// I7 at rest: no debris at all.
    fn quiescence(&mut self, post: &CacheView, now: DateTime<Utc>, world: &World) {
        for (detail, obj, _) in self.debris_in(post, world) {
            if self.flagged.insert((I7.to_string(), detail.clone())) {
                self.fail(I7, now, detail, vec![obj]);
            }
        }
    }

    /// I10: a surge rotation escalates to draining only on the placeholder the controller
    /// created (a pod that appeared during one of its steps), never on a pod merely named like
    /// it.
    fn identity(&mut self, prev: &CacheView, post: &CacheView, d: &Diff, now: DateTime<Utc>) {
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
                    slot_annotation(&np.metadata, Key::RotationMode, slot)
                        == Some("forceful-fallback")
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
    /// raised) leaves no surge claim the world launched for its placeholder that is not Ready,
    /// unless §3.8 could not attribute it (another fresh claim of the pool not Ready, another
    /// slot of the pool still waiting for its surge, or `surge-claim` naming another host), its
    /// node holds pods, or it is too new for the controller's cache.
    fn surge_cost(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        world: &World,
        now: DateTime<Utc>,
    ) {
        use super::world::Phase;
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
            let recorded = annotation(&a.metadata, SURGE_CLAIM);
            let Some(pool) = world.claims.get(claim).map(|c| c.pool) else { continue };
            // As the controller may count them: its cache can still show a claim whose deletion
            // began, or that went, a moment ago.
            let tolerance = self.tolerance;
            let live = world
                .claims
                .values()
                .filter(|c| {
                    c.pool == pool
                        && c.created >= started
                        && c.phase < Phase::Ready
                        && c.deleting.is_none_or(|t| now - t <= tolerance)
                })
                .count();
            let gone = world
                .metrics
                .lifetimes
                .values()
                .filter(|l| {
                    l.pool == pool
                        && l.created >= started
                        && l.gone.is_some_and(|t| now - t <= tolerance)
                })
                .count();
            // ... or that turned Ready a moment ago as still not Ready.
            let just_ready = world
                .claims
                .iter()
                .filter(|(name, c)| {
                    c.pool == pool
                        && c.created >= started
                        && c.phase >= Phase::Ready
                        && post.claims.get(*name).is_some_and(|k| {
                            k.status.iter().flat_map(|s| s.conditions.iter()).any(|cond| {
                                cond.type_ == "Ready"
                                    && cond.last_transition_time.as_ref().is_some_and(|t| {
                                        now.timestamp() - t.0.as_second() <= tolerance.num_seconds()
                                    })
                            })
                        })
                })
                .count();
            let not_ready_fresh = live + gone + just_ready;
            // Another slot of the pool still waited for its own surge (pending, placeholder not
            // bound): a fresh claim that is not Ready cannot be attributed (§3.8), so none is
            // reaped.
            let pool_name = self.plan.pools.get(pool).map(|p| p.name.as_str()).unwrap_or("");
            let others_waiting = prev.pools.get(pool_name).is_some_and(|np| {
                anchors(np).values().any(|other| {
                    *other != claim.as_str()
                        && prev.claims.get(*other).is_some_and(|c| state_of(c) == Some("pending"))
                        && !prev.placeholders.values().any(|p| {
                            annotation(&p.metadata, SURGE_FOR) == Some(*other)
                                && placeholder_node(p).is_some()
                        })
                })
            });
            for (s, sc) in &world.claims {
                let launched = sc.phase >= Phase::Launched && sc.phase < Phase::Ready;
                if sc.surge_for.as_deref() != Some(claim.as_str())
                    || !launched
                    || sc.created < started
                {
                    continue;
                }
                let billed = post.claims.get(s).is_some_and(|c| !c.is_deleting());
                let excused = now - sc.created <= self.tolerance
                    || not_ready_fresh > 1
                    || (recorded.is_none() && others_waiting)
                    || recorded.is_some_and(|r| r != s)
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

    /// I7: an anchor whose claim is gone is released by the next clean pass.
    fn gone_anchor(&mut self, prev: &CacheView, post: &CacheView, step: &StepInfo<'_>) {
        let Some(pool) = step.pool else { return };
        let Some(name) = self.plan.pools.get(pool).map(|p| p.name.clone()) else { return };
        let after = post.pools.get(&name).map(|p| anchors(p)).unwrap_or_default();
        let before = prev.pools.get(&name).map(|p| anchors(p)).unwrap_or_default();
        for (slot, x) in before {
            if !prev.claims.contains_key(x) && after.get(&slot) == Some(&x) {
                self.fail(
                    I7,
                    step.now,
                    format!("pool {name} still anchored on {x}, gone before this clean pass"),
                    vec![x.to_string()],
                );
            }
        }
    }

    /// I8: every rotation finishes within readyTimeout + tGP + buffer (and slack for requeues).
    fn durations(&mut self, post: &CacheView, world: &World, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        let live: BTreeSet<(String, usize)> = post
            .pools
            .iter()
            .flat_map(|(pool, np)| anchors(np).into_keys().map(|slot| (pool.clone(), slot)))
            .collect();
        self.anchor_since.retain(|k, _| live.contains(k));
        for (pool, np) in &post.pools {
            for (slot, a) in anchors(np) {
                let key = (pool.clone(), slot);
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
        for (detail, claim) in bad {
            self.fail(I8, now, detail, vec![claim]);
        }
    }

    /// I8: no forced expiry of a claim that had its chances.
    fn expiries(&mut self, post: &CacheView, world: &World, now: DateTime<Utc>) {
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

fn fmt(d: Duration) -> String {
    crate::policy::duration::format_human(d)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::karpenter::{NodeClaim, NodeClaimStatus};

    fn meta(name: &str, pairs: &[(String, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            annotations: Some(pairs.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()),
            ..Default::default()
        }
    }

    /// A pool whose slots anchor the given claims.
    fn pool(name: &str, slots: &[(usize, &str)]) -> NodePool {
        let keys: Vec<(String, &str)> = slots
            .iter()
            .map(|(slot, c)| (crate::reconcile::slots::slot_key(Key::ActiveRotation, *slot), *c))
            .collect();
        NodePool { metadata: meta(name, &keys), ..Default::default() }
    }

    /// Two slots of `api` in flight: c1 (on node n1) surged onto s1, c2 (on n2) onto s2; the
    /// old node n1 carries nothing, n2 keeps a stale `surge-for` of its own claim.
    fn two_slots() -> CacheView {
        let mut view = CacheView::default();
        view.pools.insert("api".into(), Arc::new(pool("api", &[(0, "c1"), (1, "c2")])));
        for (claim, node) in [("c1", "n1"), ("c2", "n2")] {
            let status = NodeClaimStatus { node_name: Some(node.into()), ..Default::default() };
            let c = NodeClaim {
                metadata: meta(claim, &[]),
                status: Some(status),
                ..Default::default()
            };
            view.claims.insert(claim.into(), Arc::new(c));
        }
        for (node, surge_for) in
            [("n1", None), ("n2", Some("c2")), ("s1", Some("c1")), ("s2", Some("c2"))]
        {
            let pairs: Vec<(String, &str)> =
                surge_for.map(|c| (SURGE_FOR.to_string(), c)).into_iter().collect();
            view.nodes.insert(
                node.into(),
                Arc::new(Node { metadata: meta(node, &pairs), ..Default::default() }),
            );
        }
        view
    }

    #[test]
    fn two_rotations_in_two_lanes_hold() {
        let view = two_slots();
        let np = &view.pools["api"];
        let before = pool("api", &[(0, "c1")]);
        assert_eq!(lane_breach("api", Some(&before), np, 2), None);
        assert_eq!(surge_breach(&view, "api", np, || 2), None, "the old node is not a surge node");
        assert!(shared_claims(&view).is_empty());
    }

    #[test]
    fn a_claim_in_two_slots_is_one_rotation_too_many() {
        let mut view = two_slots();
        view.pools.insert("api".into(), Arc::new(pool("api", &[(0, "c1"), (2, "c1"), (1, "c3")])));
        view.pools.insert("web".into(), Arc::new(pool("web", &[(1, "c3")])));
        let shared = shared_claims(&view);
        assert_eq!(
            shared,
            vec![
                ("c1".to_string(), vec!["api slot 0".to_string(), "api slot 2".to_string()]),
                ("c3".to_string(), vec!["api slot 1".to_string(), "web slot 1".to_string()]),
            ]
        );
    }

    #[test]
    fn a_start_past_the_lanes_breaks_i12_and_extra_surge_nodes_break_i13() {
        let view = two_slots();
        let np = &view.pools["api"];
        let before = pool("api", &[(0, "c1")]);
        let detail = lane_breach("api", Some(&before), np, 1).expect("the second start is over N");
        assert!(detail.contains("started c2 with 2 rotations in flight"), "{detail}");
        // Rotations started under a larger N may finish: no start, no breach.
        assert_eq!(lane_breach("api", Some(np), np, 1), None);
        let replaced = pool("api", &[(0, "c1"), (1, "c4")]);
        assert!(lane_breach("api", Some(np), &replaced, 1).is_some(), "a slot re-anchored");
        // One rotation in flight with two surge nodes, in one lane.
        let mut one = two_slots();
        one.pools.insert("api".into(), Arc::new(pool("api", &[(0, "c1")])));
        let extra =
            Node { metadata: meta("s3", &[(SURGE_FOR.to_string(), "c1")]), ..Default::default() };
        one.nodes.insert("s3".into(), Arc::new(extra));
        let detail = surge_breach(&one, "api", &one.pools["api"], || 1).expect("two surge nodes");
        assert!(detail.contains("2 surge nodes (s1, s3)"), "{detail}");
        assert_eq!(surge_breach(&one, "api", &one.pools["api"], || 2), None);
    }
}
