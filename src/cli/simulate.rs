//! `noderotation simulate`: the built-in fleet (or `--scenario`) over weeks of virtual time,
//! next to Karpenter alone; `--seeds N` for invariant sweeps with `--faults`.
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, anyhow};
use chrono::Duration;

use crate::cli::plan::OutputFormat;
use crate::engine::Engine;
use crate::sim::metrics::{Figures, table};
use crate::sim::scenario::{Compiled, Scenario};
use crate::sim::{Options, RunResult, report, run};

#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (fleet, policies, delays, operator script); default: the built-in fleet
    /// (deploy/examples/scenarios/default.yaml).
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// The seed: one seed, one exact history.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated weeks (default: the scenario's, 8 for the built-in fleet).
    #[arg(long)]
    pub weeks: Option<f64>,
    /// Inject faults: crashes, leader changes, passes stalled while the standby takes the
    /// Lease, conflicts, transient errors, cache lag, late or lost wake-ups, provisioning that
    /// never completes, stuck drains, preemptions.
    #[arg(long)]
    pub faults: bool,
    /// Run this many seeds (from --seed on) and report invariant violations and throughput.
    #[arg(long, value_name = "N")]
    pub seeds: Option<u64>,
    /// Run a copy of the rules instead of the embedded ones.
    #[arg(long, value_name = "DIR")]
    pub rules: Option<PathBuf>,
    /// Write a self-contained HTML report (timeline per pool, summary table).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Print every change as it happens (time, actor, object, change).
    #[arg(long)]
    pub trace: bool,
    /// Skip the Karpenter-alone baseline.
    #[arg(long)]
    pub no_baseline: bool,
    /// Worker threads for --seeds (default: all cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Output format: `json` (or `yaml`) prints one document with the figures of the run (ours,
    /// Karpenter alone, per pool) or, with --seeds, of every seed, for sweeps and scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Human)]
    pub output: OutputFormat,
}

/// The figures of one run as JSON: the summary table's numbers, and the same per pool.
pub fn figures_json(f: &Figures) -> serde_json::Value {
    let mut v = serde_json::json!({
        "rotationsStarted": f.attempts,
        "maxInFlight": f.max_in_flight,
        "outcomes": camel_keys(&f.outcomes),
        "surgePaths": camel_keys(&f.paths),
        "replacements": f.replacements,
        "replacementsInWindow": f.replacements_in_window,
        "inWindowShare": f.in_window_share(),
        "forcedExpiries": f.forced_expiries,
        "minMarginSeconds": f.min_margin.map(|d| d.num_seconds()),
        "lifetimeUsedMean": f.lifetime_used_mean(),
        "lifetimeUsedMin": f.lifetime_used_min,
        "pendingPodSeconds": f.pending_pod_seconds,
        "longestPendingSeconds": f.longest_pending_seconds,
        "overlapNodeHours": f.overlap_node_hours,
    });
    if let Some((lo, hi)) = f.lanes_chosen {
        v["maxUnavailableAuto"] = serde_json::json!({"fewest": lo, "most": hi});
    }
    if !f.per_pool.is_empty() {
        v["writes"] = f.writes.into();
        v["events"] = f.events.into();
        v["gets"] = f.reads.into();
        v["claimsCreated"] = f.claims_created.into();
        v["evictions"] = f.evictions.into();
        v["worldFaults"] = serde_json::json!(f.world_faults);
        v["pools"] = f.per_pool.iter().map(|(name, p)| (name.clone(), figures_json(p))).collect();
    }
    v
}

/// A count per name, the names in camelCase as every key of the JSON output (`in flight` is
/// `inFlight`).
fn camel_keys(counts: &std::collections::BTreeMap<&'static str, u64>) -> serde_json::Value {
    counts
        .iter()
        .map(|(name, n)| {
            let mut words = name.split([' ', '_']);
            let mut key = words.next().unwrap_or_default().to_string();
            for w in words {
                let mut c = w.chars();
                key.extend(c.next().map(|f| f.to_ascii_uppercase()));
                key.push_str(c.as_str());
            }
            (key, serde_json::Value::from(*n))
        })
        .collect()
}

fn violations_json(args: &SimulateArgs, r: &RunResult) -> serde_json::Value {
    r.violations
        .iter()
        .map(|v| {
            serde_json::json!({
                "invariant": v.invariant,
                "at": v.time.to_rfc3339(),
                "detail": v.detail,
                "replay": replay_command(args, r.seed),
            })
        })
        .collect()
}

/// The command line that replays one seed.
pub(crate) fn replay_command(args: &SimulateArgs, seed: u64) -> String {
    let mut cmd = format!("noderotation simulate --seed {seed}");
    if let Some(s) = &args.scenario {
        cmd.push_str(&format!(" --scenario {}", s.display()));
    }
    if let Some(w) = args.weeks {
        cmd.push_str(&format!(" --weeks {w}"));
    }
    if args.faults {
        cmd.push_str(" --faults");
    }
    if let Some(r) = &args.rules {
        cmd.push_str(&format!(" --rules {}", r.display()));
    }
    cmd.push_str(" --trace");
    cmd
}

fn load(args: &SimulateArgs) -> anyhow::Result<(Arc<Compiled>, Arc<Engine>, Duration)> {
    let scenario = match &args.scenario {
        Some(path) => Scenario::load(path)?,
        None => Scenario::default_fleet()?,
    };
    let plan = scenario.compile().context("scenario")?;
    let engine = match &args.rules {
        Some(dir) => Engine::load_dir(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?,
        None => Engine::embedded().clone(),
    };
    let span = match (args.weeks, plan.span) {
        (None, Some(span)) => span,
        (weeks, _) => {
            let weeks = weeks.unwrap_or(f64::from(plan.weeks));
            if !(weeks > 0.0 && weeks <= 520.0) {
                anyhow::bail!("--weeks: between 0 and 520");
            }
            Duration::seconds((weeks * 7.0 * 86400.0) as i64)
        }
    };
    Ok((Arc::new(plan), Arc::new(engine), span))
}

/// Prints a violation with its trace and the replay command.
pub(crate) fn print_violation(out: &mut String, args: &SimulateArgs, r: &RunResult, full: bool) {
    use std::fmt::Write as _;
    for (i, v) in r.violations.iter().enumerate() {
        if i > 0 && !full {
            let _ = writeln!(out, "  (+{} more violations in this seed)", r.violations.len() - 1);
            break;
        }
        let _ = writeln!(
            out,
            "VIOLATION {} (seed {}, at {})\n  {}",
            v.invariant,
            r.seed,
            v.time.format("%Y-%m-%dT%H:%M:%SZ"),
            v.detail
        );
        let _ = writeln!(out, "  trace (time, actor, object, change):");
        for e in &v.trace {
            let _ = writeln!(out, "    {e}");
        }
        let _ = writeln!(out, "  replay: {}", replay_command(args, r.seed));
    }
}

struct Progress {
    tty: bool,
    last: Mutex<i64>,
}

impl Progress {
    fn new() -> Progress {
        Progress { tty: std::io::stderr().is_terminal(), last: Mutex::new(-1) }
    }

    fn show(&self, label: &str, fraction: f64) {
        let pct = (fraction * 100.0).floor() as i64;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if self.tty {
            if pct != *last {
                let filled = usize::try_from(pct / 4).unwrap_or(0).min(25);
                eprint!("\r{label} [{}{}] {pct:>3}%", "#".repeat(filled), " ".repeat(25 - filled));
                let _ = std::io::stderr().flush();
            }
        } else if pct / 5 != *last / 5 || *last < 0 {
            eprintln!("{label} {pct}%");
        }
        *last = pct;
    }

    fn done(&self) {
        if self.tty {
            eprint!("\r{}\r", " ".repeat(60));
        }
    }
}

pub fn simulate(args: &SimulateArgs) -> anyhow::Result<i32> {
    let (plan, engine, span) = load(args)?;
    if let Some(n) = args.seeds {
        return sweep(args, plan, engine, span, n);
    }
    let wall = Instant::now();
    let progress = Progress::new();
    let opts = Options {
        seed: args.seed,
        span,
        faults: args.faults,
        controller: true,
        engine: Arc::clone(&engine),
        trace: args.trace,
        stop_on_violation: false,
    };
    let ours = run(Arc::clone(&plan), &opts, &mut |f| progress.show("simulating", f * 0.8));
    let ours_wall = wall.elapsed();
    let alone: Option<Figures> = (!args.no_baseline).then(|| {
        let opts = Options { controller: false, trace: false, ..opts.clone() };
        run(Arc::clone(&plan), &opts, &mut |f| progress.show("simulating", 0.8 + f * 0.2)).figures
    });
    progress.done();
    let elapsed = wall.elapsed();
    if args.output.is_document() {
        if let Some(path) = &args.report {
            let html = report::html(&plan, &ours, alone.as_ref());
            std::fs::write(path, html)
                .with_context(|| format!("{}: cannot write", path.display()))?;
        }
        let doc = serde_json::json!({
            "scenario": plan.name,
            "seed": args.seed,
            "faults": args.faults,
            "start": plan.start.to_rfc3339(),
            "spanSeconds": span.num_seconds(),
            "ours": figures_json(&ours.figures),
            "karpenterAlone": alone.as_ref().map(figures_json),
            "controller": {
                "passes": ours.passes,
                "restarts": ours.restarts,
                "leaderChanges": ours.leader_changes,
                "steps": ours.steps,
            },
            "violations": violations_json(args, &ours),
        });
        super::write_stdout(&args.output.document(&doc)?.unwrap_or_default())?;
        return Ok(if ours.violations.is_empty() { 0 } else { 1 });
    }
    let pools: Vec<String> = plan
        .pools
        .iter()
        .map(|p| {
            format!(
                "{} ({} nodes, E={}, tGP={})",
                p.name,
                p.base_count(),
                p.expire_after_go,
                p.tgp_go.as_deref().unwrap_or("unset")
            )
        })
        .collect();
    println!(
        "noderotation simulate: scenario {:?}, seed {}, {} of virtual time from {}, faults {}",
        plan.name,
        args.seed,
        crate::policy::duration::format_human(span),
        plan.start.format("%Y-%m-%d %H:%M UTC"),
        if args.faults { "on" } else { "off" }
    );
    println!("pools: {}", pools.join(", "));
    println!();
    print!("{}", table(&ours.figures, alone.as_ref()));
    println!();
    println!(
        "controller: {} passes, {} restarts, {} leader changes ({} with a stalled pass); {} simulated steps ({:.0} steps/s)",
        ours.passes,
        ours.restarts,
        ours.leader_changes,
        ours.stalled_passes,
        ours.steps,
        ours.steps as f64 / ours_wall.as_secs_f64().max(1e-9)
    );
    if args.faults {
        let hits: Vec<String> =
            ours.figures.world_faults.iter().map(|(class, n)| format!("{class} {n}")).collect();
        println!(
            "world faults injected: {}",
            if hits.is_empty() { "none".to_string() } else { hits.join(", ") }
        );
    }
    if let Some(path) = &args.report {
        let html = report::html(&plan, &ours, alone.as_ref());
        std::fs::write(path, html).with_context(|| format!("{}: cannot write", path.display()))?;
        println!("report: {}", path.display());
    }
    if ours.violations.is_empty() {
        println!("invariants {}: all hold", crate::sim::invariants::ALL);
    } else {
        let mut out = String::new();
        print_violation(&mut out, args, &ours, true);
        print!("{out}");
    }
    println!("elapsed: {:.2}s (wall)", elapsed.as_secs_f64());
    Ok(if ours.violations.is_empty() { 0 } else { 1 })
}

fn sweep(
    args: &SimulateArgs,
    plan: Arc<Compiled>,
    engine: Arc<Engine>,
    span: Duration,
    n: u64,
) -> anyhow::Result<i32> {
    let wall = Instant::now();
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()))
        .max(1)
        .min(usize::try_from(n).unwrap_or(1).max(1));
    let next = AtomicU64::new(0);
    let done = AtomicUsize::new(0);
    let steps = AtomicU64::new(0);
    let failed: Mutex<Vec<RunResult>> = Mutex::new(Vec::new());
    let json = args.output.is_document();
    let per_seed: Mutex<Vec<(u64, serde_json::Value)>> = Mutex::new(Vec::new());
    let fired: Mutex<std::collections::BTreeSet<String>> = Mutex::new(Default::default());
    let progress = Progress::new();
    if !json {
        println!(
            "noderotation simulate: scenario {:?}, seeds {}..{}, {} each, faults {}, {} workers",
            plan.name,
            args.seed,
            args.seed + n - 1,
            crate::policy::duration::format_human(span),
            if args.faults { "on" } else { "off" },
            jobs
        );
    }
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        break;
                    }
                    let opts = Options {
                        seed: args.seed + i,
                        span,
                        faults: args.faults,
                        controller: true,
                        engine: Arc::clone(&engine),
                        trace: false,
                        stop_on_violation: true,
                    };
                    let r = run(Arc::clone(&plan), &opts, &mut |_| {});
                    steps.fetch_add(r.steps, Ordering::SeqCst);
                    fired
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(r.coverage.iter().cloned());
                    if json {
                        let seed = serde_json::json!({
                            "seed": r.seed,
                            "ours": figures_json(&r.figures),
                            "violations": violations_json(args, &r),
                        });
                        per_seed.lock().unwrap_or_else(|e| e.into_inner()).push((r.seed, seed));
                    }
                    if !r.violations.is_empty() {
                        failed.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                    }
                    let d = done.fetch_add(1, Ordering::SeqCst) + 1;
                    progress.show(&format!("seeds {d}/{n}"), d as f64 / n as f64);
                }
            });
        }
    });
    progress.done();
    let elapsed = wall.elapsed().as_secs_f64();
    let mut failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    failed.sort_by_key(|r| r.seed);
    let steps = steps.load(Ordering::SeqCst);
    let fired = fired.into_inner().unwrap_or_else(|e| e.into_inner());
    let never: Vec<&str> = engine.row_ids().filter(|r| !fired.contains(*r)).collect();
    if json {
        let mut seeds = per_seed.into_inner().unwrap_or_else(|e| e.into_inner());
        seeds.sort_by_key(|(seed, _)| *seed);
        let seeds: Vec<serde_json::Value> = seeds.into_iter().map(|(_, v)| v).collect();
        let sum = |key: &str| -> u64 { seeds.iter().filter_map(|s| s["ours"][key].as_u64()).sum() };
        let (replacements, in_window) = (sum("replacements"), sum("replacementsInWindow"));
        let doc = serde_json::json!({
            "scenario": plan.name,
            "faults": args.faults,
            "spanSeconds": span.num_seconds(),
            "summary": {
                "seeds": n,
                "withViolations": failed.len(),
                "forcedExpiries": sum("forcedExpiries"),
                "replacements": replacements,
                "inWindowShare": (replacements > 0).then(|| in_window as f64 / replacements as f64),
                "minMarginSeconds": seeds.iter().filter_map(|s| s["ours"]["minMarginSeconds"].as_i64()).min(),
                "ruleRowsFired": engine.row_ids().count() - never.len(),
                "ruleRowsNever": never,
                "simulatedSteps": steps,
                "elapsedSeconds": elapsed,
            },
            "seeds": seeds,
        });
        super::write_stdout(&args.output.document(&doc)?.unwrap_or_default())?;
        return Ok(if failed.is_empty() { 0 } else { 1 });
    }
    let mut out = String::new();
    for r in &failed {
        print_violation(&mut out, args, r, false);
    }
    print!("{out}");
    println!(
        "{n} seeds: {} with violations; {steps} simulated steps in {elapsed:.1}s ({:.0} steps/s, {:.2} seeds/s)",
        failed.len(),
        steps as f64 / elapsed.max(1e-9),
        n as f64 / elapsed.max(1e-9)
    );
    println!(
        "rule rows fired: {}/{}{}",
        engine.row_ids().count() - never.len(),
        engine.row_ids().count(),
        if never.is_empty() { String::new() } else { format!("; never: {}", never.join(", ")) }
    );
    if !failed.is_empty() {
        let mut by: std::collections::BTreeMap<&str, Vec<u64>> = std::collections::BTreeMap::new();
        for r in &failed {
            if let Some(v) = r.violations.first() {
                by.entry(v.invariant).or_default().push(r.seed);
            }
        }
        for (inv, seeds) in by {
            let shown: Vec<String> = seeds.iter().take(12).map(u64::to_string).collect();
            println!(
                "  {inv}: {} seeds ({}{})",
                seeds.len(),
                shown.join(", "),
                if seeds.len() > 12 { ", ..." } else { "" }
            );
        }
    }
    Ok(if failed.is_empty() { 0 } else { 1 })
}
