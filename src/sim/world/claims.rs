//! A NodeClaim's life as Karpenter and the kubelet write it: created (with its lane and
//! lifetime), launched, its Node registered, Ready (a lagging status caught up later), and the
//! emptiness check of its node.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, ClaimSim, Ev, HOSTNAME_LABEL, Lifetime, NodeSim, Phase,
    TERMINATION_FINALIZER, World, ZONE_LABEL, quantities,
};
use crate::karpenter::{
    ClaimCondition, NODEPOOL_LABEL, NodeClaim, NodeClaimSpec, NodeSelectorRequirement,
};
use crate::policy::resolve::to_time;
use crate::sim::world_faults::{WorldFault, key};

fn condition(type_: &str, status: bool, now: DateTime<Utc>) -> ClaimCondition {
    ClaimCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: None,
        message: None,
        last_transition_time: Some(to_time(now)),
    }
}

fn node_condition(ready: bool, now: DateTime<Utc>) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: if ready { "True" } else { "False" }.into(),
        reason: Some(if ready { "KubeletReady" } else { "KubeletNotReady" }.into()),
        last_transition_time: Some(to_time(now)),
        ..NodeCondition::default()
    }
}
impl World {
    // -- object builders -----------------------------------------------------------------------

    /// Creates a NodeClaim (Karpenter's provisioning decision) and queues its expiry.
    /// The name [`World::new_claim`] gives the next claim of `pool`.
    pub(crate) fn next_claim_name(&self, pool: usize) -> String {
        format!("{}-{:05}", self.plan.pools[pool].name, self.names[pool] + 1)
    }

    pub(crate) fn new_claim(
        &mut self,
        pool: usize,
        zone: String,
        created: DateTime<Utc>,
        never_launch: bool,
        never_ready: bool,
    ) -> String {
        let plan = Arc::clone(&self.plan);
        let p = &plan.pools[pool];
        let name = self.next_claim_name(pool);
        self.names[pool] += 1;
        let seq = self.names[pool];
        let node = format!("ip-10-{pool}-{}-{}.internal", seq / 250, seq % 250 + 1);
        let labels = BTreeMap::from([
            (NODEPOOL_LABEL.to_string(), p.name.clone()),
            (ZONE_LABEL.to_string(), zone.clone()),
            (ARCH_LABEL.to_string(), "amd64".to_string()),
            (CAPACITY_TYPE_LABEL.to_string(), "on-demand".to_string()),
        ]);
        let mut requirements = vec![NodeSelectorRequirement {
            key: NODEPOOL_LABEL.into(),
            operator: "In".into(),
            values: vec![p.name.clone()],
            min_values: None,
        }];
        requirements.push(NodeSelectorRequirement {
            key: ZONE_LABEL.into(),
            operator: "In".into(),
            values: vec![zone.clone()],
            min_values: None,
        });
        let mut claim = NodeClaim::new(
            &name,
            NodeClaimSpec {
                requirements,
                expire_after: Some(p.expire_after_go.clone()),
                termination_grace_period: p.tgp_go.clone(),
            },
        );
        claim.metadata.labels = Some(labels);
        claim.metadata.finalizers = Some(vec![TERMINATION_FINALIZER.into()]);
        claim.metadata.creation_timestamp = Some(to_time(created));
        if let Err(e) = self.cluster.apply_claim(claim) {
            self.note(format!("cannot create claim {name}: {e}"));
        }
        let deadline = p.expire_after.duration().map(|e| created + e);
        let lane = {
            let lanes = &mut self.lanes[pool];
            match lanes.iter().position(Option::is_none) {
                Some(l) => {
                    lanes[l] = Some(name.clone());
                    l
                }
                None => {
                    lanes.push(Some(name.clone()));
                    lanes.len() - 1
                }
            }
        };
        self.claims.insert(
            name.clone(),
            ClaimSim {
                pool,
                node,
                zone,
                created,
                deadline,
                tgp: p.tgp,
                phase: Phase::Provisioning,
                deleting: None,
                never_launch,
                never_ready,
                status_lag: false,
                nominated: BTreeSet::new(),
                placeholders_for: BTreeSet::new(),
                lane,
                expired: false,
                paced: None,
            },
        );
        self.metrics.lifetimes.insert(
            name.clone(),
            Lifetime {
                pool,
                name: name.clone(),
                lane,
                created,
                gone: None,
                deadline,
                expired_at: None,
            },
        );
        self.metrics.claims_created += 1;
        if let Some(d) = deadline {
            self.at(d.max(self.now()), Ev::Expire(name.clone()));
        }
        name
    }

    /// The instance is running: providerID, capacity, billing starts.
    pub(crate) fn launch(&mut self, name: &str, now: DateTime<Utc>) {
        let Some(c) = self.claims.get_mut(name) else { return };
        if c.phase != Phase::Provisioning {
            return;
        }
        c.phase = Phase::Launched;
        let pool = c.pool;
        let provider = format!("aws:///{}/i-{:016x}", c.zone, fnv(name));
        let alloc = quantities(&self.plan.pools[pool].allocatable);
        let lag = self.fault(WorldFault::RegistrationLag, key(name, None), 1.0);
        if let Some(c) = self.claims.get_mut(name) {
            c.status_lag = lag;
        }
        self.cluster.update_claim(name, |cl| {
            let st = cl.status.get_or_insert_default();
            st.provider_id = Some(provider);
            st.allocatable = alloc;
            st.conditions = vec![condition("Launched", true, now)];
        });
        self.bill(pool, 1);
    }

    /// The kubelet registered the Node (not Ready yet).
    pub(crate) fn register(&mut self, name: &str, now: DateTime<Utc>) {
        let plan = Arc::clone(&self.plan);
        let Some(c) = self.claims.get_mut(name) else { return };
        if c.phase != Phase::Launched {
            return;
        }
        c.phase = Phase::Registered;
        let p = &plan.pools[c.pool];
        let node_name = c.node.clone();
        let zone = c.zone.clone();
        let pool = c.pool;
        let lag = c.status_lag;
        let provider = format!("aws:///{zone}/i-{:016x}", fnv(name));
        let labels = BTreeMap::from([
            (NODEPOOL_LABEL.to_string(), p.name.clone()),
            (ZONE_LABEL.to_string(), zone.clone()),
            (ARCH_LABEL.to_string(), "amd64".to_string()),
            (CAPACITY_TYPE_LABEL.to_string(), "on-demand".to_string()),
            (HOSTNAME_LABEL.to_string(), node_name.clone()),
            ("karpenter.sh/registered".to_string(), "true".to_string()),
        ]);
        let node = Node {
            metadata: ObjectMeta {
                name: Some(node_name.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider),
                taints: (!p.taints.is_empty()).then(|| p.taints.clone()),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(quantities(&p.allocatable)),
                capacity: Some(quantities(&p.allocatable)),
                conditions: Some(vec![node_condition(false, now)]),
                ..NodeStatus::default()
            }),
        };
        if let Err(e) = self.cluster.apply_node(node) {
            self.note(format!("cannot create node {node_name}: {e}"));
        }
        if !lag {
            self.cluster.update_claim(name, |cl| {
                let st = cl.status.get_or_insert_default();
                st.node_name = Some(node_name.clone());
                st.conditions.push(condition("Registered", true, now));
            });
        }
        self.nodes.insert(
            node_name,
            NodeSim { claim: name.to_string(), pool, ready: false, disrupted: false, zone },
        );
    }

    /// The Node turns Ready; the claim becomes Initialized and Ready; the DaemonSet pod lands.
    pub(crate) fn make_ready(&mut self, name: &str, now: DateTime<Utc>) {
        let Some(c) = self.claims.get_mut(name) else { return };
        if c.phase != Phase::Registered {
            return;
        }
        c.phase = Phase::Ready;
        let node_name = c.node.clone();
        let pool = c.pool;
        let lag = c.status_lag;
        self.cluster.update_node(&node_name, |n| {
            if let Some(st) = n.status.as_mut() {
                st.conditions = Some(vec![node_condition(true, now)]);
            }
        });
        if lag {
            // The claim catches up within 90 s; a placeholder may bind to the node meanwhile.
            let ms = self
                .faults
                .as_ref()
                .map_or(0, |f| f.below(WorldFault::RegistrationLag, key(name, None), 90_000));
            let at = now + Duration::milliseconds(i64::try_from(ms).unwrap_or(0) + 1);
            self.at(at, Ev::ClaimObserved(name.to_string()));
        } else {
            self.cluster.update_claim(name, |cl| {
                let st = cl.status.get_or_insert_default();
                st.conditions.push(condition("Initialized", true, now));
                st.conditions.push(condition("Ready", true, now));
            });
        }
        if let Some(n) = self.nodes.get_mut(&node_name) {
            n.ready = true;
        }
        // Ready capacity now: no longer a surge claim that may outlive its rotation (I20).
        self.surge_launched.remove(name);
        let key = self.create_daemonset_pod(pool, &node_name);
        self.bind_pod(&key, &node_name, now);
        self.watch_empty(&node_name);
    }

    /// `registration_lag`: Karpenter writes the status it held back (nodeName and the conditions
    /// of the phase the claim reached; the providerID came with the launch).
    pub(crate) fn observe_claim(&mut self, name: &str, now: DateTime<Utc>) -> Option<usize> {
        let c = self.claims.get_mut(name)?;
        if !std::mem::take(&mut c.status_lag) {
            return None;
        }
        let (pool, phase, node) = (c.pool, c.phase, c.node.clone());
        self.cluster.update_claim(name, |cl| {
            let st = cl.status.get_or_insert_default();
            if phase >= Phase::Registered {
                st.node_name = Some(node);
                st.conditions.push(condition("Registered", true, now));
            }
            if phase >= Phase::Ready {
                st.conditions.push(condition("Initialized", true, now));
                st.conditions.push(condition("Ready", true, now));
            }
        });
        Some(pool)
    }

    /// Karpenter's emptiness consolidation looks at `node` after `consolidateAfter`.
    pub(crate) fn watch_empty(&mut self, node: &str) {
        let Some(n) = self.nodes.get(node) else { return };
        if let Some(after) = self.plan.pools[n.pool].consolidate_after {
            let t = self.now() + after;
            self.at(t, Ev::EmptyCheck(node.to_string()));
        }
    }
}

/// FNV-1a: stable fake instance ids.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
