//! The claim verbs: delete the old claim, and reap or mark the surge claims launched for a
//! placeholder (docs/decisions/reap-attribution.md).
use super::*;

impl PassHost<'_> {
    /// The old claim's delete, only while a fresh read shows its state in `from`, with that
    /// read's uid and resourceVersion as preconditions (a 409 re-reads and re-checks).
    pub(super) fn delete_claim(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let target = ObjectRef::cluster(ObjectKind::NodeClaim, name.clone());
        let obj = ObjRef::Claim(name);
        let mut first = true;
        self.write_loop(
            a.verb,
            |host| {
                // What this process knows of the claim on the first attempt (the delete carries
                // its uid and version), else a fresh read.
                let claim = host.attempt_read(&obj, std::mem::take(&mut first));
                let Some(claim) = claim.map_err(|e| fail(a.verb, e))? else {
                    return Ok(Decide::Skip(Outcome::Gone));
                };
                let meta = claim.meta().clone();
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
    pub(super) fn reap_surge_claim(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
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
        for surge in self.launched_for(&name) {
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
                let cached = host.snap.pool.replace(Arc::new(fresh_pool));
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
    pub(super) fn reap_launched(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let anchors = self.snap.sweep_anchors().cloned().unwrap_or_default();
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

    /// The pool's claims marked for the rotation `claim`: in the pass's view, or on this
    /// process's own copy when the view lags the mark it wrote (its rollback follows the mark
    /// by less than the lag). Only own copies are looked at: where the view is as fresh as
    /// what this process knows, the view already answered.
    fn launched_for(&self, claim: &str) -> Vec<String> {
        let mut marked = self.snap.launched_for(claim);
        for c in self.snap.pool_claims() {
            let Some(name) = c.metadata.name.as_deref() else { continue };
            let target = ObjectRef::cluster(ObjectKind::NodeClaim, name);
            if let Lookup::Copy(Seen::Claim(own)) =
                self.ctx.known.lookup(&target, Some(&c.metadata))
                && annotation(&own.metadata, Key::LaunchedFor) == Some(claim)
                && !marked.iter().any(|m| m == name)
            {
                marked.push(name.to_string());
            }
        }
        marked
    }

    /// Marks (`launched-for`) the claims Karpenter's `Nominated` Events, listed fresh, name for
    /// the rotation's placeholder ([`Snapshot::placeholder_uid`]: also once its claim is gone):
    /// each only if a fresh read shows it of the same pool, without a mark, never initialized
    /// and not being deleted.
    pub(super) fn mark_launched(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(name) = a.for_.clone() else { return Ok(Outcome::Gone) };
        // The claim's pool; the claim gone (the completion), the pool of this pass.
        let pool = match self.snap.claim(&name) {
            Some(claim) => claim.node_pool().map(str::to_string),
            None => Some(self.snap.pool_name().to_string()).filter(|p| !p.is_empty()),
        };
        let Some(pool) = pool else { return Ok(Outcome::Gone) };
        // The placeholders' uids: as this process recorded it on its own copy of the claim
        // (newer than a view lagging the attempt's own create, which may show an earlier
        // placeholder or none), as the pass sees it, and the pod this pass deleted after reading
        // it (the completion, whose claim is gone). Each one's nominations are listed: a view
        // lagging the attempt's re-created placeholder names the one before, and the old
        // claim's delete or the pod's takes the record away before the view catches up.
        let own = match self.copy(&ObjRef::Claim(name.clone()), false) {
            Some(Fresh::Claim(c)) => {
                annotation(&c.metadata, Key::PlaceholderUid).map(str::to_string)
            }
            _ => None,
        };
        let seen = self.snap.placeholder_uid(&name).map(str::to_string);
        let deleted =
            self.deleted_placeholder.as_ref().filter(|(o, _)| *o == name).map(|(_, u)| u.clone());
        let mut uids: Vec<String> = Vec::new();
        for uid in [own, seen, deleted].into_iter().flatten() {
            if !uids.contains(&uid) {
                uids.push(uid);
            }
        }
        if uids.is_empty() {
            return Ok(Outcome::Gone);
        }
        let mut names: Vec<String> = Vec::new();
        for uid in &uids {
            let events = self.ctx.cluster.nominations(uid).map_err(|e| fail(a.verb, e))?;
            for e in &events {
                if let Some(c) = crate::cluster::nominated_claim(e)
                    && c != name
                    && !names.iter().any(|n| n == c)
                {
                    names.push(c.to_string());
                }
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
    pub(super) fn reap_claim(
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
    pub(super) fn registered_host(
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
}
