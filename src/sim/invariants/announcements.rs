//! Each completion outcome announced at most once per transition that wrote it, success only
//! for a rotation that reached draining (I4).
use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{Announced, Checker, I4, RETRY_COUNT, state_of};
use crate::cluster::CacheView;
use crate::engine::Key;
use crate::karpenter::NodePool;
use crate::sim::actors::{anchors, annotation, slot_annotation};
use crate::sim::observe::Diff;

impl Checker {
    /// I4: each completion outcome is announced at most once per transition that wrote it, and
    /// success only for a rotation that reached draining.
    pub(super) fn announcements(
        &mut self,
        prev: &CacheView,
        post: &CacheView,
        d: &Diff,
        announced: &[Announced],
        now: DateTime<Utc>,
    ) {
        let mut released: BTreeMap<String, String> = BTreeMap::new();
        for (pool, a, b) in &d.pools {
            let before = a.as_deref().map(anchors).unwrap_or_default();
            let after = b.as_deref().map(anchors).unwrap_or_default();
            if let Some(b) = b {
                for (slot, q) in &after {
                    if slot_annotation(&b.metadata, Key::ActiveRotationState, *slot)
                        == Some("draining")
                    {
                        self.reached_draining.insert(q.to_string());
                    }
                }
            }
            for (slot, x) in &before {
                if after.get(slot) == Some(x) {
                    continue;
                }
                let (slot, x) = (*slot, x.to_string());
                released.entry(pool.clone()).or_insert_with(|| x.clone());
                let last = |p: &Option<Arc<NodePool>>| {
                    p.as_ref().and_then(|p| {
                        slot_annotation(&p.metadata, Key::LastRotationAt, slot).map(str::to_string)
                    })
                };
                let key = if last(a) != last(b) && last(b).is_some() {
                    Some("success")
                } else if !post.claims.contains_key(&x) {
                    Some("expired")
                } else {
                    None
                };
                if let Some(k) = key {
                    *self.transitions.entry((pool.clone(), k)).or_insert(0) += 1;
                }
            }
        }
        for (claim, a, b) in &d.claims {
            let was = a.as_deref().and_then(state_of);
            let is = b.as_deref().and_then(state_of);
            if is == Some("draining") {
                self.reached_draining.insert(claim.clone());
            }
            // A retry that fails in the same pass (failed -> pending -> failed) leaves the state
            // as it was; its failure write shows as a higher retry-count.
            let retries = |c: &Option<Arc<crate::karpenter::NodeClaim>>| {
                crate::policy::derive::parse_retry_count(
                    c.as_deref().and_then(|c| annotation(&c.metadata, RETRY_COUNT)),
                )
            };
            let failed_again = is == Some("failed") && retries(b) > retries(a);
            if (was != is || failed_again)
                && let Some(k) = match is {
                    Some("failed") => Some("failure"),
                    Some("expired") => Some("expired"),
                    _ => None,
                }
                && let Some(pool) = self.claim_pool.get(claim).cloned()
            {
                *self.transitions.entry((pool, k)).or_insert(0) += 1;
            }
        }
        let _ = prev;
        for a in announced {
            // The start-up sweep announces without a pool: the claim names it.
            let pool = match (&a.claim, a.pool.is_empty()) {
                (Some(c), true) => self.claim_pool.get(c).cloned().unwrap_or_default(),
                _ => a.pool.clone(),
            };
            let a = &Announced { pool, ..a.clone() };
            let key = (a.pool.clone(), a.what);
            let n = {
                let e = self.announced.entry((a.pool.clone(), a.what, a.kind)).or_insert(0);
                *e += 1;
                *e
            };
            let allowed = self.transitions.get(&key).copied().unwrap_or(0);
            if n > allowed {
                self.fail(
                    I4,
                    now,
                    format!(
                        "{} announced {} #{n} in pool {} but only {allowed} such transition(s) were written{}",
                        a.source,
                        a.what,
                        a.pool,
                        a.claim.as_ref().map_or(String::new(), |c| format!(" (claim {c})"))
                    ),
                    vec![a.pool.clone()],
                );
            }
            if a.what == "success" {
                let claim = a.claim.clone().or_else(|| released.get(&a.pool).cloned());
                match claim {
                    Some(c) if self.reached_draining.contains(&c) => {}
                    Some(c) => self.fail(
                        I4,
                        now,
                        format!(
                            "{} announced success for {c} in pool {}, which never reached draining",
                            a.source, a.pool
                        ),
                        vec![c],
                    ),
                    None => self.fail(
                        I4,
                        now,
                        format!(
                            "{} announced success in pool {} while no rotation was released",
                            a.source, a.pool
                        ),
                        vec![a.pool.clone()],
                    ),
                }
            }
        }
    }
}
