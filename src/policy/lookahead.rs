//! The burst lookahead: when claims fall due too close together for one rotation at a time to
//! reach each of them within its own lead time, the earlier ones fall due earlier.
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
//! Claims that are not crowded keep their due instant; nothing is ever made due later.
//!
//! `L(i)` is the due instant itself when the union is open 24/7. With discrete windows a claim
//! that falls due between two occurrences starts at the next one, and any slot of that
//! occurrence still gives it its K chances, so `L(i)` is that occurrence's last slot: only more
//! claims than the occurrence holds (`C`) push one into the occurrence before. Open time is
//! measured over the merged occurrences ([`OpenTime`]), so a slot never counts the gap between
//! two windows. Pure: `now` only anchors the occurrence list.
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
pub enum OpenTime {
    /// Open around the clock (or no windows): open time is wall time.
    Continuous,
    /// The merged occurrences from shortly before `now` to the horizon, with the open time
    /// elapsed before each one (from the first one's start).
    Windows { occurrences: Vec<Occurrence>, before: Vec<Duration> },
}

impl OpenTime {
    /// The open time of `schedule` around `now`.
    pub fn of(schedule: &Schedule, now: DateTime<Utc>) -> OpenTime {
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
    pub fn occurrences(&self) -> &[Occurrence] {
        match self {
            OpenTime::Continuous => &[],
            OpenTime::Windows { occurrences, .. } => occurrences,
        }
    }

    /// The open time at `t`.
    pub fn at(&self, t: DateTime<Utc>) -> Duration {
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
    pub fn instant(&self, x: Duration) -> DateTime<Utc> {
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
    pub fn latest_start(&self, due: DateTime<Utc>) -> Duration {
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

/// The lookahead over claims in rotation order (earliest deadline first): each claim's due
/// instant, moved earlier where the claims after it need the room. `slot` is one rotation's
/// share of window-open time (`t_rot_est + cooldownAfter`); zero or less changes nothing.
pub fn effective_dues(
    dues: &[DateTime<Utc>],
    open: &OpenTime,
    slot: Duration,
) -> Vec<DateTime<Utc>> {
    if slot <= Duration::zero() {
        return dues.to_vec();
    }
    let mut out = dues.to_vec();
    let mut next: Option<Duration> = None;
    for (i, due) in dues.iter().enumerate().rev() {
        let own = open.latest_start(*due);
        let latest = match next {
            Some(n) => own.min(n - slot),
            None => own,
        };
        if latest < open.at(*due) {
            out[i] = open.instant(latest);
        }
        next = Some(latest);
    }
    out
}

/// Which claims (in rotation order, with their own due instants) one rotation at a time can
/// reach from `from` within their chances: starting each as soon as it is due by the lookahead
/// and the claim before it had its slot, it starts no later than its latest start `L`.
/// The simulation's liveness check holds the controller to exactly these claims.
pub fn reachable(
    from: DateTime<Utc>,
    dues: &[DateTime<Utc>],
    open: &OpenTime,
    slot: Duration,
) -> Vec<bool> {
    let effective = effective_dues(dues, open, slot);
    let mut free = open.at(from);
    dues.iter()
        .zip(&effective)
        .map(|(due, eff)| {
            let begin = free.max(open.at(*eff));
            free = begin + slot.max(Duration::zero());
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

    #[test]
    fn with_windows_only_more_claims_than_an_occurrence_holds_move_to_the_one_before() {
        // 02:00-06:00 on Wed and Sat: 4h occurrences, C = ceil(4h / 25m) = 10 starts each.
        let s = schedule(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
        let open = OpenTime::of(&s, utc(1, 0, 0));
        let slot = Duration::minutes(25);
        // Due on Thursday 4 June, between the Wed 3rd and Sat 6th occurrences.
        let due = utc(4, 10, 0);
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
}
