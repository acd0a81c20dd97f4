//! What one pass reads: the cached view plus the objects this pass wrote (its own writes are
//! fresher than the cache), and the facts derived from them (§5.2). Implements
//! [`Facts`](crate::engine::Facts).
//!
//! This file holds the vocabulary (the constants, [`PolicyView`], [`GovernanceView`],
//! [`SweepSubject`]), the [`Snapshot`] type, its two constructors and its reads of the pool (the
//! anchors, the pool's claims, the drains), and the annotation readers; by concern:
//! `index/` (the claims grouped per cache version), `candidates.rs` (candidate selection, the
//! candidate facts and due instants), `surge.rs` (placeholder, surge-host and nomination
//! lookups), `patch.rs` (applying a won write to the pass's copy), `facts.rs` (the `Facts`
//! implementation: roots, fields, predicates).
mod candidates;
mod facts;
mod index;
mod patch;
mod surge;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::CacheView;
use crate::engine::Key;
use crate::karpenter::{NodeClaim, NodePool};
use crate::placeholder;
use crate::policy::derive::{self, ClaimFacts};
use crate::policy::feasibility::{self, Assessment};
use crate::policy::lookahead::{self, OpenTime};
use crate::policy::settings::Effective;
use crate::policy::window::Occurrence;

pub(crate) use index::{ClaimIndex, Derived, IndexCache};
pub(crate) use patch::{apply_node_patch, apply_patch};

/// "Forever" for a gate whose anchor is absent.
const FOREVER: Duration = Duration::days(365 * 100);

pub(crate) const KARPENTER_POOL_LABEL: &str = "karpenter.sh/nodepool";

/// The governing policy of a pool, evaluated once per policy change (and per day, so the
/// 53-week window horizon moves on).
#[derive(Debug)]
pub(crate) struct PolicyView {
    pub name: String,
    /// The policy's uid and generation: what is derived from the view (a pool's feasibility
    /// assessment, its lanes) is recomputed when it changes.
    pub revision: String,
    pub settings: Effective,
    /// `P`, the worst-case window period from now (§3.1).
    pub period: Option<Duration>,
    /// Window-open time around now, for the burst lookahead.
    pub open: OpenTime,
    /// The lookahead's answers over `open`, per pool (they go with the view).
    pub lookahead: lookahead::Memo,
    /// The last [`PolicyView::current_or_next`] answer and the instant it was asked at.
    pub window: std::sync::Mutex<Option<(DateTime<Utc>, Occurrence)>>,
}

impl PolicyView {
    /// [`Schedule::current_or_next`] of the policy's windows, asked once per occurrence: the
    /// answer at `t` holds for every instant from `t` to the occurrence's end.
    ///
    /// [`Schedule::current_or_next`]: crate::policy::window::Schedule::current_or_next
    pub(crate) fn current_or_next(&self, now: DateTime<Utc>) -> Option<Occurrence> {
        let mut last = self.window.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((asked, o)) = *last
            && asked <= now
            && now < o.end
        {
            return Some(o);
        }
        let answer = self.settings.schedule.current_or_next(now);
        *last = answer.map(|o| (now, o));
        answer
    }

    /// [`Schedule::in_window`] of the policy's windows from the occurrence
    /// [`PolicyView::current_or_next`] keeps: open at `t` exactly when the merged occurrence
    /// open at or next after `t` contains it (the property tests of `policy::window` hold the
    /// two to each other).
    ///
    /// [`Schedule::in_window`]: crate::policy::window::Schedule::in_window
    pub(crate) fn in_window(&self, t: DateTime<Utc>) -> bool {
        let schedule = &self.settings.schedule;
        if schedule.is_always_open() {
            return true;
        }
        self.current_or_next(t).is_some_and(|o| o.contains(t))
    }
}

/// The pool's governance, as the rules see it.
#[derive(Debug, Clone)]
pub(crate) enum GovernanceView {
    Governed(Arc<PolicyView>),
    Conflict(Vec<String>),
    Ungoverned,
    Invalid(String),
}

impl GovernanceView {
    pub(crate) fn symbol(&self) -> &'static str {
        match self {
            GovernanceView::Governed(_) => "governed",
            GovernanceView::Conflict(_) => "conflict",
            GovernanceView::Ungoverned => "ungoverned",
            GovernanceView::Invalid(_) => "invalid",
        }
    }

    pub(crate) fn policy(&self) -> Option<&Arc<PolicyView>> {
        match self {
            GovernanceView::Governed(p) => Some(p),
            _ => None,
        }
    }
}

/// The thing a sweep visits (§5.3), with the anchor set read when the sweep started.
#[derive(Debug, Clone)]
pub(crate) enum SweepSubject {
    Pool(String),
    Claim(String),
    Node(String),
    Pod(String, String),
}

/// A claim of the pool, its candidate facts and the instant it is due
/// ([`Snapshot::claim_dues`]).
pub(crate) type ClaimDue<'a> = (&'a NodeClaim, Option<ClaimFacts>, Option<DateTime<Utc>>);

/// The snapshot one pass reads.
pub(crate) struct Snapshot {
    pub now: DateTime<Utc>,
    pub cache: Arc<CacheView>,
    /// `cache`'s claims grouped by pool and by node.
    pub index: Arc<ClaimIndex>,
    /// The pool of a pool pass: the cache's copy, shared until this pass writes to it (its
    /// writes are applied to its own copy, `Arc::make_mut`).
    pub pool: Option<Arc<NodePool>>,
    /// Objects this pass wrote, as written (they shadow the cache).
    pub claims: BTreeMap<String, NodeClaim>,
    pub nodes: BTreeMap<String, Node>,
    pub governance: GovernanceView,
    /// Whether feasibility has a fatal finding for this pool (step 1b).
    fatal: bool,
    /// The pool's feasibility (governed pools).
    assessment: Option<Arc<Assessment>>,
    /// pick_earliest_deadline_eligible and the census (§3.2, §4.2), at `now`.
    pub pick: Option<String>,
    pub census: i64,
    /// What a sweep pass visits, with the anchors read when the sweep began; `None` in a pool
    /// pass.
    sweep: Option<(SweepSubject, Arc<BTreeSet<String>>)>,
    /// `lanes(np)`: the rotations the pool may have in flight (`spec.surge.maxUnavailable`
    /// resolved against its nodes); 1 outside a governed pool pass.
    lanes: usize,
    /// Bumped by every [`Snapshot::apply`]; `pick` and `census` were computed at `selected`.
    version: u64,
    selected: Option<u64>,
}

impl Snapshot {
    /// A pool pass's snapshot, with nothing written yet and no candidates selected; a governed
    /// pool's feasibility comes with [`Snapshot::assessed`].
    pub(crate) fn for_pool(
        now: DateTime<Utc>,
        cache: Arc<CacheView>,
        index: Arc<ClaimIndex>,
        pool: Arc<NodePool>,
        governance: GovernanceView,
    ) -> Snapshot {
        Snapshot { pool: Some(pool), ..Snapshot::unwritten(now, cache, index, governance) }
    }

    /// A sweep pass's snapshot over `subject`, with the `anchors` read when the sweep began
    /// (`pool`: the pool subject's copy through its slot's lens).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn for_sweep(
        now: DateTime<Utc>,
        cache: Arc<CacheView>,
        index: Arc<ClaimIndex>,
        pool: Option<NodePool>,
        governance: GovernanceView,
        subject: SweepSubject,
        anchors: Arc<BTreeSet<String>>,
    ) -> Snapshot {
        let sweep = Some((subject, anchors));
        Snapshot {
            pool: pool.map(Arc::new),
            sweep,
            ..Snapshot::unwritten(now, cache, index, governance)
        }
    }

    /// What both kinds of pass start from: no pool, nothing written, no candidates selected.
    fn unwritten(
        now: DateTime<Utc>,
        cache: Arc<CacheView>,
        index: Arc<ClaimIndex>,
        governance: GovernanceView,
    ) -> Snapshot {
        Snapshot {
            now,
            cache,
            index,
            pool: None,
            claims: BTreeMap::new(),
            nodes: BTreeMap::new(),
            governance,
            fatal: false,
            assessment: None,
            pick: None,
            census: 0,
            sweep: None,
            lanes: 1,
            version: 0,
            selected: None,
        }
    }

    /// The pool's feasibility, and what it decides: whether a fatal finding holds starts back
    /// (step 1b), and `lanes(np)`, `maxUnavailable` for the pool's nodes (`auto`: what the pool
    /// needs, within its limit).
    pub(crate) fn assessed(mut self, assessment: Arc<Assessment>) -> Snapshot {
        self.fatal = assessment.has_fatal();
        self.lanes = assessment.derived.lanes;
        self.assessment = Some(assessment);
        self
    }

    /// The pool's feasibility (governed pools).
    pub(crate) fn assessment(&self) -> Option<&Arc<Assessment>> {
        self.assessment.as_ref()
    }

    /// Whether feasibility has a fatal finding for this pool (step 1b).
    pub(crate) fn fatal(&self) -> bool {
        self.fatal
    }

    /// `lanes(np)`: the rotations the pool may have in flight; 1 outside a governed pool pass.
    pub(crate) fn lanes(&self) -> usize {
        self.lanes
    }

    /// The anchors a sweep pass read when the sweep began; `None` in a pool pass.
    pub(crate) fn sweep_anchors(&self) -> Option<&Arc<BTreeSet<String>>> {
        self.sweep.as_ref().map(|(_, anchors)| anchors)
    }

    pub(crate) fn pool_name(&self) -> &str {
        self.pool.as_ref().and_then(|p| p.metadata.name.as_deref()).unwrap_or("")
    }

    /// The governing policy's view (shared: cloning it is a reference count).
    pub(crate) fn policy(&self) -> Option<&Arc<PolicyView>> {
        self.governance.policy()
    }

    pub(crate) fn claim(&self, name: &str) -> Option<&NodeClaim> {
        self.claims.get(name).or_else(|| self.cache.claims.get(name).map(|c| c.as_ref()))
    }

    pub(crate) fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name).or_else(|| self.cache.nodes.get(name).map(|n| n.as_ref()))
    }

    /// The pool's anchor as written, whether or not the claim it names still exists.
    pub(crate) fn anchor_name(&self) -> Option<&str> {
        annotation(&self.pool.as_ref()?.metadata, Key::ActiveRotation)
    }

    /// The claim the anchor names (`cand`), among this pool's own claims (label
    /// `karpenter.sh/nodepool`): an anchor copied from another pool never drives its claim.
    pub(crate) fn anchored_claim(&self) -> Option<&str> {
        let name = self.anchor_name()?;
        self.claim(name).filter(|c| c.node_pool() == Some(self.pool_name())).map(|_| name)
    }

    /// The anchor names a live claim that is not this pool's (`foreign_anchor`). A name no
    /// claim has is not foreign: this pool's claim was finalized (the completion path).
    pub(crate) fn foreign_anchor(&self) -> Option<&NodeClaim> {
        let claim = self.claim(self.anchor_name()?)?;
        (claim.node_pool() != Some(self.pool_name())).then_some(claim)
    }

    /// Every claim of this pool an anchor of any slot names (live or not), by slot.
    pub(crate) fn anchors(&self) -> BTreeMap<usize, &str> {
        self.pool.as_ref().map(|p| super::slots::anchors(&p.metadata)).unwrap_or_default()
    }

    /// The live claims of this pool the anchors of all slots name (the pool's rotations).
    pub(crate) fn anchored_claims(&self) -> impl Iterator<Item = &NodeClaim> {
        let pool = self.pool_name();
        self.anchors()
            .into_values()
            .filter_map(move |n| self.claim(n).filter(|c| c.node_pool() == Some(pool)))
    }

    /// One node's worth of this pool's resources ([`placeholder::worth_of`]), per cache version.
    pub(crate) fn node_worth(&self) -> &placeholder::Resources {
        self.index.pool_worth(&self.cache, self.pool_name())
    }

    /// Claims of this pool, by label.
    pub(crate) fn pool_claims(&self) -> impl Iterator<Item = &NodeClaim> {
        self.index.pool(&self.cache, self.pool_name()).iter().map(|c| self.live(c))
    }

    /// `N` of the throughput checks (§3.2 layer 2): the pool's claims, each in-flight rotation
    /// counted once. While an anchored claim still exists, a claim created at or after the
    /// rotation started (`started-at`, or the slot's forceful `draining-at`) is its replacement,
    /// not another node: counting it made the burst warning flip on and off with every rotation.
    /// With several rotations in flight, the claims created since the earliest start count as
    /// replacements, at most one per rotation.
    pub(crate) fn pool_nodes(&self) -> usize {
        let total = self.index.pool(&self.cache, self.pool_name()).len();
        let anchors = self.anchors();
        let meta = self.pool.as_ref().map(|p| &p.metadata);
        let mut starts = Vec::new();
        for (slot, name) in &anchors {
            let Some(cand) = self.claim(name).filter(|c| c.node_pool() == Some(self.pool_name()))
            else {
                continue;
            };
            let drained = || super::slots::time_at(meta?, Key::DrainingAt, *slot);
            if let Some(t) = stamp_at(&cand.metadata, Key::StartedAt, self.now).or_else(drained) {
                starts.push(t);
            }
        }
        let Some(earliest) = starts.iter().min().copied() else { return total };
        let anchored: BTreeSet<&str> = anchors.values().copied().collect();
        // A claim's name and creation are what the cache holds, whatever this pass wrote.
        let (_, derived) = self.index.pool_derived(&self.cache, self.pool_name());
        let replacements = derived
            .iter()
            .filter(|d| d.created().is_some_and(|t| t >= earliest))
            .filter(|d| !anchored.contains(d.name.as_str()))
            .count();
        total - replacements.min(starts.len())
    }

    /// Each claim's short-lead finding (layer 3) under the pool's policy, parallel to
    /// [`Snapshot::pool_claims_derived`]; empty outside a governed pool. Kept per policy view
    /// and the pool's cached claims: the gauge and the warnings of every pass read it.
    pub(crate) fn short_leads(&self) -> index::ShortLeads {
        let Some(p) = self.policy() else { return Arc::new([]) };
        let (_, derived) = self.index.pool_derived(&self.cache, self.pool_name());
        self.index.pool_short_leads(&self.cache, self.pool_name(), p, || {
            let period = p.period.unwrap_or(Duration::minutes(1));
            let listed = p.open.occurrences();
            let never = crate::policy::duration::ExpireAfter::Never;
            let finding = |d: &Derived| {
                let expire = d.expire_after.unwrap_or(never);
                let tgp = d.termination_grace_period;
                feasibility::short_lead(&p.settings, expire, tgp, period, d.created(), listed)
            };
            derived.iter().map(finding).collect()
        })
    }

    /// The pool's claims with a short-lead finding in `leads` ([`Snapshot::short_leads`]), as
    /// this pass sees them. Only those claims are read.
    pub(crate) fn short_lead_claims<'a>(
        &'a self,
        leads: &'a index::ShortLeads,
    ) -> impl Iterator<Item = (&'a NodeClaim, &'a feasibility::Finding)> {
        let claims = self.index.pool(&self.cache, self.pool_name());
        leads.iter().zip(claims).filter_map(|(f, c)| Some((self.live(c), f.as_ref()?)))
    }

    /// The earliest forced-expiry deadline of the pool's claims not being deleted. A pass that
    /// wrote no claim reads the cached claims only: computed once per cache version.
    pub(crate) fn nearest_deadline(&self) -> Option<DateTime<Utc>> {
        let nearest = || {
            self.pool_claims_derived()
                .filter(|(c, _)| !c.is_deleting())
                .filter_map(|(_, d)| derive::deadline(d.created()?, d.expire_after?))
                .min()
        };
        if self.claims.is_empty() {
            self.index.pool_nearest_deadline(&self.cache, self.pool_name(), nearest)
        } else {
            nearest()
        }
    }

    /// Claims of this pool with what passes derive from their spec and status.
    pub(crate) fn pool_claims_derived(&self) -> impl Iterator<Item = (&NodeClaim, &Derived)> {
        let (claims, derived) = self.index.pool_derived(&self.cache, self.pool_name());
        claims.iter().map(|c| self.live(c)).zip(derived)
    }

    /// This pass's copy of a cached claim if it wrote one, else the cached claim.
    pub(super) fn live<'a>(&'a self, cached: &'a Arc<NodeClaim>) -> &'a NodeClaim {
        self.claims.get(cached.metadata.name.as_deref().unwrap_or("")).unwrap_or(cached.as_ref())
    }

    /// The claim's node, if registered.
    pub(crate) fn claim_node<'a>(&self, claim: &'a NodeClaim) -> Option<&'a str> {
        claim.status.as_ref().and_then(|s| s.node_name.as_deref())
    }

    /// The pool's rotations in flight whose drain is stuck: the old claim deleting for longer
    /// than [`Snapshot::drain_bound`] (`stuck_drains`, and the `noderotation_drain_stuck` gauge).
    pub(crate) fn stuck_drains(&self) -> usize {
        self.anchored_claims().filter(|c| self.drain_stuck(c)).count()
    }

    /// The claim has been deleting for longer than its [`Snapshot::drain_bound`].
    pub(crate) fn drain_stuck(&self, claim: &NodeClaim) -> bool {
        let deleted =
            claim.metadata.deletion_timestamp.as_ref().and_then(crate::cluster::chrono_time);
        deleted.is_some_and(|t| self.now - t > self.drain_bound(claim))
    }

    /// `drain_bound` (§4.2): the claim's tGP, else its pool's, else 1h, plus the buffer. The rule
    /// `draining_stuck` and the `noderotation_drain_stuck` gauge both read it.
    pub(crate) fn drain_bound(&self, claim: &NodeClaim) -> Duration {
        derive::drain_bound(self.tgp(claim))
    }

    fn tgp(&self, claim: &NodeClaim) -> Option<Duration> {
        claim.termination_grace_period().ok().flatten().or_else(|| self.pool_tgp())
    }

    /// The pool's `spec.template.spec.terminationGracePeriod`, when set and readable.
    fn pool_tgp(&self) -> Option<Duration> {
        self.pool.as_ref().and_then(|p| p.termination_grace_period().ok().flatten())
    }
}

/// An annotation's raw value.
pub(crate) fn annotation(meta: &ObjectMeta, key: Key) -> Option<&str> {
    meta.annotations.as_ref()?.get(key.full()).map(String::as_str)
}

fn time_annotation(meta: &ObjectMeta, key: Key) -> Option<DateTime<Utc>> {
    annotation(meta, key)
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// A stamp (the instant something happened) as the rules read it at `now`: `None` when absent,
/// unreadable, or later than `now` beyond the clock-skew tolerance.
fn stamp_at(meta: &ObjectMeta, key: Key, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    time_annotation(meta, key).filter(|t| !derive::in_the_future(*t, now))
}

/// The claim carries our `state` of a rotation in flight: `pending` or `draining`.
pub(crate) fn marked_in_flight(claim: &NodeClaim) -> bool {
    matches!(annotation(&claim.metadata, Key::State), Some("pending" | "draining"))
}

/// `claim` is being deleted or marked draining: in a rotation whether or not an anchor names it
/// ([`Snapshot::in_flight_claim`]).
fn deleting_or_draining(claim: &NodeClaim) -> bool {
    claim.is_deleting() || annotation(&claim.metadata, Key::State) == Some("draining")
}

/// `karpenter.sh/do-not-disrupt: "true"` set by someone else (no owned marker reading "true",
/// §3.4; a person hands it back by setting the marker to `false`).
pub(crate) fn operator_do_not_disrupt(meta: &ObjectMeta) -> bool {
    annotation(meta, Key::DoNotDisrupt) == Some("true")
        && annotation(meta, Key::DoNotDisruptOwned) != Some("true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::settings::tests::spec_with;

    /// Maintenance windows as (zone, days, start, end).
    type Windows<'a> = &'a [(&'a str, &'a [&'a str], &'a str, &'a str)];

    fn view(windows: Windows<'_>) -> PolicyView {
        let settings = Effective::from_spec(&spec_with(windows)).expect("valid windows");
        let now = "2026-03-01T00:00:00Z".parse().unwrap();
        PolicyView {
            name: "p".into(),
            revision: "u/1".into(),
            period: settings.schedule.period(now),
            open: OpenTime::of(&settings.schedule, now),
            settings,
            lookahead: Default::default(),
            window: Default::default(),
        }
    }

    #[test]
    fn the_kept_occurrence_answers_what_the_schedule_answers() {
        // Adjacent windows merging across midnight, a DST change in one zone, and 24/7.
        let fixtures: [Windows<'_>; 3] = [
            &[("UTC", &["Sat"], "22:00", "00:00"), ("UTC", &["Sun"], "00:00", "03:00")],
            &[
                ("America/New_York", &["Sun"], "01:00", "04:00"),
                ("UTC", &["Wed"], "10:00", "11:00"),
            ],
            &[(
                "America/New_York",
                &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
                "06:00",
                "06:00",
            )],
        ];
        let start: DateTime<Utc> = "2026-03-01T00:00:00Z".parse().unwrap();
        for windows in fixtures {
            let v = view(windows);
            // Forward in 7-minute steps over three weeks, then backwards (the kept answer is
            // only reused forward), each instant against the schedule's own answers.
            let forward: Vec<DateTime<Utc>> =
                (0..3 * 7 * 24 * 60 / 7).map(|i| start + Duration::minutes(7 * i)).collect();
            for t in forward.iter().chain(forward.iter().rev()) {
                let s = &v.settings.schedule;
                assert_eq!(v.in_window(*t), s.in_window(*t), "{windows:?} open at {t}");
                assert_eq!(v.current_or_next(*t), s.current_or_next(*t), "{windows:?} at {t}");
            }
        }
    }
}
