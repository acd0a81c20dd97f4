//! The pool's anchor: clearing it, and releasing it with the completion stamps.
use super::*;

impl PassHost<'_> {
    pub(super) fn anchor_patch(meta: &ObjectMeta, set: &[(Key, Value)]) -> Patch {
        let mut patch = Self::patch_of(set, ANCHOR_CLEAR_SET, meta);
        // The clear wins over nothing else; keep the set keys that the clear does not name.
        for k in ANCHOR_CLEAR_SET {
            patch.set.remove(k.full());
        }
        patch
    }

    pub(super) fn clear_anchor(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
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

    pub(super) fn release_anchor(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
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
}
