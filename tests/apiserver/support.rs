//! Shared plumbing of the apiserver tests: the harness environment, kubectl, clients, one-time
//! setup (our CRD, the placeholder PriorityClass, the deploy/ RBAC bound to the harness's
//! controller user), object builders, and the `noderotation run` child process.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use kube::{Client, Config};
use noderotation::karpenter::{NodeClaim, NodePool};
use serde_json::{Value, json};

pub type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
pub type Error = Box<dyn std::error::Error + Send + Sync>;

pub const CONTROLLER_NS: &str = "noderotation-system";
pub const CONTROLLER_USER: &str = "noderotation-controller";
pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The harness as `tests/k8s-harness/start.sh` exported it.
#[derive(Debug, Clone)]
pub struct Env {
    pub kubeconfig: PathBuf,
    pub controller_kubeconfig: PathBuf,
    pub bin: Option<PathBuf>,
}

/// The harness environment, or `None` (with a message) when the tier is not running. Requires
/// `HARNESS_READY_FILE` as well as `KUBECONFIG`, so that a developer's own cluster is never
/// touched by `cargo test`.
pub fn env() -> Option<Env> {
    let kubeconfig = std::env::var_os("KUBECONFIG");
    let ready = std::env::var_os("HARNESS_READY_FILE");
    match (kubeconfig, ready) {
        (Some(kc), Some(_)) => Some(Env {
            kubeconfig: PathBuf::from(kc),
            controller_kubeconfig: std::env::var_os("NODEROTATION_CONTROLLER_KUBECONFIG")
                .map(PathBuf::from)
                .unwrap_or_default(),
            bin: std::env::var_os("HARNESS_BIN").map(PathBuf::from),
        }),
        _ => {
            eprintln!(
                "skipping: KUBECONFIG / HARNESS_READY_FILE unset; these tests need the apiserver \
                 tier: eval \"$(tests/k8s-harness/start.sh --karpenter-crds)\" (see README)"
            );
            None
        }
    }
}

impl Env {
    pub fn kubectl_path(&self) -> PathBuf {
        match &self.bin {
            Some(bin) if bin.join("kubectl").exists() => bin.join("kubectl"),
            _ => PathBuf::from("kubectl"),
        }
    }

    /// Runs kubectl as `kubeconfig` with `stdin`.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(self.kubectl_path());
        cmd.args(args)
            .env("KUBECONFIG", kubeconfig)
            .current_dir(REPO)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => panic!("kubectl ({}) did not start: {e}", self.kubectl_path().display()),
        };
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let _ = pipe.write_all(input.as_bytes());
        }
        child.wait_with_output().unwrap_or_else(|e| panic!("kubectl: {e}"))
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_as(&self.kubeconfig, args, None)
    }

    /// kubectl that must succeed; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> Result<String, Error> {
        let out = self.kubectl_as(&self.kubeconfig, args, stdin);
        if !out.status.success() {
            return Err(format!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub async fn admin(&self) -> Result<Client, Error> {
        client_from(&self.kubeconfig).await
    }

    pub async fn controller(&self) -> Result<Client, Error> {
        client_from(&self.controller_kubeconfig).await
    }
}

pub async fn client_from(path: &Path) -> Result<Client, Error> {
    let kc = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

static SETUP: OnceLock<Result<(), String>> = OnceLock::new();

/// One-time cluster setup shared by every test: our CRD (Established), Karpenter's CRDs present,
/// the controller namespace, the placeholder PriorityClass, and the RBAC of deploy/base bound to
/// the harness user `noderotation-controller` instead of the ServiceAccount.
pub fn setup(env: &Env) -> Result<(), Error> {
    SETUP.get_or_init(|| setup_once(env).map_err(|e| e.to_string())).clone().map_err(Error::from)
}

fn setup_once(env: &Env) -> Result<(), Error> {
    for crd in ["nodepools.karpenter.sh", "nodeclaims.karpenter.sh"] {
        if !env.kubectl(&["get", "crd", crd]).status.success() {
            return Err(
                format!("CRD {crd} is missing: start the harness with --karpenter-crds").into()
            );
        }
    }
    env.kubectl_ok(
        &["apply", "--server-side", "--force-conflicts", "-f", "crds/rotationpolicy.yaml"],
        None,
    )?;
    env.kubectl_ok(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/rotationpolicies.noderotation.io",
        ],
        None,
    )?;
    env.kubectl_ok(&["apply", "-f", "deploy/base/namespace.yaml"], None)?;
    env.kubectl_ok(&["apply", "-f", "deploy/base/priorityclass.yaml"], None)?;
    env.kubectl_ok(&["apply", "-f", "-"], Some(&rbac_for_user(CONTROLLER_USER)?))?;
    Ok(())
}

/// deploy/base/rbac.yaml with every binding's subjects replaced by `user`.
pub fn rbac_for_user(user: &str) -> Result<String, Error> {
    let text = std::fs::read_to_string(Path::new(REPO).join("deploy/base/rbac.yaml"))?;
    let mut docs = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let mut value: Value = serde::Deserialize::deserialize(doc)?;
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        if kind.ends_with("Binding") {
            value["subjects"] =
                json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]);
        }
        docs.push(serde_norway::to_string(&value)?);
    }
    Ok(docs.join("---\n"))
}

/// The ClusterRole rules of deploy/base/rbac.yaml.
pub fn deploy_cluster_role() -> Result<Value, Error> {
    let text = std::fs::read_to_string(Path::new(REPO).join("deploy/base/rbac.yaml"))?;
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        if value["kind"] == "ClusterRole" {
            return Ok(value);
        }
    }
    Err("no ClusterRole in deploy/base/rbac.yaml".into())
}

pub async fn eventually<F, Fut, T>(what: &str, timeout: Duration, mut f: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(format!("timed out after {timeout:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---- object builders -------------------------------------------------------------------------

pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
pub const TEST_LABEL: &str = "noderotation.io/test";

pub fn nodepool_json(name: &str, test: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "labels": {TEST_LABEL: test}},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ],
                "expireAfter": "720h",
                "terminationGracePeriod": "10m"
            }},
            "limits": {"cpu": "1000"}
        }
    })
}

pub fn nodeclaim_json(name: &str, pool: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {
                NODEPOOL_LABEL: pool,
                "kubernetes.io/arch": "amd64",
                "karpenter.sh/capacity-type": "on-demand",
                "topology.kubernetes.io/zone": "test-zone-a"
            },
            "finalizers": ["karpenter.sh/termination"]
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": [
                {"key": NODEPOOL_LABEL, "operator": "In", "values": [pool]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}
            ],
            "expireAfter": "720h",
            "terminationGracePeriod": "10m"
        }
    })
}

pub fn node_json(name: &str, pool: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                NODEPOOL_LABEL: pool,
                "kubernetes.io/hostname": name,
                "kubernetes.io/arch": "amd64",
                "karpenter.sh/capacity-type": "on-demand",
                "topology.kubernetes.io/zone": "test-zone-a"
            }
        },
        "spec": {"providerID": format!("kwok://{name}")}
    })
}

pub fn dyn_api(client: &Client, kind: &str) -> Api<DynamicObject> {
    let ar = match kind {
        "NodePool" => ApiResource::erase::<NodePool>(&()),
        "NodeClaim" => ApiResource::erase::<NodeClaim>(&()),
        "Node" => ApiResource::erase::<Node>(&()),
        _ => ApiResource::erase::<noderotation::policy::crd::RotationPolicy>(&()),
    };
    Api::all_with(client.clone(), &ar)
}

/// Creates a cluster-scoped object from JSON (deleting a leftover of the same name first).
pub async fn create(client: &Client, obj: &Value) -> Result<DynamicObject, Error> {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let api = dyn_api(client, kind);
    let dynobj: DynamicObject = serde_json::from_value(obj.clone())?;
    Ok(api.create(&PostParams::default(), &dynobj).await?)
}

pub async fn patch_status(
    client: &Client,
    kind: &str,
    name: &str,
    status: Value,
) -> Result<(), Error> {
    let api = dyn_api(client, kind);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
        .await?;
    Ok(())
}

pub fn ready_condition() -> Value {
    json!({"type": "Ready", "status": "True", "reason": "Ready", "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// A claim + node pair as Karpenter leaves them once Ready.
pub async fn ready_claim_and_node(
    client: &Client,
    claim: &str,
    node: &str,
    pool: &str,
) -> Result<(), Error> {
    create(client, &nodeclaim_json(claim, pool)).await?;
    create(client, &node_json(node, pool)).await?;
    patch_status(
        client,
        "Node",
        node,
        json!({
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}
        }),
    )
    .await?;
    patch_status(
        client,
        "NodeClaim",
        claim,
        json!({
            "nodeName": node,
            "providerID": format!("kwok://{node}"),
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "conditions": [
                {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                ready_condition()
            ]
        }),
    )
    .await?;
    Ok(())
}

/// A bare pod bound to `node` (no scheduler runs in this tier), Running.
pub async fn running_pod(
    client: &Client,
    ns: &str,
    name: &str,
    node: &str,
    cpu: &str,
) -> Result<(), Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await?;
    Ok(())
}

/// Removes every finalizer of a cluster-scoped object (what Karpenter's termination does last).
pub async fn remove_finalizers(client: &Client, kind: &str, name: &str) -> Result<(), Error> {
    let api = dyn_api(client, kind);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    Ok(())
}

// ---- the controller process ------------------------------------------------------------------

/// `noderotation run` as a child process; killed (SIGKILL) on drop.
pub struct ControllerProcess {
    pub child: Child,
    pub log: PathBuf,
    pub metrics_port: u16,
}

pub fn free_port() -> Result<u16, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_noderotation")
}

impl ControllerProcess {
    pub fn start(
        kubeconfig: &Path,
        identity: &str,
        lease: &str,
        log: &Path,
    ) -> Result<Self, Error> {
        let port = free_port()?;
        let file = std::fs::File::create(log)?;
        let child = Command::new(binary())
            .args([
                "run",
                "--namespace",
                CONTROLLER_NS,
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
                "--leader-election-id",
                lease,
                "--identity",
                identity,
            ])
            .args(FAST_RUN_FLAGS)
            .args(["--log-level", "info,noderotation=debug"])
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        Ok(ControllerProcess { child, log: log.to_path_buf(), metrics_port: port })
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for exit (up to 15 s).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
        None
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn metrics(&self) -> Result<String, Error> {
        scrape(self.metrics_port).await
    }
}

/// `GET /metrics` from a controller listening on 127.0.0.1:`port`: the whole response.
pub async fn scrape(port: u16) -> Result<String, Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A scratch directory under the target dir for logs.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("apiserver").join(name);
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// `run` flags of every test operator: short leases and ticks. A renewal must land within the
/// grace: 1 s flaked on 2 busy CI cores (the leader lost the Lease to the standby mid-rotation).
/// The grace must also exceed the request timeout + 2 (the write fence closes timeout + 1 s before
/// expiry): renewed every 3 s, fenced 4 s before expiry, 3 s for a renewal to be seen.
pub const FAST_RUN_FLAGS: &[&str] = &[
    "--lease-duration",
    "10",
    "--lease-grace",
    "7",
    "--api-request-timeout",
    "3",
    "--tick-seconds",
    "2",
];
