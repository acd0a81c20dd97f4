//! From a checked [`Rulebook`] (names as strings) to rows over the generated enums.
use std::collections::HashMap;

use chrono::Duration;

use super::value::Value;
use super::vocab::*;
use super::{Engine, HandlerRows, ObjRef};
use crate::rulebook::Rulebook;
use crate::rulebook::check::{Lit, RArg, RExpr, RStatement};
use crate::rulebook::model::{self, ReportTag};
use crate::rulebook::syntax::BinOp;

/// A compiled guard.
#[derive(Debug, Clone, PartialEq)]
pub enum Ir {
    Lit(Value),
    Root(Root),
    Outcome(usize),
    Field(Box<Ir>, Field),
    Annotation(Box<Ir>, Key),
    Present(Box<Ir>, Key),
    Call(Pred, Vec<Ir>),
    Not(Box<Ir>),
    And(Box<Ir>, Box<Ir>),
    Or(Box<Ir>, Box<Ir>),
    Binary(BinOp, Box<Ir>, Box<Ir>),
    In(Box<Ir>, Vec<Value>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Then {
    Continue,
    Requeue(Duration),
    Goto(Handler),
    /// End without a requeue.
    Done,
}

/// A verb with its arguments still to be evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct VerbCall {
    pub verb: Verb,
    pub target: Option<Ir>,
    pub pool: Option<Ir>,
    pub name: Option<Ir>,
    pub for_: Option<Ir>,
    pub from: Vec<ClaimState>,
    pub absent: Option<Key>,
    pub match_: Vec<(Key, Ir)>,
    pub holds: Option<Ir>,
    pub set: Vec<(Key, Ir)>,
    pub once: Vec<(Key, Ir)>,
    pub incr: Vec<Key>,
    pub clear: Vec<Key>,
    pub unchanged: Vec<Key>,
    pub reason: Option<Reason>,
    pub signal: Option<Signal>,
    pub verdict: Option<Verdict>,
    pub bind: Option<usize>,
    /// The statement as written (normalized), for logs.
    pub text: String,
}

/// A compiled row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: String,
    pub handler: Handler,
    pub guard: Option<Ir>,
    pub verbs: Vec<VerbCall>,
    pub then: Then,
    pub to: Option<ClaimState>,
    pub report: Option<ReportTag>,
}

/// A verb with evaluated arguments: what a [`Host`](super::Host) performs.
#[derive(Debug, Clone, PartialEq)]
pub struct Action<'r> {
    pub verb: Verb,
    pub row: &'r str,
    pub text: &'r str,
    pub target: Value,
    pub pool: Value,
    pub name: Option<String>,
    pub for_: Option<String>,
    pub from: &'r [ClaimState],
    pub absent: Option<Key>,
    /// Annotations the fresh copy must still read as these values (evaluated on this pass's
    /// read; nil: absent or unreadable).
    pub match_: Vec<(Key, Value)>,
    /// A guard the verb re-evaluates on its fresh read ([`Action::holds_on`]).
    pub holds: Option<&'r Ir>,
    /// Keys to write; keys whose value evaluated to nil are left out.
    pub set: Vec<(Key, Value)>,
    /// Keys to write only when absent or unreadable.
    pub once: Vec<(Key, Value)>,
    pub incr: &'r [Key],
    pub clear: &'r [Key],
    /// Keys whose value on the fresh copy must equal this pass's copy (conditional writes).
    pub unchanged: &'r [Key],
    pub reason: Option<Reason>,
    pub signal: Option<Signal>,
    pub verdict: Option<Verdict>,
}

impl Action<'_> {
    /// The target as an object, if it is one (nil targets are `None`).
    pub fn target_obj(&self) -> Option<&ObjRef> {
        self.target.as_object()
    }

    /// Whether the `holds=` guard is true on `facts` (the host's fresh read); `true` without
    /// one. The checker allows only `np`, `policy` and `now` in it, so no outcome is read.
    pub(crate) fn holds_on(&self, facts: &dyn super::Facts) -> Result<bool, String> {
        match self.holds {
            Some(g) => super::eval::truth(g, facts, &[]),
            None => Ok(true),
        }
    }
}

struct Ctx {
    slots: HashMap<String, usize>,
}

pub(super) fn compile(book: &Rulebook) -> Result<Engine, String> {
    let mut ctx = Ctx { slots: HashMap::new() };
    let mut handlers: Vec<HandlerRows> = Vec::new();
    for &h in Handler::ALL {
        let decl = book.handler(h.name()).ok_or_else(|| {
            format!("handler `{h}` is in the generated vocabulary but not in these rules")
        })?;
        let assume = book
            .transitions
            .handlers
            .iter()
            .find(|d| d.name == decl.name)
            .map(|d| d.assume.iter().map(|r| root(r)).collect::<Result<Vec<_>, _>>())
            .transpose()?
            .unwrap_or_default();
        let mut rows = Vec::new();
        for r in &decl.rows {
            let guard = r.guard.as_ref().map(|g| ir(g, &mut ctx)).transpose()?;
            let verbs =
                r.statements.iter().map(|s| verb(s, &mut ctx)).collect::<Result<Vec<_>, _>>()?;
            let then = match &r.decl.then {
                model::Then::Continue => Then::Continue,
                model::Then::Done => Then::Done,
                model::Then::Requeue(_) => Then::Requeue(Duration::milliseconds(
                    r.requeue_ms.ok_or("requeue without duration")?,
                )),
                model::Then::Goto(t) => Then::Goto(
                    Handler::from_name(t).ok_or_else(|| format!("unknown handler `{t}`"))?,
                ),
            };
            let to = r
                .decl
                .to
                .as_deref()
                .map(|s| ClaimState::from_name(s).ok_or_else(|| format!("unknown state `{s}`")))
                .transpose()?;
            let report = r.decl.report;
            rows.push(Row { id: r.decl.id.clone(), handler: h, guard, verbs, then, to, report });
        }
        handlers.push(HandlerRows { assume, rows });
    }
    // A runtime-loaded rulebook (mutants) must not add handlers the binary does not know.
    if let Some(extra) = book.handlers.iter().find(|h| Handler::from_name(&h.name).is_none()) {
        return Err(format!(
            "handler `{}` is not in the vocabulary this binary was built with",
            extra.name
        ));
    }
    let entry = book
        .handlers
        .iter()
        .find(|h| h.entry)
        .and_then(|h| Handler::from_name(&h.name))
        .ok_or("no entry handler")?;
    let slots = ctx.slots.len();
    Ok(Engine { handlers, entry, slots })
}

fn root(name: &str) -> Result<Root, String> {
    Root::from_name(name).ok_or_else(|| format!("unknown root `{name}`"))
}

fn key(name: &str) -> Result<Key, String> {
    Key::from_name(name).ok_or_else(|| format!("unknown annotation key `{name}`"))
}

fn lit(l: &Lit) -> Value {
    match l {
        Lit::Nil => Value::Nil,
        Lit::Bool(b) => Value::Bool(*b),
        Lit::Int(i) => Value::Int(*i),
        Lit::DurationMs(ms) => Value::Duration(Duration::milliseconds(*ms)),
        Lit::Sym(s) => Value::Sym(s.clone()),
    }
}

fn slot(ctx: &mut Ctx, name: &str) -> usize {
    let n = ctx.slots.len();
    *ctx.slots.entry(name.to_string()).or_insert(n)
}

fn ir(e: &RExpr, ctx: &mut Ctx) -> Result<Ir, String> {
    Ok(match e {
        RExpr::Lit(l) => Ir::Lit(lit(l)),
        RExpr::Root(r) => Ir::Root(root(r)?),
        RExpr::Outcome(name) => Ir::Outcome(slot(ctx, name)),
        RExpr::Field { obj, kind, field } => Ir::Field(
            Box::new(ir(obj, ctx)?),
            Field::lookup(kind, field).ok_or_else(|| format!("unknown field {kind}.{field}"))?,
        ),
        RExpr::Annotation { obj, key: k } => Ir::Annotation(Box::new(ir(obj, ctx)?), key(k)?),
        RExpr::Present { obj, key: k } => Ir::Present(Box::new(ir(obj, ctx)?), key(k)?),
        RExpr::Call { pred, args } => Ir::Call(
            Pred::from_name(pred).ok_or_else(|| format!("unknown predicate `{pred}`"))?,
            args.iter().map(|a| ir(a, ctx)).collect::<Result<_, _>>()?,
        ),
        RExpr::Not(x) => Ir::Not(Box::new(ir(x, ctx)?)),
        RExpr::Binary { op: BinOp::And, lhs, rhs } => {
            Ir::And(Box::new(ir(lhs, ctx)?), Box::new(ir(rhs, ctx)?))
        }
        RExpr::Binary { op: BinOp::Or, lhs, rhs } => {
            Ir::Or(Box::new(ir(lhs, ctx)?), Box::new(ir(rhs, ctx)?))
        }
        RExpr::Binary { op, lhs, rhs } => {
            Ir::Binary(*op, Box::new(ir(lhs, ctx)?), Box::new(ir(rhs, ctx)?))
        }
        RExpr::In { lhs, values } => {
            Ir::In(Box::new(ir(lhs, ctx)?), values.iter().map(lit).collect())
        }
    })
}

fn verb(s: &RStatement, ctx: &mut Ctx) -> Result<VerbCall, String> {
    let v = Verb::from_name(&s.verb).ok_or_else(|| format!("unknown verb `{}`", s.verb))?;
    let mut call = VerbCall {
        verb: v,
        target: None,
        pool: None,
        name: None,
        for_: None,
        from: Vec::new(),
        absent: None,
        match_: Vec::new(),
        holds: None,
        set: Vec::new(),
        once: Vec::new(),
        incr: Vec::new(),
        clear: Vec::new(),
        unchanged: Vec::new(),
        reason: None,
        signal: None,
        verdict: None,
        bind: s.bind.as_deref().map(|b| slot(ctx, b)),
        text: s.text.clone(),
    };
    for (param, arg) in &s.args {
        let expr = |a: &RArg, ctx: &mut Ctx| match a {
            RArg::Expr(e) => ir(e, ctx),
            _ => Err(format!("`{param}` of `{}` must be an expression", s.verb)),
        };
        let syms = |a: &RArg| match a {
            RArg::Syms(v) => Ok(v.clone()),
            _ => Err(format!("`{param}` of `{}` must be a list of values", s.verb)),
        };
        let keys = |a: &RArg| match a {
            RArg::Keys(v) => v.iter().map(|k| key(k)).collect::<Result<Vec<_>, _>>(),
            _ => Err(format!("`{param}` of `{}` must be annotation keys", s.verb)),
        };
        let set = |a: &RArg, ctx: &mut Ctx| match a {
            RArg::Set(v) => v
                .iter()
                .map(|(k, e)| Ok((key(k)?, ir(e, ctx)?)))
                .collect::<Result<Vec<_>, String>>(),
            _ => Err(format!("`{param}` of `{}` must be a map", s.verb)),
        };
        let one = |a: &RArg| {
            syms(a).and_then(|v| v.into_iter().next().ok_or_else(|| format!("`{param}` is empty")))
        };
        match param.as_str() {
            "target" => call.target = Some(expr(arg, ctx)?),
            "pool" => call.pool = Some(expr(arg, ctx)?),
            "name" => call.name = Some(expr(arg, ctx)?),
            "for" => call.for_ = Some(expr(arg, ctx)?),
            "from" => {
                call.from = syms(arg)?
                    .iter()
                    .map(|x| ClaimState::from_name(x).ok_or_else(|| format!("unknown state `{x}`")))
                    .collect::<Result<_, _>>()?
            }
            "absent" => call.absent = keys(arg)?.into_iter().next(),
            "match" => call.match_ = set(arg, ctx)?,
            "holds" => call.holds = Some(expr(arg, ctx)?),
            "set" => call.set = set(arg, ctx)?,
            "once" => call.once = set(arg, ctx)?,
            "incr" => call.incr = keys(arg)?,
            "clear" => call.clear = keys(arg)?,
            "unchanged" => call.unchanged = keys(arg)?,
            "reason" => {
                let r = one(arg)?;
                call.reason =
                    Some(Reason::from_name(&r).ok_or_else(|| format!("unknown reason `{r}`"))?);
            }
            "signal" => {
                let r = one(arg)?;
                call.signal =
                    Some(Signal::from_name(&r).ok_or_else(|| format!("unknown signal `{r}`"))?);
            }
            "verdict" => {
                let r = one(arg)?;
                call.verdict =
                    Some(Verdict::from_name(&r).ok_or_else(|| format!("unknown verdict `{r}`"))?);
            }
            other => return Err(format!("verb parameter `{other}` is not known to this binary")),
        }
    }
    Ok(call)
}
