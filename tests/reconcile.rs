//! The reconciler on the in-memory cluster: every spec branch and the named edge cases of the
//! reconciler's design, each its own test. The world (Karpenter, kubelet, operator) is played by hand.
mod support;

use chrono::Duration;
use noderotation::clock::Clock;
use noderotation::cluster::ObjectKind;
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
fn surge_ready_before_the_host_claim_is_matched_holds_the_escalation_until_the_path_is_known() {
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

#[test]
fn an_unschedulable_placeholder_is_warned_once_with_the_schedulers_reason() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name("c1"), |p| {
            p.status =
                serde_json::from_value(serde_json::json!({"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu."}]}))
                .ok();
        })
        .expect("placeholder");
    fx.pass();
    fx.pass();
    assert_eq!(fx.events("SurgeUnschedulable"), 1);
    let e =
        fx.world.events().into_iter().find(|e| e.reason == "SurgeUnschedulable").expect("event");
    assert!(e.message.contains("Insufficient cpu"), "{}", e.message);
}

fn placeholder_unschedulable(fx: &Fx, claim: &str, unschedulable: bool) {
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name(claim), |p| {
            let status = if unschedulable { "False" } else { "True" };
            p.status =
                serde_json::from_value(serde_json::json!({"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": status, "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu."}]}))
                .ok();
        })
        .expect("placeholder");
}

/// Claim-scoped warnings are level-triggered too: SurgeUnschedulable re-arms once the
/// placeholder was seen schedulable, and once the claim's rotation attempt ended; the latches
/// of a claim that is gone are dropped instead of piling up for the life of the process.
#[test]
fn claim_warnings_rearm_when_their_condition_clears_and_are_forgotten_with_the_claim() {
    let mut fx = Fx::new();
    started(&mut fx);
    placeholder_unschedulable(&fx, "c1", true);
    fx.pass();
    fx.pass();
    assert_eq!(fx.events("SurgeUnschedulable"), 1);
    placeholder_unschedulable(&fx, "c1", false);
    fx.pass();
    placeholder_unschedulable(&fx, "c1", true);
    fx.pass();
    assert_eq!(fx.events("SurgeUnschedulable"), 2, "re-armed after it cleared");
    // The attempt times out still unschedulable; the retry's placeholder is a new condition.
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    fx.set_claim_ann("c1", Key::FailedAt, Some("2026-11-27T03:00:00Z"));
    fx.set_pool_ann(Key::LastFailureAt, None);
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "retried");
    placeholder_unschedulable(&fx, "c1", true);
    fx.pass();
    assert_eq!(fx.events("SurgeUnschedulable"), 3, "a new attempt warns again");
    // The rotation completes and the claim is gone: nothing of it stays latched.
    fx.provision_surge("c1", "s1");
    fx.pass();
    fx.finalize("c1");
    fx.pass();
    assert!(fx.world.claim("c1").is_none());
    assert_eq!(fx.ctl.latched_warnings(), Vec::<String>::new());
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

/// The scheduler binds the claim's placeholder to `node` (the pod is not Running yet).
fn bind_placeholder(fx: &Fx, claim: &str, node: &str) {
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name(claim), |p| {
            p.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
        })
        .expect("placeholder");
}

#[test]
fn ready_timeout_rolls_back_reaps_the_surge_claim_and_pauses_the_pool() {
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

fn draining(fx: &mut Fx) {
    started(fx);
    fx.provision_surge("c1", "s1");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
}

#[test]
fn force_expiry_seen_early_is_expired_once_cleaned_up_and_released() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.delete_claim("c1"); // Karpenter's forced expiry while pending
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("expired"));
    assert!(fx.claim_ann("c1", Key::StartedAt).is_none());
    assert!(fx.placeholder("c1").is_none());
    assert!(fx.node_ann("node-c1", Key::SurgeFor).is_none());
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    fx.pass();
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.announced("emit:expired"), 1);
    assert_eq!(fx.ctl.telemetry().completed_count(POOL, Outcome::Expired), 1);
    assert_eq!(fx.events("RotationExpired"), 1);
    assert!(fx.pool_ann(Key::LastRotationAt).is_none(), "expiry consumes no cooldown");
}

#[test]
fn force_expiry_seen_late_completes_as_expired_without_cooldown() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.delete_claim("c1");
    fx.finalize("c1"); // gone before any pass saw the deletionTimestamp
    fx.pass();
    assert_eq!(fx.announced("emit:expired"), 1);
    assert_eq!(fx.announced("emit:success"), 0);
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert!(fx.pool_ann(Key::LastRotationAt).is_none());
    assert!(fx.placeholder("c1").is_none());
}

/// The surge-ready pass of a started rotation dies as it is about to make the write whose
/// description starts with `write`: that write never reaches the API server, and the claim is
/// left `draining`.
fn crash_in_the_surge_ready_pass_before(fx: &mut Fx, write: String) {
    started(fx);
    fx.provision_surge("c1", "s1");
    let hook = fx.intercept();
    hook.before_write(move |w| w.starts_with(&write), || panic!("crash"));
    let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fx.pass()));
    assert!(crashed.is_err());
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
}

#[test]
fn crash_between_the_draining_write_and_the_delete_reissues_the_delete() {
    let mut fx = Fx::new();
    crash_in_the_surge_ready_pass_before(&mut fx, "delete NodeClaim c1".into());
    assert!(!fx.deleting("c1"));
    fx.restart();
    fx.ctl.startup_sweep();
    fx.pass();
    assert!(fx.deleting("c1"), "draining without deletionTimestamp re-issues the delete");
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 1);
}

/// The same crash, and then the surge host is lost before the recovery (a spot interruption of
/// the new node): the old claim has no capacity to drain onto, and deleting it would be a
/// surge-less delete no policy allowed. The attempt goes back to pending (mirror cleared first,
/// so a forced expiry meanwhile counts as expired), reserves again, and drains onto the new host.
#[test]
fn a_surge_host_lost_before_the_reissued_delete_sends_the_rotation_back_to_pending() {
    let mut fx = Fx::new();
    crash_in_the_surge_ready_pass_before(&mut fx, "delete NodeClaim c1".into());
    assert_eq!(fx.pool_ann(Key::SurgeHost).as_deref(), Some("node-s1"));
    let started_at = fx.claim_ann("c1", Key::StartedAt);
    fx.delete_claim("s1");
    fx.finalize("s1");
    fx.restart();
    fx.ctl.startup_sweep();
    fx.pass();
    assert!(!fx.deleting("c1"), "no delete without a Ready surge (forcefulFallback is off)");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert_eq!(fx.claim_ann("c1", Key::StartedAt), started_at, "the same attempt goes on");
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    assert!(fx.pool_ann(Key::ActiveRotationState).is_none(), "no draining mirror");
    assert!(fx.pool_ann(Key::SurgeHost).is_none());
    assert!(fx.pool_ann(Key::DrainingAt).is_none());
    fx.pass(); // pending: a new placeholder
    assert!(fx.placeholder("c1").is_some(), "capacity reserved again");
    assert!(fx.cordoned("node-c1"));
    fx.provision_surge("c1", "s2");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    assert_eq!(fx.pool_ann(Key::SurgeHost).as_deref(), Some("node-s2"));
    assert!(fx.deleting("c1"));
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 1);
    assert_eq!(fx.events("ForcefulFallback"), 0);

    // The same, but the delete did go out (a pass the cache does not show yet): the claim's
    // fresh copy is deleting, so it never leaves draining and the mirror stays.
    let mut fx = Fx::new();
    crash_in_the_surge_ready_pass_before(&mut fx, "delete NodeClaim c1".into());
    fx.delete_claim("s1");
    fx.finalize("s1");
    lagging(&mut fx);
    fx.delete_claim("c1");
    fx.restart();
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    assert_eq!(fx.pool_ann(Key::ActiveRotationState).as_deref(), Some("draining"));
    assert_eq!(fx.pool_ann(Key::SurgeHost).as_deref(), Some("node-s1"));

    // The host went a moment ago and the cache still shows it Ready: the freeze re-asserted
    // before the delete reads it fresh, finds it gone, and the attempt goes back to pending.
    let mut fx = Fx::new();
    crash_in_the_surge_ready_pass_before(&mut fx, "delete NodeClaim c1".into());
    lagging(&mut fx);
    fx.delete_claim("s1");
    fx.finalize("s1");
    fx.restart();
    fx.stale_pass();
    assert!(!fx.deleting("c1"), "no delete onto a host the fresh read does not find");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.pool_ann(Key::ActiveRotationState).is_none());
}

/// Karpenter's provisioner schedules a deleting node's pods without preempting: a placeholder
/// still filling the surge node when the old claim is deleted makes it launch a second node
/// (docs/decisions/placeholder-release.md). The placeholder goes first, in the same pass.
#[test]
fn the_placeholder_is_deleted_before_the_old_claim_in_the_same_pass() {
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
fn crash_before_the_placeholder_delete_releases_it_in_draining_then_deletes_the_claim() {
    let mut fx = Fx::new();
    crash_in_the_surge_ready_pass_before(&mut fx, format!("delete Pod {NS}/"));
    assert!(fx.placeholder("c1").is_some() && !fx.deleting("c1"));
    fx.restart();
    fx.ctl.startup_sweep();
    fx.pass();
    assert!(fx.placeholder("c1").is_none(), "draining releases a placeholder left behind");
    assert!(fx.deleting("c1"), "and re-issues the delete");
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 1);
}

#[test]
fn claim_finalized_during_the_rollback_announces_no_failure_and_completes_as_expired() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(16));
    let hook = fx.intercept();
    let world = fx.world.clone();
    hook.before_write(
        |w| w.starts_with("patch NodeClaim c1") && w.contains("/state=failed"),
        move || {
            world.delete_object(&noderotation::cluster::ObjectRef::cluster(
                noderotation::cluster::ObjectKind::NodeClaim,
                "c1",
            ));
            world.remove_finalizer(
                &noderotation::cluster::ObjectRef::cluster(
                    noderotation::cluster::ObjectKind::NodeClaim,
                    "c1",
                ),
                FINALIZER,
            );
        },
    );
    fx.pass();
    assert_eq!(fx.announced("emit:failure"), 0, "no failed attempt announced");
    assert!(fx.pool_ann(Key::LastFailureAt).is_none(), "no pause stamped");
    assert_eq!(
        fx.pool_ann(Key::ActiveRotation).as_deref(),
        Some("c1"),
        "anchor left for completion"
    );
    fx.pass();
    assert_eq!(fx.announced("emit:expired"), 1, "completion records expired");
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
}

#[test]
fn a_stale_pending_view_does_not_undo_a_rollback() {
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
fn failed_to_pending_retry_does_not_reenter_on_a_stale_read() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(16));
    fx.pass(); // failed, anchor released, pause stamped
    // The operator re-anchors by hand? No: a new start picks the failed claim after its backoff
    // and the failure pause (30m retryBackoff clamped to the 24/7 occurrence).
    fx.advance(Duration::minutes(31));
    fx.pass();
    assert_eq!(
        fx.claim_ann("c1", Key::State).as_deref(),
        Some("pending"),
        "retried as a new attempt"
    );
    // A lagging cache still shows `failed` with the anchor: the retry write must lose.
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::Fixed(Duration::hours(1)));
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    fx.client.flush_cache();
    fx.set_claim_ann("c1", Key::State, Some("pending"));
    let writes_before = fx.ctl.writes();
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.ctl.writes() >= writes_before);
}

#[test]
fn static_gate_lets_an_anchored_rotation_finish_but_blocks_new_starts_and_retries() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.set_pool(|p| p.spec.replicas = Some(3));
    fx.provision_surge("c1", "s1");
    fx.pass();
    assert_eq!(
        fx.claim_ann("c1", Key::State).as_deref(),
        Some("draining"),
        "in-flight rotation continues"
    );
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 1);
    fx.claim("c2", Duration::days(10));
    fx.advance(Duration::minutes(20));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "no new start in a static pool");
    assert_eq!(fx.events("StaticNodePool"), 1);
    fx.pass();
    assert_eq!(fx.events("StaticNodePool"), 1, "warned once");
    // A failed claim still anchored in a static pool is released, not retried.
    fx.set_claim_ann("c2", Key::State, Some("failed"));
    fx.set_claim_ann("c2", Key::FailedAt, Some("2026-11-01T00:00:00Z"));
    fx.set_pool_ann(Key::ActiveRotation, Some("c2"));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert_eq!(fx.claim_ann("c2", Key::State).as_deref(), Some("failed"));
}

#[test]
fn governance_lost_mid_rotation_rolls_back_in_the_normative_order() {
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
fn startup_sweep_cleans_orphans_and_fails_unanchored_in_flight_claims() {
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
fn startup_sweep_leaves_markers_of_an_anchored_rotation() {
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

#[test]
fn operator_cordon_and_do_not_disrupt_are_never_removed() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.update_node("node-c1", |n| {
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true)
    });
    fx.pass();
    assert_eq!(
        fx.pool_ann(Key::ActiveRotation).as_deref(),
        Some("c1"),
        "a cordon does not veto rotation"
    );
    assert!(fx.node_ann("node-c1", Key::Cordoned).is_none(), "operator's cordon is not adopted");
    fx.advance(Duration::minutes(16));
    fx.pass(); // readyTimeout rollback
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(fx.cordoned("node-c1"), "operator's cordon stays");
    // The operator's own do-not-disrupt on a surge host stays too.
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    fx.set_node_ann("node-s1", Key::DoNotDisrupt, Some("true"));
    fx.pass();
    assert!(fx.node_ann("node-s1", Key::DoNotDisruptOwned).is_none());
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.node_ann("node-s1", Key::DoNotDisrupt).as_deref(), Some("true"));
}

#[test]
fn a_candidate_with_the_operators_do_not_disrupt_is_skipped() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(12)).claim("c2", Duration::days(10));
    fx.set_node_ann("node-c1", Key::DoNotDisrupt, Some("true"));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c2"));
}

#[test]
fn earliest_deadline_first_with_mixed_expire_after() {
    let mut fx = Fx::new();
    fx.claim("old-long", Duration::days(12)).claim("young-short", Duration::days(2));
    // young-short expires after 72h: deadline in 1 day, before old-long's (2 days).
    fx.world.update_claim("young-short", |c| c.spec.expire_after = Some("72h".into()));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("young-short"));
}

#[test]
fn freeze_holds_a_pending_rotation_but_readytimeout_still_rolls_it_back() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.set_pool_ann(Key::Freeze, Some("2026-11-28T05:00:00Z"));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "frozen: no start");
    // Anchored before the freeze: pending is held (no placeholder) but protected.
    fx.set_pool_ann(Key::Freeze, None);
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    fx.world.delete_now(&noderotation::cluster::ObjectRef::pod(
        NS,
        noderotation::placeholder::placeholder_name("c1"),
    ));
    fx.set_pool_ann(Key::Freeze, Some("2026-11-28T05:00:00Z"));
    fx.set_node_ann("node-c1", Key::DoNotDisrupt, None);
    fx.set_node_ann("node-c1", Key::DoNotDisruptOwned, None);
    fx.pass();
    assert!(fx.placeholder("c1").is_none(), "no placeholder re-creation while frozen");
    assert_eq!(
        fx.node_ann("node-c1", Key::DoNotDisrupt).as_deref(),
        Some("true"),
        "markers re-asserted"
    );
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.announced("emit:failure"), 1);
}

#[test]
fn window_edge_verdicts_stamp_defer_settle_and_miss_once() {
    let windows = r#"[{timezone: UTC, days: [Sat], start: "02:00", end: "04:00"}]"#;
    let mut fx = Fx::with(policy_yaml("", Some(windows)), pool_yaml(""));
    fx.claim("c1", Duration::days(10)).claim("c2", Duration::days(10));
    fx.pass(); // Sat 03:00: in window
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_some(), "stamp");
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    fx.advance(Duration::minutes(5));
    fx.provision_surge("c1", "s1");
    fx.pass(); // draining
    fx.advance(Duration::minutes(56)); // 04:01: closed, rotation still in flight (draining)
    fx.pass();
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_some(), "defer while a rotation is anchored");
    fx.finalize("c1");
    fx.pass(); // completes; c2 still a candidate -> missed
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_none() || fx.announced("emit:window_missed") == 0);
    fx.pass();
    fx.pass();
    assert_eq!(fx.announced("emit:window_missed"), 1);
    assert_eq!(fx.events("WindowMissed"), 1, "at most once per occurrence");
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_none());
    // Next occurrence: c2 rotates; at close nothing is left -> settled, nothing announced.
    fx.advance(Duration::days(7) - Duration::hours(1) - Duration::minutes(35)); // next Sat ~02:30
    fx.pass();
    assert_eq!(
        fx.pool_ann(Key::ActiveRotation).as_deref(),
        Some("c2"),
        "{:?}",
        fx.ctl.announcements()
    );
    assert!(
        fx.placeholder("c2").is_some(),
        "state {:?} anns {:?}",
        fx.claim_ann("c2", Key::State),
        fx.world.pool(POOL).map(|p| p.metadata.annotations.clone())
    );
    fx.provision_surge("c2", "s2");
    fx.pass();
    fx.finalize("c2");
    fx.pass();
    fx.world.delete_now(&noderotation::cluster::ObjectRef::cluster(
        noderotation::cluster::ObjectKind::NodeClaim,
        "s1",
    ));
    fx.world.delete_now(&noderotation::cluster::ObjectRef::cluster(
        noderotation::cluster::ObjectKind::NodeClaim,
        "s2",
    ));
    fx.advance(Duration::hours(2));
    fx.pass();
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_none(), "settled");
    assert_eq!(fx.announced("emit:window_missed"), 1);
}

/// A stuck drain (past tGP + buffer) does not defer the window's verdict: it cannot finish in
/// time, and deferring carried the stamp into every later occurrence, so no WindowMissed was
/// raised for as long as the drain hung.
#[test]
fn a_stuck_drain_does_not_silence_window_missed() {
    let windows = r#"[{timezone: UTC, days: [Sat], start: "02:00", end: "04:00"}]"#;
    let mut fx = Fx::with(policy_yaml("", Some(windows)), pool_yaml(""));
    fx.claim("c1", Duration::days(10)).claim("c2", Duration::days(10));
    fx.pass(); // Sat 03:00: in window
    fx.advance(Duration::minutes(5));
    fx.provision_surge("c1", "s1");
    fx.pass(); // 03:05: c1 draining; its drain never ends (a volume that does not detach)
    assert!(fx.deleting("c1"));
    fx.advance(Duration::minutes(56)); // 04:01: closed, the drain not stuck yet
    fx.pass();
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_some(), "deferred: c1 can still finish");
    fx.advance(Duration::minutes(69)); // 05:10: stuck since 04:07 (tGP 1h + buffer 2m)
    fx.pass();
    assert_eq!(fx.events("DrainStuck"), 1);
    assert_eq!(fx.announced("emit:window_missed"), 1, "c2 was left: missed");
    assert_eq!(fx.events("WindowMissed"), 1);
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_none());
    // The next occurrence is stamped and judged on its own.
    fx.advance(Duration::days(7) - Duration::hours(2) - Duration::minutes(40)); // Sat 02:30
    fx.pass();
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_some(), "stamped again");
    fx.advance(Duration::minutes(91)); // 04:01
    fx.pass();
    assert_eq!(fx.announced("emit:window_missed"), 2);
}

#[test]
fn insufficient_headroom_is_warned_once_per_distinct_shortfall() {
    let mut fx = Fx::with(policy_yaml("", None), pool_yaml("  limits: {cpu: \"10\"}"));
    fx.claim("c1", Duration::days(10));
    fx.world
        .update_pool(POOL, |p| {
            p.status = serde_json::from_value(serde_json::json!({"resources": {"cpu": "8"}})).ok();
        })
        .expect("pool");
    fx.pass();
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "no start without headroom");
    assert_eq!(fx.events("InsufficientHeadroom"), 1, "deduplicated");
    fx.world
        .update_pool(POOL, |p| {
            p.status = serde_json::from_value(serde_json::json!({"resources": {"cpu": "9"}})).ok();
        })
        .expect("pool");
    fx.pass();
    assert_eq!(fx.events("InsufficientHeadroom"), 2, "a different shortfall warns again");
}

#[test]
fn forceful_fallback_only_when_enabled_and_too_close_to_the_deadline() {
    let policy = policy_yaml(", forcefulFallback: {enabled: true}", None);
    let mut fx = Fx::with(policy, pool_yaml(""));
    fx.claim("far", Duration::days(10));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::RotationMode), None, "deadline far: surge");
    let mut fx = Fx::with(policy_yaml(", forcefulFallback: {enabled: true}", None), pool_yaml(""));
    fx.claim("close", Duration::days(14) - Duration::minutes(30)); // deadline in 30m < t_rot 1h17m
    fx.pass();
    assert_eq!(fx.pool_ann(Key::RotationMode).as_deref(), Some("forceful-fallback"));
    assert_eq!(fx.claim_ann("close", Key::State).as_deref(), Some("draining"));
    assert!(fx.deleting("close"));
    assert!(fx.placeholder("close").is_none(), "no surge");
    assert_eq!(fx.announced("emit:forceful_fallback"), 1);
    let mut fx = Fx::new(); // disabled: surge even when close
    fx.claim("close", Duration::days(14) - Duration::minutes(30));
    fx.pass();
    assert!(fx.pool_ann(Key::RotationMode).is_none());
    assert!(fx.placeholder("close").is_some());
}

#[test]
fn conflicting_writes_are_retried_and_announced_exactly_once() {
    let mut fx = Fx::new();
    let mut n = 0u32;
    fx.client.set_faults(move |call: &noderotation::cluster::memory::Call<'_>| {
        n += 1;
        if call.verb.is_write() && call.precondition && n.is_multiple_of(3) {
            noderotation::cluster::memory::Fault::Conflict
        } else {
            noderotation::cluster::memory::Fault::Proceed
        }
    });
    fx.claim("c1", Duration::days(10));
    for _ in 0..3 {
        fx.pass();
    }
    fx.provision_surge("c1", "s1");
    for _ in 0..3 {
        fx.pass();
    }
    fx.finalize("c1");
    for _ in 0..3 {
        fx.pass();
    }
    assert_eq!(fx.announced("emit:success"), 1);
    assert_eq!(fx.events("RotationCompleted"), 1);
    assert_eq!(fx.events("RotationStarted"), 1);
    assert_eq!(fx.ctl.telemetry().completed_count(POOL, Outcome::Success), 1);
}

fn lagging(fx: &mut Fx) {
    fx.client.flush_cache();
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::Fixed(Duration::hours(1)));
}

fn obj(kind: noderotation::cluster::ObjectKind, name: &str) -> noderotation::cluster::ObjectRef {
    noderotation::cluster::ObjectRef::cluster(kind, name)
}

use noderotation::cluster::ObjectKind::RotationPolicy as PolicyKind;

#[test]
fn tied_policies_are_a_conflict_warned_once_and_rotate_nothing() {
    let mut fx = Fx::new();
    let mut twin = policy_yaml("", None);
    twin.metadata.name = Some("rotate-a-twin".into());
    twin.metadata.uid = Some("twin-uid".into());
    fx.world.apply_policy(twin).expect("twin");
    fx.claim("c1", Duration::days(10));
    fx.pass();
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert_eq!(fx.events("PolicyConflict"), 1);
    let conflict = noderotation::telemetry::PoolGauge::PolicyConflict;
    assert_eq!(fx.ctl.telemetry().pool_gauge(POOL, conflict), Some(1.0));
}

#[test]
fn an_invalid_policy_governs_nothing() {
    let mut policy = policy_yaml("", None);
    policy.spec.maintenance_windows[0].timezone = "Mars/Olympus".into();
    let mut fx = Fx::with(policy, pool_yaml(""));
    fx.claim("c1", Duration::days(10));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
}

#[test]
fn governance_lost_with_an_anchor_another_pass_cleared_announces_nothing() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.world.delete_now(&obj(PolicyKind, "rotate-a"));
    lagging(&mut fx);
    fx.set_pool_ann(Key::ActiveRotation, None);
    fx.stale_pass();
    assert_eq!(fx.events("GovernanceLost"), 0);
}

#[test]
fn unreadable_window_stamp_outside_the_window_is_cleared_silently() {
    let windows = r#"[{timezone: UTC, days: [Mon], start: "02:00", end: "04:00"}]"#;
    let mut fx = Fx::with(policy_yaml("", Some(windows)), pool_yaml(""));
    fx.set_pool_ann(Key::WindowOpenedAt, Some("yesterday"));
    fx.pass();
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_none());
    assert_eq!(fx.events("WindowMissed"), 0);
}

#[test]
fn unreadable_freeze_counts_as_frozen_and_is_warned() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.set_pool_ann(Key::Freeze, Some("until friday"));
    fx.pass();
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert_eq!(fx.events("InvalidFreeze"), 1);
}

#[test]
fn a_fatal_feasibility_finding_blocks_new_starts() {
    let yaml = r#"
apiVersion: noderotation.io/v1alpha1
kind: RotationPolicy
metadata: {name: rotate-a, uid: policy-uid, generation: 1}
spec:
  nodePoolSelector: {matchLabels: {team: a}}
  maintenanceWindows: [{timezone: UTC, days: [Sat], start: "00:00", end: "06:00"}]
"#;
    let policy: noderotation::policy::crd::RotationPolicy =
        serde_norway::from_str(yaml).expect("policy");
    let mut fx = Fx::with(policy, pool_yaml(""));
    fx.claim("c1", Duration::days(13) + Duration::hours(20));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "weekly window with E=14d, K=2: A <= 0");
    assert_eq!(fx.events("Infeasible"), 1);
}

#[test]
fn a_start_whose_anchor_write_loses_does_nothing() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    lagging(&mut fx);
    fx.set_pool_ann(Key::ActiveRotation, Some("other"));
    fx.stale_pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("other"));
    assert!(fx.placeholder("c1").is_none());
    assert_eq!(fx.events("RotationStarted"), 0);
    let mut fx = Fx::with(policy_yaml(", forcefulFallback: {enabled: true}", None), pool_yaml(""));
    fx.claim("close", Duration::days(14) - Duration::minutes(30));
    lagging(&mut fx);
    fx.set_pool_ann(Key::ActiveRotation, Some("other"));
    fx.stale_pass();
    assert!(!fx.deleting("close"), "a lost anchor deletes nothing");
    assert_eq!(fx.announced("emit:forceful_fallback"), 0);
}

#[test]
fn an_expired_claim_still_anchored_is_cleaned_up_without_announcing() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.set_claim_ann("c1", Key::State, Some("expired"));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert!(fx.placeholder("c1").is_none());
    assert!(!fx.cordoned("node-c1"));
    assert_eq!(fx.announced("emit:expired"), 0);
}

#[test]
fn completion_already_released_by_another_pass_announces_nothing() {
    let mut fx = Fx::new();
    draining(&mut fx);
    fx.finalize("c1");
    fx.client.flush_cache();
    lagging(&mut fx);
    fx.set_pool_ann(Key::ActiveRotation, None);
    fx.stale_pass();
    assert_eq!(fx.announced("emit:success"), 0);
    assert_eq!(fx.announced("emit:expired"), 0);
}

/// A pod that requests nothing (BestEffort), owned like the workload.
fn best_effort_pod(name: &str, node: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut pod = workload_pod(name, node);
    if let Some(spec) = pod.spec.as_mut() {
        for c in &mut spec.containers {
            c.resources = None;
        }
    }
    pod
}

/// A node whose pods to reschedule request nothing (BestEffort) has no capacity to reserve: it
/// is rotated inside the window without a surge, marked and announced as such (not as the
/// forceful fallback), and completes as a success; it never counts as a failure nor pauses the
/// pool.
#[test]
fn a_node_with_nothing_to_reserve_is_rotated_without_a_surge() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.apply_pod(best_effort_pod("web-c1", "node-c1")).expect("BestEffort pod");
    fx.pass();
    assert!(fx.placeholder("c1").is_none(), "nothing to reserve: no placeholder");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    assert!(fx.deleting("c1"), "deleted inside the window, without a surge");
    assert_eq!(fx.pool_ann(Key::RotationMode).as_deref(), Some("nothing-to-reserve"));
    assert_eq!(fx.pool_ann(Key::ActiveRotationState).as_deref(), Some("draining"));
    assert!(fx.pool_ann(Key::DrainingAt).is_some());
    assert_eq!(fx.events("NothingToReserve"), 1);
    assert_eq!(fx.announced("emit:nothing_to_reserve"), 1);
    assert_eq!(fx.ctl.telemetry().nothing_to_reserve_count(POOL), 1);
    for other in ["SurgeClampRefused", "ForcefulFallback", "RotationFailed"] {
        assert_eq!(fx.events(other), 0, "{other}");
    }
    assert_eq!(fx.announced("emit:forceful_fallback"), 0);
    fx.pass();
    assert_eq!(fx.events("NothingToReserve"), 1, "announced once");
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 1);
    assert_eq!(fx.announced("emit:failure"), 0);
    assert!(fx.pool_ann(Key::LastFailureAt).is_none(), "no failure pause");
    assert!(fx.pool_ann(Key::LastRotationAt).is_some(), "a success: the cooldown applies");
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert!(fx.pool_ann(Key::RotationMode).is_none(), "cleared with the anchor");
}

/// A node with no pods to reschedule at all is the same case.
#[test]
fn an_empty_node_is_rotated_without_a_surge() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.delete_now(&noderotation::cluster::ObjectRef::pod("apps", "web-c1"));
    fx.pass();
    assert!(fx.placeholder("c1").is_none());
    assert!(fx.deleting("c1"));
    assert_eq!(fx.events("NothingToReserve"), 1);
    assert_eq!(fx.announced("emit:failure"), 0);
}

/// The surge-less path's first write loses (the anchor went since the pass read the pool, a hand
/// edit): the pass owns nothing more, marks nothing and deletes nothing.
#[test]
fn a_node_with_nothing_to_reserve_whose_anchor_went_is_not_deleted() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.apply_pod(best_effort_pod("web-c1", "node-c1")).expect("BestEffort pod");
    let hook = fx.intercept();
    let world = fx.world.clone();
    hook.before_write(
        |w| w.contains("rotation-mode=nothing-to-reserve"),
        move || {
            world.update_pool(POOL, |p| {
                if let Some(a) = p.metadata.annotations.as_mut() {
                    a.remove(Key::ActiveRotation.full());
                }
            });
        },
    );
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(!fx.deleting("c1"), "no anchor, no delete");
    assert!(fx.pool_ann(Key::RotationMode).is_none());
    assert_eq!(fx.events("NothingToReserve"), 0);
}

/// The pods request something but the DaemonSets fill the node: the clamp lowers every request
/// to 0, the placeholder is refused and the attempt rolls back, as §3.3 says.
#[test]
fn a_placeholder_the_clamp_lowers_to_nothing_is_refused_and_rolled_back() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    let ds: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ds-c1", "namespace": "kube-system",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds", "controller": true}]},
        "spec": {"nodeName": "node-c1", "containers": [{"name": "agent", "image": "agent",
            "resources": {"requests": {"cpu": "4", "memory": "16Gi"}}}]},
        "status": {"phase": "Running"}
    }))
    .expect("DaemonSet pod");
    fx.world.apply_pod(ds).expect("DaemonSet pod");
    fx.pass();
    assert!(fx.placeholder("c1").is_none());
    assert_eq!(fx.events("SurgeClampRefused"), 1);
    assert_eq!(fx.events("NothingToReserve"), 0);
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(!fx.deleting("c1"));
    assert_eq!(fx.announced("emit:failure"), 1);
    // The failure says what happened: nothing waited for readyTimeout.
    let failed = fx.event_messages("RotationFailed");
    assert_eq!(failed.len(), 1);
    assert!(failed[0].contains("would request nothing"), "{}", failed[0]);
    assert!(!failed[0].contains("readyTimeout"), "{}", failed[0]);
}

fn priority_class(
    value: i32,
    policy: Option<&str>,
) -> k8s_openapi::api::scheduling::v1::PriorityClass {
    k8s_openapi::api::scheduling::v1::PriorityClass {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("noderotation-placeholder".into()),
            ..Default::default()
        },
        value,
        preemption_policy: policy.map(str::to_string),
        ..Default::default()
    }
}

/// A placeholder requests a node's worth of resources and must never preempt a workload: while
/// the PriorityClass it names is not negative or may preempt (recreated so while the operator
/// runs), a pending rotation creates none and warns once; a class made safe again lets the next
/// pass create it, and one that stays unsafe ends in the readyTimeout rollback.
#[test]
fn no_placeholder_is_created_while_its_priority_class_is_unsafe() {
    let mut fx = Fx::new();
    fx.world.set_placeholder_class(Some(priority_class(1000, None)));
    fx.claim("c1", Duration::days(10));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.placeholder("c1").is_none(), "no placeholder under an unsafe class");
    let warned = fx.event_messages("PlaceholderClassUnsafe");
    assert_eq!(warned.len(), 1);
    assert!(warned[0].contains("\"noderotation-placeholder\" is not safe"), "{}", warned[0]);
    assert!(warned[0].contains("its value is 1000"), "{}", warned[0]);
    assert!(warned[0].contains("preemptionPolicy is PreemptLowerPriority"), "{}", warned[0]);
    fx.advance(Duration::minutes(1));
    fx.pass();
    assert!(fx.placeholder("c1").is_none());
    assert_eq!(fx.events("PlaceholderClassUnsafe"), 1, "warned once while it lasts");

    // Recreated safe: the next pass creates the placeholder.
    fx.world.set_placeholder_class(Some(priority_class(-10, Some("Never"))));
    fx.advance(Duration::minutes(1));
    fx.pass();
    assert!(fx.placeholder("c1").is_some(), "created once the class is safe");

    // Unsafe from the start of another rotation to its readyTimeout: rolled back, no placeholder.
    let mut fx = Fx::new();
    fx.world.set_placeholder_class(Some(priority_class(-10, Some("PreemptLowerPriority"))));
    fx.claim("c1", Duration::days(10));
    fx.pass();
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert!(fx.placeholder("c1").is_none());
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.announced("emit:failure"), 1);
}

/// An admission webhook or a ResourceQuota rejects the placeholder: the pass fails and is
/// retried until readyTimeout rolls the rotation back, and the failure names the rejection
/// instead of claiming the surge was "not ready".
#[test]
fn a_rejected_placeholder_is_named_in_the_rotation_failure() {
    use noderotation::cluster::memory::{ApiVerb, Fault};
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.set_faults(|call: &noderotation::cluster::memory::Call<'_>| {
        if call.verb == ApiVerb::Create { Fault::Forbidden } else { Fault::Proceed }
    });
    fx.client.flush_cache();
    let err = fx.ctl.reconcile_pool(POOL).expect_err("the create is rejected");
    assert!(err.to_string().contains("forbidden"), "{err}");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.placeholder("c1").is_none());
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    let failed = fx.event_messages("RotationFailed");
    assert_eq!(failed.len(), 1);
    assert!(failed[0].contains("rejected") && failed[0].contains("forbidden"), "{}", failed[0]);
    assert!(!failed[0].contains("not ready"), "{}", failed[0]);
    // A later attempt whose placeholder is created and then times out says so again.
    fx.world.clear_faults();
    fx.set_claim_ann("c1", Key::FailedAt, Some("2026-11-27T03:00:00Z"));
    fx.set_pool_ann(Key::LastFailureAt, None);
    fx.pass();
    assert!(fx.placeholder("c1").is_some(), "retried: {:?}", fx.claim_ann("c1", Key::State));
    fx.advance(Duration::minutes(16));
    fx.pass();
    let failed = fx.event_messages("RotationFailed");
    assert_eq!(failed.len(), 2);
    assert!(failed[1].contains("not ready within readyTimeout"), "{}", failed[1]);
}

#[test]
fn force_expiry_of_a_finalized_claim_seen_through_a_stale_cache_owns_nothing() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.delete_claim("c1");
    fx.client.flush_cache();
    lagging(&mut fx);
    fx.finalize("c1");
    fx.stale_pass();
    assert_eq!(fx.announced("emit:expired"), 0, "the pass that wrote nothing announces nothing");
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
}

#[test]
fn a_drain_past_tgp_plus_buffer_is_reported_stuck_and_keeps_the_gate() {
    let mut fx = Fx::new();
    draining(&mut fx);
    fx.advance(Duration::minutes(63));
    fx.pass();
    assert_eq!(fx.events("DrainStuck"), 1);
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
}

#[test]
fn a_failed_claim_still_anchored_and_force_expired_is_claimed_once() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    fx.set_claim_ann("c1", Key::FailedAt, Some("2026-11-28T02:59:00Z"));
    fx.delete_claim("c1");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("expired"));
    assert_eq!(fx.announced("emit:expired"), 1);
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    // The same through a stale cache after the claim is gone: nothing owned, nothing said.
    let mut fx = Fx::new();
    started(&mut fx);
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    fx.delete_claim("c1");
    fx.client.flush_cache();
    lagging(&mut fx);
    fx.finalize("c1");
    fx.stale_pass();
    assert_eq!(fx.announced("emit:expired"), 0);
}

/// Every scenario above, for the coverage and mutation checks below.
const SCENARIOS: &[(&str, fn())] = &[
    ("full_surge_rotation", full_surge_rotation_reserves_capacity_then_drains_and_completes_once),
    (
        "surge_path_unknown",
        surge_ready_before_the_host_claim_is_matched_holds_the_escalation_until_the_path_is_known,
    ),
    ("cooldown", cooldown_after_a_success_holds_the_next_start),
    ("ready_timeout", ready_timeout_rolls_back_reaps_the_surge_claim_and_pauses_the_pool),
    ("force_expiry_early", force_expiry_seen_early_is_expired_once_cleaned_up_and_released),
    ("force_expiry_late", force_expiry_seen_late_completes_as_expired_without_cooldown),
    ("crash_before_delete", crash_between_the_draining_write_and_the_delete_reissues_the_delete),
    (
        "surge_lost_before_delete",
        a_surge_host_lost_before_the_reissued_delete_sends_the_rotation_back_to_pending,
    ),
    ("placeholder_first", the_placeholder_is_deleted_before_the_old_claim_in_the_same_pass),
    (
        "crash_before_placeholder_delete",
        crash_before_the_placeholder_delete_releases_it_in_draining_then_deletes_the_claim,
    ),
    (
        "finalized_during_rollback",
        claim_finalized_during_the_rollback_announces_no_failure_and_completes_as_expired,
    ),
    ("stale_pending_view", a_stale_pending_view_does_not_undo_a_rollback),
    ("stale_retry", failed_to_pending_retry_does_not_reenter_on_a_stale_read),
    (
        "surge_host_taken",
        a_placeholder_on_the_surge_host_of_another_rotation_waits_for_that_rotation,
    ),
    (
        "surge_host_taken_stale",
        a_surge_host_another_rotation_recorded_since_the_cache_was_read_is_not_taken,
    ),
    ("reap_another_surge", a_rollback_never_reaps_the_surge_claim_another_rotation_recorded),
    ("static_gate", static_gate_lets_an_anchored_rotation_finish_but_blocks_new_starts_and_retries),
    ("governance_lost", governance_lost_mid_rotation_rolls_back_in_the_normative_order),
    ("sweep_orphans", startup_sweep_cleans_orphans_and_fails_unanchored_in_flight_claims),
    ("sweep_anchored", startup_sweep_leaves_markers_of_an_anchored_rotation),
    ("empty_anchor", an_empty_anchor_is_read_as_absent_and_warned),
    ("operator_protections", operator_cordon_and_do_not_disrupt_are_never_removed),
    ("operator_opt_out", a_candidate_with_the_operators_do_not_disrupt_is_skipped),
    ("earliest_deadline", earliest_deadline_first_with_mixed_expire_after),
    ("freeze", freeze_holds_a_pending_rotation_but_readytimeout_still_rolls_it_back),
    ("window_edge", window_edge_verdicts_stamp_defer_settle_and_miss_once),
    ("window_stuck_drain", a_stuck_drain_does_not_silence_window_missed),
    ("headroom", insufficient_headroom_is_warned_once_per_distinct_shortfall),
    ("forceful_fallback", forceful_fallback_only_when_enabled_and_too_close_to_the_deadline),
    ("conflicts", conflicting_writes_are_retried_and_announced_exactly_once),
    ("policy_conflict", tied_policies_are_a_conflict_warned_once_and_rotate_nothing),
    ("policy_invalid", an_invalid_policy_governs_nothing),
    (
        "governance_lost_unowned",
        governance_lost_with_an_anchor_another_pass_cleared_announces_nothing,
    ),
    ("window_unreadable", unreadable_window_stamp_outside_the_window_is_cleared_silently),
    ("freeze_unreadable", unreadable_freeze_counts_as_frozen_and_is_warned),
    ("infeasible", a_fatal_feasibility_finding_blocks_new_starts),
    ("anchor_lost", a_start_whose_anchor_write_loses_does_nothing),
    ("expired_cleanup", an_expired_claim_still_anchored_is_cleaned_up_without_announcing),
    ("complete_unowned", completion_already_released_by_another_pass_announces_nothing),
    ("placeholder_refused", a_placeholder_the_clamp_lowers_to_nothing_is_refused_and_rolled_back),
    ("placeholder_class_unsafe", no_placeholder_is_created_while_its_priority_class_is_unsafe),
    ("nothing_to_reserve", a_node_with_nothing_to_reserve_is_rotated_without_a_surge),
    ("retry_lanes", a_retry_from_failed_rechecks_the_lane_limit),
    (
        "future_started_at",
        a_started_at_in_the_future_is_warned_and_restamped_so_ready_timeout_comes,
    ),
    ("future_failed_at", a_failed_at_in_the_future_is_warned_and_not_obeyed),
    ("nothing_to_reserve_empty", an_empty_node_is_rotated_without_a_surge),
    ("nothing_to_reserve_lost", a_node_with_nothing_to_reserve_whose_anchor_went_is_not_deleted),
    ("expiry_unowned", force_expiry_of_a_finalized_claim_seen_through_a_stale_cache_owns_nothing),
    ("drain_stuck", a_drain_past_tgp_plus_buffer_is_reported_stuck_and_keeps_the_gate),
    ("failed_expired", a_failed_claim_still_anchored_and_force_expired_is_claimed_once),
    (
        "mirror_reasserted",
        a_draining_mirror_stripped_by_a_gitops_sync_is_reasserted_and_the_rotation_succeeds,
    ),
    (
        "foreign_anchor",
        an_anchor_naming_another_pools_claim_is_cleared_with_a_warning_and_touches_nothing,
    ),
    ("foreign_reap", the_readytimeout_reap_never_deletes_another_pools_claim),
    ("surge_unschedulable", an_unschedulable_placeholder_is_warned_once_with_the_schedulers_reason),
    ("forceful_crash", a_crash_after_the_first_write_of_a_forceful_start_never_becomes_a_surge),
    ("mirrors_write_once", a_retried_escalation_keeps_the_first_draining_mirrors),
    (
        "failed_at_unreadable",
        a_failed_claim_without_a_readable_failed_at_is_retried_once_not_restarted_every_minute,
    ),
    (
        "gate_stamp_unreadable",
        an_unreadable_gate_stamp_is_warned_once_and_restamped_so_the_gate_reopens,
    ),
    (
        "surge_path_unknown",
        surge_ready_before_the_host_claim_is_matched_holds_the_escalation_until_the_path_is_known,
    ),
    ("anchor_removed", an_anchor_removed_by_hand_is_repaired_within_a_tick),
    (
        "pool_deleted",
        a_nodepool_deleted_mid_rotation_releases_its_placeholder_and_markers_within_a_tick,
    ),
    ("tick_fresh_anchors", the_tick_judges_orphans_on_a_fresh_read_of_the_anchors),
    ("placeholder_impostor", a_pod_named_like_the_placeholder_is_never_taken_for_surge_capacity),
    ("sweep_by_uid", the_sweep_deletes_the_placeholder_it_judged_by_its_uid),
    ("unfreeze_fresh", unfreeze_finds_the_surge_host_from_a_fresh_read_not_a_stale_node_list),
    ("never_ready_reap", a_surge_node_that_never_turns_ready_is_reaped_at_rollback),
    ("surge_outlives_no_exit", a_never_ready_surge_claim_outlives_no_exit_of_its_rotation),
    (
        "sweep_reaps_marked_only",
        the_sweep_reaps_only_a_marked_surge_claim_that_never_turned_ready_and_hosts_nothing,
    ),
    ("delete_conflict", a_conflict_on_the_reap_or_placeholder_delete_is_rechecked_and_retried),
    ("stale_start", a_start_judged_on_a_lagging_cache_loses_to_a_failure_stamped_since),
    ("fresh_start_gates", a_start_gate_closed_on_the_fresh_read_holds_the_start),
    ("fresh_retry_gates", a_retry_whose_gate_closed_on_the_fresh_read_is_held),
    (
        "stalled_surge_ready",
        a_pass_stalled_in_the_surge_ready_writes_does_not_drain_a_rolled_back_claim,
    ),
    (
        "stalled_rollback",
        a_rollback_stalled_before_its_failure_write_does_not_fail_the_next_attempt,
    ),
];

#[test]
fn every_rule_row_fires_in_some_scenario() {
    for (name, scenario) in SCENARIOS {
        let ok = std::panic::catch_unwind(scenario).is_ok();
        assert!(ok || *name == "crash_before_delete", "scenario {name} failed");
    }
    let fired = coverage();
    let engine = engine();
    let missing: Vec<&str> = engine.row_ids().filter(|id| !fired.contains(*id)).collect();
    assert!(missing.is_empty(), "rule rows no test fired ({}): {missing:?}", missing.len());
}

/// Row mutation: for every row, a copy of `rules/` whose guard is negated (`when: "not (G)"`,
/// or `when: "false"` for a row without one). Each mutant must be rejected by the checker or
/// make some scenario fail. Prints killed/total. Run by tests/all.sh (it silences panics, so
/// it runs alone: `cargo test --test reconcile -- --ignored --test-threads=1`).
#[test]
#[ignore = "mutation run: tests/all.sh runs it on its own thread"]
fn every_rule_guard_matters() {
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    let book = noderotation::rulebook::Rulebook::load_dir(&rules).expect("rules load");
    let source = std::fs::read_to_string(rules.join("transitions.ron")).expect("transitions.ron");
    let dir = std::env::temp_dir().join(format!("noderotation-mutants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for f in noderotation::rulebook::check::FILES {
        std::fs::copy(rules.join(f), dir.join(f)).expect("copy rules");
    }
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (mut total, mut by_checker, mut by_tests) = (0, 0, 0);
    let mut survivors = Vec::new();
    for (_, row) in book.rows() {
        total += 1;
        let id = &row.decl.id;
        let at = source.find(&format!("id: \"{id}\"")).expect("row in source");
        let mutated = match &row.decl.when {
            Some(g) => {
                let needle = format!("when: \"{g}\"");
                let rel = source[at..].find(&needle).expect("guard in source");
                format!(
                    "{}when: \"not ({g})\"{}",
                    &source[..at + rel],
                    &source[at + rel + needle.len()..]
                )
            }
            None => {
                let end = at + format!("id: \"{id}\"").len();
                format!("{}, when: \"false\"{}", &source[..end], &source[end..])
            }
        };
        std::fs::write(dir.join("transitions.ron"), mutated).expect("write mutant");
        let engine = match noderotation::engine::Engine::load_dir(&dir) {
            Err(_) => {
                by_checker += 1;
                continue;
            }
            Ok(e) => std::sync::Arc::new(e),
        };
        let killer = SCENARIOS.iter().find(|(_, scenario)| {
            with_engine(engine.clone(), || std::panic::catch_unwind(scenario).is_err())
        });
        match killer {
            Some(_) => by_tests += 1,
            None => survivors.push(id.clone()),
        }
    }
    std::panic::set_hook(quiet);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "mutants killed: {}/{total} ({by_checker} rejected by the checker, {by_tests} by scenarios)",
        by_checker + by_tests
    );
    assert!(
        survivors.is_empty(),
        "surviving mutants (no test notices these rows' guards): {survivors:?}"
    );
}

#[test]
fn a_draining_mirror_stripped_by_a_gitops_sync_is_reasserted_and_the_rotation_succeeds() {
    let mut fx = Fx::new();
    draining(&mut fx);
    fx.set_pool_ann(Key::ActiveRotationState, None); // e.g. Argo CD re-applied the NodePool
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotationState).as_deref(), Some("draining"));
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 1);
    assert_eq!(fx.announced("emit:expired"), 0);
}

#[test]
fn gauges_describe_the_pool_and_are_removed_when_it_loses_its_policy() {
    use noderotation::telemetry::PoolGauge;
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10)).claim("c2", Duration::days(10));
    fx.pass();
    let t = fx.ctl.telemetry();
    assert_eq!(t.pool_gauge(POOL, PoolGauge::InProgress), Some(1.0));
    assert_eq!(t.pool_gauge(POOL, PoolGauge::Candidates), Some(1.0), "c2 left");
    assert_eq!(t.pool_gauge(POOL, PoolGauge::WindowActive), Some(1.0));
    assert_eq!(t.pool_gauge(POOL, PoolGauge::TRotBoundSeconds), Some(77.0 * 60.0));
    assert!(t.render().contains("noderotation_in_progress{nodepool=\"pool-a\"} 1"));
    fx.world.delete_now(&obj(PolicyKind, "rotate-a"));
    fx.pass();
    assert_eq!(fx.ctl.telemetry().pool_gauge(POOL, PoolGauge::InProgress), None, "series removed");
}

#[test]
fn feasibility_warnings_and_short_lead_claims_are_warned_once() {
    let windows = r#"[{timezone: UTC, days: [Wed, Sat], start: "02:00", end: "06:00"}]"#;
    let yaml = format!(
        r#"
apiVersion: noderotation.io/v1alpha1
kind: RotationPolicy
metadata: {{name: rotate-a, uid: policy-uid, generation: 1}}
spec:
  nodePoolSelector: {{matchLabels: {{team: a}}}}
  minRotationChances: 1
  maintenanceWindows: {windows}
"#
    );
    let policy: noderotation::policy::crd::RotationPolicy =
        serde_norway::from_str(&yaml).expect("policy");
    let mut fx = Fx::with(policy, pool_yaml(""));
    fx.claim("c1", Duration::days(1));
    fx.world.update_claim("c1", |c| c.spec.expire_after = Some("48h".into())).expect("claim");
    fx.pass();
    fx.pass();
    assert_eq!(fx.events("KBelowTwo"), 1, "K = 1 warned once: {:?}", fx.world.events());
    assert_eq!(fx.events("ShortLead"), 1, "a 48h claim cannot get K chances of a 4-day period");
}

#[test]
fn policy_status_reports_matched_rotating_and_ready() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.ctl.update_policy_status();
    let status =
        fx.world.policy("rotate-a").and_then(|p| p.status.clone()).expect("status written");
    assert_eq!(status.matched_node_pools, 1);
    assert_eq!(status.rotating_node_pools, 1);
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "Accepted"));
    let mut twin = policy_yaml("", None);
    twin.metadata.name = Some("rotate-a-twin".into());
    fx.world.apply_policy(twin).expect("twin");
    fx.client.flush_cache();
    fx.ctl.update_policy_status();
    let status = fx.world.policy("rotate-a").and_then(|p| p.status.clone()).expect("status");
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready");
    assert_eq!(ready.reason, "Conflict");
}

#[test]
fn a_throughput_warning_is_not_raised_again_when_the_node_count_moves() {
    // One hour a week: a few starts per week against a pool whose nodes arrive faster.
    let windows = r#"[{timezone: UTC, days: [Wed], start: "02:00", end: "03:00"}]"#;
    let mut fx = Fx::with(policy_yaml("", Some(windows)), pool_yaml(""));
    for i in 0..12 {
        fx.claim(&format!("c{i}"), Duration::days(1));
    }
    fx.pass();
    assert_eq!(fx.events("ThroughputBelowArrival"), 1, "{:?}", fx.world.events());
    // Scale-up and consolidation move N: the same condition, the same remedy, no new Event.
    fx.claim("c12", Duration::days(1));
    fx.pass();
    fx.world.delete_now(&obj(noderotation::cluster::ObjectKind::NodeClaim, "c0"));
    fx.world.delete_now(&obj(noderotation::cluster::ObjectKind::NodeClaim, "c1"));
    fx.pass();
    assert_eq!(fx.events("ThroughputBelowArrival"), 1, "{:?}", fx.world.events());
}

/// A copy of pool-a named `name`, annotations and all (a copied manifest, a GitOps template),
/// with `team` as its selector label.
fn clone_pool(fx: &Fx, name: &str, team: &str) {
    let mut pool = fx.world.pool(POOL).expect("pool-a").as_ref().clone();
    pool.metadata.name = Some(name.into());
    pool.metadata.uid = None;
    pool.metadata.resource_version = None;
    pool.metadata.creation_timestamp = None;
    pool.metadata.labels.get_or_insert_with(Default::default).insert("team".into(), team.into());
    fx.world.apply_pool(pool).expect("pool copy");
}

fn other_pool_ann(fx: &Fx, pool: &str, key: Key) -> Option<String> {
    fx.world.pool(pool)?.metadata.annotations.as_ref()?.get(key.full()).cloned()
}

fn pass_on(fx: &mut Fx, pool: &str) {
    fx.client.flush_cache();
    fx.ctl.reconcile_pool(pool).unwrap_or_else(|e| panic!("pass failed: {e}"));
}

/// pool-a's rotation of c1 is intact: anchored, pending, frozen, cordoned, placeholder kept.
fn rotation_of_c1_untouched(fx: &Fx) {
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.placeholder("c1").is_some(), "the other pool's placeholder is not deleted");
    assert_eq!(fx.node_ann("node-c1", Key::SurgeFor).as_deref(), Some("c1"), "still frozen");
    assert!(fx.cordoned("node-c1"), "still cordoned");
    assert!(!fx.deleting("c1"));
}

#[test]
fn an_anchor_naming_another_pools_claim_is_cleared_with_a_warning_and_touches_nothing() {
    let mut fx = Fx::new();
    started(&mut fx);
    // A governed copy of pool-a carries pool-a's anchor: it must not drive c1's rotation.
    clone_pool(&fx, "pool-b", "a");
    pass_on(&mut fx, "pool-b");
    assert!(other_pool_ann(&fx, "pool-b", Key::ActiveRotation).is_none(), "foreign anchor cleared");
    assert!(other_pool_ann(&fx, "pool-b", Key::ActiveRotationState).is_none());
    assert_eq!(fx.events("ForeignAnchor"), 1);
    assert!(
        fx.event_messages("ForeignAnchor").iter().all(|m| m.contains("c1") && m.contains(POOL)),
        "{:?}",
        fx.event_messages("ForeignAnchor")
    );
    rotation_of_c1_untouched(&fx);
    // Past readyTimeout, pool-b still has nothing to roll back: only pool-a rolls c1 back.
    fx.advance(Duration::minutes(16));
    pass_on(&mut fx, "pool-b");
    rotation_of_c1_untouched(&fx);
    assert_eq!(fx.events("RotationStarted"), 1, "pool-b started nothing");

    // An ungoverned copy must not run the governance-loss rollback on pool-a's objects either.
    clone_pool(&fx, "pool-c", "c");
    pass_on(&mut fx, "pool-c");
    assert!(other_pool_ann(&fx, "pool-c", Key::ActiveRotation).is_none());
    assert_eq!(fx.events("ForeignAnchor"), 2);
    assert_eq!(fx.events("GovernanceLost"), 0);
    rotation_of_c1_untouched(&fx);

    // Seen through a stale cache after someone else cleared it: nothing owned, nothing said.
    clone_pool(&fx, "pool-d", "a");
    fx.client.flush_cache();
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::Fixed(Duration::hours(1)));
    fx.world
        .update_pool("pool-d", |p| {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .remove(Key::ActiveRotation.full());
        })
        .expect("pool-d");
    fx.ctl.reconcile_pool("pool-d").unwrap_or_else(|e| panic!("pass failed: {e}"));
    assert_eq!(fx.events("ForeignAnchor"), 2, "a lost clear announces nothing");
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::None);

    // pool-a itself rolls its own rotation back as usual.
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(fx.placeholder("c1").is_none());
    assert_eq!(fx.events("RotationFailed"), 1);
}

#[test]
fn the_readytimeout_reap_never_deletes_another_pools_claim() {
    let mut fx = Fx::new();
    started(&mut fx);
    // A claim of another pool, created after started-at and not registered yet: the reap guard
    // alone would allow it. A hand edit (or a copied claim) names it as c1's surge claim.
    fx.advance(Duration::minutes(1));
    let mut foreign = claim_obj("b1", fx.clock.now(), None);
    foreign
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("karpenter.sh/nodepool".into(), "pool-b".into());
    fx.world.apply_claim(foreign).expect("b1");
    fx.set_claim_ann("c1", Key::SurgeClaim, Some("b1"));
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(fx.world.claim("b1").is_some() && !fx.deleting("b1"), "pool-b's claim is not reaped");
}

#[test]
fn a_crash_after_the_first_write_of_a_forceful_start_never_becomes_a_surge() {
    let policy = policy_yaml(", forcefulFallback: {enabled: true}", None);
    let mut fx = Fx::with(policy, pool_yaml(""));
    fx.claim("close", Duration::days(14) - Duration::minutes(30)); // deadline in 30m < t_rot
    let hook = fx.intercept();
    // The process dies right after the start's first write (the anchor) reached the API server.
    let anchored = std::sync::atomic::AtomicBool::new(false);
    hook.before_write(
        move |w| {
            let after = anchored.load(std::sync::atomic::Ordering::SeqCst);
            if w.contains("noderotation.io/active-rotation=close") {
                anchored.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            after
        },
        || panic!("crash after the first write"),
    );
    let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fx.pass()));
    assert!(crashed.is_err(), "{:?}", hook.writes());
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("close"));
    assert_eq!(
        fx.pool_ann(Key::RotationMode).as_deref(),
        Some("forceful-fallback"),
        "the mode is written with the anchor"
    );
    assert_eq!(fx.pool_ann(Key::ActiveRotationState).as_deref(), Some("draining"));
    assert!(fx.pool_ann(Key::DrainingAt).is_some());
    fx.restart();
    fx.ctl.startup_sweep();
    // A stale view of the claim (another pass marked it already) must not announce twice.
    lagging(&mut fx);
    fx.set_claim_ann("close", Key::State, Some("draining"));
    fx.stale_pass();
    assert_eq!(fx.announced("emit:forceful_fallback"), 0, "a lost claim write announces nothing");
    assert!(!fx.deleting("close"));
    // (Undone again: the resume below is this process's own.)
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::None);
    fx.set_claim_ann("close", Key::State, None);
    fx.pass();
    assert!(fx.placeholder("close").is_none(), "resumed as a forceful fallback, not a surge");
    assert_eq!(fx.claim_ann("close", Key::State).as_deref(), Some("draining"));
    assert!(fx.deleting("close"));
    assert_eq!(fx.announced("emit:forceful_fallback"), 1);
    assert_eq!(fx.events("ForcefulFallback"), 1);
    assert_eq!(fx.events("RotationStarted"), 0);
    fx.finalize("close");
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 1);
    assert!(fx.pool_ann(Key::RotationMode).is_none());
}

#[test]
fn a_retried_escalation_keeps_the_first_draining_mirrors() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(3));
    fx.provision_surge("c1", "s1");
    let hook = fx.intercept();
    // The mirrors are written, then the process dies before the claim's draining write.
    hook.before_write(
        |w| w.starts_with("patch NodeClaim c1") && w.contains("/state=draining"),
        || panic!("crash before the draining write"),
    );
    let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fx.pass()));
    assert!(crashed.is_err());
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    let draining_at = fx.pool_ann(Key::DrainingAt).expect("draining-at written");
    assert_eq!(fx.pool_ann(Key::SurgeWait).as_deref(), Some("3m0s"));
    assert_eq!(fx.pool_ann(Key::SurgePath).as_deref(), Some("provisioned"));
    fx.advance(Duration::minutes(2));
    fx.restart();
    fx.ctl.startup_sweep();
    fx.pass(); // the escalation is retried
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    assert!(fx.deleting("c1"));
    assert_eq!(fx.pool_ann(Key::DrainingAt), Some(draining_at), "draining-at is write-once");
    assert_eq!(fx.pool_ann(Key::SurgeWait).as_deref(), Some("3m0s"), "surge-wait is write-once");
    assert_eq!(fx.pool_ann(Key::SurgePath).as_deref(), Some("provisioned"));
}

#[test]
fn an_unknown_state_on_an_unanchored_claim_reads_as_none_and_is_rotated() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.set_claim_ann("c1", Key::State, Some("rotating-v2")); // a future or hand-edited value
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"), "a candidate like none");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "claimed as pending");
    assert_eq!(fx.events("RotationStarted"), 1);
}

#[test]
fn an_unreadable_gate_stamp_is_warned_once_and_restamped_so_the_gate_reopens() {
    // A stamp in the future is invalid too, not obeyed: obeyed, 2099 closed the gate until 2099.
    let cases = [Key::LastRotationAt, Key::LastFailureAt]
        .into_iter()
        .flat_map(|key| [(key, "last tuesday"), (key, "2099-01-01T00:00:00Z")]);
    for (key, bad) in cases {
        let mut fx = Fx::new();
        fx.claim("c1", Duration::days(10));
        fx.set_pool_ann(key, Some(bad));
        let now = fx.clock.now();
        fx.pass();
        assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "{key:?}: the gate holds");
        let stamped = fx.pool_ann(key).expect("re-stamped");
        let stamped = chrono::DateTime::parse_from_rfc3339(&stamped).expect("RFC3339");
        assert_eq!(stamped, now, "{key:?} re-stamped with now");
        assert_eq!(fx.events("InvalidGateStamp"), 1, "{key:?}");
        let why = if bad.starts_with("2099") { "in the future" } else { "not an RFC3339 time" };
        assert!(
            fx.event_messages("InvalidGateStamp")
                .iter()
                .all(|m| m.contains(key.full()) && m.contains(why)),
            "{:?}",
            fx.event_messages("InvalidGateStamp")
        );
        fx.advance(Duration::minutes(5));
        fx.pass();
        assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "{key:?}: one pause (10m) from now");
        assert_eq!(fx.events("InvalidGateStamp"), 1, "{key:?}: warned once");
        fx.advance(Duration::minutes(6));
        fx.pass();
        assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"), "{key:?}: reopened");
    }
}

/// A gate stamp a little ahead of now (another replica's clock, within the skew tolerance) is a
/// stamp like any other: obeyed as written, nothing warned.
#[test]
fn a_gate_stamp_within_the_clock_skew_tolerance_is_obeyed() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.set_pool_ann(Key::LastRotationAt, Some("2026-11-28T03:01:00Z"));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "the cooldown runs from the stamp");
    assert_eq!(fx.pool_ann(Key::LastRotationAt).as_deref(), Some("2026-11-28T03:01:00Z"));
    assert_eq!(fx.events("InvalidGateStamp"), 0);
}

/// A `started-at` in the future never let readyTimeout come: the pending rotation (its
/// placeholder never ready) held its slot, its frozen node and its cordon for good. It is
/// warned about and re-stamped with now, and the rollback comes readyTimeout later.
#[test]
fn a_started_at_in_the_future_is_warned_and_restamped_so_ready_timeout_comes() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.set_claim_ann("c1", Key::StartedAt, Some("2099-01-01T00:00:00Z"));
    fx.advance(Duration::minutes(1));
    fx.pass();
    let warned = fx.event_messages("InvalidStamp");
    assert_eq!(warned.len(), 1);
    assert!(warned[0].contains("started-at") && warned[0].contains("in the future"), "{warned:?}");
    assert_eq!(fx.claim_ann("c1", Key::StartedAt).as_deref(), Some("2026-11-28T03:01:00Z"));
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "readyTimeout came");
}

/// A `failed-at` in the future is no backoff: the claim is picked and retried (obeyed, it backed
/// off until 2099), and warned about. A release never carries it onto the pool's
/// `last-failure-at`, which would have paused every start of the pool until then.
#[test]
fn a_failed_at_in_the_future_is_warned_and_not_obeyed() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    fx.set_claim_ann("c1", Key::FailedAt, Some("2099-01-01T00:00:00Z"));
    fx.set_claim_ann("c1", Key::RetryCount, Some("1"));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"), "picked: no backoff");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "retried");
    let warned = fx.event_messages("InvalidStamp");
    assert_eq!(warned.len(), 1);
    assert!(warned[0].contains("failed-at") && warned[0].contains("in the future"), "{warned:?}");

    // Anchored and failed with the start gates closed (frozen): released, and the pool's
    // failure pause is not stamped with 2099.
    let mut fx = Fx::new();
    started(&mut fx);
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    fx.set_claim_ann("c1", Key::StartedAt, None);
    fx.set_claim_ann("c1", Key::FailedAt, Some("2099-01-01T00:00:00Z"));
    fx.set_pool_ann(Key::Freeze, Some("2026-11-28T05:00:00Z"));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "released while frozen");
    assert_eq!(fx.pool_ann(Key::LastFailureAt), None, "2099 is not carried onto the pool");
}

#[test]
fn a_failed_claim_without_a_readable_failed_at_is_retried_once_not_restarted_every_minute() {
    for failed_at in [None, Some("soon")] {
        let mut fx = Fx::new();
        fx.claim("c1", Duration::days(10));
        fx.set_claim_ann("c1", Key::State, Some("failed"));
        fx.set_claim_ann("c1", Key::RetryCount, Some("1"));
        fx.set_claim_ann("c1", Key::FailedAt, failed_at);
        for _ in 0..5 {
            fx.pass();
            fx.advance(Duration::minutes(1));
        }
        assert_eq!(fx.events("RotationStarted"), 1, "failed-at {failed_at:?}: started once");
        assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"), "{failed_at:?}");
        assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "retried");
    }
}

#[test]
fn retry_count_saturates_instead_of_wrapping_or_panicking() {
    let cases = [
        ("18446744073709551615", "18446744073709551615"), // u64::MAX stays u64::MAX
        ("9223372036854775807", "9223372036854775808"),   // past i64::MAX, no overflow
        ("99999999999999999999999", "18446744073709551615"), // longer still: saturated
        ("many", "1"),                                    // garbage: no failure recorded
    ];
    for (before, after) in cases {
        let mut fx = Fx::new();
        fx.claim("c1", Duration::days(10));
        fx.set_claim_ann("c1", Key::State, Some("failed"));
        fx.set_claim_ann("c1", Key::RetryCount, Some(before));
        fx.set_claim_ann("c1", Key::FailedAt, Some("2026-11-27T03:00:00Z")); // a day ago
        fx.pass();
        assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "{before}: retried");
        fx.advance(Duration::minutes(16));
        fx.pass(); // readyTimeout: the failure write increments the count
        assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "{before}");
        assert_eq!(fx.claim_ann("c1", Key::RetryCount).as_deref(), Some(after), "{before}");
        assert_eq!(fx.announced("emit:failure"), 1, "{before}");
    }
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

/// 2,000 equally specific policies tie for 20 pools: the status view is computed in time linear
/// in policies × pools (it was quadratic in the policies: every tied policy's message listed
/// every other one for every pool), and its messages stay short.
#[test]
fn the_status_of_thousands_of_tied_policies_is_linear_and_its_messages_are_capped() {
    let mut fx = Fx::new();
    for i in 1..2000 {
        let mut twin = policy_yaml("", None);
        twin.metadata.name = Some(format!("rotate-a-{i:04}"));
        twin.metadata.uid = Some(format!("uid-{i}"));
        fx.world.apply_policy(twin).expect("twin");
    }
    for i in 0..19 {
        clone_pool(&fx, &format!("pool-{i:02}"), "a");
    }
    fx.client.flush_cache();
    for round in ["first (writes)", "second (unchanged)"] {
        let start = std::time::Instant::now();
        fx.ctl.update_policy_status();
        let took = start.elapsed();
        eprintln!("status of 2000 tied policies x 20 pools, {round}: {took:?}");
        assert!(took < std::time::Duration::from_secs(3), "{round}: {took:?}");
        fx.client.flush_cache();
    }
    let status = fx.world.policy("rotate-a-0500").and_then(|p| p.status.clone()).expect("status");
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready");
    assert_eq!(ready.reason, "Conflict");
    assert!(ready.message.len() < 2000, "{} bytes: {}", ready.message.len(), ready.message);
    assert!(ready.message.contains("1996 more"), "{}", ready.message);
    assert!(ready.message.contains("and 15 more NodePools"), "{}", ready.message);
}

/// The in-flight surge claim is the rotation's replacement, not another pool node: a pool of one
/// node, which a 24/7 policy can serve, is not told at every rotation that its "2 nodes" exceed
/// the burst capacity (and the warning re-armed each time the surge claim was gone).
/// `rotate-a` with the auto age threshold (K = 2), open 24/7: one rotation per deadline.
fn auto_policy() -> noderotation::policy::crd::RotationPolicy {
    let mut policy = policy_yaml("", None);
    policy.spec.age_threshold = "auto".into();
    policy
}

#[test]
fn the_burst_check_does_not_count_the_surge_claim_as_a_pool_node() {
    let mut fx = Fx::with(auto_policy(), pool_yaml(""));
    fx.claim("c1", Duration::days(14) - Duration::minutes(60));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    fx.provision_surge("c1", "s1");
    fx.pass();
    fx.advance(Duration::minutes(5));
    fx.pass();
    fx.finalize("c1");
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "completed");
    assert_eq!(
        fx.events("ThroughputBurstShortfall"),
        0,
        "{:?}",
        fx.event_messages("ThroughputBurstShortfall")
    );
    // A pool that really is too big for one deadline is told so, as a "would": its nodes were
    // not created together.
    let mut fx = Fx::with(auto_policy(), pool_yaml(""));
    for (i, days) in [1, 3, 5].into_iter().enumerate() {
        fx.claim(&format!("n{i}"), Duration::days(days));
    }
    fx.pass();
    let msgs = fx.event_messages("ThroughputBurstShortfall");
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].contains("if") && msgs[0].contains("would"), "{}", msgs[0]);
}

/// `NoLimitsHeadroom` warns when less than one node's worth of a limited resource is left, not
/// only once the limit is used up: 2 CPUs left cannot hold a 4-CPU surge node.
#[test]
fn no_limits_headroom_warns_when_less_than_one_node_fits() {
    let mut fx = Fx::with(policy_yaml("", None), pool_yaml("  limits: {cpu: \"10\"}"));
    fx.claim("c1", Duration::days(1));
    let used = |fx: &Fx, cpu: &str| {
        fx.world
            .update_pool(POOL, |p| {
                p.status =
                    serde_json::from_value(serde_json::json!({"resources": {"cpu": cpu}})).ok();
            })
            .expect("pool");
    };
    used(&fx, "4");
    fx.pass();
    assert_eq!(fx.events("NoLimitsHeadroom"), 0, "6 CPUs left: a 4-CPU node fits");
    used(&fx, "8");
    fx.pass();
    let msgs = fx.event_messages("NoLimitsHeadroom");
    assert_eq!(msgs.len(), 1, "2 CPUs left");
    assert!(msgs[0].contains("cpu"), "{}", msgs[0]);
}

/// Open 24/7 with auto ageThreshold, a claim is due only K minutes + t_rot (79m) before its
/// deadline. Three claims whose deadlines lie 5 minutes apart cannot all be rotated one at a time
/// in that lead (one rotation slot, t_rot_est + cooldownAfter, is 25m): the earlier ones fall
/// due early enough for the later ones (the burst lookahead), instead of the last ones being
/// force-expired.
#[test]
fn crowded_deadlines_fall_due_early_enough_for_one_rotation_at_a_time() {
    use noderotation::telemetry::PoolGauge;
    let mut fx = Fx::with(auto_policy(), pool_yaml(""));
    let lifetime = Duration::days(14);
    for (name, left) in [("c1", 85), ("c2", 88), ("c3", 90)] {
        fx.claim(name, lifetime - Duration::minutes(left));
    }
    fx.pass();
    assert_eq!(
        fx.pool_ann(Key::ActiveRotation).as_deref(),
        Some("c1"),
        "c1 (due in 6m by its own lead) is due now: c2 and c3 need the slots after it"
    );
    let candidates = fx.ctl.telemetry().pool_gauge(POOL, PoolGauge::Candidates);
    assert_eq!(candidates, Some(1.0), "c2 is due now too; c3 in 11m");
    // A lone claim keeps its own due instant.
    let mut fx = Fx::with(auto_policy(), pool_yaml(""));
    fx.claim("alone", lifetime - Duration::minutes(85));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "due in 6 minutes, not now");
}

/// The pass that froze the surge host failed on its next write; then the placeholder was
/// preempted and the old node drained (a forced expiry the cache has not shown yet), so the next
/// pass rolls back. Its cache shows neither the host's freeze nor the placeholder that named the
/// host: the rollback still unfreezes it, found through the claim the candidate's fresh
/// `surge-claim` names, instead of leaving `surge-for` and do-not-disrupt on it for good.
#[test]
fn a_rollback_unfreezes_the_surge_host_the_cache_does_not_show_frozen() {
    use noderotation::cluster::memory::{ApiVerb, Call, Fault};
    use noderotation::cluster::{ObjectKind, ObjectRef};
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    // The pool's first patch records the surge host; the next one, the draining mirror, fails.
    let pool_patches = std::sync::atomic::AtomicUsize::new(0);
    fx.world.set_faults(move |call: &Call<'_>| {
        let pool = call.target.kind == ObjectKind::NodePool && call.verb == ApiVerb::Patch;
        if pool && pool_patches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1 {
            Fault::Transient
        } else {
            Fault::Proceed
        }
    });
    fx.client.flush_cache();
    fx.ctl.reconcile_pool(POOL).expect_err("the draining mirror write fails");
    fx.world.clear_faults();
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "host frozen");
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
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

/// Karpenter finalizes a pending claim (an interruption) a moment after its placeholder was
/// re-created, before the view shows the new pod: the completion deletes it by name rather than
/// leave a pod that makes Karpenter launch a node for a rotation that is over.
#[test]
fn the_completion_deletes_a_placeholder_the_view_does_not_show_yet() {
    let mut fx = Fx::new();
    started(&mut fx);
    assert!(fx.placeholder("c1").is_some());
    fx.delete_claim("c1");
    fx.finalize("c1");
    let hook = fx.intercept();
    hook.stale_cache(|view| view.placeholders.clear());
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "completed");
    assert!(fx.placeholder("c1").is_none(), "no placeholder outlives its rotation");
    assert_eq!(fx.announced("emit:expired"), 1);
}

// ---- Orphans repaired within a tick, placeholder identity, unfreeze, never-Ready surge ----

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
fn an_anchor_removed_by_hand_is_repaired_within_a_tick() {
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
fn a_nodepool_deleted_mid_rotation_releases_its_placeholder_and_markers_within_a_tick() {
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
fn the_tick_judges_orphans_on_a_fresh_read_of_the_anchors() {
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
fn a_pod_named_like_the_placeholder_is_never_taken_for_surge_capacity() {
    let mut fx = Fx::new();
    fx.claim("x", Duration::hours(1)).claim("c1", Duration::days(10));
    // Someone created a pod with the placeholder's name, label and surge-for, Running on a Ready
    // node of the pool, before the rotation of c1 starts.
    let mut impostor = workload_pod("impostor", "node-x");
    impostor.metadata.name = Some(noderotation::placeholder::placeholder_name("c1"));
    impostor.metadata.namespace = Some(NS.into());
    impostor.metadata.owner_references = None;
    impostor.metadata.labels =
        Some([("app.kubernetes.io/managed-by".to_string(), "noderotation".to_string())].into());
    impostor.metadata.annotations =
        Some([(Key::SurgeFor.full().to_string(), "c1".to_string())].into());
    let impostor = fx.world.apply_pod(impostor).expect("impostor");
    fx.pass();
    fx.pass();
    assert!(!fx.deleting("c1"), "no drain on capacity the operator did not reserve");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.pool_ann(Key::ActiveRotationState).is_none());
    let ph = fx.placeholder("c1").expect("the operator's own placeholder");
    assert_ne!(ph.metadata.uid, impostor.metadata.uid, "the impostor was replaced");
    assert_eq!(
        fx.claim_ann("c1", Key::PlaceholderUid),
        ph.metadata.uid,
        "the uid of what the operator created is recorded"
    );
    // Its own placeholder, once Running on a new node, is surge capacity.
    fx.provision_surge("c1", "s1");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
}

#[test]
fn the_sweep_deletes_the_placeholder_it_judged_by_its_uid() {
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

#[test]
fn unfreeze_finds_the_surge_host_from_a_fresh_read_not_a_stale_node_list() {
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

/// Karpenter launched `name` for the placeholder of `for_claim` now (its `Nominated` Event);
/// its node `node-<name>` registered and never turns Ready.
fn never_ready_surge(fx: &Fx, name: &str, for_claim: &str) {
    fx.never_ready_surge(name);
    fx.nominate(for_claim, name);
}

#[test]
fn a_surge_node_that_never_turns_ready_is_reaped_at_rollback() {
    let mut fx = Fx::new();
    started(&mut fx);
    // Karpenter launched a claim for the placeholder; its node registered but never turns
    // Ready, so the scheduler never binds the placeholder and `surge-claim` is never written.
    fx.advance(Duration::minutes(2));
    never_ready_surge(&fx, "s1", "c1");
    fx.pass();
    assert!(fx.claim_ann("c1", Key::SurgeClaim).is_none(), "never bound, never recorded");
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"), "its nomination seen");
    fx.advance(Duration::minutes(14));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(
        fx.deleting("s1") || fx.world.claim("s1").is_none(),
        "the never-Ready surge claim is reaped at rollback, not left to Karpenter's repair"
    );
}

/// The placeholder binds in the very pass that finds readyTimeout passed, and Karpenter's
/// nomination of it is not in the cache yet: the rollback marks the claim from a fresh list of
/// the placeholder's Events and reaps it (its node matched by providerID alone), never the
/// pool's other fresh claim that is not Ready.
#[test]
fn a_placeholder_bound_at_the_timeout_reaps_its_hosts_claim() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(16));
    let not_ready = |name: &str, node: Option<&str>| {
        let mut c = claim_obj(name, fx.clock.now(), node);
        if let Some(st) = c.status.as_mut() {
            st.node_name = None; // Karpenter has not written it yet
            st.conditions = serde_json::from_value(serde_json::json!([
                {"type": "Launched", "status": "True"}, {"type": "Ready", "status": "False"}]))
            .expect("conditions");
        }
        c
    };
    fx.world.apply_node(node_obj("node-s1", true)).expect("node");
    fx.world.apply_claim(not_ready("s1", Some("node-s1"))).expect("surge claim");
    // An ordinary scale-up of the same pool, just as fresh and not Ready either.
    fx.world.apply_claim(not_ready("s2", None)).expect("other claim");
    bind_placeholder(&fx, "c1", "node-s1");
    fx.nominate("c1", "s1");
    let hook = fx.intercept();
    hook.stale_cache(|view| view.nominations.clear());
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "the host's claim is reaped");
    assert!(!fx.deleting("s2") && fx.world.claim("s2").is_some(), "the scale-up is not");
}

#[test]
fn a_conflict_on_the_reap_or_placeholder_delete_is_rechecked_and_retried() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(2));
    fx.world.apply_node(node_obj("node-s1", false)).expect("node");
    fx.world.apply_claim(claim_obj("s1", fx.clock.now(), Some("node-s1"))).expect("claim");
    fx.world
        .update_claim("s1", |c| {
            if let Some(st) = c.status.as_mut() {
                st.conditions.retain(|c| c.type_ != "Ready");
            }
        })
        .expect("s1");
    fx.nominate("c1", "s1");
    // The first delete of each gets a 409 although nothing replaced the object (the API server
    // answers 409 for a write it could not apply): a fresh read shows the same uid, so the
    // delete is retried instead of taken for "a new object took the name".
    let conflicted = std::sync::Mutex::new(std::collections::BTreeSet::new());
    fx.world.set_faults(move |c: &noderotation::cluster::memory::Call<'_>| {
        use noderotation::cluster::memory::{ApiVerb, Fault};
        let mut seen = conflicted.lock().unwrap_or_else(|e| e.into_inner());
        if c.verb == ApiVerb::Delete && c.precondition && seen.insert(c.target.to_string()) {
            return Fault::Conflict;
        }
        Fault::Proceed
    });
    fx.advance(Duration::minutes(14));
    fx.pass();
    fx.world.clear_faults();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "the surge claim is reaped");
    assert!(fx.placeholder("c1").is_none(), "the placeholder is deleted");
}

#[test]
fn a_start_judged_on_a_lagging_cache_loses_to_a_failure_stamped_since() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.client.flush_cache();
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::Fixed(Duration::hours(1)));
    // A pass a moment ago rolled a rotation back: gate B is closed in the store, but this
    // pass's cache does not show the stamp yet.
    let now = noderotation::engine::Value::Time(fx.clock.now()).to_annotation();
    fx.set_pool_ann(Key::LastFailureAt, now.as_deref());
    fx.stale_pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "no start within failurePause");
    assert_eq!(fx.events("RotationStarted"), 0);
    // Once the cache shows the stamp, gate B holds the start until failurePause has passed.
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::None);
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    fx.advance(Duration::minutes(11));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
}
/// The gates that decide a start (freeze, gate A, gate B) are read from the cache; the anchor
/// write must find them still open on its fresh read of the pool.
#[test]
fn a_start_gate_closed_on_the_fresh_read_holds_the_start() {
    type Close = fn(&Fx);
    let starts: [(&str, Close); 3] = [
        ("frozen", |fx| {
            let until = fx.clock.now() + Duration::hours(1);
            fx.set_pool_ann(Key::Freeze, Some(&until.to_rfc3339()));
        }),
        ("gate A", |fx| {
            let at = fx.clock.now() - Duration::seconds(1);
            fx.set_pool_ann(Key::LastRotationAt, Some(&at.to_rfc3339()));
        }),
        ("gate B", |fx| {
            let at = fx.clock.now() - Duration::seconds(1);
            fx.set_pool_ann(Key::LastFailureAt, Some(&at.to_rfc3339()));
        }),
    ];
    for (gate, close) in starts {
        for forceful in [false, true] {
            let mut fx = if forceful {
                let policy = policy_yaml(", forcefulFallback: {enabled: true}", None);
                let fx = Fx::with(policy, pool_yaml(""));
                fx.claim("c1", Duration::days(14) - Duration::minutes(30));
                fx
            } else {
                let fx = Fx::new();
                fx.claim("c1", Duration::days(10));
                fx
            };
            // The cache shows the gates open; the store has just closed one.
            lagging(&mut fx);
            close(&fx);
            fx.stale_pass();
            assert!(
                fx.pool_ann(Key::ActiveRotation).is_none(),
                "{gate} (forceful: {forceful}): started on the cache's gates"
            );
            assert!(fx.claim_ann("c1", Key::State).is_none(), "{gate} ({forceful})");
            assert!(!fx.deleting("c1"), "{gate} ({forceful})");
            assert_eq!(fx.events("RotationStarted"), 0, "{gate} ({forceful})");
            assert_eq!(fx.announced("emit:forceful_fallback"), 0, "{gate} ({forceful})");
        }
    }
}

/// A retry (failed -> pending) is a new attempt: the same gates must hold on a fresh read.
#[test]
fn a_retry_whose_gate_closed_on_the_fresh_read_is_held() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    fx.set_claim_ann("c1", Key::RetryCount, Some("1"));
    fx.set_claim_ann("c1", Key::FailedAt, Some("2026-11-27T03:00:00Z")); // a day ago
    fx.set_pool_ann(Key::ActiveRotation, Some("c1"));
    lagging(&mut fx);
    let at = fx.clock.now() - Duration::seconds(1);
    fx.set_pool_ann(Key::LastFailureAt, Some(&at.to_rfc3339()));
    fx.stale_pass();
    assert_eq!(
        fx.claim_ann("c1", Key::State).as_deref(),
        Some("failed"),
        "retried 1s after a failure, against failurePause 10m"
    );
    assert!(fx.placeholder("c1").is_none());
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
fn a_pass_stalled_in_the_surge_ready_writes_does_not_drain_a_rolled_back_claim() {
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
fn a_rollback_stalled_before_its_failure_write_does_not_fail_the_next_attempt() {
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
fn a_retry_from_failed_rechecks_the_lane_limit() {
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
fn a_placeholder_on_the_surge_host_of_another_rotation_waits_for_that_rotation() {
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
fn a_surge_host_another_rotation_recorded_since_the_cache_was_read_is_not_taken() {
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
fn a_rollback_never_reaps_the_surge_claim_another_rotation_recorded() {
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

/// A never-Ready surge is reaped at readyTimeout; a claim whose node is Ready on a fresh read is
/// capacity, even while the cache does not show the node yet and the claim's own status has
/// not caught up: the pods Karpenter launched it for may be binding.
#[test]
fn a_rollback_leaves_a_claim_whose_node_turned_ready_though_the_cache_has_not_seen_it() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(2));
    // Karpenter launched s1 (providerID known, nodeName not yet written); its node registered
    // and turned Ready, and the controller's cache has not seen the node.
    fx.world.apply_node(node_obj("node-s1", true)).expect("node");
    let mut s1 = claim_obj("s1", fx.clock.now(), Some("node-s1"));
    if let Some(st) = s1.status.as_mut() {
        st.node_name = None;
        st.conditions = serde_json::from_value(serde_json::json!([
            {"type": "Launched", "status": "True"}]))
        .expect("conditions");
    }
    fx.world.apply_claim(s1).expect("claim");
    let hook = fx.intercept();
    hook.stale_cache(|view| {
        view.nodes.remove("node-s1");
    });
    fx.advance(Duration::minutes(14));
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(!fx.deleting("s1"), "node-s1 is Ready: s1 is capacity, not a failed surge");
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

#[test]
fn a_release_judged_on_a_stale_failed_view_keeps_the_retry_that_owns_the_anchor() {
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

/// A `rotation-mode` left behind by an anchor removed by hand does not steer the slot's next
/// rotation: with the forceful fallback disabled it is a surge, never a surge-less delete.
#[test]
fn a_leftover_rotation_mode_does_not_make_the_next_start_forceful() {
    let mut fx = Fx::new();
    fx.set_pool_ann(Key::RotationMode, Some("forceful-fallback"));
    started(&mut fx);
    assert!(!fx.deleting("c1"), "no delete before surge capacity is ready");
    assert!(fx.placeholder("c1").is_some());
    assert!(fx.pool_ann(Key::RotationMode).is_none(), "the start wrote the slot's whole set");
    assert_eq!(fx.events("ForcefulFallback"), 0);
}

/// A leftover `rotation-mode` on a free slot is removed by the sweep with the rest of the set.
#[test]
fn the_sweep_removes_a_free_slots_leftover_keys() {
    let mut fx = Fx::new();
    fx.set_pool_ann(Key::RotationMode, Some("forceful-fallback"));
    fx.set_pool_ann(Key::SurgeHost, Some("node-gone"));
    let report = fx.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(fx.pool_ann(Key::RotationMode).is_none());
    assert!(fx.pool_ann(Key::SurgeHost).is_none());
}

/// An anchor set to an empty value by hand names no rotation: the slot is free, the start is
/// not refused as if it were taken, and the sweep removes it with a warning.
#[test]
fn an_empty_anchor_is_read_as_absent_and_warned() {
    let mut fx = Fx::new();
    fx.set_pool_ann(Key::ActiveRotation, Some(""));
    let report = fx.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "removed by the sweep");
    assert_eq!(fx.events("EmptyAnchor"), 1);
    fx.set_pool_ann(Key::ActiveRotation, Some(""));
    started(&mut fx);
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
fn a_surge_host_frozen_for_a_claim_still_draining_is_not_taken() {
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
}

/// A candidate whose node another rotation drains onto (the absorbed path: c1's placeholder ran
/// on c2's node) is never picked; a view that lags the freeze and the recorded host picks it,
/// but the fresh node answers `taken`: c2's attempt rolls back without cordoning node-c2.
#[test]
fn a_candidate_whose_node_another_rotation_drains_onto_is_never_cordoned() {
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

/// How a rotation ends, for the surge-claim tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// The placeholder is absorbed by a spare node; the old claim drains and goes.
    Success,
    /// readyTimeout.
    Rollback,
    /// Karpenter force-expires the pending claim.
    ExpiredWhilePending,
    /// The pending claim is deleted and finalized before any pass sees it deleting.
    ClaimGone,
    /// The governing policy is deleted.
    GovernanceLost,
    /// `kubectl annotate nodepool ... noderotation.io/active-rotation-`: the sweep ends it.
    AnchorRemoved,
}

/// Ends the rotation of c1 as `exit` says.
fn end_rotation(fx: &mut Fx, exit: Exit) {
    match exit {
        Exit::Success => {
            fx.world
                .update_pod(NS, &noderotation::placeholder::placeholder_name("c1"), |p| {
                    p.spec.get_or_insert_with(Default::default).node_name =
                        Some("node-spare".into());
                    p.status.get_or_insert_with(Default::default).phase = Some("Running".into());
                })
                .expect("placeholder");
            fx.pass();
            assert!(fx.deleting("c1"), "c1 drains onto the spare node");
            fx.finalize("c1");
            fx.pass();
        }
        Exit::Rollback => {
            fx.advance(Duration::minutes(15));
            fx.pass();
            assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
        }
        Exit::ExpiredWhilePending => {
            fx.delete_claim("c1");
            fx.pass();
            assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("expired"));
        }
        Exit::ClaimGone => {
            fx.delete_claim("c1");
            fx.finalize("c1");
            fx.pass();
        }
        Exit::GovernanceLost => {
            fx.world.delete_now(&obj(PolicyKind, "rotate-a"));
            fx.pass();
        }
        Exit::AnchorRemoved => {
            fx.set_pool_ann(Key::ActiveRotation, None);
            fx.tick();
            assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
        }
    }
    assert_eq!(fx.pool_ann(Key::ActiveRotation), None, "{exit:?}: the rotation is over");
}

/// A claim Karpenter launched for a placeholder that never turns Ready outlives no exit of its
/// rotation (node repair is off on self-managed Karpenter, so nobody else deletes it): the
/// rollback reaps it at once, the sweep after any other exit, once readyTimeout has passed since
/// its creation. The nomination is marked as soon as a pending pass sees it, or (`late`: the
/// cache never showed it) from a fresh list of the placeholder's Events at the exit, while the
/// placeholder's uid is still recorded; a claim gone before any pass saw its nomination takes
/// that record with it.
#[test]
fn a_never_ready_surge_claim_outlives_no_exit_of_its_rotation() {
    use Exit::*;
    let exits = [Success, Rollback, ExpiredWhilePending, ClaimGone, GovernanceLost, AnchorRemoved];
    for exit in exits {
        for late in [false, true] {
            if late && exit == ClaimGone {
                continue;
            }
            let mut fx = Fx::new();
            // Young: never a candidate; it absorbs c1's placeholder on success.
            fx.claim("spare", Duration::hours(1));
            started(&mut fx);
            fx.advance(Duration::minutes(1));
            never_ready_surge(&fx, "s1", "c1");
            let created = fx.clock.now();
            if late {
                let hook = fx.intercept();
                hook.stale_cache(|view| view.nominations.clear());
            }
            fx.pass();
            let marked = fx.claim_ann("s1", Key::LaunchedFor);
            assert_eq!(marked.as_deref(), (!late).then_some("c1"), "{exit:?} late={late}");
            end_rotation(&mut fx, exit);
            assert_eq!(
                fx.claim_ann("s1", Key::LaunchedFor).as_deref(),
                Some("c1"),
                "{exit:?} late={late}: marked by the time the rotation ended"
            );
            fx.tick();
            let due = exit == GovernanceLost || fx.clock.now() - created >= Duration::minutes(15);
            assert_eq!(
                fx.deleting("s1"),
                due,
                "{exit:?} late={late}: reaped at once only past readyTimeout (or ungoverned)"
            );
            fx.advance(Duration::minutes(15));
            fx.tick();
            assert!(fx.deleting("s1"), "{exit:?} late={late}: the never-Ready surge is reaped");
            assert!(!fx.deleting("spare"), "{exit:?} late={late}: capacity is not");
        }
    }
}

/// The sweep reaps only a claim marked `launched-for` a rotation no slot anchors, that never
/// initialized, whose node is not Ready and hosts nothing but DaemonSet pods, and only once
/// readyTimeout has passed since its creation.
#[test]
fn the_sweep_reaps_only_a_marked_surge_claim_that_never_turned_ready_and_hosts_nothing() {
    let mut fx = Fx::new();
    started(&mut fx);
    let mark = |fx: &Fx, claim: &str, rotation: &str| {
        fx.set_claim_ann(claim, Key::LaunchedFor, Some(rotation));
    };
    fx.never_ready_surge("m1");
    mark(&fx, "m1", "gone-1");
    // Initialized once (its node went NotReady later): capacity, not a failed surge.
    fx.never_ready_surge("m2");
    mark(&fx, "m2", "gone-1");
    fx.initialized("m2");
    // A workload pod runs on it.
    fx.never_ready_surge("m3");
    mark(&fx, "m3", "gone-1");
    fx.world.apply_pod(workload_pod("web-m3", "node-m3")).expect("pod");
    // Marked for a rotation still in flight.
    fx.never_ready_surge("m4");
    mark(&fx, "m4", "c1");
    // Not marked: Karpenter launched it for other pods.
    fx.never_ready_surge("u1");
    fx.tick();
    assert!(!fx.deleting("m1"), "not before readyTimeout since its creation");
    fx.advance(Duration::minutes(15));
    fx.tick();
    assert!(fx.deleting("m1"), "a marked claim that never turned Ready, its rotation over");
    for kept in ["m2", "m3", "m4", "u1"] {
        assert!(!fx.deleting(kept), "{kept} is kept");
    }
    assert!(fx.world.claim("c1").is_some_and(|c| c.metadata.deletion_timestamp.is_none()));
}

/// The rollback took the pool's one fresh claim that was not Ready, whoever Karpenter launched
/// it for, and the claim its placeholder was bound to, whoever Karpenter launched it for. Here
/// the placeholder's own claim failed to launch and Karpenter already deleted it, while the
/// pods another rotation evicted got a claim that is not Ready yet; and another attempt's
/// placeholder was bound to a node Karpenter launched for other pods. Neither is reaped: only a
/// claim Karpenter nominated the placeholder to is.
#[test]
fn a_rollback_never_reaps_a_claim_karpenter_launched_for_other_pods() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(1));
    // Launched for the placeholder, never launches, deleted by Karpenter (registrationTimeout).
    fx.world.apply_claim(claim_obj("s1", fx.clock.now(), None)).expect("claim");
    fx.world
        .update_claim("s1", |c| {
            if let Some(st) = c.status.as_mut() {
                st.conditions.clear();
            }
        })
        .expect("s1");
    fx.nominate("c1", "s1");
    fx.pass();
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"));
    fx.advance(Duration::minutes(10));
    fx.delete_claim("s1");
    fx.finalize("s1");
    // Launched for the pods another rotation's drain evicted; its node is not Ready yet.
    fx.advance(Duration::minutes(4));
    fx.never_ready_surge("w1");
    fx.advance(Duration::minutes(1));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(!fx.deleting("w1"), "w1 is not the placeholder's: never reaped");

    // The retry's placeholder lands on a node Karpenter launched for other pods (created after
    // started-at, nothing else on it yet), and never runs there.
    fx.advance(Duration::hours(2));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "retried");
    fx.advance(Duration::minutes(1));
    fx.world.apply_node(node_obj("node-w2", true)).expect("node");
    fx.world.apply_claim(claim_obj("w2", fx.clock.now(), Some("node-w2"))).expect("claim");
    bind_placeholder(&fx, "c1", "node-w2");
    fx.pass();
    fx.advance(Duration::minutes(15));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(!fx.deleting("w2"), "w2 is not the placeholder's: never reaped");
}

/// A placeholder re-created after a preemption gets a claim of its own from Karpenter; the
/// first one's host is recorded as `surge-claim`. The rollback reaps the new claim, which never
/// turned Ready, and keeps the Ready one (capacity, empty now: Karpenter's to consolidate).
#[test]
fn a_rollback_reaps_the_surge_claim_of_a_re_created_placeholder() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(1));
    fx.world.apply_node(node_obj("node-s1", true)).expect("node");
    fx.world.apply_claim(claim_obj("s1", fx.clock.now(), Some("node-s1"))).expect("claim");
    fx.initialized("s1");
    fx.nominate("c1", "s1");
    bind_placeholder(&fx, "c1", "node-s1"); // bound, never Running (a slow image pull)
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
    // Preempted; the next pass re-creates it, and Karpenter launches s2 for the new pod.
    fx.world.delete_now(&noderotation::cluster::ObjectRef::pod(
        NS,
        noderotation::placeholder::placeholder_name("c1"),
    ));
    fx.pass();
    assert!(fx.placeholder("c1").is_some(), "re-created");
    fx.advance(Duration::minutes(1));
    never_ready_surge(&fx, "s2", "c1");
    fx.pass();
    assert_eq!(fx.claim_ann("s2", Key::LaunchedFor).as_deref(), Some("c1"));
    fx.advance(Duration::minutes(14));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(fx.deleting("s2"), "the re-created placeholder's never-Ready claim is reaped");
    assert!(!fx.deleting("s1"), "the Ready one is capacity");
}

/// A person who took over the cordon and the do-not-disrupt of a node we froze (our markers set
/// to `false`, which the admission policy lets people do) keeps them when the rotation rolls
/// back: a marker is ours only while it reads as we wrote it. The next freeze does not take
/// them back either.
#[test]
fn a_person_who_took_over_our_cordon_and_do_not_disrupt_keeps_them() {
    let mut fx = Fx::new();
    started(&mut fx);
    assert!(fx.cordoned("node-c1"));
    fx.set_node_ann("node-c1", Key::Cordoned, Some("false"));
    fx.set_node_ann("node-c1", Key::DoNotDisruptOwned, Some("false"));
    fx.advance(Duration::minutes(16));
    fx.pass(); // readyTimeout rollback
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(fx.cordoned("node-c1"), "the person's cordon stays");
    assert_eq!(fx.node_ann("node-c1", Key::DoNotDisrupt).as_deref(), Some("true"));
    assert!(fx.node_ann("node-c1", Key::Cordoned).is_none(), "our marker goes");
    assert!(fx.node_ann("node-c1", Key::DoNotDisruptOwned).is_none());
    assert!(fx.node_ann("node-c1", Key::SurgeFor).is_none());
    let report = fx.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(fx.cordoned("node-c1"), "nor does the sweep lift it");
    assert_eq!(fx.node_ann("node-c1", Key::DoNotDisrupt).as_deref(), Some("true"));
}

/// The API server applies the first create of c1's placeholder, then its answer is lost (a
/// timeout after the apply): the pass fails and the claim never records the pod's uid.
fn placeholder_created_answer_lost(fx: &mut Fx) -> std::sync::Arc<k8s_openapi::api::core::v1::Pod> {
    fx.claim("c1", Duration::days(10));
    // The pass creates one pod: the failed create ends it.
    creates_meet(fx, noderotation::cluster::memory::Fault::ApplyThenTransient);
    fx.client.flush_cache();
    assert!(fx.ctl.reconcile_pool(POOL).is_err(), "the create's answer never arrived");
    fx.world.clear_faults();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert_eq!(fx.claim_ann("c1", Key::PlaceholderUid), None, "nothing recorded");
    fx.placeholder("c1").expect("the create was applied")
}

/// A placeholder whose create answer was lost is still this attempt's (its `started-at` says
/// so): the next pass keeps it instead of deleting it as someone else's, and the claim Karpenter
/// launched for it is marked and reaped when the rotation rolls back. Before, the pod went as
/// unowned and that claim, never Ready, could never be tied to the rotation.
#[test]
fn a_placeholder_whose_create_answer_was_lost_stays_the_rotations() {
    let mut fx = Fx::new();
    let pod = placeholder_created_answer_lost(&mut fx);
    let stamp = pod.metadata.annotations.as_ref().and_then(|a| a.get(Key::StartedAt.full()));
    fx.advance(Duration::minutes(2));
    never_ready_surge(&fx, "s1", "c1");
    fx.pass();
    assert_eq!(
        fx.placeholder("c1").and_then(|p| p.metadata.uid.clone()),
        pod.metadata.uid,
        "the attempt's own placeholder was kept, not deleted and created again"
    );
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"), "its nomination seen");
    assert_eq!(
        stamp,
        fx.claim_ann("c1", Key::StartedAt).as_ref(),
        "the placeholder carries the attempt it was created for"
    );
    fx.advance(Duration::minutes(14));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "readyTimeout");
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "its never-Ready claim is reaped");
    assert!(fx.placeholder("c1").is_none(), "and the placeholder goes with the rotation");
}

/// The same lost answer, then the anchor removed by hand: the sweep that fails the orphaned
/// claim marks the claim launched for its placeholder, and reaps it once readyTimeout passed
/// since that claim's creation.
#[test]
fn the_sweep_ties_the_surge_of_a_placeholder_whose_answer_was_lost_to_its_rotation() {
    let mut fx = Fx::new();
    placeholder_created_answer_lost(&mut fx);
    fx.advance(Duration::minutes(1));
    never_ready_surge(&fx, "s1", "c1");
    fx.set_pool_ann(Key::ActiveRotation, None);
    fx.tick();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "swept");
    assert!(fx.placeholder("c1").is_none(), "the orphan placeholder is deleted");
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"), "tied to c1");
    fx.advance(Duration::minutes(16));
    fx.tick();
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "reaped by the sweep");
}

/// A placeholder left from an earlier attempt of the same claim (a late create: it carries
/// that attempt's `started-at`) is not the new attempt's.
#[test]
fn a_placeholder_of_an_earlier_attempt_is_not_the_new_attempts() {
    let mut fx = Fx::new();
    let pod = placeholder_created_answer_lost(&mut fx);
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name("c1"), |p| {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(Key::StartedAt.full().into(), "2026-01-01T00:00:00Z".into());
        })
        .expect("placeholder");
    fx.pass();
    fx.pass();
    let now = fx.placeholder("c1").expect("a placeholder of this attempt");
    assert_ne!(now.metadata.uid, pod.metadata.uid, "the earlier attempt's pod was replaced");
    assert_eq!(fx.claim_ann("c1", Key::PlaceholderUid), now.metadata.uid);
}

/// Every create of a pod from now on meets `fault`.
fn creates_meet(fx: &Fx, fault: noderotation::cluster::memory::Fault) {
    fx.world.set_faults(move |c: &noderotation::cluster::memory::Call<'_>| {
        use noderotation::cluster::memory::{ApiVerb, Fault};
        if c.verb == ApiVerb::Create { fault } else { Fault::Proceed }
    });
}

/// A pass whose view lags the attempt's entry (the claim shows no `started-at` yet) still stamps
/// the placeholder with the attempt, read fresh: otherwise a lost answer to that create would
/// leave a pod nothing proves the controller's.
#[test]
fn a_placeholder_created_on_a_view_lagging_the_entry_carries_the_attempts_stamp() {
    use noderotation::cluster::memory::Fault;
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    creates_meet(&fx, Fault::Transient);
    fx.client.flush_cache();
    assert!(fx.ctl.reconcile_pool(POOL).is_err(), "the create failed, nothing applied");
    assert!(fx.placeholder("c1").is_none());
    let stamp = fx.claim_ann("c1", Key::StartedAt).expect("the attempt entered");
    let hook = fx.intercept();
    hook.stale_cache(|view| {
        if let Some(c) = view.claims.get_mut("c1") {
            let mut c = (**c).clone();
            c.metadata.annotations = None;
            *view.claims.get_mut("c1").expect("c1") = std::sync::Arc::new(c);
        }
    });
    creates_meet(&fx, Fault::ApplyThenTransient);
    fx.client.flush_cache();
    assert!(fx.ctl.reconcile_pool(POOL).is_err(), "the create's answer was lost");
    fx.world.clear_faults();
    hook.fresh_cache();
    let pod = fx.placeholder("c1").expect("the create was applied");
    assert_eq!(
        pod.metadata.annotations.as_ref().and_then(|a| a.get(Key::StartedAt.full())),
        Some(&stamp),
        "stamped with the attempt the lagging view did not show"
    );
    fx.pass();
    assert_eq!(
        fx.placeholder("c1").and_then(|p| p.metadata.uid.clone()),
        pod.metadata.uid,
        "kept as the attempt's own"
    );
}

/// The old claim is force-expired (or interrupted) and gone while pending, just after Karpenter
/// launched a claim for its placeholder: the completion deletes the placeholder, then marks that
/// claim for the rotation, so the sweep reaps it when it never turns Ready. Before, nothing tied
/// it to the rotation (I20 on the default fleet with faults, seeds 361 and 590).
#[test]
fn a_claim_launched_for_the_placeholder_as_the_old_claim_went_is_marked_at_completion() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(2));
    never_ready_surge(&fx, "s1", "c1");
    fx.delete_claim("c1");
    fx.finalize("c1");
    assert!(fx.world.claim("c1").is_none(), "the old claim is gone");
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "the rotation ended as expired");
    assert!(fx.placeholder("c1").is_none(), "its placeholder is deleted");
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"), "tied to c1");
    fx.advance(Duration::minutes(16));
    fx.tick();
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "reaped by the sweep");
}

/// The GETs of objects of `kinds` that `run` makes.
fn gets_of(fx: &mut Fx, kinds: &'static [ObjectKind], run: impl FnOnce(&mut Fx)) -> usize {
    use noderotation::cluster::memory::{ApiVerb, Call, Fault};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let reads = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&reads);
    fx.world.set_faults(move |c: &Call<'_>| {
        if c.verb == ApiVerb::Get && kinds.contains(&c.target.kind) {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        Fault::Proceed
    });
    run(fx);
    fx.world.clear_faults();
    reads.load(Ordering::SeqCst)
}

/// The GETs of the candidate's claim and node one pass makes.
fn claim_and_node_reads(fx: &mut Fx) -> usize {
    gets_of(fx, &[ObjectKind::NodeClaim, ObjectKind::Node], |fx| {
        fx.pass();
    })
}

#[test]
fn a_pending_pass_with_nothing_to_write_reads_nothing_it_read_before() {
    let mut fx = Fx::new();
    started(&mut fx);
    // The pass after the start's writes reads the claim and the node fresh (this process wrote
    // them: their cached copies prove nothing yet); the next one decides on those copies.
    assert!(claim_and_node_reads(&mut fx) > 0, "written since: read fresh");
    assert_eq!(claim_and_node_reads(&mut fx), 0, "nothing changed, nothing to write");
    // A change the watch shows is a new version: read fresh, and acted on.
    fx.set_node_ann("node-c1", Key::DoNotDisrupt, None);
    assert!(claim_and_node_reads(&mut fx) > 0);
    assert_eq!(fx.node_ann("node-c1", Key::DoNotDisrupt).as_deref(), Some("true"));
}

#[test]
fn a_write_decided_on_a_copy_someone_changed_since_loses_and_is_decided_again() {
    let mut fx = Fx::new();
    started(&mut fx);
    let hook = fx.intercept();
    fx.pass();
    fx.pass();
    // The claim changes behind a cache that still shows the version this process read.
    let cached = fx.cache().claims.get("c1").cloned().expect("cached claim");
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    hook.stale_cache(move |view| {
        view.claims.insert("c1".into(), cached.clone());
    });
    // readyTimeout passes: the rollback's claim write is decided on the cached copy, carries its
    // resourceVersion, loses, and is decided again on a fresh read, which shows the claim no
    // longer pending: no rollback is claimed or announced twice.
    fx.advance(Duration::minutes(20));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.events("RotationFailed"), 0, "the pass whose write lost announces nothing");
}
