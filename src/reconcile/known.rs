//! The resourceVersion of each object this process last read fresh, forgotten as soon as it
//! sends a write to the object: a cached copy at that version is exactly what the fresh read
//! showed, and nothing this process wrote since can be missing from it. What it can miss is a
//! write of another party the watch has not delivered yet, the same lag a fresh read has one
//! request later; the write that follows a decision carries the version as its precondition, so
//! such a write answers 409 and the verb reads fresh (docs/decisions/footprint.md).
//!
//! Cleared when leadership is taken: another process may have written anything meanwhile.
use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::ObjectRef;

#[derive(Debug, Default)]
pub struct Known {
    versions: HashMap<ObjectRef, String>,
}

impl Known {
    /// A fresh read of `target` answered `meta` (`None`: the object is gone).
    pub fn read(&mut self, target: ObjectRef, meta: Option<&ObjectMeta>) {
        match meta.and_then(|m| m.resource_version.clone()) {
            Some(rv) => {
                self.versions.insert(target, rv);
            }
            None => {
                self.versions.remove(&target);
            }
        }
    }

    /// This process sent a write to `target`: it may have landed, whatever the answer.
    pub fn forget(&mut self, target: &ObjectRef) {
        self.versions.remove(target);
    }

    /// `meta` is at the version this process last read fresh, and it has not written since.
    pub fn is_current(&self, target: &ObjectRef, meta: &ObjectMeta) -> bool {
        meta.resource_version.as_ref().is_some_and(|rv| self.versions.get(target) == Some(rv))
    }

    /// Forgets everything (a new leadership).
    pub fn clear(&mut self) {
        self.versions.clear();
    }

    /// Keeps only the objects `keep` still names (the cache's), so that the map follows the
    /// fleet instead of growing with every claim that ever rotated.
    pub fn retain(&mut self, keep: impl Fn(&ObjectRef) -> bool) {
        self.versions.retain(|target, _| keep(target));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ObjectKind;

    fn meta(rv: &str) -> ObjectMeta {
        ObjectMeta { resource_version: Some(rv.into()), ..ObjectMeta::default() }
    }

    #[test]
    fn a_copy_is_current_only_at_the_version_read_and_until_a_write() {
        let mut k = Known::default();
        let node = ObjectRef::cluster(ObjectKind::Node, "n1");
        assert!(!k.is_current(&node, &meta("5")), "never read");
        k.read(node.clone(), Some(&meta("5")));
        assert!(k.is_current(&node, &meta("5")));
        assert!(!k.is_current(&node, &meta("4")), "a lagging copy");
        assert!(!k.is_current(&node, &meta("6")), "a newer copy: read it fresh");
        assert!(!k.is_current(&node, &ObjectMeta::default()), "no version");
        k.forget(&node);
        assert!(!k.is_current(&node, &meta("5")), "written since");
        k.read(node.clone(), Some(&meta("7")));
        k.read(node.clone(), None);
        assert!(!k.is_current(&node, &meta("7")), "gone");
        k.read(node.clone(), Some(&meta("8")));
        k.clear();
        assert!(!k.is_current(&node, &meta("8")), "a new leadership");
    }
}
