//! Part 1: the decision path. One full pass = `reconcile_pool` over every pool of the fleet
//! (what the 1-minute tick asks for), on the in-memory cluster with an up-to-date cache.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use noderotation::cluster::Cluster;

use crate::fleet;
use crate::{Allocs, stats};

pub struct Decision {
    pub pools: usize,
    pub claims: usize,
    pub build: Duration,
    pub sweep: Duration,
    pub first_pass: Duration,
    pub first_pass_writes: u64,
    pub settle_passes: usize,
    pub settle_writes: u64,
    pub census: BTreeMap<String, usize>,
    /// Steady-state full passes: wall time, and this thread's CPU time.
    pub passes: Vec<Duration>,
    pub cpu: Vec<Duration>,
    pub allocs_per_pass: f64,
    pub bytes_per_pass: f64,
    pub steady_writes: u64,
    pub errors: usize,
    pub policy_status: Duration,
}

pub fn run(
    pools: usize,
    claims_per_pool: usize,
    iterations: usize,
    allocs: Allocs,
) -> anyhow::Result<Decision> {
    let started = Instant::now();
    let (mut fleet, sweep) = fleet::build(pools, claims_per_pool)?;
    let build = started.elapsed() - sweep;
    eprintln!(
        "decision: fleet of {pools} pools / {} claims built in {build:.1?}, sweep {sweep:.1?}",
        fleet.claims
    );

    let t = Instant::now();
    fleet.client.flush_cache();
    let first_errors = fleet.pass();
    let first_pass = t.elapsed();
    let first_pass_writes = fleet.ctl.writes();
    eprintln!(
        "decision: first pass {first_pass:.1?}, {first_pass_writes} writes, {first_errors} errors"
    );

    let (settle_passes, settle_writes) = fleet.settle()?;
    let census = fleet.census();
    eprintln!(
        "decision: settled after {settle_passes} passes ({settle_writes} writes): {census:?}"
    );
    fleet.client.flush_cache();
    let _cache = fleet.client.cache();

    // Warm-up: policy views and feasibility are cached per day; first touches of the cache.
    let mut errors = fleet.pass();
    let writes_before = fleet.ctl.writes();
    let mut passes = Vec::with_capacity(iterations);
    let mut cpu = Vec::with_capacity(iterations);
    let (mut n, mut bytes) = (0u64, 0u64);
    for i in 0..iterations {
        let (n0, b0) = allocs();
        let c0 = thread_cpu();
        let t = Instant::now();
        errors += fleet.pass();
        let d = t.elapsed();
        let c1 = thread_cpu();
        let (n1, b1) = allocs();
        cpu.push(c1.saturating_sub(c0));
        n += n1 - n0;
        bytes += b1 - b0;
        passes.push(d);
        eprintln!(
            "decision: steady pass {}/{iterations}: {d:.2?} ({:.2?} CPU)",
            i + 1,
            c1.saturating_sub(c0)
        );
    }
    let steady_writes = fleet.ctl.writes() - writes_before;
    let t = Instant::now();
    fleet.ctl.update_policy_status();
    let policy_status = t.elapsed();
    let per = |x: u64| x as f64 / iterations.max(1) as f64;
    let s = stats(&passes);
    eprintln!("decision: median {:.2?} per pass, {:.0} allocations per pass", s.median, per(n));
    Ok(Decision {
        pools,
        claims: fleet.claims,
        build,
        sweep,
        first_pass,
        first_pass_writes,
        settle_passes,
        settle_writes,
        census,
        passes,
        cpu,
        allocs_per_pass: per(n),
        bytes_per_pass: per(bytes),
        steady_writes,
        errors,
        policy_status,
    })
}

/// CPU time of the calling thread so far (`/proc/thread-self/schedstat`: ns on a CPU).
pub fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map(Duration::from_nanos)
        .unwrap_or_default()
}
