//! `noderotation run`: the operator process.
//!
//! ```text
//! preflight ─► KubeCluster (5 reflectors) ─► changes ─► Mapper ─► WorkQueue ◄─ requeue / backoff / tick
//!                                                                     │
//! Lease (lease::LeaderElection) ── leader? ──► worker (spawn_blocking): startup_sweep, then
//!                                           reconcile_pool(key) one at a time, tick()
//! /metrics (its own port, optionally authenticated); /healthz /readyz (the probes' port)
//! ```
//!
//! The [`Controller`] and [`KubeCluster`] are synchronous; the worker runs on a blocking thread
//! (`spawn_blocking`) so that `KubeCluster` may `block_on` the runtime. Only the Lease holder
//! runs a worker; losing the Lease stops it after the current pass, winning it again runs the
//! start-up sweep again. SIGTERM/SIGINT stop the worker and release the Lease.
//!
//! The worker writes through a [`Fenced`] view whose [`Fence`] the election moves from its own
//! acquire and renewals: no write leaves after the send time of the last one that won plus
//! `leaseDuration - (request timeout + 1s)`, on this replica's clock; a standby takes the Lease
//! only after it read the same record for a whole `leaseDuration` on its own clock
//! ([`crate::cluster::lease`]), so the two clocks need not agree. Every API request is bounded
//! (`--api-connect-timeout`, `--api-request-timeout`, no client-side retries); the watches use
//! a client of their own without the request bound.
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use kube::runtime::events::Reporter;
use kube::{Api, Client};
use prometheus::{Encoder, IntCounter, IntGauge, Registry, TextEncoder};
use tokio::sync::mpsc;

use crate::clock::{Clock, SteadyClock, SystemClock};
use crate::cluster::Cluster;
use crate::cluster::change::Change;
use crate::cluster::fence::{self, Fence, Fenced};
use crate::cluster::kube::{KubeCluster, Requests, Watches};
use crate::cluster::lease::{Elector, Timing};
use crate::engine::Engine;
use crate::reconcile::{Controller, ControllerConfig};

pub(crate) mod http;
pub mod install;
pub(crate) mod lease;
pub(crate) mod metrics_auth;
pub mod preflight;
pub(crate) mod queue;

use crate::trigger::{Keys, Mapper, Retries, STATUS_COALESCE};
use lease::LeaderElection;
use queue::{Next, WorkQueue};

/// Flags of `noderotation run`; each also reads an environment variable.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Namespace of the controller: placeholder pods and the leader-election Lease live here.
    #[arg(long, env = "NODEROTATION_NAMESPACE", default_value = "noderotation-system")]
    pub namespace: String,
    /// Address of /metrics (nothing else is served there).
    #[arg(long, env = "NODEROTATION_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// How a scrape of /metrics is authorized: `none`, or `kubernetes` (a bearer token, checked
    /// with a TokenReview, whose identity a SubjectAccessReview must allow to get /metrics).
    #[arg(long, env = "NODEROTATION_METRICS_AUTH", default_value = "none", value_parser = ["none", "kubernetes"])]
    pub metrics_auth: String,
    /// Address of the probes, /healthz (/livez) and /readyz: never authenticated.
    #[arg(long, env = "NODEROTATION_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Log filter: a level (`info`) or tracing directives (`noderotation=debug,kube=info`).
    #[arg(long, env = "NODEROTATION_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format: `json` (default) or `text`.
    #[arg(long, env = "NODEROTATION_LOG_FORMAT", default_value = "json", value_parser = ["json", "text"])]
    pub log_format: String,
    /// Name of the Lease used for leader election.
    #[arg(long, env = "NODEROTATION_LEADER_ELECTION_ID", default_value = "noderotation")]
    pub leader_election_id: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else hostname-pid).
    #[arg(long, env = "NODEROTATION_IDENTITY")]
    pub identity: Option<String>,
    /// Lease duration in seconds: how long a dead leader blocks the standby.
    #[arg(long, env = "NODEROTATION_LEASE_DURATION", default_value_t = fence::DEFAULT_LEASE_DURATION_SECS)]
    pub lease_duration: u64,
    /// The leader renews this many seconds before the Lease would expire (< lease duration, and
    /// more than --api-request-timeout + 2: the leader stops writing --api-request-timeout + 1
    /// seconds before the Lease expires, and must have seen its renewal by then).
    #[arg(long, env = "NODEROTATION_LEASE_GRACE", default_value_t = fence::DEFAULT_LEASE_GRACE_SECS)]
    pub lease_grace: u64,
    /// Seconds to establish a connection to the API server.
    #[arg(long, env = "NODEROTATION_API_CONNECT_TIMEOUT", default_value_t = fence::DEFAULT_API_CONNECT_TIMEOUT_SECS)]
    pub api_connect_timeout: u64,
    /// Seconds one API request (read, write, Lease renewal) may take before it is abandoned;
    /// requests are not retried by the client. Watches are not bounded by it.
    #[arg(long, env = "NODEROTATION_API_REQUEST_TIMEOUT", default_value_t = fence::DEFAULT_API_REQUEST_TIMEOUT_SECS)]
    pub api_request_timeout: u64,
    /// Seconds between the periodic passes over every pool (and policy status updates).
    #[arg(long, env = "NODEROTATION_TICK_SECONDS", default_value_t = 60)]
    pub tick_seconds: u64,
    /// PriorityClass of placeholder pods (shipped in deploy/).
    #[arg(long, env = "NODEROTATION_PRIORITY_CLASS", default_value = "noderotation-placeholder")]
    pub priority_class: String,
    /// Container image of placeholder pods (a pause image).
    #[arg(long, env = "NODEROTATION_PAUSE_IMAGE", default_value = "registry.k8s.io/pause:3.10")]
    pub pause_image: String,
}

/// The runtime's own metrics (the controller's are appended, see [`controller_metrics`]).
struct RuntimeMetrics {
    registry: Registry,
    leader: IntGauge,
    install_conflict: IntGauge,
    queue_depth: IntGauge,
    reconcile_errors: IntCounter,
}

impl RuntimeMetrics {
    fn new() -> anyhow::Result<Self> {
        let registry = Registry::new();
        let leader =
            IntGauge::new("noderotation_leader", "1 while this replica holds the leader Lease")?;
        let install_conflict = IntGauge::new(
            "noderotation_install_conflict",
            "1 while this replica does not lead because another install of the operator leads (or that cannot be checked)",
        )?;
        let queue_depth =
            IntGauge::new("noderotation_work_queue_depth", "Pools waiting in the work queue")?;
        let reconcile_errors = IntCounter::new(
            "noderotation_reconcile_errors_total",
            "Pool passes that returned an error",
        )?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(install_conflict.clone()))?;
        registry.register(Box::new(queue_depth.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        Ok(RuntimeMetrics { registry, leader, install_conflict, queue_depth, reconcile_errors })
    }
}

type MetricsSource = Arc<dyn Fn() -> String + Send + Sync>;

/// The controller's Prometheus registry (the §4.2 metrics), rendered on each scrape after the
/// runtime's own series. `Telemetry` is a shared handle (its metrics are reference counted), so
/// the clone taken here sees every update the worker thread makes.
fn controller_metrics(controller: &Controller) -> MetricsSource {
    let telemetry = controller.telemetry().clone();
    Arc::new(move || telemetry.render())
}

struct State {
    cluster: Arc<KubeCluster>,
    queue: Arc<WorkQueue>,
    metrics: RuntimeMetrics,
    controller_metrics: OnceLock<MetricsSource>,
    started: Instant,
    /// Seconds since `started` of the worker's last loop iteration (0: no worker).
    heartbeat: AtomicU64,
    leading: AtomicBool,
}

impl http::Endpoints for State {
    fn metrics(&self) -> String {
        self.metrics.queue_depth.set(i64::try_from(self.queue.len()).unwrap_or(i64::MAX));
        let mut buf = Vec::new();
        if let Err(err) = TextEncoder::new().encode(&self.metrics.registry.gather(), &mut buf) {
            tracing::warn!(error = %err, "encoding runtime metrics failed");
        }
        let mut text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(source) = self.controller_metrics.get() {
            text.push_str(&source());
        }
        text
    }

    fn healthy(&self) -> bool {
        // A leader whose worker has not come round its loop for 5 minutes is wedged (its loop
        // wakes at least every tick).
        if !self.leading.load(Ordering::Acquire) {
            return true;
        }
        let beat = self.heartbeat.load(Ordering::Acquire);
        beat == 0 || self.started.elapsed().as_secs().saturating_sub(beat) < 300
    }

    fn ready(&self) -> Result<(), String> {
        if !self.cluster.is_synced() {
            return Err("caches not synced".into());
        }
        // A watch that broke after the first sync leaves its cache to age silently.
        match self.cluster.broken_watches().as_slice() {
            [] => Ok(()),
            broken => Err(format!("watch failing: {broken:?}")),
        }
    }
}

/// Runs the operator until SIGTERM/SIGINT; the process exit code.
pub fn run(args: &RunArgs) -> anyhow::Result<i32> {
    init_logging(args)?;
    block_on(run_async(args.clone()))
}

/// Runs a command's async body on the runtime the cluster commands share (two workers; the
/// `Cluster` implementation blocks on it from a blocking thread).
pub(crate) fn block_on<T>(
    body: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(body)
}

fn init_logging(args: &RunArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .with_context(|| format!("--log-level {:?}", args.log_level))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let result = if args.log_format == "json" {
        builder.json().with_current_span(false).flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    result.map_err(|e| anyhow::anyhow!("initialising logging: {e}"))
}

fn identity(args: &RunArgs) -> String {
    if let Some(id) = &args.identity {
        return id.clone();
    }
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "noderotation".into());
    format!("{host}-{}", std::process::id())
}

/// The Kubernetes client of every command that talks to a cluster: in-cluster from the
/// service account, else from `KUBECONFIG` / `~/.kube/config`.
pub(crate) async fn client() -> anyhow::Result<Client> {
    Client::try_default()
        .await
        .context("no Kubernetes client configuration (in-cluster service account or KUBECONFIG)")
}

/// `run`'s two clients from one configuration: the watches' (kube's defaults: a watch may stay
/// quiet for minutes) and the requests' (connect and read/write bounded, no client retries: a
/// 429 or 5xx is the pass's error, retried by the work queue's backoff).
async fn clients(args: &RunArgs) -> anyhow::Result<(Client, Client)> {
    let config = kube::Config::infer()
        .await
        .context("no Kubernetes client configuration (in-cluster service account or KUBECONFIG)")?;
    let watches = Client::try_from(config.clone()).context("building the watch client")?;
    let mut bounded = config;
    bounded.connect_timeout = Some(Duration::from_secs(args.api_connect_timeout));
    bounded.read_timeout = Some(Duration::from_secs(args.api_request_timeout));
    bounded.write_timeout = Some(Duration::from_secs(args.api_request_timeout));
    // The read bound counts from the request, not from when a pooled connection went idle.
    bounded.reset_reader_on_write = true;
    bounded.default_retry = false;
    let requests = Client::try_from(bounded).context("building the request client")?;
    Ok((watches, requests))
}

/// The largest value of the Lease and timeout flags (a day).
const MAX_FLAG_SECS: i64 = 86_400;

/// Why the Lease and timeout flags cannot work together, if they cannot.
fn check_lease_flags(args: &RunArgs) -> Result<(), String> {
    let too_long = [
        ("--lease-duration", args.lease_duration),
        ("--api-request-timeout", args.api_request_timeout),
        ("--api-connect-timeout", args.api_connect_timeout),
    ];
    if let Some((flag, value)) =
        too_long.iter().find(|(_, v)| i64::try_from(*v).map_or(true, |v| v > MAX_FLAG_SECS))
    {
        return Err(format!("{flag} ({value}) must be at most {MAX_FLAG_SECS} seconds (a day)"));
    }
    if args.lease_grace == 0 || args.lease_grace >= args.lease_duration {
        return Err("--lease-grace must be > 0 and < --lease-duration".into());
    }
    if args.api_request_timeout == 0 || args.api_connect_timeout == 0 {
        return Err("--api-request-timeout and --api-connect-timeout must be > 0".into());
    }
    // The fence closes timeout + 1s before the Lease expires; the renewal, sent grace seconds
    // before, must be read back (within a second) before that.
    if args.lease_grace <= args.api_request_timeout + 2 {
        return Err(format!(
            "--lease-grace ({}) must exceed --api-request-timeout + 2 ({}): the leader stops writing --api-request-timeout + 1s before its Lease expires and must see each renewal before then",
            args.lease_grace,
            args.api_request_timeout + 2
        ));
    }
    Ok(())
}

async fn run_async(args: RunArgs) -> anyhow::Result<i32> {
    check_lease_flags(&args).map_err(|e| anyhow::anyhow!(e))?;
    let (watch_client, client) = clients(&args).await?;
    let checked = match preflight::preflight(&client).await {
        Ok(()) => preflight::check_priority_class(&client, &args.priority_class).await,
        Err(err) => Err(err),
    };
    if let Err(err) = checked {
        tracing::error!(error = %err, "preflight failed");
        eprintln!("error: preflight: {err}");
        return Ok(2);
    }
    tracing::info!(
        priority_class = %args.priority_class,
        "preflight passed: karpenter.sh/v1 nodepools and nodeclaims are served and readable, the placeholder PriorityClass exists, is negative and never preempts"
    );

    let identity = identity(&args);
    let reporter = Reporter { controller: "noderotation".into(), instance: Some(identity.clone()) };
    let requests = Requests {
        client: client.clone(),
        timeout: Some(Duration::from_secs(args.api_request_timeout)),
    };
    let (cluster, changes) = KubeCluster::start_with(
        watch_client,
        requests,
        args.namespace.clone(),
        reporter,
        Watches::Controller { placeholder_class: &args.priority_class },
    );
    let queue = Arc::new(WorkQueue::new());
    let state = Arc::new(State {
        cluster: cluster.clone(),
        queue: queue.clone(),
        metrics: RuntimeMetrics::new()?,
        controller_metrics: OnceLock::new(),
        started: Instant::now(),
        heartbeat: AtomicU64::new(0),
        leading: AtomicBool::new(false),
    });
    let authorizer: Option<Arc<dyn http::Authorizer>> = match args.metrics_auth.as_str() {
        "kubernetes" => Some(Arc::new(metrics_auth::TokenAccessReview { client: client.clone() })),
        _ => None,
    };
    let authenticated = authorizer.is_some();
    let bound = http::serve(args.metrics_addr, state.clone(), http::Listener::Metrics(authorizer))
        .await
        .with_context(|| format!("binding {} (--metrics-addr)", args.metrics_addr))?;
    tracing::info!(addr = %bound, authenticated, "serving /metrics");
    let bound = http::serve(args.health_addr, state.clone(), http::Listener::Probes)
        .await
        .with_context(|| format!("binding {} (--health-addr)", args.health_addr))?;
    tracing::info!(addr = %bound, "serving /healthz /readyz");

    tokio::spawn(map_changes(changes, cluster.clone(), queue.clone()));

    let mut shutdown = std::pin::pin!(shutdown_signal());
    tokio::select! {
        synced = cluster.wait_synced() => synced.context("a reflector stopped before its first list")?,
        _ = &mut shutdown => return Ok(0),
    }
    tracing::info!("caches synced");

    let config = ControllerConfig {
        namespace: args.namespace.clone(),
        priority_class: args.priority_class.clone(),
        pause_image: args.pause_image.clone(),
    };
    let engine = Arc::new(Engine::embedded().clone());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    // The fence and the election time the Lease on a clock that never steps.
    let steady: Arc<dyn Clock> = Arc::new(SteadyClock::new());
    let fence = Arc::new(Fence::new(steady.clone()));
    let writes: Arc<dyn Cluster> = Arc::new(Fenced::new(cluster.clone(), fence.clone()));
    let controller = Controller::new(writes, clock.clone(), engine, config);
    let _ = state.controller_metrics.set(controller_metrics(&controller));
    let mut controller = Some(controller);

    // Marked, so that another install sees this one's leader (see `install`).
    if let Err(err) =
        install::mark_own_lease(&client, &args.namespace, &args.leader_election_id).await
    {
        tracing::warn!(error = %err, lease = %args.leader_election_id, "marking the leader Lease failed: another install of the operator would not see this one lead");
    }
    let request_timeout = Duration::from_secs(args.api_request_timeout);
    let margin = fence::margin(
        chrono::Duration::from_std(request_timeout).unwrap_or(chrono::Duration::seconds(5)),
    );
    // Bounded by `check_lease_flags`.
    let seconds = |s: u64| chrono::Duration::seconds(i64::try_from(s).unwrap_or(MAX_FLAG_SECS));
    let timing = Timing {
        duration: seconds(args.lease_duration),
        period: seconds(args.lease_duration.saturating_sub(args.lease_grace)),
        margin,
        retry: chrono::Duration::seconds(1),
    };
    let mut election = Some(
        LeaderElection {
            client: client.clone(),
            namespace: args.namespace.clone(),
            api: Api::namespaced(client.clone(), &args.namespace),
            name: args.leader_election_id.clone(),
            elector: Elector::new(identity.clone(), timing),
            clock: steady,
            wall: clock.clone(),
            fence: fence.clone(),
            timeout: request_timeout,
        }
        .watch(),
    );
    tracing::info!(identity = %identity, lease = %args.leader_election_id, "waiting for leadership");
    let lease_wait = Duration::from_secs(args.lease_duration);

    let tick = Duration::from_secs(args.tick_seconds.max(1));
    let mut worker: Option<tokio::task::JoinHandle<Controller>> = None;
    let mut exit = 0;
    while let Some((leader_rx, _)) = election.as_mut() {
        let mut refused = None;
        tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
            changed = leader_rx.changed() => {
                if changed.is_err() {
                    tracing::error!("the lease manager stopped");
                    exit = 1;
                    break;
                }
                let leading = *leader_rx.borrow_and_update();
                if leading && worker.is_none() {
                    let now = SystemClock.now();
                    match install::find_other_leader(&client, &args.namespace, &args.leader_election_id, now).await {
                        Ok(Some(other)) => refused = Some(format!("another noderotation install leads in this cluster: {other}")),
                        Err(err) => refused = Some(format!("cannot tell whether another noderotation install leads in this cluster (listing the leader Leases failed: {err})")),
                        Ok(None) => {}
                    }
                }
                if leading && worker.is_none() && refused.is_none() {
                    let Some(c) = controller.take() else {
                        tracing::error!("the controller was lost by a previous worker");
                        exit = 1;
                        break;
                    };
                    tracing::info!(identity = %identity, "became leader");
                    state.metrics.install_conflict.set(0);
                    state.leading.store(true, Ordering::Release);
                    state.metrics.leader.set(1);
                    queue.resume();
                    let st = state.clone();
                    worker = Some(tokio::task::spawn_blocking(move || work(c, &st, tick)));
                } else if !leading
                    && let Some(w) = worker.take()
                {
                    tracing::warn!(identity = %identity, "lost leadership; stopping after the current pass");
                    fence.close();
                    queue.stop();
                    controller = w.await.ok();
                    state.leading.store(false, Ordering::Release);
                    state.metrics.leader.set(0);
                }
            }
        }
        let Some(why) = refused else { continue };
        // Not leading: give this install's Lease up, so that the other install (making the same
        // check) does not count it, and try again after a random delay (two installs that both
        // stepped down do not meet again).
        let retry = lease_wait + lease_wait.mul_f64(jitter());
        tracing::error!(
            identity = %identity,
            retry_in = ?retry,
            "{why}; this install (Lease {}/{}) does not lead while it does: two installs would each delete the other's placeholders as unowned and rotate the same NodePools. Remove one of them",
            args.namespace,
            args.leader_election_id
        );
        state.metrics.install_conflict.set(1);
        let Some((leader_rx, lease_task)) = election.take() else { break };
        drop(leader_rx);
        let stepped_down = match lease_task.await {
            Ok(stepped_down) => stepped_down,
            Err(err) => {
                tracing::error!(error = %err, "the leader election task failed");
                exit = 1;
                break;
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = &mut shutdown => {
                tracing::info!("shutting down");
                break;
            }
        }
        election = Some(stepped_down.watch());
    }

    queue.stop();
    if let Some(w) = worker.take() {
        let _ = w.await;
    }
    fence.close();
    state.leading.store(false, Ordering::Release);
    state.metrics.leader.set(0);
    // Dropping the receiver makes the lease task release the Lease and return.
    if let Some((leader_rx, lease_task)) = election.take() {
        drop(leader_rx);
        match tokio::time::timeout(Duration::from_secs(10), lease_task).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "the leader election task failed"),
            Err(_) => tracing::warn!("releasing the leader Lease timed out"),
        }
    }
    Ok(exit)
}

/// A random fraction in [0, 1): how much longer than a Lease duration a replica that stepped
/// down for another install waits before it tries again.
fn jitter() -> f64 {
    use std::hash::BuildHasher;
    let bits = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn map_changes(
    mut changes: mpsc::UnboundedReceiver<Change>,
    cluster: Arc<KubeCluster>,
    queue: Arc<WorkQueue>,
) {
    let mut mapper = Mapper::default();
    while let Some(change) = changes.recv().await {
        let wake = mapper.map(&change, &|claim| cluster.pool_of_claim(claim));
        if wake.status {
            // Coalesced: a burst of policy edits asks once.
            queue.request_status_after(STATUS_COALESCE);
        }
        match wake.pools {
            Keys::None => {}
            Keys::Pool(pool) => queue.add_now(&pool),
            Keys::All => {
                for pool in cluster.pool_names() {
                    queue.add_now(&pool);
                }
            }
        }
    }
}

/// The leader's worker (a blocking thread): the start-up sweep, then one pass at a time from
/// the queue and, every tick, every pool enqueued plus [`Controller::tick`] (policy status and
/// the orphan sweep), until the queue is stopped. Returns the controller so the
/// next leadership term reuses it (its metrics survive).
fn work(mut controller: Controller, state: &State, tick: Duration) -> Controller {
    let beat =
        || state.heartbeat.store(state.started.elapsed().as_secs().max(1), Ordering::Release);
    beat();
    controller.startup_sweep();
    let enqueue_all = || {
        for pool in state.cluster.pool_names() {
            state.queue.add_now(&pool);
        }
    };
    enqueue_all();
    controller.update_policy_status();
    let mut next_tick = Instant::now() + tick;
    let mut retries = Retries::default();
    loop {
        beat();
        match state.queue.next(next_tick) {
            Next::Stopped => break,
            Next::Deadline => {
                enqueue_all();
                controller.tick();
                next_tick = Instant::now() + tick;
            }
            Next::Status => controller.update_policy_status(),
            Next::Key(pool) => {
                tracing::debug!(nodepool = %pool, "reconciling");
                let pass =
                    std::panic::catch_unwind(AssertUnwindSafe(|| controller.reconcile_pool(&pool)));
                let again = match pass {
                    Ok(Ok(requeue)) => retries.passed(&pool, requeue),
                    Ok(Err(err)) => {
                        let after = retries.failed_after(&pool, err.requeue());
                        state.metrics.reconcile_errors.inc();
                        tracing::warn!(nodepool = %pool, error = %err, failures = retries.failures(&pool), retry_in = ?after, "pass failed");
                        Some(after)
                    }
                    Err(_) => {
                        let after = retries.failed(&pool);
                        state.metrics.reconcile_errors.inc();
                        tracing::error!(nodepool = %pool, retry_in = ?after, "pass panicked");
                        Some(after)
                    }
                };
                if let Some(after) = again {
                    state.queue.add_after(&pool, after);
                }
            }
        }
    }
    controller
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(extra: &[&str]) -> RunArgs {
        let argv = std::iter::once("run").chain(extra.iter().copied());
        Cli::try_parse_from(argv).expect("flags parse").run
    }

    #[test]
    fn the_default_lease_and_timeouts_leave_the_renewal_room_before_the_fence() {
        let a = args(&[]);
        assert_eq!((a.lease_duration, a.lease_grace), (15, 10));
        assert_eq!((a.api_connect_timeout, a.api_request_timeout), (5, 5));
        assert_eq!(check_lease_flags(&a), Ok(()));
    }

    #[test]
    fn a_grace_the_fence_would_close_before_is_refused() {
        // Renewed every 10s but fenced 6s before expiry (15 - 6 = 9 < 10): rejected.
        let err = check_lease_flags(&args(&["--lease-grace", "5"])).expect_err("grace 5");
        assert!(
            err.contains("--lease-grace (5) must exceed --api-request-timeout + 2 (7)"),
            "{err}"
        );
        let err = check_lease_flags(&args(&["--lease-grace", "15"])).expect_err("grace = duration");
        assert!(err.contains("< --lease-duration"), "{err}");
        let err = check_lease_flags(&args(&["--api-request-timeout", "0"])).expect_err("zero");
        assert!(err.contains("must be > 0"), "{err}");
        let ok =
            args(&["--lease-duration", "30", "--lease-grace", "20", "--api-request-timeout", "10"]);
        assert_eq!(check_lease_flags(&ok), Ok(()));
        let err = check_lease_flags(&args(&["--lease-duration", "100000", "--lease-grace", "20"]))
            .expect_err("longer than a day");
        assert!(err.contains("--lease-duration (100000) must be at most 86400 seconds"), "{err}");
    }
}
