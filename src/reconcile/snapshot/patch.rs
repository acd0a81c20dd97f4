//! Applying a write that won to the pass's copy of the object: the overlay the rest of the pass
//! reads instead of the cache.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Snapshot;
use crate::cluster::Patch;
use crate::engine::ObjRef;

impl Snapshot {
    /// Applies a write that won to this pass's copy of the object.
    pub(crate) fn apply(&mut self, obj: &ObjRef, patch: &Patch) {
        self.version += 1;
        let meta = match obj {
            ObjRef::Pool => self.pool.as_mut().map(|p| &mut std::sync::Arc::make_mut(p).metadata),
            ObjRef::Claim(n) => {
                if !self.claims.contains_key(n) {
                    let Some(c) = self.cache.claims.get(n) else { return };
                    self.claims.insert(n.clone(), c.as_ref().clone());
                }
                self.claims.get_mut(n).map(|c| &mut c.metadata)
            }
            ObjRef::Node(n) => {
                if !self.nodes.contains_key(n) {
                    let Some(x) = self.cache.nodes.get(n) else { return };
                    self.nodes.insert(n.clone(), x.as_ref().clone());
                }
                if let Some(node) = self.nodes.get_mut(n) {
                    apply_node_patch(node, patch);
                }
                None
            }
            ObjRef::Policy | ObjRef::Pod(..) => None,
        };
        if let Some(meta) = meta {
            apply_patch(meta, patch);
        }
    }
}

/// Applies a node patch (its annotations and its cordon) to a copy of the node.
pub(crate) fn apply_node_patch(node: &mut Node, patch: &Patch) {
    apply_patch(&mut node.metadata, patch);
    if let Some(u) = patch.unschedulable {
        node.spec.get_or_insert_with(Default::default).unschedulable = Some(u);
    }
}

/// Applies annotation changes to metadata (the overlay after a won write).
pub(crate) fn apply_patch(meta: &mut ObjectMeta, patch: &Patch) {
    let ann = meta.annotations.get_or_insert_with(BTreeMap::new);
    for k in &patch.remove {
        ann.remove(k);
    }
    for (k, v) in &patch.set {
        ann.insert(k.clone(), v.clone());
    }
}
