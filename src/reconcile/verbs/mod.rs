//! Carrying out the rules' verbs against the [`Cluster`](crate::cluster::Cluster) (spec §5.2): conditional writes are
//! decided on a copy as fresh as this process knows (its own, the cache's, else a fresh read)
//! and written with that copy's resourceVersion; the outcome comes from
//! the write loop itself and is reset on every attempt; announcements happen only after a
//! write won (the rules guarantee the order, this code keeps them at-most-once).
//!
//! [`PassHost`] and the verbs' dispatch live here; the verbs, by concern: [`write`](mod@write) (the write
//! loop every other one goes through), [`annotations`], [`anchor`], [`node`], [`pod`] (the
//! placeholder), [`claim`], [`announce`].
use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::known::{Lookup, Seen};
use super::snapshot::{Snapshot, annotation, apply_node_patch, apply_patch};
use super::{Announcement, Ctx, Latched};
use crate::cluster::{ApiError, EventRecord, ObjectKind, ObjectRef, Patch};
use crate::engine::{
    ANCHOR_CLEAR_SET, Action, ClaimState, Facts, Field, Host, HostError, Key, Message, ObjRef,
    Outcome, Pred, Reason, Root, Row, Signal, Slot, Value, Verb, Verdict,
};
use crate::karpenter::{NodeClaim, NodePool, node_ready};
use crate::placeholder;

mod anchor;
mod annotations;
mod announce;
mod claim;
mod node;
pub(crate) use node::release_patch;
mod pod;
mod write;

/// Attempts of one conditional write before the pass gives up (and is retried later).
const ATTEMPTS: usize = 5;

/// One pass: the snapshot it reads and the controller state it may touch.
pub(crate) struct PassHost<'c> {
    pub snap: Snapshot,
    pub ctx: &'c mut Ctx,
    /// The pool copy the completion write verified (its durations feed `emit(success)`).
    released: Option<NodePool>,
    /// The rotation an anchor write of this pass cleared (its Event names the claim, which may
    /// be gone from the snapshot and from the pool's annotations by then).
    cleared: Option<String>,
    /// The placeholder this pass deleted (its owner, its uid: as recorded, as the view shows
    /// it, or as a fresh read showed it when neither did), so that the mark that follows still
    /// lists what Karpenter launched for it once the claim's record is gone.
    deleted_placeholder: Option<(String, String)>,
    /// Whether the verb being performed wrote (a satisfied precondition may need no write).
    wrote: bool,
    /// The pool's rotation slot this pass drives: its fresh reads and patches of the pool go
    /// through the slot's lens ([`super::slots`]), as the snapshot's copy already does.
    slot: usize,
}

/// A fresh read of one object.
enum Fresh {
    /// Shared with the pass's snapshot when decided on its copy: a pool with many slots holds
    /// many annotations, and deciding reads it only.
    Pool(Arc<NodePool>),
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

/// [`swap_meta`](super::slots::swap_meta) on the pass's pool. Slot 0's lens is the identity:
/// its pool stays the cache's shared copy.
fn swap_pool_meta(pool: &mut Option<Arc<NodePool>>, slot: usize) {
    if slot != 0
        && let Some(p) = pool.as_mut()
    {
        super::slots::swap_meta(&mut Arc::make_mut(p).metadata, slot);
    }
}

impl<'c> PassHost<'c> {
    /// A run over slot `slot` of the pool pass's snapshot: its pool is seen through the slot's
    /// lens ([`super::slots`]) until [`Self::into_snapshot`] takes the lens off again, the only
    /// way back to the snapshot, so the next slot's run never starts on a lensed pool.
    pub(crate) fn through_lens(mut snap: Snapshot, ctx: &'c mut Ctx, slot: usize) -> Self {
        swap_pool_meta(&mut snap.pool, slot);
        Self::for_slot(snap, ctx, slot)
    }

    /// The snapshot with this run's writes, its pool without the slot's lens.
    pub(crate) fn into_snapshot(self) -> Snapshot {
        let mut snap = self.snap;
        swap_pool_meta(&mut snap.pool, self.slot);
        snap
    }

    /// A pass over slot `slot` of the pool; `snap.pool` is already seen through its lens (the
    /// sweep's copy of a pool, lensed once and dropped after its run).
    pub(crate) fn for_slot(snap: Snapshot, ctx: &'c mut Ctx, slot: usize) -> Self {
        PassHost {
            snap,
            ctx,
            released: None,
            cleared: None,
            deleted_placeholder: None,
            wrote: false,
            slot,
        }
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
                let key = (Latched::about(self.cluster_ref(&obj)), reason.name());
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
        if matched && !self.ctx.coverage.contains(&row.id) {
            self.ctx.coverage.insert(row.id.clone());
        }
    }

    fn rearm(&mut self, a: &Action<'_>) {
        // Level-triggered warnings re-arm once their condition was seen false (§4.3), for the
        // object they are about: the pool, or the claim of this rotation. Nothing latched,
        // nothing to re-arm.
        if self.ctx.latch.is_empty() {
            return;
        }
        let (Some(obj), Some(reason)) = (a.target_obj(), a.reason) else { return };
        let Some(object) = self.cluster_ref(obj) else { return };
        self.ctx.latch.clear(&(Latched::about(Some(object)), reason.name()));
    }
}
