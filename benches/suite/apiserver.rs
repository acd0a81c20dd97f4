//! Part 3: `noderotation run` (the release binary) against a real kube-apiserver + etcd (the
//! apiserver tier, `tests/k8s-harness`), loaded with Nodes, NodeClaims and pods.
//!
//! 1. Start the harness (`start.sh --karpenter-crds`); apply our CRD, namespace and
//!    PriorityClass; create `nodes` Nodes and as many NodeClaims (Ready) in pools of 100, and
//!    `pods` pods bound to them, over the admin client (loopback, 32 requests in flight).
//! 2. Start `kubectl proxy` and the counting proxy (`proxy.rs`) in front of it, and the operator
//!    with a kubeconfig that points at the counting proxy: every request it makes is recorded.
//! 3. Idle: every pool governed by a policy whose window is closed. After a warm-up (initial
//!    lists, first passes, feasibility Events), measure requests per minute and RSS.
//! 4. Rotating: five pools get a second, more specific policy (always open, cooldown 0s,
//!    ageThreshold 1m) and a stand-in for Karpenter and the kubelet (`Karpenter` below) serves
//!    the placeholders and finalizes deleted claims. Count the operator's writes and its
//!    successful rotations (its `noderotation_completed_total`).
//! 5. Stop everything it started (the guards' `Drop`): the operator (SIGTERM), kubectl proxy,
//!    the proxy, the harness (`stop.sh`).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use noderotation::karpenter::{NodeClaim, NodePool};
use serde_json::{Value, json};

use crate::proxy::{Proxy, Request};
use crate::shapes::{Objects, POOL_LABEL, Shape};

pub const NS: &str = "noderotation-system";
const APPS: &str = "apps";
const FLEET_LABEL: &str = "bench.noderotation.io/fleet";
const ROTATE_LABEL: &str = "bench.noderotation.io/rotate";
const CLAIMS_PER_POOL: usize = 100;
const ROTATING_POOLS: usize = 5;
const IN_FLIGHT: usize = 32;
pub const WARM_UP: Duration = Duration::from_secs(75);

pub struct Config {
    /// The shape of the Nodes and NodeClaims.
    pub shape: Shape,
    pub nodes: usize,
    pub pods: usize,
    /// Length of each measured phase.
    pub steady: Duration,
    pub binary: PathBuf,
    /// How the report names `binary`.
    pub binary_label: String,
    pub repo: PathBuf,
    /// A command the operator runs under (a profiler).
    pub wrapper: Option<String>,
}

/// Requests of one phase.
pub struct Phase {
    pub length: Duration,
    pub requests: Vec<Request>,
}

impl Phase {
    pub fn per_minute(&self, n: usize) -> f64 {
        n as f64 * 60.0 / self.length.as_secs_f64().max(1e-9)
    }

    /// Count by (verb, resource).
    pub fn by_kind(&self) -> BTreeMap<(String, String), usize> {
        let mut out = BTreeMap::new();
        for r in &self.requests {
            *out.entry((r.verb.clone(), r.resource.clone())).or_insert(0) += 1;
        }
        out
    }

    /// Writes other than the leader-election Lease's.
    pub fn rotation_writes(&self) -> usize {
        self.requests.iter().filter(|r| r.is_write() && r.resource != "leases").count()
    }

    /// Reads of single objects (GETs), the leader-election Lease's apart.
    pub fn reads(&self) -> usize {
        self.requests.iter().filter(|r| r.verb == "get" && r.resource != "leases").count()
    }

    /// Of those, Event writes (create, or patch of a repeated Event's series).
    pub fn event_writes(&self) -> usize {
        self.requests.iter().filter(|r| r.is_write() && r.resource == "events").count()
    }
}

pub struct Apiserver {
    pub shape: Shape,
    /// Which `noderotation` binary ran: the release build beside the bench, or the path given.
    pub binary: String,
    pub nodes: usize,
    pub claims: usize,
    pub pools: usize,
    pub pods: usize,
    pub load: Duration,
    pub sync: Duration,
    pub startup: Phase,
    pub idle: Phase,
    pub rotating: Phase,
    pub successes: f64,
    pub failures: f64,
    /// VmRSS samples (KiB) of the idle and rotating phases, and VmHWM at the end.
    pub rss_idle: Vec<u64>,
    pub rss_rotating: Vec<u64>,
    pub rss_after_sync: u64,
    pub hwm: u64,
    /// The operator's Events at the end, by reason: (Event objects, occurrences incl. series).
    pub events: BTreeMap<String, (u64, u64)>,
}

impl Apiserver {
    /// (all writes, Event writes) per successful rotation in the rotating phase.
    pub fn writes_per_rotation(&self) -> Option<(f64, f64)> {
        let n = self.successes;
        (n > 0.0).then(|| {
            (self.rotating.rotation_writes() as f64 / n, self.rotating.event_writes() as f64 / n)
        })
    }
}

// ---- processes -------------------------------------------------------------------------------

/// The control plane started by `start.sh`; `stop.sh` on drop.
struct Harness {
    repo: PathBuf,
    env: BTreeMap<String, String>,
}

impl Harness {
    fn start(repo: &Path) -> anyhow::Result<Harness> {
        eprintln!("apiserver: starting the harness (tests/k8s-harness/start.sh --karpenter-crds)");
        let out = Command::new(repo.join("tests/k8s-harness/start.sh"))
            .arg("--karpenter-crds")
            .current_dir(repo)
            .stderr(Stdio::inherit())
            .output()
            .context("tests/k8s-harness/start.sh")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut env = BTreeMap::new();
        for line in text.lines() {
            let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) else {
                continue;
            };
            env.insert(k.to_string(), v.trim_matches('\'').to_string());
        }
        let harness = Harness { repo: repo.to_path_buf(), env };
        if !out.status.success() || !harness.env.contains_key("HARNESS_PID") {
            bail!("start.sh failed ({}): {text}", out.status);
        }
        Ok(harness)
    }

    fn var(&self, k: &str) -> anyhow::Result<&str> {
        self.env.get(k).map(String::as_str).ok_or_else(|| anyhow!("start.sh did not export {k}"))
    }

    fn kubectl(&self) -> PathBuf {
        match self.env.get("HARNESS_BIN") {
            Some(bin) => Path::new(bin).join("kubectl"),
            None => PathBuf::from("kubectl"),
        }
    }

    fn kubectl_ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(self.kubectl())
            .args(args)
            .env("KUBECONFIG", self.var("KUBECONFIG")?)
            .current_dir(&self.repo)
            .output()?;
        if !out.status.success() {
            bail!("kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let Some(pid) = self.env.get("HARNESS_PID") else { return };
        eprintln!("apiserver: stopping the harness (pid {pid})");
        let mut cmd = Command::new(self.repo.join("tests/k8s-harness/stop.sh"));
        cmd.arg(pid);
        if let Some(log) = self.env.get("HARNESS_LOG") {
            cmd.env("HARNESS_LOG", log);
        }
        let _ = cmd.status();
    }
}

/// A child process: SIGTERM (then SIGKILL after 60 s) on drop.
struct Proc {
    child: Child,
    name: &'static str,
    /// Under a wrapper, the binary it runs (canonical), to find the process that runs it.
    wrapped: Option<PathBuf>,
    /// The process under the wrapper that runs `wrapped` ([`operator_process`]), with its start
    /// time (a pid alone may be reused once it exits): measured instead of the wrapper, and
    /// stopped first on drop, since a wrapper need not pass a SIGTERM on (heaptrack does not,
    /// and leaves the program running after it exits).
    inner: Option<(u32, u64)>,
}

impl Proc {
    fn new(child: Child, name: &'static str) -> Self {
        Proc { child, name, wrapped: None, inner: None }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Looks for the process under the wrapper that runs the binary, once it runs.
    fn find_inner(&mut self) {
        if self.inner.is_none()
            && let Some(binary) = &self.wrapped
        {
            self.inner =
                operator_process(self.pid(), binary).and_then(|p| Some((p, start_time(p)?)));
            match self.inner {
                Some((pid, _)) => {
                    eprintln!("apiserver: under the wrapper, {} is pid {pid}", self.name)
                }
                None => eprintln!(
                    "apiserver: no process under the wrapper runs {}: measuring the wrapper",
                    binary.display()
                ),
            }
        }
    }

    /// Whether the child exits (and is reaped) within `limit`.
    fn exited_within(&mut self, limit: Duration) -> bool {
        within(limit, || matches!(self.child.try_wait(), Ok(Some(_))))
    }

    /// The process to measure: the program under the wrapper while it runs, else the child.
    fn measured(&self) -> u32 {
        match self.inner {
            Some((pid, start)) if running(pid, start) => pid,
            _ => self.pid(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // An error before the lookup (the operator never ready) still stops what the wrapper runs.
        self.find_inner();
        if let Some((inner, start)) = self.inner.filter(|&(p, _)| p != self.pid()) {
            // The program first, so that a profiler around it sees it exit and writes its data.
            if running(inner, start) {
                let _ = Command::new("kill").args(["-TERM", &inner.to_string()]).status();
            }
            if !within(Duration::from_secs(60), || !running(inner, start)) {
                let _ = Command::new("kill").args(["-KILL", &inner.to_string()]).status();
                eprintln!("apiserver: {} (pid {inner}) killed", self.name);
            }
            // Then the wrapper, given the time to finish what it does after the program exits.
            if self.exited_within(Duration::from_secs(60)) {
                eprintln!("apiserver: {} stopped, then its wrapper", self.name);
                return;
            }
        }
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        if self.exited_within(Duration::from_secs(60)) {
            eprintln!("apiserver: {} stopped", self.name);
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("apiserver: {} killed", self.name);
    }
}

/// Whether `done` holds within `limit`, asked every 100 ms.
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let since = Instant::now();
    while since.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The fields of `/proc/<pid>/stat` after the command name, from the state on (field 3): the
/// name may hold spaces and parentheses.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split(' ').map(str::to_string).collect())
}

/// When a process started (field 22, clock ticks since boot): with the pid, names one process.
fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether the process that started at `start` under `pid` still runs (a zombie has ended; a
/// pid reused by another process is not it).
fn running(pid: u32, start: u64) -> bool {
    stat_fields(pid)
        .is_some_and(|f| f[0] != "Z" && f.get(19).and_then(|s| s.parse().ok()) == Some(start))
}

/// The process whose executable is `binary` among `root` and its descendants, the deepest one:
/// what a wrapper (a profiler, a script) started. `None` when none runs it: a wrapper that runs
/// the program in its own process (valgrind), or another program (the peer measured the same
/// way).
fn operator_process(root: u32, binary: &Path) -> Option<u32> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1)?.parse().ok()) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let runs_binary = |pid: u32| {
        let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else { return false };
        // A binary rebuilt since it started reads as "<path> (deleted)".
        let exe = exe.to_string_lossy();
        Path::new(exe.strip_suffix(" (deleted)").unwrap_or(&exe)) == binary
    };
    let (mut found, mut level) = (None, vec![root]);
    while !level.is_empty() {
        if let Some(&pid) = level.iter().find(|&&p| runs_binary(p)) {
            found = Some(pid);
        }
        level = level.iter().flat_map(|p| children.get(p).cloned().unwrap_or_default()).collect();
    }
    found
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for_port(port: u16, timeout: Duration) -> anyhow::Result<()> {
    if within(timeout, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()) {
        return Ok(());
    }
    bail!("nothing listens on 127.0.0.1:{port} after {timeout:?}")
}

/// `(VmRSS, VmHWM)` of a process in KiB.
fn rss(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Sum of `noderotation_completed_total` with this outcome.
fn completed(metrics: &str, outcome: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("noderotation_completed_total{"))
        .filter(|l| l.contains(&format!("outcome=\"{outcome}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// ---- objects ---------------------------------------------------------------------------------

fn pool_json(name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "labels": {FLEET_LABEL: "yes"}},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "expireAfter": "720h",
                "terminationGracePeriod": "10m"
            }},
            "limits": {"cpu": "100000"}
        }
    })
}

fn pod_json(name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": APPS},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    })
}

fn policy(name: &str, selector: Value, windows: Value, age: &str, cooldown: &str) -> Value {
    json!({
        "apiVersion": "noderotation.io/v1alpha1", "kind": "RotationPolicy",
        "metadata": {"name": name},
        "spec": {
            "nodePoolSelector": {"matchLabels": selector},
            "ageThreshold": age,
            "maintenanceWindows": windows,
            "surge": {"readyTimeout": "5m", "cooldownAfter": cooldown, "retryBackoff": "30m"}
        }
    })
}

/// Every Event our controller reported, by reason: (objects, occurrences counting series).
async fn event_tally(client: &Client) -> anyhow::Result<BTreeMap<String, (u64, u64)>> {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = Api::all(client.clone());
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        for e in &page.items {
            if e.reporting_controller.as_deref().is_none_or(|c| !c.contains("noderotation")) {
                continue;
            }
            let entry = out.entry(e.reason.clone().unwrap_or_default()).or_default();
            entry.0 += 1;
            entry.1 += e.series.as_ref().map_or(1, |s| u64::try_from(s.count).unwrap_or(1));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => break,
        }
    }
    Ok(out)
}

fn dyn_api<K: kube::Resource<DynamicType = ()>>(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &ApiResource::erase::<K>(&()))
}

async fn create(api: &Api<DynamicObject>, obj: Value) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(obj)?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn client(kubeconfig: &str) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Runs `f` over `items` with [`IN_FLIGHT`] requests in flight; the first error stops it.
async fn bounded<T, F, Fut>(items: Vec<T>, f: F) -> anyhow::Result<()>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    futures::stream::iter(items.into_iter().map(f))
        .buffer_unordered(IN_FLIGHT)
        .try_for_each(|()| futures::future::ready(Ok(())))
        .await
}

fn pool_name(i: usize) -> String {
    format!("pool-{i:03}")
}

/// Creates the fleet; returns (pools, claims, pods).
async fn load(
    client: &Client,
    objects: &Objects,
    nodes: usize,
    pods: usize,
) -> anyhow::Result<(usize, usize, usize)> {
    let pools = nodes.div_ceil(CLAIMS_PER_POOL);
    let pool_api = dyn_api::<NodePool>(client);
    let claim_api = dyn_api::<NodeClaim>(client);
    let node_api = dyn_api::<Node>(client);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), APPS);
    bounded((0..pools).collect(), |i| create(&pool_api, pool_json(&pool_name(i)))).await?;
    let t = Instant::now();
    bounded((0..nodes).collect(), |i| {
        let (claim_api, node_api) = (&claim_api, &node_api);
        async move {
            let pool = pool_name(i / CLAIMS_PER_POOL);
            let claim = format!("{pool}-c{:03}", i % CLAIMS_PER_POOL);
            let node = format!("node-{claim}");
            create(node_api, objects.node(&node, &pool, &claim)).await?;
            create(claim_api, objects.claim(&claim, &pool)).await?;
            let status = objects.claim_status(&node);
            claim_api.patch_status(&claim, &PatchParams::default(), &Patch::Merge(status)).await?;
            Ok(())
        }
    })
    .await?;
    eprintln!("apiserver: {nodes} nodes and claims in {:.1?}", t.elapsed());
    let t = Instant::now();
    bounded((0..pods).collect(), |i| {
        let pod_api = &pod_api;
        async move {
            let n = i % nodes.max(1);
            let node =
                format!("node-{}-c{:03}", pool_name(n / CLAIMS_PER_POOL), n % CLAIMS_PER_POOL);
            let pod: Pod = serde_json::from_value(pod_json(&format!("w-{i:05}"), &node))?;
            match pod_api.create(&PostParams::default(), &pod).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    })
    .await?;
    eprintln!("apiserver: {pods} pods in {:.1?}", t.elapsed());
    Ok((pools, nodes, pods))
}

// ---- Karpenter and the kubelet, played ------------------------------------------------------

/// Serves the rotating pools: a placeholder without a node gets a new Ready claim and node and
/// is bound there and Running; a deleted claim's pods, node and finalizer go. Polls every
/// 500 ms over its own (admin) client: none of this is counted as the operator's.
async fn karpenter(
    client: Client,
    objects: Arc<Objects>,
    pools: Vec<String>,
    stop: Arc<AtomicBool>,
) {
    let mut next = 0usize;
    while !stop.load(Ordering::Acquire) {
        if let Err(e) = karpenter_step(&client, &objects, &pools, &mut next).await {
            eprintln!("apiserver: karpenter stand-in: {e:#}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn karpenter_step(
    client: &Client,
    objects: &Objects,
    pools: &[String],
    next: &mut usize,
) -> anyhow::Result<()> {
    let claim_api = dyn_api::<NodeClaim>(client);
    let node_api = dyn_api::<Node>(client);
    let placeholders: Api<Pod> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=noderotation");
    for pod in placeholders.list(&lp).await? {
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        if bound || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(old) = pod.annotations().get("noderotation.io/surge-for").cloned() else {
            continue;
        };
        let Ok(old) = claim_api.get(&old).await else { continue };
        let Some(pool) = old.labels().get(POOL_LABEL).cloned() else { continue };
        *next += 1;
        let claim = format!("{pool}-s{next:04}");
        let node = format!("node-{claim}");
        create(&node_api, objects.node(&node, &pool, &claim)).await?;
        create(&claim_api, objects.claim(&claim, &pool)).await?;
        let status = objects.claim_status(&node);
        claim_api.patch_status(&claim, &PatchParams::default(), &Patch::Merge(status)).await?;
        let name = pod.name_any();
        let binding = json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": NS},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let _: Value = placeholders
            .create_subresource("binding", &name, &PostParams::default(), &binding)
            .await?;
        placeholders
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}]}})),
            )
            .await?;
    }
    for pool in pools {
        let lp = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
        for claim in claim_api.list(&lp).await? {
            if claim.metadata.deletion_timestamp.is_none() {
                continue;
            }
            let node = claim.data["status"]["nodeName"].as_str().map(str::to_string);
            if let Some(node) = node {
                let all: Api<Pod> = Api::all(client.clone());
                let on = ListParams::default().fields(&format!("spec.nodeName={node}"));
                for p in all.list(&on).await? {
                    let ns = p.namespace().unwrap_or_default();
                    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                    let _ = api.delete(&p.name_any(), &DeleteParams::default()).await;
                }
                let _ = node_api.delete(&node, &DeleteParams::default()).await;
                // The realistic Node carries Karpenter's termination finalizer too.
                let release = json!({"metadata": {"finalizers": null}});
                let _ =
                    node_api.patch(&node, &PatchParams::default(), &Patch::Merge(release)).await;
            }
            claim_api
                .patch(
                    &claim.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await?;
        }
    }
    Ok(())
}

// ---- the run ---------------------------------------------------------------------------------

/// The operator binary, or the wrapper with the binary as its first argument.
fn operator_command(c: &Config) -> Command {
    let words: Vec<&str> = c.wrapper.as_deref().unwrap_or("").split_whitespace().collect();
    match words.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(&c.binary);
            cmd
        }
        None => Command::new(&c.binary),
    }
}

fn sample_rss(pid: u32, until: Instant, out: &mut Vec<u64>) {
    while Instant::now() < until {
        out.push(rss(pid).0);
        std::thread::sleep(
            Duration::from_secs(2).min(until.saturating_duration_since(Instant::now())),
        );
    }
}

pub fn run(c: &Config) -> anyhow::Result<Apiserver> {
    let harness = Harness::start(&c.repo)?;
    let admin_kc = harness.var("KUBECONFIG")?.to_string();
    harness.kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "crds/rotationpolicy.yaml",
    ])?;
    harness.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/rotationpolicies.noderotation.io",
    ])?;
    harness.kubectl_ok(&["apply", "-f", "deploy/base/namespace.yaml"])?;
    harness.kubectl_ok(&["apply", "-f", "deploy/base/priorityclass.yaml"])?;
    harness.kubectl_ok(&["create", "namespace", APPS])?;

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let admin = rt.block_on(client(&admin_kc))?;
    let t = Instant::now();
    let objects = Arc::new(Objects::new(c.shape)?);
    eprintln!("apiserver: {}", c.shape.label());
    let (pools, claims, pods) = rt.block_on(load(&admin, &objects, c.nodes, c.pods))?;
    let load_time = t.elapsed();

    // Every pool governed, its window closed now: Tuesday 02:00-03:00 UTC unless today is
    // Tuesday (then Thursday).
    use chrono::Datelike;
    use noderotation::clock::{Clock, SystemClock};
    let today = SystemClock.now().weekday();
    let day = if today == chrono::Weekday::Tue { "Thu" } else { "Tue" };
    let closed = json!([{"timezone": "UTC", "days": [day], "start": "02:00", "end": "03:00"}]);
    let policies = dyn_api::<noderotation::policy::crd::RotationPolicy>(&admin);
    rt.block_on(create(
        &policies,
        policy("fleet", json!({FLEET_LABEL: "yes"}), closed, "auto", "10m"),
    ))?;

    // kubectl proxy (credentials, TLS) <- counting proxy <- the operator.
    let kport = free_port()?;
    let kubectl_proxy = Proc::new(
        Command::new(harness.kubectl())
            .args(["proxy", "--address=127.0.0.1", &format!("--port={kport}")])
            .env("KUBECONFIG", &admin_kc)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
        "kubectl proxy",
    );
    wait_for_port(kport, Duration::from_secs(20))?;
    let proxy = Proxy::start(([127, 0, 0, 1], kport).into())?;
    let scratch = std::env::temp_dir().join(format!("noderotation-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let op_kc = scratch.join("operator.kubeconfig");
    std::fs::write(&op_kc, proxy.kubeconfig())?;
    let (mport, hport) = (free_port()?, free_port()?);
    let log = std::fs::File::create(scratch.join("operator.log"))?;
    // Under a wrapper, the binary it runs, resolved before anything starts.
    let wrapped = c.wrapper.as_ref().map(|_| std::fs::canonicalize(&c.binary)).transpose()?;
    let started = Instant::now();
    let mut operator = Proc::new(
        operator_command(c)
            .args(["run", "--namespace", NS, "--metrics-addr", &format!("127.0.0.1:{mport}")])
            .args(["--health-addr", &format!("127.0.0.1:{hport}")])
            .args(["--identity", "bench", "--log-level", "info", "--log-format", "json"])
            .env("KUBECONFIG", &op_kc)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?,
        "noderotation run",
    );
    operator.wrapped = wrapped;
    let mut sync = None;
    while started.elapsed() < Duration::from_secs(180) {
        if http_get(hport, "/readyz").starts_with("HTTP/1.1 200") {
            sync = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let sync = sync.ok_or_else(|| {
        anyhow!("the operator was not ready after 180 s (log: {})", scratch.display())
    })?;
    // Under a wrapper, the operator itself is measured and stopped (it runs by now).
    operator.find_inner();
    let pid = operator.measured();
    let rss_after_sync = rss(pid).0;
    eprintln!(
        "apiserver: operator ready after {sync:.1?}, RSS {rss_after_sync} KiB; warming up {WARM_UP:?}"
    );
    std::thread::sleep(WARM_UP);

    let idle_from = Instant::now();
    let mut rss_idle = Vec::new();
    sample_rss(pid, idle_from + c.steady, &mut rss_idle);
    let idle_to = Instant::now();
    eprintln!("apiserver: idle phase done, RSS {:?} KiB", rss_idle.iter().max());

    // Rotating: a more specific policy on five pools, and Karpenter played.
    let always = json!([{"timezone": "UTC", "days": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], "start": "00:00", "end": "00:00"}]);
    let rotating: Vec<String> = (0..ROTATING_POOLS.min(pools)).map(pool_name).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let actor = rt.spawn(karpenter(admin.clone(), objects, rotating.clone(), Arc::clone(&stop)));
    let before = http_get(mport, "/metrics");
    let (s0, f0) = (completed(&before, "success"), completed(&before, "failure"));
    let rot_from = Instant::now();
    rt.block_on(async {
        let selector = json!({FLEET_LABEL: "yes", ROTATE_LABEL: "yes"});
        create(&policies, policy("rotate", selector, always, "1m", "0s")).await?;
        let pool_api = dyn_api::<NodePool>(&admin);
        for p in &rotating {
            let patch = json!({"metadata": {"labels": {ROTATE_LABEL: "yes"}}});
            pool_api.patch(p, &PatchParams::default(), &Patch::Merge(patch)).await?;
        }
        anyhow::Ok(())
    })?;
    let mut rss_rotating = Vec::new();
    sample_rss(pid, rot_from + c.steady, &mut rss_rotating);
    let rot_to = Instant::now();
    let after = http_get(mport, "/metrics");
    let (s1, f1) = (completed(&after, "success"), completed(&after, "failure"));
    stop.store(true, Ordering::Release);
    let _ = rt.block_on(actor);
    let hwm = rss(pid).1;
    let events = rt.block_on(event_tally(&admin))?;
    eprintln!("apiserver: the operator's Events by reason (objects, occurrences): {events:?}");
    drop(operator);
    drop(kubectl_proxy);
    let phase = |from: Instant, to: Instant| Phase {
        length: to - from,
        requests: proxy.log.between(from, to),
    };
    let result = Apiserver {
        shape: c.shape,
        binary: c.binary_label.clone(),
        nodes: c.nodes,
        claims,
        pools,
        pods,
        load: load_time,
        sync,
        startup: phase(started, idle_from),
        idle: phase(idle_from, idle_to),
        rotating: phase(rot_from, rot_to),
        successes: s1 - s0,
        failures: f1 - f0,
        rss_idle,
        rss_rotating,
        rss_after_sync,
        hwm,
        events,
    };
    drop(proxy);
    drop(rt);
    drop(harness);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(result)
}
