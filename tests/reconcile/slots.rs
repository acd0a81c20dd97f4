//! maxUnavailable above one: rotation slots each with its own anchor and cooldown, the lane limit,
//! one slot's error holding back no other, and two rotations never sharing a surge host.

use super::*;

/// The annotation of slot `slot` (`.slot` suffix) of a per-rotation pool key.
fn slot_ann(fx: &Fx, key: Key, slot: usize) -> Option<String> {
    let pool = fx.world.pool(POOL)?;
    pool.metadata
        .annotations
        .as_ref()?
        .get(&noderotation::reconcile::slots::slot_key(key, slot))
        .cloned()
}

fn set_slot_ann(fx: &Fx, key: Key, slot: usize, value: &str) {
    fx.set_pool(|p| {
        let ann = p.metadata.annotations.get_or_insert_with(Default::default);
        ann.insert(noderotation::reconcile::slots::slot_key(key, slot), value.to_string());
    });
}

/// From now on the controller's cache shows the pool without any annotation.
fn hide_pool_annotations(hook: &Intercept) {
    hook.stale_cache(|view| {
        if let Some(p) = view.pools.get_mut(POOL) {
            let mut p = (**p).clone();
            p.metadata.annotations = None;
            view.pools.insert(POOL.to_string(), std::sync::Arc::new(p));
        }
    });
}

fn three_lanes() -> Fx {
    Fx::with(policy_yaml(", maxUnavailable: 3", None), pool_yaml(""))
}

#[test]
fn three_rotations_of_one_pool_run_at_once_each_in_its_own_slot() {
    let mut fx = three_lanes();
    for (i, c) in ["c1", "c2", "c3", "c4"].iter().enumerate() {
        // Older first: c1 has the earliest deadline.
        fx.claim(c, Duration::days(10) - Duration::minutes(i as i64));
    }
    for _ in 0..4 {
        fx.pass();
    }
    let anchors: Vec<Option<String>> =
        (0..4).map(|s| slot_ann(&fx, Key::ActiveRotation, s)).collect();
    assert_eq!(
        anchors,
        [Some("c1".to_string()), Some("c2".to_string()), Some("c3".to_string()), None],
        "earliest deadline first, one slot each, never more than maxUnavailable"
    );
    assert_eq!(fx.claim_ann("c4", Key::State), None, "the fourth waits for a slot");
    for c in ["c1", "c2", "c3"] {
        assert_eq!(fx.claim_ann(c, Key::State).as_deref(), Some("pending"));
        assert!(fx.placeholder(c).is_some(), "{c} has its own placeholder");
    }
    assert_eq!(fx.events("RotationStarted"), 3);

    fx.advance(Duration::minutes(3));
    for (c, s) in [("c1", "s1"), ("c2", "s2"), ("c3", "s3")] {
        fx.provision_surge(c, s);
    }
    fx.pass();
    for (slot, (c, s)) in [("c1", "s1"), ("c2", "s2"), ("c3", "s3")].into_iter().enumerate() {
        assert_eq!(fx.claim_ann(c, Key::State).as_deref(), Some("draining"));
        assert!(fx.deleting(c));
        assert_eq!(slot_ann(&fx, Key::ActiveRotationState, slot).as_deref(), Some("draining"));
        assert_eq!(slot_ann(&fx, Key::SurgeHost, slot), Some(format!("node-{s}")));
        assert_eq!(fx.node_ann(&format!("node-{s}"), Key::SurgeFor).as_deref(), Some(c));
    }
    for c in ["c1", "c2", "c3"] {
        fx.finalize(c);
    }
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 3);
    assert_eq!(fx.ctl.telemetry().completed_count(POOL, Outcome::Success), 3);
    for slot in 0..3 {
        assert!(slot_ann(&fx, Key::ActiveRotation, slot).is_none());
        assert!(slot_ann(&fx, Key::LastRotationAt, slot).is_some(), "slot {slot} cooldown anchor");
    }
    // Each slot waits its own cooldownAfter (10m) after its completion.
    fx.pass();
    assert!(fx.claim_ann("c4", Key::State).is_none(), "every slot is cooling down");
    fx.advance(Duration::minutes(11));
    fx.pass();
    assert_eq!(fx.claim_ann("c4", Key::State).as_deref(), Some("pending"));
    assert_eq!(fx.ctl.telemetry().completed_count(POOL, Outcome::Success), 3);
}

/// A retry from `failed` is a new attempt, so it re-checks the lane limit: maxUnavailable lowered
/// from 3 to 2 while three rotations are in flight, the failed one releases its slot instead of
/// starting again (the pool would otherwise keep three in flight).
#[test]
pub fn a_retry_from_failed_rechecks_the_lane_limit() {
    let mut fx = three_lanes();
    for (i, c) in ["c1", "c2", "c3"].iter().enumerate() {
        fx.claim(c, Duration::days(10) - Duration::minutes(i as i64));
    }
    for _ in 0..3 {
        fx.pass();
    }
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 2).as_deref(), Some("c3"));
    // c3's attempt failed an hour ago, its backoff is over; maxUnavailable goes down to 2.
    fx.set_claim_ann("c3", Key::State, Some("failed"));
    fx.set_claim_ann("c3", Key::FailedAt, Some("2026-11-28T02:00:00Z"));
    fx.set_claim_ann("c3", Key::StartedAt, None);
    fx.world
        .update_policy("rotate-a", |p| {
            p.spec.surge.max_unavailable =
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2);
        })
        .expect("policy");
    fx.pass();
    assert_eq!(fx.claim_ann("c3", Key::State).as_deref(), Some("failed"), "no third attempt");
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 2), None, "its slot is released");
    for c in ["c1", "c2"] {
        assert_eq!(fx.claim_ann(c, Key::State).as_deref(), Some("pending"), "{c} goes on");
    }
    // Within the lanes, a retry goes ahead as before.
    fx.set_claim_ann("c2", Key::State, Some("failed"));
    fx.set_claim_ann("c2", Key::FailedAt, Some("2026-11-28T02:00:00Z"));
    fx.set_claim_ann("c2", Key::StartedAt, None);
    fx.set_pool_ann(Key::LastFailureAt, None);
    fx.pass();
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("pending"), "retried");
}

/// A pass over a pool whose slots it ran, the error of the slots that failed (if any).
fn pass_reporting(fx: &mut Fx) -> Option<noderotation::reconcile::ReconcileError> {
    fx.client.flush_cache();
    fx.ctl.reconcile_pool(POOL).err()
}

/// One slot's persistent error is not the pool's: admission rejects c1's placeholder on every
/// create and the list of the pods on c2's node times out on every call, while the pool's other
/// rotations start, escalate, complete and roll back in the same passes; each failed slot is
/// reported after the others ran, with the earliest requeue they asked for.
#[test]
fn one_slots_persistent_error_holds_back_no_other_slot() {
    use noderotation::cluster::memory::Rejected;
    let mut fx = three_lanes();
    for (i, c) in ["c1", "c2", "c3", "c4"].iter().enumerate() {
        fx.claim(c, Duration::days(10) - Duration::minutes(i as i64));
    }
    fx.world.reject_placeholder(Rejected::Claim("c1".into()), "exceeded quota: placeholders");
    fx.world.time_out_pod_list("node-c2", true);
    // Pass 1 starts c1 (slot 0): rejected.
    let err = pass_reporting(&mut fx).expect("c1's placeholder is rejected");
    assert!(err.to_string().contains("forbidden"), "{err}");
    // Pass 2: slot 0 fails again; the free slot starts c2, whose pod list times out.
    let err = pass_reporting(&mut fx).expect("both fail");
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 1).as_deref(), Some("c2"), "{err}");
    assert!(err.to_string().contains("rotation slot 0") && err.to_string().contains("slot 1"));
    // Pass 3: slots 0 and 1 fail; slot 2 starts c3 and creates its placeholder.
    let err = pass_reporting(&mut fx).expect("two slots fail");
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 2).as_deref(), Some("c3"));
    assert!(fx.placeholder("c3").is_some(), "c3's own placeholder");
    assert_eq!(err.requeue(), Some(Duration::seconds(30)), "c3's run asked for 30s: {err}");
    assert!(fx.placeholder("c1").is_none() && fx.placeholder("c2").is_none());
    // c3's surge is ready: it escalates while slots 0 and 1 still fail.
    fx.advance(Duration::minutes(2));
    fx.provision_surge("c3", "s3");
    pass_reporting(&mut fx).expect("slots 0 and 1 still fail");
    assert_eq!(fx.claim_ann("c3", Key::State).as_deref(), Some("draining"));
    assert!(fx.deleting("c3"));
    // Its drain ends: the completion is announced in a pass whose other slots fail.
    fx.finalize("c3");
    pass_reporting(&mut fx).expect("slots 0 and 1 still fail");
    assert_eq!(fx.announced("emit:success"), 1);
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 2), None, "c3's slot is free");
    // readyTimeout: both refused rotations roll back in one pass, each in its own slot.
    fx.advance(Duration::minutes(14));
    let last = pass_reporting(&mut fx);
    assert!(last.is_none(), "{last:?}");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.announced("emit:failure"), 2);
    let failed = fx.event_messages("RotationFailed");
    assert!(failed.iter().any(|m| m.contains("rejected") && m.contains("forbidden")), "{failed:?}");
}

/// Two rotations of a three-lane pool are pending; c1's placeholder runs on node-s1 (claim s1)
/// and c1 goes draining onto it, deleting its old claim and its placeholder. Returns c1's slot.
fn c1_drains_onto_s1(fx: &mut Fx) -> usize {
    fx.claim("c1", Duration::days(10));
    fx.claim("c2", Duration::days(10) - Duration::minutes(1));
    fx.pass();
    fx.pass();
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("pending"));
    fx.advance(Duration::minutes(3));
    fx.provision_surge("c1", "s1");
    fx.pass();
    assert!(fx.deleting("c1"));
    (0..3)
        .find(|s| slot_ann(fx, Key::ActiveRotation, *s).as_deref() == Some("c1"))
        .expect("c1's slot")
}

/// The scheduler binds c2's placeholder to node-s1, and it runs.
fn c2_placeholder_on_s1(fx: &Fx) {
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name("c2"), |p| {
            p.spec.get_or_insert_with(Default::default).node_name = Some("node-s1".into());
            p.status.get_or_insert_with(Default::default).phase = Some("Running".into());
        })
        .expect("c2's placeholder");
}

/// Two rotations of one pool never drain onto one surge host. The first rotation deleted its old
/// claim and released its placeholder; its drain, paced by a PodDisruptionBudget, has not moved
/// a pod yet, so its surge node is empty and the second rotation's placeholder lands there.
#[test]
pub fn a_placeholder_on_the_surge_host_of_another_rotation_waits_for_that_rotation() {
    let mut fx = three_lanes();
    let slot = c1_drains_onto_s1(&mut fx);
    assert_eq!(slot_ann(&fx, Key::SurgeHost, slot).as_deref(), Some("node-s1"));
    c2_placeholder_on_s1(&fx);
    fx.advance(Duration::seconds(10));
    fx.pass();
    fx.pass();
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("pending"), "node-s1 is c1's");
    assert!(!fx.deleting("c2"), "c2's old node waits for surge capacity of its own");
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"));

    // c1's rotation ends (its pods did not need the room the placeholder holds): node-s1 is
    // free to be c2's surge host.
    fx.finalize("c1");
    fx.pass();
    fx.advance(Duration::seconds(10));
    fx.pass();
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("draining"));
    assert!(fx.deleting("c2"));
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c2"));
}

/// The host check is made again on the pool read fresh: a cache that has not seen another
/// rotation record its surge host yet must not hand that node to a second rotation.
#[test]
pub fn a_surge_host_another_rotation_recorded_since_the_cache_was_read_is_not_taken() {
    let mut fx = three_lanes();
    let slot = c1_drains_onto_s1(&mut fx);
    // c2's placeholder lands on node-s1, the room c1's pods are moving to; the controller's cache
    // shows the pool without c1's surge-host.
    c2_placeholder_on_s1(&fx);
    let hook = fx.intercept();
    let key = noderotation::reconcile::slots::slot_key(Key::SurgeHost, slot);
    hook.stale_cache(move |view| {
        if let Some(p) = view.pools.get_mut(POOL) {
            let mut p = (**p).clone();
            if let Some(a) = p.metadata.annotations.as_mut() {
                a.remove(&key);
            }
            view.pools.insert(POOL.to_string(), std::sync::Arc::new(p));
        }
        hide_surge_for(view, "node-s1");
    });
    fx.advance(Duration::seconds(10));
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("pending"), "node-s1 is c1's");
    assert!(!fx.deleting("c2"), "c2's old node waits for surge capacity of its own");
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "c1 keeps its host");
    assert_eq!(slot_ann(&fx, Key::SurgeHost, slot).as_deref(), Some("node-s1"));
    let hosts = (0..3).filter(|s| slot_ann(&fx, Key::SurgeHost, *s).is_some()).count();
    assert_eq!(hosts, 1, "no second slot records node-s1");
}

/// The readyTimeout reap's fallback (the pool's one fresh claim that is not Ready) never takes
/// the surge claim another rotation recorded, even when that node looks empty: the other
/// rotation deleted its placeholder with its old claim, and its pods are still on the way.
#[test]
pub fn a_rollback_never_reaps_the_surge_claim_another_rotation_recorded() {
    let mut fx = three_lanes();
    c1_drains_onto_s1(&mut fx);
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
    assert!(fx.placeholder("c1").is_none(), "c1's placeholder went with its old claim");
    // node-s1 stops being Ready (a kubelet hiccup) and s1's status has not caught up.
    let not_ready = node_obj("node-s1", false).status;
    fx.world.update_node("node-s1", |n| n.status = not_ready).expect("node-s1");
    let mut s1 = (*fx.world.claim("s1").expect("s1")).clone();
    if let Some(st) = s1.status.as_mut() {
        st.conditions = serde_json::from_value(serde_json::json!([
            {"type": "Launched", "status": "True"}, {"type": "Registered", "status": "True"}]))
        .expect("conditions");
    }
    fx.world.apply_claim(s1).expect("claim");
    // c2's placeholder never binds: readyTimeout rolls c2 back.
    fx.advance(Duration::minutes(14));
    fx.pass();
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("failed"));
    assert!(!fx.deleting("s1"), "s1 is c1's surge: c2's rollback leaves it");
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"));
}

/// A later rotation of the pool still waiting for its surge does not keep a rollback from
/// reaping its own never-Ready surge claim: a claim launched before that rotation started cannot
/// be its surge.
#[test]
fn a_rollback_reaps_its_never_ready_surge_while_a_later_rotation_waits_for_its_own() {
    let mut fx = three_lanes();
    started(&mut fx);
    // Karpenter launched s1 for c1's placeholder; its node never turns Ready.
    fx.advance(Duration::seconds(30));
    never_ready_surge(&fx, "s1", "c1");
    // c2's rotation starts a minute later; its placeholder waits for a node too.
    fx.advance(Duration::minutes(1));
    fx.claim("c2", Duration::days(10));
    fx.pass();
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("pending"));
    // c1's readyTimeout passes, not c2's.
    fx.advance(Duration::minutes(14));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "c1 rolled back");
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("pending"));
    assert!(
        fx.deleting("s1") || fx.world.claim("s1").is_none(),
        "s1 predates c2's rotation: it is c1's surge, reaped with c1's rollback"
    );
}

#[test]
fn a_claim_another_slot_rotates_is_never_anchored_twice_on_a_stale_view() {
    let mut fx = three_lanes();
    fx.claim("c1", Duration::days(10));
    let hook = fx.intercept();
    // The fresh pool already rotates c1 in slot 1; the cache shows neither the anchor nor a state.
    set_slot_ann(&fx, Key::ActiveRotation, 1, "c1");
    fx.client.flush_cache();
    hide_pool_annotations(&hook);
    fx.stale_pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation), None, "slot 0 did not take c1 as well");
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 1).as_deref(), Some("c1"));
    assert_eq!(fx.events("RotationStarted"), 0);
}

#[test]
fn a_start_on_a_stale_view_never_exceeds_max_unavailable() {
    let mut fx = three_lanes();
    for c in ["c1", "c2", "c3", "c4"] {
        fx.claim(c, Duration::days(10));
    }
    let hook = fx.intercept();
    // Three rotations are in flight (slots 1-3, as a larger maxUnavailable left them); the cache
    // has not seen them.
    for (slot, c) in [(1, "c2"), (2, "c3"), (3, "c4")] {
        set_slot_ann(&fx, Key::ActiveRotation, slot, c);
    }
    fx.client.flush_cache();
    hide_pool_annotations(&hook);
    fx.stale_pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation), None, "no fourth rotation");
    assert!(fx.claim_ann("c1", Key::State).is_none(), "c1, free, waits for a slot");
    assert_eq!(fx.events("RotationStarted"), 0);
}

#[test]
fn headroom_counts_the_surges_other_slots_still_wait_for() {
    // Three nodes in use of a limit of five: room for two surges at once, not three.
    let mut fx =
        Fx::with(policy_yaml(", maxUnavailable: 3", None), pool_yaml("  limits: {nodes: \"5\"}"));
    for c in ["c1", "c2", "c3"] {
        fx.claim(c, Duration::days(10));
    }
    fx.world
        .update_pool(POOL, |p| {
            p.status =
                serde_json::from_value(serde_json::json!({"resources": {"nodes": "3"}})).ok();
        })
        .expect("pool");
    for _ in 0..3 {
        fx.pass();
    }
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 1).as_deref(), Some("c2"));
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 2), None, "a third surge would exceed the limit");
    assert_eq!(fx.events("InsufficientHeadroom"), 1);
    // c1's surge node exists: Karpenter counts it, and c3 still does not fit.
    fx.provision_surge("c1", "s1");
    fx.world
        .update_pool(POOL, |p| {
            p.status =
                serde_json::from_value(serde_json::json!({"resources": {"nodes": "4"}})).ok();
        })
        .expect("pool");
    fx.pass();
    assert_eq!(slot_ann(&fx, Key::ActiveRotation, 2), None);
}

/// The view shows `node` without its `surge-for` (the cache lags the freeze).
fn hide_surge_for(view: &mut noderotation::cluster::CacheView, node: &str) {
    if let Some(n) = view.nodes.get_mut(node) {
        let mut n = (**n).clone();
        if let Some(a) = n.metadata.annotations.as_mut() {
            a.remove(Key::SurgeFor.full());
        }
        view.nodes.insert(node.to_string(), std::sync::Arc::new(n));
    }
}

/// A rotation never takes the node another rotation drains onto. c1's anchor was removed by
/// hand while it drained onto node-s1: node-s1 stays frozen for c1, and when c2's placeholder
/// lands there, a view that lags the freeze does not hand it to c2: the fresh node answers
/// `taken`, and the escalation waits.
#[test]
pub fn a_surge_host_frozen_for_a_claim_still_draining_is_not_taken() {
    let mut fx = three_lanes();
    let slot = c1_drains_onto_s1(&mut fx);
    let anchor = noderotation::reconcile::slots::slot_key(Key::ActiveRotation, slot);
    fx.set_pool(|p| {
        p.metadata.annotations.get_or_insert_with(Default::default).remove(&anchor);
    });
    c2_placeholder_on_s1(&fx);
    let hook = fx.intercept();
    hook.stale_cache(|view| hide_surge_for(view, "node-s1"));
    fx.advance(Duration::seconds(10));
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("pending"), "node-s1 is c1's");
    assert!(!fx.deleting("c2"), "c2's old node waits for surge capacity of its own");
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "c1 keeps its host");
    // c2's escalation wrote its mirror and host record before the freeze answered `taken`:
    // both are taken back, so no draining mirror stands over a pending claim.
    let pool = fx.world.pool(POOL).expect("pool");
    let anchors = noderotation::reconcile::slots::anchors(&pool.metadata);
    let c2 = anchors.iter().find(|(_, c)| **c == "c2").map(|(s, _)| *s).expect("c2 anchored");
    for key in [Key::ActiveRotationState, Key::DrainingAt, Key::SurgeHost] {
        let k = noderotation::reconcile::slots::slot_key(key, c2);
        let ann = pool.metadata.annotations.as_ref().and_then(|a| a.get(&k));
        assert_eq!(ann, None, "{k} of c2's slot taken back");
    }
}

/// A candidate whose node another rotation drains onto (the absorbed path: c1's placeholder ran
/// on c2's node) is never picked; a view that lags the freeze and the recorded host picks it,
/// but the fresh node answers `taken`: c2's attempt rolls back without cordoning node-c2.
#[test]
pub fn a_candidate_whose_node_another_rotation_drains_onto_is_never_cordoned() {
    let mut fx = three_lanes();
    fx.claim("c1", Duration::days(10));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    fx.claim("c2", Duration::days(10) - Duration::minutes(1));
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name("c1"), |p| {
            p.spec.get_or_insert_with(Default::default).node_name = Some("node-c2".into());
            p.status.get_or_insert_with(Default::default).phase = Some("Running".into());
        })
        .expect("c1's placeholder");
    fx.advance(Duration::minutes(3));
    fx.pass();
    assert!(fx.deleting("c1"), "c1 drains onto node-c2");
    assert_eq!(fx.node_ann("node-c2", Key::SurgeFor).as_deref(), Some("c1"));
    fx.pass();
    assert!(fx.claim_ann("c2", Key::State).is_none(), "node-c2 is c1's landing: c2 is not picked");
    let hook = fx.intercept();
    hook.stale_cache(|view| {
        hide_surge_for(view, "node-c2");
        if let Some(p) = view.pools.get_mut(POOL) {
            let mut p = (**p).clone();
            if let Some(a) = p.metadata.annotations.as_mut() {
                a.retain(|k, _| !k.starts_with(Key::SurgeHost.full()));
            }
            view.pools.insert(POOL.to_string(), std::sync::Arc::new(p));
        }
    });
    fx.stale_pass();
    assert_ne!(fx.claim_ann("c2", Key::State).as_deref(), Some("pending"));
    assert!(!fx.cordoned("node-c2"), "never cordoned while c1 drains onto it");
    assert_eq!(fx.node_ann("node-c2", Key::SurgeFor).as_deref(), Some("c1"));
    assert_eq!(fx.node_ann("node-c2", Key::DoNotDisrupt).as_deref(), Some("true"));
}
