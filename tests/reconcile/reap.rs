//! The surge claims Karpenter launched for a placeholder: marked for their rotation, reaped when
//! they never turn Ready, and never a claim that is capacity or another pool's.

use super::*;

#[test]
pub fn the_readytimeout_reap_never_deletes_another_pools_claim() {
    let mut fx = Fx::new();
    started(&mut fx);
    // A claim of another pool, created after started-at and not registered yet: the reap guard
    // alone would allow it. A hand edit (or a copied claim) names it as c1's surge claim.
    fx.advance(Duration::minutes(1));
    let mut foreign = claim_obj("b1", fx.clock.now(), None);
    foreign
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("karpenter.sh/nodepool".into(), "pool-b".into());
    fx.world.apply_claim(foreign).expect("b1");
    fx.set_claim_ann("c1", Key::SurgeClaim, Some("b1"));
    fx.advance(Duration::minutes(16));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(fx.world.claim("b1").is_some() && !fx.deleting("b1"), "pool-b's claim is not reaped");
}

#[test]
pub fn a_surge_node_that_never_turns_ready_is_reaped_at_rollback() {
    let mut fx = Fx::new();
    started(&mut fx);
    // Karpenter launched a claim for the placeholder; its node registered but never turns
    // Ready, so the scheduler never binds the placeholder and `surge-claim` is never written.
    fx.advance(Duration::minutes(2));
    never_ready_surge(&fx, "s1", "c1");
    fx.pass();
    assert!(fx.claim_ann("c1", Key::SurgeClaim).is_none(), "never bound, never recorded");
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"), "its nomination seen");
    fx.advance(Duration::minutes(14));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(
        fx.deleting("s1") || fx.world.claim("s1").is_none(),
        "the never-Ready surge claim is reaped at rollback, not left to Karpenter's repair"
    );
}

/// The placeholder binds in the very pass that finds readyTimeout passed, and Karpenter's
/// nomination of it is not in the cache yet: the rollback marks the claim from a fresh list of
/// the placeholder's Events and reaps it (its node matched by providerID alone), never the
/// pool's other fresh claim that is not Ready.
#[test]
fn a_placeholder_bound_at_the_timeout_reaps_its_hosts_claim() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(16));
    let not_ready = |name: &str, node: Option<&str>| {
        let mut c = claim_obj(name, fx.clock.now(), node);
        if let Some(st) = c.status.as_mut() {
            st.node_name = None; // Karpenter has not written it yet
            st.conditions = serde_json::from_value(serde_json::json!([
                {"type": "Launched", "status": "True"}, {"type": "Ready", "status": "False"}]))
            .expect("conditions");
        }
        c
    };
    fx.world.apply_node(node_obj("node-s1", true)).expect("node");
    fx.world.apply_claim(not_ready("s1", Some("node-s1"))).expect("surge claim");
    // An ordinary scale-up of the same pool, just as fresh and not Ready either.
    fx.world.apply_claim(not_ready("s2", None)).expect("other claim");
    bind_placeholder(&fx, "c1", "node-s1");
    fx.nominate("c1", "s1");
    let hook = fx.intercept();
    hook.stale_cache(|view| view.nominations.clear());
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "the host's claim is reaped");
    assert!(!fx.deleting("s2") && fx.world.claim("s2").is_some(), "the scale-up is not");
}

#[test]
pub fn a_conflict_on_the_reap_or_placeholder_delete_is_rechecked_and_retried() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(2));
    fx.world.apply_node(node_obj("node-s1", false)).expect("node");
    fx.world.apply_claim(claim_obj("s1", fx.clock.now(), Some("node-s1"))).expect("claim");
    fx.world
        .update_claim("s1", |c| {
            if let Some(st) = c.status.as_mut() {
                st.conditions.retain(|c| c.type_ != "Ready");
            }
        })
        .expect("s1");
    fx.nominate("c1", "s1");
    // The first delete of each gets a 409 although nothing replaced the object (the API server
    // answers 409 for a write it could not apply): a fresh read shows the same uid, so the
    // delete is retried instead of taken for "a new object took the name".
    let conflicted = std::sync::Mutex::new(std::collections::BTreeSet::new());
    fx.world.set_faults(move |c: &noderotation::cluster::memory::Call<'_>| {
        use noderotation::cluster::memory::{ApiVerb, Fault};
        let mut seen = conflicted.lock().unwrap_or_else(|e| e.into_inner());
        if c.verb == ApiVerb::Delete && c.precondition && seen.insert(c.target.to_string()) {
            return Fault::Conflict;
        }
        Fault::Proceed
    });
    fx.advance(Duration::minutes(14));
    fx.pass();
    fx.world.clear_faults();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(fx.deleting("s1") || fx.world.claim("s1").is_none(), "the surge claim is reaped");
    assert!(fx.placeholder("c1").is_none(), "the placeholder is deleted");
}

/// A never-Ready surge is reaped at readyTimeout; a claim whose node is Ready on a fresh read is
/// capacity, even while the cache does not show the node yet and the claim's own status has
/// not caught up: the pods Karpenter launched it for may be binding.
#[test]
fn a_rollback_leaves_a_claim_whose_node_turned_ready_though_the_cache_has_not_seen_it() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(2));
    // Karpenter launched s1 (providerID known, nodeName not yet written); its node registered
    // and turned Ready, and the controller's cache has not seen the node.
    fx.world.apply_node(node_obj("node-s1", true)).expect("node");
    let mut s1 = claim_obj("s1", fx.clock.now(), Some("node-s1"));
    if let Some(st) = s1.status.as_mut() {
        st.node_name = None;
        st.conditions = serde_json::from_value(serde_json::json!([
            {"type": "Launched", "status": "True"}]))
        .expect("conditions");
    }
    fx.world.apply_claim(s1).expect("claim");
    let hook = fx.intercept();
    hook.stale_cache(|view| {
        view.nodes.remove("node-s1");
    });
    fx.advance(Duration::minutes(14));
    fx.stale_pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
    assert!(!fx.deleting("s1"), "node-s1 is Ready: s1 is capacity, not a failed surge");
}

/// How a rotation ends, for the surge-claim tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// The placeholder is absorbed by a spare node; the old claim drains and goes.
    Success,
    /// readyTimeout.
    Rollback,
    /// Karpenter force-expires the pending claim.
    ExpiredWhilePending,
    /// The pending claim is deleted and finalized before any pass sees it deleting.
    ClaimGone,
    /// The governing policy is deleted.
    GovernanceLost,
    /// `kubectl annotate nodepool ... noderotation.io/active-rotation-`: the sweep ends it.
    AnchorRemoved,
}

/// Ends the rotation of c1 as `exit` says.
fn end_rotation(fx: &mut Fx, exit: Exit) {
    match exit {
        Exit::Success => {
            fx.world
                .update_pod(NS, &noderotation::placeholder::placeholder_name("c1"), |p| {
                    p.spec.get_or_insert_with(Default::default).node_name =
                        Some("node-spare".into());
                    p.status.get_or_insert_with(Default::default).phase = Some("Running".into());
                })
                .expect("placeholder");
            fx.pass();
            assert!(fx.deleting("c1"), "c1 drains onto the spare node");
            fx.finalize("c1");
            fx.pass();
        }
        Exit::Rollback => {
            fx.advance(Duration::minutes(15));
            fx.pass();
            assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
        }
        Exit::ExpiredWhilePending => {
            fx.delete_claim("c1");
            fx.pass();
            assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("expired"));
        }
        Exit::ClaimGone => {
            fx.delete_claim("c1");
            fx.finalize("c1");
            fx.pass();
        }
        Exit::GovernanceLost => {
            fx.world.delete_now(&obj(PolicyKind, "rotate-a"));
            fx.pass();
        }
        Exit::AnchorRemoved => {
            fx.set_pool_ann(Key::ActiveRotation, None);
            fx.tick();
            assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"));
        }
    }
    assert_eq!(fx.pool_ann(Key::ActiveRotation), None, "{exit:?}: the rotation is over");
}

/// A claim Karpenter launched for a placeholder that never turns Ready outlives no exit of its
/// rotation (node repair is off on self-managed Karpenter, so nobody else deletes it): the
/// rollback reaps it at once, the sweep after any other exit, once readyTimeout has passed since
/// its creation. The nomination is marked as soon as a pending pass sees it, or (`late`: the
/// cache never showed it) from a fresh list of the placeholder's Events at the exit, while the
/// placeholder's uid is still recorded; a claim gone before any pass saw its nomination takes
/// that record with it.
#[test]
pub fn a_never_ready_surge_claim_outlives_no_exit_of_its_rotation() {
    use Exit::*;
    let exits = [Success, Rollback, ExpiredWhilePending, ClaimGone, GovernanceLost, AnchorRemoved];
    for exit in exits {
        for late in [false, true] {
            if late && exit == ClaimGone {
                continue;
            }
            let mut fx = Fx::new();
            // Young: never a candidate; it absorbs c1's placeholder on success.
            fx.claim("spare", Duration::hours(1));
            started(&mut fx);
            fx.advance(Duration::minutes(1));
            never_ready_surge(&fx, "s1", "c1");
            let created = fx.clock.now();
            if late {
                let hook = fx.intercept();
                hook.stale_cache(|view| view.nominations.clear());
            }
            fx.pass();
            let marked = fx.claim_ann("s1", Key::LaunchedFor);
            assert_eq!(marked.as_deref(), (!late).then_some("c1"), "{exit:?} late={late}");
            end_rotation(&mut fx, exit);
            assert_eq!(
                fx.claim_ann("s1", Key::LaunchedFor).as_deref(),
                Some("c1"),
                "{exit:?} late={late}: marked by the time the rotation ended"
            );
            fx.tick();
            let due = exit == GovernanceLost || fx.clock.now() - created >= Duration::minutes(15);
            assert_eq!(
                fx.deleting("s1"),
                due,
                "{exit:?} late={late}: reaped at once only past readyTimeout (or ungoverned)"
            );
            fx.advance(Duration::minutes(15));
            fx.tick();
            assert!(fx.deleting("s1"), "{exit:?} late={late}: the never-Ready surge is reaped");
            assert!(!fx.deleting("spare"), "{exit:?} late={late}: capacity is not");
        }
    }
}

/// The sweep reaps only a claim marked `launched-for` a rotation no slot anchors, that never
/// initialized, whose node is not Ready and hosts nothing but DaemonSet pods, and only once
/// readyTimeout has passed since its creation.
#[test]
pub fn the_sweep_reaps_only_a_marked_surge_claim_that_never_turned_ready_and_hosts_nothing() {
    let mut fx = Fx::new();
    started(&mut fx);
    let mark = |fx: &Fx, claim: &str, rotation: &str| {
        fx.set_claim_ann(claim, Key::LaunchedFor, Some(rotation));
    };
    fx.never_ready_surge("m1");
    mark(&fx, "m1", "gone-1");
    // Initialized once (its node went NotReady later): capacity, not a failed surge.
    fx.never_ready_surge("m2");
    mark(&fx, "m2", "gone-1");
    fx.initialized("m2");
    // A workload pod runs on it.
    fx.never_ready_surge("m3");
    mark(&fx, "m3", "gone-1");
    fx.world.apply_pod(workload_pod("web-m3", "node-m3")).expect("pod");
    // Marked for a rotation still in flight.
    fx.never_ready_surge("m4");
    mark(&fx, "m4", "c1");
    // Not marked: Karpenter launched it for other pods.
    fx.never_ready_surge("u1");
    fx.tick();
    assert!(!fx.deleting("m1"), "not before readyTimeout since its creation");
    fx.advance(Duration::minutes(15));
    fx.tick();
    assert!(fx.deleting("m1"), "a marked claim that never turned Ready, its rotation over");
    for kept in ["m2", "m3", "m4", "u1"] {
        assert!(!fx.deleting(kept), "{kept} is kept");
    }
    assert!(fx.world.claim("c1").is_some_and(|c| c.metadata.deletion_timestamp.is_none()));
}

/// The rollback took the pool's one fresh claim that was not Ready, whoever Karpenter launched
/// it for, and the claim its placeholder was bound to, whoever Karpenter launched it for. Here
/// the placeholder's own claim failed to launch and Karpenter already deleted it, while the
/// pods another rotation evicted got a claim that is not Ready yet; and another attempt's
/// placeholder was bound to a node Karpenter launched for other pods. Neither is reaped: only a
/// claim Karpenter nominated the placeholder to is.
#[test]
fn a_rollback_never_reaps_a_claim_karpenter_launched_for_other_pods() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(1));
    // Launched for the placeholder, never launches, deleted by Karpenter (registrationTimeout).
    fx.world.apply_claim(claim_obj("s1", fx.clock.now(), None)).expect("claim");
    fx.world
        .update_claim("s1", |c| {
            if let Some(st) = c.status.as_mut() {
                st.conditions.clear();
            }
        })
        .expect("s1");
    fx.nominate("c1", "s1");
    fx.pass();
    assert_eq!(fx.claim_ann("s1", Key::LaunchedFor).as_deref(), Some("c1"));
    fx.advance(Duration::minutes(10));
    fx.delete_claim("s1");
    fx.finalize("s1");
    // Launched for the pods another rotation's drain evicted; its node is not Ready yet.
    fx.advance(Duration::minutes(4));
    fx.never_ready_surge("w1");
    fx.advance(Duration::minutes(1));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(!fx.deleting("w1"), "w1 is not the placeholder's: never reaped");

    // The retry's placeholder lands on a node Karpenter launched for other pods (created after
    // started-at, nothing else on it yet), and never runs there.
    fx.advance(Duration::hours(2));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("pending"), "retried");
    fx.advance(Duration::minutes(1));
    fx.world.apply_node(node_obj("node-w2", true)).expect("node");
    fx.world.apply_claim(claim_obj("w2", fx.clock.now(), Some("node-w2"))).expect("claim");
    bind_placeholder(&fx, "c1", "node-w2");
    fx.pass();
    fx.advance(Duration::minutes(15));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(!fx.deleting("w2"), "w2 is not the placeholder's: never reaped");
}

/// A placeholder re-created after a preemption gets a claim of its own from Karpenter; the
/// first one's host is recorded as `surge-claim`. The rollback reaps the new claim, which never
/// turned Ready, and keeps the Ready one (capacity, empty now: Karpenter's to consolidate).
#[test]
fn a_rollback_reaps_the_surge_claim_of_a_re_created_placeholder() {
    let mut fx = Fx::new();
    started(&mut fx);
    fx.advance(Duration::minutes(1));
    fx.world.apply_node(node_obj("node-s1", true)).expect("node");
    fx.world.apply_claim(claim_obj("s1", fx.clock.now(), Some("node-s1"))).expect("claim");
    fx.initialized("s1");
    fx.nominate("c1", "s1");
    bind_placeholder(&fx, "c1", "node-s1"); // bound, never Running (a slow image pull)
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::SurgeClaim).as_deref(), Some("s1"));
    // Preempted; the next pass re-creates it, and Karpenter launches s2 for the new pod.
    fx.world.delete_now(&noderotation::cluster::ObjectRef::pod(
        NS,
        noderotation::placeholder::placeholder_name("c1"),
    ));
    fx.pass();
    assert!(fx.placeholder("c1").is_some(), "re-created");
    fx.advance(Duration::minutes(1));
    never_ready_surge(&fx, "s2", "c1");
    fx.pass();
    assert_eq!(fx.claim_ann("s2", Key::LaunchedFor).as_deref(), Some("c1"));
    fx.advance(Duration::minutes(14));
    fx.pass();
    assert_eq!(fx.claim_ann("c1", Key::State).as_deref(), Some("failed"), "rolled back");
    assert!(fx.deleting("s2"), "the re-created placeholder's never-Ready claim is reaped");
    assert!(!fx.deleting("s1"), "the Ready one is capacity");
}
