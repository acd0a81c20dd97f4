//! The command line's conventions: operator commands listed first and developer ones grouped, no
//! rustdoc links in any `--help`, shell completions, one key style (camelCase) in every JSON
//! document, `-o yaml` the same document as `-o json`, `plan -f -` reading standard input, and
//! the developer commands outside a checkout.
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn noderotation_in(dir: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_noderotation"))
        .args(args)
        .current_dir(dir)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run noderotation: {e}"));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).unwrap_or_else(|e| panic!("stdin: {e}"));
    }
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("noderotation: {e}"));
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn noderotation(args: &[&str]) -> Run {
    noderotation_in(Path::new(env!("CARGO_MANIFEST_DIR")), args, None)
}

const PLAN: [&str; 8] = [
    "plan",
    "-f",
    "deploy/examples/single-pool.yaml",
    "--expire-after",
    "14d",
    "--nodes",
    "10",
    "--now=2026-06-01T00:00:00Z",
];

#[test]
fn help_lists_operator_commands_first_and_developer_commands_apart() {
    let help = noderotation(&["--help"]).stdout;
    let at = |name: &str| {
        help.lines()
            .position(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not listed:\n{help}"))
    };
    let developer = help
        .lines()
        .position(|l| l.starts_with("Developer commands"))
        .unwrap_or_else(|| panic!("no developer group:\n{help}"));
    for operator in ["run", "plan", "simulate", "status", "uninstall", "crd", "completion"] {
        assert!(at(operator) < developer, "{operator} after the developer group:\n{help}");
    }
    for dev in ["rules", "docs"] {
        assert!(at(dev) > developer, "{dev} not in the developer group:\n{help}");
    }
    assert!(at("run") < at("plan") && at("plan") < at("simulate"), "{help}");
}

#[test]
fn no_help_text_shows_a_rustdoc_link() {
    let commands: [&[&str]; 12] = [
        &[],
        &["run"],
        &["plan"],
        &["simulate"],
        &["status"],
        &["uninstall"],
        &["crd"],
        &["completion"],
        &["rules"],
        &["rules", "check"],
        &["rules", "diff"],
        &["docs"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let run = noderotation(&args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert!(!run.stdout.contains("[`"), "{args:?} shows a rustdoc link:\n{}", run.stdout);
    }
}

#[test]
fn completion_scripts_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef noderotation"),
        ("fish", "complete -c noderotation"),
    ] {
        let run = noderotation(&["completion", shell]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        assert!(run.stdout.contains(marker), "{shell}: no {marker:?}");
        for word in ["plan", "simulate", "from-cluster"] {
            assert!(run.stdout.contains(word), "{shell} completion lacks {word}");
        }
    }
    assert_eq!(noderotation(&["completion", "tcsh"]).code, 2, "an unknown shell is a usage error");
}

/// Every object key of `v` that is not camelCase, with its path; `maps` names the objects whose
/// keys are data (pool names), not fields.
fn non_camel(v: &serde_json::Value, path: &str, maps: &[&str], out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(fields) => {
            let data = maps.iter().any(|m| path.ends_with(m));
            for (k, sub) in fields {
                let camel = k.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && k.chars().all(|c| c.is_ascii_alphanumeric());
                if !data && !camel {
                    out.push(format!("{path}.{k}"));
                }
                non_camel(sub, &format!("{path}.{k}"), maps, out);
            }
        }
        serde_json::Value::Array(items) => {
            items.iter().for_each(|i| non_camel(i, &format!("{path}[]"), maps, out));
        }
        _ => {}
    }
}

/// The same document, floats equal to 1e-9 of their size, wall times aside.
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::Object(x), V::Object(y)) => {
            // The sweep's wall time is the one figure two runs never share.
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| k == "elapsedSeconds" || y.get(k).is_some_and(|w| same(v, w)))
        }
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        (V::Number(x), V::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(1.0),
            _ => x == y,
        },
        _ => a == b,
    }
}

/// The `-o json` and `-o yaml` documents of `args`, after checking they are the same document
/// with camelCase keys.
fn json_and_yaml(dir: &Path, args: &[&str], maps: &[&str]) -> serde_json::Value {
    let doc = |format: &str| {
        let mut with = args.to_vec();
        with.extend(["-o", format]);
        let run = noderotation_in(dir, &with, None);
        assert!(run.code == 0, "{with:?}: {}", run.stderr);
        run.stdout
    };
    let json: serde_json::Value =
        serde_json::from_str(&doc("json")).unwrap_or_else(|e| panic!("-o json: {e}"));
    let yaml: serde_json::Value =
        serde_norway::from_str(&doc("yaml")).unwrap_or_else(|e| panic!("-o yaml: {e}"));
    // Two runs: a float summed over a hash map may differ in its last bits between them.
    assert!(same(&json, &yaml), "{args:?}: -o yaml is not the -o json document:\n{json}\n{yaml}");
    let mut bad = Vec::new();
    non_camel(&json, "", maps, &mut bad);
    assert!(bad.is_empty(), "{args:?}: keys not in camelCase: {bad:?}");
    json
}

#[test]
fn plan_documents_are_camel_case_in_json_and_yaml() {
    let plan = json_and_yaml(Path::new(env!("CARGO_MANIFEST_DIR")), &PLAN, &[]);
    assert!(plan["derived"].is_object(), "{plan}");
}

#[test]
fn simulate_documents_are_camel_case_in_json_and_yaml() {
    // One small pool for one week: the keys, not the figures, are under test.
    let dir = std::env::temp_dir().join(format!("noderotation-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let scenario = "name: tiny\nstart: 2026-06-01T00:00:00Z\nweeks: 1\npools:\n  - name: small\n    \
        labels: {rotation: r}\n    nodes: 3\n    expireAfter: 3d\n    terminationGracePeriod: 1h\n    \
        age: {min: 0h, max: 2d}\npolicies:\n  - apiVersion: noderotation.io/v1alpha1\n    \
        kind: RotationPolicy\n    metadata: {name: r}\n    spec:\n      nodePoolSelector: \
        {matchLabels: {rotation: r}}\n      maintenanceWindows:\n        - {timezone: UTC, days: \
        [Mon, Tue, Wed, Thu, Fri, Sat, Sun], start: '00:00', end: '12:00'}\n";
    std::fs::write(dir.join("tiny.yaml"), scenario).unwrap_or_else(|e| panic!("{e}"));
    let one = json_and_yaml(&dir, &["simulate", "--scenario", "tiny.yaml"], &[".pools"]);
    assert!(one["karpenterAlone"]["pools"]["small"].is_object(), "{one}");
    let sweep = json_and_yaml(
        &dir,
        &["simulate", "--scenario", "tiny.yaml", "--seeds", "2", "--jobs", "1", "--faults"],
        &[".pools"],
    );
    assert!(sweep["summary"]["withViolations"].is_u64(), "{sweep}");
}

#[test]
fn plan_reads_the_policy_from_standard_input() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let policy = std::fs::read_to_string(root.join("deploy/examples/single-pool.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut args = PLAN.to_vec();
    args[2] = "-";
    let piped = noderotation_in(root, &args, Some(&policy));
    assert_eq!(piped.code, 0, "{}", piped.stderr);
    let from_file = noderotation(&PLAN);
    assert_eq!(
        piped.stdout.replace("(<stdin>)", ""),
        from_file.stdout.replace("(deploy/examples/single-pool.yaml)", ""),
        "the same plan, only the source named differently"
    );
    assert!(piped.stdout.contains("<stdin>"), "{}", piped.stdout);
}

#[test]
fn developer_commands_outside_a_checkout() {
    let elsewhere = std::env::temp_dir();
    let check = noderotation_in(&elsewhere, &["rules", "check"], None);
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(check.stdout.contains("the rules built into this binary"), "{}", check.stdout);
    let docs = noderotation_in(&elsewhere, &["docs", "--check"], None);
    assert_eq!(docs.code, 1);
    assert!(docs.stderr.contains("checkout of the noderotation repository"), "{}", docs.stderr);
    let diff = noderotation_in(&elsewhere, &["rules", "diff", "--base", "main"], None);
    assert_eq!(diff.code, 1);
    assert!(diff.stderr.contains("needs a git checkout"), "{}", diff.stderr);
}
