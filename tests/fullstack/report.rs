//! Results of the full-stack scenarios and the generated `docs/validation.md`.
//!
//! Every scenario writes its figures as JSON into a directory of the run (one stack instance, or
//! the stacks tests/k8s-harness/fullstack.sh starts, which share one run id):
//! `$CARGO_TARGET_TMPDIR/fullstack/results/<run id>/`. After each record the document is
//! rendered from every result of the run. It goes to `docs/validation.md` once all seven
//! scenarios of the run are in (so a partial run never replaces the checked-in figures), and to
//! `validation.md` in the results directory before that.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stack::{PendingFigures, Stack};

/// What the document says about the run besides the scenarios' results: the ready file's
/// `fullStack` section and the tier's timings, saved next to the results as `run.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    pub full_stack: Value,
    pub registration_delay: String,
    pub build_seconds: Option<String>,
    pub start_seconds: Option<String>,
}

impl RunInfo {
    fn of(stack: &Stack) -> RunInfo {
        RunInfo {
            run_id: stack.run_id.clone(),
            full_stack: stack.ready["fullStack"].clone(),
            registration_delay: crate::stack::registration_delay(),
            build_seconds: std::env::var("NODEROTATION_FULL_STACK_BUILD_SECONDS").ok(),
            start_seconds: std::env::var("NODEROTATION_FULL_STACK_START_SECONDS")
                .or_else(|_| std::env::var("HARNESS_START_SECONDS"))
                .ok(),
        }
    }
}

pub const SCENARIOS: [(&str, &str); 7] = [
    ("1", "Surge rotation, provisioned path"),
    ("2", "Surge rotation, absorbed path"),
    ("3", "Forceful fallback"),
    ("4", "Karpenter alone (no noderotation)"),
    ("5", "Consolidation pressure during a rotation"),
    ("6", "Two rotations at once (maxUnavailable: 2)"),
    ("7", "Drain held by a PDB at its limit, consolidateAfter Never"),
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// "1" .. "7"
    pub scenario: String,
    pub run_id: String,
    /// RFC3339, when the scenario finished.
    pub finished_at: String,
    /// Wall-clock seconds the scenario took (setup included).
    pub wall_seconds: f64,
    /// The scenario's settings (expireAfter, tGP, policy values, ...).
    pub settings: BTreeMap<String, String>,
    pub pending: Option<PendingFigures>,
    /// Named figures (seconds unless the name says otherwise).
    pub figures: BTreeMap<String, Value>,
    /// What was observed, in words (Karpenter's decisions, events, log lines).
    pub observations: Vec<String>,
}

static LOCK: Mutex<()> = Mutex::new(());

fn results_dir(run_id: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("fullstack").join("results").join(run_id)
}

/// Writes `result`, re-renders the document, and returns every result of the run so far.
/// Prints `result`, stores it with the run's other results, and re-renders the validation doc;
/// returns every result of the run so far.
pub fn record(stack: &Stack, result: &ScenarioResult) -> BTreeMap<String, ScenarioResult> {
    eprintln!("scenario {}: {result:#?}", result.scenario);
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = results_dir(&stack.run_id);
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("scenario-{}.json", result.scenario));
    if let Ok(text) = serde_json::to_string_pretty(result) {
        let _ = std::fs::write(&path, text);
    }
    let run = RunInfo::of(stack);
    if let Ok(text) = serde_json::to_string_pretty(&run) {
        let _ = std::fs::write(dir.join("run.json"), text);
    }
    let all = load(&dir);
    write_doc(&dir, &run, &all);
    all
}

/// Renders the run in `dir` to docs/validation.md when all seven scenarios are in, else to
/// `dir/validation.md`; returns where it went.
pub fn write_doc(dir: &Path, run: &RunInfo, all: &BTreeMap<String, ScenarioResult>) -> PathBuf {
    let complete = SCENARIOS.iter().all(|(id, _)| all.contains_key(*id));
    let target = if complete { checked_in() } else { dir.join("validation.md") };
    // The fleet run has its own command: its part of the checked-in document stays.
    let fleet = std::fs::read_to_string(checked_in())
        .ok()
        .and_then(|doc| fleet_block(&doc).map(str::to_string))
        .unwrap_or_default();
    let doc = splice_fleet(&render(run, all), &fleet);
    match std::fs::write(&target, doc) {
        Ok(()) => eprintln!("validation figures written to {}", target.display()),
        Err(e) => eprintln!("cannot write {}: {e}", target.display()),
    }
    target
}

/// The newest run directory under the results that holds `file`.
fn newest_run_with(file: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fullstack").join("results");
    let newest = std::fs::read_dir(&root)
        .ok()?
        .flatten()
        .filter(|e| e.path().join(file).exists())
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())?;
    Some(newest.path())
}

/// Re-renders the newest run under the results directory (the generator: no cluster needed).
pub fn rerender_latest() -> Option<PathBuf> {
    let newest = newest_run_with("run.json")?;
    let run: RunInfo =
        serde_json::from_str(&std::fs::read_to_string(newest.join("run.json")).ok()?).ok()?;
    Some(write_doc(&newest, &run, &load(&newest)))
}

fn load(dir: &Path) -> BTreeMap<String, ScenarioResult> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "json")
            && p.file_name().is_some_and(|n| n != "run.json")
            && let Ok(text) = std::fs::read_to_string(&p)
            && let Ok(r) = serde_json::from_str::<ScenarioResult>(&text)
        {
            out.insert(r.scenario.clone(), r);
        }
    }
    out
}

/// Ours (scenario 1) against Karpenter alone (scenario 4): (longest pending, pending-pod-seconds)
/// for each, when both ran.
pub fn comparison(
    all: &BTreeMap<String, ScenarioResult>,
) -> Option<(PendingFigures, PendingFigures)> {
    Some((all.get("1")?.pending?, all.get("4")?.pending?))
}

/// Seconds with the precision they have: 0.04, 1.3, 683.
fn f1(x: f64) -> String {
    if x.abs() < 1.0 {
        format!("{x:.2}")
    } else if x.abs() < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

fn pct_lower(ours: f64, theirs: f64) -> String {
    if theirs <= 0.0 {
        return "n/a".into();
    }
    format!("{:.1}%", 100.0 * (theirs - ours) / theirs)
}

fn fig(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => n.as_f64().map(f1).unwrap_or_else(|| n.to_string()),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn render(run: &RunInfo, all: &BTreeMap<String, ScenarioResult>) -> String {
    let mut d = String::new();
    let fs = &run.full_stack;
    let _ = writeln!(
        d,
        "<!-- generated by the full-stack tier (tests/fullstack.rs, tests/fullstack/report.rs) from \
         its last run; do not edit: run `bash tests/all.sh` (its last step) or see \
         tests/k8s-harness/README.md -->"
    );
    let _ = writeln!(d, "# Validation against the real Karpenter\n");
    let _ = writeln!(
        d,
        "Figures of the last full-stack run: a real kube-apiserver, kube-scheduler and \
         kube-controller-manager (Kubernetes v1.35.8), KWOK v0.8.0 as the kubelet, and \
         Karpenter v1.14.1 with its KWOK cloud provider, all built from Go modules and run on \
         127.0.0.1 (`tests/k8s-harness`, `up --full-stack`). The workloads are real Deployments \
         with PodDisruptionBudgets; `noderotation run` is the release binary's code, as the \
         least-privilege RBAC of `deploy/`.\n"
    );
    let finished = all.values().map(|r| r.finished_at.as_str()).max().unwrap_or("-");
    let _ = writeln!(d, "Run `{}`, last scenario finished {finished}.\n", run.run_id);

    // ---- the headline -----------------------------------------------------------------------
    let _ = writeln!(d, "## Ours vs Karpenter alone (scenario 1 vs scenario 4)\n");
    match comparison(all) {
        Some((ours, alone)) => {
            let _ = writeln!(
                d,
                "The same NodePool (expireAfter {}, one instance type, one zone) and the same \
                 workload (a Deployment of 3 pods of 1200m CPU that fills one node, PDB \
                 maxUnavailable 1). Pending = a workload pod that exists and is not yet Running.\n",
                all["1"].settings.get("expireAfter").map(String::as_str).unwrap_or("?")
            );
            let _ = writeln!(d, "| | noderotation (1) | Karpenter alone (4) | ours lower by |");
            let _ = writeln!(d, "|---|---:|---:|---:|");
            let _ = writeln!(
                d,
                "| longest time one workload pod was Pending | {} s | {} s | {} s ({}) |",
                f1(ours.longest_pending_seconds),
                f1(alone.longest_pending_seconds),
                f1(alone.longest_pending_seconds - ours.longest_pending_seconds),
                pct_lower(ours.longest_pending_seconds, alone.longest_pending_seconds)
            );
            let _ = writeln!(
                d,
                "| pending-pod-seconds (sum over pods) | {} | {} | {} ({}) |",
                f1(ours.pending_pod_seconds),
                f1(alone.pending_pod_seconds),
                f1(alone.pending_pod_seconds - ours.pending_pod_seconds),
                pct_lower(ours.pending_pod_seconds, alone.pending_pod_seconds)
            );
            let _ = writeln!(
                d,
                "| workload pods that were Pending | {} | {} | |",
                ours.pending_pods, alone.pending_pods
            );
            let _ = writeln!(
                d,
                "| fewest Running workload pods (of 3) | {} | {} | |\n",
                ours.min_running, alone.min_running
            );
            let lower = ours.longest_pending_seconds < alone.longest_pending_seconds
                && ours.pending_pod_seconds < alone.pending_pod_seconds;
            let _ = writeln!(
                d,
                "{}\n",
                if lower {
                    "Ours is lower on both figures: the evicted pods found the surge node already \
                     Ready and its room free (the placeholder goes with the old claim's delete), \
                     while with Karpenter alone they wait for a node to be launched and registered."
                } else {
                    "**Ours is NOT lower on both figures in this run** (the test asserting it \
                     failed); see the scenario sections."
                }
            );
        }
        None => {
            let _ = writeln!(d, "Scenarios 1 and 4 did not both run in this run.\n");
        }
    }

    // ---- assumptions ------------------------------------------------------------------------
    let _ = writeln!(d, "## What the controller assumes, against the real Karpenter\n");
    let _ = writeln!(d, "| assumption | held? | evidence |");
    let _ = writeln!(d, "|---|---|---|");
    let num = |id: &str, key: &str| -> Option<f64> {
        all.get(id)?.figures.iter().find(|(k, _)| k.starts_with(key)).and_then(|(_, v)| v.as_f64())
    };
    let row = |d: &mut String, what: &str, held: Option<bool>, evidence: String| {
        let verdict = match held {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not run",
        };
        let _ = writeln!(d, "| {what} | {verdict} | {evidence} |");
    };
    let s1_launched = num("1", "claims_launched");
    row(
        &mut d,
        "Karpenter provisions a node for the placeholder (provisioned path)",
        s1_launched.map(|n| n >= 1.0),
        format!(
            "scenario 1: {} claim(s) launched after the start, surge wait {} s",
            s1_launched.map(|n| format!("{n:.0}")).unwrap_or("?".into()),
            num("1", "surge_wait").map(f1).unwrap_or("?".into())
        ),
    );
    row(
        &mut d,
        "Spare capacity absorbs the placeholder; no node is launched",
        num("2", "claims_launched").map(|n| n == 0.0),
        format!(
            "scenario 2: {} claims launched",
            num("2", "claims_launched").map(|n| format!("{n:.0}")).unwrap_or("?".into())
        ),
    );
    let min_running = |id: &str| all.get(id).and_then(|r| r.pending).map(|p| p.min_running);
    let shown = |v: Option<usize>| v.map(|n| n.to_string()).unwrap_or("?".into());
    row(
        &mut d,
        "Our NodeClaim delete drains through the voluntary path (PDB maxUnavailable 1 respected)",
        match (min_running("1"), min_running("3")) {
            (Some(a), Some(b)) => Some(a >= 2 && b >= 2),
            _ => None,
        },
        format!(
            "fewest Running of 3: {} (scenario 1), {} (scenario 3, surge-less)",
            shown(min_running("1")),
            shown(min_running("3"))
        ),
    );
    row(
        &mut d,
        "The rotation finishes before the forced expiry",
        num("1", "deadline_margin").map(|m| m > 0.0),
        format!(
            "scenario 1: {} s to spare",
            num("1", "deadline_margin").map(f1).unwrap_or("?".into())
        ),
    );
    row(
        &mut d,
        "A claim too close to its deadline is deleted surge-less inside the window",
        num("3", "deleted_before_deadline").map(|m| m > 0.0),
        format!(
            "scenario 3: deleted {} s before the deadline (t_rot {} s), no placeholder",
            num("3", "deleted_before_deadline").map(f1).unwrap_or("?".into()),
            num("3", "t_rot").map(f1).unwrap_or("?".into())
        ),
    );
    row(
        &mut d,
        "do-not-disrupt keeps consolidation off the surge pair",
        // Recorded only after its assertions held.
        all.get("5").map(|_| true),
        format!(
            "scenario 5: consolidation possible for {} s, DisruptionBlocked on the surge node",
            num("5", "pressure_held").map(f1).unwrap_or("?".into())
        ),
    );
    row(
        &mut d,
        "maxUnavailable 2 rotates two nodes of a pool at once, each onto its own surge node",
        num("6", "max_in_flight").map(|n| n >= 2.0),
        format!(
            "scenario 6: {} rotations in flight at once, {} claims launched, {} s to spare",
            num("6", "max_in_flight").map(|n| format!("{n:.0}")).unwrap_or("?".into()),
            num("6", "claims_launched").map(|n| format!("{n:.0}")).unwrap_or("?".into()),
            num("6", "deadline_margin").map(f1).unwrap_or("?".into())
        ),
    );
    row(
        &mut d,
        "A drain held by its PDB launches no second node and leaves no empty node (the placeholder \
         goes with the delete, docs/decisions/placeholder-release.md)",
        num("7", "claims_launched")
            .zip(num("7", "empty_nodes_left"))
            .map(|(launched, empty)| launched <= 1.0 && empty == 0.0),
        format!(
            "scenario 7: drain held {} s, {} claim(s) launched, {} empty node(s) left",
            num("7", "drain_held").map(f1).unwrap_or("?".into()),
            num("7", "claims_launched").map(|n| format!("{n:.0}")).unwrap_or("?".into()),
            num("7", "empty_nodes_left").map(|n| format!("{n:.0}")).unwrap_or("?".into())
        ),
    );
    let launched: Vec<(String, f64)> = ["1", "5", "7"]
        .iter()
        .filter_map(|id| Some((id.to_string(), num(id, "claims_launched")?)))
        .collect();
    row(
        &mut d,
        "The surge node is the only node Karpenter launches for a rotation",
        (!launched.is_empty()).then(|| launched.iter().all(|(_, n)| *n <= 1.0)),
        launched
            .iter()
            .map(|(id, n)| format!("scenario {id}: {n:.0} launched"))
            .collect::<Vec<_>>()
            .join(", ")
            + if launched.iter().any(|(_, n)| *n > 1.0) {
                " (see **Extra claim** below)"
            } else {
                ""
            },
    );
    let _ = writeln!(d);

    // ---- findings -----------------------------------------------------------------------------
    let extra: Vec<&str> = all
        .values()
        .filter(|r| r.observations.iter().any(|o| o.contains("**Extra claim.**")))
        .map(|r| r.scenario.as_str())
        .collect();
    if !extra.is_empty() {
        let _ = writeln!(
            d,
            "## Finding: Karpenter can launch a second node for the pods of the node we delete\n"
        );
        let _ = writeln!(
            d,
            "Seen in scenario(s) {}. Karpenter v1.14.1's provisioner also schedules the pods of \
             NodeClaims being deleted (`pkg/controllers/provisioning/provisioner.go`, `Schedule`: \
             `nodes.Deleting().CurrentlyReschedulablePods(...)`: every pod a PDB does not fully \
             block) against the existing nodes, without simulating preemption. The controller \
             deletes the placeholder before the old claim so that the surge node's room is free \
             in that simulation (docs/decisions/placeholder-release.md); an extra claim here \
             means Karpenter still saw the placeholder, or another pod took the room. Cost: one \
             extra node per such rotation, kept for good with `consolidateAfter: Never`.\n",
            extra.join(", ")
        );
    }

    // ---- per scenario -----------------------------------------------------------------------
    let _ = writeln!(d, "## Scenarios\n");
    let _ = writeln!(d, "| # | scenario | result | wall time |");
    let _ = writeln!(d, "|---|---|---|---:|");
    for (id, title) in SCENARIOS {
        match all.get(id) {
            Some(r) => {
                let _ = writeln!(d, "| {id} | {title} | passed | {} s |", f1(r.wall_seconds));
            }
            None => {
                let _ = writeln!(d, "| {id} | {title} | not run (or failed) | |");
            }
        }
    }
    let _ = writeln!(d);
    for (id, title) in SCENARIOS {
        let Some(r) = all.get(id) else { continue };
        let _ = writeln!(d, "### {id}. {title}\n");
        if !r.settings.is_empty() {
            let s: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k} `{v}`")).collect();
            let _ = writeln!(d, "Settings: {}.\n", s.join(", "));
        }
        let _ = writeln!(d, "| figure | value |");
        let _ = writeln!(d, "|---|---:|");
        if let Some(p) = r.pending {
            let _ =
                writeln!(d, "| longest workload Pending (s) | {} |", f1(p.longest_pending_seconds));
            let _ = writeln!(d, "| pending-pod-seconds | {} |", f1(p.pending_pod_seconds));
            let _ = writeln!(d, "| workload pods that were Pending | {} |", p.pending_pods);
            let _ = writeln!(d, "| fewest Running workload pods | {} |", p.min_running);
        }
        for (k, v) in &r.figures {
            let _ = writeln!(d, "| {} | {} |", k.replace('_', " "), fig(v));
        }
        let _ = writeln!(d);
        if !r.observations.is_empty() {
            let _ = writeln!(d, "Observed:\n");
            for o in &r.observations {
                let _ = writeln!(d, "- {o}");
            }
            let _ = writeln!(d);
        }
    }

    // ---- the stack ---------------------------------------------------------------------------
    let _ = writeln!(d, "## The stack\n");
    let _ = writeln!(
        d,
        "KWOK nodes register {} after Karpenter launches them (the KWOKNodeClass \
         `nodeRegistrationDelay`, standing in for a cloud's boot time; \
         `NODEROTATION_FULL_STACK_REGISTRATION_DELAY`). Karpenter runs with \
         BATCH_IDLE_DURATION=1s, BATCH_MAX_DURATION=5s. Instance type `c-4x-amd64-linux` \
         (4 CPU, 3900m allocatable), zone `test-zone-a`, on-demand.\n",
        run.registration_delay
    );
    if let Some(m) = fs["startupSeconds"].as_object() {
        let parts: Vec<String> =
            m.iter().map(|(k, v)| format!("{k} {} s", v.as_str().unwrap_or("?"))).collect();
        let _ =
            writeln!(d, "Startup of the components after the apiserver: {}.\n", parts.join(", "));
    }
    for (value, what) in [
        (&run.build_seconds, "build (build.sh --full-stack) in this run"),
        (&run.start_seconds, "start.sh --full-stack until ready"),
    ] {
        if let Some(v) = value {
            let _ = writeln!(d, "- {what}: {v} s");
        }
    }
    d
}

// ---- the fleet run ---------------------------------------------------------------------------

const FLEET_START: &str = "<!-- fleet run: start -->";
const FLEET_END: &str = "<!-- fleet run: end -->";

fn checked_in() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation.md")
}

/// The fleet part of a document, markers included.
fn fleet_block(doc: &str) -> Option<&str> {
    let start = doc.find(FLEET_START)?;
    let end = doc[start..].find(FLEET_END)? + start + FLEET_END.len();
    Some(&doc[start..end])
}

/// `doc` with its fleet part replaced by `block` (appended when it has none).
fn splice_fleet(doc: &str, block: &str) -> String {
    match fleet_block(doc) {
        Some(old) => doc.replacen(old, block, 1),
        None if block.is_empty() => doc.to_string(),
        None => format!("{}\n\n{block}\n", doc.trim_end()),
    }
}

/// Stores the fleet run and renders its part of the document: into `docs/validation.md` when it
/// ran the scenario's whole span, else next to the results (CI's shorter run).
pub fn record_fleet(stack: &Stack, result: &crate::fleet::FleetResult, whole: bool) {
    let dir = results_dir(&stack.run_id);
    let _ = std::fs::create_dir_all(&dir);
    // Only a whole run is named fleet.json: the re-render reads the newest of those.
    let file = if whole { "fleet.json" } else { "fleet-short.json" };
    if let Ok(text) = serde_json::to_string_pretty(result) {
        let _ = std::fs::write(dir.join(file), text);
    }
    let target = if whole { checked_in() } else { dir.join("validation-fleet.md") };
    match write_fleet(&target, result) {
        Ok(()) => eprintln!("fleet figures written to {}", target.display()),
        Err(e) => eprintln!("cannot write {}: {e}", target.display()),
    }
}

/// Re-renders the fleet part of `docs/validation.md` from the newest whole run's `fleet.json`
/// (the simulator's column is recomputed).
pub fn rerender_fleet() -> Option<PathBuf> {
    let newest = newest_run_with("fleet.json")?;
    let text = std::fs::read_to_string(newest.join("fleet.json")).ok()?;
    let result: crate::fleet::FleetResult = serde_json::from_str(&text).ok()?;
    write_fleet(&checked_in(), &result).ok()?;
    Some(checked_in())
}

/// Renders `result` (with the simulator's prediction) into the fleet part of `target`.
fn write_fleet(target: &Path, result: &crate::fleet::FleetResult) -> std::io::Result<()> {
    let block = render_fleet(result, &simulated(result.span_seconds));
    let doc = std::fs::read_to_string(target).unwrap_or_default();
    std::fs::write(target, splice_fleet(&doc, &block))
}

/// Claims the fleet scenario starts with (the simulator counts them as created).
fn initial_claims() -> f64 {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(crate::fleet::SCENARIO_FILE);
    noderotation::sim::scenario::Scenario::load(&path)
        .map(|s| s.pools.iter().map(|p| f64::from(p.nodes + p.spare_nodes)).sum())
        .unwrap_or(0.0)
}

/// Seeds the simulator runs for its prediction.
const SIM_SEEDS: u64 = 10;

/// The simulator's figures for the fleet scenario over `span_seconds`, one JSON document per
/// seed (`noderotation simulate -o json`: ours and Karpenter alone).
fn simulated(span_seconds: f64) -> Vec<Value> {
    let weeks = span_seconds / (7.0 * 86400.0);
    (1..=SIM_SEEDS)
        .filter_map(|seed| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_noderotation"))
                .args(["simulate", "--scenario"])
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(crate::fleet::SCENARIO_FILE))
                .args(["--seed", &seed.to_string(), "--weeks", &format!("{weeks:.9}")])
                .args(["-o", "json"])
                .output()
                .ok()?;
            serde_json::from_slice(&out.stdout).ok()
        })
        .collect()
}

/// One figure: the mean over the simulated seeds, and their range.
fn sim_figure(sims: &[Value], side: &str, f: &dyn Fn(&Value) -> Option<f64>) -> Option<[f64; 3]> {
    let xs: Vec<f64> = sims.iter().filter_map(|s| f(&s[side])).collect();
    if xs.is_empty() {
        return None;
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some([mean, lo, hi])
}

/// `real` against the simulator's mean: the relative difference, when it means something.
fn relative(real: f64, sim: f64) -> Option<f64> {
    let scale = real.abs().max(sim.abs());
    (scale > 0.0).then(|| (real - sim).abs() / scale)
}

pub fn render_fleet(r: &crate::fleet::FleetResult, sims: &[Value]) -> String {
    use crate::fleet::Side;
    let mut d = String::new();
    let _ = writeln!(d, "{FLEET_START}");
    let _ = writeln!(
        d,
        "<!-- generated by the fleet run (tests/fullstack/fleet.rs, tests/fullstack/report.rs): \
         tests/k8s-harness/fleet.sh -->"
    );
    let _ = writeln!(d, "## Fleet run: noderotation and Karpenter alone, and the simulator\n");
    let _ = writeln!(
        d,
        "The fleet of `{}` on the full stack: its pools twice, once under noderotation and \
         once beside them under Karpenter alone, for {:.1} minutes (run `{}`, finished {}). \
         The simulator column is `noderotation simulate` on the same file over the same span: \
         the mean of seeds 1-{} and their range.\n",
        crate::fleet::SCENARIO_FILE,
        r.span_seconds / 60.0,
        r.run_id,
        r.finished_at,
        sims.len()
    );
    let s: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k} `{v}`")).collect();
    let _ = writeln!(d, "Settings: {}.\n", s.join(", "));
    let _ = writeln!(
        d,
        "Starting claim ages when the run began: {} to {} s.\n",
        f1(r.starting_age_seconds[0]),
        f1(r.starting_age_seconds[1])
    );
    type Real = fn(&Side) -> Option<f64>;
    type Sim = Box<dyn Fn(&Value) -> Option<f64>>;
    // The simulator counts the starting claims among the created ones.
    let initial = initial_claims();
    let launched = move |v: &Value| Some(v["claimsCreated"].as_f64()? - initial);
    let per_rotation = move |v: &Value| {
        let n = v["rotationsStarted"].as_f64()? + v["forcedExpiries"].as_f64()?;
        (n > 0.0).then(|| launched(v).unwrap_or(0.0) / n)
    };
    let key = |k: &'static str| -> Sim { Box::new(move |v: &Value| v[k].as_f64()) };
    let rows: [(&str, Real, Sim); 9] = [
        ("rotations started", |s| Some(s.rotations_started as f64), key("rotationsStarted")),
        ("forced expiries", |s| Some(s.forced_expiries as f64), key("forcedExpiries")),
        ("nodes replaced", |s| Some(s.replacements as f64), key("replacements")),
        ("claims launched", |s| Some(s.claims_launched as f64), Box::new(launched)),
        (
            "claims launched per rotation or expiry",
            |s| {
                let n = s.rotations_started + s.forced_expiries;
                (n > 0).then(|| s.claims_launched as f64 / n as f64)
            },
            Box::new(per_rotation),
        ),
        ("pending-pod-seconds", |s| Some(s.pending_pod_seconds), key("pendingPodSeconds")),
        (
            "longest workload Pending (s)",
            |s| Some(s.longest_pending_seconds),
            key("longestPendingSeconds"),
        ),
        (
            "overlap node-minutes",
            |s| Some(s.overlap_node_minutes),
            Box::new(|v| v["overlapNodeHours"].as_f64().map(|h| h * 60.0)),
        ),
        (
            "replacements inside windows (%)",
            |s| {
                (s.replacements > 0)
                    .then(|| 100.0 * s.replacements_in_window as f64 / s.replacements as f64)
            },
            Box::new(|v| v["inWindowShare"].as_f64().map(|x| 100.0 * x)),
        ),
    ];
    let _ = writeln!(
        d,
        "| figure | noderotation: real | simulator | Karpenter alone: real | simulator |"
    );
    let _ = writeln!(d, "|---|---:|---:|---:|---:|");
    let mut worst: Option<(f64, String)> = None;
    let cell = |x: Option<[f64; 3]>| match x {
        Some([m, lo, hi]) if (hi - lo).abs() < 1e-9 => f1(m),
        Some([m, lo, hi]) => format!("{} ({}-{})", f1(m), f1(lo), f1(hi)),
        None => "-".into(),
    };
    for (name, real, sim) in rows {
        let (ro, ra) = (real(&r.ours), real(&r.alone));
        let (so, sa) = (sim_figure(sims, "ours", &*sim), sim_figure(sims, "karpenterAlone", &*sim));
        for (side, re, si) in [("noderotation", ro, so), ("Karpenter alone", ra, sa)] {
            if let (Some(re), Some([m, _, _])) = (re, si)
                && let Some(rel) = relative(re, m)
                && worst.as_ref().is_none_or(|(w, _)| rel > *w)
            {
                worst =
                    Some((rel, format!("{name}, {side}: real {} vs simulated {}", f1(re), f1(m))));
            }
        }
        let _ = writeln!(
            d,
            "| {name} | {} | {} | {} | {} |",
            ro.map_or("-".into(), f1),
            cell(so),
            ra.map_or("-".into(), f1),
            cell(sa)
        );
    }
    let _ = writeln!(d);
    if let Some((rel, what)) = worst {
        let _ = writeln!(
            d,
            "Largest relative difference (|real - simulated| / the larger): **{:.0}%**, {what}.\n",
            100.0 * rel
        );
    }
    let _ = writeln!(
        d,
        "**Where they differ, and why.** The decisions match: which nodes are rotated, that \
         none reaches its forced expiry, one claim per rotation (the rotations still in flight \
         when the run ends have launched theirs). The simulator models what makes Karpenter \
         alone cost what it does on the real cluster: the drain evicts through the PDB \
         (`pdb: {{maxUnavailable: 1}}` in the scenario), one pod of a pool's workload at a \
         time, and Karpenter provisions for the pods of a node as soon as its claim is being \
         deleted. An expiring node is therefore drained over as long as its replacement takes \
         to come up: about one pod per pool waits, for about a node's boot time, and the old \
         and new nodes overlap for the whole drain, in both columns. What it does not model:\n\n\
         - Under noderotation the replacement is Ready before the delete; an evicted pod waits \
         only for the scheduler and the PDB, a fraction of a second per pod in the real run and \
         no time in the simulator, which binds at once. The relative difference of those \
         pending figures is large, of almost nothing.\n\
         - When the batches start. The simulated controller is woken as the real one is (its \
         own writes, Karpenter's status updates and Ready nodes, through the same mapping and \
         queue: `docs/decisions/trigger-seam.md`), so a pool's free slots fill in one instant \
         and its rotations run in batches of `maxUnavailable`. The simulated world has no \
         jitter: every batch of a pool starts, boots and drains in lockstep, and the span \
         ends just before the next one starts, where the real run had started it. Nodes \
         replaced match; rotations started and claims launched come out one batch per pool \
         lower.\n\
         - Which node a placeholder takes. kube-scheduler's queue retries pending \
         placeholders in about the order they were created; the simulated scheduler binds \
         them in name order, so a placeholder can take a node launched for another one, \
         already on its way (recorded as absorbed; none on seed 1 of this scenario, where \
         each batch's placeholders are created together and each gets a node of its own).\n\n\
         The tolerance claimed: forced expiries and claims launched per rotation or expiry \
         within 10 %; nodes replaced within 15 %; under Karpenter alone, pending-pod-seconds, \
         the longest Pending and the overlap within 30 %. Rotations started also depends on \
         where the span cuts: a batch that starts just before the end in one run and just \
         after it in the other moves it by up to `maxUnavailable` per pool. Under noderotation \
         no pod waits for a node in either, and the pending figures are not compared as \
         ratios.\n"
    );
    let _ = writeln!(d, "Delays measured in the real run (min / median / max, seconds):\n");
    for (what, o, a) in [
        (
            "claim created -> node registered",
            r.ours.registration_seconds,
            r.alone.registration_seconds,
        ),
        ("claim deleted -> gone (drain)", r.ours.drain_seconds, r.alone.drain_seconds),
    ] {
        let fmt = |x: Option<[f64; 3]>| {
            x.map_or("-".into(), |[a, b, c]| format!("{} / {} / {}", f1(a), f1(b), f1(c)))
        };
        let _ = writeln!(d, "- {what}: noderotation {}; Karpenter alone {}", fmt(o), fmt(a));
    }
    let _ = writeln!(d);
    let _ = writeln!(d, "Per pool (real):\n");
    let _ = writeln!(
        d,
        "| pool | forced expiries | replaced | claims launched | longest Pending (s) |"
    );
    let _ = writeln!(d, "|---|---:|---:|---:|---:|");
    for p in [&r.ours, &r.alone] {
        for (name, f) in &p.per_pool {
            let _ = writeln!(
                d,
                "| {name} | {} | {} | {} | {} |",
                f.forced_expiries,
                f.replacements,
                f.claims_launched,
                f1(f.longest_pending_seconds)
            );
        }
    }
    let _ = writeln!(d);
    for o in &r.observations {
        let _ = writeln!(d, "- {o}");
    }
    let _ = write!(d, "{FLEET_END}");
    d
}
