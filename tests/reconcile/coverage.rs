//! Row coverage and the row-mutation run over the scenarios of the other modules. The coverage
//! check runs every scenario itself, so it holds whichever tests ran before it in the process.

use super::*;
use super::{
    completion::*, crash::*, feasibility::*, hand_edits::*, pending::*, policy::*, reap::*,
    rollback::*, slots::*, start::*, surge::*, sweep::*, writes::*,
};

/// Every scenario of the feature modules, for the coverage and mutation checks below.
const SCENARIOS: &[(&str, fn())] = &[
    ("full_surge_rotation", full_surge_rotation_reserves_capacity_then_drains_and_completes_once),
    (
        "surge_path_unknown",
        surge_ready_before_the_host_claim_is_matched_holds_the_escalation_until_the_path_is_known,
    ),
    ("cooldown", cooldown_after_a_success_holds_the_next_start),
    ("ready_timeout", ready_timeout_rolls_back_reaps_the_surge_claim_and_pauses_the_pool),
    ("force_expiry_early", force_expiry_seen_early_is_expired_once_cleaned_up_and_released),
    ("force_expiry_late", force_expiry_seen_late_completes_as_expired_without_cooldown),
    ("crash_before_delete", crash_between_the_draining_write_and_the_delete_reissues_the_delete),
    (
        "surge_lost_before_delete",
        a_surge_host_lost_before_the_reissued_delete_sends_the_rotation_back_to_pending,
    ),
    ("placeholder_first", the_placeholder_is_deleted_before_the_old_claim_in_the_same_pass),
    (
        "crash_before_placeholder_delete",
        crash_before_the_placeholder_delete_releases_it_in_draining_then_deletes_the_claim,
    ),
    (
        "finalized_during_rollback",
        claim_finalized_during_the_rollback_announces_no_failure_and_completes_as_expired,
    ),
    ("stale_pending_view", a_stale_pending_view_does_not_undo_a_rollback),
    ("stale_retry", failed_to_pending_retry_does_not_reenter_on_a_stale_read),
    (
        "surge_host_taken",
        a_placeholder_on_the_surge_host_of_another_rotation_waits_for_that_rotation,
    ),
    (
        "surge_host_taken_stale",
        a_surge_host_another_rotation_recorded_since_the_cache_was_read_is_not_taken,
    ),
    ("reap_another_surge", a_rollback_never_reaps_the_surge_claim_another_rotation_recorded),
    ("static_gate", static_gate_lets_an_anchored_rotation_finish_but_blocks_new_starts_and_retries),
    ("governance_lost", governance_lost_mid_rotation_rolls_back_in_the_normative_order),
    ("sweep_orphans", startup_sweep_cleans_orphans_and_fails_unanchored_in_flight_claims),
    ("sweep_anchored", startup_sweep_leaves_markers_of_an_anchored_rotation),
    ("empty_anchor", an_empty_anchor_is_read_as_absent_and_warned),
    ("operator_protections", operator_cordon_and_do_not_disrupt_are_never_removed),
    ("operator_opt_out", a_candidate_with_the_operators_do_not_disrupt_is_skipped),
    ("earliest_deadline", earliest_deadline_first_with_mixed_expire_after),
    ("freeze", freeze_holds_a_pending_rotation_but_readytimeout_still_rolls_it_back),
    ("window_edge", window_edge_verdicts_stamp_defer_settle_and_miss_once),
    ("window_stuck_drain", a_stuck_drain_does_not_silence_window_missed),
    ("headroom", insufficient_headroom_is_warned_once_per_distinct_shortfall),
    ("forceful_fallback", forceful_fallback_only_when_enabled_and_too_close_to_the_deadline),
    ("conflicts", conflicting_writes_are_retried_and_announced_exactly_once),
    ("policy_conflict", tied_policies_are_a_conflict_warned_once_and_rotate_nothing),
    ("policy_invalid", an_invalid_policy_governs_nothing),
    (
        "governance_lost_unowned",
        governance_lost_with_an_anchor_another_pass_cleared_announces_nothing,
    ),
    ("window_unreadable", unreadable_window_stamp_outside_the_window_is_cleared_silently),
    ("freeze_unreadable", unreadable_freeze_counts_as_frozen_and_is_warned),
    ("infeasible", a_fatal_feasibility_finding_blocks_new_starts),
    ("anchor_lost", a_start_whose_anchor_write_loses_does_nothing),
    ("expired_cleanup", an_expired_claim_still_anchored_is_cleaned_up_without_announcing),
    ("complete_unowned", completion_already_released_by_another_pass_announces_nothing),
    ("placeholder_refused", a_placeholder_the_clamp_lowers_to_nothing_is_refused_and_rolled_back),
    ("placeholder_class_unsafe", no_placeholder_is_created_while_its_priority_class_is_unsafe),
    ("nothing_to_reserve", a_node_with_nothing_to_reserve_is_rotated_without_a_surge),
    ("retry_lanes", a_retry_from_failed_rechecks_the_lane_limit),
    (
        "future_started_at",
        a_started_at_in_the_future_is_warned_and_restamped_so_ready_timeout_comes,
    ),
    ("future_failed_at", a_failed_at_in_the_future_is_warned_and_not_obeyed),
    ("nothing_to_reserve_empty", an_empty_node_is_rotated_without_a_surge),
    ("nothing_to_reserve_lost", a_node_with_nothing_to_reserve_whose_anchor_went_is_not_deleted),
    ("expiry_unowned", force_expiry_of_a_finalized_claim_seen_through_a_stale_cache_owns_nothing),
    ("drain_stuck", a_drain_past_tgp_plus_buffer_is_reported_stuck_and_keeps_the_gate),
    ("surge_host_gone", a_surge_host_gone_behind_a_lagging_view_holds_the_delete),
    (
        "surge_host_gone_own_copy",
        a_surge_host_gone_since_this_process_froze_it_holds_the_reissued_delete,
    ),
    ("expired_cleanup_marks", a_claim_launched_after_the_expiry_mark_is_marked_by_the_cleanup),
    ("expiry_marks_first", a_force_expiry_marks_the_claims_launched_for_a_placeholder_already_gone),
    (
        "lagging_completion_marks",
        a_restarted_completion_whose_view_lags_the_placeholder_still_marks_its_launch,
    ),
    ("failed_expired", a_failed_claim_still_anchored_and_force_expired_is_claimed_once),
    (
        "mirror_reasserted",
        a_draining_mirror_stripped_by_a_gitops_sync_is_reasserted_and_the_rotation_succeeds,
    ),
    (
        "foreign_anchor",
        an_anchor_naming_another_pools_claim_is_cleared_with_a_warning_and_touches_nothing,
    ),
    ("foreign_reap", the_readytimeout_reap_never_deletes_another_pools_claim),
    ("surge_unschedulable", an_unschedulable_placeholder_is_warned_once_with_the_schedulers_reason),
    ("forceful_crash", a_crash_after_the_first_write_of_a_forceful_start_never_becomes_a_surge),
    ("mirrors_write_once", a_retried_escalation_keeps_the_first_draining_mirrors),
    (
        "failed_at_unreadable",
        a_failed_claim_without_a_readable_failed_at_is_retried_once_not_restarted_every_minute,
    ),
    (
        "gate_stamp_unreadable",
        an_unreadable_gate_stamp_is_warned_once_and_restamped_so_the_gate_reopens,
    ),
    ("anchor_removed", an_anchor_removed_by_hand_is_repaired_within_a_tick),
    (
        "pool_deleted",
        a_nodepool_deleted_mid_rotation_releases_its_placeholder_and_markers_within_a_tick,
    ),
    ("tick_fresh_anchors", the_tick_judges_orphans_on_a_fresh_read_of_the_anchors),
    ("placeholder_impostor", a_pod_named_like_the_placeholder_is_never_taken_for_surge_capacity),
    ("sweep_by_uid", the_sweep_deletes_the_placeholder_it_judged_by_its_uid),
    ("unfreeze_fresh", unfreeze_finds_the_surge_host_from_a_fresh_read_not_a_stale_node_list),
    ("never_ready_reap", a_surge_node_that_never_turns_ready_is_reaped_at_rollback),
    ("surge_outlives_no_exit", a_never_ready_surge_claim_outlives_no_exit_of_its_rotation),
    (
        "sweep_reaps_marked_only",
        the_sweep_reaps_only_a_marked_surge_claim_that_never_turned_ready_and_hosts_nothing,
    ),
    ("delete_conflict", a_conflict_on_the_reap_or_placeholder_delete_is_rechecked_and_retried),
    ("stale_start", a_start_judged_on_a_lagging_cache_loses_to_a_failure_stamped_since),
    ("fresh_start_gates", a_start_gate_closed_on_the_fresh_read_holds_the_start),
    ("fresh_retry_gates", a_retry_whose_gate_closed_on_the_fresh_read_is_held),
    (
        "stalled_surge_ready",
        a_pass_stalled_in_the_surge_ready_writes_does_not_drain_a_rolled_back_claim,
    ),
    (
        "stalled_rollback",
        a_rollback_stalled_before_its_failure_write_does_not_fail_the_next_attempt,
    ),
    (
        "stale_failed_release",
        a_release_judged_on_a_stale_failed_view_keeps_the_retry_that_owns_the_anchor,
    ),
    ("node_taken", a_candidate_whose_node_another_rotation_drains_onto_is_never_cordoned),
    ("surge_host_frozen", a_surge_host_frozen_for_a_claim_still_draining_is_not_taken),
    ("escalation_writes", a_surge_escalation_writes_each_object_once),
];

#[test]
fn every_rule_row_fires_in_some_scenario() {
    for (name, scenario) in SCENARIOS {
        let ok = std::panic::catch_unwind(scenario).is_ok();
        assert!(ok || *name == "crash_before_delete", "scenario {name} failed");
    }
    let fired = coverage();
    let engine = engine();
    let missing: Vec<&str> = engine.row_ids().filter(|id| !fired.contains(*id)).collect();
    assert!(missing.is_empty(), "rule rows no test fired ({}): {missing:?}", missing.len());
}

/// Row mutation: for every row, a copy of `rules/` whose guard is negated (`when: "not (G)"`,
/// or `when: "false"` for a row without one). Each mutant must be rejected by the checker or
/// make some scenario fail. Prints killed/total. Run by tests/all.sh (it silences panics, so
/// it runs alone: `cargo test --test reconcile -- --ignored --test-threads=1`).
#[test]
#[ignore = "mutation run: tests/all.sh runs it on its own thread"]
fn every_rule_guard_matters() {
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    let book = noderotation::rulebook::Rulebook::load_dir(&rules).expect("rules load");
    let source = std::fs::read_to_string(rules.join("transitions.ron")).expect("transitions.ron");
    let dir = std::env::temp_dir().join(format!("noderotation-mutants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for f in noderotation::rulebook::check::FILES {
        std::fs::copy(rules.join(f), dir.join(f)).expect("copy rules");
    }
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (mut total, mut by_checker, mut by_tests) = (0, 0, 0);
    let mut survivors = Vec::new();
    for (_, row) in book.rows() {
        total += 1;
        let id = &row.decl.id;
        let at = source.find(&format!("id: \"{id}\"")).expect("row in source");
        let mutated = match &row.decl.when {
            Some(g) => {
                let needle = format!("when: \"{g}\"");
                let rel = source[at..].find(&needle).expect("guard in source");
                format!(
                    "{}when: \"not ({g})\"{}",
                    &source[..at + rel],
                    &source[at + rel + needle.len()..]
                )
            }
            None => {
                let end = at + format!("id: \"{id}\"").len();
                format!("{}, when: \"false\"{}", &source[..end], &source[end..])
            }
        };
        std::fs::write(dir.join("transitions.ron"), mutated).expect("write mutant");
        let engine = match noderotation::engine::Engine::load_dir(&dir) {
            Err(_) => {
                by_checker += 1;
                continue;
            }
            Ok(e) => std::sync::Arc::new(e),
        };
        let killer = SCENARIOS.iter().find(|(_, scenario)| {
            with_engine(engine.clone(), || std::panic::catch_unwind(scenario).is_err())
        });
        match killer {
            Some(_) => by_tests += 1,
            None => survivors.push(id.clone()),
        }
    }
    std::panic::set_hook(quiet);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "mutants killed: {}/{total} ({by_checker} rejected by the checker, {by_tests} by scenarios)",
        by_checker + by_tests
    );
    assert!(
        survivors.is_empty(),
        "surviving mutants (no test notices these rows' guards): {survivors:?}"
    );
}
