//! Part 4: simulator speed. `noderotation simulate`'s built-in fleet (3 pools x 30 nodes, the
//! real controller, 8 weeks) run in-process, timed by wall clock and by this thread's CPU time.
use std::sync::Arc;
use std::time::{Duration, Instant};

use noderotation::engine::Engine;
use noderotation::sim::scenario::Scenario;
use noderotation::sim::{Options, run as simulate};

use crate::decision::thread_cpu;

pub struct Run {
    pub label: &'static str,
    pub weeks: f64,
    pub steps: u64,
    pub passes: u64,
    pub wall: Duration,
    pub cpu: Duration,
    pub violations: usize,
}

impl Run {
    pub fn steps_per_second(&self) -> f64 {
        self.steps as f64 / self.cpu.as_secs_f64().max(1e-9)
    }

    pub fn weeks_per_cpu_second(&self) -> f64 {
        self.weeks / self.cpu.as_secs_f64().max(1e-9)
    }
}

pub struct SimSpeed {
    pub runs: Vec<Run>,
}

fn one(label: &'static str, faults: bool, controller: bool) -> anyhow::Result<Run> {
    let plan = Arc::new(Scenario::default_fleet()?.compile()?);
    let weeks = f64::from(plan.weeks);
    let opts = Options {
        seed: 1,
        span: chrono::Duration::weeks(i64::from(plan.weeks)),
        faults,
        controller,
        engine: Arc::new(Engine::embedded().clone()),
        trace: false,
        stop_on_violation: false,
    };
    let (c0, t0) = (thread_cpu(), Instant::now());
    let r = simulate(plan, &opts, &mut |_| {});
    let (wall, cpu) = (t0.elapsed(), thread_cpu().saturating_sub(c0));
    eprintln!(
        "sim: {label}: {} steps, {} passes in {wall:.2?} ({cpu:.2?} CPU), {} violations",
        r.steps,
        r.passes,
        r.violations.len()
    );
    Ok(Run {
        label,
        weeks,
        steps: r.steps,
        passes: r.passes,
        wall,
        cpu,
        violations: r.violations.len(),
    })
}

pub fn run() -> anyhow::Result<SimSpeed> {
    Ok(SimSpeed {
        runs: vec![
            one("default fleet, controller", false, true)?,
            one("default fleet, controller, --faults", true, true)?,
            one("default fleet, Karpenter alone", false, false)?,
        ],
    })
}
