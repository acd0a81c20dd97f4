//! Parsing guards and verb statements into an AST with spans, and printing them canonically
//! (the canonical text is what docs show and what `rules diff` compares).
use std::fmt;
use std::sync::OnceLock;

use pest::Parser;
use pest::iterators::{Pair, Pairs};
use pest::pratt_parser::{Assoc, Op, PrattParser};

#[derive(pest_derive::Parser)]
#[grammar = "rulebook/guard.pest"]
struct GuardParser;

/// Byte offsets into the source string of one guard or statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    fn of(pair: &Pair<'_, Rule>) -> Span {
        Span { start: pair.as_span().start(), end: pair.as_span().end() }
    }
    fn join(a: Span, b: Span) -> Span {
        Span { start: a.start.min(b.start), end: a.end.max(b.end) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
}

impl BinOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "or",
            BinOp::And => "and",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
        }
    }

    /// Binding strength, loosest = 1; used to print minimal parentheses.
    fn strength(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
            BinOp::Add | BinOp::Sub => 5,
        }
    }
}

const NOT_STRENGTH: u8 = 3;
const IN_STRENGTH: u8 = 4;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ExprKind {
    Nil,
    Bool(bool),
    Int(i64),
    /// A duration literal, in milliseconds.
    Duration(i64),
    /// A bare word: a root, a definition, an outcome variable, an enum value or an annotation key.
    Word(String),
    Field(Box<Expr>, String),
    Index(Box<Expr>, String),
    Call(String, Vec<Expr>),
    Not(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    In(Box<Expr>, Vec<Expr>),
    List(Vec<Expr>),
    Map(Vec<(String, Span, Expr)>),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// One argument of a verb call: positional or `name=value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Arg {
    pub name: Option<String>,
    pub value: Expr,
    pub span: Span,
}

/// `verb(args) -> bind`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Statement {
    pub verb: String,
    pub verb_span: Span,
    pub args: Vec<Arg>,
    pub bind: Option<(String, Span)>,
}

/// A syntax error at a byte offset of the parsed string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyntaxError {
    pub offset: usize,
    pub message: String,
}

fn pratt() -> &'static PrattParser<Rule> {
    static PRATT: OnceLock<PrattParser<Rule>> = OnceLock::new();
    PRATT.get_or_init(|| {
        PrattParser::new()
            .op(Op::infix(Rule::or_op, Assoc::Left))
            .op(Op::infix(Rule::and_op, Assoc::Left))
            .op(Op::prefix(Rule::not_op))
            .op(Op::infix(Rule::eq, Assoc::Left)
                | Op::infix(Rule::ne, Assoc::Left)
                | Op::infix(Rule::lt, Assoc::Left)
                | Op::infix(Rule::le, Assoc::Left)
                | Op::infix(Rule::gt, Assoc::Left)
                | Op::infix(Rule::ge, Assoc::Left)
                | Op::infix(Rule::in_op, Assoc::Left))
            .op(Op::infix(Rule::add, Assoc::Left) | Op::infix(Rule::sub, Assoc::Left))
            .op(Op::postfix(Rule::field) | Op::postfix(Rule::index))
    })
}

fn syntax_error(err: pest::error::Error<Rule>) -> SyntaxError {
    let offset = match err.location {
        pest::error::InputLocation::Pos(p) => p,
        pest::error::InputLocation::Span((s, _)) => s,
    };
    let message = match &err.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            let mut expected: Vec<&str> = positives.iter().filter_map(|r| describe(*r)).collect();
            expected.sort_unstable();
            expected.dedup();
            if expected.is_empty() {
                "syntax error".to_string()
            } else {
                format!("syntax error: expected {}", expected.join(", "))
            }
        }
        pest::error::ErrorVariant::CustomError { message } => message.clone(),
    };
    SyntaxError { offset, message }
}

fn describe(rule: Rule) -> Option<&'static str> {
    Some(match rule {
        Rule::EOI => "end of input",
        Rule::expr | Rule::item | Rule::arg => "an expression",
        Rule::ident | Rule::word => "a value or name",
        Rule::key => "an annotation key",
        Rule::call => "a verb call like `annotate(np, ...)`",
        Rule::bind => "`-> name`",
        Rule::or_op | Rule::and_op | Rule::in_op => "`and`, `or` or `in`",
        Rule::eq | Rule::ne | Rule::lt | Rule::le | Rule::gt | Rule::ge => "a comparison",
        Rule::add | Rule::sub => "`+` or `-`",
        Rule::field | Rule::index => "`.field` or `[key]`",
        Rule::map_entry => "`key: value`",
        _ => return None,
    })
}

/// Parses a guard expression.
pub(crate) fn parse_guard(src: &str) -> Result<Expr, SyntaxError> {
    let mut pairs = GuardParser::parse(Rule::guard, src).map_err(syntax_error)?;
    let guard = pairs.next().ok_or_else(|| SyntaxError { offset: 0, message: "empty".into() })?;
    let expr = guard
        .into_inner()
        .next()
        .ok_or_else(|| SyntaxError { offset: 0, message: "empty guard".into() })?;
    build_expr(expr.into_inner())
}

/// Parses a verb statement `verb(args) [-> name]`.
pub(crate) fn parse_statement(src: &str) -> Result<Statement, SyntaxError> {
    let mut pairs = GuardParser::parse(Rule::statement, src).map_err(syntax_error)?;
    let stmt = pairs.next().ok_or_else(|| SyntaxError { offset: 0, message: "empty".into() })?;
    let mut inner = stmt.into_inner();
    let call = inner.next().ok_or_else(|| SyntaxError { offset: 0, message: "empty".into() })?;
    let (verb, verb_span, args) = build_call(call)?;
    let mut bind = None;
    for pair in inner {
        if pair.as_rule() == Rule::bind
            && let Some(name) = pair.into_inner().next()
        {
            bind = Some((name.as_str().to_string(), Span::of(&name)));
        }
    }
    let args = args.into_iter().map(|(name, value, span)| Arg { name, value, span }).collect();
    Ok(Statement { verb, verb_span, args, bind })
}

type RawArg = (Option<String>, Expr, Span);

fn build_call(pair: Pair<'_, Rule>) -> Result<(String, Span, Vec<RawArg>), SyntaxError> {
    let mut inner = pair.into_inner();
    let name = inner.next().ok_or_else(|| SyntaxError { offset: 0, message: "call".into() })?;
    let mut args = Vec::new();
    for arg in inner {
        let span = Span::of(&arg);
        let Some(a) = arg.into_inner().next() else { continue };
        match a.as_rule() {
            Rule::named_arg => {
                let mut parts = a.into_inner();
                let (Some(n), Some(v)) = (parts.next(), parts.next()) else { continue };
                args.push((Some(n.as_str().to_string()), build_item(v)?, span));
            }
            _ => args.push((None, build_item(a)?, span)),
        }
    }
    Ok((name.as_str().to_string(), Span::of(&name), args))
}

fn build_item(pair: Pair<'_, Rule>) -> Result<Expr, SyntaxError> {
    let span = Span::of(&pair);
    let inner = pair
        .into_inner()
        .next()
        .ok_or(SyntaxError { offset: span.start, message: "item".into() })?;
    match inner.as_rule() {
        Rule::word_item => {
            let word =
                inner.into_inner().next().map(|w| w.as_str().to_string()).unwrap_or_default();
            Ok(Expr { kind: ExprKind::Word(word), span })
        }
        _ => build_expr(inner.into_inner()),
    }
}

fn build_expr(pairs: Pairs<'_, Rule>) -> Result<Expr, SyntaxError> {
    pratt()
        .map_primary(build_primary)
        .map_prefix(|op, rhs| {
            let rhs = rhs?;
            let span = Span::join(Span::of(&op), rhs.span);
            Ok(Expr { kind: ExprKind::Not(Box::new(rhs)), span })
        })
        .map_postfix(|lhs, op| {
            let lhs = lhs?;
            let span = Span::join(lhs.span, Span::of(&op));
            let is_index = op.as_rule() == Rule::index;
            let name = op.into_inner().next().map(|p| p.as_str().to_string()).unwrap_or_default();
            let kind = if is_index {
                ExprKind::Index(Box::new(lhs), name)
            } else {
                ExprKind::Field(Box::new(lhs), name)
            };
            Ok(Expr { kind, span })
        })
        .map_infix(|lhs, op, rhs| {
            let (lhs, rhs) = (lhs?, rhs?);
            let span = Span::join(lhs.span, rhs.span);
            let bin = match op.as_rule() {
                Rule::or_op => BinOp::Or,
                Rule::and_op => BinOp::And,
                Rule::eq => BinOp::Eq,
                Rule::ne => BinOp::Ne,
                Rule::lt => BinOp::Lt,
                Rule::le => BinOp::Le,
                Rule::gt => BinOp::Gt,
                Rule::ge => BinOp::Ge,
                Rule::add => BinOp::Add,
                Rule::sub => BinOp::Sub,
                Rule::in_op => {
                    return match rhs.kind {
                        ExprKind::List(items) => {
                            Ok(Expr { kind: ExprKind::In(Box::new(lhs), items), span })
                        }
                        _ => Err(SyntaxError {
                            offset: rhs.span.start,
                            message: "`in` takes a list: `x in [a, b]`".into(),
                        }),
                    };
                }
                _ => {
                    return Err(SyntaxError {
                        offset: span.start,
                        message: format!("unexpected operator `{}`", op.as_str()),
                    });
                }
            };
            Ok(Expr { kind: ExprKind::Binary(bin, Box::new(lhs), Box::new(rhs)), span })
        })
        .parse(pairs)
}

fn build_primary(pair: Pair<'_, Rule>) -> Result<Expr, SyntaxError> {
    let span = Span::of(&pair);
    let kind = match pair.as_rule() {
        Rule::nil => ExprKind::Nil,
        Rule::boolean => ExprKind::Bool(pair.as_str() == "true"),
        Rule::int => ExprKind::Int(pair.as_str().parse().map_err(|_| SyntaxError {
            offset: span.start,
            message: "integer out of range".into(),
        })?),
        Rule::duration => {
            ExprKind::Duration(parse_duration_ms(pair.as_str()).ok_or(SyntaxError {
                offset: span.start,
                message: "duration out of range".into(),
            })?)
        }
        Rule::ident => ExprKind::Word(pair.as_str().to_string()),
        Rule::expr => return build_expr(pair.into_inner()),
        Rule::call => {
            let (name, _, args) = build_call(pair)?;
            if let Some((Some(n), _, s)) = args.iter().find(|(n, _, _)| n.is_some()) {
                return Err(SyntaxError {
                    offset: s.start,
                    message: format!("predicates take positional arguments only, not `{n}=`"),
                });
            }
            ExprKind::Call(name, args.into_iter().map(|(_, e, _)| e).collect())
        }
        Rule::list => {
            ExprKind::List(pair.into_inner().map(build_item).collect::<Result<Vec<_>, _>>()?)
        }
        Rule::map => {
            let mut entries = Vec::new();
            for entry in pair.into_inner() {
                let mut parts = entry.into_inner();
                let (Some(k), Some(v)) = (parts.next(), parts.next()) else { continue };
                entries.push((k.as_str().to_string(), Span::of(&k), build_item(v)?));
            }
            ExprKind::Map(entries)
        }
        other => {
            return Err(SyntaxError {
                offset: span.start,
                message: format!("unexpected {other:?}"),
            });
        }
    };
    Ok(Expr { kind, span })
}

/// `30s`, `1m`, `1h30m`, `2d`, `500ms` to milliseconds.
pub(crate) fn parse_duration_ms(s: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: i64 = num.parse().ok()?;
        num.clear();
        let unit: i64 = match c {
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                1
            }
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    if num.is_empty() { Some(total) } else { None }
}

/// Prints milliseconds the way rules write them (`1h30m`, `30s`).
pub(crate) fn format_duration_ms(ms: i64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, name) in
        [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s"), (1, "ms")]
    {
        if rest >= unit {
            out.push_str(&format!("{}{}", rest / unit, name));
            rest %= unit;
        }
    }
    out
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(f, self, 0)
    }
}

fn strength(e: &Expr) -> u8 {
    match &e.kind {
        ExprKind::Binary(op, _, _) => op.strength(),
        ExprKind::Not(_) => NOT_STRENGTH,
        ExprKind::In(_, _) => IN_STRENGTH,
        _ => u8::MAX,
    }
}

fn write_expr(f: &mut fmt::Formatter<'_>, e: &Expr, min: u8) -> fmt::Result {
    let s = strength(e);
    let paren = s < min;
    if paren {
        f.write_str("(")?;
    }
    match &e.kind {
        ExprKind::Nil => f.write_str("nil")?,
        ExprKind::Bool(b) => write!(f, "{b}")?,
        ExprKind::Int(i) => write!(f, "{i}")?,
        ExprKind::Duration(ms) => f.write_str(&format_duration_ms(*ms))?,
        ExprKind::Word(w) => f.write_str(w)?,
        ExprKind::Field(obj, name) => {
            write_expr(f, obj, u8::MAX)?;
            write!(f, ".{name}")?;
        }
        ExprKind::Index(obj, key) => {
            write_expr(f, obj, u8::MAX)?;
            write!(f, "[{key}]")?;
        }
        ExprKind::Call(name, args) => {
            f.write_str(name)?;
            write_list(f, "(", args, ")")?;
        }
        ExprKind::Not(inner) => {
            f.write_str("not ")?;
            write_expr(f, inner, NOT_STRENGTH)?;
        }
        ExprKind::Binary(op, l, r) => {
            let st = op.strength();
            // Left-associative: the right side needs parentheses at equal strength.
            write_expr(f, l, st)?;
            write!(f, " {} ", op.symbol())?;
            write_expr(f, r, st + 1)?;
        }
        ExprKind::In(l, items) => {
            write_expr(f, l, IN_STRENGTH + 1)?;
            write_list(f, " in [", items, "]")?;
        }
        ExprKind::List(items) => {
            write_list(f, "[", items, "]")?;
        }
        ExprKind::Map(entries) => {
            f.write_str("{")?;
            for (i, (k, _, v)) in entries.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{k}: ")?;
                write_expr(f, v, 0)?;
            }
            f.write_str("}")?;
        }
    }
    if paren {
        f.write_str(")")?;
    }
    Ok(())
}

/// `open`, the expressions separated by `, `, then `close` (call arguments and lists).
fn write_list(f: &mut fmt::Formatter<'_>, open: &str, items: &[Expr], close: &str) -> fmt::Result {
    f.write_str(open)?;
    for (i, a) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write_expr(f, a, 0)?;
    }
    f.write_str(close)
}

impl fmt::Display for Statement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.verb)?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if let Some(n) = &a.name {
                write!(f, "{n}=")?;
            }
            write_expr(f, &a.value, 0)?;
        }
        f.write_str(")")?;
        if let Some((b, _)) = &self.bind {
            write!(f, " -> {b}")?;
        }
        Ok(())
    }
}
