//! The fleet run: the pools of `deploy/examples/scenarios/fleet-compressed.yaml` (three NodePools
//! of eight nodes, nodes that live 16 minutes) on the full stack, once under noderotation and
//! once, beside them, under Karpenter alone, for the scenario's span. The scenario file is the
//! one source of both runs: the pools, the workload, the policy and the span are read from it,
//! and `noderotation simulate` runs the same file. The figures and the simulator's prediction for
//! them go into the "Fleet run" part of `docs/validation.md`.
//!
//! The whole run (about 30 minutes) is `tests/k8s-harness/fleet.sh` (`NODEROTATION_FLEET=whole`).
//! Without it, the tier runs a shorter version: the noderotation side only, for
//! `NODEROTATION_FLEET_SPAN` (default 6m: the first rotations of every pool), its figures kept
//! next to the run's results and not in the document.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;
use noderotation::policy::window::Schedule;
use noderotation::sim::scenario::Scenario;
use serde::{Deserialize, Serialize};

use crate::report;
use crate::stack::*;
use crate::support::{Error, TestResult};

pub const SCENARIO_FILE: &str = "deploy/examples/scenarios/fleet-compressed.yaml";

/// One side of the fleet run (ours or Karpenter alone), summed over its pools.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Side {
    /// Claims that showed our `state` annotation: rotations started (finished or not).
    pub rotations_started: usize,
    pub forced_expiries: usize,
    /// Claims replaced: rotated by us (deleted from `draining`) or expired by Karpenter.
    pub replacements: usize,
    pub replacements_in_window: usize,
    /// Claims created during the run.
    pub claims_launched: usize,
    pub pending_pod_seconds: f64,
    pub longest_pending_seconds: f64,
    /// Node-minutes above each pool's starting node count.
    pub overlap_node_minutes: f64,
    /// Claim created -> its node registered, for claims created during the run (min, median, max).
    pub registration_seconds: Option<[f64; 3]>,
    /// Claim deleted -> gone (min, median, max).
    pub drain_seconds: Option<[f64; 3]>,
    pub per_pool: BTreeMap<String, PoolFigures>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PoolFigures {
    pub forced_expiries: usize,
    pub replacements: usize,
    pub claims_launched: usize,
    pub longest_pending_seconds: f64,
}

/// The whole fleet run, as the renderer reads it (`fleet.json` next to the scenario results).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FleetResult {
    pub run_id: String,
    pub finished_at: String,
    pub span_seconds: f64,
    pub wall_seconds: f64,
    pub settings: BTreeMap<String, String>,
    /// Starting ages of the claims when the run began (min, max), seconds.
    pub starting_age_seconds: [f64; 2],
    pub ours: Side,
    pub alone: Side,
    pub observations: Vec<String>,
}

fn spread(mut xs: Vec<f64>) -> Option<[f64; 3]> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    Some([xs[0], xs[xs.len() / 2], xs[xs.len() - 1]])
}

/// Node-seconds above `base` live claims over `[from, to]` (a claim lives from its creation until
/// it was seen gone).
fn overlap_seconds(
    seen: &BTreeMap<String, ClaimSeen>,
    base: usize,
    from: chrono::DateTime<Utc>,
    to: chrono::DateTime<Utc>,
) -> f64 {
    let mut edges: Vec<(chrono::DateTime<Utc>, i64)> = Vec::new();
    for c in seen.values() {
        let start = c.created.unwrap_or(from).max(from);
        let end = c.gone.unwrap_or(to).min(to);
        if start < end {
            edges.push((start, 1));
            edges.push((end, -1));
        }
    }
    edges.sort();
    let (mut live, mut at, mut total) = (0i64, from, 0.0);
    for (t, d) in edges {
        let above = (live - base as i64).max(0) as f64;
        total += above * secs(at, t).max(0.0);
        live += d;
        at = t;
    }
    total
}

/// What one pool's claims and pods showed over the run.
struct PoolRun {
    name: String,
    seen: BTreeMap<String, ClaimSeen>,
    pending: PendingFigures,
    base: usize,
}

fn side(
    pools: &[PoolRun],
    expire_after: chrono::Duration,
    schedule: &Schedule,
    t0: chrono::DateTime<Utc>,
    end: chrono::DateTime<Utc>,
) -> Side {
    let mut s = Side::default();
    let (mut registration, mut drain) = (Vec::new(), Vec::new());
    for p in pools {
        let mut pf = PoolFigures::default();
        for c in p.seen.values() {
            if !c.states.is_empty() {
                s.rotations_started += 1;
            }
            let Some(created) = c.created else { continue };
            if created >= t0 {
                pf.claims_launched += 1;
                if let Some(r) = c.registered {
                    registration.push(secs(created, r));
                }
            }
            let Some(deleted) = c.deletion.filter(|d| *d <= end) else { continue };
            if let Some(gone) = c.gone {
                drain.push(secs(deleted, gone));
            }
            let ours = c.states.iter().any(|st| st == "draining");
            // Karpenter's expiry deletes at creationTimestamp + expireAfter (whole seconds).
            let expired = !ours && secs(created + expire_after, deleted) >= -1.0;
            if !(ours || expired) {
                continue;
            }
            pf.replacements += 1;
            if expired {
                pf.forced_expiries += 1;
            }
            // A rotation counts from when it started (its first state); an expiry when it hit.
            let at = c.states_at.first().copied().filter(|_| ours).unwrap_or(deleted);
            if schedule.in_window(at) {
                s.replacements_in_window += 1;
            }
        }
        pf.longest_pending_seconds = p.pending.longest_pending_seconds;
        s.forced_expiries += pf.forced_expiries;
        s.replacements += pf.replacements;
        s.claims_launched += pf.claims_launched;
        s.pending_pod_seconds += p.pending.pending_pod_seconds;
        s.longest_pending_seconds = s.longest_pending_seconds.max(pf.longest_pending_seconds);
        s.overlap_node_minutes += overlap_seconds(&p.seen, p.base, t0, end) / 60.0;
        s.per_pool.insert(p.name.clone(), pf);
    }
    s.registration_seconds = spread(registration);
    s.drain_seconds = spread(drain);
    s
}

/// The span, and whether it is the scenario's whole span (`NODEROTATION_FLEET=whole`) or the
/// shorter version (`NODEROTATION_FLEET_SPAN`, default 6m).
fn span(scenario_span: Option<chrono::Duration>) -> Result<(chrono::Duration, bool), Error> {
    if std::env::var("NODEROTATION_FLEET").is_ok_and(|v| v == "whole") {
        let span = scenario_span.ok_or_else(|| format!("{SCENARIO_FILE}: no span"))?;
        return Ok((span, true));
    }
    let short = std::env::var("NODEROTATION_FLEET_SPAN").unwrap_or_else(|_| "6m".into());
    Ok((go_duration(&short), false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fleet_run_under_noderotation_and_karpenter_alone() -> TestResult {
    let stack = full_stack!();
    let _one = crate::ONE_CONTROLLER.lock().await;
    let started = Instant::now();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCENARIO_FILE);
    let scenario = Scenario::load(&path).map_err(|e| format!("{e:#}"))?;
    let plan = scenario.compile().map_err(|e| format!("{e:#}"))?;
    let (span, whole) = span(plan.span)?;
    let policy = scenario.policies.first().ok_or("the fleet scenario has no policy")?;
    let schedule = Schedule::new(&policy.spec.maintenance_windows)
        .map_err(|e| format!("the fleet policy's windows: {e:?}"))?;
    let mut policy_spec = serde_json::to_value(&policy.spec)?;
    // Each world's policy selects its own pool (World::apply_policy).
    policy_spec.as_object_mut().map(|o| o.remove("nodePoolSelector"));
    let first = scenario.pools.first().ok_or("the fleet scenario has no pool")?;
    let tgp = first.termination_grace_period.clone().unwrap_or_else(|| "2m".into());
    let spec = crate::pool(&first.expire_after, &tgp, &first.consolidate_after);
    let cpu = first.workload.requests.get("cpu").cloned().ok_or("workload without cpu")?;
    let replicas = i32::try_from(first.nodes * first.workload.pods_per_node)?;
    let base = first.nodes as usize;
    for p in &scenario.pools {
        let same = p.nodes == first.nodes
            && p.expire_after == first.expire_after
            && p.workload.pods_per_node == first.workload.pods_per_node;
        assert!(same, "the fleet run builds every pool like the first: {} differs", p.name);
        // World::deploy gives every workload a PDB of maxUnavailable 1.
        let pdb = p.workload.pdb.as_ref().map(|b| b.max_unavailable);
        assert_eq!(pdb, Some(1), "{}: the fleet run's workloads have maxUnavailable 1", p.name);
    }

    let mut ours = Vec::new();
    let mut alone = Vec::new();
    for (i, _) in scenario.pools.iter().enumerate() {
        let letter = char::from(b'a' + u8::try_from(i)?);
        ours.push(World::new(&stack, &format!("fleet-{letter}"), spec.clone()).await?);
        // Karpenter alone only matters once its expiry can hit: the whole run.
        if whole {
            alone.push(World::new(&stack, &format!("alone-{letter}"), spec.clone()).await?);
        }
    }
    let all: Vec<&World> = ours.iter().chain(alone.iter()).collect();
    let deployed = futures::future::try_join_all(
        all.iter().map(|w| w.deploy(crate::APP, replicas, &cpu, |_| {})),
    )
    .await?;
    for (w, nodes) in all.iter().zip(&deployed) {
        assert_eq!(nodes.len(), base, "{}: the workload fills {base} nodes: {nodes:?}", w.name);
    }
    let mut trackers = Vec::new();
    let mut watches = Vec::new();
    for w in &all {
        trackers.push(PendingTracker::start(w, crate::APP).await?);
        watches.push(ClaimWatch::start(w));
    }
    let t0 = now();
    for w in &ours {
        w.apply_policy(policy_spec.clone())?;
    }
    let ctl = ours[0].controller()?;
    let end = t0 + span;
    eprintln!(
        "fleet run: {} pools under noderotation, {} alone, until {end}",
        ours.len(),
        alone.len()
    );
    while now() < end {
        tokio::time::sleep(Duration::from_secs(60).min((end - now()).to_std().unwrap_or_default()))
            .await;
        let counts: Vec<String> = all
            .iter()
            .zip(&watches)
            .map(|(w, c)| {
                let live = c.seen().values().filter(|s| s.gone.is_none()).count();
                format!("{} {live}", w.name)
            })
            .collect();
        eprintln!("fleet run at +{:.0}s: live claims {}", secs(t0, now()), counts.join(", "));
    }
    let metrics = ctl.metrics().await.unwrap_or_default();
    drop(ctl);
    let mut runs = Vec::new();
    for ((w, tracker), watch) in all.iter().zip(trackers).zip(watches) {
        let (pending, _) = tracker.finish().await;
        let seen = watch.stop().await;
        runs.push(PoolRun { name: w.name.clone(), seen, pending, base });
    }
    let end = now();
    let ages: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.seen.values())
        .filter_map(|c| c.created.filter(|c| *c < t0).map(|c| secs(c, t0)))
        .collect();
    let expire_after = go_duration(&first.expire_after);
    let (ours_runs, alone_runs) = runs.split_at(ours.len());
    let result = FleetResult {
        run_id: stack.run_id.clone(),
        finished_at: end.to_rfc3339(),
        span_seconds: secs(t0, end),
        wall_seconds: started.elapsed().as_secs_f64(),
        settings: crate::settings(&[
            ("scenario", SCENARIO_FILE),
            ("pools per side", &ours.len().to_string()),
            ("nodes per pool", &base.to_string()),
            ("expireAfter", &first.expire_after),
            ("terminationGracePeriod", &tgp),
            ("policy", &serde_json::to_string(&policy_spec)?),
            ("registration delay", &registration_delay()),
        ]),
        starting_age_seconds: [
            ages.iter().copied().fold(f64::INFINITY, f64::min),
            ages.iter().copied().fold(0.0, f64::max),
        ],
        ours: side(ours_runs, expire_after, &schedule, t0, end),
        alone: side(alone_runs, expire_after, &schedule, t0, end),
        observations: vec![format!(
            "The controller counted {} successful rotations (noderotation_completed_total).",
            ours.iter()
                .filter_map(|w| metric(
                    &metrics,
                    "noderotation_completed_total",
                    &[("nodepool", &w.name), ("outcome", "success")]
                ))
                .sum::<f64>()
        )],
    };
    eprintln!("fleet run: {result:#?}");
    report::record_fleet(&stack, &result, whole);
    assert_eq!(result.ours.forced_expiries, 0, "a claim reached its forced expiry under us");
    assert!(result.ours.replacements >= 2 * ours.len(), "fewer than two rotations per pool");
    if whole {
        assert!(result.alone.forced_expiries > 0, "Karpenter alone expired nothing in the span");
    }
    for w in all {
        w.pass();
    }
    Ok(())
}
