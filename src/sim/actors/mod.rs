//! The actors that play the rest of the cluster, each a small state machine on the virtual
//! clock:
//!
//! - **Karpenter**: provisions claims for unschedulable pods of a pool (placeholders and evicted
//!   workload) after a provisioning delay, or never (shortage), within `spec.limits`; static pools
//!   keep `replicas`; forced expiry at `creation + expireAfter`; on any claim deletion taints and
//!   drains the node (workload pods evicted and recreated Pending by their ReplicaSet) for a drain
//!   delay cut off at tGP, then deletes the Node and removes the `karpenter.sh/termination`
//!   finalizer; deletes claims that never register (`delays.registrationTimeout`, 15m) and, with
//!   node repair on (`karpenter.nodeRepair`, off by default), nodes that stay NotReady (30m); a
//!   shortage of some zones sends a pod that admits another zone there.
//! - **kubelet/scheduler**: nodes turn Ready after registration; Pending pods bind to Ready,
//!   uncordoned, untainted nodes of their pool with free capacity (requests against allocatable),
//!   Running at once; workload pods preempt placeholders (negative priority), placeholders
//!   preempt nothing; the placeholder's required node affinity is honoured.
//! - **operator**: the scenario's script.
//! - **faults**: the world side of `--faults`.
//!
//! One file per actor: `karpenter`, `scheduler` (kubelet and scheduler), `operator` and
//! `faults`; this file holds the keys and names they share and the dispatch of a world event.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};

use super::world::{Ev, REPAIR_AFTER, World};
use crate::cluster::{ObjectKind, ObjectRef};
use crate::engine::Key;
use crate::placeholder::required_node_terms;
use crate::policy::duration::format_human;

mod faults;
mod karpenter;
mod operator;
mod scheduler;

// The keys the simulated actors and the checker read, spelled by the annotation reference.
pub(crate) const FREEZE_ANNOTATION: &str = Key::Freeze.full();
pub(crate) const DO_NOT_DISRUPT: &str = Key::DoNotDisrupt.full();
pub(crate) const SURGE_FOR: &str = Key::SurgeFor.full();
pub(crate) const CLAIM_STATE: &str = Key::State.full();
pub(crate) const STARTED_AT: &str = Key::StartedAt.full();
pub(crate) const OWNED_MARKER: &str = Key::DoNotDisruptOwned.full();
pub(crate) const CORDONED_MARKER: &str = Key::Cordoned.full();

/// Who acted, for the trace.
pub(crate) const KARPENTER: &str = "karpenter";
pub(crate) const KUBELET: &str = "kubelet";
pub(crate) const SCHEDULER: &str = "scheduler";
pub(crate) const OPERATOR: &str = "operator";
pub(crate) const FAULTS: &str = "faults";

/// Every rotation in flight in a pool: each anchored slot and the claim it names, by slot.
pub(crate) fn anchors(np: &crate::karpenter::NodePool) -> BTreeMap<usize, &str> {
    crate::reconcile::slots::anchors(&np.metadata)
}

/// The first anchored claim of a pool (lowest slot) that `live` accepts.
pub(crate) fn first_anchor(
    np: Option<&crate::karpenter::NodePool>,
    live: impl Fn(&str) -> bool,
) -> Option<String> {
    np.and_then(|p| anchors(p).into_values().find(|a| live(a)).map(str::to_string))
}

/// A per-rotation annotation of one slot (`rules/annotations.ron`, `per_rotation`).
pub(crate) fn slot_annotation(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: crate::engine::Key,
    slot: usize,
) -> Option<&str> {
    crate::reconcile::slots::with_slot_key(key, slot, |k| annotation(meta, k))
}

pub(crate) fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn claim_ref(name: &str) -> ObjectRef {
    ObjectRef::cluster(ObjectKind::NodeClaim, name)
}

pub(crate) fn placeholder_node(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn node_unschedulable(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// Required node affinity (terms ORed, expressions ANDed) and nodeSelector against `labels`.
pub(crate) fn affinity_admits(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = &pod.spec else { return true };
    if let Some(sel) = &spec.node_selector
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let terms = required_node_terms(spec);
    if terms.is_empty() {
        return true;
    }
    terms.iter().any(|term| {
        term.match_fields.is_none()
            && term.match_expressions.iter().flatten().all(|e| {
                let value = labels.get(&e.key);
                let values = e.values.as_deref().unwrap_or_default();
                let num = |v: &str| v.parse::<i64>().ok();
                match e.operator.as_str() {
                    "In" => value.is_some_and(|v| values.contains(v)),
                    "NotIn" => !value.is_some_and(|v| values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    "Gt" => matches!((value.and_then(|v| num(v)), values.first().and_then(|v| num(v))), (Some(a), Some(b)) if a > b),
                    "Lt" => matches!((value.and_then(|v| num(v)), values.first().and_then(|v| num(v))), (Some(a), Some(b)) if a < b),
                    _ => false,
                }
            })
    })
}

/// Every NoSchedule/NoExecute taint of the node is tolerated by the pod.
pub(crate) fn tolerates(pod: &Pod, taints: &[Taint]) -> bool {
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    taints.iter().filter(|t| t.effect != "PreferNoSchedule").all(|t| {
        tolerations.iter().any(|tol| {
            let key_ok = match tol.operator.as_deref() {
                Some("Exists") => tol.key.as_deref().is_none_or(|k| k == t.key),
                _ => {
                    tol.key.as_deref() == Some(t.key.as_str())
                        && tol.value.as_deref() == t.value.as_deref()
                }
            };
            key_ok && tol.effect.as_deref().is_none_or(|e| e == t.effect)
        })
    })
}

impl World {
    /// Runs one world event; returns who acted.
    pub(crate) fn handle(&mut self, ev: Ev) -> &'static str {
        let now = self.now();
        match ev {
            Ev::Launch(name) => {
                let live = self.claims.get(&name).is_some_and(|c| c.deleting.is_none());
                if live {
                    self.launch(&name, now);
                    let d = self.draw(self.plan.registration);
                    self.at(now + d, Ev::Register(name));
                }
                KARPENTER
            }
            Ev::Register(name) => {
                let Some(c) = self.claims.get(&name) else { return KUBELET };
                if c.deleting.is_some() {
                    return KUBELET;
                }
                let never_ready = c.never_ready;
                self.register(&name, now);
                if never_ready && self.plan.node_repair {
                    self.note(format!("{name}: node will never turn Ready"));
                    self.at(now + REPAIR_AFTER, Ev::RepairCheck(name));
                } else if never_ready {
                    self.note(format!(
                        "{name}: node will never turn Ready (node repair off: it stays until its claim is deleted)"
                    ));
                } else {
                    let d = self.draw(self.plan.ready);
                    self.at(now + d, Ev::Ready(name));
                }
                KUBELET
            }
            Ev::Ready(name) => {
                let Some(c) = self.claims.get(&name) else { return KUBELET };
                if c.deleting.is_some() {
                    return KUBELET;
                }
                self.make_ready(&name, now);
                self.request_scheduling();
                KUBELET
            }
            Ev::ClaimObserved(name) => {
                if self.observe_claim(&name, now).is_some() {
                    self.note(format!("{name}: status caught up with its node (registration lag)"));
                }
                KARPENTER
            }
            Ev::RegistrationTtl(name) => {
                let stale = self.claims.get(&name).is_some_and(|c| {
                    c.deleting.is_none() && c.phase < super::world::Phase::Registered
                });
                if stale {
                    self.note(format!(
                        "{name}: not registered after {}",
                        format_human(self.plan.registration_timeout)
                    ));
                    self.delete_claim(&name);
                }
                KARPENTER
            }
            Ev::RepairCheck(name) => {
                let stale = self.claims.get(&name).is_some_and(|c| {
                    c.deleting.is_none() && c.phase == super::world::Phase::Registered
                });
                if stale {
                    self.note(format!(
                        "{name}: node NotReady for {}: repair",
                        format_human(REPAIR_AFTER)
                    ));
                    self.delete_claim(&name);
                }
                KARPENTER
            }
            Ev::Expire(name) => {
                self.force_expire(&name, "forced expiry (creationTimestamp + expireAfter)");
                KARPENTER
            }
            Ev::Terminate(name) => {
                self.begin_termination(&name, false);
                KARPENTER
            }
            Ev::DrainDone(name) => {
                self.finalize(&name);
                KARPENTER
            }
            Ev::DrainStep(pool) => {
                self.drain_step_done(pool);
                self.drain_step(pool);
                KARPENTER
            }
            Ev::Provision(pool) => {
                self.provisioning_done(pool);
                self.provision(pool);
                KARPENTER
            }
            Ev::Schedule => {
                self.scheduling_done();
                self.schedule_pass();
                SCHEDULER
            }
            Ev::Operator(i) => {
                self.operate(i);
                OPERATOR
            }
            Ev::OperatorEnd(i) => {
                self.lift_refusal(i);
                OPERATOR
            }
            Ev::EmptyCheck(node) => {
                self.consolidate_if_empty(&node);
                KARPENTER
            }
            Ev::Inject(x) => {
                self.inject(x);
                FAULTS
            }
            Ev::FaultMinute => {
                self.fault_minute();
                FAULTS
            }
        }
    }
}
