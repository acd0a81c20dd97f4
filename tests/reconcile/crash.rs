//! A process that dies in the middle of a pass, and the restart that resumes its rotation: the
//! delete re-issued, the placeholder released, write-once mirrors, a forceful start.

use super::*;

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
pub fn crash_between_the_draining_write_and_the_delete_reissues_the_delete() {
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

/// The delete fails in the surge-ready pass (the process lives on), and the surge host is then
/// lost while the view lags: it still shows the host Ready and frozen, as this process's own
/// copy from its freeze does. The re-issued delete waits for a fresh read of the host, which is
/// gone (I17 on `lagging-takeovers.yaml --faults`, seed 301 of 1,000).
#[test]
pub fn a_surge_host_gone_since_this_process_froze_it_holds_the_reissued_delete() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    // What the view will keep showing: the host and its claim before this process froze it.
    let host = surge_host_now(&fx);
    let hook = fx.intercept();
    hook.before_write(|w| w.starts_with("delete NodeClaim c1"), || panic!("the delete fails"));
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fx.pass()));
    assert!(failed.is_err());
    assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"), "frozen");
    fx.delete_claim("s1");
    fx.finalize("s1");
    show_host(&hook, host);
    fx.pass();
    assert!(!fx.deleting("c1"), "no delete without a Ready surge (forcefulFallback is off)");
}

/// The same crash, and then the surge host is lost before the recovery (a spot interruption of
/// the new node): the old claim has no capacity to drain onto, and deleting it would be a
/// surge-less delete no policy allowed. The attempt goes back to pending (mirror cleared first,
/// so a forced expiry meanwhile counts as expired), reserves again, and drains onto the new host.
#[test]
pub fn a_surge_host_lost_before_the_reissued_delete_sends_the_rotation_back_to_pending() {
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

#[test]
pub fn crash_before_the_placeholder_delete_releases_it_in_draining_then_deletes_the_claim() {
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
pub fn a_crash_after_the_first_write_of_a_forceful_start_never_becomes_a_surge() {
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
pub fn a_retried_escalation_keeps_the_first_draining_mirrors() {
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
