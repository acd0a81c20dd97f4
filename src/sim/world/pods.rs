//! The world's pods: a pool's workload pods and each node's DaemonSet pod, created Pending,
//! bound and Running, removed; and the required zone affinity of the workload.
use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelector, NodeSelectorRequirement as K8sRequirement,
    NodeSelectorTerm, Pod, PodCondition, PodSpec, PodStatus, ResourceRequirements, Taint,
    Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{APPS_NS, PodKey, PodSim, SYSTEM_NS, World, ZONE_LABEL, add, quantities, sub};
use crate::karpenter::NODEPOOL_LABEL;
use crate::policy::resolve::to_time;

/// What the scheduler and the kubelet write when a pod lands on `node`: bound there, Running,
/// scheduled as of `now`.
pub(crate) fn run_on(pod: &mut Pod, node: String, now: DateTime<Utc>) {
    pod.spec.get_or_insert_default().node_name = Some(node);
    let st = pod.status.get_or_insert_default();
    st.phase = Some("Running".into());
    st.conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "True".into(),
        last_transition_time: Some(to_time(now)),
        ..PodCondition::default()
    }]);
}
impl World {
    pub fn create_workload_pod(&mut self, pool: usize) -> PodKey {
        let plan = Arc::clone(&self.plan);
        let p = &plan.pools[pool];
        self.pod_seq += 1;
        let name = format!("{}-app-{:06}", p.name, self.pod_seq);
        let tolerations: Vec<Toleration> = p
            .taints
            .iter()
            .map(|t: &Taint| Toleration {
                key: Some(t.key.clone()),
                operator: Some("Exists".into()),
                effect: Some(t.effect.clone()),
                ..Toleration::default()
            })
            .collect();
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(APPS_NS.into()),
                labels: Some(BTreeMap::from([("app".to_string(), p.name.clone())])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: format!("{}-app", p.name),
                    uid: format!("rs-{}", p.name),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(quantities(&p.pod_requests)),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                node_selector: Some(BTreeMap::from([(NODEPOOL_LABEL.to_string(), p.name.clone())])),
                affinity: zone_affinity(&p.workload_zones),
                tolerations: (!tolerations.is_empty()).then_some(tolerations),
                priority: Some(0),
                ..PodSpec::default()
            }),
            status: Some(PodStatus { phase: Some("Pending".into()), ..PodStatus::default() }),
        };
        if let Err(e) = self.cluster.apply_pod(pod) {
            self.note(format!("cannot create pod {name}: {e}"));
        }
        let key = (APPS_NS.to_string(), name);
        let now = self.now();
        self.pods.insert(
            key.clone(),
            PodSim {
                pool,
                daemonset: false,
                requests: Arc::new(p.pod_requests.clone()),
                node: None,
                pending_since: Some(now),
                pending_settled: 0.0,
                marked_unschedulable: false,
            },
        );
        self.pending.insert(key.clone());
        key
    }

    pub(super) fn create_daemonset_pod(&mut self, pool: usize, node: &str) -> PodKey {
        let plan = Arc::clone(&self.plan);
        let p = &plan.pools[pool];
        let name = format!("node-agent-{}", node.replace('.', "-"));
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(SYSTEM_NS.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "DaemonSet".into(),
                    name: "node-agent".into(),
                    uid: "ds-node-agent".into(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "agent".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(quantities(&p.daemonset)),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus { phase: Some("Pending".into()), ..PodStatus::default() }),
        };
        if let Err(e) = self.cluster.apply_pod(pod) {
            self.note(format!("cannot create pod {name}: {e}"));
        }
        let key = (SYSTEM_NS.to_string(), name);
        self.pods.insert(
            key.clone(),
            PodSim {
                pool,
                daemonset: true,
                requests: Arc::new(p.daemonset.clone()),
                node: None,
                pending_since: None,
                pending_settled: 0.0,
                marked_unschedulable: false,
            },
        );
        key
    }

    /// Binds a world pod and marks it Running; ends its pending time.
    pub fn bind_pod(&mut self, key: &PodKey, node: &str, now: DateTime<Utc>) {
        let Some(p) = self.pods.get_mut(key) else { return };
        debug_assert!(p.node.is_none(), "{key:?} is bound already");
        p.node = Some(node.to_string());
        let requests = Arc::clone(&p.requests);
        if let Some(since) = p.pending_since.take() {
            let secs = (now - since).num_milliseconds() as f64 / 1000.0;
            if let Some(acc) = self.metrics.pending_pod_seconds.get_mut(p.pool) {
                *acc += secs;
            }
            let spell = std::mem::take(&mut p.pending_settled) + secs;
            if let Some(longest) = self.metrics.longest_pending_seconds.get_mut(p.pool) {
                *longest = longest.max(spell);
            }
        }
        p.marked_unschedulable = false;
        let (pool, workload) = (p.pool, !p.daemonset);
        self.pending.remove(key);
        if workload {
            self.request_drain_step(pool);
        }
        if self.node_pods.entry(node.to_string()).or_default().insert(key.clone()) {
            add(self.node_requests.entry(node.to_string()).or_default(), &requests);
        }
        for c in self.claims.values_mut() {
            c.nominated.remove(key);
        }
        let node = node.to_string();
        self.cluster.update_pod(&key.0, &key.1, |pod| run_on(pod, node, now));
    }

    /// Removes a world pod from the store and the mirrors.
    pub(crate) fn remove_pod(&mut self, key: &PodKey) {
        if let Some(p) = self.pods.remove(key)
            && let Some(node) = &p.node
            && let Some(set) = self.node_pods.get_mut(node)
        {
            if set.remove(key)
                && let Some(sum) = self.node_requests.get_mut(node)
            {
                sub(sum, &p.requests);
            }
            if set.is_empty() {
                self.node_pods.remove(node);
                self.node_requests.remove(node);
            }
        }
        self.pending.remove(key);
        self.cluster.delete_now(&crate::cluster::ObjectRef::pod(&key.0, &key.1));
    }
}

/// A required node affinity to `zones` (none when empty).
pub(crate) fn zone_affinity(zones: &[String]) -> Option<Affinity> {
    (!zones.is_empty()).then(|| Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![K8sRequirement {
                        key: ZONE_LABEL.into(),
                        operator: "In".into(),
                        values: Some(zones.to_vec()),
                    }]),
                    ..NodeSelectorTerm::default()
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    })
}
