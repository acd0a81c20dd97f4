//! Fault injection: the hook ([`Faults`]) consulted on every controller call, what it may
//! decide ([`Fault`]), and a seed-driven hook with fixed probabilities ([`RandomFaults`]).
use chrono::{DateTime, Utc};

use super::{MemoryCluster, Rng};
use crate::cluster::ObjectRef;

/// The kind of API call the controller made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApiVerb {
    /// `get_pool` / `get_claim` / `get_node`.
    Get,
    /// `pods_on_node` (the target is the Node).
    List,
    Patch,
    Delete,
    /// `create_pod`.
    Create,
    /// `update_policy_status`.
    UpdateStatus,
    /// `record_event` (the target is the event's object).
    RecordEvent,
}

impl ApiVerb {
    pub fn is_write(self) -> bool {
        !matches!(self, ApiVerb::Get | ApiVerb::List)
    }
}

/// One controller call, as shown to the fault hook.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// Which controller handle made the call ([`MemoryCluster::client_id`]).
    pub client: usize,
    pub verb: ApiVerb,
    pub target: &'a ObjectRef,
    /// The write carries a resourceVersion or uid precondition.
    pub precondition: bool,
    pub now: DateTime<Utc>,
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    #[default]
    Proceed,
    /// 409 without applying. On a preconditioned write the target's resourceVersion is also
    /// bumped (a concurrent writer touched it), so the controller's copy really is stale. On a
    /// read it is ignored (a GET does not conflict).
    Conflict,
    /// 5xx / timeout before anything was applied.
    Transient,
    /// The server applied the call, then the response was lost: the controller sees
    /// `Transient` ("may or may not have been applied"). On a read, same as `Transient`.
    ApplyThenTransient,
    /// 403 without applying: an admission webhook or a ResourceQuota refused the call.
    Forbidden,
}

/// Decides, per controller call, whether it proceeds or fails. Called with the cluster's lock
/// held: it must not call back into the cluster.
pub trait Faults: Send {
    fn decide(&mut self, call: &Call<'_>) -> Fault;
}

impl<F> Faults for F
where
    F: FnMut(&Call<'_>) -> Fault + Send,
{
    fn decide(&mut self, call: &Call<'_>) -> Fault {
        self(call)
    }
}

/// Seed-driven faults with fixed probabilities, one draw per call. `conflict` applies only to
/// writes with a precondition (an unconditional write cannot lose a race); `transient` to every
/// call; `apply_then_transient` to writes (on reads it is folded into `transient`).
#[derive(Debug, Clone)]
pub struct RandomFaults {
    pub rng: Rng,
    pub conflict: f64,
    pub transient: f64,
    pub apply_then_transient: f64,
}

impl Faults for RandomFaults {
    fn decide(&mut self, call: &Call<'_>) -> Fault {
        let u = self.rng.next_f64();
        let conflict = if call.verb.is_write() && call.precondition { self.conflict } else { 0.0 };
        if u < conflict {
            Fault::Conflict
        } else if u < conflict + self.transient {
            Fault::Transient
        } else if u < conflict + self.transient + self.apply_then_transient {
            if call.verb.is_write() { Fault::ApplyThenTransient } else { Fault::Transient }
        } else {
            Fault::Proceed
        }
    }
}

/// The message of every injected transient error: the same whether or not the write applied,
/// since the controller cannot tell either.
pub const INJECTED_TRANSIENT: &str = "injected: request timed out";
/// The message of an injected 403.
pub const INJECTED_FORBIDDEN: &str = "injected: exceeded quota";

impl MemoryCluster {
    /// Installs the fault hook consulted on every controller call (all handles).
    pub fn set_faults(&self, faults: impl Faults + 'static) {
        self.lock().faults = Some(Box::new(faults));
    }

    pub fn clear_faults(&self) {
        self.lock().faults = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::memory::fixtures::*;
    use crate::cluster::{ApiError, Cluster};

    #[test]
    fn random_faults_are_seeded() {
        let outcomes = |seed| {
            let (c, _) = cluster();
            c.apply_claim(claim("a")).unwrap();
            c.set_faults(RandomFaults {
                rng: Rng::new(seed),
                conflict: 0.2,
                transient: 0.2,
                apply_then_transient: 0.2,
            });
            (0..100)
                .map(|i| {
                    let rv = rv_of(&c, "a");
                    c.patch(&claim_ref("a"), &annotate("n", &i.to_string()), Some(&rv))
                })
                .collect::<Vec<_>>()
        };
        let a = outcomes(3);
        assert_eq!(a, outcomes(3));
        assert!(a.contains(&Err(ApiError::Conflict)));
        assert!(a.iter().any(Result::is_ok));
        assert!(a.iter().any(|r| matches!(r, Err(ApiError::Transient(_)))));
    }
}
