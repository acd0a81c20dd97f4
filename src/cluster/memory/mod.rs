//! The in-memory cluster: the [`Cluster`] that `noderotation simulate` and every test run the
//! controller against. Production code, not a mock: it is faithful where the spec depends on the
//! API server's behaviour (resourceVersion and 409 Conflict, 404 NotFound, uid preconditions,
//! finalizers holding a deleting object with its `deletionTimestamp`, a reflector cache that lags
//! the store) and nothing else.
//!
//! Two sides, kept apart by name:
//!
//! - **Controller side**: the [`Cluster`] trait. Every call is consulted by the fault hook
//!   ([`Faults`]), counted in [`CallCounts`] when it writes, and sees the store through the
//!   preconditions a real API server checks. Reads through [`Cluster::cache`] see this handle's
//!   lagging [`CacheView`].
//! - **World side**: the inherent methods (`apply_*`, `update_*`, `delete_object`, `delete_now`,
//!   `remove_finalizer`, `pool`, `claims`, ...), used by the simulated Karpenter, kubelet,
//!   scheduler and operator, and by tests to arrange and inspect state. They act on the store
//!   directly: no faults, no preconditions, not counted as controller writes. Their mutations
//!   still bump resourceVersions and produce watch events, exactly like the controller's.
//!
//! Everything is deterministic: ordered maps, counter-based uids, time from the injected
//! [`Clock`], randomness only from a seeded [`Rng`].
//!
//! One concern a file: `rng` (the seeded generator), `faults` (the hook consulted on every
//! controller call), `admission` (the API server's standing refusals: a rejected placeholder, a
//! pod list that times out), `cache` (each controller's lagging reflector view), `store` (the objects,
//! resourceVersions, generations, watch events), `server` (the API server's verbs:
//! preconditions, 409s, finalizers), `controller` (the [`Cluster`] impl and its write counts),
//! `world` (the world side).
use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(test)]
use chrono::{DateTime, Utc};

use super::{CacheView, EventRecord};
use crate::clock::Clock;
#[cfg(doc)]
use crate::cluster::Cluster;

mod admission;
mod cache;
mod controller;
mod faults;
#[cfg(test)]
mod fixtures;
mod rng;
mod server;
mod store;
mod world;

pub use admission::Rejected;
pub use cache::CacheLag;
use cache::ClientCache;
pub(crate) use controller::CallCounts;
pub use faults::{
    ApiVerb, Call, Fault, Faults, INJECTED_FORBIDDEN, INJECTED_TRANSIENT, RandomFaults,
};
pub use rng::Rng;
use store::{State, Store};

struct Shared {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

/// The in-memory cluster. A handle: clones share the store and this handle's cache;
/// [`MemoryCluster::connect_controller`] opens a second controller with its own cache (leader
/// change). See the module docs for the controller side (the [`Cluster`] trait) versus the
/// world side (the inherent methods).
#[derive(Clone)]
pub struct MemoryCluster {
    shared: Arc<Shared>,
    client: usize,
}

impl std::fmt::Debug for MemoryCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("MemoryCluster")
            .field("client", &self.client)
            .field("revision", &st.revision)
            .field("pending_watch_events", &st.clients[self.client].pending())
            .finish_non_exhaustive()
    }
}

impl MemoryCluster {
    /// An empty cluster. `controller_namespace` is where the controller's placeholder pods live
    /// (what its pod reflector watches). No cache lag, no faults.
    pub fn new(clock: Arc<dyn Clock>, controller_namespace: impl Into<String>) -> Self {
        let now = clock.now();
        let state = State {
            controller_namespace: controller_namespace.into(),
            now,
            store: Store::default(),
            revision: 0,
            next_uid: 0,
            clients: vec![ClientCache::new(CacheView::default(), CacheLag::None)],
            events: Vec::new(),
            writes: CallCounts::default(),
            faults: None,
            placeholder_class: None,
            admission: Default::default(),
        };
        MemoryCluster { shared: Arc::new(Shared { clock, state: Mutex::new(state) }), client: 0 }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        let now = self.shared.clock.now();
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.now = now;
        st
    }

    /// This handle's controller (cache) id, as passed to [`Faults`] in [`Call::client`].
    pub(crate) fn client_id(&self) -> usize {
        self.client
    }

    #[cfg(test)]
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.shared.clock.now()
    }

    pub(crate) fn controller_namespace(&self) -> String {
        self.lock().controller_namespace.clone()
    }

    /// Controller writes so far (all handles).
    pub fn call_counts(&self) -> CallCounts {
        self.lock().writes
    }

    /// The Events the controller recorded, oldest first.
    pub fn events(&self) -> Vec<EventRecord> {
        self.lock().events.clone()
    }

    /// Removes and returns the recorded Events (long simulations drain the log as they go).
    pub(crate) fn take_events(&self) -> Vec<EventRecord> {
        std::mem::take(&mut self.lock().events)
    }

    /// The current global resourceVersion: it moves on every store mutation.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }
}
