//! `noderotation uninstall` on the in-memory cluster: a rotation is driven to the middle by the
//! real controller, the operator's own cordon, do-not-disrupt and freeze are added, and the
//! uninstall must remove exactly what is ours, change nothing on a second run, and write nothing
//! under `--dry-run`.
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Duration;
use k8s_openapi::api::core::v1::Pod;
use noderotation::cli::uninstall::{Change, What, lease_holder, uninstall};
use noderotation::cluster::memory::{ApiVerb, Fault, MemoryCluster};
use noderotation::cluster::{Cluster, ObjectKind, ObjectRef};
use noderotation::engine::Key;
use noderotation::karpenter::NodePool;
use support::*;

const FREEZE_UNTIL: &str = "2030-01-01T00:00:00Z";

fn annotations_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<String> {
    meta.annotations.as_ref().map(|a| a.keys().cloned().collect()).unwrap_or_default()
}

/// Every `noderotation.io/` annotation left anywhere, as `Kind name key`.
fn ours_left(world: &MemoryCluster) -> Vec<String> {
    let prefix = Key::ActiveRotation.full().trim_end_matches("active-rotation");
    assert_eq!(prefix, "noderotation.io/");
    let mut out = Vec::new();
    let mut scan = |kind: &str, name: String, keys: Vec<String>| {
        for k in keys.into_iter().filter(|k| k.starts_with(prefix)) {
            out.push(format!("{kind} {name} {k}"));
        }
    };
    for p in world.pools() {
        scan("NodePool", p.metadata.name.clone().unwrap_or_default(), annotations_of(&p.metadata));
    }
    for c in world.claims() {
        scan("NodeClaim", c.metadata.name.clone().unwrap_or_default(), annotations_of(&c.metadata));
    }
    for n in world.nodes() {
        scan("Node", n.metadata.name.clone().unwrap_or_default(), annotations_of(&n.metadata));
    }
    out
}

fn placeholders_left(world: &MemoryCluster) -> Vec<String> {
    world
        .pods()
        .iter()
        .filter(|p| {
            p.metadata.labels.as_ref().and_then(|l| l.get("app.kubernetes.io/managed-by"))
                == Some(&"noderotation".to_string())
        })
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn second_pool(name: &str, freeze: &str) -> NodePool {
    let mut pool = pool_yaml("");
    pool.metadata.name = Some(name.into());
    pool.metadata.labels = Some(BTreeMap::from([("team".into(), "b".into())]));
    pool.metadata.annotations =
        Some(BTreeMap::from([(Key::Freeze.full().to_string(), freeze.to_string())]));
    pool
}

fn not_ours_pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "someone-elses", "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "Helm"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    }))
    .expect("pod json")
}

/// A rotation in the middle (`draining`: surge host frozen too; else `pending`), plus what an
/// operator did by hand: their own cordon on node-u1, their own do-not-disrupt on node-u2, a
/// freeze on pool-a and on pool-b, a pod of theirs in the controller's namespace.
fn mid_rotation(draining: bool) -> Fx {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    fx.claim("c2", Duration::hours(1));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.cordoned("node-c1"));
    assert_eq!(fx.node_ann("node-c1", Key::Cordoned).as_deref(), Some("true"));
    assert_eq!(fx.node_ann("node-c1", Key::DoNotDisruptOwned).as_deref(), Some("true"));
    assert!(fx.placeholder("c1").is_some());
    if draining {
        fx.advance(Duration::minutes(3));
        fx.provision_surge("c1", "s1");
        fx.pass();
        assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
        assert_eq!(fx.pool_ann(Key::ActiveRotationState).as_deref(), Some("draining"));
        assert_eq!(fx.node_ann("node-s1", Key::SurgeFor).as_deref(), Some("c1"));
        assert_eq!(fx.node_ann("node-s1", Key::DoNotDisruptOwned).as_deref(), Some("true"));
        // The placeholder went with the old claim's delete (docs/decisions/placeholder-release.md).
        assert!(fx.placeholder("c1").is_none(), "no placeholder while the old node drains");
    } else {
        // A claim that failed an earlier attempt carries its backoff anchors.
        fx.set_claim_ann("c2", Key::State, Some("failed"));
        fx.set_claim_ann("c2", Key::FailedAt, Some("2026-11-28T02:00:00Z"));
        fx.set_claim_ann("c2", Key::RetryCount, Some("1"));
        fx.set_pool_ann(Key::LastFailureAt, Some("2026-11-28T02:00:00Z"));
    }
    // The operator's own things.
    fx.world.apply_node(node_obj("node-u1", true)).expect("node");
    fx.world.update_node("node-u1", |n| {
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true)
    });
    fx.world.apply_node(node_obj("node-u2", true)).expect("node");
    fx.set_node_ann("node-u2", Key::DoNotDisrupt, Some("true"));
    fx.set_pool_ann(Key::Freeze, Some(FREEZE_UNTIL));
    // A second rotation slot's cooldown anchor, left by a policy with maxUnavailable > 1.
    fx.set_pool(|p| {
        let ann = p.metadata.annotations.get_or_insert_with(Default::default);
        ann.insert(format!("{}.1", Key::LastRotationAt.full()), "2026-11-28T02:00:00Z".into());
    });
    fx.world.apply_pool(second_pool("pool-b", FREEZE_UNTIL)).expect("pool-b");
    fx.world.apply_pod(not_ours_pod()).expect("pod");
    fx.client.flush_cache();
    assert!(!ours_left(&fx.world).is_empty());
    fx
}

fn assert_clean(fx: &Fx) {
    let left = ours_left(&fx.world);
    assert_eq!(
        left,
        vec![
            format!("NodePool pool-a {}", Key::Freeze.full()),
            format!("NodePool pool-b {}", Key::Freeze.full()),
        ],
        "only the operator's freezes are left"
    );
    assert_eq!(fx.pool_ann(Key::Freeze).as_deref(), Some(FREEZE_UNTIL));
    // Our cordon and do-not-disrupt are gone ...
    assert!(!fx.cordoned("node-c1"), "our cordon lifted");
    assert!(fx.node_ann("node-c1", Key::DoNotDisrupt).is_none(), "our do-not-disrupt removed");
    if fx.world.node("node-s1").is_some() {
        assert!(fx.node_ann("node-s1", Key::DoNotDisrupt).is_none());
        assert!(!fx.cordoned("node-s1"));
    }
    // ... the operator's stay.
    assert!(fx.cordoned("node-u1"), "the operator's cordon stays");
    assert_eq!(fx.node_ann("node-u2", Key::DoNotDisrupt).as_deref(), Some("true"));
    assert!(placeholders_left(&fx.world).is_empty(), "no placeholder left");
    assert!(fx.world.pod(NS, "someone-elses").is_some(), "a pod that is not ours stays");
    assert!(fx.world.pod("apps", "web-c1").is_some(), "workloads stay");
    // Nothing else was deleted.
    assert!(fx.world.claim("c1").is_some() && fx.world.claim("c2").is_some());
}

fn removed(changes: &[Change], kind: ObjectKind, name: &str, key: Key) -> bool {
    changes.iter().any(|c| {
        c.object == ObjectRef::cluster(kind, name)
            && c.what == What::RemoveAnnotation(key.full().into())
    })
}

fn uninstall_mid_rotation(draining: bool) {
    let fx = mid_rotation(draining);
    let client: Arc<dyn Cluster> = Arc::new(fx.client.clone());

    // --dry-run: lists every change, writes nothing.
    let before = fx.world.revision();
    let writes = fx.world.call_counts().applied();
    let plan = uninstall(client.as_ref(), true);
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    assert_eq!(fx.world.revision(), before, "dry run wrote nothing");
    assert_eq!(fx.world.call_counts().applied(), writes);
    assert!(removed(&plan.changes, ObjectKind::NodePool, POOL, Key::ActiveRotation));
    assert!(removed(&plan.changes, ObjectKind::NodeClaim, "c1", Key::State));
    assert!(removed(&plan.changes, ObjectKind::NodeClaim, "c1", Key::StartedAt));
    assert!(removed(&plan.changes, ObjectKind::Node, "node-c1", Key::Cordoned));
    assert!(removed(&plan.changes, ObjectKind::Node, "node-c1", Key::DoNotDisrupt));
    assert!(
        plan.changes.iter().any(|c| c.object == ObjectRef::cluster(ObjectKind::Node, "node-c1")
            && c.what == What::Uncordon)
    );
    // A placeholder exists while pending; it went with the delete when draining.
    assert_eq!(
        plan.changes.iter().any(|c| c.what == What::DeletePod
            && c.object == ObjectRef::pod(NS, noderotation::placeholder::placeholder_name("c1"))),
        !draining
    );
    assert!(!removed(&plan.changes, ObjectKind::NodePool, POOL, Key::Freeze));
    assert!(!plan.changes.iter().any(|c| c.object.name == "node-u1" || c.object.name == "node-u2"));
    assert!(plan.summary().starts_with("uninstall: would clean"), "{}", plan.summary());
    let lines: Vec<String> = plan.changes.iter().map(ToString::to_string).collect();
    let placeholder_line = format!("Pod {NS}/noderotation-surge-c1: delete placeholder pod");
    for line in [
        "NodePool pool-a: remove annotation noderotation.io/active-rotation".to_string(),
        "NodePool pool-a: remove annotation noderotation.io/last-rotation-at.1".to_string(),
        "Node node-c1: lift our cordon (spec.unschedulable=false)".to_string(),
        "Node node-c1: remove annotation karpenter.sh/do-not-disrupt".to_string(),
    ]
    .into_iter()
    .chain((!draining).then_some(placeholder_line))
    {
        assert!(lines.contains(&line), "{line} not in {lines:#?}");
    }

    // The real run makes exactly the planned changes.
    let report = uninstall(client.as_ref(), false);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.changes, plan.changes);
    assert_clean(&fx);
    let deleted =
        if draining { "0 placeholder pod(s) deleted" } else { "1 placeholder pod(s) deleted" };
    assert!(report.summary().contains(deleted), "{}", report.summary());
    assert!(report.summary().contains("1 cordon(s) lifted"), "{}", report.summary());

    // A second run changes nothing.
    fx.client.flush_cache();
    let revision = fx.world.revision();
    let again = uninstall(client.as_ref(), false);
    assert!(again.errors.is_empty() && again.changes.is_empty(), "{again:?}");
    assert_eq!(fx.world.revision(), revision);
    assert!(again.summary().contains("nothing of noderotation's is left"));
}

#[test]
fn uninstall_during_a_pending_rotation_removes_only_what_is_ours() {
    uninstall_mid_rotation(false);
}

#[test]
fn uninstall_during_a_drain_removes_only_what_is_ours() {
    uninstall_mid_rotation(true);
}

#[test]
fn uninstall_on_a_stale_cache_rereads_and_its_writes_are_preconditioned() {
    let fx = mid_rotation(false);
    // The operator lifted the cordon and removed the marker after our cache was filled: the
    // fresh read sees it, and nothing is uncordoned twice.
    fx.world.update_node("node-c1", |n| {
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(false);
        n.metadata.annotations.get_or_insert_with(BTreeMap::new).remove(Key::Cordoned.full());
    });
    // Every first preconditioned patch of an object loses a race (409, object touched).
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    fx.world.set_faults(move |call: &noderotation::cluster::memory::Call<'_>| {
        if call.verb == ApiVerb::Patch
            && call.precondition
            && seen.lock().expect("lock").insert(call.target.clone())
        {
            Fault::Conflict
        } else {
            Fault::Proceed
        }
    });
    let report = uninstall(&fx.client, false);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let patched: std::collections::BTreeSet<_> = report
        .changes
        .iter()
        .filter(|c| c.what != What::DeletePod)
        .map(|c| c.object.clone())
        .collect();
    assert!(patched.len() >= 3, "{patched:?}");
    assert!(!report.changes.iter().any(|c| c.what == What::Uncordon), "{:?}", report.changes);
    fx.world.clear_faults();
    assert!(fx.world.call_counts().failed >= patched.len() as u64, "every first patch lost a race");
    assert_clean(&fx);
}

#[test]
fn lease_is_held_only_while_renewed_within_its_duration() {
    let lease =
        |holder: Option<&str>, renewed: &str| -> k8s_openapi::api::coordination::v1::Lease {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "noderotation", "namespace": NS},
                "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15}
            }))
            .expect("lease json")
        };
    let now = t0();
    assert_eq!(
        lease_holder(&lease(Some("pod-a"), "2026-11-28T02:59:50.000000Z"), now).as_deref(),
        Some("pod-a")
    );
    assert_eq!(lease_holder(&lease(Some("pod-a"), "2026-11-28T02:59:40.000000Z"), now), None);
    let released: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "noderotation"}, "spec": {}}),
    )
    .expect("lease json");
    assert_eq!(lease_holder(&released, now), None);
}

#[test]
fn uninstall_help_says_run_must_not_be_running() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_noderotation"))
        .args(["uninstall", "--help"])
        .output()
        .expect("run noderotation");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("must not be running"), "{help}");
    assert!(help.contains("--dry-run") && help.contains("--stop-deployment"), "{help}");
}

/// A claim Karpenter launched for a placeholder (`launched-for`) that never turned Ready and
/// hosts nothing: the uninstall ends its rotation, and without Karpenter's node repair nothing
/// else would delete it, so the uninstall does (dry run: listed, not deleted). A claim without
/// the mark, or one that initialized once, is not deleted; its mark is removed like every key
/// of ours.
#[test]
fn uninstall_deletes_a_surge_claim_that_never_turned_ready_and_nothing_else() {
    let fx = mid_rotation(false);
    fx.never_ready_surge("s9");
    fx.set_claim_ann("s9", Key::LaunchedFor, Some("c1"));
    fx.never_ready_surge("w9");
    fx.never_ready_surge("r9");
    fx.set_claim_ann("r9", Key::LaunchedFor, Some("c1"));
    fx.initialized("r9");
    fx.client.flush_cache();
    let client: Arc<dyn Cluster> = Arc::new(fx.client.clone());
    let deleted = |changes: &[Change]| -> Vec<String> {
        changes
            .iter()
            .filter(|c| c.what == What::DeleteSurgeClaim)
            .map(|c| c.object.name.clone())
            .collect()
    };
    let plan = uninstall(client.as_ref(), true);
    assert!(plan.errors.is_empty(), "{:?}", plan.errors);
    assert_eq!(deleted(&plan.changes), ["s9"]);
    assert!(!fx.deleting("s9"), "a dry run deletes nothing");
    let report = uninstall(client.as_ref(), false);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(deleted(&report.changes), ["s9"]);
    assert!(
        report.summary().contains("1 never-Ready surge claim(s) deleted"),
        "{}",
        report.summary()
    );
    assert!(fx.deleting("s9"), "the never-Ready surge claim is deleted");
    for kept in ["w9", "r9"] {
        assert!(!fx.deleting(kept), "{kept} stays");
    }
    assert!(fx.claim_ann("r9", Key::LaunchedFor).is_none(), "our mark is removed");
}
