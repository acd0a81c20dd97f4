//! Refusals the API server repeats however often the controller retries: an admission webhook,
//! a ResourceQuota or a LimitRange that rejects one rotation's placeholder (403 on every create
//! of it), and one node's pod list that times out on every call. Unlike the fault hook's random
//! errors, these are the cluster's own behaviour: a scenario states them, and they hold with or
//! without `--faults` (docs/decisions/parallel-rotations.md: one slot's failure is not the
//! pool's).
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

use super::MemoryCluster;
use crate::cluster::ApiError;
use crate::engine::Key;
use crate::karpenter::NODEPOOL_LABEL;

/// Whose placeholder an admission rule rejects.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rejected {
    /// The placeholder of this claim's rotation (its `surge-for`).
    Claim(String),
    /// The placeholder of the `nth` rotation (1 = the first) of the pool whose placeholder is
    /// created from the moment the rule is installed: the pool's rotations are counted by the
    /// first create of each claim's placeholder.
    Nth { pool: String, nth: usize },
}

/// The API server's standing refusals.
#[derive(Debug, Default)]
pub(super) struct Admission {
    /// Each rule and the message of its 403.
    rules: BTreeMap<Rejected, String>,
    /// Per pool, the claims whose placeholder a create was attempted for since a `Nth` rule of
    /// the pool was installed, in order.
    seen: BTreeMap<String, Vec<String>>,
    /// Nodes whose pod list times out.
    slow_lists: BTreeSet<String>,
}

/// What a placeholder pod names: the claim it is for and the pool it must land in.
fn placeholder_of(pod: &Pod) -> Option<(&str, &str)> {
    let claim = pod.metadata.annotations.as_ref()?.get(Key::SurgeFor.full())?;
    let pool = pod.spec.as_ref()?.node_selector.as_ref()?.get(NODEPOOL_LABEL)?;
    Some((claim.as_str(), pool.as_str()))
}

impl Admission {
    /// Admits or rejects a pod create: `Forbidden` when a rule names the placeholder.
    pub(super) fn admit(&mut self, pod: &Pod) -> Result<(), ApiError> {
        let Some((claim, pool)) = placeholder_of(pod) else { return Ok(()) };
        if self.rules.keys().any(|r| matches!(r, Rejected::Nth { pool: p, .. } if p == pool)) {
            let seen = self.seen.entry(pool.to_string()).or_default();
            if !seen.iter().any(|c| c == claim) {
                seen.push(claim.to_string());
            }
        }
        let position = self.seen.get(pool).and_then(|s| s.iter().position(|c| c == claim));
        let hit = self.rules.iter().find(|(rule, _)| match rule {
            Rejected::Claim(c) => c == claim,
            Rejected::Nth { pool: p, nth } => p == pool && position == Some(nth - 1),
        });
        match hit {
            Some((_, message)) => {
                let name = pod.metadata.name.as_deref().unwrap_or("");
                Err(ApiError::Forbidden(format!("pods {name:?} is forbidden: {message}")))
            }
            None => Ok(()),
        }
    }

    /// Answers a pod list of `node`, or times out.
    pub(super) fn list(&self, node: &str) -> Result<(), ApiError> {
        if self.slow_lists.contains(node) {
            return Err(ApiError::Transient(format!(
                "the server was unable to return a response in the time allotted (list pods on \
                 node {node})"
            )));
        }
        Ok(())
    }
}

impl MemoryCluster {
    /// From now on, every create of the placeholder `rule` names is rejected with 403 and
    /// `message` (an admission webhook, a ResourceQuota or a LimitRange saying no).
    pub fn reject_placeholder(&self, rule: Rejected, message: impl Into<String>) {
        let mut st = self.lock();
        if let Rejected::Nth { pool, .. } = &rule {
            st.admission.seen.entry(pool.clone()).or_default().clear();
        }
        st.admission.rules.insert(rule, message.into());
    }

    /// Lifts a [`MemoryCluster::reject_placeholder`] rule.
    pub(crate) fn admit_placeholder(&self, rule: &Rejected) {
        self.lock().admission.rules.remove(rule);
    }

    /// From now on, every list of the pods on `node` times out (`false`: answers again).
    pub fn time_out_pod_list(&self, node: &str, times_out: bool) {
        let mut st = self.lock();
        if times_out {
            st.admission.slow_lists.insert(node.to_string());
        } else {
            st.admission.slow_lists.remove(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::Cluster;
    use crate::cluster::memory::fixtures::*;

    fn placeholder(claim: &str, pool: &str) -> Pod {
        let mut p = pod(NS, &format!("surge-{claim}"), None, true);
        p.metadata.annotations =
            Some(BTreeMap::from([(Key::SurgeFor.full().to_string(), claim.to_string())]));
        p.spec.get_or_insert_default().node_selector =
            Some(BTreeMap::from([(NODEPOOL_LABEL.to_string(), pool.to_string())]));
        p
    }

    #[test]
    fn a_rejected_placeholder_is_refused_on_every_create_and_nothing_else_is() {
        let (c, _) = cluster();
        c.reject_placeholder(Rejected::Claim("a".into()), "exceeded quota: surge");
        for _ in 0..3 {
            let err = c.create_pod(&placeholder("a", "api")).expect_err("rejected");
            assert!(
                matches!(&err, ApiError::Forbidden(m) if m.contains("exceeded quota")),
                "{err}"
            );
        }
        c.create_pod(&placeholder("b", "api")).expect("another rotation's placeholder");
        c.create_pod(&pod("apps", "web", None, false)).expect("not a placeholder");
        c.admit_placeholder(&Rejected::Claim("a".into()));
        c.create_pod(&placeholder("a", "api")).expect("lifted");
        assert_eq!(c.call_counts().failed, 3);
    }

    #[test]
    fn the_nth_rotation_is_counted_by_its_first_placeholder_in_its_pool() {
        let (c, _) = cluster();
        c.reject_placeholder(Rejected::Nth { pool: "api".into(), nth: 2 }, "denied");
        c.create_pod(&placeholder("a", "api")).expect("the first rotation");
        c.create_pod(&placeholder("x", "web")).expect("another pool's");
        assert!(c.create_pod(&placeholder("b", "api")).is_err(), "the second");
        assert!(c.create_pod(&placeholder("b", "api")).is_err(), "again, however often");
        c.create_pod(&placeholder("c", "api")).expect("the third");
    }

    #[test]
    fn a_slow_node_list_times_out_until_it_answers_again() {
        let (c, _) = cluster();
        c.time_out_pod_list("n1", true);
        assert!(matches!(c.pods_on_node("n1"), Err(ApiError::Transient(_))));
        assert_eq!(c.pods_on_node("n2"), Ok(vec![]));
        c.time_out_pod_list("n1", false);
        assert_eq!(c.pods_on_node("n1"), Ok(vec![]));
    }
}
