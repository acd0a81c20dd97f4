//! The snapshot as the rules read it: the [`Facts`] implementation (roots, fields, predicates).
use chrono::{DateTime, Duration, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{FOREVER, Snapshot, SweepSubject, annotation, stamp_at, time_annotation};
use crate::engine::{Facts, Field, Key, ObjRef, Pred, Root, Value};
use crate::karpenter::NodeClaim;
use crate::placeholder;
use crate::policy::derive;

impl Snapshot {
    fn meta_of(&self, obj: &ObjRef) -> Option<&ObjectMeta> {
        match obj {
            ObjRef::Pool => self.pool.as_ref().map(|p| &p.metadata),
            ObjRef::Claim(n) => self.claim(n).map(|c| &c.metadata),
            ObjRef::Node(n) => self.node(n).map(|c| &c.metadata),
            ObjRef::Pod(_, n) => self.cache.placeholders.get(n).map(|p| &p.metadata),
            ObjRef::Policy => None,
        }
    }

    fn claim_of(&self, v: &Value) -> Option<&NodeClaim> {
        match v {
            Value::Object(ObjRef::Claim(n)) => self.claim(n),
            _ => None,
        }
    }
}

impl Facts for Snapshot {
    fn root(&self, root: Root) -> Value {
        let sweep = self.sweep.as_ref().map(|(s, _)| s);
        match root {
            Root::Now => Value::Time(self.now),
            Root::Np => match (&self.pool, sweep) {
                (Some(_), None | Some(SweepSubject::Pool(_))) => Value::Object(ObjRef::Pool),
                _ => Value::Nil,
            },
            Root::Policy => match self.policy() {
                Some(_) => Value::Object(ObjRef::Policy),
                None => Value::Nil,
            },
            Root::Cand => match self.anchored_claim() {
                Some(n) => Value::Object(ObjRef::Claim(n.to_string())),
                None => Value::Nil,
            },
            Root::Pick => match &self.pick {
                Some(n) => Value::Object(ObjRef::Claim(n.clone())),
                None => Value::Nil,
            },
            Root::Claim => match sweep {
                Some(SweepSubject::Claim(n)) => Value::Object(ObjRef::Claim(n.clone())),
                _ => Value::Nil,
            },
            Root::Node => match sweep {
                Some(SweepSubject::Node(n)) => Value::Object(ObjRef::Node(n.clone())),
                _ => Value::Nil,
            },
            Root::Pod => match sweep {
                Some(SweepSubject::Pod(ns, n)) => Value::Object(ObjRef::Pod(ns.clone(), n.clone())),
                _ => Value::Nil,
            },
        }
    }

    fn field(&self, obj: &ObjRef, field: Field) -> Value {
        let name = |s: Option<&String>| s.map(|n| Value::Name(n.clone())).unwrap_or(Value::Nil);
        match (field, obj) {
            (Field::NodePoolName, ObjRef::Pool) => {
                name(self.pool.as_ref().and_then(|p| p.metadata.name.as_ref()))
            }
            (Field::NodePoolReplicas, ObjRef::Pool) => self
                .pool
                .as_ref()
                .and_then(|p| p.spec.replicas)
                .map(Value::Int)
                .unwrap_or(Value::Nil),
            (Field::NodePoolGovernance, ObjRef::Pool) => {
                Value::Sym(self.governance.symbol().into())
            }
            (Field::NodeClaimName, ObjRef::Claim(n)) => Value::Name(n.clone()),
            (Field::NodeClaimState, ObjRef::Claim(n)) => {
                // Absent, or a value this version does not know, reads as `none` (the entry
                // write then claims it as pending, which the conditional writes re-check).
                let raw = self.claim(n).and_then(|c| annotation(&c.metadata, Key::State));
                Value::Sym(crate::engine::claim_state(raw).name().to_string())
            }
            (Field::NodeClaimDeletionTimestamp, ObjRef::Claim(n)) => self
                .claim(n)
                .and_then(|c| c.metadata.deletion_timestamp.as_ref())
                .and_then(crate::cluster::chrono_time)
                .map(Value::Time)
                .unwrap_or(Value::Nil),
            (Field::NodeClaimNode, ObjRef::Claim(n)) => self
                .claim(n)
                .and_then(|c| self.claim_node(c))
                .map(|node| Value::Object(ObjRef::Node(node.to_string())))
                .unwrap_or(Value::Nil),
            (Field::NodeClaimInitialized, ObjRef::Claim(n)) => {
                self.claim(n).map(|c| Value::Bool(c.is_initialized())).unwrap_or(Value::Nil)
            }
            (Field::NodeName, ObjRef::Node(n)) => Value::Name(n.clone()),
            (Field::NodeClaim, ObjRef::Node(n)) => {
                name(self.claim_on_node(n).and_then(|c| c.metadata.name.as_ref()))
            }
            (Field::PodName, ObjRef::Pod(_, n)) => Value::Name(n.clone()),
            (Field::PolicyReadyTimeout, ObjRef::Policy) => self
                .policy()
                .map(|p| Value::Duration(p.settings.ready_timeout))
                .unwrap_or(Value::Nil),
            (Field::PolicyCooldownAfter, ObjRef::Policy) => self
                .policy()
                .map(|p| Value::Duration(p.settings.cooldown_after))
                .unwrap_or(Value::Nil),
            (Field::PolicyFailurePause, ObjRef::Policy) => self
                .policy()
                .map(|p| Value::Duration(p.settings.failure_pause))
                .unwrap_or(Value::Nil),
            (Field::PolicyForcefulFallback, ObjRef::Policy) => self
                .policy()
                .map(|p| Value::Bool(p.settings.forceful_fallback))
                .unwrap_or(Value::Nil),
            // A field asked of the wrong kind of object: the checker types fields by kind, so
            // this is a host bug; nil makes the guard fail loudly rather than guess.
            (
                Field::NodePoolName
                | Field::NodePoolReplicas
                | Field::NodePoolGovernance
                | Field::NodeClaimName
                | Field::NodeClaimState
                | Field::NodeClaimDeletionTimestamp
                | Field::NodeClaimNode
                | Field::NodeClaimInitialized
                | Field::NodeName
                | Field::NodeClaim
                | Field::PodName
                | Field::PolicyReadyTimeout
                | Field::PolicyCooldownAfter
                | Field::PolicyFailurePause
                | Field::PolicyForcefulFallback,
                _,
            ) => Value::Nil,
        }
    }

    fn annotation(&self, obj: &ObjRef, key: Key) -> Option<String> {
        annotation(self.meta_of(obj)?, key).map(str::to_string)
    }

    fn call(&self, pred: Pred, args: &[Value]) -> Value {
        let now = self.now;
        let pool_meta = self.pool.as_ref().map(|p| &p.metadata);
        let since = |key: Key| -> Value {
            match pool_meta.and_then(|m| annotation(m, key)) {
                None => Value::Duration(FOREVER),
                // Unreadable (or in the future): treated as just now, so a corrupted anchor
                // never lifts a gate, and re-stamped by the rows that warn about it.
                Some(_) => match pool_meta.and_then(|m| stamp_at(m, key, now)) {
                    Some(t) => Value::Duration(now - t),
                    None => Value::Duration(Duration::zero()),
                },
            }
        };
        let claim = args.first().and_then(|a| self.claim_of(a));
        match pred {
            Pred::InWindow => match (self.policy(), args.first().and_then(Value::as_time)) {
                (Some(p), Some(t)) => Value::Bool(p.in_window(t)),
                _ => Value::Nil,
            },
            Pred::Frozen => match pool_meta.and_then(|m| annotation(m, Key::Freeze)) {
                None => Value::Bool(false),
                Some(_) => match pool_meta.and_then(|m| time_annotation(m, Key::Freeze)) {
                    Some(until) => Value::Bool(now < until),
                    None => Value::Bool(true),
                },
            },
            Pred::FreezeUnreadable => Value::Bool(
                pool_meta.and_then(|m| annotation(m, Key::Freeze)).is_some()
                    && pool_meta.and_then(|m| time_annotation(m, Key::Freeze)).is_none(),
            ),
            Pred::SinceLastRotation => since(Key::LastRotationAt),
            Pred::SinceLastFailure => since(Key::LastFailureAt),
            Pred::Census => Value::Int(self.census),
            Pred::FatalFinding => Value::Bool(self.fatal),
            Pred::Deadline => claim
                .and_then(|c| Some(derive::deadline(c.created()?, c.expire_after().ok()?)))
                .flatten()
                .map(Value::Time)
                .unwrap_or(Value::Nil),
            Pred::TRot => match (self.policy(), claim) {
                (Some(p), Some(c)) => Value::Duration(p.settings.t_rot(self.tgp(c))),
                _ => Value::Nil,
            },
            Pred::SurgeHeadroom => {
                let claim = args.get(1).and_then(|a| self.claim_of(a));
                match (&self.pool, claim) {
                    (Some(pool), Some(c)) => {
                        let others = self.surges_waiting(c.metadata.name.as_deref());
                        let want = placeholder::footprints(std::iter::once(c).chain(others));
                        Value::Bool(placeholder::surge_headroom(pool, &want).is_ok())
                    }
                    _ => Value::Nil,
                }
            }
            Pred::Elapsed => match args.first().and_then(Value::as_time) {
                Some(t) => Value::Duration(now - t),
                None => Value::Nil,
            },
            Pred::EffectiveBackoff => match (self.policy(), claim) {
                (Some(p), Some(c)) => {
                    let Some(failed_at) = stamp_at(&c.metadata, Key::FailedAt, now) else {
                        return Value::Duration(Duration::zero());
                    };
                    let count = derive::retry_count_u32(annotation(&c.metadata, Key::RetryCount));
                    let at = derive::eligible_at(
                        failed_at,
                        count,
                        p.settings.retry_backoff,
                        &p.settings.schedule,
                    );
                    Value::Duration(at - failed_at)
                }
                _ => Value::Nil,
            },
            Pred::PlaceholderClassUnsafe => Value::Bool(
                self.cache
                    .placeholder_class
                    .as_deref()
                    .is_some_and(|c| !placeholder::class_safe(c)),
            ),
            Pred::HasPlaceholder => match claim {
                Some(c) => Value::Bool(
                    self.placeholder_named(c.metadata.name.as_deref().unwrap_or(""))
                        .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
                ),
                None => Value::Nil,
            },
            Pred::PlaceholderOwned => match claim {
                Some(c) => Value::Bool(
                    self.placeholder_for(c.metadata.name.as_deref().unwrap_or("")).is_some(),
                ),
                None => Value::Nil,
            },
            Pred::SurgeReady => match claim {
                Some(c) => {
                    let name = c.metadata.name.as_deref().unwrap_or("");
                    let ready = self.placeholder_for(name).is_some_and(|pod| {
                        let host = pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_deref())
                            .and_then(|n| self.node(n));
                        placeholder::surge_ready(pod, host, self.claim_node(c), self.pool_name())
                    });
                    Value::Bool(ready)
                }
                None => Value::Nil,
            },
            Pred::SurgeHostTaken => match args.first() {
                Some(Value::Name(name)) => Value::Bool(
                    self.placeholder_host(name)
                        .is_some_and(|host| self.node_of_another(name, host)),
                ),
                Some(Value::Nil) => Value::Bool(false),
                _ => Value::Nil,
            },
            Pred::SurgeUnschedulable => match claim {
                Some(c) => Value::Bool(
                    self.placeholder_for(c.metadata.name.as_deref().unwrap_or(""))
                        .is_some_and(|p| placeholder::unschedulable_reason(p).is_some()),
                ),
                None => Value::Nil,
            },
            Pred::PlaceholderNode => claim
                .and_then(|c| self.placeholder_host(c.metadata.name.as_deref().unwrap_or("")))
                .map(|n| Value::Object(ObjRef::Node(n.to_string())))
                .unwrap_or(Value::Nil),
            Pred::InducedClaim => claim
                .and_then(|c| self.induced_claim(c.metadata.name.as_deref().unwrap_or("")))
                .and_then(|c| c.metadata.name.clone())
                .map(Value::Name)
                .unwrap_or(Value::Nil),
            Pred::SurgePath => {
                let Some(c) = claim else { return Value::Nil };
                let Some(started) = stamp_at(&c.metadata, Key::StartedAt, now) else {
                    return Value::Nil;
                };
                let host_created = self
                    .induced_claim(c.metadata.name.as_deref().unwrap_or(""))
                    .and_then(|hc| hc.created());
                match placeholder::surge_path(host_created, started) {
                    Some(path) => Value::Sym(path.as_str().to_string()),
                    None => Value::Nil,
                }
            }
            Pred::DrainBound => match claim {
                Some(c) => Value::Duration(self.drain_bound(c)),
                None => Value::Nil,
            },
            Pred::Anchored => match (args.first(), &self.sweep) {
                (Some(Value::Name(n)), Some((_, anchors))) => Value::Bool(anchors.contains(n)),
                (Some(Value::Name(n)), None) => {
                    Value::Bool(self.anchors().values().any(|a| *a == n.as_str()))
                }
                (Some(Value::Nil), _) => Value::Bool(false),
                _ => Value::Nil,
            },
            Pred::InFlight => Value::Int((self.anchors().len() + self.unanchored_drains()) as i64),
            Pred::Rotating => match args.first() {
                Some(Value::Name(n)) => {
                    let anchored = match &self.sweep {
                        Some((_, anchors)) => anchors.contains(n),
                        None => self.anchors().values().any(|a| *a == n.as_str()),
                    };
                    Value::Bool(anchored || self.claim(n).is_some_and(draining_unfinished))
                }
                Some(Value::Nil) => Value::Bool(false),
                _ => Value::Nil,
            },
            Pred::StuckDrains => Value::Int(self.stuck_drains() as i64),
            Pred::Lanes => Value::Int(self.lanes as i64),
            Pred::ForeignAnchor => Value::Bool(self.foreign_anchor().is_some()),
            Pred::NominatedUnmarked => match claim {
                Some(c) => {
                    Value::Bool(self.nominated_unmarked(c.metadata.name.as_deref().unwrap_or("")))
                }
                None => Value::Nil,
            },
            Pred::SurgeClaimDue => match claim {
                Some(c) => Value::Bool(self.surge_claim_due(c)),
                None => Value::Nil,
            },
            Pred::Latest => {
                let times: Vec<DateTime<Utc>> = args.iter().filter_map(Value::as_time).collect();
                times.into_iter().max().map(Value::Time).unwrap_or(Value::Nil)
            }
        }
    }
}

/// A claim marked draining whose delete is under way: its drain goes on whatever happened to its
/// anchor, until it is gone.
fn draining_unfinished(claim: &NodeClaim) -> bool {
    claim.is_deleting() && annotation(&claim.metadata, Key::State) == Some("draining")
}
