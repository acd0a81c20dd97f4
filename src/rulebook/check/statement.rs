//! Verb statements: arguments matched to the verb's parameters and checked against their types.
use super::super::model::*;
use super::super::syntax::{self, Expr, ExprKind, Statement};
use super::Checker;
use super::resolve::{LocalError, Scope, local};
use super::resolved::{RArg, RExpr, RStatement};
use super::types::{Ty, compatible, show};

impl Checker<'_> {
    pub(super) fn statement(
        &self,
        s: &Statement,
        scope: &Scope<'_>,
    ) -> Result<RStatement, LocalError> {
        let verb = self.voc.verbs.iter().find(|v| v.name == s.verb).ok_or_else(|| {
            let names: Vec<&str> = self.voc.verbs.iter().map(|v| v.name.as_str()).collect();
            local(
                s.verb_span.start,
                format!("unknown verb `{}` (verbs: {})", s.verb, names.join(", ")),
            )
        })?;
        // Match arguments to parameters.
        let mut assigned: Vec<Option<&syntax::Arg>> = vec![None; verb.params.len()];
        let mut positional =
            verb.params.iter().enumerate().filter(|(_, p)| !p.named).map(|(i, _)| i);
        for a in &s.args {
            let idx = match &a.name {
                None => positional.next().ok_or_else(|| {
                    local(
                        a.span.start,
                        format!("`{}` takes no more positional arguments", verb.name),
                    )
                })?,
                Some(n) => {
                    verb.params.iter().position(|p| &p.name == n && p.named).ok_or_else(|| {
                        let names: Vec<&str> = verb
                            .params
                            .iter()
                            .filter(|p| p.named)
                            .map(|p| p.name.as_str())
                            .collect();
                        local(
                            a.span.start,
                            format!(
                                "`{}` has no parameter `{n}=` (named parameters: {})",
                                verb.name,
                                names.join(", ")
                            ),
                        )
                    })?
                }
            };
            if assigned[idx].is_some() {
                return Err(local(
                    a.span.start,
                    format!("parameter `{}` given twice", verb.params[idx].name),
                ));
            }
            assigned[idx] = Some(a);
        }
        // The target's kind types Set/Keys/Key parameters.
        let mut target_kind: Option<String> = None;
        let mut args = Vec::new();
        for (p, a) in verb.params.iter().zip(&assigned) {
            let Some(a) = a else {
                if !p.optional {
                    return Err(local(
                        s.verb_span.start,
                        format!("`{}` needs `{}`", verb.name, p.name),
                    ));
                }
                continue;
            };
            let v = &a.value;
            let arg = match &p.ty {
                ParamType::Target(kinds) => {
                    let (t, r) = self.expr(v, scope, None)?;
                    match &t.ty {
                        Some(Ty::Object(k)) if kinds.contains(k) => {
                            if p.name == "target" {
                                target_kind = Some(k.clone());
                            }
                        }
                        _ => {
                            return Err(local(
                                v.span.start,
                                format!(
                                    "`{}` of `{}` must be a {}, found {}",
                                    p.name,
                                    verb.name,
                                    kinds.join(" or "),
                                    show(&t)
                                ),
                            ));
                        }
                    }
                    RArg::Expr(r)
                }
                ParamType::Name => {
                    let (t, r) = self.expr(v, scope, Some(&Ty::Name))?;
                    if t.ty != Some(Ty::Name) {
                        return Err(local(
                            v.span.start,
                            format!("`{}` must be a name, found {}", p.name, show(&t)),
                        ));
                    }
                    RArg::Expr(r)
                }
                ParamType::States => {
                    let states = self.claim_states();
                    RArg::Syms(
                        words(v, "claim states like [none, pending]")?
                            .into_iter()
                            .map(|(w, off)| {
                                if states.contains(&w) {
                                    Ok(w)
                                } else {
                                    Err(local(
                                        off,
                                        format!(
                                            "`{w}` is not a ClaimState ({})",
                                            states.join(", ")
                                        ),
                                    ))
                                }
                            })
                            .collect::<Result<_, _>>()?,
                    )
                }
                ParamType::Keys | ParamType::Key => {
                    let kind = target_kind.clone().unwrap_or_default();
                    let list = if p.ty == ParamType::Key {
                        match &v.kind {
                            ExprKind::Word(w) => vec![(w.clone(), v.span.start)],
                            _ => {
                                return Err(local(
                                    v.span.start,
                                    format!("`{}=` takes one annotation key", p.name),
                                ));
                            }
                        }
                    } else {
                        words(v, "annotation keys like [started-at, surge-claim]")?
                    };
                    for (w, off) in &list {
                        self.annotation_for(w, &kind).map_err(|m| local(*off, m))?;
                    }
                    RArg::Keys(list.into_iter().map(|(w, _)| w).collect())
                }
                ParamType::Set => {
                    let ExprKind::Map(entries) = &v.kind else {
                        return Err(local(
                            v.span.start,
                            format!("`{}=` takes a map like {{state: pending}}", p.name),
                        ));
                    };
                    let kind = target_kind.clone().unwrap_or_default();
                    let mut out = Vec::new();
                    for (k, kspan, val) in entries {
                        let a = self.annotation_for(k, &kind).map_err(|m| local(kspan.start, m))?;
                        let want = Self::annotation_ty(a);
                        let (t, r) = self.expr(val, scope, Some(&want))?;
                        if !t.ty.as_ref().is_some_and(|t| compatible(t, &want)) {
                            return Err(local(
                                val.span.start,
                                format!("`{k}` holds {want}, found {}", show(&t)),
                            ));
                        }
                        out.push((k.clone(), r));
                    }
                    RArg::Set(out)
                }
                ParamType::Guard => {
                    let (t, r) = self.expr(v, scope, Some(&Ty::Bool))?;
                    if t.ty != Some(Ty::Bool) || t.nullable {
                        return Err(local(
                            v.span.start,
                            format!("`{}=` takes a bool guard, found {}", p.name, show(&t)),
                        ));
                    }
                    // Re-evaluated on the fresh read: only what that read rebinds (np) or what
                    // does not depend on the pass's copies (policy, now) may appear.
                    if let Some(bad) = fresh_unsafe(&r) {
                        return Err(local(
                            v.span.start,
                            format!(
                                "`{}=` is re-evaluated on the fresh read and may name only np, policy and now (found `{bad}`)",
                                p.name
                            ),
                        ));
                    }
                    RArg::Expr(r)
                }
                ParamType::Reason | ParamType::Signal | ParamType::Verdict => {
                    let (what, values): (&str, Vec<String>) = match p.ty {
                        ParamType::Reason => (
                            "event reason",
                            self.voc.reasons.iter().map(|r| r.name.clone()).collect(),
                        ),
                        ParamType::Signal => {
                            ("signal", self.voc.signals.iter().map(|r| r.name.clone()).collect())
                        }
                        _ => (
                            "verdict",
                            self.voc
                                .enums
                                .iter()
                                .find(|e| e.name == "Verdict")
                                .map(|e| e.values.clone())
                                .unwrap_or_default(),
                        ),
                    };
                    match &v.kind {
                        ExprKind::Word(w) if values.contains(w) => RArg::Syms(vec![w.clone()]),
                        _ => {
                            return Err(local(
                                v.span.start,
                                format!("`{v}` is not a known {what} ({})", values.join(", ")),
                            ));
                        }
                    }
                }
            };
            args.push((p.name.clone(), arg));
        }
        Ok(RStatement {
            verb: s.verb.clone(),
            args,
            bind: s.bind.as_ref().map(|(n, _)| n.clone()),
            text: s.to_string(),
        })
    }
}

fn words(v: &Expr, what: &str) -> Result<Vec<(String, usize)>, LocalError> {
    let ExprKind::List(items) = &v.kind else {
        return Err(local(v.span.start, format!("expected a list of {what}")));
    };
    items
        .iter()
        .map(|i| match &i.kind {
            ExprKind::Word(w) => Ok((w.clone(), i.span.start)),
            _ => Err(local(i.span.start, format!("expected a list of {what}"))),
        })
        .collect()
}

/// The first root or outcome in `e` that a fresh read does not rebind (anything but `np`,
/// `policy`, `now` and an object's `name`), for `holds=` guards.
fn fresh_unsafe(e: &RExpr) -> Option<String> {
    match e {
        RExpr::Lit(_) => None,
        RExpr::Root(r) => (!matches!(r.as_str(), "np" | "policy" | "now")).then(|| r.clone()),
        // A claim's name is its identity: the same on any read.
        RExpr::Field { obj, field, .. } if field == "name" && matches!(**obj, RExpr::Root(_)) => {
            None
        }
        RExpr::Outcome(o) => Some(o.clone()),
        RExpr::Field { obj, .. } | RExpr::Annotation { obj, .. } | RExpr::Present { obj, .. } => {
            fresh_unsafe(obj)
        }
        RExpr::Call { args, .. } => args.iter().find_map(fresh_unsafe),
        RExpr::Not(x) => fresh_unsafe(x),
        RExpr::Binary { lhs, rhs, .. } => fresh_unsafe(lhs).or_else(|| fresh_unsafe(rhs)),
        RExpr::In { lhs, .. } => fresh_unsafe(lhs),
    }
}
