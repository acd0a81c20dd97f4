//! The install artefacts, checked without a cluster, Helm or Docker: the chart's values files
//! against its schema, the templates' use of the standard keys, the alerts' runbooks, the RBAC
//! `noderotation uninstall` needs, and the Dockerfile copying everything the build reads.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn chart() -> PathBuf {
    Path::new(REPO).join("deploy/helm/noderotation")
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---- values against the schema -----------------------------------------------------------------

/// Helm's coalescing of user values over the chart's: maps merge, `null` deletes, the rest
/// (lists included) replaces.
fn coalesce(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(existing) = b.get_mut(k).filter(|e| e.is_object()) {
                    coalesce(existing, v);
                } else {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

fn type_ok(value: &Value, ty: &str) -> bool {
    match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "null" => value.is_null(),
        other => panic!("schema type {other} is not handled by this check"),
    }
}

/// The draft-07 subset `values.schema.json` uses: type, enum, required, properties,
/// additionalProperties, items, minimum, maximum, minLength. (`pattern` is left to Helm.)
fn validate(value: &Value, schema: &Value, path: &str, errors: &mut Vec<String>) {
    if let Some(ty) = schema.get("type") {
        let ok = match ty {
            Value::String(t) => type_ok(value, t),
            Value::Array(ts) => ts.iter().any(|t| type_ok(value, t.as_str().unwrap_or(""))),
            _ => false,
        };
        if !ok {
            errors.push(format!("{path}: {value} is not of type {ty}"));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    if let Some(n) = value.as_f64() {
        if schema.get("minimum").and_then(Value::as_f64).is_some_and(|m| n < m) {
            errors.push(format!("{path}: {n} is below the minimum"));
        }
        if schema.get("maximum").and_then(Value::as_f64).is_some_and(|m| n > m) {
            errors.push(format!("{path}: {n} is above the maximum"));
        }
    }
    if let (Some(s), Some(min)) = (value.as_str(), schema.get("minLength").and_then(Value::as_u64))
        && (s.chars().count() as u64) < min
    {
        errors.push(format!("{path}: {s:?} is shorter than {min}"));
    }
    if let Some(obj) = value.as_object() {
        for required in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            let key = required.as_str().unwrap_or_default();
            if !obj.contains_key(key) {
                errors.push(format!("{path}: required {key} is missing"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, v) in obj {
            let sub = format!("{path}.{k}");
            match (props.and_then(|p| p.get(k)), schema.get("additionalProperties")) {
                (Some(s), _) => validate(v, s, &sub, errors),
                (None, Some(Value::Bool(false))) => {
                    errors.push(format!("{sub}: not allowed by the schema"))
                }
                (None, Some(s @ Value::Object(_))) => validate(v, s, &sub, errors),
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            validate(item, schema, &format!("{path}[{i}]"), errors);
        }
    }
}

fn schema() -> Value {
    serde_json::from_str(&read(chart().join("values.schema.json"))).expect("schema is JSON")
}

fn values_with(file: Option<&Path>) -> Value {
    let mut values = yaml(chart().join("values.yaml"));
    if let Some(file) = file {
        let over = yaml(file);
        coalesce(&mut values, &over);
    }
    values
}

fn ci_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart().join("ci"))
        .expect("deploy/helm/noderotation/ci")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn chart_values_and_every_ci_values_file_satisfy_the_schema() {
    let schema = schema();
    let files = ci_files();
    for name in ["default-values.yaml", "all-options-values.yaml", "servicemonitor-values.yaml"] {
        assert!(files.iter().any(|f| f.ends_with(name)), "ci/{name} is missing");
    }
    let mut errors = Vec::new();
    validate(&values_with(None), &schema, "values.yaml", &mut errors);
    for file in &files {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        validate(&values_with(Some(file)), &schema, &name, &mut errors);
    }
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn the_schema_check_rejects_what_helm_would() {
    let schema = schema();
    let bad = [
        json!({"serviceMonitor": {"enabled": "yes"}}),
        json!({"extraArgs": "--tick-seconds=30"}),
        json!({"tolerations": {"key": "x"}}),
        json!({"placeholder": {"priorityClass": {"value": 10}}}),
        json!({"uninstallHook": {"waitSeconds": 0}}),
        json!({"typo": true}),
    ];
    for over in bad {
        let mut values = values_with(None);
        coalesce(&mut values, &over);
        let mut errors = Vec::new();
        validate(&values, &schema, "", &mut errors);
        assert!(!errors.is_empty(), "{over} passed the schema");
    }
}

#[test]
fn every_standard_key_is_in_values_schema_and_templates() {
    let values = values_with(None);
    let schema = schema();
    let templates: String = std::fs::read_dir(chart().join("templates"))
        .expect("templates")
        .map(|e| read(e.expect("dir entry").path()))
        .collect();
    for key in [
        "nameOverride",
        "fullnameOverride",
        "podAnnotations",
        "podLabels",
        "podSecurityContext",
        "securityContext",
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
        "extraArgs",
        "extraEnv",
        "serviceMonitor",
        "uninstallHook",
    ] {
        assert!(values.get(key).is_some(), "values.yaml lacks {key}");
        assert!(schema["properties"].get(key).is_some(), "values.schema.json lacks {key}");
        assert!(templates.contains(&format!(".Values.{key}")), "no template uses {key}");
    }
    assert_eq!(values["serviceMonitor"]["enabled"], json!(false));
    assert_eq!(values["priorityClassName"], json!("system-cluster-critical"));
    let term = &values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!(term, &json!({"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}));
    let sm = read(chart().join("templates/servicemonitor.yaml"));
    assert!(sm.starts_with("{{- if .Values.serviceMonitor.enabled }}"), "ServiceMonitor is opt-in");
    assert!(sm.contains("kind: ServiceMonitor"));
}

/// The anchor GitHub gives a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn operations_anchors() -> BTreeSet<String> {
    read(Path::new(REPO).join("docs/operations.md"))
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_alert_has_a_description_and_a_runbook_heading_in_operations_md() {
    let rules = read(chart().join("templates/prometheusrule.yaml"));
    let anchors = operations_anchors();
    assert!(
        values_with(None)["prometheusRule"]["runbookBaseUrl"]
            .as_str()
            .is_some_and(|u| u.ends_with("docs/operations.md"))
    );
    let blocks: Vec<&str> = rules.split("- alert: ").skip(1).collect();
    assert!(blocks.len() >= 10, "alerts not found");
    for block in blocks {
        let name = block.lines().next().unwrap_or_default().trim();
        assert!(block.contains("description: "), "{name}: no description");
        let runbook = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("runbook_url: "))
            .unwrap_or_else(|| panic!("{name}: no runbook_url"));
        let want = format!("\"{{{{ $runbook }}}}#{}\"", name.to_lowercase());
        assert_eq!(runbook, want, "{name}: runbook_url");
        assert!(anchors.contains(&name.to_lowercase()), "docs/operations.md has no heading {name}");
        // A healthy install, scraped or not, fires nothing: no alert on a missing series.
        let expr = block.lines().find(|l| l.trim().starts_with("expr:")).unwrap_or_default();
        assert!(!expr.contains("absent"), "{name}: {expr} fires when nothing is scraped");
    }
}

// ---- uninstall: the hook and the RBAC it needs -------------------------------------------------

/// The chart's templates with every action replaced, enough to parse them as YAML.
fn pseudo_render(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("{{") && t.ends_with("}}") && !t.contains(':') {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}").map_or(rest.len(), |e| start + e + 2);
            let action = &rest[start..end];
            out.push_str(if action.contains("nindent") { " {}" } else { "x" });
            rest = &rest[end..];
        }
        out.push_str(rest);
        out.push('\n');
    }
    out
}

fn documents(text: &str) -> Vec<Value> {
    text.split("\n---")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml::from_str(d).unwrap_or_else(|e| panic!("{e}\n{d}")))
        .collect()
}

fn grants(docs: &[Value], kind: &str, group: &str, resource: &str, verb: &str) -> bool {
    docs.iter().filter(|d| d["kind"] == json!(kind)).any(|d| {
        d["rules"].as_array().into_iter().flatten().any(|r| {
            let has = |field: &str, want: &str| {
                r[field].as_array().is_some_and(|v| v.iter().any(|x| x == want || x == "*"))
            };
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    })
}

fn assert_uninstall_rbac(docs: &[Value], which: &str) {
    for (kind, group, resource, verb) in [
        ("ClusterRole", "karpenter.sh", "nodepools", "list"),
        ("ClusterRole", "karpenter.sh", "nodepools", "get"),
        ("ClusterRole", "karpenter.sh", "nodepools", "patch"),
        ("ClusterRole", "karpenter.sh", "nodeclaims", "list"),
        ("ClusterRole", "karpenter.sh", "nodeclaims", "patch"),
        ("ClusterRole", "", "nodes", "list"),
        ("ClusterRole", "", "nodes", "patch"),
        ("ClusterRole", "", "pods", "list"),
        ("ClusterRole", "noderotation.io", "rotationpolicies", "list"),
        ("Role", "", "pods", "delete"),
        ("Role", "coordination.k8s.io", "leases", "get"),
        ("Role", "apps", "deployments", "get"),
        ("Role", "apps", "deployments/scale", "patch"),
    ] {
        assert!(
            grants(docs, kind, group, resource, verb),
            "{which}: {kind} lacks {verb} {group}/{resource}"
        );
    }
}

#[test]
fn chart_and_kustomize_rbac_grant_what_uninstall_needs() {
    let chart_rbac = documents(&pseudo_render(&read(chart().join("templates/rbac.yaml"))));
    assert_uninstall_rbac(&chart_rbac, "chart");
    let base = documents(&read(Path::new(REPO).join("deploy/base/rbac.yaml")));
    assert_uninstall_rbac(&base, "deploy/base");
}

#[test]
fn helm_uninstall_runs_noderotation_uninstall_as_a_pre_delete_hook() {
    let text = read(chart().join("templates/uninstall-job.yaml"));
    assert!(text.starts_with("{{- if .Values.uninstallHook.enabled }}"));
    let job = &documents(&pseudo_render(&text))[0];
    assert_eq!(job["kind"], json!("Job"));
    assert_eq!(job["metadata"]["annotations"]["helm.sh/hook"], json!("pre-delete"));
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook-delete-policy"],
        json!("before-hook-creation,hook-succeeded")
    );
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], json!("Never"));
    assert!(
        text.contains("serviceAccountName: {{ include \"noderotation.serviceAccountName\" . }}")
    );
    let args = &pod["containers"][0]["args"];
    assert_eq!(args[0], json!("uninstall"));
    assert_eq!(args[1], json!("--stop-deployment"));
    // The hook's pod must not match the Deployment's selector, or it would wait for itself.
    assert!(
        text.contains("app.kubernetes.io/name: {{ include \"noderotation.name\" . }}-uninstall")
    );
    assert_eq!(values_with(None)["uninstallHook"]["enabled"], json!(true));
}
