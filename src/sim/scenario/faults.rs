//! The fault rates of `--faults` a scenario file may set, with their defaults.
use serde::{Deserialize, Serialize};

/// Fault rates for `--faults`. Per controller write for crashes and API errors, per pass for
/// leader changes. The world's faults ([`super::world_faults`]) each draw from a stream of their
/// own: per object for the launch, drain and registration faults, and once a virtual minute per
/// rotation in flight for the faults aimed at rotations, so that how often the controller wakes
/// a pool does not change how many are injected.
///
/// [`super::world_faults`]: crate::sim::world_faults
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FaultRates {
    /// Crash around a write (half before it applies, half after).
    pub crash: f64,
    /// Leader change to the other instance, per pass.
    pub leader_change: f64,
    /// The deposed leader still runs one pass after the new one took over.
    pub zombie_pass: f64,
    /// Per pass over a pool the leader's cache shows anchored: one of the pass's first three
    /// writes is applied but its response stalls (an API server that accepts requests and
    /// answers late, a client retrying 429s) for 30s to 15m. The Lease renewals stall with it,
    /// so the standby takes the Lease and leads; then the stalled pass resumes where it stopped,
    /// with the decisions it took before the stall, and makes its remaining writes.
    pub stalled_pass: f64,
    pub conflict: f64,
    pub transient: f64,
    pub apply_then_transient: f64,
    /// Cache lag bound.
    pub cache_lag: String,
    /// At each leader change the standby's clock is off the deposed leader's by a seed-chosen
    /// amount, ahead or behind, up to this bound; it decides when the Lease has expired on its
    /// own clock, as the real lease code does. The deposed leader's last pass sends its writes
    /// up to `--api-request-timeout` before they land.
    pub clock_skew: String,
    /// Wake-ups delivered late (up to the lag bound), duplicated, or lost (coalesced).
    pub wake_late: f64,
    pub wake_duplicate: f64,
    pub wake_drop: f64,
    /// Per launched claim: it never launches.
    pub provisioning_never_completes: f64,
    /// Per launched claim: its node never turns Ready.
    pub node_never_ready: f64,
    /// Per drain: it hangs past tGP + buffer.
    pub stuck_drain: f64,
    /// Per minute of a pending rotation: Karpenter force-expires the candidate.
    pub expire_pending: f64,
    /// Per minute of a pending rotation in its last minute before readyTimeout (a quarter of
    /// it) or past it (all of it): the claim is finalized as the rollback runs.
    pub finalize_in_rollback: f64,
    /// Per minute of a rotation whose placeholder is Running: it is preempted.
    pub preempt_placeholder: f64,
    /// Per minute of a rotation whose placeholder is Running and not preempted that minute:
    /// its host node is deleted (interruption).
    pub delete_host: f64,
    /// Per launched claim: Karpenter writes its `status.nodeName` and conditions only after its
    /// Node is Ready (the moment a real registration controller lags the kubelet), so the Node
    /// and a placeholder on it are seen before the claim names the Node; the providerID, written
    /// at launch, is the only link meanwhile.
    pub registration_lag: f64,
}

impl Default for FaultRates {
    fn default() -> Self {
        FaultRates {
            crash: 0.004,
            leader_change: 0.0005,
            zombie_pass: 0.3,
            stalled_pass: 0.01,
            conflict: 0.01,
            transient: 0.01,
            apply_then_transient: 0.01,
            cache_lag: "5s".into(),
            clock_skew: "5s".into(),
            wake_late: 0.1,
            wake_duplicate: 0.05,
            wake_drop: 0.05,
            provisioning_never_completes: 0.05,
            node_never_ready: 0.03,
            stuck_drain: 0.05,
            expire_pending: 0.005,
            finalize_in_rollback: 0.3,
            preempt_placeholder: 0.05,
            delete_host: 0.02,
            registration_lag: 0.2,
        }
    }
}
