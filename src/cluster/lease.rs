//! Leader election on one Lease, timed on this replica's own clock only.
//!
//! Two replicas' clocks may disagree by seconds or more, and a Lease's `renewTime` is written on
//! its holder's clock. So, as client-go does, no replica compares another replica's `renewTime`
//! with its own clock:
//!
//! - a standby takes the Lease only once it has read the same record (holder, `renewTime`,
//!   `acquireTime`, `leaseDurationSeconds`, `leaseTransitions`) for a whole
//!   `leaseDurationSeconds` on its own clock;
//! - the holder's write deadline ([`Elector::deadline`], which moves the
//!   [`super::fence::Fence`]) counts from when it *sent* the acquire or renewal that won, on its
//!   own clock: that write reached the API server after it was sent, so every standby saw the
//!   record change after that instant and waits a whole duration from then;
//! - every write of the Lease carries the resourceVersion of the copy it was decided on: a
//!   takeover never lands on a renewal it did not see, a renewal never lands on a takeover, and a
//!   release never clears a Lease someone else took meanwhile.
//!
//! Only the two clocks' *rates* must agree (to well within [`super::fence::SLACK`] over one
//! duration). [`Elector`] decides and keeps the state; `runtime::lease` sends the requests, and
//! the simulation replays the standby's decisions on skewed virtual clocks.
use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde_json::{Value, json};

/// A Lease's record as every replica compares it: any change is a renewal or a new holder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub holder: Option<String>,
    pub renew_time: Option<MicroTime>,
    pub acquire_time: Option<MicroTime>,
    pub duration_secs: Option<i32>,
    pub transitions: Option<i32>,
}

impl Record {
    pub(crate) fn of(spec: Option<&LeaseSpec>) -> Record {
        let Some(s) = spec else { return Record::default() };
        Record {
            holder: s.holder_identity.clone().filter(|h| !h.is_empty()),
            renew_time: s.renew_time.clone(),
            acquire_time: s.acquire_time.clone(),
            duration_secs: s.lease_duration_seconds,
            transitions: s.lease_transitions,
        }
    }
}

/// The election's timing, from `run`'s flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// `--lease-duration`: how long a standby waits on a record that does not change.
    pub duration: Duration,
    /// `--lease-duration - --lease-grace`: how often the holder renews and a standby reads.
    pub period: Duration,
    /// How long before its Lease could pass to a standby the holder stops writing
    /// ([`super::fence::margin`]).
    pub margin: Duration,
    /// How long after a request that failed (a timeout, a 5xx) the next one goes.
    pub retry: Duration,
}

/// What the elector does next, at the local instant given to [`Elector::next`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing before this local instant.
    Wait(DateTime<Utc>),
    /// Read the Lease.
    Read,
    /// Renew this replica's Lease ([`Elector::renew_patch`]).
    Renew,
    /// Take the Lease ([`Elector::acquire_patch`]): it is free, this replica's from an earlier
    /// term, or its record did not change for a whole duration.
    Acquire,
}

/// The last record read or written, its resourceVersion, and when this replica first saw it.
#[derive(Debug, Clone)]
struct Seen {
    record: Record,
    /// `None` once a write on it lost (409): read before writing again.
    resource_version: Option<String>,
    since: DateTime<Utc>,
}

/// One replica's side of the election. Every instant it is given is on its own clock.
#[derive(Debug, Clone)]
pub(crate) struct Elector {
    identity: String,
    timing: Timing,
    seen: Option<Seen>,
    /// When the acquire or renewal that won was sent, while the last record seen is ours.
    won_at: Option<DateTime<Utc>>,
    /// Before this instant, no request.
    due: Option<DateTime<Utc>>,
}

impl Elector {
    pub(crate) fn new(identity: impl Into<String>, timing: Timing) -> Elector {
        Elector { identity: identity.into(), timing, seen: None, won_at: None, due: None }
    }

    pub(crate) fn identity(&self) -> &str {
        &self.identity
    }

    /// The holder the last record seen names (`None`: free or never read).
    pub(crate) fn holder(&self) -> Option<&str> {
        self.seen.as_ref()?.record.holder.as_deref()
    }

    /// The last instant this replica may write: the send time of its last acquire or renewal
    /// that won, plus the duration, less the margin. `None` when it does not hold the Lease.
    pub(crate) fn deadline(&self) -> Option<DateTime<Utc>> {
        self.won_at.map(|w| w + self.timing.duration - self.timing.margin)
    }

    /// Whether this replica leads at `now`: its deadline is ahead.
    pub(crate) fn leads(&self, now: DateTime<Utc>) -> bool {
        self.deadline().is_some_and(|d| now < d)
    }

    /// How long the record seen must stay unchanged before a standby takes it: the duration its
    /// holder wrote, else this replica's.
    fn record_duration(&self, record: &Record) -> Duration {
        record
            .duration_secs
            .filter(|s| *s > 0)
            .map_or(self.timing.duration, |s| Duration::seconds(i64::from(s)))
    }

    pub(crate) fn next(&self, now: DateTime<Utc>) -> Step {
        if let Some(due) = self.due
            && now < due
        {
            return Step::Wait(due);
        }
        let Some(seen) = &self.seen else { return Step::Read };
        if seen.resource_version.is_none() {
            return Step::Read;
        }
        if self.leads(now) {
            return Step::Renew;
        }
        match seen.record.holder.as_deref() {
            None => Step::Acquire,
            Some(h) if h == self.identity => Step::Acquire,
            Some(_) if now >= seen.since + self.record_duration(&seen.record) => Step::Acquire,
            Some(_) => Step::Read,
        }
    }

    /// The Lease as read at `now` (`None`: it does not exist; read again after the retry
    /// delay, once the caller created it).
    pub(crate) fn read(&mut self, lease: Option<&Lease>, now: DateTime<Utc>) {
        let Some(lease) = lease else {
            self.seen = None;
            self.won_at = None;
            self.due = Some(now + self.timing.retry);
            return;
        };
        let record = Record::of(lease.spec.as_ref());
        self.observe(record, lease.metadata.resource_version.clone(), now);
        if self.holder() != Some(self.identity.as_str()) {
            self.won_at = None;
        }
        let holder = self.holder();
        self.due = match holder {
            // Free, or ours: write at once.
            None => Some(now),
            Some(h) if h == self.identity => Some(now),
            // Read again a period later, or take it once it has not changed for a duration.
            Some(_) => self.seen.as_ref().map(|s| {
                let expires = s.since + self.record_duration(&s.record);
                (now + self.timing.period).min(expires.max(now))
            }),
        };
    }

    /// A record read or written at `now`: a changed one is seen from `now` on; an unchanged one
    /// keeps the instant it was first seen (a label edit moves only the resourceVersion).
    fn observe(&mut self, record: Record, resource_version: Option<String>, now: DateTime<Utc>) {
        match &mut self.seen {
            Some(seen) if seen.record == record => seen.resource_version = resource_version,
            _ => self.seen = Some(Seen { record, resource_version, since: now }),
        }
    }

    /// A write of this replica that the API server accepted (acquire, renewal or release): the
    /// Lease it answered with, and when the write was sent.
    pub(crate) fn wrote(&mut self, lease: &Lease, sent: DateTime<Utc>) {
        let record = Record::of(lease.spec.as_ref());
        let ours = record.holder.as_deref() == Some(self.identity.as_str());
        self.seen = Some(Seen {
            record,
            resource_version: lease.metadata.resource_version.clone(),
            since: sent,
        });
        self.won_at = ours.then_some(sent);
        self.due = Some(sent + self.timing.period);
    }

    /// A write that lost (409: the Lease changed since it was read): read it again at once.
    pub(crate) fn lost(&mut self, now: DateTime<Utc>) {
        if let Some(seen) = &mut self.seen {
            seen.resource_version = None;
        }
        self.due = Some(now);
    }

    /// A request that failed (timeout, 5xx, no connection): try again after the retry delay.
    /// The deadline stays where the last write that won put it.
    pub(crate) fn failed(&mut self, now: DateTime<Utc>) {
        self.due = Some(now + self.timing.retry);
    }

    /// This replica stops writing (it steps down or shuts down): no deadline any more.
    pub(crate) fn resign(&mut self) {
        self.won_at = None;
    }

    /// The resourceVersion every write carries: `None` (no write) until a read or a write that
    /// won gave one.
    fn precondition(&self) -> Option<Value> {
        let rv = self.seen.as_ref()?.resource_version.clone()?;
        Some(json!({ "resourceVersion": rv }))
    }

    /// The renewal: a merge patch of `renewTime` (this replica's wall clock, for people and
    /// tools: no replica decides on it) and the duration, on the resourceVersion last seen.
    /// `None`: read first.
    pub(crate) fn renew_patch(&self, wall: DateTime<Utc>) -> Option<Value> {
        Some(json!({
            "metadata": self.precondition()?,
            "spec": {
                "holderIdentity": self.identity,
                "renewTime": micro_time(wall),
                "leaseDurationSeconds": self.duration_secs(),
            }
        }))
    }

    /// Taking the Lease: this replica as the holder, on the resourceVersion of the record it
    /// judged. A new holder counts a transition and stamps `acquireTime`. `None`: read first.
    pub(crate) fn acquire_patch(&self, wall: DateTime<Utc>) -> Option<Value> {
        let record = self.seen.as_ref().map(|s| &s.record);
        if record.and_then(|r| r.holder.as_deref()) == Some(self.identity.as_str()) {
            return self.renew_patch(wall);
        }
        let transitions = record.and_then(|r| r.transitions).unwrap_or(0).saturating_add(1);
        Some(json!({
            "metadata": self.precondition()?,
            "spec": {
                "holderIdentity": self.identity,
                "acquireTime": micro_time(wall),
                "renewTime": micro_time(wall),
                "leaseDurationSeconds": self.duration_secs(),
                "leaseTransitions": transitions,
            }
        }))
    }

    /// Giving the Lease up: the holder and its times cleared, only if the Lease is still as this
    /// replica last wrote it. `None` when the last record seen is not its own.
    pub(crate) fn release_patch(&self) -> Option<Value> {
        if self.holder() != Some(self.identity.as_str()) {
            return None;
        }
        Some(json!({
            "metadata": self.precondition()?,
            "spec": {
                "holderIdentity": null,
                "acquireTime": null,
                "renewTime": null,
                "leaseDurationSeconds": null,
            }
        }))
    }

    fn duration_secs(&self) -> i64 {
        self.timing.duration.num_seconds()
    }
}

/// `t` as a Kubernetes MicroTime.
pub(crate) fn micro_time(t: DateTime<Utc>) -> Option<MicroTime> {
    let ts = k8s_openapi::jiff::Timestamp::new(
        t.timestamp(),
        i32::try_from(t.timestamp_subsec_nanos()).ok()?,
    )
    .ok()?;
    Some(MicroTime(ts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().expect("time")
    }

    fn secs(s: i64) -> Duration {
        Duration::seconds(s)
    }

    fn timing() -> Timing {
        Timing { duration: secs(15), period: secs(5), margin: secs(6), retry: secs(1) }
    }

    /// A Lease held by `holder`, renewed at `renew` on the holder's clock.
    fn lease(holder: Option<&str>, renew: DateTime<Utc>, rv: &str) -> Lease {
        let mut l = Lease::default();
        l.metadata.resource_version = Some(rv.into());
        l.spec = Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: micro_time(renew),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        });
        l
    }

    /// The standby's clock runs far ahead of or behind the leader's: the `renewTime` it reads
    /// says nothing to it. It takes the Lease only after it saw one record for a whole
    /// duration on its own clock, and a renewal it reads puts that off again.
    #[test]
    fn a_standby_takes_the_lease_only_after_one_record_stood_for_a_duration_on_its_clock() {
        for leader_clock in [t0() - Duration::hours(1), t0() + Duration::hours(1), t0()] {
            let mut standby = Elector::new("b", timing());
            assert_eq!(standby.next(t0()), Step::Read);
            standby.read(Some(&lease(Some("a"), leader_clock, "1")), t0());
            assert_eq!(standby.next(t0()), Step::Wait(t0() + secs(5)));
            standby.read(Some(&lease(Some("a"), leader_clock, "1")), t0() + secs(5));
            standby.read(Some(&lease(Some("a"), leader_clock, "1")), t0() + secs(10));
            assert_eq!(standby.next(t0() + secs(14)), Step::Wait(t0() + secs(15)));
            // Renewed between two reads: seen from the read that shows it.
            let renewed = lease(Some("a"), leader_clock + secs(12), "2");
            standby.read(Some(&renewed), t0() + secs(15));
            assert_eq!(standby.next(t0() + secs(15)), Step::Wait(t0() + secs(20)));
            for s in [20, 25] {
                standby.read(Some(&renewed), t0() + secs(s));
                assert_ne!(standby.next(t0() + secs(s)), Step::Acquire, "at {s}s");
            }
            standby.read(Some(&renewed), t0() + secs(30));
            assert_eq!(standby.next(t0() + secs(30)), Step::Acquire);
            assert!(!standby.leads(t0() + secs(30)), "not before its write wins");
            // The takeover is preconditioned on the record it judged, and counts a transition.
            let patch = standby.acquire_patch(t0() + secs(30)).expect("a precondition");
            assert_eq!(patch["metadata"]["resourceVersion"], "2");
            assert_eq!(patch["spec"]["holderIdentity"], "b");
            assert_eq!(patch["spec"]["leaseTransitions"], 4);
        }
    }

    /// A label edit moves the resourceVersion only: the record still stands since first seen.
    #[test]
    fn a_label_edit_is_no_renewal_but_moves_the_precondition() {
        let mut standby = Elector::new("b", timing());
        standby.read(Some(&lease(Some("a"), t0(), "1")), t0());
        standby.read(Some(&lease(Some("a"), t0(), "7")), t0() + secs(10));
        assert_eq!(standby.next(t0() + secs(15)), Step::Acquire);
        let patch = standby.acquire_patch(t0()).expect("a precondition");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
    }

    /// A free Lease, or one that still names this replica (an earlier term), is taken at once.
    #[test]
    fn a_free_or_own_lease_is_taken_at_once() {
        let mut e = Elector::new("a", timing());
        e.read(None, t0());
        assert_eq!(e.next(t0()), Step::Wait(t0() + secs(1)), "no Lease: read again later");
        assert_eq!(e.next(t0() + secs(1)), Step::Read);
        e.read(Some(&lease(None, t0(), "1")), t0());
        assert_eq!(e.next(t0()), Step::Acquire);
        e.read(Some(&lease(Some("a"), t0() - Duration::hours(2), "2")), t0());
        assert_eq!(e.next(t0()), Step::Acquire);
        // Ours already: no new transition, no new acquireTime.
        let patch = e.acquire_patch(t0()).expect("a precondition");
        assert_eq!(patch["metadata"]["resourceVersion"], "2");
        assert!(patch["spec"].get("leaseTransitions").is_none(), "{patch}");
        assert!(patch["spec"].get("acquireTime").is_none(), "{patch}");
    }

    /// The holder's deadline counts from when it sent the write that won, on its own clock;
    /// it renews a period after, and a renewal that does not win leaves the deadline where it
    /// was until it passes.
    #[test]
    fn the_holder_writes_until_its_last_winning_send_plus_the_duration_less_the_margin() {
        let mut e = Elector::new("a", timing());
        e.read(Some(&lease(None, t0(), "1")), t0());
        // Sent at t0; the answer came back 2s later with whatever renewTime.
        e.wrote(&lease(Some("a"), t0() + Duration::hours(3), "2"), t0());
        assert_eq!(e.deadline(), Some(t0() + secs(9)));
        assert!(e.leads(t0() + secs(8)));
        assert_eq!(e.next(t0() + secs(2)), Step::Wait(t0() + secs(5)));
        assert_eq!(e.next(t0() + secs(5)), Step::Renew);
        let patch = e.renew_patch(t0()).expect("a precondition");
        assert_eq!(patch["metadata"]["resourceVersion"], "2");
        e.failed(t0() + secs(5));
        assert_eq!(e.next(t0() + secs(5)), Step::Wait(t0() + secs(6)));
        assert_eq!(e.next(t0() + secs(6)), Step::Renew);
        e.failed(t0() + secs(8));
        assert!(!e.leads(t0() + secs(9)), "the deadline passed without a renewal");
        // Still named in the record: it tries to take its own Lease back, on the same
        // resourceVersion; a standby that took it meanwhile makes that write lose.
        assert_eq!(e.next(t0() + secs(9)), Step::Acquire);
        e.lost(t0() + secs(9));
        assert_eq!(e.next(t0() + secs(9)), Step::Read);
        assert!(e.acquire_patch(t0()).is_none(), "no write without a resourceVersion");
        assert!(e.release_patch().is_none());
        e.read(Some(&lease(Some("b"), t0(), "3")), t0() + secs(9));
        assert_eq!(e.deadline(), None);
        assert!(e.release_patch().is_none(), "never releases another holder's Lease");
    }

    /// A 409 on a renewal is read again; still ours, the renewal goes again on the new
    /// resourceVersion.
    #[test]
    fn a_renewal_that_loses_to_a_label_edit_is_sent_again() {
        let mut e = Elector::new("a", timing());
        e.wrote(&lease(Some("a"), t0(), "2"), t0());
        e.lost(t0() + secs(5));
        assert_eq!(e.next(t0() + secs(5)), Step::Read);
        e.read(Some(&lease(Some("a"), t0(), "5")), t0() + secs(5));
        assert!(e.leads(t0() + secs(5)), "the deadline stays until it passes");
        assert_eq!(e.next(t0() + secs(5)), Step::Renew);
        let patch = e.renew_patch(t0()).expect("a precondition");
        assert_eq!(patch["metadata"]["resourceVersion"], "5");
        let release = e.release_patch().expect("ours");
        assert_eq!(release["metadata"]["resourceVersion"], "5");
        assert_eq!(release["spec"]["holderIdentity"], Value::Null);
    }
}
