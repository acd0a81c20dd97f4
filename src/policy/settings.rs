//! A policy's spec with every default applied and every value parsed: [`Effective`]. Built by
//! [`Effective::from_spec`], the reconcile-time validation whose errors become the policy's
//! `Invalid` condition (spec §5.4).
//!
//! `from_spec` repeats every rule the CRD schema declares (so `noderotation plan` and a policy
//! stored under an older schema are judged the same way) and adds what the schema cannot check:
//! that time zones exist in the tz database and that durations are ordered sensibly
//! (`docs/decisions/policy-crd.md`). `minRotationChances < 1` and an empty window list are not
//! validation errors: §3.2 makes them layer-1 fatal findings (`KBelowOne`,
//! `NoWindows`), so they are carried through to [`crate::policy::feasibility`].
use super::invalid::{FieldError, InvalidPolicy};
use std::collections::BTreeSet;
use std::fmt;

use chrono::Duration;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::crd::{
    INT_OR_PERCENT_ADMITS, MAX_UNAVAILABLE, MAX_UNAVAILABLE_ADMITS, MatchNodeRequirements,
    RotationPolicySpec,
};
use super::duration::{self, DurationError};
use super::selector;
use super::window::Schedule;

/// `failurePause` floor when it is unset (§4.4: `max(10m, cooldownAfter)`).
pub(crate) const DEFAULT_FAILURE_PAUSE_FLOOR: Duration = Duration::minutes(10);
/// `drainEstimate` cap when it is unset (`min(tGP, 10m)`).
pub(crate) const DEFAULT_DRAIN_ESTIMATE_CAP: Duration = Duration::minutes(10);
/// `provisioningEstimate` cap when it is unset (`min(readyTimeout, 5m)`).
pub(crate) const DEFAULT_PROVISIONING_ESTIMATE_CAP: Duration = Duration::minutes(5);

/// `ageThreshold`: derived, or an operator's override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgeThreshold {
    /// `A = E - (K*P + t_rot)` per claim (§3.2).
    Auto,
    /// Due from the start of the claim's K-th last chance, counted on the real occurrences
    /// (`docs/decisions/age-threshold-windows.md`).
    Windows,
    /// A claim is due once its age reaches this.
    Override(Duration),
}

impl AgeThreshold {
    /// The spelling of `spec.ageThreshold` for the two derived modes.
    pub(crate) const AUTO: &'static str = "auto";
    pub(crate) const WINDOWS: &'static str = "windows";
}

/// An integer from 1 to [`MAX_UNAVAILABLE`] or a percentage of a pool's nodes (Kubernetes'
/// int-or-string, as `surge.maxUnavailable` and `surge.maxUnavailableLimit` take it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    /// An integer, 1 to [`MAX_UNAVAILABLE`].
    Count(u32),
    /// A percentage of the pool's nodes, 1 to 100, rounded up.
    Percent(u32),
}

impl IntOrPercent {
    /// The number for a pool of `pool_nodes` nodes: the count, or the percentage of the nodes
    /// rounded up; at least 1 (a pool without nodes still has one lane), at most
    /// [`MAX_UNAVAILABLE`] (a percentage of a very large pool, or a count a stored object carries
    /// past the schema).
    pub(crate) fn resolve(&self, pool_nodes: usize) -> usize {
        let lanes = match *self {
            IntOrPercent::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            IntOrPercent::Percent(p) => {
                let p = usize::try_from(p).unwrap_or(usize::MAX);
                pool_nodes.saturating_mul(p).div_ceil(100)
            }
        };
        let most = usize::try_from(MAX_UNAVAILABLE).unwrap_or(usize::MAX);
        lanes.clamp(1, most)
    }

    /// The value from the spec, or what is wrong with it; `admits` says what the field takes.
    pub(crate) fn parse(value: &IntOrString, admits: &str) -> Result<IntOrPercent, String> {
        let admits = || format!("must be {admits}");
        match value {
            IntOrString::Int(n) => match u32::try_from(*n) {
                Ok(n) if (1..=MAX_UNAVAILABLE).contains(&n) => Ok(IntOrPercent::Count(n)),
                Ok(n) if n > MAX_UNAVAILABLE => Err(format!(
                    "{n} is above {MAX_UNAVAILABLE} (each rotation in flight keeps its state in \
                     the NodePool's annotations, which the API server limits to 256 KiB): {}",
                    admits()
                )),
                _ => Err(format!("{n} is below 1: {}", admits())),
            },
            IntOrString::String(s) => {
                let digits = s.strip_suffix('%').unwrap_or_default();
                let percent = (!digits.starts_with('0')
                    && !digits.is_empty()
                    && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse::<u32>().ok())
                .flatten()
                .filter(|p| (1..=100).contains(p));
                percent.map(IntOrPercent::Percent).ok_or_else(|| format!("{s:?} {}", admits()))
            }
        }
    }
}

/// As the operator wrote it: `3` or `10%`.
impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Count(n) => write!(f, "{n}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// `surge.maxUnavailable`: how many rotations of one pool may be in flight at once (the pool's
/// lanes), as the operator wrote it. [`MaxUnavailable::lanes`] turns it into the lane count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    /// A count or a percentage of the pool's nodes.
    Fixed(IntOrPercent),
    /// `auto`: the fewest lanes that keep every node's K chances (what `plan` advises), at most
    /// `limit` (`surge.maxUnavailableLimit`), recomputed as the pool grows or shrinks
    /// (docs/decisions/max-unavailable-auto.md).
    Auto {
        /// `surge.maxUnavailableLimit`.
        limit: IntOrPercent,
    },
}

impl MaxUnavailable {
    /// The default: one rotation at a time.
    #[cfg(test)]
    pub(crate) const ONE: MaxUnavailable = MaxUnavailable::Fixed(IntOrPercent::Count(1));
    /// The spelling of `surge.maxUnavailable: auto`.
    pub(crate) const AUTO: &'static str = "auto";
    /// `surge.maxUnavailableLimit` when unset.
    pub(crate) const DEFAULT_LIMIT: IntOrPercent = IntOrPercent::Percent(10);

    /// The lanes for a pool of `pool_nodes` nodes. `needed` is what the pool needs
    /// ([`crate::policy::feasibility::Derived::lanes_needed`]), which only `auto` reads: it uses
    /// that many, at least 1 and at most its limit; 1 when the need is unknown.
    pub(crate) fn lanes(&self, pool_nodes: usize, needed: Option<usize>) -> usize {
        match self {
            MaxUnavailable::Fixed(n) => n.resolve(pool_nodes),
            MaxUnavailable::Auto { limit } => {
                needed.unwrap_or(1).clamp(1, limit.resolve(pool_nodes))
            }
        }
    }

    /// The most lanes this value can give a pool of `pool_nodes` nodes: the value itself, or
    /// `auto`'s limit. What the simulation's invariants hold the controller to.
    pub(crate) fn ceiling(&self, pool_nodes: usize) -> usize {
        match self {
            MaxUnavailable::Fixed(n) | MaxUnavailable::Auto { limit: n } => n.resolve(pool_nodes),
        }
    }

    /// The values from the spec (`maxUnavailable`, `maxUnavailableLimit`), or what is wrong
    /// with each, by field name.
    pub(crate) fn parse(
        value: &IntOrString,
        limit: Option<&IntOrString>,
    ) -> Result<MaxUnavailable, Vec<(&'static str, String)>> {
        let limit = limit
            .map(|l| IntOrPercent::parse(l, INT_OR_PERCENT_ADMITS))
            .transpose()
            .map_err(|problem| ("surge.maxUnavailableLimit", problem));
        let value = match value {
            IntOrString::String(s) if s == MaxUnavailable::AUTO => Ok(None),
            other => IntOrPercent::parse(other, MAX_UNAVAILABLE_ADMITS)
                .map(Some)
                .map_err(|problem| ("surge.maxUnavailable", problem)),
        };
        match (value, limit) {
            (Ok(Some(n)), Ok(_)) => Ok(MaxUnavailable::Fixed(n)),
            (Ok(None), Ok(limit)) => {
                Ok(MaxUnavailable::Auto { limit: limit.unwrap_or(MaxUnavailable::DEFAULT_LIMIT) })
            }
            (value, limit) => Err(value.err().into_iter().chain(limit.err()).collect()),
        }
    }
}

/// As the operator wrote it: `3`, `10%` or `auto`.
impl fmt::Display for MaxUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxUnavailable::Fixed(n) => write!(f, "{n}"),
            MaxUnavailable::Auto { .. } => f.write_str(MaxUnavailable::AUTO),
        }
    }
}

/// Which node labels the placeholder copies (§3.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRequirementKeys {
    pub required: Vec<String>,
    pub preferred: Vec<String>,
}

/// A governing policy, ready for decisions: defaults applied, durations parsed, windows
/// compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub schedule: Schedule,
    pub age_threshold: AgeThreshold,
    /// `K`. Zero only for a stored spec below the schema's minimum (fatal `KBelowOne`).
    pub min_rotation_chances: u32,
    pub ready_timeout: Duration,
    /// `surge.maxUnavailable` (and its `maxUnavailableLimit`): the pool's lanes,
    /// [`MaxUnavailable::lanes`] for its nodes.
    pub max_unavailable: MaxUnavailable,
    /// Per lane: each lane waits this long after its own completion.
    pub cooldown_after: Duration,
    /// Gate B (§4.4); `max(10m, cooldownAfter)` when unset.
    pub failure_pause: Duration,
    pub retry_backoff: Duration,
    /// The explicit `drainEstimate`; see [`Effective::drain_estimate`] for the defaulted value,
    /// which depends on the claim's or pool's tGP.
    pub drain_estimate_override: Option<Duration>,
    /// `min(readyTimeout, 5m)` when unset.
    pub provisioning_estimate: Duration,
    pub match_node_requirements: NodeRequirementKeys,
    pub forceful_fallback: bool,
    pub whole_node_reservation: bool,
}

impl Effective {
    /// Validates `spec` and applies every default. All problems are reported together.
    pub fn from_spec(spec: &RotationPolicySpec) -> Result<Effective, InvalidPolicy> {
        let mut errors = Vec::new();
        let mut err = |field: &str, problem: String| {
            errors.push(FieldError { field: format!("spec.{field}"), problem });
        };

        for problem in selector::selector_problems(&spec.node_pool_selector) {
            err(&format!("nodePoolSelector.{}", problem.field), problem.problem);
        }

        let age_threshold = match spec.age_threshold.as_str() {
            AgeThreshold::AUTO => Some(AgeThreshold::Auto),
            AgeThreshold::WINDOWS => Some(AgeThreshold::Windows),
            other => match parse_duration_field(other) {
                Ok(d) if d > Duration::zero() => Some(AgeThreshold::Override(d)),
                Ok(_) => {
                    err(
                        "ageThreshold",
                        "must be auto, windows or a Go duration greater than 0".into(),
                    );
                    None
                }
                Err(problem) => {
                    err(
                        "ageThreshold",
                        format!("must be auto, windows or a Go duration: {problem}"),
                    );
                    None
                }
            },
        };

        if spec.maintenance_windows.len() > 32 {
            err("maintenanceWindows", "at most 32 entries".into());
        }
        let schedule = match Schedule::new(&spec.maintenance_windows) {
            Ok(s) => Some(s),
            Err(window_errors) => {
                for e in window_errors {
                    err(&e.field, e.problem);
                }
                None
            }
        };

        let surge = &spec.surge;
        let max_unavailable =
            MaxUnavailable::parse(&surge.max_unavailable, surge.max_unavailable_limit.as_ref())
                .map_err(|problems| {
                    for (field, problem) in problems {
                        err(field, problem);
                    }
                })
                .ok();
        let mut positive = |field: &str, value: &str| match parse_duration_field(value) {
            Ok(d) if d > Duration::zero() => Some(d),
            Ok(_) => {
                err(field, "must be greater than 0".into());
                None
            }
            Err(problem) => {
                err(field, problem);
                None
            }
        };
        let ready_timeout = positive("surge.readyTimeout", &surge.ready_timeout);
        let retry_backoff = positive("surge.retryBackoff", &surge.retry_backoff);
        let drain_estimate =
            surge.drain_estimate.as_deref().map(|v| positive("surge.drainEstimate", v));
        let provisioning_estimate = surge
            .provisioning_estimate
            .as_deref()
            .map(|v| positive("surge.provisioningEstimate", v));
        let mut non_negative = |field: &str, value: &str| match parse_duration_field(value) {
            Ok(d) => Some(d),
            Err(problem) => {
                err(field, problem);
                None
            }
        };
        let cooldown_after = non_negative("surge.cooldownAfter", &surge.cooldown_after);
        let failure_pause =
            surge.failure_pause.as_deref().map(|v| non_negative("surge.failurePause", v));

        // Orderings the schema cannot express (the defaults depend on other fields).
        if let (Some(Some(pause)), Some(cooldown)) = (failure_pause, cooldown_after)
            && pause < cooldown
        {
            err(
                "surge.failurePause",
                format!(
                    "{} is shorter than surge.cooldownAfter {}: a failure would let the next \
                     attempt start sooner than a success does; raise failurePause or remove it \
                     (default: the larger of 10m and cooldownAfter)",
                    duration::format_human(pause),
                    duration::format_human(cooldown)
                ),
            );
        }
        if let (Some(Some(estimate)), Some(timeout)) = (provisioning_estimate, ready_timeout)
            && estimate > timeout
        {
            err(
                "surge.provisioningEstimate",
                format!(
                    "{} exceeds surge.readyTimeout {}: every surge would be rolled back before \
                     the capacity is expected; raise readyTimeout or lower the estimate",
                    duration::format_human(estimate),
                    duration::format_human(timeout)
                ),
            );
        }

        let keys = &surge.match_node_requirements;
        for problem in node_requirement_problems(keys) {
            err(&format!("surge.matchNodeRequirements.{}", problem.field), problem.problem);
        }

        if spec.pre_pull.enabled {
            err("prePull.enabled", "prePull is not available in v1alpha1; set it to false".into());
        }

        if !errors.is_empty() {
            return Err(InvalidPolicy { errors });
        }
        // Every `None` below pushed an error, so with no errors all are present.
        let (
            Some(schedule),
            Some(age_threshold),
            Some(ready_timeout),
            Some(retry_backoff),
            Some(cooldown_after),
            Some(max_unavailable),
        ) = (
            schedule,
            age_threshold,
            ready_timeout,
            retry_backoff,
            cooldown_after,
            max_unavailable,
        )
        else {
            return Err(InvalidPolicy { errors });
        };
        Ok(Effective {
            schedule,
            age_threshold,
            min_rotation_chances: u32::try_from(spec.min_rotation_chances).unwrap_or(0),
            ready_timeout,
            max_unavailable,
            cooldown_after,
            failure_pause: failure_pause
                .flatten()
                .unwrap_or_else(|| DEFAULT_FAILURE_PAUSE_FLOOR.max(cooldown_after)),
            retry_backoff,
            drain_estimate_override: drain_estimate.flatten(),
            provisioning_estimate: provisioning_estimate
                .flatten()
                .unwrap_or_else(|| ready_timeout.min(DEFAULT_PROVISIONING_ESTIMATE_CAP)),
            match_node_requirements: NodeRequirementKeys {
                required: keys.required.clone(),
                preferred: keys.preferred.clone(),
            },
            forceful_fallback: surge.forceful_fallback.enabled,
            whole_node_reservation: surge.whole_node_reservation.enabled,
        })
    }

    /// `drainEstimate`: the explicit value, else `min(tGP, 10m)`; tGP unset: 10m.
    pub(crate) fn drain_estimate(&self, tgp: Option<Duration>) -> Duration {
        self.drain_estimate_override.unwrap_or_else(|| match tgp {
            Some(tgp) => tgp.min(DEFAULT_DRAIN_ESTIMATE_CAP),
            None => DEFAULT_DRAIN_ESTIMATE_CAP,
        })
    }
}

/// A Go duration as the schema admits it: no sign.
fn parse_duration_field(value: &str) -> Result<Duration, String> {
    if value.starts_with(['+', '-']) {
        return Err(format!("{value:?} must be a Go duration without a sign, e.g. 15m or 1h30m"));
    }
    duration::parse(value).map_err(|e: DurationError| format!("{e}; e.g. 15m or 1h30m"))
}

struct Problem {
    field: String,
    problem: String,
}

fn node_requirement_problems(keys: &MatchNodeRequirements) -> Vec<Problem> {
    let mut out = Vec::new();
    for (list_name, list) in [("required", &keys.required), ("preferred", &keys.preferred)] {
        if list.len() > 16 {
            out.push(Problem { field: list_name.into(), problem: "at most 16 keys".into() });
        }
        let mut seen = BTreeSet::new();
        for (i, key) in list.iter().enumerate() {
            if key.is_empty() {
                out.push(Problem {
                    field: format!("{list_name}[{i}]"),
                    problem: "must not be empty".into(),
                });
            } else if !seen.insert(key) {
                out.push(Problem {
                    field: format!("{list_name}[{i}]"),
                    problem: format!("duplicate key {key:?}"),
                });
            }
        }
    }
    for (i, key) in keys.preferred.iter().enumerate() {
        if keys.required.contains(key) {
            out.push(Problem {
                field: format!("preferred[{i}]"),
                problem: format!("{key:?} is also required; a key cannot be both"),
            });
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::policy::crd::MaintenanceWindow;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    pub(crate) fn spec_with(windows: &[(&str, &[&str], &str, &str)]) -> RotationPolicySpec {
        RotationPolicySpec::with_windows(
            LabelSelector::default(),
            windows
                .iter()
                .map(|(tz, days, start, end)| MaintenanceWindow {
                    timezone: tz.to_string(),
                    days: days.iter().map(|d| d.to_string()).collect(),
                    start: start.to_string(),
                    end: end.to_string(),
                })
                .collect(),
        )
    }

    fn invalid_fields(spec: &RotationPolicySpec) -> Vec<String> {
        match Effective::from_spec(spec) {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.into_iter().map(|e| e.field).collect(),
        }
    }

    #[test]
    fn defaults() {
        let spec = spec_with(&[("Asia/Tokyo", &["Wed", "Sat"], "02:00", "06:00")]);
        let e = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.age_threshold, AgeThreshold::Auto);
        assert_eq!(e.min_rotation_chances, 2);
        assert_eq!(e.ready_timeout, Duration::minutes(15));
        assert_eq!(e.cooldown_after, Duration::minutes(10));
        assert_eq!(e.failure_pause, Duration::minutes(10));
        assert_eq!(e.retry_backoff, Duration::minutes(30));
        assert_eq!(e.provisioning_estimate, Duration::minutes(5));
        assert_eq!(e.drain_estimate(Some(Duration::hours(1))), Duration::minutes(10));
        assert_eq!(e.drain_estimate(Some(Duration::minutes(3))), Duration::minutes(3));
        assert_eq!(e.drain_estimate(None), Duration::minutes(10));
        assert_eq!(e.t_rot(Some(Duration::hours(1))), Duration::minutes(77));
        assert_eq!(e.t_rot_est(Some(Duration::hours(1))), Duration::minutes(15));
        assert_eq!(e.match_node_requirements.required.len(), 3);
        assert!(!e.forceful_fallback && !e.whole_node_reservation);
        assert_eq!(e.max_unavailable, MaxUnavailable::ONE);
    }

    #[test]
    fn max_unavailable_is_a_count_or_a_percentage_of_the_nodes() {
        let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
        let parsed = |spec: &RotationPolicySpec| {
            Effective::from_spec(spec).map(|e| e.max_unavailable).map_err(|e| e.to_string())
        };
        spec.surge.max_unavailable = IntOrString::Int(3);
        assert_eq!(parsed(&spec), Ok(MaxUnavailable::Fixed(IntOrPercent::Count(3))));
        spec.surge.max_unavailable = IntOrString::String("10%".into());
        let ten = parsed(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ten, MaxUnavailable::Fixed(IntOrPercent::Percent(10)));
        assert_eq!(ten.to_string(), "10%");
        assert_eq!(IntOrPercent::Count(3).to_string(), "3");
        // Rounded up, at least 1; a fixed value ignores what the pool needs.
        let lanes: Vec<usize> =
            [0, 1, 9, 10, 11, 240].iter().map(|n| ten.lanes(*n, Some(99))).collect();
        assert_eq!(lanes, [1, 1, 1, 1, 2, 24]);
        assert_eq!(IntOrPercent::Percent(100).resolve(7), 7);
        assert_eq!(IntOrPercent::Percent(1).resolve(101), 2);
        assert_eq!(IntOrPercent::Count(5).resolve(0), 5);
        assert_eq!(MaxUnavailable::ONE.lanes(1000, None), 1);
        // At most 100 lanes, however large the pool (the NodePool's annotations stay small).
        assert_eq!(IntOrPercent::Percent(10).resolve(5000), 100);
        assert_eq!(IntOrPercent::Count(100).resolve(5000), 100);
        assert_eq!(MaxUnavailable::Fixed(IntOrPercent::Percent(10)).lanes(5000, None), 100);
        for ok in ["1%", "99%", "100%"] {
            spec.surge.max_unavailable = IntOrString::String(ok.into());
            assert!(parsed(&spec).is_ok(), "{ok}");
        }
        for bad in ["0%", "150%", "101%", "abc", "2", "05%", "%", "10 %", "-5%", "1.5%", "", "Auto"]
        {
            spec.surge.max_unavailable = IntOrString::String(bad.into());
            let text = parsed(&spec).err().unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert_eq!(
                text,
                format!(
                    "spec.surge.maxUnavailable: {bad:?} must be auto, an integer from 1 to 100 \
                     or a percentage of the pool's nodes from 1% to 100% (for example auto, 2 or \
                     \"10%\"; a percentage resolves to at most 100)"
                )
            );
        }
        for bad in [0, -1, i32::MIN] {
            spec.surge.max_unavailable = IntOrString::Int(bad);
            let text = parsed(&spec).err().unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(
                text.starts_with(&format!("spec.surge.maxUnavailable: {bad} is below 1: must be"))
            );
        }
        spec.surge.max_unavailable = IntOrString::Int(100);
        assert_eq!(parsed(&spec), Ok(MaxUnavailable::Fixed(IntOrPercent::Count(100))));
        for bad in [101, i32::MAX] {
            spec.surge.max_unavailable = IntOrString::Int(bad);
            let text = parsed(&spec).err().unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(
                text.starts_with(&format!("spec.surge.maxUnavailable: {bad} is above 100 (")),
                "{text}"
            );
            assert!(text.contains("256 KiB"), "{text}");
        }
    }

    #[test]
    fn max_unavailable_auto_uses_what_the_pool_needs_within_its_limit() {
        let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
        spec.surge.max_unavailable = IntOrString::String("auto".into());
        let parsed = |spec: &RotationPolicySpec| {
            Effective::from_spec(spec).map(|e| e.max_unavailable).map_err(|e| e.to_string())
        };
        let auto = parsed(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(auto, MaxUnavailable::Auto { limit: IntOrPercent::Percent(10) }, "10% default");
        assert_eq!(auto.to_string(), "auto");
        // The need, within 10% of the nodes (at least 1); 1 when the need is unknown.
        assert_eq!(auto.lanes(240, Some(17)), 17);
        assert_eq!(auto.lanes(240, Some(30)), 24, "capped at 10% of 240");
        assert_eq!(auto.lanes(240, None), 1);
        assert_eq!(auto.lanes(5, Some(3)), 1, "10% of 5 rounds up to 1");
        assert_eq!(auto.lanes(240, Some(0)), 1);
        assert_eq!(auto.ceiling(240), 24);
        assert_eq!(MaxUnavailable::Fixed(IntOrPercent::Count(3)).ceiling(240), 3);
        spec.surge.max_unavailable_limit = Some(IntOrString::Int(40));
        let forty = parsed(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(forty, MaxUnavailable::Auto { limit: IntOrPercent::Count(40) });
        assert_eq!(forty.lanes(240, Some(30)), 30);
        assert_eq!(forty.lanes(1000, Some(68)), 40);
        // auto never chooses more than 100, whatever the limit resolves to.
        spec.surge.max_unavailable_limit = Some(IntOrString::Int(100));
        let hundred = parsed(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(hundred.lanes(5000, Some(300)), 100);
        assert_eq!(hundred.ceiling(5000), 100);
        assert_eq!(auto.lanes(5000, Some(700)), 100, "10% of 5000 nodes is still 100");
        assert_eq!(auto.ceiling(5000), 100);
        // A bad limit is named as such, with what the field takes.
        for (bad, problem) in [
            (IntOrString::Int(0), "0 is below 1: must be an integer from 1 to 100"),
            (IntOrString::Int(101), "101 is above 100 (each rotation in flight keeps its state"),
            (IntOrString::String("auto".into()), "\"auto\" must be an integer from 1 to 100"),
            (IntOrString::String("0%".into()), "\"0%\" must be an integer from 1 to 100"),
        ] {
            spec.surge.max_unavailable_limit = Some(bad);
            let text = parsed(&spec).err().unwrap_or_default();
            assert!(
                text.starts_with(&format!("spec.surge.maxUnavailableLimit: {problem}")),
                "{text}"
            );
        }
        // A limit beside a fixed value is checked too (it is ignored, not wrong, when valid).
        spec.surge.max_unavailable = IntOrString::Int(3);
        assert!(parsed(&spec).is_err());
        spec.surge.max_unavailable_limit = Some(IntOrString::String("20%".into()));
        assert_eq!(parsed(&spec), Ok(MaxUnavailable::Fixed(IntOrPercent::Count(3))));
    }

    #[test]
    fn derived_defaults_follow_their_inputs() {
        let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
        spec.surge.cooldown_after = "25m".into();
        spec.surge.ready_timeout = "3m".into();
        let e = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.failure_pause, Duration::minutes(25));
        assert_eq!(e.provisioning_estimate, Duration::minutes(3));
        spec.surge.failure_pause = Some("1h".into());
        spec.surge.drain_estimate = Some("20m".into());
        spec.surge.provisioning_estimate = Some("2m".into());
        spec.age_threshold = "240h".into();
        let e = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.failure_pause, Duration::hours(1));
        assert_eq!(e.drain_estimate(Some(Duration::minutes(5))), Duration::minutes(20));
        assert_eq!(e.provisioning_estimate, Duration::minutes(2));
        assert_eq!(e.age_threshold, AgeThreshold::Override(Duration::hours(240)));
        spec.age_threshold = "windows".into();
        let e = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.age_threshold, AgeThreshold::Windows);
    }

    #[test]
    fn age_threshold_spellings() {
        let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
        for wrong in ["window", "Windows", "WINDOWS", "windows ", "auto,windows"] {
            spec.age_threshold = wrong.into();
            assert_eq!(invalid_fields(&spec), ["spec.ageThreshold"], "{wrong:?}");
        }
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let mut spec = spec_with(&[("Asia/Tokio", &["Wed"], "02:00", "6:00")]);
        spec.age_threshold = "7d".into();
        spec.surge.max_unavailable = IntOrString::Int(0);
        spec.surge.ready_timeout = "0s".into();
        spec.surge.retry_backoff = "-30m".into();
        spec.surge.cooldown_after = "30m".into();
        spec.surge.failure_pause = Some("10m".into());
        spec.surge.provisioning_estimate = Some("0".into());
        spec.surge.match_node_requirements.preferred = vec!["kubernetes.io/arch".into()];
        spec.pre_pull.enabled = true;
        assert_eq!(
            invalid_fields(&spec),
            [
                "spec.ageThreshold",
                "spec.maintenanceWindows[0].timezone",
                "spec.maintenanceWindows[0].end",
                "spec.surge.maxUnavailable",
                "spec.surge.readyTimeout",
                "spec.surge.retryBackoff",
                "spec.surge.provisioningEstimate",
                "spec.surge.failurePause",
                "spec.surge.matchNodeRequirements.preferred[0]",
                "spec.prePull.enabled",
            ]
        );
    }

    #[test]
    fn provisioning_estimate_must_fit_the_timeout() {
        let mut spec = spec_with(&[("UTC", &["Sat"], "02:00", "06:00")]);
        spec.surge.provisioning_estimate = Some("20m".into());
        assert_eq!(invalid_fields(&spec), ["spec.surge.provisioningEstimate"]);
        spec.surge.provisioning_estimate = Some("15m".into());
        assert!(invalid_fields(&spec).is_empty());
    }

    #[test]
    fn k_below_one_and_no_windows_are_not_validation_errors() {
        let mut spec = spec_with(&[]);
        spec.min_rotation_chances = 0;
        let e = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.min_rotation_chances, 0);
        assert!(e.schedule.is_empty());
        spec.min_rotation_chances = -3;
        let e = Effective::from_spec(&spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.min_rotation_chances, 0);
    }

    #[test]
    fn error_display_joins_fields() {
        let mut spec = spec_with(&[]);
        spec.surge.ready_timeout = "soon".into();
        spec.age_threshold = "0s".into();
        let text = Effective::from_spec(&spec).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            text,
            "spec.ageThreshold: must be auto, windows or a Go duration greater than 0; \
             spec.surge.readyTimeout: invalid duration \"soon\"; e.g. 15m or 1h30m"
        );
    }
}
