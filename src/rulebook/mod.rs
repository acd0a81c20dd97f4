//! The rule tables of `rules/`: their model, the guard grammar, the checker, the docs renderer
//! and `rules diff`.
//!
//! This module is also compiled into `build.rs` (by `#[path]`), so that the build fails on the
//! same diagnostics the binary prints. It must therefore depend only on std, serde, ron and
//! pest — never on the rest of this crate.
pub mod check;
pub mod diff;
pub mod model;
pub mod render;
pub(crate) mod syntax;

pub use check::{Diagnostic, Rulebook, Source};
