//! RotationPolicy API and everything derived from a policy: windows, age threshold, chances,
//! feasibility, policy resolution, and the `plan` report (spec §5.4, §3.1–§3.2).
//!
//! - [`crd`]: the `RotationPolicy` wire types and CRD; [`duration`]: Go durations.
//! - [`window`]: the compiled window schedule (occurrences, `P`); [`settings`]: a spec with
//!   defaults applied and reconcile-time validation ([`settings::Effective`]).
//! - [`derive`](mod@derive): deadline, `t_rot`, `A`, `G`, `C`, the candidate predicate, order, backoff.
//! - [`chances`]: `ageThreshold: windows`, a claim's chances counted on the real occurrences.
//! - [`feasibility`]: layers 1–3 as typed findings; [`resolve`]: governance and status view.
//! - [`lookahead`]: crowded claims fall due early enough for the pool's rotations in flight.
//! - [`plan`]: the report of `noderotation plan` (the command is `crate::cli::plan`).
//!
//! Pure: no I/O, `now` is always a parameter (the commands that read files live in `crate::cli`).
pub(crate) mod chances;
pub mod crd;
pub(crate) mod derive;
pub mod duration;
pub(crate) mod feasibility;
pub(crate) mod invalid;
pub(crate) mod lookahead;
pub mod plan;
pub mod resolve;
pub(crate) mod selector;
pub mod settings;
pub(crate) mod strict;
pub mod window;

#[cfg(test)]
mod example_manifests;
#[cfg(test)]
mod window_props;
