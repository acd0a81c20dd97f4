//! The types of the guard language and how declarations map onto them.
use std::fmt;

use super::super::model::*;
use super::Checker;
use super::resolve::{LocalError, local};

/// A type in the guard language.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
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

impl Ty {
    /// Where a bare word stands for a literal of this type (an enum value or a verb outcome):
    /// what messages call such a literal, and the values it may take.
    pub(super) fn symbols(&self) -> Option<(String, &[String])> {
        match self {
            Ty::Enum { label, values } => Some((format!("a value of {label}"), values)),
            Ty::Outcome { verb, values } => Some((format!("an outcome of `{verb}`"), values)),
            _ => None,
        }
    }
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
pub(super) struct Typed {
    pub(super) ty: Option<Ty>, // None = the literal nil
    pub(super) nullable: bool,
}

impl Checker<'_> {
    pub(super) fn type_decl(&self, t: &TypeDecl) -> Result<Ty, String> {
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

    pub(super) fn annotation_ty(k: &AnnotationKey) -> Ty {
        match &k.value {
            ValueType::Time | ValueType::Stamp => Ty::Time,
            ValueType::Duration => Ty::Duration,
            ValueType::Int => Ty::Int,
            ValueType::ClaimName | ValueType::NodeName | ValueType::Uid => Ty::Name,
            ValueType::Enum(values) => {
                Ty::Enum { label: format!("annotation `{}`", k.key), values: values.clone() }
            }
            ValueType::True => Ty::Bool,
        }
    }
}

pub(super) fn compatible(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        (Ty::Enum { values: x, .. }, Ty::Enum { values: y, .. }) => {
            x.iter().all(|v| y.contains(v)) || y.iter().all(|v| x.contains(v))
        }
        (Ty::Outcome { verb: x, .. }, Ty::Outcome { verb: y, .. }) => x == y,
        _ => a == b,
    }
}

pub(super) fn expect_bool(t: &Typed, at: usize, op: &str) -> Result<(), LocalError> {
    if t.ty == Some(Ty::Bool) && !t.nullable {
        Ok(())
    } else {
        Err(local(at, format!("`{op}` needs a bool, found {}", show(t))))
    }
}

pub(super) fn show(t: &Typed) -> String {
    match &t.ty {
        None => "nil".into(),
        Some(ty) if t.nullable => format!("{ty} (may be nil)"),
        Some(ty) => ty.to_string(),
    }
}
