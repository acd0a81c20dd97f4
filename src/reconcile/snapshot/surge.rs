//! The snapshot's lookups of a rotation's surge: its placeholder (by name, for the current
//! attempt, its uid and host), the surge hosts and surge claims of the pool's other rotations,
//! the node a claim registered as, the induced surge claim, and Karpenter's nominations.
use k8s_openapi::api::core::v1::Pod;

use super::{Snapshot, annotation};
use crate::engine::Key;
use crate::karpenter::NodeClaim;
use crate::placeholder;

impl Snapshot {
    /// The cached pod holding the rotation's placeholder name, whoever created it.
    pub(crate) fn placeholder_named(&self, claim: &str) -> Option<&Pod> {
        self.cache.placeholders.get(&placeholder::placeholder_name(claim)).map(|p| p.as_ref())
    }

    /// The rotation's placeholder: the pod holding its name that the controller created for the
    /// claim's current attempt (its uid recorded on the claim as `placeholder-uid`, or the
    /// attempt's `started-at` on the pod: [`placeholder::created_for_attempt`]). A pod merely
    /// named like it, or one of an earlier attempt, is not surge capacity.
    pub(crate) fn placeholder_for(&self, claim: &str) -> Option<&Pod> {
        let pod = self.placeholder_named(claim)?;
        placeholder::created_for_attempt(pod, self.claim(claim)?).then_some(pod)
    }

    /// The uid of the rotation's placeholder: the pod [`Snapshot::placeholder_for`] finds, else
    /// the uid recorded on the claim (the pod may be gone already); the claim itself gone (a
    /// completion), the pod holding the placeholder's name for it (`surge-for`). What
    /// Karpenter's nominations are matched against.
    pub(crate) fn placeholder_uid(&self, claim: &str) -> Option<&str> {
        let Some(c) = self.claim(claim) else {
            return self
                .placeholder_named(claim)
                .filter(|p| placeholder::surge_for(p) == Some(claim))
                .and_then(|p| p.metadata.uid.as_deref());
        };
        self.placeholder_for(claim)
            .and_then(|p| p.metadata.uid.as_deref())
            .or_else(|| annotation(&c.metadata, Key::PlaceholderUid))
    }

    /// `host` is the `surge-host` a slot of the pool records for a rotation other than `claim`'s.
    fn surge_host_of_another(&self, claim: &str, host: &str) -> bool {
        let Some(meta) = self.pool.as_ref().map(|p| &p.metadata) else { return false };
        let anchors = crate::reconcile::slots::anchors(meta);
        crate::reconcile::slots::by_slot(meta, Key::SurgeHost)
            .into_iter()
            .any(|(slot, h)| h == host && anchors.get(&slot).is_some_and(|a| *a != claim))
    }

    /// `node` is where a rotation other than `claim`'s stands or lands: a slot of the pool
    /// records it as its surge host, it is frozen (`surge-for`) for another claim still in
    /// flight (anchored, marked draining, or being deleted), or it is the node of another
    /// anchored claim. No rotation picks its claim, escalates onto it or freezes it for itself:
    /// cordoning it would drain the pods another rotation is moving onto it.
    pub(crate) fn node_of_another(&self, claim: &str, node: &str) -> bool {
        if self.surge_host_of_another(claim, node) {
            return true;
        }
        let anchors = self.anchors();
        let frozen_for = self.node(node).and_then(|n| annotation(&n.metadata, Key::SurgeFor));
        let frozen_for_another =
            frozen_for.is_some_and(|other| other != claim && self.in_flight_claim(other));
        frozen_for_another
            || anchors.values().any(|a| {
                *a != claim && self.claim(a).and_then(|c| self.claim_node(c)) == Some(node)
            })
    }

    /// `surge` is the surge of a rotation of the pool other than `rotation`'s: another claim
    /// records it as its `surge-claim`, or its node (by `status.nodeName`, else by providerID)
    /// is the `surge-host` another slot records. Such a claim is never `rotation`'s to reap,
    /// even while its node looks empty (the other rotation deleted its placeholder with its old
    /// claim, and the old node's pods have not arrived yet).
    pub(crate) fn surge_of_another(&self, rotation: &str, surge: &NodeClaim) -> bool {
        let name = surge.metadata.name.as_deref().unwrap_or("");
        let recorded = self.pool_claims().any(|c| {
            c.metadata.name.as_deref() != Some(rotation)
                && annotation(&c.metadata, Key::SurgeClaim) == Some(name)
        });
        recorded
            || self.registered_node(surge).is_some_and(|n| self.surge_host_of_another(rotation, n))
    }

    /// The node a claim registered as: its `status.nodeName`, else the node carrying its
    /// providerID (Karpenter writes the nodeName a moment after the Node registers).
    pub(crate) fn registered_node<'a>(&'a self, claim: &'a NodeClaim) -> Option<&'a str> {
        let status = claim.status.as_ref()?;
        status
            .node_name
            .as_deref()
            .or_else(|| self.node_with_provider_id(status.provider_id.as_deref()?))
    }

    /// The claims of the pool's other rotations whose surge is still to come: a surge rotation
    /// (no `rotation-mode`) whose slot has no `surge-host` yet and whose placeholder is not on a
    /// node, so `status.resources` does not count it (§3.3 headroom with several rotations in
    /// flight). Empty with one slot.
    pub(super) fn surges_waiting<'a>(&'a self, except: Option<&'a str>) -> Vec<&'a NodeClaim> {
        let Some(meta) = self.pool.as_ref().map(|p| &p.metadata) else { return Vec::new() };
        let has = |key: Key, slot: usize| {
            meta.annotations.as_ref().is_some_and(|a| {
                crate::reconcile::slots::with_slot_key(key, slot, |k| a.contains_key(k))
            })
        };
        let pool = self.pool_name();
        crate::reconcile::slots::anchors(meta)
            .into_iter()
            .filter(|(slot, name)| {
                Some(*name) != except
                    && !has(Key::RotationMode, *slot)
                    && !has(Key::SurgeHost, *slot)
            })
            .filter_map(|(_, name)| self.claim(name).filter(|c| c.node_pool() == Some(pool)))
            .filter(|c| {
                let name = c.metadata.name.as_deref().unwrap_or("");
                let placed = self
                    .placeholder_for(name)
                    .is_some_and(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some());
                !placed
            })
            .collect()
    }

    /// The host of the claim's placeholder, if bound.
    pub(crate) fn placeholder_host(&self, claim: &str) -> Option<&str> {
        self.placeholder_for(claim)?.spec.as_ref()?.node_name.as_deref()
    }

    /// The cached Node whose `spec.providerID` is `provider_id` (a scan: only the reap asks, and
    /// only for a claim whose `status.nodeName` is not written yet).
    pub(crate) fn node_with_provider_id(&self, provider_id: &str) -> Option<&str> {
        self.cache.nodes.iter().find_map(|(name, n)| {
            let id = n.spec.as_ref()?.provider_id.as_deref()?;
            (id == provider_id).then_some(name.as_str())
        })
    }

    /// The claim backing a node: the claim whose `status.nodeName` is `node`, else the one whose
    /// `status.providerID` is the Node's `spec.providerID`. Karpenter writes `status.nodeName` a moment after the Node registers,
    /// so for that moment only the providerID (set at launch) connects the two.
    pub(crate) fn claim_on_node(&self, node: &str) -> Option<&NodeClaim> {
        if let Some(c) = self.index.by_node(&self.cache).get(node) {
            return Some(self.live(c));
        }
        let provider = self.node(node)?.spec.as_ref()?.provider_id.as_deref()?;
        let c = self.index.by_provider(&self.cache).get(provider)?;
        // A claim that names another node is that node's, whatever its providerID says.
        let named = c.status.as_ref().and_then(|s| s.node_name.as_deref());
        named.is_none_or(|n| n == node).then(|| self.live(c))
    }

    /// The induced surge claim, once observable (§3.8; §5.3 `surge-claim`): the claim of the node
    /// the rotation's placeholder is bound to ([`Snapshot::claim_on_node`]), if it is one of this
    /// pool's. `None` while the placeholder is missing or unbound, or while its host's claim is
    /// not visible. The one definition behind the `induced_claim` predicate, the surge path (an
    /// absorbing host's claim is this claim too) and the readyTimeout reap.
    pub(crate) fn induced_claim(&self, claim: &str) -> Option<&NodeClaim> {
        let c = self.claim_on_node(self.placeholder_host(claim)?)?;
        (c.node_pool() == Some(self.pool_name())).then_some(c)
    }

    /// The claims Karpenter's `Nominated` Events in the cache name for the pod with uid
    /// `pod_uid` (the placeholder a rotation recorded as its `placeholder-uid`), in Event-name
    /// order, each once.
    pub(crate) fn nominated_for(&self, pod_uid: &str) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for e in self.cache.nominations.values() {
            if e.involved_object.uid.as_deref() != Some(pod_uid) {
                continue;
            }
            if let Some(c) = crate::cluster::nominated_claim(e)
                && !names.contains(&c)
            {
                names.push(c);
            }
        }
        names
    }

    /// A claim of this pool that Karpenter nominated the rotation `claim`'s placeholder to and
    /// that is still to be marked (`launched-for`): it never initialized, is not being deleted
    /// and carries no mark (docs/decisions/reap-attribution.md).
    pub(crate) fn nominated_unmarked(&self, claim: &str) -> bool {
        let Some(uid) = self.placeholder_uid(claim) else { return false };
        self.nominated_for(uid).into_iter().any(|n| {
            n != claim
                && self.claim(n).is_some_and(|c| {
                    c.node_pool() == Some(self.pool_name())
                        && !c.is_deleting()
                        && !c.is_initialized()
                        && annotation(&c.metadata, Key::LaunchedFor).is_none()
                })
        })
    }

    /// The claims of this pool whose `launched-for` names the rotation `claim` (this pass's
    /// copies), in name order.
    pub(crate) fn launched_for(&self, claim: &str) -> Vec<String> {
        self.pool_claims()
            .filter(|c| annotation(&c.metadata, Key::LaunchedFor) == Some(claim))
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    }

    /// readyTimeout of the governing policy has passed since the claim's creation (at once
    /// when none governs; an unknown creation time has not passed).
    pub(crate) fn surge_claim_due(&self, claim: &NodeClaim) -> bool {
        match self.policy() {
            None => true,
            Some(p) => claim.created().is_some_and(|t| self.now - t >= p.settings.ready_timeout),
        }
    }
}
