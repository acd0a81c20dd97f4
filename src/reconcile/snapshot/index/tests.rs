//! The claim index's keeping and re-derivation across cache versions.
use super::*;
use crate::karpenter::NodeClaimStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn named(name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() }
}

/// Two pools of one claim each, on nodes `na` and `nb`.
fn two_pools() -> CacheView {
    let mut view = CacheView::default();
    for pool in ["a", "b"] {
        let node = format!("n{pool}");
        let mut meta = named(&format!("c{pool}"));
        meta.labels = Some([(KARPENTER_POOL_LABEL.to_string(), pool.to_string())].into());
        let status = NodeClaimStatus { node_name: Some(node.clone()), ..Default::default() };
        let claim = NodeClaim { metadata: meta, status: Some(status), ..Default::default() };
        view.claims.insert(format!("c{pool}"), Arc::new(claim));
        view.nodes
            .insert(node.clone(), Arc::new(Node { metadata: named(&node), ..Default::default() }));
    }
    view
}

fn derived_at(index: &ClaimIndex, cache: &CacheView, pool: &str) -> *const Derived {
    index.pool_derived(cache, pool).1.as_ptr()
}

#[test]
fn a_new_version_keeps_what_was_derived_for_pools_whose_objects_did_not_change() {
    let mut cache = IndexCache::default();
    let v1 = Arc::new(two_pools());
    let i1 = cache.of(&v1);
    let (a1, b1) = (derived_at(&i1, &v1, "a"), derived_at(&i1, &v1, "b"));
    // Pool a's node changes (a new object under the same name); pool b's objects do not.
    let mut v2 = (*v1).clone();
    v2.nodes.insert("na".into(), Arc::new(Node { metadata: named("na"), ..Default::default() }));
    let v2 = Arc::new(v2);
    let i2 = cache.of(&v2);
    assert!(!Arc::ptr_eq(&i1, &i2), "a new version, a new index");
    assert_ne!(derived_at(&i2, &v2, "a"), a1, "a's node changed: derived again");
    assert_eq!(derived_at(&i2, &v2, "b"), b1, "b's claims and nodes are the same objects");
    let na = &i2.pool_derived(&v2, "a").1[0];
    assert!(Arc::ptr_eq(na.node.as_ref().unwrap(), &v2.nodes["na"]), "on the new node");
    // Pool b's claim changes: derived again, and the index holds one version back only.
    let mut v3 = (*v2).clone();
    v3.claims.insert("cb".into(), Arc::new((*v2.claims["cb"]).clone()));
    let v3 = Arc::new(v3);
    let i3 = cache.of(&v3);
    assert!(i2.previous.lock().unwrap().is_none(), "the chain is one version long");
    assert_ne!(derived_at(&i3, &v3, "b"), b1, "b's claim changed: derived again");
}

/// A pool of `names`, each claim on node `n<name>`.
fn one_pool(names: &[&str]) -> CacheView {
    let mut view = CacheView::default();
    for name in names {
        let node = format!("n{name}");
        let mut meta = named(name);
        meta.labels = Some([(KARPENTER_POOL_LABEL.to_string(), "a".to_string())].into());
        let created = DateTime::<Utc>::from_timestamp(1_795_000_000, 0).expect("an instant");
        meta.creation_timestamp = Some(crate::policy::resolve::to_time(created));
        let status = NodeClaimStatus { node_name: Some(node.clone()), ..Default::default() };
        let claim = NodeClaim { metadata: meta, status: Some(status), ..Default::default() };
        view.claims.insert(name.to_string(), Arc::new(claim));
        view.nodes
            .insert(node.clone(), Arc::new(Node { metadata: named(&node), ..Default::default() }));
    }
    view
}

#[test]
fn a_changed_pool_derives_again_only_its_changed_claims_and_matches_a_full_derivation() {
    let mut cache = IndexCache::default();
    let v1 = Arc::new(one_pool(&["c1", "c2", "c3", "c4"]));
    let i1 = cache.of(&v1);
    let d1 = i1.pool_derived(&v1, "a").1.to_vec();
    // c1 gone, c2 annotated (a new object), c3's node replaced, c4 untouched, c5 new.
    let mut v2 = (*v1).clone();
    v2.claims.remove("c1");
    let mut c2 = (*v2.claims["c2"]).clone();
    c2.metadata.annotations = Some([(Key::State.full().to_string(), "failed".into())].into());
    v2.claims.insert("c2".into(), Arc::new(c2));
    let mut n3 = (*v2.nodes["nc3"]).clone();
    n3.metadata.annotations = Some([("karpenter.sh/do-not-disrupt".into(), "true".into())].into());
    v2.nodes.insert("nc3".into(), Arc::new(n3));
    let v5 = one_pool(&["c5"]);
    v2.claims.insert("c5".into(), Arc::clone(&v5.claims["c5"]));
    v2.nodes.insert("nc5".into(), Arc::clone(&v5.nodes["nc5"]));
    let v2 = Arc::new(v2);
    let i2 = cache.of(&v2);
    let (claims, d2) = i2.pool_derived(&v2, "a");
    let full: Vec<Derived> =
        claims.iter().map(|c| Derived::of(c, &v2, &mut Shapes::default())).collect();
    assert_eq!(format!("{d2:?}"), format!("{full:?}"), "the same as deriving every claim");
    let names: Vec<&str> = d2.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["c2", "c3", "c4", "c5"]);
    assert_ne!(format!("{:?}", d2[0]), format!("{:?}", d1[1]), "c2's state changed");
    assert_ne!(format!("{:?}", d2[1]), format!("{:?}", d1[2]), "c3's node changed");
    assert!(Arc::ptr_eq(d2[2].node.as_ref().unwrap(), d1[3].node.as_ref().unwrap()));
}

#[test]
fn the_nodes_moved_since_a_version_are_the_changed_the_added_and_the_gone() {
    let v1 = one_pool(&["c1", "c2", "c3", "c4"]);
    let before: Vec<Arc<Node>> = v1.nodes.values().cloned().collect();
    let mut v2 = v1.clone();
    assert_eq!(moved_nodes(&before, &v2), Vec::<String>::new(), "the same objects");
    v2.nodes.insert("nc2".into(), Arc::new((*v1.nodes["nc2"]).clone()));
    v2.nodes.remove("nc1");
    v2.nodes.remove("nc4");
    for added in ["nc0", "nc9"] {
        v2.nodes
            .insert(added.into(), Arc::new(Node { metadata: named(added), ..Default::default() }));
    }
    assert_eq!(moved_nodes(&before, &v2), ["nc0", "nc1", "nc2", "nc4", "nc9"]);
}

#[test]
fn a_claim_whose_node_is_gone_is_derived_again_though_the_claim_did_not_change() {
    let mut cache = IndexCache::default();
    let v1 = Arc::new(one_pool(&["c1", "c2"]));
    let i1 = cache.of(&v1);
    assert!(i1.pool_derived(&v1, "a").1[0].node.is_some());
    let mut v2 = (*v1).clone();
    v2.nodes.remove("nc1");
    let v2 = Arc::new(v2);
    let i2 = cache.of(&v2);
    let d2 = i2.pool_derived(&v2, "a").1;
    assert!(d2[0].node.is_none(), "c1's node is gone");
    assert!(Arc::ptr_eq(d2[1].node.as_ref().unwrap(), &v2.nodes["nc2"]), "c2's is kept");
}
