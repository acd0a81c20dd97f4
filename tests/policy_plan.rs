//! `noderotation plan` and `noderotation crd` end to end: human output snapshots for two example
//! policies, `--output json` round-trip, exit codes (1 input, 2 usage, 3 fatal finding), input
//! errors naming file, field and problem, unknown fields, a closed stdout, and the checked-in
//! CRD.
use std::path::Path;
use std::process::Command;

use noderotation::policy::plan::PlanReport;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn noderotation(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_noderotation"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run noderotation: {e}"));
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const NOW: &str = "2026-06-01T00:00:00Z";

#[test]
fn plan_worked_example_from_flags() {
    let run = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/single-pool.yaml",
        "--expire-after",
        "14d",
        "--tgp",
        "1h",
        "--nodes",
        "10",
        "--now",
        NOW,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn plan_several_windows_against_a_nodepool_across_a_dst_change() {
    // London leaves summer time on 2026-10-25: the Friday-to-Monday gap grows to 3d.
    let run = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/several-windows.yaml",
        "--nodepool",
        "deploy/examples/nodepools/general.yaml",
        "--now",
        "2026-10-20T12:00:00Z",
        "--occurrences",
        "6",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

#[test]
fn plan_json_round_trips() {
    let run = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/forceful-fallback.yaml",
        "--expire-after",
        "720h",
        "--tgp",
        "2h",
        "--nodes",
        "6",
        "--now",
        NOW,
        "--output",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: PlanReport =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    let again = serde_json::to_string_pretty(&report).unwrap_or_default();
    assert_eq!(again.trim_end(), run.stdout.trim_end());
    assert_eq!(report.derived.guaranteed_chances, Some(5));
    insta::assert_snapshot!(run.stdout);
}

/// `plan` shows the share of expireAfter a node lives under auto and under windows, whichever
/// the policy uses, so that the choice can be made before applying it.
#[test]
fn plan_shows_the_lifetime_used_under_both_age_threshold_modes() {
    let args = |file: &'static str, output: &'static str| {
        let mut args = vec!["plan", "-f", file, "--expire-after", "14d", "--tgp", "1h"];
        args.extend(["--nodes", "10", "--now", NOW, "-o", output]);
        args
    };
    let lifetimes = |file: &'static str| {
        let run = noderotation(&args(file, "json"));
        assert_eq!(run.code, 0, "{}", run.stderr);
        let report: PlanReport =
            serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}"));
        report
            .derived
            .lifetime_used
            .iter()
            .map(|l| (l.mode.clone(), l.in_use, l.min_percent, l.max_percent))
            .collect::<Vec<_>>()
    };
    // Auto: due 8d1h17m before expiry, replaced at the first window after: 42%-71%. Windows:
    // due as the 2nd-last usable window opens, 3d1h17m to 7d1h17m before expiry: 49%-78%.
    let auto = ("auto".to_string(), true, Some(42), Some(71));
    let windows = ("windows".to_string(), false, Some(49), Some(78));
    assert_eq!(lifetimes("deploy/examples/single-pool.yaml"), [auto.clone(), windows.clone()]);
    let (auto, windows) =
        ((auto.0, false, auto.2, auto.3), (windows.0, true, windows.2, windows.3));
    assert_eq!(lifetimes("deploy/examples/age-threshold-windows.yaml"), [auto, windows]);

    let run = noderotation(&args("deploy/examples/age-threshold-windows.yaml", "human"));
    assert_eq!(run.code, 0, "{}", run.stderr);
    for line in [
        "  A          age threshold                    6d22h43m         windows: the earliest age",
        "  lead       due this long before expiry      up to 7d1h17m",
        "  life       lifetime used, auto              42%-71%          age 5d22h43m-9d22h43m",
        "  life       lifetime used, windows (in use)  49%-78%          age 6d22h43m-10d22h43m",
    ] {
        assert!(run.stdout.contains(line), "{line:?} in\n{}", run.stdout);
    }
    let with_expire_after = |e: &str| {
        let file = "deploy/examples/age-threshold-windows.yaml";
        noderotation(&["plan", "-f", file, "--expire-after", e, "--tgp", "1h", "--now", NOW])
    };
    // 7d: infeasible for auto, feasible for windows (a node created inside one of its last two
    // windows is due at once).
    let short = with_expire_after("7d");
    assert_eq!(short.code, 0, "{}", short.stdout);
    assert!(
        short.stdout.contains("lifetime used, auto              infeasible"),
        "{}",
        short.stdout
    );
    assert!(short.stdout.contains("WARNING  AVeryAggressive: a node can fall due at age 0s"));
    // 6d: infeasible for windows too, saying what to change.
    let fatal = with_expire_after("6d");
    assert_eq!(fatal.code, 3, "{}", fatal.stdout);
    assert!(fatal.stdout.contains("FATAL    WindowChancesBelowK"), "{}", fatal.stdout);
    let fix = "fix: raise the NodePool's expireAfter to at least 6d21h17m";
    assert!(fatal.stdout.contains(fix), "{}", fatal.stdout);
}

#[test]
fn fatal_policy_exits_3() {
    // Worked example with expireAfter 7d: A = 7d - (2*4d + 1h17m) < 0.
    let run = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/single-pool.yaml",
        "--expire-after",
        "168h",
        "--tgp",
        "1h",
        "--now",
        NOW,
    ]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stdout.contains("FATAL    AgeThresholdNotPositive"), "{}", run.stdout);
    assert!(run.stdout.contains("INFEASIBLE"), "{}", run.stdout);
    let json = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/single-pool.yaml",
        "--expire-after",
        "168h",
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    assert_eq!(json.code, 3);
    let report: PlanReport = serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert!(report.fatal);
}

#[test]
fn input_errors_name_file_field_and_problem() {
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "plan",
                "-f",
                "deploy/examples/invalid/ready-timeout-zero.yaml",
                "--expire-after",
                "14d",
            ],
            "deploy/examples/invalid/ready-timeout-zero.yaml: spec.surge.readyTimeout: must be greater than 0",
        ),
        (
            &[
                "plan",
                "-f",
                "deploy/examples/reconcile-invalid/timezone-unknown.yaml",
                "--expire-after",
                "14d",
            ],
            "deploy/examples/reconcile-invalid/timezone-unknown.yaml: spec.maintenanceWindows[0].timezone: unknown IANA time zone \"Asia/Tokio\"",
        ),
        (
            &[
                "plan",
                "-f",
                "deploy/examples/invalid/min-rotation-chances-string.yaml",
                "--expire-after",
                "14d",
            ],
            "deploy/examples/invalid/min-rotation-chances-string.yaml: document 1: spec.minRotationChances: invalid type: string \"two\", expected i32",
        ),
        (
            &[
                "plan",
                "-f",
                "deploy/examples/single-pool.yaml",
                "--nodepool",
                "deploy/examples/single-pool.yaml",
            ],
            "deploy/examples/single-pool.yaml: apiVersion/kind: expected karpenter.sh/v1 NodePool",
        ),
    ];
    for (args, expected) in cases {
        let run = noderotation(args);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{args:?}:\n{}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
}

#[test]
fn crd_command_matches_the_checked_in_file() {
    let run = noderotation(&["crd"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/rotationpolicy.yaml");
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        run.stdout == on_disk,
        "crds/rotationpolicy.yaml is stale; regenerate it with `{}`",
        noderotation::policy::crd::REGENERATE_COMMAND
    );
}

/// A copy of deploy/examples/single-pool.yaml with `edit` applied, in a scratch file.
fn policy_file(name: &str, edit: impl Fn(&str) -> String) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples/single-pool.yaml"),
    )
    .unwrap_or_else(|e| panic!("example: {e}"));
    let dir = std::env::temp_dir().join(format!("noderotation-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    std::fs::write(&path, edit(&text)).unwrap_or_else(|e| panic!("{e}"));
    path.to_string_lossy().into_owned()
}

#[test]
fn unknown_fields_in_the_policy_are_rejected_by_name() {
    // A typo must not yield a confident plan built on the default it silently fell back to.
    let typo = policy_file("typo.yaml", |t| {
        t.replace("readyTimeout: 15m", "readyTimout: 45m")
            .replace(
                "  ageThreshold: auto",
                "  ageThreshold: auto\n  minRotationChance: 3\n  prePul: {}",
            )
            .replace("  name: api", "  name: api\n  labelz: {a: b}")
    });
    let run = noderotation(&["plan", "-f", &typo, "--expire-after", "14d", "--now", NOW]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.is_empty(), "no plan: {}", run.stdout);
    // Each named, an empty one too, with the real field it was meant as.
    for (typo, real) in [
        ("spec.surge.readyTimout", "spec.surge.readyTimeout"),
        ("spec.minRotationChance", "spec.minRotationChances"),
        ("spec.prePul", "spec.prePull"),
        ("metadata.labelz", "metadata.labels"),
    ] {
        let named = format!("\"{typo}\" (did you mean \"{real}\"?)");
        assert!(run.stderr.contains(&named), "{named}: {}", run.stderr);
    }
    assert!(run.stderr.contains(&typo), "{}", run.stderr);
    assert!(run.stderr.contains("unknown field"), "{}", run.stderr);
}

#[test]
fn usage_errors_input_errors_and_infeasible_exit_differently() {
    let infeasible = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/single-pool.yaml",
        "--expire-after",
        "7d",
        "--now",
        NOW,
    ]);
    let usage = [
        // Flags clap rejects, and flag combinations and values plan rejects.
        vec!["plan", "-f", "deploy/examples/single-pool.yaml", "--bogus"],
        vec!["plan", "-f", "deploy/examples/single-pool.yaml"],
        vec![
            "plan",
            "-f",
            "deploy/examples/single-pool.yaml",
            "--nodepool",
            "deploy/examples/nodepools/general.yaml",
            "--expire-after",
            "14d",
        ],
        vec!["plan", "-f", "deploy/examples/single-pool.yaml", "--expire-after", "14days"],
        vec![
            "plan",
            "-f",
            "deploy/examples/single-pool.yaml",
            "--expire-after",
            "14d",
            "--now",
            "x",
        ],
    ];
    let input =
        noderotation(&["plan", "-f", "deploy/examples/missing.yaml", "--expire-after", "14d"]);
    let bad_value = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/single-pool.yaml",
        "--expire-after",
        "14days",
    ]);
    assert!(
        bad_value.stderr.contains("--expire-after: \"14days\" is not a duration"),
        "{}",
        bad_value.stderr
    );
    assert_eq!(infeasible.code, 3, "{}", infeasible.stderr);
    assert_eq!(input.code, 1, "{}", input.stderr);
    for args in usage {
        let run = noderotation(&args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
    }
    let help = noderotation(&["plan", "--help"]);
    assert!(help.stdout.contains("Exit codes"), "{}", help.stdout);
    for line in ["0 ", "1 ", "2 ", "3 "] {
        assert!(
            help.stdout.lines().any(|l| l.trim_start().starts_with(line)),
            "{line}: {}",
            help.stdout
        );
    }
}

#[test]
fn an_infeasible_plan_prints_no_negative_lifetime() {
    let run = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/single-pool.yaml",
        "--expire-after",
        "3d",
        "--now",
        NOW,
    ]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    let life: Vec<&str> = run.stdout.lines().filter(|l| l.contains("lifetime used")).collect();
    assert_eq!(life.len(), 2, "auto and windows, both infeasible: {life:?}");
    for l in &life {
        assert!(l.contains("infeasible"), "{l}");
        assert!(!l.contains("%-") || !l.contains("-%"), "{l}");
        assert!(!l.contains(" -") && !l.contains("%--"), "negative figure: {l}");
    }
    let feasible = noderotation(&[
        "plan",
        "-f",
        "deploy/examples/single-pool.yaml",
        "--expire-after",
        "14d",
        "--now",
        NOW,
    ]);
    assert!(
        feasible.stdout.contains("lifetime used, auto (in use)     42%"),
        "{}",
        feasible.stdout
    );
}

#[test]
fn a_closed_stdout_ends_plan_quietly() {
    // `noderotation plan ... | head -1`: the reader is gone before the plan is written.
    let (reader, writer) = std::io::pipe().unwrap_or_else(|e| panic!("pipe: {e}"));
    drop(reader);
    for output in ["human", "json"] {
        let out = Command::new(env!("CARGO_BIN_EXE_noderotation"))
            .args([
                "plan",
                "-f",
                "deploy/examples/single-pool.yaml",
                "--expire-after",
                "14d",
                "--now",
                NOW,
                "-o",
                output,
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(writer.try_clone().unwrap_or_else(|e| panic!("{e}")))
            .output()
            .unwrap_or_else(|e| panic!("cannot run noderotation: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{output}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{output}: {stderr}");
    }
}

/// `plan` sizes the rotations a pool runs at once: what its node count and windows need at the
/// auto age threshold, what the policy's `maxUnavailable` gives, and the throughput findings
/// with the policy's own lanes, each saying which `maxUnavailable` would fix it.
#[test]
fn plan_sizes_the_rotations_at_once_a_pool_needs() {
    let plan = |file: &str, nodes: Option<&str>, output: &str| {
        let mut args = vec!["plan", "-f", file, "--expire-after", "14d", "--tgp", "1h"];
        if let Some(nodes) = nodes {
            args.extend(["--nodes", nodes]);
        }
        args.extend(["--now", NOW, "-o", output]);
        noderotation(&args)
    };
    let shows = |run: &Run, lines: &[&str]| {
        assert_eq!(run.code, 0, "{}", run.stderr);
        for line in lines {
            assert!(run.stdout.contains(line), "{line:?} in\n{}", run.stdout);
        }
    };
    // One at a time is too few for 240 nodes: 10 starts per 4h window against 240 nodes due
    // every 5d22h43m needs ceil(240 * 4d / (10 * 5d22h43m)) = 17 at once.
    let single = plan("deploy/examples/single-pool.yaml", Some("240"), "human");
    shows(
        &single,
        &[
            "  m          rotations at once                1                maxUnavailable 1 (needs 17 for 240 nodes at the auto A): too few, raise it to 17",
            "C*A < N*P; surge.maxUnavailable 17 or more would fix it",
            "one rotation slot apart; surge.maxUnavailable 12 or more would fix it",
        ],
    );
    // 10% of 240 is 24 at once: enough, no throughput finding, C = 24 * 10.
    let big = plan("deploy/examples/big-pool.yaml", Some("240"), "human");
    shows(
        &big,
        &[
            "  m          rotations at once                24 (10% of 240)  maxUnavailable 10% (needs 17 for 240 nodes at the auto A): enough",
            "  C          rotation starts per occurrence   240              m 24 * ceil(shortest occurrence 4h",
            "Findings\n  none",
        ],
    );
    let json = plan("deploy/examples/big-pool.yaml", Some("240"), "json");
    let report: PlanReport = serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.settings.max_unavailable, "10%");
    let d = &report.derived;
    assert_eq!(
        (d.rotation_lanes, d.rotation_lanes_needed, d.rotation_lanes_suffice),
        (24, Some(17), Some(true))
    );
    assert_eq!(d.starts_per_occurrence, Some(240));
    // A percentage that is too small is advised as a percentage: 5% of 240 is 12, 7% is 17.
    let five = policy_file("five-percent.yaml", |t| {
        t.replace("maxUnavailable: 1", "maxUnavailable: \"5%\"")
    });
    shows(
        &plan(&five, Some("240"), "human"),
        &[
            "12 (5% of 240)   maxUnavailable 5% (needs 17 for 240 nodes at the auto A): too few, raise it to \"7%\"",
            "surge.maxUnavailable \"7%\" (17 of 240 nodes at once) or more would fix it",
        ],
    );
    // Without a node count a percentage is one lane, and nothing is sized.
    let unknown = plan("deploy/examples/big-pool.yaml", None, "json");
    let report: PlanReport =
        serde_json::from_str(&unknown.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.derived.rotation_lanes, report.derived.rotation_lanes_needed), (1, None));
    let human = plan("deploy/examples/big-pool.yaml", None, "human");
    shows(
        &human,
        &["1 (10% of an unknown pool)", "maxUnavailable 10% (node count unknown: --nodes)"],
    );
}

/// `maxUnavailable: auto`: `plan` prints the number the controller would use and why; a limit
/// below what the pool needs is capped, and both the `m` line and the finding name the limit to
/// raise.
#[test]
fn plan_shows_what_max_unavailable_auto_uses_and_why() {
    let plan = |file: &str, nodes: &str, output: &str| {
        noderotation(&[
            "plan",
            "-f",
            file,
            "--expire-after",
            "14d",
            "--tgp",
            "1h",
            "--nodes",
            nodes,
            "--now",
            NOW,
            "-o",
            output,
        ])
    };
    let auto = "deploy/examples/max-unavailable-auto.yaml";
    let run = plan(auto, "240", "human");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let line = "  m          rotations at once                17 (auto)        auto: the fewest that \
                keep every node's 2 chance(s) for 240 nodes: 17 (maxUnavailableLimit 10%: 24)";
    assert!(run.stdout.contains(line), "{}", run.stdout);
    assert!(run.stdout.contains("Findings\n  none"), "auto leaves no throughput finding");
    // The pool grows: auto follows it.
    let json = plan(auto, "1000", "json");
    let report: PlanReport = serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.settings.max_unavailable, "auto");
    assert_eq!(report.settings.max_unavailable_limit.as_deref(), Some("10%"));
    let d = &report.derived;
    assert_eq!(
        (d.rotation_lanes, d.rotation_lanes_needed, d.rotation_lanes_limit),
        (68, Some(68), Some(100))
    );
    // A limit below the need: capped at it, and the limit to raise is named, as a percentage.
    let low = policy_file("auto-low-limit.yaml", |t| {
        t.replace("maxUnavailable: 1", "maxUnavailable: auto\n    maxUnavailableLimit: \"5%\"")
    });
    let run = plan(&low, "500", "human");
    assert_eq!(run.code, 0, "{}", run.stderr);
    for text in [
        "25 (auto)        auto: 34 needed for 500 nodes, capped at maxUnavailableLimit 5% (25): \
         too few, raise maxUnavailableLimit to \"7%\"",
        "surge.maxUnavailableLimit \"7%\" (34 of 500 nodes at once) or more would fix it",
        "fix: raise surge.maxUnavailableLimit, lengthen or add maintenance windows",
    ] {
        assert!(run.stdout.contains(text), "{text:?} in\n{}", run.stdout);
    }
    // More than 100 needed: auto stops at 100 whatever the limit, and no limit is the fix.
    let all = policy_file("auto-all.yaml", |t| {
        t.replace("maxUnavailable: 1", "maxUnavailable: auto\n    maxUnavailableLimit: \"100%\"")
    });
    let run = plan(&all, "2000", "human");
    assert_eq!(run.code, 0, "{}", run.stderr);
    for text in [
        "100 (auto)       auto: 135 needed for 2000 nodes, capped at maxUnavailableLimit 100% \
         (100): too few, and more than auto ever uses (100): lengthen or add maintenance windows, \
         or split the pool",
        "it needs 135 rotations at once, more than surge.maxUnavailable allows (100)",
        "fix: lengthen or add maintenance windows, lower surge.cooldownAfter",
    ] {
        assert!(run.stdout.contains(text), "{text:?} in\n{}", run.stdout);
    }
}

/// A hostile manifest in a scratch file: `plan` must refuse it with exit 1 and a message that
/// names the problem, without expanding it or overflowing the stack.
fn hostile(name: &str, text: &str) -> Run {
    let dir = std::env::temp_dir().join(format!("noderotation-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    noderotation(&["plan", "-f", &path.to_string_lossy(), "--expire-after", "14d", "--now", NOW])
}

const POLICY_HEAD: &str =
    "apiVersion: noderotation.io/v1alpha1\nkind: RotationPolicy\nmetadata:\n  name: hostile\n";

#[test]
fn a_billion_laughs_manifest_is_refused() {
    // Ten levels of ten aliases each: 10^10 strings if the aliases were expanded.
    let mut text = format!("{POLICY_HEAD}  annotations:\n    l0: &l0 lol\n");
    for level in 1..=10 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        text.push_str(&format!("    l{level}: &l{level} [{refs}]\n"));
    }
    text.push_str("spec:\n  nodePoolSelector: {}\n");
    let run = hostile("laughs.yaml", &text);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("repetition limit"), "{}", run.stderr);
}

#[test]
fn a_deeply_nested_manifest_is_refused() {
    let depth = 100_000;
    let text =
        format!("{POLICY_HEAD}  annotations:\n    a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
    let run = hostile("deep.yaml", &text);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("recursion limit"), "{}", run.stderr);
}

#[test]
fn an_oversized_manifest_is_refused_before_parsing() {
    // Valid YAML, one comment line past the cap: the size alone must stop it.
    let text = format!("{POLICY_HEAD}# {}\nspec:\n  nodePoolSelector: {{}}\n", "x".repeat(2 << 20));
    let run = hostile("big.yaml", &text);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("larger than 1 MiB"), "{}", run.stderr);
}
