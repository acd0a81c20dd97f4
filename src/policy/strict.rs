//! Strict field validation of a RotationPolicy manifest, as `kubectl apply` does it: every
//! mapping key must be a field of the CRD's schema (or of ObjectMeta under `metadata`), whatever
//! its value. A misspelt field would otherwise be dropped and the plan computed from the default
//! it fell back to; a near-miss names the real field.
use serde_json::Value as Schema;
use serde_norway::Value as Y;

/// One unknown field: its path and, for a near-miss, the real field it was probably meant as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownField {
    pub path: String,
    pub suggestion: Option<String>,
}

impl std::fmt::Display for UnknownField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.path)?;
        match &self.suggestion {
            Some(real) => write!(f, " (did you mean {real:?}?)"),
            None => Ok(()),
        }
    }
}

/// The fields of `document` (one RotationPolicy manifest) that the RotationPolicy type does not
/// have, in document order. `schema` is the CRD's `openAPIV3Schema`.
pub(crate) fn unknown_fields(document: &Y, schema: &Schema) -> Vec<UnknownField> {
    let mut out = Vec::new();
    let Some(top) = document.as_mapping() else { return out };
    for (key, value) in top {
        let name = key_name(key);
        match name.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => walk(value, &object_meta(), &name, &mut out),
            _ => match schema.get("properties").and_then(|p| p.get(&name)) {
                Some(field) => walk(value, field, &name, &mut out),
                None => out.push(unknown(&name, &name, top_level_names(schema))),
            },
        }
    }
    out
}

fn walk(value: &Y, schema: &Schema, path: &str, out: &mut Vec<UnknownField>) {
    match value {
        Y::Tagged(tagged) => walk(&tagged.value, schema, path, out),
        Y::Mapping(map) => {
            // A map of free keys (labels, matchLabels) or an object the schema leaves open.
            let Some(properties) = schema.get("properties").and_then(Schema::as_object) else {
                return;
            };
            for (key, field) in map {
                let name = key_name(key);
                let at = format!("{path}.{name}");
                match properties.get(&name) {
                    Some(sub) => walk(field, sub, &at, out),
                    None if preserves_unknown(schema) => {}
                    None => out.push(unknown(&at, &name, properties.keys().map(String::as_str))),
                }
            }
        }
        Y::Sequence(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk(v, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn preserves_unknown(schema: &Schema) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Schema::Bool(true))
}

fn key_name(key: &Y) -> String {
    match key {
        Y::String(s) => s.clone(),
        other => serde_norway::to_string(other).unwrap_or_default().trim().to_string(),
    }
}

fn top_level_names(schema: &Schema) -> impl Iterator<Item = &str> {
    ["apiVersion", "kind", "metadata"].into_iter().chain(
        schema
            .get("properties")
            .and_then(Schema::as_object)
            .into_iter()
            .flatten()
            .map(|(k, _)| k.as_str()),
    )
}

fn unknown<'a>(path: &str, name: &str, real: impl Iterator<Item = &'a str>) -> UnknownField {
    let suggestion = near_miss(name, real).map(|real| match path.rsplit_once('.') {
        Some((parent, _)) => format!("{parent}.{real}"),
        None => real.to_string(),
    });
    UnknownField { path: path.to_string(), suggestion }
}

/// The real field `name` was probably meant as: one whose name it starts (`surg` for `surge`) or
/// that starts it (`surges`), the same but for case, or a few edits away (`readyTimout`).
fn near_miss<'a>(name: &str, real: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.to_lowercase();
    real.filter_map(|r| {
        let r_lower = r.to_lowercase();
        let distance = if r_lower == lower {
            0
        } else if lower.len() >= 3 && (r_lower.starts_with(&lower) || lower.starts_with(&r_lower)) {
            1
        } else {
            edit_distance(&lower, &r_lower)
        };
        let allowed = (name.chars().count().max(r.chars().count()) / 4).clamp(1, 3);
        (distance <= allowed).then_some((distance, r))
    })
    .min()
    .map(|(_, r)| r)
}

/// Edit distance over chars, a swap of two neighbours counting as one edit (optimal string
/// alignment): `strat` is one edit from `start`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// ObjectMeta's fields, as a schema with their names and no deeper structure (labels and
/// annotations are free maps; the rest is the API server's to check).
fn object_meta() -> Schema {
    let names = [
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "finalizers",
        "ownerReferences",
        "managedFields",
        "selfLink",
    ];
    let properties: serde_json::Map<String, Schema> =
        names.iter().map(|n| ((*n).to_string(), Schema::Object(serde_json::Map::new()))).collect();
    serde_json::json!({ "properties": properties })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        serde_json::json!({"properties": {
            "spec": {"properties": {
                "surge": {"properties": {"readyTimeout": {}, "maxUnavailable": {}}},
                "maintenanceWindows": {"items": {"properties": {"days": {}, "start": {}}}},
                "nodePoolSelector": {"properties": {"matchLabels": {"additionalProperties": {}}}},
                "prePull": {"properties": {"enabled": {}}},
            }},
        }})
    }

    fn check(yaml: &str) -> Vec<String> {
        let doc: Y = serde_norway::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        unknown_fields(&doc, &schema()).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn an_empty_typo_is_as_unknown_as_a_full_one() {
        assert_eq!(
            check("spec:\n  surg: {}\n  maintenanceWindow: []\n  prePul:\n"),
            [
                r#""spec.surg" (did you mean "spec.surge"?)"#,
                r#""spec.maintenanceWindow" (did you mean "spec.maintenanceWindows"?)"#,
                r#""spec.prePul" (did you mean "spec.prePull"?)"#,
            ]
        );
    }

    #[test]
    fn near_misses_deep_in_lists_are_named_with_their_index() {
        assert_eq!(
            check(
                "spec:\n  maintenanceWindows:\n  - {days: [Sat], strat: '02:00'}\n  surge: {readyTimout: 5m}\n"
            ),
            [
                r#""spec.maintenanceWindows[0].strat" (did you mean "spec.maintenanceWindows[0].start"?)"#,
                r#""spec.surge.readyTimout" (did you mean "spec.surge.readyTimeout"?)"#,
            ]
        );
    }

    #[test]
    fn free_maps_and_real_fields_pass_and_a_stranger_gets_no_suggestion() {
        assert!(check("metadata: {name: a, labels: {x: y}}\nspec:\n  nodePoolSelector: {matchLabels: {anything: goes}}\n  surge: {}\n").is_empty());
        assert_eq!(check("spec:\n  colour: blue\n"), [r#""spec.colour""#]);
        assert_eq!(
            check("metadata: {labelz: {a: b}}\n"),
            [r#""metadata.labelz" (did you mean "metadata.labels"?)"#]
        );
        assert_eq!(check("spce: {}\n"), [r#""spce" (did you mean "spec"?)"#]);
    }
}
