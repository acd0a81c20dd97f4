//! What this process knows of each object from the API server itself, beside its cache: the
//! version and copy of its last fresh read, the version and result of its last write that won
//! (the copy the write was decided on with the patch applied: the precondition made the server
//! apply it to exactly that version), and the objects it sent a write whose outcome it does not
//! know (a lost response, a delete). A copy this process holds is at least as fresh as a cache
//! that still shows the version it was taken over; what any copy can miss is a write of another
//! party the watch has not delivered yet, the same lag a fresh read has one request later. The
//! write that follows a decision carries the copy's version as its precondition, so such a
//! write answers 409 and the verb reads fresh (docs/decisions/footprint.md).
//!
//! At a new leadership everything known becomes unsure: another process may have written
//! anything meanwhile.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::{CacheView, ObjectRef};
use crate::karpenter::{NodeClaim, NodePool};

/// One object as the API server answered or stored it (a pool without any slot's lens).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    Pool(Arc<NodePool>),
    Claim(Arc<NodeClaim>),
    Node(Arc<Node>),
}

impl Seen {
    pub(crate) fn meta(&self) -> &ObjectMeta {
        match self {
            Seen::Pool(p) => &p.metadata,
            Seen::Claim(c) => &c.metadata,
            Seen::Node(n) => &n.metadata,
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// The version of the last fresh read or winning write.
    rv: String,
    /// The object at `rv`, and the cache's version when it was taken: a cached copy still at
    /// that version is older than this one. Dropped once the cache moves on.
    copy: Option<(Seen, Option<String>)>,
}

/// How a verb may read one object ([`Known::lookup`]).
#[derive(Debug, PartialEq)]
pub(crate) enum Lookup<'a> {
    /// The cached copy is at the version this process last read or wrote: as fresh as a read.
    Cached,
    /// This process's own copy, newer than the cached one (which lags its read or its write).
    Copy(&'a Seen),
    /// This process never read nor wrote the object since it leads: the cached copy is what
    /// it knows, decided on with the cached version as the precondition.
    Untouched,
    /// Read fresh: the cache shows a version this process cannot place, or it sent a write
    /// whose outcome it does not know.
    Fresh,
}

#[derive(Debug, Default)]
pub(crate) struct Known {
    entries: HashMap<ObjectRef, Entry>,
    unsure: HashSet<ObjectRef>,
    /// The cache view the maps were last retained over, while they have not changed since
    /// (a retain over the same view would keep them as they are: it is idempotent). A `Weak`
    /// keeps the view's address from being reused.
    retained: Weak<CacheView>,
}

impl Known {
    /// A fresh read of `target` answered `seen` (`None`: the object is gone) while the cache
    /// showed it at version `cached` (`None`: the cache did not show it).
    pub(crate) fn read(&mut self, target: ObjectRef, seen: Option<Seen>, cached: Option<&str>) {
        self.retained = Weak::new();
        self.unsure.remove(&target);
        self.record(target, seen, cached);
    }

    /// A write of this process won and left `target` as `seen` (the copy it was decided on,
    /// the write applied, at the version the server answered).
    pub(crate) fn wrote(&mut self, target: ObjectRef, seen: Seen, cached: Option<&str>) {
        self.retained = Weak::new();
        self.unsure.remove(&target);
        self.record(target, Some(seen), cached);
    }

    fn record(&mut self, target: ObjectRef, seen: Option<Seen>, cached: Option<&str>) {
        let Some(seen) = seen else {
            self.entries.remove(&target);
            return;
        };
        let Some(rv) = seen.meta().resource_version.clone() else {
            self.entries.remove(&target);
            self.unsure.insert(target);
            return;
        };
        let copy = (cached != Some(rv.as_str())).then(|| (seen, cached.map(str::to_string)));
        self.entries.insert(target, Entry { rv, copy });
    }

    /// This process sent a write to `target` whose outcome it does not know (it may have landed,
    /// or changed the object's version), or one that answered 409 (what it knew is gone, and
    /// the cache may still lag its own earlier writes): read it fresh before deciding on it
    /// again.
    pub(crate) fn unsure(&mut self, target: &ObjectRef) {
        self.retained = Weak::new();
        self.entries.remove(target);
        self.unsure.insert(target.clone());
    }

    /// How to read `target`, whose cached copy is `cached` (`None`: the cache does not show it).
    pub(crate) fn lookup(&self, target: &ObjectRef, cached: Option<&ObjectMeta>) -> Lookup<'_> {
        if self.unsure.contains(target) {
            return Lookup::Fresh;
        }
        let cached_rv = cached.and_then(|m| m.resource_version.as_ref());
        let Some(entry) = self.entries.get(target) else {
            return if cached_rv.is_some() { Lookup::Untouched } else { Lookup::Fresh };
        };
        match (&entry.copy, cached_rv) {
            (_, Some(rv)) if *rv == entry.rv => Lookup::Cached,
            (Some((seen, behind)), rv) if behind.as_ref() == rv => Lookup::Copy(seen),
            _ => Lookup::Fresh,
        }
    }

    /// A new leadership: another process may have written anything meanwhile, so nothing this
    /// one read or wrote stands in for a fresh read any more.
    pub(crate) fn clear(&mut self) {
        self.retained = Weak::new();
        self.unsure.extend(self.entries.drain().map(|(target, _)| target));
    }

    /// Keeps only the objects the cache still shows (`cached` gives their cached version), so
    /// that the maps follow the fleet instead of growing with every claim that ever rotated,
    /// and drops the copies the cache has moved past (caught up with, or newer than).
    ///
    /// `view` is the cache view `cached` reads: a second retain over the same view, with no
    /// read or write recorded in between, is skipped (it would change nothing).
    pub(crate) fn retain<'a>(
        &mut self,
        view: &Arc<CacheView>,
        cached: impl Fn(&ObjectRef) -> Option<Option<&'a str>>,
    ) {
        if std::ptr::eq(self.retained.as_ptr(), Arc::as_ptr(view))
            && self.retained.strong_count() > 0
        {
            return;
        }
        self.retained = Arc::downgrade(view);
        self.unsure.retain(|target| cached(target).is_some());
        self.entries.retain(|target, entry| match cached(target) {
            None => false,
            Some(rv) => {
                // A copy stands in only over the cached version it was taken over.
                if entry.copy.as_ref().is_some_and(|(_, behind)| behind.as_deref() != rv) {
                    entry.copy = None;
                }
                true
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ObjectKind;

    fn meta(rv: &str) -> ObjectMeta {
        ObjectMeta { resource_version: Some(rv.into()), ..ObjectMeta::default() }
    }

    fn node(rv: &str) -> Seen {
        Seen::Node(Arc::new(Node { metadata: meta(rv), ..Node::default() }))
    }

    #[test]
    fn a_cached_copy_is_current_only_at_the_version_read_or_written() {
        let mut k = Known::default();
        let n1 = ObjectRef::cluster(ObjectKind::Node, "n1");
        assert_eq!(k.lookup(&n1, Some(&meta("5"))), Lookup::Untouched, "never read");
        assert_eq!(k.lookup(&n1, None), Lookup::Fresh, "not in the cache either");
        k.read(n1.clone(), Some(node("5")), Some("5"));
        assert_eq!(k.lookup(&n1, Some(&meta("5"))), Lookup::Cached);
        assert_eq!(k.lookup(&n1, Some(&meta("6"))), Lookup::Fresh, "a newer copy: read it");
        assert_eq!(k.lookup(&n1, Some(&ObjectMeta::default())), Lookup::Fresh, "no version");
        k.unsure(&n1);
        assert_eq!(k.lookup(&n1, Some(&meta("5"))), Lookup::Fresh, "a write of unknown outcome");
        k.read(n1.clone(), Some(node("7")), Some("7"));
        k.read(n1.clone(), None, Some("7"));
        assert_eq!(k.lookup(&n1, Some(&meta("7"))), Lookup::Untouched, "gone: as never read");
        k.read(n1.clone(), Some(node("8")), Some("8"));
        k.clear();
        assert_eq!(k.lookup(&n1, Some(&meta("8"))), Lookup::Fresh, "a new leadership");
    }

    #[test]
    fn its_own_copy_stands_in_only_for_the_cached_version_it_was_taken_over() {
        let mut k = Known::default();
        let n1 = ObjectRef::cluster(ObjectKind::Node, "n1");
        // A write decided on version 5 (the cache's) won at version 9.
        k.wrote(n1.clone(), node("9"), Some("5"));
        assert_eq!(k.lookup(&n1, Some(&meta("5"))), Lookup::Copy(&node("9")), "cache lags it");
        assert_eq!(k.lookup(&n1, Some(&meta("9"))), Lookup::Cached, "the cache caught up");
        assert_eq!(k.lookup(&n1, Some(&meta("4"))), Lookup::Fresh, "a version it cannot place");
        assert_eq!(k.lookup(&n1, Some(&meta("10"))), Lookup::Fresh, "someone wrote since");
        k.unsure(&n1);
        assert_eq!(k.lookup(&n1, Some(&meta("10"))), Lookup::Fresh, "a 409: read it");
        k.wrote(n1.clone(), node("11"), Some("10"));
        k.retain(&Arc::default(), |_| Some(Some("11")));
        assert_eq!(k.lookup(&n1, Some(&meta("10"))), Lookup::Fresh, "the copy went with the lag");
        assert_eq!(k.lookup(&n1, Some(&meta("11"))), Lookup::Cached);
        k.unsure(&n1);
        k.retain(&Arc::default(), |_| None);
        assert_eq!(k.lookup(&n1, Some(&meta("11"))), Lookup::Untouched, "gone from the cache");
    }

    #[test]
    fn a_retain_over_the_view_already_retained_over_is_skipped_until_something_is_recorded() {
        let mut k = Known::default();
        let n1 = ObjectRef::cluster(ObjectKind::Node, "n1");
        let view = Arc::new(CacheView::default());
        k.wrote(n1.clone(), node("9"), Some("9"));
        k.retain(&view, |_| Some(Some("9")));
        // The same view again: the maps stand as that view left them (the closure is not
        // asked; a real one would answer as before).
        k.retain(&view, |_| None);
        assert_eq!(k.lookup(&n1, Some(&meta("9"))), Lookup::Cached, "skipped");
        // A record since: the next retain runs, even over the same view.
        k.read(n1.clone(), Some(node("9")), Some("9"));
        k.retain(&view, |_| None);
        assert_eq!(k.lookup(&n1, Some(&meta("9"))), Lookup::Untouched, "retained again");
        // Another view: it runs.
        k.wrote(n1.clone(), node("9"), Some("9"));
        k.retain(&view, |_| Some(Some("9")));
        k.retain(&Arc::default(), |_| None);
        assert_eq!(k.lookup(&n1, Some(&meta("9"))), Lookup::Untouched, "a new view");
    }
}
