//! The sweep (§5.3): at leader start and on every tick, the markers no anchor refers to any more
//! are cleaned; the tick's periodic work around it.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::known::{Lookup, Seen};
use super::snapshot::annotation;
use super::verbs::PassHost;
use super::{Controller, GovernanceView, Snapshot, SweepSubject, slots};
use crate::cluster::{ApiError, CacheView, ObjectKind, ObjectRef, resource_version};
use crate::engine::{Handler, Key, ReportTag};
use crate::karpenter::NodePool;

/// Reads of one pool's anchor a sweep makes before it gives up (transient errors only).
const ANCHOR_READS: usize = 3;

/// What a sweep (§5.3, at leader start and on every tick) did, for the log and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub placeholders_deleted: Vec<String>,
    pub nodes_released: Vec<String>,
    pub claims_failed: Vec<String>,
    pub pools_cleaned: Vec<String>,
    pub errors: Vec<String>,
}

impl Controller {
    /// The §5.3 start-up sweep. Run once per leadership, before the first `reconcile_pool`:
    /// cleans only markers no anchor refers to; per-item errors are logged, never fatal.
    pub fn startup_sweep(&mut self) -> SweepReport {
        // Another process may have led meanwhile: what this one read before proves nothing.
        self.ctx.known.clear();
        let report = self.sweep();
        tracing::info!(?report, "start-up sweep done");
        report
    }

    /// The periodic work between pool passes (the 1-minute tick of `noderotation run` and of
    /// the simulation's driver): the RotationPolicy status view, and the sweep's orphan checks
    /// again, so that what no anchor refers to any more is repaired within a tick rather than at
    /// the next leader start: an anchor removed by hand (`kubectl annotate`, `kubectl replace`,
    /// a GitOps sync with `Replace=true`), a NodePool deleted mid-rotation, markers a pass could
    /// not reach.
    pub fn tick(&mut self) -> SweepReport {
        self.update_policy_status();
        let cache = self.ctx.cluster.cache();
        self.ctx.known.retain(&cache, |r| match r.kind {
            ObjectKind::NodePool => cache.pools.get(&r.name).map(|p| resource_version(&p.metadata)),
            ObjectKind::NodeClaim => {
                cache.claims.get(&r.name).map(|c| resource_version(&c.metadata))
            }
            ObjectKind::Node => cache.nodes.get(&r.name).map(|n| resource_version(&n.metadata)),
            _ => None,
        });
        let report = self.sweep();
        if report != SweepReport::default() {
            tracing::info!(?report, "orphans repaired");
        }
        report
    }

    /// The sweep's rows over every object that can carry one of our markers: placeholder pods,
    /// nodes with `surge-for`, `do-not-disrupt-owned` or `cordoned`, claims `pending` or
    /// `draining` (no sweep row acts on another state: `none`, `failed`, `expired`) or with a
    /// `launched-for` that never initialized (seen with the governance of their pool, whose
    /// readyTimeout they are held to), and every pool.
    ///
    /// The anchor set is read fresh, pool by pool, after the cached view that lists the
    /// subjects: every marker in that view was written after the anchor it belongs to, so a
    /// marker whose anchor the fresh read does not show is an orphan, however far the cache lags
    /// the pools. A pool that is gone has no anchor. If an anchor cannot be read, nothing is
    /// swept (the next tick tries again): an unknown anchor set could make a live marker look
    /// orphaned. What this process knows of a pool ([`Known`]: the cached copy at the version it
    /// last read or wrote, or its own copy while the cache lags that) stands in for its fresh
    /// read: it shows every anchor this process wrote.
    ///
    /// [`Known`]: super::Known
    fn sweep(&mut self) -> SweepReport {
        let now = self.clock.now();
        let cache = self.ctx.cluster.cache();
        let index = self.index.of(&cache);
        let mut report = SweepReport::default();
        // Pools are visited first; their subjects (a copy of the pool per slot) are built only
        // once the sweep knows it has something to visit.
        let mut subjects: Vec<(Handler, SweepSubject, Option<NodePool>, usize)> = Vec::new();
        // The governance of the pool of each surge claim the sweep may reap (its readyTimeout).
        let mut governance: BTreeMap<String, GovernanceView> = BTreeMap::new();
        for (name, c) in &cache.claims {
            // A surge claim that never initialized (docs/decisions/reap-attribution.md): the
            // sweep reaps it once its rotation is over.
            let surge = annotation(&c.metadata, Key::LaunchedFor).is_some()
                && !c.is_initialized()
                && !c.is_deleting();
            if surge && let Some(pool) = c.node_pool().and_then(|p| cache.pools.get(p)) {
                let view = self.governance(&cache, pool, now);
                governance.insert(name.clone(), view);
            }
            // Only a claim some sweep row can act on: `failed` and `expired` keep their
            // annotations (row `sweep_claim_kept`), so a fleet with a failure in its history
            // does not read every pool's anchor on every tick for them.
            let in_flight =
                matches!(annotation(&c.metadata, Key::State), Some("pending" | "draining"));
            if surge || in_flight {
                subjects.push((Handler::SweepClaim, SweepSubject::Claim(name.clone()), None, 0));
            }
        }
        // Listed once, not filtered out of every key again for each node.
        let ours: Vec<Key> =
            Key::ALL.iter().copied().filter(|k| k.is_ours() && k.on_nodes()).collect();
        for (name, n) in &cache.nodes {
            if ours.iter().any(|k| annotation(&n.metadata, *k).is_some()) {
                subjects.push((Handler::SweepNode, SweepSubject::Node(name.clone()), None, 0));
            }
        }
        for (name, pod) in &cache.placeholders {
            let ns =
                pod.metadata.namespace.clone().unwrap_or_else(|| self.ctx.config.namespace.clone());
            subjects.push((Handler::SweepPod, SweepSubject::Pod(ns, name.clone()), None, 0));
        }
        let marked = |p: &NodePool| !slots::sweepable(&p.metadata).is_empty();
        if subjects.is_empty() && !cache.pools.values().any(|p| marked(p)) {
            return report;
        }
        let mut pools = Vec::new();
        for (name, p) in &cache.pools {
            // Slot 0 always; another slot only where a key the pool's sweep rows clear is set
            // (a pool with many slots holds many keys).
            let leftover = slots::sweepable(&p.metadata);
            let visit = std::iter::once(0).chain(leftover.into_iter().filter(|s| *s != 0));
            for slot in visit {
                let mut pool = p.as_ref().clone();
                slots::swap_meta(&mut pool.metadata, slot);
                pools.push((
                    Handler::SweepPool,
                    SweepSubject::Pool(name.clone()),
                    Some(pool),
                    slot,
                ));
            }
        }
        pools.append(&mut subjects);
        let subjects = pools;
        let mut anchors = BTreeSet::new();
        for (name, cached) in &cache.pools {
            let target = ObjectRef::cluster(ObjectKind::NodePool, name.clone());
            // What this process knows of the pool has every anchor a fresh read would show but
            // for what others changed unwatched (an anchor removed by hand is then swept a tick
            // later); never the cached copy of a pool it did not read or write.
            match self.ctx.known.lookup(&target, Some(&cached.metadata)) {
                Lookup::Cached => {
                    add_anchors(&cache, cached, &mut anchors);
                    continue;
                }
                Lookup::Copy(Seen::Pool(own)) => {
                    add_anchors(&cache, own, &mut anchors);
                    continue;
                }
                Lookup::Copy(_) | Lookup::Untouched | Lookup::Fresh => {}
            }
            // A transient error is retried at once (a skipped sweep waits a whole tick).
            let mut read = self.ctx.cluster.get_pool(name);
            for _ in 1..ANCHOR_READS {
                if !matches!(read, Err(ApiError::Transient(_))) {
                    break;
                }
                read = self.ctx.cluster.get_pool(name);
            }
            let pool = match read {
                Ok(pool) => pool,
                Err(e) => {
                    tracing::warn!(nodepool = %name, error = %e, "sweep skipped: anchor not read");
                    report.errors.push(format!("NodePool {name}: anchor not read: {e}"));
                    return report;
                }
            };
            let seen = pool.clone().map(|p| Seen::Pool(Arc::new(p)));
            self.ctx.known.read(target, seen, resource_version(&cached.metadata));
            let Some(pool) = pool else { continue };
            add_anchors(&cache, &pool, &mut anchors);
        }
        let anchors = Arc::new(anchors);
        for (handler, subject, pool, slot) in subjects {
            let label = match &subject {
                SweepSubject::Pool(n)
                | SweepSubject::Claim(n)
                | SweepSubject::Node(n)
                | SweepSubject::Pod(_, n) => n.clone(),
            };
            let governed = match &subject {
                SweepSubject::Claim(n) => governance.remove(n),
                _ => None,
            };
            let snap = Snapshot::for_sweep(
                now,
                cache.clone(),
                index.clone(),
                pool,
                governed.unwrap_or(GovernanceView::Ungoverned),
                subject,
                anchors.clone(),
            );
            let mut host = PassHost::for_slot(snap, &mut self.ctx, slot);
            match self.engine.run_from(handler, &mut host) {
                Ok(pass) => {
                    for tag in pass.reports {
                        let line = match tag {
                            ReportTag::PlaceholderDeleted => &mut report.placeholders_deleted,
                            ReportTag::NodeReleased => &mut report.nodes_released,
                            ReportTag::ClaimFailed => &mut report.claims_failed,
                            ReportTag::PoolCleaned => &mut report.pools_cleaned,
                        };
                        line.push(label.clone());
                    }
                }
                Err(e) => {
                    tracing::warn!(subject = %label, error = %e, "sweep item failed");
                    report.errors.push(format!("{label}: {e}"));
                }
            }
        }
        report
    }
}

/// The anchors of `pool` into `anchors`, but for one naming another pool's claim (a copied
/// NodePool): that pool clears it, and an orphan it hid would never be swept.
fn add_anchors(cache: &CacheView, pool: &NodePool, anchors: &mut BTreeSet<String>) {
    for anchor in slots::anchors(&pool.metadata).into_values() {
        let foreign = cache
            .claims
            .get(anchor)
            .is_some_and(|c| c.node_pool() != pool.metadata.name.as_deref());
        if !foreign {
            anchors.insert(anchor.to_string());
        }
    }
}
