//! Every request the operator's commands send to the API server, as RBAC sees it: API group,
//! resource, verb, where (the whole cluster or the operator's namespace) and whether the name
//! is fixed. The ClusterRole and Role of the Helm chart and of the kustomize base grant exactly
//! this and nothing else (`tests/deploy.rs` compares them rule by rule; the apiserver tier
//! records what the binary really sends and checks it against this table).
//!
//! Discovery (`GET /apis/karpenter.sh/v1`, the preflight) is not listed: every authenticated
//! user may read it (the `system:discovery` ClusterRole).

/// Where a request is sent, and so which role grants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Cluster-scoped objects, or namespaced ones in every namespace: the ClusterRole.
    Cluster,
    /// The operator's namespace only (`--namespace`): the Role.
    Namespace,
}

/// The one object a request names, when its rule can be narrowed to that name
/// (`resourceNames`; a `list` or `watch` only with a `metadata.name` field selector). `create`
/// cannot be narrowed this way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Name {
    /// Any object of the resource.
    Any,
    /// The leader-election Lease (`--leader-election-id`).
    Lease,
    /// The operator's own Deployment (`noderotation uninstall --stop-deployment`).
    Deployment,
    /// The placeholders' PriorityClass (`--priority-class`).
    PriorityClass,
    /// The binding of the admission policy that reserves noderotation.io/ annotations for the
    /// operator (`noderotation uninstall --admission-policy-binding`).
    AdmissionPolicyBinding,
}

/// Which part of the operator needs a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Who {
    /// `noderotation run`: preflight, watches, passes, Events, leader election.
    Run,
    /// `noderotation uninstall` (the Helm pre-delete hook).
    Uninstall,
}

/// When a request is sent, and so which manifest grants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gate {
    /// Always: the roles of `deploy/base/rbac.yaml` and the chart's `templates/rbac.yaml`.
    Always,
    /// Only with `--metrics-auth kubernetes`: the chart's `templates/metrics-auth.yaml`.
    MetricsAuth,
}

/// One request the code sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Resource, with its subresource (`rotationpolicies/status`).
    pub resource: &'static str,
    pub verb: &'static str,
    pub scope: Scope,
    pub name: Name,
    pub who: Who,
    pub gate: Gate,
    /// What sends it.
    pub why: &'static str,
}

const fn run(
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    scope: Scope,
    why: &'static str,
) -> Access {
    Access { group, resource, verb, scope, name: Name::Any, who: Who::Run, gate: Gate::Always, why }
}

const fn gated(access: Access, gate: Gate) -> Access {
    Access { gate, ..access }
}

const fn named(access: Access, name: Name) -> Access {
    Access { name, ..access }
}

const fn by_uninstall(access: Access) -> Access {
    Access { who: Who::Uninstall, ..access }
}

use Scope::{Cluster, Namespace};

/// The requests, in no particular order; a (group, resource, verb, scope) appears once, under
/// the first command that needs it (`uninstall` reuses most of `run`'s).
pub const REQUESTS: &[Access] = &[
    // Karpenter's objects: watched, read fresh before every conditional write, annotated with
    // merge patches (never `update`); a rotation ends by deleting the old claim. Never create:
    // capacity is Karpenter's to provision.
    run("karpenter.sh", "nodepools", "list", Cluster, "preflight, the NodePool watch"),
    run("karpenter.sh", "nodepools", "watch", Cluster, "the NodePool watch"),
    run("karpenter.sh", "nodepools", "get", Cluster, "fresh read before a conditional write"),
    run("karpenter.sh", "nodepools", "patch", Cluster, "rotation state in annotations"),
    run("karpenter.sh", "nodeclaims", "list", Cluster, "preflight, the NodeClaim watch"),
    run("karpenter.sh", "nodeclaims", "watch", Cluster, "the NodeClaim watch"),
    run("karpenter.sh", "nodeclaims", "get", Cluster, "fresh read before a conditional write"),
    run("karpenter.sh", "nodeclaims", "patch", Cluster, "claim state in annotations"),
    run(
        "karpenter.sh",
        "nodeclaims",
        "delete",
        Cluster,
        "the old claim; a surge claim reaped (uninstall: one that never turned Ready)",
    ),
    // Nodes: do-not-disrupt and our markers, the cordon.
    run("", "nodes", "list", Cluster, "the Node watch; a node found by providerID"),
    run("", "nodes", "watch", Cluster, "the Node watch"),
    run("", "nodes", "get", Cluster, "fresh read before a conditional write"),
    run("", "nodes", "patch", Cluster, "markers, do-not-disrupt, cordon"),
    // The pods of one node, listed on demand (field selector spec.nodeName): no cluster-wide
    // pod cache, no get or watch of other namespaces' pods.
    run("", "pods", "list", Cluster, "the pods of a candidate or surge node"),
    // Placeholder pods live only in the operator's namespace.
    run("", "pods", "list", Namespace, "the placeholder watch"),
    run("", "pods", "watch", Namespace, "the placeholder watch"),
    run("", "pods", "get", Namespace, "fresh read of a placeholder"),
    run("", "pods", "create", Namespace, "a surge placeholder"),
    run("", "pods", "delete", Namespace, "a placeholder released or orphaned"),
    // Karpenter's `Nominated` Events on the placeholders (core/v1, field-selected on the
    // reason): which claim it launched for each, the only claims the reap deletes.
    run("", "events", "list", Namespace, "the nominations watch; one placeholder's, fresh"),
    run("", "events", "watch", Namespace, "the nominations watch"),
    // Our own Events (events.k8s.io/v1 only), in the namespace of the object they are about:
    // `default` for cluster-scoped objects.
    run("events.k8s.io", "events", "create", Cluster, "an Event"),
    run("events.k8s.io", "events", "patch", Cluster, "the next occurrence of an Event series"),
    run("noderotation.io", "rotationpolicies", "list", Cluster, "preflight, the policy watch"),
    run("noderotation.io", "rotationpolicies", "watch", Cluster, "the policy watch"),
    run("noderotation.io", "rotationpolicies", "get", Cluster, "a status write without a read"),
    run("noderotation.io", "rotationpolicies/status", "update", Cluster, "policy status (PUT)"),
    // The placeholders' PriorityClass: checked by the preflight, then watched by name (a
    // metadata.name field selector) so that no placeholder is created while it is unsafe.
    named(
        run("scheduling.k8s.io", "priorityclasses", "get", Cluster, "preflight"),
        Name::PriorityClass,
    ),
    named(
        run("scheduling.k8s.io", "priorityclasses", "list", Cluster, "its watch"),
        Name::PriorityClass,
    ),
    named(
        run("scheduling.k8s.io", "priorityclasses", "watch", Cluster, "its watch"),
        Name::PriorityClass,
    ),
    // One installation per cluster: the marked leader Leases of every namespace, listed when
    // this install's Lease is won (src/runtime/install.rs).
    run("coordination.k8s.io", "leases", "list", Cluster, "another install's leader Lease"),
    // Leader election (src/runtime/lease.rs: get, create when missing, conditional patches; no
    // update). The Lease is created marked, or marked with a patch, before the election starts.
    run("coordination.k8s.io", "leases", "create", Namespace, "the leader Lease, when missing"),
    named(run("coordination.k8s.io", "leases", "get", Namespace, "leader election"), Name::Lease),
    named(
        run("coordination.k8s.io", "leases", "patch", Namespace, "acquire, renew, release"),
        Name::Lease,
    ),
    // `--metrics-auth kubernetes`: who a scraper is, and whether it may get /metrics.
    gated(
        run("authentication.k8s.io", "tokenreviews", "create", Cluster, "a scrape's token"),
        Gate::MetricsAuth,
    ),
    gated(
        run("authorization.k8s.io", "subjectaccessreviews", "create", Cluster, "get /metrics?"),
        Gate::MetricsAuth,
    ),
    // `noderotation uninstall --stop-deployment`: scale the operator to zero before cleaning up.
    named(
        by_uninstall(run("apps", "deployments", "get", Namespace, "its selector")),
        Name::Deployment,
    ),
    named(
        by_uninstall(run("apps", "deployments/scale", "patch", Namespace, "replicas: 0")),
        Name::Deployment,
    ),
    // `noderotation uninstall --admission-policy-binding`: first, lift the admission policy
    // that reserves noderotation.io/ annotations for the operator.
    named(
        by_uninstall(run(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
            "delete",
            Cluster,
            "the guard on our annotations, before the cleanup",
        )),
        Name::AdmissionPolicyBinding,
    ),
];

/// The requests of `scope` under `gate`, as `(group, resource, verb, name)`, sorted and without
/// duplicates.
pub fn grants(scope: Scope, gate: Gate) -> Vec<(&'static str, &'static str, &'static str, Name)> {
    let mut out: Vec<_> = REQUESTS
        .iter()
        .filter(|a| a.scope == scope && a.gate == gate)
        .map(|a| (a.group, a.resource, a.verb, a.name))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_is_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for a in REQUESTS {
            assert!(seen.insert((a.group, a.resource, a.verb, a.scope)), "{a:?} is listed twice");
        }
    }

    #[test]
    fn create_is_never_narrowed_to_a_name() {
        // RBAC cannot restrict it by resourceNames: a rule that tried would grant nothing.
        for a in REQUESTS {
            if a.verb == "create" {
                assert_eq!(a.name, Name::Any, "{a:?}");
            }
        }
    }
}
