//! The rule tables: model, guard grammar, checker, docs renderer, `rules diff`.
//! Shared with `build.rs` (included by path), so it depends on nothing else in this crate.
pub mod cli;
