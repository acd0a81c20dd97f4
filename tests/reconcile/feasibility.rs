//! What the policy's arithmetic tells a pool: limits headroom, feasibility findings, throughput
//! and burst warnings, and the due instants that crowded deadlines pull forward.

use super::*;

#[test]
pub fn insufficient_headroom_is_warned_once_per_distinct_shortfall() {
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
pub fn a_fatal_feasibility_finding_blocks_new_starts() {
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
