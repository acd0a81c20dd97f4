//! Announcements: Events, the level-triggered warnings' messages, and `emit` of a rotation's
//! outcome, each only after the write that made it true won.
use super::*;

/// The gate stamps `InvalidGateStamp` is about, in the order they are checked.
const GATE_STAMPS: [Key; 2] = [Key::LastRotationAt, Key::LastFailureAt];

/// The claim's stamps `InvalidStamp` is about, in the order they are checked.
const CLAIM_STAMPS: [Key; 2] = [Key::StartedAt, Key::FailedAt];

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

impl PassHost<'_> {
    pub(super) fn announce(&mut self, what: String, claim: Option<String>, row: &str) {
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

    pub(super) fn event(&mut self, obj: &ObjRef, reason: Reason, message: String) {
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

    pub(super) fn subject_claim(&self, a: &Action<'_>) -> Option<String> {
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
    pub(super) fn message(&self, reason: Reason, a: &Action<'_>) -> String {
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
            // The sweep fails only claims no anchor names.
            Reason::RotationFailed if self.snap.sweep_anchors().is_some() => {
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
    pub(super) fn render(&self, message: Message, claim: &str, clamped: &[String]) -> String {
        message.template().render(|slot| self.detail(slot, message, claim, clamped))
    }

    /// One detail of an Event message about `claim` (see `slots` in rules/vocabulary.ron).
    pub(super) fn detail(
        &self,
        slot: Slot,
        message: Message,
        claim: &str,
        clamped: &[String],
    ) -> String {
        match slot {
            Slot::Claim => claim.to_string(),
            Slot::Pool => self.snap.pool_name().to_string(),
            Slot::Census => self.snap.census.to_string(),
            Slot::Shortfall => self.shortfall().unwrap_or_default(),
            Slot::Policies => match &self.snap.governance {
                crate::reconcile::snapshot::GovernanceView::Conflict(p) => {
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
                    .assessment()
                    .into_iter()
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
    pub(super) fn invalid_stamp(
        &self,
        meta: Option<&ObjectMeta>,
        keys: &[Key],
    ) -> Option<(Key, String)> {
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
    pub(super) fn surge_trouble(&self, claim: &str) -> Option<&String> {
        let live = self
            .snap
            .placeholder_for(claim)
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none());
        if live { None } else { self.ctx.placeholder_trouble.get(claim) }
    }

    pub(super) fn next_attempt(&self, claim: &str) -> Option<DateTime<Utc>> {
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
    pub(super) fn shortfall(&self) -> Option<String> {
        let pool = self.snap.pool.as_ref()?;
        let pick = self.snap.pick.as_ref().and_then(|n| self.snap.claim(n))?;
        placeholder::surge_headroom(pool, &placeholder::footprint(pick))
            .err()
            .map(|s| s.to_string())
    }

    // ---- the verbs ------------------------------------------------------------------------

    pub(super) fn emit(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
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
