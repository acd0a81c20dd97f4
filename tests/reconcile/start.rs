//! Whether and which claim a pass starts: earliest deadline first, the cooldown and failure-pause
//! gates, freeze, static pools, maintenance windows and their verdicts, the forceful fallback, and
//! the gates read again fresh before the anchor write.

use super::*;

#[test]
pub fn cooldown_after_a_success_holds_the_next_start() {
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
pub fn failed_to_pending_retry_does_not_reenter_on_a_stale_read() {
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
pub fn static_gate_lets_an_anchored_rotation_finish_but_blocks_new_starts_and_retries() {
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
pub fn earliest_deadline_first_with_mixed_expire_after() {
    let mut fx = Fx::new();
    fx.claim("old-long", Duration::days(12)).claim("young-short", Duration::days(2));
    // young-short expires after 72h: deadline in 1 day, before old-long's (2 days).
    fx.world.update_claim("young-short", |c| c.spec.expire_after = Some("72h".into()));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("young-short"));
}

#[test]
pub fn freeze_holds_a_pending_rotation_but_readytimeout_still_rolls_it_back() {
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
pub fn window_edge_verdicts_stamp_defer_settle_and_miss_once() {
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
pub fn a_stuck_drain_does_not_silence_window_missed() {
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
pub fn forceful_fallback_only_when_enabled_and_too_close_to_the_deadline() {
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
    // The edge (§3.6: `deadline - now < t_rot`, t_rot 1h17m here): a minute inside it is
    // forceful, the deadline exactly t_rot away is still a surge.
    for (minutes, forceful) in [(76, true), (77, false)] {
        let policy = policy_yaml(", forcefulFallback: {enabled: true}", None);
        let mut fx = Fx::with(policy, pool_yaml(""));
        fx.claim("edge", Duration::days(14) - Duration::minutes(minutes));
        fx.pass();
        let mode = fx.pool_ann(Key::RotationMode);
        assert_eq!(mode.as_deref() == Some("forceful-fallback"), forceful, "{minutes}m: {mode:?}");
        assert_eq!(fx.placeholder("edge").is_some(), !forceful, "{minutes}m");
    }
}

#[test]
pub fn a_start_whose_anchor_write_loses_does_nothing() {
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
pub fn a_start_judged_on_a_lagging_cache_loses_to_a_failure_stamped_since() {
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
pub fn a_start_gate_closed_on_the_fresh_read_holds_the_start() {
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
pub fn a_retry_whose_gate_closed_on_the_fresh_read_is_held() {
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
