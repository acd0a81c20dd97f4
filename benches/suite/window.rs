//! Part 2: window efficiency. The simulation (`src/sim`, the real controller against the
//! simulated Karpenter, kubelet and scheduler) with fixed provisioning and drain delays and a
//! supply of candidates that never runs out; per window occurrence, the rotations that started
//! and completed inside it, against the ideal `floor(D / (t_prov + t_drain + cooldown))`.
use std::sync::Arc;

use chrono::Duration;
use noderotation::engine::Engine;
use noderotation::sim::metrics::Outcome;
use noderotation::sim::scenario::Scenario;
use noderotation::sim::{Options, run as simulate};

pub struct Case {
    pub name: &'static str,
    /// Claim created -> node Ready: provisioning + registration + ready.
    pub t_prov: Duration,
    pub t_drain: Duration,
    pub cooldown: Duration,
    /// The occurrence length.
    pub d: Duration,
    pub ideal: i64,
    /// Per occurrence: (started, completed inside it).
    pub occurrences: Vec<(usize, usize)>,
    /// Mean time between consecutive starts inside an occurrence.
    pub cycle: Option<Duration>,
    pub failures: usize,
}

impl Case {
    pub fn efficiency(&self) -> f64 {
        let completed: usize = self.occurrences.iter().map(|o| o.1).sum();
        let n = self.occurrences.len().max(1) as f64;
        completed as f64 / n / self.ideal.max(1) as f64
    }

    pub fn ideal_cycle(&self) -> Duration {
        self.t_prov + self.t_drain + self.cooldown
    }
}

pub struct Window {
    pub cases: Vec<Case>,
}

struct Spec {
    name: &'static str,
    provisioning: &'static str,
    registration: &'static str,
    ready: &'static str,
    drain: &'static str,
    cooldown: &'static str,
    nodes: u32,
}

fn secs(s: &str) -> Duration {
    noderotation::policy::duration::parse(s).unwrap_or_else(|_| Duration::zero())
}

fn scenario(s: &Spec) -> String {
    let limit = s.nodes + 10;
    format!(
        r#"
name: window-efficiency
description: one pool, every node a candidate, fixed delays
start: 2026-06-01T00:00:00Z
weeks: 4
pools:
  - name: fleet
    labels: {{rotation: nights}}
    nodes: {nodes}
    expireAfter: 14d
    terminationGracePeriod: 1h
    limits: {{cpu: "{cpu}", nodes: "{limit}"}}
    age: {{min: 2d, max: 5d}}
    consolidateAfter: Never
policies:
  - apiVersion: noderotation.io/v1alpha1
    kind: RotationPolicy
    metadata: {{name: nights}}
    spec:
      nodePoolSelector: {{matchLabels: {{rotation: nights}}}}
      ageThreshold: 24h
      maintenanceWindows:
        - {{timezone: Asia/Tokyo, days: [Wed, Sat], start: "02:00", end: "06:00"}}
      surge: {{readyTimeout: 15m, cooldownAfter: {cooldown}, retryBackoff: 30m}}
delays:
  provisioning: {prov}
  registration: {reg}
  ready: {ready}
  drain: {drain}
"#,
        nodes = s.nodes,
        cpu = limit * 4,
        cooldown = s.cooldown,
        prov = s.provisioning,
        reg = s.registration,
        ready = s.ready,
        drain = s.drain,
    )
}

fn case(s: &Spec) -> anyhow::Result<Case> {
    let plan = Arc::new(Scenario::from_yaml(&scenario(s))?.compile()?);
    let d = Duration::hours(4);
    let opts = Options {
        seed: 1,
        span: Duration::weeks(i64::from(plan.weeks)),
        faults: false,
        controller: true,
        engine: Arc::new(Engine::embedded().clone()),
        trace: false,
        stop_on_violation: false,
    };
    let r = simulate(plan, &opts, &mut |_| {});
    let t_prov = secs(s.provisioning) + secs(s.registration) + secs(s.ready);
    let t_drain = secs(s.drain);
    let cooldown = secs(s.cooldown);
    let ideal = d.num_seconds() / (t_prov + t_drain + cooldown).num_seconds().max(1);
    let windows = r.windows.first().cloned().unwrap_or_default();
    let mut occurrences = Vec::new();
    let (mut gaps, mut gap_total) = (0i32, Duration::zero());
    for w in windows.iter().filter(|w| w.end <= r.end) {
        let mut starts: Vec<_> = r.rotations.iter().filter(|x| w.contains(x.start)).collect();
        starts.sort_by_key(|x| x.start);
        let completed = starts
            .iter()
            .filter(|x| x.outcome == Outcome::Success && x.end.is_some_and(|e| e <= w.end))
            .count();
        for pair in starts.windows(2) {
            gaps += 1;
            gap_total += pair[1].start - pair[0].start;
        }
        occurrences.push((starts.len(), completed));
    }
    let failures = r.rotations.iter().filter(|x| x.outcome != Outcome::Success).count();
    eprintln!(
        "window: {}: {} occurrences, completed {:?}, ideal {ideal}, {} steps",
        s.name,
        occurrences.len(),
        occurrences.iter().map(|o| o.1).collect::<Vec<_>>(),
        r.steps
    );
    Ok(Case {
        name: s.name,
        t_prov,
        t_drain,
        cooldown,
        d,
        ideal,
        occurrences,
        cycle: (gaps > 0).then(|| gap_total / gaps),
        failures,
    })
}

pub fn run() -> anyhow::Result<Window> {
    let specs = [
        Spec {
            name: "cooldown 10m (the shipped examples)",
            provisioning: "60s",
            registration: "30s",
            ready: "20s",
            drain: "3m",
            cooldown: "10m",
            nodes: 40,
        },
        Spec {
            name: "cooldown 2m (latency-sensitive)",
            provisioning: "60s",
            registration: "30s",
            ready: "20s",
            drain: "3m",
            cooldown: "2m",
            nodes: 80,
        },
    ];
    let cases = specs.iter().map(case).collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Window { cases })
}
