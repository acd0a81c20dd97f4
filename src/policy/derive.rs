//! The quantities of §3.2 and the per-claim decisions built on them: deadline,
//! `t_rot`, `t_rot_est`, lead time, auto age threshold `A`, guaranteed chances `G`, starts per
//! occurrence `C`, the candidate predicate, earliest-deadline order, escalating backoff with the
//! occurrence clamp, and the forceful-fallback trigger (§3.6). All pure; `now` is a parameter.
use std::cmp::Ordering;

use chrono::{DateTime, Duration, Utc};

use super::chances;
use super::duration::ExpireAfter;
use super::settings::{AgeThreshold, Effective};
use super::window::{Occurrence, Schedule};

/// Detection lag allowance in `t_rot`: 4 × the 30s short requeue.
pub const BUFFER: Duration = Duration::minutes(2);
/// tGP assumed in `t_rot` when the claim has none (its drain is unbounded).
pub const UNSET_TGP_BOUND: Duration = Duration::hours(1);
/// The escalating backoff stops doubling at this multiple of `retryBackoff`.
pub const MAX_BACKOFF_FACTOR: i32 = 8;

/// `creationTimestamp + E`; `None` for `Never` (no forced expiry).
pub fn deadline(created: DateTime<Utc>, expire_after: ExpireAfter) -> Option<DateTime<Utc>> {
    expire_after.duration().and_then(|e| created.checked_add_signed(e))
}

/// `t_rot = readyTimeout + tGP + buffer`, the deadline-side bound of one rotation; tGP unset
/// counts as 1h.
pub fn t_rot(ready_timeout: Duration, tgp: Option<Duration>) -> Duration {
    ready_timeout + tgp.unwrap_or(UNSET_TGP_BOUND) + BUFFER
}

/// `drain_bound = tGP + buffer` (tGP unset: 1h + buffer), the §4.2 bound after which a drain
/// counts as stuck.
pub fn drain_bound(tgp: Option<Duration>) -> Duration {
    tgp.unwrap_or(UNSET_TGP_BOUND) + BUFFER
}

/// `t_rot_est = provisioningEstimate + drainEstimate`, the expected service time (layer 2 only).
pub fn t_rot_est(provisioning_estimate: Duration, drain_estimate: Duration) -> Duration {
    provisioning_estimate + drain_estimate
}

/// `leadTime = K*P + t_rot`: a claim is due this long before its deadline. Saturates instead of
/// overflowing for absurd K.
pub fn lead_time(k: u32, period: Duration, t_rot: Duration) -> Duration {
    times(period, k).checked_add(&t_rot).unwrap_or(Duration::MAX)
}

/// `d * n`, saturating at `Duration::MAX` (chrono's `*` panics on overflow).
pub fn times(d: Duration, n: u32) -> Duration {
    i32::try_from(n).ok().and_then(|n| d.checked_mul(n)).unwrap_or(Duration::MAX)
}

/// Auto `A = E - (K*P + t_rot)`. Zero or negative means the claim cannot get K chances
/// (layer-1 fatal for the pool's representative E, `ShortLead` for one claim).
pub fn auto_age_threshold(e: Duration, k: u32, period: Duration, t_rot: Duration) -> Duration {
    e - lead_time(k, period, t_rot)
}

/// `G`: occurrence starts an override `A` guarantees before `deadline - t_rot`:
/// `floor((E - A - t_rot) / P)`; may be zero or negative.
pub fn guaranteed_chances(e: Duration, a: Duration, period: Duration, t_rot: Duration) -> i64 {
    let span = e - a - t_rot;
    let p = period.num_milliseconds().max(1);
    span.num_milliseconds().div_euclid(p)
}

/// `C = m * ceil(D / (t_rot_est + cooldownAfter))`, with `m = lanes` rotations in flight at
/// once (`surge.maxUnavailable` resolved against the pool; 0 counts as 1): each lane starts one
/// rotation per slot, its cooldown after its own completion.
pub fn starts_per_occurrence(
    d: Duration,
    t_rot_est: Duration,
    cooldown_after: Duration,
    lanes: usize,
) -> u64 {
    let slot = (t_rot_est + cooldown_after).num_milliseconds().max(1);
    let d = d.num_milliseconds().max(0);
    let per_lane = u64::try_from((d + slot - 1) / slot).unwrap_or(0);
    per_lane.saturating_mul(u64::try_from(lanes.max(1)).unwrap_or(u64::MAX))
}

/// The `retry-count` annotation: decimal digits, saturating at `u64::MAX` (a huge count must
/// not wrap back to a short backoff, nor panic); absent or anything else reads as 0, no failure
/// recorded (the backoff treats 0 as 1). The one reading of the count, for selection, backoff,
/// messages and the increment.
pub fn parse_retry_count(raw: Option<&str>) -> u64 {
    match raw {
        Some(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.bytes().fold(0u64, |n, b| n.saturating_mul(10).saturating_add(u64::from(b - b'0')))
        }
        _ => 0,
    }
}

/// [`parse_retry_count`] for the backoff, saturating at `u32::MAX` (past 4 the cap applies).
pub fn retry_count_u32(raw: Option<&str>) -> u32 {
    u32::try_from(parse_retry_count(raw)).unwrap_or(u32::MAX)
}

/// Escalating backoff: `retryBackoff * 2^(retry_count - 1)`, capped at `8 * retryBackoff`. A
/// count of 0 (not yet failed) is treated as 1.
pub fn backoff(retry_backoff: Duration, retry_count: u32) -> Duration {
    let doublings = retry_count.saturating_sub(1).min(3);
    retry_backoff * (1i32 << doublings).min(MAX_BACKOFF_FACTOR)
}

/// How far in the future a stamp (`last-rotation-at`, `last-failure-at`, `started-at`,
/// `failed-at`: the instant something happened) may lie before it is invalid: clock skew between
/// the replicas that write and read it. A later value is treated as unreadable and warned about,
/// never obeyed: obeyed, a stamp years ahead holds its gate, backoff or readyTimeout for years.
pub const STAMP_SKEW_TOLERANCE: Duration = Duration::minutes(2);

/// `stamp` lies further in the future than [`STAMP_SKEW_TOLERANCE`] allows at `now`.
pub fn in_the_future(stamp: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    stamp > now + STAMP_SKEW_TOLERANCE
}

/// When a failed claim becomes eligible again: `min(failed_at + backoff, end of the occurrence
/// containing failed_at)`; `failed_at` outside every occurrence: at once. Recomputed from the
/// schedule given, so editing a window entry moves it (§3.2). The window gate still
/// applies on top.
pub fn eligible_at(
    failed_at: DateTime<Utc>,
    retry_count: u32,
    retry_backoff: Duration,
    schedule: &Schedule,
) -> DateTime<Utc> {
    let after_backoff = failed_at + backoff(retry_backoff, retry_count);
    match schedule.occurrence_containing(failed_at) {
        Some(occurrence) => after_backoff.min(occurrence.end),
        None => failed_at,
    }
}

/// The next attempt reported by the failure log line and Event: [`eligible_at`] if it lies in
/// the occurrence that contains `failed_at`, else the next occurrence start at or after it. A
/// snapshot, not a lower bound. `None` when the window never opens again within the horizon.
pub fn next_attempt(
    failed_at: DateTime<Utc>,
    retry_count: u32,
    retry_backoff: Duration,
    schedule: &Schedule,
) -> Option<DateTime<Utc>> {
    let eligible = eligible_at(failed_at, retry_count, retry_backoff, schedule);
    match schedule.occurrence_containing(failed_at) {
        Some(occurrence) if occurrence.contains(eligible) => Some(eligible),
        _ => schedule.next_start_after(eligible),
    }
}

/// The claim's rotation state, from the controller's state annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// No state: never touched, or the last rotation finished.
    Idle,
    /// The last attempt failed; eligible again after its backoff.
    Failed,
    /// A rotation is pending or draining, or ended by a forced expiry.
    InRotation,
}

/// Candidate selection's view of the rules' claim state, which is read once for everyone by
/// [`crate::engine::claim_state`] (absent or unknown = `none` = Idle): selection and the guards
/// cannot disagree about a value.
impl From<crate::engine::ClaimState> for ClaimState {
    fn from(state: crate::engine::ClaimState) -> ClaimState {
        if state.is_idle() {
            ClaimState::Idle
        } else if state.is_failed() {
            ClaimState::Failed
        } else {
            ClaimState::InRotation
        }
    }
}

/// What the candidate predicate needs to know about one NodeClaim of a governed pool. The
/// caller reads annotations and conditions; nothing here parses them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimFacts {
    pub created: DateTime<Utc>,
    /// The claim's own `spec.expireAfter`.
    pub expire_after: ExpireAfter,
    /// The claim's own `spec.terminationGracePeriod`.
    pub termination_grace_period: Option<Duration>,
    /// `Ready` condition is True.
    pub ready: bool,
    /// `deletionTimestamp` is set.
    pub deleting: bool,
    pub state: ClaimState,
    pub retry_count: u32,
    pub failed_at: Option<DateTime<Utc>>,
    /// The node carries `karpenter.sh/do-not-disrupt: "true"` without our ownership marker.
    pub operator_do_not_disrupt: bool,
}

/// The verdict of [`candidacy`]; every variant but `Candidate` says why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidacy {
    Candidate,
    Deleting,
    NotReady,
    InRotation,
    /// The operator's own do-not-disrupt; the expireAfter backstop still applies.
    OperatorOptOut,
    /// Not old enough yet; due strictly after `due_after` (`None`: never, E = Never with auto).
    NotDue {
        due_after: Option<DateTime<Utc>>,
    },
    /// Failed, eligible again at `until`.
    BackingOff {
        until: DateTime<Utc>,
    },
}

/// The instant after which a claim is due for rotation (§3.2): auto: `deadline -
/// leadTime`, strictly after; windows: the start of its K-th last chance, at or after; override:
/// `created + A`, at or after (the predicate handles the boundary). `None`: never due (E = Never
/// with auto or windows).
pub fn due_after(
    claim: &ClaimFacts,
    settings: &Effective,
    period: Duration,
) -> Option<DateTime<Utc>> {
    due_after_listed(claim, settings, period, &[])
}

/// [`due_after`], with a contiguous run of the schedule's merged occurrences listed already
/// (the burst lookahead's, around now): `ageThreshold: windows` counts chances on it before it
/// asks the schedule, which is what keeps a pass over many claims cheap.
pub fn due_after_listed(
    claim: &ClaimFacts,
    settings: &Effective,
    period: Duration,
    listed: &[Occurrence],
) -> Option<DateTime<Utc>> {
    let deadline = || deadline(claim.created, claim.expire_after);
    let t_rot = settings.t_rot(claim.termination_grace_period);
    let k = settings.min_rotation_chances;
    match settings.age_threshold {
        AgeThreshold::Windows if settings.schedule.has_gaps() => {
            let chances = chances::last_chances(
                &settings.schedule,
                listed,
                claim.created,
                deadline()?,
                t_rot,
                k,
            );
            Some(chances.due(claim.created))
        }
        // Open 24/7 (or no windows): the chances are the ticks `auto` counts.
        AgeThreshold::Auto | AgeThreshold::Windows => {
            deadline()?.checked_sub_signed(lead_time(k, period, t_rot))
        }
        AgeThreshold::Override(a) => claim.created.checked_add_signed(a),
    }
}

/// The candidate predicate of §3.2 for a claim of a governed pool (the caller only
/// asks for pools whose governing policy produced `settings`). `period` is `P` of the policy's
/// schedule at `now`. The window gate is not part of it.
pub fn candidacy(
    claim: &ClaimFacts,
    settings: &Effective,
    period: Duration,
    now: DateTime<Utc>,
) -> Candidacy {
    candidacy_due(claim, settings, due_after(claim, settings, period), now)
}

/// [`candidacy`] with the due instant given: [`due_after`], or the earlier one the burst
/// lookahead gives a crowded claim ([`crate::policy::lookahead`]).
pub fn candidacy_due(
    claim: &ClaimFacts,
    settings: &Effective,
    due: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Candidacy {
    if claim.deleting {
        return Candidacy::Deleting;
    }
    if !claim.ready {
        return Candidacy::NotReady;
    }
    if claim.state == ClaimState::InRotation {
        return Candidacy::InRotation;
    }
    if claim.operator_do_not_disrupt {
        return Candidacy::OperatorOptOut;
    }
    let is_due = due.is_some_and(|at| due_reached(settings, at, now));
    if !is_due {
        return Candidacy::NotDue { due_after: due };
    }
    if claim.state == ClaimState::Failed {
        // A failed state without a valid failed-at (hand-edited: unreadable, or in the future)
        // is retried at once.
        if let Some(failed_at) = claim.failed_at.filter(|t| !in_the_future(*t, now)) {
            let until = eligible_at(
                failed_at,
                claim.retry_count,
                settings.retry_backoff,
                &settings.schedule,
            );
            if now < until {
                return Candidacy::BackingOff { until };
            }
        }
    }
    Candidacy::Candidate
}

/// Whether `now` has reached the due instant `at`: strictly after it for `auto` (and a 24/7
/// union of windows, which takes `auto`'s instant and its comparison), at or after it otherwise.
/// A claim whose [`CandidateSince`] is `Due(at)` is a candidate exactly then.
pub fn due_reached(settings: &Effective, at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    let strict = match settings.age_threshold {
        AgeThreshold::Auto => true,
        AgeThreshold::Windows => !settings.schedule.has_gaps(),
        AgeThreshold::Override(_) => false,
    };
    if strict { now > at } else { now >= at }
}

/// When [`candidacy_due`] says `Candidate`, as a function of `now` alone, for the census of a
/// pool whose facts stay the same from pass to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateSince {
    /// Never, whatever `now`: deleting, not Ready, in rotation, opted out, or never due.
    Never,
    /// From the instant `now` reaches the due instant ([`due_reached`]) on, for good.
    Due(DateTime<Utc>),
    /// A failed claim: its backoff depends on `now` in more ways; ask [`candidacy_due`].
    Ask,
}

/// [`CandidateSince`] of a claim with the due instant `due`, read in the order
/// [`candidacy_due`] reads the facts.
pub fn candidate_since(claim: &ClaimFacts, due: Option<DateTime<Utc>>) -> CandidateSince {
    if claim.deleting
        || !claim.ready
        || claim.state == ClaimState::InRotation
        || claim.operator_do_not_disrupt
    {
        return CandidateSince::Never;
    }
    match due {
        None => CandidateSince::Never,
        Some(_) if claim.state == ClaimState::Failed => CandidateSince::Ask,
        Some(at) => CandidateSince::Due(at),
    }
}

/// Whether the claim takes part in the burst lookahead: it has a deadline and a due instant
/// (`due`, its [`due_after`]) and still needs a rotation slot (not deleting, not in rotation, not
/// opted out by the operator).
pub fn needs_slot(claim: &ClaimFacts, due: Option<DateTime<Utc>>) -> bool {
    !claim.deleting
        && claim.state != ClaimState::InRotation
        && !claim.operator_do_not_disrupt
        && deadline(claim.created, claim.expire_after).is_some()
        && due.is_some()
}

/// Shorthand for `candidacy(..) == Candidate`.
pub fn is_candidate(
    claim: &ClaimFacts,
    settings: &Effective,
    period: Duration,
    now: DateTime<Utc>,
) -> bool {
    candidacy(claim, settings, period, now) == Candidacy::Candidate
}

/// Sort key of the candidate order: earliest deadline first (no deadline last), then older
/// `creationTimestamp`, then name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationOrder<'a> {
    pub deadline: Option<DateTime<Utc>>,
    pub created: DateTime<Utc>,
    pub name: &'a str,
}

impl Ord for RotationOrder<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        let by_deadline = match (self.deadline, other.deadline) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_deadline.then(self.created.cmp(&other.created)).then(self.name.cmp(other.name))
    }
}

impl PartialOrd for RotationOrder<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The derived values of a policy's effective settings for a claim or pool with tGP `tgp`.
impl Effective {
    /// `t_rot = readyTimeout + tGP + buffer` for a claim or pool with this tGP.
    pub fn t_rot(&self, tgp: Option<Duration>) -> Duration {
        t_rot(self.ready_timeout, tgp)
    }

    /// `t_rot_est = provisioningEstimate + drainEstimate`.
    pub fn t_rot_est(&self, tgp: Option<Duration>) -> Duration {
        t_rot_est(self.provisioning_estimate, self.drain_estimate(tgp))
    }

    /// The escalating backoff after `retry_count` failures.
    pub fn backoff(&self, retry_count: u32) -> Duration {
        backoff(self.retry_backoff, retry_count)
    }
}

impl ClaimFacts {
    /// A claim that is ready, idle, never failed and not opted out: what the unit and property
    /// tests start from, and how the simulation sees a fleet at its start.
    pub fn idle(
        created: DateTime<Utc>,
        expire_after: ExpireAfter,
        termination_grace_period: Option<Duration>,
    ) -> ClaimFacts {
        ClaimFacts {
            created,
            expire_after,
            termination_grace_period,
            ready: true,
            deleting: false,
            state: ClaimState::Idle,
            retry_count: 0,
            failed_at: None,
            operator_do_not_disrupt: false,
        }
    }
}

#[cfg(test)]
mod tests {
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
            starts_per_occurrence(
                Duration::hours(4),
                Duration::minutes(15),
                s.cooldown_after,
                lanes,
            )
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
        let s =
            settings(&[("UTC", &["Sat"], "02:00", "06:00"), ("UTC", &["Sat"], "06:00", "07:00")]);
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
}
