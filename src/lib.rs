//! noderotation: rotates Karpenter nodes inside maintenance windows, capacity first.
//!
//! See `ARCHITECTURE.md` for the codemap and the dependency rules between modules.
#![forbid(unsafe_code)]

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
