//! The full-stack tier's plumbing: the gate, Karpenter fixtures read from the Go module cache,
//! one scenario's world (a NodePool, a namespace, Deployments with PDBs), the observers that
//! time workload pods and claims, and `noderotation run`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use noderotation::clock::{Clock, SystemClock};
use noderotation::karpenter::{NODEPOOL_LABEL, NodeClaim};
use serde_json::{Value, json};

use crate::support::{self, Env, Error, TEST_LABEL};

/// The KWOKNodeClass every scenario pool uses: Karpenter's E2E fixture plus a registration delay.
pub const NODE_CLASS: &str = "noderotation-fullstack";
/// One instance type (4 CPU, allocatable 3900m after Karpenter's 100m kube-reserved) in one zone,
/// so that "a node is full" and "spare capacity" are exact.
pub const INSTANCE_TYPE: &str = "c-4x-amd64-linux";
pub const ZONE: &str = "test-zone-a";
pub const ANN: &str = "noderotation.io/";
pub const APP_LABEL: &str = "app.kubernetes.io/name";
/// How long Karpenter may take to write a registered node's name on its claim after the node
/// took pods (one lifecycle reconcile, retried on a conflict).
const CLAIM_REGISTERED: Duration = Duration::from_secs(60);

pub fn now() -> DateTime<Utc> {
    SystemClock.now()
}

/// Seconds from `a` to `b` (negative when `b` is earlier).
pub fn secs(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_milliseconds() as f64 / 1000.0
}

/// Go-style duration (`20m`, `30s`, `1h`) to a chrono duration; the subset the tests use.
pub fn go_duration(s: &str) -> chrono::Duration {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num.parse().unwrap_or_else(|_| panic!("bad duration {s}"));
    match unit {
        "s" => chrono::Duration::seconds(n),
        "m" => chrono::Duration::minutes(n),
        "h" => chrono::Duration::hours(n),
        _ => panic!("bad duration unit in {s}"),
    }
}

// ---- the gate -----------------------------------------------------------------------------------

/// The running full stack, as `up --full-stack` described it in its ready file.
#[derive(Clone)]
pub struct Stack {
    pub env: Env,
    pub ready: Value,
    pub karpenter_dir: PathBuf,
    /// Identifies the run: `NODEROTATION_FULL_STACK_RUN_ID`, else this stack instance's temp dir
    /// name. Results of one run share it.
    pub run_id: String,
}

impl Stack {
    pub fn log_path(&self, component: &str) -> Option<PathBuf> {
        self.ready["fullStack"]["logs"][component].as_str().map(PathBuf::from)
    }

    pub fn karpenter_metrics_url(&self) -> String {
        self.ready["fullStack"]["karpenterMetrics"].as_str().unwrap_or_default().to_string()
    }

    /// Lines of Karpenter's log that mention `needle` (its log is JSON lines).
    pub fn karpenter_log_lines(&self, needle: &str) -> Vec<String> {
        self.log_lines("karpenter", needle)
    }

    /// Lines of `component`'s log that mention `needle`.
    pub fn log_lines(&self, component: &str, needle: &str) -> Vec<String> {
        let Some(path) = self.log_path(component) else { return Vec::new() };
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

/// The stack, or `None` with a message. The tier runs only against `up --full-stack` (its ready
/// file has a `fullStack` section), so a developer's own cluster is never touched. With
/// `NODEROTATION_FULL_STACK_REQUIRED=1` (tests/all.sh's full-stack step sets it) a missing stack
/// is an error, not a skip, so the CI switch cannot pass vacuously.
pub fn stack() -> Option<Stack> {
    static STACK: OnceLock<Result<Stack, String>> = OnceLock::new();
    let required = std::env::var("NODEROTATION_FULL_STACK_REQUIRED").is_ok_and(|v| v == "1");
    match STACK.get_or_init(find_stack) {
        Ok(s) => Some(s.clone()),
        Err(why) if required => panic!("NODEROTATION_FULL_STACK_REQUIRED=1 but {why}"),
        Err(why) => {
            eprintln!(
                "skipping: {why}; these tests need the full-stack tier: \
                 eval \"$(tests/k8s-harness/start.sh --full-stack)\" (see tests/k8s-harness/README.md)"
            );
            None
        }
    }
}

fn find_stack() -> Result<Stack, String> {
    let kubeconfig = std::env::var_os("KUBECONFIG").ok_or("KUBECONFIG is unset")?;
    let ready_file = std::env::var_os("HARNESS_READY_FILE").ok_or("HARNESS_READY_FILE is unset")?;
    let text = std::fs::read_to_string(&ready_file)
        .map_err(|e| format!("cannot read {}: {e}", PathBuf::from(&ready_file).display()))?;
    let ready: Value = serde_json::from_str(&text).map_err(|e| format!("ready file: {e}"))?;
    if ready["fullStack"].is_null() {
        return Err("the harness is up without --full-stack".into());
    }
    let karpenter_dir = PathBuf::from(ready["fullStack"]["karpenterDir"].as_str().unwrap_or(""));
    // Stacks that share a run (tests/k8s-harness/fullstack.sh runs the scenarios on two) name it.
    let run_id = match std::env::var("NODEROTATION_FULL_STACK_RUN_ID") {
        Ok(id) if !id.is_empty() => id,
        _ => Path::new(ready["dir"].as_str().unwrap_or("unknown"))
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    Ok(Stack {
        env: Env {
            kubeconfig: PathBuf::from(kubeconfig),
            controller_kubeconfig: std::env::var_os("NODEROTATION_CONTROLLER_KUBECONFIG")
                .map(PathBuf::from)
                .or_else(|| ready["controllerKubeconfig"].as_str().map(PathBuf::from))
                .unwrap_or_default(),
            bin: std::env::var_os("HARNESS_BIN").map(PathBuf::from),
        },
        ready,
        karpenter_dir,
        run_id,
    })
}

/// One-time setup: what the apiserver tier sets up (our CRD, namespace, PriorityClass, the RBAC
/// of deploy/ bound to the controller user) plus this tier's KWOKNodeClass.
pub fn setup(stack: &Stack) -> Result<(), Error> {
    static ONCE: OnceLock<Result<(), String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        (|| -> Result<(), Error> {
            support::setup(&stack.env)?;
            sweep(stack)?;
            let mut class = fixture(stack, "default_kowknodeclass.yaml")?;
            class["metadata"] = json!({"name": NODE_CLASS});
            class["spec"]["nodeRegistrationDelay"] = json!(registration_delay());
            stack.env.kubectl_ok(&["apply", "-f", "-"], Some(&class.to_string()))?;
            Ok(())
        })()
        .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(Error::from)
}

/// How long a KWOK node takes to register after Karpenter launches it (a cloud's boot time).
/// `NODEROTATION_FULL_STACK_REGISTRATION_DELAY`, default 30s.
pub fn registration_delay() -> String {
    std::env::var("NODEROTATION_FULL_STACK_REGISTRATION_DELAY").unwrap_or_else(|_| "30s".into())
}

/// A YAML fixture of Karpenter's E2E suite, from the module cache (never copied into the repo).
pub fn fixture(stack: &Stack, file: &str) -> Result<Value, Error> {
    let path = stack.karpenter_dir.join("test/pkg/environment/common").join(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("Karpenter fixture {}: {e}", path.display()))?;
    Ok(serde_norway::from_str(&text)?)
}

// ---- a scenario's world -----------------------------------------------------------------------

/// The NodePool of one scenario, built from Karpenter's `default_nodepool.yaml` fixture.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    pub expire_after: String,
    pub termination_grace_period: String,
    /// `Never` keeps Karpenter's consolidation out of a scenario; `0s` invites it.
    pub consolidate_after: String,
}

/// One scenario's objects. Dropping it deletes them (after a failure or a panic too) and, unless
/// [`World::pass`] was called, keeps the component logs in its directory.
pub struct World {
    pub stack: Stack,
    pub admin: Client,
    /// Scenario name: the NodePool, the namespace and the RotationPolicy are all called this.
    pub name: String,
    pub pool: PoolSpec,
    pub dir: PathBuf,
    passed: AtomicBool,
}

/// Marks every object the tier creates, so that a later run can sweep what an aborted one left.
pub const SUITE_LABEL: &str = "noderotation.io/suite";
pub const SUITE: &str = "fullstack";

impl World {
    pub async fn new(stack: &Stack, scenario: &str, pool: PoolSpec) -> Result<World, Error> {
        setup(stack)?;
        let admin = stack.env.admin().await?;
        let name = format!("{scenario}-{}", std::process::id());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fullstack").join(&name);
        std::fs::create_dir_all(&dir)?;
        let w =
            World { stack: stack.clone(), admin, name, pool, dir, passed: AtomicBool::new(false) };
        let mut np = fixture(stack, "default_nodepool.yaml")?;
        np["metadata"] =
            json!({"name": w.name, "labels": {TEST_LABEL: w.name, SUITE_LABEL: SUITE}});
        np["spec"]["template"]["metadata"] = json!({"labels": {SUITE_LABEL: SUITE}});
        let t = &mut np["spec"]["template"]["spec"];
        t["expireAfter"] = json!(w.pool.expire_after);
        t["terminationGracePeriod"] = json!(w.pool.termination_grace_period);
        t["nodeClassRef"]["name"] = json!(NODE_CLASS);
        let reqs =
            t["requirements"].as_array_mut().ok_or("fixture NodePool has no requirements")?;
        reqs.push(json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]}));
        reqs.push(
            json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]}),
        );
        np["spec"]["disruption"]["consolidateAfter"] = json!(w.pool.consolidate_after);
        w.kubectl(&["apply", "-f", "-"], Some(&np.to_string()))?;
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": w.name, "labels": {SUITE_LABEL: SUITE}}});
        w.kubectl(&["apply", "-f", "-"], Some(&ns.to_string()))?;
        let name = w.name.clone();
        eventually(&format!("NodePool {name} Ready"), Duration::from_secs(120), || async {
            let np = dyn_get(&w.admin, "NodePool", &name).await?;
            ready_condition(&np).then_some(())
        })
        .await?;
        Ok(w)
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, Error> {
        self.stack.env.kubectl_ok(args, stdin)
    }

    /// A Deployment of `replicas` pause pods with `cpu` requests pinned to this pool, and a PDB
    /// with `maxUnavailable: 1`. Waits until every replica runs; returns the nodes they run on.
    pub async fn deploy(
        &self,
        app: &str,
        replicas: i32,
        cpu: &str,
        extra: impl FnOnce(&mut Value),
    ) -> Result<BTreeSet<String>, Error> {
        let mut deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": app, "namespace": self.name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {APP_LABEL: app}},
                "template": {
                    "metadata": {"labels": {APP_LABEL: app}},
                    "spec": {
                        "nodeSelector": {NODEPOOL_LABEL: self.name},
                        "terminationGracePeriodSeconds": 5,
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]
                    }
                }
            }
        });
        extra(&mut deployment);
        let pdb = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": app, "namespace": self.name},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {APP_LABEL: app}}}
        });
        self.kubectl(&["apply", "-f", "-"], Some(&pdb.to_string()))?;
        self.kubectl(&["apply", "-f", "-"], Some(&deployment.to_string()))?;
        self.wait_running(app, replicas as usize, Duration::from_secs(300)).await
    }

    /// Waits until `n` pods of `app` run (and no other pod of it exists); their nodes.
    pub async fn wait_running(
        &self,
        app: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<BTreeSet<String>, Error> {
        eventually(&format!("{n} running pods of {app}"), timeout, || async {
            let pods = self.pods(app).await.ok()?;
            let running: Vec<_> = pods.iter().filter(|p| is_running(p)).collect();
            (running.len() == n && pods.len() == n)
                .then(|| running.iter().filter_map(|p| node_of(p)).collect())
        })
        .await
    }

    pub async fn pods(&self, app: &str) -> Result<Vec<Pod>, Error> {
        let api: Api<Pod> = Api::namespaced(self.admin.clone(), &self.name);
        Ok(api.list(&ListParams::default().labels(&format!("{APP_LABEL}={app}"))).await?.items)
    }

    pub fn scale(&self, app: &str, replicas: i32) -> Result<(), Error> {
        self.kubectl(
            &["-n", &self.name, "scale", "deployment", app, &format!("--replicas={replicas}")],
            None,
        )?;
        Ok(())
    }

    pub fn set_pdb_max_unavailable(&self, app: &str, n: i32) -> Result<(), Error> {
        self.patch_pdb(app, json!({"spec": {"maxUnavailable": n}}))
    }

    /// A merge patch of the app's PDB (`null` removes a field).
    pub fn patch_pdb(&self, app: &str, patch: Value) -> Result<(), Error> {
        let patch = patch.to_string();
        self.kubectl(&["-n", &self.name, "patch", "pdb", app, "--type=merge", "-p", &patch], None)?;
        Ok(())
    }

    /// The pool's claims (name -> claim), deleting ones included.
    pub async fn claims(&self) -> Result<BTreeMap<String, NodeClaim>, Error> {
        let api: Api<NodeClaim> = Api::all(self.admin.clone());
        let list = api
            .list(&ListParams::default().labels(&format!("{NODEPOOL_LABEL}={}", self.name)))
            .await?;
        Ok(list.items.into_iter().map(|c| (c.name_any(), c)).collect())
    }

    pub async fn claim(&self, name: &str) -> Result<Option<NodeClaim>, Error> {
        let api: Api<NodeClaim> = Api::all(self.admin.clone());
        Ok(api.get_opt(name).await?)
    }

    /// The claim whose node is `node`, once the claim says so.
    ///
    /// Karpenter's registration takes the unregistered taint off the Node and only then writes
    /// `status.nodeName` on the claim, in a second request. Pods can be scheduled and run on the
    /// node in between, so a test that found its pods running may look for the claim before the
    /// claim names the node: wait for it.
    pub async fn claim_of_node(&self, node: &str) -> Result<NodeClaim, Error> {
        let what = format!("the claim of pool {} naming node {node} in status.nodeName", self.name);
        eventually(&what, CLAIM_REGISTERED, || async {
            self.claims()
                .await
                .ok()?
                .into_values()
                .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        })
        .await
    }

    pub async fn node(&self, name: &str) -> Result<Option<Node>, Error> {
        let api: Api<Node> = Api::all(self.admin.clone());
        Ok(api.get_opt(name).await?)
    }

    pub async fn annotation(&self, kind: &str, name: &str, key: &str) -> Option<String> {
        let obj = dyn_get(&self.admin, kind, name).await?;
        obj["metadata"]["annotations"][format!("{ANN}{key}")].as_str().map(str::to_string)
    }

    pub async fn pool_annotations(&self) -> BTreeMap<String, String> {
        dyn_get(&self.admin, "NodePool", &self.name)
            .await
            .and_then(|np| serde_json::from_value(np["metadata"]["annotations"].clone()).ok())
            .unwrap_or_default()
    }

    pub fn annotate_pool(&self, key: &str, value: &str) -> Result<(), Error> {
        self.kubectl(
            &["annotate", "--overwrite", "nodepool", &self.name, &format!("{ANN}{key}={value}")],
            None,
        )?;
        Ok(())
    }

    /// Applies the scenario's RotationPolicy (selecting exactly this pool) with `spec`.
    pub fn apply_policy(&self, spec: Value) -> Result<(), Error> {
        let mut spec = spec;
        spec["nodePoolSelector"] = json!({"matchLabels": {TEST_LABEL: self.name}});
        let policy = json!({
            "apiVersion": "noderotation.io/v1alpha1", "kind": "RotationPolicy",
            "metadata": {"name": self.name, "labels": {SUITE_LABEL: SUITE}},
            "spec": spec
        });
        self.kubectl(&["apply", "-f", "-"], Some(&policy.to_string()))?;
        Ok(())
    }

    /// `noderotation run` as the harness's least-privilege controller user.
    pub fn controller(&self) -> Result<support::ControllerProcess, Error> {
        support::ControllerProcess::start(
            &self.stack.env.controller_kubeconfig,
            &self.name,
            "noderotation",
            &self.dir.join("controller.log"),
        )
    }

    /// Events whose involved object is `name` (any namespace), oldest first.
    pub async fn events_for(&self, name: &str) -> Result<Vec<Event>, Error> {
        let api: Api<Event> = Api::all(self.admin.clone());
        let mut items = api
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await?
            .items;
        items.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
        Ok(items)
    }

    /// Copies the component logs next to the controller's, for a failed run.
    pub fn keep_logs(&self) {
        for c in ["karpenter", "kube-scheduler", "kwok", "kube-controller-manager"] {
            if let Some(p) = self.stack.log_path(c) {
                let _ = std::fs::copy(&p, self.dir.join(format!("{c}.log")));
            }
        }
        eprintln!("logs kept in {}", self.dir.display());
    }

    /// The scenario passed: its logs need not be kept.
    pub fn pass(&self) {
        self.passed.store(true, Ordering::Release);
    }

    /// Deletes the policy, the namespace and the NodePool (Karpenter then removes its nodes).
    pub fn cleanup(&self) {
        let env = &self.stack.env;
        let _ = env.kubectl(&[
            "delete",
            "rotationpolicy",
            &self.name,
            "--ignore-not-found",
            "--wait=false",
        ]);
        let _ =
            env.kubectl(&["delete", "namespace", &self.name, "--ignore-not-found", "--wait=false"]);
        let _ =
            env.kubectl(&["delete", "nodepool", &self.name, "--ignore-not-found", "--wait=false"]);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if !self.passed.load(Ordering::Acquire) {
            let log = self.dir.join("controller.log");
            if let Ok(text) = std::fs::read_to_string(&log) {
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(60)..].join("\n");
                eprintln!(
                    "[{}] controller log (last 60 lines of {}):\n{tail}",
                    self.name,
                    log.display()
                );
            }
            self.keep_logs();
        }
        self.cleanup();
    }
}

/// Deletes what an aborted earlier run of the tier left in this cluster: its RotationPolicies
/// first (a controller started now would otherwise rotate those pools too), then its
/// namespaces, NodePools, and the nodes of pools that no longer exist (the KWOK provider still
/// creates a node when its claim was deleted before the registration delay ran out).
fn sweep(stack: &Stack) -> Result<(), Error> {
    let sel = format!("{SUITE_LABEL}={SUITE}");
    for kind in ["rotationpolicies", "namespaces", "nodepools"] {
        stack.env.kubectl_ok(
            &["delete", kind, "-l", &sel, "--ignore-not-found", "--wait=false"],
            None,
        )?;
    }
    stack
        .env
        .kubectl_ok(&["delete", "nodes", "-l", &sel, "--ignore-not-found", "--wait=false"], None)?;
    Ok(())
}

pub fn is_running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

pub fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn ready_condition(obj: &Value) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

pub async fn dyn_get(client: &Client, kind: &str, name: &str) -> Option<Value> {
    let obj = support::dyn_api(client, kind).get_opt(name).await.ok()??;
    serde_json::to_value(obj).ok()
}

pub async fn eventually<F, Fut, T>(what: &str, timeout: Duration, f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    support::eventually(what, timeout, f).await
}

// ---- observers ----------------------------------------------------------------------------------

/// Times every pod of one app while it is Pending, and counts how many run.
///
/// Driven by a watch, so each transition is timed when the API server announces it (a pod that
/// is Pending for a few milliseconds still counts). A pod counts as pending from the event that
/// first shows it with phase `Pending` and no deletionTimestamp until the event that shows it
/// `Running` (KWOK's pod-ready stage turns a bound pod Running at once) or deleted.
pub struct PendingTracker {
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<()>>,
    data: Arc<Mutex<Tracked>>,
}

#[derive(Default, Debug, Clone)]
pub struct Tracked {
    open: HashMap<String, (String, Instant)>,
    done: BTreeSet<String>,
    running: BTreeSet<String>,
    synced: bool,
    /// (pod, seconds pending)
    pub closed: Vec<(String, f64)>,
    /// Fewest Running and not terminating pods at any time since the watch synced.
    pub min_running: Option<usize>,
    /// Placeholder pods (ours) ever seen for the pool.
    pub placeholders: BTreeSet<String>,
}

impl Tracked {
    fn close(&mut self, uid: &str, at: Instant) {
        if let Some((name, since)) = self.open.remove(uid) {
            self.closed.push((name, at.duration_since(since).as_secs_f64()));
        }
        self.done.insert(uid.to_string());
    }

    fn apply(&mut self, p: &Pod, at: Instant) {
        let uid = p.uid().unwrap_or_default();
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminating = p.metadata.deletion_timestamp.is_some();
        if is_running(p) {
            self.running.insert(uid.clone());
        } else {
            self.running.remove(&uid);
        }
        match (phase, terminating) {
            (Some("Pending"), false) => {
                if !self.done.contains(&uid) && !self.open.contains_key(&uid) {
                    self.open.insert(uid, (p.name_any(), at));
                }
            }
            _ => self.close(&uid, at),
        }
    }

    fn sample(&mut self) {
        if self.synced {
            let n = self.running.len();
            self.min_running = Some(self.min_running.map_or(n, |m| m.min(n)));
        }
    }
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct PendingFigures {
    /// Workload pods that were Pending at some point.
    pub pending_pods: usize,
    /// The longest time one workload pod spent Pending, seconds.
    pub longest_pending_seconds: f64,
    /// Sum over workload pods of the time each spent Pending.
    pub pending_pod_seconds: f64,
    /// Fewest Running workload pods at any time.
    pub min_running: usize,
}

impl PendingTracker {
    /// Starts watching; returns once the watch has listed the current pods.
    pub async fn start(world: &World, app: &str) -> Result<PendingTracker, Error> {
        use futures::StreamExt;
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event as WatchEvent};
        let stop = Arc::new(AtomicBool::new(false));
        let data = Arc::new(Mutex::new(Tracked::default()));
        let pods: Api<Pod> = Api::namespaced(world.admin.clone(), &world.name);
        let config = watcher::Config::default().labels(&format!("{APP_LABEL}={app}"));
        let (s, d) = (stop.clone(), data.clone());
        let watch = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher::watcher(pods, config).default_backoff());
            while !s.load(Ordering::Acquire) {
                let next = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
                let Ok(Some(event)) = next else { continue };
                let at = Instant::now();
                let mut t = d.lock().unwrap_or_else(|e| e.into_inner());
                match event {
                    Ok(WatchEvent::Apply(p)) | Ok(WatchEvent::InitApply(p)) => t.apply(&p, at),
                    Ok(WatchEvent::Delete(p)) => {
                        let uid = p.uid().unwrap_or_default();
                        t.running.remove(&uid);
                        t.close(&uid, at);
                    }
                    Ok(WatchEvent::InitDone) => t.synced = true,
                    Ok(WatchEvent::Init) => {}
                    Err(e) => eprintln!("pending tracker: watch error {e}"),
                }
                t.sample();
            }
        });
        // Our placeholders for this pool, by watch: one can live for well under a second.
        let placeholders: Api<Pod> = Api::namespaced(world.admin.clone(), support::CONTROLLER_NS);
        let config = watcher::Config::default().labels("app.kubernetes.io/managed-by=noderotation");
        let pool = world.name.clone();
        let (s, d) = (stop.clone(), data.clone());
        let poll = tokio::spawn(async move {
            let mut stream =
                std::pin::pin!(watcher::watcher(placeholders, config).default_backoff());
            while !s.load(Ordering::Acquire) {
                let next = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
                let Ok(Some(Ok(WatchEvent::Apply(p) | WatchEvent::InitApply(p)))) = next else {
                    continue;
                };
                let sel = p.spec.as_ref().and_then(|s| s.node_selector.as_ref());
                if sel.and_then(|s| s.get(NODEPOOL_LABEL)) == Some(&pool) {
                    d.lock().unwrap_or_else(|e| e.into_inner()).placeholders.insert(p.name_any());
                }
            }
        });
        let tracker = PendingTracker { stop, handles: vec![watch, poll], data };
        eventually("the pod watch to sync", Duration::from_secs(30), || async {
            tracker.snapshot().synced.then_some(())
        })
        .await?;
        Ok(tracker)
    }

    pub fn snapshot(&self) -> Tracked {
        self.data.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops watching; pods still pending count until now.
    pub async fn finish(mut self) -> (PendingFigures, Tracked) {
        self.stop.store(true, Ordering::Release);
        for h in std::mem::take(&mut self.handles) {
            let _ = h.await;
        }
        let t = self.snapshot();
        let now = Instant::now();
        let mut all: Vec<f64> = t.closed.iter().map(|(_, s)| *s).collect();
        all.extend(t.open.values().map(|(_, since)| now.duration_since(*since).as_secs_f64()));
        let figures = PendingFigures {
            pending_pods: all.len(),
            longest_pending_seconds: all.iter().copied().fold(0.0, f64::max),
            pending_pod_seconds: all.iter().fold(0.0, |a, b| a + b),
            min_running: t.min_running.unwrap_or(0),
        };
        (figures, t)
    }
}

impl Drop for PendingTracker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Watches the pool's claims: when each was first seen, and when it got a deletionTimestamp
/// (from the claim itself, server time) or disappeared (local time).
pub struct ClaimWatch {
    stop: Arc<AtomicBool>,
    handle: Option<tokio::task::JoinHandle<()>>,
    pub data: Arc<Mutex<BTreeMap<String, ClaimSeen>>>,
}

#[derive(Debug, Clone)]
pub struct ClaimSeen {
    pub created: Option<DateTime<Utc>>,
    pub deletion: Option<DateTime<Utc>>,
    pub gone: Option<DateTime<Utc>>,
    pub node: Option<String>,
    /// When the claim was first seen with its node (registered), local time.
    pub registered: Option<DateTime<Utc>>,
    /// Our `state` annotation values in the order seen.
    pub states: Vec<String>,
    /// When each of `states` was first seen, local time.
    pub states_at: Vec<DateTime<Utc>>,
}

impl ClaimWatch {
    pub fn start(world: &World) -> ClaimWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let data = Arc::new(Mutex::new(BTreeMap::<String, ClaimSeen>::new()));
        let api: Api<NodeClaim> = Api::all(world.admin.clone());
        let selector = format!("{NODEPOOL_LABEL}={}", world.name);
        let (s, d) = (stop.clone(), data.clone());
        let handle = tokio::spawn(async move {
            while !s.load(Ordering::Acquire) {
                if let Ok(list) = api.list(&ListParams::default().labels(&selector)).await {
                    let t = now();
                    let mut m = d.lock().unwrap_or_else(|e| e.into_inner());
                    let names: BTreeSet<String> = list.items.iter().map(|c| c.name_any()).collect();
                    for c in &list.items {
                        let e = m.entry(c.name_any()).or_insert(ClaimSeen {
                            created: c.created(),
                            deletion: None,
                            gone: None,
                            node: None,
                            registered: None,
                            states: Vec::new(),
                            states_at: Vec::new(),
                        });
                        if e.deletion.is_none() {
                            e.deletion = c.metadata.deletion_timestamp.as_ref().and_then(|t| {
                                DateTime::from_timestamp(
                                    t.0.as_second(),
                                    u32::try_from(t.0.subsec_nanosecond()).ok()?,
                                )
                            });
                        }
                        if let Some(n) = c.status.as_ref().and_then(|s| s.node_name.clone()) {
                            e.node = Some(n);
                            e.registered.get_or_insert(t);
                        }
                        if let Some(st) = c.annotations().get(&format!("{ANN}state"))
                            && e.states.last() != Some(st)
                        {
                            e.states.push(st.clone());
                            e.states_at.push(t);
                        }
                    }
                    for (name, e) in m.iter_mut() {
                        if e.gone.is_none() && !names.contains(name) {
                            e.gone = Some(t);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        ClaimWatch { stop, handle: Some(handle), data }
    }

    pub fn seen(&self) -> BTreeMap<String, ClaimSeen> {
        self.data.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub async fn stop(mut self) -> BTreeMap<String, ClaimSeen> {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
        self.seen()
    }
}

impl Drop for ClaimWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The value of a Prometheus series `name{labels...} value` whose labels contain every `want`.
pub fn metric(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| want.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}
