//! Watch events to pool keys (spec §5.2): NodeClaim → its pool; placeholder Pod reaching Running
//! (or gone) → the pool of the claim it surges for; Node reaching Ready → its pool; NodePool →
//! itself; Karpenter's `Nominated` Event → the pool of the claim it names; any RotationPolicy
//! change or relist → every pool.
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::cluster::ObjectKind;
use crate::cluster::change::{Change, Watched};
use crate::engine::Key;
use crate::karpenter::{NODEPOOL_LABEL, node_ready};

/// Which pools a change wakes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    None,
    Pool(String),
    All,
}

/// Whether a change asks for a policy status recompute before the tick: a RotationPolicy
/// applied, deleted or relisted, so that whoever edits one sees it accepted or rejected at once.
/// NodePool changes move the view too (§5.4: which pools a policy governs, which of them
/// rotate, ties), but a rotation changes its pool's annotations several times and every start
/// and end moves the in-flight counts: those are answered by the tick's recompute, so that the
/// status is written at most once a tick however many rotations start and end
/// (docs/decisions/footprint.md).
pub fn affects_status(change: &Change) -> bool {
    match change {
        Change::Resynced(kind) => matches!(kind, ObjectKind::RotationPolicy),
        Change::Applied(w) | Change::Deleted(w) => matches!(w, Watched::Policy(_)),
    }
}

/// Remembers the last phase/readiness seen per object, to fire on the edge only.
#[derive(Debug, Default)]
pub struct Mapper {
    running: HashMap<String, bool>,
    ready: HashMap<String, bool>,
}

fn placeholder_pool(pod: &Pod, pool_of_claim: &dyn Fn(&str) -> Option<String>) -> Keys {
    let from_claim =
        pod.annotations().get(Key::SurgeFor.full()).and_then(|claim| pool_of_claim(claim));
    let from_selector = || {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_selector.as_ref())
            .and_then(|s| s.get(NODEPOOL_LABEL))
            .cloned()
    };
    match from_claim.or_else(from_selector) {
        Some(pool) => Keys::Pool(pool),
        None => Keys::None,
    }
}

fn labelled_pool<K: ResourceExt>(obj: &K) -> Keys {
    match obj.labels().get(NODEPOOL_LABEL) {
        Some(pool) => Keys::Pool(pool.clone()),
        None => Keys::None,
    }
}

impl Mapper {
    pub fn keys(
        &mut self,
        change: &Change,
        pool_of_claim: &dyn Fn(&str) -> Option<String>,
    ) -> Keys {
        match change {
            Change::Resynced(_) => Keys::All,
            Change::Applied(Watched::Policy(_)) | Change::Deleted(Watched::Policy(_)) => Keys::All,
            Change::Applied(Watched::Pool(p)) | Change::Deleted(Watched::Pool(p)) => {
                Keys::Pool(p.name_any())
            }
            Change::Applied(Watched::Claim(c)) | Change::Deleted(Watched::Claim(c)) => {
                labelled_pool(c.as_ref())
            }
            Change::Applied(Watched::Node(n)) => {
                let ready = node_ready(n);
                let was = self.ready.insert(n.name_any(), ready).unwrap_or(false);
                if ready && !was { labelled_pool(n.as_ref()) } else { Keys::None }
            }
            Change::Deleted(Watched::Node(n)) => {
                self.ready.remove(&n.name_any());
                Keys::None
            }
            Change::Applied(Watched::Placeholder(p)) => {
                let running = crate::placeholder::running(p);
                let was = self.running.insert(p.name_any(), running).unwrap_or(false);
                if running && !was { placeholder_pool(p, pool_of_claim) } else { Keys::None }
            }
            Change::Deleted(Watched::Placeholder(p)) => {
                self.running.remove(&p.name_any());
                placeholder_pool(p, pool_of_claim)
            }
            // A nomination may tie a claim to a rotation's placeholder (its `launched-for`).
            Change::Applied(Watched::Nomination(e)) => {
                match crate::cluster::nominated_claim(e).and_then(pool_of_claim) {
                    Some(pool) => Keys::Pool(pool),
                    None => Keys::None,
                }
            }
            Change::Deleted(Watched::Nomination(_)) => Keys::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::karpenter::NodeClaim;
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, PodSpec, PodStatus};

    fn node(name: &str, pool: &str, ready: bool) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.labels = Some([(NODEPOOL_LABEL.to_string(), pool.to_string())].into());
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
        Arc::new(n)
    }

    fn placeholder(phase: &str) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some("surge-c1".into());
        p.metadata.annotations =
            Some([(Key::SurgeFor.full().to_string(), "c1".to_string())].into());
        p.spec = Some(PodSpec {
            node_selector: Some([(NODEPOOL_LABEL.to_string(), "fallback".to_string())].into()),
            ..PodSpec::default()
        });
        p.status = Some(PodStatus { phase: Some(phase.into()), ..PodStatus::default() });
        Arc::new(p)
    }

    #[test]
    fn maps_edges_to_pools() {
        let mut m = Mapper::default();
        let known = |c: &str| (c == "c1").then(|| "general".to_string());
        let unknown = |_: &str| None;
        let n = |ready| Change::Applied(Watched::Node(node("n1", "general", ready)));
        assert_eq!(m.keys(&n(false), &known), Keys::None);
        assert_eq!(m.keys(&n(true), &known), Keys::Pool("general".into()));
        assert_eq!(m.keys(&n(true), &known), Keys::None);
        let p = |phase| Change::Applied(Watched::Placeholder(placeholder(phase)));
        assert_eq!(m.keys(&p("Pending"), &known), Keys::None);
        assert_eq!(m.keys(&p("Running"), &known), Keys::Pool("general".into()));
        assert_eq!(m.keys(&p("Running"), &known), Keys::None);
        let gone = Change::Deleted(Watched::Placeholder(placeholder("Running")));
        assert_eq!(m.keys(&gone, &unknown), Keys::Pool("fallback".into()));
        let mut claim = NodeClaim::default();
        claim.metadata.labels = Some([(NODEPOOL_LABEL.to_string(), "gpu".to_string())].into());
        assert_eq!(
            m.keys(&Change::Applied(Watched::Claim(Arc::new(claim))), &known),
            Keys::Pool("gpu".into())
        );
        assert_eq!(m.keys(&Change::Resynced(ObjectKind::NodeClaim), &known), Keys::All);
        // Karpenter's nomination of a placeholder wakes the pool of the claim it names.
        let nominated = |message: &str| {
            let e = k8s_openapi::api::core::v1::Event {
                reason: Some(crate::cluster::NOMINATED_REASON.into()),
                message: Some(message.into()),
                ..Default::default()
            };
            Change::Applied(Watched::Nomination(Arc::new(e)))
        };
        let launch = nominated("Pod should schedule on: nodeclaim/c1");
        assert_eq!(m.keys(&launch, &known), Keys::Pool("general".into()));
        assert_eq!(m.keys(&launch, &unknown), Keys::None, "a claim not seen yet wakes nothing");
        assert_eq!(m.keys(&nominated("Pod should schedule on: node/n1"), &known), Keys::None);
    }

    #[test]
    fn policy_changes_ask_for_a_status_update_and_pool_changes_wait_for_the_tick() {
        let mut pool = crate::karpenter::NodePool::default();
        pool.metadata.name = Some("general".into());
        let pool = Watched::Pool(Arc::new(pool));
        let policy = Watched::Policy(Arc::new(crate::policy::crd::RotationPolicy::new(
            "p",
            serde_json::from_value(serde_json::json!({
                "nodePoolSelector": {}, "maintenanceWindows": []
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )));
        assert!(!affects_status(&Change::Applied(pool.clone())));
        assert!(!affects_status(&Change::Deleted(pool)));
        assert!(affects_status(&Change::Applied(policy.clone())));
        assert!(affects_status(&Change::Deleted(policy)));
        assert!(!affects_status(&Change::Resynced(ObjectKind::NodePool)));
        assert!(affects_status(&Change::Resynced(ObjectKind::RotationPolicy)));
        assert!(!affects_status(&Change::Resynced(ObjectKind::NodeClaim)));
        let n = Change::Applied(Watched::Node(node("n1", "general", true)));
        assert!(!affects_status(&n));
        let p = Change::Applied(Watched::Placeholder(placeholder("Running")));
        assert!(!affects_status(&p));
    }
}
