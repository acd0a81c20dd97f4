//! Only what is ours is touched: the claims the controller deletes (its anchored candidate, I3)
//! and reaps (launched for its placeholders, I19, on a node that hosts nothing else, I6), and
//! the cordons and do-not-disrupt it did not set (I5).
use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use super::{Checker, I3, I5, I6, I19, StepInfo, anchored};
use crate::cluster::CacheView;
use crate::sim::actors::{
    CORDONED_MARKER, DO_NOT_DISRUPT, OWNED_MARKER, SURGE_FOR, annotation, placeholder_node,
};
use crate::sim::observe::{Diff, unschedulable};
use crate::sim::world::World;

impl Checker {
    /// I3, I19 and I6: the controller deletes only its anchored candidate, or reaps a claim
    /// Karpenter launched for (or nominated to) one of its placeholders (I19; with no rotation
    /// in flight and no such record, I3), whose node hosts nothing but DaemonSet pods and the
    /// placeholders of the rotations it was launched for (I6). Which rotation reaped it is not
    /// observable (several can roll back in one pass, and the sweep reaps after a rotation
    /// ended), so the claim's own record is what it is held to.
    pub(super) fn deletions(
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
    pub(super) fn protections(&mut self, d: &Diff, now: DateTime<Utc>) {
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
}
