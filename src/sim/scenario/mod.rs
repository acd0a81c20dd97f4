//! What a simulation runs: a fleet, its policies, the cluster's delays and failures, and an
//! operator script, as one YAML document (`deploy/examples/scenarios/*.yaml`).
//!
//! Policies are real `RotationPolicy` manifests, so a scenario reads like what an operator would
//! `kubectl apply`. Durations accept Go syntax plus a `d` (24h) unit (`14d`, `2h12m`, `90s`).
//! [`Scenario::compile`] parses and checks everything once, so the simulation never re-parses.
//!
//! One concern a file: `fleet.rs` (the file's fleet and the cluster around it: pools, delays,
//! failures, Karpenter's features, shortages, expectations), `script.rs` (the operator's
//! actions), `faults.rs` (the rates of `--faults`) and `compile.rs` (the checks and the compiled
//! form they produce); this file holds the document itself, its reading, and the built-in fleet.
use std::collections::BTreeMap;

use anyhow::{Context, anyhow};
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::policy::crd::RotationPolicy;

mod compile;
mod faults;
mod fleet;
mod script;

pub use compile::{Compiled, FaultPlan, PoolEdit, PoolPlan, ShortagePlan, Step};
pub(crate) use faults::FaultRates;
pub(crate) use fleet::{
    Delays, DurRange, Expect, Failures, KarpenterFeatures, PoolScenario, Shortage,
};
pub(crate) use script::{ActionKind, NodePick, ScriptStep};

/// The fleet `noderotation simulate` runs without `--scenario`.
pub(crate) const DEFAULT_SCENARIO: &str =
    include_str!("../../../deploy/examples/scenarios/default.yaml");

/// Resource name -> thousandths of its unit (as `karpenter::quantity_millis`).
pub(crate) type Resources = BTreeMap<String, i128>;

/// A scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Virtual start instant (RFC 3339). Default: Monday 2026-06-01 00:00 UTC.
    #[serde(default = "default_start")]
    pub start: DateTime<Utc>,
    /// Simulated span when `--weeks` is not given.
    #[serde(default = "default_weeks")]
    pub weeks: u32,
    /// Simulated span as a duration (`25m`, `36h`), for runs shorter than a week (a fleet in
    /// compressed time); replaces `weeks`. `--weeks` overrides both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<String>,
    pub pools: Vec<PoolScenario>,
    #[serde(default)]
    pub policies: Vec<RotationPolicy>,
    #[serde(default)]
    pub delays: Delays,
    /// Failures that are part of the scenario (they happen with or without `--faults`).
    #[serde(default)]
    pub failures: Failures,
    /// Karpenter's optional features (feature gates on self-managed Karpenter).
    #[serde(default)]
    pub karpenter: KarpenterFeatures,
    /// Intervals in which a pool's provisioning never completes (an instance-type shortage).
    #[serde(default)]
    pub shortages: Vec<Shortage>,
    /// The operator's actions, in any order (sorted by `at`).
    #[serde(default)]
    pub script: Vec<ScriptStep>,
    /// Fault rates used with `--faults` (default: [`FaultRates::default`]).
    #[serde(default)]
    pub faults: Option<FaultRates>,
    #[serde(default)]
    pub expect: Expect,
}

fn default_start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn default_weeks() -> u32 {
    8
}

impl Scenario {
    pub fn from_yaml(text: &str) -> anyhow::Result<Scenario> {
        serde_norway::from_str(text).map_err(|e| anyhow!("scenario: {e}"))
    }

    pub fn load(path: &std::path::Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        Scenario::from_yaml(&text).with_context(|| path.display().to_string())
    }

    pub fn default_fleet() -> anyhow::Result<Scenario> {
        Scenario::from_yaml(DEFAULT_SCENARIO)
    }
}
