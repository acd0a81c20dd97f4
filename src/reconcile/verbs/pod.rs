//! The placeholder pod: create it for the attempt, delete it by uid.
use super::*;

impl PassHost<'_> {
    pub(super) fn create_placeholder(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else { return Ok(Outcome::Gone) };
        let (Some(pool), Some(mut claim), Some(policy)) =
            (self.snap.pool.clone(), self.snap.claim(&name).cloned(), self.snap.policy().cloned())
        else {
            return Ok(Outcome::Gone);
        };
        if annotation(&claim.metadata, Key::StartedAt).is_none() {
            // A view lagging this attempt's entry: the placeholder carries the attempt's stamp,
            // its proof of ownership should the create's answer be lost, so it is taken from
            // what this process knows of the claim (it wrote the stamp), else read fresh.
            let obj = ObjRef::Claim(name.clone());
            let fresh = self.read(&obj).map_err(|e| fail(a.verb, e))?;
            if let Some(stamp) = fresh.as_ref().and_then(|c| annotation(c.meta(), Key::StartedAt)) {
                claim
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(full(Key::StartedAt), stamp.to_string());
            }
        }
        let node_name = self.snap.claim_node(&claim).map(str::to_string);
        // Read fresh: the node's labels decide the placeholder's affinity (a policy's
        // `matchNodeRequirements` may name any label key), and a controller's cache keeps only
        // the pool's label of a Node (`cluster::projection`). One read per placeholder created.
        let node = match &node_name {
            Some(n) => self.ctx.cluster.get_node(n).map_err(|e| fail(a.verb, e))?,
            None => None,
        };
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
            let key = (Latched::Claim(name.clone()), Reason::SurgeClamped.name());
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
    pub(super) fn delete_unowned_placeholder(
        &mut self,
        a: &Action<'_>,
    ) -> Result<Outcome, HostError> {
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
    pub(super) fn delete_placeholder(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(owner) = a.for_.clone() else { return Ok(Outcome::Gone) };
        // The uid recorded on the claim first, as this process knows it (it wrote the uid) or
        // read fresh: the cached pod and the cached annotation can both name an incarnation a
        // pass of this same instant replaced.
        let fresh = match self.read(&ObjRef::Claim(owner.clone())) {
            Ok(Some(Fresh::Claim(claim))) => Some(*claim),
            Ok(_) => None,
            Err(e) => return Err(fail(a.verb, e)),
        };
        let pod = ObjectRef::pod(
            self.ctx.config.namespace.clone(),
            placeholder::placeholder_name(&owner),
        );
        let drained = self.snap.pool.as_ref().is_some_and(|p| {
            annotation(&p.metadata, Key::ActiveRotation) == Some(owner.as_str())
                && annotation(&p.metadata, Key::ActiveRotationState) == Some("draining")
        });
        if fresh.is_none() && drained && self.snap.placeholder_named(&owner).is_none() {
            // The rotation's claim is gone after its drain and this pass sees no pod under the
            // name: the escalation deleted it before the claim, or a surge-less drain never had
            // one, and a DELETE would only answer 404. Neither is proven by the view: a
            // surge-less drain may follow a placeholder created a moment before the old node's
            // pods left (a forced expiry the view did not show yet), and a view that lags may
            // not show that pod. One read decides; a pod of this rotation found is deleted by
            // its uid (docs/decisions/footprint.md).
            let Some(uid) = self.read_placeholder_uid(a, &pod, &owner)? else {
                return Ok(Outcome::Gone);
            };
            self.deleted_placeholder = Some((owner.clone(), uid.clone()));
            return self.delete(a.verb, pod, Some(uid));
        }
        let recorded = |claim: &NodeClaim| {
            annotation(&claim.metadata, Key::PlaceholderUid).map(str::to_string)
        };
        let recorded_fresh = fresh.as_ref().and_then(recorded);
        let uid = recorded_fresh
            .clone()
            .or_else(|| self.snap.placeholder_named(&owner).and_then(|p| p.metadata.uid.clone()))
            .or_else(|| self.snap.claim(&owner).and_then(recorded));
        // Nothing names the pod's uid (the claim is gone or its record cleared, the view lags
        // the pod): read it. The mark that follows a cleanup's delete lists the nominations of
        // the pod this delete removes.
        let uid = match uid {
            Some(uid) => Some(uid),
            None => self.read_placeholder_uid(a, &pod, &owner)?,
        };
        if let Some(uid) = &uid {
            self.deleted_placeholder = Some((owner.clone(), uid.clone()));
        }
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

    /// The uid of the pod under the placeholder's name `pod`, read fresh, if it is `owner`'s
    /// (its `surge-for`); `None` when there is no such pod.
    fn read_placeholder_uid(
        &self,
        a: &Action<'_>,
        pod: &ObjectRef,
        owner: &str,
    ) -> Result<Option<String>, HostError> {
        let ns = pod.namespace.as_deref().unwrap_or_default();
        let read = self.ctx.cluster.get_pod(ns, &pod.name).map_err(|e| fail(a.verb, e))?;
        let ours = read.filter(|p| annotation(&p.metadata, Key::SurgeFor) == Some(owner));
        Ok(ours.and_then(|p| p.metadata.uid))
    }
}
