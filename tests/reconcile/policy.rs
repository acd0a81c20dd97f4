//! Policies and the pools they govern: ties, invalid policies, the pool gauges, the policy status,
//! and a pool that carries another pool's anchor.

use super::*;

#[test]
pub fn tied_policies_are_a_conflict_warned_once_and_rotate_nothing() {
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
pub fn an_invalid_policy_governs_nothing() {
    let mut policy = policy_yaml("", None);
    policy.spec.maintenance_windows[0].timezone = "Mars/Olympus".into();
    let mut fx = Fx::with(policy, pool_yaml(""));
    fx.claim("c1", Duration::days(10));
    fx.pass();
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
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
fn governance_follows_a_relabelled_pool_and_an_edited_selector() {
    use noderotation::telemetry::PoolGauge;
    let governed = |fx: &Fx| fx.ctl.telemetry().pool_gauge(POOL, PoolGauge::WindowActive).is_some();
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.pass();
    assert!(governed(&fx));
    // The pool relabelled away from the selector: ungoverned on its next pass.
    fx.world.update_pool(POOL, |p| {
        p.metadata.labels = Some([("team".to_string(), "b".to_string())].into());
    });
    fx.pass();
    assert!(!governed(&fx), "relabelled pool still governed");
    // The policy's selector edited to the new label: governed again.
    fx.world.update_policy("rotate-a", |p| {
        p.spec.node_pool_selector.match_labels =
            Some([("team".to_string(), "b".to_string())].into());
    });
    fx.pass();
    assert!(governed(&fx), "edited selector not followed");
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

#[test]
pub fn an_anchor_naming_another_pools_claim_is_cleared_with_a_warning_and_touches_nothing() {
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
