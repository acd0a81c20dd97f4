//! rules diff.
