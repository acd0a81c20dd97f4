//! The surge path: the escalation waits for a Ready surge host whose path is known, the
//! placeholder goes before the old claim, and the drain runs under its mirror and its stuck bound.

use super::*;

#[test]
pub fn full_surge_rotation_reserves_capacity_then_drains_and_completes_once() {
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
    assert_eq!(fx.events("SurgeUnschedulable"), 0);
}

/// Karpenter writes the surge claim's `status.nodeName` a moment after its Node registers (KWOK
/// makes the Node Ready at once), so the placeholder can be Running on a Ready host while the
/// cache does not yet connect the host to its claim. The path must never be guessed.
fn surge_host_registered_before_its_claim_says_so(fx: &mut Fx, provider_id: bool) {
    started(fx);
    fx.advance(Duration::minutes(3));
    fx.provision_surge("c1", "s1");
    fx.world
        .update_claim("s1", |c| {
            let st = c.status.get_or_insert_with(Default::default);
            st.node_name = None;
            if !provider_id {
                st.provider_id = None;
            }
        })
        .expect("surge claim");
}

#[test]
pub fn surge_ready_before_the_host_claim_is_matched_holds_the_escalation_until_the_path_is_known() {
    let mut fx = Fx::new();
    surge_host_registered_before_its_claim_says_so(&mut fx, false);
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "held, not guessed");
    assert!(fx.pool_ann(Key::ActiveRotationState).is_none());
    assert!(fx.pool_ann(Key::SurgePath).is_none());
    assert!(!fx.deleting("c1"), "no delete while the surge path is unknown");

    // Karpenter's registration catches up: the next pass escalates with the real path.
    fx.advance(Duration::seconds(10));
    fx.world
        .update_claim("s1", |c| {
            let st = c.status.get_or_insert_with(Default::default);
            st.node_name = Some("node-s1".into());
            st.provider_id = Some("kwok://node-s1".into());
        })
        .expect("surge claim");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    assert_eq!(fx.pool_ann(Key::SurgePath).as_deref(), Some("provisioned"));
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
    assert!(fx.deleting("c1"));
}

#[test]
fn surge_host_claim_is_matched_by_provider_id_before_its_node_name_is_written() {
    let mut fx = Fx::new();
    surge_host_registered_before_its_claim_says_so(&mut fx, true);
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    assert_eq!(fx.pool_ann(Key::SurgePath).as_deref(), Some("provisioned"));
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
}

/// Karpenter's provisioner schedules a deleting node's pods without preempting: a placeholder
/// still filling the surge node when the old claim is deleted makes it launch a second node
/// (docs/decisions/placeholder-release.md). The placeholder goes first, in the same pass.
#[test]
pub fn the_placeholder_is_deleted_before_the_old_claim_in_the_same_pass() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    let hook = fx.intercept();
    fx.pass();
    let draining = hook.position("patch NodeClaim c1 noderotation.io/state=draining");
    let placeholder = hook.position(&format!("delete Pod {NS}/"));
    let claim = hook.position("delete NodeClaim c1");
    assert!(draining < placeholder && placeholder < claim, "{:#?}", hook.writes());
    assert!(fx.placeholder("c1").is_none(), "no placeholder while the old node drains");
    assert!(fx.deleting("c1"));
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "surge host frozen");
}

#[test]
pub fn a_drain_past_tgp_plus_buffer_is_reported_stuck_and_keeps_the_gate() {
    let mut fx = Fx::new();
    draining(&mut fx);
    fx.advance(Duration::minutes(63));
    fx.pass();
    assert_eq!(fx.events("DrainStuck"), 1);
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
}

/// A claim without its own terminationGracePeriod drains under the pool's: the rule's stuck bound
/// and the `noderotation_drain_stuck` gauge read the same bound (one function), so the gauge
/// never says "stuck" while the rule (and its DrainStuck warning) says the drain is in bounds.
#[test]
fn the_drain_stuck_gauge_and_the_rule_share_the_pools_tgp_bound() {
    use noderotation::telemetry::PoolGauge;
    let mut fx = Fx::new();
    fx.set_pool(|p| p.spec.template.spec.termination_grace_period = Some("3h".into()));
    fx.claim("c1", Duration::days(10));
    fx.world.update_claim("c1", |c| c.spec.termination_grace_period = None).expect("claim");
    fx.pass();
    fx.provision_surge("c1", "s1");
    fx.pass();
    assert!(fx.deleting("c1"));
    // Past the 1h default + buffer, inside the pool's 3h + buffer.
    fx.advance(Duration::minutes(90));
    fx.pass();
    let stuck = |fx: &Fx| fx.ctl.telemetry().pool_gauge(POOL, PoolGauge::DrainStuck);
    assert_eq!(fx.events("DrainStuck"), 0, "inside tGP + buffer of the pool");
    assert_eq!(stuck(&fx), Some(0.0), "the gauge agrees with the rule");
    fx.advance(Duration::minutes(93));
    fx.pass();
    assert_eq!(fx.events("DrainStuck"), 1, "past 3h + 2m");
    assert_eq!(stuck(&fx), Some(1.0));
}

/// The draining mirror is re-asserted only while the anchor still names the rotation: a pass
/// reading a draining claim after another pass completed the rotation leaves no orphan mirror.
#[test]
fn a_stale_draining_view_does_not_mirror_onto_a_released_pool() {
    let mut fx = Fx::new();
    draining(&mut fx);
    fx.set_pool_ann(Key::ActiveRotationState, None); // a GitOps sync stripped the mirror
    lagging(&mut fx);
    // Another pass (the standby, while this one stalled) completed the rotation.
    fx.finalize("c1");
    fx.set_pool(|p| {
        let ann = p.metadata.annotations.get_or_insert_with(Default::default);
        for k in noderotation::engine::ANCHOR_CLEAR_SET {
            ann.remove(k.full());
        }
        ann.insert(Key::LastRotationAt.full().into(), "2026-11-28T03:10:00Z".into());
    });
    fx.stale_pass();
    assert!(
        fx.pool_ann(Key::ActiveRotationState).is_none(),
        "a draining mirror on a pool with no rotation"
    );
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
}

/// The view shows the placeholder Running on a Ready surge host that is already gone: its claim
/// interrupted, the node deleted, the watch lagging. The host's freeze, a write, finds it gone,
/// and the old claim is not deleted without capacity to drain onto (I17 on
/// `lagging-takeovers.yaml --faults`, seeds 272, 337, 485, 613 and 710 of 1,000).
#[test]
pub fn a_surge_host_gone_behind_a_lagging_view_holds_the_delete() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(3));
    fx.provision_surge("c1", "s1");
    let host = surge_host_now(&fx);
    fx.world.delete_now(&obj(ObjectKind::Node, "node-s1"));
    fx.world.delete_now(&obj(ObjectKind::NodeClaim, "s1"));
    show_host(&fx.intercept(), host);
    fx.pass();
    assert!(!fx.deleting("c1"), "no delete without a surge host");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.pool_ann(Key::ActiveRotationState).is_none(), "not mirrored as draining");
    // The mirror went out with the host's record, before the freeze: both are taken back.
    assert!(fx.pool_ann(Key::DrainingAt).is_none(), "no draining-at while pending");
    assert!(fx.pool_ann(Key::SurgeHost).is_none(), "no host recorded for a host gone");
}
