//! The manifests under `deploy/examples/` are part of the documentation; these tests keep them
//! honest. Valid examples must decode, validate and be feasible for a typical pool; each file
//! under `invalid/` must be rejected by the CRD rule its header names (checked against the
//! generated schema) and, where local validation covers that rule, locally too; each file under
//! `reconcile-invalid/` must pass the schema but fail reconcile-time validation.
//!
//! Header lines of the invalid files:
//! - `# Schema: <path> <keyword>`: `<keyword>` exists at `<path>` in the generated schema
//!   (`a.b[]` = the items of `b`; `required:<name>` = `<name>` is required there);
//! - `# Local: decode <text>` (decoding fails, naming `<text>`), `invalid <field>` (exactly one
//!   `Invalid` error, for `<field>`), or `fatal <Reason>` (exactly one fatal finding).
use std::path::{Path, PathBuf};

use chrono::{Duration, TimeZone, Utc};
use kube::CustomResourceExt;
use serde_json::Value;

use super::crd::RotationPolicy;
use super::duration::ExpireAfter;
use super::feasibility::{self, PoolFacts, Severity};
use super::plan::parse_policies;
use super::resolve::{self, Governance, PolicySelector};
use super::settings::Effective;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn header<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
        .map(str::trim)
}

fn typical_pool() -> PoolFacts {
    PoolFacts {
        expire_after: ExpireAfter::KARPENTER_DEFAULT,
        termination_grace_period: Some(Duration::hours(1)),
        nodes: Some(5),
        exhausted_limits: vec![],
        static_pool: false,
    }
}

fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().unwrap_or_else(|| panic!("date"))
}

#[test]
fn valid_examples_decode_validate_and_are_feasible() {
    let files = yaml_files(&examples_dir());
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let policies =
            parse_policies(&read(&path)).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        for policy in policies {
            let name = policy.metadata.name.clone().unwrap_or_default();
            let settings = Effective::from_spec(&policy.spec)
                .unwrap_or_else(|e| panic!("{} {name}: {e}", path.display()));
            let assessment = feasibility::assess(&settings, &typical_pool(), now());
            assert!(
                !assessment.has_fatal(),
                "{} {name}: {:?}",
                path.display(),
                assessment.findings
            );
        }
    }
}

#[test]
fn multi_pool_example_resolves_by_specificity() {
    let policies = parse_policies(&read(&examples_dir().join("multi-pool-specificity.yaml")))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let selectors: Vec<PolicySelector<'_>> = policies
        .iter()
        .map(|p| PolicySelector {
            name: p.metadata.name.as_deref().unwrap_or_default(),
            selector: &p.spec.node_pool_selector,
        })
        .collect();
    let governs = |labels: &[(&str, &str)]| {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        resolve::resolve(&selectors, &labels)
    };
    let policy = |g: Governance| g.policy().map(str::to_string);
    assert_eq!(
        policy(governs(&[("workload", "api"), ("tier", "gold")])).as_deref(),
        Some("api-gold")
    );
    assert_eq!(policy(governs(&[("workload", "batch")])).as_deref(), Some("batch"));
    assert_eq!(policy(governs(&[("workload", "api")])).as_deref(), Some("everything-else"));
    assert_eq!(policy(governs(&[])).as_deref(), Some("everything-else"));
}

/// Walks `spec.a[].b` through the generated openAPIV3Schema.
fn schema_at<'a>(root: &'a Value, path: &str) -> &'a Value {
    let mut node = root;
    for segment in path.split('.') {
        let name = segment.trim_end_matches("[]");
        node = &node["properties"][name];
        for _ in 0..(segment.len() - name.len()) / 2 {
            node = &node["items"];
        }
        assert!(!node.is_null(), "no schema at {path} (segment {segment})");
    }
    node
}

#[test]
fn invalid_examples_are_rejected_by_the_rule_they_name() {
    let crd = serde_json::to_value(RotationPolicy::crd()).unwrap_or_default();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let files = yaml_files(&examples_dir().join("invalid"));
    assert!(files.len() >= 20, "{} invalid examples", files.len());
    for path in files {
        let text = read(&path);
        let file = path.display();
        assert!(header(&text, "Invalid").is_some(), "{file}: no `# Invalid:` line");
        assert!(header(&text, "Rejected by the CRD schema").is_some(), "{file}: no rule comment");
        let rule = header(&text, "Schema").unwrap_or_else(|| panic!("{file}: no `# Schema:`"));
        let (at, keyword) = rule.split_once(' ').unwrap_or_else(|| panic!("{file}: {rule}"));
        let node = schema_at(schema, at);
        match keyword.strip_prefix("required:") {
            Some(field) => assert!(
                node["required"].as_array().is_some_and(|r| r.iter().any(|f| f == field)),
                "{file}: {field} is not required at {at}"
            ),
            None => assert!(!node[keyword].is_null(), "{file}: no {keyword} at {at}: {node}"),
        }
        check_local(&path, &text);
    }
}

#[test]
fn reconcile_invalid_examples_fail_local_validation_only() {
    let files = yaml_files(&examples_dir().join("reconcile-invalid"));
    assert!(!files.is_empty());
    for path in files {
        let text = read(&path);
        assert!(header(&text, "Schema").is_none(), "{}: the schema accepts it", path.display());
        check_local(&path, &text);
    }
}

fn check_local(path: &Path, text: &str) {
    let file = path.display();
    let local = header(text, "Local").unwrap_or_else(|| panic!("{file}: no `# Local:`"));
    let (kind, what) = local.split_once(' ').unwrap_or_else(|| panic!("{file}: {local}"));
    let decoded = parse_policies(text);
    if kind == "decode" {
        let err = decoded.err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(err.contains(what), "{file}: decoding should fail naming {what}, got {err:?}");
        return;
    }
    let policies = decoded.unwrap_or_else(|e| panic!("{file}: {e:#}"));
    assert_eq!(policies.len(), 1, "{file}");
    let validated = Effective::from_spec(&policies[0].spec);
    match kind {
        "invalid" => {
            let errors = validated.err().map(|e| e.errors).unwrap_or_default();
            let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(fields, [what], "{file}: {errors:?}");
        }
        "fatal" => {
            let settings = validated.unwrap_or_else(|e| panic!("{file}: {e}"));
            let assessment = feasibility::assess(&settings, &typical_pool(), now());
            let fatal: Vec<String> = assessment
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Fatal)
                .map(|f| f.reason.to_string())
                .collect();
            assert_eq!(fatal, [what], "{file}");
        }
        other => panic!("{file}: unknown Local kind {other}"),
    }
}
