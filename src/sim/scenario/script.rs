//! The operator's script in a scenario file: its steps, their actions, and how a step picks a
//! node.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::crd::RotationPolicy;

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
