//! Writes against a changing cluster: conflicts retried and announced once, a write decided on a
//! stale copy loses and is decided again, and a pass reads fresh only what changed or what this
//! process does not know (a write whose answer was lost, a new leadership).

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
fn a_pending_pass_reads_nothing_this_process_wrote_or_read() {
    let mut fx = Fx::new();
    started(&mut fx);
    // The start's writes won on the copies they were decided on: this process knows the claim
    // and the node as its writes left them, and the passes after them read neither.
    assert_eq!(claim_and_node_reads(&mut fx), 0, "its own writes stand in for reads");
    assert_eq!(claim_and_node_reads(&mut fx), 0, "nothing changed, nothing to write");
    // A change the watch shows is a version this process cannot place: read fresh, and acted on.
    fx.set_node_ann("node-c1", Key::DoNotDisrupt, None);
    assert!(claim_and_node_reads(&mut fx) > 0);
    assert_eq!(fx.node_ann("node-c1", Key::DoNotDisrupt).as_deref(), Some("true"));
}

/// The cache lagging this process's own writes: the copies the writes left stand in for fresh
/// reads, so the passes on the lagging view neither read nor write again.
#[test]
fn own_writes_stand_in_for_reads_while_the_cache_lags_them() {
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    lagging(&mut fx);
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert!(fx.cache().claims["c1"].metadata.annotations.is_none(), "the cache lags the start");
    let writes = fx.world.call_counts().applied();
    let reads = gets_of(&mut fx, &[ObjectKind::NodeClaim, ObjectKind::Node], |fx| {
        fx.stale_pass();
        fx.stale_pass();
    });
    assert_eq!(reads, 0, "decided on its own copies");
    assert_eq!(fx.world.call_counts().applied(), writes, "nothing to write");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
    assert_eq!(fx.node_ann("node-c1", Key::SurgeFor).as_deref(), Some("c1"));
}

/// A write whose answer is lost may have landed: the next decision on that object reads it
/// fresh instead of deciding on a cache that may lag it (and losing a write to a 409); once read,
/// its copy stands in again.
#[test]
fn a_write_whose_answer_is_lost_is_read_fresh_before_the_next_decision() {
    use noderotation::cluster::memory::{ApiVerb, Call, Fault};
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut fx = Fx::new();
    fx.claim("c1", Duration::days(10));
    let before = fx.cache().nodes.get("node-c1").cloned().expect("cached node");
    let hook = fx.intercept();
    let lost = AtomicBool::new(false);
    fx.world.set_faults(move |c: &Call<'_>| {
        let freeze = c.verb == ApiVerb::Patch && c.target.kind == ObjectKind::Node;
        if freeze && !lost.swap(true, Ordering::SeqCst) {
            Fault::ApplyThenTransient
        } else {
            Fault::Proceed
        }
    });
    fx.client.flush_cache();
    fx.ctl.reconcile_pool(POOL).expect_err("the freeze's answer is lost");
    fx.world.clear_faults();
    assert_eq!(fx.node_ann("node-c1", Key::SurgeFor).as_deref(), Some("c1"), "it landed");
    // The watch has not delivered the freeze.
    hook.stale_cache(move |view| {
        view.nodes.insert("node-c1".into(), before.clone());
    });
    let failed = fx.world.call_counts().failed;
    let node_reads = |fx: &mut Fx| {
        gets_of(fx, &[ObjectKind::Node], |fx| {
            fx.pass();
        })
    };
    assert!(node_reads(&mut fx) > 0, "its version unknown: read fresh");
    assert_eq!(fx.world.call_counts().failed, failed, "no write decided on the lagging copy");
    assert_eq!(node_reads(&mut fx), 0, "read since: its copy stands in");
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"));
}

/// A new leadership: another process may have written anything meanwhile, so nothing this one
/// read or wrote before stands in for a fresh read.
#[test]
fn a_new_leadership_reads_fresh_what_the_last_one_knew() {
    let mut fx = Fx::new();
    started(&mut fx);
    assert_eq!(claim_and_node_reads(&mut fx), 0);
    fx.client.flush_cache();
    fx.ctl.startup_sweep();
    assert!(claim_and_node_reads(&mut fx) > 0, "read fresh after the leadership");
    assert_eq!(claim_and_node_reads(&mut fx), 0);
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

/// The escalation writes each object once (docs/decisions/footprint.md): the pool's host record
/// and draining mirror in one patch, the host's freeze, the claim's `state: draining` with its
/// `surge-claim` in one patch, then the placeholder's and the old claim's deletes.
#[test]
pub fn a_surge_escalation_writes_each_object_once() {
    use noderotation::cluster::memory::{ApiVerb, Call, Fault};
    use std::sync::{Arc, Mutex};
    let mut fx = Fx::new();
    started(&mut fx);
    fx.provision_surge("c1", "s1");
    let log: Arc<Mutex<Vec<(ApiVerb, ObjectKind)>>> = Arc::default();
    let logged = Arc::clone(&log);
    fx.world.set_faults(move |c: &Call<'_>| {
        if c.verb.is_write() {
            logged.lock().unwrap().push((c.verb, c.target.kind));
        }
        Fault::Proceed
    });
    fx.pass();
    fx.world.clear_faults();
    assert!(fx.deleting("c1"), "escalated");
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
    assert_eq!(fx.pool_ann(Key::SurgeHost).as_deref(), Some("node-s1"));
    assert_eq!(fx.pool_ann(Key::ActiveRotationState).as_deref(), Some("draining"));
    let log = log.lock().unwrap();
    let count = |verb: ApiVerb, kind: ObjectKind| {
        log.iter().filter(|(v, k)| *v == verb && *k == kind).count()
    };
    assert_eq!(count(ApiVerb::Patch, ObjectKind::NodePool), 1, "host and mirror: {log:?}");
    assert_eq!(count(ApiVerb::Patch, ObjectKind::Node), 1, "the host's freeze: {log:?}");
    assert_eq!(count(ApiVerb::Patch, ObjectKind::NodeClaim), 1, "state and surge-claim: {log:?}");
    assert_eq!(count(ApiVerb::Delete, ObjectKind::Pod), 1, "{log:?}");
    assert_eq!(count(ApiVerb::Delete, ObjectKind::NodeClaim), 1, "{log:?}");
}
