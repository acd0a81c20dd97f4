//! `rules diff`: what changed in behaviour between two rule sets, keyed by row id, as Markdown
//! for a pull-request comment. Guards and verbs are compared in their canonical printed form,
//! so whitespace, comments and line breaks never show.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::check::{CheckedRow, Rulebook};
use super::model::{AnnotationKey, Then};

/// One semantic change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Row id, handler, definition, annotation key, or vocabulary entry.
    pub subject: String,
    pub what: String,
    pub old: String,
    pub new: String,
}

/// All changes between two rule sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RulesDiff {
    pub rows: Vec<Change>,
    pub handlers: Vec<Change>,
    pub definitions: Vec<Change>,
    pub annotations: Vec<Change>,
    pub vocabulary: Vec<Change>,
    /// Changes to prose only (purpose, docs, spec references, the spec-table mapping).
    pub documentation: usize,
}

impl RulesDiff {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
            && self.handlers.is_empty()
            && self.definitions.is_empty()
            && self.annotations.is_empty()
            && self.vocabulary.is_empty()
    }
}

fn then_text(t: &Then) -> String {
    match t {
        Then::Continue => "continue".into(),
        Then::Requeue(d) => format!("requeue {d}"),
        Then::Goto(h) => format!("goto {h}"),
        Then::Done => "done".into(),
    }
}

fn verbs_text(row: &CheckedRow) -> String {
    row.statements.iter().map(|s| s.text.clone()).collect::<Vec<_>>().join("; ")
}

fn row_summary(handler: &str, row: &CheckedRow) -> String {
    format!(
        "in `{handler}`: when {} do [{}] then {}",
        row.guard_text.as_deref().unwrap_or("always"),
        verbs_text(row),
        then_text(&row.decl.then)
    )
}

fn change(subject: &str, what: &str, old: impl Into<String>, new: impl Into<String>) -> Change {
    Change { subject: subject.into(), what: what.into(), old: old.into(), new: new.into() }
}

/// Computes the semantic differences from `old` to `new`.
pub fn diff(old: &Rulebook, new: &Rulebook) -> RulesDiff {
    let mut d = RulesDiff::default();

    // Rows, by id.
    let index = |b: &Rulebook| -> BTreeMap<String, (String, CheckedRow)> {
        b.rows().map(|(h, r)| (r.decl.id.clone(), (h.name.clone(), r.clone()))).collect()
    };
    let (o, n) = (index(old), index(new));
    for (id, (h, r)) in &n {
        match o.get(id) {
            None => d.rows.push(change(id, "added", "", row_summary(h, r))),
            Some((oh, or)) => {
                if oh != h {
                    d.rows.push(change(id, "handler", oh.clone(), h.clone()));
                }
                let og = or.guard_text.clone().unwrap_or_else(|| "always".into());
                let ng = r.guard_text.clone().unwrap_or_else(|| "always".into());
                if og != ng {
                    d.rows.push(change(id, "guard", og, ng));
                }
                if verbs_text(or) != verbs_text(r) {
                    d.rows.push(change(id, "verbs", verbs_text(or), verbs_text(r)));
                }
                if or.decl.then != r.decl.then {
                    d.rows.push(change(
                        id,
                        "then",
                        then_text(&or.decl.then),
                        then_text(&r.decl.then),
                    ));
                }
                if or.decl.to != r.decl.to {
                    let show = |t: &Option<String>| t.clone().unwrap_or_else(|| "—".into());
                    d.rows.push(change(id, "next state", show(&or.decl.to), show(&r.decl.to)));
                }
                if or.decl.spec != r.decl.spec {
                    d.documentation += 1;
                }
            }
        }
    }
    for (id, (h, r)) in &o {
        if !n.contains_key(id) {
            d.rows.push(change(id, "removed", row_summary(h, r), ""));
        }
    }

    // Handlers: existence, order of rows, entry and assumptions.
    let handler_names: BTreeSet<&str> =
        old.handlers.iter().chain(&new.handlers).map(|h| h.name.as_str()).collect();
    for name in handler_names {
        match (old.handler(name), new.handler(name)) {
            (None, Some(_)) => d.handlers.push(change(name, "added", "", "handler")),
            (Some(_), None) => d.handlers.push(change(name, "removed", "handler", "")),
            (Some(a), Some(b)) => {
                // Order of the rows both versions share: first match wins, so order is behaviour.
                let shared: BTreeSet<&str> = a
                    .rows
                    .iter()
                    .map(|r| r.decl.id.as_str())
                    .filter(|id| b.rows.iter().any(|r| r.decl.id == *id))
                    .collect();
                let order = |h: &super::check::CheckedHandler| -> Vec<String> {
                    h.rows
                        .iter()
                        .map(|r| r.decl.id.clone())
                        .filter(|id| shared.contains(id.as_str()))
                        .collect()
                };
                if order(a) != order(b) {
                    d.handlers.push(change(
                        name,
                        "row order",
                        order(a).join(", "),
                        order(b).join(", "),
                    ));
                }
                if a.entry != b.entry {
                    d.handlers.push(change(
                        name,
                        "entry",
                        a.entry.to_string(),
                        b.entry.to_string(),
                    ));
                }
                if a.handles != b.handles {
                    d.handlers.push(change(
                        name,
                        "handles",
                        a.handles.join(", "),
                        b.handles.join(", "),
                    ));
                }
                if a.doc != b.doc {
                    d.documentation += 1;
                }
            }
            (None, None) => {}
        }
    }
    let assume = |b: &Rulebook, name: &str| -> Option<String> {
        b.transitions.handlers.iter().find(|h| h.name == name).map(|h| h.assume.join(", "))
    };
    for h in &new.handlers {
        if let (Some(a), Some(b)) = (assume(old, &h.name), assume(new, &h.name))
            && a != b
        {
            d.handlers.push(change(&h.name, "assume", a, b));
        }
    }

    // Definitions, compared by their normalized expression.
    let defs = |b: &Rulebook| -> BTreeMap<String, String> {
        b.transitions
            .definitions
            .iter()
            .map(|x| {
                let norm = super::syntax::parse_guard(&x.expr)
                    .map(|e| e.to_string())
                    .unwrap_or_else(|_| x.expr.clone());
                (x.name.clone(), norm)
            })
            .collect()
    };
    diff_maps(&defs(old), &defs(new), &mut d.definitions);

    // Annotation keys: targets, value type and full key are behaviour; prose is documentation.
    let keys = |b: &Rulebook| -> BTreeMap<String, AnnotationKey> {
        b.annotations.keys.iter().map(|k| (k.key.clone(), k.clone())).collect()
    };
    let (ok, nk) = (keys(old), keys(new));
    let shape = |k: &AnnotationKey| {
        let targets: Vec<&str> = k.targets.iter().map(|t| t.name()).collect();
        format!(
            "{} on {} ({})",
            k.full_key.clone().unwrap_or_else(|| k.key.clone()),
            targets.join(" + "),
            k.value.describe()
        )
    };
    for (key, k) in &nk {
        match ok.get(key) {
            None => d.annotations.push(change(key, "added", "", shape(k))),
            Some(o) => {
                if shape(o) != shape(k) {
                    d.annotations.push(change(key, "changed", shape(o), shape(k)));
                }
                if o.purpose != k.purpose || o.lifecycle != k.lifecycle || o.spec != k.spec {
                    d.documentation += 1;
                }
            }
        }
    }
    for (key, k) in &ok {
        if !nk.contains_key(key) {
            d.annotations.push(change(key, "removed", shape(k), ""));
        }
    }
    if old.annotations.anchor_clear_set != new.annotations.anchor_clear_set {
        d.annotations.push(change(
            "anchor_clear_set",
            "changed",
            old.annotations.anchor_clear_set.join(", "),
            new.annotations.anchor_clear_set.join(", "),
        ));
    }
    if old.annotations.prefix != new.annotations.prefix {
        d.annotations.push(change(
            "prefix",
            "changed",
            &old.annotations.prefix,
            &new.annotations.prefix,
        ));
    }

    // Vocabulary: signatures of verbs and predicates, enum values.
    let vocab = |b: &Rulebook| -> BTreeMap<String, String> {
        let v = &b.vocabulary;
        let mut m = BTreeMap::new();
        for p in &v.predicates {
            m.insert(
                format!("predicate {}", p.name),
                format!("{:?} -> {:?} nullable={}", p.args, p.ret, p.nullable),
            );
        }
        for x in &v.verbs {
            let params: Vec<String> =
                x.params.iter().map(|p| format!("{}:{:?}", p.name, p.ty)).collect();
            m.insert(
                format!("verb {}", x.name),
                format!(
                    "({}) -> {} wins {}",
                    params.join(", "),
                    x.outcomes.join("|"),
                    x.winning_outcomes().join("|")
                ),
            );
        }
        for e in &v.enums {
            m.insert(format!("enum {}", e.name), e.values.join(", "));
        }
        for k in &v.kinds {
            for f in &k.fields {
                m.insert(
                    format!("field {}.{}", k.name, f.name),
                    format!("{:?} nullable={}", f.ty, f.nullable),
                );
            }
        }
        for r in &v.reasons {
            m.insert(format!("reason {}", r.name), format!("{:?}", r.severity));
        }
        for s in &v.signals {
            m.insert(format!("signal {}", s.name), String::new());
        }
        m
    };
    diff_maps(&vocab(old), &vocab(new), &mut d.vocabulary);

    if old.spec_table != new.spec_table {
        d.documentation += 1;
    }
    d
}

fn diff_maps(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    out: &mut Vec<Change>,
) {
    for (k, v) in new {
        match old.get(k) {
            None => out.push(change(k, "added", "", v.clone())),
            Some(o) if o != v => out.push(change(k, "changed", o.clone(), v.clone())),
            Some(_) => {}
        }
    }
    for (k, v) in old {
        if !new.contains_key(k) {
            out.push(change(k, "removed", v.clone(), ""));
        }
    }
}

fn md(s: &str) -> String {
    if s.is_empty() {
        "—".into()
    } else {
        format!("`{}`", s.replace('|', "\\|").replace('`', "'"))
    }
}

/// The pull-request comment.
pub fn markdown(d: &RulesDiff, old_label: &str, new_label: &str) -> String {
    let mut out = format!("### Rule changes: `{old_label}` → `{new_label}`\n\n");
    if d.is_empty() {
        out.push_str("no semantic changes\n");
        if d.documentation > 0 {
            let _ = writeln!(
                out,
                "\n({} documentation-only change(s): prose, spec references or the spec-table mapping.)",
                d.documentation
            );
        }
        return out;
    }
    let sections: [(&str, &str, &Vec<Change>); 5] = [
        ("Rows", "Row", &d.rows),
        ("Handlers", "Handler", &d.handlers),
        ("Definitions", "Definition", &d.definitions),
        ("Annotation keys", "Key", &d.annotations),
        ("Vocabulary", "Entry", &d.vocabulary),
    ];
    for (title, col, changes) in sections {
        if changes.is_empty() {
            continue;
        }
        let _ = writeln!(out, "#### {title}\n\n| {col} | Change | Old | New |\n|---|---|---|---|");
        for c in changes {
            let _ =
                writeln!(out, "| `{}` | {} | {} | {} |", c.subject, c.what, md(&c.old), md(&c.new));
        }
        out.push('\n');
    }
    if d.documentation > 0 {
        let _ = writeln!(out, "Also {} documentation-only change(s).", d.documentation);
    }
    out
}
