//! The spec's side: `spec-table.ron` (each §5.3 row mapped to rule rows) and `obligations.ron`
//! (what each spec row and normative step obliges the rules to contain).
use std::collections::BTreeSet;

use super::super::model::*;
use super::super::syntax;
use super::Checker;
use super::announce::conjuncts;
use super::resolved::{CheckedHandler, RStatement};
use super::source::Source;

/// How a spec row or step is named in messages: `spec row 5 (pending → failed: readyTimeout)`,
/// else the obligation's own `spec` text.
fn spec_label(o: &Obligation, table: &[SpecRow]) -> String {
    match o.table_row.and_then(|n| table.iter().find(|r| r.n == n)) {
        Some(r) => format!("spec row {} ({} → {}: {})", r.n, r.from, r.to, r.event),
        None => o.spec.clone(),
    }
}

/// Does statement `text` (canonical form) match the obligation item `item`?
fn statement_matches(stmt: &RStatement, item: &str) -> bool {
    if item.contains('(') { stmt.text.starts_with(item) } else { stmt.verb == item }
}

/// The top-level `and` conjuncts of a guard text in canonical form (the text itself when it does
/// not parse: the checker has reported it).
pub(crate) fn conjunct_texts(text: &str) -> Vec<String> {
    match syntax::parse_guard(text) {
        Ok(e) => conjuncts(&e).into_iter().map(|c| c.to_string()).collect(),
        Err(_) => vec![text.to_string()],
    }
}

/// A guard in canonical form (how docs, `rules diff` and obligations compare expressions).
pub(crate) fn canonical(expr: &str) -> Result<String, syntax::SyntaxError> {
    syntax::parse_guard(expr).map(|e| e.to_string())
}

impl Checker<'_> {
    pub(super) fn check_spec_table(
        &mut self,
        src: &Source,
        table: &[SpecRow],
        handlers: &[CheckedHandler],
    ) {
        let ids: BTreeSet<&str> =
            handlers.iter().flat_map(|h| h.rows.iter().map(|r| r.decl.id.as_str())).collect();
        let mut seen = BTreeSet::new();
        let mut states = self.claim_states();
        states.push("success".into());
        for row in table {
            let at = src.find(0, &format!("n: {},", row.n)).unwrap_or(0);
            if !seen.insert(row.n) {
                self.diags.push(src.diag(at, format!("spec row {} appears twice", row.n)));
            }
            for s in [&row.from, &row.to] {
                if !states.contains(s) {
                    self.diags.push(src.diag(
                        at,
                        format!(
                            "spec row {}: `{s}` is not a claim state ({})",
                            row.n,
                            states.join(", ")
                        ),
                    ));
                }
            }
            if row.rules.is_empty() {
                self.diags.push(src.diag(at, format!("spec row {} maps to no rule", row.n)));
            }
            for r in &row.rules {
                if !ids.contains(r.as_str()) {
                    let off = src.string_after(at, r).unwrap_or(at);
                    self.diags.push(
                        src.diag(off, format!("spec row {} names unknown rule `{r}`", row.n)),
                    );
                }
            }
        }
    }

    pub(super) fn check_obligations(
        &mut self,
        src: &Source,
        obligations: &[Obligation],
        tr: &Transitions,
        table: &[SpecRow],
        handlers: &[CheckedHandler],
    ) {
        for o in obligations {
            let at = src.string_after(0, &o.spec).unwrap_or(0);
            if let Some(n) = o.table_row
                && !table.iter().any(|r| r.n == n)
            {
                self.diags
                    .push(src.diag(at, format!("`table_row: {n}` is not a row of spec-table.ron")));
            }
            if o.must.is_empty() {
                self.diags.push(src.diag(at, format!("obligation `{}` requires nothing: list what the rules must contain in `must`", o.spec)));
            }
            let who = spec_label(o, table);
            for m in &o.must {
                match m {
                    Must::Conjunct { of, expr } => {
                        self.obliged_conjunct(src, at, &who, of, expr, tr, handlers)
                    }
                    Must::Verbs { handler, order } => self.obliged_verbs(
                        src,
                        at,
                        &who,
                        o.table_row,
                        handler,
                        order,
                        table,
                        handlers,
                    ),
                    Must::ClearSet { keys } => {
                        self.obliged_clear_set(src, at, &who, keys, handlers)
                    }
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn obliged_conjunct(
        &mut self,
        src: &Source,
        at: usize,
        who: &str,
        of: &str,
        expr: &str,
        tr: &Transitions,
        handlers: &[CheckedHandler],
    ) {
        let want = match canonical(expr) {
            Ok(w) => w,
            Err(e) => {
                let off = src.string_after(at, expr).map(|o| o + e.offset).unwrap_or(at);
                self.diags.push(src.diag(off, format!("obligation expression: {}", e.message)));
                return;
            }
        };
        let negated = canonical(&format!("not ({expr})")).unwrap_or_default();
        let (target, text, place) = if let Some(d) = tr.definitions.iter().find(|d| d.name == of) {
            let users: Vec<&str> = handlers
                .iter()
                .flat_map(|h| &h.rows)
                .filter(|r| r.decl.when.as_deref().is_some_and(|w| mentions(w, of)))
                .map(|r| r.decl.id.as_str())
                .collect();
            let users = if users.is_empty() {
                String::new()
            } else {
                format!(
                    " (used by rows {})",
                    users.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(", ")
                )
            };
            (
                format!("definition `{of}`{users}"),
                Some(d.expr.clone()),
                self.tr_src.decl("name", of),
            )
        } else if let Some(r) = handlers.iter().flat_map(|h| &h.rows).find(|r| r.decl.id == of) {
            (format!("row `{of}`"), r.decl.when.clone(), self.tr_src.decl("id", of))
        } else {
            let off = src.string_after(at, of).unwrap_or(at);
            self.diags.push(src.diag(
                off,
                format!("{who}: `{of}` is neither a definition nor a row of transitions.ron"),
            ));
            return;
        };
        let have = text.as_deref().map(conjunct_texts).unwrap_or_default();
        if have.contains(&want) {
            return;
        }
        let how = if have.contains(&negated) { "it is negated" } else { "it is missing" };
        self.err_tr(
            place,
            format!("{who} requires {target} to keep the conjunct `{want}`; {how} (obligation at {}:{})", src.path, src.line_col(at).0),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn obliged_verbs(
        &mut self,
        src: &Source,
        at: usize,
        who: &str,
        table_row: Option<u32>,
        handler: &str,
        order: &[String],
        table: &[SpecRow],
        handlers: &[CheckedHandler],
    ) {
        let Some(h) = handlers.iter().find(|h| h.name == handler) else {
            let off = src.string_after(at, handler).unwrap_or(at);
            self.diags.push(
                src.diag(off, format!("{who}: `{handler}` is not a handler of transitions.ron")),
            );
            return;
        };
        let stmts: Vec<(&str, &RStatement)> = h
            .rows
            .iter()
            .flat_map(|r| r.statements.iter().map(move |s| (r.decl.id.as_str(), s)))
            .collect();
        let mut next = 0;
        let mut after: Option<(&str, &str)> = None; // (item, row) of the last match
        for item in order {
            match stmts[next..].iter().position(|(_, s)| statement_matches(s, item)) {
                Some(i) => {
                    after = Some((item.as_str(), stmts[next + i].0));
                    next += i + 1;
                }
                None => {
                    let mapped: Vec<&str> = table_row
                        .and_then(|n| table.iter().find(|r| r.n == n))
                        .map(|r| {
                            r.rules
                                .iter()
                                .filter(|id| h.rows.iter().any(|x| &x.decl.id == *id))
                                .map(String::as_str)
                                .collect()
                        })
                        .unwrap_or_default();
                    let rows = if mapped.is_empty() {
                        h.rows.iter().map(|r| r.decl.id.as_str()).collect::<Vec<_>>()
                    } else {
                        mapped
                    };
                    let rows = rows.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", ");
                    let elsewhere = stmts.iter().find(|(_, s)| statement_matches(s, item));
                    let how = match (elsewhere, after) {
                        (Some((row, _)), Some((prev, prev_row))) => format!(
                            "it is in row `{row}`, but not after `{prev}` (row `{prev_row}`)"
                        ),
                        (Some((row, _)), None) => format!("it is in row `{row}` but out of order"),
                        (None, Some((prev, prev_row))) => {
                            format!("it is missing after `{prev}` (row `{prev_row}`)")
                        }
                        (None, None) => "it is missing".to_string(),
                    };
                    let sequence =
                        order.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(" → ");
                    self.err_tr(
                        self.tr_src.decl("name", handler),
                        format!("{who} requires handler `{handler}` (rows {rows}) to run {sequence}; `{item}`: {how}"),
                    );
                    return;
                }
            }
        }
    }

    fn obliged_clear_set(
        &mut self,
        src: &Source,
        at: usize,
        who: &str,
        keys: &[String],
        handlers: &[CheckedHandler],
    ) {
        let clearing: Vec<String> = handlers
            .iter()
            .flat_map(|h| &h.rows)
            .filter(|r| {
                r.statements.iter().any(|s| s.verb == "clear_anchor" || s.verb == "release_anchor")
            })
            .map(|r| format!("`{}`", r.decl.id))
            .collect();
        for k in keys {
            if !self.ann.keys.iter().any(|x| &x.key == k) {
                let off = src.string_after(at, k).unwrap_or(at);
                self.diags
                    .push(src.diag(off, format!("{who}: `{k}` is not a key of annotations.ron")));
                continue;
            }
            if !self.ann.anchor_clear_set.contains(k) {
                let off = self.ann_src.find(0, "anchor_clear_set").unwrap_or(0);
                self.err_ann(
                    off,
                    format!("{who} requires `anchor_clear_set` to contain `{k}` (cleared by rows {}); it is missing", clearing.join(", ")),
                );
            }
        }
    }
}

/// Does guard text `text` name `word` as a whole word?
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let ok = |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        ok(text[..i].chars().next_back()) && ok(text[i + word.len()..].chars().next())
    })
}
