//! The printed table and `docs/performance.md`.
use std::fmt::Write as _;
use std::time::Duration;

use noderotation::clock::{Clock, SystemClock};

use crate::decision::Decision;
use crate::{Args, stats};

pub struct Row {
    pub part: &'static str,
    pub metric: String,
    pub value: String,
    pub goal: String,
    /// `None`: no goal.
    pub met: Option<bool>,
}

#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Markdown sections with the details of each part.
    pub sections: Vec<String>,
}

pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.1} µs", ms * 1e3)
    }
}

pub fn count(x: f64) -> String {
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Report {
    pub fn row(
        &mut self,
        part: &'static str,
        metric: impl Into<String>,
        value: impl Into<String>,
        goal: impl Into<String>,
        met: Option<bool>,
    ) {
        self.rows.push(Row {
            part,
            metric: metric.into(),
            value: value.into(),
            goal: goal.into(),
            met,
        });
    }

    pub fn decision(&mut self, d: &Decision) {
        let s = stats(&d.passes);
        let per_pool = s.median / u32::try_from(d.pools.max(1)).unwrap_or(u32::MAX);
        let part = "1 decision path";
        self.row(
            part,
            format!(
                "full pass, {} pools / {} claims (median)",
                count(d.pools as f64),
                count(d.claims as f64)
            ),
            ms(s.median),
            "≤ 20 ms",
            Some(s.median <= Duration::from_millis(20)),
        );
        let cpu = stats(&d.cpu);
        self.row(part, "full pass, CPU time of the thread (median)", ms(cpu.median), "", None);
        self.row(part, "per pool (wall)", ms(per_pool), "", None);
        self.row(part, "allocations per full pass", count(d.allocs_per_pass), "", None);
        self.row(
            part,
            "bytes allocated per full pass",
            format!("{:.1} MiB", d.bytes_per_pass / 1048576.0),
            "",
            None,
        );
        self.row(
            part,
            format!("first pass (starts rotations, {} writes)", d.first_pass_writes),
            ms(d.first_pass),
            "",
            None,
        );
        self.row(part, "start-up sweep (every pool, claim, marked node)", ms(d.sweep), "", None);
        self.row(part, "policy status update (4 policies)", ms(d.policy_status), "", None);

        let mut md = String::new();
        let _ = writeln!(md, "### 1. Decision path\n");
        let _ = writeln!(
            md,
            "One full pass is `Controller::reconcile_pool` over every pool (what the 1-minute tick asks for), on the in-memory cluster (`MemoryCluster`, no cache lag) holding {} NodePools, {} NodeClaims and as many Nodes, governed by 4 RotationPolicies. The fleet is built in {}, swept ({}), then brought to a steady state by {} passes ({} writes) in which Karpenter (played by the bench) provisions surge nodes; the timed passes then write nothing ({} writes in {} passes, {} errors).\n",
            count(d.pools as f64),
            count(d.claims as f64),
            ms(d.build),
            ms(d.sweep),
            d.settle_passes,
            d.settle_writes,
            d.steady_writes,
            d.passes.len(),
            d.errors
        );
        let _ =
            writeln!(md, "Pools in the measured state:\n\n| pool kind: state | pools |\n|---|---|");
        for (k, v) in &d.census {
            let _ = writeln!(md, "| {k} | {v} |");
        }
        let _ = writeln!(
            md,
            "\nFull pass: min {}, median {}, max {} wall (CPU: median {}) over {} passes; {} allocations ({:.1} MiB) per pass, {:.1} allocations per pool.\n",
            ms(s.min),
            ms(s.median),
            ms(s.max),
            ms(stats(&d.cpu).median),
            d.passes.len(),
            count(d.allocs_per_pass),
            d.bytes_per_pass / 1048576.0,
            d.allocs_per_pass / d.pools.max(1) as f64
        );
        self.sections.push(md);
    }

    pub fn apiserver_skipped(&mut self) {
        self.row(
            "3 operator vs apiserver",
            "not run",
            "pass `--apiserver`",
            "RSS ≤ 32 MiB, ≤ 12 object writes and ≤ 5 GETs per rotation",
            None,
        );
    }

    pub fn table(&self) -> String {
        let mut out =
            String::from("| part | metric | value | goal | met |\n|---|---|---|---|---|\n");
        for r in &self.rows {
            let met = match r.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            };
            let _ =
                writeln!(out, "| {} | {} | {} | {} | {} |", r.part, r.metric, r.value, r.goal, met);
        }
        out
    }

    pub fn markdown(&self, args: &Args) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "<!-- generated by `cargo bench --bench suite{}`; do not edit -->",
            if args.apiserver { " -- --apiserver" } else { "" }
        );
        let _ = writeln!(md, "# Performance\n");
        let _ = writeln!(
            md,
            "> Generated by `cargo bench --bench suite -- --apiserver` (parts 1, 2, 4 without `--apiserver`). Do not edit: rerun the command. Benchmarks print numbers; no test asserts a wall-clock time.\n"
        );
        let _ = writeln!(md, "Machine: {}\n", machine());
        let _ = writeln!(md, "## Summary\n\n{}", self.table());
        let _ = writeln!(md, "## Details\n");
        for s in &self.sections {
            md.push_str(s);
            md.push('\n');
        }
        md
    }
}

/// `nproc`, CPU model, memory, kernel, rustc, date.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let rustc = std::process::Command::new("rustc")
        .arg("-V")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "`nproc` {nproc}, {model}, {:.1} GiB memory, Linux {}, {rustc}, `bench` profile (release, thin LTO); {}",
        mem_kib as f64 / 1048576.0,
        kernel.trim(),
        SystemClock.now().format("%Y-%m-%d")
    )
}

pub fn human(d: chrono::Duration) -> String {
    noderotation::policy::duration::format_human(d)
}

impl Report {
    pub fn window(&mut self, w: &crate::window::Window) {
        let part = "2 window efficiency";
        let mut md = String::from("### 2. Window efficiency\n\n");
        let _ = writeln!(
            md,
            "`noderotation simulate`'s world (`src/sim`: the real controller, its work queue, watch wake-ups and requeues, against the simulated Karpenter, scheduler and kubelet) with fixed delays and more candidates than a window can take: one pool, windows Wed+Sat 02:00-06:00 Asia/Tokyo (D = 4h), 4 weeks, no faults. Completed = rotations that started and succeeded inside the occurrence; ideal = floor(D / (t_prov + t_drain + cooldown)) with t_prov = provisioning + registration + ready.\n"
        );
        let _ = writeln!(
            md,
            "| case | D | t_prov | t_drain | cooldown | ideal | completed per occurrence | efficiency | ideal cycle | measured cycle (between starts) | not successful |\n|---|---|---|---|---|---|---|---|---|---|"
        );
        for c in &w.cases {
            let eff = c.efficiency();
            self.row(
                part,
                format!("{}: completed / ideal per occurrence", c.name),
                format!("{eff:.3}"),
                "≥ 0.95",
                Some(eff >= 0.95),
            );
            let completed: Vec<String> = c.occurrences.iter().map(|o| o.1.to_string()).collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {eff:.3} | {} | {} | {} |",
                c.name,
                human(c.d),
                human(c.t_prov),
                human(c.t_drain),
                human(c.cooldown),
                c.ideal,
                completed.join(", "),
                human(c.ideal_cycle()),
                c.cycle.map(human).unwrap_or_else(|| "-".into()),
                c.failures
            );
        }
        md.push('\n');
        self.sections.push(md);
    }

    pub fn sim(&mut self, s: &crate::simspeed::SimSpeed) {
        let part = "4 simulator speed";
        let mut md = String::from("### 4. Simulator speed\n\n");
        let _ = writeln!(
            md,
            "The built-in fleet of `noderotation simulate` (3 pools x 30 nodes, Wed+Sat windows, 8 weeks, seed 1) run in the bench process; CPU time is the thread's own (`/proc/thread-self/schedstat`).\n"
        );
        let _ = writeln!(
            md,
            "| run | weeks | steps | controller passes | wall | CPU | steps per CPU-second | virtual weeks per CPU-second | violations |\n|---|---|---|---|---|---|---|---|---|"
        );
        let wall = |label: &str| {
            s.runs.iter().filter(|r| r.label == label).map(|r| r.wall).sum::<Duration>()
        };
        let default = wall("default fleet, controller") + wall("default fleet, Karpenter alone");
        self.row(
            part,
            "default `simulate` (ours + Karpenter alone, wall)",
            ms(default),
            "≤ 5 s",
            Some(default <= Duration::from_secs(5)),
        );
        for r in &s.runs {
            if r.label.ends_with("controller") {
                self.row(
                    part,
                    "simulated steps per CPU-second (default fleet)",
                    count(r.steps_per_second()),
                    "",
                    None,
                );
                self.row(
                    part,
                    "virtual weeks of the default fleet per CPU-second",
                    format!("{:.1}", r.weeks_per_cpu_second()),
                    "",
                    None,
                );
            }
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
                r.label,
                r.weeks,
                count(r.steps as f64),
                count(r.passes as f64),
                ms(r.wall),
                ms(r.cpu),
                count(r.steps_per_second()),
                r.weeks_per_cpu_second(),
                r.violations
            );
        }
        md.push('\n');
        md.push_str(BIG_POOLS);
        self.sections.push(md);
    }

    pub fn apiserver(&mut self, a: &crate::apiserver::Apiserver) {
        let part = "3 operator vs apiserver";
        let shape = a.shape.label();
        let mib = |kib: u64| kib as f64 / 1024.0;
        let idle_rss = a.rss_idle.iter().copied().max().unwrap_or(0);
        let rot_rss = a.rss_rotating.iter().copied().max().unwrap_or(0);
        self.row(
            part,
            format!("steady-state RSS, idle (max of samples), {shape}"),
            format!("{:.1} MiB", mib(idle_rss)),
            "≤ 32 MiB",
            Some(mib(idle_rss) <= RSS_GOAL_MIB),
        );
        self.row(
            part,
            format!("RSS while rotating (max of samples), {shape}"),
            format!("{:.1} MiB", mib(rot_rss)),
            "≤ 32 MiB",
            Some(mib(rot_rss) <= RSS_GOAL_MIB),
        );
        self.row(
            part,
            format!("peak RSS (VmHWM: initial lists included), {shape}"),
            format!("{:.1} MiB", mib(a.hwm)),
            "",
            None,
        );
        let idle = &a.idle;
        let lists = idle.requests.iter().filter(|r| r.verb == "list").count();
        let watches = idle.requests.iter().filter(|r| r.verb == "watch").count();
        let idle_rate = idle.per_minute(idle.requests.len());
        self.row(
            part,
            format!("requests per minute, idle steady state (Lease included), {shape}"),
            format!("{idle_rate:.1}"),
            "≤ 24",
            Some(idle_rate <= 24.0),
        );
        self.row(
            part,
            format!("LISTs / new WATCHes per minute, idle, {shape}"),
            format!("{:.1} / {:.1}", idle.per_minute(lists), idle.per_minute(watches)),
            "no polling LISTs",
            Some(lists == 0),
        );
        match a.writes_per_rotation() {
            Some((w, ev)) => {
                let label = format!(
                    "object writes / Event writes per successful rotation ({} rotations), {shape}",
                    a.successes
                );
                let split = format!("{:.1} / {ev:.1}", w - ev);
                self.row(part, label, split, "≤ 12 / 2", Some(w - ev <= 12.0));
                let gets = a.rotating.reads() as f64 / a.successes;
                let label = format!("GETs per successful rotation (Lease apart), {shape}");
                self.row(part, label, format!("{gets:.1}"), "≤ 5", Some(gets <= 5.0));
            }
            None => self.row(
                part,
                format!("API writes per successful rotation, {shape}"),
                "none completed",
                "≤ 12 / 2",
                Some(false),
            ),
        }

        let mut md =
            format!("### 3. Operator memory and API load (real kube-apiserver), {shape}\n\n");
        let _ = writeln!(md, "{}\n", shape_note(a.shape));
        let _ = writeln!(
            md,
            "The apiserver tier (`tests/k8s-harness`: kube-apiserver v1.35 + etcd on loopback) loaded with {} NodePools, {} NodeClaims (Ready), {} Nodes and {} pods bound to them (created in {}, {} requests in flight). `noderotation run` ({}, default flags: 60 s tick, 15 s Lease) talks to it through a counting proxy in front of `kubectl proxy`, so every request it makes is recorded. Its caches were synced {} after start; RSS then {:.1} MiB. Phases: **start-up** (until the end of a {}-second warm-up), **idle** ({}: every pool governed by a policy whose window is closed), **rotating** ({}: five pools under an always-open policy with cooldown 0s, Karpenter and the kubelet played by the bench over its own client).\n",
            a.pools,
            a.claims,
            a.nodes,
            a.pods,
            ms(a.load),
            32,
            a.binary,
            ms(a.sync),
            mib(a.rss_after_sync),
            crate::apiserver::WARM_UP.as_secs(),
            ms(a.idle.length),
            ms(a.rotating.length)
        );
        let _ = writeln!(
            md,
            "RSS samples (every 2 s): idle {:.1}-{:.1} MiB, rotating {:.1}-{:.1} MiB; VmHWM {:.1} MiB. Rotating phase: {} successful and {} failed rotations, {} operator writes outside the Lease ({} Lease writes).\n",
            mib(a.rss_idle.iter().copied().min().unwrap_or(0)),
            mib(idle_rss),
            mib(a.rss_rotating.iter().copied().min().unwrap_or(0)),
            mib(rot_rss),
            mib(a.hwm),
            a.successes,
            a.failures,
            a.rotating.rotation_writes(),
            a.rotating.requests.iter().filter(|r| r.is_write() && r.resource == "leases").count()
        );
        let _ = writeln!(
            md,
            "Requests per minute by verb and resource:\n\n| verb | resource | start-up | idle | rotating |\n|---|---|---|---|---|"
        );
        let (s, i, r) = (a.startup.by_kind(), a.idle.by_kind(), a.rotating.by_kind());
        let mut keys: Vec<&(String, String)> = s.keys().chain(i.keys()).chain(r.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let f = |m: &std::collections::BTreeMap<(String, String), usize>,
                     p: &crate::apiserver::Phase| {
                m.get(k).map(|n| format!("{:.1}", p.per_minute(*n))).unwrap_or_default()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                k.0,
                k.1,
                f(&s, &a.startup),
                f(&i, &a.idle),
                f(&r, &a.rotating)
            );
        }
        md.push('\n');
        let _ = writeln!(
            md,
            "The operator's Events at the end of the run, by reason (Event objects; occurrences, counting series):\n\n| reason | Events | occurrences |\n|---|---|---|"
        );
        for (reason, (objects, occurrences)) in &a.events {
            let _ = writeln!(md, "| {reason} | {objects} | {occurrences} |");
        }
        md.push('\n');
        self.sections.push(md);
    }
}

/// The RSS goal of part 3, both shapes, idle and rotating.
const RSS_GOAL_MIB: f64 = 32.0;

/// What part 3's objects look like, for its section.
fn shape_note(shape: crate::shapes::Shape) -> &'static str {
    match shape {
        crate::shapes::Shape::Realistic => {
            "Nodes and NodeClaims shaped like those of an EKS cluster under Karpenter (`benches/suite/fixtures/`: a Node of about 17.5 KB of JSON with 30 labels, 8 annotations, 4 conditions, nodeInfo, 30 images and managedFields; a NodeClaim of about 10 KB with 23 labels, 8 requirements, 6 conditions and managedFields), names, uids, providerIDs and addresses varied per object."
        }
        crate::shapes::Shape::Minimal => {
            "The minimal Nodes and NodeClaims of earlier runs (a pool label, a providerID, allocatable, a Ready condition), kept so that figures stay comparable with them and with the peer measured the same way (`--operator-wrapper`)."
        }
    }
}

/// Part 4's pointer to the big-pool figures (minutes per run, so not part of the suite).
const BIG_POOLS: &str = "Big pools and longer lives (`noderotation simulate`, seed 1, 8 virtual weeks; the commands, the runs under faults and what the figures depend on are in [big-pools.md](big-pools.md); `tests/all.sh` checks the 240-node and the one-chance rows on every CI run):\n\n| scenario | forced expiries (Karpenter alone) | replacements inside windows | lifetime used, mean | wall |\n|---|---:|---:|---:|---:|\n| `big-pool-240.yaml`: 240 nodes, `maxUnavailable: 17` | **0** (960) | **100.0 %** | | 45 s |\n| `big-pool-1000.yaml`: 1,000 nodes, `maxUnavailable: 68` | **0** (4,000) | **100.0 %** | | 498 s |\n| `default-windows-one-chance.yaml`: the default fleet, `ageThreshold: windows`, K = 1 | **0** (360) | 100.0 % | **83.5 %** | 12 s |\n| `default.yaml`: the default fleet, `auto`, K = 2 (for comparison) | 0 (360) | 100.0 % | 47.0 % | 14 s |\n\n";
