//! Resource requests as the world counts them ([`Resources`]: thousandths of a unit): read from
//! and written as quantities, summed over a pod's containers, added, subtracted, compared.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::karpenter::quantity_millis;
use crate::sim::scenario::Resources;

pub(crate) fn parse_resources(map: Option<&BTreeMap<String, Quantity>>) -> Resources {
    map.into_iter().flatten().filter_map(|(k, v)| Some((k.clone(), quantity_millis(v)?))).collect()
}

pub(crate) fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    r.iter()
        .map(|(k, v)| {
            let q = if v % 1000 == 0 { format!("{}", v / 1000) } else { format!("{v}m") };
            (k.clone(), Quantity(q))
        })
        .collect()
}

/// A pod's requests (sum over containers; enough for the pods this world creates and for the
/// placeholder).
pub(crate) fn pod_requests(pod: &Pod) -> Resources {
    let mut out = Resources::new();
    for c in pod.spec.iter().flat_map(|s| &s.containers) {
        for (k, v) in parse_resources(c.resources.as_ref().and_then(|r| r.requests.as_ref())) {
            *out.entry(k).or_insert(0) += v;
        }
    }
    out
}

pub(crate) fn fits(free: &Resources, want: &Resources) -> bool {
    want.iter().all(|(k, v)| free.get(k).copied().unwrap_or(0) >= *v)
}

pub(crate) fn add(acc: &mut Resources, r: &Resources) {
    for (k, v) in r {
        // The key is cloned only when it is new (not on every pod).
        match acc.get_mut(k) {
            Some(x) => *x += v,
            None => {
                acc.insert(k.clone(), *v);
            }
        }
    }
}

pub(crate) fn sub(acc: &mut Resources, r: &Resources) {
    for (k, v) in r {
        match acc.get_mut(k) {
            Some(x) => *x -= v,
            None => {
                acc.insert(k.clone(), -*v);
            }
        }
    }
}
