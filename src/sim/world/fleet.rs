//! The starting fleet: each pool's NodePool and its nodes (aged as the scenario says, Ready, the
//! loaded ones running their workload), the policies, and the events of the script and of the
//! shortages' ends.
use std::sync::Arc;

use chrono::Duration;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{ARCH_LABEL, CAPACITY_TYPE_LABEL, Ev, World, ZONE_LABEL};
use crate::cluster::memory::Rng;
use crate::karpenter::{NodePool, NodePoolSpec, NodeSelectorRequirement};

impl World {
    // -- the fleet -----------------------------------------------------------------------------

    pub(super) fn build_fleet(&mut self, mut rng: Rng) {
        let now = self.now();
        let plan = Arc::clone(&self.plan);
        for (i, p) in plan.pools.iter().enumerate() {
            let mut pool = NodePool::new(&p.name, NodePoolSpec::default());
            pool.metadata.labels = Some(p.labels.clone());
            let t = &mut pool.spec.template.spec;
            t.expire_after = Some(p.expire_after_go.clone());
            t.termination_grace_period.clone_from(&p.tgp_go);
            t.taints.clone_from(&p.taints);
            t.requirements = vec![
                NodeSelectorRequirement {
                    key: ARCH_LABEL.into(),
                    operator: "In".into(),
                    values: vec!["amd64".into()],
                    min_values: None,
                },
                NodeSelectorRequirement {
                    key: CAPACITY_TYPE_LABEL.into(),
                    operator: "In".into(),
                    values: vec!["on-demand".into()],
                    min_values: None,
                },
                NodeSelectorRequirement {
                    key: ZONE_LABEL.into(),
                    operator: "In".into(),
                    values: p.zones.clone(),
                    min_values: None,
                },
            ];
            if !p.limits.is_empty() {
                pool.spec.limits =
                    Some(p.limits.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect());
            }
            pool.spec.replicas = p.replicas;
            if let Err(e) = self.cluster.apply_pool(pool) {
                self.note(format!("cannot create pool {}: {e}", p.name));
            }
            let total = match p.replicas {
                Some(r) => u32::try_from(r.max(0)).unwrap_or(0),
                None => p.nodes + p.spare_nodes,
            };
            for n in 0..total {
                let age = match p.batch {
                    Some(batch) => {
                        let j = u64::try_from(p.jitter.num_milliseconds()).unwrap_or(0);
                        batch + Duration::milliseconds(i64::try_from(rng.below(j + 1)).unwrap_or(0))
                    }
                    None => {
                        let span =
                            u64::try_from((p.age_max - p.age_min).num_milliseconds()).unwrap_or(0);
                        p.age_min
                            + Duration::milliseconds(
                                i64::try_from(rng.below(span + 1)).unwrap_or(0),
                            )
                    }
                };
                let loaded = n < p.nodes;
                let zones = if loaded && !p.workload_zones.is_empty() {
                    &p.workload_zones
                } else {
                    &p.zones
                };
                let zone = zones[usize::try_from(n).unwrap_or(0) % zones.len()].clone();
                let name = self.new_claim(i, zone, now - age, false, false);
                self.launch(&name, now);
                self.register(&name, now);
                self.make_ready(&name, now);
                if loaded {
                    let node = self.claims.get(&name).map(|c| c.node.clone()).unwrap_or_default();
                    for _ in 0..p.pods_per_node {
                        let key = self.create_workload_pod(i);
                        self.bind_pod(&key, &node, now);
                    }
                }
            }
            self.update_pool_status(i);
        }
        for (i, policy) in plan.policies.iter().enumerate() {
            if let Err(e) = self.cluster.apply_policy(policy.clone()) {
                self.note(format!("cannot create policy #{i}: {e}"));
            }
        }
        for (i, step) in plan.script.iter().enumerate() {
            self.at(step.at, Ev::Operator(i));
        }
        // Shortages end: pending pods may provision again.
        for s in plan.shortages.clone() {
            if let Some(i) = self.pool_index(&s.pool) {
                self.at(s.until, Ev::Provision(i));
            }
        }
        self.notes.clear();
    }
}
