//! Unit tests of feasibility: [`assess()`] layer by layer, [`short_lead()`], [`smallest_percent`].
use super::*;
use crate::policy::settings::tests::spec_with;
use crate::policy::settings::{Effective, IntOrPercent};
use chrono::TimeZone;
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().unwrap_or_else(|| panic!("date"))
}

fn pool(e_days: i64, tgp: Option<Duration>, nodes: u64) -> PoolFacts {
    PoolFacts {
        expire_after: ExpireAfter::After(Duration::days(e_days)),
        termination_grace_period: tgp,
        nodes: Some(nodes),
        exhausted_limits: vec![],
        static_pool: false,
    }
}

fn reasons(a: &Assessment) -> Vec<Cause> {
    a.findings.iter().map(|f| f.reason).collect()
}

fn settings(windows: &[(&str, &[&str], &str, &str)]) -> Effective {
    Effective::from_spec(&spec_with(windows)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn worked_example_is_feasible() {
    let s = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let a = assess(&s, &pool(14, Some(Duration::hours(1)), 10), now());
    let d = &a.derived;
    assert_eq!(d.period, Some(Duration::days(4)));
    assert_eq!(d.t_rot, Duration::minutes(77));
    assert_eq!(d.t_rot_est, Duration::minutes(15));
    assert_eq!(
        d.age_threshold,
        Some(Duration::days(14) - (Duration::days(8) + Duration::minutes(77)))
    );
    assert_eq!(d.lead_time, Some(Duration::days(8) + Duration::minutes(77)));
    assert_eq!(d.starts_per_occurrence, Some(10));
    assert_eq!(d.chances, Some(2));
    assert!(!a.has_fatal(), "{:?}", a.findings);
    assert_eq!(reasons(&a), Vec::<Cause>::new());
}

#[test]
fn weekly_window_is_fatal() {
    let s = settings(&[("Asia/Tokyo", &["Sat"], "02:00", "06:00")]);
    let a = assess(&s, &pool(14, Some(Duration::hours(1)), 20), now());
    assert!(a.has_fatal());
    assert_eq!(reasons(&a), [Cause::AgeThresholdNotPositive]);
    let f = &a.findings[0];
    assert_eq!(f.severity, Severity::Fatal);
    assert_eq!(f.reason.event_reason(), "Infeasible");
    assert!(f.message.contains("14d - (2*7d + 1h17m) = -1h17m"), "{}", f.message);
}

#[test]
fn no_windows_and_k_below_one_are_fatal() {
    let mut spec = spec_with(&[]);
    spec.min_rotation_chances = 0;
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let a = assess(&s, &pool(14, Some(Duration::hours(1)), 20), now());
    assert_eq!(reasons(&a), [Cause::NoWindows, Cause::KBelowOne]);
    assert_eq!(a.derived.period, None);
}

#[test]
fn layer_one_warnings() {
    let mut spec = spec_with(&[("UTC", &["Mon", "Wed", "Fri"], "02:00", "06:00")]);
    spec.min_rotation_chances = 1;
    spec.surge.retry_backoff = "10m".into();
    spec.surge.drain_estimate = Some("45m".into());
    spec.surge.match_node_requirements.required = vec!["kubernetes.io/arch".into()];
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let mut p = pool(21, Some(Duration::minutes(30)), 0);
    p.exhausted_limits = vec!["cpu".into()];
    p.static_pool = true;
    let a = assess(&s, &p, now());
    assert_eq!(
        reasons(&a),
        [
            Cause::KBelowTwo,
            Cause::HardCapExceeded,
            Cause::RetryBackoffShort,
            Cause::DrainEstimateAboveTGP,
            Cause::NoLimitsHeadroom,
            Cause::StaticNodePool,
            Cause::ZoneNotRequired,
        ]
    );
    let p = pool(14, None, 0);
    let a = assess(
        &settings(&[("UTC", &["Mon"], "02:00", "06:00")]),
        &PoolFacts { expire_after: ExpireAfter::Never, ..p },
        now(),
    );
    assert_eq!(reasons(&a), [Cause::HardCapExceeded, Cause::TGPUnset]);
    assert_eq!(a.derived.age_threshold, None);
}

#[test]
fn very_aggressive_auto_threshold() {
    // Daily 1h window, E = 3d, K = 2: P = 1d, A = 3d - (2d + 1h17m) = 22h43m < P.
    let all: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let s = settings(&[("UTC", all, "02:00", "03:00")]);
    let a = assess(&s, &pool(3, Some(Duration::hours(1)), 1), now());
    assert_eq!(reasons(&a), [Cause::AVeryAggressive]);
}

#[test]
fn override_chances() {
    let mut spec = spec_with(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let t = Some(Duration::hours(1));
    spec.age_threshold = "120h".into(); // G = floor((14d - 5d - 1h17m) / 4d) = 2
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let a = assess(&s, &pool(14, t, 2), now());
    assert_eq!(a.derived.chances, Some(2));
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    spec.age_threshold = "168h".into(); // G = floor((7d - 1h17m) / 4d) = 1
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reasons(&assess(&s, &pool(14, t, 2), now())), [Cause::OverrideGBelowK]);
    spec.age_threshold = "264h".into(); // G = floor((3d - 1h17m) / 4d) = 0
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let a = assess(&s, &pool(14, t, 2), now());
    assert_eq!(reasons(&a), [Cause::OverrideBelowOneChance]);
    assert!(a.has_fatal());
    assert!(a.findings[0].fix.contains("at most 5d22h43m"), "{}", a.findings[0].fix);
    // E = 8d < K*P + t_rot: no ageThreshold gives K chances; never advise a negative one.
    spec.age_threshold = "24h".into();
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let a = assess(&s, &pool(8, t, 2), now());
    let f = a.findings.iter().find(|f| f.reason == Cause::OverrideGBelowK);
    let fix = &f.unwrap_or_else(|| panic!("{:?}", a.findings)).fix;
    assert!(fix.contains("raise the NodePool's expireAfter") && !fix.contains('-'), "{fix}");
}

#[test]
fn throughput() {
    // Worked example with 200 nodes: C*A = 10 * 5.9d < 200 * 4d; K*C = 20 < 200.
    let s = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let a = assess(&s, &pool(14, Some(Duration::hours(1)), 200), now());
    assert_eq!(reasons(&a), [Cause::ThroughputBelowArrival, Cause::ThroughputBurstShortfall]);
    // 14 nodes: arrivals fine (10 * 5d22h43m >= 14 * 4d), burst 20 >= 14.
    let a = assess(&s, &pool(14, Some(Duration::hours(1)), 14), now());
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    // Two windows 30 minutes apart: a 25m rotation slot fits, 45m does not.
    let mut spec =
        spec_with(&[("UTC", &["Sat"], "02:00", "04:00"), ("UTC", &["Sat"], "04:30", "06:00")]);
    spec.surge.cooldown_after = "30m".into();
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let a = assess(&s, &pool(20, Some(Duration::hours(1)), 1), now());
    assert!(reasons(&a).contains(&Cause::RotationSpansNextWindow), "{:?}", a.findings);
    let gap = a.derived.shortest_gap;
    assert_eq!(gap, Some(Duration::minutes(30)));
}

#[test]
fn always_open_throughput_uses_the_rotation_rate() {
    let all: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let s = settings(&[("UTC", all, "00:00", "00:00")]);
    let a = assess(&s, &pool(14, Some(Duration::hours(1)), 3), now());
    assert!(a.derived.always_open);
    assert_eq!(a.derived.period, Some(Duration::minutes(1)));
    assert_eq!(a.derived.starts_per_occurrence, None);
    // Lead time is K*1m + t_rot: a batch of 3 sharing a deadline cannot all finish.
    assert_eq!(reasons(&a), [Cause::ThroughputBurstShortfall]);
    let a = assess(&s, &pool(14, Some(Duration::hours(1)), 1), now());
    assert!(a.findings.is_empty(), "{:?}", a.findings);
}

#[test]
fn short_lead_per_claim() {
    let s = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let p = Duration::days(4);
    let tgp = Some(Duration::hours(1));
    let short = |e| short_lead(&s, e, tgp, p, None, &[]);
    assert_eq!(short(ExpireAfter::After(Duration::days(14))), None);
    let f = short(ExpireAfter::After(Duration::days(8) + Duration::minutes(77)));
    assert_eq!(f.map(|f| f.reason), Some(Cause::ShortLead));
    assert_eq!(short(ExpireAfter::Never), None);
}

fn windows_mode(windows: &[(&str, &[&str], &str, &str)]) -> Effective {
    let mut spec = spec_with(windows);
    spec.age_threshold = "windows".into();
    Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn windows_mode_guarantees_k_and_says_how_early() {
    // The worked example under windows: K = 2 guaranteed, due 3d1h17m to 7d1h17m before the
    // deadline, so a node falls due at 6d22h43m at the earliest (auto: 5d22h43m).
    let s = windows_mode(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let t = Some(Duration::hours(1));
    let a = assess(&s, &pool(14, t, 10), now());
    assert_eq!(a.derived.chances, Some(2));
    assert_eq!(a.derived.lead_time, Some(Duration::days(7) + Duration::minutes(77)));
    assert_eq!(
        a.derived.age_threshold,
        Some(Duration::days(7) - Duration::minutes(77)),
        "the earliest due age"
    );
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    // E = 7d: infeasible for auto (8d1h17m of lead), feasible here, but a node created in
    // a window that is already one of its last two is due at once.
    let a = assess(&s, &pool(7, t, 1), now());
    assert_eq!(reasons(&a), [Cause::AVeryAggressive]);
    assert_eq!(a.derived.age_threshold, Some(Duration::zero()));
    assert!(a.findings[0].message.starts_with("a node can fall due at age 0s"));
    let auto = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    assert_eq!(reasons(&assess(&auto, &pool(7, t, 1), now())), [Cause::AgeThresholdNotPositive]);
}

#[test]
fn windows_mode_with_fewer_than_k_chances_is_fatal_and_says_what_to_change() {
    // E = 6d: a node created as Wednesday's window closes sees only Saturday's before its
    // deadline (the Wednesday after is 6d20h away). Every node needs 6d20h + t_rot.
    let s = windows_mode(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let a = assess(&s, &pool(6, Some(Duration::hours(1)), 1), now());
    assert_eq!(reasons(&a), [Cause::WindowChancesBelowK]);
    assert!(a.has_fatal());
    assert_eq!(a.derived.chances, Some(1));
    let f = &a.findings[0];
    assert_eq!(f.reason.event_reason(), "Infeasible");
    assert!(f.message.contains("gets only 1 window occurrence(s)"), "{}", f.message);
    assert_eq!(
        f.fix,
        "raise the NodePool's expireAfter to at least 6d21h17m, add maintenance windows, or \
         lower minRotationChances to 1"
    );
    let short_by = Duration::hours(21) + Duration::minutes(17);
    assert_eq!(a.derived.age_threshold, Some(-short_by), "E minus what K chances need");
    // A weekly window cannot give every node two chances in 8 days.
    let monthly = windows_mode(&[("UTC", &["Sat"], "02:00", "06:00")]);
    let a = assess(&monthly, &pool(8, Some(Duration::hours(1)), 1), now());
    assert_eq!(reasons(&a), [Cause::WindowChancesBelowK]);
    assert_eq!(a.derived.chances, Some(1));
}

#[test]
fn windows_mode_open_around_the_clock_is_auto() {
    let all: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let w = assess(&windows_mode(&[("UTC", all, "00:00", "00:00")]), &pool(14, None, 1), now());
    let a = assess(&settings(&[("UTC", all, "00:00", "00:00")]), &pool(14, None, 1), now());
    assert_eq!(w, a);
}

#[test]
fn short_lead_per_claim_under_windows_counts_its_own_life() {
    // Wed and Sat 02:00-06:00 UTC, K = 2, E = 4d: created on a Wednesday at 05:00 (inside
    // the window) a claim has two chances, created at 07:00 only Saturday's.
    let s = windows_mode(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
    let tgp = Some(Duration::hours(1));
    let e = ExpireAfter::After(Duration::days(4));
    let p = Duration::days(4);
    let at = |h| Utc.with_ymd_and_hms(2026, 6, 3, h, 0, 0).single();
    assert_eq!(short_lead(&s, e, tgp, p, at(5), &[]), None);
    let f = short_lead(&s, e, tgp, p, at(7), &[]).unwrap_or_else(|| panic!("short"));
    assert_eq!(f.reason, Cause::ShortLead);
    assert!(f.message.contains("leaves this node 1 window occurrence(s)"), "{}", f.message);
    assert_eq!(short_lead(&s, ExpireAfter::Never, tgp, p, at(7), &[]), None);
    // Auto judges E alone: 4d <= 2*4d + 1h17m.
    let auto = settings(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
    assert!(short_lead(&auto, e, tgp, p, at(5), &[]).is_some());
}

#[test]
fn reason_names_round_trip() {
    for r in [Cause::TGPUnset, Cause::DrainEstimateAboveTGP, Cause::ShortLead] {
        let json = serde_json::to_string(&r).unwrap_or_default();
        assert_eq!(json, format!("\"{}\"", r.as_str()));
    }
}

fn with_max_unavailable(windows: &[(&str, &[&str], &str, &str)], m: IntOrString) -> Effective {
    let mut spec = spec_with(windows);
    spec.surge.max_unavailable = m;
    Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"))
}

fn message(a: &Assessment, reason: Cause) -> String {
    let f = a.findings.iter().find(|f| f.reason == reason);
    f.map(|f| f.message.clone()).unwrap_or_else(|| panic!("no {reason}: {:?}", a.findings))
}

#[test]
fn throughput_findings_say_which_max_unavailable_fixes_them() {
    // Worked example with 200 nodes: one lane starts 10 per occurrence. Arrivals need
    // ceil(200 * 4d / (10 * 5d22h43m)) = 14 lanes, a burst ceil(200 / (2 * 10)) = 10.
    const TOKYO: &[(&str, &[&str], &str, &str)] =
        &[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")];
    let t = Some(Duration::hours(1));
    let assess_with =
        |m: IntOrString| assess(&with_max_unavailable(TOKYO, m), &pool(14, t, 200), now());
    let one = assess_with(IntOrString::Int(1));
    assert_eq!(one.derived.lanes, 1);
    assert_eq!(one.derived.lanes_needed, Some(14));
    assert_eq!(one.derived.starts_per_occurrence, Some(10));
    let arrival = message(&one, Cause::ThroughputBelowArrival);
    assert!(arrival.ends_with("surge.maxUnavailable 14 or more would fix it"), "{arrival}");
    let burst = message(&one, Cause::ThroughputBurstShortfall);
    assert!(burst.ends_with("surge.maxUnavailable 10 or more would fix it"), "{burst}");
    // The smallest lane count that fixes each is exactly the one it names.
    let reasons_with = |m: i32| reasons(&assess_with(IntOrString::Int(m)));
    assert_eq!(reasons_with(9), [Cause::ThroughputBelowArrival, Cause::ThroughputBurstShortfall]);
    assert_eq!(reasons_with(10), [Cause::ThroughputBelowArrival]);
    assert_eq!(reasons_with(13), [Cause::ThroughputBelowArrival]);
    assert_eq!(reasons_with(14), []);
    let fourteen = assess_with(IntOrString::Int(14));
    assert_eq!(fourteen.derived.starts_per_occurrence, Some(140), "C = m * 10");
    assert_eq!(fourteen.derived.lanes_needed, Some(14), "what the pool needs, not the policy");
    // A percentage is resolved against the nodes and advised as one: 5% of 200 is 10 lanes,
    // 7% (14) is the smallest that fixes the arrivals.
    let five = assess_with(IntOrString::String("5%".into()));
    assert_eq!(five.derived.lanes, 10);
    assert_eq!(reasons(&five), [Cause::ThroughputBelowArrival]);
    let arrival = message(&five, Cause::ThroughputBelowArrival);
    assert!(
        arrival.ends_with(
            "surge.maxUnavailable \"7%\" (14 of 200 nodes at once) or more would fix it"
        ),
        "{arrival}"
    );
    assert_eq!(reasons(&assess_with(IntOrString::String("7%".into()))), []);
    assert_eq!(reasons(&assess_with(IntOrString::String("6%".into()))).len(), 1);
}

/// `maxUnavailable: auto` uses exactly the lanes the pool needs (so no throughput finding),
/// within its limit; a limit below the need leaves the arrival warning, which names the
/// limit to raise, in the limit's own form.
#[test]
fn auto_uses_the_need_within_its_limit_and_names_the_limit_to_raise() {
    const TOKYO: &[(&str, &[&str], &str, &str)] =
        &[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")];
    let t = Some(Duration::hours(1));
    let auto = |limit: Option<IntOrString>, nodes: u64| {
        let mut spec = spec_with(TOKYO);
        spec.surge.max_unavailable = IntOrString::String("auto".into());
        spec.surge.max_unavailable_limit = limit;
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        let facts = pool(14, t, nodes);
        let a = assess(&s, &facts, now());
        let why = a.derived.lanes_reason.clone();
        (a, why)
    };
    // 200 nodes need 14 (the worked example above); 10% of 200 is 20.
    let (a, why) = auto(None, 200);
    assert_eq!(
        (a.derived.lanes, a.derived.lanes_needed, a.derived.lanes_limit),
        (14, Some(14), Some(20))
    );
    assert_eq!(reasons(&a), [], "auto sizes the pool: no throughput finding");
    assert_eq!(
        why,
        "auto: the fewest that keep every node's 2 chance(s) for 200 nodes: 14 \
         (maxUnavailableLimit 10%: 20)"
    );
    // The pool grows: auto follows it.
    let (bigger, _) = auto(None, 240);
    assert_eq!(bigger.derived.lanes, 17, "what plan advises for 240 nodes");
    // A count limit below the need: capped, and the warning names the limit.
    let (capped, why) = auto(Some(IntOrString::Int(10)), 200);
    assert_eq!(capped.derived.lanes, 10);
    assert_eq!(why, "auto: 14 needed for 200 nodes, capped at maxUnavailableLimit 10 (10)");
    let arrival = message(&capped, Cause::ThroughputBelowArrival);
    assert!(arrival.ends_with("surge.maxUnavailableLimit 14 or more would fix it"), "{arrival}");
    let finding = capped.findings.iter().find(|f| f.reason == Cause::ThroughputBelowArrival);
    assert!(
        finding.is_some_and(|f| f.fix.starts_with("raise surge.maxUnavailableLimit,")),
        "{finding:?}"
    );
    // A percentage limit is advised as one: 7% of 200 is the smallest that holds 14.
    let (five, _) = auto(Some(IntOrString::String("5%".into())), 200);
    assert_eq!(five.derived.lanes, 10);
    let arrival = message(&five, Cause::ThroughputBelowArrival);
    assert!(
        arrival.ends_with(
            "surge.maxUnavailableLimit \"7%\" (14 of 200 nodes at once) or more would fix it"
        ),
        "{arrival}"
    );
    // More than 100 needed: auto stops at 100 even under a 100% limit, and the warning says
    // that no limit fixes it.
    let (huge, why) = auto(Some(IntOrString::String("100%".into())), 2000);
    assert_eq!((huge.derived.lanes, huge.derived.lanes_limit), (100, Some(100)));
    let needed = huge.derived.lanes_needed.unwrap_or_default();
    assert!(needed > 100, "{needed}");
    assert_eq!(
        why,
        format!("auto: {needed} needed for 2000 nodes, capped at maxUnavailableLimit 100% (100)")
    );
    let arrival = message(&huge, Cause::ThroughputBelowArrival);
    assert!(
        arrival.ends_with(&format!(
            "it needs {needed} rotations at once, more than surge.maxUnavailable allows \
             (100): lengthen or add maintenance windows, or split the pool"
        )),
        "{arrival}"
    );
    let finding = huge.findings.iter().find(|f| f.reason == Cause::ThroughputBelowArrival);
    assert!(
        finding.is_some_and(|f| f.fix.starts_with("lengthen or add maintenance windows,")),
        "no limit to raise: {finding:?}"
    );
    // No node count: one lane, and why.
    let mut spec = spec_with(TOKYO);
    spec.surge.max_unavailable = IntOrString::String("auto".into());
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let mut facts = pool(14, t, 1);
    facts.nodes = None;
    let a = assess(&s, &facts, now());
    assert_eq!(a.derived.lanes, 1);
    assert_eq!(a.derived.lanes_reason, "auto: 1, the need is unknown (node count unknown)");
}

#[test]
fn windows_mode_counts_lanes_in_its_burst_capacity_too() {
    // ageThreshold windows on the worked example: K = 2 chances of 10 starts per lane; the
    // earliest due age 6d22h43m makes arrivals need ceil(200 * 4d / (10 * 6d22h43m)) = 12.
    let mut spec = spec_with(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    spec.age_threshold = "windows".into();
    let t = Some(Duration::hours(1));
    let reasons_with = |m: i32| {
        let mut spec = spec.clone();
        spec.surge.max_unavailable = IntOrString::Int(m);
        let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        reasons(&assess(&s, &pool(14, t, 200), now()))
    };
    let both = [Cause::ThroughputBelowArrival, Cause::ThroughputBurstShortfall];
    assert_eq!(reasons_with(9), both);
    assert_eq!(reasons_with(10), [Cause::ThroughputBelowArrival]);
    assert_eq!(reasons_with(11), [Cause::ThroughputBelowArrival]);
    assert_eq!(reasons_with(12), []);
}

#[test]
fn lanes_open_around_the_clock_start_one_each_per_slot() {
    // 24/7, K = 2: the lead is 2m + t_rot, a 25m slot gives each lane one start in it, so
    // three nodes created together need three lanes.
    const ALL: &[(&str, &[&str], &str, &str)] =
        &[("UTC", &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], "00:00", "00:00")];
    let t = Some(Duration::hours(1));
    let one = assess(&with_max_unavailable(ALL, IntOrString::Int(1)), &pool(14, t, 3), now());
    let burst = message(&one, Cause::ThroughputBurstShortfall);
    assert!(burst.ends_with("surge.maxUnavailable 3 or more would fix it"), "{burst}");
    let two = assess(&with_max_unavailable(ALL, IntOrString::Int(2)), &pool(14, t, 3), now());
    let burst = message(&two, Cause::ThroughputBurstShortfall);
    assert!(burst.contains("allow only 2 rotation(s) before it (2 at once)"), "{burst}");
    let three = assess(&with_max_unavailable(ALL, IntOrString::Int(3)), &pool(14, t, 3), now());
    assert!(three.findings.is_empty(), "{:?}", three.findings);
    assert_eq!(three.derived.starts_per_occurrence, None, "continuous");
    // Arrivals open 24/7: one lane rotates a node per 25m slot; 14d of lead holds plenty.
    assert_eq!(three.derived.lanes_needed, Some(1));
}

#[test]
fn lanes_do_not_shorten_a_rotation_that_spans_the_next_window() {
    let mut spec =
        spec_with(&[("UTC", &["Sat"], "02:00", "04:00"), ("UTC", &["Sat"], "04:30", "06:00")]);
    spec.surge.cooldown_after = "30m".into();
    spec.surge.max_unavailable = IntOrString::Int(4);
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let a = assess(&s, &pool(20, Some(Duration::hours(1)), 1), now());
    let spans = message(&a, Cause::RotationSpansNextWindow);
    assert!(spans.contains("no surge.maxUnavailable changes that"), "{spans}");
}

#[test]
fn smallest_percent_resolves_to_at_least_the_lanes() {
    for nodes in [1u64, 3, 7, 10, 99, 200, 241, 1000] {
        for lanes in 1..=usize::try_from(nodes).unwrap_or(0).min(100) {
            let p = smallest_percent(lanes, nodes).unwrap_or_else(|| panic!("{lanes}/{nodes}"));
            let n = usize::try_from(nodes).unwrap_or(0);
            assert!(IntOrPercent::Percent(p).resolve(n) >= lanes, "{p}% of {nodes}");
            if p > 1 {
                assert!(IntOrPercent::Percent(p - 1).resolve(n) < lanes, "{p}% of {nodes}");
            }
        }
    }
    assert_eq!(smallest_percent(11, 10), None, "more lanes than nodes");
    assert_eq!(smallest_percent(101, 1000), None, "more lanes than maxUnavailable allows");
    assert_eq!(smallest_percent(1, 0), None);
}
