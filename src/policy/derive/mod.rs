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
pub(crate) const BUFFER: Duration = Duration::minutes(2);
/// tGP assumed in `t_rot` when the claim has none (its drain is unbounded).
pub(crate) const UNSET_TGP_BOUND: Duration = Duration::hours(1);
/// The escalating backoff stops doubling at this multiple of `retryBackoff`.
pub(crate) const MAX_BACKOFF_FACTOR: i32 = 8;

/// `creationTimestamp + E`; `None` for `Never` (no forced expiry).
pub(crate) fn deadline(created: DateTime<Utc>, expire_after: ExpireAfter) -> Option<DateTime<Utc>> {
    expire_after.duration().and_then(|e| created.checked_add_signed(e))
}

/// `t_rot = readyTimeout + tGP + buffer`, the deadline-side bound of one rotation; tGP unset
/// counts as 1h.
pub(crate) fn t_rot(ready_timeout: Duration, tgp: Option<Duration>) -> Duration {
    ready_timeout + tgp.unwrap_or(UNSET_TGP_BOUND) + BUFFER
}

/// `drain_bound = tGP + buffer` (tGP unset: 1h + buffer), the §4.2 bound after which a drain
/// counts as stuck.
pub(crate) fn drain_bound(tgp: Option<Duration>) -> Duration {
    tgp.unwrap_or(UNSET_TGP_BOUND) + BUFFER
}

/// `t_rot_est = provisioningEstimate + drainEstimate`, the expected service time (layer 2 only).
pub(crate) fn t_rot_est(provisioning_estimate: Duration, drain_estimate: Duration) -> Duration {
    provisioning_estimate + drain_estimate
}

/// `leadTime = K*P + t_rot`: a claim is due this long before its deadline. Saturates instead of
/// overflowing for absurd K.
pub(crate) fn lead_time(k: u32, period: Duration, t_rot: Duration) -> Duration {
    times(period, k).checked_add(&t_rot).unwrap_or(Duration::MAX)
}

/// `d * n`, saturating at `Duration::MAX` (chrono's `*` panics on overflow).
pub(crate) fn times(d: Duration, n: u32) -> Duration {
    i32::try_from(n).ok().and_then(|n| d.checked_mul(n)).unwrap_or(Duration::MAX)
}

/// Auto `A = E - (K*P + t_rot)`. Zero or negative means the claim cannot get K chances
/// (layer-1 fatal for the pool's representative E, `ShortLead` for one claim).
#[cfg(test)]
pub(crate) fn auto_age_threshold(
    e: Duration,
    k: u32,
    period: Duration,
    t_rot: Duration,
) -> Duration {
    e - lead_time(k, period, t_rot)
}

/// `G`: occurrence starts an override `A` guarantees before `deadline - t_rot`:
/// `floor((E - A - t_rot) / P)`; may be zero or negative.
pub(crate) fn guaranteed_chances(
    e: Duration,
    a: Duration,
    period: Duration,
    t_rot: Duration,
) -> i64 {
    let span = e - a - t_rot;
    let p = period.num_milliseconds().max(1);
    span.num_milliseconds().div_euclid(p)
}

/// `C = m * ceil(D / (t_rot_est + cooldownAfter))`, with `m = lanes` rotations in flight at
/// once (`surge.maxUnavailable` resolved against the pool; 0 counts as 1): each lane starts one
/// rotation per slot, its cooldown after its own completion.
pub(crate) fn starts_per_occurrence(
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
pub(crate) fn parse_retry_count(raw: Option<&str>) -> u64 {
    match raw {
        Some(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.bytes().fold(0u64, |n, b| n.saturating_mul(10).saturating_add(u64::from(b - b'0')))
        }
        _ => 0,
    }
}

/// [`parse_retry_count`] for the backoff, saturating at `u32::MAX` (past 4 the cap applies).
pub(crate) fn retry_count_u32(raw: Option<&str>) -> u32 {
    u32::try_from(parse_retry_count(raw)).unwrap_or(u32::MAX)
}

/// Escalating backoff: `retryBackoff * 2^(retry_count - 1)`, capped at `8 * retryBackoff`. A
/// count of 0 (not yet failed) is treated as 1.
pub(crate) fn backoff(retry_backoff: Duration, retry_count: u32) -> Duration {
    let doublings = retry_count.saturating_sub(1).min(3);
    retry_backoff * (1i32 << doublings).min(MAX_BACKOFF_FACTOR)
}

/// How far in the future a stamp (`last-rotation-at`, `last-failure-at`, `started-at`,
/// `failed-at`: the instant something happened) may lie before it is invalid: clock skew between
/// the replicas that write and read it. A later value is treated as unreadable and warned about,
/// never obeyed: obeyed, a stamp years ahead holds its gate, backoff or readyTimeout for years.
pub(crate) const STAMP_SKEW_TOLERANCE: Duration = Duration::minutes(2);

/// `stamp` lies further in the future than [`STAMP_SKEW_TOLERANCE`] allows at `now`.
pub(crate) fn in_the_future(stamp: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    stamp > now + STAMP_SKEW_TOLERANCE
}

/// When a failed claim becomes eligible again: `min(failed_at + backoff, end of the occurrence
/// containing failed_at)`; `failed_at` outside every occurrence: at once. Recomputed from the
/// schedule given, so editing a window entry moves it (§3.2). The window gate still
/// applies on top.
pub(crate) fn eligible_at(
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
pub(crate) fn next_attempt(
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
pub(crate) enum ClaimState {
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
pub(crate) struct ClaimFacts {
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

/// The verdict of [`candidacy_due`]; every variant but `Candidate` says why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Candidacy {
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

/// The tests' shorthand: [`due_after_listed`] with nothing listed.
#[cfg(test)]
pub(crate) fn due_after(
    claim: &ClaimFacts,
    settings: &Effective,
    period: Duration,
) -> Option<DateTime<Utc>> {
    due_after_listed(claim, settings, period, &[])
}

/// The instant after which a claim is due for rotation (§3.2): auto: `deadline -
/// leadTime`, strictly after; windows: the start of its K-th last chance, at or after; override:
/// `created + A`, at or after (the predicate handles the boundary). `None`: never due (E = Never
/// with auto or windows). `listed` is a contiguous run of the schedule's merged occurrences
/// listed already (the burst lookahead's, around now; may be empty): `ageThreshold: windows`
/// counts chances on it before it asks the schedule, which is what keeps a pass over many claims
/// cheap.
pub(crate) fn due_after_listed(
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

/// The tests' shorthand: [`candidacy_due`] at the claim's own due instant ([`due_after_listed`]
/// with nothing listed; `period` is `P` of the policy's schedule at `now`).
#[cfg(test)]
pub(crate) fn candidacy(
    claim: &ClaimFacts,
    settings: &Effective,
    period: Duration,
    now: DateTime<Utc>,
) -> Candidacy {
    candidacy_due(claim, settings, due_after(claim, settings, period), now)
}

/// The candidate predicate of §3.2 for a claim of a governed pool (the caller only asks for
/// pools whose governing policy produced `settings`), with the due instant given: the claim's
/// own ([`due_after_listed`]), or the earlier one the burst lookahead gives a crowded claim
/// ([`crate::policy::lookahead`]). The window gate is not part of it.
pub(crate) fn candidacy_due(
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
pub(crate) fn due_reached(settings: &Effective, at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
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
pub(crate) enum CandidateSince {
    /// Never, whatever `now`: deleting, not Ready, in rotation, opted out, or never due.
    Never,
    /// From the instant `now` reaches the due instant ([`due_reached`]) on, for good.
    Due(DateTime<Utc>),
    /// A failed claim: its backoff depends on `now` in more ways; ask [`candidacy_due`].
    Ask,
}

/// [`CandidateSince`] of a claim with the due instant `due`, read in the order
/// [`candidacy_due`] reads the facts.
pub(crate) fn candidate_since(claim: &ClaimFacts, due: Option<DateTime<Utc>>) -> CandidateSince {
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
/// (`due`, its [`due_after_listed`]) and still needs a rotation slot (not deleting, not in rotation, not
/// opted out by the operator).
pub(crate) fn needs_slot(claim: &ClaimFacts, due: Option<DateTime<Utc>>) -> bool {
    !claim.deleting
        && claim.state != ClaimState::InRotation
        && !claim.operator_do_not_disrupt
        && deadline(claim.created, claim.expire_after).is_some()
        && due.is_some()
}

/// Shorthand for `candidacy(..) == Candidate`.
#[cfg(test)]
pub(crate) fn is_candidate(
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
pub(crate) struct RotationOrder<'a> {
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
    pub(crate) fn t_rot(&self, tgp: Option<Duration>) -> Duration {
        t_rot(self.ready_timeout, tgp)
    }

    /// `t_rot_est = provisioningEstimate + drainEstimate`.
    pub(crate) fn t_rot_est(&self, tgp: Option<Duration>) -> Duration {
        t_rot_est(self.provisioning_estimate, self.drain_estimate(tgp))
    }

    /// The escalating backoff after `retry_count` failures.
    pub(crate) fn backoff(&self, retry_count: u32) -> Duration {
        backoff(self.retry_backoff, retry_count)
    }
}

impl ClaimFacts {
    /// A claim that is ready, idle, never failed and not opted out: what the unit and property
    /// tests start from, and how the simulation sees a fleet at its start.
    pub(crate) fn idle(
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
mod tests;
