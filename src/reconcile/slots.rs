//! Rotation slots: up to `spec.surge.maxUnavailable` rotations of one pool in flight, each in a
//! slot of its own (docs/decisions/parallel-rotations.md).
//!
//! The per-rotation keys of `rules/annotations.ron` exist once per slot: slot 0 uses the key as
//! written, slot `i` the key with the suffix `.i`. A pass over slot `i` sees the pool through a
//! lens that swaps slot `i`'s copies with the plain keys, in its snapshot, in its fresh reads
//! and in its patches, so the rules read and write `np[active-rotation]` unchanged. The swap is
//! its own inverse; for slot 0 it is the identity, so a pool with one slot is read and written
//! exactly as before slots existed.
use std::collections::BTreeMap;
use std::ops::Bound;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::Patch;
use crate::engine::{Key, PER_ROTATION_KEYS};

/// The annotation key of a per-rotation `key` in `slot`.
pub fn slot_key(key: Key, slot: usize) -> String {
    with_slot_key(key, slot, str::to_string)
}

/// `f` of the annotation key of a per-rotation `key` in `slot` ([`slot_key`]), spelled on the
/// stack: the lens and the readers of one slot's annotations ask for it many times a pass, and
/// a lookup needs no `String` of its own.
pub(crate) fn with_slot_key<R>(key: Key, slot: usize, f: impl FnOnce(&str) -> R) -> R {
    let full = key.full();
    if slot == 0 {
        return f(full);
    }
    let mut digits = [0u8; 20];
    let (mut n, mut at) = (slot, digits.len());
    while n > 0 {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    let digits = &digits[at..];
    let mut buf = [0u8; 128];
    let len = full.len() + 1 + digits.len();
    let Some(out) = buf.get_mut(..len) else { return f(&format!("{full}.{slot}")) };
    out[..full.len()].copy_from_slice(full.as_bytes());
    out[full.len()] = b'.';
    out[full.len() + 1..].copy_from_slice(digits);
    f(std::str::from_utf8(out).expect("an annotation key and digits are UTF-8"))
}

/// The per-rotation key and slot an annotation key names, if it is one.
fn parse(full: &str) -> Option<(Key, usize)> {
    PER_ROTATION_KEYS.iter().find_map(|k| Some((*k, slot_of(full, *k)?)))
}

/// The slot whose copy of per-rotation `key` the annotation key `full` is, if it is one.
fn slot_of(full: &str, key: Key) -> Option<usize> {
    let rest = full.strip_prefix(key.full())?;
    if rest.is_empty() {
        return Some(0);
    }
    let digits = rest.strip_prefix('.')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match digits.parse::<usize>() {
        // The canonical spelling only (`key.01` is not slot 1's): no leading zero.
        Ok(slot) if slot > 0 && !digits.starts_with('0') => Some(slot),
        _ => None,
    }
}

/// Whether `full` is a per-rotation key of some slot (slot 0's plain key included).
pub fn is_slot_key(full: &str) -> bool {
    parse(full).is_some()
}

/// The key `full` seen through slot `slot`'s lens.
fn swapped(full: &str, slot: usize) -> Option<String> {
    if slot == 0 {
        return None;
    }
    match parse(full)? {
        (k, 0) => Some(slot_key(k, slot)),
        (k, s) if s == slot => Some(k.full().to_string()),
        _ => None,
    }
}

/// Swaps slot `slot`'s per-rotation annotations with the plain keys (its own inverse). Touches
/// only the two keys of each per-rotation key: a pool with many slots holds many annotations.
pub(crate) fn swap_meta(meta: &mut ObjectMeta, slot: usize) {
    if slot == 0 {
        return;
    }
    let Some(ann) = meta.annotations.as_mut() else { return };
    for key in PER_ROTATION_KEYS {
        let plain = key.full();
        with_slot_key(*key, slot, |slotted| {
            // Both keys set (slot 0 and this slot both rotating): the values trade places and
            // no key moves; else the one key set is renamed.
            let taken = ann.get_mut(plain).map(std::mem::take);
            match (taken, ann.get_mut(slotted)) {
                (Some(p), Some(s)) => {
                    let s = std::mem::replace(s, p);
                    *ann.get_mut(plain).expect("the plain key was just taken from") = s;
                }
                (Some(p), None) => {
                    ann.remove(plain);
                    ann.insert(slotted.to_string(), p);
                }
                (None, Some(_)) => {
                    let s = ann.remove(slotted).expect("the slotted key was just read");
                    ann.insert(plain.to_string(), s);
                }
                (None, None) => {}
            }
        });
    }
}

/// A patch written through slot `slot`'s lens, as the API server must receive it.
pub(crate) fn swap_patch(patch: &Patch, slot: usize) -> Patch {
    if slot == 0 {
        return patch.clone();
    }
    let name = |k: &String| swapped(k, slot).unwrap_or_else(|| k.clone());
    Patch {
        set: patch.set.iter().map(|(k, v)| (name(k), v.clone())).collect(),
        remove: patch.remove.iter().map(name).collect(),
        ..patch.clone()
    }
}

/// Every anchored slot of a pool and the claim it names (an empty anchor names none), by slot.
pub fn anchors(meta: &ObjectMeta) -> BTreeMap<usize, &str> {
    let mut out = by_slot(meta, Key::ActiveRotation);
    out.retain(|_, v| !v.is_empty());
    out
}

/// A per-rotation time annotation of `slot` (RFC 3339); `None` when absent or unreadable.
pub(crate) fn time_at(meta: &ObjectMeta, key: Key, slot: usize) -> Option<DateTime<Utc>> {
    let raw = with_slot_key(key, slot, |k| meta.annotations.as_ref()?.get(k))?;
    DateTime::parse_from_rfc3339(raw).ok().map(|t| t.with_timezone(&Utc))
}

/// The values of a per-rotation `key` present in each slot (empty ones included), by slot.
/// Slot 0's key and the suffixed ones (`key.N` sorts between `key.` and `key/`) are read
/// without scanning the other annotations.
pub(crate) fn by_slot(meta: &ObjectMeta, key: Key) -> BTreeMap<usize, &str> {
    let Some(ann) = meta.annotations.as_ref() else { return BTreeMap::new() };
    let base = key.full();
    let (from, to) = suffix_bounds(key);
    ann.get_key_value(base)
        .into_iter()
        .chain(ann.range::<str, _>((Bound::Included(from), Bound::Excluded(to))))
        .filter_map(|(k, v)| Some((slot_of(k, key)?, v.as_str())))
        .collect()
}

/// `key.` and `key/`, between which the suffixed copies of `key` sort, made once per key
/// (passes ask for them many times each).
fn suffix_bounds(key: Key) -> (&'static str, &'static str) {
    // Indexed by the key's discriminant: hashing the key cost more than the range it bounds.
    static BOUNDS: std::sync::LazyLock<Vec<Option<(String, String)>>> =
        std::sync::LazyLock::new(|| {
            let mut bounds = Vec::new();
            for k in PER_ROTATION_KEYS {
                let i = *k as usize;
                if bounds.len() <= i {
                    bounds.resize(i + 1, None);
                }
                bounds[i] = Some((format!("{}.", k.full()), format!("{}/", k.full())));
            }
            bounds
        });
    match BOUNDS.get(key as usize) {
        Some(Some((from, to))) => (from.as_str(), to.as_str()),
        // Not a per-rotation key: it has no suffixed copies (an empty range).
        _ => ("", ""),
    }
}

/// The slots a pass over the pool runs, in order: every anchored slot (a slot beyond `lanes`,
/// left by a policy that allowed more, still runs to completion), then, while fewer than
/// `lanes` are anchored, the free slot below `lanes` whose last completion (`last-rotation-at`)
/// is the oldest, so that each slot's cooldown runs on its own. With one lane: slot 0.
pub(crate) fn to_run(meta: &ObjectMeta, lanes: usize) -> Vec<usize> {
    let anchored = anchors(meta);
    let mut out: Vec<usize> = anchored.keys().copied().collect();
    if anchored.len() < lanes.max(1) {
        let last = |slot: usize| time_at(meta, Key::LastRotationAt, slot);
        let free =
            (0..lanes.max(1)).filter(|s| !anchored.contains_key(s)).min_by_key(|s| (last(*s), *s));
        out.extend(free);
    }
    out
}

/// The slots holding a key the pool's sweep rows remove when no claim is anchored there: an
/// empty anchor, or any per-rotation key but the anchor and `last-rotation-at` (which outlives
/// rotations, gate A). Anchored slots are among them while they rotate; the rows keep those.
pub(crate) fn sweepable(meta: &ObjectMeta) -> std::collections::BTreeSet<usize> {
    let mut out = std::collections::BTreeSet::new();
    for key in PER_ROTATION_KEYS {
        match key {
            Key::LastRotationAt => {}
            Key::ActiveRotation => out.extend(
                by_slot(meta, *key).into_iter().filter(|(_, v)| v.is_empty()).map(|(s, _)| s),
            ),
            _ => out.extend(by_slot(meta, *key).into_keys()),
        }
    }
    out
}

/// Every slot that holds any per-rotation key (the sweep's subjects).
pub(crate) fn used(meta: &ObjectMeta) -> Vec<usize> {
    let mut out: Vec<usize> = meta
        .annotations
        .iter()
        .flatten()
        .filter_map(|(k, _)| parse(k).map(|(_, slot)| slot))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn a_slot_key_is_the_key_and_the_slot_in_decimal() {
        for key in PER_ROTATION_KEYS {
            // Spelled on the stack for every slot (the `format!` fallback is for longer keys).
            assert!(key.full().len() + 1 + usize::MAX.to_string().len() <= 128, "{key:?}");
            assert_eq!(slot_key(*key, 0), key.full());
            for slot in [1, 9, 10, 68, 100, 1000, usize::MAX] {
                assert_eq!(slot_key(*key, slot), format!("{}.{slot}", key.full()));
                assert_eq!(parse(&slot_key(*key, slot)), Some((*key, slot)));
            }
        }
    }

    #[test]
    fn keys_parse_by_slot_and_nothing_else() {
        assert_eq!(parse("noderotation.io/active-rotation"), Some((Key::ActiveRotation, 0)));
        assert_eq!(parse("noderotation.io/active-rotation.2"), Some((Key::ActiveRotation, 2)));
        assert_eq!(
            parse("noderotation.io/active-rotation-state.1"),
            Some((Key::ActiveRotationState, 1))
        );
        for not_a_slot in [
            "noderotation.io/active-rotation.0",
            "noderotation.io/active-rotation.01",
            "noderotation.io/active-rotation.",
            "noderotation.io/active-rotation.x",
            "noderotation.io/freeze.1",
            "noderotation.io/window-opened-at",
        ] {
            assert_eq!(parse(not_a_slot), None, "{not_a_slot}");
        }
    }

    #[test]
    fn the_lens_swaps_one_slot_and_is_its_own_inverse() {
        let original = meta(&[
            ("noderotation.io/active-rotation", "a"),
            ("noderotation.io/active-rotation.1", "b"),
            ("noderotation.io/draining-at.1", "t"),
            ("noderotation.io/active-rotation.2", "c"),
            ("noderotation.io/surge-wait", "w"),
            ("noderotation.io/freeze", "f"),
        ]);
        let mut m = original.clone();
        swap_meta(&mut m, 1);
        let ann = m.annotations.clone().unwrap_or_default();
        // Set in both (values trade places), in the slot only, in slot 0 only (keys renamed).
        assert_eq!(ann["noderotation.io/active-rotation"], "b");
        assert_eq!(ann["noderotation.io/active-rotation.1"], "a");
        assert_eq!(ann["noderotation.io/draining-at"], "t");
        assert!(!ann.contains_key("noderotation.io/draining-at.1"));
        assert_eq!(ann["noderotation.io/surge-wait.1"], "w");
        assert!(!ann.contains_key("noderotation.io/surge-wait"));
        assert_eq!(ann["noderotation.io/active-rotation.2"], "c");
        assert_eq!(ann["noderotation.io/freeze"], "f", "pool keys are shared by every slot");
        swap_meta(&mut m, 1);
        assert_eq!(m, original);
        let mut zero = original.clone();
        swap_meta(&mut zero, 0);
        assert_eq!(zero, original);
    }

    #[test]
    fn a_patch_through_the_lens_lands_on_the_slot() {
        let mut patch = Patch::default();
        patch.set.insert("noderotation.io/active-rotation".into(), "x".into());
        patch.set.insert("noderotation.io/last-failure-at".into(), "t".into());
        patch.remove.insert("noderotation.io/surge-host".into());
        let out = swap_patch(&patch, 3);
        assert_eq!(out.set["noderotation.io/active-rotation.3"], "x");
        assert_eq!(out.set["noderotation.io/last-failure-at"], "t");
        assert!(out.remove.contains("noderotation.io/surge-host.3"));
        assert_eq!(swap_patch(&patch, 0), patch);
    }

    #[test]
    fn runs_every_anchored_slot_then_the_longest_idle_free_one() {
        let m = meta(&[
            ("noderotation.io/active-rotation.1", "b"),
            ("noderotation.io/last-rotation-at", "2026-01-02T00:00:00Z"),
            ("noderotation.io/last-rotation-at.2", "2026-01-01T00:00:00Z"),
        ]);
        assert_eq!(to_run(&m, 3), vec![1, 2]);
        assert_eq!(to_run(&m, 4), vec![1, 3], "a slot that never completed is the idlest");
        assert_eq!(to_run(&m, 1), vec![1], "a slot beyond the lanes runs to completion");
        assert_eq!(to_run(&meta(&[]), 1), vec![0]);
        assert_eq!(anchors(&m).len(), 1);
        assert_eq!(used(&m), vec![0, 1, 2]);
    }
}
