//! Loading and checking `rules/`: every error carries `file:line:col` and says what to fix.
//!
//! The result, [`Rulebook`], holds the files as written plus every guard and verb statement
//! parsed, type-checked and resolved (each bare word classified as root, outcome or literal;
//! definitions inlined), which is what the engine compiles and what docs and diff print.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::Path;

use super::model::*;
use super::syntax::{self, BinOp, Expr, ExprKind, Statement};

/// The files of a rule directory, in load order.
pub const FILES: [&str; 5] =
    ["annotations.ron", "vocabulary.ron", "transitions.ron", "spec-table.ron", "obligations.ron"];

/// One problem in the rules, pointing at the exact place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.message)
    }
}

/// A file's name as shown in diagnostics and its text.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: String,
    pub text: String,
}

impl Source {
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
        (line, col)
    }

    fn diag(&self, offset: usize, message: impl Into<String>) -> Diagnostic {
        let (line, col) = self.line_col(offset);
        Diagnostic { file: self.path.clone(), line, col, message: message.into() }
    }

    /// Offset of `needle` at or after `from`.
    fn find(&self, from: usize, needle: &str) -> Option<usize> {
        self.text.get(from..)?.find(needle).map(|i| i + from)
    }

    /// Offset of the first character inside the string literal `"value"` found after `from`.
    fn string_after(&self, from: usize, value: &str) -> Option<usize> {
        self.find(from, &format!("\"{value}\"")).map(|i| i + 1)
    }

    /// Offset of a declaration `field: "name"` (e.g. `id: "x"`), or 0.
    fn decl(&self, field: &str, name: &str) -> usize {
        self.find(0, &format!("{field}: \"{name}\"")).unwrap_or(0)
    }
}

/// A type in the guard language.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Bool,
    Int,
    Duration,
    Time,
    Name,
    /// Enumerated values (`label` names the enum for messages).
    Enum {
        label: String,
        values: Vec<String>,
    },
    Object(String),
    /// The outcome of a verb.
    Outcome {
        verb: String,
        values: Vec<String>,
    },
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Bool => f.write_str("bool"),
            Ty::Int => f.write_str("int"),
            Ty::Duration => f.write_str("duration"),
            Ty::Time => f.write_str("time"),
            Ty::Name => f.write_str("name"),
            Ty::Enum { label, .. } => write!(f, "{label}"),
            Ty::Object(k) => write!(f, "{k}"),
            Ty::Outcome { verb, .. } => write!(f, "outcome of {verb}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Typed {
    ty: Option<Ty>, // None = the literal nil
    nullable: bool,
}

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

/// The first root or outcome in `e` that a fresh read does not rebind (anything but `np`,
/// `policy` and `now`), for `holds=` guards.
fn fresh_unsafe(e: &RExpr) -> Option<String> {
    match e {
        RExpr::Lit(_) => None,
        RExpr::Root(r) => (!matches!(r.as_str(), "np" | "policy" | "now")).then(|| r.clone()),
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

/// A checked rule directory.
#[derive(Debug, Clone)]
pub struct Rulebook {
    pub annotations: Annotations,
    pub vocabulary: Vocabulary,
    pub transitions: Transitions,
    pub spec_table: Vec<SpecRow>,
    pub obligations: Vec<Obligation>,
    pub handlers: Vec<CheckedHandler>,
}

impl Rulebook {
    /// Loads and checks `dir/*.ron`; diagnostics name files as `dir/<file>`.
    pub fn load_dir(dir: &Path) -> Result<Rulebook, Vec<Diagnostic>> {
        let mut sources = Vec::new();
        for file in FILES {
            let path = dir.join(file);
            let shown = path.display().to_string();
            match std::fs::read_to_string(&path) {
                Ok(text) => sources.push(Source { path: shown, text }),
                Err(e) => {
                    return Err(vec![Diagnostic {
                        file: shown,
                        line: 1,
                        col: 1,
                        message: format!("cannot read: {e}"),
                    }]);
                }
            }
        }
        Self::from_sources(&sources)
    }

    /// Checks the files given in [`FILES`] order.
    pub fn from_sources(sources: &[Source]) -> Result<Rulebook, Vec<Diagnostic>> {
        let [ann_src, voc_src, tr_src, spec_src, obl_src] = sources else {
            return Err(vec![Diagnostic {
                file: "rules".into(),
                line: 1,
                col: 1,
                message: format!("expected the files {}", FILES.join(", ")),
            }]);
        };
        let mut diags = Vec::new();
        let annotations: Option<Annotations> = parse_ron(ann_src, &mut diags);
        let vocabulary: Option<Vocabulary> = parse_ron(voc_src, &mut diags);
        let transitions: Option<Transitions> = parse_ron(tr_src, &mut diags);
        let spec_table: Option<Vec<SpecRow>> = parse_ron(spec_src, &mut diags);
        let obligations: Option<Vec<Obligation>> = parse_ron(obl_src, &mut diags);
        let (
            Some(annotations),
            Some(vocabulary),
            Some(transitions),
            Some(spec_table),
            Some(obligations),
        ) = (annotations, vocabulary, transitions, spec_table, obligations)
        else {
            return Err(diags);
        };
        let mut checker = Checker {
            ann: &annotations,
            voc: &vocabulary,
            ann_src,
            voc_src,
            tr_src,
            diags: Vec::new(),
            definitions: HashMap::new(),
        };
        checker.check_annotations();
        checker.check_vocabulary();
        let handlers = checker.check_transitions(&transitions);
        checker.check_spec_table(spec_src, &spec_table, &handlers);
        if checker.diags.is_empty() {
            // Obligations speak of a rulebook that is otherwise well formed.
            checker.check_obligations(obl_src, &obligations, &transitions, &spec_table, &handlers);
        }
        diags.extend(checker.diags);
        if diags.is_empty() {
            Ok(Rulebook { annotations, vocabulary, transitions, spec_table, obligations, handlers })
        } else {
            Err(diags)
        }
    }

    pub fn handler(&self, name: &str) -> Option<&CheckedHandler> {
        self.handlers.iter().find(|h| h.name == name)
    }

    pub fn rows(&self) -> impl Iterator<Item = (&CheckedHandler, &CheckedRow)> {
        self.handlers.iter().flat_map(|h| h.rows.iter().map(move |r| (h, r)))
    }

    pub fn verb(&self, name: &str) -> Option<&VerbDecl> {
        self.vocabulary.verbs.iter().find(|v| v.name == name)
    }

    pub fn annotation(&self, key: &str) -> Option<&AnnotationKey> {
        self.annotations.keys.iter().find(|k| k.key == key)
    }
}

fn parse_ron<T: serde::de::DeserializeOwned>(
    src: &Source,
    diags: &mut Vec<Diagnostic>,
) -> Option<T> {
    // `implicit_some` lets optional fields be written plainly (`when: "..."`, not `Some("...")`).
    let options =
        ron::Options::default().with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME);
    match options.from_str::<T>(&src.text) {
        Ok(v) => Some(v),
        Err(e) => {
            let (line, col) = (e.span.start.line, e.span.start.col);
            diags.push(match token_before(&src.text, line, col) {
                // RON notices a missing `)`, `]` or `,` only at the next token, often a line
                // later: point at the end of the last token before it, where the fix goes.
                Some(offset) => {
                    let (l, c) = src.line_col(offset);
                    Diagnostic {
                        file: src.path.clone(),
                        line: l,
                        col: c,
                        message: format!(
                            "{} at line {line}:{col}: is a `,` or a closing `)` or `]` missing here?",
                            e.code
                        ),
                    }
                }
                None => Diagnostic {
                    file: src.path.clone(),
                    line,
                    col,
                    message: e.code.to_string(),
                },
            });
            None
        }
    }
}

/// The offset just after the last token before (`line`, `col`), if only whitespace and comments
/// that span a line break lie between them; `None` when the error is on that token's line.
fn token_before(text: &str, line: usize, col: usize) -> Option<usize> {
    let line_start: usize =
        text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    let offset = line_start
        + text
            .get(line_start..)?
            .chars()
            .take(col.saturating_sub(1))
            .map(char::len_utf8)
            .sum::<usize>();
    let mut before = text.get(..offset)?;
    let mut crossed = false;
    loop {
        let trimmed = before.trim_end();
        crossed |= before[trimmed.len()..].contains('\n');
        before = trimmed;
        // A comment at the end of `before` (outside any string) is skipped too.
        let last_line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let last_line = &before[last_line_start..];
        match comment_start(last_line) {
            Some(i) => before = &before[..last_line_start + i],
            None => break,
        }
    }
    (crossed && !before.is_empty()).then_some(before.len())
}

/// Where a `//` comment starts in `line`, outside string literals.
fn comment_start(line: &str) -> Option<usize> {
    let mut in_string = false;
    let mut escaped = false;
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return Some(i),
            _ => {}
        }
    }
    None
}

/// An error inside one guard or statement string: offset within that string.
struct LocalError {
    offset: usize,
    message: String,
}

fn local(offset: usize, message: impl Into<String>) -> LocalError {
    LocalError { offset, message: message.into() }
}

/// Names in scope while checking one expression.
struct Scope<'s> {
    roots: &'s [FieldDecl],
    outcomes: &'s BTreeMap<String, String>, // variable -> verb
    /// Roots known non-nil here (`assume`, or a terminal `x == nil` row above).
    nonnull: &'s BTreeSet<String>,
}

struct Checker<'a> {
    ann: &'a Annotations,
    voc: &'a Vocabulary,
    ann_src: &'a Source,
    voc_src: &'a Source,
    tr_src: &'a Source,
    diags: Vec<Diagnostic>,
    definitions: HashMap<String, Definition1>,
}

/// A checked definition: its type, resolved expression and the roots it assumes non-nil.
struct Definition1 {
    typed: Typed,
    expr: RExpr,
    assume: Vec<String>,
}

fn dup_names<'x>(names: impl Iterator<Item = &'x str>) -> Vec<&'x str> {
    let mut seen = BTreeSet::new();
    names.filter(|n| !seen.insert(*n)).collect()
}

fn is_snake(id: &str) -> bool {
    !id.is_empty()
        && id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && id.starts_with(|c: char| c.is_ascii_lowercase())
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

impl<'a> Checker<'a> {
    fn err_ann(&mut self, offset: usize, msg: String) {
        self.diags.push(self.ann_src.diag(offset, msg));
    }
    fn err_voc(&mut self, offset: usize, msg: String) {
        self.diags.push(self.voc_src.diag(offset, msg));
    }
    fn err_tr(&mut self, offset: usize, msg: String) {
        self.diags.push(self.tr_src.diag(offset, msg));
    }

    fn check_annotations(&mut self) {
        let ann = self.ann;
        for dup in dup_names(ann.keys.iter().map(|k| k.key.as_str())) {
            let at = self.ann_src.decl("key", dup);
            self.err_ann(at, format!("annotation key `{dup}` is declared twice"));
        }
        for k in &ann.keys {
            let at = self.ann_src.decl("key", &k.key);
            if k.targets.is_empty() {
                self.err_ann(at, format!("annotation `{}` has no targets", k.key));
            }
            if let ValueType::Enum(v) = &k.value
                && v.is_empty()
            {
                self.err_ann(at, format!("annotation `{}`: an Enum needs values", k.key));
            }
        }
        for key in &ann.anchor_clear_set {
            let at = self.ann_src.string_after(0, key).unwrap_or(0);
            match ann.keys.iter().find(|k| &k.key == key) {
                None => self.err_ann(at, format!("anchor_clear_set names unknown key `{key}`")),
                Some(k) if !k.targets.contains(&ObjectKind::NodePool) => self
                    .err_ann(at, format!("anchor_clear_set key `{key}` does not target NodePool")),
                Some(_) => {}
            }
        }
    }

    fn check_vocabulary(&mut self) {
        let voc = self.voc;
        let lists: [(&str, Vec<&str>); 6] = [
            ("enum", voc.enums.iter().map(|e| e.name.as_str()).collect()),
            ("kind", voc.kinds.iter().map(|e| e.name.as_str()).collect()),
            ("predicate", voc.predicates.iter().map(|e| e.name.as_str()).collect()),
            ("reason", voc.reasons.iter().map(|e| e.name.as_str()).collect()),
            ("signal", voc.signals.iter().map(|e| e.name.as_str()).collect()),
            ("verb", voc.verbs.iter().map(|e| e.name.as_str()).collect()),
        ];
        for (what, names) in lists {
            for dup in dup_names(names.into_iter()) {
                let at = self.voc_src.decl("name", dup);
                self.err_voc(at, format!("{what} `{dup}` is declared twice"));
            }
        }
        if !voc.enums.iter().any(|e| e.name == "ClaimState") {
            self.err_voc(0, "the enum `ClaimState` must be declared".into());
        }
        let mut types: Vec<(String, TypeDecl)> = Vec::new();
        for k in &voc.kinds {
            for f in &k.fields {
                types.push((k.name.clone(), f.ty.clone()));
            }
        }
        for c in &voc.contexts {
            for r in &c.roots {
                types.push((r.name.clone(), r.ty.clone()));
            }
        }
        for p in &voc.predicates {
            for a in p.args.iter().chain(std::iter::once(&p.ret)) {
                types.push((p.name.clone(), a.clone()));
            }
        }
        for (owner, t) in types {
            if let Err(msg) = self.type_decl(&t) {
                let at = self.voc_src.decl("name", &owner);
                self.err_voc(at, msg);
            }
        }
        for v in &voc.verbs {
            let at = self.voc_src.decl("name", &v.name);
            if v.outcomes.is_empty() {
                self.err_voc(at, format!("verb `{}` declares no outcomes", v.name));
            }
            for w in v.winning_outcomes() {
                if !v.outcomes.contains(&w) {
                    self.err_voc(
                        at,
                        format!(
                            "verb `{}`: winning outcome `{w}` is not one of its outcomes",
                            v.name
                        ),
                    );
                }
            }
            for p in &v.params {
                if let ParamType::Target(kinds) = &p.ty {
                    for k in kinds {
                        if !voc.kinds.iter().any(|d| &d.name == k) {
                            self.err_voc(at, format!("verb `{}`: unknown kind `{k}`", v.name));
                        }
                    }
                }
            }
        }
    }

    fn type_decl(&self, t: &TypeDecl) -> Result<Ty, String> {
        Ok(match t {
            TypeDecl::Bool => Ty::Bool,
            TypeDecl::Int => Ty::Int,
            TypeDecl::Duration => Ty::Duration,
            TypeDecl::Time => Ty::Time,
            TypeDecl::Name => Ty::Name,
            TypeDecl::Enum(name) => {
                let e = self
                    .voc
                    .enums
                    .iter()
                    .find(|e| &e.name == name)
                    .ok_or_else(|| format!("unknown enum `{name}`"))?;
                Ty::Enum { label: e.name.clone(), values: e.values.clone() }
            }
            TypeDecl::Object(k) => {
                if !self.voc.kinds.iter().any(|d| &d.name == k) {
                    return Err(format!("unknown kind `{k}`"));
                }
                Ty::Object(k.clone())
            }
        })
    }

    fn annotation_ty(k: &AnnotationKey) -> Ty {
        match &k.value {
            ValueType::Time => Ty::Time,
            ValueType::Duration => Ty::Duration,
            ValueType::Int => Ty::Int,
            ValueType::ClaimName => Ty::Name,
            ValueType::Enum(values) => {
                Ty::Enum { label: format!("annotation `{}`", k.key), values: values.clone() }
            }
            ValueType::True => Ty::Bool,
        }
    }

    fn claim_states(&self) -> Vec<String> {
        self.voc
            .enums
            .iter()
            .find(|e| e.name == "ClaimState")
            .map(|e| e.values.clone())
            .unwrap_or_default()
    }

    fn context(&self, name: &str) -> Option<&'a ContextDecl> {
        self.voc.contexts.iter().find(|c| c.name == name)
    }

    // ---- transitions ------------------------------------------------------------------------

    fn check_transitions(&mut self, tr: &Transitions) -> Vec<CheckedHandler> {
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

    /// True when the trailing terminal rows test one enum-typed path and together cover every
    /// value (the claim-state dispatch of `advance`).
    fn exhaustive_tail(&self, h: &HandlerDecl, rows: &[CheckedRow]) -> bool {
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

    fn check_structure(&mut self, tr: &Transitions) {
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

    fn announces(&self, stmt_src: &str) -> bool {
        let name = stmt_src.split('(').next().unwrap_or("").trim();
        self.voc.verbs.iter().any(|v| v.name == name && v.announces)
    }

    /// Claim-then-announce: a row that emits must require, in a top-level conjunct of its
    /// guard, that an outcome bound earlier in the handler is one of its verb's winning ones.
    fn check_announce(&mut self, guard: &Expr, scope: &Scope<'_>, row: &str, at: usize) {
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

    // ---- expressions ------------------------------------------------------------------------

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

    fn expr(
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
                } else {
                    match expected {
                        Some(Ty::Enum { label, values }) => {
                            if !values.contains(w) {
                                return Err(local(
                                    at,
                                    format!(
                                        "`{w}` is not a value of {label} ({})",
                                        values.join(", ")
                                    ),
                                ));
                            }
                            (
                                t(expected.cloned().unwrap_or(Ty::Bool), false),
                                RExpr::Lit(Lit::Sym(w.clone())),
                            )
                        }
                        Some(Ty::Outcome { verb, values }) => {
                            if !values.contains(w) {
                                return Err(local(
                                    at,
                                    format!(
                                        "`{w}` is not an outcome of `{verb}` ({})",
                                        values.join(", ")
                                    ),
                                ));
                            }
                            (
                                t(expected.cloned().unwrap_or(Ty::Bool), false),
                                RExpr::Lit(Lit::Sym(w.clone())),
                            )
                        }
                        _ => {
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

    fn annotation_for(&self, key: &str, kind: &str) -> Result<&'a AnnotationKey, String> {
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

    // ---- verb statements ----------------------------------------------------------------------

    fn statement(&self, s: &Statement, scope: &Scope<'_>) -> Result<RStatement, LocalError> {
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

    // ---- spec table ---------------------------------------------------------------------------

    fn check_spec_table(&mut self, src: &Source, table: &[SpecRow], handlers: &[CheckedHandler]) {
        let ids: BTreeSet<&str> =
            handlers.iter().flat_map(|h| h.rows.iter().map(|r| r.decl.id.as_str())).collect();
        let mut seen = BTreeSet::new();
        let mut states = self.claim_states();
        states.push("success".into());
        for row in table {
            let at = src.find(0, &format!("n: {},", row.n)).unwrap_or(0);
            if !seen.insert(row.n) {
                self.diags.push(src.diag(at, format!("spec row {} appears twice", row.n)));
            }
            for s in [&row.from, &row.to] {
                if !states.contains(s) {
                    self.diags.push(src.diag(
                        at,
                        format!(
                            "spec row {}: `{s}` is not a claim state ({})",
                            row.n,
                            states.join(", ")
                        ),
                    ));
                }
            }
            if row.rules.is_empty() {
                self.diags.push(src.diag(at, format!("spec row {} maps to no rule", row.n)));
            }
            for r in &row.rules {
                if !ids.contains(r.as_str()) {
                    let off = src.string_after(at, r).unwrap_or(at);
                    self.diags.push(
                        src.diag(off, format!("spec row {} names unknown rule `{r}`", row.n)),
                    );
                }
            }
        }
    }
}

// ---- spec obligations ------------------------------------------------------------------------

/// How a spec row or step is named in messages: `spec row 5 (pending → failed: readyTimeout)`,
/// else the obligation's own `spec` text.
fn spec_label(o: &Obligation, table: &[SpecRow]) -> String {
    match o.table_row.and_then(|n| table.iter().find(|r| r.n == n)) {
        Some(r) => format!("spec row {} ({} → {}: {})", r.n, r.from, r.to, r.event),
        None => o.spec.clone(),
    }
}

/// Does statement `text` (canonical form) match the obligation item `item`?
fn statement_matches(stmt: &RStatement, item: &str) -> bool {
    if item.contains('(') { stmt.text.starts_with(item) } else { stmt.verb == item }
}

/// The top-level `and` conjuncts of a guard text in canonical form (the text itself when it does
/// not parse: the checker has reported it).
pub(super) fn conjunct_texts(text: &str) -> Vec<String> {
    match syntax::parse_guard(text) {
        Ok(e) => conjuncts(&e).into_iter().map(|c| c.to_string()).collect(),
        Err(_) => vec![text.to_string()],
    }
}

/// A guard in canonical form (how docs, `rules diff` and obligations compare expressions).
pub(super) fn canonical(expr: &str) -> Result<String, syntax::SyntaxError> {
    syntax::parse_guard(expr).map(|e| e.to_string())
}

impl Checker<'_> {
    fn check_obligations(
        &mut self,
        src: &Source,
        obligations: &[Obligation],
        tr: &Transitions,
        table: &[SpecRow],
        handlers: &[CheckedHandler],
    ) {
        for o in obligations {
            let at = src.string_after(0, &o.spec).unwrap_or(0);
            if let Some(n) = o.table_row
                && !table.iter().any(|r| r.n == n)
            {
                self.diags
                    .push(src.diag(at, format!("`table_row: {n}` is not a row of spec-table.ron")));
            }
            if o.must.is_empty() {
                self.diags.push(src.diag(at, format!("obligation `{}` requires nothing: list what the rules must contain in `must`", o.spec)));
            }
            let who = spec_label(o, table);
            for m in &o.must {
                match m {
                    Must::Conjunct { of, expr } => {
                        self.obliged_conjunct(src, at, &who, of, expr, tr, handlers)
                    }
                    Must::Verbs { handler, order } => self.obliged_verbs(
                        src,
                        at,
                        &who,
                        o.table_row,
                        handler,
                        order,
                        table,
                        handlers,
                    ),
                    Must::ClearSet { keys } => {
                        self.obliged_clear_set(src, at, &who, keys, handlers)
                    }
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn obliged_conjunct(
        &mut self,
        src: &Source,
        at: usize,
        who: &str,
        of: &str,
        expr: &str,
        tr: &Transitions,
        handlers: &[CheckedHandler],
    ) {
        let want = match canonical(expr) {
            Ok(w) => w,
            Err(e) => {
                let off = src.string_after(at, expr).map(|o| o + e.offset).unwrap_or(at);
                self.diags.push(src.diag(off, format!("obligation expression: {}", e.message)));
                return;
            }
        };
        let negated = canonical(&format!("not ({expr})")).unwrap_or_default();
        let (target, text, place) = if let Some(d) = tr.definitions.iter().find(|d| d.name == of) {
            let users: Vec<&str> = handlers
                .iter()
                .flat_map(|h| &h.rows)
                .filter(|r| r.decl.when.as_deref().is_some_and(|w| mentions(w, of)))
                .map(|r| r.decl.id.as_str())
                .collect();
            let users = if users.is_empty() {
                String::new()
            } else {
                format!(
                    " (used by rows {})",
                    users.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(", ")
                )
            };
            (
                format!("definition `{of}`{users}"),
                Some(d.expr.clone()),
                self.tr_src.decl("name", of),
            )
        } else if let Some(r) = handlers.iter().flat_map(|h| &h.rows).find(|r| r.decl.id == of) {
            (format!("row `{of}`"), r.decl.when.clone(), self.tr_src.decl("id", of))
        } else {
            let off = src.string_after(at, of).unwrap_or(at);
            self.diags.push(src.diag(
                off,
                format!("{who}: `{of}` is neither a definition nor a row of transitions.ron"),
            ));
            return;
        };
        let have = text.as_deref().map(conjunct_texts).unwrap_or_default();
        if have.contains(&want) {
            return;
        }
        let how = if have.contains(&negated) { "it is negated" } else { "it is missing" };
        self.err_tr(
            place,
            format!("{who} requires {target} to keep the conjunct `{want}`; {how} (obligation at {}:{})", src.path, src.line_col(at).0),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn obliged_verbs(
        &mut self,
        src: &Source,
        at: usize,
        who: &str,
        table_row: Option<u32>,
        handler: &str,
        order: &[String],
        table: &[SpecRow],
        handlers: &[CheckedHandler],
    ) {
        let Some(h) = handlers.iter().find(|h| h.name == handler) else {
            let off = src.string_after(at, handler).unwrap_or(at);
            self.diags.push(
                src.diag(off, format!("{who}: `{handler}` is not a handler of transitions.ron")),
            );
            return;
        };
        let stmts: Vec<(&str, &RStatement)> = h
            .rows
            .iter()
            .flat_map(|r| r.statements.iter().map(move |s| (r.decl.id.as_str(), s)))
            .collect();
        let mut next = 0;
        let mut after: Option<(&str, &str)> = None; // (item, row) of the last match
        for item in order {
            match stmts[next..].iter().position(|(_, s)| statement_matches(s, item)) {
                Some(i) => {
                    after = Some((item.as_str(), stmts[next + i].0));
                    next += i + 1;
                }
                None => {
                    let mapped: Vec<&str> = table_row
                        .and_then(|n| table.iter().find(|r| r.n == n))
                        .map(|r| {
                            r.rules
                                .iter()
                                .filter(|id| h.rows.iter().any(|x| &x.decl.id == *id))
                                .map(String::as_str)
                                .collect()
                        })
                        .unwrap_or_default();
                    let rows = if mapped.is_empty() {
                        h.rows.iter().map(|r| r.decl.id.as_str()).collect::<Vec<_>>()
                    } else {
                        mapped
                    };
                    let rows = rows.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", ");
                    let elsewhere = stmts.iter().find(|(_, s)| statement_matches(s, item));
                    let how = match (elsewhere, after) {
                        (Some((row, _)), Some((prev, prev_row))) => format!(
                            "it is in row `{row}`, but not after `{prev}` (row `{prev_row}`)"
                        ),
                        (Some((row, _)), None) => format!("it is in row `{row}` but out of order"),
                        (None, Some((prev, prev_row))) => {
                            format!("it is missing after `{prev}` (row `{prev_row}`)")
                        }
                        (None, None) => "it is missing".to_string(),
                    };
                    let sequence =
                        order.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(" → ");
                    self.err_tr(
                        self.tr_src.decl("name", handler),
                        format!("{who} requires handler `{handler}` (rows {rows}) to run {sequence}; `{item}`: {how}"),
                    );
                    return;
                }
            }
        }
    }

    fn obliged_clear_set(
        &mut self,
        src: &Source,
        at: usize,
        who: &str,
        keys: &[String],
        handlers: &[CheckedHandler],
    ) {
        let clearing: Vec<String> = handlers
            .iter()
            .flat_map(|h| &h.rows)
            .filter(|r| {
                r.statements.iter().any(|s| s.verb == "clear_anchor" || s.verb == "release_anchor")
            })
            .map(|r| format!("`{}`", r.decl.id))
            .collect();
        for k in keys {
            if !self.ann.keys.iter().any(|x| &x.key == k) {
                let off = src.string_after(at, k).unwrap_or(at);
                self.diags
                    .push(src.diag(off, format!("{who}: `{k}` is not a key of annotations.ron")));
                continue;
            }
            if !self.ann.anchor_clear_set.contains(k) {
                let off = self.ann_src.find(0, "anchor_clear_set").unwrap_or(0);
                self.err_ann(
                    off,
                    format!("{who} requires `anchor_clear_set` to contain `{k}` (cleared by rows {}); it is missing", clearing.join(", ")),
                );
            }
        }
    }
}

/// Does guard text `text` name `word` as a whole word?
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let ok = |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        ok(text[..i].chars().next_back()) && ok(text[i + word.len()..].chars().next())
    })
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

fn compatible(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        (Ty::Enum { values: x, .. }, Ty::Enum { values: y, .. }) => {
            x.iter().all(|v| y.contains(v)) || y.iter().all(|v| x.contains(v))
        }
        (Ty::Outcome { verb: x, .. }, Ty::Outcome { verb: y, .. }) => x == y,
        _ => a == b,
    }
}

fn expect_bool(t: &Typed, at: usize, op: &str) -> Result<(), LocalError> {
    if t.ty == Some(Ty::Bool) && !t.nullable {
        Ok(())
    } else {
        Err(local(at, format!("`{op}` needs a bool, found {}", show(t))))
    }
}

fn show(t: &Typed) -> String {
    match &t.ty {
        None => "nil".into(),
        Some(ty) if t.nullable => format!("{ty} (may be nil)"),
        Some(ty) => ty.to_string(),
    }
}
