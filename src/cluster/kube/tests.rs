use super::*;
use crate::engine::Key;

/// The realistic Node of the bench (an EKS node under Karpenter) keeps what the controller
/// reads, and loses the rest.
#[test]
fn a_cached_node_keeps_what_the_controller_reads() {
    let json = include_str!("../../../benches/suite/fixtures/node.json");
    let mut full: Node = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
    let ours = [(Key::SurgeFor, "a-claim"), (Key::DoNotDisrupt, "true"), (Key::Cordoned, "true")];
    for (key, value) in ours {
        full.annotations_mut().insert(key.full().into(), value.into());
    }
    let mut node = full.clone();
    projection::node(&mut node);
    assert_eq!(node.metadata.managed_fields, None);
    let labels: Vec<&String> = node.labels().keys().collect();
    assert!(full.labels().len() > 1, "the fixture has more");
    assert_eq!(labels, [crate::karpenter::NODEPOOL_LABEL], "the pool's label only");
    let kept: Vec<(&str, &str)> =
        node.annotations().iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut want: Vec<(&str, &str)> = ours.iter().map(|(k, v)| (k.full(), *v)).collect();
    want.sort();
    assert_eq!(kept, want, "the vocabulary's keys, no other annotation");
    assert!(full.annotations().len() > want.len(), "the fixture has others");
    assert_eq!(node.spec, full.spec, "providerID, taints, unschedulable");
    assert!(crate::karpenter::node_ready(&full), "the fixture is Ready");
    assert!(crate::karpenter::node_ready(&node), "and still reads Ready");
    let (a, b) = (
        serde_json::to_string(&full).unwrap_or_default(),
        serde_json::to_string(&node).unwrap_or_default(),
    );
    assert!(b.len() * 3 < a.len(), "{} of {} bytes kept", b.len(), a.len());
    let (status, before) =
        (node.status.unwrap_or_default(), full.status.clone().unwrap_or_default());
    assert!(before.allocatable.is_some() && before.images.is_some() && before.node_info.is_some());
    assert_eq!(status.allocatable, before.allocatable);
    assert_eq!((status.images, status.node_info, status.addresses), (None, None, None));
    let conditions: Vec<(String, String, bool)> = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status, c.message.is_some() || c.last_heartbeat_time.is_some()))
        .collect();
    assert_eq!(conditions, [("Ready".into(), "True".into(), false)]);
}

/// The realistic NodeClaim of the bench keeps its pool label, spec, the status fields and
/// conditions the controller reads, and the vocabulary's annotations.
#[test]
fn a_cached_claim_keeps_what_the_controller_reads() {
    let json = include_str!("../../../benches/suite/fixtures/nodeclaim.json");
    let mut full: NodeClaim = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
    full.annotations_mut().insert(Key::State.full().into(), "pending".into());
    full.annotations_mut().insert(Key::StartedAt.full().into(), "2026-01-01T00:00:00Z".into());
    let mut claim = full.clone();
    projection::claim(&mut claim);
    assert_eq!(claim.metadata.managed_fields, None);
    assert_eq!(claim.metadata.owner_references, None);
    assert!(full.labels().len() > 1 && full.annotations().len() > 2, "the fixture has more");
    assert_eq!(claim.node_pool(), full.node_pool());
    assert_eq!(claim.labels().len(), 1, "only the pool's label");
    let keys: Vec<&str> = claim.annotations().keys().map(String::as_str).collect();
    assert_eq!(keys, [Key::StartedAt.full(), Key::State.full()]);
    assert_eq!(claim.spec, full.spec, "requirements, expireAfter, terminationGracePeriod");
    assert_eq!(claim.metadata.finalizers, full.metadata.finalizers);
    assert_eq!(claim.metadata.creation_timestamp, full.metadata.creation_timestamp);
    let (status, before) =
        (claim.status.clone().unwrap_or_default(), full.status.clone().unwrap_or_default());
    assert_eq!((&status.node_name, &status.provider_id), (&before.node_name, &before.provider_id));
    assert_eq!(status.allocatable, before.allocatable);
    assert!(full.is_ready() && full.is_initialized(), "the fixture is Ready and Initialized");
    assert!(claim.is_ready() && claim.is_initialized(), "and still reads so");
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Initialized", "Ready"]);
    assert!(
        status.conditions.iter().all(|c| c.reason.is_none() && c.last_transition_time.is_none())
    );
    let (a, b) = (
        serde_json::to_string(&full).unwrap_or_default(),
        serde_json::to_string(&claim).unwrap_or_default(),
    );
    assert!(b.len() * 3 < a.len(), "{} of {} bytes kept", b.len(), a.len());
}

#[test]
fn merge_patch_sets_removes_and_carries_the_resource_version() {
    let mut patch = Patch::default();
    patch.set.insert("noderotation.io/state".into(), "pending".into());
    patch.remove.insert("noderotation.io/gone".into());
    patch.unschedulable = Some(true);
    let node = ObjectRef::cluster(ObjectKind::Node, "n1");
    let body = KubeCluster::merge_patch_body(&node, &patch, Some("42"));
    assert_eq!(
        body,
        Ok(json!({
            "metadata": {
                "annotations": {"noderotation.io/state": "pending", "noderotation.io/gone": null},
                "resourceVersion": "42"
            },
            "spec": {"unschedulable": true}
        }))
    );
    let claim = ObjectRef::cluster(ObjectKind::NodeClaim, "c1");
    assert!(matches!(
        KubeCluster::merge_patch_body(&claim, &patch, None),
        Err(ApiError::Invalid(_))
    ));
    patch.unschedulable = None;
    assert_eq!(
        KubeCluster::merge_patch_body(&claim, &patch, None)
            .map(|b| b["metadata"].get("resourceVersion").cloned()),
        Ok(None)
    );
}

#[test]
fn errors_map_by_status_code() {
    let api = |code: u16, reason: &str| {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.into(),
            message: "m".into(),
            ..kube::core::Status::default()
        }))
    };
    assert_eq!(map_error(api(404, "NotFound"), false), ApiError::NotFound);
    assert_eq!(map_error(api(409, "Conflict"), false), ApiError::Conflict);
    assert_eq!(map_error(api(409, "AlreadyExists"), true), ApiError::AlreadyExists);
    assert_eq!(map_error(api(409, "Conflict"), true), ApiError::AlreadyExists);
    assert_eq!(map_error(api(403, "Forbidden"), false), ApiError::Forbidden("m".into()));
    assert_eq!(map_error(api(422, "Invalid"), false), ApiError::Invalid("m".into()));
    assert_eq!(map_error(api(429, "TooManyRequests"), false), ApiError::Transient("m".into()));
    assert!(matches!(map_error(api(503, ""), false), ApiError::Transient(_)));
}

#[test]
fn a_watch_that_keeps_failing_after_the_first_sync_is_reported_broken() {
    let health = WatchHealth::default();
    let t0 = std::time::Instant::now();
    let secs = |s: u64| t0 + std::time::Duration::from_secs(s);
    assert!(health.broken(t0).is_empty());
    // The NodeClaim watch breaks; the watcher retries with a backoff of at most 30s.
    health.failed(ObjectKind::NodeClaim, secs(10));
    health.failed(ObjectKind::NodeClaim, secs(40));
    assert_eq!(health.broken(secs(41)), [ObjectKind::NodeClaim]);
    assert_eq!(health.broken(secs(40 + 119)), [ObjectKind::NodeClaim]);
    // An event (a relist, or any change) shows it delivers again.
    health.delivered(ObjectKind::NodeClaim);
    assert!(health.broken(secs(60)).is_empty());
    // A watch re-established without an event: no error for longer than any backoff.
    health.failed(ObjectKind::Node, secs(100));
    assert_eq!(health.broken(secs(150)), [ObjectKind::Node]);
    assert!(health.broken(secs(100) + WATCH_RECOVERY).is_empty());
}

#[test]
fn the_pods_of_a_node_are_listed_from_the_watch_cache() -> Result<(), kube::core::request::Error> {
    let request = kube::core::Request::new("/api/v1/pods").list(&pods_on_node_params("n1"))?;
    let query = request.uri().query().unwrap_or_default().to_string();
    let pairs: Vec<(String, String)> =
        url_pairs(&query).into_iter().filter(|(k, _)| k != "timeoutSeconds").collect();
    assert_eq!(
        pairs,
        [
            ("fieldSelector".to_string(), "spec.nodeName=n1".to_string()),
            ("resourceVersion".to_string(), "0".to_string())
        ]
    );
    Ok(())
}

/// The decoded `key=value` pairs of a query string.
fn url_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace("%3D", "=").replace("%3d", "=")))
        .collect()
}

#[test]
fn truncates_on_char_boundaries() {
    assert_eq!(truncate("ab", 5), "ab");
    assert_eq!(truncate("aé", 2), "a");
}
