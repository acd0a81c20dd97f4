//! The annotation verbs: guarded patches of one object's annotations, `mark_expired`, and the
//! pool's window stamps.
use super::*;

/// `patch` with each key of `incr` counted up by one from its value on `meta`, as a decision:
/// no write when nothing is left to change. Saturating: a count at its limit stays there
/// instead of wrapping or panicking.
fn counted_up(mut patch: Patch, meta: &ObjectMeta, incr: &[Key]) -> Decide {
    for k in incr {
        let n = crate::policy::derive::parse_retry_count(annotation(meta, *k));
        patch.set.insert(full(*k), n.saturating_add(1).to_string());
    }
    if patch.is_empty() { Decide::Skip(Outcome::Won) } else { Decide::Write(patch, Outcome::Won) }
}

impl PassHost<'_> {
    pub(super) fn in_window(&self, t: DateTime<Utc>) -> bool {
        self.snap.policy().is_some_and(|p| p.in_window(t))
    }

    pub(super) fn annotate(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
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
            let patch = Self::patch_of(&set, &clear, fresh.meta());
            counted_up(patch, fresh.meta(), &incr)
        })
    }

    pub(super) fn annotate_if(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
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
            counted_up(patch, meta, &incr)
        })
    }

    pub(super) fn mark_expired(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
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
    pub(super) fn verdict_on(&self, meta: &ObjectMeta) -> Option<Verdict> {
        let now = self.snap.now;
        let stamp = annotation(meta, Key::WindowOpenedAt);
        let readable = stamp.is_some_and(|s| DateTime::parse_from_rfc3339(s).is_ok());
        if self.in_window(now) {
            return (!readable).then_some(Verdict::Stamp);
        }
        // Deferred while a slot of the pool has a rotation in flight that is not a stuck drain
        // (`window_defer`).
        let anchors = crate::reconcile::slots::anchors(meta);
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

    pub(super) fn stamp_window(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let now = self.snap.now;
        self.window_write(a.verb, Verdict::Stamp, Some(now))
    }

    pub(super) fn clear_window(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let Some(verdict) = a.verdict else { return Err(fail(a.verb, "no verdict")) };
        self.window_write(a.verb, verdict, None)
    }

    pub(super) fn window_write(
        &mut self,
        verb: Verb,
        want: Verdict,
        stamp: Option<DateTime<Utc>>,
    ) -> Result<Outcome, HostError> {
        // Evaluate the verdict inside the write loop against the authoritative copy.
        let Some(target) = self.cluster_ref(&ObjRef::Pool) else { return Ok(Outcome::Gone) };
        let mut first = true;
        self.write_loop(
            verb,
            |host| {
                // This process's copy of the pool on the first attempt (never the cached copy of
                // a pool it did not read or write: the verdict counts the anchors), else fresh.
                let first = std::mem::take(&mut first);
                let read = host.attempt_read(&ObjRef::Pool, first).map_err(|e| fail(verb, e))?;
                let Some(fresh) = read else { return Ok(Decide::Skip(Outcome::Gone)) };
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
                Ok(Decide::Write((patch, fresh), Outcome::Won))
            },
            |host, (patch, fresh)| host.send_patch(&ObjRef::Pool, &target, patch, &fresh),
            |_| Ok(None),
            || "window annotation kept changing".to_string(),
        )
    }
}
