//! noderotation: rotates Karpenter nodes inside maintenance windows, capacity first.
//!
//! See `ARCHITECTURE.md` for the codemap and the dependency rules between modules.
#![forbid(unsafe_code)]
// The API docs are the contributors' (the crate is not published; tests/all.sh builds them with
// the private items): a module's docs may name the private items it is built from.
#![allow(rustdoc::private_intra_doc_links)]

/// The crate version (`Cargo.toml`).
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from (short hash), or `unknown` (see `build.rs`).
pub const COMMIT: &str = env!("NODEROTATION_COMMIT");
/// What `noderotation --version` prints after the name.
pub const VERSION_LINE: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("NODEROTATION_COMMIT"), ")");

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod engine;
pub mod karpenter;
pub mod placeholder;
pub mod policy;
pub mod reconcile;
pub mod rulebook;
pub mod runtime;
pub mod sim;
pub mod telemetry;
pub(crate) mod trigger;
