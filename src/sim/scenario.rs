//! What a simulation runs: a fleet, its policies, the cluster's delays and failures, and an
//! operator script, as one YAML document (`deploy/examples/scenarios/*.yaml`).
//!
//! Policies are real `RotationPolicy` manifests, so a scenario reads like what an operator would
//! `kubectl apply`. Durations accept Go syntax plus a `d` (24h) unit (`14d`, `2h12m`, `90s`).
//! [`Scenario::compile`] parses and checks everything once, so the simulation never re-parses.
use std::collections::BTreeMap;

use anyhow::{Context, anyhow, bail};
use chrono::{DateTime, Duration, TimeZone, Utc};
use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};

use crate::karpenter::quantity_millis;
use crate::policy::crd::RotationPolicy;
use crate::policy::duration::{self, ExpireAfter};
use crate::policy::settings::Effective;

/// The fleet `noderotation simulate` runs without `--scenario`.
pub const DEFAULT_SCENARIO: &str = include_str!("../../deploy/examples/scenarios/default.yaml");

/// Resource name -> thousandths of its unit (as `karpenter::quantity_millis`).
pub type Resources = BTreeMap<String, i128>;

/// A scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Virtual start instant (RFC 3339). Default: Monday 2026-06-01 00:00 UTC.
    #[serde(default = "default_start")]
    pub start: DateTime<Utc>,
    /// Simulated span when `--weeks` is not given.
    #[serde(default = "default_weeks")]
    pub weeks: u32,
    /// Simulated span as a duration (`25m`, `36h`), for runs shorter than a week (a fleet in
    /// compressed time); replaces `weeks`. `--weeks` overrides both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<String>,
    pub pools: Vec<PoolScenario>,
    #[serde(default)]
    pub policies: Vec<RotationPolicy>,
    #[serde(default)]
    pub delays: Delays,
    /// Failures that are part of the scenario (they happen with or without `--faults`).
    #[serde(default)]
    pub failures: Failures,
    /// Karpenter's optional features (feature gates on self-managed Karpenter).
    #[serde(default)]
    pub karpenter: KarpenterFeatures,
    /// Intervals in which a pool's provisioning never completes (an instance-type shortage).
    #[serde(default)]
    pub shortages: Vec<Shortage>,
    /// The operator's actions, in any order (sorted by `at`).
    #[serde(default)]
    pub script: Vec<ScriptStep>,
    /// Fault rates used with `--faults` (default: [`FaultRates::default`]).
    #[serde(default)]
    pub faults: Option<FaultRates>,
    #[serde(default)]
    pub expect: Expect,
}

fn default_start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn default_weeks() -> u32 {
    8
}

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

impl DurRange {
    fn compile(&self, field: &str) -> anyhow::Result<(Duration, Duration)> {
        let (lo, hi) = match self {
            DurRange::Fixed(s) => (dur(s, field)?, dur(s, field)?),
            DurRange::Range { min, max } => (dur(min, field)?, dur(max, field)?),
        };
        if lo < Duration::zero() || hi < lo {
            bail!("{field}: need 0 <= min <= max");
        }
        Ok((lo, hi))
    }
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

/// One operator action at `at` (offset from the start).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScriptStep {
    pub at: String,
    pub action: ActionKind,
    #[serde(default)]
    pub pool: Option<String>,
    /// Which node of the pool (cordon, doNotDisrupt, deleteClaim, rejectPlaceholder,
    /// timeOutPodList): `oldest` (the default), `newest`, `random`, `anchored`, or
    /// `{name: <NodeClaim>}`.
    #[serde(default)]
    pub node: Option<NodePick>,
    /// rejectPlaceholder: instead of `node`, the rotation of the pool (1 = the first) whose
    /// placeholder is created first from `at` on: the 2nd rotation's claim is not known when the
    /// scenario is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<usize>,
    /// freeze: how long (required). rejectPlaceholder, timeOutPodList: how long the refusal
    /// lasts (default: to the end of the run).
    #[serde(default, rename = "for")]
    pub duration: Option<String>,
    /// applyPolicy: the manifest.
    #[serde(default)]
    pub policy: Option<Box<RotationPolicy>>,
    /// deletePolicy: its name.
    #[serde(default)]
    pub name: Option<String>,
    /// editNodePool: the template's new `expireAfter` (claims created from then on).
    #[serde(default)]
    pub expire_after: Option<String>,
    /// editNodePool: the template's new `terminationGracePeriod` (claims created from then on).
    #[serde(default)]
    pub termination_grace_period: Option<String>,
    /// editNodePool: the new `spec.limits` (replaces the old ones; `{}` removes them).
    #[serde(default)]
    pub limits: Option<BTreeMap<String, String>>,
    /// removeAnchor, replaceNodePool, deleteNodePool: wait for a rotation in this stage
    /// (`pending` or `draining`, as the claim's `state` says) instead of any rotation in flight.
    #[serde(default)]
    pub stage: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ActionKind {
    /// `noderotation.io/freeze` on the pool, until `at + for`.
    Freeze,
    Unfreeze,
    ApplyPolicy,
    DeletePolicy,
    /// The operator's own cordon (no `cordoned` marker).
    Cordon,
    /// Uncordons a node the operator cordoned.
    Uncordon,
    /// The operator's own `karpenter.sh/do-not-disrupt: "true"`.
    DoNotDisrupt,
    /// Removes the operator's do-not-disrupt.
    AllowDisrupt,
    /// `kubectl delete nodeclaim`.
    DeleteClaim,
    /// `kubectl annotate nodepool <pool> noderotation.io/active-rotation-`: the anchor removed
    /// by hand, mid-rotation (at the first moment from `at` on that the pool has an anchored
    /// rotation, looked for every 10s for up to a day; this and the next two).
    RemoveAnchor,
    /// `kubectl replace` (or a GitOps sync with `Replace=true`) of the NodePool from a manifest
    /// without our annotations: every `noderotation.io/` annotation is gone.
    ReplaceNodePool,
    /// `kubectl delete nodepool` mid-rotation: Karpenter deletes every claim of the pool and
    /// provisions nothing more for it.
    DeleteNodePool,
    /// Mid-rotation (as `removeAnchor` waits for one), someone replaces the rotation's
    /// placeholder with a pod of the same name, label and `surge-for`, Running on another Ready
    /// node of the pool: capacity the controller did not reserve.
    ImpersonatePlaceholder,
    /// `kubectl edit nodepool`: a new `expireAfter` or `terminationGracePeriod` in the template
    /// (Karpenter copies both into each claim when it creates it, so they apply to claims
    /// created from then on) or new `spec.limits` (at once).
    EditNodePool,
    /// An admission webhook, a ResourceQuota or a LimitRange rejects (403) every create of one
    /// rotation's placeholder: that of the `node` picked at `at`, or of the pool's `rotation`-th
    /// rotation from `at` on. Not an operator edit of the pool: the cluster's own behaviour.
    RejectPlaceholder,
    /// Every list of the pods on the `node` picked at `at` times out (the list the placeholder
    /// of that node's rotation is sized from).
    TimeOutPodList,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "NodePickText", into = "NodePickText")]
pub enum NodePick {
    /// The claim with the earliest creation time.
    #[default]
    Oldest,
    Newest,
    /// A seeded choice.
    Random,
    /// The node of the pool's anchored claim (else the oldest).
    Anchored,
    /// The NodeClaim of that name, when the step runs (`kubectl ... nodeclaim/<name>`): a
    /// starting claim is `<pool>-<5 digits>` counted from 0 (`api-00007`). A name the pool does
    /// not have then, or whose claim is not Ready, does nothing and says so in the trace.
    Name(String),
}

/// How a scenario file writes a [`NodePick`]: a word, or `{name: <NodeClaim>}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum NodePickText {
    Word(String),
    Named { name: String },
}

impl TryFrom<NodePickText> for NodePick {
    type Error = String;

    fn try_from(text: NodePickText) -> Result<Self, Self::Error> {
        match text {
            NodePickText::Named { name } => Ok(NodePick::Name(name)),
            NodePickText::Word(w) => match w.as_str() {
                "oldest" => Ok(NodePick::Oldest),
                "newest" => Ok(NodePick::Newest),
                "random" => Ok(NodePick::Random),
                "anchored" => Ok(NodePick::Anchored),
                _ => Err(format!(
                    "node: {w:?} is not a pick; write oldest, newest, random, anchored or \
                     {{name: <NodeClaim>}}"
                )),
            },
        }
    }
}

impl From<NodePick> for NodePickText {
    fn from(pick: NodePick) -> Self {
        let word = |w: &str| NodePickText::Word(w.to_string());
        match pick {
            NodePick::Oldest => word("oldest"),
            NodePick::Newest => word("newest"),
            NodePick::Random => word("random"),
            NodePick::Anchored => word("anchored"),
            NodePick::Name(name) => NodePickText::Named { name },
        }
    }
}

/// Fault rates for `--faults`. Per controller write for crashes and API errors, per pass for
/// leader changes. The world's faults ([`super::world_faults`]) each draw from a stream of their
/// own: per object for the launch, drain and registration faults, and once a virtual minute per
/// rotation in flight for the faults aimed at rotations, so that how often the controller wakes
/// a pool does not change how many are injected.
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

fn dur(s: &str, field: &str) -> anyhow::Result<Duration> {
    duration::parse_with_days(s).map_err(|e| anyhow!("{field}: {e}"))
}

fn resources(map: &BTreeMap<String, String>, field: &str) -> anyhow::Result<Resources> {
    map.iter()
        .map(|(k, v)| {
            let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.clone());
            let m =
                quantity_millis(&q).ok_or_else(|| anyhow!("{field}.{k}: bad quantity {v:?}"))?;
            Ok((k.clone(), m))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Compiled form

/// A scenario with every value parsed and checked.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub name: String,
    pub description: String,
    pub start: DateTime<Utc>,
    pub weeks: u32,
    /// `span`, when the scenario gives one: the run's length instead of `weeks`.
    pub span: Option<Duration>,
    pub pools: Vec<PoolPlan>,
    pub policies: Vec<RotationPolicy>,
    pub provisioning: (Duration, Duration),
    pub registration: (Duration, Duration),
    pub ready: (Duration, Duration),
    pub drain: (Duration, Duration),
    pub failures: Failures,
    /// Karpenter's node repair (`karpenter.nodeRepair`).
    pub node_repair: bool,
    pub shortages: Vec<ShortagePlan>,
    /// Karpenter's registration timeout (`delays.registrationTimeout`).
    pub registration_timeout: Duration,
    pub script: Vec<Step>,
    pub faults: FaultPlan,
    pub expect: Expect,
    /// The source text (for the report).
    pub source: Scenario,
}

#[derive(Debug, Clone)]
pub struct PoolPlan {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub nodes: u32,
    pub spare_nodes: u32,
    pub expire_after: ExpireAfter,
    /// As written into the template (Go syntax).
    pub expire_after_go: String,
    pub tgp: Option<Duration>,
    pub tgp_go: Option<String>,
    pub limits: BTreeMap<String, String>,
    pub replicas: Option<i64>,
    pub zones: Vec<String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub allocatable_raw: BTreeMap<String, String>,
    pub pods_per_node: u32,
    pub pod_requests: Resources,
    pub pod_requests_raw: BTreeMap<String, String>,
    /// The workload's PDB `maxUnavailable` (`None`: no PDB).
    pub pdb_max_unavailable: Option<u32>,
    /// The zones the workload pods require (empty: any of the pool's).
    pub workload_zones: Vec<String>,
    pub daemonset: Resources,
    pub daemonset_raw: BTreeMap<String, String>,
    pub age_min: Duration,
    pub age_max: Duration,
    pub batch: Option<Duration>,
    pub jitter: Duration,
    pub consolidate_after: Option<Duration>,
}

impl PoolPlan {
    /// Nodes the pool should have when nothing is in flight.
    pub fn base_count(&self) -> u32 {
        match self.replicas {
            Some(r) => u32::try_from(r.max(0)).unwrap_or(0),
            None => self.nodes + self.spare_nodes,
        }
    }
}

/// A shortage, compiled.
#[derive(Debug, Clone)]
pub struct ShortagePlan {
    pub pool: String,
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Empty: every zone.
    pub zones: Vec<String>,
}

impl ShortagePlan {
    /// Whether `zone` of `pool` is out of capacity at `now`.
    pub fn covers(&self, pool: &str, zone: &str, now: DateTime<Utc>) -> bool {
        self.pool == pool
            && self.from <= now
            && now < self.until
            && (self.zones.is_empty() || self.zones.iter().any(|z| z == zone))
    }
}

/// A script step, compiled.
#[derive(Debug, Clone)]
pub struct Step {
    pub at: DateTime<Utc>,
    pub action: ActionKind,
    pub pool: Option<String>,
    pub node: NodePick,
    pub until: Option<DateTime<Utc>>,
    pub policy: Option<RotationPolicy>,
    pub name: Option<String>,
    /// editNodePool: what changes.
    pub edit: Option<PoolEdit>,
    /// removeAnchor, replaceNodePool, deleteNodePool: the claim state of the rotation waited for.
    pub stage: Option<String>,
    /// rejectPlaceholder: the pool's rotation whose placeholder is rejected.
    pub rotation: Option<usize>,
}

/// An edit of a NodePool, compiled.
#[derive(Debug, Clone, Default)]
pub struct PoolEdit {
    pub expire_after: Option<ExpireAfter>,
    pub tgp: Option<Duration>,
    pub limits: Option<BTreeMap<String, String>>,
}

/// Fault rates, compiled.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    pub rates: FaultRates,
    pub cache_lag: Duration,
    pub clock_skew: Duration,
}

impl Scenario {
    pub fn from_yaml(text: &str) -> anyhow::Result<Scenario> {
        serde_norway::from_str(text).map_err(|e| anyhow!("scenario: {e}"))
    }

    pub fn load(path: &std::path::Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        Scenario::from_yaml(&text).with_context(|| path.display().to_string())
    }

    pub fn default_fleet() -> anyhow::Result<Scenario> {
        Scenario::from_yaml(DEFAULT_SCENARIO)
    }

    /// Parses and checks every value.
    pub fn compile(&self) -> anyhow::Result<Compiled> {
        if self.pools.is_empty() {
            bail!("pools: at least one pool");
        }
        let mut pools = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for (i, p) in self.pools.iter().enumerate() {
            let f = |x: &str| format!("pools[{i}].{x}");
            if !names.insert(p.name.clone()) {
                bail!("{}: duplicate pool name {:?}", f("name"), p.name);
            }
            if p.name.is_empty()
                || !p.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                bail!("{}: a DNS label (lowercase letters, digits, '-')", f("name"));
            }
            let expire_after = ExpireAfter::parse_with_days(&p.expire_after)
                .map_err(|e| anyhow!("{}: {e}", f("expireAfter")))?;
            let tgp = p
                .termination_grace_period
                .as_deref()
                .map(|s| dur(s, &f("terminationGracePeriod")))
                .transpose()?;
            if p.zones.is_empty() {
                bail!("{}: at least one zone", f("zones"));
            }
            if let Some(z) = p.workload.zones.iter().find(|z| !p.zones.contains(z)) {
                bail!(
                    "{}: {z:?} is not a zone of the pool; write some of {}",
                    f("workload.zones"),
                    p.zones.join(", ")
                );
            }
            let allocatable = resources(&p.node, &f("node"))?;
            let pod_requests = resources(&p.workload.requests, &f("workload.requests"))?;
            let daemonset = resources(&p.daemon_set, &f("daemonSet"))?;
            let mut used = daemonset.clone();
            for (k, v) in &pod_requests {
                *used.entry(k.clone()).or_insert(0) += v * i128::from(p.workload.pods_per_node);
            }
            for (k, v) in &used {
                if allocatable.get(k).copied().unwrap_or(0) < *v {
                    bail!(
                        "{}: {} pods of {} plus the DaemonSet do not fit a node ({k})",
                        f("workload"),
                        p.workload.pods_per_node,
                        f("workload.requests")
                    );
                }
            }
            pools.push(PoolPlan {
                name: p.name.clone(),
                labels: p.labels.clone(),
                nodes: p.nodes,
                spare_nodes: p.spare_nodes,
                expire_after,
                expire_after_go: match expire_after {
                    ExpireAfter::Never => "Never".into(),
                    ExpireAfter::After(d) => duration::format(d),
                },
                tgp,
                tgp_go: tgp.map(duration::format),
                limits: p.limits.clone(),
                replicas: p.replicas,
                zones: p.zones.clone(),
                taints: p.taints.clone(),
                allocatable,
                allocatable_raw: p.node.clone(),
                pods_per_node: p.workload.pods_per_node,
                pod_requests,
                pod_requests_raw: p.workload.requests.clone(),
                pdb_max_unavailable: p.workload.pdb.as_ref().map(|b| b.max_unavailable),
                workload_zones: p.workload.zones.clone(),
                daemonset,
                daemonset_raw: p.daemon_set.clone(),
                age_min: dur(&p.age.min, &f("age.min"))?,
                age_max: dur(&p.age.max, &f("age.max"))?,
                batch: p.age.batch.as_deref().map(|s| dur(s, &f("age.batch"))).transpose()?,
                jitter: dur(&p.age.jitter, &f("age.jitter"))?,
                consolidate_after: match p.consolidate_after.as_str() {
                    "Never" => None,
                    other => Some(dur(other, &f("consolidateAfter"))?),
                },
            });
        }
        for (i, policy) in self.policies.iter().enumerate() {
            if policy.metadata.name.as_deref().is_none_or(str::is_empty) {
                bail!("policies[{i}].metadata.name: required");
            }
            // An invalid policy is a legitimate scenario (the controller must not rotate), but
            // a typo in a shipped scenario should be loud: warn through the error text.
            if let Err(e) = Effective::from_spec(&policy.spec) {
                bail!("policies[{i}] ({}): {e}", policy.metadata.name.as_deref().unwrap_or(""));
            }
        }
        let at = |s: &str, field: &str| -> anyhow::Result<DateTime<Utc>> {
            Ok(self.start + dur(s, field)?)
        };
        let mut shortages = Vec::new();
        for (i, s) in self.shortages.iter().enumerate() {
            let Some(pool) = self.pools.iter().find(|p| p.name == s.pool) else {
                bail!("shortages[{i}].pool: no pool {:?}", s.pool);
            };
            if let Some(z) = s.zones.iter().find(|z| !pool.zones.contains(z)) {
                bail!(
                    "shortages[{i}].zones: {z:?} is not a zone of pool {:?} (its zones: {})",
                    s.pool,
                    pool.zones.join(", ")
                );
            }
            let from = at(&s.from, &format!("shortages[{i}].from"))?;
            let until = from + dur(&s.duration, &format!("shortages[{i}].for"))?;
            shortages.push(ShortagePlan {
                pool: s.pool.clone(),
                from,
                until,
                zones: s.zones.clone(),
            });
        }
        let mut script = Vec::new();
        for (i, s) in self.script.iter().enumerate() {
            let f = |x: &str| format!("script[{i}].{x}");
            let when = at(&s.at, &f("at"))?;
            let needs_pool =
                !matches!(s.action, ActionKind::ApplyPolicy | ActionKind::DeletePolicy);
            if needs_pool {
                match &s.pool {
                    Some(p) if names.contains(p) => {}
                    Some(p) => bail!("{}: no pool {p:?}", f("pool")),
                    None => bail!("{}: required for {:?}", f("pool"), s.action),
                }
            }
            let refusal =
                matches!(s.action, ActionKind::RejectPlaceholder | ActionKind::TimeOutPodList);
            let until = match (s.action, &s.duration) {
                (ActionKind::Freeze, Some(d)) => Some(when + dur(d, &f("for"))?),
                (ActionKind::Freeze, None) => bail!("{}: required for freeze", f("for")),
                (_, Some(d)) if refusal => Some(when + dur(d, &f("for"))?),
                _ => None,
            };
            match (s.action, s.rotation) {
                (_, None) => {}
                (ActionKind::RejectPlaceholder, Some(0)) => {
                    bail!("{}: counts from 1 (the first rotation from `at` on)", f("rotation"))
                }
                (ActionKind::RejectPlaceholder, Some(_)) if s.node.is_some() => bail!(
                    "{}: give either node (a claim picked at `at`) or rotation (the pool's n-th \
                     rotation from `at` on), not both",
                    f("rotation")
                ),
                (ActionKind::RejectPlaceholder, Some(_)) => {}
                (other, Some(_)) => bail!(
                    "{}: only rejectPlaceholder counts rotations, not {other:?}; pick a node \
                     with node:",
                    f("rotation")
                ),
            }
            if s.action == ActionKind::ApplyPolicy && s.policy.is_none() {
                bail!("{}: required for applyPolicy", f("policy"));
            }
            if s.action == ActionKind::DeletePolicy && s.name.is_none() {
                bail!("{}: required for deletePolicy", f("name"));
            }
            if matches!(&s.node, Some(NodePick::Name(n)) if n.is_empty()) {
                bail!("{}: a NodeClaim name, e.g. {{name: api-00007}}", f("node.name"));
            }
            let editing = s.expire_after.is_some()
                || s.termination_grace_period.is_some()
                || s.limits.is_some();
            let edit = match (s.action, editing) {
                (ActionKind::EditNodePool, false) => bail!(
                    "{}: editNodePool needs expireAfter, terminationGracePeriod or limits",
                    f("action")
                ),
                (ActionKind::EditNodePool, true) => Some(PoolEdit {
                    expire_after: s
                        .expire_after
                        .as_deref()
                        .map(|e| {
                            ExpireAfter::parse_with_days(e)
                                .map_err(|err| anyhow!("{}: {err}", f("expireAfter")))
                        })
                        .transpose()?,
                    tgp: s
                        .termination_grace_period
                        .as_deref()
                        .map(|d| dur(d, &f("terminationGracePeriod")))
                        .transpose()?,
                    limits: s.limits.clone(),
                }),
                (other, true) => bail!(
                    "{}: expireAfter, terminationGracePeriod and limits belong to editNodePool, \
                     not {other:?}",
                    f("action")
                ),
                (_, false) => None,
            };
            let waits = matches!(
                s.action,
                ActionKind::RemoveAnchor | ActionKind::ReplaceNodePool | ActionKind::DeleteNodePool
            );
            match (s.stage.as_deref(), waits) {
                (None, _) | (Some("pending" | "draining"), true) => {}
                (Some(other), true) => {
                    bail!("{}: {other:?} is not a stage: pending or draining", f("stage"))
                }
                (Some(_), false) => bail!(
                    "{}: belongs to removeAnchor, replaceNodePool and deleteNodePool, not {:?}",
                    f("stage"),
                    s.action
                ),
            }
            for (k, v) in edit.as_ref().and_then(|e| e.limits.as_ref()).into_iter().flatten() {
                let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.clone());
                if quantity_millis(&q).is_none() {
                    bail!("{}: {v:?} is not a quantity", f(&format!("limits.{k}")));
                }
            }
            script.push(Step {
                at: when,
                action: s.action,
                pool: s.pool.clone(),
                node: s.node.clone().unwrap_or_default(),
                until,
                policy: s.policy.as_deref().cloned(),
                name: s.name.clone(),
                edit,
                stage: s.stage.clone(),
                rotation: s.rotation,
            });
        }
        script.sort_by_key(|s| s.at);
        let rates = self.faults.clone().unwrap_or_default();
        let cache_lag = dur(&rates.cache_lag, "faults.cacheLag")?;
        let clock_skew = dur(&rates.clock_skew, "faults.clockSkew")?;
        let delays = &self.delays;
        let registration_timeout = dur(&delays.registration_timeout, "delays.registrationTimeout")?;
        if registration_timeout <= Duration::zero() {
            bail!("delays.registrationTimeout: must be longer than 0s (Karpenter's default: 15m)");
        }
        let span = match &self.span {
            Some(text) => {
                let d = dur(text, "span")?;
                if d <= Duration::zero() || d > Duration::weeks(520) {
                    bail!("span: between 0s and 520 weeks (got {text})");
                }
                Some(d)
            }
            None => None,
        };
        Ok(Compiled {
            name: self.name.clone(),
            description: self.description.clone(),
            start: self.start,
            weeks: self.weeks,
            span,
            pools,
            policies: self.policies.clone(),
            provisioning: delays.provisioning.compile("delays.provisioning")?,
            registration: delays.registration.compile("delays.registration")?,
            ready: delays.ready.compile("delays.ready")?,
            drain: delays.drain.compile("delays.drain")?,
            failures: self.failures.clone(),
            node_repair: self.karpenter.node_repair,
            shortages,
            registration_timeout,
            script,
            faults: FaultPlan { rates, cache_lag, clock_skew },
            expect: self.expect.clone(),
            source: self.clone(),
        })
    }
}
