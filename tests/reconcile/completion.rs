//! How a rotation ends when its old claim goes: the completion announced once, and Karpenter's
//! forced expiry seen early, late, during a rollback or through a stale cache.

use super::*;

#[test]
pub fn force_expiry_seen_early_is_expired_once_cleaned_up_and_released() {
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
pub fn force_expiry_seen_late_completes_as_expired_without_cooldown() {
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

#[test]
pub fn claim_finalized_during_the_rollback_announces_no_failure_and_completes_as_expired() {
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
pub fn an_expired_claim_still_anchored_is_cleaned_up_without_announcing() {
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
pub fn completion_already_released_by_another_pass_announces_nothing() {
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

#[test]
pub fn force_expiry_of_a_finalized_claim_seen_through_a_stale_cache_owns_nothing() {
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
pub fn a_failed_claim_still_anchored_and_force_expired_is_claimed_once() {
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

/// Karpenter force-expires a pending claim just after its placeholder was created; a view that
/// lags the pod and the claim's deletion but shows the old node's pods gone (evicted by that
/// expiry) takes the surge-less path: the anchor's mirror says draining, though nothing deleted
/// the placeholder. When the claim is gone, the completion must still delete the pod its view
/// does not show: a draining mirror proves the placeholder gone only after a surge escalation
/// (`lagging-takeovers.yaml --faults`, seed 61: I7).
#[test]
fn a_surgeless_drain_after_a_placeholder_was_created_deletes_it_at_completion() {
    let mut fx = Fx::new();
    started(&mut fx);
    assert!(fx.placeholder("c1").is_some());
    fx.world.delete_now(&noderotation::cluster::ObjectRef::pod("apps", "web-c1"));
    let hook = fx.intercept();
    hook.stale_cache(|view| view.placeholders.clear());
    fx.pass();
    assert_eq!(fx.pool_ann(Key::RotationMode).as_deref(), Some("nothing-to-reserve"));
    assert!(fx.deleting("c1"));
    fx.finalize("c1");
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "completed");
    assert!(fx.placeholder("c1").is_none(), "no placeholder outlives its rotation");
}

/// A started rotation of c1 whose placeholder Karpenter launched the never-Ready claim s1 for,
/// two minutes in.
fn launched_for_c1() -> Fx {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(2));
    never_ready_surge(&fx, "s1", "c1");
    fx
}

fn placeholder_gone_and_s1_tied_to_c1(fx: &Fx) {
    assert!(fx.placeholder("c1").is_none(), "its placeholder is deleted");
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"), "tied to c1");
}

/// The old claim is force-expired (or interrupted) and gone while pending, just after Karpenter
/// launched a claim for its placeholder: the completion deletes the placeholder, then marks that
/// claim for the rotation, so the sweep reaps it when it never turns Ready. Before, nothing tied
/// it to the rotation (I20 on the default fleet with faults, seeds 361 and 590).
#[test]
fn a_claim_launched_for_the_placeholder_as_the_old_claim_went_is_marked_at_completion() {
    let mut fx = launched_for_c1();
    fx.delete_claim("c1");
    fx.finalize("c1");
    assert!(fx.world.claim("c1").is_none(), "the old claim is gone");
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "the rotation ended as expired");
    placeholder_gone_and_s1_tied_to_c1(&fx);
    fx.advance(Duration::minutes(16));
    fx.tick();
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "reaped by the sweep");
}

/// The same, seen by a restarted process whose view lags the placeholder: the claim is gone
/// (its `placeholder-uid` with it), the view shows no pod, and nothing this process wrote
/// remembers the uid. The completion reads the pod before deleting it, so the mark still lists
/// its nominations (`lagging-takeovers.yaml --faults`, seed 39).
#[test]
pub fn a_restarted_completion_whose_view_lags_the_placeholder_still_marks_its_launch() {
    let mut fx = launched_for_c1();
    fx.delete_claim("c1");
    fx.finalize("c1");
    fx.restart();
    let hook = fx.intercept();
    hook.stale_cache(|view| view.placeholders.clear());
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "the rotation ended as expired");
    placeholder_gone_and_s1_tied_to_c1(&fx);
}

/// Karpenter force-expires a pending claim; the pass that marks it expired fails to delete the
/// placeholder and its process dies, and Karpenter launches a claim for the placeholder still
/// there. The next process's cleanup deletes the placeholder and then marks that claim: no mark
/// came before it, and the claim's record of the placeholder is gone (I20 on
/// `lagging-takeovers.yaml --faults`, seed 9 of 1,000).
#[test]
pub fn a_claim_launched_after_the_expiry_mark_is_marked_by_the_cleanup() {
    use noderotation::cluster::memory::{ApiVerb, Call, Fault};
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(2));
    fx.delete_claim("c1");
    fx.world.set_faults(|c: &Call<'_>| match (c.verb, c.target.kind) {
        (ApiVerb::Delete, ObjectKind::Pod) => Fault::Transient,
        _ => Fault::Proceed,
    });
    fx.client.flush_cache();
    assert!(fx.ctl.reconcile_pool(POOL).is_err(), "the placeholder's delete failed");
    fx.world.clear_faults();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("expired"));
    assert!(fx.placeholder("c1").is_some(), "left behind");
    never_ready_surge(&fx, "s1", "c1");
    fx.restart();
    fx.pass();
    placeholder_gone_and_s1_tied_to_c1(&fx);
}

/// The placeholder is gone (preempted) when Karpenter force-expires the pending claim, after
/// launching a claim for it: the expiry marks that claim while the claim's record of the
/// placeholder still names it, before the expiry mark clears the record. The cleanup's mark,
/// after its delete, would find no uid left: no pod, no record.
#[test]
pub fn a_force_expiry_marks_the_claims_launched_for_a_placeholder_already_gone() {
    let mut fx = launched_for_c1();
    let pod = noderotation::cluster::ObjectRef::pod(
        NS,
        noderotation::placeholder::placeholder_name("c1"),
    );
    assert!(fx.world.delete_now(&pod), "the placeholder is preempted");
    fx.delete_claim("c1");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("expired"));
    placeholder_gone_and_s1_tied_to_c1(&fx);
}
