//! One installation per cluster. Two installs of the operator (another namespace, a
//! kustomize-to-Helm migration) each elect a leader on their own Lease, and two leaders each
//! delete the other's placeholders as unowned and rotate the same pools. So every install marks
//! its leader Lease with [`LEADER_LEASE_LABEL`], and a replica that wins its own Lease first
//! lists the marked Leases of the whole cluster: while another install's is held, it does not
//! lead. It gives its own Lease up (so that the other install, making the same check, does not
//! count it) and tries again later.
//!
//! Why no two installs lead at once: each acquires its Lease (a write) before it lists the others
//! (a consistent read). Of two installs that acquire at about the same time, the one that lists
//! second sees the first's Lease held and steps down (both may, and both try again after a random
//! delay). What it relies on is what leader election itself relies on: clocks that agree to well
//! within a Lease duration.
use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// On the leader Lease of every install (its value is unused).
pub const LEADER_LEASE_LABEL: &str = "noderotation.io/leader-lease";

/// Who holds the leader Lease at `now`, if anyone: a holder whose last renewal plus the lease
/// duration is still ahead. A released Lease (the leader clears the holder on shutdown)
/// or an expired one is free.
pub fn lease_holder(lease: &Lease, now: DateTime<Utc>) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?;
    let renewed = DateTime::from_timestamp(
        renewed.0.as_second(),
        renewed.0.subsec_nanosecond().max(0) as u32,
    )?;
    let duration = chrono::Duration::seconds(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    (renewed + duration > now).then_some(holder)
}

/// Another install that leads: its Lease and the replica holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OtherInstall {
    pub namespace: String,
    pub lease: String,
    pub holder: String,
}

impl std::fmt::Display for OtherInstall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lease {}/{} held by {}", self.namespace, self.lease, self.holder)
    }
}

/// The first of `leases` (marked leader Leases) that is not this install's own
/// (`namespace`/`name`) and is held at `now`.
pub(crate) fn other_leader(
    leases: &[Lease],
    namespace: &str,
    name: &str,
    now: DateTime<Utc>,
) -> Option<OtherInstall> {
    leases.iter().find_map(|lease| {
        let ns = lease.namespace().unwrap_or_default();
        if ns == namespace && lease.name_any() == name {
            return None;
        }
        let holder = lease_holder(lease, now)?;
        Some(OtherInstall { namespace: ns, lease: lease.name_any(), holder })
    })
}

/// Marks this install's leader Lease, creating it when it does not exist yet (before the
/// leader election starts, which then finds it).
pub(crate) async fn mark_own_lease(
    client: &Client,
    namespace: &str,
    name: &str,
) -> kube::Result<()> {
    let api = Api::<Lease>::namespaced(client.clone(), namespace);
    match api.get_opt(name).await? {
        Some(lease) if lease.labels().contains_key(LEADER_LEASE_LABEL) => Ok(()),
        Some(_) => {
            let patch = json!({"metadata": {"labels": {LEADER_LEASE_LABEL: "true"}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
        }
        None => {
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {LEADER_LEASE_LABEL: "true"}},
                "spec": {}
            }))
            .map_err(kube::Error::SerdeError)?;
            match api.create(&PostParams::default(), &lease).await {
                // Another replica of this install created it meanwhile, marked as well.
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                other => other.map(|_| ()),
            }
        }
    }
}

/// Another install whose leader Lease is held now, from a list of the marked Leases of every
/// namespace.
pub(crate) async fn find_other_leader(
    client: &Client,
    namespace: &str,
    name: &str,
    now: DateTime<Utc>,
) -> kube::Result<Option<OtherInstall>> {
    let api = Api::<Lease>::all(client.clone());
    let leases = api.list(&ListParams::default().labels(LEADER_LEASE_LABEL)).await?;
    Ok(other_leader(&leases.items, namespace, name, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(ns: &str, name: &str, holder: Option<&str>, renewed: &str) -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}
        }))
        .expect("a Lease")
    }

    #[test]
    fn only_another_installs_held_lease_counts() {
        let now = "2026-11-28T03:00:00Z".parse().expect("time");
        let own = lease("noderotation-system", "noderotation", Some("a-0"), "2026-11-28T02:59:59Z");
        let expired = lease("old", "noderotation", Some("old-0"), "2026-11-28T02:59:40Z");
        let released = lease("helm", "noderotation", None, "2026-11-28T02:59:59Z");
        let held = lease("helm", "rotator", Some("rotator-7f-x"), "2026-11-28T02:59:50Z");
        let ns = "noderotation-system";
        assert_eq!(
            other_leader(
                &[own.clone(), expired.clone(), released.clone()],
                ns,
                "noderotation",
                now
            ),
            None
        );
        let other = other_leader(&[own, expired, released, held], ns, "noderotation", now)
            .expect("the held Lease of another install");
        assert_eq!(other.to_string(), "Lease helm/rotator held by rotator-7f-x");
        // A Lease of the same name in another namespace is another install.
        let same_name = lease("kz", "noderotation", Some("kz-0"), "2026-11-28T02:59:58Z");
        assert_eq!(
            other_leader(&[same_name], ns, "noderotation", now).map(|o| o.namespace),
            Some("kz".to_string())
        );
    }
}
