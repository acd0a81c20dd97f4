//! Candidate selection (`pick` and the census, §3.2, §4.2), the claims in flight, and the
//! pool's candidate facts and due instants (the burst lookahead's) they are selected on.
use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::index::{FactsDues, UnwrittenKey};
use super::{ClaimDue, Derived, PolicyView, Snapshot, deleting_or_draining, marked_in_flight};
use crate::karpenter::NodeClaim;
use crate::policy::derive::{self, ClaimFacts, RotationOrder};

impl Snapshot {
    /// Computes `pick` and `census` from the pool's claims (again only after an `apply`).
    pub(crate) fn select_candidates(&mut self) {
        if self.selected == Some(self.version) {
            return;
        }
        self.selected = Some(self.version);
        let Some(policy) = self.policy().cloned() else { return };
        let (facts_dues, derived) = self.facts_and_dues(&policy);
        let FactsDues { facts, dues, .. } = facts_dues.as_ref();
        let census = facts_dues.census(&policy.settings, self.now);
        let mut pick: Option<&str> = None;
        // The first of the candidates in rotation order, never a claim another slot already
        // rotates (slots: N > 1) nor one whose node another rotation stands or lands on.
        if census > 0 {
            let claims = self.index.pool(&self.cache, self.pool_name());
            let anchors = self.anchors();
            for &i in facts_dues.in_order(derived) {
                let Some(f) = &facts[i] else { continue };
                let candidacy = derive::candidacy_due(f, &policy.settings, dues[i], self.now);
                if candidacy != derive::Candidacy::Candidate {
                    continue;
                }
                let name = derived[i].name.as_str();
                let rotated = anchors.values().any(|a| *a == name);
                if !rotated && !self.lands_another(name, self.live(&claims[i])) {
                    pick = Some(name);
                    break;
                }
            }
        }
        let pick = pick.map(str::to_string);
        self.census = i64::try_from(census).unwrap_or(i64::MAX);
        self.pick = pick;
    }

    /// `claim` is in a rotation: an anchor of the pool names it, or it is marked draining or
    /// being deleted (a drain goes on after its anchor is lost).
    pub(crate) fn in_flight_claim(&self, claim: &str) -> bool {
        self.anchors().values().any(|a| *a == claim)
            || self.claim(claim).is_some_and(deleting_or_draining)
    }

    /// The claims of the pool marked pending or draining without an anchor naming them (an
    /// anchor removed by hand, the pool replaced, governance lost): being deleted, or about to be
    /// (a pass whose view still shows the anchor re-issues the delete). A `pending` one counts
    /// too: the claims view may lag the pool's (it still shows the state before the delete that
    /// made it `draining`). They count against `maxUnavailable` until they are gone or the sweep
    /// marks them failed.
    pub(crate) fn unanchored_drains(&self) -> usize {
        let anchors = self.anchors();
        self.pool_claims()
            .filter(|c| marked_in_flight(c))
            .filter(|c| !anchors.values().any(|a| Some(*a) == c.metadata.name.as_deref()))
            .count()
    }

    /// The claims of the pool in a rotation ([`Snapshot::in_flight_claim`]).
    pub(crate) fn claims_in_flight(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.anchors().into_values().map(str::to_string).collect();
        // The cached claims marked in flight that this pass did not write, then the pool's
        // claims it wrote, as written: what walking every claim as this pass sees it finds.
        let (claims, marked) = self.index.pool_marked(&self.cache, self.pool_name());
        let names = marked.iter().filter_map(|&i| claims[i].metadata.name.as_deref());
        out.extend(names.filter(|n| !self.claims.contains_key(*n)).map(str::to_string));
        let pool = Some(self.pool_name());
        let written = (self.claims.iter())
            .filter(|(n, _)| self.cache.claims.get(*n).is_some_and(|c| c.node_pool() == pool))
            .filter(|(_, c)| deleting_or_draining(c));
        out.extend(written.map(|(n, _)| n.clone()));
        out
    }

    /// The claim's node is where another rotation stands or lands ([`Snapshot::node_of_another`]).
    fn lands_another(&self, name: &str, claim: &NodeClaim) -> bool {
        self.claim_node(claim).is_some_and(|n| self.node_of_another(name, n))
    }

    /// The pool's claims' candidate facts (after this pass's writes) and due instants (the
    /// burst lookahead's), parallel to the claims the index holds for the pool.
    fn facts_and_dues(&self, policy: &Arc<PolicyView>) -> (Arc<FactsDues>, &[Derived]) {
        let period = policy.period.unwrap_or(Duration::minutes(1));
        let (claims, derived) = self.index.pool_derived(&self.cache, self.pool_name());
        let compute = |facts: Vec<Option<ClaimFacts>>| {
            let dues = self.lookahead_dues(policy, period, &facts, derived);
            Arc::new(FactsDues::new(facts, dues))
        };
        // A pass that wrote nothing reads the cached claims and nodes: their facts are derived,
        // and with them the dues, for as long as the policy view, the lanes and the pool's tGP
        // stay what they were.
        if self.claims.is_empty() && self.nodes.is_empty() {
            let key = UnwrittenKey::new(policy, self.lanes, self.pool_tgp());
            let facts_dues = self.index.pool_unwritten(&self.cache, self.pool_name(), key, || {
                compute(derived.iter().map(|d| d.cached.clone()).collect())
            });
            return (facts_dues, derived);
        }
        let facts = claims.iter().zip(derived).map(|(c, d)| self.written_facts(c, d)).collect();
        (compute(facts), derived)
    }

    /// Every claim of the pool with its candidate facts and the instant it is due, as a start
    /// reads them ([`Snapshot::select_candidates`]): what the policy status and `noderotation
    /// status` count as due. Empty outside a governed pool.
    pub(crate) fn claim_dues(&self) -> Vec<ClaimDue<'_>> {
        let Some(policy) = self.policy() else { return Vec::new() };
        let (facts_dues, _) = self.facts_and_dues(policy);
        let (claims, _) = self.index.pool_derived(&self.cache, self.pool_name());
        claims
            .iter()
            .map(|c| self.live(c))
            .zip(&facts_dues.facts)
            .zip(&facts_dues.dues)
            .map(|((c, f), d)| (c, f.clone(), *d))
            .collect()
    }

    /// Each claim's due instant (parallel to `facts`): §3.2's, or earlier where the burst
    /// lookahead needs the room ([`lookahead::effective_dues_lanes`] over the claims that still need
    /// a rotation, in rotation order, one slot `t_rot_est + cooldownAfter` each).
    ///
    /// [`lookahead::effective_dues_lanes`]: crate::policy::lookahead::effective_dues_lanes
    fn lookahead_dues(
        &self,
        policy: &PolicyView,
        period: Duration,
        facts: &[Option<ClaimFacts>],
        derived: &[Derived],
    ) -> Vec<Option<DateTime<Utc>>> {
        let settings = &policy.settings;
        let listed = policy.open.occurrences();
        let mut dues: Vec<Option<DateTime<Utc>>> = facts
            .iter()
            .map(|f| f.as_ref().and_then(|f| derive::due_after_listed(f, settings, period, listed)))
            .collect();
        let mut queue: Vec<(RotationOrder<'_>, usize)> = facts
            .iter()
            .zip(derived)
            .enumerate()
            .filter_map(|(i, (f, d))| {
                let f = f.as_ref().filter(|f| derive::needs_slot(f, dues[i]))?;
                let order = RotationOrder {
                    deadline: derive::deadline(f.created, f.expire_after),
                    created: f.created,
                    name: &d.name,
                };
                Some((order, i))
            })
            .collect();
        if queue.len() < 2 {
            return dues;
        }
        queue.sort();
        let slot = settings.t_rot_est(self.pool_tgp()) + settings.cooldown_after;
        let ordered: Vec<DateTime<Utc>> = queue.iter().filter_map(|(_, i)| dues[*i]).collect();
        let effective = policy.lookahead.effective_dues_lanes(
            self.pool_name(),
            &ordered,
            &policy.open,
            slot,
            self.lanes,
        );
        for ((_, i), due) in queue.iter().zip(effective) {
            dues[*i] = Some(due);
        }
        dues
    }

    /// [`Derived::facts`] of a cached claim after this pass's writes.
    fn written_facts(&self, cached: &Arc<NodeClaim>, d: &Derived) -> Option<ClaimFacts> {
        let claim = self.live(cached);
        let node = match self.claim_node(claim).and_then(|n| self.nodes.get(n)) {
            Some(written) => Some(written),
            None => d.node.as_deref(),
        };
        d.facts(claim, node)
    }
}
