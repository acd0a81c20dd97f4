//! Pending: the placeholder that reserves the surge capacity. Its scheduling warnings, nodes with
//! nothing to reserve, the clamp, an unsafe PriorityClass, a rejected create, an impostor pod, and
//! a create whose answer was lost.

use super::*;

/// The placeholder asks for the old node's zone and architecture (the policy's default
/// `matchNodeRequirements`) although the claim's requirements name neither and the controller's
/// cache keeps only the pool's label of a Node: the verb reads the node fresh.
#[test]
pub fn the_placeholder_matches_the_labels_of_the_old_node_read_fresh() {
    let mut fx = Fx::new();
    started(&mut fx);
    let cached = fx.cache().nodes["node-c1"].metadata.labels.clone().unwrap_or_default();
    assert!(!cached.contains_key("topology.kubernetes.io/zone"), "the cache keeps no zone");
    let pod = fx.placeholder("c1").expect("the placeholder");
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default();
    let required: Vec<(String, Vec<String>)> = terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .map(|e| (e.key.clone(), e.values.clone().unwrap_or_default()))
        .collect();
    for (key, value) in [("topology.kubernetes.io/zone", "zone-a"), ("kubernetes.io/arch", "amd64")]
    {
        assert!(
            required.contains(&(key.to_string(), vec![value.to_string()])),
            "{key} In [{value}] in {required:?}"
        );
    }
}

#[test]
pub fn an_unschedulable_placeholder_is_warned_once_with_the_schedulers_reason() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name("c1"), |p| {
            p.status =
                serde_json::from_value(serde_json::json!({"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu."}]}))
                .ok();
        })
        .expect("placeholder");
    fx.pass();
    fx.pass();
    assert_eq!(fx.events("SurgeUnschedulable"), 1);
    let e =
        fx.world.events().into_iter().find(|e| e.reason == "SurgeUnschedulable").expect("event");
    assert!(e.message.contains("Insufficient cpu"), "{}", e.message);
}

fn placeholder_unschedulable(fx: &Fx, claim: &str, unschedulable: bool) {
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name(claim), |p| {
            let status = if unschedulable { "False" } else { "True" };
            p.status =
                serde_json::from_value(serde_json::json!({"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": status, "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu."}]}))
                .ok();
        })
        .expect("placeholder");
}

/// Claim-scoped warnings are level-triggered too: SurgeUnschedulable re-arms once the
/// placeholder was seen schedulable, and once the claim's rotation attempt ended; the latches
/// of a claim that is gone are dropped instead of piling up for the life of the process.
#[test]
fn claim_warnings_rearm_when_their_condition_clears_and_are_forgotten_with_the_claim() {
    let mut fx = Fx::new();
    started(&mut fx);
    placeholder_unschedulable(&fx, "c1", true);
    fx.pass();
    fx.pass();
    assert_eq!(fx.events("SurgeUnschedulable"), 1);
    placeholder_unschedulable(&fx, "c1", false);
    fx.pass();
    placeholder_unschedulable(&fx, "c1", true);
    fx.pass();
    assert_eq!(fx.events("SurgeUnschedulable"), 2, "re-armed after it cleared");
    // The attempt times out still unschedulable; the retry's placeholder is a new condition.
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    fx.set_claim_ann("c1", Key::FailedAt, Some("2026-11-27T03:00:00Z"));
    fx.set_pool_ann(Key::LastFailureAt, None);
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "retried");
    placeholder_unschedulable(&fx, "c1", true);
    fx.pass();
    assert_eq!(fx.events("SurgeUnschedulable"), 3, "a new attempt warns again");
    // The rotation completes and the claim is gone: nothing of it stays latched.
    fx.provision_surge("c1", "s1");
    fx.pass();
    fx.finalize("c1");
    fx.pass();
    assert!(fx.world.claim("c1").is_none());
    assert_eq!(fx.ctl.latched_warnings(), Vec::<String>::new());
}

/// A pod that requests nothing (BestEffort), owned like the workload.
fn best_effort_pod(name: &str, node: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut pod = workload_pod(name, node);
    if let Some(spec) = pod.spec.as_mut() {
        for c in &mut spec.containers {
            c.resources = None;
        }
    }
    pod
}

/// A node whose pods to reschedule request nothing (BestEffort) has no capacity to reserve: it
/// is rotated inside the window without a surge, marked and announced as such (not as the
/// forceful fallback), and completes as a success; it never counts as a failure nor pauses the
/// pool.
#[test]
pub fn a_node_with_nothing_to_reserve_is_rotated_without_a_surge() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.apply_pod(best_effort_pod("web-c1", "node-c1")).expect("BestEffort pod");
    fx.pass();
    assert!(fx.placeholder("c1").is_none(), "nothing to reserve: no placeholder");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
    assert!(fx.deleting("c1"), "deleted inside the window, without a surge");
    assert_eq!(fx.pool_ann(Key::RotationMode).as_deref(), Some("nothing-to-reserve"));
    assert_eq!(fx.pool_ann(Key::ActiveRotationState).as_deref(), Some("draining"));
    assert!(fx.pool_ann(Key::DrainingAt).is_some());
    assert_eq!(fx.events("NothingToReserve"), 1);
    assert_eq!(fx.announced("emit:nothing_to_reserve"), 1);
    assert_eq!(fx.ctl.telemetry().nothing_to_reserve_count(POOL), 1);
    for other in ["SurgeClampRefused", "ForcefulFallback", "RotationFailed"] {
        assert_eq!(fx.events(other), 0, "{other}");
    }
    assert_eq!(fx.announced("emit:forceful_fallback"), 0);
    fx.pass();
    assert_eq!(fx.events("NothingToReserve"), 1, "announced once");
    fx.finalize("c1");
    fx.pass();
    assert_eq!(fx.announced("emit:success"), 1);
    assert_eq!(fx.announced("emit:failure"), 0);
    assert!(fx.pool_ann(Key::LastFailureAt).is_none(), "no failure pause");
    assert!(fx.pool_ann(Key::LastRotationAt).is_some(), "a success: the cooldown applies");
    assert!(fx.pool_ann(Key::ActiveRotation).is_none());
    assert!(fx.pool_ann(Key::RotationMode).is_none(), "cleared with the anchor");
}

/// A node with no pods to reschedule at all is the same case.
#[test]
pub fn an_empty_node_is_rotated_without_a_surge() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.delete_now(&noderotation::cluster::ObjectRef::pod("apps", "web-c1"));
    fx.pass();
    assert!(fx.placeholder("c1").is_none());
    assert!(fx.deleting("c1"));
    assert_eq!(fx.events("NothingToReserve"), 1);
    assert_eq!(fx.announced("emit:failure"), 0);
}

/// The surge-less path's first write loses (the anchor went since the pass read the pool, a hand
/// edit): the pass owns nothing more, marks nothing and deletes nothing.
#[test]
pub fn a_node_with_nothing_to_reserve_whose_anchor_went_is_not_deleted() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.apply_pod(best_effort_pod("web-c1", "node-c1")).expect("BestEffort pod");
    let hook = fx.intercept();
    let world = fx.world.clone();
    hook.before_write(
        |w| w.contains("rotation-mode=nothing-to-reserve"),
        move || {
            world.update_pool(POOL, |p| {
                if let Some(a) = p.metadata.annotations.as_mut() {
                    a.remove(Key::ActiveRotation.full());
                }
            });
        },
    );
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(!fx.deleting("c1"), "no anchor, no delete");
    assert!(fx.pool_ann(Key::RotationMode).is_none());
    assert_eq!(fx.events("NothingToReserve"), 0);
}

/// The pods request something but the DaemonSets fill the node: the clamp lowers every request
/// to 0, the placeholder is refused and the attempt rolls back, as §3.3 says.
#[test]
pub fn a_placeholder_the_clamp_lowers_to_nothing_is_refused_and_rolled_back() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    let ds: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ds-c1", "namespace": "kube-system",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds", "controller": true}]},
        "spec": {"nodeName": "node-c1", "containers": [{"name": "agent", "image": "agent",
            "resources": {"requests": {"cpu": "4", "memory": "16Gi"}}}]},
        "status": {"phase": "Running"}
    }))
    .expect("DaemonSet pod");
    fx.world.apply_pod(ds).expect("DaemonSet pod");
    fx.pass();
    assert!(fx.placeholder("c1").is_none());
    assert_eq!(fx.events("SurgeClampRefused"), 1);
    assert_eq!(fx.events("NothingToReserve"), 0);
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(!fx.deleting("c1"));
    assert_eq!(fx.announced("emit:failure"), 1);
    // The failure says what happened: nothing waited for readyTimeout.
    let failed = fx.event_messages("RotationFailed");
    assert_eq!(failed.len(), 1);
    assert!(failed[0].contains("would request nothing"), "{}", failed[0]);
    assert!(!failed[0].contains("readyTimeout"), "{}", failed[0]);
}

fn priority_class(
    value: i32,
    policy: Option<&str>,
) -> k8s_openapi::api::scheduling::v1::PriorityClass {
    k8s_openapi::api::scheduling::v1::PriorityClass {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("noderotation-placeholder".into()),
            ..Default::default()
        },
        value,
        preemption_policy: policy.map(str::to_string),
        ..Default::default()
    }
}

/// A placeholder requests a node's worth of resources and must never preempt a workload: while
/// the PriorityClass it names is not negative or may preempt (recreated so while the operator
/// runs), a pending rotation creates none and warns once; a class made safe again lets the next
/// pass create it, and one that stays unsafe ends in the readyTimeout rollback.
#[test]
pub fn no_placeholder_is_created_while_its_priority_class_is_unsafe() {
    let mut fx = Fx::new();
    fx.world.set_placeholder_class(Some(priority_class(1000, None)));
    fx.claim("c1", Duration::days(10));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.placeholder("c1").is_none(), "no placeholder under an unsafe class");
    let warned = fx.event_messages("PlaceholderClassUnsafe");
    assert_eq!(warned.len(), 1);
    assert!(warned[0].contains("\"noderotation-placeholder\" is not safe"), "{}", warned[0]);
    assert!(warned[0].contains("its value is 1000"), "{}", warned[0]);
    assert!(warned[0].contains("preemptionPolicy is PreemptLowerPriority"), "{}", warned[0]);
    fx.advance(Duration::minutes(1));
    fx.pass();
    assert!(fx.placeholder("c1").is_none());
    assert_eq!(fx.events("PlaceholderClassUnsafe"), 1, "warned once while it lasts");

    // Recreated safe: the next pass creates the placeholder.
    fx.world.set_placeholder_class(Some(priority_class(-10, Some("Never"))));
    fx.advance(Duration::minutes(1));
    fx.pass();
    assert!(fx.placeholder("c1").is_some(), "created once the class is safe");

    // Unsafe from the start of another rotation to its readyTimeout: rolled back, no placeholder.
    let mut fx = Fx::new();
    fx.world.set_placeholder_class(Some(priority_class(-10, Some("PreemptLowerPriority"))));
    fx.claim("c1", Duration::days(10));
    fx.pass();
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert!(fx.placeholder("c1").is_none());
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.announced("emit:failure"), 1);
}

/// An admission webhook or a ResourceQuota rejects the placeholder: the pass fails and is
/// retried until readyTimeout rolls the rotation back, and the failure names the rejection
/// instead of claiming the surge was "not ready".
#[test]
fn a_rejected_placeholder_is_named_in_the_rotation_failure() {
    use noderotation::cluster::memory::{ApiVerb, Fault};
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.world.set_faults(|call: &noderotation::cluster::memory::Call<'_>| {
        if call.verb == ApiVerb::Create { Fault::Forbidden } else { Fault::Proceed }
    });
    fx.client.flush_cache();
    let err = fx.ctl.reconcile_pool(POOL).expect_err("the create is rejected");
    assert!(err.to_string().contains("forbidden"), "{err}");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.placeholder("c1").is_none());
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    let failed = fx.event_messages("RotationFailed");
    assert_eq!(failed.len(), 1);
    assert!(failed[0].contains("rejected") && failed[0].contains("forbidden"), "{}", failed[0]);
    assert!(!failed[0].contains("not ready"), "{}", failed[0]);
    // A later attempt whose placeholder is created and then times out says so again.
    fx.world.clear_faults();
    fx.set_claim_ann("c1", Key::FailedAt, Some("2026-11-27T03:00:00Z"));
    fx.set_pool_ann(Key::LastFailureAt, None);
    fx.pass();
    assert!(fx.placeholder("c1").is_some(), "retried: {:?}", fx.claim_ann("c1", Key::State));
    fx.advance(Duration::minutes(16));
    fx.pass();
    let failed = fx.event_messages("RotationFailed");
    assert_eq!(failed.len(), 2);
    assert!(failed[1].contains("not ready within readyTimeout"), "{}", failed[1]);
}

#[test]
pub fn a_pod_named_like_the_placeholder_is_never_taken_for_surge_capacity() {
    let mut fx = Fx::new();
    fx.claim("x", Duration::hours(1)).claim("c1", Duration::days(10));
    // Someone created a pod with the placeholder's name, label and surge-for, Running on a Ready
    // node of the pool, before the rotation of c1 starts.
    let mut impostor = workload_pod("impostor", "node-x");
    impostor.metadata.name = Some(noderotation::placeholder::placeholder_name("c1"));
    impostor.metadata.namespace = Some(NS.into());
    impostor.metadata.owner_references = None;
    impostor.metadata.labels =
        Some([("app.kubernetes.io/managed-by".to_string(), "noderotation".to_string())].into());
    impostor.metadata.annotations =
        Some([(Key::SurgeFor.full().to_string(), "c1".to_string())].into());
    let impostor = fx.world.apply_pod(impostor).expect("impostor");
    fx.pass();
    fx.pass();
    assert!(!fx.deleting("c1"), "no drain on capacity the operator did not reserve");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.pool_ann(Key::ActiveRotationState).is_none());
    let ph = fx.placeholder("c1").expect("the operator's own placeholder");
    assert_ne!(ph.metadata.uid, impostor.metadata.uid, "the impostor was replaced");
    assert_eq!(
        fx.claim_ann("c1", Key::PlaceholderUid),
        ph.metadata.uid,
        "the uid of what the operator created is recorded"
    );
    // Its own placeholder, once Running on a new node, is surge capacity.
    fx.provision_surge("c1", "s1");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
}

/// The API server applies the first create of c1's placeholder, then its answer is lost (a
/// timeout after the apply): the pass fails and the claim never records the pod's uid.
fn placeholder_created_answer_lost(fx: &mut Fx) -> std::sync::Arc<k8s_openapi::api::core::v1::Pod> {
    fx.claim("c1", Duration::days(10));
    // The pass creates one pod: the failed create ends it.
    creates_meet(fx, noderotation::cluster::memory::Fault::ApplyThenTransient);
    fx.client.flush_cache();
    assert!(fx.ctl.reconcile_pool(POOL).is_err(), "the create's answer never arrived");
    fx.world.clear_faults();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert_eq!(fx.claim_ann("c1", Key::PlaceholderUid), None, "nothing recorded");
    fx.placeholder("c1").expect("the create was applied")
}

/// A placeholder whose create answer was lost is still this attempt's (its `started-at` says
/// so): the next pass keeps it instead of deleting it as someone else's, and the claim Karpenter
/// launched for it is marked and reaped when the rotation rolls back. Before, the pod went as
/// unowned and that claim, never Ready, could never be tied to the rotation.
#[test]
fn a_placeholder_whose_create_answer_was_lost_stays_the_rotations() {
    let mut fx = Fx::new();
    let pod = placeholder_created_answer_lost(&mut fx);
    let stamp = pod.metadata.annotations.as_ref().and_then(|a| a.get(Key::StartedAt.full()));
    fx.advance(Duration::minutes(2));
    never_ready_surge(&fx, "s1", "c1");
    fx.pass();
    assert_eq!(
        fx.placeholder("c1").and_then(|p| p.metadata.uid.clone()),
        pod.metadata.uid,
        "the attempt's own placeholder was kept, not deleted and created again"
    );
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"), "its nomination seen");
    assert_eq!(
        stamp,
        fx.claim_ann("c1", Key::StartedAt).as_ref(),
        "the placeholder carries the attempt it was created for"
    );
    fx.advance(Duration::minutes(14));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "readyTimeout");
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "its never-Ready claim is reaped");
    assert!(fx.placeholder("c1").is_none(), "and the placeholder goes with the rotation");
}

/// The same lost answer, then the anchor removed by hand: the sweep that fails the orphaned
/// claim marks the claim launched for its placeholder, and reaps it once readyTimeout passed
/// since that claim's creation.
#[test]
fn the_sweep_ties_the_surge_of_a_placeholder_whose_answer_was_lost_to_its_rotation() {
    let mut fx = Fx::new();
    placeholder_created_answer_lost(&mut fx);
    fx.advance(Duration::minutes(1));
    never_ready_surge(&fx, "s1", "c1");
    fx.set_pool_ann(Key::ActiveRotation, None);
    fx.tick();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "swept");
    assert!(fx.placeholder("c1").is_none(), "the orphan placeholder is deleted");
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"), "tied to c1");
    fx.advance(Duration::minutes(16));
    fx.tick();
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "reaped by the sweep");
}

/// A placeholder left from an earlier attempt of the same claim (a late create: it carries
/// that attempt's `started-at`) is not the new attempt's.
#[test]
fn a_placeholder_of_an_earlier_attempt_is_not_the_new_attempts() {
    let mut fx = Fx::new();
    let pod = placeholder_created_answer_lost(&mut fx);
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name("c1"), |p| {
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(Key::StartedAt.full().into(), "2026-01-01T00:00:00Z".into());
        })
        .expect("placeholder");
    fx.pass();
    fx.pass();
    let now = fx.placeholder("c1").expect("a placeholder of this attempt");
    assert_ne!(now.metadata.uid, pod.metadata.uid, "the earlier attempt's pod was replaced");
    assert_eq!(fx.claim_ann("c1", Key::PlaceholderUid), now.metadata.uid);
}

/// Every create of a pod from now on meets `fault`.
fn creates_meet(fx: &Fx, fault: noderotation::cluster::memory::Fault) {
    fx.world.set_faults(move |c: &noderotation::cluster::memory::Call<'_>| {
        use noderotation::cluster::memory::{ApiVerb, Fault};
        if c.verb == ApiVerb::Create { fault } else { Fault::Proceed }
    });
}

/// A pass whose view lags the attempt's entry (the claim shows no `started-at` yet) still stamps
/// the placeholder with the attempt, read fresh: otherwise a lost answer to that create would
/// leave a pod nothing proves the controller's.
#[test]
fn a_placeholder_created_on_a_view_lagging_the_entry_carries_the_attempts_stamp() {
    use noderotation::cluster::memory::Fault;
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    creates_meet(&fx, Fault::Transient);
    fx.client.flush_cache();
    assert!(fx.ctl.reconcile_pool(POOL).is_err(), "the create failed, nothing applied");
    assert!(fx.placeholder("c1").is_none());
    let stamp = fx.claim_ann("c1", Key::StartedAt).expect("the attempt entered");
    let hook = fx.intercept();
    hook.stale_cache(|view| {
        if let Some(c) = view.claims.get_mut("c1") {
            let mut c = (**c).clone();
            c.metadata.annotations = None;
            *view.claims.get_mut("c1").expect("c1") = std::sync::Arc::new(c);
        }
    });
    creates_meet(&fx, Fault::ApplyThenTransient);
    fx.client.flush_cache();
    assert!(fx.ctl.reconcile_pool(POOL).is_err(), "the create's answer was lost");
    fx.world.clear_faults();
    hook.fresh_cache();
    let pod = fx.placeholder("c1").expect("the create was applied");
    assert_eq!(
        pod.metadata.annotations.as_ref().and_then(|a| a.get(Key::StartedAt.full())),
        Some(&stamp),
        "stamped with the attempt the lagging view did not show"
    );
    fx.pass();
    assert_eq!(
        fx.placeholder("c1").and_then(|p| p.metadata.uid.clone()),
        pod.metadata.uid,
        "kept as the attempt's own"
    );
}
