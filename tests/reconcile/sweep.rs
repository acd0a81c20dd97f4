//! The start-up sweep and the tick's: orphaned placeholders and markers repaired, unanchored
//! in-flight claims failed, judged on fresh reads, and a draining claim whose anchor went.

use super::*;

#[test]
pub fn startup_sweep_cleans_orphans_and_fails_unanchored_in_flight_claims() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10))
        .claim("c2", Duration::days(10))
        .claim("c3", Duration::days(10));
    // Orphan placeholder for c1, orphan markers on node-c2 (frozen + our cordon), a node only
    // cordoned by us, a pending claim without anchor, an orphan mirror.
    let pool = fx.world.pool(POOL).expect("pool");
    let settings =
        noderotation::policy::settings::Effective::from_spec(&policy_yaml("", None).spec)
            .expect("settings");
    let claim = fx.world.claim("c1").expect("c1");
    let built = noderotation::placeholder::build_placeholder(
        &noderotation::placeholder::PlaceholderInput {
            pool: &pool,
            claim: &claim,
            node: None,
            pods: &[workload_pod("x", "node-c1")],
            settings: &settings,
            namespace: NS,
            priority_class: "p",
            pause_image: "pause",
        },
    )
    .expect("placeholder");
    fx.world.apply_pod(built.pod).expect("orphan placeholder");
    fx.set_node_ann("node-c2", Key::SurgeFor, Some("c2"));
    fx.set_node_ann("node-c2", Key::DoNotDisrupt, Some("true"));
    fx.set_node_ann("node-c2", Key::DoNotDisruptOwned, Some("true"));
    fx.set_node_ann("node-c3", Key::Cordoned, Some("true"));
    fx.world.update_node("node-c3", |n| {
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true)
    });
    fx.set_claim_ann("c2", Key::State, Some("pending"));
    fx.set_pool_ann(Key::ActiveRotationState, Some("draining"));
    fx.client.flush_cache();
    let report = fx.ctl.startup_sweep();
    assert_eq!(report.placeholders_deleted.len(), 1, "{report:?}");
    assert!(fx.placeholder("c1").is_none());
    assert!(fx.node_ann("node-c2", Key::SurgeFor).is_none());
    assert!(fx.node_ann("node-c2", Key::DoNotDisrupt).is_none());
    assert!(!fx.cordoned("node-c3"), "our orphan cordon lifted");
    assert!(fx.node_ann("node-c3", Key::Cordoned).is_none());
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.events("RotationFailed"), 1, "alert for the unanchored in-flight claim");
    let message = &fx.event_messages("RotationFailed")[0];
    assert!(message.contains("was in flight without an anchor"), "the orphan's message: {message}");
    assert!(fx.pool_ann(Key::ActiveRotationState).is_none());
    assert!(report.errors.is_empty(), "{report:?}");
}

#[test]
pub fn startup_sweep_leaves_markers_of_an_anchored_rotation() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.restart();
    let report = fx.ctl.startup_sweep();
    assert!(
        report.placeholders_deleted.is_empty() && report.nodes_released.is_empty(),
        "{report:?}"
    );
    assert!(fx.placeholder("c1").is_some());
    assert_eq!(fx.node_ann("node-c1", Key::SurgeFor).as_deref(), Some("c1"));
    assert!(fx.cordoned("node-c1"));
}

/// The pending rotation of c1 after an operator (or `kubectl replace`, or a GitOps sync with
/// `Replace=true`) removed the pool's anchor: the claim stays `pending`, node-c1 cordoned and
/// frozen, the placeholder holds surge capacity, and nothing refers to any of it.
fn anchor_removed_by_hand(fx: &mut Fx) {
    started(fx);
    fx.provision_surge("c1", "s1");
    fx.set_pool_ann(Key::ActiveRotation, None);
}

/// Nothing of a rotation is left: no placeholder, no marker on either node, the claim failed.
fn orphans_of_c1_repaired(fx: &Fx) {
    assert!(fx.placeholder("c1").is_none(), "orphan placeholder deleted");
    for node in ["node-c1", "node-s1"] {
        assert!(fx.node_ann(node, Key::SurgeFor).is_none(), "{node}: surge-for lifted");
        assert!(
            fx.node_ann(node, Key::DoNotDisrupt).is_none(),
            "{node}: our do-not-disrupt lifted"
        );
        assert!(fx.node_ann(node, Key::DoNotDisruptOwned).is_none());
        assert!(fx.node_ann(node, Key::Cordoned).is_none());
    }
    assert!(!fx.cordoned("node-c1"), "our cordon lifted");
}

#[test]
pub fn an_anchor_removed_by_hand_is_repaired_within_a_tick() {
    let mut fx = Fx::new();
    anchor_removed_by_hand(&mut fx);
    let report = fx.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    orphans_of_c1_repaired(&fx);
    assert_eq!(
        fx.claim_ann("c1", Key::State).as_deref(),
        Some("failed"),
        "a pending claim without an anchor is never picked again: it is failed, so it is retried"
    );
    assert_eq!(fx.events("RotationFailed"), 1);
    // Retried after retryBackoff (30m), as a new attempt: no forced expiry waits for it.
    fx.advance(Duration::minutes(31));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
}

#[test]
pub fn a_nodepool_deleted_mid_rotation_releases_its_placeholder_and_markers_within_a_tick() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    fx.pass(); // draining: the surge host is frozen too
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"));
    fx.world.delete_now(&obj(noderotation::cluster::ObjectKind::NodePool, POOL));
    assert!(fx.pass().is_zero(), "the pool is gone: no pass");
    let report = fx.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    // c1 drains on: the node its pods move to stays frozen for it until it is gone.
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    fx.finalize("c1");
    let report = fx.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    orphans_of_c1_repaired(&fx);
}

#[test]
pub fn the_tick_judges_orphans_on_a_fresh_read_of_the_anchors() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    // The cache lags the pool (its anchor is not in it yet) but not the placeholder and the
    // node markers that the rotation wrote after the anchor: they are not orphans.
    let hook = fx.intercept();
    hook.stale_cache(|v| {
        if let Some(p) = v.pools.get_mut(POOL) {
            let mut p = p.as_ref().clone();
            if let Some(a) = p.metadata.annotations.as_mut() {
                a.remove(Key::ActiveRotation.full());
            }
            v.pools.insert(POOL.into(), std::sync::Arc::new(p));
        }
    });
    fx.tick();
    hook.fresh_cache();
    rotation_of_c1_untouched(&fx);
}

/// A claim that failed (or expired) keeps its annotations, and no sweep row acts on it: with
/// nothing else marked, the tick reads no pool's anchor for it. Once a rotation is in flight
/// the anchors are read fresh again.
#[test]
fn a_failed_claim_alone_makes_the_tick_read_no_anchor() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    fx.set_claim_ann("c1", Key::FailedAt, Some("2026-11-27T03:00:00Z"));
    let reads = gets_of(&mut fx, &[ObjectKind::NodePool], |fx| {
        let report = fx.tick();
        assert!(report.errors.is_empty(), "{:?}", report.errors);
    });
    assert_eq!(reads, 0, "no anchor read for a failed claim");
    fx.set_claim_ann("c1", Key::State, Some("pending"));
    let reads = gets_of(&mut fx, &[ObjectKind::NodePool], |fx| {
        fx.tick();
    });
    assert!(reads > 0, "a claim in flight has its anchors read");
}

#[test]
pub fn the_sweep_deletes_the_placeholder_it_judged_by_its_uid() {
    let mut fx = Fx::new();
    anchor_removed_by_hand(&mut fx);
    let judged = fx.placeholder("c1").expect("orphan placeholder");
    let judged_uid = judged.metadata.uid.clone();
    // Between the sweep's read and its delete, the orphan goes and a rotation of c1 is anchored
    // again with a new placeholder under the same name (another writer: a zombie leader).
    fx.client.flush_cache();
    let hook = fx.intercept();
    let world = fx.world.clone();
    let name = noderotation::placeholder::placeholder_name("c1");
    hook.before_write(
        move |w| w.starts_with(&format!("delete Pod {NS}/{name}")),
        move || {
            let ph = noderotation::placeholder::placeholder_name("c1");
            world.delete_now(&noderotation::cluster::ObjectRef::pod(NS, &ph));
            world
                .update_pool(POOL, |p| {
                    p.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(Key::ActiveRotation.full().into(), "c1".into());
                })
                .expect("pool");
            let mut next = (*judged).clone();
            next.metadata.uid = None;
            next.metadata.resource_version = None;
            world.apply_pod(next).expect("new placeholder");
        },
    );
    fx.ctl.startup_sweep(); // the intercepting controller is a new process
    let now = fx.placeholder("c1").expect("the new rotation's placeholder is not deleted");
    assert_ne!(now.metadata.uid, judged_uid);
}

/// c1 draining onto node-s1 (deleted, the surge host frozen for it) when its anchor is removed
/// by hand, with c2 due next in the pool's one lane.
fn c1_draining_without_its_anchor() -> Fx {
    let mut fx = Fx::new();
    fx.claim("c2", Duration::days(10));
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    fx.pass(); // draining: the old claim deleted, the surge host frozen for it
    assert!(fx.deleting("c1"));
    fx.set_pool_ann(Key::ActiveRotation, None);
    fx
}

/// A claim already draining when its anchor is removed by hand drains on: it is not marked
/// failed, the node its pods move to stays frozen for it, and it holds its lane (the budget counts
/// what is really disrupted) until it is gone; only then are its markers released.
#[test]
fn a_draining_claim_whose_anchor_is_removed_keeps_its_landing_node_and_its_lane() {
    let mut fx = c1_draining_without_its_anchor();
    let report = fx.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"), "not marked failed");
    assert_eq!(fx.events("RotationFailed"), 0);
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "landing kept");
    assert_eq!(fx.node_ann("node-s1", Key::DoNotDisrupt).as_deref(), Some("true"));
    fx.advance(Duration::minutes(10));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "one lane, still taken by c1's drain");
    assert!(fx.claim_ann("c2", Key::State).is_none());
    fx.finalize("c1");
    fx.tick();
    assert!(fx.node_ann("node-s1", Key::SurgeFor).is_none(), "released once c1 is gone");
    assert!(fx.node_ann("node-s1", Key::DoNotDisrupt).is_none());
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c2"), "the lane is free again");
}

/// The same, judged on a claims view that lags the escalation (it still shows c1 `pending`, not
/// deleting) while the pool view already lacks the anchor: the sweep reads c1 fresh before it
/// releases a node, and the start counts the unanchored `pending` c1 against the lane.
#[test]
fn a_lagging_claims_view_neither_releases_the_landing_node_nor_frees_the_lane() {
    let mut fx = c1_draining_without_its_anchor();
    let hook = fx.intercept();
    hook.stale_cache(|view| {
        if let Some(c) = view.claims.get_mut("c1") {
            let mut c = (**c).clone();
            c.metadata.deletion_timestamp = None;
            c.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(Key::State.full().to_string(), "pending".to_string());
            view.claims.insert("c1".to_string(), std::sync::Arc::new(c));
        }
    });
    fx.client.flush_cache();
    let report = fx.ctl.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"), "not marked failed");
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "landing kept");
    assert_eq!(fx.node_ann("node-s1", Key::DoNotDisrupt).as_deref(), Some("true"));
    fx.advance(Duration::minutes(10));
    fx.client.flush_cache();
    fx.stale_pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "one lane, still taken by c1's drain");
    assert!(fx.claim_ann("c2", Key::State).is_none());
}
