//! The derivations of `policy::derive`, one behaviour each.
use super::*;
use crate::policy::settings::tests::spec_with;
use crate::policy::window::Occurrence;
use chrono::TimeZone;

#[test]
fn retry_count_parses_saturating_and_reads_garbage_as_zero() {
    assert_eq!(parse_retry_count(None), 0);
    assert_eq!(parse_retry_count(Some("3")), 3);
    assert_eq!(parse_retry_count(Some("18446744073709551615")), u64::MAX);
    assert_eq!(parse_retry_count(Some("18446744073709551616")), u64::MAX);
    assert_eq!(parse_retry_count(Some("99999999999999999999999999")), u64::MAX);
    for garbage in ["", "many", "-1", "+1", "1.5", " 2", "0x10"] {
        assert_eq!(parse_retry_count(Some(garbage)), 0, "{garbage:?}");
    }
    assert_eq!(retry_count_u32(Some("18446744073709551615")), u32::MAX);
    // The backoff of a saturated count is the cap, not an overflow.
    assert_eq!(backoff(Duration::minutes(30), u32::MAX), Duration::hours(4));
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).single().unwrap_or_else(|| panic!("bad date"))
}

fn settings(windows: &[(&str, &[&str], &str, &str)]) -> Effective {
    Effective::from_spec(&spec_with(windows)).unwrap_or_else(|e| panic!("{e}"))
}

fn claim(created: DateTime<Utc>) -> ClaimFacts {
    ClaimFacts::idle(created, ExpireAfter::After(Duration::days(14)), Some(Duration::hours(1)))
}

/// The census counts candidates by [`candidate_since`]: it must say what
/// [`candidacy_due`] says at every instant, for every fact that can make a claim no
/// candidate, under each age threshold (the strict `auto` and 24/7 comparisons included).
#[test]
fn candidate_since_agrees_with_candidacy_at_every_instant() {
    let created = utc(2026, 1, 1, 0, 0);
    let at = utc(2026, 1, 10, 3, 0);
    let windows = settings(&[("UTC", &["Sat"], "02:00", "06:00")]);
    let all_week = settings(&[]);
    let mut auto = windows.clone();
    auto.age_threshold = AgeThreshold::Auto;
    let mut fixed = windows.clone();
    fixed.age_threshold = AgeThreshold::Override(Duration::days(7));
    let mut windowed = windows.clone();
    windowed.age_threshold = AgeThreshold::Windows;
    let mut always = all_week.clone();
    always.age_threshold = AgeThreshold::Windows;
    let base = claim(created);
    let variants = [
        base.clone(),
        ClaimFacts { deleting: true, ..base.clone() },
        ClaimFacts { ready: false, ..base.clone() },
        ClaimFacts { state: ClaimState::InRotation, ..base.clone() },
        ClaimFacts { operator_do_not_disrupt: true, ..base.clone() },
        ClaimFacts { state: ClaimState::Failed, failed_at: Some(at), ..base.clone() },
    ];
    let instants =
        [at - Duration::seconds(1), at, at + Duration::seconds(1), at + Duration::days(1)];
    for s in [&auto, &fixed, &windowed, &always] {
        for f in &variants {
            for due in [None, Some(at)] {
                for now in instants {
                    let want = candidacy_due(f, s, due, now) == Candidacy::Candidate;
                    let got = match candidate_since(f, due) {
                        CandidateSince::Never => false,
                        CandidateSince::Due(at) => due_reached(s, at, now),
                        CandidateSince::Ask => want,
                    };
                    assert_eq!(got, want, "{:?} {f:?} due {due:?} at {now}", s.age_threshold);
                }
            }
        }
    }
}

#[test]
fn worked_example() {
    let s = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let p = s.schedule.period(utc(2026, 1, 1, 0, 0)).unwrap_or_default();
    assert_eq!(p, Duration::days(4));
    let t_rot = s.t_rot(Some(Duration::hours(1)));
    assert_eq!(t_rot, Duration::minutes(77));
    let a = auto_age_threshold(Duration::days(14), 2, p, t_rot);
    assert_eq!(a, Duration::days(14) - (Duration::days(8) + Duration::minutes(77)));
    assert_eq!(s.t_rot_est(Some(Duration::hours(1))), Duration::minutes(15));
    let c = |lanes| {
        starts_per_occurrence(Duration::hours(4), Duration::minutes(15), s.cooldown_after, lanes)
    };
    assert_eq!(c(1), 10);
    assert_eq!((c(0), c(3)), (10, 30), "m lanes start m times as many");
    let weekly = settings(&[("Asia/Tokyo", &["Sat"], "02:00", "06:00")]);
    let p = weekly.schedule.period(utc(2026, 1, 1, 0, 0)).unwrap_or_default();
    assert!(auto_age_threshold(Duration::days(14), 2, p, t_rot) <= Duration::zero());
}

#[test]
fn absurd_k_saturates_instead_of_panicking() {
    let lead = lead_time(u32::MAX, Duration::weeks(53), Duration::minutes(77));
    assert_eq!(lead, Duration::MAX);
    assert!(
        auto_age_threshold(Duration::days(14), u32::MAX, Duration::weeks(53), lead)
            < Duration::zero()
    );
    assert_eq!(times(Duration::days(1), 3), Duration::days(3));
}

#[test]
fn t_rot_without_tgp_uses_one_hour() {
    assert_eq!(t_rot(Duration::minutes(15), None), Duration::minutes(77));
    assert_eq!(drain_bound(None), Duration::minutes(62));
    assert_eq!(drain_bound(Some(Duration::hours(24))), Duration::minutes(24 * 60 + 2));
    assert_eq!(
        t_rot(Duration::minutes(15), Some(Duration::hours(24))),
        Duration::minutes(15 + 24 * 60 + 2)
    );
}

#[test]
fn guaranteed_chances_floor() {
    let p = Duration::days(4);
    let t = Duration::minutes(77);
    assert_eq!(guaranteed_chances(Duration::days(14), Duration::days(5), p, t), 2);
    assert_eq!(guaranteed_chances(Duration::days(14), Duration::days(6), p, t), 1);
    assert_eq!(guaranteed_chances(Duration::days(14), Duration::days(10), p, t), 0);
    assert_eq!(guaranteed_chances(Duration::days(14), Duration::days(14), p, t), -1);
}

#[test]
fn backoff_escalates_and_caps_at_eight() {
    let rb = Duration::minutes(30);
    let got: Vec<i64> = (0..7).map(|n| backoff(rb, n).num_minutes()).collect();
    assert_eq!(got, [30, 30, 60, 120, 240, 240, 240]);
    assert_eq!(backoff(rb, u32::MAX), Duration::minutes(240));
}

#[test]
fn backoff_clamps_to_the_occurrence_end() {
    // Sat 02:00-06:00 UTC; failure at 05:00, second failure: backoff 1h -> 06:00 = end.
    let s = settings(&[("UTC", &["Sat"], "02:00", "06:00")]);
    let rb = Duration::minutes(30);
    let failed = utc(2026, 6, 6, 5, 0);
    assert_eq!(eligible_at(failed, 3, rb, &s.schedule), utc(2026, 6, 6, 6, 0)); // 2h backoff
    assert_eq!(eligible_at(failed, 1, rb, &s.schedule), utc(2026, 6, 6, 5, 30));
    // Failed outside any occurrence: eligible at once.
    assert_eq!(eligible_at(utc(2026, 6, 6, 7, 0), 3, rb, &s.schedule), utc(2026, 6, 6, 7, 0));
    // Next attempt: inside the same occurrence, or else the next occurrence's start.
    assert_eq!(next_attempt(failed, 1, rb, &s.schedule), Some(utc(2026, 6, 6, 5, 30)));
    assert_eq!(next_attempt(failed, 3, rb, &s.schedule), Some(utc(2026, 6, 13, 2, 0)));
    assert_eq!(
        next_attempt(utc(2026, 6, 6, 7, 0), 1, rb, &s.schedule),
        Some(utc(2026, 6, 13, 2, 0))
    );
}

#[test]
fn extending_the_window_moves_eligibility() {
    // The clamp is recomputed from the current schedule: failure at 05:00 with a 4h backoff.
    let failed = utc(2026, 6, 6, 5, 0);
    let rb = Duration::hours(1);
    let eligible = |end: &str| {
        let s = settings(&[("UTC", &["Sat"], "02:00", end)]);
        eligible_at(failed, 3, rb, &s.schedule)
    };
    assert_eq!(eligible("06:00"), utc(2026, 6, 6, 6, 0)); // clamped at the end
    assert_eq!(eligible("08:00"), utc(2026, 6, 6, 8, 0)); // extended end moves it later
    assert_eq!(eligible("12:00"), utc(2026, 6, 6, 9, 0)); // now the backoff itself binds
    assert_eq!(eligible("04:00"), failed); // shrunk: failed-at is outside, eligible at once
    // Adding a touching entry extends the merged occurrence the same way.
    let s = settings(&[("UTC", &["Sat"], "02:00", "06:00"), ("UTC", &["Sat"], "06:00", "07:00")]);
    assert_eq!(
        s.schedule.occurrence_containing(failed),
        Some(Occurrence { start: utc(2026, 6, 6, 2, 0), end: utc(2026, 6, 6, 7, 0) })
    );
    assert_eq!(eligible_at(failed, 3, rb, &s.schedule), utc(2026, 6, 6, 7, 0));
}

#[test]
fn candidate_predicate() {
    let s = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let p = Duration::days(4);
    let created = utc(2026, 6, 1, 0, 0);
    let c = claim(created);
    let due = due_after(&c, &s, p).unwrap_or_else(|| panic!("due"));
    assert_eq!(due, created + Duration::days(14) - Duration::days(8) - Duration::minutes(77));
    assert_eq!(candidacy(&c, &s, p, due), Candidacy::NotDue { due_after: Some(due) });
    let now = due + Duration::seconds(1);
    assert_eq!(candidacy(&c, &s, p, now), Candidacy::Candidate);
    assert!(is_candidate(&c, &s, p, now));
    let with = |f: &dyn Fn(&mut ClaimFacts)| {
        let mut c = claim(created);
        f(&mut c);
        candidacy(&c, &s, p, now)
    };
    assert_eq!(with(&|c| c.ready = false), Candidacy::NotReady);
    assert_eq!(with(&|c| c.deleting = true), Candidacy::Deleting);
    assert_eq!(with(&|c| c.state = ClaimState::InRotation), Candidacy::InRotation);
    assert_eq!(with(&|c| c.operator_do_not_disrupt = true), Candidacy::OperatorOptOut);
    assert_eq!(
        with(&|c| c.expire_after = ExpireAfter::Never),
        Candidacy::NotDue { due_after: None }
    );
    // Failed, failed-at outside an occurrence: eligible at once.
    assert_eq!(
        with(&|c| {
            c.state = ClaimState::Failed;
            c.retry_count = 2;
            c.failed_at = Some(now - Duration::minutes(1));
        }),
        Candidacy::Candidate
    );
    // Failed inside Sat 02:00-06:00 JST (Fri 17:00-21:00 UTC) with 1h backoff: backing off.
    let failed_at = utc(2026, 6, 12, 17, 30);
    let later = failed_at + Duration::minutes(10);
    let mut f = claim(created);
    f.state = ClaimState::Failed;
    f.retry_count = 2;
    f.failed_at = Some(failed_at);
    assert_eq!(
        candidacy(&f, &s, p, later),
        Candidacy::BackingOff { until: failed_at + Duration::hours(1) }
    );
    assert_eq!(candidacy(&f, &s, p, failed_at + Duration::hours(1)), Candidacy::Candidate);
    // A failed-at in the future is no backoff (invalid, not obeyed); within the clock-skew
    // tolerance it is a failed-at like any other.
    f.failed_at = Some(later + Duration::days(365));
    assert_eq!(candidacy(&f, &s, p, later), Candidacy::Candidate);
    f.failed_at = Some(later + STAMP_SKEW_TOLERANCE);
    assert!(matches!(candidacy(&f, &s, p, later), Candidacy::BackingOff { .. }));
    assert!(in_the_future(later + STAMP_SKEW_TOLERANCE + Duration::seconds(1), later));
    assert!(!in_the_future(later + STAMP_SKEW_TOLERANCE, later));
    // ShortLead: E <= lead time, due from creation.
    let mut short = claim(created);
    short.expire_after = ExpireAfter::After(Duration::days(7));
    assert_eq!(candidacy(&short, &s, p, created + Duration::seconds(1)), Candidacy::Candidate);
}

#[test]
fn override_threshold_is_age_at_or_above() {
    let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
    spec.age_threshold = "240h".into();
    let s = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
    let created = utc(2026, 6, 1, 0, 0);
    let mut c = claim(created);
    c.expire_after = ExpireAfter::Never;
    let p = Duration::days(7);
    assert_eq!(
        candidacy(&c, &s, p, created + Duration::hours(240) - Duration::seconds(1)),
        Candidacy::NotDue { due_after: Some(created + Duration::hours(240)) }
    );
    assert_eq!(candidacy(&c, &s, p, created + Duration::hours(240)), Candidacy::Candidate);
}

fn windows_mode(windows: &[(&str, &[&str], &str, &str)], k: i32) -> Effective {
    let mut spec = spec_with(windows);
    spec.age_threshold = "windows".into();
    spec.min_rotation_chances = k;
    Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn windows_mode_is_due_from_the_k_th_last_chance() {
    // Wed and Sat 02:00-06:00 Tokyo (Tue and Fri 17:00-21:00 UTC), E = 14d, t_rot = 1h17m.
    // Created Mon 1 June 00:00 UTC: deadline Mon 15 June 00:00, last start Sun 14 June
    // 22:43. Its last chances open on Fri 12 June and Tue 9 June 17:00 UTC.
    let s = windows_mode(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")], 2);
    let p = Duration::days(4);
    let created = utc(2026, 6, 1, 0, 0);
    let c = claim(created);
    let due = utc(2026, 6, 9, 17, 0);
    assert_eq!(due_after(&c, &s, p), Some(due));
    // At or after the opening, as an override: the occurrence's first instant counts.
    let before = due - Duration::seconds(1);
    assert_eq!(candidacy(&c, &s, p, before), Candidacy::NotDue { due_after: Some(due) });
    assert_eq!(candidacy(&c, &s, p, due), Candidacy::Candidate);
    // Auto would have made it due 8d1h17m before the deadline, two days earlier.
    let auto = settings(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
    let auto_due = due_after(&c, &auto, p).unwrap_or_else(|| panic!("due"));
    assert_eq!(auto_due, utc(2026, 6, 6, 22, 43));
    // The list the lookahead holds gives the same instant as the schedule.
    let open = crate::policy::lookahead::OpenTime::of(&s.schedule, created);
    let crate::policy::lookahead::OpenTime::Windows { occurrences, .. } = &open else {
        panic!("windows")
    };
    assert_eq!(due_after_listed(&c, &s, p, occurrences), Some(due));
    // K = 1: due from the last chance.
    let one = windows_mode(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")], 1);
    assert_eq!(due_after(&c, &one, p), Some(utc(2026, 6, 12, 17, 0)));
}

#[test]
fn windows_mode_with_fewer_than_k_chances_is_due_from_creation() {
    // Saturday only (Fri 17:00-21:00 UTC), E = 7d, K = 2: one chance in the claim's life.
    let s = windows_mode(&[("Asia/Tokyo", &["Sat"], "02:00", "06:00")], 2);
    let p = Duration::days(7);
    let created = utc(2026, 6, 1, 0, 0);
    let mut c = claim(created);
    c.expire_after = ExpireAfter::After(Duration::days(7));
    assert_eq!(due_after(&c, &s, p), Some(created));
    assert_eq!(candidacy(&c, &s, p, created), Candidacy::Candidate);
}

#[test]
fn windows_mode_with_expire_after_never_is_never_due() {
    let s = windows_mode(&[("UTC", &["Sat"], "02:00", "06:00")], 2);
    let mut c = claim(utc(2026, 6, 1, 0, 0));
    c.expire_after = ExpireAfter::Never;
    let p = Duration::days(7);
    assert_eq!(due_after(&c, &s, p), None);
    let later = utc(2027, 6, 1, 0, 0);
    assert_eq!(candidacy(&c, &s, p, later), Candidacy::NotDue { due_after: None });
    assert!(!needs_slot(&c, due_after(&c, &s, p)));
}

#[test]
fn windows_mode_open_around_the_clock_is_auto() {
    // 24/7 has no openings to count: the chances are the 1m ticks, as with auto.
    let all: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let s = windows_mode(&[("UTC", all, "00:00", "00:00")], 2);
    let auto = settings(&[("UTC", all, "00:00", "00:00")]);
    let p = s.schedule.period(utc(2026, 6, 1, 0, 0)).unwrap_or_default();
    assert_eq!(p, Duration::minutes(1));
    let created = utc(2026, 6, 1, 0, 0);
    let c = claim(created);
    let due = due_after(&c, &auto, p).unwrap_or_else(|| panic!("due"));
    assert_eq!(due, created + Duration::days(14) - Duration::minutes(2 + 77));
    assert_eq!(due_after(&c, &s, p), Some(due));
    // And strictly after it, as auto.
    assert_eq!(candidacy(&c, &s, p, due), Candidacy::NotDue { due_after: Some(due) });
    assert_eq!(candidacy(&c, &s, p, due + Duration::seconds(1)), Candidacy::Candidate);
}

#[test]
fn windows_mode_counts_openings_across_dst() {
    // London Sundays 02:00-04:00; BST ends on 25 October 2026, the opening moves from
    // 01:00 to 02:00 UTC. Created Sat 10 October 00:00 with E = 15d2h47m, K = 1: the last
    // start is 25 October 01:30 UTC, before that day's opening, so the 18th is the last
    // chance. Summer time carried over (P alone) would have counted the 25th.
    let s = windows_mode(&[("Europe/London", &["Sun"], "02:00", "04:00")], 1);
    let created = utc(2026, 10, 10, 0, 0);
    let mut c = claim(created);
    c.expire_after = ExpireAfter::After(utc(2026, 10, 25, 2, 47) - created);
    let p = s.schedule.period(created).unwrap_or_default();
    assert_eq!(p, Duration::days(7) + Duration::hours(1), "the DST week");
    assert_eq!(due_after(&c, &s, p), Some(utc(2026, 10, 18, 1, 0)));
}

#[test]
fn earliest_deadline_order() {
    let t = |d| utc(2026, 6, d, 0, 0);
    let mut keys = [
        RotationOrder { deadline: None, created: t(1), name: "never" },
        RotationOrder { deadline: Some(t(20)), created: t(6), name: "b" },
        RotationOrder { deadline: Some(t(20)), created: t(6), name: "a" },
        RotationOrder { deadline: Some(t(20)), created: t(5), name: "z-older" },
        RotationOrder { deadline: Some(t(15)), created: t(9), name: "soonest" },
    ];
    keys.sort();
    let names: Vec<&str> = keys.iter().map(|k| k.name).collect();
    assert_eq!(names, ["soonest", "z-older", "a", "b", "never"]);
}
