//! The operator: the scenario's script (edits of a pool, cordons, do-not-disrupt, deleted
//! claims, removed anchors, a replaced or deleted NodePool, an impersonated placeholder) and the
//! API server's refusals it schedules.
use std::sync::Arc;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::Pod;

use super::{
    CLAIM_STATE, DO_NOT_DISRUPT, FREEZE_ANNOTATION, SURGE_FOR, anchors, first_anchor,
    node_unschedulable,
};
use crate::cluster::{ObjectKind, ObjectRef};
use crate::engine::Key;
use crate::karpenter::NODEPOOL_LABEL;
use crate::policy::duration::format_human;
use crate::reconcile::slots::slot_key;
use crate::sim::scenario::{self, ActionKind, NodePick};
use crate::sim::world::{self, Ev, World};

impl World {
    // -- operator ------------------------------------------------------------------------------

    /// `kubectl edit nodepool`: the template and limits in the store, and what Karpenter uses
    /// from now on (new claims take the template's values; the limits apply at once).
    fn edit_pool(&mut self, pool: usize, edit: &scenario::PoolEdit) {
        let plan = Arc::make_mut(&mut self.plan);
        let p = &mut plan.pools[pool];
        let mut what = Vec::new();
        if let Some(e) = edit.expire_after {
            p.expire_after = e;
            p.expire_after_go = match e {
                crate::policy::duration::ExpireAfter::Never => "Never".into(),
                crate::policy::duration::ExpireAfter::After(d) => {
                    crate::policy::duration::format(d)
                }
            };
            what.push(format!("expireAfter {}", p.expire_after_go));
        }
        if let Some(tgp) = edit.tgp {
            p.tgp = Some(tgp);
            p.tgp_go = Some(crate::policy::duration::format(tgp));
            what.push(format!("terminationGracePeriod {}", format_human(tgp)));
        }
        if let Some(limits) = &edit.limits {
            p.limits.clone_from(limits);
            what.push(format!("limits {limits:?}"));
        }
        let (name, expire, tgp_go, limits) =
            (p.name.clone(), p.expire_after_go.clone(), p.tgp_go.clone(), p.limits.clone());
        self.cluster.update_pool(&name, |np| {
            let t = &mut np.spec.template.spec;
            t.expire_after = Some(expire);
            t.termination_grace_period = tgp_go;
            np.spec.limits = (!limits.is_empty()).then(|| {
                limits
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.clone()),
                        )
                    })
                    .collect()
            });
        });
        self.note(format!("kubectl edit nodepool {name}: {}", what.join(", ")));
        // Room under new limits: pending pods may get a claim now.
        self.request_provisioning(pool);
    }

    fn pick_claim(&mut self, pool: usize, pick: &NodePick) -> Option<String> {
        let mut live: Vec<(DateTime<Utc>, String)> = self
            .claims
            .iter()
            .filter(|(_, c)| {
                c.pool == pool && c.deleting.is_none() && c.phase == world::Phase::Ready
            })
            .map(|(n, c)| (c.created, n.clone()))
            .collect();
        live.sort();
        match pick {
            NodePick::Oldest => live.first().map(|x| x.1.clone()),
            NodePick::Newest => live.last().map(|x| x.1.clone()),
            NodePick::Random => self.rng.pick(&live).map(|x| x.1.clone()),
            NodePick::Anchored => {
                // The rotation in flight (the lowest slot's, with several).
                let np = self.snap.pools.get(self.pool_name(pool));
                first_anchor(np.map(|p| p.as_ref()), |a| {
                    self.claims.get(a).is_some_and(|c| c.deleting.is_none())
                })
                .or_else(|| live.first().map(|x| x.1.clone()))
            }
            NodePick::Name(name) => live.iter().any(|x| x.1 == *name).then(|| name.clone()),
        }
    }

    /// `rejectPlaceholder` and `timeOutPodList`: the API server refuses from now on (until the
    /// step's `for` ends). Not an edit of the pool: the start gates do not see it.
    fn refuse(&mut self, i: usize) {
        use crate::cluster::memory::Rejected;
        use world::Refusal;
        let plan = Arc::clone(&self.plan);
        let Some(step) = plan.script.get(i) else { return };
        let Some(pool) = step.pool.as_deref().and_then(|p| self.pool_index(p)) else { return };
        let pool_name = self.pool_name(pool).to_string();
        let refusal = match (step.action, step.rotation) {
            (ActionKind::RejectPlaceholder, Some(nth)) => {
                Refusal::Placeholder(Rejected::Nth { pool: pool_name.clone(), nth })
            }
            _ => {
                let Some(claim) = self.pick_claim(pool, &step.node) else {
                    self.note(format!(
                        "no Ready claim of pool {pool_name} to refuse: nothing done"
                    ));
                    return;
                };
                if step.action == ActionKind::RejectPlaceholder {
                    Refusal::Placeholder(Rejected::Claim(claim))
                } else {
                    let node = self.claims.get(&claim).map(|c| c.node.clone()).unwrap_or_default();
                    Refusal::PodList(node)
                }
            }
        };
        match &refusal {
            Refusal::Placeholder(rule) => {
                self.cluster.reject_placeholder(
                    rule.clone(),
                    "exceeded quota: placeholders, requested: pods=1, used: pods=0, limited: pods=0",
                );
                self.note(format!("admission rejects every placeholder of {rule:?} (403)"));
            }
            Refusal::PodList(node) => {
                self.cluster.time_out_pod_list(node, true);
                self.note(format!("every list of the pods on node {node} times out"));
            }
        }
        if let Some(until) = step.until {
            self.at(until, Ev::OperatorEnd(i));
        }
        self.refusals.insert(i, refusal);
    }

    /// The end of a script step's refusal.
    pub(super) fn lift_refusal(&mut self, i: usize) {
        use world::Refusal;
        match self.refusals.remove(&i) {
            Some(Refusal::Placeholder(rule)) => {
                self.cluster.admit_placeholder(&rule);
                self.note(format!("admission admits the placeholder of {rule:?} again"));
            }
            Some(Refusal::PodList(node)) => {
                self.cluster.time_out_pod_list(&node, false);
                self.note(format!("the pods on node {node} list again"));
            }
            None => {}
        }
    }

    pub(super) fn operate(&mut self, i: usize) {
        let now = self.now();
        let plan = Arc::clone(&self.plan);
        let Some(step) = plan.script.get(i) else { return };
        let pool = step.pool.as_deref().and_then(|p| self.pool_index(p));
        let pool_name = step.pool.clone().unwrap_or_default();
        match step.action {
            ActionKind::RejectPlaceholder | ActionKind::TimeOutPodList => {
                // The cluster's behaviour, not an operator's edit of the pool: return before the
                // pool is marked as touched (the invariants' tolerance for operator edits).
                self.refuse(i);
                return;
            }
            ActionKind::Freeze => {
                let until = step.until.unwrap_or(now).to_rfc3339_opts(SecondsFormat::Secs, true);
                self.cluster.update_pool(&pool_name, |p| {
                    p.metadata
                        .annotations
                        .get_or_insert_default()
                        .insert(FREEZE_ANNOTATION.into(), until);
                });
            }
            ActionKind::Unfreeze => {
                self.cluster.update_pool(&pool_name, |p| {
                    if let Some(a) = p.metadata.annotations.as_mut() {
                        a.remove(FREEZE_ANNOTATION);
                    }
                });
            }
            ActionKind::ApplyPolicy => {
                if let Some(policy) = &step.policy
                    && let Err(e) = self.cluster.apply_policy(policy.clone())
                {
                    self.note(format!("apply policy failed: {e}"));
                }
            }
            ActionKind::DeletePolicy => {
                let name = step.name.clone().unwrap_or_default();
                self.cluster.delete_now(&ObjectRef::cluster(ObjectKind::RotationPolicy, &name));
            }
            ActionKind::Cordon | ActionKind::DoNotDisrupt | ActionKind::DeleteClaim => {
                let Some(pool) = pool else { return };
                let Some(claim) = self.pick_claim(pool, &step.node) else {
                    let why = match &step.node {
                        NodePick::Name(n) => format!(
                            "nodeclaim {n} is not a Ready claim of pool {pool_name}: nothing done"
                        ),
                        _ => "no node to act on".to_string(),
                    };
                    self.note(why);
                    return;
                };
                let node = self.claims.get(&claim).map(|c| c.node.clone()).unwrap_or_default();
                match step.action {
                    ActionKind::Cordon => {
                        let already =
                            self.snap.nodes.get(&node).is_some_and(|n| node_unschedulable(n));
                        if !already {
                            self.cluster.update_node(&node, |n| {
                                n.spec.get_or_insert_default().unschedulable = Some(true);
                            });
                            self.operator_cordons.insert(node.clone());
                            self.note(format!("cordoned {node} ({claim})"));
                        }
                    }
                    ActionKind::DoNotDisrupt => {
                        self.cluster.update_node(&node, |n| {
                            n.metadata
                                .annotations
                                .get_or_insert_default()
                                .insert(DO_NOT_DISRUPT.into(), "true".into());
                        });
                        self.operator_protected.insert(node.clone());
                        self.operator_opted_out.insert(claim.clone());
                        self.note(format!("do-not-disrupt on {node} ({claim})"));
                    }
                    _ => {
                        self.note(format!("kubectl delete nodeclaim {claim}"));
                        self.delete_claim(&claim);
                    }
                }
            }
            ActionKind::EditNodePool => {
                let (Some(pool), Some(edit)) = (pool, step.edit.as_ref()) else { return };
                self.edit_pool(pool, edit);
            }
            ActionKind::RemoveAnchor | ActionKind::ReplaceNodePool | ActionKind::DeleteNodePool => {
                let Some(pool) = pool else { return };
                // The rotation in flight (the lowest slot's, with several) and its slot.
                let stage = |claim: &str| {
                    let state = self.snap.claims.get(claim).and_then(|c| {
                        c.metadata.annotations.as_ref()?.get(CLAIM_STATE).map(String::as_str)
                    });
                    step.stage.as_deref().is_none_or(|want| state == Some(want))
                };
                let anchored = self.snap.pools.get(&pool_name).and_then(|p| {
                    anchors(p)
                        .into_iter()
                        .find(|(_, a)| stage(a))
                        .map(|(slot, a)| (slot, a.to_string()))
                });
                let anchor = anchored.as_ref().map(|(_, a)| a.clone());
                let key = slot_key(Key::ActiveRotation, anchored.map_or(0, |(slot, _)| slot));
                // Mid-rotation: wait for one (every 10s, for up to a day).
                if anchor.is_none() && now - step.at < Duration::days(1) {
                    self.at(now + Duration::seconds(10), Ev::Operator(i));
                    return;
                }
                if let Some(claim) = &anchor {
                    self.operator_unanchored.insert(pool_name.clone(), (claim.clone(), now));
                }
                match step.action {
                    ActionKind::RemoveAnchor => {
                        self.cluster.update_pool(&pool_name, |p| {
                            if let Some(a) = p.metadata.annotations.as_mut() {
                                a.remove(&key);
                            }
                        });
                        self.note(format!("removed the anchor ({anchor:?}) of pool {pool_name}"));
                    }
                    ActionKind::ReplaceNodePool => {
                        self.cluster.update_pool(&pool_name, |p| {
                            if let Some(a) = p.metadata.annotations.as_mut() {
                                a.retain(|k, _| !k.starts_with("noderotation.io/"));
                            }
                        });
                        self.note(format!(
                            "replaced pool {pool_name} from a manifest without our annotations (anchor {anchor:?})"
                        ));
                    }
                    _ => {
                        self.deleted_pools.insert(pool);
                        self.cluster
                            .delete_now(&ObjectRef::cluster(ObjectKind::NodePool, &pool_name));
                        let claims: Vec<String> = self
                            .claims
                            .iter()
                            .filter(|(_, c)| c.pool == pool && c.deleting.is_none())
                            .map(|(n, _)| n.clone())
                            .collect();
                        self.note(format!(
                            "kubectl delete nodepool {pool_name} (anchor {anchor:?}): Karpenter deletes its {} claims",
                            claims.len()
                        ));
                        for c in claims {
                            self.delete_claim(&c);
                        }
                    }
                }
            }
            ActionKind::ImpersonatePlaceholder => {
                let Some(pool) = pool else { return };
                let anchor =
                    first_anchor(self.snap.pools.get(&pool_name).map(|p| p.as_ref()), |a| {
                        self.claims.get(a).is_some_and(|c| c.deleting.is_none())
                    });
                let Some(claim) = anchor else {
                    if now - step.at < Duration::days(1) {
                        self.at(now + Duration::seconds(10), Ev::Operator(i));
                    }
                    return;
                };
                self.impersonate_placeholder(pool, &claim);
            }
            ActionKind::Uncordon | ActionKind::AllowDisrupt => {
                let Some(pool) = pool else { return };
                let set = if step.action == ActionKind::Uncordon {
                    &self.operator_cordons
                } else {
                    &self.operator_protected
                };
                let node = set
                    .iter()
                    .find(|n| self.nodes.get(*n).is_some_and(|x| x.pool == pool))
                    .cloned();
                let Some(node) = node else { return };
                if step.action == ActionKind::Uncordon {
                    self.operator_cordons.remove(&node);
                    self.cluster.update_node(&node, |n| {
                        n.spec.get_or_insert_default().unschedulable = None;
                    });
                } else {
                    self.operator_protected.remove(&node);
                    self.cluster.update_node(&node, |n| {
                        if let Some(a) = n.metadata.annotations.as_mut() {
                            a.remove(DO_NOT_DISRUPT);
                        }
                    });
                }
            }
        }
        self.operator_touched.insert(pool, now);
        self.request_scheduling();
    }

    /// Replaces `claim`'s placeholder with a pod of the same name, managed-by label and
    /// `surge-for`, Running on another Ready node of the pool (the newest): capacity the
    /// controller did not reserve.
    fn impersonate_placeholder(&mut self, pool: usize, claim: &str) {
        let name = crate::placeholder::placeholder_name(claim);
        let ns = world::CONTROLLER_NS;
        if self.cluster.delete_now(&ObjectRef::pod(ns, &name)) {
            self.note(format!("deleted the controller's {name}"));
        }
        let own = self.claims.get(claim).map(|c| c.node.clone());
        let host = self
            .claims
            .iter()
            .filter(|(n, c)| {
                c.pool == pool
                    && c.deleting.is_none()
                    && c.phase == world::Phase::Ready
                    && n.as_str() != claim
                    && Some(&c.node) != own.as_ref()
            })
            .max_by_key(|(n, c)| (c.created, (*n).clone()))
            .map(|(_, c)| c.node.clone());
        let Some(host) = host else {
            self.note(format!(
                "no other Ready node in pool {}: nothing impersonated",
                self.pool_name(pool)
            ));
            return;
        };
        let pod: Pod = match serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "namespace": world::CONTROLLER_NS,
                "labels": {crate::cluster::MANAGED_BY_LABEL: crate::cluster::MANAGED_BY_VALUE},
                "annotations": {SURGE_FOR: claim},
            },
            "spec": {
                "nodeName": host,
                "nodeSelector": {NODEPOOL_LABEL: self.pool_name(pool)},
                "containers": [{"name": "pause", "image": "pause",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
            },
            "status": {"phase": "Running"},
        })) {
            Ok(p) => p,
            Err(e) => {
                self.note(format!("impersonation pod: {e}"));
                return;
            }
        };
        match self.cluster.apply_pod(pod) {
            Ok(_) => {
                self.note(format!("created {name} for {claim} on {host}: not the controller's"))
            }
            Err(e) => self.note(format!("impersonation pod: {e}")),
        }
    }
}
