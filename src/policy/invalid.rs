//! Why a RotationPolicy is `Invalid` (spec §5.4): every field error, named by its full path.
use std::fmt;

/// One reason a policy is `Invalid`. `field` is the full path from the object root
/// (`spec.surge.readyTimeout`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    pub field: String,
    pub problem: String,
}

/// Every reason a policy is `Invalid`, in spec order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidPolicy {
    pub errors: Vec<FieldError>,
}

impl fmt::Display for InvalidPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}
