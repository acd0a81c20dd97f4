//! The reconciler: one non-blocking pass per NodePool, decided by the rules (spec §5.2–§5.4).
//!
//! [`Controller`] is synchronous and owns no threads: `noderotation run` drives it from a work
//! queue fed by watches (on a blocking thread), `simulate` and the tests drive it step by step
//! on a virtual clock. Both hand it the same [`Cluster`] interface.
use std::sync::Arc;

use chrono::Duration;

use crate::clock::Clock;
use crate::cluster::{ApiError, Cluster};
use crate::engine::{Engine, EngineError};

/// Deployment-specific settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// Namespace of the controller; placeholder pods live here.
    pub namespace: String,
    /// The negative-priority, `preemptionPolicy: Never` class shipped with the manifests.
    pub priority_class: String,
    /// The placeholder's container image (a pause image).
    pub pause_image: String,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            namespace: "noderotation-system".into(),
            priority_class: "noderotation-placeholder".into(),
            pause_image: "registry.k8s.io/pause:3.10".into(),
        }
    }
}

/// Why a pass did not finish; the caller requeues with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("pool {pool}: {source}")]
    Engine { pool: String, source: EngineError },
    #[error("pool {pool}: {source}")]
    Api { pool: String, source: ApiError },
}

/// What the start-up sweep did (§5.3), for the log and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub placeholders_deleted: Vec<String>,
    pub nodes_released: Vec<String>,
    pub claims_failed: Vec<String>,
    pub pools_cleaned: Vec<String>,
    pub errors: Vec<String>,
}

/// The controller's state between passes: only caches and dedup latches, never decisions
/// (those live in annotations, so a restart loses nothing).
pub struct Controller {
    cluster: Arc<dyn Cluster>,
    clock: Arc<dyn Clock>,
    engine: Arc<Engine>,
    config: ControllerConfig,
    swept: bool,
}

impl Controller {
    pub fn new(cluster: Arc<dyn Cluster>, clock: Arc<dyn Clock>, engine: Arc<Engine>, config: ControllerConfig) -> Self {
        Controller { cluster, clock, engine, config, swept: false }
    }

    /// The §5.3 start-up sweep. Run once per leadership, before the first `reconcile_pool`.
    pub fn startup_sweep(&mut self) -> SweepReport {
        self.swept = true;
        let _ = (&self.cluster, &self.clock, &self.engine, &self.config);
        SweepReport::default()
    }

    /// One pass over a pool; returns when to come back.
    pub fn reconcile_pool(&mut self, _pool: &str) -> Result<Duration, ReconcileError> {
        Ok(Duration::minutes(1))
    }

    /// The RotationPolicy status view (§5.4); a conflict is a silent requeue.
    pub fn update_policy_status(&mut self) {}
}
