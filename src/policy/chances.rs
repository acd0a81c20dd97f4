//! `ageThreshold: windows` (`docs/decisions/age-threshold-windows.md`): a claim's window chances
//! counted on the real occurrences of the merged schedule, instead of `K × P`.
//!
//! A *chance* of a claim is an occurrence in which a rotation can start while the claim exists
//! and complete (`t_rot`) before its deadline: a merged occurrence `o` with `o.end > created`
//! and `max(o.start, created) <= deadline - t_rot`. The claim is due from the start of its K-th
//! last chance, so exactly K are left; with fewer than K in its whole life it is due from its
//! creation and rotated at its first chance (layer 3, `ShortLead`). Crowded claims fall due
//! earlier through the burst lookahead, as with `auto` ([`crate::policy::lookahead`]).
//!
//! Chances are occurrences, not starts: nothing here depends on how many rotations run at once.
//! What an occurrence holds (`C`, `maxUnavailable` lanes times one lane's starts) is the
//! lookahead's and feasibility's business, which is where `surge.maxUnavailable` scales it.
//!
//! A union open 24/7 has no occurrence starts to count: its chances are the reconcile ticks,
//! which is what `auto` counts (`P` is the 1m tick, §3.1), so there the mode is `auto`. Daylight
//! saving needs nothing here: the occurrences are the window module's, resolved in their zones.
//! Pure: callers pass the instants.
use chrono::{DateTime, Duration, Utc};

use super::window::{HORIZON, Occurrence, Schedule};

/// The first span the schedule is searched over, backwards from the last start: a weekly rule
/// opens at least once in it unless the union is open longer.
const FIRST_SPAN: Duration = Duration::days(8);

/// A claim's last chances, counted up to K.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastChances {
    /// How many chances the claim has in its whole life, at most K.
    pub count: u32,
    /// The start of its K-th last chance; `None` with fewer than K.
    pub kth_start: Option<DateTime<Utc>>,
}

impl LastChances {
    /// The due instant under `ageThreshold: windows`: the start of the K-th last chance, or the
    /// creation when the claim has fewer than K (it is rotated at its first chance).
    pub(crate) fn due(&self, created: DateTime<Utc>) -> DateTime<Utc> {
        self.kth_start.unwrap_or(created)
    }
}

/// The last `k` chances (at least 1) of a claim created at `created` whose forced expiry is at
/// `deadline`. `listed` is any contiguous run of `schedule`'s merged occurrences (the burst
/// lookahead's list around now, or nothing): it is searched first, and the schedule answers what
/// it cannot. An always-open union is one occurrence here; callers use `auto` for it.
pub(crate) fn last_chances(
    schedule: &Schedule,
    listed: &[Occurrence],
    created: DateTime<Utc>,
    deadline: DateTime<Utc>,
    t_rot: Duration,
    k: u32,
) -> LastChances {
    let k = usize::try_from(k.max(1)).unwrap_or(usize::MAX);
    let Some(last) = deadline.checked_sub_signed(t_rot).filter(|last| *last >= created) else {
        // Too short a life for one rotation: no chance at all.
        return LastChances { count: 0, kth_start: None };
    };
    in_listed(listed, created, last, k).unwrap_or_else(|| in_schedule(schedule, created, last, k))
}

/// The chances from `known` (the occurrences intersecting `[created, last]`, or their last ones,
/// in order): the K-th last when there are K, else how many there are.
fn counted(known: &[Occurrence], k: usize) -> LastChances {
    match known.len().checked_sub(k) {
        Some(i) => LastChances { count: to_u32(k), kth_start: Some(known[i].start) },
        None => LastChances { count: to_u32(known.len()), kth_start: None },
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// [`last_chances`] from the list alone, when it holds the answer: `None` when `last` lies past
/// it (later occurrences are not known) or when the chances reach back before its first entry.
fn in_listed(
    listed: &[Occurrence],
    created: DateTime<Utc>,
    last: DateTime<Utc>,
    k: usize,
) -> Option<LastChances> {
    // The occurrences starting at or before `last`; one after them must be listed too.
    let upto = listed.partition_point(|o| o.start <= last);
    if upto == listed.len() {
        return None;
    }
    let chances = listed[..upto].iter().rev().take(k).take_while(|o| o.end > created).count();
    // K found, or an earlier listed occurrence ended before the claim existed.
    (chances == k || chances < upto).then(|| counted(&listed[upto - chances..upto], k))
}

/// [`last_chances`] from the schedule, searching backwards from `last` over growing spans.
fn in_schedule(
    schedule: &Schedule,
    created: DateTime<Utc>,
    last: DateTime<Utc>,
    k: usize,
) -> LastChances {
    let to = last.checked_add_signed(Duration::nanoseconds(1)).unwrap_or(last);
    let mut span = FIRST_SPAN;
    loop {
        let from = last.checked_sub_signed(span).map_or(created, |from| from.max(created));
        // The merged occurrences intersecting [from, last]: every one ends after `created`.
        let found = schedule.occurrences(from, to);
        if found.len() >= k || from == created {
            return counted(&found, k);
        }
        span = span.checked_add(&span).unwrap_or(Duration::MAX);
    }
}

/// What `ageThreshold: windows` gives the nodes of a pool with lifetime `E`, measured on the
/// occurrences of the next 53 weeks (so both DST changes are in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolChances {
    /// The fewest chances a node gets, whenever it is created, at most K. The worst node is
    /// created as an occurrence ends.
    pub fewest: u32,
    /// The shortest `E` that gives every node K chances: `t_rot` plus the longest span from the
    /// end of an occurrence to the start of the K-th occurrence after it. `None` when the
    /// horizon holds no K + 1 occurrences.
    pub expire_after_needed: Option<Duration>,
    /// The shortest and the longest lead (`deadline - due`) of a node with K chances: `t_rot`
    /// plus the span from its K-th last chance's start to the start of its last chance (shortest:
    /// the deadline leaves just `t_rot` after its last chance opens) or of the occurrence after
    /// it (longest). `None` when the horizon holds no K + 1 occurrences.
    pub lead: Option<(Duration, Duration)>,
}

/// [`PoolChances`] for a pool whose nodes live `e` with rotation bound `t_rot`, from `now`.
/// `None` for an empty or always-open union (no occurrence starts to count: `auto` applies).
pub(crate) fn pool_chances(
    schedule: &Schedule,
    now: DateTime<Utc>,
    e: Duration,
    t_rot: Duration,
    k: u32,
) -> Option<PoolChances> {
    if !schedule.has_gaps() {
        return None;
    }
    let horizon = now.checked_add_signed(HORIZON)?;
    let list = schedule.occurrences(now, horizon);
    let k = usize::try_from(k.max(1)).unwrap_or(usize::MAX);
    // need(m): t_rot + the longest span from an occurrence's end to the m-th start after it;
    // every node gets m chances exactly when E >= need(m) (a node created later than an
    // occurrence's end only sees more starts).
    let need = |m: usize| {
        let spans = list.iter().zip(list.iter().skip(m)).map(|(o, later)| later.start - o.end);
        spans.max().map(|span| span + t_rot)
    };
    let mut fewest = 0;
    while fewest < k && need(fewest + 1).is_some_and(|needed| e >= needed) {
        fewest += 1;
    }
    // lead over the deadlines whose last chance is list[j]: its K-th last chance is
    // list[j + 1 - k], and the deadline lies in [list[j].start, list[j + 1].start) + t_rot.
    let leads = list
        .windows(k.saturating_add(1))
        .map(|w| (w[k - 1].start - w[0].start, w[k].start - w[0].start));
    let lead = leads.fold(None, |acc: Option<(Duration, Duration)>, (short, long)| {
        Some(acc.map_or((short, long), |(s, l)| (s.min(short), l.max(long))))
    });
    Some(PoolChances {
        fewest: to_u32(fewest),
        expire_after_needed: need(k),
        lead: lead.map(|(short, long)| (short + t_rot, long + t_rot)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lookahead::OpenTime;
    use crate::policy::settings::Effective;
    use crate::policy::settings::tests::spec_with;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).single().unwrap_or_else(|| panic!("bad date"))
    }

    fn schedule(windows: &[(&str, &[&str], &str, &str)]) -> Schedule {
        Effective::from_spec(&spec_with(windows)).unwrap_or_else(|e| panic!("{e}")).schedule
    }

    const T_ROT: Duration = Duration::minutes(77);

    /// Both searches agree: the schedule alone, and the lookahead's list around `now`.
    fn both(
        s: &Schedule,
        now: DateTime<Utc>,
        created: DateTime<Utc>,
        e: Duration,
        k: u32,
    ) -> LastChances {
        let alone = last_chances(s, &[], created, created + e, T_ROT, k);
        let OpenTime::Windows { occurrences, .. } = OpenTime::of(s, now) else { panic!("open") };
        let listed = last_chances(s, &occurrences, created, created + e, T_ROT, k);
        assert_eq!(alone, listed, "created {created}, E {e}, K {k}");
        alone
    }

    #[test]
    fn discrete_windows_k_th_last_chance() {
        // Wed and Sat 02:00-06:00 UTC. Created Mon 1 June 10:00, E = 14d: deadline Mon 15 June
        // 10:00, last start 08:43. Chances: Wed 3, Sat 6, Wed 10, Sat 13.
        let s = schedule(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
        let created = utc(2026, 6, 1, 10, 0);
        let now = created;
        let e = Duration::days(14);
        let two = both(&s, now, created, e, 2);
        assert_eq!(two, LastChances { count: 2, kth_start: Some(utc(2026, 6, 10, 2, 0)) });
        assert_eq!(two.due(created), utc(2026, 6, 10, 2, 0));
        assert_eq!(both(&s, now, created, e, 1).kth_start, Some(utc(2026, 6, 13, 2, 0)));
        assert_eq!(both(&s, now, created, e, 4).kth_start, Some(utc(2026, 6, 3, 2, 0)));
        // Five are asked for, four exist: due from creation.
        let five = both(&s, now, created, e, 5);
        assert_eq!(five, LastChances { count: 4, kth_start: None });
        assert_eq!(five.due(created), created);
        // A deadline that leaves exactly t_rot after an opening keeps that opening as a chance;
        // one second less does not.
        let edge = utc(2026, 6, 13, 2, 0) + T_ROT - created;
        assert_eq!(both(&s, now, created, edge, 1).kth_start, Some(utc(2026, 6, 13, 2, 0)));
        let short = edge - Duration::seconds(1);
        assert_eq!(both(&s, now, created, short, 1).kth_start, Some(utc(2026, 6, 10, 2, 0)));
    }

    #[test]
    fn an_occurrence_in_progress_at_creation_is_a_chance() {
        // Created Wed 3 June 05:00, inside Wed 02:00-06:00; E = 4d: last start Sun 7 June 03:43.
        let s = schedule(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
        let created = utc(2026, 6, 3, 5, 0);
        let got = both(&s, created, created, Duration::days(4), 2);
        assert_eq!(got, LastChances { count: 2, kth_start: Some(utc(2026, 6, 3, 2, 0)) });
        assert!(got.due(created) < created, "due at once");
        // Created as it ends: only Saturday's.
        let at_end = utc(2026, 6, 3, 6, 0);
        assert_eq!(
            both(&s, at_end, at_end, Duration::days(4), 2),
            LastChances { count: 1, kth_start: None }
        );
        // A life shorter than t_rot has no chance at all.
        assert_eq!(
            last_chances(&s, &[], created, created + Duration::hours(1), T_ROT, 1),
            LastChances { count: 0, kth_start: None }
        );
    }

    #[test]
    fn counts_real_occurrences_across_a_dst_change() {
        // London, Sundays 02:00-04:00. BST ends on Sunday 25 October 2026: the window opens at
        // 01:00 UTC before and at 02:00 UTC from that day on.
        let s = schedule(&[("Europe/London", &["Sun"], "02:00", "04:00")]);
        let created = utc(2026, 10, 10, 0, 0);
        let ending = |last: DateTime<Utc>| last + T_ROT - created;
        // A last start at 01:30 UTC on the 25th misses that day's opening (02:00 GMT), which
        // summer time would have put at 01:00 UTC.
        let e = ending(utc(2026, 10, 25, 1, 30));
        assert_eq!(both(&s, created, created, e, 1).kth_start, Some(utc(2026, 10, 18, 1, 0)));
        assert_eq!(both(&s, created, created, e, 2).kth_start, Some(utc(2026, 10, 11, 1, 0)));
        let e = ending(utc(2026, 10, 25, 2, 0));
        assert_eq!(both(&s, created, created, e, 1).kth_start, Some(utc(2026, 10, 25, 2, 0)));
        assert_eq!(both(&s, created, created, e, 2).kth_start, Some(utc(2026, 10, 18, 1, 0)));
        // BST begins on Sunday 29 March 2026: that day's opening is at 01:00 UTC, the one before
        // at 02:00 UTC. A last start at 01:30 UTC on the 29th keeps it.
        let created = utc(2026, 3, 20, 0, 0);
        let e = utc(2026, 3, 29, 1, 30) + T_ROT - created;
        assert_eq!(
            both(&s, created, created, e, 2),
            LastChances { count: 2, kth_start: Some(utc(2026, 3, 22, 2, 0)) }
        );
        assert_eq!(both(&s, created, created, e, 1).kth_start, Some(utc(2026, 3, 29, 1, 0)));
    }

    #[test]
    fn the_list_answers_only_what_it_holds() {
        let s = schedule(&[("UTC", &["Wed", "Sat"], "02:00", "06:00")]);
        let now = utc(2026, 6, 1, 0, 0);
        let OpenTime::Windows { occurrences, .. } = OpenTime::of(&s, now) else { panic!("open") };
        // An old claim whose chances lie before the list: the schedule answers.
        let created = utc(2026, 4, 1, 0, 0);
        let e = Duration::days(30);
        let from_list = last_chances(&s, &occurrences, created, created + e, T_ROT, 2);
        assert_eq!(from_list, last_chances(&s, &[], created, created + e, T_ROT, 2));
        assert_eq!(from_list.kth_start, Some(utc(2026, 4, 25, 2, 0)));
        // A deadline past the list: the schedule answers.
        let far = now + HORIZON + Duration::days(30);
        let listed = last_chances(&s, &occurrences, far, far + e, T_ROT, 2);
        assert_eq!(listed, last_chances(&s, &[], far, far + e, T_ROT, 2));
        assert_eq!(listed.count, 2);
        // Absurd K: counted, not looped on forever.
        let all = last_chances(&s, &occurrences, now, now + e, T_ROT, u32::MAX);
        assert_eq!(all, LastChances { count: 8, kth_start: None });
    }

    #[test]
    fn pool_chances_on_the_worked_example() {
        // Wed and Sat 02:00-06:00 Tokyo, E = 14d, t_rot = 1h17m, K = 2: a node keeps its last
        // two openings, 3d or 4d apart; the lead runs from 3d to 7d (plus t_rot).
        let s = schedule(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let now = utc(2026, 6, 1, 0, 0);
        let pc = pool_chances(&s, now, Duration::days(14), T_ROT, 2).unwrap_or_else(|| panic!());
        assert_eq!(pc.fewest, 2);
        assert_eq!(pc.lead, Some((Duration::days(3) + T_ROT, Duration::days(7) + T_ROT)));
        // From an occurrence's end to the second opening after it: at most 7d - 4h.
        assert_eq!(pc.expire_after_needed, Some(Duration::days(7) - Duration::hours(4) + T_ROT));
        // One hour short of that, a node created as a window closes gets only one chance.
        let short = Duration::days(7) - Duration::hours(5) + T_ROT;
        let pc = pool_chances(&s, now, short, T_ROT, 2).unwrap_or_else(|| panic!());
        assert_eq!(pc.fewest, 1);
        // K = 1: the lead is t_rot to P + t_rot.
        let one = pool_chances(&s, now, Duration::days(14), T_ROT, 1).unwrap_or_else(|| panic!());
        assert_eq!(one.lead, Some((T_ROT, Duration::days(4) + T_ROT)));
        // Open 24/7 or no windows: nothing to count.
        let all = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"][..];
        let always = schedule(&[("UTC", all, "00:00", "00:00")]);
        assert_eq!(pool_chances(&always, now, Duration::days(14), T_ROT, 2), None);
        assert_eq!(pool_chances(&schedule(&[]), now, Duration::days(14), T_ROT, 2), None);
    }
}
