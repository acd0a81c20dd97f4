//! Tests against a real kube-apiserver (the apiserver tier, `tests/k8s-harness`).
//!
//! Run: `eval "$(tests/k8s-harness/start.sh --karpenter-crds)"; cargo test --test apiserver`
//! (`tests/all.sh` does this). Without the harness (`KUBECONFIG` and `HARNESS_READY_FILE`
//! unset) every cluster test prints why and passes, so plain `cargo test` works anywhere; the
//! manifest checks at the bottom need no cluster.
#[path = "apiserver/actor.rs"]
mod actor;
#[path = "apiserver/kubelet.rs"]
mod kubelet;
#[path = "apiserver/support.rs"]
mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch as KubePatch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Config, ResourceExt};
use noderotation::cluster::kube::KubeCluster;
use noderotation::cluster::{ApiError, Cluster, EventRecord, ObjectKind, ObjectRef, Patch};
use noderotation::policy::crd::RotationPolicyStatus;
use noderotation::runtime::preflight::{self, PreflightError, Requirement};
use serde_json::{Value, json};
use support::*;

macro_rules! harness {
    () => {
        match support::env() {
            Some(env) => {
                support::setup(&env)?;
                env
            }
            None => return Ok(()),
        }
    };
}

// ---- (a) preflight ---------------------------------------------------------------------------

#[tokio::test]
async fn preflight_names_a_resource_that_is_not_served() -> TestResult {
    let env = harness!();
    let client = env.admin().await?;
    let missing = Requirement {
        group: "karpenter.example.invalid".into(),
        version: "v1".into(),
        plural: "nodepools".into(),
        hint: "install it".into(),
    };
    let err = preflight::check_served(&client, &missing).await.err().ok_or("served?")?;
    assert!(matches!(err, PreflightError::NotServed { .. }), "{err:?}");
    assert!(err.to_string().contains("nodepools.karpenter.example.invalid/v1"), "{err}");
    // The real group is served in this harness, and the full preflight passes as admin.
    preflight::preflight(&client).await?;
    Ok(())
}

#[tokio::test]
async fn preflight_names_a_resource_rbac_cannot_read() -> TestResult {
    let env = harness!();
    let kc = kube::config::Kubeconfig::read_from(&env.kubeconfig)?;
    let mut config =
        Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    config.auth_info.impersonate = Some("someone-without-rbac".into());
    let client = kube::Client::try_from(config)?;
    let err = preflight::preflight(&client).await.err().ok_or("preflight passed without RBAC")?;
    assert!(matches!(err, PreflightError::NotReadable { .. }), "{err:?}");
    assert!(err.to_string().contains("nodepools.karpenter.sh/v1"), "{err}");
    Ok(())
}

/// The binary against a second, bare API server (no Karpenter CRDs): non-zero exit, and the
/// message names the missing resource.
#[tokio::test]
async fn run_exits_non_zero_naming_the_missing_karpenter_resource() -> TestResult {
    let env = harness!();
    let Some(up) = env.bin.as_ref().map(|b| b.join("up")).filter(|p| p.exists()) else {
        eprintln!("skipping: HARNESS_BIN/up not found");
        return Ok(());
    };
    let dir = scratch("bare-apiserver");
    let ready = dir.join("ready.json");
    let _ = std::fs::remove_file(&ready);
    let mut bare = std::process::Command::new(up)
        .args(["--ready-file", &ready.to_string_lossy()])
        .stdout(std::fs::File::create(dir.join("up.log"))?)
        .stderr(std::fs::File::create(dir.join("up.err"))?)
        .spawn()?;
    let result = async {
        let info: Value = eventually("the bare apiserver", Duration::from_secs(120), || async {
            let text = std::fs::read_to_string(&ready).ok()?;
            serde_json::from_str(&text).ok()
        })
        .await?;
        let kubeconfig = info["kubeconfig"].as_str().ok_or("no kubeconfig in the ready file")?;
        let kubeconfig = kubeconfig.to_string();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(binary())
                .args(["run", "--metrics-addr", "127.0.0.1:0", "--log-format", "text"])
                .env("KUBECONFIG", kubeconfig)
                .output()
        })
        .await??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("error: preflight:"), "{stderr}");
        assert!(stderr.contains("nodepools.karpenter.sh/v1"), "{stderr}");
        eprintln!("preflight message: {}", stderr.lines().last().unwrap_or_default());
        Ok::<(), Error>(())
    }
    .await;
    let _ = std::process::Command::new("kill").args(["-TERM", &bare.id().to_string()]).status();
    let _ = bare.wait();
    result
}

// ---- (b) kubectl: examples, printer columns, explain -------------------------------------------

/// The field an invalid example must be rejected for, from its `# Schema:` header line:
/// `spec.maintenanceWindows[].end pattern` → `end`; `spec required:nodePoolSelector` →
/// `nodePoolSelector`.
fn expected_field(text: &str) -> Option<String> {
    let line = text.lines().find_map(|l| l.strip_prefix("# Schema:"))?.trim();
    let mut parts = line.split_whitespace();
    let path = parts.next()?;
    let rule = parts.next().unwrap_or("");
    if let Some(field) = rule.strip_prefix("required:") {
        return Some(field.to_string());
    }
    Some(path.rsplit('.').next()?.trim_end_matches("[]").to_string())
}

fn yaml_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    files
}

#[tokio::test]
async fn kubectl_applies_every_example_and_rejects_every_invalid_one_naming_the_field() -> TestResult
{
    let env = harness!();
    let examples = Path::new(REPO).join("deploy/examples");
    let valid = yaml_files(&examples);
    assert!(!valid.is_empty(), "no examples in {}", examples.display());
    for file in &valid {
        // Server-side dry run: the full admission and CRD validation, without leaving policies
        // behind that would govern the pools of other tests.
        let path = file.to_string_lossy();
        let out = env.kubectl(&["apply", "--dry-run=server", "-f", &path]);
        assert!(
            out.status.success(),
            "{path} was rejected: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let invalid = yaml_files(&examples.join("invalid"));
    assert!(invalid.len() >= 20, "only {} invalid examples", invalid.len());
    let mut failures = Vec::new();
    for file in &invalid {
        let path = file.to_string_lossy();
        let text = std::fs::read_to_string(file)?;
        let out = env.kubectl(&["apply", "--dry-run=server", "-f", &path]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if out.status.success() {
            failures.push(format!("{name}: accepted"));
            continue;
        }
        match expected_field(&text) {
            Some(field) if stderr.contains(&field) => {}
            Some(field) => {
                failures.push(format!("{name}: message does not name {field}: {stderr}"))
            }
            None => failures.push(format!("{name}: no `# Schema:` header naming the field")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        invalid.len(),
        failures.join("\n")
    );
    eprintln!("{} examples applied, {} invalid examples rejected", valid.len(), invalid.len());
    Ok(())
}

/// A duration past Go's range matches the OpenAPI pattern; the CEL rule every duration field
/// carries parses it with `duration()`, which fails, so the apiserver rejects the object naming
/// the field. The longest valid duration is accepted everywhere.
#[tokio::test]
async fn the_crd_rejects_durations_that_overflow_and_accepts_the_longest_one() -> TestResult {
    let env = harness!();
    let policy = |field: &str, value: &str| {
        let mut spec = json!({
            "nodePoolSelector": {"matchLabels": {TEST_LABEL: "no-pool-has-this"}},
            "maintenanceWindows": [{"timezone": "UTC", "days": ["Sat"], "start": "02:00", "end": "06:00"}],
            "surge": {}
        });
        match field.strip_prefix("surge.") {
            Some(f) => spec["surge"][f] = json!(value),
            None => spec[field] = json!(value),
        }
        json!({
            "apiVersion": "noderotation.io/v1alpha1",
            "kind": "RotationPolicy",
            "metadata": {"name": "duration-overflow-probe"},
            "spec": spec
        })
        .to_string()
    };
    let fields = [
        "ageThreshold",
        "surge.readyTimeout",
        "surge.cooldownAfter",
        "surge.failurePause",
        "surge.drainEstimate",
        "surge.provisioningEstimate",
        "surge.retryBackoff",
    ];
    let mut failures = Vec::new();
    for field in fields {
        let name = field.rsplit('.').next().unwrap_or(field);
        for value in ["94522879700260684295381835.9999h", "2562047h47m16.854775808s"] {
            let out = env.kubectl_as(
                &env.kubeconfig,
                &["apply", "--dry-run=server", "-f", "-"],
                Some(&policy(field, value)),
            );
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() {
                failures.push(format!("{field}: {value} accepted"));
            } else if !stderr.contains(name) {
                failures.push(format!("{field}: {value} rejected without naming it: {stderr}"));
            }
        }
        let longest = "2562047h47m16.854775807s";
        let out = env.kubectl_as(
            &env.kubeconfig,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&policy(field, longest)),
        );
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            failures.push(format!("{field}: {longest} rejected: {stderr}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[tokio::test]
async fn kubectl_get_shows_printer_columns_and_explain_shows_descriptions() -> TestResult {
    let env = harness!();
    let name = "printer-columns-probe";
    let policy = json!({
        "apiVersion": "noderotation.io/v1alpha1",
        "kind": "RotationPolicy",
        "metadata": {"name": name},
        "spec": {
            "nodePoolSelector": {"matchLabels": {TEST_LABEL: "no-pool-has-this"}},
            "maintenanceWindows": [{"timezone": "UTC", "days": ["Sat"], "start": "02:00", "end": "06:00"}]
        }
    });
    env.kubectl_ok(&["apply", "-f", "-"], Some(&policy.to_string()))?;
    let table = env.kubectl_ok(&["get", "rotationpolicies", name], None)?;
    let header = table.lines().next().unwrap_or_default().to_string();
    let crd: Value = serde_yaml::from_str(&std::fs::read_to_string(
        Path::new(REPO).join("crds/rotationpolicy.yaml"),
    )?)?;
    let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .ok_or("no printer columns in the CRD")?;
    assert!(!columns.is_empty());
    for col in columns {
        let col = col["name"].as_str().unwrap_or_default().to_uppercase();
        assert!(header.contains(&col), "column {col} missing from:\n{table}");
    }
    let short = env.kubectl_ok(&["get", "rp", name, "-o", "name"], None)?;
    assert_eq!(short.trim(), format!("rotationpolicy.noderotation.io/{name}"));
    eprintln!("{table}");

    let explain = env.kubectl_ok(&["explain", "rotationpolicy.spec"], None)?;
    for field in ["maintenanceWindows", "nodePoolSelector", "surge", "ageThreshold"] {
        assert!(explain.contains(field), "explain lacks {field}:\n{explain}");
    }
    assert!(explain.contains("DESCRIPTION"), "{explain}");
    assert!(!explain.contains("<empty>"), "a field without a description:\n{explain}");
    let windows = env.kubectl_ok(&["explain", "rotationpolicy.spec.maintenanceWindows"], None)?;
    assert!(windows.contains("timezone") && !windows.contains("<empty>"), "{windows}");
    env.kubectl_ok(&["delete", "rotationpolicy", name], None)?;
    Ok(())
}

// ---- (c) KubeCluster on real objects -----------------------------------------------------------

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Error> {
    Ok(tokio::task::spawn_blocking(f).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_cluster_honours_preconditions_finalizers_and_merge_patches() -> TestResult {
    let env = harness!();
    let admin = env.admin().await?;
    let pool = "kc-semantics";
    let (claim, node) = ("kc-semantics-claim", "kc-semantics-node");
    for (kind, name) in [("NodeClaim", claim), ("Node", node), ("NodePool", pool)] {
        let api = dyn_api(&admin, kind);
        if api.get_opt(name).await?.is_some() {
            let _ = remove_finalizers(&admin, kind, name).await;
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), CONTROLLER_NS);
    for p in ["kc-semantics-placeholder", "kc-semantics-app"] {
        let _ = pods.delete(p, &DeleteParams::default().grace_period(0)).await;
    }
    eventually("old objects gone", Duration::from_secs(30), || async {
        let gone = dyn_api(&admin, "NodeClaim").get_opt(claim).await.ok()?.is_none()
            && pods.get_opt("kc-semantics-app").await.ok()?.is_none()
            && pods.get_opt("kc-semantics-placeholder").await.ok()?.is_none();
        gone.then_some(())
    })
    .await?;
    create(&admin, &nodepool_json(pool, "kube-cluster")).await?;
    ready_claim_and_node(&admin, claim, node, pool).await?;
    running_pod(&admin, CONTROLLER_NS, "kc-semantics-app", node, "250m").await?;
    let claim_uid = dyn_api(&admin, "NodeClaim").get(claim).await?.uid();

    let reporter = Reporter { controller: "noderotation-test".into(), instance: None };
    let (cluster, _changes) = KubeCluster::start(admin.clone(), CONTROLLER_NS, reporter);
    cluster.wait_synced().await?;
    let c = cluster.clone();
    eventually("the cache to hold the claim", Duration::from_secs(20), || {
        let c = c.clone();
        async move {
            let view = blocking(move || c.cache()).await.ok()?;
            (view.claims.contains_key(claim) && view.nodes.contains_key(node)).then_some(view)
        }
    })
    .await?;

    let c = cluster.clone();
    blocking(move || -> Result<(), Error> {
        // Same generation, same Arc: the view is not rebuilt without a change.
        assert!(Arc::ptr_eq(&c.cache(), &c.cache()));
        let claim_ref = ObjectRef::cluster(ObjectKind::NodeClaim, claim);
        let fresh = c.get_claim(claim)?.ok_or("claim missing")?;
        let rv = fresh.resource_version().ok_or("no rv")?;
        let mut set = Patch::default();
        set.set.insert("noderotation.io/state".into(), "pending".into());
        set.set.insert("noderotation.io/keep".into(), "yes".into());
        c.patch(&claim_ref, &set, Some(&rv))?;
        // The same (now stale) resourceVersion again: 409.
        assert_eq!(c.patch(&claim_ref, &set, Some(&rv)), Err(ApiError::Conflict));
        // Merge patch removes an annotation and leaves the others.
        let mut remove = Patch::default();
        remove.remove.insert("noderotation.io/state".into());
        c.patch(&claim_ref, &remove, None)?;
        let after = c.get_claim(claim)?.ok_or("claim missing")?;
        assert_eq!(after.annotations().get("noderotation.io/state"), None);
        assert_eq!(
            after.annotations().get("noderotation.io/keep").map(String::as_str),
            Some("yes")
        );
        assert_eq!(
            c.patch(&ObjectRef::cluster(ObjectKind::NodeClaim, "no-such-claim"), &set, None),
            Err(ApiError::NotFound)
        );

        // Cordon.
        let node_ref = ObjectRef::cluster(ObjectKind::Node, node);
        c.patch(&node_ref, &Patch { unschedulable: Some(true), ..Patch::default() }, None)?;
        let n = c.get_node(node)?.ok_or("node missing")?;
        assert_eq!(n.spec.and_then(|s| s.unschedulable), Some(true));

        // Pods of a node, by field selector.
        let on_node = c.pods_on_node(node)?;
        assert_eq!(on_node.iter().map(|p| p.name_any()).collect::<Vec<_>>(), ["kc-semantics-app"]);
        assert!(c.pods_on_node("no-such-node")?.is_empty());

        // uid-preconditioned delete: a wrong uid is a conflict, so is a stale resourceVersion;
        // the right ones leave the claim terminating behind its finalizer.
        let uid = after.uid().ok_or("no uid")?;
        assert_eq!(
            c.delete(&claim_ref, Some("00000000-0000-0000-0000-000000000000"), None),
            Err(ApiError::Conflict)
        );
        assert_eq!(c.delete(&claim_ref, Some(&uid), Some("1")), Err(ApiError::Conflict));
        let current = c.get_claim(claim)?.ok_or("claim")?;
        c.delete(&claim_ref, Some(&uid), current.resource_version().as_deref())?;
        let deleting = c.get_claim(claim)?.ok_or("a finalized claim must stay")?;
        assert!(deleting.is_deleting());

        // Placeholder create: AlreadyExists the second time.
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "kc-semantics-placeholder", "namespace": CONTROLLER_NS,
                         "labels": {"app.kubernetes.io/managed-by": "noderotation"},
                         "annotations": {"noderotation.io/surge-for": claim}},
            "spec": {"priorityClassName": "noderotation-placeholder",
                     "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
        }))?;
        c.create_pod(&pod)?;
        assert_eq!(c.create_pod(&pod), Err(ApiError::AlreadyExists));

        // Events (events.k8s.io), best effort but must work.
        // Same reason, another note: a new Event with its own note (kube-runtime's Recorder
        // would patch the first one and keep its note). The identical report: a series.
        for message in ["rotation of c1", "rotation of c2", "rotation of c2"] {
            c.record_event(&EventRecord {
                object: claim_ref.clone(),
                reason: "KubeClusterTest".into(),
                message: message.into(),
                warning: false,
                time: chrono::DateTime::UNIX_EPOCH,
            })?;
        }
        Ok(())
    })
    .await??;

    // The placeholder reaches the cache (label selector, controller namespace).
    let c = cluster.clone();
    eventually("the placeholder in the cache", Duration::from_secs(20), || {
        let c = c.clone();
        async move {
            let view = blocking(move || c.cache()).await.ok()?;
            (view.placeholders.contains_key("kc-semantics-placeholder")
                && !view.placeholders.contains_key("kc-semantics-app"))
            .then_some(())
        }
    })
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(admin.clone(), "default");
    let listed = events.list(&Default::default()).await?;
    let mut ours: Vec<(String, i32)> = listed
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("KubeClusterTest")
                && e.regarding.as_ref().and_then(|r| r.uid.clone()) == claim_uid
        })
        .map(|e| (e.note.clone().unwrap_or_default(), e.series.as_ref().map_or(1, |s| s.count)))
        .collect();
    ours.sort();
    assert_eq!(ours, [("rotation of c1".to_string(), 1), ("rotation of c2".to_string(), 2)]);

    // Finalizing removes the claim: get -> None, delete -> NotFound.
    remove_finalizers(&admin, "NodeClaim", claim).await?;
    let c = cluster.clone();
    eventually("the claim to be gone", Duration::from_secs(20), || {
        let c = c.clone();
        async move { blocking(move || c.get_claim(claim)).await.ok()?.ok()?.is_none().then_some(()) }
    })
    .await?;
    let c = cluster.clone();
    let gone =
        blocking(move || c.delete(&ObjectRef::cluster(ObjectKind::NodeClaim, claim), None, None))
            .await?;
    assert_eq!(gone, Err(ApiError::NotFound));

    // Policy status through the subresource, with a resourceVersion precondition.
    let policy_name = "kc-semantics-policy";
    let _ = dyn_api(&admin, "RotationPolicy").delete(policy_name, &DeleteParams::default()).await;
    let created = create(
        &admin,
        &json!({
            "apiVersion": "noderotation.io/v1alpha1", "kind": "RotationPolicy",
            "metadata": {"name": policy_name},
            "spec": {"nodePoolSelector": {"matchLabels": {TEST_LABEL: "none"}},
                     "maintenanceWindows": [{"timezone": "UTC", "days": ["Sat"], "start": "02:00", "end": "06:00"}]}
        }),
    )
    .await?;
    let rv = created.resource_version().ok_or("no rv")?;
    let c = cluster.clone();
    blocking(move || -> Result<(), Error> {
        let status =
            RotationPolicyStatus { matched_node_pools: 3, ..RotationPolicyStatus::default() };
        c.update_policy_status(policy_name, &status, Some(&rv))?;
        assert_eq!(
            c.update_policy_status(policy_name, &status, Some(&rv)),
            Err(ApiError::Conflict)
        );
        let cleared = RotationPolicyStatus::default();
        c.update_policy_status(policy_name, &cleared, None)?;
        Ok(())
    })
    .await??;
    let policy = dyn_api(&admin, "RotationPolicy").get(policy_name).await?;
    assert_eq!(policy.data["status"]["matchedNodePools"], json!(0));
    let _ = dyn_api(&admin, "RotationPolicy").delete(policy_name, &DeleteParams::default()).await;
    Ok(())
}

// ---- (d) RBAC --------------------------------------------------------------------------------

#[test]
fn the_cluster_role_is_exactly_the_supplement_list() -> TestResult {
    let role = deploy_cluster_role()?;
    let mut got = Vec::new();
    for rule in role["rules"].as_array().ok_or("no rules")? {
        for group in rule["apiGroups"].as_array().into_iter().flatten() {
            for res in rule["resources"].as_array().into_iter().flatten() {
                let mut verbs: Vec<String> = rule["verbs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect();
                verbs.sort();
                got.push(format!(
                    "{}/{}: {}",
                    group.as_str().unwrap_or_default(),
                    res.as_str().unwrap_or_default(),
                    verbs.join(",")
                ));
            }
        }
    }
    got.sort();
    let mut want = [
        "/events: create,patch",
        "/nodes: get,list,patch,update,watch",
        "/pods: get,list,watch",
        "events.k8s.io/events: create,patch",
        "karpenter.sh/nodeclaims: delete,get,list,patch,update,watch",
        "karpenter.sh/nodepools: get,list,patch,update,watch",
        "noderotation.io/rotationpolicies: get,list,watch",
        "noderotation.io/rotationpolicies/status: patch,update",
        // Beyond the supplement: the preflight reads the placeholder PriorityClass.
        "scheduling.k8s.io/priorityclasses: get",
    ];
    want.sort();
    assert_eq!(got, want);
    Ok(())
}

#[tokio::test]
async fn rbac_allows_the_controller_writes_and_denies_creating_nodeclaims() -> TestResult {
    let env = harness!();
    let admin = env.admin().await?;
    let controller = env.controller().await?;
    let (pool, claim) = ("rbac-pool", "rbac-claim");
    let claims = dyn_api(&admin, "NodeClaim");
    if claims.get_opt(claim).await?.is_some() {
        remove_finalizers(&admin, "NodeClaim", claim).await?;
        let _ = claims.delete(claim, &DeleteParams::default()).await;
    }
    if dyn_api(&admin, "NodePool").get_opt(pool).await?.is_none() {
        create(&admin, &nodepool_json(pool, "rbac")).await?;
    }
    eventually("the old claim gone", Duration::from_secs(20), || async {
        claims.get_opt(claim).await.ok()?.is_none().then_some(())
    })
    .await?;
    create(&admin, &nodeclaim_json(claim, pool)).await?;

    // Permitted: annotate a claim and a pool, delete a claim, create a placeholder pod in the
    // controller namespace.
    let as_controller = dyn_api(&controller, "NodeClaim");
    let annotate = json!({"metadata": {"annotations": {"noderotation.io/rbac": "ok"}}});
    as_controller.patch(claim, &PatchParams::default(), &KubePatch::Merge(&annotate)).await?;
    dyn_api(&controller, "NodePool")
        .patch(pool, &PatchParams::default(), &KubePatch::Merge(&annotate))
        .await?;
    let pods: Api<Pod> = Api::namespaced(controller.clone(), CONTROLLER_NS);
    let _ = Api::<Pod>::namespaced(admin.clone(), CONTROLLER_NS)
        .delete("rbac-placeholder", &DeleteParams::default().grace_period(0))
        .await;
    eventually("the old placeholder gone", Duration::from_secs(20), || async {
        Api::<Pod>::namespaced(admin.clone(), CONTROLLER_NS)
            .get_opt("rbac-placeholder")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "rbac-placeholder", "labels": {"app.kubernetes.io/managed-by": "noderotation"}},
        "spec": {"priorityClassName": "noderotation-placeholder",
                 "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    pods.delete("rbac-placeholder", &DeleteParams::default()).await?;

    // Denied: creating a NodeClaim (capacity is Karpenter's), pods outside the namespace,
    // writing a policy's spec.
    fn forbidden<T>(r: Result<T, kube::Error>) -> bool {
        matches!(r, Err(kube::Error::Api(s)) if s.code == 403)
    }
    let new_claim: kube::api::DynamicObject =
        serde_json::from_value(nodeclaim_json("rbac-forbidden-claim", pool))?;
    assert!(forbidden(as_controller.create(&PostParams::default(), &new_claim).await));
    let elsewhere: Api<Pod> = Api::namespaced(controller.clone(), "default");
    assert!(forbidden(elsewhere.create(&PostParams::default(), &pod).await));
    let policies = dyn_api(&controller, "RotationPolicy");
    assert!(forbidden(
        policies.patch("anything", &PatchParams::default(), &KubePatch::Merge(&annotate)).await
    ));

    // The same through KubeCluster, as the controller identity.
    let reporter = Reporter { controller: "noderotation-test".into(), instance: None };
    let (cluster, _rx) = KubeCluster::start(controller.clone(), CONTROLLER_NS, reporter);
    tokio::time::timeout(Duration::from_secs(30), cluster.wait_synced()).await??;
    let c = cluster.clone();
    let denied = tokio::task::spawn_blocking(move || {
        c.delete(&ObjectRef::cluster(ObjectKind::RotationPolicy, "anything"), None, None)
    })
    .await?;
    assert!(matches!(denied, Err(ApiError::Forbidden(_))), "{denied:?}");
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || {
        c.delete(&ObjectRef::cluster(ObjectKind::NodeClaim, claim), None, None)
    })
    .await??;
    remove_finalizers(&admin, "NodeClaim", claim).await?;
    Ok(())
}

// ---- manifests (no cluster) ------------------------------------------------------------------

#[test]
fn helm_chart_crd_is_the_generated_crd() -> TestResult {
    let generated = std::fs::read_to_string(Path::new(REPO).join("crds/rotationpolicy.yaml"))?;
    let chart = std::fs::read_to_string(
        Path::new(REPO).join("deploy/helm/noderotation/crds/rotationpolicy.yaml"),
    )?;
    assert!(
        generated == chart,
        "deploy/helm/noderotation/crds/rotationpolicy.yaml is stale: \
         cp crds/rotationpolicy.yaml deploy/helm/noderotation/crds/"
    );
    Ok(())
}

#[test]
fn helm_values_are_covered_by_the_schema() -> TestResult {
    let dir = Path::new(REPO).join("deploy/helm/noderotation");
    let values: Value = serde_yaml::from_str(&std::fs::read_to_string(dir.join("values.yaml"))?)?;
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("values.schema.json"))?)?;
    fn check(values: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
        let Some(obj) = values.as_object() else { return };
        let props = schema["properties"].as_object();
        for (k, v) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => check(v, s, &format!("{path}.{k}"), out),
                None if schema["additionalProperties"] == json!(false) => {
                    out.push(format!("{path}.{k}"))
                }
                None => {}
            }
        }
    }
    let mut missing = Vec::new();
    check(&values, &schema, "", &mut missing);
    assert!(missing.is_empty(), "values without a schema entry: {missing:?}");
    assert!(
        schema["properties"]["placeholder"]["properties"]["priorityClass"]["properties"]["value"]["maximum"]
            == json!(-1)
    );
    Ok(())
}

#[test]
fn the_deployment_is_hardened() -> TestResult {
    let text = std::fs::read_to_string(Path::new(REPO).join("deploy/base/deployment.yaml"))?;
    let d: Value = serde_yaml::from_str(&text)?;
    assert_eq!(d["spec"]["replicas"], json!(2));
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], json!(true));
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], json!("RuntimeDefault"));
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], json!(true));
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], json!(false));
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["resources"]["requests"].is_object() && c["resources"]["limits"].is_object());
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], json!("/healthz"));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], json!("/readyz"));
    let pc: Value = serde_yaml::from_str(&std::fs::read_to_string(
        Path::new(REPO).join("deploy/base/priorityclass.yaml"),
    )?)?;
    assert!(pc["value"].as_i64().is_some_and(|v| v < 0));
    assert_eq!(pc["preemptionPolicy"], json!("Never"));
    Ok(())
}

#[test]
fn expected_field_reads_the_schema_header() {
    assert_eq!(
        expected_field("# x\n# Schema: spec.maintenanceWindows[].end pattern\n").as_deref(),
        Some("end")
    );
    assert_eq!(
        expected_field("# Schema: spec required:nodePoolSelector").as_deref(),
        Some("nodePoolSelector")
    );
    assert_eq!(
        expected_field("# Schema: spec.maintenanceWindows[].days[] enum").as_deref(),
        Some("days")
    );
}

// ---- (e) rotations: `noderotation run` + the Karpenter/kubelet actor --------------------------

/// One controller at a time: every controller process watches every pool and policy.
static ROTATION: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SUITE_LABEL: &str = "noderotation.io/suite";
const ANN: &str = "noderotation.io/";

/// A governed pool with one Ready candidate claim (and node, and a workload pod on it).
struct Rotation {
    env: Env,
    admin: kube::Client,
    pool: String,
    candidate: String,
    node: String,
    dir: std::path::PathBuf,
    /// Where the controller under test runs (its placeholders live there).
    ns: String,
}

impl Rotation {
    async fn new(env: &Env, test: &str, surge: Value) -> Result<Rotation, Error> {
        let admin = env.admin().await?;
        // Policies of earlier rotation tests would govern their pools under this controller.
        env.kubectl_ok(
            &["delete", "rotationpolicies", "-l", &format!("{SUITE_LABEL}=rotation")],
            None,
        )?;
        let pool = format!("{test}-{}", std::process::id());
        let candidate = format!("{pool}-c1");
        let node = format!("{candidate}-node");
        create(&admin, &nodepool_json(&pool, &pool)).await?;
        ready_claim_and_node(&admin, &candidate, &node, &pool).await?;
        running_pod(&admin, "default", &format!("{pool}-app"), &node, "500m").await?;
        let policy = json!({
            "apiVersion": "noderotation.io/v1alpha1", "kind": "RotationPolicy",
            "metadata": {"name": pool, "labels": {SUITE_LABEL: "rotation"}},
            "spec": {
                "nodePoolSelector": {"matchLabels": {TEST_LABEL: pool}},
                "ageThreshold": "1s",
                "maintenanceWindows": [{"timezone": "UTC",
                    "days": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
                    "start": "00:00", "end": "00:00"}],
                "surge": surge
            }
        });
        env.kubectl_ok(&["apply", "-f", "-"], Some(&policy.to_string()))?;
        Ok(Rotation {
            env: env.clone(),
            admin,
            dir: scratch(test),
            pool,
            candidate,
            node,
            ns: CONTROLLER_NS.to_string(),
        })
    }

    fn controller(&self, name: &str) -> Result<ControllerProcess, Error> {
        // As the harness's controller user, bound to exactly the RBAC of deploy/ (setup()); the
        // Role there names the Lease "noderotation".
        ControllerProcess::start(
            &self.env.controller_kubeconfig,
            name,
            "noderotation",
            &self.dir.join(format!("{name}.log")),
        )
    }

    async fn annotations(
        &self,
        kind: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        Ok(dyn_api(&self.admin, kind).get_opt(name).await?.map(|o| o.annotations().clone()))
    }

    async fn ann(&self, kind: &str, name: &str, key: &str) -> Option<String> {
        self.annotations(kind, name).await.ok()??.get(&format!("{ANN}{key}")).cloned()
    }

    async fn wait_claim_state(&self, state: &str, timeout: Duration) -> Result<(), Error> {
        eventually(&format!("claim {} state {state}", self.candidate), timeout, || async {
            (self.ann("NodeClaim", &self.candidate, "state").await.as_deref() == Some(state))
                .then_some(())
        })
        .await
    }

    async fn placeholders(&self) -> Result<Vec<Pod>, Error> {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        let list = pods
            .list(
                &kube::api::ListParams::default()
                    .labels("app.kubernetes.io/managed-by=noderotation"),
            )
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_selector.as_ref())
                    .and_then(|s| s.get(NODEPOOL_LABEL))
                    .is_some_and(|v| *v == self.pool)
            })
            .collect())
    }

    /// The rotation finished: `last-rotation-at` or `last-failure-at` set, no anchor.
    async fn wait_settled(&self, key: &str, timeout: Duration) -> Result<(), Error> {
        eventually(&format!("pool {} {key} and no anchor", self.pool), timeout, || async {
            let ann = self.annotations("NodePool", &self.pool).await.ok()??;
            (ann.contains_key(&format!("{ANN}{key}"))
                && !ann.contains_key(&format!("{ANN}active-rotation")))
            .then_some(())
        })
        .await
    }

    /// No placeholder, no owned marker on any node of the pool, no anchor.
    async fn assert_clean(&self) -> TestResult {
        let ph = self.placeholders().await?;
        let live: Vec<_> = ph
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| p.name_any())
            .collect();
        assert!(live.is_empty(), "placeholders left: {live:?}");
        let nodes = dyn_api(&self.admin, "Node")
            .list(
                &kube::api::ListParams::default()
                    .labels(&format!("{NODEPOOL_LABEL}={}", self.pool)),
            )
            .await?;
        for n in nodes.items {
            let a = n.annotations();
            for key in ["surge-for", "do-not-disrupt-owned", "cordoned"] {
                assert!(
                    !a.contains_key(&format!("{ANN}{key}")),
                    "node {} keeps {key}: {a:?}",
                    n.name_any()
                );
            }
            assert!(
                !a.contains_key("karpenter.sh/do-not-disrupt"),
                "node {} keeps do-not-disrupt",
                n.name_any()
            );
        }
        let pool = self.annotations("NodePool", &self.pool).await?.unwrap_or_default();
        for key in ["active-rotation", "active-rotation-state"] {
            assert!(!pool.contains_key(&format!("{ANN}{key}")), "pool keeps {key}: {pool:?}");
        }
        Ok(())
    }

    async fn cleanup(&self) {
        let _ = self.env.kubectl(&["delete", "rotationpolicy", &self.pool, "--wait=false"]);
    }
}

use std::collections::{BTreeMap, BTreeSet};

fn completed(metrics: &str, pool: &str, outcome: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with("noderotation_completed_total{"))
        .filter(|l| {
            l.contains(&format!("nodepool=\"{pool}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

fn surge(ready_timeout: &str) -> Value {
    json!({"readyTimeout": ready_timeout, "cooldownAfter": "10m", "retryBackoff": "30m"})
}

/// What a controller under test serves: a host process or the image in a container.
trait Operator {
    async fn metrics(&self) -> Result<String, Error>;
    fn log_text(&self) -> String;
}

impl Operator for ControllerProcess {
    async fn metrics(&self) -> Result<String, Error> {
        ControllerProcess::metrics(self).await
    }
    fn log_text(&self) -> String {
        ControllerProcess::log_text(self)
    }
}

impl Operator for kubelet::PodContainer {
    async fn metrics(&self) -> Result<String, Error> {
        kubelet::PodContainer::metrics(self).await
    }
    fn log_text(&self) -> String {
        kubelet::PodContainer::log_text(self)
    }
}

/// Ends a rotation test whatever its outcome: the controller's log on failure, the actor
/// stopped, the policy removed.
async fn finish(
    fx: &Rotation,
    actor: actor::Actor,
    ctl: &impl Operator,
    result: TestResult,
) -> TestResult {
    if result.is_err() {
        eprintln!("controller log:\n{}", ctl.log_text());
    }
    actor.stop().await;
    fx.cleanup().await;
    result
}

/// One full surge rotation of `fx`'s candidate by `ctl`, checked step by step: pending with the
/// candidate frozen, cordoned and one placeholder and no delete; draining; completed once, the
/// pool clean, one surge claim, one success in `/metrics` from the leader. The actor is stopped
/// and the policy removed whatever the outcome; the controller's log is printed on failure.
async fn full_surge(fx: &Rotation, actor: actor::Actor, ctl: &impl Operator) -> TestResult {
    let result = async {
        // Anchor + pending: frozen, cordoned, placeholder, no delete before capacity is ready.
        fx.wait_claim_state("pending", Duration::from_secs(60)).await?;
        assert_eq!(
            fx.ann("NodePool", &fx.pool, "active-rotation").await.as_deref(),
            Some(fx.candidate.as_str())
        );
        // The pending pass writes the claim state first, then freezes, cordons and creates the
        // placeholder; the actor's provision delay keeps the rotation pending meanwhile.
        eventually(
            "candidate frozen and cordoned, one placeholder",
            Duration::from_secs(20),
            || async {
                let node = dyn_api(&fx.admin, "Node").get(&fx.node).await.ok()?;
                let frozen =
                    node.annotations().get(&format!("{ANN}surge-for")) == Some(&fx.candidate);
                let cordoned = node.data["spec"]["unschedulable"] == json!(true);
                let one = fx.placeholders().await.ok()?.len() == 1;
                (frozen && cordoned && one).then_some(())
            },
        )
        .await?;
        let state = fx.ann("NodeClaim", &fx.candidate, "state").await;
        assert_eq!(state.as_deref(), Some("pending"), "no delete before surge capacity is ready");
        // Surge ready -> draining: the old claim is deleted and waits on its finalizer.
        fx.wait_claim_state("draining", Duration::from_secs(60)).await?;
        // The actor finalizes it; the pass after records the completion.
        fx.wait_settled("last-rotation-at", Duration::from_secs(60)).await?;
        assert!(dyn_api(&fx.admin, "NodeClaim").get_opt(&fx.candidate).await?.is_none());
        fx.assert_clean().await?;
        assert_eq!(actor.surge_claims().len(), 1, "one surge claim");
        let metrics = eventually("the success in /metrics", Duration::from_secs(10), || async {
            let m = ctl.metrics().await.ok()?;
            (completed(&m, &fx.pool, "success") == Some(1.0)).then_some(m)
        })
        .await?;
        assert!(metrics.lines().any(|l| l == "noderotation_leader 1"), "{metrics}");
        Ok::<(), Error>(())
    }
    .await;
    finish(fx, actor, ctl, result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_full_surge_completes_once_and_counts_one_success() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let fx = Rotation::new(&env, "rot-full", surge("2m")).await?;
    let actor = actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::Ready,
        Duration::from_secs(3),
        Duration::from_secs(3),
    );
    let ctl = fx.controller("full-a")?;
    full_surge(&fx, actor, &ctl).await
}

/// `maxUnavailable: 3` (docs/decisions/parallel-rotations.md): three claims of one pool are
/// rotated at once, each in its own slot (`active-rotation`, `.1`, `.2`) with its own placeholder
/// and surge claim, against the real API server's preconditions; all three complete once, and the
/// pool is left clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_three_at_once_in_one_pool_all_complete() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let mut spec = surge("2m");
    spec["maxUnavailable"] = json!(3);
    let fx = Rotation::new(&env, "rot-three", spec).await?;
    let others: Vec<String> = (2..=3).map(|i| format!("{}-c{i}", fx.pool)).collect();
    for claim in &others {
        let node = format!("{claim}-node");
        ready_claim_and_node(&fx.admin, claim, &node, &fx.pool).await?;
        running_pod(&fx.admin, "default", &format!("{claim}-app"), &node, "500m").await?;
    }
    // A provisioning delay long enough that all three are in flight before the first surge.
    let actor = actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::Ready,
        Duration::from_secs(8),
        Duration::from_secs(3),
    );
    let ctl = fx.controller("three-a")?;
    let result = async {
        let slots = ["active-rotation", "active-rotation.1", "active-rotation.2"];
        let anchored =
            eventually("three slots anchored at once", Duration::from_secs(60), || async {
                let ann = fx.annotations("NodePool", &fx.pool).await.ok()??;
                let names: BTreeSet<String> =
                    slots.iter().filter_map(|k| ann.get(&format!("{ANN}{k}")).cloned()).collect();
                (names.len() == 3).then_some(names)
            })
            .await?;
        let mut want: BTreeSet<String> = others.iter().cloned().collect();
        want.insert(fx.candidate.clone());
        assert_eq!(anchored, want, "each claim in one slot");
        let ann = fx.annotations("NodePool", &fx.pool).await?.unwrap_or_default();
        assert!(!ann.contains_key(&format!("{ANN}active-rotation.3")), "never a fourth: {ann:?}");
        eventually("three successes", Duration::from_secs(120), || async {
            let m = ctl.metrics().await.ok()?;
            (completed(&m, &fx.pool, "success") == Some(3.0)).then_some(())
        })
        .await?;
        for claim in want.iter() {
            assert!(dyn_api(&fx.admin, "NodeClaim").get_opt(claim).await?.is_none(), "{claim}");
        }
        assert_eq!(actor.surge_claims().len(), 3, "one surge claim per rotation");
        eventually("every slot released", Duration::from_secs(30), || async {
            let ann = fx.annotations("NodePool", &fx.pool).await.ok()??;
            let left = slots.iter().any(|k| ann.contains_key(&format!("{ANN}{k}")));
            let stamped = ["last-rotation-at", "last-rotation-at.1", "last-rotation-at.2"]
                .iter()
                .all(|k| ann.contains_key(&format!("{ANN}{k}")));
            (!left && stamped).then_some(())
        })
        .await?;
        fx.assert_clean().await?;
        Ok::<(), Error>(())
    }
    .await;
    finish(&fx, actor, &ctl, result).await
}

// ---- (f) in-cluster: the image, under the RBAC an install creates -----------------------------

/// The image is needed: `tests/all.sh` builds it and sets `NODEROTATION_IMAGE_REQUIRED=1`, so a
/// missing image fails CI instead of skipping.
fn image_or_skip(test: &str) -> Result<bool, Error> {
    if kubelet::image().is_some() {
        return Ok(true);
    }
    if std::env::var("NODEROTATION_IMAGE_REQUIRED").as_deref() == Ok("1") {
        return Err(format!("{test}: NODEROTATION_IMAGE unset: run tests/image/build.sh").into());
    }
    eprintln!("skipping {test}: no image (eval \"$(tests/image/build.sh)\")");
    Ok(false)
}

/// A full surge rotation driven by the operator running in its image as pod `pod` of
/// `deployment` (as installed), with only the RBAC the install created for its ServiceAccount.
async fn in_cluster_rotation(env: &Env, deployment: &Value, pod: &str, test: &str) -> TestResult {
    let mut fx = Rotation::new(env, test, surge("2m")).await?;
    fx.ns = deployment["metadata"]["namespace"].as_str().ok_or("namespace")?.to_string();
    let actor = actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::Ready,
        Duration::from_secs(3),
        Duration::from_secs(3),
    );
    // The Lease timings of the other rotation tests (busy CI cores); the metrics address is a
    // free host port, since the container shares the host's network.
    let mut ctl = kubelet::PodContainer::start(
        env,
        deployment,
        pod,
        &[("NODEROTATION_LOG_LEVEL", "info,noderotation=debug".to_string())],
        FAST_RUN_FLAGS,
        &fx.dir,
    )?;
    let result = full_surge(&fx, actor, &ctl).await;
    assert!(ctl.exited().is_none(), "the container is still running");
    result
}

/// A relative path from `from` to `to` (kustomize refuses absolute resource paths).
fn relative(from: &Path, to: &Path) -> std::path::PathBuf {
    let (from, to) =
        (from.canonicalize().unwrap_or_default(), to.canonicalize().unwrap_or_default());
    let common = from.components().zip(to.components()).take_while(|(a, b)| a == b).count();
    let mut rel = std::path::PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    for c in to.components().skip(common) {
        rel.push(c);
    }
    rel
}

/// `kubectl apply -k` of the base (through an overlay that renames it, as users do, so that it
/// does not touch the harness's own RBAC), then the image under the base's ServiceAccount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_the_kustomize_base_completes_a_rotation_under_its_own_rbac() -> TestResult {
    let env = harness!();
    if !image_or_skip("kustomize in-cluster")? {
        return Ok(());
    }
    let _one = ROTATION.lock().await;
    let overlay = scratch("kustomize-overlay");
    let base = relative(&overlay, &Path::new(REPO).join("deploy/base"));
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: noderotation-kz\nnamePrefix: kz-\nresources:\n  - {}\n",
            base.display()
        ),
    )?;
    env.kubectl_ok(&["apply", "-k", &overlay.display().to_string()], None)?;
    let deployment: Value = serde_json::from_str(&env.kubectl_ok(
        &["get", "deployment", "kz-noderotation", "-n", "noderotation-kz", "-o", "json"],
        None,
    )?)?;
    assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], "kz-noderotation");
    in_cluster_rotation(&env, &deployment, "kz-noderotation-0", "kz-rot").await
}

// ---- (g) the Helm chart under real Helm ----------------------------------------------------------

const CHART: &str = "deploy/helm/noderotation";

/// `helm` from the harness (tests/k8s-harness/build.sh installs it), run from the repository.
fn helm(env: &Env, args: &[&str]) -> Result<String, Error> {
    let bin = env.bin.as_ref().ok_or("HARNESS_BIN unset")?.join("helm");
    let out = std::process::Command::new(&bin)
        .args(args)
        .env("KUBECONFIG", &env.kubeconfig)
        .env("HELM_CACHE_HOME", scratch("helm-home").join("cache"))
        .env("HELM_CONFIG_HOME", scratch("helm-home").join("config"))
        .env("HELM_DATA_HOME", scratch("helm-home").join("data"))
        .current_dir(REPO)
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "helm {}: {}{text}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(text)
}

/// The monitoring CRDs (ServiceMonitor, PrometheusRule) the chart's options render.
fn apply_monitoring_crds(env: &Env) -> TestResult {
    let dir = env.bin.as_ref().ok_or("HARNESS_BIN unset")?.join("prometheus-operator-crd");
    for kind in ["servicemonitors", "prometheusrules"] {
        let f = dir.join(format!("monitoring.coreos.com_{kind}.yaml"));
        env.kubectl_ok(&["apply", "--server-side", "-f", &f.display().to_string()], None)?;
        env.kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{kind}.monitoring.coreos.com"),
            ],
            None,
        )?;
    }
    Ok(())
}

/// `helm lint` is clean, and `helm template` of the defaults and of every values file in the
/// chart's `ci/` folder is accepted by `kubectl apply --dry-run=server`.
#[tokio::test]
async fn helm_lint_is_clean_and_every_ci_values_file_passes_a_server_dry_run() -> TestResult {
    let env = harness!();
    let lint = helm(&env, &["lint", "--strict", CHART])?;
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    apply_monitoring_crds(&env)?;
    let ns = "noderotation-dryrun";
    let _ = env.kubectl(&["create", "namespace", ns]);
    let ci = Path::new(REPO).join(CHART).join("ci");
    let mut files: Vec<_> =
        std::fs::read_dir(&ci)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    assert!(files.len() >= 3, "the chart's ci/ folder has values files: {files:?}");
    let mut renders = vec![(
        "defaults".to_string(),
        helm(&env, &["template", "nr", CHART, "-n", ns, "--include-crds"])?,
    )];
    for f in &files {
        let name = f.file_name().unwrap_or_default().to_string_lossy().to_string();
        let out = helm(
            &env,
            &["template", "nr", CHART, "-n", ns, "--include-crds", "-f", &f.display().to_string()],
        )?;
        renders.push((name, out));
    }
    for (name, manifest) in renders {
        let out = env.kubectl_as(
            &env.kubeconfig,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&manifest),
        );
        assert!(
            out.status.success(),
            "{name}: kubectl apply --dry-run=server rejected the rendering: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A pod of the uninstall hook and of the operator, played by [`kubelet::PodContainer`]: when
/// the hook's Job appears its pod runs to completion and the Job is marked Complete; when the
/// Deployment is scaled to zero the operator's container is stopped (SIGTERM), as the
/// ReplicaSet controller and the kubelet would.
async fn play_uninstall_hook(
    env: &Env,
    admin: &kube::Client,
    ns: &str,
    deployment: &str,
    operator: &mut Option<kubelet::PodContainer>,
    dir: &Path,
) -> TestResult {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::batch::v1::Job;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let job_name = format!("{deployment}-uninstall");
    let job = eventually("the pre-delete hook Job", Duration::from_secs(60), || async {
        jobs.get_opt(&job_name).await.ok()?
    })
    .await?;
    let job_json = serde_json::to_value(&job)?;
    let mut hook =
        kubelet::PodContainer::start(env, &job_json, &format!("{job_name}-pod"), &[], &[], dir)?;
    let started = std::time::Instant::now();
    let status = loop {
        if operator.is_some()
            && deployments.get_opt(deployment).await?.and_then(|d| d.spec?.replicas) == Some(0)
        {
            // SIGTERM: the operator releases its Lease on the way out.
            if let Some(op) = operator.take() {
                op.stop();
            }
        }
        if let Some(status) = hook.exited() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(240) {
            return Err(format!("the uninstall hook did not finish:\n{}", hook.log_text()).into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let log = hook.log_text();
    if !status.success() {
        return Err(format!("the uninstall hook failed ({status}):\n{log}").into());
    }
    let now = noderotation::clock::Clock::now(&noderotation::clock::SystemClock)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let cond = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": now, "lastTransitionTime": now});
    jobs.patch_status(
        &job_name,
        &PatchParams::default(),
        &KubePatch::Merge(&json!({"status": {
            "startTime": now, "completionTime": now, "succeeded": 1,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}})),
    )
    .await?;
    eprintln!("uninstall hook log:\n{log}");
    Ok(())
}

/// `helm install`, the image under the chart's ServiceAccount completes a surge rotation, a
/// second one starts, and `helm uninstall` (its pre-delete hook) leaves nothing of ours behind
/// while the user's own cordon, do-not-disrupt and freeze stay. Uninstall cleans every pool,
/// claim and node in the cluster, so this runs alone, after the rest of the tier (tests/all.sh:
/// `cargo test --test apiserver -- --ignored`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster-wide uninstall: tests/all.sh runs it alone after the rest of the tier"]
async fn in_cluster_helm_install_rotates_and_helm_uninstall_leaves_nothing_of_ours() -> TestResult {
    let env = harness!();
    if !image_or_skip("helm in-cluster")? {
        return Ok(());
    }
    let _one = ROTATION.lock().await;
    let (release, ns) = ("nr", "noderotation-helm");
    // The placeholder PriorityClass exists already (the harness setup applies deploy/base's).
    helm(
        &env,
        &[
            "install",
            release,
            CHART,
            "-n",
            ns,
            "--create-namespace",
            "--set",
            "placeholder.priorityClass.create=false",
        ],
    )?;
    let name = format!("{release}-noderotation");
    let deployment: Value = serde_json::from_str(
        &env.kubectl_ok(&["get", "deployment", &name, "-n", ns, "-o", "json"], None)?,
    )?;
    assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], name.as_str());

    // A short cooldown: the second rotation starts soon after the first, once the test has put
    // a workload on the surge node (an empty node is refused a placeholder).
    let policy = json!({"readyTimeout": "10m", "cooldownAfter": "20s", "retryBackoff": "30m"});
    let mut fx = Rotation::new(&env, "helm-rot", policy).await?;
    fx.ns = ns.to_string();
    let mut actor = Some(actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::Ready,
        Duration::from_secs(3),
        Duration::from_secs(3),
    ));
    let mut operator = Some(kubelet::PodContainer::start(
        &env,
        &deployment,
        &format!("{name}-0"),
        &[("NODEROTATION_LOG_LEVEL", "info,noderotation=debug".to_string())],
        FAST_RUN_FLAGS,
        &fx.dir,
    )?);
    let result = async {
        // One whole rotation under the chart's RBAC.
        fx.wait_claim_state("pending", Duration::from_secs(90)).await?;
        fx.wait_settled("last-rotation-at", Duration::from_secs(120)).await?;
        let surge_node = format!("{}-s1-node", fx.pool);
        running_pod(&fx.admin, "default", &format!("{}-app2", fx.pool), &surge_node, "500m")
            .await?;
        fx.assert_clean().await?;
        let op = operator.as_ref().ok_or("operator")?;
        eventually("the success in /metrics", Duration::from_secs(10), || async {
            let m = op.metrics().await.ok()?;
            (completed(&m, &fx.pool, "success") == Some(1.0)).then_some(())
        })
        .await?;
        // The user's own markers, which uninstall must leave alone.
        let user_pool = format!("{}-user", fx.pool);
        let mut frozen = nodepool_json(&user_pool, &user_pool);
        frozen["metadata"]["annotations"] =
            json!({"noderotation.io/freeze": "2099-01-01T00:00:00Z"});
        create(&fx.admin, &frozen).await?;
        let (cordoned, dnd) = (format!("{}-user-cordon", fx.pool), format!("{}-user-dnd", fx.pool));
        let mut n = node_json(&cordoned, &fx.pool);
        n["spec"] = json!({"unschedulable": true});
        create(&fx.admin, &n).await?;
        let mut n = node_json(&dnd, &fx.pool);
        n["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
        create(&fx.admin, &n).await?;
        // A second rotation starts (the surge claim is a candidate now) and stays pending: no
        // more capacity comes.
        if let Some(a) = actor.take() {
            a.stop().await;
        }
        let second = eventually("a second rotation anchored", Duration::from_secs(90), || async {
            let a = fx.ann("NodePool", &fx.pool, "active-rotation").await?;
            (fx.ann("NodeClaim", &a, "state").await.as_deref() == Some("pending")).then_some(a)
        })
        .await?;
        eventually("its placeholder", Duration::from_secs(30), || async {
            (!fx.placeholders().await.ok()?.is_empty()).then_some(())
        })
        .await?;

        // helm uninstall, its hook played by podman.
        let uninstall = {
            let env = env.clone();
            tokio::task::spawn_blocking(move || {
                helm(&env, &["uninstall", release, "-n", ns, "--timeout", "5m"])
            })
        };
        play_uninstall_hook(&env, &fx.admin, ns, &name, &mut operator, &fx.dir).await?;
        let out = uninstall.await??;
        assert!(out.contains("uninstalled"), "{out}");

        // Nothing of ours: no noderotation.io key on the pool, the claims or any node but the
        // user's freeze; no cordon or do-not-disrupt of ours; no placeholder.
        let ours = |a: &BTreeMap<String, String>| -> Vec<String> {
            a.keys()
                .filter(|k| k.starts_with(ANN) && k.as_str() != "noderotation.io/freeze")
                .cloned()
                .collect()
        };
        for (kind, obj) in [("NodePool", fx.pool.clone()), ("NodeClaim", second.clone())] {
            let a = fx.annotations(kind, &obj).await?.unwrap_or_default();
            assert!(ours(&a).is_empty(), "{kind} {obj} keeps {:?}", ours(&a));
        }
        let nodes = dyn_api(&fx.admin, "Node")
            .list(
                &kube::api::ListParams::default().labels(&format!("{NODEPOOL_LABEL}={}", fx.pool)),
            )
            .await?;
        for n in &nodes.items {
            let a = n.annotations();
            assert!(ours(a).is_empty(), "node {} keeps {:?}", n.name_any(), ours(a));
            let user = [cordoned.as_str(), dnd.as_str()].contains(&n.name_any().as_str());
            if !user {
                assert_ne!(
                    n.data["spec"]["unschedulable"],
                    json!(true),
                    "node {} stays cordoned",
                    n.name_any()
                );
                assert!(
                    !a.contains_key("karpenter.sh/do-not-disrupt"),
                    "node {} keeps do-not-disrupt",
                    n.name_any()
                );
            }
        }
        let node = dyn_api(&fx.admin, "Node").get(&cordoned).await?;
        assert_eq!(node.data["spec"]["unschedulable"], json!(true), "the user's cordon stays");
        let node = dyn_api(&fx.admin, "Node").get(&dnd).await?;
        assert_eq!(
            node.annotations().get("karpenter.sh/do-not-disrupt").map(String::as_str),
            Some("true")
        );
        let pool = fx.annotations("NodePool", &user_pool).await?.unwrap_or_default();
        assert_eq!(
            pool.get("noderotation.io/freeze").map(String::as_str),
            Some("2099-01-01T00:00:00Z")
        );
        let live: Vec<_> = fx
            .placeholders()
            .await?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        assert!(live.is_empty(), "placeholders left: {}", live.len());
        Ok::<(), Error>(())
    }
    .await;
    if result.is_err()
        && let Some(op) = &operator
    {
        eprintln!("operator log:\n{}", op.log_text());
    }
    if let Some(a) = actor.take() {
        a.stop().await;
    }
    fx.cleanup().await;
    drop(operator);
    let _ = helm(&env, &["uninstall", release, "-n", ns, "--no-hooks"]);
    result
}

/// The surge node never turns Ready, so the placeholder is never bound: the controller learns
/// which claim is its surge only from Karpenter's `Nominated` Event on the placeholder (a watch
/// of Events in its namespace, under the RBAC of deploy/). It marks that claim and reaps it at
/// readyTimeout; another fresh claim of the pool that is not Ready either (launched for other
/// pods) is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_ready_timeout_rolls_back_and_reaps_the_surge_claim() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let fx = Rotation::new(&env, "rot-timeout", surge("15s")).await?;
    let actor = actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::NeverReady,
        Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let ctl = fx.controller("timeout-a")?;
    let result = async {
        fx.wait_claim_state("pending", Duration::from_secs(60)).await?;
        let surge = eventually("a surge claim", Duration::from_secs(30), || async {
            actor.surge_claims().first().cloned()
        })
        .await?;
        // A claim Karpenter launched for other pods: fresh, its node registered, not Ready.
        let other = format!("{}-other", fx.pool);
        create(&fx.admin, &nodeclaim_json(&other, &fx.pool)).await?;
        create(&fx.admin, &node_json(&format!("{other}-node"), &fx.pool)).await?;
        eventually("the surge claim marked", Duration::from_secs(30), || async {
            let marked = fx.ann("NodeClaim", &surge, "launched-for").await;
            (marked.as_deref() == Some(fx.candidate.as_str())).then_some(())
        })
        .await?;
        fx.wait_claim_state("failed", Duration::from_secs(90)).await?;
        fx.wait_settled("last-failure-at", Duration::from_secs(30)).await?;
        assert_eq!(fx.ann("NodeClaim", &fx.candidate, "retry-count").await.as_deref(), Some("1"));
        eventually("the surge claim reaped", Duration::from_secs(30), || async {
            let gone = dyn_api(&fx.admin, "NodeClaim").get_opt(&surge).await.ok()?;
            gone.is_none_or(|c| c.metadata.deletion_timestamp.is_some()).then_some(())
        })
        .await?;
        let kept = dyn_api(&fx.admin, "NodeClaim").get_opt(&other).await?;
        assert!(
            kept.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
            "a claim Karpenter launched for other pods is never reaped"
        );
        remove_finalizers(&fx.admin, "NodeClaim", &other).await?;
        let _ = dyn_api(&fx.admin, "NodeClaim").delete(&other, &DeleteParams::default()).await;
        let _ = dyn_api(&fx.admin, "Node")
            .delete(&format!("{other}-node"), &DeleteParams::default())
            .await;
        let node = dyn_api(&fx.admin, "Node").get(&fx.node).await?;
        assert_ne!(node.data["spec"]["unschedulable"], json!(true), "our cordon lifted");
        fx.assert_clean().await?;
        eventually("the failure in /metrics", Duration::from_secs(10), || async {
            let m = ctl.metrics().await.ok()?;
            (completed(&m, &fx.pool, "failure") == Some(1.0)).then_some(())
        })
        .await?;
        Ok::<(), Error>(())
    }
    .await;
    finish(&fx, actor, &ctl, result).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_force_expiry_while_pending_records_expired() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let fx = Rotation::new(&env, "rot-expired", surge("2m")).await?;
    let actor = actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::Off,
        Duration::from_secs(1),
        Duration::from_secs(2),
    );
    let ctl = fx.controller("expired-a")?;
    let result = async {
        fx.wait_claim_state("pending", Duration::from_secs(60)).await?;
        // Karpenter's forced expiry: it deletes the claim itself; the actor finalizes it.
        dyn_api(&fx.admin, "NodeClaim").delete(&fx.candidate, &DeleteParams::default()).await?;
        eventually("expired in /metrics", Duration::from_secs(60), || async {
            let m = ctl.metrics().await.ok()?;
            (completed(&m, &fx.pool, "expired") == Some(1.0)).then_some(())
        })
        .await?;
        eventually("no anchor", Duration::from_secs(30), || async {
            fx.ann("NodePool", &fx.pool, "active-rotation").await.is_none().then_some(())
        })
        .await?;
        fx.assert_clean().await?;
        Ok::<(), Error>(())
    }
    .await;
    finish(&fx, actor, &ctl, result).await
}

/// Where the first controller dies.
#[derive(Clone, Copy)]
enum Kill {
    /// Once the candidate's state reads this.
    In(&'static str),
    /// Between the placeholder's create and the record of its uid on the claim: the pod exists,
    /// nothing says it is ours. (Killed once the uid is recorded, which the test then removes:
    /// the same objects a kill inside that window leaves.)
    BeforePlaceholderUid,
}

/// SIGKILL of `noderotation run` at `kill`, then a new process: the rotation completes, nothing
/// is left behind, and one surge claim served it.
async fn killed_in(test: &str, kill: Kill) -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let fx = Rotation::new(&env, test, surge("2m")).await?;
    let actor = actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::Ready,
        Duration::from_secs(5),
        Duration::from_secs(5),
    );
    let mut first = fx.controller(&format!("{test}-a"))?;
    let mut second = None;
    let result = async {
        match kill {
            Kill::In(state) => {
                fx.wait_claim_state(state, Duration::from_secs(60)).await?;
                first.kill();
                eprintln!("SIGKILLed the controller in {state}");
            }
            Kill::BeforePlaceholderUid => {
                eventually("a recorded placeholder", Duration::from_secs(60), || async {
                    fx.ann("NodeClaim", &fx.candidate, "placeholder-uid").await
                })
                .await?;
                first.kill();
                let forget = json!({"metadata": {"annotations": {
                    format!("{ANN}placeholder-uid"): null}}});
                dyn_api(&fx.admin, "NodeClaim")
                    .patch(&fx.candidate, &PatchParams::default(), &KubePatch::Merge(&forget))
                    .await?;
                eprintln!("SIGKILLed the controller before it recorded its placeholder");
                // Karpenter launches capacity for the pod nobody recorded before a new leader
                // comes.
                eventually("capacity for it", Duration::from_secs(30), || async {
                    (actor.bindings().len() == 1).then_some(())
                })
                .await?;
            }
        }
        second = Some(fx.controller(&format!("{test}-b"))?);
        fx.wait_settled("last-rotation-at", Duration::from_secs(90)).await?;
        fx.assert_clean().await?;
        let (claims, bound) = (actor.surge_claims(), actor.bindings());
        if claims.len() != 1 {
            return Err(
                format!("one surge claim across the restart, not {claims:?} ({bound:?})").into()
            );
        }
        if let Kill::BeforePlaceholderUid = kill {
            // The pod nobody recorded was replaced, and the new one ran on its node.
            let nodes: BTreeSet<&String> = bound.iter().map(|(_, node)| node).collect();
            if bound.len() != 2 || nodes.len() != 1 {
                return Err(format!("the replacement on the same node, not {bound:?}").into());
            }
        }
        Ok::<(), Error>(())
    }
    .await;
    if result.is_err() {
        eprintln!("first controller log:\n{}", first.log_text());
        if let Some(next) = &second {
            eprintln!("second controller log:\n{}", next.log_text());
        }
    }
    actor.stop().await;
    fx.cleanup().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_survives_sigkill_in_pending() -> TestResult {
    killed_in("rot-kill-pending", Kill::In("pending")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_survives_sigkill_before_recording_its_placeholder() -> TestResult {
    killed_in("rot-kill-unrecorded", Kill::BeforePlaceholderUid).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_survives_sigkill_in_draining() -> TestResult {
    killed_in("rot-kill-draining", Kill::In("draining")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_two_controllers_one_reconciles_and_the_standby_takes_over() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let fx = Rotation::new(&env, "rot-leader", surge("2m")).await?;
    // The policy exists before either controller: hold provisioning long enough to kill the
    // leader mid-rotation.
    let actor = actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::Ready,
        Duration::from_secs(6),
        Duration::from_secs(3),
    );
    let mut a = fx.controller("leader-a")?;
    let result = async {
        eventually("a to lead", Duration::from_secs(30), || async {
            a.metrics().await.ok()?.lines().any(|l| l == "noderotation_leader 1").then_some(())
        })
        .await?;
        let b = fx.controller("leader-b")?;
        eventually("b serving", Duration::from_secs(30), || async {
            b.metrics().await.ok()?.lines().any(|l| l == "noderotation_leader 0").then_some(())
        })
        .await?;
        fx.wait_claim_state("pending", Duration::from_secs(60)).await?;
        // Killed once the placeholder is recorded: a kill between its create and that record
        // (b replaces the pod nobody recorded) is
        // `rotation_survives_sigkill_before_recording_its_placeholder`.
        eventually("the placeholder recorded", Duration::from_secs(30), || async {
            fx.ann("NodeClaim", &fx.candidate, "placeholder-uid").await.map(|_| ())
        })
        .await?;
        if !b.metrics().await?.lines().any(|l| l == "noderotation_leader 0")
            || b.log_text().contains("\"reconciling\"")
        {
            eprintln!("b log:\n{}", b.log_text());
            return Err("the standby b led or reconciled while a held the Lease".into());
        }
        a.kill();
        eprintln!("SIGKILLed the leader in pending");
        let done = fx.wait_settled("last-rotation-at", Duration::from_secs(90)).await;
        if done.is_err() {
            eprintln!("b log:\n{}", b.log_text());
        }
        done?;
        assert!(b.log_text().contains("became leader"), "b never led");
        fx.assert_clean().await?;
        assert_eq!(actor.surge_claims().len(), 1, "no second rotation in the pool");
        // The surge claim is not a new candidate yet (cooldown): still one anchor ever.
        assert!(fx.ann("NodePool", &fx.pool, "active-rotation").await.is_none());
        Ok::<(), Error>(())
    }
    .await;
    if result.is_err() {
        eprintln!("a log:\n{}", a.log_text());
    }
    actor.stop().await;
    fx.cleanup().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_the_lease_and_exits_zero() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let dir = scratch("sigterm");
    let mut ctl = ControllerProcess::start(
        &env.controller_kubeconfig,
        "sigterm-a",
        "noderotation",
        &dir.join("sigterm-a.log"),
    )?;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(env.admin().await?, CONTROLLER_NS);
    let holder = || async {
        leases.get_opt("noderotation").await.ok()?.and_then(|l| l.spec?.holder_identity)
    };
    eventually("sigterm-a to hold the Lease", Duration::from_secs(30), || async {
        (holder().await.as_deref() == Some("sigterm-a")).then_some(())
    })
    .await?;
    let status = ctl.terminate().ok_or("did not exit within 15 s of SIGTERM")?;
    assert_eq!(status.code(), Some(0), "{}", ctl.log_text());
    assert_eq!(holder().await, None, "the Lease is still held:\n{}", ctl.log_text());
    Ok(())
}

/// A pass over a NodePool that is gone asks for no requeue (docs/decisions/trigger-seam.md):
/// once the deletion reaches the cache the pool leaves the work queue, instead of being
/// reconciled twice a second for as long as the process lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_nodepool_is_not_reconciled_again() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let admin = env.admin().await?;
    let dir = scratch("pool-gone");
    let pool = format!("pool-gone-{}", std::process::id());
    create(&admin, &nodepool_json(&pool, &pool)).await?;
    let ctl = ControllerProcess::start(
        &env.controller_kubeconfig,
        "pool-gone-a",
        "noderotation",
        &dir.join("pool-gone-a.log"),
    )?;
    // The pass's debug line, as text (`nodepool=x`) or JSON (`"nodepool":"x"`).
    let fields = [format!("nodepool={pool}"), format!("\"nodepool\":\"{pool}\"")];
    let passes = || {
        let log = ctl.log_text();
        let ours = |l: &&str| {
            fields.iter().any(|f| l.ends_with(f.as_str()) || l.contains(&format!("{f},")))
        };
        log.lines().filter(|l| l.contains("reconciling")).filter(ours).count()
    };
    let result = async {
        eventually("a pass over the pool", Duration::from_secs(60), || async {
            (passes() > 0).then_some(())
        })
        .await?;
        dyn_api(&admin, "NodePool").delete(&pool, &Default::default()).await?;
        eventually("the NodePool gone", Duration::from_secs(30), || async {
            dyn_api(&admin, "NodePool").get_opt(&pool).await.ok()?.is_none().then_some(())
        })
        .await?;
        // The deletion's watch event wakes the pool once; that pass finds it gone.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = passes();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let again = passes() - before;
        assert_eq!(again, 0, "passes over the deleted pool in 5 s");
        Ok::<(), Error>(())
    }
    .await;
    if result.is_err() {
        eprintln!("controller log:\n{}", ctl.log_text());
        let _ = dyn_api(&admin, "NodePool").delete(&pool, &Default::default()).await;
    }
    result
}
