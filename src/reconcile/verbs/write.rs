//! The write loop: fresh reads, what this process knows of an object's version, and the
//! conditional writes and deletes that carry a precondition (spec §5.2).
use super::*;

impl PassHost<'_> {
    /// A fresh read of the pool, seen through this pass's slot.
    pub(super) fn fresh_pool(&mut self) -> Result<Option<NodePool>, ApiError> {
        let name = self.snap.pool_name().to_string();
        let mut pool = self.ctx.cluster.get_pool(&name)?;
        let target = ObjectRef::cluster(ObjectKind::NodePool, name);
        let seen = pool.clone().map(|p| Seen::Pool(Arc::new(p)));
        let cached = self.cached_version(&ObjRef::Pool);
        self.ctx.known.read(target, seen, cached.as_deref());
        if let Some(p) = pool.as_mut() {
            crate::reconcile::slots::swap_meta(&mut p.metadata, self.slot);
        }
        Ok(pool)
    }

    /// [`Self::copy`] of the pool, never the cached copy of a pool this process did not read
    /// or write since it leads: what the `holds=` guards judge the budget on.
    pub(super) fn known_pool(&self) -> Option<Arc<NodePool>> {
        match self.copy(&ObjRef::Pool, false)? {
            Fresh::Pool(pool) => Some(pool),
            Fresh::Claim(_) | Fresh::Node(_) => None,
        }
    }

    /// What this process knows of `obj` that stands in for a fresh read ([`Known`](crate::reconcile::Known)):
    /// the pass's copy when the cache is at the version this process last read or wrote, its
    /// own copy when the cache lags that read or write, and, with `untouched`, the pass's copy
    /// of an object it never read nor wrote since it leads (decided on with the cached version
    /// as the precondition). `None`: read fresh. The pool is seen through this pass's slot.
    pub(super) fn copy(&self, obj: &ObjRef, untouched: bool) -> Option<Fresh> {
        let target = self.cluster_ref(obj)?;
        let meta = self.meta(obj);
        let from_pass = || {
            Some(match obj {
                ObjRef::Pool => Fresh::Pool(Arc::clone(self.snap.pool.as_ref()?)),
                ObjRef::Claim(n) => Fresh::Claim(Box::new(self.snap.claim(n)?.clone())),
                ObjRef::Node(n) => Fresh::Node(Box::new(self.snap.node(n)?.clone())),
                ObjRef::Policy | ObjRef::Pod(..) => return None,
            })
        };
        match self.ctx.known.lookup(&target, meta) {
            Lookup::Cached => from_pass(),
            Lookup::Untouched if untouched => from_pass(),
            Lookup::Untouched | Lookup::Fresh => None,
            Lookup::Copy(seen) => Some(match seen {
                Seen::Pool(p) => {
                    let mut pool = p.as_ref().clone();
                    crate::reconcile::slots::swap_meta(&mut pool.metadata, self.slot);
                    Fresh::Pool(Arc::new(pool))
                }
                Seen::Claim(c) => Fresh::Claim(Box::new(c.as_ref().clone())),
                Seen::Node(n) => Fresh::Node(Box::new(n.as_ref().clone())),
            }),
        }
    }

    /// The copy a first attempt decides on: this process's ([`Self::copy`] without
    /// `untouched`), else the cached copy of an object it never touched (`true`: its "nothing
    /// to write" proves nothing, only a write's precondition is checked).
    pub(super) fn first_copy(&self, obj: &ObjRef) -> Option<(Fresh, bool)> {
        match self.copy(obj, false) {
            Some(copy) => Some((copy, false)),
            None => self.copy(obj, true).map(|copy| (copy, true)),
        }
    }

    /// This process's copy of `obj` ([`Self::copy`] without `untouched`), else a fresh read.
    pub(super) fn read(&mut self, obj: &ObjRef) -> Result<Option<Fresh>, ApiError> {
        match self.copy(obj, false) {
            Some(copy) => Ok(Some(copy)),
            None => self.fresh(obj),
        }
    }

    /// What one attempt of a write loop decides on: on the first, [`Self::read`]; on a later
    /// one (the attempt before lost to a 409), a fresh read.
    pub(super) fn attempt_read(
        &mut self,
        obj: &ObjRef,
        first: bool,
    ) -> Result<Option<Fresh>, ApiError> {
        if first { self.read(obj) } else { self.fresh(obj) }
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
            ObjRef::Pool => return Ok(self.fresh_pool()?.map(|x| Fresh::Pool(Arc::new(x)))),
            ObjRef::Claim(n) => cluster.get_claim(n)?.map(|x| Fresh::Claim(Box::new(x))),
            ObjRef::Node(n) => cluster.get_node(n)?.map(|x| Fresh::Node(Box::new(x))),
            ObjRef::Policy | ObjRef::Pod(..) => return Ok(None),
        };
        if let Some(target) = self.cluster_ref(obj) {
            let seen = fresh.as_ref().map(|f| self.seen(f, None));
            let cached = self.cached_version(obj);
            self.ctx.known.read(target, seen, cached.as_deref());
        }
        Ok(fresh)
    }

    /// `fresh` as the API server holds it (a pool without this pass's lens); with `written`,
    /// as a write of `patch` that won on it left it, at the version the server answered.
    fn seen(&self, fresh: &Fresh, written: Option<(&Patch, String)>) -> Seen {
        let at = |meta: &mut ObjectMeta| {
            if let Some((_, rv)) = &written {
                meta.resource_version = Some(rv.clone());
            }
        };
        let patch = written.as_ref().map(|(patch, _)| *patch);
        match fresh {
            Fresh::Pool(p) => {
                let mut pool = p.as_ref().clone();
                if let Some(patch) = patch {
                    apply_patch(&mut pool.metadata, patch);
                }
                at(&mut pool.metadata);
                crate::reconcile::slots::swap_meta(&mut pool.metadata, self.slot);
                Seen::Pool(Arc::new(pool))
            }
            Fresh::Claim(c) => {
                let mut claim = c.as_ref().clone();
                if let Some(patch) = patch {
                    apply_patch(&mut claim.metadata, patch);
                }
                at(&mut claim.metadata);
                Seen::Claim(Arc::new(claim))
            }
            Fresh::Node(n) => {
                let mut node = n.as_ref().clone();
                if let Some(patch) = patch {
                    apply_node_patch(&mut node, patch);
                }
                at(&mut node.metadata);
                Seen::Node(Arc::new(node))
            }
        }
    }

    /// Evaluates the action's `holds=` guard with the pool read fresh: the target's fresh copy
    /// when it is the pool, else (on the first attempt, `known`) this process's copy of the pool
    /// ([`Self::known_pool`]) or a fresh read of it in this attempt (a pool gone: false).
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
            Fresh::Pool(p) => Some(Arc::clone(p)),
            Fresh::Claim(_) | Fresh::Node(_) => match known.then(|| self.known_pool()).flatten() {
                Some(pool) => Some(pool),
                None => self.fresh_pool().map_err(|e| fail(a.verb, e))?.map(Arc::new),
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

    /// Patches `obj`, at the resourceVersion (if any) of the copy `decided` the patch was
    /// decided on; a patch that wins is applied to this pass's copy, and, when it carried a
    /// version and the server answered the new one, this process knows the object as `decided`
    /// with the patch applied (the precondition made the server apply it to exactly that copy).
    /// Any other answer leaves the object's version unknown: it is read fresh next time.
    pub(super) fn send_patch(
        &mut self,
        obj: &ObjRef,
        target: &ObjectRef,
        patch: Patch,
        decided: &Fresh,
    ) -> Result<(), ApiError> {
        let rv = decided.meta().resource_version.clone();
        let sent = if matches!(obj, ObjRef::Pool) && self.slot != 0 {
            let sent = crate::reconcile::slots::swap_patch(&patch, self.slot);
            self.ctx.cluster.patch(target, &sent, rv.as_deref())
        } else {
            self.ctx.cluster.patch(target, &patch, rv.as_deref())
        };
        let now_at = match sent {
            Ok(now_at) => now_at,
            Err(e) => {
                self.ctx.known.unsure(target);
                return Err(e);
            }
        };
        let known = match now_at {
            Some(now_at) if rv.is_some() => Some(self.seen(decided, Some((&patch, now_at)))),
            _ => None,
        };
        match known {
            Some(seen) => {
                let cached = self.cached_version(obj);
                self.ctx.known.wrote(target.clone(), seen, cached.as_deref());
            }
            None => self.ctx.known.unsure(target),
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
        self.ctx.known.unsure(target);
        self.ctx.cluster.delete(target, uid, rv)
    }

    /// Decide, write with the resourceVersion of the copy decided on; on 409 read fresh and
    /// start over. With `recheck`, its `holds=` guard must also be true on this attempt's copy
    /// of the pool.
    ///
    /// The first attempt decides on what this process knows instead of a fresh read
    /// ([`Self::copy`]: its own copy, or the pass's copy when the cache is at the version it
    /// last read or wrote, or of an object it never touched): a write then carries that
    /// version (a 409 reads fresh and decides again), and "nothing to write" costs no request
    /// (docs/decisions/footprint.md).
    pub(super) fn conditional(
        &mut self,
        verb: Verb,
        obj: &ObjRef,
        recheck: Option<&Action<'_>>,
        decide: impl FnMut(&Fresh) -> Decide,
    ) -> Result<Outcome, HostError> {
        self.conditional_from(verb, obj, recheck, false, decide)
    }

    /// [`Self::conditional`] for a check whose "nothing to write" is a verdict another write
    /// relies on (a surge host frozen, or re-checked, before the old claim's delete): a write
    /// decided on a copy is still checked by its precondition, but a "nothing to write" is
    /// decided again on a fresh read. No copy this process keeps says the object did not change
    /// or go since this process last wrote it.
    pub(super) fn conditional_verdict(
        &mut self,
        verb: Verb,
        obj: &ObjRef,
        decide: impl FnMut(&Fresh) -> Decide,
    ) -> Result<Outcome, HostError> {
        self.conditional_from(verb, obj, None, true, decide)
    }

    fn conditional_from(
        &mut self,
        verb: Verb,
        obj: &ObjRef,
        recheck: Option<&Action<'_>>,
        verdict: bool,
        mut decide: impl FnMut(&Fresh) -> Decide,
    ) -> Result<Outcome, HostError> {
        let Some(target) = self.cluster_ref(obj) else { return Ok(Outcome::Gone) };
        let mut first = true;
        self.write_loop(
            verb,
            |host| {
                let known = std::mem::take(&mut first);
                let mut copy = known.then(|| host.first_copy(obj)).flatten();
                loop {
                    let (fresh, untouched, from_copy) = match copy.take() {
                        Some((copy, untouched)) => (copy, untouched, true),
                        None => match host.fresh(obj).map_err(|e| fail(verb, e))? {
                            Some(fresh) => (fresh, false, false),
                            None => return Ok(Decide::Skip(Outcome::Gone)),
                        },
                    };
                    let holds = match recheck {
                        Some(a) => host.holds_fresh(a, &fresh, known)?,
                        None => true,
                    };
                    let decided = if holds { decide(&fresh) } else { Decide::Skip(Outcome::Raced) };
                    return Ok(match decided {
                        // "Nothing to write" on a copy this process never read is no verdict:
                        // only a write is checked by the server. Decided again on a fresh read.
                        Decide::Skip(_) if untouched || verdict && from_copy => continue,
                        Decide::Skip(outcome) => Decide::Skip(outcome),
                        Decide::Write(patch, outcome) => Decide::Write((patch, fresh), outcome),
                    });
                }
            },
            |host, (patch, fresh)| host.send_patch(obj, &target, patch, &fresh),
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

    /// The version of `obj` in the cache this pass reads (its own writes change no version).
    pub(super) fn cached_version(&self, obj: &ObjRef) -> Option<String> {
        self.meta(obj).and_then(|m| m.resource_version.clone())
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
