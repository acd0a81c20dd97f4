//! Carrying out the rules' verbs against the [`Cluster`] (spec §5.2): conditional writes are
//! checked against a fresh read and written with its resourceVersion; the outcome comes from
//! the write loop itself and is reset on every attempt; announcements happen only after a
//! write won (the rules guarantee the order, this code keeps them at-most-once).
use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::snapshot::{Snapshot, annotation};
use super::{Announcement, Ctx};
use crate::cluster::{ApiError, EventRecord, ObjectKind, ObjectRef, Patch};
use crate::engine::{
    ANCHOR_CLEAR_SET, Action, ClaimState, Facts, Field, Host, HostError, Key, Message, ObjRef,
    Outcome, Pred, Reason, Root, Row, Signal, Slot, Value, Verb, Verdict,
};
use crate::karpenter::{NodeClaim, NodePool, node_ready};
use crate::placeholder;

/// The node is frozen (`surge-for`) for a rotation other than `owner`'s that is still in flight:
/// that rotation's, never taken over.
fn frozen_for_another(meta: &ObjectMeta, owner: &str, in_flight: &BTreeSet<String>) -> bool {
    annotation(meta, Key::SurgeFor).is_some_and(|other| other != owner && in_flight.contains(other))
}

/// The gate stamps `InvalidGateStamp` is about, in the order they are checked.
const GATE_STAMPS: [Key; 2] = [Key::LastRotationAt, Key::LastFailureAt];

/// The claim's stamps `InvalidStamp` is about, in the order they are checked.
const CLAIM_STAMPS: [Key; 2] = [Key::StartedAt, Key::FailedAt];

/// Attempts of one conditional write before the pass gives up (and is retried later).
const ATTEMPTS: usize = 5;

/// One pass: the snapshot it reads and the controller state it may touch.
pub struct PassHost<'c> {
    pub snap: Snapshot,
    pub ctx: &'c mut Ctx,
    /// Rows fired or evaluated false, for coverage and warning latches.
    pub observed: Vec<(String, bool)>,
    /// The pool copy the completion write verified (its durations feed `emit(success)`).
    released: Option<NodePool>,
    /// The rotation an anchor write of this pass cleared (its Event names the claim, which may
    /// be gone from the snapshot and from the pool's annotations by then).
    cleared: Option<String>,
    /// Whether the verb being performed wrote (a satisfied precondition may need no write).
    wrote: bool,
    /// The pool's rotation slot this pass drives: its fresh reads and patches of the pool go
    /// through the slot's lens ([`super::slots`]), as the snapshot's copy already does.
    slot: usize,
}

/// A fresh read of one object.
enum Fresh {
    Pool(Box<NodePool>),
    Claim(Box<NodeClaim>),
    Node(Box<Node>),
}

impl Fresh {
    fn meta(&self) -> &ObjectMeta {
        match self {
            Fresh::Pool(p) => &p.metadata,
            Fresh::Claim(c) => &c.metadata,
            Fresh::Node(n) => &n.metadata,
        }
    }
}

/// What one attempt of a conditional write decides on its fresh read: send this write (and
/// report the outcome if it wins), or end the verb with an outcome and no write.
enum Decide<W = Patch> {
    Write(W, Outcome),
    Skip(Outcome),
}

fn fail(verb: Verb, e: impl std::fmt::Display) -> HostError {
    HostError { verb, message: e.to_string() }
}

fn full(k: Key) -> String {
    k.full().to_string()
}

/// What is wrong with a stamp the rules read as nil: unreadable, or in the future.
fn stamp_fault(raw: &str, now: DateTime<Utc>) -> String {
    use crate::policy::derive::{STAMP_SKEW_TOLERANCE, in_the_future};
    match DateTime::parse_from_rfc3339(raw) {
        Ok(t) if in_the_future(t.with_timezone(&Utc), now) => format!(
            "in the future (beyond the {} of clock skew tolerated)",
            crate::policy::duration::format_human(STAMP_SKEW_TOLERANCE)
        ),
        _ => "not an RFC3339 time".to_string(),
    }
}

/// The claim state as the conditional writes read it ([`crate::engine::claim_state`]).
fn state_of(meta: &ObjectMeta) -> ClaimState {
    crate::engine::claim_state(annotation(meta, Key::State))
}

/// Whether an annotation is absent or unreadable for its declared type at `now` (`once`
/// writes): a stamp in the future is unreadable.
fn unreadable(meta: &ObjectMeta, key: Key, now: DateTime<Utc>) -> bool {
    match annotation(meta, key) {
        None => true,
        Some(raw) => crate::engine::value_of_annotation(key, raw, Some(now)).is_nil(),
    }
}

/// Lifts what we set on a node: `surge-for` (with `with_surge_for`), `do-not-disrupt` only
/// where our owned marker says we set it, our cordon only where our `cordoned` marker says we
/// flipped it, and the markers themselves (§3.4). An operator's own cordon or do-not-disrupt
/// carries no marker and is never touched. `noderotation uninstall` builds its node patch here
/// too, so the two cannot disagree on what is ours.
pub fn release_patch(node: &Node, with_surge_for: bool) -> Patch {
    let meta = &node.metadata;
    let mut patch = Patch::default();
    if with_surge_for && annotation(meta, Key::SurgeFor).is_some() {
        patch.remove.insert(full(Key::SurgeFor));
    }
    // A marker says ours only while it still reads as we wrote it ("true"): a person who set it
    // to anything else (`false`) took the protection over, and only the marker goes.
    if let Some(owned) = annotation(meta, Key::DoNotDisruptOwned) {
        patch.remove.insert(full(Key::DoNotDisruptOwned));
        if owned == "true" {
            patch.remove.insert(full(Key::DoNotDisrupt));
        }
    }
    if let Some(cordoned) = annotation(meta, Key::Cordoned) {
        patch.remove.insert(full(Key::Cordoned));
        if cordoned == "true" && node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            patch.unschedulable = Some(false);
        }
    }
    patch
}

impl<'c> PassHost<'c> {
    /// A pass over slot `slot` of the pool; `snap.pool` is already seen through its lens.
    pub fn for_slot(snap: Snapshot, ctx: &'c mut Ctx, slot: usize) -> Self {
        let observed = Vec::new();
        PassHost { snap, ctx, observed, released: None, cleared: None, wrote: false, slot }
    }

    /// A fresh read of the pool, seen through this pass's slot.
    fn fresh_pool(&mut self) -> Result<Option<NodePool>, ApiError> {
        let name = self.snap.pool_name().to_string();
        let mut pool = self.ctx.cluster.get_pool(&name)?;
        self.ctx.known.read(
            ObjectRef::cluster(ObjectKind::NodePool, name),
            pool.as_ref().map(|p| &p.metadata),
        );
        if let Some(p) = pool.as_mut() {
            super::slots::swap_meta(&mut p.metadata, self.slot);
        }
        Ok(pool)
    }

    /// [`Self::known_copy`] of the pool.
    fn known_pool(&self) -> Option<NodePool> {
        let target = self.cluster_ref(&ObjRef::Pool)?;
        match self.known_copy(&ObjRef::Pool, &target)? {
            Fresh::Pool(pool) => Some(*pool),
            Fresh::Claim(_) | Fresh::Node(_) => None,
        }
    }

    /// This pass's copy of `obj` when it is at the version this process last read fresh and
    /// has not written since ([`Known`](super::Known)): what a fresh read would return, but for
    /// writes of others the watch has not delivered yet. The pool is seen through this pass's slot.
    fn known_copy(&self, obj: &ObjRef, target: &ObjectRef) -> Option<Fresh> {
        let meta = self.meta(obj)?;
        if !self.ctx.known.is_current(target, meta) {
            return None;
        }
        Some(match obj {
            ObjRef::Pool => Fresh::Pool(Box::new(self.snap.pool.clone()?)),
            ObjRef::Claim(n) => Fresh::Claim(Box::new(self.snap.claim(n)?.clone())),
            ObjRef::Node(n) => Fresh::Node(Box::new(self.snap.node(n)?.clone())),
            ObjRef::Policy | ObjRef::Pod(..) => return None,
        })
    }

    fn cluster_ref(&self, obj: &ObjRef) -> Option<ObjectRef> {
        Some(match obj {
            ObjRef::Pool => ObjectRef::cluster(ObjectKind::NodePool, self.snap.pool_name()),
            ObjRef::Claim(n) => ObjectRef::cluster(ObjectKind::NodeClaim, n.clone()),
            ObjRef::Node(n) => ObjectRef::cluster(ObjectKind::Node, n.clone()),
            ObjRef::Pod(ns, n) => ObjectRef::pod(ns.clone(), n.clone()),
            ObjRef::Policy => return None,
        })
    }

    fn fresh(&mut self, obj: &ObjRef) -> Result<Option<Fresh>, ApiError> {
        let cluster = &self.ctx.cluster;
        let fresh = match obj {
            ObjRef::Pool => return Ok(self.fresh_pool()?.map(|x| Fresh::Pool(Box::new(x)))),
            ObjRef::Claim(n) => cluster.get_claim(n)?.map(|x| Fresh::Claim(Box::new(x))),
            ObjRef::Node(n) => cluster.get_node(n)?.map(|x| Fresh::Node(Box::new(x))),
            ObjRef::Policy | ObjRef::Pod(..) => return Ok(None),
        };
        if let Some(target) = self.cluster_ref(obj) {
            self.ctx.known.read(target, fresh.as_ref().map(Fresh::meta));
        }
        Ok(fresh)
    }

    /// Evaluates the action's `holds=` guard with the pool read fresh: the target's fresh copy
    /// when it is the pool, else a fresh read of the pool in this attempt (a pool gone: false).
    fn holds_fresh(
        &mut self,
        a: &Action<'_>,
        fresh: &Fresh,
        known: bool,
    ) -> Result<bool, HostError> {
        if a.holds.is_none() {
            return Ok(true);
        }
        let pool = match fresh {
            Fresh::Pool(p) => Some(p.as_ref().clone()),
            Fresh::Claim(_) | Fresh::Node(_) => match known.then(|| self.known_pool()).flatten() {
                Some(pool) => Some(pool),
                None => self.fresh_pool().map_err(|e| fail(a.verb, e))?,
            },
        };
        let Some(pool) = pool else { return Ok(false) };
        let cached = self.snap.pool.replace(pool);
        let holds = a.holds_on(&self.snap);
        self.snap.pool = cached;
        holds.map_err(|m| fail(a.verb, m))
    }

    /// The write loop of every write that can lose a race, written once: each attempt reads
    /// fresh and decides (`attempt`), then sends the write (`send`). A write that wins is
    /// counted and ends the verb with the decided outcome; a 404 is `gone`; a 409 asks
    /// `conflict` whether to end the verb (`Some`) or to try again (`None`), up to [`ATTEMPTS`]
    /// times, after which the pass fails with `exhausted`.
    fn write_loop<W>(
        &mut self,
        verb: Verb,
        mut attempt: impl FnMut(&mut Self) -> Result<Decide<W>, HostError>,
        mut send: impl FnMut(&mut Self, W) -> Result<(), ApiError>,
        mut conflict: impl FnMut(&mut Self) -> Result<Option<Outcome>, HostError>,
        exhausted: impl FnOnce() -> String,
    ) -> Result<Outcome, HostError> {
        for _ in 0..ATTEMPTS {
            let (write, outcome) = match attempt(self)? {
                Decide::Skip(outcome) => return Ok(outcome),
                Decide::Write(write, outcome) => (write, outcome),
            };
            match send(self, write) {
                Ok(()) => {
                    self.won();
                    return Ok(outcome);
                }
                Err(ApiError::Conflict) => {
                    if let Some(outcome) = conflict(self)? {
                        return Ok(outcome);
                    }
                }
                Err(ApiError::NotFound) => return Ok(Outcome::Gone),
                Err(e) => return Err(fail(verb, e)),
            }
        }
        Err(fail(verb, exhausted()))
    }

    /// Counts a write the API server accepted.
    fn won(&mut self) {
        self.ctx.writes += 1;
        self.wrote = true;
    }

    /// Patches `obj`, at the resourceVersion (if any) of the fresh read the patch was decided
    /// on; a patch that wins is applied to this pass's copy.
    fn send_patch(
        &mut self,
        obj: &ObjRef,
        target: &ObjectRef,
        write: (Patch, Option<String>),
    ) -> Result<(), ApiError> {
        let (patch, rv) = write;
        // Whatever the answer, the write may have landed: this process no longer knows the
        // object's version.
        self.ctx.known.forget(target);
        if matches!(obj, ObjRef::Pool) && self.slot != 0 {
            let sent = super::slots::swap_patch(&patch, self.slot);
            self.ctx.cluster.patch(target, &sent, rv.as_deref())?;
        } else {
            self.ctx.cluster.patch(target, &patch, rv.as_deref())?;
        }
        self.snap.apply(obj, &patch);
        Ok(())
    }

    /// Deletes `target` (with the preconditions given); this process no longer knows its
    /// version, whatever the answer.
    fn send_delete(
        &mut self,
        target: &ObjectRef,
        uid: Option<&str>,
        rv: Option<&str>,
    ) -> Result<(), ApiError> {
        self.ctx.known.forget(target);
        self.ctx.cluster.delete(target, uid, rv)
    }

    /// Read fresh, decide, write with the read's resourceVersion; on 409 start over. With
    /// `recheck`, its `holds=` guard must also be true on this attempt's fresh read.
    ///
    /// The first attempt decides on this pass's copy instead when it is at the version this
    /// process last read fresh and has not written since ([`Known`](super::Known)): a write then
    /// carries that version (a 409 reads fresh and decides again), and "nothing to write" costs no
    /// request (docs/decisions/footprint.md).
    fn conditional(
        &mut self,
        verb: Verb,
        obj: &ObjRef,
        recheck: Option<&Action<'_>>,
        mut decide: impl FnMut(&Fresh) -> Decide,
    ) -> Result<Outcome, HostError> {
        let Some(target) = self.cluster_ref(obj) else { return Ok(Outcome::Gone) };
        let mut first = true;
        self.write_loop(
            verb,
            |host| {
                let known = std::mem::take(&mut first);
                let fresh = match known.then(|| host.known_copy(obj, &target)).flatten() {
                    Some(copy) => copy,
                    None => match host.fresh(obj).map_err(|e| fail(verb, e))? {
                        Some(fresh) => fresh,
                        None => return Ok(Decide::Skip(Outcome::Gone)),
                    },
                };
                if let Some(a) = recheck
                    && !host.holds_fresh(a, &fresh, known)?
                {
                    return Ok(Decide::Skip(Outcome::Raced));
                }
                Ok(match decide(&fresh) {
                    Decide::Skip(outcome) => Decide::Skip(outcome),
                    Decide::Write(patch, outcome) => {
                        Decide::Write((patch, fresh.meta().resource_version.clone()), outcome)
                    }
                })
            },
            |host, write| host.send_patch(obj, &target, write),
            |_| Ok(None),
            || format!("{target} kept changing under {ATTEMPTS} conditional writes"),
        )
    }

    fn patch_of(set: &[(Key, Value)], clear: &[Key], meta: &ObjectMeta) -> Patch {
        let mut patch = Patch::default();
        for (k, v) in set {
            if let Some(s) = v.to_annotation()
                && annotation(meta, *k) != Some(s.as_str())
            {
                patch.set.insert(full(*k), s);
            }
        }
        for k in clear {
            if annotation(meta, *k).is_some() {
                patch.remove.insert(full(*k));
            }
        }
        patch
    }

    fn meta(&self, obj: &ObjRef) -> Option<&ObjectMeta> {
        match obj {
            ObjRef::Pool => self.snap.pool.as_ref().map(|p| &p.metadata),
            ObjRef::Claim(n) => self.snap.claim(n).map(|c| &c.metadata),
            ObjRef::Node(n) => self.snap.node(n).map(|c| &c.metadata),
            _ => None,
        }
    }

    fn in_window(&self, t: DateTime<Utc>) -> bool {
        self.snap.policy().is_some_and(|p| p.settings.schedule.in_window(t))
    }

    fn announce(&mut self, what: String, claim: Option<String>, row: &str) {
        // The start-up sweep of claims has no pool in its snapshot: the claim's label names it.
        let pool = match self.snap.pool_name() {
            "" => claim
                .as_deref()
                .and_then(|c| self.snap.claim(c))
                .and_then(|c| c.node_pool())
                .unwrap_or_default()
                .to_string(),
            name => name.to_string(),
        };
        self.ctx.announcements.push(Announcement {
            time: self.snap.now,
            pool,
            claim,
            what,
            row: row.to_string(),
        });
    }

    fn event(&mut self, obj: &ObjRef, reason: Reason, message: String) {
        let Some(object) = self.cluster_ref(obj) else { return };
        let event = EventRecord {
            object,
            reason: reason.name().to_string(),
            message,
            warning: reason.is_warning(),
            time: self.snap.now,
        };
        if let Err(e) = self.ctx.cluster.record_event(&event) {
            tracing::warn!(reason = reason.name(), error = %e, "event not recorded");
        }
    }

    fn subject_claim(&self, a: &Action<'_>) -> Option<String> {
        match &a.target {
            Value::Object(ObjRef::Claim(n)) => Some(n.clone()),
            _ => self
                .snap
                .anchored_claim()
                .map(str::to_string)
                .or_else(|| a.name.clone())
                .or_else(|| self.cleared.clone())
                .or_else(|| self.snap.anchor_name().map(str::to_string)),
        }
    }

    /// The Event message of `reason` as the rules raise it: which of its messages this Event
    /// is, filled with its details.
    fn message(&self, reason: Reason, a: &Action<'_>) -> String {
        let claim = self.subject_claim(a).unwrap_or_default();
        let pool_meta = self.snap.pool.as_ref().map(|p| &p.metadata);
        let claim_meta = self.snap.claim(&claim).map(|c| &c.metadata);
        let message = match reason {
            Reason::InsufficientHeadroom if self.shortfall().is_none() => {
                Message::InsufficientHeadroomUnmeasured
            }
            Reason::InvalidGateStamp
                if self.invalid_stamp(pool_meta, &GATE_STAMPS).map(|(k, _)| k)
                    == Some(Key::LastFailureAt) =>
            {
                Message::InvalidGateStampLastFailure
            }
            Reason::InvalidStamp
                if self.invalid_stamp(claim_meta, &CLAIM_STAMPS).map(|(k, _)| k)
                    == Some(Key::FailedAt) =>
            {
                Message::InvalidStampFailedAt
            }
            Reason::RotationFailed if a.row.starts_with("sweep_") => {
                Message::RotationFailedOrphaned
            }
            Reason::RotationFailed if self.surge_trouble(&claim).is_some() => {
                Message::RotationFailedSurgeFailed
            }
            reason => reason.message(),
        };
        self.render(message, &claim, &[])
    }

    /// `message` filled with its details; `clamped` is what the placeholder's clamp lowered.
    fn render(&self, message: Message, claim: &str, clamped: &[String]) -> String {
        message.template().render(|slot| self.detail(slot, message, claim, clamped))
    }

    /// One detail of an Event message about `claim` (see `slots` in rules/vocabulary.ron).
    fn detail(&self, slot: Slot, message: Message, claim: &str, clamped: &[String]) -> String {
        match slot {
            Slot::Claim => claim.to_string(),
            Slot::Pool => self.snap.pool_name().to_string(),
            Slot::Census => self.snap.census.to_string(),
            Slot::Shortfall => self.shortfall().unwrap_or_default(),
            Slot::Policies => match &self.snap.governance {
                super::snapshot::GovernanceView::Conflict(p) => {
                    crate::policy::resolve::capped_list(
                        p.iter().map(String::as_str),
                        p.len(),
                        crate::policy::resolve::LISTED_POLICIES + 1,
                    )
                }
                _ => String::new(),
            },
            Slot::Fatal => {
                let fatal: Vec<String> = self
                    .snap
                    .assessment
                    .iter()
                    .flat_map(|a| &a.findings)
                    .filter(|f| f.severity == crate::policy::feasibility::Severity::Fatal)
                    .map(|f| format!("{}: {} Fix: {}", f.reason, f.message, f.fix))
                    .collect();
                fatal.join("; ")
            }
            Slot::Owner => self
                .snap
                .claim(claim)
                .and_then(|c| c.node_pool())
                .map(|p| format!("NodePool {p}"))
                .unwrap_or_else(|| "no NodePool".into()),
            Slot::Fault => {
                // The stamp the message names: a gate stamp of the pool, or one of the claim's.
                let (meta, keys) = match message.reason() {
                    Reason::InvalidGateStamp => {
                        (self.snap.pool.as_ref().map(|p| &p.metadata), &GATE_STAMPS)
                    }
                    _ => (self.snap.claim(claim).map(|c| &c.metadata), &CLAIM_STAMPS),
                };
                self.invalid_stamp(meta, keys).map(|(_, fault)| fault).unwrap_or_default()
            }
            Slot::Retry => self
                .snap
                .claim(claim)
                .and_then(|c| annotation(&c.metadata, Key::RetryCount))
                .unwrap_or("?")
                .to_string(),
            Slot::Next => self
                .next_attempt(claim)
                .map(|t| t.to_rfc3339())
                .unwrap_or_else(|| "the next window".into()),
            Slot::Trouble => self.surge_trouble(claim).cloned().unwrap_or_default(),
            Slot::Unschedulable => self
                .snap
                .placeholder_for(claim)
                .and_then(placeholder::unschedulable_reason)
                .unwrap_or_default(),
            Slot::Clamped => clamped.join(", "),
            Slot::Class => format!("{:?}", self.ctx.config.priority_class),
            Slot::Problems => self
                .snap
                .cache
                .placeholder_class
                .as_deref()
                .map(placeholder::class_problems)
                .unwrap_or_default()
                .join("; "),
        }
    }

    /// The first of `keys` whose stamp on `meta` the rules read as nil (unreadable, or in the
    /// future), with what is wrong with it (the value quoted).
    fn invalid_stamp(&self, meta: Option<&ObjectMeta>, keys: &[Key]) -> Option<(Key, String)> {
        let now = self.snap.now;
        keys.iter().find_map(|k| {
            let raw = annotation(meta?, *k)?;
            crate::engine::value_of_annotation(*k, raw, Some(now))
                .is_nil()
                .then(|| (*k, format!("{} ({raw:?})", stamp_fault(raw, now))))
        })
    }

    /// Why no placeholder ran for the claim's attempt, while none runs: one that exists after
    /// all (created by a later attempt of the write) makes an earlier refusal stale.
    fn surge_trouble(&self, claim: &str) -> Option<&String> {
        let live = self
            .snap
            .placeholder_for(claim)
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none());
        if live { None } else { self.ctx.placeholder_trouble.get(claim) }
    }

    fn next_attempt(&self, claim: &str) -> Option<DateTime<Utc>> {
        let p = self.snap.policy()?;
        let c = self.snap.claim(claim)?;
        let failed_at = DateTime::parse_from_rfc3339(annotation(&c.metadata, Key::FailedAt)?)
            .ok()?
            .with_timezone(&Utc);
        let count =
            crate::policy::derive::retry_count_u32(annotation(&c.metadata, Key::RetryCount));
        crate::policy::derive::next_attempt(
            failed_at,
            count,
            p.settings.retry_backoff,
            &p.settings.schedule,
        )
    }

    /// The `spec.limits` resource the picked claim's own surge would exceed; `None` when that
    /// alone fits (the surges already waiting in the pool's other slots take the rest) or no
    /// claim is picked.
    fn shortfall(&self) -> Option<String> {
        let pool = self.snap.pool.as_ref()?;
        let pick = self.snap.pick.as_ref().and_then(|n| self.snap.claim(n))?;
        placeholder::surge_headroom(pool, &placeholder::footprint(pick))
            .err()
            .map(|s| s.to_string())
    }

    // ---- the verbs ------------------------------------------------------------------------

    fn annotate(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(obj) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        if self.meta(&obj).is_some_and(|m| Self::patch_of(&a.set, a.clear, m).is_empty())
            && a.incr.is_empty()
        {
            return Ok(Outcome::Won);
        }
        // Conditional like every write: a write sent late (a pass paused between the fence check
        // and the send while the standby moved the rotation on, or judged on a lagging cache)
        // must not land on another attempt. So, on a fresh read with its resourceVersion, and
        // only while the target's `state` and `started-at` read as on the copy this pass judged.
        let judged: Vec<(Key, Option<String>)> = [Key::State, Key::StartedAt]
            .into_iter()
            .map(|k| (k, self.meta(&obj).and_then(|m| annotation(m, k)).map(str::to_string)))
            .collect();
        let (set, clear, incr) = (a.set.clone(), a.clear.to_vec(), a.incr.to_vec());
        self.conditional(a.verb, &obj, None, |fresh| {
            if judged.iter().any(|(k, v)| annotation(fresh.meta(), *k) != v.as_deref()) {
                return Decide::Skip(Outcome::Raced);
            }
            let mut patch = Self::patch_of(&set, &clear, fresh.meta());
            for k in &incr {
                // Saturating: a count at its limit stays there instead of wrapping or panicking.
                let n = crate::policy::derive::parse_retry_count(annotation(fresh.meta(), *k));
                patch.set.insert(full(*k), n.saturating_add(1).to_string());
            }
            if patch.is_empty() {
                Decide::Skip(Outcome::Won)
            } else {
                Decide::Write(patch, Outcome::Won)
            }
        })
    }

    fn annotate_if(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(obj) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let (from, absent, matches) = (a.from.to_vec(), a.absent, a.match_.clone());
        let (set, once, clear) = (a.set.clone(), a.once.clone(), a.clear.to_vec());
        // What this pass judged: its own copy (the cache plus its own writes).
        let judged: Vec<(Key, Option<String>)> = a
            .unchanged
            .iter()
            .map(|k| (*k, self.meta(&obj).and_then(|m| annotation(m, *k)).map(str::to_string)))
            .collect();
        let incr = a.incr.to_vec();
        let now = self.snap.now;
        self.conditional(a.verb, &obj, Some(a), |fresh| {
            let meta = fresh.meta();
            if !from.is_empty() && !from.contains(&state_of(meta)) {
                return Decide::Skip(Outcome::Raced);
            }
            // A claim whose delete is under way drains whatever a lagging view says: it never
            // leaves `draining` (its landing node stays frozen, the budget counts it).
            let leaves_draining = set
                .iter()
                .any(|(k, v)| *k == Key::State && v.to_annotation().as_deref() != Some("draining"));
            if leaves_draining
                && matches!(fresh, Fresh::Claim(c) if c.is_deleting())
                && annotation(meta, Key::State) == Some("draining")
            {
                return Decide::Skip(Outcome::Raced);
            }
            if judged.iter().any(|(k, v)| annotation(meta, *k) != v.as_deref()) {
                return Decide::Skip(Outcome::Raced);
            }
            // An empty value is absent, as every read takes it (`kubectl annotate ... key=`).
            if let Some(k) = absent
                && annotation(meta, k).is_some_and(|v| !v.is_empty())
            {
                return Decide::Skip(Outcome::Raced);
            }
            let moved = matches.iter().any(|(k, want)| {
                let have = annotation(meta, *k).map_or(Value::Nil, |raw| {
                    crate::engine::value_of_annotation(*k, raw, Some(now))
                });
                !crate::engine::same_value(&have, want)
            });
            if moved {
                return Decide::Skip(Outcome::Raced);
            }
            let mut patch = Self::patch_of(&set, &clear, meta);
            for (k, v) in &once {
                if unreadable(meta, *k, now)
                    && let Some(s) = v.to_annotation()
                {
                    patch.set.insert(full(*k), s);
                }
            }
            for k in &incr {
                // Saturating, as in `annotate`.
                let n = crate::policy::derive::parse_retry_count(annotation(meta, *k));
                patch.set.insert(full(*k), n.saturating_add(1).to_string());
            }
            if patch.is_empty() {
                Decide::Skip(Outcome::Won)
            } else {
                Decide::Write(patch, Outcome::Won)
            }
        })
    }

    fn anchor_patch(meta: &ObjectMeta, set: &[(Key, Value)]) -> Patch {
        let mut patch = Self::patch_of(set, ANCHOR_CLEAR_SET, meta);
        // The clear wins over nothing else; keep the set keys that the clear does not name.
        for k in ANCHOR_CLEAR_SET {
            patch.set.remove(k.full());
        }
        patch
    }

    fn clear_anchor(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let name = a.name.clone();
        let set = a.set.clone();
        let outcome = self.conditional(a.verb, &ObjRef::Pool, None, |fresh| {
            let meta = fresh.meta();
            if name.is_none() || annotation(meta, Key::ActiveRotation) != name.as_deref() {
                return Decide::Skip(Outcome::Raced);
            }
            Decide::Write(Self::anchor_patch(meta, &set), Outcome::Won)
        })?;
        if outcome == Outcome::Won {
            self.cleared = name;
        }
        Ok(outcome)
    }

    fn release_anchor(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let name = a.name.clone();
        let now = self.snap.now;
        let mut verified: Option<NodePool> = None;
        let outcome = self.conditional(a.verb, &ObjRef::Pool, None, |fresh| {
            let Fresh::Pool(pool) = fresh else { return Decide::Skip(Outcome::Gone) };
            let meta = &pool.metadata;
            if name.is_none() || annotation(meta, Key::ActiveRotation) != name.as_deref() {
                return Decide::Skip(Outcome::Raced);
            }
            // Success or expired is decided from the same copy the write verifies (§5.2).
            let drained = annotation(meta, Key::ActiveRotationState) == Some("draining");
            let mut set = Vec::new();
            if drained {
                set.push((Key::LastRotationAt, Value::Time(now)));
            }
            verified = Some(pool.as_ref().clone());
            Decide::Write(
                Self::anchor_patch(meta, &set),
                if drained { Outcome::Rotated } else { Outcome::Expired },
            )
        })?;
        if verified.is_some() {
            self.cleared = name;
        }
        self.released = verified;
        Ok(outcome)
    }

    fn mark_expired(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(obj) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let (from, clear) = (a.from.to_vec(), a.clear.to_vec());
        self.conditional(a.verb, &obj, None, |fresh| {
            let state = state_of(fresh.meta());
            if state == ClaimState::Expired {
                return Decide::Skip(Outcome::Won);
            }
            if !from.contains(&state) {
                return Decide::Skip(Outcome::Raced);
            }
            let set = [(Key::State, Value::Sym("expired".into()))];
            Decide::Write(Self::patch_of(&set, &clear, fresh.meta()), Outcome::Claimed)
        })
    }

    /// The window-close verdict recomputed on a fresh copy (§4.2), same census, same now.
    fn verdict_on(&self, meta: &ObjectMeta) -> Option<Verdict> {
        let now = self.snap.now;
        let stamp = annotation(meta, Key::WindowOpenedAt);
        let readable = stamp.is_some_and(|s| DateTime::parse_from_rfc3339(s).is_ok());
        if self.in_window(now) {
            return (!readable).then_some(Verdict::Stamp);
        }
        // Deferred while a slot of the pool has a rotation in flight that is not a stuck drain
        // (`window_defer`).
        let anchors = super::slots::anchors(meta);
        let pool = self.snap.pool_name();
        let stuck = anchors
            .values()
            .filter_map(|name| self.snap.claim(name))
            .filter(|c| c.node_pool() == Some(pool) && self.snap.drain_stuck(c))
            .count();
        if !readable || anchors.len() > stuck {
            return None;
        }
        Some(if self.snap.census == 0 { Verdict::Settled } else { Verdict::Missed })
    }

    fn stamp_window(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let now = self.snap.now;
        self.window_write(a.verb, Verdict::Stamp, Some(now))
    }

    fn clear_window(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(verdict) = a.verdict else { return Err(fail(a.verb, "no verdict")) };
        self.window_write(a.verb, verdict, None)
    }

    fn window_write(
        &mut self,
        verb: Verb,
        want: Verdict,
        stamp: Option<DateTime<Utc>>,
    ) -> Result<Outcome, HostError> {
        // Evaluate the verdict inside the write loop against the authoritative copy.
        let Some(target) = self.cluster_ref(&ObjRef::Pool) else { return Ok(Outcome::Gone) };
        self.write_loop(
            verb,
            |host| {
                let Some(fresh) = host.fresh(&ObjRef::Pool).map_err(|e| fail(verb, e))? else {
                    return Ok(Decide::Skip(Outcome::Gone));
                };
                if host.verdict_on(fresh.meta()) != Some(want) {
                    return Ok(Decide::Skip(Outcome::Raced));
                }
                // ... for the same stamp (§5.2): a close judges the occurrence this pass saw.
                let seen = host
                    .snap
                    .pool
                    .as_ref()
                    .and_then(|p| annotation(&p.metadata, Key::WindowOpenedAt));
                if stamp.is_none() && annotation(fresh.meta(), Key::WindowOpenedAt) != seen {
                    return Ok(Decide::Skip(Outcome::Raced));
                }
                let mut patch = Patch::default();
                match stamp {
                    Some(t) => {
                        patch.set.insert(
                            full(Key::WindowOpenedAt),
                            Value::Time(t).to_annotation().unwrap_or_default(),
                        );
                    }
                    None => {
                        patch.remove.insert(full(Key::WindowOpenedAt));
                    }
                }
                Ok(Decide::Write((patch, fresh.meta().resource_version.clone()), Outcome::Won))
            },
            |host, write| host.send_patch(&ObjRef::Pool, &target, write),
            |_| Ok(None),
            || "window annotation kept changing".to_string(),
        )
    }

    fn freeze(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        self.freeze_node(a, false)
    }

    /// `freeze` and the cordon in one patch: the node is never cordoned without the freeze,
    /// and a node another rotation holds is neither.
    fn freeze_and_cordon(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        self.freeze_node(a, true)
    }

    fn freeze_node(&mut self, a: &Action<'_>, cordon: bool) -> Result<Outcome, HostError> {
        let Some(obj @ ObjRef::Node(_)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let Some(owner) = a.for_.clone() else { return Err(fail(a.verb, "freeze without `for`")) };
        // The fresh node frozen for another rotation still in flight is that rotation's: never
        // taken over (the cache that showed it free lags).
        let in_flight = self.snap.claims_in_flight();
        self.conditional(a.verb, &obj, None, |fresh| {
            let meta = fresh.meta();
            if frozen_for_another(meta, &owner, &in_flight) {
                return Decide::Skip(Outcome::Taken);
            }
            let mut patch = Self::freeze_patch(meta, &owner);
            if cordon && let Fresh::Node(node) = fresh {
                // Ours already, or the operator's: never adopted (§3.4).
                if node.spec.as_ref().and_then(|s| s.unschedulable) != Some(true) {
                    patch.unschedulable = Some(true);
                    patch.set.insert(full(Key::Cordoned), "true".into());
                }
            }
            if patch.is_empty() {
                Decide::Skip(Outcome::Won)
            } else {
                Decide::Write(patch, Outcome::Won)
            }
        })
    }

    /// The annotations that freeze a node for `owner` (§3.4): `surge-for`, and do-not-disrupt
    /// with the owned marker unless the operator already set "true"; only what is missing.
    fn freeze_patch(meta: &ObjectMeta, owner: &str) -> Patch {
        let mut set = vec![(Key::SurgeFor, Value::Name(owner.to_string()))];
        let operators = annotation(meta, Key::DoNotDisrupt) == Some("true")
            && annotation(meta, Key::DoNotDisruptOwned) != Some("true");
        if !operators {
            set.push((Key::DoNotDisrupt, Value::Bool(true)));
            set.push((Key::DoNotDisruptOwned, Value::Bool(true)));
        }
        Self::patch_of(&set, &[], meta)
    }

    /// A draining surge rotation about to re-issue its delete: its recorded host, read fresh
    /// (the pool, then the Node), must still be capacity to drain onto; its freeze is
    /// re-asserted. `Lost`, with nothing written, otherwise (docs/decisions/surge-host.md).
    fn keep_surge_host(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(owner) = a.for_.clone() else {
            return Err(fail(a.verb, "keep_surge_host without `for`"));
        };
        // The pool through this slot's lens: the slot's own anchor and host.
        let pool = self.fresh(&ObjRef::Pool).map_err(|e| fail(a.verb, e))?;
        let host = pool
            .as_ref()
            .map(|p| p.meta())
            .filter(|m| annotation(m, Key::ActiveRotation) == Some(owner.as_str()))
            .and_then(|m| annotation(m, Key::SurgeHost))
            .map(str::to_string);
        let Some(host) = host else { return Ok(Outcome::Lost) };
        if self.snap.claim_on_node(&host).is_some_and(|c| c.is_deleting()) {
            return Ok(Outcome::Lost);
        }
        let in_flight = self.snap.claims_in_flight();
        let pool_name = self.snap.pool_name().to_string();
        let kept = self.conditional(a.verb, &ObjRef::Node(host), None, |fresh| {
            let Fresh::Node(node) = fresh else { return Decide::Skip(Outcome::Lost) };
            let meta = &node.metadata;
            if frozen_for_another(meta, &owner, &in_flight)
                || !placeholder::host_usable(node, &pool_name)
            {
                return Decide::Skip(Outcome::Lost);
            }
            let patch = Self::freeze_patch(meta, &owner);
            if patch.is_empty() {
                Decide::Skip(Outcome::Won)
            } else {
                Decide::Write(patch, Outcome::Won)
            }
        })?;
        Ok(if kept == Outcome::Won { Outcome::Won } else { Outcome::Lost })
    }

    /// The node of the claim that the fresh copy of `owner` names in `surge-claim` (by
    /// `status.nodeName`, else by providerID), if any.
    fn fresh_surge_host(&self, owner: &str) -> Result<Option<String>, ApiError> {
        let Some(claim) = self.ctx.cluster.get_claim(owner)? else { return Ok(None) };
        let Some(surge) = annotation(&claim.metadata, Key::SurgeClaim) else { return Ok(None) };
        let Some(surge) = self.ctx.cluster.get_claim(surge)? else { return Ok(None) };
        let status = surge.status.as_ref();
        Ok(status.and_then(|s| s.node_name.clone()).or_else(|| {
            let id = status?.provider_id.as_deref()?;
            self.snap.node_with_provider_id(id).map(str::to_string)
        }))
    }

    fn unfreeze(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(owner) = a.for_.clone() else { return Ok(Outcome::Won) };
        // Nodes the cache shows frozen for this rotation, plus the two this rotation can have
        // frozen even if the cache has not caught up: the candidate's node and the surge host.
        // The surge host comes from the pool's `surge-host`, read fresh (it is written before
        // the host is frozen), not only from the placeholder, which may be gone (preempted by
        // the workload moving off the candidate) while the node list still lags the freeze.
        let mut names: BTreeSet<String> = self
            .snap
            .cache
            .nodes
            .keys()
            .filter(|n| {
                self.snap
                    .node(n)
                    .is_some_and(|x| annotation(&x.metadata, Key::SurgeFor) == Some(owner.as_str()))
            })
            .cloned()
            .collect();
        names.extend(
            self.snap
                .nodes
                .keys()
                .filter(|n| {
                    self.snap.node(n).is_some_and(|x| {
                        annotation(&x.metadata, Key::SurgeFor) == Some(owner.as_str())
                    })
                })
                .cloned(),
        );
        if let Some(node) = self.snap.claim(&owner).and_then(|c| self.snap.claim_node(c)) {
            names.insert(node.to_string());
        }
        if let Some(host) = self.snap.placeholder_host(&owner) {
            names.insert(host.to_string());
        }
        // The surge host is frozen only once `surge-claim` names its claim; read both fresh, so
        // a host whose freeze and placeholder the cache does not show yet is still released.
        if let Some(host) = self.fresh_surge_host(&owner).map_err(|e| fail(a.verb, e))? {
            names.insert(host);
        }
        if self.snap.pool.is_some() && self.snap.sweep.is_none() {
            let pool = self.fresh(&ObjRef::Pool).map_err(|e| fail(a.verb, e))?;
            if let Some(host) = pool.as_ref().and_then(|p| annotation(p.meta(), Key::SurgeHost)) {
                names.insert(host.to_string());
            }
        }
        for name in names {
            let owner = owner.clone();
            self.conditional(a.verb, &ObjRef::Node(name), None, |fresh| {
                let Fresh::Node(node) = fresh else { return Decide::Skip(Outcome::Won) };
                if annotation(&node.metadata, Key::SurgeFor) != Some(owner.as_str()) {
                    return Decide::Skip(Outcome::Won);
                }
                Decide::Write(release_patch(node, true), Outcome::Won)
            })?;
        }
        Ok(Outcome::Won)
    }

    fn create_placeholder(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let (Some(pool), Some(mut claim), Some(policy)) =
            (self.snap.pool.clone(), self.snap.claim(&name).cloned(), self.snap.policy().cloned())
        else {
            return Ok(Outcome::Gone);
        };
        if annotation(&claim.metadata, Key::StartedAt).is_none() {
            // A view lagging this attempt's entry: the placeholder carries the attempt's stamp,
            // its proof of ownership should the create's answer be lost, so it is read fresh.
            let fresh = self.ctx.cluster.get_claim(&name).map_err(|e| fail(a.verb, e))?;
            if let Some(stamp) =
                fresh.as_ref().and_then(|c| annotation(&c.metadata, Key::StartedAt))
            {
                claim
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(full(Key::StartedAt), stamp.to_string());
            }
        }
        let node_name = self.snap.claim_node(&claim).map(str::to_string);
        let node = node_name.as_deref().and_then(|n| self.snap.node(n)).cloned();
        let pods = match &node_name {
            Some(n) => self.ctx.cluster.pods_on_node(n).map_err(|e| fail(a.verb, e))?,
            None => Vec::new(),
        };
        let input = placeholder::PlaceholderInput {
            pool: &pool,
            claim: &claim,
            node: node.as_ref(),
            pods: &pods,
            settings: &policy.settings,
            namespace: &self.ctx.config.namespace,
            priority_class: &self.ctx.config.priority_class,
            pause_image: &self.ctx.config.pause_image,
        };
        let built = match placeholder::build_placeholder(&input) {
            Ok(p) => p,
            // No capacity to reserve: the rules drain the node without a surge.
            Err(placeholder::PlaceholderRefused::NothingToReserve) => {
                self.ctx.placeholder_trouble.remove(&name);
                return Ok(Outcome::NothingToReserve);
            }
            Err(placeholder::PlaceholderRefused::ClampedToZero { .. }) => {
                self.ctx.placeholder_trouble.insert(
                    name,
                    "its placeholder would request nothing after the clamp to the node's \
                     allocatable, so none was created"
                        .into(),
                );
                return Ok(Outcome::Refused);
            }
        };
        if !built.clamped.is_empty() {
            let key = (format!("NodeClaim {name}"), Reason::SurgeClamped.name().to_string());
            if self.ctx.latch.should_fire(key, &built.clamped.join(",")) {
                let claim = self.subject_claim(a).unwrap_or_default();
                let msg = self.render(Message::SurgeClamped, &claim, &built.clamped);
                self.event(&ObjRef::Claim(name.clone()), Reason::SurgeClamped, msg);
            }
        }
        let created = match self.ctx.cluster.create_pod(&built.pod) {
            Ok(pod) => pod,
            Err(ApiError::AlreadyExists) => {
                self.ctx.placeholder_trouble.remove(&name);
                return Ok(Outcome::Raced);
            }
            Err(e) => {
                // The pass fails and is retried until readyTimeout rolls the rotation back; the
                // failure then says why no placeholder ran. A transient error may have created
                // it after all: only a refusal (admission, quota) is a reason.
                if matches!(e, ApiError::Forbidden(_) | ApiError::Invalid(_)) {
                    let what = format!("its placeholder was rejected by the API server ({e})");
                    self.ctx.placeholder_trouble.insert(name, what);
                }
                return Err(fail(a.verb, e));
            }
        };
        self.won();
        self.ctx.placeholder_trouble.remove(&name);
        // What the controller created is identified by the uid the API server gave it, recorded
        // on the claim while the attempt is still pending. A crash (or a lost response) before
        // the record leaves a pod nobody recorded: the next pass removes it and creates anew.
        if let Some(uid) = created.metadata.uid {
            self.conditional(a.verb, &ObjRef::Claim(name), None, |fresh| {
                if state_of(fresh.meta()) != ClaimState::Pending {
                    return Decide::Skip(Outcome::Raced);
                }
                let set = [(Key::PlaceholderUid, Value::Name(uid.clone()))];
                Decide::Write(Self::patch_of(&set, &[], fresh.meta()), Outcome::Won)
            })?;
        }
        Ok(Outcome::Won)
    }

    /// `delete_unowned_placeholder`: the pod under the placeholder's name that a fresh read of
    /// the claim does not prove this attempt's (neither its recorded uid nor its `started-at`),
    /// deleted by that pod's uid.
    fn delete_unowned_placeholder(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let Some(pod) = self.snap.placeholder_named(&name) else { return Ok(Outcome::Gone) };
        let Some(uid) = pod.metadata.uid.clone() else { return Ok(Outcome::Gone) };
        let namespace =
            pod.metadata.namespace.clone().unwrap_or_else(|| self.ctx.config.namespace.clone());
        let Some(fresh) = self.ctx.cluster.get_claim(&name).map_err(|e| fail(a.verb, e))? else {
            return Ok(Outcome::Gone);
        };
        if placeholder::created_for_attempt(pod, &fresh) {
            return Ok(Outcome::Raced);
        }
        let target = ObjectRef::pod(namespace, placeholder::placeholder_name(&name));
        self.delete(a.verb, target, Some(uid))
    }

    /// `delete_placeholder(for=X)`: by the uid recorded on a fresh read of the claim, else the
    /// uid of the pod this pass saw under the name, else (neither known) by name. When that
    /// incarnation is gone and another holds the name for X that the claim does not record (a
    /// create whose answer was lost), it goes too, by its own uid: it is this rotation's, and
    /// left pending it would make Karpenter launch a node for no one.
    fn delete_placeholder(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(owner) = a.for_.clone() else { return Ok(Outcome::Gone) };
        // The uid recorded on a fresh read of the claim first: the cached pod and the cached
        // annotation can both name an incarnation a pass of this same instant replaced.
        let fresh = self.ctx.cluster.get_claim(&owner).map_err(|e| fail(a.verb, e))?;
        let drained = self.snap.pool.as_ref().is_some_and(|p| {
            annotation(&p.metadata, Key::ActiveRotation) == Some(owner.as_str())
                && annotation(&p.metadata, Key::ActiveRotationState) == Some("draining")
        });
        if fresh.is_none() && drained && self.snap.placeholder_named(&owner).is_none() {
            // The rotation's claim is gone after its drain and this pass sees no pod under the
            // name: the escalation deleted it before the claim (or a surge-less drain never had
            // one), and a DELETE would only answer 404. A claim gone while pending (an
            // interruption, a forced expiry) may leave a pod created a moment ago that the view
            // does not show yet: that one is deleted by name.
            return Ok(Outcome::Gone);
        }
        let recorded = |claim: &NodeClaim| {
            annotation(&claim.metadata, Key::PlaceholderUid).map(str::to_string)
        };
        let recorded_fresh = fresh.as_ref().and_then(recorded);
        let uid = recorded_fresh
            .clone()
            .or_else(|| self.snap.placeholder_named(&owner).and_then(|p| p.metadata.uid.clone()))
            .or_else(|| self.snap.claim(&owner).and_then(recorded));
        let pod = ObjectRef::pod(
            self.ctx.config.namespace.clone(),
            placeholder::placeholder_name(&owner),
        );
        let outcome = self.delete(a.verb, pod.clone(), uid.clone())?;
        if outcome != Outcome::Gone || uid.is_none() {
            return Ok(outcome);
        }
        let ns = self.ctx.config.namespace.clone();
        let Some(now) = self.ctx.cluster.get_pod(&ns, &pod.name).map_err(|e| fail(a.verb, e))?
        else {
            return Ok(outcome);
        };
        let unrecorded = now.metadata.uid.is_some() && now.metadata.uid != recorded_fresh;
        if unrecorded && annotation(&now.metadata, Key::SurgeFor) == Some(owner.as_str()) {
            return self.delete(a.verb, pod, now.metadata.uid.clone());
        }
        Ok(outcome)
    }

    /// Deletes `target`, only the incarnation `uid` when given. A 409 is re-checked on a fresh
    /// read: another object took the name (not ours to delete: `gone`), or the same one is still
    /// there and the delete is retried.
    fn delete(
        &mut self,
        verb: Verb,
        target: ObjectRef,
        uid: Option<String>,
    ) -> Result<Outcome, HostError> {
        self.write_loop(
            verb,
            |_| Ok(Decide::Write((), Outcome::Won)),
            |host, ()| host.send_delete(&target, uid.as_deref(), None),
            |host| {
                let Some(uid) = uid.as_deref() else { return Ok(Some(Outcome::Gone)) };
                let cluster = &host.ctx.cluster;
                let now = match (target.kind, target.namespace.as_deref()) {
                    (ObjectKind::NodeClaim, _) => {
                        cluster.get_claim(&target.name).map(|c| c.and_then(|c| c.metadata.uid))
                    }
                    (ObjectKind::Pod, Some(ns)) => {
                        cluster.get_pod(ns, &target.name).map(|p| p.and_then(|p| p.metadata.uid))
                    }
                    _ => return Ok(Some(Outcome::Gone)),
                }
                .map_err(|e| fail(verb, e))?;
                Ok((now.as_deref() != Some(uid)).then_some(Outcome::Gone))
            },
            || format!("{target}: delete kept conflicting under {ATTEMPTS} attempts"),
        )
    }

    /// The old claim's delete, only while a fresh read shows its state in `from`, with that
    /// read's uid and resourceVersion as preconditions (a 409 re-reads and re-checks).
    fn delete_claim(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let target = ObjectRef::cluster(ObjectKind::NodeClaim, name.clone());
        self.write_loop(
            a.verb,
            |host| {
                let Some(claim) = host.ctx.cluster.get_claim(&name).map_err(|e| fail(a.verb, e))?
                else {
                    return Ok(Decide::Skip(Outcome::Gone));
                };
                let meta = claim.metadata;
                if meta.deletion_timestamp.is_some() {
                    return Ok(Decide::Skip(Outcome::Won));
                }
                if !a.from.contains(&state_of(&meta)) {
                    return Ok(Decide::Skip(Outcome::Raced));
                }
                Ok(Decide::Write((meta.uid, meta.resource_version), Outcome::Won))
            },
            |host, (uid, rv)| host.send_delete(&target, uid.as_deref(), rv.as_deref()),
            |_| Ok(None),
            || format!("{target} kept changing under {ATTEMPTS} conditional deletes"),
        )
    }

    /// §3.8 at the readyTimeout rollback: every claim of the pool marked `launched-for` this
    /// rotation (docs/decisions/reap-attribution.md), each judged on fresh reads by
    /// [`PassHost::reap_claim`]. `won` when one was deleted.
    fn reap_surge_claim(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let Some(claim) = self.snap.claim(&name).cloned() else { return Ok(Outcome::Gone) };
        let Some(started) = annotation(&claim.metadata, Key::StartedAt)
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
        else {
            return Ok(Outcome::Gone);
        };
        let uid = self.snap.placeholder_uid(&name).map(str::to_string);
        let pool = self.snap.pool_name().to_string();
        let mut reaped = false;
        for surge in self.snap.launched_for(&name) {
            if surge == name {
                continue;
            }
            let outcome = self.reap_claim(a.verb, &surge, |host, fresh| {
                // Only this pool's claim, still marked for this rotation on the fresh read.
                if fresh.node_pool() != Some(pool.as_str())
                    || annotation(&fresh.metadata, Key::LaunchedFor) != Some(name.as_str())
                {
                    return Ok(Some(Outcome::Gone));
                }
                // Another rotation's surge is not this rotation's to reap: on this pass's copy
                // (its own writes), then on the pool read fresh (another pass's may not be in
                // its cache yet).
                if host.snap.surge_of_another(&name, fresh) {
                    return Ok(Some(Outcome::Gone));
                }
                let Some(fresh_pool) = host.fresh_pool().map_err(|e| fail(a.verb, e))? else {
                    return Ok(Some(Outcome::Gone));
                };
                let cached = host.snap.pool.replace(fresh_pool);
                let another = host.snap.surge_of_another(&name, fresh);
                host.snap.pool = cached;
                if another {
                    return Ok(Some(Outcome::Gone));
                }
                let (node, ready) = host.registered_host(a.verb, fresh)?;
                // Without the placeholder on it, a claim is reaped as the surge that never
                // turned Ready: once its node is Ready on a fresh read it is capacity, and pods
                // may be binding (its own status follows a moment later).
                let bound_here =
                    node.is_some() && host.snap.placeholder_host(&name) == node.as_deref();
                if !bound_here && ready {
                    return Ok(Some(Outcome::Gone));
                }
                let pods = match &node {
                    Some(n) => host.ctx.cluster.pods_on_node(n).map_err(|e| fail(a.verb, e))?,
                    None => Vec::new(),
                };
                if !placeholder::reap_allowed(fresh, started, &pods, uid.as_deref()) {
                    return Ok(Some(Outcome::Gone));
                }
                Ok(None)
            })?;
            reaped |= outcome == Outcome::Won;
        }
        Ok(if reaped { Outcome::Won } else { Outcome::Gone })
    }

    /// The sweep's reap of a surge claim whose rotation is over
    /// (docs/decisions/reap-attribution.md): still marked, that rotation anchored by no slot,
    /// never initialized, its node not Ready and hosting nothing but DaemonSet, static or
    /// completed pods, all on fresh reads.
    fn reap_launched(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let anchors = self.snap.sweep.as_ref().map(|(_, a)| a.clone()).unwrap_or_default();
        let outcome = self.reap_claim(a.verb, &name, |host, fresh| {
            let anchored =
                annotation(&fresh.metadata, Key::LaunchedFor).map(|r| anchors.contains(r));
            if anchored != Some(false) || fresh.is_initialized() {
                return Ok(Some(Outcome::Raced));
            }
            let (node, ready) = host.registered_host(a.verb, fresh)?;
            if ready {
                return Ok(Some(Outcome::Raced));
            }
            let pods = match &node {
                Some(n) => host.ctx.cluster.pods_on_node(n).map_err(|e| fail(a.verb, e))?,
                None => Vec::new(),
            };
            let Some(created) = fresh.created() else { return Ok(Some(Outcome::Raced)) };
            if !placeholder::reap_allowed(fresh, created, &pods, None) {
                return Ok(Some(Outcome::Raced));
            }
            Ok(None)
        })?;
        if outcome == Outcome::Won {
            tracing::info!(nodeclaim = %name, "surge claim that never turned Ready reaped after its rotation");
        }
        Ok(outcome)
    }

    /// Marks (`launched-for`) the claims Karpenter's `Nominated` Events, listed fresh, name for
    /// the rotation's placeholder ([`Snapshot::placeholder_uid`]: also once its claim is gone):
    /// each only if a fresh read shows it of the same pool, without a mark, never initialized
    /// and not being deleted.
    fn mark_launched(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(name) = a.for_.clone() else { return Ok(Outcome::Gone) };
        // The claim's pool; the claim gone (the completion), the pool of this pass.
        let pool = match self.snap.claim(&name) {
            Some(claim) => claim.node_pool().map(str::to_string),
            None => Some(self.snap.pool_name().to_string()).filter(|p| !p.is_empty()),
        };
        let Some(pool) = pool else { return Ok(Outcome::Gone) };
        let Some(uid) = self.snap.placeholder_uid(&name).map(str::to_string) else {
            return Ok(Outcome::Gone);
        };
        let events = self.ctx.cluster.nominations(&uid).map_err(|e| fail(a.verb, e))?;
        let mut names: Vec<String> = Vec::new();
        for e in &events {
            if let Some(c) = crate::cluster::nominated_claim(e)
                && c != name
                && !names.iter().any(|n| n == c)
            {
                names.push(c.to_string());
            }
        }
        let mut marked = false;
        for n in names {
            let obj = ObjRef::Claim(n);
            let outcome = self.conditional(a.verb, &obj, None, |fresh| {
                let Fresh::Claim(c) = fresh else { return Decide::Skip(Outcome::Gone) };
                let markable = c.node_pool() == Some(pool.as_str())
                    && !c.is_deleting()
                    && !c.is_initialized()
                    && annotation(&c.metadata, Key::LaunchedFor).is_none();
                if !markable {
                    return Decide::Skip(Outcome::Raced);
                }
                let mut patch = Patch::default();
                patch.set.insert(full(Key::LaunchedFor), name.clone());
                Decide::Write(patch, Outcome::Won)
            })?;
            marked |= outcome == Outcome::Won;
        }
        Ok(if marked { Outcome::Won } else { Outcome::Gone })
    }

    /// Deletes the claim `surge` unless `keep`, judged on each attempt's fresh read of it (not
    /// being deleted), names a reason to keep it; preconditioned on that read's uid and
    /// resourceVersion, so a claim that changed since (it registered, initialized, got a mark)
    /// is judged again.
    fn reap_claim(
        &mut self,
        verb: Verb,
        surge: &str,
        mut keep: impl FnMut(&mut Self, &NodeClaim) -> Result<Option<Outcome>, HostError>,
    ) -> Result<Outcome, HostError> {
        let target = ObjectRef::cluster(ObjectKind::NodeClaim, surge);
        self.write_loop(
            verb,
            |host| {
                let Some(fresh) = host.ctx.cluster.get_claim(surge).map_err(|e| fail(verb, e))?
                else {
                    return Ok(Decide::Skip(Outcome::Gone));
                };
                if fresh.is_deleting() {
                    return Ok(Decide::Skip(Outcome::Gone));
                }
                if let Some(outcome) = keep(host, &fresh)? {
                    return Ok(Decide::Skip(outcome));
                }
                let meta = fresh.metadata;
                Ok(Decide::Write((meta.uid, meta.resource_version), Outcome::Won))
            },
            |host, (uid, rv)| host.send_delete(&target, uid.as_deref(), rv.as_deref()),
            |_| Ok(None),
            || format!("{target} kept changing under {ATTEMPTS} conditional deletes"),
        )
    }

    /// The node a claim registered as (by `status.nodeName`, else by providerID: Karpenter
    /// writes the nodeName a moment after the Node registers; in the cache, else listed fresh)
    /// and whether it is Ready on a fresh read. No node: not registered, nothing to strand.
    fn registered_host(
        &self,
        verb: Verb,
        claim: &NodeClaim,
    ) -> Result<(Option<String>, bool), HostError> {
        let cluster = &self.ctx.cluster;
        let node = match self.snap.registered_node(claim) {
            Some(n) => {
                cluster.get_node(n).map_err(|e| fail(verb, e))?.map(|node| (n.to_string(), node))
            }
            None => match (
                claim.node_pool(),
                claim.status.as_ref().and_then(|s| s.provider_id.as_deref()),
            ) {
                (Some(pool), Some(id)) => cluster
                    .node_with_provider_id(pool, id)
                    .map_err(|e| fail(verb, e))?
                    .and_then(|n| Some((n.metadata.name.clone()?, n))),
                _ => None,
            },
        };
        Ok(match node {
            Some((name, node)) => (Some(name), node_ready(&node)),
            // A name the cache shows whose Node is gone: still the claim's node (its pods are
            // listed by name), not Ready.
            None => (self.snap.registered_node(claim).map(str::to_string), false),
        })
    }

    fn release_node(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(obj @ ObjRef::Node(_)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let anchors = self.snap.sweep.as_ref().map(|(_, a)| a.clone()).unwrap_or_default();
        let claim_of_node = match &obj {
            ObjRef::Node(n) => self.snap.claim_on_node(n).and_then(|c| c.metadata.name.clone()),
            _ => None,
        };
        // A claim the view shows pending or draining may already be draining and deleted (the
        // view lags the escalation): read it fresh, and keep the markers of one whose drain is
        // under way until it is gone.
        let cached_owner = match &obj {
            ObjRef::Node(n) => self
                .snap
                .node(n)
                .and_then(|x| annotation(&x.metadata, Key::SurgeFor))
                .map(str::to_string),
            _ => None,
        };
        let mut draining = BTreeSet::new();
        for c in [cached_owner, claim_of_node.clone()].into_iter().flatten() {
            let cached = self.snap.claim(&c);
            if !cached.is_some_and(super::snapshot::marked_in_flight) {
                continue;
            }
            let fresh = self.ctx.cluster.get_claim(&c).map_err(|e| fail(a.verb, e))?;
            if fresh.is_some_and(|f| {
                f.is_deleting() && annotation(&f.metadata, Key::State) == Some("draining")
            }) {
                draining.insert(c);
            }
        }
        let rotating = |c: &str| anchors.contains(c) || draining.contains(c);
        self.conditional(a.verb, &obj, None, |fresh| {
            let Fresh::Node(node) = fresh else { return Decide::Skip(Outcome::Gone) };
            let meta = &node.metadata;
            match annotation(meta, Key::SurgeFor) {
                Some(owner) if rotating(owner) => Decide::Skip(Outcome::Raced),
                Some(_) => Decide::Write(release_patch(node, true), Outcome::Unfroze),
                None => {
                    let claim_anchored = claim_of_node.as_deref().is_some_and(rotating);
                    if claim_anchored {
                        return Decide::Skip(Outcome::Raced);
                    }
                    let patch = release_patch(node, false);
                    if patch.is_empty() {
                        Decide::Skip(Outcome::Raced)
                    } else if patch.unschedulable.is_some()
                        && annotation(meta, Key::DoNotDisruptOwned) != Some("true")
                    {
                        Decide::Write(patch, Outcome::Uncordoned)
                    } else {
                        Decide::Write(patch, Outcome::Unfroze)
                    }
                }
            }
        })
    }

    fn emit(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(signal) = a.signal else { return Err(fail(a.verb, "emit without a signal")) };
        let pool = self.snap.pool_name().to_string();
        let claim = self.subject_claim(a);
        let now = self.snap.now;
        match signal {
            Signal::Success => {
                self.ctx.telemetry.completed(&pool, crate::telemetry::Outcome::Success);
                let meta = self.released.as_ref().map(|p| p.metadata.clone()).unwrap_or_default();
                let wait = annotation(&meta, Key::SurgeWait)
                    .and_then(|s| crate::policy::duration::parse(s).ok());
                let drain = annotation(&meta, Key::DrainingAt)
                    .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                    .map(|t| now - t.with_timezone(&Utc));
                if let Some(w) = wait {
                    self.ctx.telemetry.duration(
                        &pool,
                        crate::telemetry::Phase::SurgeWait,
                        w.num_milliseconds() as f64 / 1000.0,
                    );
                }
                if let Some(d) = drain {
                    self.ctx.telemetry.duration(
                        &pool,
                        crate::telemetry::Phase::Drain,
                        d.num_milliseconds() as f64 / 1000.0,
                    );
                }
                let path = annotation(&meta, Key::SurgePath).unwrap_or("none");
                let mode = annotation(&meta, Key::RotationMode).unwrap_or("surge");
                tracing::info!(nodepool = %pool, nodeclaim = claim.as_deref().unwrap_or(""), surge_wait = ?wait.map(crate::policy::duration::format), surge_path = path, mode, "rotation completed");
            }
            Signal::Failure => {
                self.ctx.telemetry.completed(&pool, crate::telemetry::Outcome::Failure);
                let c = claim.clone().unwrap_or_default();
                let count = self
                    .snap
                    .claim(&c)
                    .and_then(|x| annotation(&x.metadata, Key::RetryCount))
                    .unwrap_or("?")
                    .to_string();
                tracing::warn!(nodepool = %pool, nodeclaim = %c, retry_count = %count, next_attempt = ?self.next_attempt(&c), "rotation attempt failed");
            }
            Signal::Expired => {
                self.ctx.telemetry.completed(&pool, crate::telemetry::Outcome::Expired);
                tracing::warn!(nodepool = %pool, nodeclaim = claim.as_deref().unwrap_or(""), "rotation ended by forced expiry");
            }
            Signal::ForcefulFallback => {
                self.ctx.telemetry.forceful_fallback(&pool);
                tracing::warn!(nodepool = %pool, nodeclaim = claim.as_deref().unwrap_or(""), "forceful fallback: deleting without surge");
            }
            Signal::NothingToReserve => {
                self.ctx.telemetry.nothing_to_reserve(&pool);
                tracing::info!(nodepool = %pool, nodeclaim = claim.as_deref().unwrap_or(""), "nothing to reserve: deleting without surge");
            }
            Signal::WindowMissed => {
                self.ctx.telemetry.window_missed(&pool);
                tracing::warn!(nodepool = %pool, candidates = self.snap.census, "maintenance window missed");
            }
        }
        self.announce(format!("emit:{}", signal.name()), claim, a.row);
        Ok(Outcome::Won)
    }
}

impl PassHost<'_> {
    /// One INFO line per claim state transition, after the write that made it won (§4.3).
    fn log_transition(&self, a: &Action<'_>, outcome: Outcome) {
        let wrote_state = match a.verb {
            Verb::MarkExpired => outcome == Outcome::Claimed,
            Verb::Annotate | Verb::AnnotateIf => {
                outcome == Outcome::Won && a.set.iter().any(|(k, _)| *k == Key::State)
            }
            _ => false,
        };
        if !wrote_state || !self.wrote {
            return;
        }
        let Some(ObjRef::Claim(claim)) = a.target_obj() else { return };
        let state = self.snap.claim(claim).and_then(|c| annotation(&c.metadata, Key::State));
        tracing::info!(
            nodepool = %self.snap.pool_name(),
            nodeclaim = %claim,
            state = state.unwrap_or("none"),
            rule = a.row,
            "rotation state"
        );
    }
}

impl Facts for PassHost<'_> {
    fn root(&self, root: Root) -> Value {
        self.snap.root(root)
    }
    fn field(&self, obj: &ObjRef, field: Field) -> Value {
        self.snap.field(obj, field)
    }
    fn annotation(&self, obj: &ObjRef, key: Key) -> Option<String> {
        self.snap.annotation(obj, key)
    }
    fn call(&self, pred: Pred, args: &[Value]) -> Value {
        self.snap.call(pred, args)
    }
}

impl Host for PassHost<'_> {
    fn perform(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        self.wrote = false;
        let outcome = match a.verb {
            Verb::Annotate => self.annotate(a),
            Verb::AnnotateIf => self.annotate_if(a),
            Verb::ClearAnchor => self.clear_anchor(a),
            Verb::ReleaseAnchor => self.release_anchor(a),
            Verb::MarkExpired => self.mark_expired(a),
            Verb::StampWindow => self.stamp_window(a),
            Verb::ClearWindow => self.clear_window(a),
            Verb::Freeze => self.freeze(a),
            Verb::KeepSurgeHost => self.keep_surge_host(a),
            Verb::Unfreeze => self.unfreeze(a),
            Verb::FreezeAndCordon => self.freeze_and_cordon(a),
            Verb::CreatePlaceholder => self.create_placeholder(a),
            Verb::DeletePlaceholder => self.delete_placeholder(a),
            Verb::DeleteUnownedPlaceholder => self.delete_unowned_placeholder(a),
            Verb::DeletePod => match a.target_obj() {
                // The pod the sweep judged, by its uid: a pod that took the name since (a new
                // rotation's placeholder) is not the orphan.
                Some(ObjRef::Pod(ns, n)) => {
                    match self.snap.cache.placeholders.get(n).and_then(|p| p.metadata.uid.clone()) {
                        Some(uid) => {
                            self.delete(a.verb, ObjectRef::pod(ns.clone(), n.clone()), Some(uid))
                        }
                        None => Ok(Outcome::Gone),
                    }
                }
                _ => Ok(Outcome::Gone),
            },
            Verb::DeleteClaim => self.delete_claim(a),
            Verb::ReapSurgeClaim => self.reap_surge_claim(a),
            Verb::ReapLaunched => self.reap_launched(a),
            Verb::MarkLaunched => self.mark_launched(a),
            Verb::ReleaseNode => self.release_node(a),
            Verb::Emit => self.emit(a),
            Verb::Event => {
                let (Some(obj), Some(reason)) = (a.target_obj().cloned(), a.reason) else {
                    return Err(fail(a.verb, "event without target or reason"));
                };
                let message = self.message(reason, a);
                self.event(&obj, reason, message);
                let claim = self.subject_claim(a);
                if reason == Reason::RotationFailed
                    && let Some(c) = &claim
                {
                    // Told once: the next attempt starts with a clean slate.
                    self.ctx.placeholder_trouble.remove(c);
                }
                self.announce(format!("event:{}", reason.name()), claim, a.row);
                Ok(Outcome::Won)
            }
            Verb::WarnOnce => {
                let (Some(obj), Some(reason)) = (a.target_obj().cloned(), a.reason) else {
                    return Err(fail(a.verb, "warn_once without target or reason"));
                };
                let message = self.message(reason, a);
                let key = (
                    self.cluster_ref(&obj).map(|r| r.to_string()).unwrap_or_default(),
                    reason.name().to_string(),
                );
                if self.ctx.latch.should_fire(key, &message) {
                    tracing::warn!(nodepool = %self.snap.pool_name(), reason = reason.name(), "{message}");
                    self.event(&obj, reason, message);
                }
                Ok(Outcome::Won)
            }
        }?;
        self.log_transition(a, outcome);
        Ok(outcome)
    }

    fn observe(&mut self, row: &Row, matched: bool) {
        if matched {
            self.ctx.coverage.insert(row.id.clone());
        }
        self.observed.push((row.id.clone(), matched));
    }

    fn rearm(&mut self, a: &Action<'_>) {
        // Level-triggered warnings re-arm once their condition was seen false (§4.3), for the
        // object they are about: the pool, or the claim of this rotation.
        let (Some(obj), Some(reason)) = (a.target_obj(), a.reason) else { return };
        let Some(object) = self.cluster_ref(obj) else { return };
        self.ctx.latch.clear(&(object.to_string(), reason.name().to_string()));
    }
}
