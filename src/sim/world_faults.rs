//! The world's fault classes under `--faults` (what Karpenter, the cloud and the scheduler do
//! wrong), each named once: its rate in [`FaultRates`] and the count of its hits in a run.
use super::scenario::FaultRates;

/// One class of world fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorldFault {
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
    pub const ALL: [WorldFault; 8] = [
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
    pub fn name(self) -> &'static str {
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
    pub fn rate(self, r: &FaultRates) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_is_named_as_its_rate_is_spelled_in_a_scenario() {
        let rates = serde_json::to_value(FaultRates::default()).expect("rates serialize");
        for class in WorldFault::ALL {
            let spelled = rates.get(class.name()).and_then(serde_json::Value::as_f64);
            assert_eq!(spelled, Some(class.rate(&FaultRates::default())), "{}", class.name());
        }
    }
}
