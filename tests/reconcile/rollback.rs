//! The readyTimeout and governance-loss rollbacks: what they undo and in which order, the surge
//! host they unfreeze, and a standby or a stale view racing them.

use super::*;

#[test]
pub fn ready_timeout_rolls_back_reaps_the_surge_claim_and_pauses_the_pool() {
    let mut fx = Fx::new();
    started(&mut fx);
    // Karpenter launched a claim for the placeholder but its node never turned Ready.
    fx.world.apply_node(node_obj("node-s1", false)).expect("node");
    fx.world.apply_claim(claim_obj("s1", fx.clock.now(), Some("node-s1"))).expect("claim");
    fx.nominate("c1", "s1");
    bind_placeholder(&fx, "c1", "node-s1");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"));
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "induced surge claim reaped");
    assert!(fx.placeholder("c1").is_none());
    assert!(!fx.cordoned("node-c1"), "our cordon lifted");
    assert!(fx.node_ann("node-c1", Key::DoNotDisrupt).is_none());
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.claim_ann("c1", Key::RetryCount).as_deref(), Some("1"));
    assert!(fx.claim_ann("c1", Key::StartedAt).is_none());
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert!(fx.pool_ann(Key::LastFailureAt).is_some());
    assert_eq!(fx.announced("emit:failure"), 1);
    assert_eq!(fx.events("RotationFailed"), 1);
    let message = &fx.event_messages("RotationFailed")[0];
    assert!(message.contains("was not ready within readyTimeout"), "a pass's message: {message}");
    // Gate B: failurePause (max(10m, cooldownAfter)) blocks new starts.
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert_eq!(fx.announced("emit:failure"), 1);
}

#[test]
pub fn a_stale_pending_view_does_not_undo_a_rollback() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::Fixed(Duration::hours(1)));
    fx.advance(Duration::minutes(16));
    fx.stale_pass(); // rollback happens in the store; the cache still shows pending + anchor
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    let failed_at = fx.claim_ann("c1", Key::FailedAt);
    fx.advance(Duration::seconds(30));
    fx.stale_pass();
    assert_eq!(
        fx.claim_ann("c1", Key::State).as_deref(),
        Some("failed"),
        "guarded entry write lost"
    );
    assert!(fx.claim_ann("c1", Key::StartedAt).is_none(), "readyTimeout deadline not re-stamped");
    assert_eq!(fx.claim_ann("c1", Key::FailedAt), failed_at);
    assert_eq!(fx.announced("emit:failure"), 1);
}

/// What the standby's rollback leaves on a claim while this pass is paused: `failed`, without
/// the attempt's `started-at` and `placeholder-uid`.
fn rolled_back_behind_the_pass(world: &noderotation::cluster::memory::MemoryCluster, claim: &str) {
    world
        .update_claim(claim, |c| {
            let ann = c.metadata.annotations.get_or_insert_with(Default::default);
            ann.insert(Key::State.full().into(), "failed".into());
            ann.remove(Key::StartedAt.full());
            ann.remove(Key::PlaceholderUid.full());
        })
        .expect("claim");
}

/// A leader pauses between its fence check and its `surge-claim` write while the standby rolls
/// the attempt back (state `failed`, its stamps cleared): the write arrives after the rollback.
/// It is conditional (a fresh read, its resourceVersion, and the attempt the pass judged), so it
/// loses instead of naming a surge claim on a claim no rotation holds.
#[test]
fn a_surge_claim_write_sent_after_a_rollback_loses() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(3));
    fx.provision_surge("c1", "s1");
    let hook = fx.intercept();
    let world = fx.world.clone();
    hook.before_write(
        |w| w.contains("noderotation.io/surge-claim=s1"),
        move || {
            rolled_back_behind_the_pass(&world, "c1");
        },
    );
    fx.stale_pass();
    assert!(
        hook.writes().iter().any(|w| w.contains("surge-claim=s1")),
        "the pass sent the write: {:#?}",
        hook.writes()
    );
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim), None, "written onto the rolled-back claim");
}

/// The placeholder create carries no precondition (a create has none but its name), and needs
/// none: a create that arrives after the standby rolled the attempt back leaves a pod that no
/// claim records, since the `placeholder-uid` record is conditional and loses; the sweep removes
/// it as an orphan, and no decision ever reads it as the rotation's placeholder.
#[test]
fn a_placeholder_created_after_a_rollback_is_never_recorded_and_is_swept() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    let hook = fx.intercept();
    let world = fx.world.clone();
    hook.before_write(
        |w| w.starts_with("create Pod"),
        move || {
            rolled_back_behind_the_pass(&world, "c1");
            world
                .update_pool(POOL, |p| {
                    let ann = p.metadata.annotations.get_or_insert_with(Default::default);
                    ann.remove(Key::ActiveRotation.full());
                    ann.remove(Key::ActiveRotationState.full());
                })
                .expect("pool");
        },
    );
    fx.stale_pass();
    let pod = fx.placeholder("c1").expect("the late create landed");
    assert_eq!(fx.claim_ann("c1", Key::PlaceholderUid), None, "recorded after the rollback");
    assert!(pod.metadata.uid.is_some());
    fx.tick();
    assert!(fx.placeholder("c1").is_none(), "the unrecorded placeholder outlived the tick");
}

#[test]
pub fn governance_lost_mid_rotation_rolls_back_in_the_normative_order() {
    let mut fx = Fx::new();
    started(&mut fx);
    let hook = fx.intercept();
    fx.world.delete_now(&noderotation::cluster::ObjectRef::cluster(
        noderotation::cluster::ObjectKind::RotationPolicy,
        "rotate-a",
    ));
    fx.pass();
    fx.pass();
    let placeholder = hook.position("delete Pod");
    let unfreeze = hook.position("-noderotation.io/surge-for");
    let failed = hook.position("noderotation.io/state=failed -noderotation.io/placeholder-uid");
    let clear = hook.position("patch NodePool pool-a -noderotation.io/active-rotation");
    let event = hook.position("event GovernanceLost");
    assert!(
        placeholder < unfreeze && unfreeze < failed && failed < clear && clear < event,
        "{:#?}",
        hook.writes()
    );
    assert_eq!(fx.events("GovernanceLost"), 1);
    assert!(
        fx.event_messages("GovernanceLost").iter().all(|m| m.contains("rotation of c1")),
        "{:?}",
        fx.event_messages("GovernanceLost")
    );
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert!(!fx.cordoned("node-c1"));
    // The claim left pending, so a restored policy rotates it again after retryBackoff, in the
    // same process (no start-up sweep needed).
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    fx.world.apply_policy(policy_yaml("", None)).expect("policy");
    fx.advance(Duration::hours(2));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"), "re-picked");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
}

#[test]
pub fn governance_lost_with_an_anchor_another_pass_cleared_announces_nothing() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.world.delete_now(&obj(PolicyKind, "rotate-a"));
    lagging(&mut fx);
    fx.set_pool_ann(Key::ActiveRotation, None);
    fx.stale_pass();
    assert_eq!(fx.events("GovernanceLost"), 0);
}

/// The pass that froze the surge host failed on its next write (the claim's `state: draining`,
/// which also carries `surge-claim`); then the placeholder was preempted and the old node
/// drained (a forced expiry the cache has not shown yet), so the next pass rolls back. Its cache
/// shows neither the host's freeze nor the placeholder that named the host, and the claim never
/// recorded `surge-claim`: the rollback still unfreezes it, found through the `surge-host` the
/// pool records (written with the draining mirror, before the freeze), instead of leaving
/// `surge-for` and do-not-disrupt on it for good.
#[test]
fn a_rollback_unfreezes_the_surge_host_the_cache_does_not_show_frozen() {
    use noderotation::cluster::memory::{ApiVerb, Call, Fault};
    use noderotation::cluster::{ObjectKind, ObjectRef};
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    // The pool's patch records the surge host and the mirror; the host is frozen; the claim's
    // next patch, `state: draining`, fails.
    let host_patched = std::sync::atomic::AtomicBool::new(false);
    fx.world.set_faults(move |call: &Call<'_>| {
        use std::sync::atomic::Ordering;
        if call.verb == ApiVerb::Patch && call.target.kind == ObjectKind::Node {
            host_patched.store(true, Ordering::SeqCst);
        }
        let claim = call.target.kind == ObjectKind::NodeClaim && call.verb == ApiVerb::Patch;
        if claim && host_patched.load(Ordering::SeqCst) { Fault::Transient } else { Fault::Proceed }
    });
    fx.client.flush_cache();
    fx.ctl.reconcile_pool(POOL).expect_err("the claim's draining write fails");
    fx.world.clear_faults();
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "host frozen");
    assert_eq!(fx.pool_ann(Key::SurgeHost).as_deref(), Some("node-s1"), "host recorded");
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim), None, "written with state: draining only");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    // Preempted placeholder, and readyTimeout passes.
    fx.world.delete_now(&ObjectRef::pod(NS, noderotation::placeholder::placeholder_name("c1")));
    fx.advance(Duration::minutes(16));
    let hook = fx.intercept();
    hook.stale_cache(|view| {
        if let Some(n) = view.nodes.get_mut("node-s1") {
            let mut node = n.as_ref().clone();
            if let Some(a) = node.metadata.annotations.as_mut() {
                a.retain(|k, _| {
                    !k.starts_with("noderotation.io/") && !k.starts_with("karpenter.sh/")
                });
            }
            *n = std::sync::Arc::new(node);
        }
    });
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor), None, "the surge host is unfrozen");
    assert_eq!(fx.node_ann("node-s1", Key::DoNotDisrupt), None);
}

#[test]
pub fn unfreeze_finds_the_surge_host_from_a_fresh_read_not_a_stale_node_list() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    // The escalation fails halfway: the surge host is frozen and the pool mirror written, the
    // claim's `state: draining` write is lost.
    let patched_host = std::sync::atomic::AtomicBool::new(false);
    fx.world.set_faults(move |c: &noderotation::cluster::memory::Call<'_>| {
        use noderotation::cluster::ObjectKind::{Node, NodeClaim};
        use noderotation::cluster::memory::{ApiVerb, Fault};
        use std::sync::atomic::Ordering;
        if c.verb == ApiVerb::Patch && c.target.kind == Node && c.target.name == "node-s1" {
            patched_host.store(true, Ordering::SeqCst);
        }
        if c.verb == ApiVerb::Patch
            && c.target.kind == NodeClaim
            && patched_host.load(Ordering::SeqCst)
        {
            return Fault::Transient;
        }
        Fault::Proceed
    });
    fx.client.flush_cache();
    assert!(fx.ctl.reconcile_pool(POOL).is_err(), "the pass fails at the claim write");
    fx.world.clear_faults();
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    // Karpenter force-expires c1 a second later. The controller's cache lags: c1 still looks
    // pending and alive, node-s1 not frozen yet, and workload moving off the draining node has
    // preempted the placeholder, so nothing in the cache leads to node-s1.
    fx.delete_claim("c1");
    let hook = fx.intercept();
    hook.stale_cache(|v| {
        if let Some(c) = v.claims.get("c1") {
            let mut c = c.as_ref().clone();
            c.metadata.deletion_timestamp = None;
            v.claims.insert("c1".into(), std::sync::Arc::new(c));
        }
        if let Some(n) = v.nodes.get("node-s1") {
            let mut n = n.as_ref().clone();
            if let Some(a) = n.metadata.annotations.as_mut() {
                for k in [Key::SurgeFor, Key::DoNotDisrupt, Key::DoNotDisruptOwned] {
                    a.remove(k.full());
                }
            }
            v.nodes.insert("node-s1".into(), std::sync::Arc::new(n));
        }
        v.placeholders.clear();
    });
    fx.advance(Duration::minutes(16));
    fx.pass(); // readyTimeout: the stale view rolls back as a failure
    hook.fresh_cache();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "rolled back");
    assert!(fx.node_ann("node-s1", Key::SurgeFor).is_none(), "the surge host is unfrozen");
    assert!(fx.node_ann("node-s1", Key::DoNotDisrupt).is_none(), "and may be disrupted again");
}

/// What the standby does to the rotation while the old leader's pass is stalled: the readyTimeout
/// rollback (claim failed, anchor set cleared, pause stamped).
fn standby_rolls_back(world: &noderotation::cluster::memory::MemoryCluster, claim: &str) {
    let at = "2026-11-28T03:20:00Z".to_string();
    world
        .update_claim(claim, |c| {
            let ann = c.metadata.annotations.get_or_insert_with(Default::default);
            ann.insert(Key::State.full().into(), "failed".into());
            ann.insert(Key::FailedAt.full().into(), at.clone());
            ann.insert(Key::RetryCount.full().into(), "1".into());
            ann.remove(Key::StartedAt.full());
            ann.remove(Key::SurgeClaim.full());
        })
        .expect("claim");
    world
        .update_pool(POOL, |p| {
            let ann = p.metadata.annotations.get_or_insert_with(Default::default);
            for k in noderotation::engine::ANCHOR_CLEAR_SET {
                ann.remove(k.full());
            }
            ann.insert(Key::LastFailureAt.full().into(), at.clone());
        })
        .expect("pool");
}

/// A leader whose pass stalls at one of the surge-ready writes while the standby rolls the
/// rotation back: when the pass goes on, none of its remaining writes may land (the claim
/// stays failed, nothing is deleted, the pool gets no draining mirror).
#[test]
pub fn a_pass_stalled_in_the_surge_ready_writes_does_not_drain_a_rolled_back_claim() {
    type Write = fn(&str) -> bool;
    let stalls: [(&str, Write); 3] = [
        ("the mirror", |w| {
            w.starts_with("patch NodePool") && w.contains("active-rotation-state=draining")
        }),
        ("the draining write", |w| {
            w.starts_with("patch NodeClaim c1") && w.contains("/state=draining")
        }),
        ("the delete", |w| w.starts_with("delete NodeClaim c1")),
    ];
    for (at, when) in stalls {
        let mut fx = Fx::new();
        started(&mut fx);
        fx.advance(Duration::minutes(3));
        fx.provision_surge("c1", "s1");
        let hook = fx.intercept();
        let world = fx.world.clone();
        hook.before_write(when, move || standby_rolls_back(&world, "c1"));
        let _ = fx.ctl.reconcile_pool(POOL);
        assert_eq!(
            fx.claim_ann("c1", Key::State).as_deref(),
            Some("failed"),
            "stalled before {at}: a rolled-back claim was drained ({:?})",
            hook.writes()
        );
        assert!(!fx.deleting("c1"), "stalled before {at}: a claim with no surge was deleted");
        assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "stalled before {at}");
        assert!(
            fx.pool_ann(Key::ActiveRotationState).is_none(),
            "stalled before {at}: a draining mirror on a pool with no rotation"
        );
    }
}

/// A leader whose rollback stalls before its failure write while the standby rolled back the
/// same attempt and retried it: the stale write must not fail the new attempt or count again.
#[test]
pub fn a_rollback_stalled_before_its_failure_write_does_not_fail_the_next_attempt() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(16));
    let hook = fx.intercept();
    let world = fx.world.clone();
    hook.before_write(
        |w| w.starts_with("patch NodeClaim c1") && w.contains("/state=failed"),
        move || {
            standby_rolls_back(&world, "c1");
            // ... and retried it: a new attempt, pending again with a new started-at.
            world
                .update_claim("c1", |c| {
                    let ann = c.metadata.annotations.get_or_insert_with(Default::default);
                    ann.insert(Key::State.full().into(), "pending".into());
                    ann.insert(Key::StartedAt.full().into(), "2026-11-28T03:40:00Z".into());
                })
                .expect("claim");
            world
                .update_pool(POOL, |p| {
                    let ann = p.metadata.annotations.get_or_insert_with(Default::default);
                    ann.insert(Key::ActiveRotation.full().into(), "c1".into());
                })
                .expect("pool");
        },
    );
    let _ = fx.ctl.reconcile_pool(POOL);
    assert_eq!(
        fx.claim_ann("c1", Key::State).as_deref(),
        Some("pending"),
        "the new attempt was failed by a stale rollback ({:?})",
        hook.writes()
    );
    assert_eq!(fx.claim_ann("c1", Key::RetryCount).as_deref(), Some("1"), "counted twice");
    assert_eq!(fx.announced("emit:failure"), 0, "a failure this pass did not write");
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
}

/// A started rotation of c1 whose placeholder was evicted and created again under the uid
/// `uid`, behind a cache that shows neither change; the readyTimeout has passed.
fn placeholder_created_again(fx: &mut Fx, uid: &str) {
    started(fx);
    let first = fx.placeholder("c1").expect("placeholder created");
    lagging(fx);
    let name = noderotation::placeholder::placeholder_name("c1");
    fx.world.delete_now(&noderotation::cluster::ObjectRef::pod(NS, &name));
    let mut again = (*first).clone();
    again.metadata.uid = Some(uid.into());
    again.metadata.resource_version = None;
    fx.world.apply_pod(again).expect("re-created");
    fx.advance(Duration::minutes(16));
}

#[test]
fn a_rollback_on_a_stale_view_deletes_the_placeholder_recorded_since() {
    let mut fx = Fx::new();
    // Another pass of this same instant re-created the evicted placeholder and recorded the new
    // incarnation on the claim; this pass's cache still shows the first one and its uid.
    placeholder_created_again(&mut fx, "second-incarnation");
    fx.set_claim_ann("c1", Key::PlaceholderUid, Some("second-incarnation"));
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(fx.placeholder("c1").is_none(), "the placeholder the claim records is deleted");
}

#[test]
fn a_rollback_deletes_the_placeholder_whose_create_answer_was_lost() {
    let mut fx = Fx::new();
    // A pass re-created the evicted placeholder and the create's answer was lost (a timeout
    // after the API server applied it): the claim still records the first incarnation.
    placeholder_created_again(&mut fx, "answer-lost");
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "the anchor is released");
    assert!(
        fx.placeholder("c1").is_none(),
        "a placeholder of this rotation the claim does not record goes with the rotation: \
         left, it would make Karpenter launch a node for no one until the sweep removes it"
    );
}

#[test]
pub fn a_release_judged_on_a_stale_failed_view_keeps_the_retry_that_owns_the_anchor() {
    let mut fx = Fx::new();
    started(&mut fx);
    let hook = fx.intercept();
    // Fresh: c1 was retried and is pending (anchored, frozen, placeholder). The cache still
    // shows the failed attempt before it, and a freeze closes the start gates meanwhile, so the
    // cached view leads to `failed_release`.
    fx.set_pool_ann(Key::Freeze, Some("2026-11-28T05:00:00Z"));
    fx.client.flush_cache();
    hook.stale_cache(|view| {
        if let Some(c) = view.claims.get("c1") {
            let mut c = (**c).clone();
            let ann = c.metadata.annotations.get_or_insert_with(Default::default);
            ann.insert(Key::State.full().into(), "failed".into());
            ann.insert(Key::FailedAt.full().into(), "2026-11-28T02:59:00Z".into());
            ann.remove(Key::StartedAt.full());
            view.claims.insert("c1".into(), std::sync::Arc::new(c));
        }
    });
    fx.stale_pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"), "the anchor stays");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.placeholder("c1").is_some());
}
