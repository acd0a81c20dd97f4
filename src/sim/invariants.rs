//! The simulation's invariants (I1–I11), each a named check over one step:
//! the store before and after it, what the controller announced during it, and what the world
//! knows (which pods run where, which claims ever existed). Safety checks run after every step;
//! the quiescence and liveness checks run where their premise holds (no faults, or the calm
//! phase after the faults are switched off).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::actors::{
    ACTIVE_ROTATION, CLAIM_STATE, CORDONED_MARKER, DO_NOT_DISRUPT, FREEZE_ANNOTATION, OWNED_MARKER,
    STARTED_AT, SURGE_FOR, annotation, placeholder_node,
};
use super::gov::{self, Gov, Governed};
use super::observe::{Diff, unschedulable};
use super::scenario::Compiled;
use super::trace::Entry;
use super::world::{BUFFER, World};
use crate::cluster::CacheView;
use crate::karpenter::NodePool;
use crate::policy::chances;
use crate::policy::settings::AgeThreshold;

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

const LAST_ROTATION_AT: &str = "noderotation.io/last-rotation-at";
const LAST_FAILURE_AT: &str = "noderotation.io/last-failure-at";
const ROTATION_STATE: &str = "noderotation.io/active-rotation-state";
const ROTATION_MODE: &str = "noderotation.io/rotation-mode";
const SURGE_PATH: &str = "noderotation.io/surge-path";
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
    anchor_since: BTreeMap<String, (String, DateTime<Utc>, Option<Duration>)>,
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

fn anchor_of(np: &NodePool) -> Option<&str> {
    annotation(&np.metadata, ACTIVE_ROTATION)
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
        if step.controller && step.ok && !step.faulted && step.exact {
            self.gone_anchor(prev, post, step);
        }
        if self.liveness || calm {
            self.durations(post, world, now);
        }
        if self.liveness {
            self.expiries(post, world, now);
        }
    }

    /// I1: the anchor names a claim of its own pool.
    fn anchors(&mut self, post: &CacheView, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        let mut named: BTreeMap<&str, &str> = BTreeMap::new();
        for (pool, np) in &post.pools {
            let Some(a) = anchor_of(np) else { continue };
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
            if let Some(other) = named.insert(a, pool) {
                bad.push((
                    format!("claim {a} is anchored by pools {other} and {pool}"),
                    a.to_string(),
                ));
            }
        }
        for (detail, claim) in bad {
            self.fail(I1, now, detail, vec![claim]);
        }
    }

    /// I9: a surge rotation that reached draining says how its capacity came about: the mirror
    /// and `surge-path` are one write, and the path is known (`provisioned` or `absorbed`).
    fn surge_paths(&mut self, d: &Diff, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        for (pool, _, np) in &d.pools {
            let Some(np) = np else { continue };
            let m = &np.metadata;
            let surge_draining = annotation(m, ROTATION_STATE) == Some("draining")
                && annotation(m, ROTATION_MODE) != Some("forceful-fallback");
            let path = annotation(m, SURGE_PATH);
            if surge_draining && !matches!(path, Some("provisioned" | "absorbed")) {
                let claim = anchor_of(np).unwrap_or_default().to_string();
                if self.flagged.insert((I9.to_string(), claim.clone())) {
                    bad.push((
                        format!("pool {pool} drains {claim} with surge-path {path:?}"),
                        claim,
                    ));
                }
            }
        }
        for (detail, claim) in bad {
            self.fail(I9, now, detail, vec![claim]);
        }
    }

    /// Why a start at `now` in `pool` (judged on the store before the step) breaks a gate.
    fn gate_broken(
        &mut self,
        prev: &CacheView,
        pool: &str,
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
        if let Some(t) = annotation(&np.metadata, LAST_ROTATION_AT) {
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
        let mut started: Vec<(String, String, &'static str)> = Vec::new();
        for (pool, a, b) in &d.pools {
            let pa = a.as_deref().and_then(anchor_of);
            let qa = b.as_deref().and_then(anchor_of);
            if let Some(y) = qa
                && pa != qa
            {
                started.push((pool.clone(), y.to_string(), "anchored"));
            }
        }
        for (claim, a, b) in &d.claims {
            let was = a.as_deref().and_then(state_of);
            let is = b.as_deref().and_then(state_of);
            if was == Some("failed")
                && is == Some("pending")
                && let Some(pool) = self.claim_pool.get(claim)
            {
                started.push((pool.clone(), claim.clone(), "retried (failed -> pending)"));
            }
        }
        for (pool, claim, how) in started {
            if let Some(why) = self.gate_broken(prev, &pool, now, world) {
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
            let anchor_pre = prev.pools.get(&pool).and_then(|p| anchor_of(p).map(str::to_string));
            let anchor_post = post.pools.get(&pool).and_then(|p| anchor_of(p).map(str::to_string));
            // An anchor the operator removed a moment ago: a pass that read the pool before the
            // edit still drives that rotation (its writes re-check the claim, not the anchor).
            let unanchored = world
                .operator_unanchored
                .get(&pool)
                .filter(|(_, t)| now - *t <= self.tolerance)
                .map(|(c, _)| c.clone());
            if anchor_pre.as_deref() == Some(name.as_str())
                || anchor_post.as_deref() == Some(name.as_str())
                || unanchored.as_deref() == Some(name.as_str())
            {
                continue;
            }
            // Not the candidate: only a §3.8 reap may delete it.
            let Some(cand) = anchor_pre.clone().or(unanchored) else {
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
            };
            let started = prev
                .claims
                .get(&cand)
                .and_then(|c| annotation(&c.metadata, STARTED_AT))
                .and_then(parse_time);
            let created = a.created();
            let fresh = matches!((created, started), (Some(c), Some(s)) if c >= s);
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
                    .filter(|(_, p)| annotation(&p.metadata, SURGE_FOR) != Some(cand.as_str()))
                    .map(|(n, _)| n.clone()),
            );
            if !fresh {
                self.fail(
                    I6,
                    now,
                    format!(
                        "{} reaped claim {name} (created {}) for the rotation of {cand} (started-at {}): not created after started-at",
                        step.actor,
                        created.map_or("?".into(), |t| t.to_rfc3339()),
                        started.map_or("absent".into(), |t| t.to_rfc3339()),
                    ),
                    vec![name.clone(), cand.clone()],
                );
            } else if !foreign.is_empty() {
                self.fail(
                    I6,
                    now,
                    format!(
                        "{} reaped claim {name} for the rotation of {cand} while its node {node} hosts {}",
                        step.actor,
                        foreign.join(", ")
                    ),
                    vec![name.clone(), cand.clone()],
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
            let pa = a.as_deref().and_then(anchor_of).map(str::to_string);
            let qa = b.as_deref().and_then(anchor_of).map(str::to_string);
            if let Some(b) = b
                && annotation(&b.metadata, ROTATION_STATE) == Some("draining")
                && let Some(q) = &qa
            {
                self.reached_draining.insert(q.clone());
            }
            let Some(x) = pa else { continue };
            if qa.as_deref() == Some(x.as_str()) {
                continue;
            }
            released.insert(pool.clone(), x.clone());
            let last = |p: &Option<Arc<NodePool>>| {
                p.as_ref()
                    .and_then(|p| annotation(&p.metadata, LAST_ROTATION_AT).map(str::to_string))
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
        let anchor = |pool: &str| post.pools.get(pool).and_then(|p| anchor_of(p));
        let mut bad = Vec::new();
        for (name, ph) in &post.placeholders {
            let target = annotation(&ph.metadata, SURGE_FOR);
            let pool = target.and_then(|c| self.claim_pool.get(c));
            let ok = matches!((target, pool), (Some(c), Some(p)) if anchor(p) == Some(c));
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
            let a = pool.and_then(|p| anchor(p));
            let surge_for = annotation(&node.metadata, SURGE_FOR);
            if let Some(s) = surge_for
                && a != Some(s)
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
                if a.is_none() || (a != claim && a != surge_for) {
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
            if stranded && pool.and_then(|p| anchor(p)) != Some(name.as_str()) {
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
            let forceful =
                pool.and_then(|p| post.pools.get(p).or_else(|| prev.pools.get(p))).is_some_and(
                    |np| annotation(&np.metadata, ROTATION_MODE) == Some("forceful-fallback"),
                );
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
    /// unless §3.8 could not attribute it (another fresh claim of the pool not Ready, or
    /// `surge-claim` naming another host), its node holds pods, or it is too new for the
    /// controller's cache.
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
        let pa = prev.pools.get(&name).and_then(|p| anchor_of(p).map(str::to_string));
        let qa = post.pools.get(&name).and_then(|p| anchor_of(p).map(str::to_string));
        if let Some(x) = pa
            && !prev.claims.contains_key(&x)
            && qa.as_deref() == Some(x.as_str())
        {
            self.fail(
                I7,
                step.now,
                format!("pool {name} still anchored on {x}, gone before this clean pass"),
                vec![x],
            );
        }
    }

    /// I8: every rotation finishes within readyTimeout + tGP + buffer (and slack for requeues).
    fn durations(&mut self, post: &CacheView, world: &World, now: DateTime<Utc>) {
        let mut bad = Vec::new();
        for (pool, np) in &post.pools {
            let Some(a) = anchor_of(np) else {
                self.anchor_since.remove(pool);
                continue;
            };
            let known = self.anchor_since.get(pool).is_some_and(|(c, _, _)| c == a);
            if !known {
                let bound = self.gov.of(post, np).settings().map(|s| {
                    let tgp = np.termination_grace_period().ok().flatten();
                    s.ready_timeout
                        + tgp.unwrap_or(Duration::hours(1))
                        + BUFFER
                        + Duration::minutes(5)
                });
                self.anchor_since.insert(pool.clone(), (a.to_string(), now, bound));
            }
            let Some((_, since, Some(bound))) = self.anchor_since.get(pool).cloned() else {
                continue;
            };
            let since = self.calm_since.map_or(since, |c| since.max(c));
            // A drain Karpenter got stuck past tGP + buffer (injected before the calm phase, or
            // a scenario failure) bounds the rotation from when it ends, not from its start.
            let since = world.stuck_drains.get(a).map_or(since, |end| since.max(*end));
            if now - since > bound && self.flagged.insert((pool.clone(), a.to_string())) {
                let calm = if self.calm_since.is_some() { " after the faults stopped" } else { "" };
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
            // simulation did and one rotation at a time could reach it, the claims due before
            // it taking a slot each (the burst lookahead's own model). With ageThreshold
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
