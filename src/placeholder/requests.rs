//! Requests (§3.3): a pod's effective requests as the scheduler computes them, the sums the
//! sizing needs (reschedulable pods, DaemonSet overhead), and the arithmetic of [`Resources`]
//! in thousandths.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::census::{PodClass, classify, is_completed, is_owned_by};
use crate::karpenter;

/// Resource name → amount in thousandths of the unit (`cpu: 1500` is 1.5 cores).
pub(crate) type Resources = BTreeMap<String, i128>;

/// A pod's effective requests as the scheduler computes them (`PodRequests` in
/// k8s.io/component-helpers): the sum over containers, the max with the init-container peak
/// (sidecars, i.e. init containers with `restartPolicy: Always`, run alongside and add to both),
/// pod-level requests (`spec.resources`) replacing the container sum for cpu, memory and
/// hugepages, plus `spec.overhead`. While an in-place resize is in flight a container counts
/// with the larger of its spec and its status (`allocatedResources`, actual requests), per
/// container: at least what the scheduler reserves.
pub(crate) fn pod_requests(pod: &Pod) -> Resources {
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
pub(crate) fn reschedulable_requests(pods: &[Pod], node_name: &str) -> Resources {
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
pub(crate) fn daemonset_overhead(pods: &[Pod]) -> Resources {
    let mut total = Resources::new();
    for pod in pods.iter().filter(|p| is_owned_by(p, "DaemonSet") && !is_completed(p)) {
        add_into(&mut total, &pod_requests(pod));
    }
    total
}

// ---------------------------------------------------------------------------------------------
// Quantity helpers

pub(super) fn parse_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
    list.iter()
        .flat_map(|l| l.iter())
        .filter_map(|(k, v)| Some((k.clone(), karpenter::quantity_millis(v)?)))
        .collect()
}

pub(super) fn add_into(acc: &mut Resources, other: &Resources) {
    for (k, v) in other {
        *acc.entry(k.clone()).or_insert(0) += v;
    }
}

pub(super) fn max_into(acc: &mut Resources, other: &Resources) {
    for (k, v) in other {
        let slot = acc.entry(k.clone()).or_insert(*v);
        *slot = (*slot).max(*v);
    }
}

/// A quantity from thousandths: whole units when exact (`4`, `17179869184`), else milli-units
/// (`1500m`).
pub(crate) fn millis_quantity(millis: i128) -> Quantity {
    if millis % 1000 == 0 {
        Quantity(format!("{}", millis / 1000))
    } else {
        Quantity(format!("{millis}m"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placeholder::fixtures::*;

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

    #[test]
    fn quantities_render() {
        assert_eq!(millis_quantity(1500).0, "1500m");
        assert_eq!(millis_quantity(4000).0, "4");
        assert_eq!(millis_quantity(0).0, "0");
    }
}
