//! The RotationPolicy status view (§5.4), its per-pool entries (recomputed only when the cache,
//! the day or the window moved) and the pool summaries they and `noderotation status` read.
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use chrono::{DateTime, Utc};

use super::{Controller, GovernanceView, PolicyView, policy_selectors, slots, summary};
use crate::cluster::{ApiError, CacheView};
use crate::policy::crd::{NodePoolStatus, RotationPolicy, RotationPolicyStatus};
use crate::policy::invalid::InvalidPolicy;
use crate::policy::resolve::{self, Governance, PoolView, StatusInputs};
use crate::policy::settings::Effective;

/// What a pool's status entry depends on: the cache version (the pool, its claims, the
/// policies), the day (the policy view's window horizon), and the window open now or next.
#[derive(Debug, Clone)]
pub(super) struct StatusKey {
    cache: Weak<CacheView>,
    day: chrono::NaiveDate,
    window: Option<crate::policy::window::Occurrence>,
}

impl StatusKey {
    fn matches(
        &self,
        cache: &Arc<CacheView>,
        day: chrono::NaiveDate,
        window: Option<crate::policy::window::Occurrence>,
    ) -> bool {
        std::ptr::eq(self.cache.as_ptr(), Arc::as_ptr(cache))
            && self.cache.strong_count() > 0
            && self.day == day
            && self.window == window
    }
}

impl Controller {
    /// The policy's validation errors, once per (uid, generation): parsing every policy's
    /// windows on every status pass would dominate it with many policies.
    fn validity(&mut self, policy: &RotationPolicy) -> Option<Arc<InvalidPolicy>> {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let key = (policy.metadata.uid.clone().unwrap_or_default(), policy.metadata.generation);
        if let Some((k, v)) = self.validity.get(&name)
            && *k == key
        {
            return v.clone();
        }
        let invalid = Effective::from_spec(&policy.spec).err().map(Arc::new);
        self.validity.insert(name, (key, invalid.clone()));
        invalid
    }

    /// The summary of every cached pool ([`summary::PoolSummary`]), by name.
    pub(crate) fn pool_summaries(&mut self) -> Vec<summary::PoolSummary> {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        let names: Vec<String> = cache.pools.keys().cloned().collect();
        names.iter().filter_map(|p| self.summary_of(&cache, p, now)).collect()
    }

    fn summary_of(
        &mut self,
        cache: &Arc<CacheView>,
        pool: &str,
        now: DateTime<Utc>,
    ) -> Option<summary::PoolSummary> {
        let np = Arc::clone(cache.pools.get(pool)?);
        let resolved = self.resolved(cache, &np);
        let snap = self.prepared(cache.clone(), np, now);
        let governance = match (&snap.governance, resolved) {
            (GovernanceView::Governed(p), _) => {
                summary::GovernanceSummary::Ready { policy: p.name.clone() }
            }
            (GovernanceView::Conflict(policies), _) => {
                summary::GovernanceSummary::Conflict { policies: policies.clone() }
            }
            (GovernanceView::Invalid(message), Governance::Governed { policy, .. }) => {
                summary::GovernanceSummary::Invalid { policy, message: message.clone() }
            }
            (GovernanceView::Invalid(_) | GovernanceView::Ungoverned, _) => {
                summary::GovernanceSummary::Ungoverned
            }
        };
        Some(summary::of(&snap, governance))
    }

    /// The pool's entry of its governing policy's status (`view` is that policy's), recomputed
    /// only when the cache, the day or the window open now or next moved.
    fn pool_status(
        &mut self,
        cache: &Arc<CacheView>,
        pool: &str,
        view: &PolicyView,
        now: DateTime<Utc>,
    ) -> Option<NodePoolStatus> {
        let schedule = &view.settings.schedule;
        // Open 24/7, what is due follows the clock: no window edge to key it on.
        let window = view.current_or_next(now);
        let keyed = !schedule.is_always_open();
        if keyed
            && let Some((key, status)) = self.pool_status.get(pool)
            && key.matches(cache, now.date_naive(), window)
        {
            return Some(status.clone());
        }
        let status = self.summary_of(cache, pool, now)?.status();
        let key = StatusKey { cache: Arc::downgrade(cache), day: now.date_naive(), window };
        self.pool_status.insert(pool.to_string(), (key, status.clone()));
        Some(status)
    }

    /// The RotationPolicy status view (§5.4); a conflict is a silent requeue. Linear in
    /// policies × pools: every pool is resolved once, and each policy reads only the pools it
    /// governs or ties for.
    pub fn update_policy_status(&mut self) {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        let selectors = policy_selectors(&cache);
        // Not `kube::ResourceExt::labels`: src/reconcile does not name the kube crate (tidy).
        let no_labels = BTreeMap::new();
        let pools: Vec<(String, Governance, bool)> = cache
            .pools
            .values()
            .map(|p| {
                let labels = p.metadata.labels.as_ref().unwrap_or(&no_labels);
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    resolve::resolve(&selectors, labels),
                    !slots::anchors(&p.metadata).is_empty(),
                )
            })
            .collect();
        let views: Vec<PoolView<'_>> = pools
            .iter()
            .map(|(name, g, anchored)| PoolView { name, governance: g, anchored: *anchored })
            .collect();
        let by_policy = resolve::pools_by_policy(&views);
        // Caches of objects that are gone.
        self.validity.retain(|n, _| cache.policies.contains_key(n));
        self.policies.retain(|n, _| cache.policies.contains_key(n));
        self.assessments.retain(|n, _| cache.pools.contains_key(n));
        self.resolved.retain(|n, _| cache.pools.contains_key(n));
        self.pool_status.retain(|n, _| cache.pools.contains_key(n));
        for (name, policy) in &cache.policies {
            let invalid = self.validity(policy);
            let pools = by_policy.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            let mut status = resolve::desired_status(&StatusInputs {
                policy: name,
                generation: policy.metadata.generation,
                invalid: invalid.as_ref().map(|e| e.as_ref()),
                pools,
                previous: policy.status.as_ref(),
                now,
            });
            if invalid.is_none()
                && let Ok(view) = self.policy_view(policy, now)
            {
                let governed =
                    pools.iter().filter(|p| p.governance.policy() == Some(name.as_str()));
                let names: Vec<String> = governed.map(|p| p.name.to_string()).collect();
                status.node_pools =
                    names.iter().filter_map(|p| self.pool_status(&cache, p, &view, now)).collect();
                status.node_pools.sort_by(|a, b| a.name.cmp(&b.name));
                add_policy_summary(&mut status, &view, now);
            }
            if policy.status.as_ref() == Some(&status) {
                continue;
            }
            match self.ctx.cluster.update_policy_status(
                name,
                &status,
                policy.metadata.resource_version.as_deref(),
            ) {
                Ok(()) | Err(ApiError::Conflict) | Err(ApiError::NotFound) => {}
                Err(e) => tracing::warn!(policy = %name, error = %e, "policy status not written"),
            }
        }
    }
}

/// The policy-wide columns of the status: the window open now or next, and the rotations in
/// flight against those allowed, summed over the governed pools.
fn add_policy_summary(status: &mut RotationPolicyStatus, view: &PolicyView, now: DateTime<Utc>) {
    status.next_window = view
        .current_or_next(now)
        .map(|o| o.start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    if !status.node_pools.is_empty() {
        let in_flight: i64 = status.node_pools.iter().map(|p| i64::from(p.in_flight)).sum();
        let allowed: i64 =
            status.node_pools.iter().map(|p| i64::from(p.max_unavailable.unwrap_or(0))).sum();
        status.in_flight = Some(format!("{in_flight}/{allowed}"));
    }
}
