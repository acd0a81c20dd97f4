//! `rules diff`: what changed in behaviour between two rule sets, keyed by row id, as Markdown
//! for a pull-request comment. Guards and verbs are compared in their canonical printed form,
//! so whitespace, comments and line breaks never show.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::check::{CheckedRow, Rulebook, canonical, conjunct_texts};
use super::model::{AnnotationKey, SpecRow, Then};

/// One semantic change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Row id, handler, definition, annotation key, spec row, or vocabulary entry.
    pub subject: String,
    /// Where it sits, for rows: handler, position, the row above, and the spec citation.
    pub context: String,
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
    /// The spec table's mapping and text (`spec-table.ron`).
    pub spec_table: Vec<Change>,
    /// What the spec obliges the rules to contain (`obligations.ron`).
    pub contract: Vec<Change>,
    /// Changes to prose only (row spec citations, handler and definition docs).
    pub documentation: usize,
}

impl RulesDiff {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
            && self.handlers.is_empty()
            && self.definitions.is_empty()
            && self.annotations.is_empty()
            && self.vocabulary.is_empty()
            && self.spec_table.is_empty()
            && self.contract.is_empty()
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

fn row_summary(row: &CheckedRow) -> String {
    format!(
        "when {} do [{}] then {}",
        row.guard_text.as_deref().unwrap_or("always"),
        verbs_text(row),
        then_text(&row.decl.then)
    )
}

fn change(subject: &str, what: &str, old: impl Into<String>, new: impl Into<String>) -> Change {
    Change {
        subject: subject.into(),
        context: String::new(),
        what: what.into(),
        old: old.into(),
        new: new.into(),
    }
}

/// `` `handler` #3/9, below `row` · spec `` for a row of `book`.
fn row_context(book: &Rulebook, id: &str) -> String {
    for h in &book.handlers {
        if let Some(i) = h.rows.iter().position(|r| r.decl.id == id) {
            let above = match i {
                0 => "first".to_string(),
                _ => format!("below `{}`", h.rows[i - 1].decl.id),
            };
            return format!(
                "`{}` #{}/{}, {above} · {}",
                h.name,
                i + 1,
                h.rows.len(),
                h.rows[i].decl.spec
            );
        }
    }
    String::new()
}

fn negation(text: &str) -> String {
    canonical(&format!("not ({text})")).unwrap_or_else(|_| format!("not ({text})"))
}

/// An expression change at the level of its conjuncts: which were added, removed or negated;
/// a single expression that became something else is `changed`.
fn expr_changes(old: Option<&str>, new: Option<&str>) -> Vec<(String, String, String)> {
    let (o, n) =
        (old.map(conjunct_texts).unwrap_or_default(), new.map(conjunct_texts).unwrap_or_default());
    if o == n {
        return Vec::new();
    }
    let mut removed: Vec<String> = o.iter().filter(|c| !n.contains(c)).cloned().collect();
    let mut added: Vec<String> = n.iter().filter(|c| !o.contains(c)).cloned().collect();
    let mut out = Vec::new();
    // Negations: X became `not X`, or `not X` became X.
    removed.retain(|r| {
        let neg = negation(r);
        match added.iter().position(|a| *a == neg || negation(a) == *r) {
            Some(i) => {
                out.push(("conjunct negated".into(), r.clone(), added.remove(i)));
                false
            }
            None => true,
        }
    });
    match (removed.len(), added.len()) {
        (0, 0) if out.is_empty() => {
            out.push(("conjuncts reordered".into(), o.join(" and "), n.join(" and ")))
        }
        (0, 0) => {}
        (1, 1) => out.push(("conjunct changed".into(), removed.remove(0), added.remove(0))),
        _ => {
            for r in removed {
                out.push(("conjunct removed".into(), r, String::new()));
            }
            for a in added {
                out.push(("conjunct added".into(), String::new(), a));
            }
        }
    }
    out
}

/// Statement-level changes of a row's `do` list.
fn verb_changes(old: &CheckedRow, new: &CheckedRow) -> Vec<(String, String, String)> {
    let o: Vec<&str> = old.statements.iter().map(|s| s.text.as_str()).collect();
    let n: Vec<&str> = new.statements.iter().map(|s| s.text.as_str()).collect();
    if o == n {
        return Vec::new();
    }
    let mut out = Vec::new();
    let removed: Vec<&str> = o.iter().filter(|s| !n.contains(s)).copied().collect();
    let added: Vec<(usize, &str)> =
        n.iter().enumerate().filter(|(_, s)| !o.contains(s)).map(|(i, s)| (i, *s)).collect();
    for r in &removed {
        out.push(("verb removed".into(), r.to_string(), String::new()));
    }
    for (i, a) in &added {
        let place = match i {
            0 => "first".to_string(),
            _ => format!("after `{}`", n[i - 1]),
        };
        out.push((format!("verb added ({place})"), String::new(), a.to_string()));
    }
    let kept_o: Vec<&str> = o.iter().filter(|s| n.contains(s)).copied().collect();
    let kept_n: Vec<&str> = n.iter().filter(|s| o.contains(s)).copied().collect();
    if kept_o != kept_n {
        out.push(("verbs reordered".into(), kept_o.join("; "), kept_n.join("; ")));
    }
    out
}

/// Rows of `old_order` that moved, as (id, old place, new place): the rows outside a longest
/// common subsequence of the two orders, which is the fewest moves that explain the change.
fn moves(old_order: &[String], new_order: &[String]) -> Vec<(String, String, String)> {
    let (a, b) = (old_order, new_order);
    let mut l = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            l[i][j] = if a[i] == b[j] { l[i + 1][j + 1] + 1 } else { l[i + 1][j].max(l[i][j + 1]) };
        }
    }
    let mut stay = BTreeSet::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            stay.insert(a[i].clone());
            i += 1;
            j += 1;
        } else if l[i + 1][j] >= l[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    let place = |order: &[String], id: &str| -> String {
        let k = order.iter().position(|x| x == id).unwrap_or(0);
        match (order.get(k + 1), k.checked_sub(1).and_then(|p| order.get(p))) {
            (Some(next), _) => format!("above `{next}`"),
            (None, Some(prev)) => format!("to the end, below `{prev}`"),
            (None, None) => "alone".into(),
        }
    };
    b.iter()
        .filter(|id| !stay.contains(*id))
        .map(|id| (id.clone(), place(a, id), place(b, id)))
        .collect()
}

/// Computes the semantic differences from `old` to `new`.
pub fn diff(old: &Rulebook, new: &Rulebook) -> RulesDiff {
    let mut d = RulesDiff::default();

    // Rows, by id.
    let index = |b: &Rulebook| -> BTreeMap<String, (String, CheckedRow)> {
        b.rows().map(|(h, r)| (r.decl.id.clone(), (h.name.clone(), r.clone()))).collect()
    };
    let (o, n) = (index(old), index(new));
    let row =
        |d: &mut RulesDiff, book: &Rulebook, id: &str, what: &str, old: String, new: String| {
            let mut c = change(id, what, old, new);
            c.context = row_context(book, id);
            d.rows.push(c);
        };
    for (id, (h, r)) in &n {
        match o.get(id) {
            None => row(&mut d, new, id, "added", String::new(), row_summary(r)),
            Some((oh, or)) => {
                if oh != h {
                    row(&mut d, new, id, "handler", oh.clone(), h.clone());
                }
                for (what, a, b) in expr_changes(or.decl.when.as_deref(), r.decl.when.as_deref()) {
                    let what = if or.decl.when.is_none() {
                        "guard added".to_string()
                    } else if r.decl.when.is_none() {
                        "guard removed".to_string()
                    } else {
                        format!("guard: {what}")
                    };
                    row(&mut d, new, id, &what, a, b);
                }
                for (what, a, b) in verb_changes(or, r) {
                    row(&mut d, new, id, &what, a, b);
                }
                if or.decl.then != r.decl.then {
                    row(&mut d, new, id, "then", then_text(&or.decl.then), then_text(&r.decl.then));
                }
                if or.decl.to != r.decl.to {
                    let show = |t: &Option<String>| t.clone().unwrap_or_else(|| "—".into());
                    row(&mut d, new, id, "next state", show(&or.decl.to), show(&r.decl.to));
                }
                if or.decl.spec != r.decl.spec {
                    d.documentation += 1;
                }
            }
        }
    }
    for (id, (_, r)) in &o {
        if !n.contains_key(id) {
            row(&mut d, old, id, "removed", row_summary(r), String::new());
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
                for (id, from, to) in moves(&order(a), &order(b)) {
                    let mut c = change(&id, &format!("moved {to}"), format!("was {from}"), "");
                    c.context = row_context(new, &id);
                    d.rows.push(c);
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

    // Definitions, compared conjunct by conjunct.
    let defs = |b: &Rulebook| -> BTreeMap<String, String> {
        b.transitions.definitions.iter().map(|x| (x.name.clone(), x.expr.clone())).collect()
    };
    let (od, nd) = (defs(old), defs(new));
    for (name, expr) in &nd {
        match od.get(name) {
            None => {
                d.definitions.push(change(name, "added", "", conjunct_texts(expr).join(" and ")))
            }
            Some(o) => {
                for (what, a, b) in expr_changes(Some(o), Some(expr)) {
                    d.definitions.push(change(name, &what, a, b));
                }
            }
        }
    }
    for (name, expr) in &od {
        if !nd.contains_key(name) {
            d.definitions.push(change(name, "removed", conjunct_texts(expr).join(" and "), ""));
        }
    }
    let def_docs = |b: &Rulebook| -> Vec<(String, String, String)> {
        b.transitions
            .definitions
            .iter()
            .map(|x| (x.name.clone(), x.doc.clone(), x.spec.clone()))
            .collect()
    };
    if def_docs(old) != def_docs(new) {
        d.documentation += 1;
    }

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
                // The reference is the spec's annotation table: its text is a contract too.
                for (what, a, b) in [
                    ("purpose", &o.purpose, &k.purpose),
                    ("lifecycle", &o.lifecycle, &k.lifecycle),
                    ("spec reference", &o.spec, &k.spec),
                ] {
                    if a != b {
                        d.annotations.push(change(key, what, a.clone(), b.clone()));
                    }
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
            m.insert(
                format!("reason {}", r.name),
                format!("{:?} on {}: {:?}", r.severity, r.kind.name(), r.message),
            );
            for c in &r.cases {
                m.insert(format!("reason {} case {}", r.name, c.name), format!("{:?}", c.message));
            }
        }
        for s in &v.slots {
            m.insert(format!("slot {}", s.name), String::new());
        }
        for f in &v.findings {
            m.insert(format!("finding {}", f.name), format!("{:?} {:?}", f.severity, f.layer));
        }
        for s in &v.signals {
            m.insert(format!("signal {}", s.name), String::new());
        }
        for x in &v.metrics {
            m.insert(
                format!("metric {}", x.name),
                format!("{:?} {{{}}}: {:?}", x.ty, x.labels.join(","), x.help),
            );
        }
        m
    };
    diff_maps(&vocab(old), &vocab(new), &mut d.vocabulary);

    spec_table_changes(&old.spec_table, &new.spec_table, &mut d.spec_table);

    // The spec contract: obligations keyed by their spec text, compared item by item.
    let contract = |b: &Rulebook| -> BTreeMap<String, (Option<u32>, Vec<String>)> {
        b.obligations
            .iter()
            .map(|o| (o.spec.clone(), (o.table_row, o.must.iter().map(|m| m.describe()).collect())))
            .collect()
    };
    let (oc, nc) = (contract(old), contract(new));
    for (spec, (row, must)) in &nc {
        match oc.get(spec) {
            None => d.contract.push(change(spec, "added", "", must.join("; "))),
            Some((orow, omust)) => {
                if orow != row {
                    let show = |r: &Option<u32>| {
                        r.map(|n| format!("table row {n}")).unwrap_or_else(|| "—".into())
                    };
                    d.contract.push(change(spec, "table row", show(orow), show(row)));
                }
                for m in omust.iter().filter(|m| !must.contains(m)) {
                    d.contract.push(change(spec, "obligation removed", m.clone(), ""));
                }
                for m in must.iter().filter(|m| !omust.contains(m)) {
                    d.contract.push(change(spec, "obligation added", "", m.clone()));
                }
            }
        }
    }
    for (spec, (_, must)) in &oc {
        if !nc.contains_key(spec) {
            d.contract.push(change(spec, "removed", must.join("; "), ""));
        }
    }
    d
}

/// The spec table, row by row: the mapping to rule rows and the row's text.
fn spec_table_changes(old: &[SpecRow], new: &[SpecRow], out: &mut Vec<Change>) {
    let key = |r: &SpecRow| format!("spec row {} ({} → {})", r.n, r.from, r.to);
    for r in new {
        let subject = key(r);
        let Some(o) = old.iter().find(|o| o.n == r.n) else {
            out.push(change(&subject, "added", "", format!("{}: {}", r.event, r.rules.join(", "))));
            continue;
        };
        if (&o.from, &o.to) != (&r.from, &r.to) {
            out.push(change(
                &subject,
                "states",
                format!("{} → {}", o.from, o.to),
                format!("{} → {}", r.from, r.to),
            ));
        }
        let unmapped: Vec<&str> =
            o.rules.iter().filter(|x| !r.rules.contains(x)).map(String::as_str).collect();
        let mapped: Vec<&str> =
            r.rules.iter().filter(|x| !o.rules.contains(x)).map(String::as_str).collect();
        if !unmapped.is_empty() {
            out.push(change(&subject, "rule rows unmapped", unmapped.join(", "), ""));
        }
        if !mapped.is_empty() {
            out.push(change(&subject, "rule rows mapped", "", mapped.join(", ")));
        }
        if o.event != r.event {
            out.push(change(&subject, "event", o.event.clone(), r.event.clone()));
        }
        if o.effects != r.effects {
            out.push(change(&subject, "effects", o.effects.clone(), r.effects.clone()));
        }
    }
    for o in old {
        if !new.iter().any(|r| r.n == o.n) {
            out.push(change(
                &key(o),
                "removed",
                format!("{}: {}", o.event, o.rules.join(", ")),
                "",
            ));
        }
    }
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
pub(crate) fn markdown(d: &RulesDiff, old_label: &str, new_label: &str) -> String {
    let mut out = format!("### Rule changes: `{old_label}` → `{new_label}`\n\n");
    if d.is_empty() {
        out.push_str("no semantic changes\n");
        if d.documentation > 0 {
            let _ = writeln!(
                out,
                "\n({} documentation-only change(s): row spec citations, handler or definition docs.)",
                d.documentation
            );
        }
        return out;
    }
    if !d.rows.is_empty() {
        let _ = writeln!(
            out,
            "#### Rows\n\n| Row | Where (handler #position, row above · spec) | Change | Old | New |\n|---|---|---|---|---|"
        );
        for c in &d.rows {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                c.subject,
                c.context.replace('|', "\\|"),
                c.what,
                md(&c.old),
                md(&c.new)
            );
        }
        out.push('\n');
    }
    let sections: [(&str, &str, &Vec<Change>); 6] = [
        ("Handlers", "Handler", &d.handlers),
        ("Definitions", "Definition", &d.definitions),
        ("Annotation keys", "Key", &d.annotations),
        ("Spec table", "Spec row", &d.spec_table),
        ("Spec contract (rules/obligations.ron)", "Spec", &d.contract),
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
