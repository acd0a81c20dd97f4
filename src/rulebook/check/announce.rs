//! Claim-then-announce (§5.2): a row that announces (emit, event) requires a won write.
use super::super::syntax::{BinOp, Expr, ExprKind};
use super::Checker;
use super::resolve::Scope;

impl Checker<'_> {
    pub(super) fn announces(&self, stmt_src: &str) -> bool {
        let name = stmt_src.split('(').next().unwrap_or("").trim();
        self.voc.verbs.iter().any(|v| v.name == name && v.announces)
    }

    /// Claim-then-announce: a row that emits must require, in a top-level conjunct of its
    /// guard, that an outcome bound earlier in the handler is one of its verb's winning ones.
    pub(super) fn check_announce(&mut self, guard: &Expr, scope: &Scope<'_>, row: &str, at: usize) {
        let ok = conjuncts(guard).into_iter().any(|c| {
            let (var, vals): (&Expr, Vec<&Expr>) = match &c.kind {
                ExprKind::Binary(BinOp::Eq, l, r) => (l, vec![&**r]),
                ExprKind::In(l, items) => (l, items.iter().collect()),
                _ => return false,
            };
            let ExprKind::Word(v) = &var.kind else { return false };
            let Some(verb) = scope.outcomes.get(v) else { return false };
            let Some(decl) = self.voc.verbs.iter().find(|d| &d.name == verb) else { return false };
            let wins = decl.winning_outcomes();
            !vals.is_empty()
                && vals.iter().all(|e| matches!(&e.kind, ExprKind::Word(w) if wins.contains(w)))
        });
        if !ok {
            self.err_tr(
                at,
                format!("row `{row}` announces (emit/event) but its guard does not require a won write; claim-then-announce (§5.2): add a conjunct like `out == won` on an outcome bound above"),
            );
        }
    }
}

/// The top-level `and` conjuncts of a guard, left to right.
pub(super) fn conjuncts(e: &Expr) -> Vec<&Expr> {
    match &e.kind {
        ExprKind::Binary(BinOp::And, l, r) => {
            let mut v = conjuncts(l);
            v.extend(conjuncts(r));
            v
        }
        _ => vec![e],
    }
}
