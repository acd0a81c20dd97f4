//! Watch events to pool keys (spec §5.2): NodeClaim → its pool; placeholder Pod reaching Running
//! (or gone) → the pool of the claim it surges for; Node reaching Ready → its pool; NodePool →
//! itself; Karpenter's `Nominated` Event → the pool of the claim it names; a RotationPolicy
//! created, deleted or with a new spec, or any relist → every pool.
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::cluster::ObjectKind;
use crate::cluster::change::{Change, Watched};
use crate::engine::Key;
use crate::karpenter::{NODEPOOL_LABEL, node_ready};
use crate::policy::crd::RotationPolicySpec;

/// Which pools a change wakes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Keys {
    None,
    Pool(String),
    All,
}

/// What one watch change asks for: the pools it wakes, and whether the policy status is
/// recomputed before the tick.
///
/// `status`: a RotationPolicy applied with another spec, deleted or relisted, so that whoever
/// edits one sees it accepted or rejected at once. NodePool changes move the view too (§5.4:
/// which pools a policy governs, which of them rotate, ties), but a rotation changes its pool's
/// annotations several times and every start and end moves the in-flight counts: those are
/// answered by the tick's recompute, so that the status is written at most once a tick however
/// many rotations start and end (docs/decisions/footprint.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wake {
    pub pools: Keys,
    pub status: bool,
}

impl Wake {
    fn pools(pools: Keys) -> Self {
        Wake { pools, status: false }
    }
}

/// Remembers the last phase/readiness seen per object, to fire on the edge only, and the spec
/// of each policy: a policy applied with the spec it had (its status written, which is this
/// controller's own write, or its metadata edited) changes nothing a pass or the status view
/// reads, so it wakes nothing.
#[derive(Debug, Default)]
pub(crate) struct Mapper {
    running: HashMap<String, bool>,
    ready: HashMap<String, bool>,
    policies: HashMap<String, (Option<i64>, RotationPolicySpec)>,
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
    /// What `change` asks for; `pool_of_claim` names the pool of a claim the cache holds.
    pub(crate) fn map(
        &mut self,
        change: &Change,
        pool_of_claim: &dyn Fn(&str) -> Option<String>,
    ) -> Wake {
        let every = Wake { pools: Keys::All, status: true };
        let pools = match change {
            Change::Resynced(kind) => {
                return Wake {
                    pools: Keys::All,
                    status: matches!(kind, ObjectKind::RotationPolicy),
                };
            }
            Change::Applied(Watched::Policy(p)) => {
                let name = p.name_any();
                let generation = p.metadata.generation;
                return match self.policies.get(&name) {
                    Some((g, spec)) if *g == generation && *spec == p.spec => {
                        Wake::pools(Keys::None)
                    }
                    _ => {
                        self.policies.insert(name, (generation, p.spec.clone()));
                        every
                    }
                };
            }
            Change::Deleted(Watched::Policy(p)) => {
                self.policies.remove(&p.name_any());
                return every;
            }
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
        };
        Wake::pools(pools)
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

    fn pools(m: &mut Mapper, c: &Change, pool_of_claim: &dyn Fn(&str) -> Option<String>) -> Keys {
        m.map(c, pool_of_claim).pools
    }

    #[test]
    fn maps_edges_to_pools() {
        let mut m = Mapper::default();
        let known = |c: &str| (c == "c1").then(|| "general".to_string());
        let unknown = |_: &str| None;
        let n = |ready| Change::Applied(Watched::Node(node("n1", "general", ready)));
        assert_eq!(pools(&mut m, &n(false), &known), Keys::None);
        assert_eq!(pools(&mut m, &n(true), &known), Keys::Pool("general".into()));
        assert_eq!(pools(&mut m, &n(true), &known), Keys::None);
        let p = |phase| Change::Applied(Watched::Placeholder(placeholder(phase)));
        assert_eq!(pools(&mut m, &p("Pending"), &known), Keys::None);
        assert_eq!(pools(&mut m, &p("Running"), &known), Keys::Pool("general".into()));
        assert_eq!(pools(&mut m, &p("Running"), &known), Keys::None);
        let gone = Change::Deleted(Watched::Placeholder(placeholder("Running")));
        assert_eq!(pools(&mut m, &gone, &unknown), Keys::Pool("fallback".into()));
        let mut claim = NodeClaim::default();
        claim.metadata.labels = Some([(NODEPOOL_LABEL.to_string(), "gpu".to_string())].into());
        assert_eq!(
            pools(&mut m, &Change::Applied(Watched::Claim(Arc::new(claim))), &known),
            Keys::Pool("gpu".into())
        );
        assert_eq!(pools(&mut m, &Change::Resynced(ObjectKind::NodeClaim), &known), Keys::All);
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
        assert_eq!(pools(&mut m, &launch, &known), Keys::Pool("general".into()));
        assert_eq!(
            pools(&mut m, &launch, &unknown),
            Keys::None,
            "a claim not seen yet wakes nothing"
        );
        assert_eq!(
            pools(&mut m, &nominated("Pod should schedule on: node/n1"), &known),
            Keys::None
        );
    }

    #[test]
    fn policy_changes_ask_for_a_status_update_and_pool_changes_wait_for_the_tick() {
        let mut m = Mapper::default();
        let known = |_: &str| Some("general".to_string());
        let mut status = |change: &Change| m.map(change, &known).status;
        let mut pool = crate::karpenter::NodePool::default();
        pool.metadata.name = Some("general".into());
        let pool = Watched::Pool(Arc::new(pool));
        let policy = Watched::Policy(Arc::new(policy(Some(1), "Wed")));
        assert!(!status(&Change::Applied(pool.clone())));
        assert!(!status(&Change::Deleted(pool)));
        assert!(status(&Change::Applied(policy.clone())));
        assert!(status(&Change::Deleted(policy)));
        assert!(!status(&Change::Resynced(ObjectKind::NodePool)));
        assert!(status(&Change::Resynced(ObjectKind::RotationPolicy)));
        assert!(!status(&Change::Resynced(ObjectKind::NodeClaim)));
        let n = Change::Applied(Watched::Node(node("n1", "general", true)));
        assert!(!status(&n));
        let p = Change::Applied(Watched::Placeholder(placeholder("Running")));
        assert!(!status(&p));
    }

    fn policy(generation: Option<i64>, day: &str) -> crate::policy::crd::RotationPolicy {
        let window = serde_json::json!({
            "timezone": "Asia/Tokyo", "days": [day], "start": "02:00", "end": "05:00"
        });
        let mut p = crate::policy::crd::RotationPolicy::new(
            "p",
            serde_json::from_value(serde_json::json!({
                "nodePoolSelector": {}, "maintenanceWindows": [window]
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        );
        p.metadata.generation = generation;
        p
    }

    /// The controller's own status write comes back as a watch event of the policy: it must
    /// neither ask for another status recompute (a rotation moving the view every second made
    /// the status a write a second, each answering the last) nor wake every pool.
    #[test]
    fn a_policy_applied_with_the_spec_it_had_wakes_nothing() {
        let mut m = Mapper::default();
        let known = |_: &str| Some("general".to_string());
        let applied =
            |p: crate::policy::crd::RotationPolicy| Change::Applied(Watched::Policy(Arc::new(p)));
        let every = Wake { pools: Keys::All, status: true };
        let none = Wake { pools: Keys::None, status: false };
        let first = policy(Some(1), "Wed");
        assert_eq!(m.map(&applied(first.clone()), &known), every, "first seen");
        let mut written = first.clone();
        written.status = Some(crate::policy::crd::RotationPolicyStatus {
            in_flight: Some("1/2".into()),
            ..Default::default()
        });
        written.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        assert_eq!(m.map(&applied(written), &known), none, "status and labels only");
        let edited = policy(Some(2), "Sat");
        assert_eq!(m.map(&applied(edited.clone()), &known), every, "the spec edited");
        assert_eq!(m.map(&applied(edited.clone()), &known), none);
        let regenerated = policy(Some(3), "Sat");
        assert_eq!(m.map(&applied(regenerated), &known), every, "a new generation");
        let deleted = Change::Deleted(Watched::Policy(Arc::new(edited.clone())));
        assert_eq!(m.map(&deleted, &known), every);
        assert_eq!(m.map(&applied(edited), &known), every, "created again");
        assert_eq!(
            m.map(&Change::Resynced(ObjectKind::RotationPolicy), &known),
            every,
            "a relist may hide an edit"
        );
    }
}
