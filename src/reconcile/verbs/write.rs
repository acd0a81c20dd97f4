//! The write loop: fresh reads, what this process knows of an object's version, and the
//! conditional writes and deletes that carry a precondition (spec §5.2).
use super::*;

impl PassHost<'_> {
    /// A fresh read of the pool, seen through this pass's slot.
    pub(super) fn fresh_pool(&mut self) -> Result<Option<NodePool>, ApiError> {
        let name = self.snap.pool_name().to_string();
        let mut pool = self.ctx.cluster.get_pool(&name)?;
        self.ctx.known.read(
            ObjectRef::cluster(ObjectKind::NodePool, name),
            pool.as_ref().map(|p| &p.metadata),
        );
        if let Some(p) = pool.as_mut() {
            crate::reconcile::slots::swap_meta(&mut p.metadata, self.slot);
        }
        Ok(pool)
    }

    /// [`Self::known_copy`] of the pool.
    pub(super) fn known_pool(&self) -> Option<NodePool> {
        let target = self.cluster_ref(&ObjRef::Pool)?;
        match self.known_copy(&ObjRef::Pool, &target)? {
            Fresh::Pool(pool) => Some(*pool),
            Fresh::Claim(_) | Fresh::Node(_) => None,
        }
    }

    /// This pass's copy of `obj` when it is at the version this process last read fresh and
    /// has not written since ([`Known`](super::Known)): what a fresh read would return, but for
    /// writes of others the watch has not delivered yet. The pool is seen through this pass's slot.
    pub(super) fn known_copy(&self, obj: &ObjRef, target: &ObjectRef) -> Option<Fresh> {
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

    pub(super) fn cluster_ref(&self, obj: &ObjRef) -> Option<ObjectRef> {
        Some(match obj {
            ObjRef::Pool => ObjectRef::cluster(ObjectKind::NodePool, self.snap.pool_name()),
            ObjRef::Claim(n) => ObjectRef::cluster(ObjectKind::NodeClaim, n.clone()),
            ObjRef::Node(n) => ObjectRef::cluster(ObjectKind::Node, n.clone()),
            ObjRef::Pod(ns, n) => ObjectRef::pod(ns.clone(), n.clone()),
            ObjRef::Policy => return None,
        })
    }

    pub(super) fn fresh(&mut self, obj: &ObjRef) -> Result<Option<Fresh>, ApiError> {
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
    pub(super) fn holds_fresh(
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
    pub(super) fn write_loop<W>(
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
    pub(super) fn won(&mut self) {
        self.ctx.writes += 1;
        self.wrote = true;
    }

    /// Patches `obj`, at the resourceVersion (if any) of the fresh read the patch was decided
    /// on; a patch that wins is applied to this pass's copy.
    pub(super) fn send_patch(
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
            let sent = crate::reconcile::slots::swap_patch(&patch, self.slot);
            self.ctx.cluster.patch(target, &sent, rv.as_deref())?;
        } else {
            self.ctx.cluster.patch(target, &patch, rv.as_deref())?;
        }
        self.snap.apply(obj, &patch);
        Ok(())
    }

    /// Deletes `target` (with the preconditions given); this process no longer knows its
    /// version, whatever the answer.
    pub(super) fn send_delete(
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
    pub(super) fn conditional(
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

    pub(super) fn patch_of(set: &[(Key, Value)], clear: &[Key], meta: &ObjectMeta) -> Patch {
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

    pub(super) fn meta(&self, obj: &ObjRef) -> Option<&ObjectMeta> {
        match obj {
            ObjRef::Pool => self.snap.pool.as_ref().map(|p| &p.metadata),
            ObjRef::Claim(n) => self.snap.claim(n).map(|c| &c.metadata),
            ObjRef::Node(n) => self.snap.node(n).map(|c| &c.metadata),
            _ => None,
        }
    }

    /// Deletes `target`, only the incarnation `uid` when given. A 409 is re-checked on a fresh
    /// read: another object took the name (not ours to delete: `gone`), or the same one is still
    /// there and the delete is retried.
    pub(super) fn delete(
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
}
