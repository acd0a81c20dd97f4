//! The full-stack tier: `noderotation run` against the real Karpenter (KWOK provider), real
//! kube-scheduler and kube-controller-manager, KWOK as the kubelet, and real Deployments with
//! PodDisruptionBudgets (tests/k8s-harness, `up --full-stack`).
//!
//! Run: `tests/k8s-harness/fullstack.sh` (two stacks, the scenarios split between them; what CI
//! runs), or on one stack: `eval "$(tests/k8s-harness/start.sh --full-stack)"; cargo test --test
//! fullstack -- --test-threads=6 --nocapture` (scenario 4 waits for Karpenter's forced expiry,
//! about expireAfter, alongside the others). Without the full stack every test prints why and
//! passes; with `NODEROTATION_FULL_STACK_REQUIRED=1` a missing stack fails instead.
//!
//! Each scenario records its figures (tests/fullstack/report.rs); the run's last scenario writes
//! `docs/validation.md`.
#[path = "fullstack/report.rs"]
mod report;
#[path = "fullstack/stack.rs"]
mod stack;
#[path = "apiserver/support.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use chrono::DateTime;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use noderotation::karpenter::NODEPOOL_LABEL;
use serde_json::{Value, json};
use stack::*;
use support::{Error, TestResult};

/// One controller at a time per stack (each watches every pool of its cluster). Scenario 4 runs
/// no controller and does not take it, so it waits out Karpenter's expiry alongside the others.
/// tests/k8s-harness/fullstack.sh splits the controller scenarios between two stacks.
static ONE_CONTROLLER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// expireAfter of scenarios 1 and 4 (`NODEROTATION_FULL_STACK_EXPIRE_AFTER`, default 15m):
/// scenario 4 lasts about this long, and so does the tier.
fn expire_after() -> String {
    std::env::var("NODEROTATION_FULL_STACK_EXPIRE_AFTER").unwrap_or_else(|_| "15m".into())
}
const TGP: &str = "4m";
const READY_TIMEOUT: &str = "4m";
const APP: &str = "app";
/// 3 x 1200m = 3600m of the node's 3900m allocatable: one node, full.
const REPLICAS: i32 = 3;
const APP_CPU: &str = "1200m";

macro_rules! full_stack {
    () => {
        match crate::stack::stack() {
            Some(s) => s,
            None => return Ok(()),
        }
    };
}

#[path = "fullstack/fleet.rs"]
mod fleet;

fn always_open() -> Value {
    json!([{"timezone": "UTC", "days": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
            "start": "00:00", "end": "00:00"}])
}

/// A policy that rotates a claim once it is a minute old, at any time, `max_unavailable` at once.
fn after_a_minute(max_unavailable: u32) -> Value {
    json!({
        "ageThreshold": "1m", "minRotationChances": 1,
        "maintenanceWindows": always_open(),
        "surge": {"readyTimeout": READY_TIMEOUT, "cooldownAfter": "10m", "retryBackoff": "10m",
                  "maxUnavailable": max_unavailable}
    })
}

fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn pool(expire_after: &str, tgp: &str, consolidate_after: &str) -> PoolSpec {
    PoolSpec {
        expire_after: expire_after.into(),
        termination_grace_period: tgp.into(),
        consolidate_after: consolidate_after.into(),
    }
}

/// G2: no workload pod was Pending as long as a node takes to register.
fn assert_no_pod_waited_for_a_node(pending: &stack::PendingFigures) {
    assert!(
        pending.longest_pending_seconds < registration_delay_secs(),
        "a workload pod was Pending {:.1}s, as long as a node takes to register",
        pending.longest_pending_seconds
    );
}

/// The controller's `/metrics` count `want` successful rotations of the world's pool.
fn assert_successes(metrics: &str, world: &World, want: f64) {
    assert_eq!(
        metric(
            metrics,
            "noderotation_completed_total",
            &[("nodepool", &world.name), ("outcome", "success")]
        ),
        Some(want)
    );
}

fn registration_delay_secs() -> f64 {
    go_duration(&registration_delay()).num_seconds() as f64
}

/// Marks the world passed when `result` is Ok (its Drop then skips keeping the logs).
fn done(world: &World, result: TestResult) -> TestResult {
    if result.is_ok() {
        world.pass();
    }
    result
}

/// The pool's state at each step of a rotation of `claim`, polled until it settles.
#[derive(Debug, Default, Clone)]
struct RotationTimeline {
    started_at: Option<DateTime<chrono::Utc>>,
    pending_seen: Option<DateTime<chrono::Utc>>,
    draining_seen: Option<DateTime<chrono::Utc>>,
    draining_at: Option<DateTime<chrono::Utc>>,
    surge_wait: Option<String>,
    surge_path: Option<String>,
    rotation_mode: Option<String>,
    last_rotation_at: Option<DateTime<chrono::Utc>>,
    settled_seen: Option<DateTime<chrono::Utc>>,
}

fn rfc3339(s: Option<&String>) -> Option<DateTime<chrono::Utc>> {
    s.and_then(|v| DateTime::parse_from_rfc3339(v).ok()).map(|t| t.to_utc())
}

/// Follows a rotation of `claim` in the world's pool until the anchor is released, calling
/// `on_state` on every new claim state (the scenario's hooks). Records what the pool showed.
async fn follow_rotation<F, Fut>(
    world: &World,
    claim: &str,
    timeout: Duration,
    mut on_state: F,
) -> Result<RotationTimeline, Error>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let start = Instant::now();
    let mut tl = RotationTimeline::default();
    let mut last_state: Option<String> = None;
    let mut anchored = false;
    loop {
        let ann = world.pool_annotations().await;
        let state = world.annotation("NodeClaim", claim, "state").await;
        if let Some(s) = &state
            && last_state.as_ref() != Some(s)
        {
            eprintln!("[{}] claim {claim}: state {s}", world.name);
            match s.as_str() {
                "pending" => tl.pending_seen = tl.pending_seen.or(Some(now())),
                "draining" => tl.draining_seen = tl.draining_seen.or(Some(now())),
                _ => {}
            }
            if tl.started_at.is_none() {
                tl.started_at =
                    rfc3339(world.annotation("NodeClaim", claim, "started-at").await.as_ref());
            }
            last_state = Some(s.clone());
            on_state(s.clone()).await?;
        }
        let anchor = ann.get(&format!("{ANN}active-rotation"));
        if anchor.map(String::as_str) == Some(claim) {
            anchored = true;
            tl.draining_at = tl.draining_at.or(rfc3339(ann.get(&format!("{ANN}draining-at"))));
            tl.surge_wait = tl.surge_wait.clone().or(ann.get(&format!("{ANN}surge-wait")).cloned());
            tl.surge_path = tl.surge_path.clone().or(ann.get(&format!("{ANN}surge-path")).cloned());
            tl.rotation_mode =
                tl.rotation_mode.clone().or(ann.get(&format!("{ANN}rotation-mode")).cloned());
        } else if anchored && anchor.is_none() {
            tl.last_rotation_at = rfc3339(ann.get(&format!("{ANN}last-rotation-at")));
            tl.settled_seen = Some(now());
            if tl.last_rotation_at.is_none() {
                return Err(format!(
                    "the rotation of {claim} ended without success: pool annotations {ann:?}"
                )
                .into());
            }
            return Ok(tl);
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "rotation of {claim} not settled after {timeout:?} (state {last_state:?}, pool \
                 {ann:?})"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Seconds in a Go duration string as the controller writes it (`1m2.5s`, `45s`, `1h0m0s`).
fn go_secs(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let n: f64 = num.parse().ok()?;
        num.clear();
        total += match c {
            'h' => n * 3600.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                n / 1000.0
            }
            'm' => n * 60.0,
            's' => n,
            _ => return None,
        };
    }
    num.is_empty().then_some(total)
}

/// Karpenter's log lines that contain `needle` and `about` (a pool or claim name), trimmed to
/// their message, time and the fields that say what was decided.
fn karpenter_said(stack: &Stack, needle: &str, about: &str, max: usize) -> Vec<String> {
    karpenter_said_since(stack, needle, about, None, max)
}

/// [`karpenter_said`], only lines logged at or after `since`.
fn karpenter_said_since(
    stack: &Stack,
    needle: &str,
    about: &str,
    since: Option<DateTime<chrono::Utc>>,
    max: usize,
) -> Vec<String> {
    stack
        .karpenter_log_lines(needle)
        .into_iter()
        .filter(|l| l.contains(about))
        .filter(|l| {
            let Some(since) = since else { return true };
            let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
            v["time"]
                .as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .is_none_or(|t| t.to_utc() >= since)
        })
        .take(max)
        .map(|l| {
            let v: Value = serde_json::from_str(&l).unwrap_or(Value::Null);
            if v.is_null() {
                return l;
            }
            let mut keep = serde_json::Map::new();
            for k in [
                "time",
                "message",
                "NodeClaim",
                "NodePool",
                "Pods",
                "reason",
                "decision",
                "disrupted-node-count",
                "replacement-node-count",
                "pod-count",
                "command",
                "requests",
            ] {
                if let Some(x) = v.get(k) {
                    keep.insert(k.to_string(), x.clone());
                }
            }
            Value::Object(keep).to_string()
        })
        .collect()
}

/// What Karpenter launched while a rotation ran. One claim (the surge node) is what the
/// controller asks for; a second one is Karpenter provisioning for the pods of the node we
/// deleted without finding the surge node's room in its simulation.
fn launch_observations(
    stack: &Stack,
    world: &World,
    since: DateTime<chrono::Utc>,
    launched: &[String],
    asked: usize,
) -> Vec<String> {
    let mut out = vec![format!(
        "Karpenter launched {} claim(s) while the rotation ran ({asked} asked for by the \
         placeholder): {}.",
        launched.len(),
        if launched.is_empty() { "none".into() } else { launched.join(", ") }
    )];
    if launched.len() > asked {
        out.push(format!(
            "**Extra claim.** After our delete, Karpenter's provisioner scheduled the pods of the \
             deleting old node (`provisioner.go` `Schedule` adds \
             `nodes.Deleting().CurrentlyReschedulablePods`: every pod a PDB does not fully \
             block) against the existing nodes and found no room for them, so it launched a node \
             for them too. The room should have been free: the placeholder is deleted before the \
             old claim (docs/decisions/placeholder-release.md). The extra node ends up empty \
             (removed by emptiness consolidation if the pool consolidates; kept if \
             consolidateAfter is Never). Karpenter's log: {}",
            karpenter_said_since(stack, "found provisionable pod(s)", &world.name, Some(since), 8)
                .into_iter()
                .chain(karpenter_said_since(
                    stack,
                    "created nodeclaim",
                    &world.name,
                    Some(since),
                    8
                ))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    out
}

/// Claims created at or after `since`, other than `except`.
fn created_since(
    seen: &BTreeMap<String, ClaimSeen>,
    since: DateTime<chrono::Utc>,
    except: &[&str],
) -> Vec<String> {
    seen.iter()
        .filter(|(n, c)| !except.contains(&n.as_str()) && c.created.is_some_and(|t| t >= since))
        .map(|(n, _)| n.clone())
        .collect()
}

// ---- 1. surge rotation, provisioned path ---------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_1_surge_rotation_on_the_provisioned_path_finishes_before_the_deadline()
-> TestResult {
    let stack = full_stack!();
    let _one = ONE_CONTROLLER.lock().await;
    let t0 = Instant::now();
    let e = expire_after();
    let world = World::new(&stack, "fs1-surge", pool(&e, TGP, "Never")).await?;
    let nodes = world.deploy(APP, REPLICAS, APP_CPU, |_| {}).await?;
    assert_eq!(nodes.len(), 1, "the workload fills exactly one node: {nodes:?}");
    let old_node = nodes.into_iter().next().unwrap_or_default();
    let old = world.claim_of_node(&old_node).await?;
    let old_name = old.name_any();
    let deadline = old.created().ok_or("claim without creationTimestamp")? + go_duration(&e);
    let tracker = PendingTracker::start(&world, APP).await?;
    let claims = ClaimWatch::start(&world);
    world.apply_policy(json!({
        "ageThreshold": "auto", "minRotationChances": 2,
        "maintenanceWindows": always_open(),
        "surge": {"readyTimeout": READY_TIMEOUT, "cooldownAfter": "10m", "retryBackoff": "10m"}
    }))?;
    let ctl = world.controller()?;
    let result = async {
        // auto: A = E - (K*P + t_rot) = 15m - (2*1m + 4m + 4m + 2m) = 3m for the defaults.
        let tl =
            follow_rotation(&world, &old_name, go_duration(&e).to_std()?, |_| async { Ok(()) })
                .await?;
        world.wait_running(APP, REPLICAS as usize, Duration::from_secs(120)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (pending, tracked) = tracker.finish().await;
        let seen = claims.stop().await;
        let metrics = ctl.metrics().await.unwrap_or_default();

        let started = tl.started_at.ok_or("no started-at seen")?;
        let old_seen = seen.get(&old_name).ok_or("old claim never seen")?;
        let gone = old_seen.gone.ok_or("the old claim is not gone")?;
        let deleted = old_seen.deletion.ok_or("no deletionTimestamp seen on the old claim")?;
        assert!(
            old_seen.states.contains(&"draining".to_string()),
            "the old claim was deleted by us (state draining first): {:?}",
            old_seen.states
        );
        assert_eq!(tl.surge_path.as_deref(), Some("provisioned"), "{tl:?}");
        let margin = secs(gone, deadline);
        assert!(margin > 0.0, "the rotation finished {margin:.0}s after the deadline");
        let new_claims = created_since(&seen, started, &[]);
        assert!(!new_claims.is_empty(), "Karpenter provisioned no claim for the placeholder");
        // The workload now runs on the surge node, which Karpenter launched for our placeholder.
        let hosts: BTreeSet<String> = world.pods(APP).await?.iter().filter_map(node_of).collect();
        let surge_nodes: BTreeSet<String> =
            new_claims.iter().filter_map(|c| seen[c].node.clone()).collect();
        assert!(hosts.is_subset(&surge_nodes), "workload on {hosts:?}, new nodes {surge_nodes:?}");
        // G2: no pod waited for a node to boot.
        assert_no_pod_waited_for_a_node(&pending);
        assert_successes(&metrics, &world, 1.0);

        let mut observations = launch_observations(&stack, &world, started, &new_claims, 1);
        let placeholder = tracked.placeholders.iter().next().cloned().unwrap_or_default();
        observations.push(format!(
            "Karpenter on the placeholder: {}",
            karpenter_said_since(
                &stack,
                "found provisionable pod(s)",
                &placeholder,
                Some(started),
                2
            )
            .into_iter()
            .chain(karpenter_said_since(&stack, "created nodeclaim", &world.name, Some(started), 2))
            .collect::<Vec<_>>()
            .join(" | ")
        ));
        let preemptions: Vec<String> = stack
            .log_lines("kube-scheduler", "Start the preemption")
            .into_iter()
            .filter(|l| l.contains(&format!("preemptor=\"{}/", world.name)))
            .collect();
        observations.push(format!(
            "Placeholder {:?}, deleted with the old claim's delete; the evicted pods reached \
             the surge node without waiting for a node (longest Pending {:.3}s). kube-scheduler \
             preemptions for them: {} {}",
            tracked.placeholders,
            pending.longest_pending_seconds,
            preemptions.len(),
            preemptions.first().map(|l| l.trim()).unwrap_or("(none needed)")
        ));
        let surge_wait = tl.surge_wait.as_deref().and_then(go_secs);
        let drain = tl.draining_at.map(|d| secs(d, gone));
        let mut figures = BTreeMap::new();
        figures.insert("surge_wait_s (pending -> surge Ready)".into(), json!(surge_wait));
        figures.insert("drain_s (old claim deleted -> gone)".into(), json!(drain));
        figures.insert("rotation_s (started -> old claim gone)".into(), json!(secs(started, gone)));
        figures.insert("deadline_margin_s (deadline - old claim gone)".into(), json!(margin));
        figures.insert(
            "started_at_age_s (claim age at start)".into(),
            json!(secs(old.created().unwrap_or(started), started)),
        );
        figures
            .insert("old_claim_deleted_before_deadline_s".into(), json!(secs(deleted, deadline)));
        figures.insert("claims_launched_during_rotation".into(), json!(new_claims.len()));
        let result = report::ScenarioResult {
            settings: settings(&[
                ("expireAfter", &e),
                ("terminationGracePeriod", TGP),
                ("ageThreshold", "auto"),
                ("minRotationChances", "2"),
                ("readyTimeout", READY_TIMEOUT),
                ("registration delay", &registration_delay()),
            ]),
            pending: Some(pending),
            figures,
            observations,
            ..finished(&stack, "1", t0)
        };
        let all = report::record(&stack, &result);
        compare_ours_and_alone(&all)
    }
    .await;
    done(&world, result)
}

/// Scenario `id`'s record, finished now after starting at `t0`: the caller adds its settings,
/// figures and observations.
fn finished(stack: &Stack, id: &str, t0: Instant) -> report::ScenarioResult {
    report::ScenarioResult {
        scenario: id.into(),
        run_id: stack.run_id.clone(),
        finished_at: now().to_rfc3339(),
        wall_seconds: t0.elapsed().as_secs_f64(),
        settings: BTreeMap::new(),
        pending: None,
        figures: BTreeMap::new(),
        observations: Vec::new(),
    }
}

/// Once scenarios 1 and 4 have both run: ours must be lower on both figures.
fn compare_ours_and_alone(all: &BTreeMap<String, report::ScenarioResult>) -> TestResult {
    if let Some((ours, alone)) = report::comparison(all) {
        eprintln!("ours {ours:?}\nKarpenter alone {alone:?}");
        assert!(
            ours.longest_pending_seconds < alone.longest_pending_seconds,
            "longest pending: ours {:.1}s, Karpenter alone {:.1}s",
            ours.longest_pending_seconds,
            alone.longest_pending_seconds
        );
        assert!(
            ours.pending_pod_seconds < alone.pending_pod_seconds,
            "pending-pod-seconds: ours {:.1}, Karpenter alone {:.1}",
            ours.pending_pod_seconds,
            alone.pending_pod_seconds
        );
    }
    Ok(())
}

// ---- 4. Karpenter alone --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_4_karpenter_alone_force_expires_at_the_deadline() -> TestResult {
    let stack = full_stack!();
    let t0 = Instant::now();
    let e = expire_after();
    // The same pool and workload as scenario 1; no RotationPolicy selects this pool, so a
    // controller that another scenario runs meanwhile does not govern it (checked below).
    let world = World::new(&stack, "fs4-alone", pool(&e, TGP, "Never")).await?;
    let result = async {
        let nodes = world.deploy(APP, REPLICAS, APP_CPU, |_| {}).await?;
        assert_eq!(nodes.len(), 1, "the workload fills exactly one node: {nodes:?}");
        let old_node = nodes.into_iter().next().unwrap_or_default();
        let old = world.claim_of_node(&old_node).await?;
        let old_name = old.name_any();
        let created = old.created().ok_or("claim without creationTimestamp")?;
        let deadline = created + go_duration(&e);
        let tracker = PendingTracker::start(&world, APP).await?;
        let claims = ClaimWatch::start(&world);
        eprintln!("[{}] waiting for Karpenter to expire {old_name} at {deadline}", world.name);
        let wait = (deadline - now()).to_std().unwrap_or_default() + Duration::from_secs(180);
        eventually("Karpenter's forced expiry", wait, || async {
            claims.seen().get(&old_name)?.deletion
        })
        .await?;
        eventually("the expired claim gone", Duration::from_secs(600), || async {
            claims.seen().get(&old_name)?.gone
        })
        .await?;
        world.wait_running(APP, REPLICAS as usize, Duration::from_secs(300)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (pending, tracked) = tracker.finish().await;
        let seen = claims.stop().await;
        let old_seen = &seen[&old_name];
        let deleted = old_seen.deletion.ok_or("no deletion")?;
        let gone = old_seen.gone.ok_or("not gone")?;
        // Karpenter's expiry: at creationTimestamp + expireAfter (whole seconds), not earlier.
        let late = secs(deadline, deleted);
        assert!(late >= -1.0, "deleted {late:.0}s before the deadline: not the expiry");
        assert!(
            old_seen.states.is_empty(),
            "noderotation touched the claim: {:?}",
            old_seen.states
        );
        assert!(
            tracked.placeholders.is_empty(),
            "a placeholder for this pool: {:?}",
            tracked.placeholders
        );
        let anns = world.pool_annotations().await;
        assert!(
            !anns.keys().any(|k| k.starts_with(ANN)),
            "noderotation annotated the pool: {anns:?}"
        );
        assert!(pending.pending_pods > 0, "no workload pod was ever Pending");
        let replacements = created_since(&seen, deleted - chrono::Duration::seconds(1), &[]);
        let last_running = now();
        let mut figures = BTreeMap::new();
        figures.insert("expiry_delay_s (deletionTimestamp - deadline)".into(), json!(late));
        figures.insert("drain_s (deleted -> gone)".into(), json!(secs(deleted, gone)));
        figures.insert(
            "recovery_s (deleted -> all replicas Running, upper bound)".into(),
            json!(secs(deleted, last_running)),
        );
        figures.insert("claims_launched_after_expiry".into(), json!(replacements.len()));
        let observations = vec![
            format!(
                "Karpenter deleted {old_name} {late:.1}s after creationTimestamp + expireAfter; \
                 its log: {}",
                karpenter_said(&stack, "deleting expired nodeclaim", &old_name, 3).join(" | ")
            ),
            format!(
                "Replacement claims launched after the expiry: {}. The evicted pods stayed \
                 Pending until a replacement node registered.",
                replacements.join(", ")
            ),
        ];
        let result = report::ScenarioResult {
            settings: settings(&[
                ("expireAfter", &e),
                ("terminationGracePeriod", TGP),
                ("registration delay", &registration_delay()),
            ]),
            pending: Some(pending),
            figures,
            observations,
            ..finished(&stack, "4", t0)
        };
        let all = report::record(&stack, &result);
        compare_ours_and_alone(&all)
    }
    .await;
    done(&world, result)
}

// ---- 2. absorbed path ----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_2_spare_capacity_absorbs_the_placeholder_and_no_node_is_created() -> TestResult {
    let stack = full_stack!();
    let _one = ONE_CONTROLLER.lock().await;
    let t0 = Instant::now();
    let world = World::new(&stack, "fs2-absorbed", pool("20m", TGP, "Never")).await?;
    let mut ctl_slot = None;
    let result = async {
        let nodes = world.deploy(APP, REPLICAS, APP_CPU, |_| {}).await?;
        assert_eq!(nodes.len(), 1);
        let old_node = nodes.into_iter().next().unwrap_or_default();
        let old_name = world.claim_of_node(&old_node).await?.name_any();
        // Spare capacity: a second node, launched for a filler that is then removed. The pool
        // does not consolidate (consolidateAfter Never), so the empty node stays.
        let spare_nodes = world.deploy("filler", 1, "3000m", |_| {}).await?;
        let spare = spare_nodes.into_iter().next().unwrap_or_default();
        assert_ne!(spare, old_node);
        world.kubectl(&["-n", &world.name, "delete", "deployment", "filler"], None)?;
        world.wait_running("filler", 0, Duration::from_secs(60)).await?;
        let tracker = PendingTracker::start(&world, APP).await?;
        let claims = ClaimWatch::start(&world);
        world.apply_policy(after_a_minute(1))?;
        let ctl = world.controller()?;
        let ctl = ctl_slot.insert(ctl);
        let tl = follow_rotation(&world, &old_name, Duration::from_secs(600), |_| async { Ok(()) })
            .await?;
        let hosts = world.wait_running(APP, REPLICAS as usize, Duration::from_secs(120)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (pending, tracked) = tracker.finish().await;
        let seen = claims.stop().await;
        let started = tl.started_at.ok_or("no started-at")?;
        assert_eq!(tl.surge_path.as_deref(), Some("absorbed"), "{tl:?}");
        let launched = created_since(&seen, started - chrono::Duration::seconds(1), &[]);
        assert!(
            launched.is_empty(),
            "Karpenter launched {launched:?} although spare capacity existed"
        );
        assert_eq!(hosts, BTreeSet::from([spare.clone()]), "the workload moved to the spare node");
        let metrics = ctl.metrics().await.unwrap_or_default();
        assert_eq!(
            metric(
                &metrics,
                "noderotation_completed_total",
                &[("nodepool", &world.name), ("outcome", "success")]
            ),
            Some(1.0)
        );
        let gone = seen.get(&old_name).and_then(|c| c.gone).ok_or("old claim not gone")?;
        let mut figures = BTreeMap::new();
        figures.insert("surge_wait_s".into(), json!(tl.surge_wait.as_deref().and_then(go_secs)));
        figures.insert("drain_s".into(), json!(tl.draining_at.map(|d| secs(d, gone))));
        figures.insert("rotation_s (started -> old claim gone)".into(), json!(secs(started, gone)));
        figures.insert("claims_launched_during_rotation".into(), json!(launched.len()));
        let result = report::ScenarioResult {
            settings: settings(&[
                ("expireAfter", "20m"),
                ("ageThreshold", "1m"),
                ("readyTimeout", READY_TIMEOUT),
            ]),
            pending: Some(pending),
            figures,
            observations: [
                vec![format!(
                    "The placeholder {:?} was bound to the empty spare node {spare}; the workload \
                     followed it there.",
                    tracked.placeholders
                )],
                launch_observations(&stack, &world, started, &launched, 0),
            ]
            .concat(),
            ..finished(&stack, "2", t0)
        };
        report::record(&stack, &result);
        Ok(())
    }
    .await;
    done(&world, result)
}

// ---- 3. forceful fallback ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_3_a_claim_too_close_to_its_deadline_is_deleted_surge_less_respecting_the_pdb()
-> TestResult {
    let stack = full_stack!();
    let _one = ONE_CONTROLLER.lock().await;
    let t0 = Instant::now();
    // t_rot = readyTimeout 2m + tGP 3m + 2m = 7m; auto A = 10m - (1*1m + 7m) = 2m.
    let (e, tgp, ready_timeout) = ("10m", "3m", "2m");
    let world = World::new(&stack, "fs3-forceful", pool(e, tgp, "Never")).await?;
    let mut ctl_slot = None;
    let result = async {
        let nodes = world.deploy(APP, REPLICAS, APP_CPU, |_| {}).await?;
        assert_eq!(nodes.len(), 1);
        let old_node = nodes.into_iter().next().unwrap_or_default();
        let old = world.claim_of_node(&old_node).await?;
        let old_name = old.name_any();
        let created = old.created().ok_or("no creationTimestamp")?;
        let deadline = created + go_duration(e);
        let t_rot = go_duration(ready_timeout) + go_duration(tgp) + chrono::Duration::minutes(2);
        // A change freeze covers the claim's chances: it lifts when less than t_rot is left,
        // so a graceful surge could no longer finish before the forced expiry.
        let thaw = deadline - t_rot + chrono::Duration::seconds(30);
        world.annotate_pool("freeze", &thaw.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))?;
        let tracker = PendingTracker::start(&world, APP).await?;
        let claims = ClaimWatch::start(&world);
        world.apply_policy(json!({
            "ageThreshold": "auto", "minRotationChances": 1,
            "maintenanceWindows": always_open(),
            "surge": {"readyTimeout": ready_timeout, "cooldownAfter": "10m", "retryBackoff": "10m",
                      "forcefulFallback": {"enabled": true}}
        }))?;
        let ctl = world.controller()?;
        let ctl = ctl_slot.insert(ctl);
        eprintln!("[{}] frozen until {thaw}; deadline {deadline}", world.name);
        let tl = follow_rotation(&world, &old_name, Duration::from_secs(900), |_| async { Ok(()) })
            .await?;
        world.wait_running(APP, REPLICAS as usize, Duration::from_secs(300)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (pending, tracked) = tracker.finish().await;
        let seen = claims.stop().await;
        let old_seen = &seen[&old_name];
        let deleted = old_seen.deletion.ok_or("no deletion")?;
        assert_eq!(tl.rotation_mode.as_deref(), Some("forceful-fallback"), "{tl:?}");
        assert!(tracked.placeholders.is_empty(), "surge-less, but saw {:?}", tracked.placeholders);
        assert!(deleted >= thaw - chrono::Duration::seconds(1), "deleted while frozen");
        let margin = secs(deleted, deadline);
        assert!(
            margin > 0.0,
            "deleted {margin:.0}s after the deadline: that was Karpenter's expiry"
        );
        assert!(
            margin < t_rot.num_seconds() as f64,
            "deleted {margin:.0}s before the deadline: a surge could still have finished"
        );
        // The PDB (maxUnavailable 1) held through Karpenter's drain of our delete.
        assert!(
            pending.min_running >= (REPLICAS - 1) as usize,
            "only {} of {REPLICAS} pods ran at one point: the PDB was not respected",
            pending.min_running
        );
        let metrics = ctl.metrics().await.unwrap_or_default();
        assert_eq!(
            metric(&metrics, "noderotation_forceful_fallback_total", &[("nodepool", &world.name)]),
            Some(1.0)
        );
        let events: Vec<String> = world
            .events_for(&world.name)
            .await?
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ForcefulFallback"))
            .map(|e| e.message.unwrap_or_default())
            .collect();
        assert!(!events.is_empty(), "no ForcefulFallback event on the pool");
        let gone = old_seen.gone.ok_or("not gone")?;
        let mut figures = BTreeMap::new();
        figures.insert("deleted_before_deadline_s".into(), json!(margin));
        figures.insert("drain_s (deleted -> gone)".into(), json!(secs(deleted, gone)));
        figures.insert("t_rot_s".into(), json!(t_rot.num_seconds()));
        let launches = karpenter_said(&stack, "created nodeclaim", &world.name, 4);
        let result = report::ScenarioResult {
            settings: settings(&[
                ("expireAfter", e),
                ("terminationGracePeriod", tgp),
                ("readyTimeout", ready_timeout),
                ("ageThreshold", "auto"),
                ("minRotationChances", "1"),
                ("forcefulFallback", "enabled"),
                ("freeze until", &thaw.to_rfc3339()),
            ]),
            pending: Some(pending),
            figures,
            observations: vec![
                format!("ForcefulFallback event: {}", events.join(" | ")),
                format!(
                    "No placeholder; the pods waited for Karpenter's replacement node as with \
                     Karpenter alone, but inside the window and {margin:.0}s before the deadline. \
                     Fewest Running pods: {} of {REPLICAS} (PDB maxUnavailable 1).",
                    pending.min_running
                ),
                format!(
                    "Karpenter launched the replacement only after our delete: {}",
                    launches.join(" | ")
                ),
            ],
            ..finished(&stack, "3", t0)
        };
        report::record(&stack, &result);
        Ok(())
    }
    .await;
    done(&world, result)
}

// ---- 5. consolidation pressure -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_5_consolidation_pressure_does_not_remove_the_surge_pair() -> TestResult {
    let stack = full_stack!();
    let _one = ONE_CONTROLLER.lock().await;
    let t0 = Instant::now();
    // consolidateAfter 0s: Karpenter consolidates this pool as soon as it can. tGP 10m: the
    // drain is held by the PDB for up to 200s below, well inside it.
    let world = World::new(&stack, "fs5-consolidation", pool("20m", "10m", "0s")).await?;
    let mut ctl_slot = None;
    let (hold, hold_max) = (Duration::from_secs(90), Duration::from_secs(200));
    let result = async {
        let nodes = world.deploy(APP, REPLICAS, APP_CPU, |_| {}).await?;
        let old_node = nodes.into_iter().next().unwrap_or_default();
        let old_name = world.claim_of_node(&old_node).await?.name_any();
        // Node B: 12 x 300m, every pod `karpenter.sh/do-not-disrupt` (B cannot be consolidated)
        // and kept off the app's node. Full now, so the placeholder needs a new node.
        let others = world
            .deploy("other", 12, "300m", |d| {
                let t = &mut d["spec"]["template"];
                t["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
                t["spec"]["affinity"] = json!({"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {APP_LABEL: APP}}}]}});
            })
            .await?;
        assert_eq!(others.len(), 1, "other on one node: {others:?}");
        let b_node = others.into_iter().next().unwrap_or_default();
        assert_ne!(b_node, old_node);
        let tracker = PendingTracker::start(&world, APP).await?;
        let claims = ClaimWatch::start(&world);
        world.apply_policy(after_a_minute(1))?;
        ctl_slot = Some(world.controller()?);
        let surge_node = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let blocked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let pressure_window = std::sync::Arc::new(std::sync::Mutex::new(None));
        let placeholder_spec = std::sync::Arc::new(std::sync::Mutex::new(None::<(String, i64)>));
        let tl = follow_rotation(&world, &old_name, Duration::from_secs(900), |state| {
            let (world, surge_node, blocked, pressure_window, placeholder_spec) = (
                &world,
                surge_node.clone(),
                blocked.clone(),
                pressure_window.clone(),
                placeholder_spec.clone(),
            );
            let b_node = b_node.clone();
            let old_name = old_name.clone();
            async move {
                match state.as_str() {
                    // Hold the drain (PDB allows no eviction) so that the surge pair lives long
                    // enough for Karpenter's consolidation loop.
                    "pending" => {
                        world.set_pdb_max_unavailable(APP, 0)?;
                        // The placeholder goes with the old claim's delete: read it now.
                        let (spec, cpu) = eventually("the placeholder", Duration::from_secs(60), || async {
                            Some((placeholder_summary(world).await.ok()?, placeholder_cpu_millis(world).await.ok()?))
                        })
                        .await?;
                        *placeholder_spec.lock().unwrap_or_else(|e| e.into_inner()) = Some((spec, cpu));
                    }
                    "draining" => {
                        let s = surge_host(world, &old_name).await?;
                        *surge_node.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.clone());
                        // Pressure: B now has room for what the placeholder reserved, and the
                        // surge node is empty while the PDB holds the drain (the placeholder
                        // went with the delete), so deleting the surge node would be a valid
                        // consolidation, were it not do-not-disrupt.
                        world.scale("other", 1)?;
                        world.wait_running("other", 1, Duration::from_secs(60)).await?;
                        let room = free_cpu_millis(world, &b_node).await?;
                        let placeholder = placeholder_spec
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .as_ref()
                            .map(|p| p.1)
                            .ok_or("the placeholder was not seen while pending")?;
                        eprintln!("[{}] B has {room}m free, the placeholder requests {placeholder}m; holding {hold:?}", world.name);
                        assert!(room >= placeholder, "no consolidation opportunity: {room}m < {placeholder}m");
                        // Hold at least `hold`, and until Karpenter has reported the surge node
                        // blocked by do-not-disrupt: its recorder keeps one DisruptionBlocked
                        // event per object for 2 minutes whatever the message, and the surge
                        // node's first one ("nominated for a pending pod") came at launch.
                        let from = now();
                        let held = Instant::now();
                        let s_claim = world.claim_of_node(&s).await?.name_any();
                        loop {
                            let sc = world.claim_of_node(&s).await?;
                            assert!(sc.metadata.deletion_timestamp.is_none(), "Karpenter is deleting the surge node {s}");
                            let mut found = Vec::new();
                            for name in [s.clone(), s_claim.clone()] {
                                for ev in world.events_for(&name).await? {
                                    if ev.reason.as_deref() == Some("DisruptionBlocked") {
                                        found.push(format!("{} {}: {}", ev.involved_object.kind.unwrap_or_default(), name, ev.message.unwrap_or_default()));
                                    }
                                }
                            }
                            let dnd = found.iter().any(|f| f.contains("do-not-disrupt"));
                            *blocked.lock().unwrap_or_else(|e| e.into_inner()) = found;
                            if (dnd && held.elapsed() >= hold) || held.elapsed() >= hold_max {
                                break;
                            }
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                        *pressure_window.lock().unwrap_or_else(|e| e.into_inner()) = Some((from, now()));
                        world.set_pdb_max_unavailable(APP, 1)?;
                    }
                    _ => {}
                }
                Ok(())
            }
        })
        .await?;
        let hosts = world.wait_running(APP, REPLICAS as usize, Duration::from_secs(180)).await?;
        let (pending, _) = tracker.finish().await;
        let seen = claims.stop().await;
        let s = surge_node.lock().unwrap_or_else(|e| e.into_inner()).clone().ok_or("no surge node")?;
        let s_claim = world.claim_of_node(&s).await?;
        assert!(s_claim.metadata.deletion_timestamp.is_none(), "the surge node is being deleted");
        assert!(hosts.contains(&s), "the workload is on the surge node {s}: {hosts:?}");
        let node = world.node(&s).await?.ok_or("surge node gone")?;
        assert!(
            !node.annotations().contains_key("karpenter.sh/do-not-disrupt"),
            "our do-not-disrupt stays on the surge node after the rotation"
        );
        let blocked = blocked.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert!(
            blocked.iter().any(|b| b.contains("do-not-disrupt")),
            "Karpenter never reported the surge node blocked by do-not-disrupt: {blocked:?}"
        );
        let (from, to) = pressure_window.lock().unwrap_or_else(|e| e.into_inner()).ok_or("no pressure window")?;
        let started = tl.started_at.ok_or("no started-at")?;
        let launched = created_since(&seen, started, &[]);
        assert!(launched.len() <= 2, "runaway provisioning during the rotation: {launched:?}");
        // An extra claim (see launch_observations) ends up empty: how long it lives here, where
        // the pool consolidates. Whatever Karpenter disrupts meanwhile is not the surge pair.
        let extra: Vec<String> =
            launched.iter().filter(|c| **c != s_claim.name_any()).cloned().collect();
        let settled = now();
        let mut extra_gone = None;
        if !extra.is_empty() {
            extra_gone = eventually("the extra claim removed", Duration::from_secs(180), || async {
                let claims = world.claims().await.ok()?;
                extra.iter().all(|c| !claims.contains_key(c)).then(now)
            })
            .await
            .ok();
        } else {
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
        let disrupted = karpenter_said_since(&stack, "disrupting node(s)", &world.name, Some(started), 20);
        assert!(
            !disrupted.iter().any(|d| d.contains(&s) || d.contains(&s_claim.name_any())),
            "Karpenter disrupted the surge node: {disrupted:?}"
        );
        let mut figures = BTreeMap::new();
        figures.insert("pressure_held_s".into(), json!(secs(from, to)));
        figures.insert("do_not_disrupt_blocked_events".into(), json!(blocked.len()));
        figures.insert("claims_launched_during_rotation".into(), json!(launched.len()));
        if let Some(g) = extra_gone {
            figures.insert("extra_claim_removed_after_rotation_s".into(), json!(secs(settled, g)));
        }
        let result = report::ScenarioResult {
            settings: settings(&[("expireAfter", "20m"), ("consolidationPolicy", "WhenEmptyOrUnderutilized"),
                ("consolidateAfter", "0s"), ("ageThreshold", "1m")]),
            pending: Some(pending),
            figures,
            observations: [
                vec![
                    format!(
                        "While the old node's drain was held by its PDB for {:.0}s, node {b_node} had \
                         room for what the placeholder reserved and the surge node {s} stood empty \
                         (the placeholder goes with the delete), so deleting it was a valid \
                         consolidation; Karpenter disrupted neither it nor the old node.",
                        secs(from, to)
                    ),
                    format!("Karpenter's DisruptionBlocked events on the surge node: {}", blocked.join(" | ")),
                    format!(
                        "Karpenter's disruption decisions for this pool: {}",
                        if disrupted.is_empty() { "none".to_string() } else { disrupted.join(" | ") }
                    ),
                ],
                launch_observations(&stack, &world, started, &launched, 1),
                vec![format!(
                    "The placeholder as the controller created it (spec excerpt): `{}`",
                    placeholder_spec
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone()
                        .map(|p| p.0)
                        .unwrap_or_else(|| "(not captured)".into())
                )],
            ]
            .concat(),
            ..finished(&stack, "5", t0)
        };
        report::record(&stack, &result);
        Ok(())
    }
    .await;
    done(&world, result)
}

// ---- 6. two rotations at once (maxUnavailable: 2) ----------------------------------------------

/// `maxUnavailable: 2` against the real Karpenter: the two nodes of a workload are rotated at
/// once, each in its own slot with its own placeholder and surge node, both before their
/// deadline, with the PDB respected and no pod waiting for a node to boot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_6_two_rotations_at_once_each_with_its_own_surge_node() -> TestResult {
    let stack = full_stack!();
    let _one = ONE_CONTROLLER.lock().await;
    let t0 = Instant::now();
    let e = expire_after();
    let world = World::new(&stack, "fs6-parallel", pool(&e, TGP, "Never")).await?;
    let result = async {
        let nodes = world.deploy(APP, 2 * REPLICAS, APP_CPU, |_| {}).await?;
        assert_eq!(nodes.len(), 2, "the workload fills exactly two nodes: {nodes:?}");
        let mut olds = Vec::new();
        for node in &nodes {
            olds.push(world.claim_of_node(node).await?);
        }
        let old_names: Vec<String> = olds.iter().map(|c| c.name_any()).collect();
        let deadline = olds.iter().filter_map(|c| c.created()).min().ok_or("no creation time")?
            + go_duration(&e);
        let tracker = PendingTracker::start(&world, APP).await?;
        let claims = ClaimWatch::start(&world);
        world.apply_policy(after_a_minute(2))?;
        let ctl = world.controller()?;
        let slots = [format!("{ANN}active-rotation"), format!("{ANN}active-rotation.1")];
        let started = now();
        let mut max_in_flight = 0;
        let mut both_at_once = None;
        let timeout = go_duration(&e).to_std()?;
        loop {
            let ann = world.pool_annotations().await;
            let anchored: BTreeSet<&String> = slots.iter().filter_map(|k| ann.get(k)).collect();
            max_in_flight = max_in_flight.max(anchored.len());
            if anchored.len() == 2 && both_at_once.is_none() {
                both_at_once = Some(anchored.into_iter().cloned().collect::<BTreeSet<_>>());
            }
            assert!(!ann.contains_key(&format!("{ANN}active-rotation.2")), "a third slot: {ann:?}");
            let live = world.claims().await?;
            let gone = old_names.iter().all(|c| !live.contains_key(c));
            if gone && slots.iter().all(|k| !ann.contains_key(k)) {
                break;
            }
            if t0.elapsed() > timeout + Duration::from_secs(300) {
                return Err(format!("the two rotations did not finish: pool {ann:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        world.wait_running(APP, 2 * REPLICAS as usize, Duration::from_secs(120)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (pending, tracked) = tracker.finish().await;
        let seen = claims.stop().await;
        let metrics = ctl.metrics().await.unwrap_or_default();
        let want: BTreeSet<String> = old_names.iter().cloned().collect();
        assert_eq!(both_at_once.as_ref(), Some(&want), "both old claims in flight at once");
        let mut margins = Vec::new();
        for c in &old_names {
            let old_seen = seen.get(c).ok_or("old claim never seen")?;
            assert!(
                old_seen.states.contains(&"draining".to_string()),
                "{c}: {:?}",
                old_seen.states
            );
            let gone = old_seen.gone.ok_or("an old claim is not gone")?;
            margins.push(secs(gone, deadline));
        }
        let margin = margins.iter().copied().fold(f64::INFINITY, f64::min);
        assert!(margin > 0.0, "a rotation finished {margin:.0}s after the deadline");
        let new_claims = created_since(&seen, started, &[]);
        assert!(new_claims.len() >= 2, "one surge node per rotation: {new_claims:?}");
        assert_no_pod_waited_for_a_node(&pending);
        assert_successes(&metrics, &world, 2.0);
        let mut figures = BTreeMap::new();
        figures
            .insert("max_in_flight (rotations of the pool at once)".into(), json!(max_in_flight));
        figures.insert("claims_launched_during_rotations".into(), json!(new_claims.len()));
        figures.insert("deadline_margin_s (deadline - last old claim gone)".into(), json!(margin));
        let observations = vec![format!(
            "Both old claims {old_names:?} were anchored at once (slots 0 and 1); placeholders \
             {:?}; claims launched: {new_claims:?}; longest Pending {:.3}s.",
            tracked.placeholders, pending.longest_pending_seconds
        )];
        let result = report::ScenarioResult {
            settings: settings(&[
                ("expireAfter", &e),
                ("terminationGracePeriod", TGP),
                ("ageThreshold", "1m"),
                ("maxUnavailable", "2"),
                ("readyTimeout", READY_TIMEOUT),
                ("registration delay", &registration_delay()),
            ]),
            pending: Some(pending),
            figures,
            observations,
            ..finished(&stack, "6", t0)
        };
        report::record(&stack, &result);
        Ok::<(), Error>(())
    }
    .await;
    done(&world, result)
}

// ---- 7. drain held by a PDB at its limit -------------------------------------------------------

/// The old node's drain waits on a PDB at its limit (`minAvailable` = replicas: no eviction is
/// allowed, yet Karpenter does not count it as fully blocking, so its provisioner schedules the
/// old node's pods on every pass while the drain waits). The pool never consolidates, so an
/// extra node would stay. One claim is launched for the rotation, the surge node, and no empty
/// node is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_7_a_drain_held_by_its_pdb_launches_one_node_and_leaves_no_empty_node()
-> TestResult {
    let stack = full_stack!();
    let _one = ONE_CONTROLLER.lock().await;
    let t0 = Instant::now();
    // tGP 10m: the drain is held for `hold` below, well inside it.
    let world = World::new(&stack, "fs7-held-pdb", pool("20m", "10m", "Never")).await?;
    // Karpenter's provisioner re-runs for a node under disruption every 10 s: several passes.
    let hold = Duration::from_secs(45);
    let mut ctl_slot = None;
    let result = async {
        let nodes = world.deploy(APP, REPLICAS, APP_CPU, |_| {}).await?;
        assert_eq!(nodes.len(), 1, "the workload fills exactly one node: {nodes:?}");
        let old_node = nodes.into_iter().next().unwrap_or_default();
        let old_name = world.claim_of_node(&old_node).await?.name_any();
        // At its limit: disruptionsAllowed 0, but not `maxUnavailable: 0` or `minAvailable:
        // 100%`, which Karpenter treats as fully blocking and leaves out of its provisioning.
        world.patch_pdb(APP, json!({"spec": {"maxUnavailable": null, "minAvailable": REPLICAS}}))?;
        let tracker = PendingTracker::start(&world, APP).await?;
        let claims = ClaimWatch::start(&world);
        world.apply_policy(after_a_minute(1))?;
        ctl_slot = Some(world.controller()?);
        let held = std::sync::Arc::new(std::sync::Mutex::new(None));
        let tl = follow_rotation(&world, &old_name, Duration::from_secs(900), |state| {
            let (world, held) = (&world, held.clone());
            async move {
                if state == "draining" {
                    let from = now();
                    tokio::time::sleep(hold).await;
                    *held.lock().unwrap_or_else(|e| e.into_inner()) = Some(secs(from, now()));
                    world.patch_pdb(
                        APP,
                        json!({"spec": {"minAvailable": null, "maxUnavailable": 1}}),
                    )?;
                }
                Ok(())
            }
        })
        .await?;
        let hosts = world.wait_running(APP, REPLICAS as usize, Duration::from_secs(180)).await?;
        // Long enough for a late launch to show and for any claim being deleted to go.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let (pending, _) = tracker.finish().await;
        let seen = claims.stop().await;
        let held = held.lock().unwrap_or_else(|e| e.into_inner()).ok_or("no drain was held")?;
        let started = tl.started_at.ok_or("no started-at")?;
        let launched = created_since(&seen, started, &[]);
        let live = world.claims().await?;
        let left: Vec<String> = live
            .values()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| c.status.as_ref().and_then(|s| s.node_name.clone()))
            .collect();
        let empty: Vec<&String> = left.iter().filter(|n| !hosts.contains(*n)).collect();
        let mut observations = launch_observations(&stack, &world, started, &launched, 1);
        observations.push(format!(
            "The drain waited {held:.0}s on the PDB (minAvailable {REPLICAS}); nodes of the pool afterwards: {left:?}, the workload on {hosts:?}."
        ));
        let mut figures = BTreeMap::new();
        figures.insert("drain_held_s".into(), json!(held));
        figures.insert("claims_launched_during_rotation".into(), json!(launched.len()));
        figures.insert("empty_nodes_left".into(), json!(empty.len()));
        let result = report::ScenarioResult {
            settings: settings(&[
                ("expireAfter", "20m"),
                ("terminationGracePeriod", "10m"),
                ("consolidateAfter", "Never"),
                ("ageThreshold", "1m"),
                ("PDB while the drain is held", &format!("minAvailable {REPLICAS}")),
            ]),
            pending: Some(pending),
            figures,
            observations,
            ..finished(&stack, "7", t0)
        };
        report::record(&stack, &result);
        assert_eq!(launched.len(), 1, "one claim per rotation, the surge node: {launched:?}");
        assert!(empty.is_empty(), "empty nodes left behind: {empty:?} (workload on {hosts:?})");
        assert_no_pod_waited_for_a_node(&pending);
        Ok::<(), Error>(())
    }
    .await;
    done(&world, result)
}

/// The node our controller froze as the surge target of `claim` (`surge-for` on a node other
/// than the candidate's).
async fn surge_host(world: &World, claim: &str) -> Result<String, Error> {
    let old_node = world
        .claim(claim)
        .await?
        .and_then(|c| c.status.and_then(|s| s.node_name))
        .unwrap_or_default();
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(world.admin.clone());
    let nodes = api
        .list(&ListParams::default().labels(&format!("{NODEPOOL_LABEL}={}", world.name)))
        .await?;
    nodes
        .items
        .into_iter()
        .find(|n| {
            n.name_any() != old_node
                && n.annotations().get(&format!("{ANN}surge-for")).map(String::as_str)
                    == Some(claim)
        })
        .map(|n| n.name_any())
        .ok_or_else(|| format!("no node frozen for {claim}").into())
}

fn cpu_millis(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0),
        None => q.parse::<f64>().map(|c| (c * 1000.0) as i64).unwrap_or(0),
    }
}

/// Allocatable CPU of `node` minus the requests of the pods bound to it (millicores).
async fn free_cpu_millis(world: &World, node: &str) -> Result<i64, Error> {
    let n = world.node(node).await?.ok_or("node gone")?;
    let alloc = n
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get("cpu").map(|q| cpu_millis(&q.0)))
        .unwrap_or(0);
    let pods: Api<Pod> = Api::all(world.admin.clone());
    let used: i64 = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
        .filter_map(|c| {
            c.resources.as_ref()?.requests.as_ref()?.get("cpu").map(|q| cpu_millis(&q.0))
        })
        .sum();
    Ok(alloc - used)
}

/// The fields of the pool's placeholder that Karpenter and kube-scheduler act on, as JSON.
async fn placeholder_summary(world: &World) -> Result<String, Error> {
    let pods: Api<Pod> = Api::namespaced(world.admin.clone(), support::CONTROLLER_NS);
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=noderotation");
    let p = pods
        .list(&lp)
        .await?
        .items
        .into_iter()
        .find(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|s| s.get(NODEPOOL_LABEL))
                == Some(&world.name)
        })
        .ok_or("no placeholder for the pool")?;
    let spec = serde_json::to_value(p.spec.unwrap_or_default())?;
    let mut out = serde_json::Map::new();
    for k in [
        "priorityClassName",
        "priority",
        "preemptionPolicy",
        "nodeSelector",
        "affinity",
        "tolerations",
        "nodeName",
    ] {
        if let Some(v) = spec.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    out.insert("resources".into(), spec["containers"][0]["resources"].clone());
    Ok(Value::Object(out).to_string())
}

/// CPU request of the pool's placeholder (millicores).
async fn placeholder_cpu_millis(world: &World) -> Result<i64, Error> {
    let pods: Api<Pod> = Api::namespaced(world.admin.clone(), support::CONTROLLER_NS);
    let list = pods
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=noderotation"))
        .await?;
    list.items
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|s| s.get(NODEPOOL_LABEL))
                == Some(&world.name)
        })
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
        .filter_map(|c| {
            c.resources.as_ref()?.requests.as_ref()?.get("cpu").map(|q| cpu_millis(&q.0))
        })
        .next()
        .ok_or_else(|| "no placeholder for the pool".into())
}

#[test]
fn go_durations_as_the_controller_writes_them() {
    assert_eq!(go_secs("45s"), Some(45.0));
    assert_eq!(go_secs("1m2.5s"), Some(62.5));
    assert_eq!(go_secs("1h0m0s"), Some(3600.0));
    assert_eq!(go_secs("350ms"), Some(0.35));
    assert_eq!(go_secs("12"), None);
}

/// The generator alone: re-renders docs/validation.md from the newest recorded run (no cluster).
/// `cargo test --test fullstack -- --ignored render_validation_doc --nocapture`
#[test]
#[ignore]
fn render_validation_doc() {
    match report::rerender_latest() {
        Some(path) => eprintln!("rendered {}", path.display()),
        None => eprintln!("no recorded run under target/tmp/fullstack/results"),
    }
    match report::rerender_fleet() {
        Some(path) => eprintln!("rendered the fleet run into {}", path.display()),
        None => eprintln!("no recorded fleet run under target/tmp/fullstack/results"),
    }
}
