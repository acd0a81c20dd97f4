//! What changed in the store during one step: the objects whose stored version moved (compared
//! by pointer, so an unchanged store costs nothing), described for the trace.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::CacheView;
use crate::karpenter::{NodeClaim, NodePool, node_ready};
use crate::policy::crd::RotationPolicy;

/// One object before and after the step (`None`: absent).
pub(crate) type Changed<T> = (String, Option<Arc<T>>, Option<Arc<T>>);

/// The objects a step changed.
#[derive(Debug, Default)]
pub(crate) struct Diff {
    pub pools: Vec<Changed<NodePool>>,
    pub claims: Vec<Changed<NodeClaim>>,
    pub nodes: Vec<Changed<Node>>,
    pub placeholders: Vec<Changed<Pod>>,
    pub policies: Vec<Changed<RotationPolicy>>,
}

impl Diff {
    pub(crate) fn is_empty(&self) -> bool {
        self.pools.is_empty()
            && self.claims.is_empty()
            && self.nodes.is_empty()
            && self.placeholders.is_empty()
            && self.policies.is_empty()
    }
}

fn changed<T>(a: &BTreeMap<String, Arc<T>>, b: &BTreeMap<String, Arc<T>>) -> Vec<Changed<T>> {
    let mut out = Vec::new();
    let mut ia = a.iter().peekable();
    let mut ib = b.iter().peekable();
    loop {
        match (ia.peek(), ib.peek()) {
            (None, None) => break,
            (Some((ka, va)), Some((kb, vb))) if ka == kb => {
                if !Arc::ptr_eq(va, vb) {
                    out.push(((*ka).clone(), Some(Arc::clone(va)), Some(Arc::clone(vb))));
                }
                ia.next();
                ib.next();
            }
            (Some((ka, va)), Some((kb, _))) if ka < kb => {
                out.push(((*ka).clone(), Some(Arc::clone(va)), None));
                ia.next();
            }
            (Some((ka, va)), None) => {
                out.push(((*ka).clone(), Some(Arc::clone(va)), None));
                ia.next();
            }
            (_, Some((kb, vb))) => {
                out.push(((*kb).clone(), None, Some(Arc::clone(vb))));
                ib.next();
            }
        }
    }
    out
}

pub(crate) fn diff(prev: &Arc<CacheView>, post: &Arc<CacheView>) -> Diff {
    if Arc::ptr_eq(prev, post) {
        return Diff::default();
    }
    Diff {
        pools: changed(&prev.pools, &post.pools),
        claims: changed(&prev.claims, &post.claims),
        nodes: changed(&prev.nodes, &post.nodes),
        placeholders: changed(&prev.placeholders, &post.placeholders),
        policies: changed(&prev.policies, &post.policies),
    }
}

fn short(key: &str) -> &str {
    key.strip_prefix("noderotation.io/").unwrap_or(key)
}

/// Annotation changes as `+key=value`, `-key`, `key=old->new`.
pub(crate) fn annotation_changes(a: Option<&ObjectMeta>, b: Option<&ObjectMeta>) -> Vec<String> {
    let empty = BTreeMap::new();
    let x = a.and_then(|m| m.annotations.as_ref()).unwrap_or(&empty);
    let y = b.and_then(|m| m.annotations.as_ref()).unwrap_or(&empty);
    let mut out = Vec::new();
    for (k, v) in y {
        match x.get(k) {
            None => out.push(format!("+{}={v}", short(k))),
            Some(old) if old != v => out.push(format!("{}={old}->{v}", short(k))),
            _ => {}
        }
    }
    for k in x.keys() {
        if !y.contains_key(k) {
            out.push(format!("-{}", short(k)));
        }
    }
    out
}

fn ready_claim(c: &NodeClaim) -> bool {
    c.is_ready()
}

pub(crate) fn unschedulable(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

/// Trace lines (object, change) for a diff.
pub(crate) fn describe(d: &Diff) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, a, b) in &d.policies {
        let obj = format!("RotationPolicy {name}");
        match (a, b) {
            (None, Some(_)) => out.push((obj, "created".into())),
            (Some(_), None) => out.push((obj, "deleted".into())),
            (Some(x), Some(y)) if x.spec != y.spec => out.push((obj, "spec changed".into())),
            _ => {}
        }
    }
    for (name, a, b) in &d.pools {
        let ann = annotation_changes(
            a.as_deref().map(|p| &p.metadata),
            b.as_deref().map(|p| &p.metadata),
        );
        if !ann.is_empty() {
            out.push((format!("NodePool {name}"), ann.join(" ")));
        }
    }
    for (name, a, b) in &d.claims {
        let obj = format!("NodeClaim {name}");
        match (a, b) {
            (None, Some(_)) => out.push((obj, "created".into())),
            (Some(_), None) => out.push((obj, "finalized: gone".into())),
            (Some(x), Some(y)) => {
                let mut parts = Vec::new();
                if !x.is_deleting() && y.is_deleting() {
                    parts.push("deleted (deletionTimestamp set)".to_string());
                }
                let xs = x.status.as_ref();
                let ys = y.status.as_ref();
                if xs.and_then(|s| s.provider_id.as_ref()).is_none()
                    && ys.and_then(|s| s.provider_id.as_ref()).is_some()
                {
                    parts.push("launched".into());
                }
                if let Some(n) = ys.and_then(|s| s.node_name.as_ref())
                    && xs.and_then(|s| s.node_name.as_ref()).is_none()
                {
                    parts.push(format!("registered as {n}"));
                }
                if !ready_claim(x) && ready_claim(y) {
                    parts.push("Ready".into());
                }
                parts.extend(annotation_changes(Some(&x.metadata), Some(&y.metadata)));
                if !parts.is_empty() {
                    out.push((obj, parts.join(" ")));
                }
            }
            (None, None) => {}
        }
    }
    for (name, a, b) in &d.nodes {
        let obj = format!("Node {name}");
        match (a, b) {
            (None, Some(_)) => out.push((obj, "registered (NotReady)".into())),
            (Some(_), None) => out.push((obj, "deleted".into())),
            (Some(x), Some(y)) => {
                let mut parts = Vec::new();
                if !node_ready(x) && node_ready(y) {
                    parts.push("Ready".to_string());
                }
                if unschedulable(x) != unschedulable(y) {
                    parts.push(if unschedulable(y) { "cordoned" } else { "uncordoned" }.into());
                }
                let taints =
                    |n: &Node| n.spec.as_ref().and_then(|s| s.taints.as_ref()).map_or(0, Vec::len);
                if taints(x) < taints(y) {
                    parts.push("tainted karpenter.sh/disrupted".into());
                }
                parts.extend(annotation_changes(Some(&x.metadata), Some(&y.metadata)));
                if !parts.is_empty() {
                    out.push((obj, parts.join(" ")));
                }
            }
            (None, None) => {}
        }
    }
    for (name, a, b) in &d.placeholders {
        let obj = format!("Pod {name}");
        match (a, b) {
            (None, Some(p)) => {
                let req = super::world::pod_requests(p);
                let req: Vec<String> = req.iter().map(|(k, v)| format!("{k}={v}m")).collect();
                out.push((obj, format!("placeholder created ({})", req.join(","))));
            }
            (Some(_), None) => out.push((obj, "deleted".into())),
            (Some(x), Some(y)) => {
                let mut parts = Vec::new();
                let xn = x.spec.as_ref().and_then(|s| s.node_name.as_deref());
                let yn = y.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if xn != yn
                    && let Some(n) = yn
                {
                    parts.push(format!("bound to {n}"));
                }
                if phase(x) != phase(y) {
                    parts.push(phase(y).to_string());
                }
                if !parts.is_empty() {
                    out.push((obj, parts.join(" ")));
                }
            }
            (None, None) => {}
        }
    }
    out
}
