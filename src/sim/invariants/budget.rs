//! Budget and concurrency: every anchor names a claim of its pool and no claim is in two
//! rotations (I1, I14), a pool starts within its lanes and holds a surge node per lane, one
//! rotation per surge host (I12, I13, I15), and no more claims disrupted than the budget (I18).
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::{Checker, I1, I12, I13, I14, I15, I18, StepInfo, state_of};
use crate::cluster::CacheView;
use crate::karpenter::NodePool;
use crate::sim::actors::{SURGE_FOR, anchors, annotation};
use crate::sim::gov;
use crate::sim::observe::Diff;

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

/// One pool's anchors and I1's findings on them, kept from step to step while they hold.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PoolAnchors {
    /// Each anchor naming a claim of another pool or no claim ever seen, with that claim.
    faults: Vec<(String, String)>,
    /// One of `faults` names a claim never seen (a claim appearing later may answer it).
    unseen: bool,
    /// The pool's anchors ([`anchors`]) by slot.
    pub(super) anchors: Vec<(usize, String)>,
}

impl PoolAnchors {
    fn of(claim_pool: &BTreeMap<String, String>, pool: &str, np: &NodePool) -> PoolAnchors {
        let mut found = PoolAnchors { faults: Vec::new(), unseen: false, anchors: Vec::new() };
        for (slot, a) in anchors(np) {
            found.anchors.push((slot, a.to_string()));
            match claim_pool.get(a) {
                Some(p) if p == pool => {}
                Some(p) => found.faults.push((
                    format!("pool {pool} is anchored on {a}, a claim of pool {p}"),
                    a.to_string(),
                )),
                None => {
                    found.unseen = true;
                    found.faults.push((
                        format!("pool {pool} is anchored on {a}, which never was a claim"),
                        a.to_string(),
                    ));
                }
            }
        }
        found
    }
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

impl Checker {
    /// I1: every anchor names a claim of its own pool; I14: no claim is anchored twice. I1 reads
    /// a pool's anchors and the pools of the claims they name, which never change once known: a
    /// pool's findings are judged again when the pool changed, or when a claim changed and one
    /// of them names a claim never seen. I14 reads only the pools' anchors: a step that changed
    /// no pool finds what the step before found (flagged already).
    pub(super) fn anchors(&mut self, post: &CacheView, d: &Diff, now: DateTime<Utc>) {
        let fresh = self.pool_anchors.is_none() || !d.pools.is_empty();
        let mut by_pool = self.pool_anchors.take().unwrap_or_default();
        for (pool, _, _) in &d.pools {
            by_pool.remove(pool);
        }
        if !d.claims.is_empty() {
            by_pool.retain(|_, f| !f.unseen);
        }
        for (pool, np) in &post.pools {
            if !by_pool.contains_key(pool) {
                by_pool.insert(pool.clone(), PoolAnchors::of(&self.claim_pool, pool, np));
            }
        }
        debug_assert!(
            by_pool.len() == post.pools.len()
                && (post.pools.iter().zip(&by_pool)).all(|((pool, np), (kept, f))| {
                    pool == kept && *f == PoolAnchors::of(&self.claim_pool, pool, np)
                }),
            "I1's findings kept per pool differ from a walk of every pool"
        );
        for (detail, claim) in by_pool.values().flat_map(|f| &f.faults) {
            self.fail(I1, now, detail.clone(), vec![claim.clone()]);
        }
        self.pool_anchors = Some(by_pool);
        if !fresh {
            return;
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
    pub(super) fn lanes(&mut self, d: &Diff, post: &CacheView, now: DateTime<Utc>) {
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
                // Kept by `anchors` for this very view.
                let kept = self.pool_anchors.as_ref().and_then(|k| k.get(pool));
                if kept.is_none_or(|f| f.anchors.is_empty()) {
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

    /// I18 over a controller step that marked a claim `draining` or deleted one carrying our
    /// `state`: its pool then has at most `lanes` claims really disrupted by rotations, those
    /// marked draining and those carrying our `state` whose delete a controller step sent (a
    /// claim marked failed while it still drains is still disrupted).
    pub(super) fn budget(&mut self, post: &CacheView, d: &Diff, step: &StepInfo<'_>) {
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::engine::Key;
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
