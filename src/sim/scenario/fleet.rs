//! The scenario file's fleet and the cluster around it: each pool with its nodes, workload and
//! their ages, the cluster's delays and failures, Karpenter's optional features, shortages, and
//! what the scenario promises.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};

/// One NodePool and the nodes it starts with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolScenario {
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Nodes carrying the workload at the start (the pool's base count).
    pub nodes: u32,
    /// Extra nodes without workload at the start (spare capacity a placeholder can be absorbed
    /// into).
    #[serde(default)]
    pub spare_nodes: u32,
    /// Template `expireAfter`: `Never` or a duration (`14d`, `336h`).
    pub expire_after: String,
    /// Template `terminationGracePeriod`; unset means the drain is unbounded.
    #[serde(default)]
    pub termination_grace_period: Option<String>,
    /// `spec.limits` (cpu, memory, nodes).
    #[serde(default)]
    pub limits: BTreeMap<String, String>,
    /// `spec.replicas`: a static pool.
    #[serde(default)]
    pub replicas: Option<i64>,
    #[serde(default = "default_zones")]
    pub zones: Vec<String>,
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// What one node offers.
    #[serde(default = "default_node_shape")]
    pub node: BTreeMap<String, String>,
    /// Workload pods per loaded node and what each requests.
    #[serde(default)]
    pub workload: Workload,
    /// The one DaemonSet pod every node runs.
    #[serde(default = "default_daemonset")]
    pub daemon_set: BTreeMap<String, String>,
    /// How old the starting nodes are.
    #[serde(default)]
    pub age: AgeSpread,
    /// Karpenter deletes a node that ran nothing but DaemonSet pods this long (`Never`: keep
    /// empty nodes, e.g. spare capacity).
    #[serde(default = "default_consolidate_after")]
    pub consolidate_after: String,
}

fn default_consolidate_after() -> String {
    "5m".into()
}

fn default_zones() -> Vec<String> {
    vec!["ap-northeast-1a".into(), "ap-northeast-1c".into(), "ap-northeast-1d".into()]
}

fn default_node_shape() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cpu".to_string(), "4".to_string()),
        ("memory".to_string(), "16Gi".to_string()),
    ])
}

fn default_daemonset() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cpu".to_string(), "200m".to_string()),
        ("memory".to_string(), "256Mi".to_string()),
    ])
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    pub pods_per_node: u32,
    pub requests: BTreeMap<String, String>,
    /// A PodDisruptionBudget over the pool's workload. With one, a drain evicts only while the
    /// budget allows (Karpenter's eviction queue retries the rest) and `delays.drain` is the time
    /// from the last eviction to the node being gone; without one, a drain evicts everything at
    /// once and `delays.drain` is its whole length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdb: Option<Pdb>,
    /// A required node affinity of the workload pods on `topology.kubernetes.io/zone`: they run
    /// only in these zones of the pool (empty: any). The starting nodes that carry the workload
    /// are spread over them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
}

/// `spec` of a PodDisruptionBudget selecting every pod of the workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pdb {
    /// Pods of the workload that may be unavailable (Pending or evicted) at once; 0 holds every
    /// drain until `terminationGracePeriod`.
    pub max_unavailable: u32,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            pods_per_node: 6,
            requests: BTreeMap::from([
                ("cpu".to_string(), "600m".to_string()),
                ("memory".to_string(), "2Gi".to_string()),
            ]),
            pdb: None,
            zones: Vec::new(),
        }
    }
}

/// Starting ages: uniform in `[min, max]`, or a synchronized batch (every node `batch` old, plus
/// up to `jitter`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgeSpread {
    #[serde(default = "zero_str")]
    pub min: String,
    #[serde(default = "default_age_max")]
    pub max: String,
    #[serde(default)]
    pub batch: Option<String>,
    #[serde(default = "zero_str")]
    pub jitter: String,
}

fn zero_str() -> String {
    "0s".into()
}

fn default_age_max() -> String {
    "5d".into()
}

impl Default for AgeSpread {
    fn default() -> Self {
        AgeSpread { min: zero_str(), max: default_age_max(), batch: None, jitter: zero_str() }
    }
}

/// A duration range: `"90s"` (fixed) or `{min: 40s, max: 2m}` (uniform).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DurRange {
    Fixed(String),
    Range { min: String, max: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Delays {
    /// Claim created -> instance launched.
    pub provisioning: DurRange,
    /// Launched -> Node registered.
    pub registration: DurRange,
    /// Registered -> Node Ready.
    pub ready: DurRange,
    /// Claim deleted -> drained and finalized (cut off at tGP).
    pub drain: DurRange,
    /// Karpenter deletes a claim whose Node has not registered this long after the claim was
    /// created (its registration liveness timeout, 15m in Karpenter v1).
    #[serde(default = "default_registration_timeout")]
    pub registration_timeout: String,
}

fn default_registration_timeout() -> String {
    "15m".into()
}

impl Default for Delays {
    fn default() -> Self {
        Delays {
            provisioning: DurRange::Range { min: "30s".into(), max: "90s".into() },
            registration: DurRange::Range { min: "20s".into(), max: "40s".into() },
            ready: DurRange::Range { min: "10s".into(), max: "30s".into() },
            drain: DurRange::Range { min: "1m".into(), max: "6m".into() },
            registration_timeout: default_registration_timeout(),
        }
    }
}

/// Probabilities of the cluster misbehaving, per provisioning or per drain.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Failures {
    #[serde(default)]
    pub provisioning_never_completes: f64,
    #[serde(default)]
    pub node_never_ready: f64,
    /// The drain hangs past tGP + buffer (a stuck volume detach).
    #[serde(default)]
    pub stuck_drain: f64,
}

/// Karpenter's optional features. Each defaults to what self-managed Karpenter does without
/// changing its feature gates, so the invariants are checked without them unless a scenario
/// says otherwise.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KarpenterFeatures {
    /// Node repair (the `NodeRepair` feature gate: off on self-managed Karpenter, on in EKS Auto
    /// Mode): a node NotReady for 30 minutes is deleted. Off, a node that never turns Ready
    /// stays until someone deletes its claim.
    #[serde(default)]
    pub node_repair: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Shortage {
    pub pool: String,
    /// Offset from the start.
    pub from: String,
    #[serde(rename = "for")]
    pub duration: String,
    /// The zones out of capacity (an instance type short in some zones); empty: every zone of
    /// the pool. Karpenter launches a pod that admits another zone there, and a pod that admits
    /// only short zones (a placeholder pinned to its old node's zone) waits, as in a shortage
    /// of the whole pool.
    #[serde(default)]
    pub zones: Vec<String>,
}

/// What the scenario promises, checked by the invariants.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Expect {
    /// Invariant 8 applies (no forced expiry, every rotation finishes) when faults are off.
    pub liveness: bool,
}

impl Default for Expect {
    fn default() -> Self {
        Expect { liveness: true }
    }
}
