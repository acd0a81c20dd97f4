//! The reconciler on the in-memory cluster: every spec branch and the named edge cases of
//! issue 4, each its own test. The world (Karpenter, kubelet, operator) is played by hand.
mod support;

use chrono::Duration;
use noderotation::clock::Clock;
use noderotation::engine::Key;
use noderotation::telemetry::Outcome;
use support::*;

fn started(fx: &mut Fx) {
    fx.claim("c1", Duration::days(10));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
}

#[test]
fn full_surge_rotation_reserves_capacity_then_drains_and_completes_once() {
    let mut fx = Fx::new();
    started(&mut fx);
    // Pending: frozen, cordoned, placeholder created.
    assert_eq!(fx.node_ann("node-c1", Key::SurgeFor).as_deref(), Some("c1"));
    assert_eq!(fx.node_ann("node-c1", Key::DoNotDisrupt).as_deref(), Some("true"));
    assert_eq!(fx.node_ann("node-c1", Key::DoNotDisruptOwned).as_deref(), Some("true"));
    assert!(fx.cordoned("node-c1"));
    assert_eq!(fx.node_ann("node-c1", Key::Cordoned).as_deref(), Some("true"));
    let ph = fx.placeholder("c1").expect("placeholder created");
    assert_eq!(
        ph.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(Key::SurgeFor.full()))
            .map(String::as_str),
        Some("c1")
    );
    assert!(!fx.deleting("c1"), "no delete before surge capacity is ready");

    fx.advance(Duration::minutes(3));
    fx.provision_surge("c1", "s1");
    fx.pass(); // persists surge-claim; surge ready -> draining
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    assert_eq!(fx.pool_ann(Key::ActiveRotationState).as_deref(), Some("draining"));
    assert_eq!(fx.pool_ann(Key::SurgePath).as_deref(), Some("provisioned"));
    assert_eq!(fx.pool_ann(Key::SurgeWait).as_deref(), Some("3m0s"));
    assert!(fx.deleting("c1"));
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "surge host frozen");

    fx.advance(Duration::minutes(10));
    fx.pass(); // draining: waits
    assert_eq!(fx.announced("emit:success"), 0);
    fx.finalize("c1");
    fx.pass(); // claim gone: completion
    fx.pass(); // and nothing more
    assert_eq!(fx.announced("emit:success"), 1);
    assert_eq!(fx.ctl.telemetry().completed_count(POOL, Outcome::Success), 1);
    assert_eq!(fx.events("RotationCompleted"), 1);
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert!(fx.pool_ann(Key::ActiveRotationState).is_none());
    assert!(fx.pool_ann(Key::SurgeWait).is_none());
    assert!(fx.pool_ann(Key::LastRotationAt).is_some());
    assert!(fx.placeholder("c1").is_none(), "placeholder deleted");
    assert!(fx.node_ann("node-s1", Key::SurgeFor).is_none(), "surge host unfrozen");
    assert!(fx.node_ann("node-s1", Key::DoNotDisrupt).is_none());
}

#[test]
fn cooldown_after_a_success_holds_the_next_start() {
    let mut fx = Fx::new();
    fx.claim("c2", Duration::days(9));
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    fx.pass();
    fx.finalize("c1");
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    fx.advance(Duration::minutes(5));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "gate A: cooldownAfter 10m");
    fx.advance(Duration::minutes(6));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c2"));
}

#[test]
fn ready_timeout_rolls_back_reaps_the_surge_claim_and_pauses_the_pool() {
    let mut fx = Fx::new();
    started(&mut fx);
    // Karpenter launched a claim for the placeholder but its node never turned Ready.
    fx.world.apply_node(node_obj("node-s1", false)).expect("node");
    fx.world.apply_claim(claim_obj("s1", fx.clock.now(), Some("node-s1"))).expect("claim");
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name("c1"), |p| {
            p.spec.get_or_insert_with(Default::default).node_name = Some("node-s1".into());
        })
        .expect("placeholder");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
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
    // Gate B: failurePause (max(10m, cooldownAfter)) blocks new starts.
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert_eq!(fx.announced("emit:failure"), 1);
}
