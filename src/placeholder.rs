//! The surge placeholder (§3.3, §3.7, §3.8): sizing, the pod itself, the limits
//! headroom check, and the predicates the reconciler asks about a placeholder once it exists
//! (`surge_ready`, the surge path, the induced claim, the reap guard).
//!
//! Pure: no I/O and no clock. Every function takes the objects it judges, and time only as a
//! parameter.
//!
//! Quantities are handled in thousandths ([`Resources`], from [`karpenter::quantity_millis`]), so
//! `500m` CPU and `16Gi` memory add and compare exactly. A quantity that does not parse is
//! skipped (the API server validated it, so this does not happen with real objects).
//!
//! Decisions recorded here (the spec is silent on them):
//!
//! - **Limits equal requests** on the pause container. Extended resources (`nvidia.com/gpu`)
//!   and hugepages are rejected by the API server without a limit equal to the request, and a
//!   namespace `LimitRange` default limit could otherwise land below the request and fail the
//!   create. The pause process uses next to nothing, so the cap never bites. The pod is
//!   therefore `Guaranteed`; on a node with the static CPU manager an integer CPU request gets
//!   exclusive cores, which is the reservation we want anyway.
//! - **No `kubernetes.io/hostname` term** in the node affinity, neither required nor preferred:
//!   Karpenter validates *preferred* node-affinity terms as strictly as required ones and drops a
//!   pod that names a restricted label (`kubernetes.io/hostname` is one) from provisioning
//!   altogether (kubernetes-sigs/karpenter `provisioner.go` `GetPendingPods` → `Validate` →
//!   `validateAffinity`, which walks the preferred terms too → `ValidateRequirement` →
//!   `IsRestrictedLabel`). Such a placeholder could only ever be absorbed, never provisioned.
//!   The candidate is avoided by its cordon (kube-scheduler filters unschedulable nodes). For
//!   the same reason a `matchNodeRequirements` key that Karpenter would reject is skipped and
//!   reported ([`KeyResolution::RestrictedByKarpenter`]).
//! - A `matchNodeRequirements` value that the pool template no longer admits is still required
//!   (never loosened into "any zone"): the placeholder then stays unschedulable, which surfaces
//!   as `SurgeUnschedulable` and rolls back at readyTimeout, never worse than forced expiry.
//!   Reported as [`KeyResolution::Unsatisfiable`].
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, Node, NodeAffinity, NodeSelector, NodeSelectorTerm, Pod,
    PodSecurityContext, PodSpec, PreferredSchedulingTerm, ResourceRequirements, SeccompProfile,
    SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::cluster::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::karpenter::{self, NODEPOOL_LABEL, NodeClaim, NodePool, NodeSelectorRequirement};
use crate::policy::settings::Effective;

/// Resource name → amount in thousandths of the unit (`cpu: 1500` is 1.5 cores).
pub type Resources = BTreeMap<String, i128>;

/// Every placeholder's name starts with this.
pub const PLACEHOLDER_PREFIX: &str = "noderotation-surge-";
/// Pairs a placeholder with its rotation: the old claim's name.
pub const SURGE_FOR_ANNOTATION: &str = "noderotation.io/surge-for";
/// The kubelet marks mirror pods of static pods with this annotation.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The node label that names one host.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The pause container's name.
pub const PAUSE_CONTAINER: &str = "pause";
/// UID and GID of the pause container (the `nobody` of the upstream pause image).
pub const PLACEHOLDER_UID: i64 = 65535;
/// Weight of each preferred `matchNodeRequirements` term (all keys weigh the same).
pub const PREFERRED_KEY_WEIGHT: i32 = 50;
/// `nodes` in a pool's `spec.limits` / `status.resources`.
pub const NODES_RESOURCE: &str = "nodes";

const MAX_NAME: usize = 63;
const HASH_HEX: usize = 12;

// ---------------------------------------------------------------------------------------------
// Name

/// The placeholder's name for a rotation of `claim_name`: deterministic, a DNS-1123 label of at
/// most 63 characters. `noderotation-surge-<claim>` when that is already a valid label;
/// otherwise (too long, or characters a label cannot hold) a sanitized, truncated claim name
/// followed by 12 hex digits of a stable FNV-1a hash of the original name, so distinct claims
/// keep distinct names.
pub fn placeholder_name(claim_name: &str) -> String {
    let sanitized: String = claim_name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }
        })
        .collect();
    let lossless = sanitized == claim_name
        && sanitized.ends_with(|c: char| c.is_ascii_alphanumeric())
        && !sanitized.is_empty();
    let plain = format!("{PLACEHOLDER_PREFIX}{sanitized}");
    if lossless && plain.len() <= MAX_NAME {
        return plain;
    }
    let hash = fnv1a64(claim_name.as_bytes()) & ((1u64 << (4 * HASH_HEX)) - 1);
    let room = MAX_NAME - PLACEHOLDER_PREFIX.len() - 1 - HASH_HEX;
    let body: String = sanitized.chars().take(room).collect();
    let body = body.trim_end_matches('-');
    if body.is_empty() {
        format!("{PLACEHOLDER_PREFIX}{hash:0w$x}", w = HASH_HEX)
    } else {
        format!("{PLACEHOLDER_PREFIX}{body}-{hash:0w$x}", w = HASH_HEX)
    }
}

/// FNV-1a, 64 bit: stable across Rust releases (unlike `DefaultHasher`), which a name that must
/// survive controller upgrades needs.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The claim a placeholder reserves capacity for (its `surge-for` annotation), if the pod is one
/// of ours.
pub fn surge_for(pod: &Pod) -> Option<&str> {
    if pod.labels().get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY_VALUE) {
        return None;
    }
    pod.annotations().get(SURGE_FOR_ANNOTATION).map(String::as_str)
}

// ---------------------------------------------------------------------------------------------
// Which pods count

/// How the sizing treats one pod found on the candidate node. The first rule that matches wins,
/// in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodClass {
    /// `spec.nodeName` is not the candidate node: not on it (defensive; the caller lists the
    /// node's pods).
    OtherNode,
    /// Phase `Succeeded` or `Failed`: holds no resources and is not recreated by a drain.
    Completed,
    /// A static pod's mirror (annotation `kubernetes.io/config.mirror`, or owned by the Node):
    /// it belongs to the machine, not to the scheduler, and is never evicted.
    Mirror,
    /// Owned by a DaemonSet (owner kind `DaemonSet`, any API group: OpenKruise's Advanced
    /// DaemonSet behaves the same). The replacement runs its own copy; counted in
    /// [`daemonset_overhead`] instead.
    DaemonSet,
    /// `deletionTimestamp` set and not owned by a StatefulSet: its controller has already
    /// replaced it. A terminating StatefulSet pod is counted, because its successor is only
    /// created after it is gone (Karpenter's `IsReschedulable` makes the same exception).
    Terminating,
    /// Pinned to specific hosts, so it cannot follow its capacity to a node that does not exist
    /// yet: a `nodeSelector` on `kubernetes.io/hostname`, or a required node affinity whose every
    /// term (terms are ORed) names hosts with `kubernetes.io/hostname In` or
    /// `metadata.name In` (matchFields). A bare `spec.nodeName` is not a pin: every bound pod
    /// has one. Pods bound to a node by a local PersistentVolume are not detected (that needs
    /// the volume objects); they are counted, which over-reserves and is safe.
    Pinned,
    /// Everything else: will be evicted by the drain and rescheduled, so it needs capacity.
    /// Bare pods (no owner) are included, as Karpenter does.
    Reschedulable,
}

/// Classifies one pod on `node_name`. See [`PodClass`] for the rules and their order.
pub fn classify(pod: &Pod, node_name: &str) -> PodClass {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.node_name.as_deref()) != Some(node_name) {
        return PodClass::OtherNode;
    }
    if is_completed(pod) {
        return PodClass::Completed;
    }
    if is_mirror(pod) {
        return PodClass::Mirror;
    }
    if is_owned_by(pod, "DaemonSet") {
        return PodClass::DaemonSet;
    }
    if pod.metadata.deletion_timestamp.is_some() && !is_owned_by(pod, "StatefulSet") {
        return PodClass::Terminating;
    }
    if spec.is_some_and(is_pinned) {
        return PodClass::Pinned;
    }
    PodClass::Reschedulable
}

fn is_completed(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

fn is_mirror(pod: &Pod) -> bool {
    pod.annotations().contains_key(MIRROR_POD_ANNOTATION) || is_owned_by(pod, "Node")
}

fn is_owned_by(pod: &Pod, kind: &str) -> bool {
    pod.owner_references().iter().any(|o| o.kind == kind)
}

fn is_pinned(spec: &PodSpec) -> bool {
    if spec.node_selector.as_ref().is_some_and(|s| s.contains_key(HOSTNAME_LABEL)) {
        return true;
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    !terms.is_empty() && terms.iter().all(term_pins_host)
}

fn term_pins_host(term: &NodeSelectorTerm) -> bool {
    let by_label = term
        .match_expressions
        .iter()
        .flatten()
        .any(|r| r.key == HOSTNAME_LABEL && r.operator == "In");
    let by_field =
        term.match_fields.iter().flatten().any(|r| r.key == "metadata.name" && r.operator == "In");
    by_label || by_field
}

// ---------------------------------------------------------------------------------------------
// Requests

/// A pod's effective requests as the scheduler computes them (`PodRequests` in
/// k8s.io/component-helpers): the sum over containers, the max with the init-container peak
/// (sidecars, i.e. init containers with `restartPolicy: Always`, run alongside and add to both),
/// pod-level requests (`spec.resources`) replacing the container sum for cpu, memory and
/// hugepages, plus `spec.overhead`. While an in-place resize is in flight a container counts
/// with the larger of its spec and its status (`allocatedResources`, actual requests), per
/// container: at least what the scheduler reserves.
pub fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = &pod.spec else { return Resources::new() };
    let statuses: Vec<_> = pod
        .status
        .iter()
        .flat_map(|s| {
            s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten())
        })
        .collect();
    let container = |c: &Container| {
        let mut r = parse_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
        for status in statuses.iter().filter(|s| s.name == c.name) {
            max_into(&mut r, &parse_list(status.allocated_resources.as_ref()));
            max_into(
                &mut r,
                &parse_list(status.resources.as_ref().and_then(|r| r.requests.as_ref())),
            );
        }
        r
    };

    let mut total = Resources::new();
    for c in &spec.containers {
        add_into(&mut total, &container(c));
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = container(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add_into(&mut total, &r);
            add_into(&mut sidecars, &r);
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut during = r;
            add_into(&mut during, &sidecars);
            max_into(&mut init_peak, &during);
        }
    }
    max_into(&mut total, &init_peak);
    let pod_level = parse_list(spec.resources.as_ref().and_then(|r| r.requests.as_ref()));
    for (name, value) in pod_level {
        if name == "cpu" || name == "memory" || name.starts_with("hugepages-") {
            total.insert(name, value);
        }
    }
    add_into(&mut total, &parse_list(spec.overhead.as_ref()));
    total
}

/// Sum of the requests of the pods on `node_name` that the drain will move
/// ([`PodClass::Reschedulable`]).
pub fn reschedulable_requests(pods: &[Pod], node_name: &str) -> Resources {
    let mut total = Resources::new();
    for pod in pods.iter().filter(|p| classify(p, node_name) == PodClass::Reschedulable) {
        add_into(&mut total, &pod_requests(pod));
    }
    total
}

/// Sum of the requests of the live DaemonSet pods among `pods` (not `Succeeded`/`Failed`):
/// what the replacement node spends on DaemonSets before any workload lands. Terminating
/// DaemonSet pods count, since their replacements will run on the new node too. Static pods
/// are not included, matching Karpenter, which subtracts only DaemonSet overhead when it
/// picks an instance type.
pub fn daemonset_overhead(pods: &[Pod]) -> Resources {
    let mut total = Resources::new();
    for pod in pods.iter().filter(|p| is_owned_by(p, "DaemonSet") && !is_completed(p)) {
        add_into(&mut total, &pod_requests(pod));
    }
    total
}

/// The result of the allocatable clamp.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Clamp {
    /// The clamped requests, zero entries dropped.
    pub requests: Resources,
    /// Resources whose request was lowered, in name order (for `SurgeClamped`).
    pub clamped: Vec<String>,
}

/// The per-resource ceiling of the placeholder: `allocatable - overhead`, floored at 0. `None`
/// when `allocatable` is empty (unknown).
pub fn clamp_limit(allocatable: &Resources, overhead: &Resources) -> Option<Resources> {
    if allocatable.is_empty() {
        return None;
    }
    Some(
        allocatable
            .iter()
            .map(|(name, a)| (name.clone(), (a - overhead.get(name).copied().unwrap_or(0)).max(0)))
            .collect(),
    )
}

/// Clamps `requests` per resource to `min(request, allocatable - overhead)`, floored at 0. An
/// empty `allocatable` (unknown) clamps nothing. A requested resource missing from a known
/// allocatable is clamped to 0: no node of this size offers it, and Karpenter cannot provision
/// for a request it does not know an instance type for.
pub fn clamp(requests: &Resources, allocatable: &Resources, overhead: &Resources) -> Clamp {
    let limit = clamp_limit(allocatable, overhead);
    let mut out = Clamp::default();
    for (name, want) in requests {
        let want = (*want).max(0);
        let got = match &limit {
            None => want,
            Some(limit) => {
                let ceiling = limit.get(name).copied().unwrap_or(0);
                if want > ceiling {
                    out.clamped.push(name.clone());
                    ceiling
                } else {
                    want
                }
            }
        };
        if got > 0 {
            out.requests.insert(name.clone(), got);
        }
    }
    out
}

/// Whether a resource name may appear in a container's `resources` (`cpu`, `memory`,
/// `ephemeral-storage`, `hugepages-*`, and extended resources: a qualified name outside the
/// `kubernetes.io` domain). Allocatable also lists `pods` and the like, which may not.
pub fn is_container_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage")
        || name.starts_with("hugepages-")
        || (name.contains('/')
            && !name.contains("kubernetes.io/")
            && !name.starts_with("requests."))
}

// ---------------------------------------------------------------------------------------------
// Node affinity (§3.7)

/// How one `matchNodeRequirements` key was turned into a placeholder requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyResolution {
    /// From the candidate node's label, admitted by the pool template.
    NodeLabel,
    /// From the claim's `spec.requirements` (`In` values intersected with the pool template, or
    /// `Gt`/`Lt` carried over exactly).
    ClaimRequirement,
    /// Neither the node nor the claim has it: skipped, never guessed.
    Absent,
    /// Karpenter rejects pods that name this label (a restricted label domain): skipped, since
    /// naming it would stop Karpenter from provisioning for the placeholder at all.
    RestrictedByKarpenter,
    /// The source values are not admitted by the pool template's requirements for the key. The
    /// source values are required anyway (never loosened), so the placeholder cannot schedule.
    Unsatisfiable,
}

/// One key of `matchNodeRequirements`, as resolved for this placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyReport {
    pub key: String,
    /// From `required` (else `preferred`).
    pub required: bool,
    pub resolution: KeyResolution,
}

type K8sRequirement = k8s_openapi::api::core::v1::NodeSelectorRequirement;

/// Resolves one key: the node label (authoritative), else the claim's `In` values, intersected
/// with what the pool template admits; else the claim's `Gt`/`Lt` carried over exactly.
fn resolve_key(
    key: &str,
    node: Option<&Node>,
    claim: &NodeClaim,
    pool: &NodePool,
) -> (Vec<K8sRequirement>, KeyResolution) {
    if karpenter_rejects_label(key) {
        return (Vec::new(), KeyResolution::RestrictedByKarpenter);
    }
    let pool_reqs: Vec<&NodeSelectorRequirement> =
        pool.spec.template.spec.requirements.iter().filter(|r| r.key == key).collect();
    let claim_reqs: Vec<&NodeSelectorRequirement> =
        claim.spec.requirements.iter().filter(|r| r.key == key).collect();

    let (values, source) = if let Some(v) = node.and_then(|n| n.labels().get(key)) {
        (vec![v.clone()], KeyResolution::NodeLabel)
    } else {
        let mut values: Option<Vec<String>> = None;
        for r in claim_reqs.iter().filter(|r| r.operator == "In" && !r.values.is_empty()) {
            values = Some(match values {
                None => r.values.clone(),
                Some(acc) => acc.into_iter().filter(|v| r.values.contains(v)).collect(),
            });
        }
        match values {
            Some(values) => (values, KeyResolution::ClaimRequirement),
            None => {
                let numeric: Vec<K8sRequirement> = claim_reqs
                    .iter()
                    .filter(|r| r.operator == "Gt" || r.operator == "Lt")
                    .map(|r| requirement(key, &r.operator, r.values.clone()))
                    .collect();
                if numeric.is_empty() {
                    return (Vec::new(), KeyResolution::Absent);
                }
                return (numeric, KeyResolution::ClaimRequirement);
            }
        }
    };
    let admitted: Vec<String> =
        values.iter().filter(|v| pool_reqs.iter().all(|r| admits(r, v))).cloned().collect();
    if admitted.is_empty() {
        (vec![requirement(key, "In", dedup(values))], KeyResolution::Unsatisfiable)
    } else {
        (vec![requirement(key, "In", dedup(admitted))], source)
    }
}

fn dedup(values: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    values.into_iter().filter(|v| seen.insert(v.clone())).collect()
}

fn requirement(key: &str, operator: &str, values: Vec<String>) -> K8sRequirement {
    K8sRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: if values.is_empty() { None } else { Some(values) },
    }
}

/// Whether a pool template requirement admits a node label value (node-selector semantics;
/// `Gt`/`Lt` compare integers, a non-integer never matches). An unknown operator admits.
fn admits(req: &NodeSelectorRequirement, value: &str) -> bool {
    let bound = || req.values.first().and_then(|b| b.parse::<i64>().ok());
    match req.operator.as_str() {
        "In" => req.values.iter().any(|v| v == value),
        "NotIn" => !req.values.iter().any(|v| v == value),
        "Exists" => true,
        "DoesNotExist" => false,
        "Gt" => matches!((value.parse::<i64>().ok(), bound()), (Some(v), Some(b)) if v > b),
        "Lt" => matches!((value.parse::<i64>().ok(), bound()), (Some(v), Some(b)) if v < b),
        _ => true,
    }
}

/// Whether Karpenter refuses to provision for a pod whose node selector or node affinity
/// (required or preferred) names `key`: mirrors `IsRestrictedLabel` of karpenter.sh/v1
/// (aliases normalized; well-known labels allowed; the `kubernetes.io`, `k8s.io` and
/// `karpenter.sh` domains restricted except `node.kubernetes.io`,
/// `node-restriction.kubernetes.io` and `kops.k8s.io`; `kubernetes.io/hostname` restricted).
pub fn karpenter_rejects_label(key: &str) -> bool {
    let key = match key {
        "failure-domain.beta.kubernetes.io/zone" => "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region" => "topology.kubernetes.io/region",
        "beta.kubernetes.io/arch" => "kubernetes.io/arch",
        "beta.kubernetes.io/os" => "kubernetes.io/os",
        "beta.kubernetes.io/instance-type" => "node.kubernetes.io/instance-type",
        other => other,
    };
    const WELL_KNOWN: [&str; 8] = [
        NODEPOOL_LABEL,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        "node.kubernetes.io/windows-build",
    ];
    if WELL_KNOWN.contains(&key) {
        return false;
    }
    let domain = key.split_once('/').map_or("", |(d, _)| d);
    if ["kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"]
        .iter()
        .any(|e| domain.ends_with(e))
    {
        return false;
    }
    ["kubernetes.io", "k8s.io", "karpenter.sh"].iter().any(|r| domain.ends_with(r))
        || key == HOSTNAME_LABEL
}

/// Tolerations for the pool template's taints: `Equal` with the value, or `Exists` when the
/// taint has none. Startup taints need no toleration (Karpenter's contract), and the placeholder
/// deliberately tolerates nothing else (not `karpenter.sh/disrupted`, not the cordon).
pub fn pool_tolerations(pool: &NodePool) -> Vec<Toleration> {
    pool.spec
        .template
        .spec
        .taints
        .iter()
        .map(|t| {
            let value = t.value.clone().filter(|v| !v.is_empty());
            Toleration {
                key: Some(t.key.clone()),
                operator: Some(if value.is_some() { "Equal" } else { "Exists" }.to_string()),
                value,
                effect: Some(t.effect.clone()),
                toleration_seconds: None,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The placeholder

/// Everything [`build_placeholder`] needs, read by the caller.
#[derive(Debug, Clone, Copy)]
pub struct PlaceholderInput<'a> {
    pub pool: &'a NodePool,
    /// The candidate (old) claim.
    pub claim: &'a NodeClaim,
    /// The candidate's Node, when it is registered.
    pub node: Option<&'a Node>,
    /// Pods bound to the candidate node (all namespaces).
    pub pods: &'a [Pod],
    pub settings: &'a Effective,
    /// The controller's namespace.
    pub namespace: &'a str,
    /// The negative-priority, `preemptionPolicy: Never` PriorityClass.
    pub priority_class: &'a str,
    pub pause_image: &'a str,
}

/// A placeholder ready to create, and how it was sized.
#[derive(Debug, Clone, PartialEq)]
pub struct Placeholder {
    pub pod: Pod,
    /// What the pod requests (and limits), zero entries dropped.
    pub requests: Resources,
    /// The candidate's DaemonSet overhead subtracted by the clamp.
    pub daemonset_overhead: Resources,
    /// Resources lowered by the clamp, in name order: non-empty → `SurgeClamped`.
    pub clamped: Vec<String>,
    /// Sized as a whole node (§3.3) rather than from the pods.
    pub whole_node: bool,
    /// Every `matchNodeRequirements` key (required first, then preferred) and how it resolved.
    pub keys: Vec<KeyReport>,
}

/// Why no placeholder was built (`SurgeClampRefused`; the rotation rolls back).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderRefused {
    /// The clamp lowered every request to 0: the DaemonSets alone fill a node of this size.
    #[error(
        "every request is 0 after the allocatable clamp (clamped: {}): DaemonSet overhead fills \
         the node's allocatable",
        .clamped.join(", ")
    )]
    ClampedToZero { clamped: Vec<String> },
    /// The candidate's reschedulable pods request nothing, so there is no capacity to reserve.
    #[error("the node's reschedulable pods request no resources: nothing to reserve")]
    NothingToReserve,
}

/// Builds the surge placeholder for `input.claim` (§3.3, §3.7).
///
/// Requests: the reschedulable pods' requests clamped to `allocatable - DaemonSet overhead`;
/// with whole-node reservation, the clamp limit itself (container resources only). Allocatable
/// is the claim's `status.allocatable`, else the Node's (when the claim does not report it);
/// with neither, nothing is clamped and whole-node reservation falls back to the pod sum.
pub fn build_placeholder(input: &PlaceholderInput) -> Result<Placeholder, PlaceholderRefused> {
    let claim_name = input.claim.name_any();
    let node_name = input
        .node
        .map(|n| n.name_any())
        .or_else(|| input.claim.status.as_ref().and_then(|s| s.node_name.clone()));
    let pods_on_node: Vec<Pod> = match &node_name {
        Some(n) => input
            .pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n))
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    let overhead = daemonset_overhead(&pods_on_node);
    let allocatable = allocatable(input.claim, input.node);

    let whole_node_limit = if input.settings.whole_node_reservation {
        clamp_limit(&allocatable, &overhead).map(|limit| {
            limit
                .into_iter()
                .filter(|(name, v)| *v > 0 && is_container_resource(name))
                .collect::<Resources>()
        })
    } else {
        None
    };
    let whole_node = whole_node_limit.is_some();
    let (requests, clamped) = match whole_node_limit {
        Some(limit) => (limit, Vec::new()),
        None => {
            let sum = node_name
                .as_deref()
                .map(|n| reschedulable_requests(&pods_on_node, n))
                .unwrap_or_default();
            if sum.values().all(|v| *v <= 0) {
                return Err(PlaceholderRefused::NothingToReserve);
            }
            let c = clamp(&sum, &allocatable, &overhead);
            (c.requests, c.clamped)
        }
    };
    if requests.is_empty() {
        return Err(if clamped.is_empty() {
            PlaceholderRefused::NothingToReserve
        } else {
            PlaceholderRefused::ClampedToZero { clamped }
        });
    }

    let mut keys = Vec::new();
    let mut required = Vec::new();
    let mut preferred = Vec::new();
    let mnr = &input.settings.match_node_requirements;
    for (list, is_required) in [(&mnr.required, true), (&mnr.preferred, false)] {
        for key in list {
            let (reqs, resolution) = resolve_key(key, input.node, input.claim, input.pool);
            keys.push(KeyReport { key: key.clone(), required: is_required, resolution });
            if reqs.is_empty() {
                continue;
            }
            if is_required {
                required.extend(reqs);
            } else {
                preferred.push(PreferredSchedulingTerm {
                    weight: PREFERRED_KEY_WEIGHT,
                    preference: NodeSelectorTerm {
                        match_expressions: Some(reqs),
                        match_fields: None,
                    },
                });
            }
        }
    }
    let affinity = (!required.is_empty() || !preferred.is_empty()).then(|| Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: (!required.is_empty()).then(
                || NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(required),
                        match_fields: None,
                    }],
                },
            ),
            preferred_during_scheduling_ignored_during_execution: (!preferred.is_empty())
                .then_some(preferred),
        }),
        ..Affinity::default()
    });

    let tolerations = pool_tolerations(input.pool);
    let quantities: BTreeMap<String, Quantity> =
        requests.iter().map(|(k, v)| (k.clone(), millis_quantity(*v))).collect();
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(placeholder_name(&claim_name)),
            namespace: Some(input.namespace.to_string()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_string(),
                MANAGED_BY_VALUE.to_string(),
            )])),
            annotations: Some(BTreeMap::from([(SURGE_FOR_ANNOTATION.to_string(), claim_name)])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: PAUSE_CONTAINER.to_string(),
                image: Some(input.pause_image.to_string()),
                image_pull_policy: Some("IfNotPresent".to_string()),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities.clone()),
                    limits: Some(quantities),
                    claims: None,
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    run_as_non_root: Some(true),
                    run_as_user: Some(PLACEHOLDER_UID),
                    run_as_group: Some(PLACEHOLDER_UID),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".to_string()]),
                        add: None,
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            priority_class_name: Some(input.priority_class.to_string()),
            node_selector: Some(BTreeMap::from([(
                NODEPOOL_LABEL.to_string(),
                input.pool.name_any(),
            )])),
            tolerations: (!tolerations.is_empty()).then_some(tolerations),
            affinity,
            termination_grace_period_seconds: Some(0),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            restart_policy: Some("Always".to_string()),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(PLACEHOLDER_UID),
                run_as_group: Some(PLACEHOLDER_UID),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_string(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            ..PodSpec::default()
        }),
        status: None,
    };
    Ok(Placeholder { pod, requests, daemonset_overhead: overhead, clamped, whole_node, keys })
}

/// The claim's `status.allocatable`, else the Node's; empty when neither reports it.
fn allocatable(claim: &NodeClaim, node: Option<&Node>) -> Resources {
    let from_claim = parse_list(claim.status.as_ref().map(|s| &s.allocatable));
    if !from_claim.is_empty() {
        return from_claim;
    }
    parse_list(node.and_then(|n| n.status.as_ref()).and_then(|s| s.allocatable.as_ref()))
}

// ---------------------------------------------------------------------------------------------
// Headroom (§3.3)

/// What a surge for `candidate` may add to its pool's `status.resources`: a node like the
/// candidate (its `status.allocatable`, every resource, since Karpenter sums node resources
/// per pool) plus `nodes: 1`, because the surge may need a new node (whether the placeholder
/// will be absorbed instead is unknown when the check runs). An estimate: Karpenter counts the
/// new node's capacity, a little more than its allocatable, and may pick a smaller instance
/// when the placeholder is smaller than the candidate.
pub fn footprint(candidate: &NodeClaim) -> Resources {
    let mut out = parse_list(candidate.status.as_ref().map(|s| &s.allocatable));
    *out.entry(NODES_RESOURCE.to_string()).or_insert(0) += 1000;
    out
}

/// One node's worth of the pool's resources: per resource, the largest [`footprint`] among its
/// claims (at least one node). What a surge would take from `spec.limits` (`NoLimitsHeadroom`).
pub fn node_worth<'a>(claims: impl Iterator<Item = &'a NodeClaim>) -> Resources {
    let mut out = Resources::from([(NODES_RESOURCE.to_string(), 1000)]);
    for claim in claims {
        for (resource, amount) in footprint(claim) {
            let held = out.entry(resource).or_insert(0);
            *held = (*held).max(amount);
        }
    }
    out
}

/// `InsufficientHeadroom(resource, want, remaining, limit)`, amounts in thousandths. Compare
/// whole values to deduplicate the warning per distinct tuple.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shortfall {
    pub resource: String,
    /// The footprint's amount of `resource`.
    pub want: i128,
    /// `limit - status.resources`, floored at 0.
    pub remaining: i128,
    pub limit: i128,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: the surge needs {} but only {} of the limit {} remains",
            self.resource,
            millis_quantity(self.want).0,
            millis_quantity(self.remaining).0,
            millis_quantity(self.limit).0
        )
    }
}

/// §3.3: for each resource in the pool's `spec.limits`,
/// `status.resources + footprint <= limit`; else the first shortfall in resource-name order. A
/// limit that does not parse is skipped (Karpenter rejects it itself); a resource missing from
/// `status.resources` is in use 0.
pub fn surge_headroom(pool: &NodePool, footprint: &Resources) -> Result<(), Shortfall> {
    let empty = BTreeMap::new();
    let used = pool.status.as_ref().map_or(&empty, |s| &s.resources);
    for (resource, limit) in pool.spec.limits.iter().flatten() {
        let Some(limit) = karpenter::quantity_millis(limit) else { continue };
        let in_use = used.get(resource).and_then(karpenter::quantity_millis).unwrap_or(0);
        let want = footprint.get(resource).copied().unwrap_or(0);
        if in_use + want > limit {
            return Err(Shortfall {
                resource: resource.clone(),
                want,
                remaining: (limit - in_use).max(0),
                limit,
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// After creation

/// §3.3 `surge_ready`: the placeholder is `Running`, not terminating, and bound to
/// `host`, a Ready node that is not being deleted, is not the candidate's node, and whose
/// `karpenter.sh/nodepool` label is `pool`. `host` must be the Node named by the placeholder's
/// `spec.nodeName` (a mismatched or missing host is not ready).
pub fn surge_ready(
    placeholder: &Pod,
    host: Option<&Node>,
    candidate_node: Option<&str>,
    pool: &str,
) -> bool {
    let running = placeholder.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let Some(bound) = placeholder.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
        return false;
    };
    let Some(host) = host else { return false };
    running
        && placeholder.metadata.deletion_timestamp.is_none()
        && host.metadata.name.as_deref() == Some(bound)
        && candidate_node != Some(bound)
        && host.metadata.deletion_timestamp.is_none()
        && host.labels().get(NODEPOOL_LABEL).map(String::as_str) == Some(pool)
        && node_ready(host)
}

fn node_ready(node: &Node) -> bool {
    node.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// How the surge capacity came about (§3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SurgePath {
    /// Karpenter provisioned a new node for the placeholder.
    Provisioned,
    /// The scheduler packed the placeholder onto spare capacity that already existed.
    Absorbed,
}

impl SurgePath {
    pub fn as_str(self) -> &'static str {
        match self {
            SurgePath::Provisioned => "provisioned",
            SurgePath::Absorbed => "absorbed",
        }
    }
}

impl fmt::Display for SurgePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `provisioned` when the host's claim was created at or after the rotation's `started-at`,
/// `absorbed` when before, `None` when the host claim (or its creation time) is unknown.
pub fn surge_path(
    host_claim_created: Option<DateTime<Utc>>,
    started_at: DateTime<Utc>,
) -> Option<SurgePath> {
    host_claim_created.map(|created| {
        if created >= started_at { SurgePath::Provisioned } else { SurgePath::Absorbed }
    })
}

/// The claim behind a node: the one whose `status.nodeName` is `node_name`, else the one whose
/// `status.providerID` is the Node's `spec.providerID`.
pub fn claim_of_node<'a>(
    node_name: &str,
    node: Option<&Node>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
) -> Option<&'a NodeClaim> {
    let claims: Vec<&NodeClaim> = claims.into_iter().collect();
    let by_name = claims
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name));
    if let Some(c) = by_name {
        return Some(c);
    }
    let provider_id = node.and_then(|n| n.spec.as_ref()).and_then(|s| s.provider_id.as_deref())?;
    claims
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
}

/// How the induced surge claim was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InducedVia {
    /// The claim of the node the placeholder is bound to.
    Placeholder,
    /// §3.8 fallback: the pool's only claim created at or after `started-at` that is not Ready:
    /// its node has not registered, or registered and never turned Ready.
    NotReadyClaim,
}

/// The surge claim a rotation induced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InducedClaim {
    pub name: String,
    pub via: InducedVia,
}

/// Resolves the induced surge claim (§3.8), for the `surge-claim` annotation and the
/// readyTimeout reap. Only claims of `pool` are considered.
///
/// 1. A placeholder bound to a node: that node's claim ([`claim_of_node`]; `host` is the Node
///    of the placeholder's `spec.nodeName`, for the providerID match). If the claim is not
///    found, `None`: a bound placeholder means the surge host is registered, so an
///    unregistered claim would be somebody else's.
/// 2. Otherwise (no placeholder, or not bound yet): the pool's claim created at or after
///    `started_at` that is not Ready (its `Ready` condition is not True: the node has not
///    registered, or registered and never turned Ready), not being deleted, if there is exactly
///    one. Several is `None`: an ordinary scale-up raced the surge, and a claim that cannot be
///    attributed is never reaped. A node that never turns Ready never gets the placeholder
///    bound (the scheduler skips it), so without this fallback it would be billed until
///    Karpenter's own repair, far past readyTimeout (§4.4).
///
/// The result may be an absorbing host (created before `started_at`); [`reap_allowed`] keeps
/// those.
pub fn induced_claim<'a>(
    placeholder: Option<&Pod>,
    host: Option<&Node>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    pool: &str,
    started_at: DateTime<Utc>,
) -> Option<InducedClaim> {
    let pool_claims: Vec<&NodeClaim> =
        claims.into_iter().filter(|c| c.node_pool() == Some(pool)).collect();
    if let Some(bound) =
        placeholder.and_then(|p| p.spec.as_ref()).and_then(|s| s.node_name.as_deref())
    {
        return claim_of_node(bound, host, pool_claims)
            .map(|c| InducedClaim { name: c.name_any(), via: InducedVia::Placeholder });
    }
    let mut fresh = pool_claims.into_iter().filter(|c| {
        c.created().is_some_and(|t| t >= started_at) && !c.is_deleting() && !c.is_ready()
    });
    match (fresh.next(), fresh.next()) {
        (Some(only), None) => {
            Some(InducedClaim { name: only.name_any(), via: InducedVia::NotReadyClaim })
        }
        _ => None,
    }
}

/// The readyTimeout reap guard (§3.8): the surge claim may be deleted only if it was
/// created at or after `started_at` (an absorbing host, created before, is never reaped; an
/// unknown creation time is not reaped) AND its node hosts nothing but the placeholder the
/// controller created (`placeholder_uid`, the uid recorded on the claim; a pod that merely
/// carries its name and label is somebody's pod; no recorded uid: no pod is ours) and pods that
/// belong to the node itself: DaemonSet pods, static (mirror) pods, and completed pods, which
/// hold nothing.
pub fn reap_allowed(
    surge_claim: &NodeClaim,
    started_at: DateTime<Utc>,
    pods_on_host: &[Pod],
    placeholder_uid: Option<&str>,
) -> bool {
    let fresh = surge_claim.created().is_some_and(|t| t >= started_at);
    fresh
        && pods_on_host.iter().all(|p| {
            let ours = placeholder_uid.is_some() && p.metadata.uid.as_deref() == placeholder_uid;
            ours || is_owned_by(p, "DaemonSet") || is_mirror(p) || is_completed(p)
        })
}

/// The scheduler's explanation while the placeholder cannot be placed: from a `PodScheduled`
/// condition with status `False`, `"<reason>: <message>"` (either part alone when the other is
/// empty). `None` when the pod is scheduled or the scheduler has not reported yet. The text is
/// the detail for the deduplicated `SurgeUnschedulable` event.
pub fn unschedulable_reason(placeholder: &Pod) -> Option<String> {
    let cond = placeholder
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    let reason = cond.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    let message = cond.message.as_deref().map(str::trim).filter(|m| !m.is_empty());
    Some(match (reason, message) {
        (Some(r), Some(m)) => format!("{r}: {m}"),
        (Some(r), None) => r.to_string(),
        (None, Some(m)) => m.to_string(),
        (None, None) => "Unschedulable".to_string(),
    })
}

// ---------------------------------------------------------------------------------------------
// Quantity helpers

fn parse_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
    list.iter()
        .flat_map(|l| l.iter())
        .filter_map(|(k, v)| Some((k.clone(), karpenter::quantity_millis(v)?)))
        .collect()
}

fn add_into(acc: &mut Resources, other: &Resources) {
    for (k, v) in other {
        *acc.entry(k.clone()).or_insert(0) += v;
    }
}

fn max_into(acc: &mut Resources, other: &Resources) {
    for (k, v) in other {
        let slot = acc.entry(k.clone()).or_insert(*v);
        *slot = (*slot).max(*v);
    }
}

/// A quantity from thousandths: whole units when exact (`4`, `17179869184`), else milli-units
/// (`1500m`).
pub fn millis_quantity(millis: i128) -> Quantity {
    if millis % 1000 == 0 {
        Quantity(format!("{}", millis / 1000))
    } else {
        Quantity(format!("{millis}m"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::settings::tests::spec_with;
    use chrono::TimeZone;
    use serde_json::{Value, json};

    fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 3, h, m, 0).single().unwrap_or_else(|| panic!("time"))
    }

    const NODE: &str = "ip-10-0-1-1";

    /// A running pod on NODE with one container requesting `cpu` / `memory`.
    fn pod(name: &str, cpu: &str, memory: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "app"},
            "spec": {"nodeName": NODE, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ]},
            "status": {"phase": "Running"}
        })
    }

    fn with(mut base: Value, pointer: &str, value: Value) -> Value {
        // Create intermediate objects as needed, then set.
        let mut cur = &mut base;
        let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                cur[*part] = value;
                break;
            }
            if cur.get(*part).is_none() {
                cur[*part] = json!({});
            }
            cur = &mut cur[*part];
        }
        base
    }

    fn owned_by(p: Value, kind: &str) -> Value {
        with(
            p,
            "/metadata/ownerReferences",
            json!([{"apiVersion": "apps/v1", "kind": kind, "name": "x", "uid": "u", "controller": true}]),
        )
    }

    fn m(s: &str) -> i128 {
        karpenter::quantity_millis(&Quantity(s.into())).unwrap_or_else(|| panic!("{s}"))
    }

    fn res(pairs: &[(&str, &str)]) -> Resources {
        pairs.iter().map(|(k, v)| (k.to_string(), m(v))).collect()
    }

    fn pool() -> NodePool {
        from(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general"},
            "spec": {
                "template": {"spec": {
                    "requirements": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In",
                         "values": ["ap-northeast-1a", "ap-northeast-1c"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]},
                        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["3"]}
                    ],
                    "taints": [
                        {"key": "dedicated", "value": "api", "effect": "NoSchedule"},
                        {"key": "gpu", "effect": "NoExecute"}
                    ]
                }},
                "limits": {"cpu": "100", "memory": "400Gi", "nodes": "10"}
            },
            "status": {"resources": {"cpu": "90", "memory": "300Gi", "nodes": "9"}}
        }))
    }

    fn claim() -> NodeClaim {
        from(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "general-x7k2p", "labels": {"karpenter.sh/nodepool": "general"},
                         "creationTimestamp": "2026-05-20T03:04:05Z"},
            "spec": {"requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In",
                 "values": ["ap-northeast-1a", "ap-northeast-1b"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                {"key": "karpenter.k8s.aws/instance-memory", "operator": "Gt", "values": ["8191"]},
                {"key": "karpenter.k8s.aws/instance-memory", "operator": "Lt", "values": ["65537"]}
            ]},
            "status": {"nodeName": NODE, "providerID": "aws:///ap-northeast-1a/i-1",
                       "allocatable": {"cpu": "3920m", "memory": "14162Mi", "pods": "58",
                                       "ephemeral-storage": "17Gi"}}
        }))
    }

    fn node(labels: Value) -> Node {
        from(json!({
            "metadata": {"name": NODE, "labels": labels},
            "spec": {"providerID": "aws:///ap-northeast-1a/i-1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
    }

    fn settings(whole_node: bool, required: &[&str], preferred: &[&str]) -> Effective {
        let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
        spec.surge.whole_node_reservation.enabled = whole_node;
        spec.surge.match_node_requirements.required =
            required.iter().map(|s| s.to_string()).collect();
        spec.surge.match_node_requirements.preferred =
            preferred.iter().map(|s| s.to_string()).collect();
        Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"))
    }

    fn build(
        pool: &NodePool,
        claim: &NodeClaim,
        node: Option<&Node>,
        pods: &[Pod],
        settings: &Effective,
    ) -> Result<Placeholder, PlaceholderRefused> {
        build_placeholder(&PlaceholderInput {
            pool,
            claim,
            node,
            pods,
            settings,
            namespace: "noderotation-system",
            priority_class: "noderotation-placeholder",
            pause_image: "registry.k8s.io/pause:3.10",
        })
    }

    fn built(r: Result<Placeholder, PlaceholderRefused>) -> Placeholder {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    fn node_affinity(p: &Placeholder) -> NodeAffinity {
        p.pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.clone())
            .and_then(|a| a.node_affinity)
            .unwrap_or_default()
    }

    fn required_exprs(p: &Placeholder) -> Vec<(String, String, Vec<String>)> {
        node_affinity(p)
            .required_during_scheduling_ignored_during_execution
            .map(|r| r.node_selector_terms)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|t| t.match_expressions.unwrap_or_default())
            .map(|r| (r.key, r.operator, r.values.unwrap_or_default()))
            .collect()
    }

    // --- name -----------------------------------------------------------------------------

    #[test]
    fn name_is_plain_when_it_fits() {
        assert_eq!(placeholder_name("general-x7k2p"), "noderotation-surge-general-x7k2p");
    }

    #[test]
    fn long_or_unlabelable_names_are_truncated_and_hashed() {
        let long = "a-very-long-node-pool-name-that-goes-on-and-on-and-on-x7k2p";
        let name = placeholder_name(long);
        assert!(name.len() <= 63, "{name} ({})", name.len());
        assert!(name.starts_with("noderotation-surge-a-very-long"));
        assert_eq!(name, placeholder_name(long), "deterministic");
        assert_ne!(name, placeholder_name(&format!("{long}2")), "distinct claims stay distinct");
        // Dots (valid in a claim name, not in a label) force the hash so `a.b` != `a-b`.
        let dotted = placeholder_name("pool.v2-abcde");
        assert!(dotted.starts_with("noderotation-surge-pool-v2-abcde-"));
        assert_ne!(dotted, placeholder_name("pool-v2-abcde"));
        for n in [name, dotted, placeholder_name(&"x".repeat(253)), placeholder_name("A.")] {
            assert!(n.len() <= 63);
            assert!(
                n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
            assert!(n.ends_with(|c: char| c.is_ascii_alphanumeric()), "{n}");
        }
        // Exactly 63 stays plain; 64 hashes.
        let fits = "x".repeat(63 - PLACEHOLDER_PREFIX.len());
        assert_eq!(placeholder_name(&fits), format!("{PLACEHOLDER_PREFIX}{fits}"));
        assert_ne!(placeholder_name(&format!("{fits}y")), format!("{PLACEHOLDER_PREFIX}{fits}y"));
    }

    // --- exclusions -----------------------------------------------------------------------

    #[test]
    fn each_exclusion_rule() {
        let base = pod("p", "100m", "10Mi");
        let cases: Vec<(Value, PodClass)> = vec![
            (base.clone(), PodClass::Reschedulable),
            (with(base.clone(), "/spec/nodeName", json!("other")), PodClass::OtherNode),
            (with(base.clone(), "/status/phase", json!("Succeeded")), PodClass::Completed),
            (with(base.clone(), "/status/phase", json!("Failed")), PodClass::Completed),
            (with(base.clone(), "/status/phase", json!("Pending")), PodClass::Reschedulable),
            (
                with(
                    base.clone(),
                    "/metadata/annotations",
                    json!({"kubernetes.io/config.mirror": "abc"}),
                ),
                PodClass::Mirror,
            ),
            (owned_by(base.clone(), "Node"), PodClass::Mirror),
            (owned_by(base.clone(), "DaemonSet"), PodClass::DaemonSet),
            (owned_by(base.clone(), "ReplicaSet"), PodClass::Reschedulable),
            (
                with(base.clone(), "/metadata/deletionTimestamp", json!("2026-06-03T01:00:00Z")),
                PodClass::Terminating,
            ),
            (
                owned_by(
                    with(
                        base.clone(),
                        "/metadata/deletionTimestamp",
                        json!("2026-06-03T01:00:00Z"),
                    ),
                    "StatefulSet",
                ),
                PodClass::Reschedulable,
            ),
            (
                with(base.clone(), "/spec/nodeSelector", json!({"kubernetes.io/hostname": NODE})),
                PodClass::Pinned,
            ),
            (
                with(
                    base.clone(),
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}}}),
                ),
                PodClass::Pinned,
            ),
            (
                with(
                    base.clone(),
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}),
                ),
                PodClass::Pinned,
            ),
            // One term could land anywhere in the zone: not pinned.
            (
                with(
                    base.clone(),
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]},
                        {"matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}
                    ]}}}),
                ),
                PodClass::Reschedulable,
            ),
            // NotIn on the hostname is avoidance, not a pin.
            (
                with(
                    base.clone(),
                    "/spec/affinity",
                    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["x"]}]}]}}}),
                ),
                PodClass::Reschedulable,
            ),
        ];
        for (i, (p, want)) in cases.into_iter().enumerate() {
            assert_eq!(classify(&from(p), NODE), want, "case {i}");
        }
    }

    #[test]
    fn reschedulable_sum_skips_excluded_pods_and_daemonsets_are_overhead() {
        let pods: Vec<Pod> = vec![
            from(pod("a", "500m", "1Gi")),
            from(pod("b", "1500m", "2Gi")),
            from(owned_by(pod("ds", "200m", "256Mi"), "DaemonSet")),
            from(with(pod("done", "4", "8Gi"), "/status/phase", json!("Succeeded"))),
            from(with(
                pod("static", "1", "1Gi"),
                "/metadata/annotations",
                json!({"kubernetes.io/config.mirror": "x"}),
            )),
            from(with(
                pod("pinned", "1", "1Gi"),
                "/spec/nodeSelector",
                json!({"kubernetes.io/hostname": NODE}),
            )),
        ];
        assert_eq!(reschedulable_requests(&pods, NODE), res(&[("cpu", "2"), ("memory", "3Gi")]));
        assert_eq!(daemonset_overhead(&pods), res(&[("cpu", "200m"), ("memory", "256Mi")]));
        // A completed DaemonSet pod holds nothing.
        let done_ds = from(with(
            owned_by(pod("ds2", "1", "1Gi"), "DaemonSet"),
            "/status/phase",
            json!("Failed"),
        ));
        assert!(daemonset_overhead(&[done_ds]).is_empty());
    }

    #[test]
    fn pod_requests_follow_the_scheduler() {
        // Regular init container larger than the containers: the init peak wins for cpu.
        let p: Pod = from(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": NODE,
                "initContainers": [
                    {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}
                ],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
                ],
                "overhead": {"cpu": "100m", "memory": "10Mi"}
            }
        }));
        assert_eq!(pod_requests(&p), res(&[("cpu", "2100m"), ("memory", "1034Mi")]));

        // Sidecar (restartPolicy Always) adds to the containers and to later init containers.
        let p: Pod = from(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": NODE,
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "300m", "memory": "64Mi"}}},
                    {"name": "migrate", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}
                ],
                "containers": [
                    {"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
                ]
            }
        }));
        // containers 500m + sidecar 300m = 800m; init peak = migrate 1 + sidecar 300m = 1300m.
        assert_eq!(pod_requests(&p), res(&[("cpu", "1300m"), ("memory", "1088Mi")]));

        // Pod-level requests replace cpu/memory; other resources stay per container.
        let p: Pod = from(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": NODE,
                "resources": {"requests": {"cpu": "3", "memory": "4Gi"}},
                "containers": [{"name": "app", "resources": {"requests": {
                    "cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]
            }
        }));
        assert_eq!(
            pod_requests(&p),
            res(&[("cpu", "3"), ("memory", "4Gi"), ("nvidia.com/gpu", "1")])
        );

        // An in-flight resize counts with the larger of spec and status.
        let p: Pod = from(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": NODE, "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "app", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "allocatedResources": {"cpu": "2", "memory": "512Mi"}}]}
        }));
        assert_eq!(pod_requests(&p), res(&[("cpu", "2"), ("memory", "1Gi")]));
    }

    // --- clamp ----------------------------------------------------------------------------

    #[test]
    fn clamp_rules() {
        let alloc = res(&[("cpu", "4"), ("memory", "16Gi"), ("pods", "58")]);
        let ds = res(&[("cpu", "500m"), ("memory", "1Gi")]);
        // Under the limit: untouched.
        let c = clamp(&res(&[("cpu", "2"), ("memory", "8Gi")]), &alloc, &ds);
        assert_eq!(c.requests, res(&[("cpu", "2"), ("memory", "8Gi")]));
        assert!(c.clamped.is_empty());
        // Over: lowered to allocatable - overhead, and reported.
        let c = clamp(&res(&[("cpu", "6"), ("memory", "8Gi")]), &alloc, &ds);
        assert_eq!(c.requests, res(&[("cpu", "3500m"), ("memory", "8Gi")]));
        assert_eq!(c.clamped, ["cpu"]);
        // Overhead above allocatable floors at 0 and drops the resource.
        let c = clamp(&res(&[("cpu", "1"), ("memory", "1Gi")]), &alloc, &res(&[("cpu", "5")]));
        assert_eq!(c.requests, res(&[("memory", "1Gi")]));
        assert_eq!(c.clamped, ["cpu"]);
        // Unknown allocatable: nothing is clamped.
        let c = clamp(&res(&[("cpu", "64")]), &Resources::new(), &ds);
        assert_eq!(c.requests, res(&[("cpu", "64")]));
        assert!(c.clamped.is_empty());
        // A resource the node does not offer is clamped to 0.
        let c = clamp(&res(&[("cpu", "1"), ("example.com/fpga", "1")]), &alloc, &ds);
        assert_eq!(c.requests, res(&[("cpu", "1")]));
        assert_eq!(c.clamped, ["example.com/fpga"]);
    }

    #[test]
    fn build_clamps_and_reports() {
        let (p, c, n) = (pool(), claim(), node(json!({})));
        let pods: Vec<Pod> = vec![
            from(pod("big", "5", "2Gi")),
            from(owned_by(pod("ds", "420m", "162Mi"), "DaemonSet")),
        ];
        let ph = built(build(&p, &c, Some(&n), &pods, &settings(false, &[], &[])));
        // cpu: min(5, 3920m - 420m) = 3500m; memory 2Gi fits.
        assert_eq!(ph.requests, res(&[("cpu", "3500m"), ("memory", "2Gi")]));
        assert_eq!(ph.clamped, ["cpu"]);
        assert_eq!(ph.daemonset_overhead, res(&[("cpu", "420m"), ("memory", "162Mi")]));
        assert!(!ph.whole_node);
    }

    #[test]
    fn refuses_when_everything_clamps_to_zero_or_nothing_is_requested() {
        let (p, c) = (pool(), claim());
        let s = settings(false, &[], &[]);
        let pods: Vec<Pod> = vec![
            from(pod("app", "1", "1Gi")),
            from(owned_by(pod("hog", "4", "15Gi"), "DaemonSet")),
        ];
        assert_eq!(
            build(&p, &c, None, &pods, &s),
            Err(PlaceholderRefused::ClampedToZero { clamped: vec!["cpu".into(), "memory".into()] })
        );
        let only_ds: Vec<Pod> = vec![from(owned_by(pod("ds", "1", "1Gi"), "DaemonSet"))];
        assert_eq!(build(&p, &c, None, &only_ds, &s), Err(PlaceholderRefused::NothingToReserve));
        assert_eq!(build(&p, &c, None, &[], &s), Err(PlaceholderRefused::NothingToReserve));
        let besteffort: Vec<Pod> = vec![from(json!({
            "metadata": {"name": "be"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}
        }))];
        assert_eq!(build(&p, &c, None, &besteffort, &s), Err(PlaceholderRefused::NothingToReserve));
    }

    #[test]
    fn whole_node_requests_the_clamp_limit() {
        let (p, c, n) = (pool(), claim(), node(json!({})));
        let pods: Vec<Pod> = vec![
            from(pod("small", "100m", "64Mi")),
            from(owned_by(pod("ds", "420m", "162Mi"), "DaemonSet")),
        ];
        let ph = built(build(&p, &c, Some(&n), &pods, &settings(true, &[], &[])));
        assert!(ph.whole_node);
        // allocatable - DS, container resources only (no `pods`).
        assert_eq!(
            ph.requests,
            res(&[("cpu", "3500m"), ("memory", "14000Mi"), ("ephemeral-storage", "17Gi")])
        );
        assert!(ph.clamped.is_empty());
        // Without allocatable anywhere it falls back to the pod sum.
        let mut bare = claim();
        if let Some(s) = bare.status.as_mut() {
            s.allocatable.clear();
        }
        let ph = built(build(&p, &bare, None, &pods, &settings(true, &[], &[])));
        assert!(!ph.whole_node);
        assert_eq!(ph.requests, res(&[("cpu", "100m"), ("memory", "64Mi")]));
    }

    #[test]
    fn node_allocatable_is_used_when_the_claim_has_none() {
        let p = pool();
        let mut c = claim();
        if let Some(s) = c.status.as_mut() {
            s.allocatable.clear();
        }
        let n: Node = from(json!({
            "metadata": {"name": NODE},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi"}}
        }));
        let pods: Vec<Pod> = vec![from(pod("a", "3", "1Gi"))];
        let ph = built(build(&p, &c, Some(&n), &pods, &settings(false, &[], &[])));
        assert_eq!(ph.requests, res(&[("cpu", "2"), ("memory", "1Gi")]));
        assert_eq!(ph.clamped, ["cpu"]);
    }

    // --- the pod --------------------------------------------------------------------------

    #[test]
    fn the_pod_shape() {
        let (p, c, n) = (pool(), claim(), node(json!({})));
        let pods: Vec<Pod> = vec![from(pod("a", "1500m", "1Gi"))];
        let ph = built(build(&p, &c, Some(&n), &pods, &settings(false, &[], &[])));
        let pod = &ph.pod;
        assert_eq!(pod.metadata.name.as_deref(), Some("noderotation-surge-general-x7k2p"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("noderotation-system"));
        assert!(pod.metadata.owner_references.is_none());
        assert_eq!(pod.labels().get(MANAGED_BY_LABEL).map(String::as_str), Some("noderotation"));
        assert_eq!(surge_for(pod), Some("general-x7k2p"));
        let spec = pod.spec.as_ref().unwrap_or_else(|| panic!("spec"));
        assert_eq!(spec.priority_class_name.as_deref(), Some("noderotation-placeholder"));
        assert_eq!(
            spec.node_selector,
            Some(BTreeMap::from([(NODEPOOL_LABEL.to_string(), "general".to_string())]))
        );
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.security_context.as_ref().and_then(|s| s.run_as_non_root), Some(true));
        assert!(spec.priority.is_none() && spec.preemption_policy.is_none(), "from the class");
        let [container] = spec.containers.as_slice() else { panic!("one container") };
        assert_eq!(container.image.as_deref(), Some("registry.k8s.io/pause:3.10"));
        let r = container.resources.as_ref().unwrap_or_else(|| panic!("resources"));
        let want = BTreeMap::from([
            ("cpu".to_string(), Quantity("1500m".into())),
            ("memory".to_string(), Quantity("1073741824".into())),
        ]);
        assert_eq!(r.requests.as_ref(), Some(&want));
        assert_eq!(r.limits.as_ref(), Some(&want), "limits equal requests");
        let sc = container.security_context.as_ref().unwrap_or_else(|| panic!("sc"));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        // No hostname term anywhere: Karpenter would ignore the pod.
        let text = serde_json::to_string(pod).unwrap_or_default();
        assert!(!text.contains(HOSTNAME_LABEL), "{text}");
    }

    #[test]
    fn tolerations_come_from_the_pool_taints() {
        let tol = pool_tolerations(&pool());
        let s = |v: &str| Some(v.to_string());
        let want = [
            Toleration {
                key: s("dedicated"),
                operator: s("Equal"),
                value: s("api"),
                effect: s("NoSchedule"),
                toleration_seconds: None,
            },
            Toleration {
                key: s("gpu"),
                operator: s("Exists"),
                value: None,
                effect: s("NoExecute"),
                toleration_seconds: None,
            },
        ];
        assert_eq!(tol, want);
        let mut bare = pool();
        bare.spec.template.spec.taints.clear();
        let (c, pods) = (claim(), vec![from::<Pod>(pod("a", "1", "1Gi"))]);
        let ph = built(build(&bare, &c, None, &pods, &settings(false, &[], &[])));
        assert!(ph.pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()).is_none());
    }

    // --- affinity -------------------------------------------------------------------------

    #[test]
    fn node_label_wins_and_is_checked_against_the_pool() {
        let (p, c) = (pool(), claim());
        let n = node(json!({"topology.kubernetes.io/zone": "ap-northeast-1a",
                            "kubernetes.io/arch": "arm64",
                            "karpenter.sh/capacity-type": "on-demand"}));
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s = settings(
            false,
            &["topology.kubernetes.io/zone", "kubernetes.io/arch", "karpenter.sh/capacity-type"],
            &[],
        );
        let ph = built(build(&p, &c, Some(&n), &pods, &s));
        let v = |x: &str| vec![x.to_string()];
        assert_eq!(
            required_exprs(&ph),
            [
                ("topology.kubernetes.io/zone".into(), "In".into(), v("ap-northeast-1a")),
                ("kubernetes.io/arch".into(), "In".into(), v("arm64")),
                ("karpenter.sh/capacity-type".into(), "In".into(), v("on-demand")),
            ]
        );
        assert!(ph.keys.iter().all(|k| k.resolution == KeyResolution::NodeLabel && k.required));
    }

    #[test]
    fn claim_values_are_intersected_with_the_pool_and_absent_keys_skipped() {
        let (p, c) = (pool(), claim());
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s = settings(
            false,
            &["topology.kubernetes.io/zone", "karpenter.sh/capacity-type"],
            &["kubernetes.io/arch"],
        );
        // No node: values from the claim. zone In [1a, 1b] ∩ pool In [1a, 1c] = [1a].
        let ph = built(build(&p, &c, None, &pods, &s));
        assert_eq!(
            required_exprs(&ph),
            [("topology.kubernetes.io/zone".into(), "In".into(), vec!["ap-northeast-1a".into()])]
        );
        let pref = node_affinity(&ph)
            .preferred_during_scheduling_ignored_during_execution
            .unwrap_or_default();
        assert_eq!(pref.len(), 1);
        assert_eq!(pref[0].weight, PREFERRED_KEY_WEIGHT);
        let expr = &pref[0].preference.match_expressions.clone().unwrap_or_default()[0];
        assert_eq!(expr.key, "kubernetes.io/arch");
        assert_eq!(expr.values, Some(vec!["amd64".into(), "arm64".into()]));
        let res: Vec<(&str, &KeyResolution)> =
            ph.keys.iter().map(|k| (k.key.as_str(), &k.resolution)).collect();
        assert_eq!(
            res,
            [
                ("topology.kubernetes.io/zone", &KeyResolution::ClaimRequirement),
                ("karpenter.sh/capacity-type", &KeyResolution::Absent),
                ("kubernetes.io/arch", &KeyResolution::ClaimRequirement),
            ]
        );
    }

    #[test]
    fn gt_lt_are_carried_exactly_and_pool_gt_filters_labels() {
        let (p, c) = (pool(), claim());
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s = settings(false, &["karpenter.k8s.aws/instance-memory"], &[]);
        let ph = built(build(&p, &c, None, &pods, &s));
        assert_eq!(
            required_exprs(&ph),
            [
                ("karpenter.k8s.aws/instance-memory".into(), "Gt".into(), vec!["8191".into()]),
                ("karpenter.k8s.aws/instance-memory".into(), "Lt".into(), vec!["65537".into()]),
            ]
        );
        // A node label checked against the pool's `instance-cpu Gt 3`.
        let s = settings(false, &["karpenter.k8s.aws/instance-cpu"], &[]);
        let n4 = node(json!({"karpenter.k8s.aws/instance-cpu": "4"}));
        let ph = built(build(&p, &c, Some(&n4), &pods, &s));
        assert_eq!(ph.keys[0].resolution, KeyResolution::NodeLabel);
        let n2 = node(json!({"karpenter.k8s.aws/instance-cpu": "2"}));
        let ph = built(build(&p, &c, Some(&n2), &pods, &s));
        assert_eq!(ph.keys[0].resolution, KeyResolution::Unsatisfiable);
        assert_eq!(
            required_exprs(&ph),
            [("karpenter.k8s.aws/instance-cpu".into(), "In".into(), vec!["2".into()])]
        );
    }

    #[test]
    fn a_value_the_pool_no_longer_admits_is_kept_not_loosened() {
        let (p, c) = (pool(), claim());
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s =
            settings(false, &["topology.kubernetes.io/zone", "karpenter.sh/capacity-type"], &[]);
        let n = node(json!({"topology.kubernetes.io/zone": "ap-northeast-1d",
                            "karpenter.sh/capacity-type": "spot"}));
        let ph = built(build(&p, &c, Some(&n), &pods, &s));
        assert_eq!(
            required_exprs(&ph),
            [
                ("topology.kubernetes.io/zone".into(), "In".into(), vec!["ap-northeast-1d".into()]),
                ("karpenter.sh/capacity-type".into(), "In".into(), vec!["spot".into()]),
            ]
        );
        assert!(ph.keys.iter().all(|k| k.resolution == KeyResolution::Unsatisfiable));
    }

    #[test]
    fn keys_karpenter_rejects_are_skipped() {
        assert!(karpenter_rejects_label("kubernetes.io/hostname"));
        assert!(karpenter_rejects_label("k8s.io/something"));
        assert!(karpenter_rejects_label("karpenter.sh/registered"));
        assert!(!karpenter_rejects_label("topology.kubernetes.io/zone"));
        assert!(!karpenter_rejects_label("failure-domain.beta.kubernetes.io/zone"));
        assert!(!karpenter_rejects_label("node.kubernetes.io/instance-type"));
        assert!(!karpenter_rejects_label("karpenter.sh/capacity-type"));
        assert!(!karpenter_rejects_label("karpenter.k8s.aws/instance-family"));
        assert!(!karpenter_rejects_label("team"));
        let (p, c) = (pool(), claim());
        let n = node(json!({"kubernetes.io/hostname": NODE}));
        let pods = vec![from::<Pod>(pod("a", "1", "1Gi"))];
        let s = settings(false, &[], &["kubernetes.io/hostname"]);
        let ph = built(build(&p, &c, Some(&n), &pods, &s));
        assert_eq!(ph.keys[0].resolution, KeyResolution::RestrictedByKarpenter);
        assert!(ph.pod.spec.as_ref().and_then(|s| s.affinity.as_ref()).is_none());
    }

    // --- headroom -------------------------------------------------------------------------

    #[test]
    fn footprint_is_a_node_like_the_candidate() {
        let f = footprint(&claim());
        assert_eq!(
            f,
            res(&[
                ("cpu", "3920m"),
                ("memory", "14162Mi"),
                ("pods", "58"),
                ("ephemeral-storage", "17Gi"),
                ("nodes", "1"),
            ])
        );
        assert_eq!(footprint(&NodeClaim::default()), res(&[("nodes", "1")]));
    }

    #[test]
    fn headroom_shortfall_tuple() {
        let p = pool();
        assert_eq!(surge_headroom(&p, &res(&[("cpu", "10"), ("nodes", "1")])), Ok(()));
        assert_eq!(
            surge_headroom(&p, &res(&[("cpu", "10500m"), ("nodes", "1")])),
            Err(Shortfall {
                resource: "cpu".into(),
                want: 10_500,
                remaining: 10_000,
                limit: 100_000
            })
        );
        let mut full = pool();
        if let Some(s) = full.status.as_mut() {
            s.resources.insert("nodes".into(), Quantity("10".into()));
        }
        let err = surge_headroom(&full, &res(&[("cpu", "1"), ("nodes", "1")]));
        assert_eq!(
            err,
            Err(Shortfall { resource: "nodes".into(), want: 1000, remaining: 0, limit: 10_000 })
        );
        assert_eq!(
            err.err().map(|s| s.to_string()).unwrap_or_default(),
            "nodes: the surge needs 1 but only 0 of the limit 10 remains"
        );
        // No limits: always room. Unlimited resources are not checked.
        let mut unlimited = pool();
        unlimited.spec.limits = None;
        assert_eq!(surge_headroom(&unlimited, &res(&[("cpu", "1000")])), Ok(()));
        assert_eq!(surge_headroom(&p, &res(&[("nvidia.com/gpu", "8")])), Ok(()));
    }

    // --- after creation -------------------------------------------------------------------

    fn placed(phase: &str, node_name: Option<&str>) -> Pod {
        let mut v = json!({
            "metadata": {"name": "noderotation-surge-general-x7k2p", "namespace": "noderotation-system",
                         "labels": {"app.kubernetes.io/managed-by": "noderotation"}},
            "spec": {"containers": [{"name": "pause"}]},
            "status": {"phase": phase}
        });
        if let Some(n) = node_name {
            v = with(v, "/spec/nodeName", json!(n));
        }
        from(v)
    }

    fn host(name: &str, pool: &str, ready: &str) -> Node {
        from(json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
            "spec": {"providerID": format!("aws:///ap-northeast-1a/{name}")},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}
        }))
    }

    #[test]
    fn surge_ready_cases() {
        let h = host("new", "general", "True");
        let ok = placed("Running", Some("new"));
        assert!(surge_ready(&ok, Some(&h), Some(NODE), "general"));
        assert!(surge_ready(&ok, Some(&h), None, "general"));
        // Not running yet.
        assert!(!surge_ready(&placed("Pending", Some("new")), Some(&h), Some(NODE), "general"));
        // Unbound, or host unknown / mismatched.
        assert!(!surge_ready(&placed("Running", None), Some(&h), Some(NODE), "general"));
        assert!(!surge_ready(&ok, None, Some(NODE), "general"));
        assert!(!surge_ready(&ok, Some(&host("other", "general", "True")), Some(NODE), "general"));
        // Terminating placeholder.
        let mut dying = ok.clone();
        dying.metadata.deletion_timestamp = from(json!("2026-06-03T01:00:00Z"));
        assert!(!surge_ready(&dying, Some(&h), Some(NODE), "general"));
        // Host not Ready, other pool, or the candidate itself.
        assert!(!surge_ready(&ok, Some(&host("new", "general", "False")), Some(NODE), "general"));
        assert!(!surge_ready(&ok, Some(&host("new", "other", "True")), Some(NODE), "general"));
        assert!(!surge_ready(&ok, Some(&h), Some("new"), "general"));
        // Host being deleted.
        let mut going = h.clone();
        going.metadata.deletion_timestamp = from(json!("2026-06-03T01:00:00Z"));
        assert!(!surge_ready(&ok, Some(&going), Some(NODE), "general"));
    }

    #[test]
    fn surge_path_by_host_claim_age() {
        let start = t(2, 0);
        assert_eq!(surge_path(Some(t(2, 3)), start), Some(SurgePath::Provisioned));
        assert_eq!(surge_path(Some(start), start), Some(SurgePath::Provisioned));
        assert_eq!(surge_path(Some(t(1, 59)), start), Some(SurgePath::Absorbed));
        assert_eq!(surge_path(None, start), None);
        assert_eq!(SurgePath::Provisioned.as_str(), "provisioned");
        assert_eq!(SurgePath::Absorbed.to_string(), "absorbed");
    }

    fn surge_claim(name: &str, created: &str, node_name: Option<&str>, pool: &str) -> NodeClaim {
        let mut v = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool},
                         "creationTimestamp": created},
            "spec": {},
            "status": {}
        });
        if let Some(n) = node_name {
            v = with(v, "/status/nodeName", json!(n));
            v = with(v, "/status/providerID", json!(format!("aws:///ap-northeast-1a/{n}")));
        }
        from(v)
    }

    fn ready(mut claim: NodeClaim) -> NodeClaim {
        if let Some(s) = claim.status.as_mut() {
            s.conditions.push(karpenter::ClaimCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            });
        }
        claim
    }

    #[test]
    fn induced_claim_resolution() {
        let start = t(2, 0);
        let old = surge_claim("general-old", "2026-06-01T00:00:00Z", Some("old"), "general");
        let fresh =
            ready(surge_claim("general-new", "2026-06-03T02:01:00Z", Some("new"), "general"));
        let pending = surge_claim("general-pend", "2026-06-03T02:02:00Z", None, "general");
        let other_pool = surge_claim("other-x", "2026-06-03T02:02:00Z", None, "other");
        let claims = [old.clone(), fresh.clone(), pending.clone(), other_pool.clone()];

        // Bound placeholder: the bind target's claim, by status.nodeName ...
        let bound = placed("Running", Some("new"));
        let got = induced_claim(Some(&bound), None, &claims, "general", start);
        assert_eq!(
            got,
            Some(InducedClaim { name: "general-new".into(), via: InducedVia::Placeholder })
        );
        // ... or by providerID when the claim does not name the node yet.
        let mut no_name = fresh.clone();
        if let Some(s) = no_name.status.as_mut() {
            s.node_name = None;
        }
        let h = host("new", "general", "True");
        let got = induced_claim(Some(&bound), Some(&h), [&old, &no_name], "general", start);
        assert_eq!(got.map(|c| c.name), Some("general-new".into()));
        // An absorbing host resolves too (the reap guard keeps it).
        let absorbed = placed("Running", Some("old"));
        let got = induced_claim(Some(&absorbed), None, &claims, "general", start);
        assert_eq!(got.map(|c| c.name), Some("general-old".into()));
        // Bound to a node whose claim is not visible: no guess.
        let lost = placed("Running", Some("ghost"));
        assert_eq!(induced_claim(Some(&lost), None, &claims, "general", start), None);

        // Fallback: no placeholder (or unbound): the only fresh claim of the pool that is not
        // Ready (a fresh Ready claim is an ordinary scale-up that already serves pods).
        let got = induced_claim(None, None, &claims, "general", start);
        assert_eq!(
            got,
            Some(InducedClaim { name: "general-pend".into(), via: InducedVia::NotReadyClaim })
        );
        let unbound = placed("Pending", None);
        let got = induced_claim(Some(&unbound), None, &claims, "general", start);
        assert_eq!(got.map(|c| c.name), Some("general-pend".into()));
        // Registered with a node that never turned Ready: still the surge's claim (the
        // scheduler never binds the placeholder there, so only this fallback finds it).
        let mut registered = pending.clone();
        if let Some(s) = registered.status.as_mut() {
            s.node_name = Some("never-ready".into());
            s.conditions.push(karpenter::ClaimCondition {
                type_: "Registered".into(),
                status: "True".into(),
                ..Default::default()
            });
        }
        let got = induced_claim(None, None, [&old, &fresh, &registered], "general", start);
        assert_eq!(got.map(|c| c.name), Some("general-pend".into()));
        // Once Ready it is capacity like any other, not attributable by age alone.
        assert_eq!(induced_claim(None, None, [&old, &ready(registered)], "general", start), None);
        // Created before started-at: not ours.
        let early = surge_claim("general-early", "2026-06-03T01:59:00Z", None, "general");
        assert_eq!(induced_claim(None, None, [&early], "general", start), None);
        // Two candidates: ambiguous, no guess.
        let pending2 = surge_claim("general-pend2", "2026-06-03T02:03:00Z", None, "general");
        assert_eq!(induced_claim(None, None, [&pending, &pending2], "general", start), None);
    }

    #[test]
    fn reap_guard() {
        let start = t(2, 0);
        let name = "noderotation-surge-general-x7k2p";
        let uid = Some("placeholder-uid-1");
        let fresh = surge_claim("general-new", "2026-06-03T02:01:00Z", Some("new"), "general");
        let mut ph = placed("Running", Some("new"));
        ph.metadata.uid = uid.map(str::to_string);
        let ds: Pod = from(owned_by(pod("ds", "100m", "1Mi"), "DaemonSet"));
        let mirror: Pod = from(with(
            pod("static", "100m", "1Mi"),
            "/metadata/annotations",
            json!({"kubernetes.io/config.mirror": "x"}),
        ));
        let done: Pod = from(with(pod("job", "1", "1Mi"), "/status/phase", json!("Succeeded")));
        let workload: Pod = from(pod("web", "1", "1Gi"));
        assert!(reap_allowed(&fresh, start, &[ph.clone(), ds.clone(), mirror, done], uid));
        assert!(reap_allowed(&fresh, start, &[], uid));
        // A workload landed: keep.
        assert!(!reap_allowed(&fresh, start, &[ph.clone(), ds.clone(), workload], uid));
        // Someone else's pod that merely shares the name (no managed-by label): keep.
        let impostor: Pod = from(pod(name, "1", "1Gi"));
        assert!(!reap_allowed(&fresh, start, &[impostor], uid));
        // Name and label too, but not the pod the controller created (another uid): keep.
        let mut lookalike = placed("Running", Some("new"));
        lookalike.metadata.uid = Some("someone-else".into());
        assert!(!reap_allowed(&fresh, start, std::slice::from_ref(&lookalike), uid));
        // No recorded uid: nothing on the node is known to be ours.
        assert!(!reap_allowed(&fresh, start, std::slice::from_ref(&ph), None));
        // An absorbing host (created before started-at) is never reaped, even if empty.
        let absorbing = surge_claim("general-old", "2026-06-03T01:00:00Z", Some("old"), "general");
        assert!(!reap_allowed(&absorbing, start, std::slice::from_ref(&ph), uid));
        // Unknown creation time: not reaped.
        assert!(!reap_allowed(&NodeClaim::default(), start, &[ph], uid));
        // Created exactly at started-at counts as induced.
        let same = surge_claim("general-same", "2026-06-03T02:00:00Z", Some("n"), "general");
        assert!(reap_allowed(&same, start, &[ds], uid));
    }

    #[test]
    fn unschedulable_reason_from_pod_scheduled_false() {
        let mut p = placed("Pending", None);
        assert_eq!(unschedulable_reason(&p), None);
        p.status = Some(from(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/5 nodes are available: 5 Insufficient cpu."}]})));
        assert_eq!(
            unschedulable_reason(&p).as_deref(),
            Some("Unschedulable: 0/5 nodes are available: 5 Insufficient cpu.")
        );
        p.status = Some(from(json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})));
        assert_eq!(unschedulable_reason(&p).as_deref(), Some("SchedulingGated"));
        p.status = Some(from(json!({"phase": "Running", "conditions": [{
            "type": "PodScheduled", "status": "True"}]})));
        assert_eq!(unschedulable_reason(&p), None);
    }

    #[test]
    fn quantities_render() {
        assert_eq!(millis_quantity(1500).0, "1500m");
        assert_eq!(millis_quantity(4000).0, "4");
        assert_eq!(millis_quantity(0).0, "0");
        assert!(is_container_resource("nvidia.com/gpu"));
        assert!(is_container_resource("hugepages-2Mi"));
        assert!(!is_container_resource("pods"));
        assert!(!is_container_resource("attachable-volumes-aws-ebs"));
        assert!(!is_container_resource("kubernetes.io/batch"));
    }
}
