//! Checks `rules/` and generates the vocabulary enums the engine matches exhaustively.
//!
//! The checker is the crate's own `src/rulebook` module, compiled here by path (a build script
//! cannot depend on the crate it builds), so a rule error fails `cargo build` with the same
//! `rules/<file>.ron:LINE:COL: message` that `noderotation rules check` prints.
use std::fmt::Write as _;
use std::path::Path;

#[allow(dead_code, unused_imports)]
#[path = "src/rulebook/mod.rs"]
mod rulebook;

use rulebook::Rulebook;
use rulebook::model::{FindingSeverity, Layer, Piece, TypeDecl, ValueType};

fn main() {
    println!("cargo::rerun-if-changed=rules");
    println!("cargo::rerun-if-changed=src/rulebook");
    for file in rulebook::check::FILES {
        println!("cargo::rerun-if-changed=rules/{file}");
    }
    let book = match Rulebook::load_dir(Path::new("rules")) {
        Ok(book) => book,
        Err(diags) => {
            for d in &diags {
                eprintln!("{d}");
            }
            eprintln!(
                "error: {} problem(s) in rules/; fix them (see `cargo run -- rules check`)",
                diags.len()
            );
            std::process::exit(1);
        }
    };
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let out = Path::new(&out);
    std::fs::write(out.join("vocab.rs"), generate(&book)).expect("write vocab.rs");
    std::fs::write(out.join("causes.rs"), causes(&book)).expect("write causes.rs");
    std::fs::write(out.join("metrics.rs"), metrics(&book)).expect("write metrics.rs");
    println!("cargo::rustc-env=NODEROTATION_COMMIT={}", git_commit());
}

/// The commit `noderotation --version` and `noderotation_build_info` report:
/// `NODEROTATION_GIT_COMMIT` when set (the Docker build passes it: its context has no `.git`),
/// else `git rev-parse --short HEAD`, else `unknown`. Reruns only when HEAD or the branch it
/// points to moves (paths from git itself, so a worktree's `.git` file works too), never on
/// every build.
fn git_commit() -> String {
    println!("cargo::rerun-if-env-changed=NODEROTATION_GIT_COMMIT");
    if let Ok(commit) = std::env::var("NODEROTATION_GIT_COMMIT")
        && !commit.trim().is_empty()
    {
        return commit.trim().to_string();
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["rev-parse", "--symbolic-full-name", "HEAD"])
        && branch.starts_with("refs/")
    {
        watched.push(branch);
    }
    for name in watched {
        // A path that does not exist would make cargo rerun this script on every build.
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo::rerun-if-changed={path}");
        }
    }
    commit
}

/// `Message`: every message of every reason, with its template split at build time (an
/// annotation key written in, slots left to fill). The checker has validated the templates.
fn messages(out: &mut String, book: &Rulebook) {
    let mut all: Vec<(String, String, Option<&str>, &str)> = Vec::new();
    for r in &book.vocabulary.reasons {
        for (case, text) in r.messages() {
            let variant = format!("{}{}", camel(&r.name), case.map(camel).unwrap_or_default());
            all.push((variant, camel(&r.name), case, text));
        }
    }
    let _ = writeln!(
        out,
        "/// A message of an Event reason: the reason's own, or one of its cases.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\npub enum Message {{"
    );
    for (variant, reason, case, text) in &all {
        let what = match case {
            None => format!("`{reason}`"),
            Some(c) => format!("`{reason}`, case `{c}`"),
        };
        let _ = writeln!(out, "    /// {what}: {text:?}\n    {variant},");
    }
    let list: Vec<String> = all.iter().map(|(v, ..)| format!("Message::{v}")).collect();
    let _ = writeln!(
        out,
        "}}\n\nimpl Message {{\n    pub const ALL: &'static [Message] = &[{}];\n",
        list.join(", ")
    );
    match_fn(
        out,
        "Message",
        "",
        "pub const fn reason(self) -> Reason",
        all.iter().map(|(variant, reason, ..)| (variant.clone(), format!("Reason::{reason}"))),
    );
    let mut templates = Vec::new();
    for (variant, _, _, text) in &all {
        let pieces = rulebook::model::parse_template(text).expect("checked by the rulebook");
        // Keys are written in, and the text around them merged.
        let mut merged: Vec<String> = Vec::new();
        let mut lit = String::new();
        for p in pieces {
            match p {
                Piece::Text(t) => lit.push_str(&t),
                Piece::Key(k) => {
                    let decl = book.annotations.keys.iter().find(|d| d.key == k).expect("checked");
                    let full = decl
                        .full_key
                        .clone()
                        .unwrap_or_else(|| format!("{}{}", book.annotations.prefix, decl.key));
                    lit.push_str(&full);
                }
                Piece::Slot(s) => {
                    if !lit.is_empty() {
                        merged.push(format!("Piece::Text({:?})", std::mem::take(&mut lit)));
                    }
                    merged.push(format!("Piece::Slot(Slot::{})", camel(&s)));
                }
            }
        }
        if !lit.is_empty() {
            merged.push(format!("Piece::Text({lit:?})"));
        }
        templates.push((variant.clone(), format!("Template(&[{}])", merged.join(", "))));
    }
    match_fn(
        out,
        "Message",
        "The message's text and slots, in order.",
        "pub const fn template(self) -> Template",
        templates,
    );
    let _ = writeln!(out, "}}\n");
}

/// `policy::feasibility::Cause`, from `findings` (the serde names are the rules' names).
fn causes(book: &Rulebook) -> String {
    let findings = &book.vocabulary.findings;
    let mut out =
        String::from("// @generated by build.rs from rules/vocabulary.ron; do not edit.\n\n");
    out.push_str(
        "/// The cause of a feasibility finding (`findings` in `rules/vocabulary.ron`). A warning's\n/// name is its Event reason (§4.3); a fatal cause travels inside the `Infeasible` Event.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]\npub enum Cause {\n",
    );
    for f in findings {
        let _ = writeln!(out, "    /// {}\n    {},", f.doc, f.name);
    }
    let list: Vec<String> = findings.iter().map(|f| format!("Cause::{}", f.name)).collect();
    let _ = writeln!(
        out,
        "}}\n\nimpl Cause {{\n    pub const ALL: &'static [Cause] = &[{}];\n",
        list.join(", ")
    );
    match_fn(
        &mut out,
        "Cause",
        "The cause as written in Events, metrics, `plan` output and the policy status.",
        "pub const fn as_str(self) -> &'static str",
        findings.iter().map(|f| (f.name.clone(), format!("{:?}", f.name))),
    );
    match_fn(
        &mut out,
        "Cause",
        "Fatal or warning; fixed per cause.",
        "pub const fn severity(self) -> Severity",
        findings.iter().map(|f| {
            let sev = match f.severity {
                FindingSeverity::Fatal => "Fatal",
                FindingSeverity::Warning => "Warning",
            };
            (f.name.clone(), format!("Severity::{sev}"))
        }),
    );
    match_fn(
        &mut out,
        "Cause",
        "The layer the cause belongs to.",
        "pub const fn layer(self) -> Layer",
        findings.iter().map(|f| {
            let layer = match f.layer {
                Layer::Policy => "Policy",
                Layer::Throughput => "Throughput",
                Layer::Claim => "Claim",
            };
            (f.name.clone(), format!("Layer::{layer}"))
        }),
    );
    let _ = writeln!(out, "}}");
    out
}

/// `telemetry::Metric` and `telemetry::PoolGauge`, from `metrics`.
fn metrics(book: &Rulebook) -> String {
    let metrics = &book.vocabulary.metrics;
    let variant = |name: &str| camel(name.strip_prefix("noderotation_").unwrap_or(name));
    let mut out =
        String::from("// @generated by build.rs from rules/vocabulary.ron; do not edit.\n\n");
    out.push_str("/// The metrics (§4.2, `metrics` in `rules/vocabulary.ron`).\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\npub enum Metric {\n");
    for m in metrics {
        let _ = writeln!(out, "    /// `{}`\n    {},", m.name, variant(&m.name));
    }
    let list: Vec<String> =
        metrics.iter().map(|m| format!("Metric::{}", variant(&m.name))).collect();
    let _ = writeln!(
        out,
        "}}\n\nimpl Metric {{\n    pub const ALL: &'static [Metric] = &[{}];\n",
        list.join(", ")
    );
    let arms = |value: &dyn Fn(&rulebook::model::MetricDecl) -> String| {
        metrics.iter().map(|m| (variant(&m.name), value(m))).collect::<Vec<_>>()
    };
    match_fn(
        &mut out,
        "Metric",
        "The metric name (normative).",
        "pub const fn name(self) -> &'static str",
        arms(&|m| format!("{:?}", m.name)),
    );
    match_fn(
        &mut out,
        "Metric",
        "",
        "pub const fn help(self) -> &'static str",
        arms(&|m| format!("{:?}", m.help)),
    );
    match_fn(
        &mut out,
        "Metric",
        "The label names, in order.",
        "pub const fn labels(self) -> &'static [&'static str]",
        arms(&|m| format!("&{:?}", m.labels)),
    );
    match_fn(
        &mut out,
        "Metric",
        "",
        "pub const fn metric_type(self) -> MetricType",
        // The generated enum's variants are the model's, by name.
        arms(&|m| format!("MetricType::{:?}", m.ty)),
    );
    let _ = writeln!(out, "}}\n");
    let gauges: Vec<&rulebook::model::MetricDecl> =
        metrics.iter().filter(|m| m.is_pool_gauge()).collect();
    out.push_str("/// The gauges labelled by `nodepool` alone: one series per pool, set on every pass and\n/// removed with the pool.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\npub enum PoolGauge {\n");
    for m in &gauges {
        let _ = writeln!(out, "    /// `{}`\n    {},", m.name, variant(&m.name));
    }
    let list: Vec<String> =
        gauges.iter().map(|m| format!("PoolGauge::{}", variant(&m.name))).collect();
    let _ = writeln!(
        out,
        "}}\n\nimpl PoolGauge {{\n    pub const ALL: [PoolGauge; {}] = [{}];\n",
        gauges.len(),
        list.join(", ")
    );
    match_fn(
        &mut out,
        "PoolGauge",
        "",
        "pub const fn metric(self) -> Metric",
        gauges.iter().map(|m| (variant(&m.name), format!("Metric::{}", variant(&m.name)))),
    );
    let _ = writeln!(out, "}}");
    out
}

/// `in_window` / `active-rotation` / `RotationStarted` -> `InWindow` / `ActiveRotation` / ...
fn camel(s: &str) -> String {
    s.split(['_', '-'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// One method of a generated `impl` of enum `ty`: `match self`, one arm per `(variant, value)`.
fn match_fn(
    out: &mut String,
    ty: &str,
    doc: &str,
    sig: &str,
    arms: impl IntoIterator<Item = (String, String)>,
) {
    for line in doc.lines() {
        let _ = writeln!(out, "    /// {line}");
    }
    let _ = writeln!(out, "    {sig} {{\n        match self {{");
    for (variant, value) in arms {
        let _ = writeln!(out, "            {ty}::{variant} => {value},");
    }
    let _ = writeln!(out, "        }}\n    }}\n");
}

/// An enum with `ALL`, `name()` (the rules' spelling) and `from_name()`.
fn gen_enum(out: &mut String, name: &str, doc: &str, variants: &[(String, String)]) {
    let _ = writeln!(out, "/// {doc}");
    let _ = writeln!(out, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]");
    let _ = writeln!(out, "pub enum {name} {{");
    for (v, wire) in variants {
        let _ = writeln!(out, "    /// `{wire}`\n    {v},");
    }
    let _ = writeln!(out, "}}\n\nimpl {name} {{");
    let all: Vec<String> = variants.iter().map(|(v, _)| format!("{name}::{v}")).collect();
    let _ = writeln!(out, "    pub const ALL: &'static [{name}] = &[{}];", all.join(", "));
    match_fn(
        out,
        name,
        "The spelling used in `rules/`.",
        "pub fn name(self) -> &'static str",
        variants.iter().map(|(v, wire)| (v.clone(), format!("{wire:?}"))),
    );
    let _ = writeln!(out, "    pub fn from_name(s: &str) -> Option<Self> {{\n        match s {{");
    for (v, wire) in variants {
        let _ = writeln!(out, "            {wire:?} => Some({name}::{v}),");
    }
    let _ = writeln!(out, "            _ => None,\n        }}\n    }}\n}}\n");
    let _ = writeln!(
        out,
        "impl std::fmt::Display for {name} {{\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {{\n        f.write_str(self.name())\n    }}\n}}\n"
    );
}

fn variants<'a>(names: impl Iterator<Item = &'a str>) -> Vec<(String, String)> {
    names.map(|n| (camel(n), n.to_string())).collect()
}

fn generate(book: &Rulebook) -> String {
    let voc = &book.vocabulary;
    let mut out = String::from("// @generated by build.rs from rules/; do not edit.\n\n");

    for e in &voc.enums {
        gen_enum(&mut out, &e.name, &e.doc, &variants(e.values.iter().map(String::as_str)));
    }
    gen_enum(
        &mut out,
        "Kind",
        "Object kinds guards can read.",
        &variants(voc.kinds.iter().map(|k| k.name.as_str())),
    );
    let mut roots: Vec<&str> = Vec::new();
    for c in &voc.contexts {
        for r in &c.roots {
            if !roots.contains(&r.name.as_str()) {
                roots.push(&r.name);
            }
        }
    }
    gen_enum(&mut out, "Root", "Names a guard starts from.", &variants(roots.into_iter()));
    let fields: Vec<(String, String)> = voc
        .kinds
        .iter()
        .flat_map(|k| {
            k.fields.iter().map(move |f| {
                (format!("{}{}", k.name, camel(&f.name)), format!("{}.{}", k.name, f.name))
            })
        })
        .collect();
    gen_enum(&mut out, "Field", "Object fields (`Kind.field`).", &fields);
    gen_enum(
        &mut out,
        "Pred",
        "Predicates guards can call.",
        &variants(voc.predicates.iter().map(|p| p.name.as_str())),
    );
    gen_enum(
        &mut out,
        "Verb",
        "Side-effect verbs.",
        &variants(voc.verbs.iter().map(|v| v.name.as_str())),
    );
    gen_enum(
        &mut out,
        "Reason",
        "Event reasons (§4.3).",
        &variants(voc.reasons.iter().map(|r| r.name.as_str())),
    );
    gen_enum(
        &mut out,
        "Signal",
        "Announcement signals (metrics + log line).",
        &variants(voc.signals.iter().map(|s| s.name.as_str())),
    );
    let mut outcomes: Vec<&str> = Vec::new();
    for v in &voc.verbs {
        for o in &v.outcomes {
            if !outcomes.contains(&o.as_str()) {
                outcomes.push(o);
            }
        }
    }
    gen_enum(&mut out, "Outcome", "What a verb's write did.", &variants(outcomes.into_iter()));
    gen_enum(
        &mut out,
        "Handler",
        "Handlers of rules/transitions.ron.",
        &variants(book.handlers.iter().map(|h| h.name.as_str())),
    );
    gen_enum(
        &mut out,
        "Key",
        "Annotation keys (§5.3).",
        &variants(book.annotations.keys.iter().map(|k| k.key.as_str())),
    );

    // Key metadata.
    let keys = &book.annotations.keys;
    let key_arms = |value: &dyn Fn(&rulebook::model::AnnotationKey) -> String| {
        keys.iter().map(|k| (camel(&k.key), value(k))).collect::<Vec<_>>()
    };
    let _ = writeln!(out, "impl Key {{");
    match_fn(
        &mut out,
        "Key",
        "The full annotation key on the object.",
        "pub const fn full(self) -> &'static str",
        key_arms(&|k| {
            let full = k
                .full_key
                .clone()
                .unwrap_or_else(|| format!("{}{}", book.annotations.prefix, k.key));
            format!("{full:?}")
        }),
    );
    match_fn(
        &mut out,
        "Key",
        "The value type the reference declares.",
        "pub fn value_type(self) -> KeyType",
        key_arms(&|k| match &k.value {
            ValueType::Time => "KeyType::Time".to_string(),
            ValueType::Stamp => "KeyType::Stamp".to_string(),
            ValueType::Duration => "KeyType::Duration".to_string(),
            ValueType::Int => "KeyType::Int".to_string(),
            ValueType::ClaimName => "KeyType::ClaimName".to_string(),
            ValueType::NodeName => "KeyType::NodeName".to_string(),
            ValueType::Uid => "KeyType::Uid".to_string(),
            ValueType::True => "KeyType::True".to_string(),
            ValueType::Enum(v) => format!("KeyType::Enum(&{v:?})"),
        }),
    );
    match_fn(
        &mut out,
        "Key",
        "The controller writes this key (`owner: Controller` in annotations.ron): what the\nsweep looks for and uninstall removes. Karpenter's `do-not-disrupt` is ours only under\nthe ownership marker; the operator's keys never are.",
        "pub const fn is_ours(self) -> bool",
        key_arms(&|k| matches!(k.owner, rulebook::model::KeyOwner::Controller).to_string()),
    );
    match_fn(
        &mut out,
        "Key",
        "The key is written on Nodes (`targets` in annotations.ron).",
        "pub const fn on_nodes(self) -> bool",
        key_arms(&|k| k.targets.contains(&rulebook::model::ObjectKind::Node).to_string()),
    );
    let _ = writeln!(out, "}}\n");
    let per_rotation: Vec<String> = book
        .annotations
        .keys
        .iter()
        .filter(|k| k.per_rotation)
        .map(|k| format!("Key::{}", camel(&k.key)))
        .collect();
    let _ = writeln!(
        out,
        "/// Keys with one copy per rotation slot of a pool (`per_rotation` in annotations.ron).\npub const PER_ROTATION_KEYS: &[Key] = &[{}];\n",
        per_rotation.join(", ")
    );
    let clear: Vec<String> =
        book.annotations.anchor_clear_set.iter().map(|k| format!("Key::{}", camel(k))).collect();
    let _ = writeln!(
        out,
        "/// `clear(np, anchor)`: removed together in one update (§5.3).\npub const ANCHOR_CLEAR_SET: &[Key] = &[{}];\n",
        clear.join(", ")
    );

    // Reasons: severity, object kind, messages.
    let reason_arms = |value: &dyn Fn(&rulebook::model::ReasonDecl) -> String| {
        voc.reasons.iter().map(|r| (camel(&r.name), value(r))).collect::<Vec<_>>()
    };
    let _ = writeln!(out, "impl Reason {{");
    match_fn(
        &mut out,
        "Reason",
        "",
        "pub fn is_warning(self) -> bool",
        reason_arms(&|r| matches!(r.severity, rulebook::model::Severity::Warning).to_string()),
    );
    match_fn(
        &mut out,
        "Reason",
        "The object the Event is recorded on.",
        "pub const fn kind(self) -> Kind",
        reason_arms(&|r| format!("Kind::{}", r.kind.name())),
    );
    match_fn(
        &mut out,
        "Reason",
        "The reason's own message (its cases are other [`Message`]s).",
        "pub const fn message(self) -> Message",
        reason_arms(&|r| format!("Message::{}", camel(&r.name))),
    );
    let _ = writeln!(out, "}}\n");
    gen_enum(
        &mut out,
        "Slot",
        "Details of Event messages, filled when the Event is recorded.",
        &variants(voc.slots.iter().map(|s| s.name.as_str())),
    );
    messages(&mut out, book);

    // Field metadata: the kind each field belongs to.
    let _ = writeln!(
        out,
        "impl Field {{\n    pub fn lookup(kind: &str, field: &str) -> Option<Field> {{\n        Field::from_name(&format!(\"{{kind}}.{{field}}\"))\n    }}\n}}\n"
    );
    let _ = writeln!(
        out,
        "impl Pred {{\n    /// Called even with nil arguments.\n    pub fn accepts_nil(self) -> bool {{\n        match self {{"
    );
    for p in &voc.predicates {
        let _ = writeln!(out, "            Pred::{} => {},", camel(&p.name), p.accepts_nil);
    }
    let _ = writeln!(out, "        }}\n    }}\n}}");
    // Keep TypeDecl referenced so a vocabulary type change regenerates this file.
    let _ = TypeDecl::Bool;
    out
}
