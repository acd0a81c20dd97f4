//! What the checker produces: guards and verb statements with every name resolved (each bare
//! word a root, outcome or literal; definitions inlined). The engine compiles these; docs and
//! `rules diff` print them.
use super::super::model::RowDecl;
use super::super::syntax::BinOp;

/// A literal value after resolution.
#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Nil,
    Bool(bool),
    Int(i64),
    DurationMs(i64),
    /// An enum value or an outcome.
    Sym(String),
}

/// A guard after name resolution: what the engine compiles.
#[derive(Debug, Clone, PartialEq)]
pub enum RExpr {
    Lit(Lit),
    Root(String),
    Outcome(String),
    Field { obj: Box<RExpr>, kind: String, field: String },
    Annotation { obj: Box<RExpr>, key: String },
    Present { obj: Box<RExpr>, key: String },
    Call { pred: String, args: Vec<RExpr> },
    Not(Box<RExpr>),
    Binary { op: BinOp, lhs: Box<RExpr>, rhs: Box<RExpr> },
    In { lhs: Box<RExpr>, values: Vec<Lit> },
}

/// A verb argument after resolution.
#[derive(Debug, Clone, PartialEq)]
pub enum RArg {
    Expr(RExpr),
    /// Enum values (`from=[...]`), or a single reason/signal/verdict.
    Syms(Vec<String>),
    /// Annotation keys (`clear=[...]`, `absent=`).
    Keys(Vec<String>),
    /// `{key: value}`.
    Set(Vec<(String, RExpr)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RStatement {
    pub verb: String,
    /// Arguments by parameter name, in declaration order of the verb.
    pub args: Vec<(String, RArg)>,
    pub bind: Option<String>,
    /// The statement as written, normalized (for docs and diff).
    pub text: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CheckedRow {
    pub decl: RowDecl,
    /// Normalized guard text; `None` = always.
    pub guard_text: Option<String>,
    pub guard: Option<RExpr>,
    pub statements: Vec<RStatement>,
    pub requeue_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CheckedHandler {
    pub name: String,
    pub entry: bool,
    pub handles: Vec<String>,
    pub context: String,
    pub doc: String,
    pub rows: Vec<CheckedRow>,
}
