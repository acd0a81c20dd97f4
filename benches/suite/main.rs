//! The benchmark suite: prints a table and regenerates `docs/performance.md`.
//!
//! ```sh
//! cargo bench --bench suite                  # parts 1, 2 and 4 (~2 min), writes docs/performance.md
//! cargo bench --bench suite -- --apiserver   # also part 3 against a real kube-apiserver (~30 min:
//!                                            # realistic and minimal object shapes, one run each)
//! cargo bench --bench suite -- --only decision --no-write
//! cargo bench --bench suite -- --only apiserver --operator-binary \
//!     target/x86_64-unknown-linux-musl/release/noderotation   # the image's build (musl)
//! ```
//!
//! A bench target (`harness = false`) rather than a subcommand so that the counting allocator
//! below exists in this binary only: the operator binary keeps the system allocator and
//! `#![forbid(unsafe_code)]`. Cargo builds it with the `bench` profile, which inherits
//! `release` (thin LTO), and builds the release `noderotation` binary that part 3 runs.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;

mod apiserver;
mod decision;
mod fleet;
mod proxy;
mod report;
mod shapes;
mod simspeed;
mod window;

/// Counts allocations (and reallocations) and the bytes they asked for.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are plain
// relaxed atomics that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// (allocations, bytes requested) so far in this process.
pub type Allocs = fn() -> (u64, u64);

fn allocs() -> (u64, u64) {
    (ALLOCS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed))
}

#[derive(Debug, Parser)]
#[command(name = "suite", about = "noderotation benchmark suite")]
pub struct Args {
    /// Also run part 3: load a real kube-apiserver (tests/k8s-harness) and run the operator.
    #[arg(long)]
    apiserver: bool,
    /// Run only these parts (comma-separated: decision, window, sim, apiserver); implies
    /// --no-write.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Print the table without rewriting docs/performance.md.
    #[arg(long)]
    no_write: bool,
    /// Also write the Markdown report here (any selection of parts).
    #[arg(long, value_name = "FILE")]
    out: Option<std::path::PathBuf>,
    /// Decision path: pools in the fleet.
    #[arg(long, default_value_t = 1000)]
    pools: usize,
    /// Decision path: NodeClaims per pool.
    #[arg(long, default_value_t = 100)]
    claims_per_pool: usize,
    /// Decision path: timed full passes.
    #[arg(long, default_value_t = 10)]
    iterations: usize,
    /// Apiserver part: Nodes (and as many NodeClaims).
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    /// Apiserver part: the shapes of the Nodes and NodeClaims, one full run each (realistic:
    /// built from benches/suite/fixtures; minimal: the small objects of earlier runs).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [shapes::Shape::Realistic, shapes::Shape::Minimal])]
    shapes: Vec<shapes::Shape>,
    /// Apiserver part: pods, spread over the nodes.
    #[arg(long, default_value_t = 50000)]
    pods: usize,
    /// Apiserver part: run the operator under this command (for profiling, e.g. "valgrind
    /// --tool=massif --massif-out-file=docs/perf/massif.out"). RSS measures the process under
    /// it that runs the binary (the wrapper itself where none does, as under valgrind), which is
    /// stopped first at the end, then the wrapper.
    #[arg(long, value_name = "CMD")]
    operator_wrapper: Option<String>,
    /// Apiserver part: run this `noderotation` binary instead of the release build next to the
    /// bench, e.g. the static musl build the image ships (`cargo build --release --locked
    /// --target x86_64-unknown-linux-musl`, with the linker and C compiler deploy/Dockerfile
    /// sets): its allocator, not glibc's, decides the RSS users see.
    #[arg(long, value_name = "PATH")]
    operator_binary: Option<std::path::PathBuf>,
    /// Apiserver part: seconds of steady state to measure.
    #[arg(long, default_value_t = 180)]
    steady_seconds: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Args {
    fn wants(&self, part: &str) -> bool {
        if self.only.is_empty() {
            part != "apiserver" || self.apiserver
        } else {
            self.only.iter().any(|p| p == part)
        }
    }
}

pub struct Stats {
    pub min: Duration,
    pub median: Duration,
    pub max: Duration,
}

pub fn stats(samples: &[Duration]) -> Stats {
    let mut v = samples.to_vec();
    v.sort();
    let at = |i: usize| v.get(i).copied().unwrap_or_default();
    Stats { min: at(0), median: at(v.len() / 2), max: at(v.len().saturating_sub(1)) }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let mut rep = report::Report::default();
    if args.wants("decision") {
        let d = decision::run(args.pools, args.claims_per_pool, args.iterations, allocs)?;
        rep.decision(&d);
    }
    if args.wants("window") {
        let w = window::run()?;
        rep.window(&w);
    }
    if args.wants("sim") {
        let s = simspeed::run()?;
        rep.sim(&s);
    }
    if args.wants("apiserver") {
        for &shape in &args.shapes {
            let a = apiserver::run(&apiserver::Config {
                shape,
                nodes: args.nodes,
                pods: args.pods,
                steady: Duration::from_secs(args.steady_seconds),
                binary: args
                    .operator_binary
                    .clone()
                    .unwrap_or_else(|| env!("CARGO_BIN_EXE_noderotation").into()),
                binary_label: args
                    .operator_binary
                    .as_ref()
                    .map_or_else(|| "release build".to_string(), |p| format!("`{}`", p.display())),
                repo: env!("CARGO_MANIFEST_DIR").into(),
                wrapper: args.operator_wrapper.clone(),
            })?;
            rep.apiserver(&a);
        }
    } else {
        rep.apiserver_skipped();
    }
    println!("{}", rep.table());
    if let Some(out) = &args.out {
        std::fs::write(out, rep.markdown(args))?;
    }
    if args.only.is_empty() && !args.no_write {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/performance.md");
        std::fs::write(&path, rep.markdown(args))?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(())
}
