//! Metrics (§4.2, names normative) and the level-triggered warning latch (§4.3).
//!
//! [`Telemetry`] owns a dedicated [`Registry`] (never the process-global default), so tests,
//! `simulate` and several controllers in one process never share series. Every series carries
//! a `nodepool` label; [`Telemetry::forget_pool`] removes all of a pool's series when it is
//! deleted or no policy governs it any more.
//!
//! A gauge whose value is undefined (no windows: no period; no policy: no age threshold) is
//! *removed* rather than set to a made-up number: absence is how Prometheus says "unknown".
//!
//! Pure bookkeeping: no I/O, no clock. Durations and timestamps come in as values.
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

/// Histogram buckets for rotation phases, in seconds: 30s to 24h. A surge wait is minutes
/// (readyTimeout defaults to 15m); a drain runs up to tGP (often 1h, 24h on EKS Auto Mode).
pub(crate) const DURATION_BUCKETS: [f64; 17] = [
    30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0, 5400.0, 7200.0,
    10800.0, 14400.0, 21600.0, 43200.0, 86400.0,
];

const POOL: &str = "nodepool";

/// What a metric is (`type` in rules/vocabulary.ron).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Gauge,
    Counter,
    Histogram,
}

// `Metric` (every metric of §4.2 with its name, help and labels) and `PoolGauge` (the gauges
// labelled by `nodepool` alone), generated from `metrics` in rules/vocabulary.ron.
include!(concat!(env!("OUT_DIR"), "/metrics.rs"));

impl PoolGauge {
    /// The metric name (normative).
    pub(crate) const fn name(self) -> &'static str {
        self.metric().name()
    }
}

impl Metric {
    fn opts(self) -> Opts {
        Opts::new(self.name(), self.help())
    }
}

/// How a rotation ended (`outcome` label of `noderotation_completed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// The old claim was replaced through our voluntary delete.
    Success,
    /// The attempt was rolled back (readyTimeout, clamp refusal, lost governance, ...).
    Failure,
    /// Karpenter's forced expiry took the claim before the rotation finished.
    Expired,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Success, Outcome::Failure, Outcome::Expired];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Expired => "expired",
        }
    }
}

/// A timed rotation phase (`phase` label of `noderotation_duration_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// From the rotation start to surge_ready (or rollback).
    SurgeWait,
    /// From the claim delete to the claim being gone.
    Drain,
}

impl Phase {
    pub const ALL: [Phase; 2] = [Phase::SurgeWait, Phase::Drain];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::SurgeWait => "surge_wait",
            Phase::Drain => "drain",
        }
    }
}

/// One pass's values for a pool's gauges. `None` removes the series: the value is undefined
/// (no windows: no period P; no policy: no thresholds), and absence is how Prometheus says so
/// where a 0 would read as a real value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolGauges {
    pub candidates: u64,
    pub in_progress: u64,
    pub window_active: bool,
    /// `P`; `None` without windows.
    pub window_period: Option<Duration>,
    pub policy_conflict: bool,
    /// End of the freeze; `None` (reported as 0) when not frozen.
    pub freeze_until: Option<DateTime<Utc>>,
    /// `A` (pool representative); may be negative.
    pub age_threshold: Option<Duration>,
    /// `K`, or `G` under an override.
    pub rotation_chances: Option<i64>,
    /// `C`.
    pub throughput_capacity: Option<u64>,
    pub t_rot_estimate: Option<Duration>,
    pub t_rot_bound: Option<Duration>,
    pub short_lead_nodes: u64,
    pub drain_stuck: u64,
    pub retry_count: u64,
    pub infeasible: bool,
    /// `lanes(np)`; `None` outside a governed pool.
    pub max_unavailable: Option<u64>,
    /// Start of the window open now or next; `None` without windows or open 24/7.
    pub next_window: Option<DateTime<Utc>>,
    /// The nearest `creationTimestamp + expireAfter` among the pool's claims.
    pub nearest_deadline: Option<DateTime<Utc>>,
}

impl PoolGauges {
    /// The exported value of one gauge; `None` removes the series.
    pub(crate) fn get(&self, gauge: PoolGauge) -> Option<f64> {
        let count = |n: u64| Some(n as f64);
        let flag = |b: bool| Some(if b { 1.0 } else { 0.0 });
        let secs = |d: Option<Duration>| d.map(|d| d.num_milliseconds() as f64 / 1000.0);
        let unix = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis() as f64 / 1000.0);
        match gauge {
            PoolGauge::Candidates => count(self.candidates),
            PoolGauge::InProgress => count(self.in_progress),
            PoolGauge::WindowActive => flag(self.window_active),
            PoolGauge::WindowPeriodSeconds => secs(self.window_period),
            PoolGauge::PolicyConflict => flag(self.policy_conflict),
            PoolGauge::FreezeUntilTimestamp => {
                Some(self.freeze_until.map_or(0.0, |t| t.timestamp_millis() as f64 / 1000.0))
            }
            PoolGauge::AgeThresholdSeconds => secs(self.age_threshold),
            PoolGauge::RotationChances => self.rotation_chances.map(|k| k as f64),
            PoolGauge::ThroughputCapacity => self.throughput_capacity.map(|c| c as f64),
            PoolGauge::TRotEstimateSeconds => secs(self.t_rot_estimate),
            PoolGauge::TRotBoundSeconds => secs(self.t_rot_bound),
            PoolGauge::ShortLeadNodes => count(self.short_lead_nodes),
            PoolGauge::DrainStuck => count(self.drain_stuck),
            PoolGauge::RetryCount => count(self.retry_count),
            PoolGauge::Infeasible => flag(self.infeasible),
            PoolGauge::MaxUnavailable => self.max_unavailable.map(|n| n as f64),
            PoolGauge::NextWindowTimestamp => unix(self.next_window),
            PoolGauge::NearestDeadlineTimestamp => unix(self.nearest_deadline),
        }
    }
}

/// The controller's metrics, on a dedicated registry.
#[derive(Clone)]
pub struct Telemetry {
    registry: Registry,
    gauges: BTreeMap<PoolGauge, GaugeVec>,
    /// Every pool with a series, with what `set_pool_gauges` last exported for it: a pass that
    /// changes no value touches no series (a gauge vector hashes the label on every access;
    /// most passes change nothing), and forgetting a pool without series (every pass of an
    /// ungoverned pool) removes nothing.
    labelled: Arc<Mutex<HashMap<String, Option<PoolGauges>>>>,
    completed: IntCounterVec,
    forceful_fallback: IntCounterVec,
    nothing_to_reserve: IntCounterVec,
    window_missed: IntCounterVec,
    duration: HistogramVec,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new()
    }
}

/// Registers a collector built from constant, valid options. Construction can only fail on an
/// invalid name or a duplicate registration, both programming errors that the tests exercise.
fn registered<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    built: prometheus::Result<C>,
) -> C {
    match built.and_then(|c| registry.register(Box::new(c.clone())).map(|()| c)) {
        Ok(c) => c,
        Err(e) => panic!("noderotation metric definition is invalid: {e}"),
    }
}

impl Telemetry {
    pub fn new() -> Telemetry {
        let registry = Registry::new();
        let gauges = PoolGauge::ALL
            .iter()
            .map(|g| {
                let m = g.metric();
                (*g, registered(&registry, GaugeVec::new(m.opts(), m.labels())))
            })
            .collect();
        let counter = |m: Metric| registered(&registry, IntCounterVec::new(m.opts(), m.labels()));
        let completed = counter(Metric::CompletedTotal);
        let forceful_fallback = counter(Metric::ForcefulFallbackTotal);
        let nothing_to_reserve = counter(Metric::NothingToReserveTotal);
        let window_missed = counter(Metric::WindowMissedTotal);
        let m = Metric::DurationSeconds;
        let duration = registered(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(m.name(), m.help()).buckets(DURATION_BUCKETS.to_vec()),
                m.labels(),
            ),
        );
        let build_info = registered(
            &registry,
            GaugeVec::new(Metric::BuildInfo.opts(), Metric::BuildInfo.labels()),
        );
        build_info.with_label_values(&[crate::VERSION, crate::COMMIT]).set(1.0);
        Telemetry {
            registry,
            gauges,
            labelled: Arc::default(),
            completed,
            forceful_fallback,
            nothing_to_reserve,
            window_missed,
            duration,
        }
    }

    /// The dedicated registry (for the `/metrics` handler or a test).
    #[cfg(test)]
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Sets every gauge of `pool`; a `None` field removes that series.
    pub fn set_pool_gauges(&self, pool: &str, values: &PoolGauges) {
        let mut labelled = self.labelled.lock().unwrap_or_else(|e| e.into_inner());
        if labelled.get(pool).is_some_and(|last| last.as_ref() == Some(values)) {
            return;
        }
        labelled.insert(pool.to_string(), Some(values.clone()));
        for (gauge, vec) in &self.gauges {
            match values.get(*gauge) {
                Some(v) => vec.with_label_values(&[pool]).set(v),
                None => {
                    // Absent already is fine.
                    let _ = vec.remove_label_values(&[pool]);
                }
            }
        }
    }

    /// One finished rotation.
    pub fn completed(&self, pool: &str, outcome: Outcome) {
        self.label(pool);
        self.completed.with_label_values(&[pool, outcome.as_str()]).inc();
    }

    /// One forceful-fallback start.
    pub(crate) fn forceful_fallback(&self, pool: &str) {
        self.label(pool);
        self.forceful_fallback.with_label_values(&[pool]).inc();
    }

    /// One surge-less rotation of a node with nothing to reserve.
    pub(crate) fn nothing_to_reserve(&self, pool: &str) {
        self.label(pool);
        self.nothing_to_reserve.with_label_values(&[pool]).inc();
    }

    /// One occurrence closed with candidates left (the `missed` window-edge verdict).
    pub(crate) fn window_missed(&self, pool: &str) {
        self.label(pool);
        self.window_missed.with_label_values(&[pool]).inc();
    }

    /// Observes one phase duration. Negative values (clock skew between the writer of a
    /// timestamp and this reader) count as 0; NaN is dropped.
    pub fn duration(&self, pool: &str, phase: Phase, secs: f64) {
        if secs.is_nan() {
            return;
        }
        self.label(pool);
        self.duration.with_label_values(&[pool, phase.as_str()]).observe(secs.max(0.0));
    }

    /// Notes that `pool` has a series (before its first one is created).
    fn label(&self, pool: &str) {
        let mut labelled = self.labelled.lock().unwrap_or_else(|e| e.into_inner());
        if !labelled.contains_key(pool) {
            labelled.insert(pool.to_string(), None);
        }
    }

    /// Removes every series of `pool` (deleted, or no longer governed).
    pub(crate) fn forget_pool(&self, pool: &str) {
        if self.labelled.lock().unwrap_or_else(|e| e.into_inner()).remove(pool).is_none() {
            return;
        }
        for vec in self.gauges.values() {
            let _ = vec.remove_label_values(&[pool]);
        }
        for outcome in Outcome::ALL {
            let _ = self.completed.remove_label_values(&[pool, outcome.as_str()]);
        }
        let _ = self.forceful_fallback.remove_label_values(&[pool]);
        let _ = self.nothing_to_reserve.remove_label_values(&[pool]);
        let _ = self.window_missed.remove_label_values(&[pool]);
        for phase in Phase::ALL {
            let _ = self.duration.remove_label_values(&[pool, phase.as_str()]);
        }
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        match TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
            Err(e) => format!("# noderotation: metrics encoding failed: {e}\n"),
        }
    }

    // Readers. They read the gathered families, so reading never creates a series.

    /// `noderotation_completed_total{nodepool, outcome}`; 0 when the series does not exist.
    pub fn completed_count(&self, pool: &str, outcome: Outcome) -> u64 {
        self.counter(Metric::CompletedTotal.name(), &[(POOL, pool), ("outcome", outcome.as_str())])
    }

    #[cfg(test)]
    pub(crate) fn forceful_fallback_count(&self, pool: &str) -> u64 {
        self.counter(Metric::ForcefulFallbackTotal.name(), &[(POOL, pool)])
    }

    pub fn nothing_to_reserve_count(&self, pool: &str) -> u64 {
        self.counter(Metric::NothingToReserveTotal.name(), &[(POOL, pool)])
    }

    #[cfg(test)]
    pub(crate) fn window_missed_count(&self, pool: &str) -> u64 {
        self.counter(Metric::WindowMissedTotal.name(), &[(POOL, pool)])
    }

    /// Observations of `noderotation_duration_seconds{nodepool, phase}`.
    #[cfg(test)]
    pub(crate) fn duration_count(&self, pool: &str, phase: Phase) -> u64 {
        self.find(Metric::DurationSeconds.name(), &[(POOL, pool), ("phase", phase.as_str())])
            .map_or(0, |m| m.get_histogram().get_sample_count())
    }

    /// The current value of a pool gauge; `None` when the series does not exist.
    pub fn pool_gauge(&self, pool: &str, gauge: PoolGauge) -> Option<f64> {
        self.find(gauge.name(), &[(POOL, pool)]).map(|m| m.get_gauge().get_value())
    }

    /// Every `nodepool` label value with at least one series.
    #[cfg(test)]
    pub(crate) fn pools(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .registry
            .gather()
            .iter()
            .flat_map(|f| f.get_metric().iter())
            .flat_map(|m| m.get_label().iter())
            .filter(|l| l.name() == POOL)
            .map(|l| l.value().to_string())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        // Integer counters are exported as f64 and stay exact far beyond any rotation count.
        self.find(name, labels).map_or(0, |m| m.get_counter().get_value() as u64)
    }

    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<prometheus::proto::Metric> {
        self.registry
            .gather()
            .into_iter()
            .find(|f| f.name() == name)?
            .get_metric()
            .iter()
            .find(|m| {
                let got = m.get_label();
                got.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| got.iter().any(|l| l.name() == *k && l.value() == *v))
            })
            .cloned()
    }
}

/// Level-triggered deduplication of warnings (§4.3): a warning fires when its
/// condition is entered, and again only after the condition was observed false
/// ([`WarningLatch::clear`]) or when its detail changed (a different `InsufficientHeadroom`
/// tuple, a different scheduler reason). Keyed by `(object, reason)` by default.
///
/// In memory only: after a restart every standing condition fires once more, which is the
/// intended "at least once per controller life" for warnings (decisions never live here).
#[derive(Debug, Clone)]
pub(crate) struct WarningLatch<K: Ord = (String, String)> {
    latched: BTreeMap<K, String>,
}

impl<K: Ord> Default for WarningLatch<K> {
    fn default() -> Self {
        WarningLatch { latched: BTreeMap::new() }
    }
}

impl<K: Ord> WarningLatch<K> {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The condition holds with `detail`: `true` when the warning should be emitted now (it was
    /// not latched, or was latched with another detail); the latch then holds `detail`.
    pub(crate) fn should_fire(&mut self, key: K, detail: &str) -> bool {
        match self.latched.get_mut(&key) {
            Some(held) if held == detail => false,
            Some(held) => {
                detail.clone_into(held);
                true
            }
            None => {
                self.latched.insert(key, detail.to_string());
                true
            }
        }
    }

    /// The condition was observed false: the next `should_fire` for `key` fires.
    pub(crate) fn clear(&mut self, key: &K) {
        self.latched.remove(key);
    }

    /// Drops every latch whose key fails `keep` (objects that no longer exist).
    #[cfg(test)]
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.latched.retain(|k, _| keep(k));
    }

    /// Drops every latch in `range` whose key fails `keep` (objects that no longer exist); the
    /// keys outside `range` are kept without being visited (one pool's keys, out of every pool's).
    pub(crate) fn retain_range(
        &mut self,
        range: impl std::ops::RangeBounds<K>,
        mut keep: impl FnMut(&K) -> bool,
    ) where
        K: Clone,
    {
        let dropped: Vec<K> =
            self.latched.range(range).map(|(k, _)| k).filter(|k| !keep(k)).cloned().collect();
        for k in &dropped {
            self.latched.remove(k);
        }
    }

    /// The latched keys, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.latched.keys()
    }

    #[cfg(test)]
    pub(crate) fn is_latched(&self, key: &K) -> bool {
        self.latched.contains_key(key)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.latched.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.latched.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn build_info_names_the_version_and_commit_with_value_one() {
        let t = Telemetry::new();
        let m = t
            .find(
                Metric::BuildInfo.name(),
                &[("version", crate::VERSION), ("commit", crate::COMMIT)],
            )
            .expect("noderotation_build_info is registered");
        assert_eq!(m.get_gauge().get_value(), 1.0);
        assert_eq!(crate::VERSION, env!("CARGO_PKG_VERSION"));
        assert!(!crate::COMMIT.is_empty());
        let line = format!(
            "noderotation_build_info{{commit=\"{}\",version=\"{}\"}} 1",
            crate::COMMIT,
            crate::VERSION
        );
        assert!(t.render().lines().any(|l| l == line), "{line} not in\n{}", t.render());
        // Forgetting a pool does not touch it.
        t.forget_pool("p");
        assert!(t.render().contains(&line));
    }

    fn full() -> PoolGauges {
        PoolGauges {
            candidates: 3,
            in_progress: 1,
            window_active: true,
            window_period: Some(Duration::days(4)),
            policy_conflict: false,
            freeze_until: Utc.timestamp_opt(1_780_000_000, 0).single(),
            age_threshold: Some(Duration::hours(142)),
            rotation_chances: Some(2),
            throughput_capacity: Some(10),
            t_rot_estimate: Some(Duration::minutes(15)),
            t_rot_bound: Some(Duration::minutes(77)),
            short_lead_nodes: 1,
            drain_stuck: 0,
            retry_count: 2,
            infeasible: false,
            max_unavailable: Some(17),
            next_window: Utc.timestamp_opt(1_780_100_000, 0).single(),
            nearest_deadline: Utc.timestamp_opt(1_780_200_000, 0).single(),
        }
    }

    #[test]
    fn retain_range_drops_what_retain_drops_in_the_range() {
        let keys = ["a|feasibility", "a|claim/x", "a|claim/y", "ab|feasibility", "a", "b|claim/x"];
        let mut whole: WarningLatch = WarningLatch::new();
        for k in keys {
            whole.should_fire((k.to_string(), "R".to_string()), "m");
        }
        let mut ranged = whole.clone();
        let ours = |k: &(String, String)| k.0.starts_with("a|") && k.0 != "a|claim/y";
        whole.retain(|k| !ours(k));
        let range = ("a|".to_string(), String::new())..("a}".to_string(), String::new());
        ranged.retain_range(range, |k| !ours(k));
        assert_eq!(whole.latched, ranged.latched);
        assert_eq!(ranged.len(), 4);
    }

    #[test]
    fn every_normative_name_is_exposed_with_help() {
        let t = Telemetry::new();
        t.set_pool_gauges("general", &full());
        t.completed("general", Outcome::Success);
        t.forceful_fallback("general");
        t.nothing_to_reserve("general");
        t.window_missed("general");
        t.duration("general", Phase::Drain, 42.0);
        let text = t.render();
        let names = [
            "noderotation_candidates",
            "noderotation_in_progress",
            "noderotation_window_active",
            "noderotation_window_period_seconds",
            "noderotation_policy_conflict",
            "noderotation_freeze_until_timestamp",
            "noderotation_age_threshold_seconds",
            "noderotation_rotation_chances",
            "noderotation_throughput_capacity",
            "noderotation_t_rot_estimate_seconds",
            "noderotation_t_rot_bound_seconds",
            "noderotation_short_lead_nodes",
            "noderotation_drain_stuck",
            "noderotation_retry_count",
            "noderotation_infeasible",
            "noderotation_max_unavailable",
            "noderotation_next_window_timestamp",
            "noderotation_nearest_deadline_timestamp",
            "noderotation_completed_total",
            "noderotation_forceful_fallback_total",
            "noderotation_nothing_to_reserve_total",
            "noderotation_window_missed_total",
            "noderotation_duration_seconds",
        ];
        for name in names {
            assert!(text.contains(&format!("# HELP {name} ")), "help for {name}:\n{text}");
            let series = if name == Metric::DurationSeconds.name() {
                format!("{name}_count")
            } else {
                name.into()
            };
            assert!(text.contains(&format!("{series}{{nodepool=\"general\"")), "{name}");
        }
        assert!(text.contains("# TYPE noderotation_duration_seconds histogram"));
        assert!(text.contains("# TYPE noderotation_completed_total counter"));
        assert!(text.contains("noderotation_candidates{nodepool=\"general\"} 3"));
        assert!(text.contains("noderotation_window_period_seconds{nodepool=\"general\"} 345600"));
        assert!(
            text.contains("noderotation_freeze_until_timestamp{nodepool=\"general\"} 1780000000")
        );
        assert!(text.contains("outcome=\"success\""));
    }

    #[test]
    fn counters_and_histogram_are_readable() {
        let t = Telemetry::new();
        assert_eq!(t.completed_count("a", Outcome::Success), 0);
        t.completed("a", Outcome::Success);
        t.completed("a", Outcome::Success);
        t.completed("a", Outcome::Expired);
        t.completed("b", Outcome::Failure);
        assert_eq!(t.completed_count("a", Outcome::Success), 2);
        assert_eq!(t.completed_count("a", Outcome::Expired), 1);
        assert_eq!(t.completed_count("a", Outcome::Failure), 0);
        assert_eq!(t.completed_count("b", Outcome::Failure), 1);
        t.forceful_fallback("a");
        t.window_missed("a");
        t.window_missed("a");
        assert_eq!(t.forceful_fallback_count("a"), 1);
        assert_eq!(t.window_missed_count("a"), 2);
        t.nothing_to_reserve("a");
        assert_eq!(t.nothing_to_reserve_count("a"), 1);
        t.duration("a", Phase::SurgeWait, 240.0);
        t.duration("a", Phase::SurgeWait, -3.0);
        t.duration("a", Phase::SurgeWait, f64::NAN);
        assert_eq!(t.duration_count("a", Phase::SurgeWait), 2);
        assert_eq!(t.duration_count("a", Phase::Drain), 0);
        // Reading never creates series.
        assert_eq!(t.completed_count("ghost", Outcome::Success), 0);
        assert_eq!(t.pool_gauge("ghost", PoolGauge::Candidates), None);
        assert_eq!(t.pools(), ["a", "b"]);
    }

    #[test]
    fn undefined_gauges_are_absent_and_booleans_are_0_or_1() {
        let t = Telemetry::new();
        t.set_pool_gauges("p", &full());
        assert_eq!(t.pool_gauge("p", PoolGauge::WindowPeriodSeconds), Some(345_600.0));
        assert_eq!(t.pool_gauge("p", PoolGauge::TRotBoundSeconds), Some(4620.0));
        assert_eq!(t.pool_gauge("p", PoolGauge::WindowActive), Some(1.0));
        let undefined = PoolGauges { policy_conflict: true, ..PoolGauges::default() };
        t.set_pool_gauges("p", &undefined);
        for g in [
            PoolGauge::WindowPeriodSeconds,
            PoolGauge::AgeThresholdSeconds,
            PoolGauge::RotationChances,
            PoolGauge::ThroughputCapacity,
            PoolGauge::TRotEstimateSeconds,
            PoolGauge::TRotBoundSeconds,
        ] {
            assert_eq!(t.pool_gauge("p", g), None, "{g:?}");
        }
        assert_eq!(t.pool_gauge("p", PoolGauge::PolicyConflict), Some(1.0));
        assert_eq!(t.pool_gauge("p", PoolGauge::WindowActive), Some(0.0));
        assert_eq!(t.pool_gauge("p", PoolGauge::FreezeUntilTimestamp), Some(0.0));
        let negative = PoolGauges { age_threshold: Some(-Duration::hours(1)), ..full() };
        t.set_pool_gauges("p", &negative);
        assert_eq!(t.pool_gauge("p", PoolGauge::AgeThresholdSeconds), Some(-3600.0));
    }

    #[test]
    fn forget_pool_removes_every_series_of_that_pool_only() {
        let t = Telemetry::new();
        for pool in ["gone", "kept"] {
            t.set_pool_gauges(pool, &full());
            for o in Outcome::ALL {
                t.completed(pool, o);
            }
            t.forceful_fallback(pool);
            t.nothing_to_reserve(pool);
            t.window_missed(pool);
            for ph in Phase::ALL {
                t.duration(pool, ph, 60.0);
            }
        }
        // Every metric labelled by pool has a series of "gone" now: a metric added to the
        // vocabulary but not recorded above fails here, before forget_pool could miss it.
        let of_gone = |t: &Telemetry| -> Vec<String> {
            let families = t.registry().gather();
            let labelled = |f: &prometheus::proto::MetricFamily| {
                f.get_metric().iter().any(|m| {
                    m.get_label().iter().any(|l| l.name() == "nodepool" && l.value() == "gone")
                })
            };
            families.iter().filter(|f| labelled(f)).map(|f| f.name().to_string()).collect()
        };
        let by_pool: Vec<String> = Metric::ALL
            .iter()
            .filter(|m| m.labels().contains(&"nodepool"))
            .map(|m| m.name().to_string())
            .collect();
        let mut recorded = of_gone(&t);
        recorded.sort();
        let mut expected = by_pool.clone();
        expected.sort();
        assert_eq!(recorded, expected, "every pool-labelled metric is recorded by this test");
        t.forget_pool("gone");
        assert!(of_gone(&t).is_empty(), "left: {:?}", of_gone(&t));
        let text = t.render();
        assert!(!text.contains("nodepool=\"gone\""), "{text}");
        assert!(text.contains("nodepool=\"kept\""));
        assert_eq!(t.pools(), ["kept"]);
        assert_eq!(t.completed_count("kept", Outcome::Expired), 1);
        // Forgetting twice, or an unknown pool, is harmless.
        t.forget_pool("gone");
        t.forget_pool("never");
    }

    #[test]
    fn forget_pool_removes_the_series_of_a_pool_without_gauges() {
        // Each recorder notes its pool: forgetting skips only pools that never had a series.
        let t = Telemetry::new();
        t.completed("c", Outcome::Failure);
        t.forceful_fallback("f");
        t.nothing_to_reserve("n");
        t.window_missed("w");
        t.duration("d", Phase::Drain, 60.0);
        for pool in ["c", "f", "n", "w", "d"] {
            t.forget_pool(pool);
        }
        assert!(t.pools().is_empty(), "{:?}", t.pools());
    }

    #[test]
    fn the_same_values_again_after_forget_pool_export_again() {
        // Unchanged values are not re-exported; a forgotten pool's are, in full.
        let t = Telemetry::new();
        t.set_pool_gauges("p", &full());
        t.set_pool_gauges("p", &full());
        assert_eq!(t.pool_gauge("p", PoolGauge::WindowActive), Some(1.0));
        t.forget_pool("p");
        assert_eq!(t.pool_gauge("p", PoolGauge::WindowActive), None);
        t.set_pool_gauges("p", &full());
        for g in PoolGauge::ALL {
            assert!(t.pool_gauge("p", g).is_some(), "{g:?}");
        }
    }

    #[test]
    fn registries_are_independent() {
        let a = Telemetry::new();
        let b = Telemetry::new();
        a.completed("p", Outcome::Success);
        assert_eq!(b.completed_count("p", Outcome::Success), 0);
        assert!(prometheus::gather().iter().all(|f| !f.name().starts_with("noderotation_")));
    }

    #[test]
    fn histogram_buckets_span_minutes_to_hours() {
        let t = Telemetry::new();
        t.duration("p", Phase::Drain, 3600.0);
        let text = t.render();
        for le in ["30", "300", "900", "3600", "14400", "86400", "+Inf"] {
            assert!(
                text.contains(&format!(
                    "noderotation_duration_seconds_bucket{{nodepool=\"p\",phase=\"drain\",le=\"{le}\"}}"
                )),
                "le={le}\n{text}"
            );
        }
        assert!(DURATION_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn latch_fires_on_entry_and_detail_change_then_after_clear() {
        let mut latch: WarningLatch = WarningLatch::new();
        let key = ("NodePool general".to_string(), "InsufficientHeadroom".to_string());
        assert!(latch.should_fire(key.clone(), "cpu 4/2/100"));
        assert!(!latch.should_fire(key.clone(), "cpu 4/2/100"), "still latched");
        assert!(latch.should_fire(key.clone(), "memory 16Gi/1Gi/400Gi"), "new tuple");
        assert!(!latch.should_fire(key.clone(), "memory 16Gi/1Gi/400Gi"));
        latch.clear(&key);
        assert!(!latch.is_latched(&key));
        assert!(latch.should_fire(key.clone(), "memory 16Gi/1Gi/400Gi"), "re-entry fires");
        // Keys are independent.
        let other = ("NodeClaim x".to_string(), "SurgeUnschedulable".to_string());
        assert!(latch.should_fire(other.clone(), "Unschedulable: no nodes"));
        assert_eq!(latch.len(), 2);
        latch.retain(|(object, _)| object != "NodeClaim x");
        assert!(!latch.is_latched(&other) && latch.is_latched(&key));
        // Clearing an unknown key is harmless.
        latch.clear(&("a".into(), "b".into()));
        assert_eq!(latch.len(), 1);
    }
}
