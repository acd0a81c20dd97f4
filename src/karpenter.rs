//! Typed read-side subsets of Karpenter's `karpenter.sh/v1` `NodePool` and `NodeClaim`
//! (both cluster-scoped), with exactly the fields the controller depends on.
//!
//! The compatibility contract is the `karpenter.sh/v1` wire format, not a Karpenter release:
//! unknown fields are ignored, every field is optional or defaulted, and values Karpenter
//! validates (durations, quantities) stay strings here and are parsed by accessors that return
//! errors instead of failing the whole watch.
//!
//! **Read only.** These types drop every field they do not name, so serializing one and sending it
//! back would erase the rest of the object. The controller writes NodeClaims and NodePools only
//! through metadata patches (annotations, labels) and deletes; it never creates, replaces or
//! applies a whole typed object.
use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::policy::duration::{self, DurationError, ExpireAfter};

/// The label that names a claim's (and its node's) NodePool.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";

/// Declares a `karpenter.sh/v1` custom resource from its spec struct: cluster-scoped, with a
/// status, without a schema (the controller never installs Karpenter's CRDs), camelCase on the
/// wire. The kind's name, plural and status type are the only differences between the two.
macro_rules! karpenter_v1 {
    (
        kind = $kind:literal, plural = $plural:literal, status = $status:literal,
        $(#[$attr:meta])* pub struct $spec:ident $fields:tt
    ) => {
        $(#[$attr])*
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
        #[kube(
            group = "karpenter.sh",
            version = "v1",
            kind = $kind,
            plural = $plural,
            status = $status,
            schema = "disabled",
            derive = "Default",
            derive = "PartialEq"
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec $fields
    };
}

karpenter_v1! {
    kind = "NodePool", plural = "nodepools", status = "NodePoolStatus",
    /// `karpenter.sh/v1` NodePool, the fields the controller reads. See the module docs: read only.
    pub struct NodePoolSpec {
        /// The template every claim of the pool is created from.
        #[serde(default)]
        pub template: NodeClaimTemplate,
        /// Resource budget (cpu, memory, nodes, ...), checked against `status.resources`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub limits: Option<BTreeMap<String, Quantity>>,
        /// Static pools (Karpenter 1.8+, alpha): a fixed node count. Surge cannot complete there.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub replicas: Option<i64>,
    }
}

/// `NodePool.spec.template`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NodeClaimTemplate {
    #[serde(default)]
    pub spec: NodeClaimTemplateSpec,
}

/// `NodePool.spec.template.spec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<NodeSelectorRequirement>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// `Never` or a Go duration; unset means Karpenter's default 720h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    /// A Go duration; unset means the drain is unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
}

/// Karpenter's `NodeSelectorRequirementWithMinValues`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt, Lt.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

/// `NodePool.status`, the part the controller reads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct NodePoolStatus {
    /// Resources in use by the pool's nodes (cpu, memory, nodes, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
}

karpenter_v1! {
    kind = "NodeClaim", plural = "nodeclaims", status = "NodeClaimStatus",
    /// `karpenter.sh/v1` NodeClaim, the fields the controller reads. See the module docs: read only.
    pub struct NodeClaimSpec {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub requirements: Vec<NodeSelectorRequirement>,
        /// Copied from the pool template at creation and immutable; `Never` or a Go duration.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub expire_after: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub termination_grace_period: Option<String>,
    }
}

/// `NodeClaim.status`, the part the controller reads.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The Node's `spec.providerID`.
    #[serde(rename = "providerID", default, skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ClaimCondition>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
}

/// The NodeClaim conditions the controller reads (`Ready`, `Initialized`), the only ones a watch
/// cache keeps (`cluster::projection`).
pub(crate) const CLAIM_CONDITIONS: [&str; 2] = [READY, INITIALIZED];
/// The `Ready` condition's type, on NodeClaims and Nodes alike.
pub(crate) const READY: &str = "Ready";
const INITIALIZED: &str = "Initialized";

/// A status condition as Karpenter writes it. Only `type` and `status` are relied on; the rest is
/// optional so that a sparse condition never fails decoding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

fn parse_expire_after(value: Option<&str>) -> Result<ExpireAfter, DurationError> {
    value.map_or(Ok(ExpireAfter::KARPENTER_DEFAULT), ExpireAfter::parse)
}

fn parse_tgp(value: Option<&str>) -> Result<Option<Duration>, DurationError> {
    value.map(duration::parse).transpose()
}

impl NodePool {
    /// Template `expireAfter` (unset: Karpenter's 720h default).
    pub(crate) fn expire_after(&self) -> Result<ExpireAfter, DurationError> {
        parse_expire_after(self.spec.template.spec.expire_after.as_deref())
    }

    /// Template `terminationGracePeriod`.
    pub(crate) fn termination_grace_period(&self) -> Result<Option<Duration>, DurationError> {
        parse_tgp(self.spec.template.spec.termination_grace_period.as_deref())
    }

    /// `spec.replicas` is set.
    pub(crate) fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// Number of nodes, from `status.resources.nodes`.
    pub(crate) fn node_count(&self) -> Option<u64> {
        let q = self.status.as_ref()?.resources.get("nodes")?;
        u64::try_from(quantity_millis(q)? / 1000).ok()
    }

    /// Resources of `spec.limits` whose use in `status.resources` has reached the limit, or
    /// that lack room for one more node (`nodes`). A limit or usage that does not parse is
    /// skipped.
    pub(crate) fn exhausted_limits(&self) -> Vec<String> {
        let one_node = BTreeMap::from([("nodes".to_string(), 1000)]);
        self.limits_without_room_for(&one_node)
    }

    /// Resources of `spec.limits` with less than `node` (amounts in thousandths, a resource it
    /// lacks counting 0) left: `limit - status.resources < node`, or nothing left at all. A
    /// limit or usage that does not parse is skipped.
    pub(crate) fn limits_without_room_for(&self, node: &BTreeMap<String, i128>) -> Vec<String> {
        let empty = BTreeMap::new();
        let used = self.status.as_ref().map_or(&empty, |s| &s.resources);
        self.spec
            .limits
            .iter()
            .flatten()
            .filter(|(resource, limit)| {
                let limit = quantity_millis(limit);
                let in_use = used.get(*resource).map_or(Some(0), quantity_millis);
                let want = node.get(*resource).copied().unwrap_or(0);
                matches!((limit, in_use), (Some(l), Some(u)) if l - u <= 0 || l - u < want)
            })
            .map(|(resource, _)| resource.clone())
            .collect()
    }
}

impl NodeClaim {
    /// The claim's own `expireAfter` (unset: 720h, Karpenter's default).
    pub(crate) fn expire_after(&self) -> Result<ExpireAfter, DurationError> {
        parse_expire_after(self.spec.expire_after.as_deref())
    }

    /// The claim's own `terminationGracePeriod`.
    pub(crate) fn termination_grace_period(&self) -> Result<Option<Duration>, DurationError> {
        parse_tgp(self.spec.termination_grace_period.as_deref())
    }

    /// `metadata.creationTimestamp`.
    pub fn created(&self) -> Option<DateTime<Utc>> {
        let ts = &self.metadata.creation_timestamp.as_ref()?.0;
        DateTime::from_timestamp(ts.as_second(), u32::try_from(ts.subsec_nanosecond()).ok()?)
    }

    /// The claim's pool, from its `karpenter.sh/nodepool` label.
    pub(crate) fn node_pool(&self) -> Option<&str> {
        self.labels().get(NODEPOOL_LABEL).map(String::as_str)
    }

    /// The `Ready` condition is True.
    pub(crate) fn is_ready(&self) -> bool {
        self.condition_true(READY)
    }

    /// The `Initialized` condition is True: the node turned Ready once (Karpenter never sets
    /// it back, unlike `Ready`).
    pub(crate) fn is_initialized(&self) -> bool {
        self.condition_true(INITIALIZED)
    }

    fn condition_true(&self, type_: &str) -> bool {
        self.status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == type_ && c.status == "True")
    }

    /// `deletionTimestamp` is set.
    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

/// The Node's `Ready` condition is True: the node counterpart of [`NodeClaim::is_ready`], for
/// the Nodes Karpenter's claims launch (surge readiness, watch edges, the simulation's view).
pub(crate) fn node_ready(node: &Node) -> bool {
    node.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == READY && c.status == "True")
}

/// A Kubernetes quantity (`500m`, `4`, `16Gi`, `1e3`) in thousandths, rounded up like
/// `Quantity.MilliValue`. `None` if it does not parse or does not fit.
pub(crate) fn quantity_millis(q: &Quantity) -> Option<i128> {
    let s = q.0.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_len = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_len);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    // The digits of `whole` then `frac`, read in place (passes read the pool's limits often).
    let mut mantissa: i128 = 0;
    for b in whole.bytes().chain(frac.bytes()) {
        if !b.is_ascii_digit() {
            return None;
        }
        mantissa = mantissa.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    let (factor, mut exponent): (i128, i32) = match suffix {
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "" => (1, 0),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            (1, exp.parse().ok()?)
        }
    };
    // milli-units, and the fraction digits already folded into the mantissa.
    exponent += 3 - i32::try_from(frac.len()).ok()?;
    let scaled = mantissa.checked_mul(factor)?;
    let value = if exponent >= 0 {
        scaled.checked_mul(10i128.checked_pow(u32::try_from(exponent).ok()?)?)?
    } else {
        let divisor = 10i128.checked_pow(u32::try_from(-exponent).ok()?)?;
        (scaled + divisor - 1) / divisor
    };
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
  labels:
    workload: api
  annotations:
    karpenter.sh/nodepool-hash: "4012513481623584108"
    karpenter.sh/nodepool-hash-version: v3
  creationTimestamp: "2026-05-01T09:00:00Z"
  generation: 4
spec:
  weight: 10
  template:
    metadata:
      labels:
        team: payments
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64", "arm64"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
        - key: karpenter.k8s.aws/instance-cpu
          operator: Gt
          values: ["3"]
        - key: node.kubernetes.io/instance-type
          operator: Exists
          minValues: 5
      taints:
        - key: dedicated
          value: api
          effect: NoSchedule
      startupTaints:
        - key: ebs.csi.aws.com/agent-not-ready
          effect: NoExecute
      expireAfter: 336h
      terminationGracePeriod: 1h
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
    budgets:
      - nodes: "10%"
      - nodes: "0"
        schedule: "0 9 * * mon-fri"
        duration: 8h
        reasons: ["Drifted", "Underutilized"]
  limits:
    cpu: "1000"
    memory: 1000Gi
    nodes: "20"
status:
  conditions:
    - type: Ready
      status: "True"
      reason: Ready
      message: ""
      lastTransitionTime: "2026-05-01T09:00:05Z"
      observedGeneration: 4
  nodeClassObservedGeneration: 1
  resources:
    cpu: "76"
    ephemeral-storage: 400Gi
    memory: 300Gi
    nodes: "20"
    pods: "1100"
"#;

    const NODECLAIM: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: general-x7k2p
  labels:
    karpenter.sh/nodepool: general
    karpenter.sh/capacity-type: on-demand
    topology.kubernetes.io/zone: ap-northeast-1a
  annotations:
    karpenter.k8s.aws/ec2nodeclass-hash: "13347559279212734234"
    karpenter.sh/nodepool-hash: "4012513481623584108"
  finalizers: ["karpenter.sh/termination"]
  creationTimestamp: "2026-05-20T03:04:05Z"
  ownerReferences:
    - apiVersion: karpenter.sh/v1
      kind: NodePool
      name: general
      uid: 0b3c2c52-9f1c-4e70-a4b0-0c2f8a7e1d11
      blockOwnerDeletion: true
spec:
  expireAfter: 336h
  terminationGracePeriod: 1h
  nodeClassRef:
    group: karpenter.k8s.aws
    kind: EC2NodeClass
    name: default
  requirements:
    - key: topology.kubernetes.io/zone
      operator: In
      values: ["ap-northeast-1a"]
    - key: karpenter.sh/nodepool
      operator: In
      values: ["general"]
  resources:
    requests:
      cpu: 3350m
      pods: "9"
status:
  nodeName: ip-10-0-12-34.ap-northeast-1.compute.internal
  providerID: aws:///ap-northeast-1a/i-0123456789abcdef0
  imageID: ami-0abcdef1234567890
  capacity:
    cpu: "4"
    memory: 15896Mi
  allocatable:
    cpu: 3920m
    ephemeral-storage: 17Gi
    memory: 14162Mi
    pods: "58"
  lastPodEventTime: "2026-05-20T03:10:00Z"
  conditions:
    - type: Launched
      status: "True"
      reason: Launched
      message: ""
      lastTransitionTime: "2026-05-20T03:04:20Z"
    - type: Initialized
      status: "True"
      lastTransitionTime: "2026-05-20T03:05:01Z"
    - type: Ready
      status: "True"
      reason: Ready
      lastTransitionTime: "2026-05-20T03:05:01Z"
    - type: ConsistentStateFound
      status: "True"
"#;

    #[test]
    fn decodes_a_realistic_node_pool() {
        let np: NodePool = serde_norway::from_str(NODEPOOL).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(np.name_any(), "general");
        assert_eq!(np.expire_after(), Ok(ExpireAfter::After(Duration::days(14))));
        assert_eq!(np.termination_grace_period(), Ok(Some(Duration::hours(1))));
        let reqs = &np.spec.template.spec.requirements;
        assert_eq!(reqs.len(), 4);
        assert_eq!(reqs[2].operator, "Gt");
        assert_eq!(reqs[3].min_values, Some(5));
        assert_eq!(np.spec.template.spec.taints[0].key, "dedicated");
        assert!(!np.is_static());
        assert_eq!(np.node_count(), Some(20));
        assert_eq!(np.exhausted_limits(), ["nodes"]);
    }

    #[test]
    fn limits_without_room_for_one_node() {
        let mut np: NodePool = serde_norway::from_str(NODEPOOL).unwrap_or_else(|e| panic!("{e}"));
        np.spec.limits.get_or_insert_default().insert("nodes".into(), Quantity("21".into()));
        // 924 CPUs and 700Gi left, one node left: a 4-CPU node fits, a 1000-CPU one does not.
        let node = |cpu: i128| BTreeMap::from([("cpu".into(), cpu), ("nodes".into(), 1000)]);
        assert!(np.limits_without_room_for(&node(4_000)).is_empty());
        assert_eq!(np.limits_without_room_for(&node(1_000_000)), ["cpu"]);
        np.spec.limits.get_or_insert_default().insert("cpu".into(), Quantity("78".into()));
        assert_eq!(np.limits_without_room_for(&node(4_000)), ["cpu"], "2 CPUs left");
        assert!(np.exhausted_limits().is_empty(), "without a node size: only used up counts");
        np.spec.limits.get_or_insert_default().insert("cpu".into(), Quantity("76".into()));
        assert_eq!(np.exhausted_limits(), ["cpu"]);
    }

    #[test]
    fn decodes_a_realistic_node_claim() {
        let nc: NodeClaim = serde_norway::from_str(NODECLAIM).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(nc.node_pool(), Some("general"));
        assert!(nc.is_ready());
        assert!(!nc.is_deleting());
        assert_eq!(nc.created(), DateTime::from_timestamp(1_779_246_245, 0));
        assert_eq!(nc.expire_after(), Ok(ExpireAfter::After(Duration::hours(336))));
        let status = nc.status.as_ref().unwrap_or_else(|| panic!("status"));
        assert_eq!(
            status.provider_id.as_deref(),
            Some("aws:///ap-northeast-1a/i-0123456789abcdef0")
        );
        assert_eq!(
            status.node_name.as_deref(),
            Some("ip-10-0-12-34.ap-northeast-1.compute.internal")
        );
        assert_eq!(status.allocatable.get("cpu"), Some(&Quantity("3920m".into())));
        assert_eq!(status.conditions.len(), 4);
        assert_eq!(nc.spec.requirements[0].values, ["ap-northeast-1a"]);
    }

    #[test]
    fn sparse_objects_decode_with_defaults() {
        let np: NodePool = serde_norway::from_str(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {template: {spec: {}}, replicas: 3}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(np.expire_after(), Ok(ExpireAfter::KARPENTER_DEFAULT));
        assert_eq!(np.termination_grace_period(), Ok(None));
        assert!(np.is_static());
        assert!(np.exhausted_limits().is_empty());
        let nc: NodeClaim = serde_norway::from_str(
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: y}\nspec: {expireAfter: Never}\nstatus: {conditions: [{type: Ready, status: Unknown}]}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(nc.expire_after(), Ok(ExpireAfter::Never));
        assert!(!nc.is_ready());
        assert_eq!(nc.created(), None);
    }

    #[test]
    fn cluster_scoped_resources() {
        use kube::Resource;
        assert_eq!(NodePool::api_version(&()), "karpenter.sh/v1");
        assert_eq!(NodePool::plural(&()), "nodepools");
        assert_eq!(NodeClaim::plural(&()), "nodeclaims");
        assert_eq!(NodeClaim::url_path(&(), None), "/apis/karpenter.sh/v1/nodeclaims");
        assert_eq!(NodePool::url_path(&(), None), "/apis/karpenter.sh/v1/nodepools");
        assert_eq!(NodeClaim::api_version(&()), "karpenter.sh/v1");
        assert_eq!(
            (NodePool::kind(&()), NodeClaim::kind(&())),
            ("NodePool".into(), "NodeClaim".into())
        );
    }

    #[test]
    fn quantities() {
        let m = |s: &str| quantity_millis(&Quantity(s.into()));
        assert_eq!(m("500m"), Some(500));
        assert_eq!(m("4"), Some(4000));
        assert_eq!(m("1.5"), Some(1500));
        assert_eq!(m("1Ki"), Some(1024 * 1000));
        assert_eq!(m("16Gi"), Some(16 * (1 << 30) * 1000));
        assert_eq!(m("1k"), Some(1_000_000));
        assert_eq!(m("1e3"), Some(1_000_000));
        assert_eq!(m("1E-3"), Some(1));
        assert_eq!(m("1n"), Some(1)); // rounded up
        assert_eq!(m("-2"), Some(-2000));
        assert_eq!(m("abc"), None);
        assert_eq!(m("1Qi"), None);
        assert_eq!(m(".5"), Some(500));
        assert_eq!(m("2."), Some(2000));
        assert_eq!(m("0.0015"), Some(2), "rounded up");
        assert_eq!(m("1.2.3"), None, "a second point");
        assert_eq!(m("."), None);
        assert_eq!(m("170141183460469231731687303715884105728"), None, "past i128");
    }
}
