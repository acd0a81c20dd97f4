//! Operating it, on the in-memory cluster: the RotationPolicy status per pool (written when a
//! pool changes and at window edges, never in between) and `maxUnavailable: auto` (the lanes
//! the pool needs, within the limit, following the pool's size).
mod support;

use chrono::Duration;
use noderotation::engine::Key;
use noderotation::policy::crd::{NodePoolStatus, RotationPolicy};
use support::*;

/// Wednesday and Saturday 02:00-06:00 UTC: P = 4d, so with E = 14d and K = 2 the auto age
/// threshold is 14d - (2 * 4d + t_rot 1h17m) = 5d22h43m.
const WED_SAT: &str = r#"[{timezone: UTC, days: [Wed, Sat], start: "02:00", end: "06:00"}]"#;

fn auto_policy(extra_surge: &str) -> RotationPolicy {
    let mut policy = policy_yaml(extra_surge, Some(WED_SAT));
    policy.spec.age_threshold = "auto".into();
    policy
}

fn status_writes(fx: &Fx) -> u64 {
    fx.world.call_counts().status
}

fn pool_status(fx: &Fx) -> NodePoolStatus {
    let policy = fx.world.policy("rotate-a").expect("policy");
    let status = policy.status.clone().expect("status written");
    let [pool] = status.node_pools.as_slice() else { panic!("{:?}", status.node_pools) };
    pool.clone()
}

/// Ticks every minute for `span` (the status view runs on every tick, as in `run`).
fn tick_for(fx: &mut Fx, span: Duration) {
    let end = fx.clock_now() + span;
    while fx.clock_now() < end {
        fx.advance(Duration::minutes(1));
        fx.tick();
    }
}

trait Now {
    fn clock_now(&self) -> chrono::DateTime<chrono::Utc>;
}

impl Now for Fx {
    fn clock_now(&self) -> chrono::DateTime<chrono::Utc> {
        noderotation::clock::Clock::now(&self.clock)
    }
}

/// Five quiet days (nothing changes but the clock; the status view runs every minute): the
/// status is written once at the start and once per window close, when the window it reports
/// and what is due in it move on; a window opening changes neither. A rotation's start is a pool
/// change: one write, then quiet again.
#[test]
fn policy_status_is_written_once_per_pool_change_and_window_edge() {
    // t0 is Saturday 2026-11-28 03:00 UTC, inside the Saturday window.
    let mut fx = Fx::with(auto_policy(""), pool_yaml(""));
    fx.claim("c-old", Duration::days(7)); // due since Thursday
    fx.claim("c-mid", Duration::days(4)); // due Sunday 01:43
    fx.claim("c-young", Duration::zero()); // due next Thursday 01:43
    fx.tick();
    assert_eq!(status_writes(&fx), 1);
    let first = pool_status(&fx);
    assert_eq!(
        first,
        NodePoolStatus {
            name: POOL.into(),
            next_window: Some("2026-11-28T02:00:00Z".into()),
            due: 1,
            in_flight: 0,
            max_unavailable: Some(1),
            nearest_deadline: Some("2026-12-05T03:00:00Z".into()),
            nearest_deadline_node_claim: Some("c-old".into()),
        }
    );
    let policy = fx.world.policy("rotate-a").expect("policy");
    let status = policy.status.clone().expect("status");
    assert_eq!(status.next_window.as_deref(), Some("2026-11-28T02:00:00Z"));
    assert_eq!(status.in_flight.as_deref(), Some("0/1"));

    // Saturday 06:00 closes the window: the next one is Wednesday's, and c-mid is due by then.
    tick_for(&mut fx, Duration::hours(4));
    assert_eq!(status_writes(&fx), 2, "one write at the window close");
    let wed = pool_status(&fx);
    assert_eq!(wed.next_window.as_deref(), Some("2026-12-02T02:00:00Z"));
    assert_eq!(wed.due, 2);
    // Wednesday 02:00 opens it (no write), 06:00 closes it (one write: Saturday's, all due).
    tick_for(&mut fx, Duration::days(3) + Duration::hours(21));
    assert_eq!(status_writes(&fx), 2, "nothing moved between the edges: no write");
    tick_for(&mut fx, Duration::hours(4));
    assert_eq!(status_writes(&fx), 3);
    let sat = pool_status(&fx);
    assert_eq!((sat.next_window.as_deref(), sat.due), (Some("2026-12-05T02:00:00Z"), 3));
    tick_for(&mut fx, Duration::hours(20));
    assert_eq!(status_writes(&fx), 3, "five quiet days, three writes");

    // Thursday 04:00. Saturday's window opens (no write); a pass starts c-old: one pool
    // change, one write.
    tick_for(&mut fx, Duration::hours(46) + Duration::minutes(10));
    assert_eq!(status_writes(&fx), 3);
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c-old"));
    fx.tick();
    assert_eq!(status_writes(&fx), 4);
    let rotating = pool_status(&fx);
    assert_eq!((rotating.in_flight, rotating.due), (1, 2), "in flight, no longer due");
    let status = fx.world.policy("rotate-a").and_then(|p| p.status.clone()).expect("status");
    assert_eq!(status.in_flight.as_deref(), Some("1/1"));
    tick_for(&mut fx, Duration::minutes(30));
    assert_eq!(status_writes(&fx), 4);
}

/// 30 nodes on Wednesday and Saturday need 3 rotations at once (`plan`: ceil(30 * 4d / (10 *
/// 5d22h43m))); `auto` starts exactly that many, never more, and follows the pool as it grows;
/// a limit caps it.
#[test]
fn max_unavailable_auto_starts_what_the_pool_needs_within_the_limit() {
    let started = |fx: &mut Fx, passes: usize| {
        for _ in 0..passes {
            fx.pass();
            fx.advance(Duration::seconds(5));
        }
        let annotations = fx.world.pool(POOL).and_then(|p| p.metadata.annotations.clone());
        annotations
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, v)| {
                noderotation::reconcile::slots::is_slot_key(k)
                    && k.starts_with(Key::ActiveRotation.full())
                    && !k.starts_with(Key::ActiveRotationState.full())
                    && !v.is_empty()
            })
            .count()
    };
    // Saturday 03:00, the window open; every claim due (7 days old).
    let mut fx = Fx::with(auto_policy(", maxUnavailable: auto"), pool_yaml(""));
    for i in 0..30 {
        fx.claim(&format!("c{i:02}"), Duration::days(7) + Duration::minutes(i));
    }
    assert_eq!(started(&mut fx, 10), 3, "auto: 3 lanes for 30 nodes");
    fx.tick();
    let status = pool_status(&fx);
    assert_eq!((status.in_flight, status.max_unavailable), (3, Some(3)));
    // The pool grows to 60: 5 lanes (10% of 60 is 6).
    for i in 30..60 {
        fx.claim(&format!("c{i:02}"), Duration::days(7) + Duration::minutes(i));
    }
    assert_eq!(started(&mut fx, 10), 5, "auto follows the pool");
    assert_eq!(fx.ctl.lanes_chosen(POOL), Some(5));

    // A limit of 2 caps it, whatever the pool needs.
    let mut fx =
        Fx::with(auto_policy(", maxUnavailable: auto, maxUnavailableLimit: 2"), pool_yaml(""));
    for i in 0..30 {
        fx.claim(&format!("c{i:02}"), Duration::days(7) + Duration::minutes(i));
    }
    assert_eq!(started(&mut fx, 10), 2);
    fx.tick();
    assert_eq!(pool_status(&fx).max_unavailable, Some(2));
}
