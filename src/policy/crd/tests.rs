use super::*;

#[test]
fn crd_names_and_scope() {
    let crd = RotationPolicy::crd();
    assert_eq!(crd.metadata.name.as_deref(), Some("rotationpolicies.noderotation.io"));
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.names.short_names, Some(vec!["rp".to_string()]));
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
    let columns: Vec<&str> =
        version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
    assert_eq!(columns, ["Ready", "Matched", "Rotating", "Next Window", "In Flight", "Age"]);
}

#[test]
fn defaults_fill_an_almost_empty_spec() {
    let spec: RotationPolicySpec =
        serde_norway::from_str("nodePoolSelector: {}\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spec, RotationPolicySpec::with_windows(LabelSelector::default(), vec![]));
    assert_eq!(spec.age_threshold, "auto");
    assert_eq!(spec.min_rotation_chances, 2);
    assert_eq!(spec.surge.max_unavailable, IntOrString::Int(1));
    assert_eq!(spec.surge.ready_timeout, "15m");
    assert_eq!(spec.surge.cooldown_after, "10m");
    assert_eq!(spec.surge.retry_backoff, "30m");
    assert_eq!(spec.surge.failure_pause, None);
    assert_eq!(spec.surge.match_node_requirements.required, DEFAULT_REQUIRED_NODE_KEYS);
    assert!(spec.surge.match_node_requirements.preferred.is_empty());
    assert!(!spec.surge.forceful_fallback.enabled);
    assert!(!spec.surge.whole_node_reservation.enabled);
    assert!(!spec.pre_pull.enabled);
}

#[test]
fn checked_in_crd_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/rotationpolicy.yaml");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = crd_yaml().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        on_disk == generated,
        "crds/rotationpolicy.yaml is stale (or missing); regenerate it with `{REGENERATE_COMMAND}`"
    );
}

/// Every property of the schema, with its path.
fn properties<'a>(
    path: &str,
    node: &'a serde_json::Value,
    out: &mut Vec<(String, &'a serde_json::Value)>,
) {
    if let Some(props) = node["properties"].as_object() {
        for (name, child) in props {
            let at = format!("{path}.{name}");
            out.push((at.clone(), child));
            properties(&at, child, out);
        }
    }
    if node["items"].is_object() {
        properties(&format!("{path}[]"), &node["items"], out);
    }
}

/// A pattern cannot bound a sum, so every duration field carries a CEL rule that parses the
/// value with `duration()`, which fails for a value past Go's range (the apiserver then
/// rejects the object) instead of letting `94522879700260684295381835.9999h` through.
#[test]
fn every_duration_field_is_parsed_by_a_cel_rule_that_rejects_overflow() {
    let crd = serde_json::to_value(RotationPolicy::crd()).unwrap_or_default();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut all = Vec::new();
    properties("", schema, &mut all);
    let durations: Vec<&(String, &serde_json::Value)> = all
        .iter()
        .filter(|(_, node)| {
            let pattern = node["pattern"].as_str();
            pattern == Some(GO_DURATION_PATTERN) || pattern == Some(AGE_THRESHOLD_PATTERN)
        })
        .collect();
    let names: Vec<&str> = durations.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names.len(), 7, "{names:?}");
    for (path, node) in durations {
        let rules = node["x-kubernetes-validations"].as_array().cloned().unwrap_or_default();
        let parsing = rules
            .iter()
            .find(|r| r["rule"].as_str().is_some_and(|rule| rule.contains("duration(self)")));
        let rule = parsing.unwrap_or_else(|| panic!("{path}: no rule parses the value"));
        let message = rule["message"].as_str().unwrap_or_default();
        assert!(message.contains(MAX_GO_DURATION), "{path}: {message}");
    }
    // What the rule leaves to duration(): the pattern alone accepts the overflow.
    let overflow = "94522879700260684295381835.9999h";
    let pattern = regex::Regex::new(GO_DURATION_PATTERN).unwrap_or_else(|e| panic!("{e}"));
    assert!(pattern.is_match(overflow) && pattern.is_match(MAX_GO_DURATION));
    assert!(crate::policy::duration::parse(overflow).is_err());
    assert!(crate::policy::duration::parse(MAX_GO_DURATION).is_ok());
    assert!(crate::policy::duration::parse("2562047h47m16.854775808s").is_err());
}

/// `ageThreshold` admits exactly `auto`, `windows` and Go durations: the pattern rejects a
/// near miss, and the CEL rule lets both keywords through without parsing them as durations.
#[test]
fn age_threshold_accepts_windows_and_rejects_near_misses() {
    let crd = serde_json::to_value(RotationPolicy::crd()).unwrap_or_default();
    let field = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["ageThreshold"];
    assert_eq!(field["pattern"].as_str(), Some(AGE_THRESHOLD_PATTERN));
    let pattern = regex::Regex::new(AGE_THRESHOLD_PATTERN).unwrap_or_else(|e| panic!("{e}"));
    for ok in ["auto", "windows", "240h", "1h30m", "0"] {
        assert!(pattern.is_match(ok), "{ok}");
    }
    for bad in ["window", "Windows", "auto windows", "windowsh", "7d", "Auto", ""] {
        assert!(!pattern.is_match(bad), "{bad}");
    }
    let rules = field["x-kubernetes-validations"].as_array().cloned().unwrap_or_default();
    let [rule] = rules.as_slice() else { panic!("{rules:?}") };
    let text = rule["rule"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("self == 'auto' || self == 'windows' || "),
        "both keywords skip duration(): {text}"
    );
    let message = rule["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("ageThreshold must be auto, windows or a Go duration"));
}

/// `maxUnavailable` is Kubernetes' int-or-string with one CEL rule, whose percentage pattern
/// admits exactly what the local validation admits, and whose message says what to write;
/// it takes `auto` too, and `maxUnavailableLimit` takes the same but `auto`.
#[test]
fn max_unavailable_is_an_int_or_string_with_one_rule() {
    use crate::policy::settings::{IntOrPercent, MaxUnavailable};
    let crd = serde_json::to_value(RotationPolicy::crd()).unwrap_or_default();
    let surge = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["surge"]["properties"];
    let rule_of = |field: &str| {
        let node = &surge[field];
        assert_eq!(node["x-kubernetes-int-or-string"], serde_json::Value::Bool(true));
        assert!(node["type"].is_null(), "an int-or-string has no type: {node}");
        assert!(node["description"].as_str().is_some_and(|d| d.contains("10%")), "{node}");
        let rules = node["x-kubernetes-validations"].as_array().cloned().unwrap_or_default();
        let [rule] = rules.as_slice() else { panic!("{rules:?}") };
        rule.clone()
    };
    let rule = rule_of("maxUnavailable");
    assert_eq!(
        rule["rule"].as_str(),
        Some(
            "type(self) == int ? self >= 1 && self <= 100 : (self == 'auto' || \
             self.matches('^([1-9][0-9]?|100)%$'))"
        )
    );
    let message = rule["message"].as_str().unwrap_or_default();
    assert!(message.contains("from 1 to 100") && message.contains("1% to 100%"), "{message}");
    assert!(message.starts_with("maxUnavailable must be auto, "), "{message}");
    let limit = rule_of("maxUnavailableLimit");
    assert_eq!(
        limit["rule"].as_str(),
        Some("type(self) == int ? self >= 1 && self <= 100 : self.matches('^([1-9][0-9]?|100)%$')")
    );
    let message = limit["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("maxUnavailableLimit must be an integer"), "{message}");
    assert!(message.contains("from 1 to 100") && message.contains("1% to 100%"), "{message}");
    // The integer bounds, the same for the value, for the limit beside auto and in the rules.
    let auto = IntOrString::String("auto".into());
    for (n, ok) in [(0, false), (1, true), (100, true), (101, false), (-1, false)] {
        let n = IntOrString::Int(n);
        assert_eq!(MaxUnavailable::parse(&n, None).is_ok(), ok, "{n:?}");
        assert_eq!(MaxUnavailable::parse(&auto, Some(&n)).is_ok(), ok, "limit {n:?}");
    }
    let pattern = regex::Regex::new(PERCENT_PATTERN).unwrap_or_else(|e| panic!("{e}"));
    for text in ["1%", "10%", "99%", "100%", "0%", "150%", "101%", "05%", "abc", "2", "%", ""] {
        let value = IntOrString::String(text.into());
        let local = IntOrPercent::parse(&value, "").is_ok();
        assert_eq!(pattern.is_match(text), local, "{text:?}");
        assert_eq!(MaxUnavailable::parse(&value, None).is_ok(), local, "{text:?}");
        let as_limit = MaxUnavailable::parse(&auto, Some(&value));
        assert_eq!(as_limit.is_ok(), local, "limit {text:?}");
    }
    assert!(MaxUnavailable::parse(&auto, None).is_ok());
    assert!(MaxUnavailable::parse(&auto, Some(&auto)).is_err(), "a limit is a number");
    let yaml = |v: &str| serde_norway::from_str::<Surge>(&format!("maxUnavailable: {v}"));
    let parsed = |v: &str| yaml(v).map(|s| s.max_unavailable).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed("3"), IntOrString::Int(3));
    assert_eq!(parsed("\"10%\""), IntOrString::String("10%".into()));
    assert_eq!(parsed("10%"), IntOrString::String("10%".into()));
    assert_eq!(parsed("auto"), IntOrString::String("auto".into()));
    assert_eq!(parsed("null"), IntOrString::Int(1), "null is the default");
    assert!(yaml("1.5").is_err());
    let with_limit: Surge = serde_norway::from_str("maxUnavailable: auto\nmaxUnavailableLimit: 40")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(with_limit.max_unavailable_limit, Some(IntOrString::Int(40)));
}

#[test]
fn unknown_fields_are_tolerated() {
    let spec: Result<RotationPolicySpec, _> =
        serde_norway::from_str("nodePoolSelector: {}\nsomethingNew: 1\nsurge: {maxSurge: 3}\n");
    assert!(spec.is_ok());
}
