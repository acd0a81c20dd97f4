//! Name resolution: each bare word of a guard becomes a root, a definition (inlined), an outcome
//! bound above or a literal of the type expected there, and every expression is typed on the way.
use std::collections::{BTreeMap, BTreeSet};

use super::super::model::*;
use super::super::syntax::{BinOp, Expr, ExprKind};
use super::Checker;
use super::resolved::{Lit, RExpr};
use super::types::{Ty, Typed, compatible, expect_bool, show};

/// An error inside one guard or statement string: offset within that string.
pub(super) struct LocalError {
    pub(super) offset: usize,
    pub(super) message: String,
}

pub(super) fn local(offset: usize, message: impl Into<String>) -> LocalError {
    LocalError { offset, message: message.into() }
}

/// Names in scope while checking one expression.
pub(super) struct Scope<'s> {
    pub(super) roots: &'s [FieldDecl],
    pub(super) outcomes: &'s BTreeMap<String, String>, // variable -> verb
    /// Roots known non-nil here (`assume`, or a terminal `x == nil` row above).
    pub(super) nonnull: &'s BTreeSet<String>,
}

/// A checked definition: its type, resolved expression and the roots it assumes non-nil.
pub(super) struct Definition1 {
    pub(super) typed: Typed,
    pub(super) expr: RExpr,
    pub(super) assume: Vec<String>,
}

impl<'a> Checker<'a> {
    fn is_free_word(&self, e: &Expr, scope: &Scope<'_>) -> bool {
        match &e.kind {
            ExprKind::Word(w) => {
                !scope.outcomes.contains_key(w)
                    && !self.definitions.contains_key(w)
                    && !scope.roots.iter().any(|r| &r.name == w)
            }
            _ => false,
        }
    }

    pub(super) fn expr(
        &self,
        e: &Expr,
        scope: &Scope<'_>,
        expected: Option<&Ty>,
    ) -> Result<(Typed, RExpr), LocalError> {
        let at = e.span.start;
        let t = |ty: Ty, nullable: bool| Typed { ty: Some(ty), nullable };
        Ok(match &e.kind {
            ExprKind::Nil => (Typed { ty: None, nullable: true }, RExpr::Lit(Lit::Nil)),
            ExprKind::Bool(b) => (t(Ty::Bool, false), RExpr::Lit(Lit::Bool(*b))),
            ExprKind::Int(i) => (t(Ty::Int, false), RExpr::Lit(Lit::Int(*i))),
            ExprKind::Duration(ms) => (t(Ty::Duration, false), RExpr::Lit(Lit::DurationMs(*ms))),
            ExprKind::Word(w) => {
                if let Some(verb) = scope.outcomes.get(w) {
                    let values = self
                        .voc
                        .verbs
                        .iter()
                        .find(|v| &v.name == verb)
                        .map(|v| v.outcomes.clone())
                        .unwrap_or_default();
                    // An outcome not bound in this pass reads as nil.
                    (t(Ty::Outcome { verb: verb.clone(), values }, true), RExpr::Outcome(w.clone()))
                } else if let Some(def) = self.definitions.get(w) {
                    if let Some(missing) = def.assume.iter().find(|a| !scope.nonnull.contains(*a)) {
                        return Err(local(
                            at,
                            format!(
                                "`{w}` assumes `{missing}` is not nil, which is not known here (add it to the handler's `assume`, or test `{missing} == nil` in a row above)"
                            ),
                        ));
                    }
                    (def.typed.clone(), def.expr.clone())
                } else if let Some(root) = scope.roots.iter().find(|r| &r.name == w) {
                    let ty = self.type_decl(&root.ty).map_err(|m| local(at, m))?;
                    let nullable = root.nullable && !scope.nonnull.contains(w);
                    (t(ty, nullable), RExpr::Root(w.clone()))
                } else if let Some(ty) = expected
                    && let Some((what, values)) = ty.symbols()
                {
                    if !values.contains(w) {
                        return Err(local(
                            at,
                            format!("`{w}` is not {what} ({})", values.join(", ")),
                        ));
                    }
                    (t(ty.clone(), false), RExpr::Lit(Lit::Sym(w.clone())))
                } else {
                    let mut known: Vec<&str> =
                        scope.roots.iter().map(|r| r.name.as_str()).collect();
                    known.extend(self.definitions.keys().map(|k| k.as_str()));
                    known.extend(scope.outcomes.keys().map(|k| k.as_str()));
                    known.sort_unstable();
                    return Err(local(
                        at,
                        format!(
                            "unknown name `{w}`: not a root, definition or outcome bound above (known: {})",
                            known.join(", ")
                        ),
                    ));
                }
            }
            ExprKind::Field(obj, name) => {
                let (ot, or) = self.expr(obj, scope, None)?;
                let Some(Ty::Object(kind)) = &ot.ty else {
                    return Err(local(
                        at,
                        format!("`.{name}` needs an object, found {}", show(&ot)),
                    ));
                };
                let k = self
                    .voc
                    .kinds
                    .iter()
                    .find(|k| &k.name == kind)
                    .ok_or_else(|| local(at, format!("unknown kind {kind}")))?;
                let f = k.fields.iter().find(|f| &f.name == name).ok_or_else(|| {
                    let names: Vec<&str> = k.fields.iter().map(|f| f.name.as_str()).collect();
                    local(
                        e.span.end.saturating_sub(name.len()),
                        format!("{kind} has no field `{name}` (fields: {})", names.join(", ")),
                    )
                })?;
                let ty = self.type_decl(&f.ty).map_err(|m| local(at, m))?;
                (
                    t(ty, f.nullable || ot.nullable),
                    RExpr::Field { obj: Box::new(or), kind: kind.clone(), field: name.clone() },
                )
            }
            ExprKind::Index(obj, key) => {
                let (ot, or) = self.expr(obj, scope, None)?;
                let key_at = e.span.end.saturating_sub(key.len() + 1);
                let Some(Ty::Object(kind)) = &ot.ty else {
                    return Err(local(
                        at,
                        format!(
                            "`[{key}]` reads an annotation and needs an object, found {}",
                            show(&ot)
                        ),
                    ));
                };
                let a = self.annotation_for(key, kind).map_err(|m| local(key_at, m))?;
                (
                    t(Self::annotation_ty(a), true),
                    RExpr::Annotation { obj: Box::new(or), key: key.clone() },
                )
            }
            ExprKind::Call(name, args) if name == "present" => {
                let [arg] = args.as_slice() else {
                    return Err(local(at, "present(x[key]) takes one annotation read"));
                };
                let (_, r) = self.expr(arg, scope, None)?;
                let RExpr::Annotation { obj, key } = r else {
                    return Err(local(
                        arg.span.start,
                        "present() takes an annotation read like `np[freeze]`",
                    ));
                };
                (t(Ty::Bool, false), RExpr::Present { obj, key })
            }
            ExprKind::Call(name, args) => {
                let p = self.voc.predicates.iter().find(|p| &p.name == name).ok_or_else(|| {
                    let names: Vec<&str> =
                        self.voc.predicates.iter().map(|p| p.name.as_str()).collect();
                    local(
                        at,
                        format!(
                            "unknown predicate `{name}` (predicates: present, {})",
                            names.join(", ")
                        ),
                    )
                })?;
                if p.args.len() != args.len() {
                    return Err(local(
                        at,
                        format!("`{name}` takes {} argument(s), got {}", p.args.len(), args.len()),
                    ));
                }
                let mut any_null = false;
                let mut rargs = Vec::new();
                for (decl, a) in p.args.iter().zip(args) {
                    let want = self.type_decl(decl).map_err(|m| local(at, m))?;
                    let (at_, ar) = self.expr(a, scope, Some(&want))?;
                    if !at_.ty.as_ref().is_none_or(|t| compatible(t, &want)) {
                        return Err(local(
                            a.span.start,
                            format!("`{name}` expects {want} here, found {}", show(&at_)),
                        ));
                    }
                    any_null |= at_.nullable;
                    rargs.push(ar);
                }
                let ret = self.type_decl(&p.ret).map_err(|m| local(at, m))?;
                let nullable = p.nullable || (any_null && !p.accepts_nil);
                (t(ret, nullable), RExpr::Call { pred: name.clone(), args: rargs })
            }
            ExprKind::Not(inner) => {
                let (it, ir) = self.expr(inner, scope, Some(&Ty::Bool))?;
                expect_bool(&it, inner.span.start, "not")?;
                (t(Ty::Bool, false), RExpr::Not(Box::new(ir)))
            }
            ExprKind::Binary(op, l, r) => self.binary(*op, l, r, scope, at)?,
            ExprKind::In(l, items) => {
                let (lt, lr) = self.expr(l, scope, None)?;
                let Some(lty) = lt.ty.clone() else {
                    return Err(local(at, "`nil in [...]` is always false"));
                };
                let mut values = Vec::new();
                for item in items {
                    let (it, ir) = self.expr(item, scope, Some(&lty))?;
                    match (&it.ty, ir) {
                        (Some(ity), RExpr::Lit(lit)) if compatible(ity, &lty) => values.push(lit),
                        (_, RExpr::Lit(_)) => {
                            return Err(local(
                                item.span.start,
                                format!("cannot test {} for membership of {}", show(&it), lty),
                            ));
                        }
                        _ => {
                            return Err(local(
                                item.span.start,
                                "the list after `in` takes literal values only",
                            ));
                        }
                    }
                }
                (t(Ty::Bool, false), RExpr::In { lhs: Box::new(lr), values })
            }
            ExprKind::List(_) | ExprKind::Map(_) => {
                let _ = expected;
                return Err(local(
                    at,
                    "a list or map is only allowed after `in` or as a verb argument",
                ));
            }
        })
    }

    fn binary(
        &self,
        op: BinOp,
        l: &Expr,
        r: &Expr,
        scope: &Scope<'_>,
        at: usize,
    ) -> Result<(Typed, RExpr), LocalError> {
        let bool_t = Typed { ty: Some(Ty::Bool), nullable: false };
        let mk = |lr, rr| RExpr::Binary { op, lhs: Box::new(lr), rhs: Box::new(rr) };
        match op {
            BinOp::And | BinOp::Or => {
                let (lt, lr) = self.expr(l, scope, Some(&Ty::Bool))?;
                expect_bool(&lt, l.span.start, op.symbol())?;
                let (rt, rr) = self.expr(r, scope, Some(&Ty::Bool))?;
                expect_bool(&rt, r.span.start, op.symbol())?;
                Ok((bool_t, mk(lr, rr)))
            }
            BinOp::Eq | BinOp::Ne => {
                let ((lt, lr), (rt, rr)) =
                    if self.is_free_word(l, scope) && !self.is_free_word(r, scope) {
                        let rv = self.expr(r, scope, None)?;
                        let lv = self.expr(l, scope, rv.0.ty.as_ref())?;
                        (lv, rv)
                    } else {
                        let lv = self.expr(l, scope, None)?;
                        let rv = self.expr(r, scope, lv.0.ty.as_ref())?;
                        (lv, rv)
                    };
                match (&lt.ty, &rt.ty) {
                    (None, None) => return Err(local(at, "comparing nil with nil")),
                    (None, Some(_)) if !rt.nullable => {
                        return Err(local(r.span.start, format!("`{r}` is never nil")));
                    }
                    (Some(_), None) if !lt.nullable => {
                        return Err(local(l.span.start, format!("`{l}` is never nil")));
                    }
                    (Some(a), Some(b)) if !compatible(a, b) => {
                        return Err(local(at, format!("cannot compare {a} with {b}")));
                    }
                    _ => {}
                }
                Ok((bool_t, mk(lr, rr)))
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let (lt, lr) = self.expr(l, scope, None)?;
                let (rt, rr) = self.expr(r, scope, lt.ty.as_ref())?;
                match (&lt.ty, &rt.ty) {
                    (Some(a), Some(b))
                        if a == b && matches!(a, Ty::Int | Ty::Duration | Ty::Time) =>
                    {
                        Ok((bool_t, mk(lr, rr)))
                    }
                    _ => Err(local(
                        at,
                        format!(
                            "`{}` compares two ints, durations or times of the same type; found {} and {}",
                            op.symbol(),
                            show(&lt),
                            show(&rt)
                        ),
                    )),
                }
            }
            BinOp::Add | BinOp::Sub => {
                let (lt, lr) = self.expr(l, scope, None)?;
                let (rt, rr) = self.expr(r, scope, None)?;
                let nullable = lt.nullable || rt.nullable;
                let ty = match (op, &lt.ty, &rt.ty) {
                    (BinOp::Sub, Some(Ty::Time), Some(Ty::Time)) => Ty::Duration,
                    (_, Some(Ty::Time), Some(Ty::Duration)) => Ty::Time,
                    (_, Some(Ty::Duration), Some(Ty::Duration)) => Ty::Duration,
                    (_, Some(Ty::Int), Some(Ty::Int)) => Ty::Int,
                    _ => {
                        return Err(local(
                            at,
                            format!("cannot compute {} {} {}", show(&lt), op.symbol(), show(&rt)),
                        ));
                    }
                };
                Ok((Typed { ty: Some(ty), nullable }, mk(lr, rr)))
            }
        }
    }

    pub(super) fn annotation_for(
        &self,
        key: &str,
        kind: &str,
    ) -> Result<&'a AnnotationKey, String> {
        let a = self.ann.keys.iter().find(|k| k.key == key).ok_or_else(|| {
            format!("unknown annotation key `{key}`: declare it in annotations.ron")
        })?;
        if !a.targets.iter().any(|t| t.name() == kind) {
            let targets: Vec<&str> = a.targets.iter().map(|t| t.name()).collect();
            return Err(format!(
                "annotation `{key}` is not set on a {kind} (targets: {})",
                targets.join(", ")
            ));
        }
        Ok(a)
    }
}
