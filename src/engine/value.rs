//! Runtime values of the guard language.
use chrono::{DateTime, Duration, Utc};

/// A handle on an object of the snapshot; the [`Facts`](super::Facts) implementation resolves it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ObjRef {
    /// The NodePool being reconciled.
    Pool,
    /// The governing policy (defaults applied).
    Policy,
    /// A NodeClaim by name.
    Claim(String),
    /// A Node by name.
    Node(String),
    /// A Pod by namespace and name (the start-up sweep's placeholders).
    Pod(String, String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    Duration(Duration),
    Time(DateTime<Utc>),
    Name(String),
    /// An enum value or an outcome, spelled as in `rules/`.
    Sym(String),
    Object(ObjRef),
}

impl Value {
    pub(crate) fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    pub(crate) fn as_object(&self) -> Option<&ObjRef> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    pub fn as_time(&self) -> Option<DateTime<Utc>> {
        match self {
            Value::Time(t) => Some(*t),
            _ => None,
        }
    }

    /// How the value is written into an annotation (`None` for nil: not written).
    pub fn to_annotation(&self) -> Option<String> {
        Some(match self {
            Value::Nil => return None,
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Duration(d) => crate::policy::duration::format(*d),
            Value::Time(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            Value::Name(n) | Value::Sym(n) => n.clone(),
            Value::Object(ObjRef::Claim(n) | ObjRef::Node(n) | ObjRef::Pod(_, n)) => n.clone(),
            Value::Object(_) => return None,
        })
    }
}
