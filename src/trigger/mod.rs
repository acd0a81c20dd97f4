//! The one trigger seam of `noderotation run` and `simulate`: watch changes
//! ([`crate::cluster::change::Change`]) become pool keys ([`Mapper`]), keys wait in a
//! [`Schedule`] until due, and a pass's outcome sets when its pool is due again
//! ([`Retries`]). The runtime runs it on the wall clock behind a blocking queue
//! (`runtime::queue`); the simulation driver runs the same code on the virtual clock, fed by the
//! in-memory cluster's lagging caches. Pure: no I/O, no clock (time is a parameter).
pub(crate) mod mapping;
pub(crate) mod schedule;

pub(crate) use mapping::{Keys, Mapper};
pub(crate) use schedule::{Next, Retries, STATUS_COALESCE, Schedule};
