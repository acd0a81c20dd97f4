//! The chart's Grafana dashboard, as the tests read it: its queries and the metric names they
//! use, checked against what the operator exports (`tests/deploy.rs` against a rendered registry,
//! `tests/apiserver.rs` against a real `/metrics`).
use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// `deploy/helm/noderotation/dashboards/noderotation.json`.
pub fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/helm/noderotation/dashboards/noderotation.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every PromQL query of the dashboard: the panels' targets and the template variables'.
pub fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.extend(target["expr"].as_str().map(str::to_string));
        }
    }
    for var in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        out.extend(var["query"]["query"].as_str().map(str::to_string));
    }
    out
}

/// The `noderotation_*` metric names a query reads (series names: `_bucket` of a histogram).
pub fn metric_names(query: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = query;
    while let Some(at) = rest.find("noderotation_") {
        let name: String =
            rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[at + name.len()..];
        out.insert(name);
    }
    out
}

/// The series names of a Prometheus text exposition.
pub fn exported(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| l.starts_with("noderotation_"))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// `query: name` for every metric a query of the dashboard reads that `scrape` does not export.
pub fn unresolved(dashboard: &Value, scrape: &str) -> Vec<String> {
    let have = exported(scrape);
    let mut out = Vec::new();
    for q in queries(dashboard) {
        let names = metric_names(&q);
        assert!(!names.is_empty(), "a query that reads no noderotation metric: {q}");
        for name in names.into_iter().filter(|n| !have.contains(n)) {
            out.push(format!("{q}: {name}"));
        }
    }
    out
}
