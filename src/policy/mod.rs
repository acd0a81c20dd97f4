//! RotationPolicy API and everything derived from a policy: windows, age threshold, chances,
//! feasibility, policy resolution, and the `plan` command (spec §5.4, SUPPLEMENT §3.1–§3.2).
//!
//! Dependency order (no cycles): `duration` -> `window` -> `crd` -> `settings` -> `derive` ->
//! `feasibility` -> `resolve` -> `plan`. Everything but `crd::run` and `plan::run` is pure.
pub mod crd;
pub mod derive;
pub mod duration;
pub mod feasibility;
pub mod plan;
pub mod resolve;
pub mod settings;
pub mod window;
