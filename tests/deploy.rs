//! The install artefacts, checked without a cluster, Helm or Docker: the chart's values files
//! against its schema, the templates' use of the standard keys, the alerts' runbooks, the RBAC
//! `noderotation uninstall` needs, and the Dockerfile copying everything the build reads.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use noderotation::cluster::access::Gate;
use serde_json::{Value, json};

#[path = "common/dashboard.rs"]
mod dashboard;

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
    serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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

// ---- the published release ---------------------------------------------------------------------

/// The image the release workflow publishes (its `IMAGE` variable).
fn published_image() -> String {
    let workflow = read(Path::new(REPO).join(".github/workflows/release.yml"));
    workflow
        .lines()
        .find_map(|l| l.trim().strip_prefix("IMAGE: "))
        .unwrap_or_else(|| panic!("release.yml sets no IMAGE"))
        .trim()
        .to_string()
}

#[test]
fn the_chart_installs_the_published_release_as_is() {
    let meta = yaml(chart().join("Chart.yaml"));
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(meta["version"], json!(version), "chart version = crate version");
    assert_eq!(meta["appVersion"], json!(version), "appVersion = crate version");
    for key in ["kubeVersion", "home", "sources", "maintainers", "annotations"] {
        assert!(meta.get(key).is_some_and(|v| !v.is_null()), "Chart.yaml lacks {key}");
    }
    for key in [
        "artifacthub.io/license",
        "artifacthub.io/crds",
        "artifacthub.io/images",
        "artifacthub.io/links",
    ] {
        assert!(meta["annotations"].get(key).is_some(), "Chart.yaml lacks the annotation {key}");
    }
    // The default image is the published one, its tag the chart's appVersion.
    let values = values_with(None);
    assert_eq!(values["image"]["repository"], json!(published_image()));
    assert_eq!(values["image"]["tag"], json!(""), "the tag defaults to appVersion");
    let base = yaml(Path::new(REPO).join("deploy/base/kustomization.yaml"));
    assert_eq!(
        base["images"][0],
        json!({"name": "noderotation", "newName": published_image(), "newTag": version}),
        "the kustomize base names the published image too"
    );
    let images = meta["annotations"]["artifacthub.io/images"].as_str().unwrap_or_default();
    assert!(images.contains(&format!("{}:{version}", published_image())), "{images}");
    let changelog = read(Path::new(REPO).join("CHANGELOG.md"));
    assert!(changelog.contains(&format!("## [{version}] - ")), "CHANGELOG.md has no {version}");
    let operations = read(Path::new(REPO).join("docs/operations.md"));
    let crd_changes = operations.split("### CRD changes per release").nth(1).unwrap_or_default();
    assert!(
        crd_changes.lines().any(|l| l.starts_with(&format!("| {version} |"))),
        "docs/operations.md: the CRD changes table has no row for {version}"
    );
    let notes = read(chart().join("templates/NOTES.txt"));
    for command in ["kubectl get rotationpolicies", "rollout status", "noderotation plan"] {
        assert!(notes.contains(command), "NOTES.txt does not print {command:?}");
    }
}

// ---- rotationPolicies from values ---------------------------------------------------------------

/// The CRD's spec schema as the values schema carries it: without descriptions, defaults and the
/// Kubernetes extensions a JSON Schema validator ignores, and closed (`additionalProperties:
/// false`) wherever the CRD lists properties, so that a typo in values fails `helm install`.
fn values_spec_schema() -> Value {
    fn close(v: &mut Value) {
        if let Value::Object(m) = v {
            m.retain(|k, _| {
                !(k == "description"
                    || k == "default"
                    || k == "nullable"
                    || k.starts_with("x-kubernetes-"))
            });
            if m.contains_key("properties") && !m.contains_key("additionalProperties") {
                m.insert("additionalProperties".into(), Value::Bool(false));
            }
            if let Some(Value::Object(props)) = m.get_mut("properties") {
                props.values_mut().for_each(close);
            }
            for key in ["items", "additionalProperties"] {
                if let Some(sub @ Value::Object(_)) = m.get_mut(key) {
                    close(sub);
                }
            }
            if let Some(Value::Array(any)) = m.get_mut("anyOf") {
                any.iter_mut().for_each(close);
            }
        }
    }
    let crd = serde_json::to_value(noderotation::policy::crd::crd().expect("crd")).expect("json");
    let mut spec =
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone();
    close(&mut spec);
    spec
}

#[test]
fn values_schema_checks_each_rotation_policy_as_the_crd_does() {
    let schema = schema();
    let item = &schema["properties"]["rotationPolicies"]["items"];
    let want = values_spec_schema();
    if item["properties"]["spec"] != want {
        let out = Path::new(REPO).join("target/values-spec-schema.json");
        std::fs::write(&out, serde_json::to_string_pretty(&want).expect("json")).expect("write");
        panic!(
            "values.schema.json: rotationPolicies.items.properties.spec is not the CRD's spec \
             schema; replace it with {}",
            out.display()
        );
    }
    assert_eq!(item["required"], json!(["name", "spec"]));
    assert_eq!(values_with(None)["rotationPolicies"], json!([]), "no policy by default");
}

#[test]
fn the_schema_rejects_a_bad_rotation_policy_in_values() {
    let schema = schema();
    let window = json!({"timezone": "UTC", "days": ["Sat"], "start": "02:00", "end": "06:00"});
    let good =
        json!({"name": "nights", "spec": {"nodePoolSelector": {}, "maintenanceWindows": [window]}});
    let check = |policy: &Value| {
        let mut values = values_with(None);
        coalesce(&mut values, &json!({"rotationPolicies": [policy]}));
        let mut errors = Vec::new();
        validate(&values, &schema, "", &mut errors);
        errors
    };
    assert!(check(&good).is_empty(), "{:?}", check(&good));
    let mut typo = good.clone();
    typo["spec"]["maintenanceWindow"] = json!([]);
    let mut no_selector = good.clone();
    no_selector["spec"].as_object_mut().expect("spec").remove("nodePoolSelector");
    let mut day = good.clone();
    day["spec"]["maintenanceWindows"][0]["days"] = json!("Sat");
    for bad in [typo, no_selector, day, json!({"spec": good["spec"]})] {
        assert!(!check(&bad).is_empty(), "{bad} passed the schema");
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
        "eksAutoMode",
        "rotationPolicies",
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
    // Absolute by default: the operations guide of this release in the published repository.
    assert_eq!(values_with(None)["prometheusRule"]["runbookBaseUrl"], json!(""));
    assert!(rules.contains(
        r#"$runbook := .Values.prometheusRule.runbookBaseUrl | default (include "noderotation.releaseDocs" . | printf "%s/docs/operations.md")"#
    ));
    let helpers = read(chart().join("templates/_helpers.tpl"));
    assert!(helpers.contains(r#"printf "%s/blob/v%s" .Chart.Home .Chart.AppVersion"#), "{helpers}");
    let meta = yaml(chart().join("Chart.yaml"));
    let home = meta["home"].as_str().unwrap_or_default();
    assert!(home.starts_with("https://"), "Chart.yaml home {home:?} is not an absolute URL");
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
        .map(|d| serde_norway::from_str(d).unwrap_or_else(|e| panic!("{e}\n{d}")))
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
        ("ClusterRole", "karpenter.sh", "nodeclaims", "delete"),
        ("ClusterRole", "", "nodes", "list"),
        ("ClusterRole", "", "nodes", "get"),
        ("ClusterRole", "", "nodes", "patch"),
        ("ClusterRole", "", "pods", "list"),
        ("ClusterRole", "noderotation.io", "rotationpolicies", "list"),
        ("Role", "", "pods", "list"),
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

// ---- RBAC: exactly the requests the code sends ---------------------------------------------------

/// One granted verb: (role kind, group, resource, verb, narrowed to resourceNames).
type Grant = (String, String, String, String, bool);

/// Every verb the ClusterRoles and Roles of `docs` grant, one entry per (group, resource, verb).
fn granted(docs: &[Value]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for doc in
        docs.iter().filter(|d| d["kind"] == json!("ClusterRole") || d["kind"] == json!("Role"))
    {
        let kind = doc["kind"].as_str().unwrap_or_default();
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let strings = |field: &str| -> Vec<String> {
                rule[field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            let named = !strings("resourceNames").is_empty();
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        out.insert((kind.into(), group.clone(), resource.clone(), verb, named));
                    }
                }
            }
        }
    }
    out
}

/// What the code sends (`src/cluster/access.rs`) under `gate`, as the roles must grant it.
fn sent(gate: Gate) -> BTreeSet<Grant> {
    use noderotation::cluster::access::{Name, Scope, grants};
    let mut out = BTreeSet::new();
    for (scope, kind) in [(Scope::Cluster, "ClusterRole"), (Scope::Namespace, "Role")] {
        for (group, resource, verb, name) in grants(scope, gate) {
            out.insert((
                kind.into(),
                group.into(),
                resource.into(),
                verb.into(),
                name != Name::Any,
            ));
        }
    }
    out
}

/// The verbs a role grants that the code never sends, and those the code sends that no role
/// grants: both must be empty.
fn rbac_difference(docs: &[Value], gate: Gate) -> (Vec<Grant>, Vec<Grant>) {
    let (granted, sent) = (granted(docs), sent(gate));
    (granted.difference(&sent).cloned().collect(), sent.difference(&granted).cloned().collect())
}

fn chart_rbac() -> Vec<Value> {
    documents(&pseudo_render(&read(chart().join("templates/rbac.yaml"))))
}

fn base_rbac() -> Vec<Value> {
    documents(&read(Path::new(REPO).join("deploy/base/rbac.yaml")))
}

/// The chart's roles bound to the operator when `metrics.auth.enabled` (not the reader role it
/// offers scrapers).
fn chart_metrics_auth_rbac() -> Vec<Value> {
    let docs = documents(&pseudo_render(&read(chart().join("templates/metrics-auth.yaml"))));
    docs.into_iter()
        .filter(|d| {
            !d["metadata"]["name"].as_str().unwrap_or_default().ends_with("-metrics-reader")
        })
        .collect()
}

#[test]
fn chart_and_kustomize_roles_grant_exactly_the_requests_the_code_sends() {
    for (which, docs, gate) in [
        ("chart", chart_rbac(), Gate::Always),
        ("deploy/base", base_rbac(), Gate::Always),
        ("chart with metrics.auth", chart_metrics_auth_rbac(), Gate::MetricsAuth),
    ] {
        let (extra, missing) = rbac_difference(&docs, gate);
        assert!(
            extra.is_empty(),
            "{which}: granted but never sent (src/cluster/access.rs): {extra:#?}"
        );
        assert!(missing.is_empty(), "{which}: sent but not granted: {missing:#?}");
    }
}

/// The check above fails on one verb too many and on one too few (a test that cannot fail is
/// no test).
#[test]
fn the_rbac_check_catches_an_added_and_a_removed_verb() {
    let mut docs = base_rbac();
    let role = docs.iter_mut().find(|d| d["kind"] == json!("ClusterRole")).expect("ClusterRole");
    let nodes = role["rules"]
        .as_array_mut()
        .and_then(|rules| rules.iter_mut().find(|r| r["resources"] == json!(["nodes"])))
        .expect("the nodes rule");
    nodes["verbs"].as_array_mut().expect("verbs").push(json!("update"));
    let (extra, missing) = rbac_difference(&docs, Gate::Always);
    assert_eq!(
        extra,
        [("ClusterRole".into(), "".into(), "nodes".into(), "update".into(), false)],
        "an added verb"
    );
    assert!(missing.is_empty());
    let mut docs = base_rbac();
    let role = docs.iter_mut().find(|d| d["kind"] == json!("Role")).expect("Role");
    let pods = role["rules"]
        .as_array_mut()
        .and_then(|rules| rules.iter_mut().find(|r| r["resources"] == json!(["pods"])))
        .expect("the pods rule");
    pods["verbs"].as_array_mut().expect("verbs").retain(|v| v != "watch");
    let (extra, missing) = rbac_difference(&docs, Gate::Always);
    assert!(extra.is_empty());
    assert_eq!(
        missing,
        [("Role".into(), "".into(), "pods".into(), "watch".into(), false)],
        "a removed verb"
    );
}

// ---- the admission policy on our annotations -----------------------------------------------------

#[test]
fn chart_and_kustomize_ship_the_same_admission_policy_on_by_default() {
    let text = read(chart().join("templates/admission-policy.yaml"));
    assert!(text.starts_with("{{- if .Values.admissionPolicy.enabled }}"));
    assert_eq!(values_with(None)["admissionPolicy"]["enabled"], json!(true));
    let rendered = documents(&pseudo_render(&text));
    let base = documents(&read(Path::new(REPO).join("deploy/base/admission-policy.yaml")));
    let of = |docs: &[Value], kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == json!(kind))
            .cloned()
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    // The policy itself, CEL and all, is the same text in both.
    let policy = of(&base, "ValidatingAdmissionPolicy");
    assert_eq!(of(&rendered, "ValidatingAdmissionPolicy")["spec"], policy["spec"]);
    let (chart_binding, base_binding) = (
        of(&rendered, "ValidatingAdmissionPolicyBinding"),
        of(&base, "ValidatingAdmissionPolicyBinding"),
    );
    for field in ["validationActions", "matchResources"] {
        assert_eq!(chart_binding["spec"][field], base_binding["spec"][field], "{field}");
    }
    assert_eq!(
        chart_binding["spec"]["paramRef"]["parameterNotFoundAction"],
        base_binding["spec"]["paramRef"]["parameterNotFoundAction"]
    );
    assert_eq!(base_binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(policy["spec"]["paramKind"], json!({"apiVersion": "v1", "kind": "ServiceAccount"}));
    // The base's binding names the base's ServiceAccount, and kustomize renames it with it.
    assert_eq!(base_binding["spec"]["paramRef"]["name"], json!("noderotation"));
    let kustomization = yaml(Path::new(REPO).join("deploy/base/kustomization.yaml"));
    assert!(
        kustomization["resources"]
            .as_array()
            .is_some_and(|r| r.contains(&json!("admission-policy.yaml")))
    );
    assert_eq!(kustomization["configurations"], json!(["kustomizeconfig.yaml"]));
    // The uninstall hook lifts it first.
    let hook = read(chart().join("templates/uninstall-job.yaml"));
    assert!(hook.contains("- --admission-policy-binding"), "the hook deletes the binding");
}

#[test]
fn chart_and_kustomize_rbac_grant_what_uninstall_needs() {
    assert_uninstall_rbac(&chart_rbac(), "chart");
    assert_uninstall_rbac(&base_rbac(), "deploy/base");
}

/// The controller reads Karpenter's `Nominated` Events on its placeholders (a watch, and a
/// list when a rotation ends): list and watch in its own namespace only, never cluster-wide.
#[test]
fn rbac_reads_events_only_in_the_controller_namespace() {
    let chart_rbac = documents(&pseudo_render(&read(chart().join("templates/rbac.yaml"))));
    let base = documents(&read(Path::new(REPO).join("deploy/base/rbac.yaml")));
    for (docs, which) in [(&chart_rbac, "chart"), (&base, "deploy/base")] {
        for verb in ["list", "watch"] {
            assert!(grants(docs, "Role", "", "events", verb), "{which}: Role lacks {verb} events");
            assert!(
                !grants(docs, "ClusterRole", "", "events", verb),
                "{which}: the ClusterRole grants {verb} on events in every namespace"
            );
        }
    }
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

// ---- version -----------------------------------------------------------------------------------
#[test]
fn version_prints_the_crate_version_and_the_git_commit() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_noderotation"))
        .arg("--version")
        .output()
        .expect("run noderotation");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!("noderotation {} (commit {})", env!("CARGO_PKG_VERSION"), noderotation::COMMIT)
    );
    // Built from a git checkout (and not told otherwise), the commit is HEAD's.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(head) if std::env::var_os("NODEROTATION_GIT_COMMIT").is_none() => {
            assert_eq!(noderotation::COMMIT, head)
        }
        _ => assert!(!noderotation::COMMIT.is_empty()),
    }
}

// ---- the Dockerfile copies everything the build reads ------------------------------------------

/// `[section]` / `[[section]]` headers and their `key = "value"` lines.
fn manifest_sections(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            out.push((line.trim_matches(['[', ']']).to_string(), Vec::new()));
        } else if let (Some((k, v)), Some(last)) = (line.split_once('='), out.last_mut()) {
            let v = v.trim();
            if v.starts_with('"') {
                last.1.push((k.trim().to_string(), v.trim_matches('"').to_string()));
            }
        }
    }
    out
}

fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Every path `cargo build --release` of the image reads, relative to the repository root.
///
/// Targets: the lib (default `src/lib.rs`), every `[[bin]]` and every `[[bench]]` (a declared
/// target that is missing fails the manifest); `[[test]]` and `[[example]]` targets would count
/// too (there are none). Auto-discovered tests and examples are not needed: cargo discovers only
/// what exists, and the Dockerfile leaves `tests/` out on purpose. Then `build.rs` with what it
/// reads (`rules/`, `#[path]` modules), and every file `src/` embeds.
fn build_inputs() -> BTreeSet<String> {
    let repo = Path::new(REPO);
    let manifest = read(repo.join("Cargo.toml"));
    let mut needed: BTreeSet<String> =
        ["Cargo.toml", "Cargo.lock"].into_iter().map(String::from).collect();
    let mut has_lib = repo.join("src/lib.rs").exists();
    for (section, pairs) in manifest_sections(&manifest) {
        match section.as_str() {
            "package" => {
                needed.insert(get(&pairs, "build").unwrap_or("build.rs").to_string());
            }
            "lib" => {
                has_lib = false;
                needed.insert(get(&pairs, "path").unwrap_or("src/lib.rs").to_string());
            }
            "bin" | "bench" | "test" | "example" => {
                let name = get(&pairs, "name").expect("a declared target has a name");
                let dir = match section.as_str() {
                    "bin" => "src/bin",
                    "bench" => "benches",
                    "test" => "tests",
                    _ => "examples",
                };
                let path = get(&pairs, "path").map(String::from).unwrap_or_else(|| {
                    let single = format!("{dir}/{name}.rs");
                    if repo.join(&single).exists() {
                        single
                    } else {
                        format!("{dir}/{name}/main.rs")
                    }
                });
                assert!(repo.join(&path).exists(), "Cargo.toml target {name}: {path} is missing");
                // A target is a module tree: its directory comes along.
                needed.insert(match path.strip_suffix("/main.rs") {
                    Some(dir) if section != "bin" || dir != "src" => dir.to_string(),
                    _ => path,
                });
            }
            _ => {}
        }
    }
    if has_lib {
        needed.insert("src/lib.rs".into());
    }
    needed.insert("src".into());
    // build.rs: its rerun-if-changed paths and #[path] modules are what it reads.
    let build = read(repo.join("build.rs"));
    for line in build.lines() {
        if let Some(rest) = line.split("cargo::rerun-if-changed=").nth(1) {
            let path = rest.split(['"', '{']).next().unwrap_or_default().trim_end_matches('/');
            if !path.is_empty() {
                needed.insert(path.to_string());
            }
        }
    }
    for (file, target) in embedded(repo, &repo.join("build.rs"), &build) {
        needed.insert(resolve(repo, &file, &target));
    }
    // Everything src/ embeds.
    let mut stack = vec![repo.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                for (file, target) in embedded(repo, &path, &read(&path)) {
                    needed.insert(resolve(repo, &file, &target));
                }
            }
        }
    }
    needed
}

/// How a macro names a file, and where it resolves it from.
enum Base {
    /// `include_str!` / `include_bytes!` / `#[path]`: relative to the including file's directory.
    File,
    /// `#[grammar]` (pest_derive): relative to `src/`.
    Src,
    /// `include_dir!("$CARGO_MANIFEST_DIR/...")`: the path after the variable.
    Manifest,
}

fn embedded(repo: &Path, file: &Path, text: &str) -> Vec<(PathBuf, (Base, String))> {
    let mut out = Vec::new();
    for (marker, base) in [
        ("include_str!(", Base::File),
        ("include_bytes!(", Base::File),
        ("include_dir!(", Base::Manifest),
        ("#[path = ", Base::File),
        ("#[grammar = ", Base::Src),
    ] {
        for (i, _) in text.match_indices(marker) {
            // Skip mentions in comments and docs.
            let line_start = text[..i].rfind('\n').map_or(0, |p| p + 1);
            if text[line_start..i].contains("//") {
                continue;
            }
            let rest = &text[i + marker.len()..];
            let Some(literal) = rest.trim_start().strip_prefix('"') else { continue };
            let path = literal.split('"').next().unwrap_or_default().to_string();
            let base = match base {
                Base::File => Base::File,
                Base::Src => Base::Src,
                Base::Manifest => {
                    assert!(
                        path.starts_with("$CARGO_MANIFEST_DIR/"),
                        "{}: include_dir!({path}) is not under $CARGO_MANIFEST_DIR",
                        file.display()
                    );
                    Base::Manifest
                }
            };
            out.push((file.to_path_buf(), (base, path)));
        }
    }
    let _ = repo;
    out
}

/// The repository-relative path a macro reads.
fn resolve(repo: &Path, file: &Path, (base, path): &(Base, String)) -> String {
    let joined = match base {
        Base::File => file.parent().expect("a file has a directory").join(path),
        Base::Src => repo.join("src").join(path),
        Base::Manifest => repo.join(path.trim_start_matches("$CARGO_MANIFEST_DIR/")),
    };
    // Normalise `..` without touching the file system.
    let mut parts: Vec<String> = Vec::new();
    for c in joined.strip_prefix(repo).expect("inside the repository").components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    let rel = parts.join("/");
    assert!(repo.join(&rel).exists(), "{} embeds {rel}, which does not exist", file.display());
    rel
}

/// (source, destination) of every `COPY` from the build context (not `--from`), relative to the
/// WORKDIR (`/src`), which is where cargo runs.
fn copies(dockerfile: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let joined = dockerfile.replace("\\\n", " ");
    for line in joined.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("COPY ") else { continue };
        let words: Vec<&str> = rest.split_whitespace().collect();
        if words.iter().any(|w| w.starts_with("--from")) {
            continue;
        }
        let words: Vec<&str> = words.into_iter().filter(|w| !w.starts_with("--")).collect();
        let Some((dest, sources)) = words.split_last() else { continue };
        for source in sources {
            let source = source.trim_end_matches('/');
            let base = source.rsplit('/').next().unwrap_or(source);
            let into_dir = dest.ends_with('/') || *dest == "." || sources.len() > 1;
            let dir = dest.trim_end_matches('/').trim_start_matches("./").trim_start_matches('.');
            let dest = match (into_dir, dir.is_empty()) {
                (true, true) => base.to_string(),
                (true, false) => format!("{dir}/{base}"),
                (false, _) => dir.to_string(),
            };
            out.push((source.to_string(), dest.trim_start_matches('/').to_string()));
        }
    }
    out
}

/// Whether a `.dockerignore` pattern (as `deploy/Dockerfile.dockerignore` writes them) excludes
/// `path` or a directory above it.
fn ignored(pattern: &str, path: &str) -> bool {
    fn glob(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => {
                glob(&p[1..], s) || (!s.is_empty() && s[0] != b'/' && glob(p, &s[1..]))
            }
            (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
            _ => false,
        }
    }
    let pattern = pattern.trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').collect();
    (1..=parts.len()).any(|n| {
        let prefix = parts[..n].join("/");
        match pattern.strip_prefix("**/") {
            Some(tail) => (0..n).any(|k| glob(tail.as_bytes(), parts[k..n].join("/").as_bytes())),
            None => glob(pattern.as_bytes(), prefix.as_bytes()),
        }
    })
}

#[test]
fn the_dockerfile_copies_every_path_the_build_reads() {
    let dockerfile = read(Path::new(REPO).join("deploy/Dockerfile"));
    let copied = copies(&dockerfile);
    let needed = build_inputs();
    for must in [
        "Cargo.toml",
        "build.rs",
        "rules",
        "src",
        "benches/suite",
        "deploy/examples/scenarios/default.yaml",
        "src/rulebook/guard.pest",
    ] {
        assert!(needed.contains(must), "the build's inputs should include {must}: {needed:?}");
    }
    let mut missing = Vec::new();
    for path in &needed {
        let covered = copied.iter().any(|(source, dest)| {
            (path == source || path.starts_with(&format!("{source}/"))) && dest == source
        });
        if !covered {
            missing.push(path.clone());
        }
    }
    assert!(missing.is_empty(), "deploy/Dockerfile does not COPY (to the same path) {missing:?}");

    let ignore = read(Path::new(REPO).join("deploy/Dockerfile.dockerignore"));
    for pattern in ignore.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        assert!(!pattern.starts_with('!'), "re-inclusion patterns are not handled by this check");
        for path in &needed {
            assert!(
                !ignored(pattern, path),
                "deploy/Dockerfile.dockerignore `{pattern}` excludes {path}"
            );
        }
    }
}

#[test]
fn the_dockerfile_checks_catch_a_missing_copy_and_an_ignored_input() {
    let dockerfile = read(Path::new(REPO).join("deploy/Dockerfile"));
    let without_benches = dockerfile.replace("COPY benches benches\n", "");
    assert!(!copies(&without_benches).iter().any(|(s, _)| s == "benches"));
    assert!(copies(&dockerfile).iter().any(|(s, d)| s == "benches" && d == "benches"));
    assert!(
        copies("COPY Cargo.toml Cargo.lock build.rs ./\n")
            .contains(&("build.rs".into(), "build.rs".into()))
    );
    assert!(copies("COPY --from=build /out/x /x\n").is_empty());
    assert!(ignored("target/", "target/release/x"));
    assert!(ignored("**/*.swp", "src/a.swp"));
    assert!(ignored("deploy/", "deploy/examples/scenarios/default.yaml"));
    assert!(!ignored("tests/.bin/", "src/lib.rs"));
    assert!(!ignored(".git/", "src/sim/scenario/mod.rs"));
}

#[test]
fn the_dockerfile_cross_compiles_both_platforms_on_the_build_platform() {
    let dockerfile = read(Path::new(REPO).join("deploy/Dockerfile"));
    assert!(dockerfile.contains("FROM --platform=$BUILDPLATFORM "));
    assert!(dockerfile.contains("ARG TARGETARCH"));
    for triple in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"] {
        assert!(dockerfile.contains(triple), "{triple}");
    }
}

/// The Grafana dashboard is opt-in, ships the JSON file as is, and every query names a metric
/// the operator's registry exports once each series has a value (the apiserver tier checks the
/// same against a real `/metrics`: `status_and_the_dashboard_against_a_rotation_in_flight`).
#[test]
fn the_grafana_dashboard_is_opt_in_and_reads_only_exported_metrics() {
    use chrono::{Duration, TimeZone, Utc};
    use noderotation::telemetry::{Outcome, Phase, PoolGauges, Telemetry};
    let values = values_with(None);
    assert_eq!(values["grafanaDashboard"]["enabled"], json!(false));
    assert_eq!(values["grafanaDashboard"]["label"], json!("grafana_dashboard"));
    let template = read(chart().join("templates/grafana-dashboard.yaml"));
    assert!(template.starts_with("{{- if .Values.grafanaDashboard.enabled }}"), "opt-in");
    assert!(template.contains(".Files.Get \"dashboards/noderotation.json\""));
    let all = yaml(chart().join("ci/all-options-values.yaml"));
    assert_eq!(all["grafanaDashboard"]["enabled"], json!(true), "a ci values file renders it");

    let board = dashboard::dashboard();
    assert_eq!(board["uid"], json!("noderotation"));
    let t = Telemetry::new();
    let at = |s: i64| Utc.timestamp_opt(s, 0).single();
    t.set_pool_gauges(
        "general",
        &PoolGauges {
            window_period: Some(Duration::days(4)),
            age_threshold: Some(Duration::days(5)),
            rotation_chances: Some(2),
            throughput_capacity: Some(10),
            t_rot_estimate: Some(Duration::minutes(15)),
            t_rot_bound: Some(Duration::minutes(77)),
            max_unavailable: Some(3),
            next_window: at(1_780_000_000),
            nearest_deadline: at(1_780_500_000),
            ..PoolGauges::default()
        },
    );
    for outcome in Outcome::ALL {
        t.completed("general", outcome);
    }
    for phase in Phase::ALL {
        t.duration("general", phase, 60.0);
    }
    let unresolved = dashboard::unresolved(&board, &t.render());
    assert!(
        unresolved.is_empty(),
        "queries read metrics the operator does not export:\n{}",
        unresolved.join("\n")
    );
    // The panels the dashboard promises, each with a query.
    let titles: Vec<&str> = board["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["title"].as_str())
        .collect();
    for want in [
        "Next window",
        "Candidates",
        "In flight vs maxUnavailable",
        "Nearest deadline margin",
        "Rotations by outcome",
        "Failures",
        "Drain time",
    ] {
        assert!(titles.contains(&want), "no panel {want:?}: {titles:?}");
    }
    // A query naming a metric nobody exports is caught.
    let mut wrong = board.clone();
    wrong["panels"][0]["targets"][0]["expr"] = json!("noderotation_next_window_start");
    assert_eq!(dashboard::unresolved(&wrong, &t.render()).len(), 1);
}

// ---- the release workflow builds what deploy/Dockerfile builds ---------------------------------

/// Where `.github/workflows/release.yml` and the image builds drift apart: the workflow must build
/// `deploy/Dockerfile` from the repository root for exactly the platforms the Dockerfile
/// cross-compiles, passing every argument the Dockerfile needs and none it lacks; both bases are
/// pinned by digest; the binary is built with `cargo auditable` at the version CI's SBOM build
/// uses; and the image CI builds (`tests/image/build.sh`) has the Dockerfile's final stage.
fn release_drift(workflow: &Value, dockerfile: &str, ci_image: &str, all_sh: &str) -> Vec<String> {
    let mut drift = Vec::new();
    let steps = workflow["jobs"]["release"]["steps"].as_array().cloned().unwrap_or_default();
    let build: Vec<&Value> = steps
        .iter()
        .filter(|s| s["uses"].as_str().is_some_and(|u| u.starts_with("docker/build-push-action@")))
        .collect();
    let [build] = build.as_slice() else {
        return vec![format!(
            "release.yml: {} docker/build-push-action steps, not one",
            build.len()
        )];
    };
    let with = &build["with"];
    if with["file"] != json!("deploy/Dockerfile") || with["context"] != json!(".") {
        drift.push(format!(
            "release.yml builds {} in {}, not deploy/Dockerfile in .",
            with["file"], with["context"]
        ));
    }
    // The platforms: linux/<arch> for each TARGETARCH the Dockerfile's case statement accepts.
    let arches: BTreeSet<String> = dockerfile
        .lines()
        .filter_map(|l| l.trim().split_once(") triple=").map(|(arch, _)| format!("linux/{arch}")))
        .collect();
    let platforms: BTreeSet<String> = with["platforms"]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if arches.is_empty() || platforms != arches {
        drift
            .push(format!("release.yml platforms {platforms:?}, the Dockerfile builds {arches:?}"));
    }
    // Build arguments: each one passed is declared, and each declared one without a real default
    // (`unknown`, or none) is passed. TARGETARCH is buildx's own.
    let declared: Vec<(String, Option<String>)> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("ARG "))
        .map(|a| match a.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), Some(v.trim().to_string())),
            None => (a.trim().to_string(), None),
        })
        .filter(|(k, _)| k != "TARGETARCH")
        .collect();
    let passed: BTreeSet<String> = with["build-args"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().to_string()))
        .collect();
    for p in &passed {
        if !declared.iter().any(|(k, _)| k == p) {
            drift.push(format!("release.yml passes {p}, which deploy/Dockerfile does not declare"));
        }
    }
    for (k, default) in &declared {
        if matches!(default.as_deref(), None | Some("unknown")) && !passed.contains(k) {
            drift.push(format!("deploy/Dockerfile needs ARG {k}, which release.yml does not pass"));
        }
    }
    for from in dockerfile.lines().filter(|l| l.starts_with("FROM ")) {
        let image =
            from.split_whitespace().find(|w| !w.starts_with("--") && *w != "FROM").unwrap_or("");
        let digest = image.split_once("@sha256:").map(|(_, d)| d).unwrap_or("");
        if digest.len() != 64 || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
            drift.push(format!("deploy/Dockerfile: {image} is not pinned by digest"));
        }
    }
    let version = |text: &str| {
        text.lines().find_map(|l| {
            l.split("CARGO_AUDITABLE_VERSION=").nth(1).map(|v| {
                v.trim_start_matches("${CARGO_AUDITABLE_VERSION:-")
                    .trim_end_matches('}')
                    .trim()
                    .to_string()
            })
        })
    };
    if !dockerfile.contains("cargo auditable build --release --locked") {
        drift.push("deploy/Dockerfile does not build with cargo auditable".into());
    }
    if !all_sh.contains("cargo auditable build --release --locked")
        || version(all_sh) != version(dockerfile)
    {
        drift.push(format!(
            "tests/all.sh builds its image binary otherwise than deploy/Dockerfile (cargo-auditable {:?} vs {:?})",
            version(all_sh),
            version(dockerfile)
        ));
    }
    // The final stage: what runs, as whom.
    let last_stage = |text: &str| -> Vec<String> {
        let stage = text.rsplit("\nFROM ").next().unwrap_or_default();
        stage
            .lines()
            .filter(|l| {
                ["USER ", "EXPOSE ", "ENTRYPOINT ", "CMD "].iter().any(|k| l.starts_with(k))
            })
            .map(str::to_string)
            .collect()
    };
    if last_stage(dockerfile) != last_stage(ci_image) || last_stage(dockerfile).len() != 4 {
        drift.push(format!(
            "the final stage differs: deploy/Dockerfile {:?}, tests/image/build.sh {:?}",
            last_stage(dockerfile),
            last_stage(ci_image)
        ));
    }
    drift
}

fn release_inputs() -> (Value, String, String, String) {
    (
        yaml(Path::new(REPO).join(".github/workflows/release.yml")),
        read(Path::new(REPO).join("deploy/Dockerfile")),
        read(Path::new(REPO).join("tests/image/build.sh")),
        read(Path::new(REPO).join("tests/all.sh")),
    )
}

#[test]
fn the_release_workflow_builds_what_the_dockerfile_builds() {
    let (workflow, dockerfile, ci_image, all_sh) = release_inputs();
    let drift = release_drift(&workflow, &dockerfile, &ci_image, &all_sh);
    assert!(drift.is_empty(), "{drift:#?}");
    // The chart the workflow pushes is linted with the Helm CI uses.
    let helm = |text: &str, key: &str| {
        text.lines().find_map(|l| {
            l.trim()
                .strip_prefix(key)
                .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
        })
    };
    let harness = read(Path::new(REPO).join("tests/k8s-harness/build.sh"));
    assert_eq!(
        helm(&read(Path::new(REPO).join(".github/workflows/release.yml")), "HELM_VERSION: "),
        helm(&harness, "HELM_VERSION=")
    );
}

#[test]
fn the_release_drift_check_catches_each_kind_of_drift() {
    let (workflow, dockerfile, ci_image, all_sh) = release_inputs();
    let step = |w: &mut Value| -> usize {
        w["jobs"]["release"]["steps"]
            .as_array()
            .and_then(|s| {
                s.iter().position(|s| {
                    s["uses"].as_str().is_some_and(|u| u.starts_with("docker/build-push-action@"))
                })
            })
            .expect("build step")
    };
    // The build step's `with` key set to another value.
    let edit = |key: &str, value: &str| {
        let mut w = workflow.clone();
        let i = step(&mut w);
        w["jobs"]["release"]["steps"][i]["with"][key] = json!(value);
        release_drift(&w, &dockerfile, &ci_image, &all_sh)
    };
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("one platform", edit("platforms", "linux/amd64")),
        ("another Dockerfile", edit("file", "Dockerfile")),
        ("no GIT_COMMIT", edit("build-args", "")),
        ("an unknown argument", edit("build-args", "GIT_COMMIT=x\nFEATURES=y")),
        (
            "a base by tag",
            release_drift(
                &workflow,
                &dockerfile.replace("nonroot@sha256:", "nonroot-x@sha256:x"),
                &ci_image,
                &all_sh,
            ),
        ),
        (
            "a plain cargo build",
            release_drift(
                &workflow,
                &dockerfile.replace("cargo auditable build", "cargo build"),
                &ci_image,
                &all_sh,
            ),
        ),
        (
            "another entrypoint in CI",
            release_drift(
                &workflow,
                &dockerfile,
                &ci_image.replace("CMD [\"run\"]", "CMD [\"--help\"]"),
                &all_sh,
            ),
        ),
        (
            "CI's binary without auditable",
            release_drift(
                &workflow,
                &dockerfile,
                &ci_image,
                &all_sh.replace("cargo auditable build", "cargo build"),
            ),
        ),
    ];
    for (what, drift) in cases {
        assert!(!drift.is_empty(), "{what}: not caught");
    }
}
