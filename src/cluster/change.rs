//! What a watch saw: the one change type of both clusters. The kube reflectors of
//! `noderotation run` and the in-memory cluster's lagging caches emit it; [`crate::trigger`]
//! maps it to the pools it wakes.
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, Node, Pod};

use super::ObjectKind;
use crate::karpenter::{NodeClaim, NodePool};
use crate::policy::crd::RotationPolicy;

/// One watched object, as the reflector stored it.
#[derive(Debug, Clone)]
pub enum Watched {
    Pool(Arc<NodePool>),
    Claim(Arc<NodeClaim>),
    Node(Arc<Node>),
    Placeholder(Arc<Pod>),
    Policy(Arc<RotationPolicy>),
    /// Karpenter's `Nominated` Event on a pod of the controller's namespace.
    Nomination(Arc<Event>),
}

/// What a watch saw, for the work queue (which maps it to pool keys).
#[derive(Debug, Clone)]
pub enum Change {
    Applied(Watched),
    Deleted(Watched),
    /// A (re)list of this kind completed: the store was replaced wholesale.
    Resynced(ObjectKind),
}
