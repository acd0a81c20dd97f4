//! The shape of the handlers: every handler reachable from an entry one, every claim state
//! handled exactly once, and no handler that can end without a decision.
use std::collections::{BTreeMap, BTreeSet};

use super::super::model::*;
use super::super::syntax::{self, BinOp, Expr, ExprKind};
use super::Checker;
use super::resolved::{CheckedRow, RExpr};
use super::types::Ty;

impl Checker<'_> {
    /// True when the trailing terminal rows test one enum-typed path and together cover every
    /// value (the claim-state dispatch of `advance`).
    pub(super) fn exhaustive_tail(&self, h: &HandlerDecl, rows: &[CheckedRow]) -> bool {
        let mut path: Option<String> = None;
        let mut covered: BTreeSet<String> = BTreeSet::new();
        let mut universe: Option<Vec<String>> = None;
        for (decl, row) in h.rows.iter().zip(rows).rev() {
            if decl.then == Then::Continue {
                break;
            }
            let Some(src) = &decl.when else { break };
            let Ok(expr) = syntax::parse_guard(src) else { return false };
            let (lhs, values): (&Expr, Vec<String>) = match &expr.kind {
                ExprKind::Binary(BinOp::Eq, l, r) => match &r.kind {
                    ExprKind::Word(w) => (l, vec![w.clone()]),
                    _ => break,
                },
                ExprKind::In(l, items) => (
                    l,
                    items
                        .iter()
                        .filter_map(|i| {
                            if let ExprKind::Word(w) = &i.kind { Some(w.clone()) } else { None }
                        })
                        .collect(),
                ),
                _ => break,
            };
            let p = lhs.to_string();
            if path.as_ref().is_some_and(|x| x != &p) {
                break;
            }
            if let Some(RExpr::Binary { lhs, .. }) | Some(RExpr::In { lhs, .. }) = &row.guard
                && universe.is_none()
            {
                universe = self.enum_values_of(lhs);
            }
            path = Some(p);
            covered.extend(values);
        }
        match universe {
            Some(all) => all.iter().all(|v| covered.contains(v)),
            None => false,
        }
    }

    fn enum_values_of(&self, e: &RExpr) -> Option<Vec<String>> {
        if let RExpr::Field { kind, field, .. } = e {
            let k = self.voc.kinds.iter().find(|k| &k.name == kind)?;
            let f = k.fields.iter().find(|f| &f.name == field)?;
            if let Ok(Ty::Enum { values, .. }) = self.type_decl(&f.ty) {
                return Some(values);
            }
        }
        None
    }

    pub(super) fn check_structure(&mut self, tr: &Transitions) {
        // Reachability from entry handlers.
        let entries: Vec<&str> =
            tr.handlers.iter().filter(|h| h.entry).map(|h| h.name.as_str()).collect();
        if entries.is_empty() {
            self.err_tr(0, "no handler is marked `entry: true`".into());
        }
        let mut reached: BTreeSet<&str> = entries.iter().copied().collect();
        let mut queue: Vec<&str> = entries.clone();
        while let Some(name) = queue.pop() {
            let Some(h) = tr.handlers.iter().find(|h| h.name == name) else { continue };
            for r in &h.rows {
                if let Then::Goto(t) = &r.then
                    && reached.insert(t.as_str())
                {
                    queue.push(t.as_str());
                }
            }
        }
        for h in &tr.handlers {
            if !reached.contains(h.name.as_str()) {
                let at = self.tr_src.decl("name", &h.name);
                self.err_tr(
                    at,
                    format!(
                        "handler `{}` is unreachable: no entry handler leads to it with Goto",
                        h.name
                    ),
                );
            }
        }
        // Every claim state has exactly one handler.
        let states = self.claim_states();
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for h in &tr.handlers {
            for s in &h.handles {
                let at = self.tr_src.decl("name", &h.name);
                if !states.contains(s) {
                    self.err_tr(
                        at,
                        format!(
                            "handler `{}` handles unknown state `{s}` ({})",
                            h.name,
                            states.join(", ")
                        ),
                    );
                } else if let Some(prev) = owner.insert(s.as_str(), h.name.as_str()) {
                    self.err_tr(
                        at,
                        format!("claim state `{s}` is handled by both `{prev}` and `{}`", h.name),
                    );
                }
            }
        }
        for s in &states {
            if !owner.contains_key(s.as_str()) {
                let at = self.tr_src.find(0, "handlers:").unwrap_or(0);
                self.err_tr(
                    at,
                    format!(
                        "claim state `{s}` has no handler: list it in some handler's `handles`"
                    ),
                );
            }
        }
    }
}
