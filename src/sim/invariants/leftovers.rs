//! Nothing left behind (I7): the debris a step leaves without the anchor that references it,
//! how long it may stay, and an anchor whose claim is gone released by the next clean pass.
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use super::{Checker, I7, StepInfo, anchored, fmt, state_of};
use crate::cluster::CacheView;
use crate::sim::actors::{CORDONED_MARKER, OWNED_MARKER, SURGE_FOR, anchors, annotation};
use crate::sim::observe::Diff;
use crate::sim::world::World;

/// How long debris may stay (I7) before the controller must have repaired it: a tick (1m, when
/// the sweep runs) and slack; with faults, a crash and restart or a failed anchor read too.
pub(super) const DEBRIS_GRACE: Duration = Duration::minutes(2);
pub(super) const DEBRIS_GRACE_FAULTS: Duration = Duration::minutes(5);

/// One piece of I7 debris: what it is, the object to pull from the trace, since when.
#[derive(Debug, Clone)]
pub(super) struct Debris {
    detail: String,
    object: String,
    since: DateTime<Utc>,
}

/// Which new debris a step answers for (I7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answers {
    /// A clean controller step without faults in the run: all of it.
    Any,
    /// A clean pass in a run with faults: its own pool's.
    Pool(String),
    /// Not a clean controller step.
    Nothing,
}

impl Checker {
    /// I7 debris in `post`: a placeholder, `surge-for`, owned do-not-disrupt or owned cordon
    /// without the anchor that references it (or a claim still draining), and a claim left `pending` (or `draining` with no
    /// delete issued) without its pool's anchor, which nothing would ever pick again.
    ///
    /// `unchanged`: the step's changes, when `post` follows the view of the last call that had
    /// them; the nodes' part of that call is taken over while no node and no pool changed and
    /// the same claims drain (the only inputs it reads besides each node's claim, which a node
    /// keeps). Debug builds check it against the whole walk.
    fn debris_in(
        &mut self,
        post: &CacheView,
        world: &World,
        unchanged: Option<&Diff>,
    ) -> Vec<(String, String, Option<String>)> {
        // Legitimate when any slot of the pool anchors what it serves.
        let anchors_of: BTreeMap<&str, BTreeSet<String>> =
            post.pools.iter().map(|(n, p)| (n.as_str(), anchored(Some(p)))).collect();
        let none = BTreeSet::new();
        let anchor = |pool: &str| anchors_of.get(pool).unwrap_or(&none);
        // The claims marked pending or draining: the last call's, updated with the step's changed
        // claims (`claim_pool` only grows with them too). Debug builds check the whole walk.
        let marks = match (self.claim_marks.take(), unchanged) {
            (Some(mut marks), Some(d)) => {
                marks.update(d);
                #[cfg(debug_assertions)]
                assert_eq!(marks, ClaimMarks::of(post), "the claims' marks updated differ");
                marks
            }
            _ => ClaimMarks::of(post),
        };
        // A claim marked draining whose delete is under way drains on without its anchor (lost by
        // hand, the pool replaced, governance lost): its node markers are live until it is gone.
        let draining: BTreeSet<&str> = (marks.0.iter())
            .filter(|(_, m)| m.deleting && m.state == Mark::Draining)
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
        let kept = self.node_debris.take().filter(|kept| {
            unchanged.is_some_and(|d| d.nodes.is_empty() && d.pools.is_empty())
                && kept.draining.iter().map(String::as_str).eq(draining.iter().copied())
        });
        let nodes = match kept {
            Some(kept) => {
                #[cfg(debug_assertions)]
                assert_eq!(
                    kept.found,
                    node_debris(post, world, &anchors_of, &draining),
                    "the nodes' debris taken over differs from the walk"
                );
                kept
            }
            None => NodeDebris {
                found: node_debris(post, world, &anchors_of, &draining),
                draining: draining.iter().map(|c| c.to_string()).collect(),
            },
        };
        bad.extend(nodes.found.iter().cloned());
        if unchanged.is_some() {
            self.node_debris = Some(nodes);
        }
        for (name, m) in &marks.0 {
            let stranded = m.state == Mark::Pending || (m.state == Mark::Draining && !m.deleting);
            let pool = self.claim_pool.get(name);
            if stranded && !pool.is_some_and(|p| anchor(p).contains(name)) {
                bad.push((
                    format!(
                        "claim {name} is {} without its pool's anchor: never picked again",
                        m.state.as_str()
                    ),
                    name.clone(),
                    pool.cloned(),
                ));
            }
        }
        self.claim_marks = Some(marks);
        bad
    }

    /// I7 after a step that changed the store: records when each piece of debris appeared, and
    /// fails a clean controller step that added some it answers for.
    pub(super) fn track_debris(
        &mut self,
        post: &CacheView,
        d: &Diff,
        now: DateTime<Utc>,
        world: &World,
        answers: &Answers,
    ) {
        let found = self.debris_in(post, world, Some(d));
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
    pub(super) fn aged_debris(&mut self, now: DateTime<Utc>) {
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
    pub(super) fn quiescence(&mut self, post: &CacheView, now: DateTime<Utc>, world: &World) {
        for (detail, obj, _) in self.debris_in(post, world, None) {
            if self.flagged.insert((I7.to_string(), detail.clone())) {
                self.fail(I7, now, detail, vec![obj]);
            }
        }
    }

    /// I7: an anchor whose claim is gone is released by the next clean pass.
    pub(super) fn gone_anchor(&mut self, prev: &CacheView, post: &CacheView, step: &StepInfo<'_>) {
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
}

/// I7 debris on nodes: `surge-for`, owned do-not-disrupt or owned cordon without the anchor
/// (`anchors_of`, per pool) or the draining claim that references it.
fn node_debris(
    post: &CacheView,
    world: &World,
    anchors_of: &BTreeMap<&str, BTreeSet<String>>,
    draining: &BTreeSet<&str>,
) -> Vec<(String, String, Option<String>)> {
    let none = BTreeSet::new();
    let mut bad = Vec::new();
    for (name, node) in &post.nodes {
        let pool =
            node.metadata.labels.as_ref().and_then(|l| l.get(crate::karpenter::NODEPOOL_LABEL));
        let a = pool.map_or(&none, |p| anchors_of.get(p.as_str()).unwrap_or(&none));
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
            let refers = |c: Option<&str>| c.is_some_and(|c| a.contains(c) || draining.contains(c));
            if !refers(claim) && !refers(surge_for) {
                bad.push((
                    format!("node {name} keeps our cordon without an anchor referencing it"),
                    name.clone(),
                    pool.cloned(),
                ));
            }
        }
    }
    bad
}

/// The nodes' part of the last debris found, and the claims then draining.
#[derive(Debug)]
pub(super) struct NodeDebris {
    found: Vec<(String, String, Option<String>)>,
    draining: BTreeSet<String>,
}

/// The claims of a view marked `pending` or `draining` (our `state`), whether each is being
/// deleted: what I7 reads of the claims, kept from step to step and updated with the claims a
/// step changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ClaimMarks(BTreeMap<String, ClaimMark>);

#[derive(Debug, PartialEq, Eq)]
struct ClaimMark {
    state: Mark,
    deleting: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Pending,
    Draining,
}

impl Mark {
    fn as_str(self) -> &'static str {
        match self {
            Mark::Pending => "pending",
            Mark::Draining => "draining",
        }
    }
}

impl ClaimMarks {
    fn of(view: &CacheView) -> ClaimMarks {
        let marked = view.claims.iter().filter_map(|(n, c)| Some((n.clone(), ClaimMark::of(c)?)));
        ClaimMarks(marked.collect())
    }

    /// Takes in the claims `d` changed (added, updated or gone).
    fn update(&mut self, d: &Diff) {
        for (name, _, after) in &d.claims {
            match after.as_deref().and_then(ClaimMark::of) {
                Some(m) => {
                    self.0.insert(name.clone(), m);
                }
                None => {
                    self.0.remove(name);
                }
            }
        }
    }
}

impl ClaimMark {
    fn of(claim: &crate::karpenter::NodeClaim) -> Option<ClaimMark> {
        let state = match state_of(claim)? {
            "pending" => Mark::Pending,
            "draining" => Mark::Draining,
            _ => return None,
        };
        Some(ClaimMark { state, deleting: claim.is_deleting() })
    }
}
