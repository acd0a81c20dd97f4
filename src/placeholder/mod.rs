//! The surge placeholder (§3.3, §3.7, §3.8): sizing, the pod itself, the limits
//! headroom check, and the predicates the reconciler asks about a placeholder once it exists
//! (`surge_ready`, the surge path, the reap of the induced surge claim).
//!
//! One concern a file: `class` (what makes its PriorityClass safe), `name` (the placeholder's
//! name and its `surge-for` pairing), `census`
//! (which pods on the candidate node count), `requests` (a pod's effective requests, the sums
//! the sizing needs, quantities in thousandths), `clamp` (the allocatable clamp), `affinity`
//! (§3.7 node affinity and the pool's tolerations), `pod` (the pod itself), `headroom` (§3.3
//! limits headroom), `surge` (`surge_ready`, the surge path, the scheduler's reason), `reap`
//! (the readyTimeout reap: the not-Ready fallback for the surge claim, the reap guard). Every
//! public item is re-exported here: callers name `placeholder::x`, not the file.
//!
//! The induced surge claim itself (the claim of the node the placeholder is bound to) is not
//! resolved here: the reconciler's snapshot resolves it from its claim indexes, once, for the
//! `induced_claim` predicate, the surge path and the reap alike.
//!
//! Pure: no I/O and no clock. Every function takes the objects it judges, and time only as a
//! parameter.
//!
//! Quantities are handled in thousandths ([`Resources`], from
//! [`crate::karpenter::quantity_millis`]), so `500m` CPU and `16Gi` memory add and compare
//! exactly. A quantity that does not parse is skipped (the API server validated it, so this does
//! not happen with real objects).
//!
//! Decisions recorded here (the spec is silent on them):
//!
//! - **Limits equal requests** on the pause container. Extended resources (`nvidia.com/gpu`)
//!   and hugepages are rejected by the API server without a limit equal to the request, and a
//!   namespace `LimitRange` default limit could otherwise land below the request and fail the
//!   create. The pause process uses next to nothing, so the cap never bites. The pod is
//!   therefore `Guaranteed`; on a node with the static CPU manager an integer CPU request gets
//!   exclusive cores, which is the reservation we want anyway.
//! - **No `kubernetes.io/hostname` term** in the node affinity, neither required nor preferred:
//!   Karpenter validates *preferred* node-affinity terms as strictly as required ones and drops a
//!   pod that names a restricted label (`kubernetes.io/hostname` is one) from provisioning
//!   altogether (kubernetes-sigs/karpenter `provisioner.go` `GetPendingPods` → `Validate` →
//!   `validateAffinity`, which walks the preferred terms too → `ValidateRequirement` →
//!   `IsRestrictedLabel`). Such a placeholder could only ever be absorbed, never provisioned.
//!   The candidate is avoided by its cordon (kube-scheduler filters unschedulable nodes). For
//!   the same reason a `matchNodeRequirements` key that Karpenter would reject is skipped and
//!   reported ([`affinity::KeyResolution::RestrictedByKarpenter`]).
//! - A `matchNodeRequirements` value that the pool template no longer admits is still required
//!   (never loosened into "any zone"): the placeholder then stays unschedulable, which surfaces
//!   as `SurgeUnschedulable` and rolls back at readyTimeout, never worse than forced expiry.
//!   Reported as [`affinity::KeyResolution::Unsatisfiable`].

mod affinity;
mod census;
mod clamp;
mod class;
mod headroom;
mod name;
mod pod;
mod reap;
mod requests;
mod surge;

#[cfg(test)]
mod fixtures;

pub(crate) use census::required_node_terms;
pub(crate) use class::{class_problems, class_safe};
pub(crate) use headroom::{footprint, footprints, surge_headroom, worth_of};
pub use name::{PLACEHOLDER_PREFIX, created_for_attempt, placeholder_name, surge_for};
pub use pod::{
    PAUSE_CONTAINER, PLACEHOLDER_UID, Placeholder, PlaceholderInput, PlaceholderRefused,
    build_placeholder,
};
pub(crate) use reap::{hosts_nothing_but, reap_allowed};
pub(crate) use requests::Resources;
pub(crate) use surge::{host_usable, running, surge_path, surge_ready, unschedulable_reason};
