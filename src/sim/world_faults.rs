//! The world's fault classes under `--faults` (what Karpenter, the cloud and the scheduler do
//! wrong), each named once: its rate in [`FaultRates`] and the count of its hits in a run.
//!
//! Each class draws from a stream of its own, keyed by what the draw is about: the object, and
//! for the faults aimed at rotations in flight, the virtual minute. A draw is a function of the
//! seed, the class and that key alone, so how often the controller wakes a pool, or in which
//! order the world meets its objects, does not move which faults are injected: a change in the
//! controller's scheduling leaves the fault figures where they were.
use super::scenario::FaultRates;

/// One class of world fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum WorldFault {
    /// Karpenter force-expires an anchored claim while its rotation is pending.
    ExpirePending,
    /// The old claim is finalized while its readyTimeout rollback runs.
    FinalizeInRollback,
    /// A higher-priority pod preempts a Running placeholder.
    PreemptPlaceholder,
    /// The instance under a bound placeholder is interrupted.
    DeleteHost,
    /// A drain hangs past tGP + buffer.
    StuckDrain,
    /// A launch never completes.
    ProvisioningNeverCompletes,
    /// A launched node never turns Ready.
    NodeNeverReady,
    /// Karpenter writes a claim's status only after its Node is Ready.
    RegistrationLag,
}

impl WorldFault {
    #[cfg(test)]
    pub(crate) const ALL: [WorldFault; 8] = [
        WorldFault::ExpirePending,
        WorldFault::FinalizeInRollback,
        WorldFault::PreemptPlaceholder,
        WorldFault::DeleteHost,
        WorldFault::StuckDrain,
        WorldFault::ProvisioningNeverCompletes,
        WorldFault::NodeNeverReady,
        WorldFault::RegistrationLag,
    ];

    /// The name of its rate in a scenario's `faults:` (and of its count in the figures).
    pub(crate) fn name(self) -> &'static str {
        match self {
            WorldFault::ExpirePending => "expirePending",
            WorldFault::FinalizeInRollback => "finalizeInRollback",
            WorldFault::PreemptPlaceholder => "preemptPlaceholder",
            WorldFault::DeleteHost => "deleteHost",
            WorldFault::StuckDrain => "stuckDrain",
            WorldFault::ProvisioningNeverCompletes => "provisioningNeverCompletes",
            WorldFault::NodeNeverReady => "nodeNeverReady",
            WorldFault::RegistrationLag => "registrationLag",
        }
    }

    /// Its rate.
    pub(crate) fn rate(self, r: &FaultRates) -> f64 {
        match self {
            WorldFault::ExpirePending => r.expire_pending,
            WorldFault::FinalizeInRollback => r.finalize_in_rollback,
            WorldFault::PreemptPlaceholder => r.preempt_placeholder,
            WorldFault::DeleteHost => r.delete_host,
            WorldFault::StuckDrain => r.stuck_drain,
            WorldFault::ProvisioningNeverCompletes => r.provisioning_never_completes,
            WorldFault::NodeNeverReady => r.node_never_ready,
            WorldFault::RegistrationLag => r.registration_lag,
        }
    }
}

/// The world's fault plan of one run: the rates, and the seed every class's stream derives
/// from.
#[derive(Debug, Clone)]
pub struct WorldFaults {
    seed: u64,
    pub rates: FaultRates,
}

impl WorldFaults {
    pub(crate) fn new(seed: u64, rates: FaultRates) -> WorldFaults {
        WorldFaults { seed, rates }
    }

    /// The draw of `class` about `key` (see [`key`]), uniform in `[0, 1)`.
    fn unit(&self, class: WorldFault, key: u64, salt: u64) -> f64 {
        let stream = mix(self.seed ^ mix(class as u64 + 1));
        let x = mix(stream ^ mix(key ^ mix(salt)));
        (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Whether `class` hits the object `key` names, at its rate times `scale`.
    pub(crate) fn hits(&self, class: WorldFault, key: u64, scale: f64) -> bool {
        self.unit(class, key, 0) < class.rate(&self.rates) * scale
    }

    /// A second draw of `class` about `key` (how long, how much), uniform in `0..n`.
    pub(crate) fn below(&self, class: WorldFault, key: u64, n: u64) -> u64 {
        // `unit` < 1, so the product stays below n.
        (self.unit(class, key, 1) * n as f64) as u64
    }
}

/// The key of a draw about the object `name`, in virtual minute `minute` for the faults rolled
/// once a minute (`None` for the faults drawn once per object).
pub(crate) fn key(name: &str, minute: Option<i64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    match minute {
        Some(m) => mix(h ^ mix(m as u64)),
        None => h,
    }
}

/// A 64-bit finalizer (SplitMix64's): every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draw_depends_on_the_seed_class_and_key_alone() {
        let rates = FaultRates { expire_pending: 0.3, delete_host: 0.3, ..FaultRates::default() };
        let plan = WorldFaults::new(7, rates.clone());
        let draws = |plan: &WorldFaults, class| -> Vec<bool> {
            (0..2000).map(|m| plan.hits(class, key("api-00012", Some(m)), 1.0)).collect()
        };
        let a = draws(&plan, WorldFault::ExpirePending);
        // Asked again, in another order, after other classes drew: the same answers.
        let _ = draws(&plan, WorldFault::DeleteHost);
        assert_eq!(draws(&plan, WorldFault::ExpirePending), a);
        // About the rate asked for.
        let n = a.iter().filter(|h| **h).count();
        assert!((500..700).contains(&n), "{n} hits of 2000 at 0.3");
        // Another class, seed or object: another stream.
        assert_ne!(draws(&plan, WorldFault::DeleteHost), a);
        assert_ne!(draws(&WorldFaults::new(8, rates.clone()), WorldFault::ExpirePending), a);
        assert_ne!(key("api-00012", Some(3)), key("api-00013", Some(3)));
        assert_ne!(key("api-00012", Some(3)), key("api-00012", Some(4)));
        assert_ne!(key("api-00012", None), key("api-00012", Some(0)));
        assert!(!WorldFaults::new(7, FaultRates { expire_pending: 0.0, ..rates }).hits(
            WorldFault::ExpirePending,
            key("x", None),
            1.0
        ));
        assert!((0..100).all(|k| plan.below(WorldFault::RegistrationLag, k, 90) < 90));
    }

    #[test]
    fn every_class_is_named_as_its_rate_is_spelled_in_a_scenario() {
        let rates = serde_json::to_value(FaultRates::default()).expect("rates serialize");
        for class in WorldFault::ALL {
            let spelled = rates.get(class.name()).and_then(serde_json::Value::as_f64);
            assert_eq!(spelled, Some(class.rate(&FaultRates::default())), "{}", class.name());
        }
    }
}
