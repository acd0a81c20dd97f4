//! The simulation's invariants (I1–I22), each a named check over one step:
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
/// With no rotation in flight, the controller deletes no claim but a surge claim (I19).
pub const I3: &str = "I3 delete-only-the-anchored-candidate";
pub const I4: &str = "I4 announce-at-most-once";
pub const I5: &str = "I5 foreign-protection-untouched";
/// A reaped claim's node hosts nothing but DaemonSet pods and the placeholders of the rotations
/// Karpenter launched it for (its attribution is I19's, which replaced I6's "created after some
/// rotation's started-at").
pub const I6: &str = "I6 reap-guard";
pub const I7: &str = "I7 quiescence";
pub const I8: &str = "I8 liveness";
/// Not in the guide's list: the surge path a rotation reports is observed, never guessed.
pub const I9: &str = "I9 surge-path-recorded";
/// Not in the guide's list: a surge rotation drains the old node only on the placeholder the
/// controller created, never on a pod merely named like it.
pub const I10: &str = "I10 placeholder-identity";
/// Not in the guide's list: the cost bound of §4.4, a failed surge bills one node for
/// at most readyTimeout: the rollback reaps the claims Karpenter launched for its placeholder
/// that never turned Ready (I20 holds every other exit, and what a rollback could not see yet).
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
/// The product's promise "capacity first" for rotations in flight: while a rotation drains onto
/// a node (the surge host its slot records, or any node frozen for it other than its own old
/// node), the controller never cordons that node, never freezes it for another rotation or
/// strips the rotation's `surge-for` and `do-not-disrupt` from it, and never deletes its claim,
/// until the old claim is gone. A rotation escalates only onto a host already frozen for it.
pub const I16: &str = "I16 landing-node-kept";
/// The product's promise "capacity first": the controller deletes an old claim without a Ready
/// surge host frozen for it only when the governing policy enables the forceful fallback and
/// the claim is inside it (`deadline - now < t_rot`) at that instant; a `ForcefulFallback` Event
/// is announced only for such a delete.
pub const I17: &str = "I17 surge-less-delete-only-by-policy";
/// The product's promise "never more disruption than the budget", counted on what is really
/// disrupted: the claims of a pool marked `state=draining` (being deleted, or about to be) and
/// those carrying our `state` that a rotation deleted and that are not gone yet (marked failed
/// while they drain), whatever happened to the anchors (removed by hand, the pool replaced). A
/// controller step that disrupts one more leaves at most `maxUnavailable` of them (rotations
/// started under a larger N may finish).
pub const I18: &str = "I18 budget-counts-draining-claims";
/// Not in the guide's list: a claim the controller deletes that is not an anchored candidate
/// was launched by Karpenter for one of the controller's placeholders (or nominated to one),
/// never for other pods (a scale-up, a drift or consolidation replacement, the pods another
/// slot's drain evicted).
pub const I19: &str = "I19 reaped-claim-launched-for-our-placeholder";
/// Not in the guide's list: a claim Karpenter launched for a placeholder is gone, or Ready
/// capacity, within readyTimeout plus [`I20_GRACE`] after the last rotation it served ended,
/// whatever the exit (success, rollback, expiry or interruption while pending, the old claim
/// gone, governance lost, the sweep). Checked with Karpenter's node repair off.
pub const I20: &str = "I20 no-surge-claim-outlives-its-rotation";
/// I20's slack past readyTimeout: the tick that runs the sweep, and under faults a crash and
/// restart, a leader change or a sweep skipped for an anchor it could not read.
pub const I20_GRACE: Duration = Duration::minutes(5);
/// Not in the guide's list: one slot's failure is not the pool's. A persistent error in one
/// rotation's slot (an admission webhook, a ResourceQuota or a LimitRange rejecting its
/// placeholder, a pod list that times out) never holds back another rotation's completion,
/// rollback or escalation, nor the pool's next start beyond what the start gates say: a pass
/// over a pool that sees the store as it is and meets no injected fault does what is due for
/// every rotation of the pool, and starts one when a lane is free, the gates are open and a
/// claim is due, whatever another slot's run met.
pub const I21: &str = "I21 one-slot's-failure-is-not-the-pool's";
/// Not in the guide's list: one leader writes at a time. Once an instance holds the Lease, no
/// write of the instance it took the Lease from lands: the deposed leader's write fence closed
/// before the Lease could change hands, whatever the two replicas' clocks said.
pub const I22: &str = "I22 one-leader-writes";
/// The invariants the simulation checks, for the summary line.
pub const ALL: &str = "I1-I22";
/// Every invariant, in order: [`ALL`] names their range, and a test holds the two (and the
/// documents that cite the range) together.
pub const INVARIANTS: &[&str] = &[
    I1, I2, I3, I4, I5, I6, I7, I8, I9, I10, I11, I12, I13, I14, I15, I16, I17, I18, I19, I20, I21,
    I22,
];

const LAST_FAILURE_AT: &str = Key::LastFailureAt.full();
const RETRY_COUNT: &str = Key::RetryCount.full();

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
    /// The `ForcefulFallback` Events announced during the step: their pool and claim.
    pub forceful_events: &'a [(String, Option<String>)],
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
    /// I20: per claim launched for a placeholder and not Ready, the last instant a rotation it
    /// served was in flight (or when it was first seen), and that rotation's readyTimeout.
    surge_in_use: BTreeMap<String, (DateTime<Utc>, Duration)>,
    expiries_seen: usize,
    /// leadTime per pool at the start, for invariant 8.
    lead: BTreeMap<String, Option<Duration>>,
    /// Claims of the starting fleet one rotation at a time cannot reach in time (their
    /// deadlines start out crowded), for invariant 8.
    unreachable: BTreeSet<String>,
    gov: Gov,
    /// I17: claims marked draining as a forceful fallback their policy allowed, by pool, whose
    /// `ForcefulFallback` Event has not been seen yet (a stalled pass announces in a later step
    /// than its write).
    forceful_marks: BTreeMap<String, BTreeSet<String>>,
    /// I18: claims carrying our `state` whose delete a controller step sent, until they are gone.
    our_deletes: BTreeSet<String>,
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

/// A slot's `rotation-mode` that marks a rotation without a surge: the forceful fallback, or a
/// node with nothing to reserve.
fn surge_less(mode: Option<&str>) -> bool {
    matches!(mode, Some("forceful-fallback" | "nothing-to-reserve"))
}

fn state_of(c: &crate::karpenter::NodeClaim) -> Option<&str> {
    annotation(&c.metadata, CLAIM_STATE)
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
            surge_in_use: BTreeMap::new(),
            expiries_seen: 0,
            lead,
            unreachable,
            gov,
            forceful_marks: BTreeMap::new(),
            our_deletes: BTreeSet::new(),
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
            self.landing_nodes(prev, post, d, step, world);
            self.surge_less_deletes(prev, post, d, step, world);
            self.budget(post, d, step);
            self.protections(d, now);
            self.identity(prev, post, d, now);
            if !step.zombie {
                self.surge_cost(prev, post, d, world, now);
            }
        }
        self.announcements(prev, post, d, announced, now);
        self.surge_lifetimes(post, world, now);
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
        // Whether or not the pass reported an error: one slot's error excuses no other's work.
        if step.controller && !step.faulted && step.exact && !step.zombie {
            self.slots_isolated(prev, post, step, world);
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

    /// I3, I19 and I6: the controller deletes only its anchored candidate, or reaps a claim
    /// Karpenter launched for (or nominated to) one of its placeholders (I19; with no rotation
    /// in flight and no such record, I3), whose node hosts nothing but DaemonSet pods and the
    /// placeholders of the rotations it was launched for (I6). Which rotation reaped it is not
    /// observable (several can roll back in one pass, and the sweep reaps after a rotation
    /// ended), so the claim's own record is what it is held to.
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
            let launched_for: BTreeSet<String> =
                world.claims.get(name).map(|c| c.placeholders_for.clone()).unwrap_or_default();
            if launched_for.is_empty() {
                let in_flight = !anchor_pre.is_empty() || unanchored.is_some();
                let (invariant, detail) = if in_flight {
                    (
                        I19,
                        format!(
                            "{} reaped claim {name} of pool {pool}, which Karpenter launched for other pods: no placeholder of ours was ever nominated to it",
                            step.actor
                        ),
                    )
                } else {
                    (
                        I3,
                        format!(
                            "{} deleted claim {name} of pool {pool}, which has no anchored rotation",
                            step.actor
                        ),
                    )
                };
                self.fail(invariant, now, detail, vec![name.clone()]);
                continue;
            }
            let node = world.claims.get(name).map(|c| c.node.clone()).unwrap_or_default();
            let mut foreign: Vec<String> = world
                .node_pods
                .get(&node)
                .into_iter()
                .flatten()
                .filter(|k| world.pods.get(*k).is_some_and(|p| !p.daemonset))
                .map(|k| k.1.clone())
                .collect();
            foreign.extend(
                prev.placeholders
                    .iter()
                    .filter(|(_, p)| placeholder_node(p) == Some(node.as_str()))
                    .filter(|(_, p)| {
                        annotation(&p.metadata, SURGE_FOR).is_none_or(|r| !launched_for.contains(r))
                    })
                    .map(|(n, _)| n.clone()),
            );
            if !foreign.is_empty() {
                self.fail(
                    I6,
                    now,
                    format!(
                        "{} reaped claim {name} (launched for {}) while its node {node} hosts {}",
                        step.actor,
                        launched_for.iter().cloned().collect::<Vec<_>>().join(", "),
                        foreign.join(", ")
                    ),
                    vec![name.clone()],
                );
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
    /// without the anchor that references it (or a claim still draining), and a claim left `pending` (or `draining` with no
    /// delete issued) without its pool's anchor, which nothing would ever pick again.
    fn debris_in(&self, post: &CacheView, world: &World) -> Vec<(String, String, Option<String>)> {
        // Legitimate when any slot of the pool anchors what it serves.
        let anchors_of: BTreeMap<&str, BTreeSet<String>> =
            post.pools.iter().map(|(n, p)| (n.as_str(), anchored(Some(p)))).collect();
        let none = BTreeSet::new();
        let anchor = |pool: &str| anchors_of.get(pool).unwrap_or(&none);
        // A claim marked draining whose delete is under way drains on without its anchor (lost by
        // hand, the pool replaced, governance lost): its node markers are live until it is gone.
        let draining: BTreeSet<&str> = post
            .claims
            .iter()
            .filter(|(_, c)| c.is_deleting() && state_of(c) == Some("draining"))
            .map(|(n, _)| n.as_str())
            .collect();
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
                && !draining.contains(s)
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
                let refers =
                    |c: Option<&str>| c.is_some_and(|c| a.contains(c) || draining.contains(c));
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
    fn landing_nodes(
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
    fn surge_less_deletes(
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
        if crate::policy::derive::forceful_fallback_due(true, deadline, s.t_rot(tgp), now) {
            Ok(())
        } else {
            Err(format!(
                "the claim is not inside the fallback (deadline {deadline:?}, t_rot {})",
                fmt(s.t_rot(tgp))
            ))
        }
    }

    /// I18 over a controller step that marked a claim `draining` or deleted one carrying our
    /// `state`: its pool then has at most `lanes` claims really disrupted by rotations, those
    /// marked draining and those carrying our `state` whose delete a controller step sent (a
    /// claim marked failed while it still drains is still disrupted).
    fn budget(&mut self, post: &CacheView, d: &Diff, step: &StepInfo<'_>) {
        let mut pools = BTreeSet::new();
        for (name, a, b) in &d.claims {
            let was = a.as_deref().and_then(state_of);
            let is = b.as_deref().and_then(state_of);
            if is == Some("draining") && was != Some("draining") {
                pools.extend(self.claim_pool.get(name).cloned());
            }
            let deleted = a.as_ref().is_some_and(|a| !a.is_deleting())
                && b.as_ref().is_none_or(|b| b.is_deleting());
            if deleted && was.is_some() {
                self.our_deletes.insert(name.clone());
                pools.extend(self.claim_pool.get(name).cloned());
            }
        }
        self.our_deletes.retain(|c| post.claims.contains_key(c));
        for pool in pools {
            let Some(np) = post.pools.get(&pool) else { continue };
            let Some(settings) = self.gov.of(post, np).settings().cloned() else { continue };
            let lanes = gov::lanes(&settings, post, &pool);
            let disrupted = self.disrupted_in(post, &pool);
            if disrupted.len() > lanes {
                let detail = format!(
                    "{} left {} claims of pool {pool} draining or being deleted ({}), over its maxUnavailable {lanes}",
                    step.actor,
                    disrupted.len(),
                    disrupted.iter().cloned().collect::<Vec<_>>().join(", ")
                );
                self.fail(I18, step.now, detail, vec![pool]);
            }
        }
    }

    /// I20: a claim Karpenter launched for a placeholder that is neither
    /// Ready nor being deleted, more than readyTimeout + [`I20_GRACE`] after the last rotation it
    /// served stopped being in flight (its anchor released, or its claim failed or expired).
    fn surge_lifetimes(&mut self, post: &CacheView, world: &World, now: DateTime<Utc>) {
        let default_timeout = Duration::minutes(15);
        self.surge_in_use.retain(|c, _| world.surge_launched.contains(c));
        let mut bad = Vec::new();
        for name in &world.surge_launched {
            let Some(sc) = world.claims.get(name) else { continue };
            let np = post.pools.get(world.pool_name(sc.pool));
            let in_flight = np.is_some_and(|np| {
                let rotations = anchors(np);
                sc.placeholders_for.iter().any(|r| {
                    rotations.values().any(|a| a == r)
                        && post
                            .claims
                            .get(r)
                            .is_none_or(|c| !matches!(state_of(c), Some("failed" | "expired")))
                })
            });
            let ready_timeout =
                np.and_then(|np| self.gov.of(post, np).settings().map(|s| s.ready_timeout));
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

    /// I18: the claims of `pool` in `view` marked `state=draining`, or carrying our `state` and
    /// being deleted by a rotation.
    fn disrupted_in(&self, view: &CacheView, pool: &str) -> BTreeSet<String> {
        view.claims
            .iter()
            .filter(|(n, c)| {
                c.node_pool() == Some(pool)
                    && (state_of(c) == Some("draining")
                        || (state_of(c).is_some() && self.our_deletes.contains(*n)))
            })
            .map(|(n, _)| n.clone())
            .collect()
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

    /// I21 over one exact pass without injected faults: for every rotation of its pool, what is
    /// due (the completion of a rotation whose claim is gone, the rollback of one past
    /// readyTimeout, the escalation of one whose own placeholder is ready on a host of its own),
    /// and the pool's next start (a free lane, the start gates open, a claim due), is done by
    /// the pass, whatever another slot's run met.
    fn slots_isolated(
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::karpenter::{NodeClaim, NodeClaimStatus};

    /// `I<n>` names the n-th invariant, `ALL` their whole range, and every document that cites
    /// the range cites this one: adding an invariant fails here until they say so.
    #[test]
    fn the_invariant_range_is_the_list_and_the_documents_cite_it() {
        for (i, name) in super::INVARIANTS.iter().enumerate() {
            assert!(name.starts_with(&format!("I{} ", i + 1)), "{name} is not I{}", i + 1);
        }
        assert_eq!(super::ALL, format!("I1-I{}", super::INVARIANTS.len()));
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for doc in ["docs/safety.md", "tests/all.sh", "deploy/examples/scenarios/README.md"] {
            let text = std::fs::read_to_string(root.join(doc)).expect(doc);
            assert!(text.contains(super::ALL), "{doc} does not cite {}", super::ALL);
        }
        let module = std::fs::read_to_string(root.join("src/sim/mod.rs")).expect("sim/mod.rs");
        assert!(module.contains(&super::ALL.replace('-', "–")), "src/sim/mod.rs");
    }

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
