//! The shapes of the files in `rules/`, exactly as written there (no interpretation yet).
use serde::Deserialize;

/// `rules/annotations.ron`: the annotation reference of §5.3.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Annotations {
    pub prefix: String,
    pub anchor_clear_set: Vec<String>,
    pub keys: Vec<AnnotationKey>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnnotationKey {
    pub key: String,
    /// Set when the key lives outside `prefix` (karpenter.sh/do-not-disrupt).
    #[serde(default)]
    pub full_key: Option<String>,
    pub targets: Vec<ObjectKind>,
    pub value: ValueType,
    pub purpose: String,
    pub lifecycle: String,
    pub spec: String,
    /// One copy per rotation slot of the pool (`spec.surge.maxUnavailable` > 1): slot 0 uses
    /// the key as written, slot `i` the key with the suffix `.i`. NodePool keys only.
    #[serde(default)]
    pub per_rotation: bool,
    /// Who writes the key: what the sweep, uninstall and the simulator treat as the
    /// controller's own is generated from this (`Key::is_ours`).
    pub owner: KeyOwner,
}

/// Who owns an annotation key.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum KeyOwner {
    /// Written by the controller; removed by uninstall.
    Controller,
    /// Written by a person (the controller only reads it); kept by uninstall.
    Operator,
    /// Karpenter's own key; the controller writes it only under its ownership marker, which
    /// says whether the value is ours to remove.
    Karpenter,
}

impl KeyOwner {
    pub(crate) fn name(self) -> &'static str {
        match self {
            KeyOwner::Controller => "controller",
            KeyOwner::Operator => "operator",
            KeyOwner::Karpenter => "Karpenter",
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    NodePool,
    NodeClaim,
    Node,
    Pod,
}

impl ObjectKind {
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::NodePool => "NodePool",
            ObjectKind::NodeClaim => "NodeClaim",
            ObjectKind::Node => "Node",
            ObjectKind::Pod => "Pod",
        }
    }
}

/// The value an annotation holds. `Values` lists an `Enum`'s values: owned when read from
/// `rules/annotations.ron`, static in the engine's generated vocabulary (`engine::vocab::KeyType`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum ValueType<Values = Vec<String>> {
    /// RFC3339, whole seconds.
    Time,
    /// RFC3339, whole seconds: the instant something happened (a gate stamp, an attempt's start
    /// or failure). A value later than now, beyond the clock-skew tolerance, is invalid and
    /// reads as unreadable.
    Stamp,
    /// Go duration (`1h17m0s`).
    Duration,
    /// Decimal integer.
    Int,
    /// The name of a NodeClaim.
    ClaimName,
    /// The name of a Node.
    NodeName,
    /// An object's `metadata.uid`.
    Uid,
    /// One of these values.
    Enum(Values),
    /// The literal `"true"`.
    True,
}

impl ValueType {
    pub(crate) fn describe(&self) -> String {
        match self {
            ValueType::Time => "RFC3339 time".into(),
            ValueType::Stamp => "RFC3339 time, not in the future".into(),
            ValueType::Duration => "Go duration".into(),
            ValueType::Int => "integer".into(),
            ValueType::ClaimName => "NodeClaim name".into(),
            ValueType::NodeName => "Node name".into(),
            ValueType::Uid => "uid".into(),
            ValueType::Enum(values) => {
                values.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(" / ")
            }
            ValueType::True => "`\"true\"`".into(),
        }
    }
}

/// `rules/vocabulary.ron`: what rules may talk about.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Vocabulary {
    pub enums: Vec<EnumDecl>,
    pub kinds: Vec<KindDecl>,
    pub contexts: Vec<ContextDecl>,
    pub predicates: Vec<PredicateDecl>,
    pub reasons: Vec<ReasonDecl>,
    pub slots: Vec<SlotDecl>,
    pub findings: Vec<FindingDecl>,
    pub signals: Vec<SignalDecl>,
    pub metrics: Vec<MetricDecl>,
    pub verbs: Vec<VerbDecl>,
}

impl Vocabulary {
    /// Every Event reason the controller records: the rules' reasons, then the feasibility
    /// warnings that are reasons of their own (a warning the rules also raise is theirs).
    pub fn event_reasons(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.reasons.iter().map(|r| r.name.as_str()).collect();
        for f in &self.findings {
            if f.severity == FindingSeverity::Warning && !names.contains(&f.name.as_str()) {
                names.push(&f.name);
            }
        }
        names
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EnumDecl {
    pub name: String,
    pub values: Vec<String>,
    pub doc: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KindDecl {
    pub name: String,
    pub fields: Vec<FieldDecl>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FieldDecl {
    pub name: String,
    pub ty: TypeDecl,
    #[serde(default)]
    pub nullable: bool,
    pub doc: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ContextDecl {
    pub name: String,
    pub roots: Vec<FieldDecl>,
}

/// A value type as written in the vocabulary.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
pub enum TypeDecl {
    Bool,
    Int,
    Duration,
    Time,
    Name,
    Enum(String),
    Object(String),
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PredicateDecl {
    pub name: String,
    pub args: Vec<TypeDecl>,
    pub ret: TypeDecl,
    #[serde(default)]
    pub nullable: bool,
    /// Called even when an argument is nil (otherwise a nil argument makes the result nil).
    #[serde(default)]
    pub accepts_nil: bool,
    pub doc: String,
}

/// An Event reason the rules raise (`event`, `warn_once`) or a verb records.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReasonDecl {
    pub name: String,
    /// The object the Event is recorded on.
    pub kind: ObjectKind,
    pub severity: Severity,
    /// The message, a [`parse_template`] template.
    pub message: String,
    /// Further messages of the reason, by case name; the recording code picks one.
    #[serde(default)]
    pub cases: Vec<CaseDecl>,
}

impl ReasonDecl {
    /// Every message of the reason, as `(case, template)`: its own first (no case), then its
    /// cases.
    pub(crate) fn messages(&self) -> Vec<(Option<&str>, &str)> {
        let own = std::iter::once((None, self.message.as_str()));
        own.chain(self.cases.iter().map(|c| (Some(c.name.as_str()), c.message.as_str()))).collect()
    }
}

/// One more message of a reason.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CaseDecl {
    pub name: String,
    pub message: String,
    /// When the recording code picks it.
    pub doc: String,
}

/// A `{name}` of Event messages: a detail the recording code computes.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlotDecl {
    pub name: String,
    pub doc: String,
}

/// A piece of a message template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    /// `{name}`: a slot, filled when the Event is recorded.
    Slot(String),
    /// `{key:name}`: the full annotation key `name`, written in at build time.
    Key(String),
}

/// Splits a message template into text and placeholders: `{slot}` and `{key:annotation}`.
/// `{{` and `}}` are literal braces. Only the syntax is checked here; the checker knows the
/// names.
pub(crate) fn parse_template(text: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut lit = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                lit.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                lit.push('}');
            }
            '}' => return Err("a `}` without its `{` (write `}}` for a brace)".into()),
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => {
                            return Err(format!(
                                "`{{{name}` is not closed (write `{{{{` for a brace)"
                            ));
                        }
                        Some(c) => name.push(c),
                    }
                }
                if !lit.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut lit)));
                }
                pieces.push(match name.strip_prefix("key:") {
                    Some(key) => Piece::Key(key.to_string()),
                    None => Piece::Slot(name),
                });
            }
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        pieces.push(Piece::Text(lit));
    }
    Ok(pieces)
}

/// The cause of a feasibility finding (§3.2).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FindingDecl {
    pub name: String,
    pub severity: FindingSeverity,
    pub layer: Layer,
    pub doc: String,
}

/// A fatal finding blocks new starts in the pool; a warning is an Event reason of its own.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum FindingSeverity {
    Fatal,
    Warning,
}

/// Where a feasibility finding comes from (§3.2).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum Layer {
    /// Layer 1: the policy against the pool template.
    Policy,
    /// Layer 2: throughput.
    Throughput,
    /// Layer 3: one claim at runtime.
    Claim,
}

impl Layer {
    /// The object a warning of this layer is recorded on.
    pub fn kind(self) -> ObjectKind {
        match self {
            Layer::Policy | Layer::Throughput => ObjectKind::NodePool,
            Layer::Claim => ObjectKind::NodeClaim,
        }
    }
}

/// A metric (§4.2; names normative).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricDecl {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: MetricType,
    pub labels: Vec<String>,
    pub help: String,
}

impl MetricDecl {
    /// A gauge labelled by `nodepool` alone: one series per pool, set on every pass.
    #[allow(dead_code, reason = "build.rs calls it: it compiles this module by #[path]")]
    pub(crate) fn is_pool_gauge(&self) -> bool {
        self.ty == MetricType::Gauge && self.labels == ["nodepool"]
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum MetricType {
    Gauge,
    Counter,
    Histogram,
}

impl MetricType {
    /// The Prometheus type, as `# TYPE` lines and the metrics reference spell it.
    pub(crate) fn prometheus(self) -> &'static str {
        match self {
            MetricType::Gauge => "gauge",
            MetricType::Counter => "counter",
            MetricType::Histogram => "histogram",
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SignalDecl {
    pub name: String,
    pub doc: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VerbDecl {
    pub name: String,
    pub params: Vec<ParamDecl>,
    pub outcomes: Vec<String>,
    /// Outcomes meaning "this write claimed its transition"; defaults to `["won"]`.
    #[serde(default)]
    pub wins: Option<Vec<String>>,
    #[serde(default)]
    pub writes: bool,
    #[serde(default)]
    pub conditional: bool,
    #[serde(default)]
    pub announces: bool,
    pub doc: String,
}

impl VerbDecl {
    pub(crate) fn winning_outcomes(&self) -> Vec<String> {
        self.wins.clone().unwrap_or_else(|| vec!["won".to_string()])
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ParamDecl {
    pub name: String,
    pub ty: ParamType,
    #[serde(default)]
    pub named: bool,
    #[serde(default)]
    pub optional: bool,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub enum ParamType {
    /// An object of one of these kinds.
    Target(Vec<String>),
    Name,
    /// A list of `ClaimState` values.
    States,
    /// A list of annotation keys of the target.
    Keys,
    /// One annotation key of the target.
    Key,
    /// `{key: value}` for annotations of the target, typed by the reference.
    Set,
    /// A bool guard the verb re-evaluates on its fresh read (`np` and the target read fresh);
    /// it may name only `np`, `policy`, `now` and definitions over them.
    Guard,
    Reason,
    Signal,
    Verdict,
}

/// `rules/transitions.ron`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Transitions {
    pub definitions: Vec<Definition>,
    pub handlers: Vec<HandlerDecl>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    pub name: String,
    /// Roots that must be known non-nil wherever the definition is used.
    #[serde(default)]
    pub assume: Vec<String>,
    pub expr: String,
    pub doc: String,
    pub spec: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HandlerDecl {
    pub name: String,
    #[serde(default)]
    pub entry: bool,
    /// Claim states dispatched to this handler (for the "every state has a handler" check).
    #[serde(default)]
    pub handles: Vec<String>,
    #[serde(default = "default_context")]
    pub context: String,
    /// Roots known non-nil on entry (checked by the engine when the handler is entered).
    #[serde(default)]
    pub assume: Vec<String>,
    pub doc: String,
    pub rows: Vec<RowDecl>,
}

fn default_context() -> String {
    "pool".to_string()
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RowDecl {
    pub id: String,
    #[serde(default)]
    pub when: Option<String>,
    #[serde(default, rename = "do")]
    pub verbs: Vec<String>,
    pub then: Then,
    #[serde(default)]
    pub to: Option<String>,
    pub spec: String,
    /// What the row's firing counts for in the sweep's report (sweep handlers only): the
    /// report is filled from these tags, never from row ids.
    #[serde(default)]
    pub report: Option<ReportTag>,
}

/// A line of the sweep's report that a row's firing adds its subject to.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash)]
pub enum ReportTag {
    /// An orphaned placeholder pod deleted.
    PlaceholderDeleted,
    /// A node's orphaned markers removed.
    NodeReleased,
    /// A claim pending or draining without an anchor moved to failed.
    ClaimFailed,
    /// A pool's orphaned per-rotation set removed.
    PoolCleaned,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub enum Then {
    Continue,
    Requeue(String),
    Goto(String),
    /// End the handler without a requeue (the start-up sweep's one-shot handlers).
    Done,
}

/// `rules/spec-table.ron`: the §5.3 transition table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpecRow {
    pub n: u32,
    pub from: String,
    pub event: String,
    pub to: String,
    pub effects: String,
    pub rules: Vec<String>,
}

/// `rules/obligations.ron`: what the spec obliges the rules to contain, beside the table that
/// maps spec rows to rule rows. `rules check` fails when an edit drops one; changing one is a
/// change of the spec contract, and `rules diff` shows it as such.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Obligation {
    /// The spec text it comes from (`§5.2 step 2`, `§5.3 row 5`, ...), quoted by diagnostics.
    pub spec: String,
    /// The row `n` of `spec-table.ron` it belongs to, if any.
    #[serde(default)]
    pub table_row: Option<u32>,
    pub must: Vec<Must>,
}

/// One thing the rules must contain.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub enum Must {
    /// The guard of row (or the expression of definition) `of` has `expr` as one of its
    /// top-level `and` conjuncts, compared in canonical form (not negated, not weakened).
    Conjunct { of: String, expr: String },
    /// The rows of `handler` run these statements in this order (other statements may come
    /// between). An item is a verb name (`unfreeze`) or the start of a statement in canonical
    /// form (`clear_anchor(np, name=cand.name`).
    Verbs { handler: String, order: Vec<String> },
    /// `anchor_clear_set` of annotations.ron contains these keys.
    ClearSet { keys: Vec<String> },
}

impl Must {
    /// The obligation in one line, for messages and `rules diff`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Must::Conjunct { of, expr } => format!("`{of}` has the conjunct `{expr}`"),
            Must::Verbs { handler, order } => {
                format!(
                    "`{handler}` runs {}",
                    order.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(" → ")
                )
            }
            Must::ClearSet { keys } => format!(
                "the anchor clear set contains {}",
                keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}
