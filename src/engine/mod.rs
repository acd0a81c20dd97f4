//! The interpreter that runs the rule tables of `rules/` (spec §5.2).
//!
//! [`Engine`] is the checked rulebook compiled onto the generated vocabulary enums. One pass
//! over a pool is [`Engine::run`]: it evaluates guards against a [`Facts`] snapshot and hands
//! each verb to a [`Host`], which performs it (against a real or an in-memory cluster) and
//! reports the outcome the following rows branch on. The engine itself does no I/O and reads
//! no clock.
mod compile;
mod eval;
pub(crate) mod value;
pub(crate) mod vocab;

use std::sync::LazyLock;

use chrono::Duration;
use include_dir::{Dir, include_dir};

pub(crate) use crate::rulebook::model::ReportTag;
pub use compile::{Action, Row, Then, VerbCall};
pub use eval::{equal as same_value, parse_annotation as value_of_annotation};
pub use value::{ObjRef, Value};
pub use vocab::*;

use crate::rulebook::{Rulebook, Source, check::FILES};

/// A claim's `state` annotation as every reader sees it (guards, conditional writes, candidate
/// selection, the start-up sweep): absent, empty, or a value this version does not know reads
/// as `none`, so the pending entry claims it instead of the pool wedging on it.
pub(crate) fn claim_state(raw: Option<&str>) -> ClaimState {
    raw.and_then(ClaimState::from_name).unwrap_or(ClaimState::None)
}

impl ClaimState {
    /// No rotation holds the claim: never touched, or the last one finished (`none`).
    pub(crate) fn is_idle(self) -> bool {
        self == ClaimState::None
    }

    /// The last attempt failed and waits out its backoff (`failed`).
    pub(crate) fn is_failed(self) -> bool {
        self == ClaimState::Failed
    }

    /// The forced expiry ended the rotation (`expired`, terminal).
    pub(crate) fn is_expired(self) -> bool {
        self == ClaimState::Expired
    }
}

/// The rules compiled into the binary (checked by build.rs when it was built).
static RULES_DIR: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/rules");

/// What a pass can read: the snapshot the reconcile builds before deciding.
pub trait Facts {
    /// A root name (`np`, `cand`, `pick`, `policy`, `now`); `Value::Nil` when absent.
    fn root(&self, root: Root) -> Value;
    /// A field of an object handed out by `root` or another field.
    fn field(&self, obj: &ObjRef, field: Field) -> Value;
    /// The raw annotation value on an object, if present.
    fn annotation(&self, obj: &ObjRef, key: Key) -> Option<String>;
    /// A predicate; never called with nil arguments unless `pred.accepts_nil()`.
    fn call(&self, pred: Pred, args: &[Value]) -> Value;
}

/// Performs verbs. Implementations hold the cluster side (real or in-memory).
pub trait Host: Facts {
    /// Performs one verb and reports what its write did.
    fn perform(&mut self, action: &Action<'_>) -> Result<Outcome, HostError>;
    /// Told about every row whose guard was evaluated (coverage).
    fn observe(&mut self, _row: &Row, _matched: bool) {}
    /// A row that raises `warn_once` found its guard false: the warning's condition cleared for
    /// this target, so its next entry fires again (§4.3). `action` is the `warn_once` with its
    /// target evaluated now (a pool, or the claim of this pass).
    fn rearm(&mut self, _action: &Action<'_>) {}
    /// Told when a handler is entered by `Goto` (a host may refresh its snapshot here).
    fn entered(&mut self, _handler: Handler) {}
}

/// A failure performing a verb: the pass stops and is retried.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{verb} failed: {message}")]
pub struct HostError {
    pub verb: Verb,
    pub message: String,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("row `{row}`: {message}")]
    Eval { row: String, message: String },
    #[error("handler `{handler}` entered while `{root}` is nil (its `assume` does not hold)")]
    Assumption { handler: Handler, root: Root },
    #[error("handler `{0}` ended without a decision")]
    FellThrough(Handler),
    #[error("more than {0} handler jumps in one pass")]
    TooManyJumps(usize),
    #[error(transparent)]
    Host(#[from] HostError),
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass {
    /// Ids of the rows that fired, in order.
    pub fired: Vec<String>,
    /// The report tags of the rows that fired, in order.
    pub reports: Vec<ReportTag>,
    /// When to come back (zero for handlers that end with `Done`).
    pub requeue: Duration,
}

/// A compiled handler.
#[derive(Debug, Clone)]
pub(crate) struct HandlerRows {
    pub assume: Vec<Root>,
    pub rows: Vec<Row>,
}

/// The compiled rule tables.
#[derive(Debug, Clone)]
pub struct Engine {
    handlers: Vec<HandlerRows>,
    entry: Handler,
    slots: usize,
}

const MAX_JUMPS: usize = 16;

impl Engine {
    /// The rules embedded in this binary.
    pub fn embedded() -> &'static Engine {
        static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
            let sources = embedded_sources();
            let book = Rulebook::from_sources(&sources).unwrap_or_else(|d| {
                // build.rs ran the same checker on the same files; this cannot happen.
                panic!("embedded rules fail their check: {d:?}")
            });
            Engine::compile(&book).unwrap_or_else(|e| panic!("embedded rules do not compile: {e}"))
        });
        &ENGINE
    }

    /// Compiles a checked rulebook (for tests and `--rules DIR`: mutants, planted bugs).
    pub(crate) fn compile(book: &Rulebook) -> Result<Engine, String> {
        compile::compile(book)
    }

    /// Loads, checks and compiles a rule directory.
    pub fn load_dir(dir: &std::path::Path) -> Result<Engine, String> {
        let book = Rulebook::load_dir(dir)
            .map_err(|d| d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("\n"))?;
        Engine::compile(&book)
    }

    /// Every row id, in table order.
    pub fn row_ids(&self) -> impl Iterator<Item = &str> {
        self.handlers.iter().flat_map(|h| h.rows.iter().map(|r| r.id.as_str()))
    }

    fn rows_of(&self, h: Handler) -> &HandlerRows {
        // Compile puts handlers in enum order.
        &self.handlers[h as usize]
    }

    /// One pass from the entry handler.
    pub fn run(&self, host: &mut dyn Host) -> Result<Pass, EngineError> {
        self.run_from(self.entry, host)
    }

    /// One pass from a given handler.
    pub(crate) fn run_from(
        &self,
        start: Handler,
        host: &mut dyn Host,
    ) -> Result<Pass, EngineError> {
        let mut fired = Vec::new();
        let mut reports = Vec::new();
        let mut handler = start;
        for _ in 0..MAX_JUMPS {
            let h = self.rows_of(handler);
            for root in &h.assume {
                if host.root(*root) == Value::Nil {
                    return Err(EngineError::Assumption { handler, root: *root });
                }
            }
            let mut outcomes: Vec<Option<Outcome>> = vec![None; self.slots];
            let mut next = None;
            for row in &h.rows {
                let matched = match &row.guard {
                    None => true,
                    Some(g) => eval::truth(g, &*host, &outcomes)
                        .map_err(|message| EngineError::Eval { row: row.id.clone(), message })?,
                };
                host.observe(row, matched);
                if !matched {
                    for call in row.verbs.iter().filter(|c| c.verb == Verb::WarnOnce) {
                        // A target that cannot be evaluated now (nil) has nothing to re-arm.
                        if let Ok(action) = eval::bind(call, row, &*host, &outcomes) {
                            host.rearm(&action);
                        }
                    }
                    continue;
                }
                for call in &row.verbs {
                    let action = eval::bind(call, row, &*host, &outcomes)
                        .map_err(|message| EngineError::Eval { row: row.id.clone(), message })?;
                    let outcome = host.perform(&action)?;
                    if let Some(slot) = call.bind {
                        outcomes[slot] = Some(outcome);
                    }
                }
                fired.push(row.id.clone());
                reports.extend(row.report);
                match row.then {
                    Then::Continue => continue,
                    Then::Requeue(d) => return Ok(Pass { fired, reports, requeue: d }),
                    Then::Done => {
                        return Ok(Pass { fired, reports, requeue: Duration::zero() });
                    }
                    Then::Goto(target) => {
                        next = Some(target);
                        break;
                    }
                }
            }
            match next {
                Some(target) => {
                    host.entered(target);
                    handler = target;
                }
                None => return Err(EngineError::FellThrough(handler)),
            }
        }
        Err(EngineError::TooManyJumps(MAX_JUMPS))
    }
}

/// The embedded rule files, in [`FILES`] order.
pub(crate) fn embedded_sources() -> Vec<Source> {
    FILES
        .iter()
        .map(|f| Source {
            path: format!("rules/{f}"),
            text: RULES_DIR.get_file(f).and_then(|x| x.contents_utf8()).unwrap_or("").to_string(),
        })
        .collect()
}

/// The embedded rules as a checked [`Rulebook`] (docs and diff of the built-in rules).
pub fn embedded_rulebook() -> Rulebook {
    Rulebook::from_sources(&embedded_sources()).unwrap_or_else(|d| panic!("embedded rules: {d:?}"))
}
