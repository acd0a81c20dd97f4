//! Evaluating compiled guards and verb arguments against a snapshot.
use std::cmp::Ordering;

use chrono::DateTime;

use super::compile::{Action, Ir, Row, VerbCall};
use super::value::Value;
use super::vocab::*;
use super::{Facts, ObjRef};
use crate::rulebook::syntax::BinOp;

type Outcomes = [Option<Outcome>];

/// A guard's truth. A nil where a bool is needed is an error: the checker typed it as bool.
pub(super) fn truth(g: &Ir, facts: &dyn Facts, outcomes: &Outcomes) -> Result<bool, String> {
    match value(g, facts, outcomes)? {
        Value::Bool(b) => Ok(b),
        other => Err(format!("guard evaluated to {other:?}, not a bool")),
    }
}

fn value(e: &Ir, facts: &dyn Facts, outcomes: &Outcomes) -> Result<Value, String> {
    Ok(match e {
        Ir::Lit(v) => v.clone(),
        Ir::Root(r) => facts.root(*r),
        Ir::Outcome(slot) => match outcomes.get(*slot).copied().flatten() {
            Some(o) => Value::Sym(o.name().to_string()),
            None => Value::Nil,
        },
        Ir::Field(obj, f) => match value(obj, facts, outcomes)? {
            Value::Object(o) => facts.field(&o, *f),
            _ => Value::Nil,
        },
        Ir::Annotation(obj, k) => match value(obj, facts, outcomes)? {
            Value::Object(o) => {
                let now = facts.root(Root::Now).as_time();
                facts
                    .annotation(&o, *k)
                    .map(|raw| parse_annotation(*k, &raw, now))
                    .unwrap_or(Value::Nil)
            }
            _ => Value::Nil,
        },
        Ir::Present(obj, k) => match value(obj, facts, outcomes)? {
            Value::Object(o) => Value::Bool(facts.annotation(&o, *k).is_some()),
            _ => Value::Bool(false),
        },
        Ir::Call(p, args) => {
            let vals =
                args.iter().map(|a| value(a, facts, outcomes)).collect::<Result<Vec<_>, _>>()?;
            if !p.accepts_nil() && vals.iter().any(Value::is_nil) {
                Value::Nil
            } else {
                facts.call(*p, &vals)
            }
        }
        Ir::Not(x) => Value::Bool(!truth(x, facts, outcomes)?),
        Ir::And(a, b) => Value::Bool(truth(a, facts, outcomes)? && truth(b, facts, outcomes)?),
        Ir::Or(a, b) => Value::Bool(truth(a, facts, outcomes)? || truth(b, facts, outcomes)?),
        Ir::In(x, values) => {
            let v = value(x, facts, outcomes)?;
            Value::Bool(!v.is_nil() && values.iter().any(|c| equal(&v, c)))
        }
        Ir::Binary(op, a, b) => {
            let (l, r) = (value(a, facts, outcomes)?, value(b, facts, outcomes)?);
            match op {
                BinOp::Eq => Value::Bool(equal(&l, &r)),
                BinOp::Ne => Value::Bool(!equal(&l, &r)),
                BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                    // A comparison with nil is false (docs/decision-flow.md).
                    let Some(ord) = order(&l, &r) else { return Ok(Value::Bool(false)) };
                    Value::Bool(match op {
                        BinOp::Lt => ord == Ordering::Less,
                        BinOp::Le => ord != Ordering::Greater,
                        BinOp::Gt => ord == Ordering::Greater,
                        _ => ord != Ordering::Less,
                    })
                }
                BinOp::Add | BinOp::Sub => arith(*op, &l, &r)?,
                BinOp::And | BinOp::Or => unreachable_op(*op)?,
            }
        }
    })
}

fn unreachable_op(op: BinOp) -> Result<Value, String> {
    Err(format!("`{}` compiled as a plain binary operator", op.symbol()))
}

/// Equality as guards compare (a name equals the same symbol).
pub fn equal(l: &Value, r: &Value) -> bool {
    match (l, r) {
        (Value::Name(a) | Value::Sym(a), Value::Name(b) | Value::Sym(b)) => a == b,
        _ => l == r,
    }
}

fn order(l: &Value, r: &Value) -> Option<Ordering> {
    match (l, r) {
        (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
        (Value::Duration(a), Value::Duration(b)) => Some(a.cmp(b)),
        (Value::Time(a), Value::Time(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

fn arith(op: BinOp, l: &Value, r: &Value) -> Result<Value, String> {
    let neg = op == BinOp::Sub;
    Ok(match (l, r) {
        (Value::Nil, _) | (_, Value::Nil) => Value::Nil,
        (Value::Time(a), Value::Time(b)) if neg => Value::Duration(*a - *b),
        (Value::Time(a), Value::Duration(d)) => Value::Time(if neg { *a - *d } else { *a + *d }),
        (Value::Duration(a), Value::Duration(b)) => {
            Value::Duration(if neg { *a - *b } else { *a + *b })
        }
        (Value::Int(a), Value::Int(b)) => Value::Int(if neg { a - b } else { a + b }),
        _ => return Err(format!("cannot compute {l:?} {} {r:?}", op.symbol())),
    })
}

/// Reads an annotation by the type the reference declares; unreadable values are nil, and so is
/// a stamp later than `now` beyond the clock-skew tolerance (`None`: no check).
pub fn parse_annotation(key: Key, raw: &str, now: Option<DateTime<chrono::Utc>>) -> Value {
    let time = || DateTime::parse_from_rfc3339(raw).map(|t| t.with_timezone(&chrono::Utc)).ok();
    match key.value_type() {
        KeyType::Time => time().map(Value::Time).unwrap_or(Value::Nil),
        KeyType::Stamp => time()
            .filter(|t| now.is_none_or(|now| !crate::policy::derive::in_the_future(*t, now)))
            .map(Value::Time)
            .unwrap_or(Value::Nil),
        KeyType::Duration => {
            crate::policy::duration::parse(raw).map(Value::Duration).unwrap_or(Value::Nil)
        }
        KeyType::Int => raw.trim().parse().map(Value::Int).unwrap_or(Value::Nil),
        KeyType::ClaimName | KeyType::NodeName | KeyType::Uid => {
            if raw.is_empty() {
                Value::Nil
            } else {
                Value::Name(raw.to_string())
            }
        }
        KeyType::Enum(values) => {
            if values.contains(&raw) {
                Value::Sym(raw.to_string())
            } else {
                Value::Nil
            }
        }
        KeyType::True => Value::Bool(raw == "true"),
    }
}

/// Evaluates a verb's arguments.
pub(super) fn bind<'r>(
    call: &'r VerbCall,
    row: &'r Row,
    facts: &dyn Facts,
    outcomes: &Outcomes,
) -> Result<Action<'r>, String> {
    let eval = |e: &Option<Ir>| -> Result<Value, String> {
        match e {
            Some(x) => value(x, facts, outcomes),
            None => Ok(Value::Nil),
        }
    };
    let name_of = |v: Value| -> Option<String> {
        match v {
            Value::Name(n) | Value::Sym(n) => Some(n),
            Value::Object(ObjRef::Claim(n) | ObjRef::Node(n)) => Some(n),
            _ => None,
        }
    };
    let set = |pairs: &[(Key, Ir)]| -> Result<Vec<(Key, Value)>, String> {
        let mut out = Vec::new();
        for (k, e) in pairs {
            let v = value(e, facts, outcomes)?;
            if !v.is_nil() {
                out.push((*k, v));
            }
        }
        Ok(out)
    };
    Ok(Action {
        verb: call.verb,
        row: &row.id,
        text: &call.text,
        target: eval(&call.target)?,
        pool: eval(&call.pool)?,
        name: name_of(eval(&call.name)?),
        for_: name_of(eval(&call.for_)?),
        from: &call.from,
        absent: call.absent,
        match_: call
            .match_
            .iter()
            .map(|(k, e)| Ok((*k, value(e, facts, outcomes)?)))
            .collect::<Result<_, String>>()?,
        holds: call.holds.as_ref(),
        set: set(&call.set)?,
        once: set(&call.once)?,
        incr: &call.incr,
        clear: &call.clear,
        unchanged: &call.unchanged,
        reason: call.reason,
        signal: call.signal,
        verdict: call.verdict,
    })
}
