//! Which policy governs a pool in a store snapshot, with its effective settings (memoized per
//! policy resourceVersion: compiling a window schedule is not free).
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use kube::ResourceExt;

use crate::cluster::CacheView;
use crate::karpenter::NodePool;
use crate::policy::derive;
use crate::policy::feasibility::{self, PoolFacts};
use crate::policy::resolve::{self, Governance, PolicySelector};
use crate::policy::settings::Effective;

/// How resolution ended for a pool.
#[derive(Debug, Clone)]
#[allow(dead_code, reason = "read through Debug: an invariant's message prints the resolution")]
pub(crate) enum Governed {
    Policy { name: String, settings: Arc<Effective> },
    Invalid(String),
    Conflict(Vec<String>),
    Ungoverned,
}

impl Governed {
    pub(crate) fn settings(&self) -> Option<&Arc<Effective>> {
        match self {
            Governed::Policy { settings, .. } => Some(settings),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
pub struct Gov {
    memo: BTreeMap<(String, String), Result<Arc<Effective>, String>>,
    /// Each pool's last resolution, kept while its labels and the policies (names and
    /// resourceVersions) it was resolved against are the same: the invariants ask for it
    /// several times a step, and resolving walks every policy's selector.
    last: HashMap<String, Resolved>,
}

#[derive(Debug)]
struct Resolved {
    labels: Option<BTreeMap<String, String>>,
    policies: Vec<(String, String)>,
    governed: Governed,
}

/// The policies of `view` by name and resourceVersion, `None` if one has no resourceVersion
/// (nothing then says it did not change).
fn policy_versions(view: &CacheView) -> Option<Vec<(String, String)>> {
    (view.policies.iter())
        .map(|(name, p)| Some((name.clone(), p.metadata.resource_version.clone()?)))
        .collect()
}

fn same_policies(kept: &[(String, String)], view: &CacheView) -> bool {
    kept.len() == view.policies.len()
        && kept.iter().zip(&view.policies).all(|((n, rv), (name, p))| {
            n == name && p.metadata.resource_version.as_deref() == Some(rv.as_str())
        })
}

impl Gov {
    pub(crate) fn of(&mut self, view: &CacheView, pool: &NodePool) -> Governed {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        if let Some(r) = self.last.get(name)
            && r.labels == pool.metadata.labels
            && same_policies(&r.policies, view)
        {
            return r.governed.clone();
        }
        let governed = self.resolve(view, pool);
        if let Some(policies) = policy_versions(view) {
            let labels = pool.metadata.labels.clone();
            let kept = Resolved { labels, policies, governed: governed.clone() };
            self.last.insert(name.to_string(), kept);
        }
        governed
    }

    fn resolve(&mut self, view: &CacheView, pool: &NodePool) -> Governed {
        let selectors: Vec<PolicySelector<'_>> = view
            .policies
            .iter()
            .map(|(name, p)| PolicySelector { name, selector: &p.spec.node_pool_selector })
            .collect();
        match resolve::resolve(&selectors, pool.labels()) {
            Governance::Ungoverned => Governed::Ungoverned,
            Governance::Conflict { policies, .. } => Governed::Conflict(policies),
            Governance::Governed { policy, .. } => {
                let Some(p) = view.policies.get(&policy) else { return Governed::Ungoverned };
                let rv = p.metadata.resource_version.clone().unwrap_or_default();
                let key = (policy.clone(), rv);
                let settings = self
                    .memo
                    .entry(key)
                    .or_insert_with(|| {
                        Effective::from_spec(&p.spec).map(Arc::new).map_err(|e| e.to_string())
                    })
                    .clone();
                match settings {
                    Ok(settings) => Governed::Policy { name: policy, settings },
                    Err(e) => Governed::Invalid(e),
                }
            }
        }
    }
}

/// The pool facts feasibility reads, from the NodePool object.
pub(crate) fn pool_facts(pool: &NodePool) -> PoolFacts {
    PoolFacts {
        expire_after: pool
            .expire_after()
            .unwrap_or(crate::policy::duration::ExpireAfter::KARPENTER_DEFAULT),
        termination_grace_period: pool.termination_grace_period().ok().flatten(),
        nodes: pool.node_count(),
        exhausted_limits: pool.exhausted_limits(),
        static_pool: pool.is_static(),
    }
}

/// The pool's claims in `view` that are not being deleted.
fn live_claims(view: &CacheView, pool: &str) -> usize {
    view.claims
        .values()
        .filter(|c| c.node_pool() == Some(pool) && c.metadata.deletion_timestamp.is_none())
        .count()
}

/// The most rotations `pool` may have in flight under `settings`, over the pool's claims in
/// `view` that are not being deleted: `spec.surge.maxUnavailable`, or with `auto` its
/// `maxUnavailableLimit` ([`crate::policy::settings::MaxUnavailable::ceiling`]). Invariants
/// I12 and I13 hold the controller to it: `auto` never puts more in flight than its limit.
pub(crate) fn lanes(settings: &Effective, view: &CacheView, pool: &str) -> usize {
    settings.max_unavailable.ceiling(live_claims(view, pool))
}

/// The lanes the controller uses for `pool` at `now` (`auto`: what feasibility says the pool
/// needs, within its limit), over the pool's claims in `view` that are not being deleted.
pub(crate) fn lanes_in_use(
    settings: &Effective,
    view: &CacheView,
    pool: &NodePool,
    now: DateTime<Utc>,
) -> usize {
    let name = pool.metadata.name.as_deref().unwrap_or("");
    let facts = PoolFacts { nodes: Some(live_claims(view, name) as u64), ..pool_facts(pool) };
    feasibility::assess(settings, &facts, now).derived.lanes
}

/// A layer-1 fatal finding for the pool under `settings` at `now`.
pub(crate) fn fatal(settings: &Effective, pool: &NodePool, now: DateTime<Utc>) -> bool {
    feasibility::assess(settings, &pool_facts(pool), now).has_fatal()
}

/// `leadTime = K*P + t_rot` of the pool's template, `None` without windows.
pub(crate) fn lead_time(
    settings: &Effective,
    pool: &NodePool,
    now: DateTime<Utc>,
) -> Option<Duration> {
    let p = settings.schedule.period(now)?;
    let tgp = pool.termination_grace_period().ok().flatten();
    Some(derive::lead_time(settings.min_rotation_chances, p, settings.t_rot(tgp)))
}

/// The claims of `pool` (in the store at `now`) that its lanes cannot reach within their chances
/// from `now` ([`crate::policy::lookahead::reachable_lanes`], with the lanes the controller
/// uses): a fleet whose deadlines start out crowded. Invariant 8 does not hold the controller to
/// them.
pub(crate) fn unreachable_at_start(
    settings: &Effective,
    view: &CacheView,
    pool: &NodePool,
    now: DateTime<Utc>,
) -> Vec<String> {
    use crate::policy::derive::{ClaimFacts, RotationOrder};
    use crate::policy::lookahead::OpenTime;
    let Some(period) = settings.schedule.period(now) else { return Vec::new() };
    let open = OpenTime::of(&settings.schedule, now);
    let name = pool.metadata.name.as_deref().unwrap_or("");
    let mut queue: Vec<(RotationOrder<'_>, DateTime<Utc>)> = view
        .claims
        .iter()
        .filter(|(_, c)| c.node_pool() == Some(name))
        .filter_map(|(n, c)| {
            let facts = ClaimFacts::idle(
                c.created()?,
                c.expire_after().ok()?,
                c.termination_grace_period().ok().flatten(),
            );
            let due = derive::due_after_listed(&facts, settings, period, open.occurrences())?;
            let deadline = derive::deadline(facts.created, facts.expire_after)?;
            let order = RotationOrder { deadline: Some(deadline), created: facts.created, name: n };
            Some((order, due))
        })
        .collect();
    queue.sort();
    let dues: Vec<DateTime<Utc>> = queue.iter().map(|(_, due)| *due).collect();
    let tgp = pool.termination_grace_period().ok().flatten();
    let slot = settings.t_rot_est(tgp) + settings.cooldown_after;
    let lanes = lanes_in_use(settings, view, pool, now);
    crate::policy::lookahead::reachable_lanes(now, &dues, &open, slot, lanes)
        .into_iter()
        .zip(&queue)
        .filter(|(reached, _)| !reached)
        .map(|(_, (order, _))| order.name.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::karpenter::NodeClaim;
    use crate::policy::settings::tests::spec_with;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn view(claims: usize, deleting: usize) -> CacheView {
        let mut view = CacheView::default();
        for i in 0..claims + deleting {
            let name = format!("c{i}");
            let labels = [(crate::karpenter::NODEPOOL_LABEL.to_string(), "big".to_string())];
            let deletion =
                (i >= claims).then_some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            let meta = ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels.into_iter().collect()),
                deletion_timestamp: deletion,
                ..Default::default()
            };
            view.claims.insert(name, Arc::new(NodeClaim { metadata: meta, ..Default::default() }));
        }
        view
    }

    fn settings(m: &str, limit: Option<IntOrString>) -> Effective {
        let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
        spec.surge.max_unavailable = match m.parse::<i32>() {
            Ok(n) => IntOrString::Int(n),
            Err(_) => IntOrString::String(m.into()),
        };
        spec.surge.max_unavailable_limit = limit;
        Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"))
    }

    /// I12 and I13 hold `auto` to its limit (10% of the live claims unless set), whatever number
    /// the controller computed; a fixed value to itself.
    #[test]
    fn the_invariants_hold_auto_to_its_limit() {
        assert_eq!(lanes(&settings("auto", None), &view(30, 5), "big"), 3, "10% of 30 live");
        assert_eq!(lanes(&settings("auto", None), &view(31, 0), "big"), 4, "rounded up");
        let limit = Some(IntOrString::Int(7));
        assert_eq!(lanes(&settings("auto", limit), &view(300, 0), "big"), 7);
        assert_eq!(lanes(&settings("2", None), &view(300, 0), "big"), 2);
    }
}
