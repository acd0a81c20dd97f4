//! `transitions.ron`, handler by handler and row by row. Flow typing: an outcome is readable in
//! the rows below the one that binds it, and a root is known non-nil below a terminal
//! `x == nil` row (or where the handler or definition `assume`s it).
use std::collections::{BTreeMap, BTreeSet};

use super::super::model::*;
use super::super::syntax::{self, BinOp};
use super::Checker;
use super::declarations::{dup_names, is_snake};
use super::resolve::{Definition1, Scope};
use super::resolved::{CheckedHandler, CheckedRow, Lit, RExpr};
use super::types::{Ty, show};

impl Checker<'_> {
    pub(super) fn check_transitions(&mut self, tr: &Transitions) -> Vec<CheckedHandler> {
        let Some(pool) = self.context("pool") else {
            self.err_voc(0, "the context `pool` must be declared".into());
            return Vec::new();
        };
        let no_outcomes = BTreeMap::new();
        for d in &tr.definitions {
            let base = self.tr_src.decl("name", &d.name);
            let at = self.tr_src.string_after(base, &d.expr).unwrap_or(base);
            let nonnull: BTreeSet<String> = d.assume.iter().cloned().collect();
            for a in &d.assume {
                if !pool.roots.iter().any(|r| &r.name == a) {
                    self.err_tr(
                        base,
                        format!("definition `{}` assumes unknown root `{a}`", d.name),
                    );
                }
            }
            let scope = Scope { roots: &pool.roots, outcomes: &no_outcomes, nonnull: &nonnull };
            match syntax::parse_guard(&d.expr) {
                Err(e) => self.err_tr(at + e.offset, e.message),
                Ok(expr) => match self.expr(&expr, &scope, None) {
                    Ok((typed, expr)) => {
                        let def = Definition1 { typed, expr, assume: d.assume.clone() };
                        self.definitions.insert(d.name.clone(), def);
                    }
                    Err(e) => self.err_tr(at + e.offset, e.message),
                },
            }
        }

        for dup in dup_names(tr.handlers.iter().map(|h| h.name.as_str())) {
            let at = self.tr_src.decl("name", dup);
            self.err_tr(at, format!("handler `{dup}` is declared twice"));
        }
        let all_rows = tr.handlers.iter().flat_map(|h| h.rows.iter());
        for dup in dup_names(all_rows.map(|r| r.id.as_str())) {
            let first = self.tr_src.decl("id", dup);
            let second = self.tr_src.find(first + 1, &format!("id: \"{dup}\"")).unwrap_or(first);
            self.err_tr(second, format!("duplicate row id `{dup}`: row ids must be unique (they key docs and `rules diff`)"));
        }

        let mut checked = Vec::new();
        for h in &tr.handlers {
            checked.push(self.check_handler(h, tr));
        }
        self.check_structure(tr);
        checked
    }

    fn check_handler(&mut self, h: &HandlerDecl, tr: &Transitions) -> CheckedHandler {
        let h_at = self.tr_src.decl("name", &h.name);
        let roots: &[FieldDecl] = match self.context(&h.context) {
            Some(c) => &c.roots,
            None => {
                self.err_tr(h_at, format!("handler `{}`: unknown context `{}`", h.name, h.context));
                &[]
            }
        };
        let mut outcomes: BTreeMap<String, String> = BTreeMap::new();
        let mut nonnull: BTreeSet<String> = BTreeSet::new();
        for a in &h.assume {
            if roots.iter().any(|r| &r.name == a) {
                nonnull.insert(a.clone());
            } else {
                self.err_tr(h_at, format!("handler `{}` assumes unknown root `{a}`", h.name));
            }
        }
        let mut rows = Vec::new();
        let mut ended_by: Option<&str> = None;
        for row in &h.rows {
            let row_at = self.tr_src.decl("id", &row.id);
            if row.report.is_some() && !h.context.starts_with("sweep") {
                self.err_tr(
                    row_at,
                    format!(
                        "row `{}`: `report` tags the sweep's report; handler `{}` is not a sweep",
                        row.id, h.name
                    ),
                );
            }
            if !is_snake(&row.id) {
                self.err_tr(row_at, format!("row id `{}` must be snake_case", row.id));
            }
            if let Some(prev) = ended_by {
                self.err_tr(
                    row_at,
                    format!("unreachable row `{}`: row `{prev}` above it has no `when` and always ends the handler", row.id),
                );
            }
            let scope_outcomes = outcomes.clone();
            let scope_nonnull = nonnull.clone();
            let scope = Scope { roots, outcomes: &scope_outcomes, nonnull: &scope_nonnull };
            let (guard_text, guard) = match &row.when {
                None => (None, None),
                Some(src) => {
                    let at = self
                        .tr_src
                        .find(row_at, "when:")
                        .and_then(|w| self.tr_src.string_after(w, src))
                        .unwrap_or(row_at);
                    match syntax::parse_guard(src) {
                        Err(e) => {
                            self.err_tr(at + e.offset, e.message);
                            (Some(src.clone()), None)
                        }
                        Ok(expr) => {
                            let text = expr.to_string();
                            match self.expr(&expr, &scope, None) {
                                Ok((t, r)) => {
                                    if t.ty != Some(Ty::Bool) || t.nullable {
                                        self.err_tr(
                                            at,
                                            format!("a guard must be a bool, found {}", show(&t)),
                                        );
                                    }
                                    if row.verbs.iter().any(|v| self.announces(v)) {
                                        self.check_announce(&expr, &scope, &row.id, at);
                                    }
                                    (Some(text), Some(r))
                                }
                                Err(e) => {
                                    self.err_tr(at + e.offset, e.message);
                                    (Some(text), None)
                                }
                            }
                        }
                    }
                }
            };
            if row.when.is_none() && row.verbs.iter().any(|v| self.announces(v)) {
                self.err_tr(
                    row_at,
                    format!("row `{}` announces (emit/event) without a guard; claim-then-announce (§5.2): require a won write, e.g. `when: \"out == won\"`", row.id),
                );
            }
            let mut statements = Vec::new();
            for src in &row.verbs {
                let at = self.tr_src.string_after(row_at, src).unwrap_or(row_at);
                match syntax::parse_statement(src) {
                    Err(e) => self.err_tr(at + e.offset, e.message),
                    Ok(stmt) => match self.statement(&stmt, &scope) {
                        Ok(r) => {
                            if let Some((name, span)) = &stmt.bind {
                                if outcomes.contains_key(name) {
                                    self.err_tr(
                                        at + span.start,
                                        format!(
                                            "outcome `{name}` is already bound in handler `{}`",
                                            h.name
                                        ),
                                    );
                                } else if roots.iter().any(|r| &r.name == name)
                                    || self.definitions.contains_key(name)
                                {
                                    self.err_tr(
                                        at + span.start,
                                        format!(
                                            "outcome name `{name}` shadows a root or definition"
                                        ),
                                    );
                                } else if row.then != Then::Continue {
                                    self.err_tr(at + span.start, format!("outcome `{name}` can never be read: row `{}` ends the handler", row.id));
                                } else {
                                    outcomes.insert(name.clone(), stmt.verb.clone());
                                }
                            }
                            statements.push(r);
                        }
                        Err(e) => self.err_tr(at + e.offset, e.message),
                    },
                }
            }
            let then_at = self.tr_src.find(row_at, "then:").unwrap_or(row_at);
            let requeue_ms = match &row.then {
                Then::Requeue(d) => {
                    match syntax::parse_duration_ms(d) {
                        Some(ms) if ms > 0 => Some(ms),
                        _ => {
                            self.err_tr(then_at, format!("Requeue(\"{d}\"): not a positive duration like \"30s\" or \"1m\""));
                            None
                        }
                    }
                }
                Then::Goto(target) => {
                    if !tr.handlers.iter().any(|x| &x.name == target) {
                        let names: Vec<&str> =
                            tr.handlers.iter().map(|x| x.name.as_str()).collect();
                        self.err_tr(
                            then_at,
                            format!(
                                "Goto(\"{target}\"): unknown handler; handlers are {}",
                                names.join(", ")
                            ),
                        );
                    }
                    None
                }
                Then::Continue | Then::Done => None,
            };
            if let Some(to) = &row.to
                && !self.claim_states().contains(to)
            {
                let at = self.tr_src.find(row_at, "to:").unwrap_or(row_at);
                self.err_tr(
                    at,
                    format!(
                        "to: \"{to}\" is not a ClaimState ({})",
                        self.claim_states().join(", ")
                    ),
                );
            }
            if row.when.is_none() && row.then != Then::Continue && ended_by.is_none() {
                ended_by = Some(&row.id);
            }
            // Flow typing: below a terminal `x == nil` row, `x` is not nil.
            if row.then != Then::Continue
                && let Some(RExpr::Binary { op: BinOp::Eq, lhs, rhs }) = &guard
                && let (RExpr::Root(r), RExpr::Lit(Lit::Nil)) = (&**lhs, &**rhs)
            {
                nonnull.insert(r.clone());
            }
            rows.push(CheckedRow { decl: row.clone(), guard_text, guard, statements, requeue_ms });
        }
        // A row that failed to parse already has its error; do not pile structural ones on top.
        let all_parsed = rows.iter().all(|r| r.decl.when.is_none() || r.guard.is_some());
        if all_parsed && ended_by.is_none() && !self.exhaustive_tail(h, &rows) {
            self.err_tr(
                h_at,
                format!("handler `{}` can end without a decision: give its last row no `when` (and a Requeue or Goto), or make its last rows cover every value of one enum", h.name),
            );
        }
        CheckedHandler {
            name: h.name.clone(),
            entry: h.entry,
            handles: h.handles.clone(),
            context: h.context.clone(),
            doc: h.doc.clone(),
            rows,
        }
    }
}
