//! Property tests of the window math (§3.1) over random schedules in zones with
//! unusual DST rules, over two years: entry occurrences never vanish or double on DST days,
//! overnight windows span midnight, `in_window` agrees with the merged occurrence list, a
//! claim that becomes a candidate at `A` sees at least K occurrence starts before
//! `deadline - t_rot`, and with `ageThreshold: windows` exactly K chances are left when it falls
//! due.
use std::sync::OnceLock;

use chrono::{DateTime, Duration, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;

use super::derive::{self, Candidacy, ClaimFacts};
use super::duration::ExpireAfter;
use super::settings::{AgeThreshold, Effective, MaxUnavailable, NodeRequirementKeys};
use super::window::{HORIZON, Schedule, WindowEntry};

const ZONES: [Tz; 5] = [
    chrono_tz::America::New_York,
    chrono_tz::Europe::London,
    chrono_tz::Australia::Lord_Howe, // 30-minute shift
    chrono_tz::Asia::Kolkata,        // no DST, +05:30
    chrono_tz::Pacific::Chatham,     // +12:45/+13:45, shifts at 02:45 local
];

fn from() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().unwrap_or_else(|| panic!("date"))
}

fn to() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2028, 1, 1, 0, 0, 0).single().unwrap_or_else(|| panic!("date"))
}

/// Minutes of the day, biased towards the times DST transitions skip or repeat.
fn minute_of_day() -> impl Strategy<Value = u32> {
    prop_oneof![
        (0u32..96).prop_map(|q| q * 15),
        prop::sample::select(vec![0, 60, 90, 120, 135, 150, 165, 180, 225, 240, 1380, 1439]),
    ]
}

fn entry() -> impl Strategy<Value = WindowEntry> {
    (0usize..ZONES.len(), 1u8..128, minute_of_day(), minute_of_day(), 0u8..8).prop_map(
        |(zone, mask, start, end, shape)| {
            let time = |m: u32| NaiveTime::from_hms_opt(m / 60, m % 60, 0).unwrap_or_default();
            // Some 24h windows (end == start) on purpose; the rest is whatever falls out.
            let end = if shape == 0 { start } else { end };
            let mut days = [false; 7];
            for (i, d) in days.iter_mut().enumerate() {
                *d = mask & (1 << i) != 0;
            }
            WindowEntry { timezone: ZONES[zone], days, start: time(start), end: time(end) }
        },
    )
}

fn schedule() -> impl Strategy<Value = Schedule> {
    prop::collection::vec(entry(), 1..=3).prop_map(Schedule::from_entries)
}

/// Instants where the zone's UTC offset changes in 2026-2027.
fn transitions(tz: Tz) -> &'static [DateTime<Utc>] {
    static CACHE: OnceLock<Vec<Vec<DateTime<Utc>>>> = OnceLock::new();
    let all = CACHE.get_or_init(|| {
        ZONES
            .iter()
            .map(|tz| {
                let offset = |t: DateTime<Utc>| t.with_timezone(tz).offset().to_string();
                let mut out = Vec::new();
                let mut t = from();
                while t < to() {
                    let next = t + Duration::hours(6);
                    if offset(t) != offset(next) {
                        // Narrow down to the minute.
                        let (mut lo, mut hi) = (t, next);
                        while hi - lo > Duration::minutes(1) {
                            let mid = lo + (hi - lo) / 2;
                            if offset(mid) == offset(lo) { lo = mid } else { hi = mid }
                        }
                        out.push(hi);
                    }
                    t = next;
                }
                out
            })
            .collect()
    });
    ZONES.iter().position(|z| *z == tz).map_or(&[], |i| all[i].as_slice())
}

fn effective(schedule: Schedule, k: u32) -> Effective {
    Effective {
        schedule,
        age_threshold: AgeThreshold::Auto,
        min_rotation_chances: k,
        ready_timeout: Duration::minutes(15),
        max_unavailable: MaxUnavailable::ONE,
        cooldown_after: Duration::minutes(10),
        failure_pause: Duration::minutes(10),
        retry_backoff: Duration::minutes(30),
        drain_estimate_override: None,
        provisioning_estimate: Duration::minutes(5),
        match_node_requirements: NodeRequirementKeys { required: vec![], preferred: vec![] },
        forceful_fallback: false,
        whole_node_reservation: false,
    }
}

/// Where a claim's creation falls: near one of the first zone's DST transitions (which one,
/// minutes off it), or anywhere in 2026-2027 (minutes into it).
#[derive(Debug, Clone)]
struct Placement {
    near_transition: bool,
    pick: prop::sample::Index,
    offset_minutes: i64,
    anywhere: i64,
}

fn placement() -> impl Strategy<Value = Placement> {
    (
        any::<bool>(),
        any::<prop::sample::Index>(),
        -(3 * 24 * 60i64)..(3 * 24 * 60),
        0i64..(365 * 24 * 60),
    )
        .prop_map(|(near_transition, pick, offset_minutes, anywhere)| Placement {
            near_transition,
            pick,
            offset_minutes,
            anywhere,
        })
}

impl Placement {
    fn created(&self, s: &Schedule) -> DateTime<Utc> {
        match transitions(s.entries()[0].timezone) {
            list if self.near_transition && !list.is_empty() => {
                list[self.pick.index(list.len())] + Duration::minutes(self.offset_minutes)
            }
            _ => from() + Duration::days(7) + Duration::minutes(self.anywhere),
        }
    }
}

/// 32 cases per property keeps the policy tests fast in debug builds; set `PROPTEST_CASES` for a
/// longer run (`PROPTEST_CASES=2000 cargo test --lib policy::window_props`).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(32)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        // Failures found so far are pinned as unit tests in window.rs instead of a
        // proptest-regressions/ file.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Each listed local date yields exactly one entry occurrence with positive length, its
    /// start at the listed time (or just after a DST gap), overnight ones ending the next day.
    #[test]
    fn occurrences_never_vanish_double_or_stray(s in schedule()) {
        let occurrences = s.entry_occurrences(from(), to());
        for (index, e) in s.entries().iter().enumerate() {
            let tz = e.timezone;
            // Dates well inside the range so that boundary clipping does not matter.
            let first = (from() + Duration::days(3)).with_timezone(&tz).date_naive();
            let last = (to() - Duration::days(3)).with_timezone(&tz).date_naive();
            for date in first.iter_days().take_while(|d| *d <= last) {
                let listed = e.days[chrono::Datelike::weekday(&date).num_days_from_monday() as usize];
                let found: Vec<_> =
                    occurrences.iter().filter(|o| o.entry == index && o.date == date).collect();
                prop_assert_eq!(found.len(), usize::from(listed), "{} on {}", e, date);
                let Some(o) = found.first() else { continue };
                let occ = o.occurrence;
                prop_assert!(occ.end > occ.start, "{} on {}: empty {:?}", e, date, occ);
                let start_local = occ.start.with_timezone(&tz).naive_local();
                prop_assert_eq!(start_local.date(), date);
                if start_local.time() != e.start {
                    // Only a DST gap may move the start, and only later.
                    prop_assert!(tz.from_local_datetime(&date.and_time(e.start)).earliest().is_none());
                    prop_assert!(start_local.time() > e.start);
                }
                let end_date = occ.end.with_timezone(&tz).date_naive();
                let nominal = if e.end <= e.start { Duration::days(1) } else { Duration::zero() }
                    + (e.end - e.start);
                if e.end <= e.start {
                    prop_assert_eq!(end_date, date.succ_opt().unwrap_or(date), "{} on {}: overnight", e, date);
                } else {
                    prop_assert_eq!(end_date, date);
                }
                // DST changes the elapsed length by at most the shift (1h; 30m on Lord Howe).
                prop_assert!((occ.duration() - nominal).num_minutes().abs() <= 60, "{:?}", occ);
            }
        }
    }

    /// `in_window` and `occurrence_containing` agree with the merged occurrence list, which is
    /// sorted, non-touching, and covers every entry occurrence.
    #[test]
    fn in_window_agrees_with_occurrences(
        s in schedule(),
        samples in prop::collection::vec(0i64..(2 * 365 * 24 * 60), 200),
    ) {
        let merged = s.occurrences(from(), to());
        for pair in merged.windows(2) {
            prop_assert!(pair[0].end < pair[1].start, "{:?}", pair);
        }
        for eo in s.entry_occurrences(from(), to()) {
            prop_assert!(merged.iter().any(|m| m.start <= eo.occurrence.start && eo.occurrence.end <= m.end));
        }
        let mut instants: Vec<DateTime<Utc>> =
            samples.iter().map(|m| from() + Duration::minutes(*m) + Duration::seconds(17)).collect();
        for m in merged.iter().take(60) {
            instants.extend([m.start, m.start - Duration::seconds(1), m.end, m.end - Duration::seconds(1)]);
        }
        for t in instants {
            if t < from() + Duration::days(2) || t > to() - Duration::days(2) {
                continue;
            }
            let containing = merged.iter().find(|m| m.contains(t)).copied();
            prop_assert_eq!(s.in_window(t), containing.is_some(), "at {}", t);
            match (s.occurrence_containing(t), containing) {
                // A union open longer than the horizon is reported clipped around the query.
                (Some(got), Some(want)) if want.duration() >= HORIZON => prop_assert!(got.contains(t)),
                (got, want) => prop_assert_eq!(got, want, "at {}", t),
            }
        }
    }

    /// The K-chances guarantee, exactly: with `A = E - (K*P + t_rot)` and `P` measured across DST,
    /// a claim that becomes a candidate just after `created + A` has at least K occurrence starts
    /// in `(candidate time, deadline - t_rot]`.
    #[test]
    fn candidate_at_a_sees_k_starts(
        s in schedule(),
        e_minutes in (24 * 60i64)..(60 * 24 * 60),
        k in 1u32..=4,
        tgp_minutes in prop::option::of(0i64..(6 * 60)),
        at in placement(),
    ) {
        let created = at.created(&s);
        let e = Duration::minutes(e_minutes);
        let tgp = tgp_minutes.map(Duration::minutes);
        let settings = effective(s, k);
        let period = settings.schedule.period(created).unwrap_or_default();
        let t_rot = settings.t_rot(tgp);
        let a = derive::auto_age_threshold(e, k, period, t_rot);
        prop_assume!(a > Duration::zero()); // fatal AgeThresholdNotPositive otherwise

        let claim = ClaimFacts::idle(created, ExpireAfter::After(e), tgp);
        let becomes = created + a;
        let before = derive::candidacy(&claim, &settings, period, becomes);
        prop_assert!(matches!(before, Candidacy::NotDue { .. }), "{:?}", before);
        prop_assert_eq!(derive::candidacy(&claim, &settings, period, becomes + Duration::seconds(1)), Candidacy::Candidate);

        let last_start = created + e - t_rot;
        let open_all_horizon =
            settings.schedule.profile(created).is_some_and(|p| p.always_open);
        if open_all_horizon {
            // P is the 1m tick: every instant is a chance.
            prop_assert!(settings.schedule.in_window(becomes) && settings.schedule.in_window(last_start));
        } else {
            let starts = settings
                .schedule
                .occurrences(becomes, last_start + Duration::seconds(1))
                .iter()
                .filter(|o| o.start > becomes && o.start <= last_start)
                .count();
            prop_assert!(
                starts >= k as usize,
                "created {created}, E {e}, K {k}, P {period}, A {a}: only {starts} starts in \
                 ({becomes}, {last_start}]"
            );
        }
    }

    /// `ageThreshold: windows`, exactly: a claim due at its K-th last chance has exactly K
    /// occurrences in which a rotation can start and finish before its deadline from then on,
    /// DST weeks included, or is due at creation with fewer in its whole life; the lookahead's
    /// list and the schedule give the same instant.
    #[test]
    fn windows_due_leaves_exactly_k_chances(
        s in schedule(),
        e_minutes in 60i64..(30 * 24 * 60),
        k in 1u32..=4,
        tgp_minutes in prop::option::of(0i64..(6 * 60)),
        at in placement(),
        now_before in 0i64..(20 * 24 * 60),
    ) {
        prop_assume!(s.has_gaps());
        let created = at.created(&s);
        let e = Duration::minutes(e_minutes);
        let tgp = tgp_minutes.map(Duration::minutes);
        let mut settings = effective(s, k);
        settings.age_threshold = AgeThreshold::Windows;
        let period = settings.schedule.period(created).unwrap_or_default();
        let claim = ClaimFacts::idle(created, ExpireAfter::After(e), tgp);
        let due = derive::due_after(&claim, &settings, period);
        let now = created - Duration::minutes(now_before);
        let open = super::lookahead::OpenTime::of(&settings.schedule, now);
        let listed = derive::due_after_listed(&claim, &settings, period, open.occurrences());
        prop_assert_eq!(due, listed);
        let Some(due) = due else { return Err(TestCaseError::fail("no due instant")) };

        // The chances from `due` on: occurrences a rotation can start in, at or after `due`
        // and after creation, no later than `deadline - t_rot`.
        let last = created + e - settings.t_rot(tgp);
        let from = due.max(created);
        let chances = if last < from {
            0
        } else {
            settings
                .schedule
                .occurrences(from, last + Duration::seconds(1))
                .iter()
                .filter(|o| o.start <= last)
                .count()
        };
        if due > created {
            prop_assert_eq!(chances, k as usize, "created {}, E {}, K {}, due {}", created, e, k, due);
            prop_assert!(settings.schedule.occurrence_containing(due).is_some_and(|o| o.start == due));
        } else {
            // Due at once: the claim's whole life holds at most K (K when its K-th last is in
            // progress at creation, fewer when due from creation).
            prop_assert!(chances <= k as usize, "created {}, E {}, K {}: {} chances", created, e, k, chances);
        }
    }
}
