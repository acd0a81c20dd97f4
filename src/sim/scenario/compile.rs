//! The checks of a scenario ([`Scenario::compile`]) and the compiled form they produce: every
//! value parsed once, so the simulation never re-parses.
use std::collections::BTreeMap;

use anyhow::{anyhow, bail};
use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::Taint;

use super::{ActionKind, DurRange, Expect, Failures, FaultRates, NodePick, Resources, Scenario};
use crate::karpenter::quantity_millis;
use crate::policy::crd::RotationPolicy;
use crate::policy::duration::{self, ExpireAfter};
use crate::policy::settings::Effective;

fn dur(s: &str, field: &str) -> anyhow::Result<Duration> {
    duration::parse_with_days(s).map_err(|e| anyhow!("{field}: {e}"))
}

fn resources(map: &BTreeMap<String, String>, field: &str) -> anyhow::Result<Resources> {
    map.iter()
        .map(|(k, v)| {
            let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.clone());
            let m =
                quantity_millis(&q).ok_or_else(|| anyhow!("{field}.{k}: bad quantity {v:?}"))?;
            Ok((k.clone(), m))
        })
        .collect()
}

impl DurRange {
    fn compile(&self, field: &str) -> anyhow::Result<(Duration, Duration)> {
        let (lo, hi) = match self {
            DurRange::Fixed(s) => (dur(s, field)?, dur(s, field)?),
            DurRange::Range { min, max } => (dur(min, field)?, dur(max, field)?),
        };
        if lo < Duration::zero() || hi < lo {
            bail!("{field}: need 0 <= min <= max");
        }
        Ok((lo, hi))
    }
}

// ---------------------------------------------------------------------------------------------
// Compiled form
/// A scenario with every value parsed and checked.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub name: String,
    pub description: String,
    pub start: DateTime<Utc>,
    pub weeks: u32,
    /// `span`, when the scenario gives one: the run's length instead of `weeks`.
    pub span: Option<Duration>,
    pub pools: Vec<PoolPlan>,
    pub policies: Vec<RotationPolicy>,
    pub provisioning: (Duration, Duration),
    pub registration: (Duration, Duration),
    pub ready: (Duration, Duration),
    pub drain: (Duration, Duration),
    pub failures: Failures,
    /// Karpenter's node repair (`karpenter.nodeRepair`).
    pub node_repair: bool,
    pub shortages: Vec<ShortagePlan>,
    /// Karpenter's registration timeout (`delays.registrationTimeout`).
    pub registration_timeout: Duration,
    pub script: Vec<Step>,
    pub faults: FaultPlan,
    pub expect: Expect,
    /// The source text (for the report).
    pub source: Scenario,
}

#[derive(Debug, Clone)]
pub struct PoolPlan {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub nodes: u32,
    pub spare_nodes: u32,
    pub expire_after: ExpireAfter,
    /// As written into the template (Go syntax).
    pub expire_after_go: String,
    pub tgp: Option<Duration>,
    pub tgp_go: Option<String>,
    pub limits: BTreeMap<String, String>,
    pub replicas: Option<i64>,
    pub zones: Vec<String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub allocatable_raw: BTreeMap<String, String>,
    pub pods_per_node: u32,
    pub pod_requests: Resources,
    pub pod_requests_raw: BTreeMap<String, String>,
    /// The workload's PDB `maxUnavailable` (`None`: no PDB).
    pub pdb_max_unavailable: Option<u32>,
    /// The zones the workload pods require (empty: any of the pool's).
    pub workload_zones: Vec<String>,
    pub daemonset: Resources,
    pub daemonset_raw: BTreeMap<String, String>,
    pub age_min: Duration,
    pub age_max: Duration,
    pub batch: Option<Duration>,
    pub jitter: Duration,
    pub consolidate_after: Option<Duration>,
}

impl PoolPlan {
    /// Nodes the pool should have when nothing is in flight.
    pub(crate) fn base_count(&self) -> u32 {
        match self.replicas {
            Some(r) => u32::try_from(r.max(0)).unwrap_or(0),
            None => self.nodes + self.spare_nodes,
        }
    }
}

/// A shortage, compiled.
#[derive(Debug, Clone)]
pub struct ShortagePlan {
    pub pool: String,
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Empty: every zone.
    pub zones: Vec<String>,
}

impl ShortagePlan {
    /// Whether `zone` of `pool` is out of capacity at `now`.
    pub(crate) fn covers(&self, pool: &str, zone: &str, now: DateTime<Utc>) -> bool {
        self.pool == pool
            && self.from <= now
            && now < self.until
            && (self.zones.is_empty() || self.zones.iter().any(|z| z == zone))
    }
}

/// A script step, compiled.
#[derive(Debug, Clone)]
pub struct Step {
    pub at: DateTime<Utc>,
    pub action: ActionKind,
    pub pool: Option<String>,
    pub node: NodePick,
    pub until: Option<DateTime<Utc>>,
    pub policy: Option<RotationPolicy>,
    pub name: Option<String>,
    /// editNodePool: what changes.
    pub edit: Option<PoolEdit>,
    /// removeAnchor, replaceNodePool, deleteNodePool: the claim state of the rotation waited for.
    pub stage: Option<String>,
    /// rejectPlaceholder: the pool's rotation whose placeholder is rejected.
    pub rotation: Option<usize>,
}

/// An edit of a NodePool, compiled.
#[derive(Debug, Clone, Default)]
pub struct PoolEdit {
    pub expire_after: Option<ExpireAfter>,
    pub tgp: Option<Duration>,
    pub limits: Option<BTreeMap<String, String>>,
}

/// Fault rates, compiled.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    pub rates: FaultRates,
    pub cache_lag: Duration,
    pub clock_skew: Duration,
}

impl Scenario {
    /// Parses and checks every value.
    pub fn compile(&self) -> anyhow::Result<Compiled> {
        if self.pools.is_empty() {
            bail!("pools: at least one pool");
        }
        let mut pools = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for (i, p) in self.pools.iter().enumerate() {
            let f = |x: &str| format!("pools[{i}].{x}");
            if !names.insert(p.name.clone()) {
                bail!("{}: duplicate pool name {:?}", f("name"), p.name);
            }
            if p.name.is_empty()
                || !p.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                bail!("{}: a DNS label (lowercase letters, digits, '-')", f("name"));
            }
            let expire_after = ExpireAfter::parse_with_days(&p.expire_after)
                .map_err(|e| anyhow!("{}: {e}", f("expireAfter")))?;
            let tgp = p
                .termination_grace_period
                .as_deref()
                .map(|s| dur(s, &f("terminationGracePeriod")))
                .transpose()?;
            if p.zones.is_empty() {
                bail!("{}: at least one zone", f("zones"));
            }
            if let Some(z) = p.workload.zones.iter().find(|z| !p.zones.contains(z)) {
                bail!(
                    "{}: {z:?} is not a zone of the pool; write some of {}",
                    f("workload.zones"),
                    p.zones.join(", ")
                );
            }
            let allocatable = resources(&p.node, &f("node"))?;
            let pod_requests = resources(&p.workload.requests, &f("workload.requests"))?;
            let daemonset = resources(&p.daemon_set, &f("daemonSet"))?;
            let mut used = daemonset.clone();
            for (k, v) in &pod_requests {
                *used.entry(k.clone()).or_insert(0) += v * i128::from(p.workload.pods_per_node);
            }
            for (k, v) in &used {
                if allocatable.get(k).copied().unwrap_or(0) < *v {
                    bail!(
                        "{}: {} pods of {} plus the DaemonSet do not fit a node ({k})",
                        f("workload"),
                        p.workload.pods_per_node,
                        f("workload.requests")
                    );
                }
            }
            pools.push(PoolPlan {
                name: p.name.clone(),
                labels: p.labels.clone(),
                nodes: p.nodes,
                spare_nodes: p.spare_nodes,
                expire_after,
                expire_after_go: match expire_after {
                    ExpireAfter::Never => "Never".into(),
                    ExpireAfter::After(d) => duration::format(d),
                },
                tgp,
                tgp_go: tgp.map(duration::format),
                limits: p.limits.clone(),
                replicas: p.replicas,
                zones: p.zones.clone(),
                taints: p.taints.clone(),
                allocatable,
                allocatable_raw: p.node.clone(),
                pods_per_node: p.workload.pods_per_node,
                pod_requests,
                pod_requests_raw: p.workload.requests.clone(),
                pdb_max_unavailable: p.workload.pdb.as_ref().map(|b| b.max_unavailable),
                workload_zones: p.workload.zones.clone(),
                daemonset,
                daemonset_raw: p.daemon_set.clone(),
                age_min: dur(&p.age.min, &f("age.min"))?,
                age_max: dur(&p.age.max, &f("age.max"))?,
                batch: p.age.batch.as_deref().map(|s| dur(s, &f("age.batch"))).transpose()?,
                jitter: dur(&p.age.jitter, &f("age.jitter"))?,
                consolidate_after: match p.consolidate_after.as_str() {
                    "Never" => None,
                    other => Some(dur(other, &f("consolidateAfter"))?),
                },
            });
        }
        for (i, policy) in self.policies.iter().enumerate() {
            if policy.metadata.name.as_deref().is_none_or(str::is_empty) {
                bail!("policies[{i}].metadata.name: required");
            }
            // An invalid policy is a legitimate scenario (the controller must not rotate), but
            // a typo in a shipped scenario should be loud: warn through the error text.
            if let Err(e) = Effective::from_spec(&policy.spec) {
                bail!("policies[{i}] ({}): {e}", policy.metadata.name.as_deref().unwrap_or(""));
            }
        }
        let at = |s: &str, field: &str| -> anyhow::Result<DateTime<Utc>> {
            Ok(self.start + dur(s, field)?)
        };
        let mut shortages = Vec::new();
        for (i, s) in self.shortages.iter().enumerate() {
            let Some(pool) = self.pools.iter().find(|p| p.name == s.pool) else {
                bail!("shortages[{i}].pool: no pool {:?}", s.pool);
            };
            if let Some(z) = s.zones.iter().find(|z| !pool.zones.contains(z)) {
                bail!(
                    "shortages[{i}].zones: {z:?} is not a zone of pool {:?} (its zones: {})",
                    s.pool,
                    pool.zones.join(", ")
                );
            }
            let from = at(&s.from, &format!("shortages[{i}].from"))?;
            let until = from + dur(&s.duration, &format!("shortages[{i}].for"))?;
            shortages.push(ShortagePlan {
                pool: s.pool.clone(),
                from,
                until,
                zones: s.zones.clone(),
            });
        }
        let mut script = Vec::new();
        for (i, s) in self.script.iter().enumerate() {
            let f = |x: &str| format!("script[{i}].{x}");
            let when = at(&s.at, &f("at"))?;
            let needs_pool =
                !matches!(s.action, ActionKind::ApplyPolicy | ActionKind::DeletePolicy);
            if needs_pool {
                match &s.pool {
                    Some(p) if names.contains(p) => {}
                    Some(p) => bail!("{}: no pool {p:?}", f("pool")),
                    None => bail!("{}: required for {:?}", f("pool"), s.action),
                }
            }
            let refusal =
                matches!(s.action, ActionKind::RejectPlaceholder | ActionKind::TimeOutPodList);
            let until = match (s.action, &s.duration) {
                (ActionKind::Freeze, Some(d)) => Some(when + dur(d, &f("for"))?),
                (ActionKind::Freeze, None) => bail!("{}: required for freeze", f("for")),
                (_, Some(d)) if refusal => Some(when + dur(d, &f("for"))?),
                _ => None,
            };
            match (s.action, s.rotation) {
                (_, None) => {}
                (ActionKind::RejectPlaceholder, Some(0)) => {
                    bail!("{}: counts from 1 (the first rotation from `at` on)", f("rotation"))
                }
                (ActionKind::RejectPlaceholder, Some(_)) if s.node.is_some() => bail!(
                    "{}: give either node (a claim picked at `at`) or rotation (the pool's n-th \
                     rotation from `at` on), not both",
                    f("rotation")
                ),
                (ActionKind::RejectPlaceholder, Some(_)) => {}
                (other, Some(_)) => bail!(
                    "{}: only rejectPlaceholder counts rotations, not {other:?}; pick a node \
                     with node:",
                    f("rotation")
                ),
            }
            if s.action == ActionKind::ApplyPolicy && s.policy.is_none() {
                bail!("{}: required for applyPolicy", f("policy"));
            }
            if s.action == ActionKind::DeletePolicy && s.name.is_none() {
                bail!("{}: required for deletePolicy", f("name"));
            }
            if matches!(&s.node, Some(NodePick::Name(n)) if n.is_empty()) {
                bail!("{}: a NodeClaim name, e.g. {{name: api-00007}}", f("node.name"));
            }
            let editing = s.expire_after.is_some()
                || s.termination_grace_period.is_some()
                || s.limits.is_some();
            let edit = match (s.action, editing) {
                (ActionKind::EditNodePool, false) => bail!(
                    "{}: editNodePool needs expireAfter, terminationGracePeriod or limits",
                    f("action")
                ),
                (ActionKind::EditNodePool, true) => Some(PoolEdit {
                    expire_after: s
                        .expire_after
                        .as_deref()
                        .map(|e| {
                            ExpireAfter::parse_with_days(e)
                                .map_err(|err| anyhow!("{}: {err}", f("expireAfter")))
                        })
                        .transpose()?,
                    tgp: s
                        .termination_grace_period
                        .as_deref()
                        .map(|d| dur(d, &f("terminationGracePeriod")))
                        .transpose()?,
                    limits: s.limits.clone(),
                }),
                (other, true) => bail!(
                    "{}: expireAfter, terminationGracePeriod and limits belong to editNodePool, \
                     not {other:?}",
                    f("action")
                ),
                (_, false) => None,
            };
            let waits = matches!(
                s.action,
                ActionKind::RemoveAnchor | ActionKind::ReplaceNodePool | ActionKind::DeleteNodePool
            );
            match (s.stage.as_deref(), waits) {
                (None, _) | (Some("pending" | "draining"), true) => {}
                (Some(other), true) => {
                    bail!("{}: {other:?} is not a stage: pending or draining", f("stage"))
                }
                (Some(_), false) => bail!(
                    "{}: belongs to removeAnchor, replaceNodePool and deleteNodePool, not {:?}",
                    f("stage"),
                    s.action
                ),
            }
            for (k, v) in edit.as_ref().and_then(|e| e.limits.as_ref()).into_iter().flatten() {
                let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.clone());
                if quantity_millis(&q).is_none() {
                    bail!("{}: {v:?} is not a quantity", f(&format!("limits.{k}")));
                }
            }
            script.push(Step {
                at: when,
                action: s.action,
                pool: s.pool.clone(),
                node: s.node.clone().unwrap_or_default(),
                until,
                policy: s.policy.as_deref().cloned(),
                name: s.name.clone(),
                edit,
                stage: s.stage.clone(),
                rotation: s.rotation,
            });
        }
        script.sort_by_key(|s| s.at);
        let rates = self.faults.clone().unwrap_or_default();
        let cache_lag = dur(&rates.cache_lag, "faults.cacheLag")?;
        let clock_skew = dur(&rates.clock_skew, "faults.clockSkew")?;
        let delays = &self.delays;
        let registration_timeout = dur(&delays.registration_timeout, "delays.registrationTimeout")?;
        if registration_timeout <= Duration::zero() {
            bail!("delays.registrationTimeout: must be longer than 0s (Karpenter's default: 15m)");
        }
        let span = match &self.span {
            Some(text) => {
                let d = dur(text, "span")?;
                if d <= Duration::zero() || d > Duration::weeks(520) {
                    bail!("span: between 0s and 520 weeks (got {text})");
                }
                Some(d)
            }
            None => None,
        };
        Ok(Compiled {
            name: self.name.clone(),
            description: self.description.clone(),
            start: self.start,
            weeks: self.weeks,
            span,
            pools,
            policies: self.policies.clone(),
            provisioning: delays.provisioning.compile("delays.provisioning")?,
            registration: delays.registration.compile("delays.registration")?,
            ready: delays.ready.compile("delays.ready")?,
            drain: delays.drain.compile("delays.drain")?,
            failures: self.failures.clone(),
            node_repair: self.karpenter.node_repair,
            shortages,
            registration_timeout,
            script,
            faults: FaultPlan { rates, cache_lag, clock_skew },
            expect: self.expect.clone(),
            source: self.clone(),
        })
    }
}
