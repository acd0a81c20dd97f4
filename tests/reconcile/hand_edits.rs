//! Annotations and markers as people (or a GitOps sync) leave them: an operator's own cordon and
//! do-not-disrupt, ours taken over or stripped, and stamps, states and anchors that are unreadable,
//! in the future, unknown, empty or left over.

use super::*;

#[test]
pub fn operator_cordon_and_do_not_disrupt_are_never_removed() {
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
pub fn a_candidate_with_the_operators_do_not_disrupt_is_skipped() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(12)).claim("c2", Duration::days(10));
    fx.set_node_ann("node-c1", Key::DoNotDisrupt, Some("true"));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c2"));
}

#[test]
pub fn unreadable_window_stamp_outside_the_window_is_cleared_silently() {
    let windows = r#"[{timezone: UTC, days: [Mon], start: "02:00", end: "04:00"}]"#;
    let mut fx = Fx::with(policy_yaml("", Some(windows)), pool_yaml(""));
    fx.set_pool_ann(Key::WindowOpenedAt, Some("yesterday"));
    fx.pass();
    assert!(fx.pool_ann(Key::WindowOpenedAt).is_none());
    assert_eq!(fx.events("WindowMissed"), 0);
}

#[test]
pub fn unreadable_freeze_counts_as_frozen_and_is_warned() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.set_pool_ann(Key::Freeze, Some("until friday"));
    fx.pass();
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert_eq!(fx.events("InvalidFreeze"), 1);
}

#[test]
pub fn a_draining_mirror_stripped_by_a_gitops_sync_is_reasserted_and_the_rotation_succeeds() {
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
pub fn an_unreadable_gate_stamp_is_warned_once_and_restamped_so_the_gate_reopens() {
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
pub fn a_started_at_in_the_future_is_warned_and_restamped_so_ready_timeout_comes() {
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
pub fn a_failed_at_in_the_future_is_warned_and_not_obeyed() {
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
pub fn a_failed_claim_without_a_readable_failed_at_is_retried_once_not_restarted_every_minute() {
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
pub fn an_empty_anchor_is_read_as_absent_and_warned() {
    let mut fx = Fx::new();
    fx.set_pool_ann(Key::ActiveRotation, Some(""));
    let report = fx.tick();
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(fx.pool_ann(Key::ActiveRotation).is_none(), "removed by the sweep");
    assert_eq!(fx.events("EmptyAnchor"), 1);
    fx.set_pool_ann(Key::ActiveRotation, Some(""));
    started(&mut fx);
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
