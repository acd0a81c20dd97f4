//! The placeholder pod itself (§3.3): sized from the census and the clamp, steered by the
//! affinity, built for the pause image.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, Node, Pod, PodSecurityContext, PodSpec, ResourceRequirements,
    SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::affinity::{KeyReport, node_affinity, pool_tolerations};
use super::clamp::{allocatable, clamp, clamp_limit, is_container_resource};
use super::name::placeholder_name;
use super::requests::{Resources, daemonset_overhead, millis_quantity, reschedulable_requests};
use crate::cluster::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::engine::Key;
use crate::karpenter::{NODEPOOL_LABEL, NodeClaim, NodePool};
use crate::policy::settings::Effective;

/// The pause container's name.
pub const PAUSE_CONTAINER: &str = "pause";
/// UID and GID of the pause container (the `nobody` of the upstream pause image).
pub const PLACEHOLDER_UID: i64 = 65535;

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

    let (affinity, keys) =
        node_affinity(&input.settings.match_node_requirements, input.node, input.claim, input.pool);

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
            annotations: Some(placeholder_annotations(input.claim, claim_name)),
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

/// The placeholder's annotations: the claim it surges for (`surge-for`) and the attempt it was
/// created for (the claim's `started-at`), which proves it the controller's even when the
/// create's answer never arrived ([`super::created_for_attempt`]).
fn placeholder_annotations(claim: &NodeClaim, claim_name: String) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([(Key::SurgeFor.full().to_string(), claim_name)]);
    if let Some(stamp) = claim.annotations().get(Key::StartedAt.full()) {
        annotations.insert(Key::StartedAt.full().to_string(), stamp.clone());
    }
    annotations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placeholder::census::HOSTNAME_LABEL;
    use crate::placeholder::fixtures::*;
    use crate::placeholder::surge_for;

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
}
