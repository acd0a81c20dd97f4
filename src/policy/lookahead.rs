//! The burst lookahead: when claims fall due too close together for the pool's rotations in
//! flight (one at a time, or `maxUnavailable` lanes) to reach each of them within its own lead
//! time, the earlier ones fall due earlier.
//!
//! §3.2 makes a claim due `leadTime = K*P + t_rot` before its deadline, which gives
//! one claim K window chances. A burst of claims due together (a scale-up, a fleet created in
//! one go, or deadlines that just happen to cluster) shares those chances: with a 24/7 window the
//! lead is K minutes plus `t_rot`, so two claims due within one rotation of each other already
//! compete, and the layer-2 `ThroughputBurstShortfall` warning says so. The lookahead turns that
//! warning into scheduling: going backwards through the pool's claims in rotation order, each
//! claim must start at least one rotation slot (`t_rot_est + cooldownAfter`, the slot of `C`)
//! of *window-open time* before the claim after it starts:
//!
//! ```text
//! latest(i) = min(L(i), latest(i+1) - slot)      L(i): the latest start that keeps its K chances
//! ```
//!
//! and a claim whose `latest(i)` is before its own due instant is due at `latest(i)` instead.
//! Claims that are not crowded keep their due instant; nothing is ever made due later. With `m`
//! lanes the claim `m` places later is the one that must start a slot after it
//! ([`effective_dues_lanes`], [`reachable_lanes`]).
//!
//! `L(i)` is the due instant itself when the union is open 24/7. With discrete windows a claim
//! that falls due between two occurrences starts at the next one, and any slot of that
//! occurrence still gives it its K chances, so `L(i)` is that occurrence's last slot: only more
//! claims than the occurrence holds (`C`) push one into the occurrence before. Open time is
//! measured over the merged occurrences ([`OpenTime`]), so a slot never counts the gap between
//! two windows. Pure: `now` only anchors the occurrence list.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};

use super::window::{HORIZON, Occurrence, Schedule};

/// How far before `now` occurrences are listed: claims due earlier are candidates already.
const LOOKBACK: Duration = Duration::days(8);
/// The last start inside an occurrence, before its end.
const LAST_MOMENT: Duration = Duration::seconds(1);

/// Window-open time: [`OpenTime::at`] maps an instant to the open time elapsed since a
/// reference, [`OpenTime::instant`] maps it back (the earliest instant with that open time).
/// Outside the listed occurrences time counts as open (the horizon is a year).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpenTime {
    /// Open around the clock (or no windows): open time is wall time.
    Continuous,
    /// The merged occurrences from shortly before `now` to the horizon, with the open time
    /// elapsed before each one (from the first one's start).
    Windows { occurrences: Vec<Occurrence>, before: Vec<Duration> },
}

impl OpenTime {
    /// The open time of `schedule` around `now`.
    pub(crate) fn of(schedule: &Schedule, now: DateTime<Utc>) -> OpenTime {
        if !schedule.has_gaps() {
            return OpenTime::Continuous;
        }
        let occurrences = schedule.occurrences(now - LOOKBACK, now + HORIZON + LOOKBACK);
        if occurrences.is_empty() {
            return OpenTime::Continuous;
        }
        let mut before = Vec::with_capacity(occurrences.len());
        let mut total = Duration::zero();
        for o in &occurrences {
            before.push(total);
            total += o.duration();
        }
        OpenTime::Windows { occurrences, before }
    }

    /// The merged occurrences listed (none when open 24/7 or without windows).
    pub(crate) fn occurrences(&self) -> &[Occurrence] {
        match self {
            OpenTime::Continuous => &[],
            OpenTime::Windows { occurrences, .. } => occurrences,
        }
    }

    /// The open time at `t`.
    pub(crate) fn at(&self, t: DateTime<Utc>) -> Duration {
        match self {
            OpenTime::Continuous => t - DateTime::UNIX_EPOCH,
            OpenTime::Windows { occurrences, before } => {
                let (first, last) = (occurrences[0], occurrences[occurrences.len() - 1]);
                if t < first.start {
                    return t - first.start;
                }
                // The last occurrence starting at or before t.
                let k = occurrences.partition_point(|o| o.start <= t) - 1;
                let o = occurrences[k];
                if k == occurrences.len() - 1 && t > last.end {
                    return before[k] + o.duration() + (t - last.end);
                }
                before[k] + (t.min(o.end) - o.start)
            }
        }
    }

    /// The earliest instant whose open time is `x` (the end of an occurrence rather than the
    /// start of the next: a claim due then is a candidate through the earlier one).
    pub(crate) fn instant(&self, x: Duration) -> DateTime<Utc> {
        match self {
            OpenTime::Continuous => DateTime::UNIX_EPOCH + x,
            OpenTime::Windows { occurrences, before } => {
                if x < Duration::zero() {
                    return occurrences[0].start + x;
                }
                // The first occurrence whose end is at or past x (binary search).
                let (mut k, mut hi) = (0, occurrences.len());
                while k < hi {
                    let mid = (k + hi) / 2;
                    if before[mid] + occurrences[mid].duration() < x {
                        k = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                match occurrences.get(k) {
                    Some(o) => o.start + (x - before[k]),
                    None => {
                        let last = occurrences.len() - 1;
                        let total = before[last] + occurrences[last].duration();
                        occurrences[last].end + (x - total)
                    }
                }
            }
        }
    }

    /// `L`: the latest open time at which a claim due at `due` can start and keep its chances:
    /// `due` itself when open 24/7, else the last moment of the first occurrence ending after
    /// it (a start may run past the window's end, as `C = ceil(D / slot)` counts).
    pub(crate) fn latest_start(&self, due: DateTime<Utc>) -> Duration {
        let at_due = self.at(due);
        match self {
            OpenTime::Continuous => at_due,
            OpenTime::Windows { occurrences, .. } => {
                let home = occurrences.partition_point(|o| o.end <= due);
                match occurrences.get(home) {
                    Some(o) => at_due.max(self.at(o.end) - LAST_MOMENT),
                    None => at_due,
                }
            }
        }
    }
}

/// The tests' shorthand: one rotation at a time, [`effective_dues_lanes`] with one lane.
#[cfg(test)]
pub(crate) fn effective_dues(
    dues: &[DateTime<Utc>],
    open: &OpenTime,
    slot: Duration,
) -> Vec<DateTime<Utc>> {
    effective_dues_lanes(dues, open, slot, 1)
}

/// The lookahead over claims in rotation order (earliest deadline first): each claim's due
/// instant, moved earlier where the claims after it need the room. `slot` is one rotation's
/// share of window-open time (`t_rot_est + cooldownAfter`); zero or less changes nothing.
/// `lanes` rotations are in flight at once (`surge.maxUnavailable` resolved; 0 counts as 1).
/// Backwards over the claims in rotation order, with `L'(i)` the
/// earliest latest start `L` of claim `i` and every claim after it:
///
/// ```text
/// latest(i) = min(L'(i), latest(i + lanes) - slot)
/// ```
///
/// so the claim `lanes` places later starts at least one slot after this one, and a claim whose
/// `latest(i)` is before its own due instant is due then instead. What it guarantees: started
/// greedily in rotation order ([`reachable_lanes`]: each claim at the later of its effective due
/// and the first free lane), with every lane free by then, each claim starts by its `latest(i)`,
/// hence by its own `L`. Taking `L'` (the suffix minimum) is what makes that hold when `L` is not
/// in rotation order (claims with different `t_rot`, or `ageThreshold: windows`); with `L` in
/// order it changes nothing. It is an approximation: it may move a claim earlier than the
/// greedy start strictly needs, never later than its due instant. More lanes never move a claim
/// earlier than fewer lanes do, and one lane is exactly the one-at-a-time recursion
/// `latest(i) = min(L(i), latest(i + 1) - slot)`.
pub(crate) fn effective_dues_lanes(
    dues: &[DateTime<Utc>],
    open: &OpenTime,
    slot: Duration,
    lanes: usize,
) -> Vec<DateTime<Utc>> {
    if slot <= Duration::zero() {
        return dues.to_vec();
    }
    // More lanes than claims change nothing (and keep `i + lanes` in range).
    let lanes = lanes.clamp(1, dues.len().max(1));
    let mut out = dues.to_vec();
    let mut latest = vec![Duration::zero(); dues.len()];
    let mut suffix_min: Option<Duration> = None;
    for (i, due) in dues.iter().enumerate().rev() {
        let own = open.latest_start(*due);
        let own = suffix_min.map_or(own, |later| own.min(later));
        suffix_min = Some(own);
        let l = match latest.get(i + lanes) {
            Some(later) => own.min(*later - slot),
            None => own,
        };
        latest[i] = l;
        if l < open.at(*due) {
            out[i] = open.instant(l);
        }
    }
    out
}

/// [`effective_dues_lanes`] remembered per key (a pool) over one [`OpenTime`]: a pool's pass
/// asks again with the same due instants until one of its claims changes, and the answer is a
/// pure function of what the entry holds. One entry per key, replaced when the question moves.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    answers: Mutex<HashMap<String, Answer>>,
}

#[derive(Debug)]
struct Answer {
    slot: Duration,
    lanes: usize,
    dues: Vec<DateTime<Utc>>,
    effective: Vec<DateTime<Utc>>,
}

impl Memo {
    /// [`effective_dues_lanes`] of `dues` over `open`, which must be the open time this memo
    /// belongs to (its owner drops the memo with it).
    pub(crate) fn effective_dues_lanes(
        &self,
        key: &str,
        dues: &[DateTime<Utc>],
        open: &OpenTime,
        slot: Duration,
        lanes: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = answers.get(key)
            && a.slot == slot
            && a.lanes == lanes
            && a.dues == dues
        {
            return a.effective.clone();
        }
        let effective = effective_dues_lanes(dues, open, slot, lanes);
        let answer = Answer { slot, lanes, dues: dues.to_vec(), effective: effective.clone() };
        answers.insert(key.to_string(), answer);
        effective
    }
}

/// Which claims (in rotation order, with their own due instants) one rotation at a time can
/// reach from `from` within their chances: starting each as soon as it is due by the lookahead
/// and the claim before it had its slot, it starts no later than its latest start `L`.
/// [`reachable_lanes`] with one lane.
#[cfg(test)]
pub(crate) fn reachable(
    from: DateTime<Utc>,
    dues: &[DateTime<Utc>],
    open: &OpenTime,
    slot: Duration,
) -> Vec<bool> {
    reachable_lanes(from, dues, open, slot, 1)
}

/// Which claims `lanes` rotations in flight at once can reach from `from` (every lane free
/// then), exactly: in rotation order, each claim begins at the later of the earliest free lane
/// and its effective due ([`effective_dues_lanes`]), holds that lane for one slot of open time,
/// and is reached when it begins no later than its latest start `L`.
/// The simulation's liveness check holds the controller to exactly these claims.
pub(crate) fn reachable_lanes(
    from: DateTime<Utc>,
    dues: &[DateTime<Utc>],
    open: &OpenTime,
    slot: Duration,
    lanes: usize,
) -> Vec<bool> {
    let effective = effective_dues_lanes(dues, open, slot, lanes);
    // When each lane is free again; more lanes than claims change nothing.
    let mut free: BinaryHeap<Reverse<Duration>> =
        std::iter::repeat_n(Reverse(open.at(from)), lanes.clamp(1, dues.len().max(1))).collect();
    dues.iter()
        .zip(&effective)
        .map(|(due, eff)| {
            let first_free = free.pop().map_or(open.at(from), |Reverse(at)| at);
            let begin = first_free.max(open.at(*eff));
            free.push(Reverse(begin + slot.max(Duration::zero())));
            begin <= open.latest_start(*due)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::settings::Effective;
    use crate::policy::settings::tests::spec_with;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn utc(d: u32, h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, d, h, m, 0).single().unwrap_or_else(|| panic!("date"))
    }

    fn schedule(windows: &[(&str, &[&str], &str, &str)]) -> Schedule {
        Effective::from_spec(&spec_with(windows)).unwrap_or_else(|e| panic!("{e}")).schedule
    }

    const ALL: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

    #[test]
    fn around_the_clock_crowded_claims_fall_due_one_slot_apart() {
        let open = OpenTime::of(&schedule(&[("UTC", ALL, "00:00", "00:00")]), utc(1, 0, 0));
        assert_eq!(open, OpenTime::Continuous);
        let slot = Duration::minutes(11);
        // Three claims due within five minutes, one due much later.
        let dues = [utc(1, 0, 30), utc(1, 0, 33), utc(1, 0, 35), utc(1, 3, 0)];
        let eff = effective_dues(&dues, &open, slot);
        assert_eq!(eff, [utc(1, 0, 13), utc(1, 0, 24), utc(1, 0, 35), utc(1, 3, 0)]);
        // Uncrowded claims keep their due instant.
        let spread = [utc(1, 0, 30), utc(1, 0, 45), utc(1, 1, 0)];
        assert_eq!(effective_dues(&spread, &open, slot), spread);
        assert_eq!(effective_dues(&dues, &open, Duration::zero()), dues);
        // From midnight all four can be reached; from 00:20 the first two are already crowded.
        assert_eq!(reachable(utc(1, 0, 0), &dues, &open, slot), [true; 4]);
        assert_eq!(
            reachable(utc(1, 0, 20), &dues, &open, slot),
            [true, true, false, true],
            "from 00:20 the third claim's turn (00:42) is past its due instant"
        );
    }

    /// 02:00-06:00 on Wed and Sat: 4h occurrences, `ceil(4h / 25m) = 10` starts per lane; the
    /// due instant is on Thursday 4 June, between the Wed 3rd and Sat 6th occurrences.
    fn wednesday_and_saturday() -> (OpenTime, Duration, DateTime<Utc>) {
        let s = schedule(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
        (OpenTime::of(&s, utc(1, 0, 0)), Duration::minutes(25), utc(4, 10, 0))
    }

    #[test]
    fn with_windows_only_more_claims_than_an_occurrence_holds_move_to_the_one_before() {
        let (open, slot, due) = wednesday_and_saturday();
        let ten = vec![due; 10];
        assert_eq!(effective_dues(&ten, &open, slot), ten, "ten fit the Saturday occurrence");
        let eleven = vec![due; 11];
        let eff = effective_dues(&eleven, &open, slot);
        assert_eq!(eff[1..], eleven[1..]);
        let wednesday_end = utc(3, 6, 0);
        assert_eq!(
            eff[0],
            wednesday_end - Duration::minutes(10) - LAST_MOMENT,
            "the first claim takes one of Wednesday's last slots"
        );
        // Open time skips the gaps.
        assert_eq!(open.at(utc(4, 10, 0)), open.at(utc(6, 2, 0)));
        assert_eq!(open.at(utc(6, 3, 0)) - open.at(utc(3, 5, 0)), Duration::hours(2));
        assert_eq!(open.instant(open.at(utc(6, 2, 0))), utc(3, 6, 0), "the earlier end");
        assert_eq!(open.instant(open.at(utc(6, 3, 0))), utc(6, 3, 0));
    }

    #[test]
    fn open_time_round_trips_inside_occurrences_and_extends_outside() {
        let s = schedule(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let open = OpenTime::of(&s, utc(1, 0, 0));
        let OpenTime::Windows { occurrences, .. } = &open else { panic!("windows") };
        for o in occurrences.iter().take(20) {
            let mid = o.start + Duration::minutes(90);
            assert_eq!(open.instant(open.at(mid)), mid);
        }
        let first = occurrences[0].start;
        assert_eq!(open.at(first - Duration::hours(1)), -Duration::hours(1));
        assert_eq!(open.instant(-Duration::hours(1)), first - Duration::hours(1));
        let far = utc(1, 0, 0) + HORIZON + Duration::days(30);
        assert_eq!(open.instant(open.at(far)), far);
    }

    #[test]
    fn more_lanes_let_crowded_claims_keep_their_due_instants() {
        let open = OpenTime::Continuous;
        let slot = Duration::minutes(11);
        let dues = [utc(1, 0, 30), utc(1, 0, 33), utc(1, 0, 35), utc(1, 3, 0)];
        // Two lanes: only the first must leave room for the claim two places later (00:35).
        let two = effective_dues_lanes(&dues, &open, slot, 2);
        assert_eq!(two, [utc(1, 0, 24), utc(1, 0, 33), utc(1, 0, 35), utc(1, 3, 0)]);
        assert_eq!(effective_dues_lanes(&dues, &open, slot, 3), dues, "three lanes hold all");
        assert_eq!(effective_dues_lanes(&dues, &open, slot, usize::MAX), dues);
        // From 00:20 one lane misses the third claim; two lanes reach every one.
        assert_eq!(reachable_lanes(utc(1, 0, 20), &dues, &open, slot, 2), [true; 4]);
        assert_eq!(reachable_lanes(utc(1, 0, 20), &dues, &open, slot, usize::MAX), [true; 4]);
        // From 00:34 the first two are late whatever the lanes: each is reached only by its L.
        assert_eq!(
            reachable_lanes(utc(1, 0, 34), &dues, &open, slot, 4),
            [false, false, true, true]
        );
    }

    #[test]
    fn the_memo_answers_what_the_lookahead_answers_as_the_question_moves() {
        let open = OpenTime::Continuous;
        let slot = Duration::minutes(11);
        let dues = [utc(1, 0, 30), utc(1, 0, 33), utc(1, 0, 35), utc(1, 3, 0)];
        let memo = Memo::default();
        // Each question differs from the one before in one input only: the lanes, the slot,
        // the due instants, the key; an answer kept for the wrong question shows.
        let moved = [utc(1, 0, 30), utc(1, 0, 31), utc(1, 0, 35), utc(1, 3, 0)];
        let questions: [(&str, &[DateTime<Utc>], Duration, usize); 6] = [
            ("a", &dues, slot, 1),
            ("a", &dues, slot, 2),
            ("a", &dues, Duration::minutes(2), 2),
            ("a", &moved, Duration::minutes(2), 2),
            ("a", &moved, slot, 1),
            ("b", &dues, slot, 1),
        ];
        let mut answers = Vec::new();
        for (key, dues, slot, lanes) in questions {
            let direct = effective_dues_lanes(dues, &open, slot, lanes);
            assert_eq!(memo.effective_dues_lanes(key, dues, &open, slot, lanes), direct);
            assert_eq!(memo.effective_dues_lanes(key, dues, &open, slot, lanes), direct, "again");
            answers.push(direct);
        }
        // The questions are told apart by their answers, so the test can see a stale one.
        for pair in answers[..5].windows(2) {
            assert_ne!(pair[0], pair[1]);
        }
    }

    #[test]
    fn with_windows_two_lanes_fit_twice_as_many_claims_in_an_occurrence() {
        // 10 starts per lane, 20 with two.
        let (open, slot, due) = wednesday_and_saturday();
        let twenty = vec![due; 20];
        assert_eq!(effective_dues_lanes(&twenty, &open, slot, 2), twenty);
        let twenty_one = vec![due; 21];
        let eff = effective_dues_lanes(&twenty_one, &open, slot, 2);
        assert_eq!(eff[1..], twenty_one[1..]);
        assert_eq!(eff[0], utc(3, 6, 0) - Duration::minutes(10) - LAST_MOMENT);
        // From Saturday's opening every one of the twenty is reached with two lanes, and only
        // the first ten with one.
        let from = utc(6, 2, 0);
        assert_eq!(reachable_lanes(from, &twenty, &open, slot, 2), vec![true; 20]);
        let one = reachable(from, &twenty, &open, slot);
        assert_eq!(one.iter().filter(|r| **r).count(), 10);
    }

    /// The one-rotation-at-a-time lookahead as it was before lanes, kept here as the reference
    /// the one-lane functions must reproduce exactly.
    fn single_lane_reference(
        from: DateTime<Utc>,
        dues: &[DateTime<Utc>],
        open: &OpenTime,
        slot: Duration,
    ) -> (Vec<DateTime<Utc>>, Vec<bool>) {
        let mut effective = dues.to_vec();
        if slot > Duration::zero() {
            let mut next: Option<Duration> = None;
            for (i, due) in dues.iter().enumerate().rev() {
                let own = open.latest_start(*due);
                let latest = next.map_or(own, |n| own.min(n - slot));
                if latest < open.at(*due) {
                    effective[i] = open.instant(latest);
                }
                next = Some(latest);
            }
        }
        let mut free = open.at(from);
        let reached = dues
            .iter()
            .zip(&effective)
            .map(|(due, eff)| {
                let begin = free.max(open.at(*eff));
                free = begin + slot.max(Duration::zero());
                begin <= open.latest_start(*due)
            })
            .collect();
        (effective, reached)
    }

    fn claims() -> impl Strategy<Value = (Vec<i64>, i64, i64, bool)> {
        // Due instants in minutes after 1 June (any order), the slot, `from`, windows or 24/7.
        (prop::collection::vec(0i64..20_000, 0..24), 1i64..300, -2_000i64..20_000, any::<bool>())
    }

    fn open_time(windows: bool) -> OpenTime {
        if windows {
            OpenTime::of(&schedule(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]), utc(1, 0, 0))
        } else {
            OpenTime::Continuous
        }
    }

    proptest! {
        #[test]
        fn one_lane_is_the_single_rotation_lookahead((minutes, slot, from, windows) in claims()) {
            let open = open_time(windows);
            let dues: Vec<DateTime<Utc>> =
                minutes.iter().map(|m| utc(1, 0, 0) + Duration::minutes(*m)).collect();
            let (slot, from) = (Duration::minutes(slot), utc(1, 0, 0) + Duration::minutes(from));
            let (effective, reached) = single_lane_reference(from, &dues, &open, slot);
            prop_assert_eq!(&effective_dues_lanes(&dues, &open, slot, 1), &effective);
            prop_assert_eq!(&effective_dues(&dues, &open, slot), &effective);
            prop_assert_eq!(&reachable_lanes(from, &dues, &open, slot, 1), &reached);
            prop_assert_eq!(&reachable(from, &dues, &open, slot), &reached);
        }

        /// What [`effective_dues_lanes`] guarantees, in any order of due instants: with the
        /// lanes free from the earliest effective due, every claim is reached; no claim is made
        /// due later than its own due instant, and more lanes never make one due earlier.
        #[test]
        fn every_claim_is_reached_when_the_lanes_are_free_in_time(
            (minutes, slot, _, windows) in claims(),
            lanes in 1usize..6,
        ) {
            let open = open_time(windows);
            let dues: Vec<DateTime<Utc>> =
                minutes.iter().map(|m| utc(1, 0, 0) + Duration::minutes(*m)).collect();
            let slot = Duration::minutes(slot);
            let effective = effective_dues_lanes(&dues, &open, slot, lanes);
            let more = effective_dues_lanes(&dues, &open, slot, lanes + 1);
            for ((due, eff), eff_more) in dues.iter().zip(&effective).zip(&more) {
                prop_assert!(eff <= due);
                prop_assert!(eff <= eff_more);
            }
            if let Some(from) = effective.iter().min() {
                let reached = reachable_lanes(*from, &dues, &open, slot, lanes);
                prop_assert!(reached.iter().all(|r| *r), "{:?}", reached);
            }
        }
    }
}
