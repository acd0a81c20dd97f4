//! The placeholder's name (deterministic, one per rotation), the `surge-for` pairing that
//! ties a placeholder pod to the claim it surges for (§3.3), and whether a pod is the one
//! created for the claim's current attempt.
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::cluster::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::engine::Key;
use crate::karpenter::NodeClaim;

/// Every placeholder's name starts with this.
pub const PLACEHOLDER_PREFIX: &str = "noderotation-surge-";

const MAX_NAME: usize = 63;
const HASH_HEX: usize = 12;

/// The placeholder's name for a rotation of `claim_name`: deterministic, a DNS-1123 label of at
/// most 63 characters. `noderotation-surge-<claim>` when that is already a valid label;
/// otherwise (too long, or characters a label cannot hold) a sanitized, truncated claim name
/// followed by 12 hex digits of a stable FNV-1a hash of the original name, so distinct claims
/// keep distinct names.
pub fn placeholder_name(claim_name: &str) -> String {
    let sanitized: String = claim_name
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }
        })
        .collect();
    let lossless = sanitized == claim_name
        && sanitized.ends_with(|c: char| c.is_ascii_alphanumeric())
        && !sanitized.is_empty();
    let plain = format!("{PLACEHOLDER_PREFIX}{sanitized}");
    if lossless && plain.len() <= MAX_NAME {
        return plain;
    }
    let hash = fnv1a64(claim_name.as_bytes()) & ((1u64 << (4 * HASH_HEX)) - 1);
    let room = MAX_NAME - PLACEHOLDER_PREFIX.len() - 1 - HASH_HEX;
    let body: String = sanitized.chars().take(room).collect();
    let body = body.trim_end_matches('-');
    if body.is_empty() {
        format!("{PLACEHOLDER_PREFIX}{hash:0w$x}", w = HASH_HEX)
    } else {
        format!("{PLACEHOLDER_PREFIX}{body}-{hash:0w$x}", w = HASH_HEX)
    }
}

/// FNV-1a, 64 bit: stable across Rust releases (unlike `DefaultHasher`), which a name that must
/// survive controller upgrades needs.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The claim a placeholder reserves capacity for (its `surge-for` annotation, §5.3), if the pod
/// is one of ours.
pub fn surge_for(pod: &Pod) -> Option<&str> {
    if pod.labels().get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY_VALUE) {
        return None;
    }
    pod.annotations().get(Key::SurgeFor.full()).map(String::as_str)
}

/// The pod holding a rotation's placeholder name is the one the controller created for the
/// claim's current attempt: its uid is the one recorded on the claim (`placeholder-uid`), or it
/// is ours for that claim (`surge-for`) and carries the attempt's `started-at`, copied from the
/// claim into the pod it creates. The stamp is the proof that does not depend on the create's
/// answer: a create applied whose response was lost, or a crash before the uid was recorded,
/// leaves a pod that is still this attempt's (docs/decisions/reconciler.md). A pod of an earlier
/// attempt carries an older stamp; a pod merely named like it carries none.
pub fn created_for_attempt(pod: &Pod, claim: &NodeClaim) -> bool {
    let recorded = claim.annotations().get(Key::PlaceholderUid.full()).map(String::as_str);
    if recorded.is_some() && pod.metadata.uid.as_deref() == recorded {
        return true;
    }
    let stamp = claim.annotations().get(Key::StartedAt.full()).map(String::as_str);
    stamp.is_some_and(|s| !s.is_empty())
        && surge_for(pod) == claim.metadata.name.as_deref()
        && pod.annotations().get(Key::StartedAt.full()).map(String::as_str) == stamp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_is_plain_when_it_fits() {
        assert_eq!(placeholder_name("general-x7k2p"), "noderotation-surge-general-x7k2p");
    }

    #[test]
    fn long_or_unlabelable_names_are_truncated_and_hashed() {
        let long = "a-very-long-node-pool-name-that-goes-on-and-on-and-on-x7k2p";
        let name = placeholder_name(long);
        assert!(name.len() <= 63, "{name} ({})", name.len());
        assert!(name.starts_with("noderotation-surge-a-very-long"));
        assert_eq!(name, placeholder_name(long), "deterministic");
        assert_ne!(name, placeholder_name(&format!("{long}2")), "distinct claims stay distinct");
        // Dots (valid in a claim name, not in a label) force the hash so `a.b` != `a-b`.
        let dotted = placeholder_name("pool.v2-abcde");
        assert!(dotted.starts_with("noderotation-surge-pool-v2-abcde-"));
        assert_ne!(dotted, placeholder_name("pool-v2-abcde"));
        for n in [name, dotted, placeholder_name(&"x".repeat(253)), placeholder_name("A.")] {
            assert!(n.len() <= 63);
            assert!(
                n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
            assert!(n.ends_with(|c: char| c.is_ascii_alphanumeric()), "{n}");
        }
        // Exactly 63 stays plain; 64 hashes.
        let fits = "x".repeat(63 - PLACEHOLDER_PREFIX.len());
        assert_eq!(placeholder_name(&fits), format!("{PLACEHOLDER_PREFIX}{fits}"));
        assert_ne!(placeholder_name(&format!("{fits}y")), format!("{PLACEHOLDER_PREFIX}{fits}y"));
    }
}
