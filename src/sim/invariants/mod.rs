//! The simulation's invariants (I1–I22), each a named check over one step:
//! the store before and after it, what the controller announced during it, and what the world
//! knows (which pods run where, which claims ever existed). Safety checks run after every step;
//! the quiescence and liveness checks run where their premise holds (no faults, or the calm
//! phase after the faults are switched off). A pool may have several rotations in flight, one per
//! slot (`reconcile::slots`): every check that reads an anchor reads every slot's.
//!
//! The checks live by the promise family they hold: `budget` (I1, I12–I15, I18: rotations,
//! lanes and the disruption budget), `capacity` (I9–I11, I16, I17, I20: capacity first),
//! `ownership` (I3, I5, I6, I19: only what is ours is touched), `announcements` (I4),
//! `leftovers` (I7: nothing left behind), `windows` (I2, I8: the start gates and liveness) and
//! `isolation` (I21: one slot's failure is not the pool's); this file holds the names, what a
//! step and a violation are, and the checker's bookkeeping, which runs them (I22 included).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::actors::{CLAIM_STATE, anchors, annotation};
use super::driver::CallRecord;
use super::gov::{self, Gov};
use super::observe::Diff;
use super::scenario::Compiled;
use super::trace::Entry;
use super::world::World;
use crate::cluster::CacheView;
use crate::engine::Key;
use crate::karpenter::NodePool;
use leftovers::{Answers, DEBRIS_GRACE, DEBRIS_GRACE_FAULTS, Debris};

mod announcements;
mod budget;
mod capacity;
mod isolation;
mod leftovers;
mod ownership;
mod windows;

/// Each anchor (of every slot) names a claim of its own pool.
pub(crate) const I1: &str = "I1 one-anchor-per-pool";
pub(crate) const I2: &str = "I2 start-gates";
/// With no rotation in flight, the controller deletes no claim but a surge claim (I19).
pub(crate) const I3: &str = "I3 delete-only-the-anchored-candidate";
pub(crate) const I4: &str = "I4 announce-at-most-once";
pub(crate) const I5: &str = "I5 foreign-protection-untouched";
/// A reaped claim's node hosts nothing but DaemonSet pods and the placeholders of the rotations
/// Karpenter launched it for (its attribution is I19's, which replaced I6's "created after some
/// rotation's started-at").
pub(crate) const I6: &str = "I6 reap-guard";
pub(crate) const I7: &str = "I7 quiescence";
pub(crate) const I8: &str = "I8 liveness";
/// Not in the guide's list: the surge path a rotation reports is observed, never guessed.
pub(crate) const I9: &str = "I9 surge-path-recorded";
/// Not in the guide's list: a surge rotation drains the old node only on the placeholder the
/// controller created, never on a pod merely named like it.
pub(crate) const I10: &str = "I10 placeholder-identity";
/// Not in the guide's list: the cost bound of §4.4, a failed surge bills one node for
/// at most readyTimeout: the rollback reaps the claims Karpenter launched for its placeholder
/// that never turned Ready (I20 holds every other exit, and what a rollback could not see yet).
pub(crate) const I11: &str = "I11 failed-surge-cost";
/// Not in the guide's list: a pool starts a rotation only while fewer than `lanes(np)`
/// (`spec.surge.maxUnavailable`) are in flight. Rotations started under a larger N may finish,
/// so only a start is held to it.
pub(crate) const I12: &str = "I12 lanes-in-flight";
/// Not in the guide's list: a pool's rotations hold at most `lanes(np)` surge nodes at once
/// (nodes whose `surge-for` names one of its anchors, the old node and a former host whose
/// placeholder moved to the slot's recorded `surge-host` excepted), or as many as rotations
/// are in flight when more were started under a larger N.
pub(crate) const I13: &str = "I13 surge-nodes-per-lane";
/// Not in the guide's list: no claim is in two rotations: no two slots, of one pool or of
/// two, anchor the same claim at one instant.
pub(crate) const I14: &str = "I14 one-rotation-per-claim";
/// Not in the guide's list: no node is the surge host of two rotations at once: no two anchored
/// slots of a pool record the same `surge-host`. A host reserves one old node's worth; a second
/// rotation draining onto it leaves pods without room (a drain paced by a PDB leaves the host
/// empty for a while, so a new placeholder fits there).
pub(crate) const I15: &str = "I15 one-rotation-per-surge-host";
/// The product's promise "capacity first" for rotations in flight: while a rotation drains onto
/// a node (the surge host its slot records, or any node frozen for it other than its own old
/// node), the controller never cordons that node, never freezes it for another rotation or
/// strips the rotation's `surge-for` and `do-not-disrupt` from it, and never deletes its claim,
/// until the old claim is gone. A rotation escalates only onto a host already frozen for it.
pub(crate) const I16: &str = "I16 landing-node-kept";
/// The product's promise "capacity first": the controller deletes an old claim without a Ready
/// surge host frozen for it only when the governing policy enables the forceful fallback and
/// the claim is inside it (`deadline - now < t_rot`) at that instant; a `ForcefulFallback` Event
/// is announced only for such a delete.
pub(crate) const I17: &str = "I17 surge-less-delete-only-by-policy";
/// The product's promise "never more disruption than the budget", counted on what is really
/// disrupted: the claims of a pool marked `state=draining` (being deleted, or about to be) and
/// those carrying our `state` that a rotation deleted and that are not gone yet (marked failed
/// while they drain), whatever happened to the anchors (removed by hand, the pool replaced). A
/// controller step that disrupts one more leaves at most `maxUnavailable` of them (rotations
/// started under a larger N may finish).
pub(crate) const I18: &str = "I18 budget-counts-draining-claims";
/// Not in the guide's list: a claim the controller deletes that is not an anchored candidate
/// was launched by Karpenter for one of the controller's placeholders (or nominated to one),
/// never for other pods (a scale-up, a drift or consolidation replacement, the pods another
/// slot's drain evicted).
pub(crate) const I19: &str = "I19 reaped-claim-launched-for-our-placeholder";
/// Not in the guide's list: a claim Karpenter launched for a placeholder is gone, or Ready
/// capacity, within readyTimeout plus [`I20_GRACE`] after the last rotation it served ended,
/// whatever the exit (success, rollback, expiry or interruption while pending, the old claim
/// gone, governance lost, the sweep). Checked with Karpenter's node repair off.
pub(crate) const I20: &str = "I20 no-surge-claim-outlives-its-rotation";
/// I20's slack past readyTimeout: the tick that runs the sweep, and under faults a crash and
/// restart, a leader change or a sweep skipped for an anchor it could not read.
pub(crate) const I20_GRACE: Duration = Duration::minutes(5);
/// Not in the guide's list: one slot's failure is not the pool's. A persistent error in one
/// rotation's slot (an admission webhook, a ResourceQuota or a LimitRange rejecting its
/// placeholder, a pod list that times out) never holds back another rotation's completion,
/// rollback or escalation, nor the pool's next start beyond what the start gates say: a pass
/// over a pool that sees the store as it is and meets no injected fault does what is due for
/// every rotation of the pool, and starts one when a lane is free, the gates are open and a
/// claim is due, whatever another slot's run met.
pub(crate) const I21: &str = "I21 one-slot's-failure-is-not-the-pool's";
/// Not in the guide's list: one leader writes at a time. Once an instance holds the Lease, no
/// write of the instance it took the Lease from lands: the deposed leader's write fence closed
/// before the Lease could change hands, whatever the two replicas' clocks said.
pub(crate) const I22: &str = "I22 one-leader-writes";
/// The invariants the simulation checks, for the summary line.
pub(crate) const ALL: &str = "I1-I22";
/// Every invariant, in order: [`ALL`] names their range, and a test holds the two (and the
/// documents that cite the range) together.
#[cfg(test)]
pub(crate) const INVARIANTS: &[&str] = &[
    I1, I2, I3, I4, I5, I6, I7, I8, I9, I10, I11, I12, I13, I14, I15, I16, I17, I18, I19, I20, I21,
    I22,
];

const LAST_FAILURE_AT: &str = Key::LastFailureAt.full();
const RETRY_COUNT: &str = Key::RetryCount.full();

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
pub(crate) struct Announced {
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
pub(crate) struct StepInfo<'a> {
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

pub(crate) struct Checker {
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
    /// I7: the nodes' part of the last debris found and the draining claims it was found with,
    /// while no node and no pool changed since ([`leftovers::NodeDebris`]).
    node_debris: Option<leftovers::NodeDebris>,
    /// The claims' part of I7, kept from the last step ([`leftovers::ClaimMarks`]).
    claim_marks: Option<leftovers::ClaimMarks>,
    /// Each pool's anchors and I1's findings of the last step (`None` before the first); I8
    /// and I13 read the anchors.
    pool_anchors: Option<BTreeMap<String, budget::PoolAnchors>>,
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

fn state_of(c: &crate::karpenter::NodeClaim) -> Option<&str> {
    annotation(&c.metadata, CLAIM_STATE)
}

impl Checker {
    pub(crate) fn new(
        plan: Arc<Compiled>,
        faults: bool,
        lag: Duration,
        start: &CacheView,
    ) -> Checker {
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
            node_debris: None,
            claim_marks: None,
            pool_anchors: None,
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
    pub(crate) fn fenced_writes(&mut self, now: DateTime<Utc>, actor: &str, stale: &[CallRecord]) {
        for w in stale {
            let detail = format!(
                "{actor}: {:?} {} (client {}) landed after the other instance had taken the Lease",
                w.verb, w.target, w.client
            );
            self.fail(I22, now, detail, vec![w.target.clone()]);
        }
    }

    /// Checks one step.
    pub(crate) fn check(
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
        self.anchors(post, d, now);
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
            self.track_debris(post, d, now, world, &answers);
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

    /// The end of the calm phase: quiescence over the whole store.
    pub(crate) fn final_check(&mut self, post: &CacheView, now: DateTime<Utc>, world: &World) {
        self.quiescence(post, now, world);
    }
}

fn fmt(d: Duration) -> String {
    crate::policy::duration::format_human(d)
}

#[cfg(test)]
mod tests {
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
}
