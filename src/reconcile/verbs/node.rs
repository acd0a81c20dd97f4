//! The node verbs: freeze (and cordon) a surge host or the old node, keep a surge host through
//! a re-issued delete, unfreeze, and release what we set on a node (§3.4).
use super::*;

/// The node is frozen (`surge-for`) for a rotation other than `owner`'s that is still in flight:
/// that rotation's, never taken over.
fn frozen_for_another(meta: &ObjectMeta, owner: &str, in_flight: &BTreeSet<String>) -> bool {
    annotation(meta, Key::SurgeFor).is_some_and(|other| other != owner && in_flight.contains(other))
}

/// Lifts what we set on a node: `surge-for` (with `with_surge_for`), `do-not-disrupt` only
/// where our owned marker says we set it, our cordon only where our `cordoned` marker says we
/// flipped it, and the markers themselves (§3.4). An operator's own cordon or do-not-disrupt
/// carries no marker and is never touched. `noderotation uninstall` builds its node patch here
/// too, so the two cannot disagree on what is ours.
pub(crate) fn release_patch(node: &Node, with_surge_for: bool) -> Patch {
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

impl PassHost<'_> {
    pub(super) fn freeze(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        self.freeze_node(a, false)
    }

    /// `freeze` and the cordon in one patch: the node is never cordoned without the freeze,
    /// and a node another rotation holds is neither.
    pub(super) fn freeze_and_cordon(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        self.freeze_node(a, true)
    }

    pub(super) fn freeze_node(
        &mut self,
        a: &Action<'_>,
        cordon: bool,
    ) -> Result<Outcome, HostError> {
        let Some(obj @ ObjRef::Node(_)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let Some(owner) = a.for_.clone() else { return Err(fail(a.verb, "freeze without `for`")) };
        // The fresh node frozen for another rotation still in flight is that rotation's: never
        // taken over (the cache that showed it free lags).
        let in_flight = self.snap.claims_in_flight();
        let decide = |fresh: &Fresh| {
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
        };
        if cordon {
            self.conditional(a.verb, &obj, None, decide)
        } else {
            // A surge host's freeze is what lets the old claim's delete go out: "already
            // frozen" on this process's own copy is checked on a fresh read (the host's claim
            // interrupted, the node gone: `Gone`).
            self.conditional_verdict(a.verb, &obj, decide)
        }
    }

    /// The annotations that freeze a node for `owner` (§3.4): `surge-for`, and do-not-disrupt
    /// with the owned marker unless the operator already set "true"; only what is missing.
    pub(super) fn freeze_patch(meta: &ObjectMeta, owner: &str) -> Patch {
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
    pub(super) fn keep_surge_host(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(owner) = a.for_.clone() else {
            return Err(fail(a.verb, "keep_surge_host without `for`"));
        };
        // The pool through this slot's lens: the slot's own anchor and host, as this process
        // knows it (it wrote the host) or read fresh.
        let pool = self.read(&ObjRef::Pool).map_err(|e| fail(a.verb, e))?;
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
        // "Kept" lets the old claim's delete go out: never on a copy this process wrote when it
        // froze the host, which says nothing of a host interrupted or deleted since.
        let kept = self.conditional_verdict(a.verb, &ObjRef::Node(host), |fresh| {
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

    /// The node of the claim that `owner` names in `surge-claim` (`owner` as this process knows
    /// it, having written the mark, or read fresh; the surge claim read fresh: its node is
    /// Karpenter's write), by `status.nodeName`, else by providerID, if any.
    pub(super) fn fresh_surge_host(&mut self, owner: &str) -> Result<Option<String>, ApiError> {
        let claim = self.read(&ObjRef::Claim(owner.to_string()))?;
        let Some(claim) = claim else { return Ok(None) };
        let Some(surge) = annotation(claim.meta(), Key::SurgeClaim) else { return Ok(None) };
        let Some(surge) = self.ctx.cluster.get_claim(surge)? else { return Ok(None) };
        let status = surge.status.as_ref();
        Ok(status.and_then(|s| s.node_name.clone()).or_else(|| {
            let id = status?.provider_id.as_deref()?;
            self.snap.node_with_provider_id(id).map(str::to_string)
        }))
    }

    pub(super) fn unfreeze(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
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
        if self.snap.pool.is_some() && self.snap.sweep_anchors().is_none() {
            let pool = self.read(&ObjRef::Pool).map_err(|e| fail(a.verb, e))?;
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

    pub(super) fn release_node(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(obj @ ObjRef::Node(_)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let anchors = self.snap.sweep_anchors().cloned().unwrap_or_default();
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
            if !cached.is_some_and(crate::reconcile::snapshot::marked_in_flight) {
                continue;
            }
            let fresh = self.read(&ObjRef::Claim(c.clone())).map_err(|e| fail(a.verb, e))?;
            if let Some(Fresh::Claim(f)) = fresh
                && f.is_deleting()
                && annotation(&f.metadata, Key::State) == Some("draining")
            {
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
}
