//! The interpreter picks the spec's branch (§5.2 `advance()`) for hand-made snapshots.
//!
//! `Toy` is a deliberately small host: a pool and its claims as annotation maps, predicates set
//! by hand. Writes land in `store`; guards read `view`, which follows the store unless the test
//! makes it lag (a stale cache), so the conditional writes' guards can be exercised.
use std::collections::BTreeMap;

use chrono::{DateTime, Duration, TimeZone, Utc};
use noderotation::engine::{
    Action, ClaimState, Engine, Facts, Field, Host, HostError, Key, ObjRef, Outcome, Pred, Root,
    Value, Verb,
};

#[derive(Debug, Clone, Default)]
struct Claim {
    ann: BTreeMap<Key, String>,
    deleting: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Default)]
struct World {
    pool: BTreeMap<Key, String>,
    claims: BTreeMap<String, Claim>,
}

struct Toy {
    now: DateTime<Utc>,
    store: World,
    view: World,
    lagging: bool,
    preds: BTreeMap<Pred, Value>,
    /// Outcomes forced per verb (otherwise computed from the store).
    forced: BTreeMap<Verb, Outcome>,
    /// Outcomes forced per row (before `forced`).
    forced_rows: BTreeMap<&'static str, Outcome>,
    pick: Option<String>,
    log: Vec<String>,
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 28, 2, 30, 0).single().expect("valid time")
}

impl Toy {
    /// A governed pool, in window, one anchored claim `c1` with the given annotations.
    fn anchored(state: Option<&str>) -> Toy {
        let mut claim = Claim::default();
        if let Some(s) = state {
            claim.ann.insert(Key::State, s.to_string());
        }
        let mut world = World::default();
        world.pool.insert(Key::ActiveRotation, "c1".into());
        world.pool.insert(Key::WindowOpenedAt, "2026-11-28T02:00:00Z".into());
        world.claims.insert("c1".into(), claim);
        let mut preds = BTreeMap::new();
        preds.insert(Pred::InWindow, Value::Bool(true));
        Toy {
            now: t0(),
            store: world.clone(),
            view: world,
            lagging: false,
            preds,
            forced: BTreeMap::new(),
            forced_rows: BTreeMap::new(),
            pick: None,
            log: Vec::new(),
        }
    }

    /// A claim the escalation marked draining: the pool carries its draining mirror.
    fn draining() -> Toy {
        let mut toy = Toy::anchored(Some("draining"));
        for w in [&mut toy.store, &mut toy.view] {
            w.pool.insert(Key::ActiveRotationState, "draining".into());
            w.pool.insert(Key::DrainingAt, "2026-11-28T02:10:00Z".into());
        }
        toy
    }

    fn claim(&mut self, f: impl Fn(&mut Claim)) -> &mut Self {
        for w in [&mut self.store, &mut self.view] {
            if let Some(c) = w.claims.get_mut("c1") {
                f(c);
            }
        }
        self
    }

    fn pred(&mut self, p: Pred, v: Value) -> &mut Self {
        self.preds.insert(p, v);
        self
    }

    fn force(&mut self, v: Verb, o: Outcome) -> &mut Self {
        self.forced.insert(v, o);
        self
    }

    fn force_row(&mut self, row: &'static str, o: Outcome) -> &mut Self {
        self.forced_rows.insert(row, o);
        self
    }

    fn run(&mut self) -> (Vec<String>, Duration) {
        let pass = Engine::embedded().run(self).expect("pass runs");
        (pass.fired, pass.requeue)
    }

    fn verbs(&self) -> Vec<&str> {
        self.log.iter().map(|l| l.split('(').next().unwrap_or("")).collect()
    }
}

fn fmt_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Facts for Toy {
    fn root(&self, root: Root) -> Value {
        match root {
            Root::Np => Value::Object(ObjRef::Pool),
            Root::Policy => Value::Object(ObjRef::Policy),
            Root::Now => Value::Time(self.now),
            Root::Cand => match self.view.pool.get(&Key::ActiveRotation) {
                Some(n) if self.view.claims.contains_key(n) => {
                    Value::Object(ObjRef::Claim(n.clone()))
                }
                _ => Value::Nil,
            },
            Root::Pick => match &self.pick {
                Some(n) => Value::Object(ObjRef::Claim(n.clone())),
                None => Value::Nil,
            },
            // The start-up sweep's roots; these tests run pool passes only.
            Root::Claim | Root::Node | Root::Pod => Value::Nil,
        }
    }

    fn field(&self, obj: &ObjRef, field: Field) -> Value {
        let claim = |n: &str| self.view.claims.get(n);
        match (obj, field) {
            (_, Field::NodePoolName) => Value::Name("pool-a".into()),
            (_, Field::NodePoolReplicas) => Value::Nil,
            (_, Field::NodePoolGovernance) => Value::Sym("governed".into()),
            (ObjRef::Claim(n), Field::NodeClaimName) => Value::Name(n.clone()),
            (ObjRef::Claim(n), Field::NodeClaimState) => Value::Sym(
                claim(n)
                    .and_then(|c| c.ann.get(&Key::State).cloned())
                    .unwrap_or_else(|| "none".into()),
            ),
            (ObjRef::Claim(n), Field::NodeClaimDeletionTimestamp) => {
                claim(n).and_then(|c| c.deleting).map(Value::Time).unwrap_or(Value::Nil)
            }
            (ObjRef::Claim(n), Field::NodeClaimNode) => {
                Value::Object(ObjRef::Node(format!("node-{n}")))
            }
            (_, Field::NodeName) => Value::Name("node".into()),
            (_, Field::PolicyReadyTimeout) => Value::Duration(Duration::minutes(15)),
            (_, Field::PolicyCooldownAfter) => Value::Duration(Duration::minutes(10)),
            (_, Field::PolicyFailurePause) => Value::Duration(Duration::minutes(10)),
            (_, Field::PolicyForcefulFallback) => Value::Bool(false),
            _ => Value::Nil,
        }
    }

    fn annotation(&self, obj: &ObjRef, key: Key) -> Option<String> {
        match obj {
            ObjRef::Pool => self.view.pool.get(&key).cloned(),
            ObjRef::Claim(n) => self.view.claims.get(n)?.ann.get(&key).cloned(),
            _ => None,
        }
    }

    fn call(&self, pred: Pred, args: &[Value]) -> Value {
        if let Some(v) = self.preds.get(&pred) {
            return v.clone();
        }
        match pred {
            Pred::InWindow => Value::Bool(true),
            Pred::Frozen | Pred::FreezeUnreadable | Pred::FatalFinding => Value::Bool(false),
            Pred::SinceLastRotation | Pred::SinceLastFailure => Value::Duration(Duration::days(1)),
            Pred::Census => Value::Int(0),
            Pred::Deadline => Value::Time(self.now + Duration::days(3)),
            Pred::TRot => Value::Duration(Duration::minutes(77)),
            Pred::SurgeHeadroom => Value::Bool(true),
            Pred::Elapsed => match args.first() {
                Some(Value::Time(t)) => Value::Duration(self.now - *t),
                _ => Value::Nil,
            },
            Pred::EffectiveBackoff => Value::Duration(Duration::minutes(30)),
            Pred::PlaceholderClassUnsafe
            | Pred::HasPlaceholder
            | Pred::SurgeReady
            | Pred::SurgeHostTaken
            | Pred::SurgeUnschedulable => Value::Bool(false),
            // A placeholder that exists is the controller's own unless a test says otherwise.
            Pred::PlaceholderOwned => Value::Bool(true),
            Pred::PlaceholderNode => Value::Object(ObjRef::Node("surge-node".into())),
            Pred::InducedClaim | Pred::SurgePath => Value::Nil,
            Pred::DrainBound => Value::Duration(Duration::minutes(62)),
            Pred::Anchored | Pred::Rotating | Pred::ForeignAnchor => Value::Bool(false),
            // No nomination to mark; the sweep's reap is not a pool pass.
            Pred::NominatedUnmarked | Pred::SurgeClaimDue => Value::Bool(false),
            // One lane: the pool's own anchor is its only rotation.
            Pred::InFlight => {
                Value::Int(i64::from(self.view.pool.contains_key(&Key::ActiveRotation)))
            }
            Pred::Lanes => Value::Int(1),
            Pred::StuckDrains => Value::Int(0),
            Pred::Latest => {
                let times: Vec<DateTime<Utc>> = args.iter().filter_map(Value::as_time).collect();
                times.into_iter().max().map(Value::Time).unwrap_or(Value::Nil)
            }
        }
    }
}

impl Host for Toy {
    fn perform(&mut self, a: &Action<'_>) -> Result<Outcome, HostError> {
        let show = |v: &Value| v.to_annotation().unwrap_or_else(|| format!("{v:?}"));
        let mut line = format!("{}({}", a.verb, show(&a.target));
        for (k, v) in a.set.iter().chain(&a.once) {
            line.push_str(&format!(", {}={}", k.name(), show(v)));
        }
        line.push(')');
        self.log.push(line);
        if let Some(o) = self.forced_rows.get(a.row).or_else(|| self.forced.get(&a.verb)) {
            return Ok(*o);
        }
        // `match`: the stored copy must still read as the values the pass evaluated.
        let matches = |ann: &BTreeMap<Key, String>| {
            a.match_.iter().all(|(k, want)| {
                let have = ann.get(k).map_or(Value::Nil, |raw| {
                    noderotation::engine::value_of_annotation(*k, raw, Some(self.now))
                });
                noderotation::engine::same_value(&have, want)
            })
        };
        let now = fmt_time(self.now);
        let outcome = match a.verb {
            Verb::DeleteClaim => {
                let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else {
                    return Ok(Outcome::Gone);
                };
                let Some(claim) = self.store.claims.get_mut(&name) else {
                    return Ok(Outcome::Gone);
                };
                let state = claim.ann.get(&Key::State).cloned().unwrap_or_else(|| "none".into());
                let state = ClaimState::from_name(&state).unwrap_or(ClaimState::None);
                if claim.deleting.is_none() && !a.from.contains(&state) {
                    return Ok(Outcome::Raced);
                }
                claim.deleting.get_or_insert(self.now);
                self.sync();
                Outcome::Won
            }
            Verb::AnnotateIf | Verb::Annotate | Verb::MarkExpired => {
                let Some(ObjRef::Claim(name)) = a.target_obj().cloned() else {
                    // Pool writes.
                    if let Some(k) = a.absent
                        && self.store.pool.contains_key(&k)
                    {
                        return Ok(Outcome::Raced);
                    }
                    if !matches(&self.store.pool) {
                        return Ok(Outcome::Raced);
                    }
                    // `unchanged`: as on the copy the pass judged.
                    if a.unchanged.iter().any(|k| self.store.pool.get(k) != self.view.pool.get(k)) {
                        return Ok(Outcome::Raced);
                    }
                    for (k, v) in &a.set {
                        self.store.pool.insert(*k, show(v));
                    }
                    for (k, v) in &a.once {
                        self.store.pool.entry(*k).or_insert_with(|| show(v));
                    }
                    for k in a.clear {
                        self.store.pool.remove(k);
                    }
                    self.sync();
                    return Ok(Outcome::Won);
                };
                let Some(claim) = self.store.claims.get_mut(&name) else {
                    return Ok(Outcome::Gone);
                };
                let state = claim.ann.get(&Key::State).cloned().unwrap_or_else(|| "none".into());
                let state = ClaimState::from_name(&state).unwrap_or(ClaimState::None);
                if a.verb == Verb::MarkExpired && state == ClaimState::Expired {
                    return Ok(Outcome::Won);
                }
                if !a.from.is_empty() && !a.from.contains(&state) {
                    return Ok(Outcome::Raced);
                }
                if !matches(&claim.ann) {
                    return Ok(Outcome::Raced);
                }
                for (k, v) in &a.set {
                    claim.ann.insert(*k, show(v));
                }
                for (k, v) in &a.once {
                    claim.ann.entry(*k).or_insert_with(|| show(v));
                }
                for k in a.incr {
                    let n: i64 = claim.ann.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
                    claim.ann.insert(*k, (n + 1).to_string());
                }
                for k in a.clear {
                    claim.ann.remove(k);
                }
                if a.verb == Verb::MarkExpired {
                    claim.ann.insert(Key::State, "expired".into());
                    self.sync();
                    return Ok(Outcome::Claimed);
                }
                self.sync();
                Outcome::Won
            }
            Verb::ClearAnchor | Verb::ReleaseAnchor => {
                if self.store.pool.get(&Key::ActiveRotation) != a.name.as_ref() {
                    return Ok(Outcome::Raced);
                }
                let drained = self.store.pool.contains_key(&Key::ActiveRotationState);
                for k in noderotation::engine::ANCHOR_CLEAR_SET {
                    self.store.pool.remove(k);
                }
                for (k, v) in &a.set {
                    self.store.pool.insert(*k, show(v));
                }
                if a.verb == Verb::ReleaseAnchor && drained {
                    self.store.pool.insert(Key::LastRotationAt, now);
                }
                self.sync();
                match (a.verb, drained) {
                    (Verb::ReleaseAnchor, true) => Outcome::Rotated,
                    (Verb::ReleaseAnchor, false) => Outcome::Expired,
                    _ => Outcome::Won,
                }
            }
            _ => Outcome::Won,
        };
        Ok(outcome)
    }
}

impl Toy {
    fn sync(&mut self) {
        if !self.lagging {
            self.view = self.store.clone();
        }
    }
}

fn ends_with(fired: &[String], tail: &[&str]) {
    let got: Vec<&str> = fired.iter().map(String::as_str).collect();
    assert!(got.ends_with(tail), "fired {got:?}, expected it to end with {tail:?}");
}

#[test]
fn new_claim_enters_pending_and_reserves_capacity() {
    let mut toy = Toy::anchored(None);
    let (fired, requeue) = toy.run();
    ends_with(
        &fired,
        &[
            "dispatch_pending",
            "pending_entry",
            "pending_protect",
            "pending_create_placeholder",
            "pending_placeholder_created",
        ],
    );
    assert_eq!(requeue, Duration::seconds(30));
    assert_eq!(toy.verbs(), ["annotate_if", "freeze_and_cordon", "create_placeholder"]);
    let c1 = &toy.store.claims["c1"];
    assert_eq!(c1.ann[&Key::State], "pending");
    assert_eq!(c1.ann[&Key::StartedAt], "2026-11-28T02:30:00Z");
}

#[test]
fn pending_with_ready_surge_moves_to_draining() {
    let mut toy = Toy::anchored(Some("pending"));
    toy.claim(|c| {
        c.ann.insert(Key::StartedAt, "2026-11-28T02:25:00Z".into());
    })
    .pred(Pred::HasPlaceholder, Value::Bool(true))
    .pred(Pred::SurgeReady, Value::Bool(true))
    .pred(Pred::SurgePath, Value::Sym("provisioned".into()));
    let (fired, requeue) = toy.run();
    ends_with(
        &fired,
        &[
            "pending_entry",
            "pending_protect",
            "pending_surge_ready",
            "pending_surge_freeze",
            "pending_surge_draining",
            "pending_surge_delete",
        ],
    );
    assert_eq!(requeue, Duration::seconds(30));
    assert_eq!(
        toy.verbs(),
        [
            "annotate_if",
            "freeze_and_cordon",
            "annotate_if",
            "freeze",
            "annotate_if",
            "mark_launched",
            "delete_placeholder",
            "delete_claim"
        ]
    );
    // The toy names every node `node`; what matters is that the host is recorded first.
    assert_eq!(toy.store.pool[&Key::SurgeHost], "node", "recorded before the freeze");
    assert_eq!(toy.store.pool[&Key::ActiveRotationState], "draining");
    assert_eq!(toy.store.pool[&Key::SurgeWait], "5m0s");
    assert_eq!(toy.store.pool[&Key::SurgePath], "provisioned");
    assert_eq!(toy.store.claims["c1"].ann[&Key::State], "draining");
}

#[test]
fn frozen_pool_holds_a_pending_rotation_but_reasserts_protection() {
    let mut toy = Toy::anchored(Some("pending"));
    toy.claim(|c| {
        c.ann.insert(Key::StartedAt, "2026-11-28T02:25:00Z".into());
    })
    .pred(Pred::Frozen, Value::Bool(true))
    .pred(Pred::SurgeReady, Value::Bool(true));
    let (fired, requeue) = toy.run();
    ends_with(&fired, &["pending_entry", "pending_protect", "pending_frozen"]);
    assert_eq!(requeue, Duration::minutes(1));
    assert!(!toy.verbs().contains(&"create_placeholder") && !toy.verbs().contains(&"delete_claim"));
}

#[test]
fn ready_timeout_rolls_back_and_announces_the_failure_once() {
    let mut toy = Toy::anchored(Some("pending"));
    toy.claim(|c| {
        c.ann.insert(Key::StartedAt, "2026-11-28T02:10:00Z".into());
        c.ann.insert(Key::RetryCount, "1".into());
    });
    let (fired, requeue) = toy.run();
    ends_with(
        &fired,
        &["pending_ready_timeout", "rollback_cleanup", "rollback_mark_failed", "rollback_announce"],
    );
    assert_eq!(requeue, Duration::minutes(1));
    assert_eq!(
        toy.verbs(),
        [
            "annotate_if",
            "mark_launched",
            "reap_surge_claim",
            "delete_placeholder",
            "unfreeze",
            "annotate_if",
            "emit",
            "event",
            "clear_anchor"
        ]
    );
    let c1 = &toy.store.claims["c1"];
    assert_eq!(c1.ann[&Key::State], "failed");
    assert_eq!(c1.ann[&Key::RetryCount], "2");
    assert!(!c1.ann.contains_key(&Key::StartedAt));
    assert!(!toy.store.pool.contains_key(&Key::ActiveRotation));
    assert_eq!(toy.store.pool[&Key::LastFailureAt], "2026-11-28T02:30:00Z");
}

#[test]
fn claim_finalized_during_rollback_announces_nothing_and_keeps_the_anchor() {
    let mut toy = Toy::anchored(Some("pending"));
    toy.claim(|c| {
        c.ann.insert(Key::StartedAt, "2026-11-28T02:10:00Z".into());
    })
    .force_row("rollback_mark_failed", Outcome::Gone);
    let (fired, requeue) = toy.run();
    ends_with(&fired, &["rollback_mark_failed", "rollback_claim_finalized"]);
    assert_eq!(requeue, Duration::seconds(30));
    assert!(!toy.verbs().contains(&"emit") && !toy.verbs().contains(&"clear_anchor"));
    assert!(toy.store.pool.contains_key(&Key::ActiveRotation));
}

#[test]
fn force_expiry_while_pending_is_claimed_announced_and_cleaned_up() {
    let mut toy = Toy::anchored(Some("pending"));
    toy.claim(|c| c.deleting = Some(t0()));
    let (fired, requeue) = toy.run();
    ends_with(
        &fired,
        &[
            "pending_force_expired",
            "pending_expiry_mark_launched",
            "pending_mark_expired",
            "pending_expiry_announce",
            "pending_expiry_cleanup",
        ],
    );
    assert_eq!(requeue, Duration::minutes(1));
    assert_eq!(
        toy.verbs(),
        [
            "mark_launched",
            "mark_expired",
            "emit",
            "event",
            "delete_placeholder",
            "mark_launched",
            "unfreeze",
            "clear_anchor"
        ]
    );
    assert!(!toy.store.pool.contains_key(&Key::ActiveRotation));
}

#[test]
fn force_expiry_seen_through_a_stale_read_owns_nothing() {
    let mut toy = Toy::anchored(Some("pending"));
    toy.claim(|c| c.deleting = Some(t0()));
    toy.store.claims.get_mut("c1").map(|c| c.ann.insert(Key::State, "draining".into()));
    toy.lagging = true;
    let (fired, requeue) = toy.run();
    ends_with(&fired, &["pending_mark_expired", "pending_expiry_unowned"]);
    assert_eq!(requeue, Duration::seconds(30));
    // Marking Karpenter's nominations of the placeholder is attribution, not part of the
    // transition: conditional (only where absent) and right whoever owns what follows.
    assert_eq!(toy.verbs(), ["mark_launched", "mark_expired"]);
}

#[test]
fn draining_without_deletion_reissues_the_delete() {
    let mut toy = Toy::draining();
    let (fired, requeue) = toy.run();
    ends_with(
        &fired,
        &["dispatch_draining", "draining_mirror", "draining_keep_host", "draining_redelete"],
    );
    assert_eq!(requeue, Duration::seconds(30));
    assert_eq!(toy.verbs(), ["annotate_if", "keep_surge_host", "delete_claim"]);
}

#[test]
fn draining_without_deletion_whose_surge_host_is_lost_goes_back_to_pending() {
    let mut toy = Toy::draining();
    toy.force(Verb::KeepSurgeHost, Outcome::Lost);
    let (fired, requeue) = toy.run();
    ends_with(
        &fired,
        &[
            "dispatch_draining",
            "draining_mirror",
            "draining_keep_host",
            "draining_surge_lost",
            "surge_lost_pending",
            "surge_lost_unmirror",
        ],
    );
    assert_eq!(requeue, Duration::seconds(10));
    assert_eq!(
        toy.verbs(),
        ["annotate_if", "keep_surge_host", "annotate_if", "annotate_if"],
        "no delete_claim"
    );
    assert_eq!(toy.store.claims["c1"].ann.get(&Key::State).map(String::as_str), Some("pending"));
    assert!(!toy.store.pool.contains_key(&Key::ActiveRotationState));
    assert!(!toy.store.pool.contains_key(&Key::DrainingAt));
    // A surge-less rotation has no host to lose: its delete is re-issued.
    for mode in ["forceful-fallback", "nothing-to-reserve"] {
        let mut toy = Toy::draining();
        toy.force(Verb::KeepSurgeHost, Outcome::Lost);
        for w in [&mut toy.store, &mut toy.view] {
            w.pool.insert(Key::RotationMode, mode.into());
        }
        let (fired, _) = toy.run();
        assert!(fired.iter().any(|r| r == "draining_redelete"), "{mode}: {fired:?}");
    }
}

/// A view that still shows the claim draining after another pass sent it back to pending (its
/// mirror cleared) never re-mirrors it.
#[test]
fn a_stale_draining_view_does_not_re_mirror_a_claim_gone_back_to_pending() {
    let mut toy = Toy::draining();
    toy.store.pool.remove(&Key::ActiveRotationState);
    toy.store.pool.remove(&Key::DrainingAt);
    toy.store.claims.get_mut("c1").map(|c| c.ann.insert(Key::State, "pending".into()));
    toy.lagging = true;
    toy.run();
    assert!(!toy.store.pool.contains_key(&Key::ActiveRotationState));
    // Nor a view lagging the claim only, whose pool already shows the mirror cleared.
    let mut toy = Toy::draining();
    for w in [&mut toy.store, &mut toy.view] {
        w.pool.remove(&Key::ActiveRotationState);
        w.pool.remove(&Key::DrainingAt);
    }
    toy.store.claims.get_mut("c1").map(|c| c.ann.insert(Key::State, "pending".into()));
    toy.lagging = true;
    let (fired, _) = toy.run();
    assert!(!fired.iter().any(|r| r == "draining_mirror"), "{fired:?}");
    assert!(!toy.store.pool.contains_key(&Key::ActiveRotationState));
}

#[test]
fn draining_with_our_placeholder_left_behind_deletes_it_before_the_delete() {
    let mut toy = Toy::draining();
    toy.pred(Pred::HasPlaceholder, Value::Bool(true))
        .pred(Pred::PlaceholderOwned, Value::Bool(true));
    let (fired, _) = toy.run();
    ends_with(
        &fired,
        &[
            "dispatch_draining",
            "draining_mirror",
            "draining_release_placeholder",
            "draining_keep_host",
            "draining_redelete",
        ],
    );
    assert_eq!(
        toy.verbs(),
        ["annotate_if", "mark_launched", "delete_placeholder", "keep_surge_host", "delete_claim"]
    );
}

#[test]
fn draining_past_the_drain_bound_warns_and_keeps_the_gate() {
    let mut toy = Toy::draining();
    toy.claim(|c| c.deleting = Some(t0() - Duration::hours(2)));
    let (fired, _) = toy.run();
    ends_with(&fired, &["draining_mirror", "draining_stuck"]);
    assert!(toy.store.pool.contains_key(&Key::ActiveRotation));
}

#[test]
fn failed_claim_retries_as_a_new_attempt_when_gates_and_backoff_allow() {
    let mut toy = Toy::anchored(Some("failed"));
    toy.claim(|c| {
        c.ann.insert(Key::FailedAt, "2026-11-28T01:00:00Z".into());
    });
    let (fired, requeue) = toy.run();
    ends_with(
        &fired,
        &[
            "dispatch_failed",
            "failed_retry",
            "failed_retry_won",
            "dispatch_pending",
            "pending_entry",
            "pending_protect",
            "pending_create_placeholder",
            "pending_placeholder_created",
        ],
    );
    assert_eq!(requeue, Duration::seconds(30));
    assert_eq!(toy.store.claims["c1"].ann[&Key::State], "pending");
}

#[test]
fn failed_retry_through_a_lagging_cache_does_not_reenter() {
    let mut toy = Toy::anchored(Some("failed"));
    toy.claim(|c| {
        c.ann.insert(Key::FailedAt, "2026-11-28T01:00:00Z".into());
    });
    toy.lagging = true;
    let (fired, requeue) = toy.run();
    // The re-dispatch still reads `failed`; the guarded retry write then loses.
    ends_with(
        &fired,
        &[
            "failed_retry",
            "failed_retry_won",
            "dispatch_failed",
            "failed_retry",
            "failed_retry_lost",
        ],
    );
    assert_eq!(requeue, Duration::seconds(30));
}

#[test]
fn failed_claim_inside_backoff_releases_the_anchor_keeping_the_later_pause() {
    let mut toy = Toy::anchored(Some("failed"));
    toy.claim(|c| {
        c.ann.insert(Key::FailedAt, "2026-11-28T02:20:00Z".into());
    });
    toy.store.pool.insert(Key::LastFailureAt, "2026-11-28T02:25:00Z".into());
    toy.view.pool.insert(Key::LastFailureAt, "2026-11-28T02:25:00Z".into());
    let (fired, requeue) = toy.run();
    ends_with(&fired, &["dispatch_failed", "failed_release_check", "failed_release"]);
    assert_eq!(requeue, Duration::minutes(1));
    assert!(!toy.store.pool.contains_key(&Key::ActiveRotation));
    assert_eq!(toy.store.pool[&Key::LastFailureAt], "2026-11-28T02:25:00Z");
}

#[test]
fn failed_claim_being_deleted_is_expired_once() {
    let mut toy = Toy::anchored(Some("failed"));
    toy.claim(|c| c.deleting = Some(t0()));
    let (fired, _) = toy.run();
    ends_with(
        &fired,
        &[
            "failed_force_expired",
            "failed_mark_expired",
            "failed_expiry_announce",
            "failed_expiry_release",
        ],
    );
}

#[test]
fn expired_claim_is_cleaned_up_without_announcing_again() {
    let mut toy = Toy::anchored(Some("expired"));
    let (fired, requeue) = toy.run();
    ends_with(&fired, &["dispatch_expired", "expired_cleanup"]);
    assert_eq!(requeue, Duration::minutes(1));
    assert!(!toy.verbs().contains(&"emit"));
}

#[test]
fn claim_gone_after_draining_completes_as_success() {
    let mut toy = Toy::anchored(Some("draining"));
    toy.store.pool.insert(Key::ActiveRotationState, "draining".into());
    toy.store.claims.clear();
    toy.sync();
    let (fired, _) = toy.run();
    ends_with(&fired, &["claim_gone", "complete_cleanup", "complete_success"]);
    assert!(toy.store.pool.contains_key(&Key::LastRotationAt));
    assert!(!toy.store.pool.contains_key(&Key::ActiveRotation));
}

#[test]
fn claim_gone_without_draining_mirror_completes_as_expired_without_cooldown() {
    let mut toy = Toy::anchored(Some("pending"));
    toy.store.claims.clear();
    toy.sync();
    let (fired, _) = toy.run();
    ends_with(&fired, &["claim_gone", "complete_cleanup", "complete_expired"]);
    assert!(!toy.store.pool.contains_key(&Key::LastRotationAt));
}

#[test]
fn completion_already_released_by_another_pass_announces_nothing() {
    let mut toy = Toy::anchored(Some("draining"));
    toy.store.claims.clear();
    toy.store.pool.remove(&Key::ActiveRotation);
    toy.view.claims.clear();
    toy.lagging = true;
    let (fired, _) = toy.run();
    ends_with(&fired, &["complete_cleanup", "complete_unowned"]);
    assert!(!toy.verbs().contains(&"emit"));
}

#[test]
fn window_edge_missed_is_announced_only_by_the_clearing_write() {
    let mut toy = Toy::anchored(None);
    toy.store.pool.remove(&Key::ActiveRotation);
    toy.store.claims.clear();
    toy.sync();
    toy.pred(Pred::InWindow, Value::Bool(false)).pred(Pred::Census, Value::Int(3));
    let (fired, _) = toy.run();
    ends_with(&fired, &["window_missed", "window_missed_announce", "start_gates_closed"]);
    let mut toy2 = Toy::anchored(None);
    toy2.store.pool.remove(&Key::ActiveRotation);
    toy2.sync();
    toy2.pred(Pred::InWindow, Value::Bool(false))
        .pred(Pred::Census, Value::Int(3))
        .force(Verb::ClearWindow, Outcome::Raced);
    let (fired, _) = toy2.run();
    assert!(
        fired.contains(&"window_missed".to_string())
            && !fired.contains(&"window_missed_announce".to_string())
    );
}

#[test]
fn a_new_rotation_is_anchored_before_any_other_effect() {
    let mut toy = Toy::anchored(None);
    toy.store.pool.remove(&Key::ActiveRotation);
    toy.sync();
    toy.pick = Some("c1".into());
    let (fired, _) = toy.run();
    ends_with(
        &fired,
        &[
            "choose_surge",
            "surge_anchor",
            "surge_started",
            "dispatch_pending",
            "pending_entry",
            "pending_protect",
            "pending_create_placeholder",
            "pending_placeholder_created",
        ],
    );
    assert_eq!(toy.log[0], "annotate_if(Object(Pool), active-rotation=c1)");
}
