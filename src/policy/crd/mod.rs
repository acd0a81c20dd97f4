//! `RotationPolicy` (`noderotation.io/v1alpha1`, cluster-scoped): the per-NodePool rotation
//! settings of spec §5.4, and its CustomResourceDefinition (printed by `noderotation crd`).
//!
//! The wire types keep durations, days and times as strings: the API server validates them with
//! the OpenAPI patterns and CEL rules declared here, and the controller parses them once into
//! [`crate::policy::settings::Effective`]. A value that slipped past an older schema therefore
//! surfaces as the policy's `Invalid` condition instead of breaking the watch of every policy
//! (`docs/decisions/policy-crd.md`).
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::{Message, Reason, Rule};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// A Go duration (`time.ParseDuration`) without a sign: `15m`, `1h30m`, `1.5h`, `0`. Written
/// without backslashes so that it can be embedded in a CEL string literal unchanged.
pub(crate) const GO_DURATION_PATTERN: &str =
    "^(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|\u{b5}s|\u{3bc}s|ms|s|m|h))+)$";

/// The longest Go duration (`math.MaxInt64` nanoseconds): `duration()` fails past it.
pub(crate) const MAX_GO_DURATION: &str = "2562047h47m16.854775807s";

/// `auto`, `windows` or a Go duration.
pub(crate) const AGE_THRESHOLD_PATTERN: &str =
    "^(auto|windows|0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|\u{b5}s|\u{3bc}s|ms|s|m|h))+)$";

/// A percentage of a pool's nodes for `maxUnavailable`: `1%` to `100%`, no leading zero.
pub(crate) const PERCENT_PATTERN: &str = "^([1-9][0-9]?|100)%$";

/// The most rotations one pool may have in flight (`maxUnavailable`, `maxUnavailableLimit`, what
/// a percentage resolves to and what `auto` chooses): each one holds a set of per-slot annotations
/// on the NodePool, and at this bound they stay well under the API server's 256 KiB limit on an
/// object's annotations (docs/decisions/parallel-rotations.md: at most about 85 KiB).
pub(crate) const MAX_UNAVAILABLE: u32 = 100;

/// What `maxUnavailableLimit` admits, in the words of the CRD rule and the local validation.
pub(crate) const INT_OR_PERCENT_ADMITS: &str = "an integer from 1 to 100 or a percentage of the pool's nodes from 1% to 100% (for example \
     2 or \"10%\"; a percentage resolves to at most 100)";

/// What `maxUnavailable` admits, in the words of the CRD rule and the local validation.
pub(crate) const MAX_UNAVAILABLE_ADMITS: &str = "auto, an integer from 1 to 100 or a percentage of the pool's nodes from 1% to 100% (for \
     example auto, 2 or \"10%\"; a percentage resolves to at most 100)";

/// 24-hour `HH:MM`.
pub(crate) const HHMM_PATTERN: &str = "^([01][0-9]|2[0-3]):[0-5][0-9]$";

/// The label keys whose values the placeholder copies by default (§3.7).
pub(crate) const DEFAULT_REQUIRED_NODE_KEYS: [&str; 3] =
    ["topology.kubernetes.io/zone", "kubernetes.io/arch", "karpenter.sh/capacity-type"];

/// The command that regenerates the checked-in CRD; named by the stale-check test.
pub const REGENERATE_COMMAND: &str = "cargo run -- docs";

/// The CRD as installed: `RotationPolicy::crd()` with doc-comment line breaks inside paragraphs
/// joined, so that `kubectl explain` can wrap descriptions itself, and labelled with the release
/// it comes from, so that `kubectl get crd` tells which version's schema a cluster has (Helm
/// never upgrades a CRD: docs/operations.md, Upgrading).
pub fn crd() -> anyhow::Result<CustomResourceDefinition> {
    let mut value = serde_json::to_value(RotationPolicy::crd())?;
    unwrap_descriptions(&mut value);
    let mut crd: CustomResourceDefinition = serde_json::from_value(value)?;
    crd.metadata
        .labels
        .get_or_insert_default()
        .insert("app.kubernetes.io/version".into(), env!("CARGO_PKG_VERSION").into());
    Ok(crd)
}

fn unwrap_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    serde_json::Value::String(text) if key == "description" => {
                        let paragraphs: Vec<String> = text
                            .split("\n\n")
                            .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
                            .collect();
                        *text = paragraphs.join("\n\n");
                    }
                    other => unwrap_descriptions(other),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

/// The exact text of `crds/rotationpolicy.yaml`.
pub(crate) fn crd_yaml() -> anyhow::Result<String> {
    let body = serde_norway::to_string(&crd()?)?;
    Ok(format!(
        "# Generated by `noderotation crd` from src/policy/crd/. Do not edit.\n\
         # Regenerate: {REGENERATE_COMMAND}\n{body}"
    ))
}

/// Rotation settings for the Karpenter NodePools this policy selects: when their nodes may be
/// replaced (maintenance windows), how early (age threshold), and how (surge-first).
///
/// Each NodePool is governed by the matching policy with the most specific nodePoolSelector; a
/// tie is a conflict and that pool is not rotated; a pool no policy matches is left alone.
// Printer columns repeat `type_`; that is how kube-derive spells several columns.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "noderotation.io",
    version = "v1alpha1",
    kind = "RotationPolicy",
    plural = "rotationpolicies",
    shortname = "rp",
    category = "noderotation",
    status = "RotationPolicyStatus",
    derive = "PartialEq",
    doc = "RotationPolicy rotates the nodes of the Karpenter NodePools it selects inside \
           maintenance windows, surge-first, before Karpenter's forced expiry.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Accepted, Invalid or Conflict"
    ),
    printcolumn(
        name = "Matched",
        type_ = "integer",
        json_path = ".status.matchedNodePools",
        description = "NodePools this policy governs"
    ),
    printcolumn(
        name = "Rotating",
        type_ = "integer",
        json_path = ".status.rotatingNodePools",
        description = "Governed NodePools with a rotation in progress"
    ),
    printcolumn(
        name = "Next Window",
        type_ = "string",
        json_path = ".status.nextWindow",
        description = "Start of the maintenance window open now or opening next (UTC)"
    ),
    printcolumn(
        name = "In Flight",
        type_ = "string",
        json_path = ".status.inFlight",
        description = "Rotations in flight / rotations at once allowed (maxUnavailable), over the governed NodePools"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct RotationPolicySpec {
    /// Selects the NodePools (by their labels) this policy governs. `{}` selects every NodePool
    /// and loses to any selector with at least one entry. Specificity = number of matchLabels
    /// entries + number of matchExpressions entries; the most specific matching policy governs a
    /// NodePool, and equally specific matches are a conflict (that NodePool is not rotated).
    #[schemars(schema_with = "label_selector_schema")]
    pub node_pool_selector: LabelSelector,

    /// How old a node must be before it is replaced. `auto` (default) derives it from the node's
    /// expireAfter so that every node gets minRotationChances windows before its forced expiry:
    /// ageThreshold = expireAfter - (minRotationChances * windowPeriod + rotationBound), with
    /// windowPeriod the longest gap between window openings. `windows` counts the node's real
    /// window occurrences instead: a node is due from the opening of the K-th last occurrence
    /// (K = minRotationChances) in which a rotation can still start and finish (rotationBound)
    /// before its forced expiry, so exactly K are left and it lives longer. A Go duration (for
    /// example `240h`) overrides both.
    #[serde(default = "default_age_threshold")]
    #[schemars(regex(pattern = AGE_THRESHOLD_PATTERN), length(max = 64))]
    #[x_kube(validation = age_threshold_rule())]
    pub age_threshold: String,

    /// K: how many maintenance-window occurrences each node is guaranteed before its forced
    /// expiry (with ageThreshold `auto` or `windows`). At least 1; 2 (default) leaves one retry.
    #[serde(default = "default_min_rotation_chances")]
    #[schemars(range(min = 1))]
    pub min_rotation_chances: i32,

    /// When rotations may start. The effective window is the union of all entries; touching or
    /// overlapping occurrences merge. A rotation that started inside a window finishes past its
    /// end. No entries: nothing is rotated (reported as infeasible).
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub maintenance_windows: Vec<MaintenanceWindow>,

    /// How one node is replaced: a surge placeholder pod first makes Karpenter provision the
    /// replacement capacity, then the old node is drained.
    #[serde(default)]
    pub surge: Surge,

    /// Image pre-pulling on the replacement node. Not available in v1alpha1: must stay disabled.
    #[serde(default)]
    pub pre_pull: PrePull,
}

/// One weekly maintenance-window rule.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// IANA time zone the days and times are in, e.g. `Asia/Tokyo`, `Europe/London`, `UTC`.
    /// A local time skipped by a daylight-saving change moves to the first instant after the
    /// change; a repeated local time takes its first occurrence. An unknown zone makes the
    /// policy Invalid.
    #[schemars(length(min = 1, max = 64))]
    pub timezone: String,

    /// Days the window opens on (the day it starts, for windows that run past midnight): any of
    /// Mon, Tue, Wed, Thu, Fri, Sat, Sun.
    #[schemars(schema_with = "days_schema")]
    pub days: Vec<String>,

    /// Local start time, 24-hour `HH:MM`.
    #[schemars(regex(pattern = HHMM_PATTERN))]
    pub start: String,

    /// Local end time, 24-hour `HH:MM`. An end at or before start runs past midnight into the
    /// next day; an end equal to start is a full 24-hour window.
    #[schemars(regex(pattern = HHMM_PATTERN))]
    pub end: String,
}

/// Surge (make-before-break) settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Surge {
    /// Nodes of one NodePool replaced at the same time: an integer from 1 to 100, a percentage
    /// of the pool's nodes from 1% to 100% (`"10%"`, rounded up, at least 1, at most 100: every
    /// rotation in flight keeps its state in annotations of the NodePool), or `auto`: the fewest
    /// that keep every node's minRotationChances windows for the pool's current size (what
    /// `noderotation plan` advises), at most maxUnavailableLimit, recomputed as the pool grows or
    /// shrinks. Each rotation in flight has its own surge placeholder and surge node; they start
    /// earliest deadline first, each waits cooldownAfter after its own completion, a failure
    /// pauses new starts of the whole pool (failurePause), and spec.limits must have room for all
    /// their surge nodes together. Default 1.
    #[serde(default = "default_max_unavailable", deserialize_with = "max_unavailable_or_default")]
    #[schemars(schema_with = "max_unavailable_schema")]
    pub max_unavailable: IntOrString,

    /// With maxUnavailable `auto`, the most rotations in flight it may use: an integer from 1
    /// to 100 or a percentage of the pool's nodes from 1% to 100% (rounded up, at least 1, at
    /// most 100: auto never chooses more than 100). When the pool needs more, the
    /// ThroughputBelowArrival warning says which limit would do. Ignored unless maxUnavailable
    /// is auto. Default "10%".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "max_unavailable_limit_schema")]
    pub max_unavailable_limit: Option<IntOrString>,

    /// How long the replacement capacity may take to become Ready (the surge placeholder
    /// Running on a Ready node) before the attempt is rolled back and counted as a failure.
    /// Go duration, greater than 0.
    #[serde(default = "default_ready_timeout")]
    #[schemars(regex(pattern = GO_DURATION_PATTERN), length(max = 64))]
    #[x_kube(validation = positive_duration_rule("readyTimeout"))]
    pub ready_timeout: String,

    /// Pause after a successful rotation before the next one starts in the same NodePool.
    /// Go duration; 0 allowed.
    #[serde(default = "default_cooldown_after")]
    #[schemars(regex(pattern = GO_DURATION_PATTERN), length(max = 64))]
    #[x_kube(validation = duration_rule("cooldownAfter"))]
    pub cooldown_after: String,

    /// Pause after a failed attempt before any new rotation starts in the same NodePool, which
    /// bounds what a systematic failure (quota, no capacity) costs. Go duration, at least
    /// cooldownAfter. Default: the larger of 10m and cooldownAfter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = GO_DURATION_PATTERN), length(max = 64))]
    #[x_kube(validation = duration_rule("failurePause"))]
    pub failure_pause: Option<String>,

    /// Expected drain time of one node, for the throughput estimate only (it never limits a
    /// drain). Go duration, greater than 0. Default: the smaller of the NodePool's
    /// terminationGracePeriod and 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = GO_DURATION_PATTERN), length(max = 64))]
    #[x_kube(validation = positive_duration_rule("drainEstimate"))]
    pub drain_estimate: Option<String>,

    /// Expected time for the replacement capacity to become Ready, for the throughput estimate
    /// only. Go duration, greater than 0 and at most readyTimeout. Default: the smaller of
    /// readyTimeout and 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = GO_DURATION_PATTERN), length(max = 64))]
    #[x_kube(validation = positive_duration_rule("provisioningEstimate"))]
    pub provisioning_estimate: Option<String>,

    /// Base delay before a node whose rotation failed is tried again; doubles with each further
    /// failure up to 8 times this value, and never reaches past the end of the window occurrence
    /// the failure happened in. Go duration, greater than 0.
    #[serde(default = "default_retry_backoff")]
    #[schemars(regex(pattern = GO_DURATION_PATTERN), length(max = 64))]
    #[x_kube(validation = positive_duration_rule("retryBackoff"))]
    pub retry_backoff: String,

    /// Node labels whose values the replacement must share with the node it replaces.
    #[serde(default)]
    pub match_node_requirements: MatchNodeRequirements,

    /// Surge-less replacement as a last resort.
    #[serde(default)]
    pub forceful_fallback: Toggle,

    /// Reserve a whole node of the old node's size instead of the sum of its pods' requests.
    #[serde(default)]
    pub whole_node_reservation: Toggle,
}

/// Which node labels the surge placeholder copies from the node being replaced. Values come from
/// the node's labels, else the NodeClaim's requirements; a key found in neither is skipped.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!self.required.exists(k, k in self.preferred)").message(
    "a label key cannot be both required and preferred"
))]
pub struct MatchNodeRequirements {
    /// Label keys the replacement must match (required node affinity). Default: zone,
    /// architecture and capacity type. Dropping topology.kubernetes.io/zone lets a zonal
    /// workload's replacement land in another zone.
    #[serde(default = "default_required_keys")]
    #[schemars(schema_with = "label_key_set_schema")]
    pub required: Vec<String>,

    /// Label keys the replacement should match if it can (preferred node affinity).
    #[serde(default)]
    #[schemars(schema_with = "label_key_set_schema")]
    pub preferred: Vec<String>,
}

/// An opt-in feature switch.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Toggle {
    /// Whether the feature is on. Default false.
    #[serde(default)]
    pub enabled: bool,
}

/// Image pre-pulling (planned for v2).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct PrePull {
    /// Must be false in v1alpha1.
    #[serde(default)]
    #[x_kube(validation = Rule::new("!self").message(
        "prePull is not available in v1alpha1; set prePull.enabled to false"
    ))]
    pub enabled: bool,
}

/// Observed state, written by the controller. Informational: rotation decisions never read it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RotationPolicyStatus {
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// NodePools this policy governs (it is their most specific matching policy).
    #[serde(default)]
    pub matched_node_pools: i32,

    /// Governed NodePools with a rotation in progress.
    #[serde(default)]
    pub rotating_node_pools: i32,

    /// Start of the maintenance window open now or opening next (RFC 3339, UTC); absent
    /// without windows and when they are open around the clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<String>,

    /// Rotations in flight / rotations at once allowed (`maxUnavailable` as the controller
    /// uses it now), summed over the governed NodePools, as `in flight/allowed`: `2/17`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<String>,

    /// Per governed NodePool: the next window, the claims due in it, the rotations in flight
    /// against maxUnavailable, and the nearest forced-expiry deadline. Written when a pool
    /// changes and at window edges, not in between.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub node_pools: Vec<NodePoolStatus>,

    /// `Ready`: True with reason Accepted when the policy is valid and governs without
    /// conflict; False with reason Invalid (a value the controller cannot use; the message names
    /// the field) or Conflict (an equally specific policy matches the same NodePool). Invalid
    /// wins over Conflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One governed NodePool in its policy's status.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// The NodePool.
    pub name: String,

    /// Start of the window open now or opening next (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<String>,

    /// Claims due for rotation in that window (by its end), not in flight yet.
    #[serde(default)]
    pub due: i32,

    /// Rotations in flight.
    #[serde(default)]
    pub in_flight: i32,

    /// Rotations at once the controller uses now: spec.surge.maxUnavailable resolved against
    /// the pool's nodes (with auto, the number it chose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<i32>,

    /// The nearest forced-expiry deadline among the pool's claims (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest_deadline: Option<String>,

    /// The NodeClaim with that deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest_deadline_node_claim: Option<String>,
}

impl Default for Surge {
    fn default() -> Self {
        Surge {
            max_unavailable: default_max_unavailable(),
            max_unavailable_limit: None,
            ready_timeout: default_ready_timeout(),
            cooldown_after: default_cooldown_after(),
            failure_pause: None,
            drain_estimate: None,
            provisioning_estimate: None,
            retry_backoff: default_retry_backoff(),
            match_node_requirements: MatchNodeRequirements::default(),
            forceful_fallback: Toggle::default(),
            whole_node_reservation: Toggle::default(),
        }
    }
}

impl Default for MatchNodeRequirements {
    fn default() -> Self {
        MatchNodeRequirements { required: default_required_keys(), preferred: Vec::new() }
    }
}

impl RotationPolicySpec {
    /// A spec with every default and the given selector and windows.
    #[cfg(test)]
    pub(crate) fn with_windows(selector: LabelSelector, windows: Vec<MaintenanceWindow>) -> Self {
        RotationPolicySpec {
            node_pool_selector: selector,
            age_threshold: default_age_threshold(),
            min_rotation_chances: default_min_rotation_chances(),
            maintenance_windows: windows,
            surge: Surge::default(),
            pre_pull: PrePull::default(),
        }
    }
}

fn default_age_threshold() -> String {
    "auto".to_string()
}
fn default_min_rotation_chances() -> i32 {
    2
}
fn default_max_unavailable() -> IntOrString {
    IntOrString::Int(1)
}
/// `null`, which the schema admits for an optional int-or-string (kube marks it nullable), reads
/// as the default instead of failing to decode the whole policy.
fn max_unavailable_or_default<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<IntOrString, D::Error> {
    Ok(Option::<IntOrString>::deserialize(deserializer)?.unwrap_or_else(default_max_unavailable))
}
fn default_ready_timeout() -> String {
    "15m".to_string()
}
fn default_cooldown_after() -> String {
    "10m".to_string()
}
fn default_retry_backoff() -> String {
    "30m".to_string()
}
fn default_required_keys() -> Vec<String> {
    DEFAULT_REQUIRED_NODE_KEYS.iter().map(|k| k.to_string()).collect()
}

/// `duration(self) > 0`, evaluated only when the pattern matched so that a malformed value is
/// reported once (by the pattern), not twice. `duration()` fails for a value past Go's range,
/// which the apiserver reports as this rule's failure: a pattern cannot bound a sum.
fn positive_duration_rule(field: &str) -> Rule {
    Rule::new(format!("!self.matches('{GO_DURATION_PATTERN}') || duration(self) > duration('0s')"))
        .message(Message::Message(format!(
            "{field} must be greater than 0 and at most {MAX_GO_DURATION}"
        )))
        .reason(Reason::FieldValueInvalid)
}

/// `duration(self) >= 0` for a duration that may be 0: only the parse matters, which fails for
/// a value past Go's range (see [`positive_duration_rule`]).
fn duration_rule(field: &str) -> Rule {
    Rule::new(format!("!self.matches('{GO_DURATION_PATTERN}') || duration(self) >= duration('0s')"))
        .message(Message::Message(format!("{field} must be at most {MAX_GO_DURATION}")))
        .reason(Reason::FieldValueInvalid)
}

fn age_threshold_rule() -> Rule {
    Rule::new(format!(
        "self == 'auto' || self == 'windows' || !self.matches('{GO_DURATION_PATTERN}') || \
         duration(self) > duration('0s')"
    ))
    .message(Message::Message(format!(
        "ageThreshold must be auto, windows or a Go duration greater than 0 and at most \
         {MAX_GO_DURATION}"
    )))
    .reason(Reason::FieldValueInvalid)
}

/// `maxUnavailable`: Kubernetes' int-or-string, an integer from 1 to [`MAX_UNAVAILABLE`], a
/// percentage from 1% to 100% or `auto`, checked by one CEL rule so that each bad value gets one
/// message saying what to write.
fn max_unavailable_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "x-kubernetes-validations": [serde_json::json!({
            "rule": format!(
                "type(self) == int ? self >= 1 && self <= {MAX_UNAVAILABLE} : (self == 'auto' || \
                 self.matches('{PERCENT_PATTERN}'))"
            ),
            "message": format!("maxUnavailable must be {MAX_UNAVAILABLE_ADMITS}"),
            "reason": "FieldValueInvalid"
        })]
    })
}

/// `maxUnavailableLimit`: an integer from 1 to [`MAX_UNAVAILABLE`] or a percentage from 1% to
/// 100%.
fn max_unavailable_limit_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "x-kubernetes-validations": [serde_json::json!({
            "rule": format!(
                "type(self) == int ? self >= 1 && self <= {MAX_UNAVAILABLE} : self.matches('{PERCENT_PATTERN}')"
            ),
            "message": format!("maxUnavailableLimit must be {INT_OR_PERCENT_ADMITS}"),
            "reason": "FieldValueInvalid"
        })]
    })
}

fn days_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 7,
        "x-kubernetes-list-type": "set",
        "items": {
            "type": "string",
            "enum": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        }
    })
}

fn label_key_set_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": 16,
        "x-kubernetes-list-type": "set",
        "items": { "type": "string", "minLength": 1, "maxLength": 317 }
    })
}

/// metav1.LabelSelector with bounds (so the CEL cost estimate is small) and the operator rules
/// the apiserver applies to built-in selectors, which a CRD does not get for free.
fn label_selector_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "A label selector: matchLabels and matchExpressions are ANDed; {} matches every NodePool.",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "matchLabels": {
                "type": "object",
                "description": "Label key/value pairs the NodePool must carry.",
                "maxProperties": 64,
                "additionalProperties": { "type": "string", "maxLength": 63 }
            },
            "matchExpressions": {
                "type": "array",
                "description": "Label requirements; all must hold.",
                "maxItems": 64,
                "x-kubernetes-list-type": "atomic",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {
                            "type": "string",
                            "description": "The label key.",
                            "minLength": 1,
                            "maxLength": 317
                        },
                        "operator": {
                            "type": "string",
                            "description": "In, NotIn, Exists or DoesNotExist.",
                            "enum": ["In", "NotIn", "Exists", "DoesNotExist"]
                        },
                        "values": {
                            "type": "array",
                            "description": "Values for In and NotIn (at least one); empty for Exists and DoesNotExist.",
                            "maxItems": 64,
                            "x-kubernetes-list-type": "atomic",
                            "items": { "type": "string", "maxLength": 63 }
                        }
                    },
                    "x-kubernetes-validations": [
                        {
                            "rule": "(self.operator == 'In' || self.operator == 'NotIn') == (has(self.values) && size(self.values) > 0)",
                            "message": "In and NotIn need at least one value; Exists and DoesNotExist take none",
                            "reason": "FieldValueInvalid"
                        }
                    ]
                }
            }
        }
    })
}

#[cfg(test)]
mod tests;
