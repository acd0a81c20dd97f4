//! What one NodePool looks like to the controller now, read-only: its governance, the window
//! that is open or opens next, the claims due in it, the rotations in flight, the nearest
//! deadlines, the findings and the last failures. Built from the snapshot a pass reads (candidate
//! facts, the burst lookahead, the slots, feasibility), so it says what the controller will do,
//! not a second opinion. The RotationPolicy status (§5.4) carries a part of it per pool
//! ([`PoolSummary::status`]); `noderotation status` prints all of it.
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::slots;
use super::snapshot::{Snapshot, annotation};
use crate::engine::{Facts, Key, ObjRef, Pred, Value};
use crate::policy::crd::NodePoolStatus;
use crate::policy::derive::{self, Candidacy, ClaimState, RotationOrder};
use crate::policy::feasibility::Finding;
use crate::policy::plan::{LocalOccurrence, local_occurrences};

/// Deadlines listed per pool, nearest first.
pub(crate) const NEAREST_DEADLINES: usize = 5;

/// How the pool is governed (§5.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub(crate) enum GovernanceSummary {
    /// One policy governs it and is valid: `Ready` (reason Accepted).
    Ready { policy: String },
    /// Equally specific policies select it: it is not rotated until one is made more specific.
    Conflict { policies: Vec<String> },
    /// The governing policy is invalid: nothing rotates; the message names the field.
    Invalid { policy: String, message: String },
    /// No policy selects it: left alone.
    Ungoverned,
}

/// The window occurrence open now, or the next one; `None` in [`PoolSummary::window`] without
/// windows. Open 24/7: `always_open`, no bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WindowSummary {
    pub open: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always_open: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<DateTime<Utc>>,
    /// The same occurrence in each of the policy's time zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub local: Vec<LocalOccurrence>,
}

/// `noderotation.io/freeze` on the pool (§3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FreezeSummary {
    /// As written.
    pub value: String,
    /// Frozen now (an unreadable value is frozen).
    pub frozen: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

/// The rotations at once the controller uses for the pool now, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LanesSummary {
    /// `lanes(np)`.
    pub in_use: usize,
    /// `surge.maxUnavailable` as written.
    pub written: String,
    pub reason: String,
}

/// One rotation in flight: a slot's anchor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RotationSummary {
    pub slot: usize,
    pub node_claim: String,
    /// `pending` (surge capacity being reserved), `draining`, `forceful` (a surge-less
    /// fallback), or `completing` (the old claim is gone; the next pass records the outcome).
    pub stage: String,
    /// When it started (the claim's `started-at`, else the slot's `draining-at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_seconds: Option<i64>,
    /// `provisioned` or `absorbed` (§3.3), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge_path: Option<String>,
    /// Where the surge placeholder is: `not created`, `pending`, `unschedulable: <reason>`, or
    /// `on <node>` (`ready` once surge-ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge_claim: Option<String>,
}

/// A claim due in the window (open now, or next), not in flight yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DueClaim {
    pub node_claim: String,
    /// Due from this instant (the burst lookahead's, where it moves a crowded claim earlier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    /// A failed claim due again: its retry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry: bool,
}

/// A claim's forced-expiry deadline (`creationTimestamp + expireAfter`) and its margin now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeadlineSummary {
    pub node_claim: String,
    pub deadline: DateTime<Utc>,
    /// `deadline - now`; negative: overdue.
    pub margin_seconds: i64,
    /// A rotation of the pool has it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_flight: bool,
}

/// A claim whose last rotation failed (`failed`, retried after its backoff) or was cut short by
/// the forced expiry (`expired`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FailureSummary {
    pub node_claim: String,
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_count: Option<u32>,
    /// When a failed claim may be retried (the window gate still applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible_at: Option<DateTime<Utc>>,
}

/// One NodePool, as the controller sees it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PoolSummary {
    pub node_pool: String,
    pub governance: GovernanceSummary,
    /// `N`: the pool's claims, each in-flight rotation's replacement counted once.
    pub nodes: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freeze: Option<FreezeSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<LanesSummary>,
    pub in_flight: Vec<RotationSummary>,
    /// Due in the window open now or next (by its end), earliest deadline first.
    pub due: Vec<DueClaim>,
    /// The nearest forced-expiry deadlines of the pool's claims.
    pub deadlines: Vec<DeadlineSummary>,
    /// What `plan` prints for this pool (layers 1 and 2).
    pub findings: Vec<Finding>,
    pub failures: Vec<FailureSummary>,
    /// `last-failure-at`, and the end of the failure pause it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_pause_until: Option<DateTime<Utc>>,
}

impl PoolSummary {
    /// The pool's entry in its policy's status: what changes only with the pool (its
    /// annotations, its claims) and at a window edge, so writing it costs nothing in a quiet
    /// period.
    pub(crate) fn status(&self) -> NodePoolStatus {
        let rfc = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        NodePoolStatus {
            name: self.node_pool.clone(),
            next_window: self.window.as_ref().and_then(|w| w.start).map(rfc),
            due: to_i32(self.due.len()),
            in_flight: to_i32(self.in_flight.len()),
            max_unavailable: self.max_unavailable.as_ref().map(|l| to_i32(l.in_use)),
            nearest_deadline: self.deadlines.first().map(|d| rfc(d.deadline)),
            nearest_deadline_node_claim: self.deadlines.first().map(|d| d.node_claim.clone()),
        }
    }
}

fn to_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The summary of the pool of `snap` (a governed pool's snapshot carries its assessment and
/// lanes, as a pass builds it; `governance` names the policies).
pub(crate) fn of(snap: &Snapshot, governance: GovernanceSummary) -> PoolSummary {
    let now = snap.now;
    let meta = snap.pool.as_ref().map(|p| &p.metadata);
    let mut out = PoolSummary {
        node_pool: snap.pool_name().to_string(),
        governance,
        nodes: snap.pool_nodes(),
        window: None,
        freeze: None,
        max_unavailable: None,
        in_flight: Vec::new(),
        due: Vec::new(),
        deadlines: Vec::new(),
        findings: snap.assessment().map(|a| a.findings.clone()).unwrap_or_default(),
        failures: Vec::new(),
        last_failure_at: None,
        failure_pause_until: None,
    };
    out.freeze = meta.and_then(|m| annotation(m, Key::Freeze)).map(|raw| {
        let until = parse_time(raw);
        FreezeSummary { value: raw.to_string(), frozen: until.is_none_or(|t| now < t), until }
    });
    out.in_flight = rotations(snap);
    let anchored: Vec<&str> = snap.anchors().into_values().collect();
    let mut deadlines: Vec<DeadlineSummary> = snap
        .pool_claims()
        .filter(|c| !c.is_deleting())
        .filter_map(|c| {
            let name = c.metadata.name.clone()?;
            let deadline = derive::deadline(c.created()?, c.expire_after().ok()?)?;
            let in_flight = anchored.contains(&name.as_str());
            Some(DeadlineSummary {
                node_claim: name,
                deadline,
                margin_seconds: (deadline - now).num_seconds(),
                in_flight,
            })
        })
        .collect();
    deadlines.sort_by(|a, b| a.deadline.cmp(&b.deadline).then(a.node_claim.cmp(&b.node_claim)));
    deadlines.truncate(NEAREST_DEADLINES);
    out.deadlines = deadlines;
    for c in snap.pool_claims() {
        let state = crate::engine::claim_state(annotation(&c.metadata, Key::State));
        let name = c.metadata.name.clone().unwrap_or_default();
        let failed_at = time_of(&c.metadata, Key::FailedAt);
        let retry_count =
            annotation(&c.metadata, Key::RetryCount).map(|r| derive::retry_count_u32(Some(r)));
        if state.is_failed() || state.is_expired() {
            out.failures.push(FailureSummary {
                node_claim: name,
                state: state.name().to_string(),
                failed_at,
                retry_count,
                eligible_at: None,
            });
        }
    }
    let Some(policy) = snap.policy() else { return out };
    let settings = &policy.settings;
    for f in &mut out.failures {
        // An expired claim is never retried; a failed one after its backoff.
        if let (Some(at), Some(count)) = (f.failed_at, f.retry_count) {
            f.eligible_at =
                Some(derive::eligible_at(at, count, settings.retry_backoff, &settings.schedule));
        }
    }
    out.last_failure_at = meta.and_then(|m| time_of(m, Key::LastFailureAt));
    out.failure_pause_until =
        out.last_failure_at.map(|t| t + settings.failure_pause).filter(|t| *t > now);
    if let Some(a) = snap.assessment() {
        out.max_unavailable = Some(LanesSummary {
            in_use: snap.lanes(),
            written: settings.max_unavailable.to_string(),
            reason: a.derived.lanes_reason.clone(),
        });
    }
    let occurrence = policy.current_or_next(now);
    let always_open = settings.schedule.is_always_open();
    if occurrence.is_some() || always_open {
        let zones = settings.schedule.timezones();
        out.window = Some(WindowSummary {
            open: always_open || occurrence.is_some_and(|o| o.contains(now)),
            always_open,
            start: occurrence.map(|o| o.start),
            end: occurrence.map(|o| o.end),
            local: occurrence.map(|o| local_occurrences(&o, &zones)).unwrap_or_default(),
        });
    }
    // Due in that window: a candidate by its end (open 24/7: now), not in flight.
    let by = occurrence.map_or(now, |o| o.end.max(now));
    let mut due: Vec<(RotationOrder<'_>, DueClaim)> = Vec::new();
    for (claim, facts, due_at) in snap.claim_dues() {
        let (Some(f), Some(name)) = (facts, claim.metadata.name.as_deref()) else { continue };
        if anchored.contains(&name) || occurrence.is_none() && !always_open {
            continue;
        }
        if derive::candidacy_due(&f, settings, due_at, by) != Candidacy::Candidate {
            continue;
        }
        let deadline = derive::deadline(f.created, f.expire_after);
        let order = RotationOrder { deadline, created: f.created, name };
        let retry = f.state == ClaimState::Failed;
        due.push((order, DueClaim { node_claim: name.to_string(), due_at, deadline, retry }));
    }
    due.sort_by(|a, b| a.0.cmp(&b.0));
    out.due = due.into_iter().map(|(_, d)| d).collect();
    out
}

/// Every rotation in flight in the pool, by slot.
fn rotations(snap: &Snapshot) -> Vec<RotationSummary> {
    let now = snap.now;
    let Some(meta) = snap.pool.as_ref().map(|p| &p.metadata) else { return Vec::new() };
    let mode = slots::by_slot(meta, Key::RotationMode);
    let paths = slots::by_slot(meta, Key::SurgePath);
    let mut out = Vec::new();
    for (slot, name) in slots::anchors(meta) {
        let claim = snap.claim(name).filter(|c| c.node_pool() == Some(snap.pool_name()));
        let forceful = mode.get(&slot).is_some_and(|m| !m.is_empty());
        let state = claim.map(|c| crate::engine::claim_state(annotation(&c.metadata, Key::State)));
        let stage = match (claim, forceful) {
            (None, _) => "completing".to_string(),
            (Some(_), true) => "forceful".to_string(),
            (Some(_), false) => state.map(|s| s.name().to_string()).unwrap_or_default(),
        };
        let started_at = claim
            .and_then(|c| time_of(&c.metadata, Key::StartedAt))
            .or_else(|| slots::time_at(meta, Key::DrainingAt, slot));
        let arg = [Value::Object(ObjRef::Claim(name.to_string()))];
        let surge_path = paths.get(&slot).map(|p| p.to_string()).or_else(|| {
            match snap.call(Pred::SurgePath, &arg) {
                Value::Sym(p) => Some(p),
                _ => None,
            }
        });
        let placeholder = (!forceful && claim.is_some()).then(|| placeholder_state(snap, name));
        let surge_claim = claim.and_then(|c| annotation(&c.metadata, Key::SurgeClaim));
        out.push(RotationSummary {
            slot,
            node_claim: name.to_string(),
            stage,
            started_at,
            age_seconds: started_at.map(|t| (now - t).num_seconds()),
            surge_path,
            placeholder,
            surge_claim: surge_claim.map(str::to_string),
        });
    }
    out
}

/// Where the rotation's surge placeholder is.
fn placeholder_state(snap: &Snapshot, claim: &str) -> String {
    let Some(pod) = snap.placeholder_for(claim) else { return "not created".into() };
    if let Some(reason) = crate::placeholder::unschedulable_reason(pod) {
        return format!("unschedulable: {reason}");
    }
    let arg = [Value::Object(ObjRef::Claim(claim.to_string()))];
    match (snap.placeholder_host(claim), snap.call(Pred::SurgeReady, &arg)) {
        (Some(host), Value::Bool(true)) => format!("on {host}, ready"),
        (Some(host), _) => format!("on {host}"),
        (None, _) => "pending".into(),
    }
}

fn parse_time(raw: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(raw).ok().map(|t| t.with_timezone(&Utc))
}

fn time_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: Key,
) -> Option<DateTime<Utc>> {
    annotation(meta, key).and_then(parse_time)
}
