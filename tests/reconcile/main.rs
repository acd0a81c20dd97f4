//! The reconciler on the in-memory cluster: every spec branch and the named edge cases of the
//! reconciler's design, each its own test. The world (Karpenter, kubelet, operator) is played by hand.
//!
//! One module per feature; the fixtures several of them share are below. A test that
//! `SCENARIOS` (coverage.rs) lists for row coverage and the mutation run is `pub`.

#[path = "../support/mod.rs"]
mod support;

mod completion;
mod coverage;
mod crash;
mod feasibility;
mod hand_edits;
mod pending;
mod policy;
mod reap;
mod rollback;
mod slots;
mod start;
mod surge;
mod sweep;
mod writes;

use chrono::Duration;
use noderotation::clock::Clock;
use noderotation::cluster::ObjectKind;
use noderotation::cluster::ObjectKind::RotationPolicy as PolicyKind;
use noderotation::engine::Key;
use noderotation::telemetry::Outcome;
use support::*;

fn started(fx: &mut Fx) {
    fx.claim("c1", Duration::days(10));
    fx.pass();
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
}

/// The scheduler binds the claim's placeholder to `node` (the pod is not Running yet).
fn bind_placeholder(fx: &Fx, claim: &str, node: &str) {
    fx.world
        .update_pod(NS, &noderotation::placeholder::placeholder_name(claim), |p| {
            p.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
        })
        .expect("placeholder");
}

fn draining(fx: &mut Fx) {
    started(fx);
    fx.provision_surge("c1", "s1");
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("draining"));
}

fn lagging(fx: &mut Fx) {
    fx.client.flush_cache();
    fx.client.set_cache_lag(noderotation::cluster::memory::CacheLag::Fixed(Duration::hours(1)));
}

fn obj(kind: noderotation::cluster::ObjectKind, name: &str) -> noderotation::cluster::ObjectRef {
    noderotation::cluster::ObjectRef::cluster(kind, name)
}

/// pool-a's rotation of c1 is intact: anchored, pending, frozen, cordoned, placeholder kept.
fn rotation_of_c1_untouched(fx: &Fx) {
    assert_eq!(fx.pool_ann(Key::ActiveRotation).as_deref(), Some("c1"));
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.placeholder("c1").is_some(), "the other pool's placeholder is not deleted");
    assert_eq!(fx.node_ann("node-c1", Key::SurgeFor).as_deref(), Some("c1"), "still frozen");
    assert!(fx.cordoned("node-c1"), "still cordoned");
    assert!(!fx.deleting("c1"));
}

/// Karpenter launched `name` for the placeholder of `for_claim` now (its `Nominated` Event);
/// its node `node-<name>` registered and never turns Ready.
fn never_ready_surge(fx: &Fx, name: &str, for_claim: &str) {
    fx.never_ready_surge(name);
    fx.nominate(for_claim, name);
}

/// The surge host `node-s1` and its claim `s1` as they are now: what a lagging view keeps
/// showing once they are gone (`show_host`).
type Host = (
    std::sync::Arc<k8s_openapi::api::core::v1::Node>,
    std::sync::Arc<noderotation::karpenter::NodeClaim>,
);

fn surge_host_now(fx: &Fx) -> Host {
    (fx.world.node("node-s1").expect("surge node"), fx.world.claim("s1").expect("surge claim"))
}

/// From now on the controller's view still shows the host `(node, claim)`.
fn show_host(hook: &support::Intercept, (node, claim): Host) {
    hook.stale_cache(move |view| {
        view.nodes.insert("node-s1".into(), std::sync::Arc::clone(&node));
        view.claims.insert("s1".into(), std::sync::Arc::clone(&claim));
    });
}

/// The GETs of objects of `kinds` that `run` makes.
fn gets_of(fx: &mut Fx, kinds: &'static [ObjectKind], run: impl FnOnce(&mut Fx)) -> usize {
    use noderotation::cluster::memory::{ApiVerb, Call, Fault};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let reads = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&reads);
    fx.world.set_faults(move |c: &Call<'_>| {
        if c.verb == ApiVerb::Get && kinds.contains(&c.target.kind) {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        Fault::Proceed
    });
    run(fx);
    fx.world.clear_faults();
    reads.load(Ordering::SeqCst)
}
