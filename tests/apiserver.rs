//! Tests against a real kube-apiserver (the apiserver tier, `tests/k8s-harness`).
//!
//! Run: `eval "$(tests/k8s-harness/start.sh --karpenter-crds)"; cargo test --test apiserver`
//! (`tests/all.sh` does this). Without the harness (`KUBECONFIG` and `HARNESS_READY_FILE`
//! unset) every cluster test prints why and passes, so plain `cargo test` works anywhere; the
//! manifest checks at the bottom need no cluster.
#[path = "apiserver/actor.rs"]
mod actor;
#[path = "common/dashboard.rs"]
mod dashboard;
#[path = "apiserver/kubelet.rs"]
mod kubelet;
#[path = "apiserver/support.rs"]
mod support;
// The bench suite's recording proxy: what the operator sends, request by request.
#[allow(dead_code)]
#[path = "../benches/suite/proxy.rs"]
mod proxy;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch as KubePatch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Config, ResourceExt};
use noderotation::cluster::kube::{KubeCluster, LIST_PAGE};
use noderotation::cluster::{
    ApiError, CacheView, Cluster, EventRecord, ObjectKind, ObjectRef, Patch,
};
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

/// `noderotation run` with `extra` flags as `kubeconfig`, expected to stop at its preflight: the
/// whole output.
async fn run_to_preflight(
    kubeconfig: &Path,
    extra: &[&str],
) -> Result<std::process::Output, Error> {
    let mut command = std::process::Command::new(binary());
    command
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
        .args(["--log-format", "text"])
        .args(extra)
        .env("KUBECONFIG", kubeconfig);
    Ok(tokio::task::spawn_blocking(move || command.output()).await??)
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
        let out = run_to_preflight(Path::new(kubeconfig), &[]).await?;
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

/// `plan --from-cluster NAME` reads the NodePool from the cluster: the plan is the one the same
/// NodePool gives from a file; a NodePool that does not exist is named in the error.
#[tokio::test]
async fn plan_reads_the_nodepool_from_the_cluster() -> TestResult {
    let env = harness!();
    let admin = env.admin().await?;
    let name = format!("plan-from-cluster-{}", std::process::id());
    let pool = nodepool_json(&name, &name);
    create(&admin, &pool).await?;
    let dir = scratch("plan-from-cluster");
    let file = dir.join("nodepool.yaml");
    std::fs::write(&file, serde_norway::to_string(&pool)?)?;
    let plan = |source: &[&str]| -> Result<std::process::Output, Error> {
        let policy = format!("{REPO}/deploy/examples/single-pool.yaml");
        let mut args = vec!["plan", "-f", &policy, "--now", "2026-06-01T00:00:00Z", "-o", "json"];
        args.extend(source);
        Ok(std::process::Command::new(binary())
            .args(args)
            .env("KUBECONFIG", &env.kubeconfig)
            .output()?)
    };
    let from_cluster = plan(&["--from-cluster", &name])?;
    let from_file = plan(&["--nodepool", &file.display().to_string()])?;
    let _ = env.kubectl(&["delete", "nodepool", &name]);
    assert!(from_cluster.status.success(), "{}", String::from_utf8_lossy(&from_cluster.stderr));
    let mut a: Value = serde_json::from_slice(&from_cluster.stdout)?;
    let mut b: Value = serde_json::from_slice(&from_file.stdout)?;
    assert_eq!(a["nodePool"]["source"], json!(format!("NodePool {name} (cluster)")));
    assert_eq!(a["nodePool"]["expireAfter"], json!("720h0m0s"), "{}", a["nodePool"]);
    a["nodePool"]["source"] = Value::Null;
    b["nodePool"]["source"] = Value::Null;
    assert_eq!(a, b, "the same NodePool from the cluster and from a file plans alike");
    let missing = plan(&["--from-cluster", "no-such-pool"])?;
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("--from-cluster: cannot read NodePool \"no-such-pool\""), "{stderr}");
    Ok(())
}

/// `noderotation run` against a placeholder PriorityClass that is not negative and may preempt:
/// exit 2 before anything else, naming the class and what to change.
#[tokio::test]
async fn run_refuses_a_placeholder_priority_class_that_is_not_negative() -> TestResult {
    let env = harness!();
    let class = "noderotation-test-positive";
    env.kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": class}, "value": 1000,
                "description": "not a placeholder class: positive, preempts (the default policy)"
            })
            .to_string(),
        ),
    )?;
    let extra = ["--namespace", CONTROLLER_NS, "--priority-class", class];
    let out = run_to_preflight(&env.kubeconfig, &extra).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("PriorityClass \"{class}\" is not safe")), "{stderr}");
    assert!(stderr.contains("its value is 1000 (it must be negative"), "{stderr}");
    assert!(
        stderr.contains("preemptionPolicy is PreemptLowerPriority (it must be Never"),
        "{stderr}"
    );
    assert!(!stderr.contains("became leader"), "{stderr}");
    eprintln!("preflight message: {}", stderr.lines().last().unwrap_or_default());
    Ok(())
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
    let crd: Value = serde_norway::from_str(&std::fs::read_to_string(
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
            "spec": restricted(json!({"priorityClassName": "noderotation-placeholder",
                     "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}))
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
    let created = create(&admin, &policy_of_no_pool(policy_name)).await?;
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

/// A RotationPolicy whose selector matches no NodePool: it governs nothing.
fn policy_of_no_pool(name: &str) -> Value {
    json!({
        "apiVersion": "noderotation.io/v1alpha1", "kind": "RotationPolicy",
        "metadata": {"name": name},
        "spec": {"nodePoolSelector": {"matchLabels": {TEST_LABEL: "none"}},
                 "maintenanceWindows": [{"timezone": "UTC", "days": ["Sat"], "start": "02:00", "end": "06:00"}]}
    })
}

/// More objects of a kind than one list page holds: the watch's first list and a one-shot
/// command's list both follow the continue tokens to the last page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caches_list_every_page() -> TestResult {
    let env = harness!();
    let admin = env.admin().await?;
    let policies = dyn_api(&admin, "RotationPolicy");
    let names: Vec<String> = (0..=LIST_PAGE).map(|i| format!("paged-{i:03}")).collect();
    for name in &names {
        let _ = policies.delete(name, &DeleteParams::default()).await;
    }
    for name in &names {
        create(&admin, &policy_of_no_pool(name)).await?;
    }
    let paged = |view: &CacheView| view.policies.keys().filter(|n| n.starts_with("paged-")).count();
    let reporter = Reporter { controller: "noderotation-test".into(), instance: None };
    let listed = KubeCluster::listed(admin.clone(), CONTROLLER_NS, reporter.clone()).await?;
    assert_eq!(paged(&listed.cache()), names.len(), "KubeCluster::listed");
    let (watched, _changes) = KubeCluster::start(admin.clone(), CONTROLLER_NS, reporter);
    eventually("the watch's first list holds every policy", Duration::from_secs(60), || async {
        (paged(&watched.cache()) == names.len()).then_some(())
    })
    .await?;
    for name in &names {
        policies.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

// ---- (d) RBAC --------------------------------------------------------------------------------

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
        "spec": restricted(json!({"priorityClassName": "noderotation-placeholder",
                 "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}))
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

/// (group, resource with subresource, namespace) of an API request target; `None` for
/// discovery and other non-resource paths.
fn api_object(target: &str) -> Option<(String, String, Option<String>)> {
    let path = target.split('?').next().unwrap_or(target);
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, more @ ..] if !more.is_empty() => (Some(ns.to_string()), more),
        other => (None, other),
    };
    let resource = match rest {
        [] => return None,
        [r] | [r, _] => r.to_string(),
        [r, _, sub, ..] => format!("{r}/{sub}"),
    };
    Some((group.to_string(), resource, namespace))
}

/// The RBAC verb of a request the recording proxy classified (`get`, `list`, `watch`, or the
/// HTTP method in lower case).
fn rbac_verb(verb: &str) -> &str {
    match verb {
        "post" => "create",
        "put" => "update",
        other => other,
    }
}

/// A `kubectl proxy` child, stopped on drop.
struct KubectlProxy(std::process::Child);

impl Drop for KubectlProxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `kubectl proxy` with the controller identity's credentials, and a recording proxy in front
/// of it for the operator to talk through.
async fn recording_proxy(env: &Env) -> Result<(KubectlProxy, proxy::Proxy), Error> {
    let kport = free_port()?;
    let kubectl = KubectlProxy(
        std::process::Command::new(env.kubectl_path())
            .args(["proxy", "--address=127.0.0.1", &format!("--port={kport}")])
            .env("KUBECONFIG", &env.controller_kubeconfig)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?,
    );
    eventually("kubectl proxy", Duration::from_secs(20), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", kport)).await.ok().map(|_| ())
    })
    .await?;
    let recorder = proxy::Proxy::start(([127, 0, 0, 1], kport).into())?;
    Ok((kubectl, recorder))
}

/// The operator (`run` through a rotation, then `uninstall --dry-run`, which finds a surge
/// claim that never turned Ready to delete) under the base's roles, talking through a recording
/// proxy: every request it sends is one `src/cluster/access.rs` lists (so the roles, which the
/// deploy tests hold to that table, grant nothing it does not send), and the pods of a node are
/// listed from the watch cache (`resourceVersion=0`), and the caches list Nodes and NodeClaims
/// in pages of `LIST_PAGE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_the_operator_sends_is_one_the_access_table_lists() -> TestResult {
    use noderotation::cluster::access::{REQUESTS, Scope};
    let env = harness!();
    let _one = ROTATION.lock().await;
    // kubectl proxy (the controller identity's credentials) <- recording proxy <- the operator.
    let (_kubectl_proxy, recorder) = recording_proxy(&env).await?;
    let fx = Rotation::new(&env, "rot-access", surge("2m")).await?;
    let kubeconfig = fx.dir.join("recorded.kubeconfig");
    std::fs::write(&kubeconfig, recorder.kubeconfig())?;
    let actor = fx.ready_actor();
    let mut ctl =
        ControllerProcess::start(&kubeconfig, "access-a", "noderotation", &fx.dir.join("a.log"))?;
    full_surge(&fx, actor, &ctl).await?;
    ctl.terminate();
    // A surge claim Karpenter launched for a placeholder (marked) that never registered, and a
    // claim launched for other pods: uninstall deletes the first only, and reads it on the way.
    let (surge, other) = (format!("{}-never-ready", fx.pool), format!("{}-other", fx.pool));
    let mut marked = nodeclaim_json(&surge, &fx.pool);
    marked["metadata"]["annotations"] = json!({format!("{ANN}launched-for"): fx.candidate});
    create(&fx.admin, &marked).await?;
    create(&fx.admin, &nodeclaim_json(&other, &fx.pool)).await?;
    let uninstall = std::process::Command::new(binary())
        .args(["uninstall", "--dry-run", "--namespace", CONTROLLER_NS])
        .env("KUBECONFIG", &kubeconfig)
        .output()?;
    for claim in [&surge, &other] {
        remove_finalizers(&fx.admin, "NodeClaim", claim).await?;
        let _ = dyn_api(&fx.admin, "NodeClaim").delete(claim, &DeleteParams::default()).await;
    }
    assert!(uninstall.status.success(), "{}", String::from_utf8_lossy(&uninstall.stderr));
    let out = String::from_utf8_lossy(&uninstall.stdout);
    let reaps = |claim: &str| out.contains(&format!("{claim}: delete surge claim that never"));
    assert!(reaps(&surge) && !reaps(&other), "{out}");

    let requests = recorder.log.all();
    let mut unlisted = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for r in &requests {
        let Some((group, resource, namespace)) = api_object(&r.target) else { continue };
        let verb = rbac_verb(&r.verb);
        let here = namespace.as_deref() == Some(CONTROLLER_NS);
        // The operator's namespace first: a request there is the Role's when the Role has it.
        let mut candidates = REQUESTS
            .iter()
            .filter(|a| a.group == group && a.resource == resource && a.verb == verb);
        let listed = candidates
            .clone()
            .find(|a| a.scope == Scope::Namespace && here)
            .or_else(|| candidates.find(|a| a.scope == Scope::Cluster));
        match listed {
            Some(a) => {
                seen.insert((a.group, a.resource, a.verb, a.scope));
            }
            None => {
                unlisted
                    .insert(format!("{verb} {group}/{resource} in {namespace:?}: {}", r.target));
            }
        }
    }
    assert!(requests.len() > 20, "the proxy recorded {} requests", requests.len());
    assert!(unlisted.is_empty(), "sent but not in src/cluster/access.rs: {unlisted:#?}");
    let never: Vec<_> = REQUESTS
        .iter()
        .filter(|a| !seen.contains(&(a.group, a.resource, a.verb, a.scope)))
        .map(|a| format!("{} {}/{} ({:?}, {:?})", a.verb, a.group, a.resource, a.scope, a.who))
        .collect();
    eprintln!(
        "{} requests; {} of the {} listed seen; not sent in this run: {never:#?}",
        requests.len(),
        seen.len(),
        REQUESTS.len()
    );
    // The pods of a node: listed from the watch cache, by field selector.
    let node_lists: Vec<_> = requests
        .iter()
        .filter(|r| r.verb == "list" && r.target.starts_with("/api/v1/pods?"))
        .collect();
    assert!(!node_lists.is_empty(), "no pod list by node was sent");
    for r in node_lists {
        assert!(r.target.contains("fieldSelector=spec.nodeName"), "{}", r.target);
        assert!(r.target.contains("resourceVersion=0"), "{}", r.target);
    }
    // Nodes and NodeClaims listed into a cache (the watches' first lists, uninstall's lists) go
    // in pages: a page of 500 EKS-shaped Nodes, or every Node at once, is decoded whole. The
    // preflight's probes (`limit=1`) and the selected lists of a few objects are not caches.
    let probe = |t: &str| t.ends_with("limit=1") || t.contains("limit=1&");
    let cache_lists: Vec<_> = requests
        .iter()
        .filter(|r| r.verb == "list" && !r.target.contains("Selector=") && !probe(&r.target))
        .filter(|r| {
            r.target.starts_with("/api/v1/nodes?")
                || r.target.starts_with("/apis/karpenter.sh/v1/nodeclaims?")
        })
        .collect();
    assert!(cache_lists.len() >= 4, "lists of nodes and nodeclaims: {cache_lists:#?}");
    for r in cache_lists {
        assert!(r.target.contains(&format!("limit={LIST_PAGE}")), "{}", r.target);
    }
    Ok(())
}

// ---- manifests (no cluster) ------------------------------------------------------------------

#[test]
fn helm_values_are_covered_by_the_schema() -> TestResult {
    let dir = Path::new(REPO).join("deploy/helm/noderotation");
    let values: Value = serde_norway::from_str(&std::fs::read_to_string(dir.join("values.yaml"))?)?;
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
    let d: Value = serde_norway::from_str(&text)?;
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
    // The probes have a port of their own: the metrics port may be closed or authenticated.
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], json!("health"));
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], json!("health"));
    let pc: Value = serde_norway::from_str(&std::fs::read_to_string(
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
        let fx = Rotation::without_policy(env, test).await?;
        let policy = json!({
            "apiVersion": "noderotation.io/v1alpha1", "kind": "RotationPolicy",
            "metadata": {"name": fx.pool, "labels": {SUITE_LABEL: "rotation"}},
            "spec": fx.policy_spec(surge),
        });
        env.kubectl_ok(&["apply", "-f", "-"], Some(&policy.to_string()))?;
        Ok(fx)
    }

    /// The spec of the policy that rotates this pool's claims at once, in an always-open window.
    fn policy_spec(&self, surge: Value) -> Value {
        json!({
            "nodePoolSelector": {"matchLabels": {TEST_LABEL: self.pool}},
            "ageThreshold": "1s",
            "maintenanceWindows": [{"timezone": "UTC",
                "days": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
                "start": "00:00", "end": "00:00"}],
            "surge": surge
        })
    }

    /// The pool, its candidate claim, node and workload, and no policy yet.
    async fn without_policy(env: &Env, test: &str) -> Result<Rotation, Error> {
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

    /// Karpenter and the kubelet for this pool, capacity Ready after 3 s each step.
    fn ready_actor(&self) -> actor::Actor {
        actor::Actor::start(
            self.admin.clone(),
            &self.pool,
            actor::Mode::Ready,
            Duration::from_secs(3),
            Duration::from_secs(3),
        )
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
    let actor = fx.ready_actor();
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

// ---- (e2) operating it: `noderotation status`, the policy's columns, the dashboard -------------

/// `noderotation status ARGS` as `kubeconfig`'s user, in a blocking thread.
async fn status_as(kubeconfig: &Path, args: &[&str]) -> Result<std::process::Output, Error> {
    let (kubeconfig, args) =
        (kubeconfig.to_path_buf(), args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    blocking(move || {
        std::process::Command::new(binary())
            .arg("status")
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("NODEROTATION_NAMESPACE")
            .output()
    })
    .await?
    .map_err(Error::from)
}

/// The status report with what moves from run to run replaced: instants, ages and margins, and
/// the test's pool name (it carries the process id).
fn redacted(value: &mut Value, pool: &str) {
    const TIMES: [&str; 10] = [
        "evaluatedAt",
        "start",
        "end",
        "startedAt",
        "dueAt",
        "deadline",
        "failedAt",
        "eligibleAt",
        "lastFailureAt",
        "failurePauseUntil",
    ];
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if TIMES.contains(&key.as_str()) && v.is_string() {
                    *v = json!("<time>");
                } else if key.ends_with("Seconds") && v.is_number() {
                    *v = json!("<seconds>");
                } else {
                    redacted(v, pool);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redacted(v, pool)),
        Value::String(text) => *text = text.replace(pool, "<pool>"),
        _ => {}
    }
}

/// `HH:MM` of `t` (UTC).
fn hhmm(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%H:%M").to_string()
}

/// A rotation held pending (the actor provisions after 20 s) in a pool with a second claim due,
/// under a daily window open now: `noderotation status` (JSON pinned by a snapshot, the human
/// text, and the kubectl plugin) shows the rotation's slot and stage, the due claim and the
/// window; `kubectl get rotationpolicies` shows the next window and in flight / maxUnavailable; a
/// ServiceAccount without `list nodeclaims` is told exactly that. Once the rotation completes,
/// every query of the chart's Grafana dashboard names a metric of the real `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_the_dashboard_against_a_rotation_in_flight() -> TestResult {
    use noderotation::clock::Clock;
    let env = harness!();
    let _one = ROTATION.lock().await;
    let fx = Rotation::new(&env, "status-view", surge("2m")).await?;
    // A window of every day, opened an hour ago, closing in three.
    let now = noderotation::clock::SystemClock.now();
    let (start, end) =
        (hhmm(now - chrono::Duration::hours(1)), hhmm(now + chrono::Duration::hours(3)));
    let policy = json!({
        "apiVersion": "noderotation.io/v1alpha1", "kind": "RotationPolicy",
        "metadata": {"name": fx.pool, "labels": {SUITE_LABEL: "rotation"}},
        "spec": {
            "nodePoolSelector": {"matchLabels": {TEST_LABEL: fx.pool}},
            "ageThreshold": "1s",
            "maintenanceWindows": [{"timezone": "UTC",
                "days": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
                "start": start, "end": end}],
            "surge": surge("2m")
        }
    });
    env.kubectl_ok(&["apply", "-f", "-"], Some(&policy.to_string()))?;
    let second = format!("{}-c2", fx.pool);
    tokio::time::sleep(Duration::from_millis(1100)).await; // c2 is the younger claim
    ready_claim_and_node(&fx.admin, &second, &format!("{second}-node"), &fx.pool).await?;
    // The rotation starts a second after c2 is created: a claim created in the second of a
    // start (timestamps have whole seconds) counts as its replacement, not as a node.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let actor = actor::Actor::start(
        fx.admin.clone(),
        &fx.pool,
        actor::Mode::Ready,
        Duration::from_secs(20),
        Duration::from_secs(3),
    );
    let ctl = fx.controller("status-a")?;
    let result = async {
        fx.wait_claim_state("pending", Duration::from_secs(60)).await?;
        eventually("the placeholder", Duration::from_secs(20), || async {
            (fx.placeholders().await.ok()?.len() == 1).then_some(())
        })
        .await?;
        let admin = env.kubeconfig.clone();
        let args = ["-o", "json", "--namespace", CONTROLLER_NS, fx.pool.as_str()];
        let out = status_as(&admin, &args).await?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let report: Value = serde_json::from_slice(&out.stdout)?;
        let pool = &report["nodePools"][0];
        assert_eq!(report["nodePools"].as_array().map(Vec::len), Some(1), "{report}");
        assert_eq!(pool["governance"], json!({"state": "ready", "policy": fx.pool}));
        let rotation = &pool["inFlight"][0];
        assert_eq!(rotation["slot"], json!(0));
        assert_eq!(rotation["nodeClaim"], json!(fx.candidate));
        assert_eq!(rotation["stage"], json!("pending"));
        assert_eq!(pool["due"][0]["nodeClaim"], json!(second), "the second claim waits");
        assert_eq!(pool["window"]["open"], json!(true));
        let window_start = pool["window"]["start"].as_str().unwrap_or_default().to_string();
        assert!(window_start.ends_with(&format!("T{start}:00Z")), "{window_start}");
        let mut pinned = report.clone();
        redacted(&mut pinned, &fx.pool);
        insta::assert_snapshot!("status_json_mid_rotation", serde_json::to_string_pretty(&pinned)?);

        let human = status_as(&admin, &["--namespace", CONTROLLER_NS, fx.pool.as_str()]).await?;
        let text = String::from_utf8_lossy(&human.stdout).into_owned();
        for want in [
            format!("NodePool {}  (2 nodes)  RotationPolicy {}, Ready", fx.pool, fx.pool),
            format!("slot 0  {}  pending", fx.candidate),
            "1 in this window".to_string(),
            "in flight    1/1  (maxUnavailable 1)".to_string(),
        ] {
            assert!(text.contains(&want), "{want:?} in\n{text}");
        }
        eprintln!("{text}");

        // The kubectl plugin: the same binary under the name kubectl looks for.
        let bin = fx.dir.join("plugin-bin");
        std::fs::create_dir_all(&bin)?;
        let link = bin.join("kubectl-noderotation");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(binary(), &link)?;
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let plugin = std::process::Command::new(env.kubectl_path())
            .args(["noderotation", fx.pool.as_str(), "-o", "json", "-n", CONTROLLER_NS])
            .env("KUBECONFIG", &admin)
            .env("PATH", path)
            .output()?;
        assert!(plugin.status.success(), "{}", String::from_utf8_lossy(&plugin.stderr));
        let via_kubectl: Value = serde_json::from_slice(&plugin.stdout)?;
        assert_eq!(via_kubectl["nodePools"][0]["inFlight"][0]["nodeClaim"], json!(fx.candidate));

        // The policy's status, as kubectl get shows it.
        let table = eventually("the status columns", Duration::from_secs(30), || async {
            let table =
                env.kubectl_ok(&["get", "rotationpolicies", fx.pool.as_str()], None).ok()?;
            (table.contains("1/1") && table.contains(&window_start)).then_some(table)
        })
        .await?;
        let header = table.lines().next().unwrap_or_default();
        assert!(header.contains("NEXT WINDOW") && header.contains("IN FLIGHT"), "{table}");
        eprintln!("{table}");

        // A ServiceAccount that may read all but NodeClaims.
        let rbac = format!(
            r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: status-reader, namespace: default}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: status-reader-no-claims}}
rules:
  - {{apiGroups: [karpenter.sh], resources: [nodepools], verbs: [get, list]}}
  - {{apiGroups: [""], resources: [nodes], verbs: [get, list]}}
  - {{apiGroups: [noderotation.io], resources: [rotationpolicies], verbs: [get, list]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: status-reader-no-claims}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: status-reader-no-claims}}
subjects: [{{kind: ServiceAccount, name: status-reader, namespace: default}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: status-reader-pods, namespace: {CONTROLLER_NS}}}
rules: [{{apiGroups: [""], resources: [pods], verbs: [get, list]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: status-reader-pods, namespace: {CONTROLLER_NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: status-reader-pods}}
subjects: [{{kind: ServiceAccount, name: status-reader, namespace: default}}]
"#
        );
        env.kubectl_ok(&["apply", "-f", "-"], Some(&rbac))?;
        let token = env.kubectl_ok(&["create", "token", "status-reader", "-n", "default"], None)?;
        let mut kubeconfig: Value = serde_norway::from_str(&std::fs::read_to_string(&admin)?)?;
        for user in kubeconfig["users"].as_array_mut().into_iter().flatten() {
            user["user"] = json!({"token": token.trim()});
        }
        let reader = fx.dir.join("status-reader.kubeconfig");
        std::fs::write(&reader, serde_norway::to_string(&kubeconfig)?)?;
        let denied = status_as(&reader, &["--namespace", CONTROLLER_NS]).await?;
        let stderr = String::from_utf8_lossy(&denied.stderr).into_owned();
        assert_eq!(denied.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("  list nodeclaims.karpenter.sh (cluster-wide)\n"), "{stderr}");
        assert!(stderr.contains("resources: [\"nodeclaims\"]"), "{stderr}");
        assert!(!stderr.contains("nodepools"), "only what is missing is named: {stderr}");
        assert!(denied.stdout.is_empty(), "nothing half-read is printed");
        eprintln!("{stderr}");

        // The rotation completes; every dashboard query reads a series of the real /metrics.
        fx.wait_settled("last-rotation-at", Duration::from_secs(90)).await?;
        let metrics = eventually("the success in /metrics", Duration::from_secs(10), || async {
            let m = ctl.metrics().await.ok()?;
            (completed(&m, &fx.pool, "success") == Some(1.0)).then_some(m)
        })
        .await?;
        let unresolved = dashboard::unresolved(&dashboard::dashboard(), &metrics);
        assert!(unresolved.is_empty(), "not in /metrics:\n{}", unresolved.join("\n"));
        Ok::<(), Error>(())
    }
    .await;
    let _ = env.kubectl(&["delete", "serviceaccount", "status-reader", "-n", "default"]);
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
    let actor = fx.ready_actor();
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
    // The base's admission policy, renamed with its ServiceAccount by the overlay, binds the
    // operator under test; narrowed to this test's pool (claims and nodes carry its label) so
    // that the rest of the tier, running meanwhile, is not under it.
    let pool = format!("kz-rot-{}", std::process::id());
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: noderotation-kz\nnamePrefix: kz-\nresources:\n  - {}\n\
             patches:\n  - target: {{kind: ValidatingAdmissionPolicyBinding}}\n    patch: |-\n\
             \x20     - op: add\n        path: /spec/matchResources\n\
             \x20       value: {{objectSelector: {{matchLabels: {{{NODEPOOL_LABEL}: {pool}}}}}}}\n",
            base.display()
        ),
    )?;
    env.kubectl_ok(&["apply", "-k", &overlay.display().to_string()], None)?;
    let binding: Value = serde_json::from_str(&env.kubectl_ok(
        &["get", "validatingadmissionpolicybinding", "kz-noderotation-annotations", "-o", "json"],
        None,
    )?)?;
    assert_eq!(binding["spec"]["policyName"], "kz-noderotation-annotations");
    assert_eq!(
        binding["spec"]["paramRef"],
        json!({"name": "kz-noderotation", "namespace": "noderotation-kz", "parameterNotFoundAction": "Allow"})
    );
    let deployment: Value = serde_json::from_str(&env.kubectl_ok(
        &["get", "deployment", "kz-noderotation", "-n", "noderotation-kz", "-o", "json"],
        None,
    )?)?;
    assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], "kz-noderotation");
    // The operator's own writes pass the policy (its claim and node are under it).
    let result = in_cluster_rotation(&env, &deployment, "kz-noderotation-0", "kz-rot").await;
    for kind in ["validatingadmissionpolicybinding", "validatingadmissionpolicy"] {
        let _ = env.kubectl(&["delete", kind, "kz-noderotation-annotations", "--ignore-not-found"]);
    }
    result
}

// ---- (g) the Helm chart under real Helm ----------------------------------------------------------

const CHART: &str = "deploy/helm/noderotation";

/// `helm` from the harness (tests/k8s-harness/build.sh installs it), run from the repository.
/// `helm template` renders for the API server's version unless told another: the chart's
/// `kubeVersion` is checked against Helm's built-in default (v1.20 in a build without the
/// release's linker flags) otherwise.
fn helm(env: &Env, args: &[&str]) -> Result<String, Error> {
    let bin = env.bin.as_ref().ok_or("HARNESS_BIN unset")?.join("helm");
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if args.first().is_some_and(|a| a == "template") && !args.iter().any(|a| a == "--kube-version")
    {
        args.extend(["--kube-version".to_string(), server_version(env)?]);
    }
    let out = std::process::Command::new(&bin)
        .args(&args)
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

/// The API server's version (`v1.35.8`): `helm template` renders for it, since the chart's
/// `kubeVersion` is checked against Helm's built-in default otherwise.
fn server_version(env: &Env) -> Result<String, Error> {
    let v: Value = serde_json::from_str(&env.kubectl_ok(&["version", "-o", "json"], None)?)?;
    Ok(v["serverVersion"]["gitVersion"].as_str().ok_or("no serverVersion")?.to_string())
}

/// `helm lint` is clean, and `helm template` of the defaults and of every values file in the
/// chart's `ci/` folder is accepted by `kubectl apply --dry-run=server`; Helm refuses a
/// RotationPolicy in values that the schema rejects, and renders the EKS Auto Mode placement
/// when the cluster serves Auto Mode's NodeClass API.
#[tokio::test]
async fn helm_lint_is_clean_and_every_ci_values_file_passes_a_server_dry_run() -> TestResult {
    let env = harness!();
    let lint = helm(&env, &["lint", "--strict", CHART])?;
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    apply_monitoring_crds(&env)?;
    let ns = "noderotation-dryrun";
    let _ = env.kubectl(&["create", "namespace", ns]);
    let version = server_version(&env)?;
    let template =
        ["template", "nr", CHART, "-n", ns, "--include-crds", "--kube-version", &version];
    let ci = Path::new(REPO).join(CHART).join("ci");
    let mut files: Vec<_> =
        std::fs::read_dir(&ci)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    assert!(files.len() >= 3, "the chart's ci/ folder has values files: {files:?}");
    let mut renders = vec![("defaults".to_string(), helm(&env, &template)?)];
    for f in &files {
        let name = f.file_name().unwrap_or_default().to_string_lossy().to_string();
        let file = f.display().to_string();
        let out = helm(&env, &[template.as_slice(), &["-f", &file]].concat())?;
        renders.push((name, out));
    }
    // A typo in a policy from values stops the install, naming the field.
    let typo = r#"rotationPolicies=[{"name":"p","spec":{"nodePoolSelector":{},"surg":{}}}]"#;
    let refused = helm(&env, &[template.as_slice(), &["--set-json", typo]].concat())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(refused.contains("surg"), "helm accepted an unknown policy field: {refused}");
    // EKS Auto Mode, detected: the operator goes to the system pool and tolerates its taint.
    let auto = helm(
        &env,
        &[template.as_slice(), &["--api-versions", "eks.amazonaws.com/v1/NodeClass"]].concat(),
    )?;
    let deployment = auto
        .split("\n---")
        .find(|d| d.contains("kind: Deployment"))
        .ok_or("no Deployment rendered")?;
    assert!(deployment.contains("values:\n                - system"), "{deployment}");
    assert!(deployment.contains("key: CriticalAddonsOnly"), "{deployment}");
    renders.push(("eksAutoMode detected".to_string(), auto));
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

/// A Pod with the pod template of `deployment` (a rendered Deployment), in `ns`.
fn pod_of(deployment: &Value, name: &str, ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": deployment["spec"]["template"]["spec"].clone(),
    })
}

/// The documents of a rendering (`helm template`), by kind.
fn rendered(manifest: &str, kind: &str) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(manifest) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        if value["kind"] == kind {
            out.push(value);
        }
    }
    Ok(out)
}

/// The chart's namespace option renders the restricted Pod Security labels, and a namespace
/// enforcing them admits the operator's pod (chart and kustomize base) and a placeholder as the
/// controller builds it, while it refuses a pod without a security context.
#[tokio::test]
async fn the_operator_and_placeholder_pods_pass_the_restricted_pod_security_standard() -> TestResult
{
    let env = harness!();
    let ns = "noderotation-pss";
    let manifest =
        helm(&env, &["template", "nr", CHART, "-n", ns, "--set", "namespace.create=true"])?;
    let namespace = rendered(&manifest, "Namespace")?.pop().ok_or("no Namespace rendered")?;
    assert_eq!(namespace["metadata"]["name"], ns);
    for mode in ["enforce", "warn", "audit"] {
        assert_eq!(
            namespace["metadata"]["labels"][format!("pod-security.kubernetes.io/{mode}")],
            "restricted",
            "{namespace}"
        );
    }
    assert!(
        rendered(&helm(&env, &["template", "nr", CHART, "-n", ns])?, "Namespace")?.is_empty(),
        "no Namespace unless asked"
    );
    env.kubectl_ok(&["apply", "-f", "-"], Some(&namespace.to_string()))?;
    let dry_run = |pod: &Value| {
        env.kubectl_as(
            &env.kubeconfig,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&pod.to_string()),
        )
    };
    let chart = rendered(&manifest, "Deployment")?.pop().ok_or("no Deployment rendered")?;
    let base: Value = serde_norway::from_str(&std::fs::read_to_string(
        Path::new(REPO).join("deploy/base/deployment.yaml"),
    )?)?;
    for (which, deployment) in [("chart", &chart), ("kustomize base", &base)] {
        let out = dry_run(&pod_of(deployment, "operator", ns));
        assert!(
            out.status.success(),
            "{which}: the operator's pod is refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A placeholder, built as the controller builds it.
    let pool: noderotation::karpenter::NodePool =
        serde_json::from_value(nodepool_json("pss-pool", "pss"))?;
    let mut claim_value = nodeclaim_json("pss-claim", "pss-pool");
    claim_value["status"] = json!({"nodeName": "pss-node",
        "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}});
    let claim: noderotation::karpenter::NodeClaim = serde_json::from_value(claim_value)?;
    let mut node_value = node_json("pss-node", "pss-pool");
    node_value["status"] = json!({"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}});
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(node_value)?;
    let app: Pod = serde_json::from_value(json!({
        "metadata": {"name": "app", "namespace": "default"},
        "spec": {"nodeName": "pss-node", "containers": [{"name": "app", "image": "app",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    }))?;
    let policy: noderotation::policy::crd::RotationPolicySpec = serde_json::from_value(json!({
        "nodePoolSelector": {},
        "ageThreshold": "1s",
        "maintenanceWindows": [{"timezone": "UTC", "days": ["Mon"], "start": "00:00", "end": "01:00"}]
    }))?;
    let settings = noderotation::policy::settings::Effective::from_spec(&policy)
        .map_err(|e| format!("{e:?}"))?;
    let input = noderotation::placeholder::PlaceholderInput {
        pool: &pool,
        claim: &claim,
        node: Some(&node),
        pods: std::slice::from_ref(&app),
        settings: &settings,
        namespace: ns,
        priority_class: "noderotation-placeholder",
        pause_image: "registry.k8s.io/pause:3.10",
    };
    let placeholder =
        noderotation::placeholder::build_placeholder(&input).map_err(|e| format!("{e:?}"))?;
    let out = dry_run(&serde_json::to_value(&placeholder.pod)?);
    assert!(
        out.status.success(),
        "the placeholder is refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The namespace does enforce: a pod without a security context is refused.
    let bare = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}});
    let out = dry_run(&bare);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("violates PodSecurity \"restricted"),
        "{stderr}"
    );
    Ok(())
}

/// `metrics.auth.enabled` / `--metrics-auth kubernetes`, under exactly the chart's metrics-auth
/// ClusterRole: `/metrics` answers 401 without a token or with a forged one, 403 to an identity
/// without `get /metrics`, and the metrics once that identity is bound to the chart's reader
/// role; the probes answer on their own port without a token, and not the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_token_allowed_to_get_metrics_when_auth_is_on() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let manifest = helm(
        &env,
        &["template", "nrauth", CHART, "-n", CONTROLLER_NS, "--set", "metrics.auth.enabled=true"],
    )?;
    let roles = rendered(&manifest, "ClusterRole")?;
    let role = |suffix: &str| {
        roles
            .iter()
            .find(|r| r["metadata"]["name"].as_str().is_some_and(|n| n.ends_with(suffix)))
            .cloned()
            .ok_or(format!("no ClusterRole *{suffix} rendered"))
    };
    let (auth, reader) = (role("-metrics-auth")?, role("-metrics-reader")?);
    let bind = |role: &Value, name: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role["metadata"]["name"]},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": CONTROLLER_USER}]
        })
    };
    let _ =
        env.kubectl(&["delete", "clusterrolebinding", "nrauth-test-reader", "--ignore-not-found"]);
    for doc in [&auth, &reader, &bind(&auth, "nrauth-test-auth")] {
        env.kubectl_ok(&["apply", "-f", "-"], Some(&doc.to_string()))?;
    }
    let dir = scratch("metrics-auth");
    let ctl = ControllerProcess::start_in(
        CONTROLLER_NS,
        &env.controller_kubeconfig,
        "metrics-auth",
        "noderotation",
        &dir.join("controller.log"),
        &["--metrics-auth", "kubernetes"],
    )?;
    let result = async {
        let port = ctl.metrics_port;
        eventually("the metrics listener", Duration::from_secs(60), || async {
            http_get(port, "/metrics", None).await.ok()
        })
        .await?;
        let status = |out: &str| out.lines().next().unwrap_or_default().to_string();
        let none = http_get(port, "/metrics", None).await?;
        assert_eq!(status(&none), "HTTP/1.1 401 Unauthorized", "{none}");
        assert!(none.contains("a bearer token is required"), "{none}");
        let forged = http_get(port, "/metrics", Some("not-a-token")).await?;
        assert_eq!(status(&forged), "HTTP/1.1 401 Unauthorized", "{forged}");
        // The harness's controller user: authenticated, but not allowed to get /metrics.
        let user = kubeconfig_token(&env.controller_kubeconfig)?;
        let denied = http_get(port, "/metrics", Some(&user)).await?;
        assert_eq!(status(&denied), "HTTP/1.1 403 Forbidden", "{denied}");
        assert!(denied.contains("noderotation-controller may not get /metrics"), "{denied}");
        // Bound to the chart's reader role, it may (RBAC takes effect within moments).
        env.kubectl_ok(
            &["apply", "-f", "-"],
            Some(&bind(&reader, "nrauth-test-reader").to_string()),
        )?;
        let allowed =
            eventually("the reader role to allow a scrape", Duration::from_secs(20), || async {
                let out = http_get(port, "/metrics", Some(&user)).await.ok()?;
                (status(&out) == "HTTP/1.1 200 OK").then_some(out)
            })
            .await?;
        assert!(allowed.contains("noderotation_build_info"), "{allowed}");
        // The probes: their own port, no token needed, no metrics there.
        let health = ctl.health_port;
        let live = http_get(health, "/healthz", None).await?;
        assert_eq!(status(&live), "HTTP/1.1 200 OK", "{live}");
        let elsewhere = http_get(health, "/metrics", Some(&user)).await?;
        assert_eq!(status(&elsewhere), "HTTP/1.1 404 Not Found", "{elsewhere}");
        Ok::<(), Error>(())
    }
    .await;
    if result.is_err() {
        eprintln!("controller log:\n{}", ctl.log_text());
    }
    drop(ctl);
    let _ =
        env.kubectl(&["delete", "clusterrolebinding", "nrauth-test-auth", "nrauth-test-reader"]);
    result
}

/// A client acting as `user` (impersonated by the harness admin).
async fn impersonating(env: &Env, user: &str) -> Result<kube::Client, Error> {
    let kc = kube::config::Kubeconfig::read_from(&env.kubeconfig)?;
    let mut config =
        Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    config.auth_info.impersonate = Some(user.to_string());
    Ok(kube::Client::try_from(config)?)
}

/// A merge patch of `annotations` (a null value removes the key) on a cluster-scoped object.
async fn annotate(
    client: &kube::Client,
    kind: &str,
    name: &str,
    annotations: Value,
) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {"annotations": annotations}});
    dyn_api(client, kind).patch(name, &PatchParams::default(), &KubePatch::Merge(&patch)).await?;
    Ok(())
}

/// The chart's admission policy (rendered by Helm; its binding narrowed to this test's objects
/// with an object selector, so the rest of the tier is not under it): a user's hand-written
/// anchor is refused with a message naming the key, so is the removal of the operator's key;
/// `noderotation.io/freeze` is the user's to set; the operator's ServiceAccount writes pass; a
/// person may set a Node's ownership markers to `false`, and nothing else.
#[tokio::test]
async fn admission_policy_refuses_a_users_anchor_and_allows_freeze() -> TestResult {
    let env = harness!();
    let (release, ns) = ("vap", "noderotation-vap");
    let pool = format!("vap-pool-{}", std::process::id());
    let _ = env.kubectl(&["create", "namespace", ns]);
    let manifest = helm(&env, &["template", release, CHART, "-n", ns])?;
    let one = |kind: &str| -> Result<Value, Error> {
        rendered(&manifest, kind)?.into_iter().next().ok_or_else(|| format!("no {kind}").into())
    };
    let (policy, mut binding) =
        (one("ValidatingAdmissionPolicy")?, one("ValidatingAdmissionPolicyBinding")?);
    let operator = format!("system:serviceaccount:{ns}:{release}-noderotation");
    assert_eq!(
        binding["spec"]["paramRef"],
        json!({"name": format!("{release}-noderotation"),
        "namespace": ns, "parameterNotFoundAction": "Allow"})
    );
    binding["spec"]["matchResources"] =
        json!({"objectSelector": {"matchLabels": {TEST_LABEL: pool}}});
    for doc in
        [one("ServiceAccount")?, one("ClusterRole")?, one("ClusterRoleBinding")?, policy, binding]
    {
        env.kubectl_ok(&["apply", "-f", "-"], Some(&doc.to_string()))?;
    }
    let admin = env.admin().await?;
    let _ = dyn_api(&admin, "NodePool").delete(&pool, &DeleteParams::default()).await;
    eventually("the old pool gone", Duration::from_secs(20), || async {
        dyn_api(&admin, "NodePool").get_opt(&pool).await.ok()?.is_none().then_some(())
    })
    .await?;
    create(&admin, &nodepool_json(&pool, &pool)).await?;
    let node_name = format!("{pool}-node");
    let _ = dyn_api(&admin, "Node").delete(&node_name, &DeleteParams::default()).await;
    let result = async {
        // A person hand-writes an anchor: refused once the API server has loaded the policy
        // (a new value each try, so that a try before then is not an unchanged key after).
        let mut attempt = 0;
        let refusal =
            eventually("the policy to refuse a user's anchor", Duration::from_secs(30), || {
                attempt += 1;
                let (admin, pool) = (admin.clone(), pool.clone());
                async move {
                    let anchor =
                        json!({"noderotation.io/active-rotation.1": format!("claim-{attempt}")});
                    match annotate(&admin, "NodePool", &pool, anchor).await {
                        Ok(()) => None,
                        Err(err) => Some(err.to_string()),
                    }
                }
            })
            .await?;
        assert!(refusal.contains("noderotation.io/active-rotation.1"), "{refusal}");
        assert!(
            refusal.contains(&format!("only the noderotation operator ({operator})")),
            "{refusal}"
        );
        // The freeze is the user's.
        annotate(
            &admin,
            "NodePool",
            &pool,
            json!({"noderotation.io/freeze": "2099-01-01T00:00:00Z"}),
        )
        .await?;
        // The operator writes its keys, and removes the anchor a try may have left.
        let as_operator = impersonating(&env, &operator).await?;
        annotate(
            &as_operator,
            "NodePool",
            &pool,
            json!({"noderotation.io/last-rotation-at": "2026-01-01T00:00:00Z",
                   "noderotation.io/active-rotation.1": null}),
        )
        .await?;
        // A person may not remove them either, nor change them.
        let removal =
            annotate(&admin, "NodePool", &pool, json!({"noderotation.io/last-rotation-at": null}))
                .await
                .err()
                .ok_or("a user removed the operator's key")?;
        assert!(removal.to_string().contains("noderotation.io/last-rotation-at"), "{removal}");
        let unfrozen =
            annotate(&admin, "NodePool", &pool, json!({"noderotation.io/freeze": null})).await;
        assert!(unfrozen.is_ok(), "lifting the freeze: {unfrozen:?}");
        let ann = dyn_api(&admin, "NodePool").get(&pool).await?.annotations().clone();
        assert_eq!(
            ann.get("noderotation.io/last-rotation-at").map(String::as_str),
            Some("2026-01-01T00:00:00Z")
        );
        assert!(!ann.contains_key("noderotation.io/active-rotation.1"), "{ann:?}");
        // On a Node, a person may hand our ownership markers back (set them to "false": the
        // cordon and do-not-disrupt are theirs from then on), never forge or remove them.
        let mut node = node_json(&node_name, &pool);
        node["metadata"]["labels"][TEST_LABEL] = json!(pool);
        create(&admin, &node).await?;
        annotate(
            &as_operator,
            "Node",
            &node_name,
            json!({"noderotation.io/cordoned": "true", "noderotation.io/do-not-disrupt-owned": "true"}),
        )
        .await?;
        annotate(&admin, "Node", &node_name, json!({"noderotation.io/cordoned": "false"})).await?;
        let forged = annotate(&admin, "Node", &node_name, json!({"noderotation.io/cordoned": "true"}))
            .await
            .err()
            .ok_or("a user set an ownership marker back to true")?;
        assert!(forged.to_string().contains("noderotation.io/cordoned"), "{forged}");
        let removed = annotate(
            &admin,
            "Node",
            &node_name,
            json!({"noderotation.io/do-not-disrupt-owned": null}),
        )
        .await
        .err()
        .ok_or("a user removed an ownership marker")?;
        assert!(removed.to_string().contains("noderotation.io/do-not-disrupt-owned"), "{removed}");
        Ok::<(), Error>(())
    }
    .await;
    let _ = dyn_api(&admin, "Node").delete(&node_name, &DeleteParams::default()).await;
    let name = format!("{release}-noderotation-annotations");
    let _ =
        env.kubectl(&["delete", "validatingadmissionpolicybinding", &name, "--ignore-not-found"]);
    let _ = env.kubectl(&["delete", "validatingadmissionpolicy", &name, "--ignore-not-found"]);
    let _ = dyn_api(&admin, "NodePool").delete(&pool, &DeleteParams::default()).await;
    result
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
) -> Result<String, Error> {
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
    Ok(log)
}

/// The README's quick start: `helm install` with a RotationPolicy from the chart's values
/// (`kubectl get rotationpolicies` shows it), the image under the chart's ServiceAccount
/// completes a surge rotation, a second one starts, and `helm uninstall` (its pre-delete hook)
/// leaves nothing of ours behind, the policy included, while the user's own cordon,
/// do-not-disrupt and freeze stay. Uninstall cleans every pool, claim and node in the cluster,
/// so this runs alone, after the rest of the tier (tests/all.sh: `cargo test --test apiserver
/// -- --ignored`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster-wide uninstall: tests/all.sh runs it alone after the rest of the tier"]
async fn in_cluster_helm_install_rotates_and_helm_uninstall_leaves_nothing_of_ours() -> TestResult {
    let env = harness!();
    if !image_or_skip("helm in-cluster")? {
        return Ok(());
    }
    let _one = ROTATION.lock().await;
    let (release, ns) = ("nr", "noderotation-helm");
    // The namespace option as operations.md documents it: the namespace exists (Helm records
    // the release there first) and the chart takes it over with its Pod Security labels, so the
    // placeholders below are admitted under `restricted`.
    let _ = env.kubectl(&["create", "namespace", ns]);
    // A short cooldown: the second rotation starts soon after the first, once the test has put
    // a workload on the surge node (an empty node has nothing to reserve: it would be rotated
    // without a surge, and the test follows a surge).
    let surge = json!({"readyTimeout": "10m", "cooldownAfter": "20s", "retryBackoff": "30m"});
    let mut fx = Rotation::without_policy(&env, "helm-rot").await?;
    fx.ns = ns.to_string();
    // The quick start's values file: the policy comes with the release. (The played kubelet runs
    // the image built here whatever the chart names; the placeholder PriorityClass exists
    // already: the harness setup applies deploy/base's.)
    let values = json!({
        "rotationPolicies": [{
            "name": fx.pool,
            "labels": {SUITE_LABEL: "rotation"},
            "spec": fx.policy_spec(surge),
        }],
        "placeholder": {"priorityClass": {"create": false}},
    });
    let values_file = fx.dir.join("values.yaml");
    std::fs::write(&values_file, serde_norway::to_string(&values)?)?;
    helm(
        &env,
        &[
            "install",
            release,
            CHART,
            "-n",
            ns,
            "--take-ownership",
            "--set",
            "namespace.create=true",
            "-f",
            &values_file.display().to_string(),
        ],
    )?;
    let listed = env.kubectl_ok(&["get", "rotationpolicies"], None)?;
    assert!(listed.contains(&fx.pool), "kubectl get rotationpolicies:\n{listed}");
    let namespace: Value =
        serde_json::from_str(&env.kubectl_ok(&["get", "namespace", ns, "-o", "json"], None)?)?;
    assert_eq!(namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted");
    let name = format!("{release}-noderotation");
    let deployment: Value = serde_json::from_str(
        &env.kubectl_ok(&["get", "deployment", &name, "-n", ns, "-o", "json"], None)?,
    )?;
    assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], name.as_str());
    // The admission policy is on by default: the rotation below passes it (the operator's own
    // writes), a person's hand-written anchor does not.
    let guard = format!("{name}-annotations");
    env.kubectl_ok(&["get", "validatingadmissionpolicybinding", &guard], None)?;

    let mut actor = Some(fx.ready_actor());
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
        // A person cannot start a rotation by hand (once the API server has the policy).
        let mut attempt = 0;
        let refusal = eventually(
            "the installed policy to refuse a hand-written anchor",
            Duration::from_secs(30),
            || {
                attempt += 1;
                let (admin, pool) = (fx.admin.clone(), fx.pool.clone());
                async move {
                    let anchor =
                        json!({"noderotation.io/active-rotation.2": format!("by-hand-{attempt}")});
                    annotate(&admin, "NodePool", &pool, anchor).await.err().map(|e| e.to_string())
                }
            },
        )
        .await?;
        assert!(refusal.contains("noderotation.io/active-rotation.2"), "{refusal}");
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
        let hook_log =
            play_uninstall_hook(&env, &fx.admin, ns, &name, &mut operator, &fx.dir).await?;
        let out = uninstall.await??;
        assert!(out.contains("uninstalled"), "{out}");
        let policies = env.kubectl_ok(&["get", "rotationpolicies", "-o", "name"], None)?;
        assert!(!policies.contains(&fx.pool), "the release's policy outlived it: {policies}");
        // The hook lifted the admission policy before it stopped the operator or cleaned up,
        // and the policy went with the release.
        let lifted = hook_log
            .find(&format!("ValidatingAdmissionPolicyBinding {guard}: deleted"))
            .ok_or(format!("the hook did not delete the binding:\n{hook_log}"))?;
        let stopped = hook_log.find("scaled to 0").ok_or("the hook did not stop the operator")?;
        assert!(lifted < stopped, "{hook_log}");
        for kind in ["validatingadmissionpolicybinding", "validatingadmissionpolicy"] {
            let out = env.kubectl(&["get", kind, &guard]);
            assert!(!out.status.success(), "{kind} {guard} is left after helm uninstall");
        }

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
    /// only its `started-at` says it is this attempt's. (Killed once the uid is recorded, which
    /// the test then removes: the same objects a kill inside that window leaves.)
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
            // The pod nobody recorded carries the attempt's started-at: the new leader keeps it
            // as the rotation's placeholder (never deleted and created again), on its one node.
            if bound.len() != 1 {
                return Err(format!("the unrecorded placeholder kept, not {bound:?}").into());
            }
        }
        Ok::<(), Error>(())
    }
    .await;
    print_logs_on_error(
        &result,
        &[("first controller", Some(&first)), ("second controller", second.as_ref())],
    );
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

/// The log of each controller that started, when `result` is an error.
fn print_logs_on_error(result: &TestResult, controllers: &[(&str, Option<&ControllerProcess>)]) {
    if result.is_err() {
        for (name, ctl) in controllers {
            if let Some(ctl) = ctl {
                eprintln!("{name} log:\n{}", ctl.log_text());
            }
        }
    }
}

/// Two installs of the operator in one cluster (the same RBAC in two namespaces): while the first
/// leads, the second refuses to, naming the first's Lease and holder; once the first stops, the
/// second leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_install_refuses_to_lead_and_names_the_first() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let second_ns = "noderotation-second";
    let _ = env.kubectl(&["create", "namespace", second_ns]);
    env.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&namespaced_rbac_for_user(CONTROLLER_USER, second_ns)?),
    )?;
    let dir = scratch("second-install");
    let kubeconfig = &env.controller_kubeconfig;
    let mut first =
        ControllerProcess::start(kubeconfig, "first-0", "noderotation", &dir.join("first.log"))?;
    let mut second = None;
    let result = async {
        eventually("the first install leads", Duration::from_secs(60), || async {
            first.log_text().contains("became leader").then_some(())
        })
        .await?;
        let ctl = second.insert(ControllerProcess::start_in(
            second_ns,
            kubeconfig,
            "second-0",
            "noderotation",
            &dir.join("second.log"),
            &[],
        )?);
        let named = format!(
            "another noderotation install leads in this cluster: Lease {CONTROLLER_NS}/noderotation held by first-0"
        );
        eventually("the second install to refuse, naming the first", Duration::from_secs(60), || async {
            ctl.log_text().contains(&named).then_some(())
        })
        .await?;
        assert!(!ctl.log_text().contains("became leader"), "{}", ctl.log_text());
        let metrics = eventually("the conflict in /metrics", Duration::from_secs(10), || async {
            let m = ctl.metrics().await.ok()?;
            m.lines().any(|l| l == "noderotation_install_conflict 1").then_some(m)
        })
        .await?;
        assert!(metrics.lines().any(|l| l == "noderotation_leader 0"), "{metrics}");
        // The first install goes (SIGTERM releases its Lease): the second leads.
        first.terminate();
        eventually("the second install leads", Duration::from_secs(90), || async {
            ctl.log_text().contains("became leader").then_some(())
        })
        .await?;
        Ok::<(), Error>(())
    }
    .await;
    print_logs_on_error(
        &result,
        &[("first install", Some(&first)), ("second install", second.as_ref())],
    );
    if let Some(ctl) = second.as_mut() {
        ctl.terminate();
    }
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

/// A leader the test plays on the Lease `noderotation` (the only one the controller's Role may
/// touch): it stamps `renewTime` on a clock `offset` off the real one, and renews with merge
/// patches carrying the resourceVersion of its previous write, as a real holder would, so a
/// renewal loses (409) only if someone else wrote the Lease meanwhile.
struct PlayedLeader {
    api: Api<k8s_openapi::api::coordination::v1::Lease>,
    identity: String,
    offset: chrono::Duration,
    rv: String,
}

impl PlayedLeader {
    /// Replaces the Lease with one this leader holds, last renewed `ago` on its clock.
    async fn take(
        env: &Env,
        identity: &str,
        offset: chrono::Duration,
        ago: chrono::Duration,
    ) -> Result<PlayedLeader, Error> {
        use noderotation::runtime::install::LEADER_LEASE_LABEL;
        let api = Api::namespaced(env.admin().await?, CONTROLLER_NS);
        let _ = api.delete("noderotation", &DeleteParams::default()).await;
        eventually("the old Lease gone", Duration::from_secs(10), || async {
            api.get_opt("noderotation").await.ok()?.is_none().then_some(())
        })
        .await?;
        let stamp = Self::stamp(offset - ago);
        let lease: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(json!({
            "metadata": {"name": "noderotation", "labels": {LEADER_LEASE_LABEL: "true"}},
            "spec": {"holderIdentity": identity, "leaseDurationSeconds": 10,
                     "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 1}
        }))?;
        let created = api.create(&PostParams::default(), &lease).await?;
        let rv = created.resource_version().ok_or("no resourceVersion")?;
        Ok(PlayedLeader { api, identity: identity.into(), offset, rv })
    }

    /// Now on this leader's clock, as a MicroTime.
    fn stamp(offset: chrono::Duration) -> String {
        use noderotation::clock::{Clock, SystemClock};
        (SystemClock.now() + offset).to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    }

    async fn renew(&mut self) -> Result<(), Error> {
        let patch = json!({
            "metadata": {"resourceVersion": self.rv},
            "spec": {"holderIdentity": self.identity, "renewTime": Self::stamp(self.offset)}
        });
        match self
            .api
            .patch("noderotation", &PatchParams::default(), &KubePatch::Merge(&patch))
            .await
        {
            Ok(lease) => {
                self.rv = lease.resource_version().ok_or("no resourceVersion")?;
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let now = self.api.get_opt("noderotation").await?.and_then(|l| l.spec);
                Err(format!(
                    "{}'s renewal lost: someone else wrote its Lease meanwhile: {now:?}",
                    self.identity
                )
                .into())
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn holder(&self) -> Option<String> {
        self.api.get_opt("noderotation").await.ok()??.spec?.holder_identity
    }

    /// Renews every 2 s for `span`; every renewal must win.
    async fn keep_renewing(&mut self, span: Duration) -> Result<(), Error> {
        let until = std::time::Instant::now() + span;
        while std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_secs(2)).await;
            self.renew().await?;
        }
        Ok(())
    }

    async fn remove(&self) {
        let _ = self.api.delete("noderotation", &DeleteParams::default()).await;
    }
}

/// A standby whose clock is an hour ahead of the leader's (or a leader whose clock is an hour
/// behind): the leader's `renewTime` reads as long past, but the leader renews every 2 s. The
/// standby judges expiry on its own observation of the Lease, so it never takes it, and never
/// writes it while it is renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_never_takes_a_lease_renewed_on_a_clock_an_hour_behind() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let mut leader = PlayedLeader::take(
        &env,
        "slow-clock-0",
        -chrono::Duration::hours(1),
        chrono::Duration::zero(),
    )
    .await?;
    let dir = scratch("skewed-clock");
    let standby = ControllerProcess::start(
        &env.controller_kubeconfig,
        "standby-0",
        "noderotation",
        &dir.join("standby.log"),
    )?;
    let result = async {
        eventually("the standby serving", Duration::from_secs(60), || async {
            standby
                .metrics()
                .await
                .ok()?
                .lines()
                .any(|l| l == "noderotation_leader 0")
                .then_some(())
        })
        .await?;
        // Three Lease durations (FAST_RUN_FLAGS: 10 s).
        leader.keep_renewing(Duration::from_secs(30)).await?;
        assert!(!standby.log_text().contains("became leader"), "the standby led");
        assert_eq!(leader.holder().await.as_deref(), Some("slow-clock-0"));
        Ok::<(), Error>(())
    }
    .await;
    print_logs_on_error(&result, &[("standby", Some(&standby))]);
    leader.remove().await;
    result
}

/// The holder went quiet for longer than its Lease and renews just as the standby decided to
/// take it: the standby's write (held by the proxy between the standby's read and its write)
/// lands after the renewal. It must lose (its precondition is the record it judged), not clear
/// or take a Lease that was just renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_never_lands_on_a_renewal_it_did_not_see() -> TestResult {
    let env = harness!();
    let _one = ROTATION.lock().await;
    let mut leader = PlayedLeader::take(
        &env,
        "quiet-0",
        chrono::Duration::zero(),
        chrono::Duration::seconds(60),
    )
    .await?;
    // kubectl proxy (the controller identity's credentials) <- recording proxy <- the standby.
    let (_kubectl_proxy, recorder) = recording_proxy(&env).await?;
    let dir = scratch("takeover-race");
    let kubeconfig = dir.join("recorded.kubeconfig");
    std::fs::write(&kubeconfig, recorder.kubeconfig())?;
    let write = recorder.hold_next("PATCH", "/leases/noderotation");
    let standby = ControllerProcess::start(
        &kubeconfig,
        "standby-0",
        "noderotation",
        &dir.join("standby.log"),
    )?;
    let result = async {
        eventually("the standby's first write of the Lease", Duration::from_secs(90), || async {
            write.reached().then_some(())
        })
        .await?;
        // Between the standby's read and its write, the holder renews.
        leader.renew().await?;
        write.release();
        leader.keep_renewing(Duration::from_secs(25)).await?;
        assert!(!standby.log_text().contains("became leader"), "the standby led");
        assert_eq!(leader.holder().await.as_deref(), Some("quiet-0"));
        Ok::<(), Error>(())
    }
    .await;
    write.release();
    print_logs_on_error(&result, &[("standby", Some(&standby))]);
    leader.remove().await;
    result
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
