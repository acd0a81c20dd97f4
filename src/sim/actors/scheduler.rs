//! The kubelet and the scheduler: Pending pods bound to Ready, uncordoned, untainted nodes of
//! their pool with room, workload first, and a workload pod preempting placeholders.
use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::ResourceExt;

use super::{affinity_admits, node_unschedulable, placeholder_node, tolerates};
use crate::cluster::ObjectRef;
use crate::karpenter::NODEPOOL_LABEL;
use crate::policy::resolve::to_time;
use crate::sim::scenario::Resources;
use crate::sim::world::{self, PodKey, World, add, fits, pod_requests, run_on, sub};

impl World {
    // -- kubelet / scheduler ---------------------------------------------------------------------

    /// Nodes a pod of `pool` may land on, with their free capacity.
    pub(super) fn usable_nodes(&mut self) -> BTreeMap<String, (usize, Resources)> {
        let mut out = BTreeMap::new();
        let snap = Arc::clone(&self.snap);
        // The three maps are keyed by node name: walked side by side instead of looked up.
        let mut cached = snap.nodes.iter().peekable();
        let mut bound = self.node_requests.iter().peekable();
        for (name, n) in &self.nodes {
            if !n.ready || n.disrupted {
                continue;
            }
            while cached.next_if(|(k, _)| k.as_str() < name.as_str()).is_some() {}
            let Some(node) = cached.peek().filter(|(k, _)| *k == name).map(|(_, v)| *v) else {
                continue;
            };
            if node_unschedulable(node) || node.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let mut free = self.plan.pools[n.pool].allocatable.clone();
            while bound.next_if(|(k, _)| k.as_str() < name.as_str()).is_some() {}
            if let Some((_, used)) = bound.peek().filter(|(k, _)| *k == name) {
                sub(&mut free, used);
            }
            out.insert(name.clone(), (n.pool, free));
        }
        let bound: Vec<(String, Arc<Pod>)> = snap
            .placeholders
            .values()
            .filter_map(|p| Some((placeholder_node(p)?.to_string(), Arc::clone(p))))
            .collect();
        for (node, ph) in bound {
            let req = self.placeholder_requests(&ph);
            if let Some((_, free)) = out.get_mut(&node) {
                sub(free, &req);
            }
        }
        out
    }

    pub(super) fn schedule_pass(&mut self) {
        let now = self.now();
        let snap = Arc::clone(&self.snap);
        let pending_placeholders: Vec<Arc<Pod>> = snap
            .placeholders
            .values()
            .filter(|p| placeholder_node(p).is_none() && p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        if self.pending.is_empty() && pending_placeholders.is_empty() {
            return;
        }
        let mut nodes = self.usable_nodes();
        let best = |nodes: &BTreeMap<String, (usize, Resources)>,
                    ok: &dyn Fn(&str, usize) -> bool,
                    req: &Resources| {
            nodes
                .iter()
                // The cheap resource check first: most nodes of a big pool are full.
                .filter(|(name, (pool, free))| fits(free, req) && ok(name, *pool))
                // The most free CPU, then the first name: compared in place, not cloned.
                .max_by(|(a, (_, fa)), (b, (_, fb))| {
                    let cpu = |f: &Resources| f.get("cpu").copied().unwrap_or(0);
                    cpu(fa).cmp(&cpu(fb)).then_with(|| b.cmp(a))
                })
                .map(|(name, _)| name.clone())
        };
        // Workload first: it has the higher priority and may preempt placeholders.
        let pending: Vec<PodKey> = self.pending.iter().cloned().collect();
        for key in pending {
            let Some(pod) = self.pods.get(&key) else { continue };
            let pool = pod.pool;
            let req = Arc::clone(&pod.requests);
            let same_pool = |node: &str, p: usize| p == pool && self.in_workload_zone(pool, node);
            let mut target = best(&nodes, &same_pool, &req);
            if target.is_none() {
                target = self.preempt_for(&mut nodes, pool, &req);
            }
            match target {
                Some(node) => {
                    if let Some((_, free)) = nodes.get_mut(&node) {
                        sub(free, &req);
                    }
                    self.bind_pod(&key, &node, now);
                }
                None => {
                    if let Some(p) = self.pods.get_mut(&key)
                        && !p.marked_unschedulable
                    {
                        p.marked_unschedulable = true;
                        self.cluster.update_pod(&key.0, &key.1, |pod| {
                            pod.status.get_or_insert_default().conditions =
                                Some(vec![unschedulable(now)]);
                        });
                    }
                    // Karpenter looks at every pending pod on each batch, not only new ones.
                    self.request_provisioning(pool);
                }
            }
        }
        let mut bound = 0;
        for ph in pending_placeholders {
            let name = ph.name_any();
            let Some(pool_name) = ph
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|s| s.get(NODEPOOL_LABEL))
                .cloned()
            else {
                continue;
            };
            let Some(pool) = self.pool_index(&pool_name) else { continue };
            let req = self.placeholder_requests(&ph);
            let admits = |node: &str, p: usize| {
                p == pool
                    && snap.nodes.get(node).is_some_and(|n| {
                        affinity_admits(&ph, n.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                            && tolerates(
                                &ph,
                                n.spec
                                    .as_ref()
                                    .and_then(|s| s.taints.as_deref())
                                    .unwrap_or_default(),
                            )
                    })
            };
            match best(&nodes, &admits, &req) {
                Some(node) => {
                    if let Some((_, free)) = nodes.get_mut(&node) {
                        sub(free, &req);
                    }
                    let ns = world::CONTROLLER_NS;
                    let target = node.clone();
                    self.cluster.update_pod(ns, &name, |pod| run_on(pod, target, now));
                    self.note(format!("placeholder {name} bound to {node}, Running"));
                    bound += 1;
                }
                None => {
                    let marked = ph
                        .status
                        .iter()
                        .flat_map(|s| s.conditions.iter().flatten())
                        .any(|c| c.type_ == "PodScheduled" && c.status == "False");
                    if !marked {
                        let ns = world::CONTROLLER_NS;
                        self.cluster.update_pod(ns, &name, |pod| {
                            pod.status.get_or_insert_default().conditions =
                                Some(vec![unschedulable(now)]);
                        });
                        self.note(format!("placeholder {name}: Unschedulable"));
                    }
                    self.request_provisioning(pool);
                }
            }
        }
        let _ = bound;
    }

    /// Scheduler preemption: a workload pod evicts placeholders (negative priority) from the
    /// node where that frees enough, fewest victims first.
    fn preempt_for(
        &mut self,
        nodes: &mut BTreeMap<String, (usize, Resources)>,
        pool: usize,
        req: &Resources,
    ) -> Option<String> {
        let snap = Arc::clone(&self.snap);
        // The placeholders by the node they run on, in the cache's order (one pass over them,
        // not one per node).
        let mut on_node: BTreeMap<&str, Vec<Arc<Pod>>> = BTreeMap::new();
        for ph in snap.placeholders.values() {
            if let Some(node) = placeholder_node(ph) {
                on_node.entry(node).or_default().push(Arc::clone(ph));
            }
        }
        let mut choice: Option<(usize, String, Vec<Arc<Pod>>)> = None;
        for (name, (p, free)) in nodes.iter() {
            if *p != pool || !self.in_workload_zone(pool, name) {
                continue;
            }
            let Some(victims) = on_node.get(name.as_str()).cloned() else { continue };
            let mut freed = free.clone();
            for v in &victims {
                add(&mut freed, &pod_requests(v));
            }
            if fits(&freed, req) && choice.as_ref().is_none_or(|c| victims.len() < c.0) {
                choice = Some((victims.len(), name.clone(), victims));
            }
        }
        let (_, node, victims) = choice?;
        for v in victims {
            let name = v.name_any();
            let ns = world::CONTROLLER_NS;
            // Only live placeholders are in the snapshot; a deleted one is already gone.
            if self.cluster.delete_object(&ObjectRef::pod(ns, &name)) {
                let req = pod_requests(&v);
                if let Some((_, free)) = nodes.get_mut(&node) {
                    add(free, &req);
                }
                self.metrics.preemptions += 1;
                self.note(format!("preempted placeholder {name} on {node}"));
            }
        }
        Some(node)
    }
}

fn unschedulable(now: DateTime<Utc>) -> PodCondition {
    PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/N nodes are available: insufficient cpu".into()),
        last_transition_time: Some(to_time(now)),
        ..PodCondition::default()
    }
}
