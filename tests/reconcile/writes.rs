//! Writes against a changing cluster: conflicts retried and announced once, a write decided on a
//! stale copy loses and is decided again, and a pass reads fresh only what changed.

use super::*;

#[test]
pub fn conflicting_writes_are_retried_and_announced_exactly_once() {
    let mut fx = Fx::new();
    let mut n = 0u32;
    fx.client.set_faults(move |call: &noderotation::cluster::memory::Call<'_>| {
        n += 1;
        if call.verb.is_write() && call.precondition && n.is_multiple_of(3) {
            noderotation::cluster::memory::Fault::Conflict
        } else {
            noderotation::cluster::memory::Fault::Proceed
        }
    });
    fx.claim("c1", Duration::days(10));
    for _ in 0..3 {
        fx.pass();
    }
    fx.provision_surge("c1", "s1");
    for _ in 0..3 {
        fx.pass();
    }
    fx.finalize("c1");
    for _ in 0..3 {
        fx.pass();
    }
    assert_eq!(fx.announced("emit:success"), 1);
    assert_eq!(fx.events("RotationCompleted"), 1);
    assert_eq!(fx.events("RotationStarted"), 1);
    assert_eq!(fx.ctl.telemetry().completed_count(POOL, Outcome::Success), 1);
}

/// The GETs of the candidate's claim and node one pass makes.
fn claim_and_node_reads(fx: &mut Fx) -> usize {
    gets_of(fx, &[ObjectKind::NodeClaim, ObjectKind::Node], |fx| {
        fx.pass();
    })
}

#[test]
fn a_pending_pass_with_nothing_to_write_reads_nothing_it_read_before() {
    let mut fx = Fx::new();
    started(&mut fx);
    // The pass after the start's writes reads the claim and the node fresh (this process wrote
    // them: their cached copies prove nothing yet); the next one decides on those copies.
    assert!(claim_and_node_reads(&mut fx) > 0, "written since: read fresh");
    assert_eq!(claim_and_node_reads(&mut fx), 0, "nothing changed, nothing to write");
    // A change the watch shows is a new version: read fresh, and acted on.
    fx.set_node_ann("node-c1", Key::DoNotDisrupt, None);
    assert!(claim_and_node_reads(&mut fx) > 0);
    assert_eq!(fx.node_ann("node-c1", Key::DoNotDisrupt).as_deref(), Some("true"));
}

#[test]
fn a_write_decided_on_a_copy_someone_changed_since_loses_and_is_decided_again() {
    let mut fx = Fx::new();
    started(&mut fx);
    let hook = fx.intercept();
    fx.pass();
    fx.pass();
    // The claim changes behind a cache that still shows the version this process read.
    let cached = fx.cache().claims.get("c1").cloned().expect("cached claim");
    fx.set_claim_ann("c1", Key::State, Some("failed"));
    hook.stale_cache(move |view| {
        view.claims.insert("c1".into(), cached.clone());
    });
    // readyTimeout passes: the rollback's claim write is decided on the cached copy, carries its
    // resourceVersion, loses, and is decided again on a fresh read, which shows the claim no
    // longer pending: no rollback is claimed or announced twice.
    fx.advance(Duration::minutes(20));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert_eq!(fx.events("RotationFailed"), 0, "the pass whose write lost announces nothing");
}
