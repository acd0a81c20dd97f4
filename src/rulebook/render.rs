//! Docs rendered from the rules.
