//! The rule tables: the spec's catalogue is present, bad rules are reported precisely, the
//! generated docs are fresh, and `rules diff` reports exactly the semantic changes.
use std::path::{Path, PathBuf};
use std::process::Command;

use noderotation::rulebook::{Rulebook, render};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rules() -> Rulebook {
    Rulebook::load_dir(&repo().join("rules")).unwrap_or_else(|d| {
        panic!(
            "rules/ fails its check:\n{}",
            d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("\n")
        )
    })
}

/// The 19 keys of the §5.3 annotation reference.
const SPEC_KEYS: [&str; 19] = [
    "active-rotation",
    "active-rotation-state",
    "draining-at",
    "surge-wait",
    "surge-path",
    "rotation-mode",
    "window-opened-at",
    "state",
    "started-at",
    "failed-at",
    "retry-count",
    "surge-claim",
    "surge-for",
    "do-not-disrupt",
    "do-not-disrupt-owned",
    "cordoned",
    "last-failure-at",
    "freeze",
    "last-rotation-at",
];

/// The 12 rows of the §5.3 transition table: (from, event, to).
const SPEC_ROWS: [(&str, &str, &str); 12] = [
    ("none", "selected inside the window", "pending"),
    ("none", "forceful fallback", "draining"),
    ("pending", "every reconcile", "pending"),
    ("pending", "surge_ready", "draining"),
    ("pending", "readyTimeout", "failed"),
    ("pending", "force-expiring", "expired"),
    ("draining", "no deletionTimestamp", "draining"),
    ("draining", "drain > tGP + buffer", "draining"),
    ("draining", "NodeClaim gone", "success"),
    ("failed", "backoff + gates passed", "pending"),
    ("failed", "deletionTimestamp", "expired"),
    ("expired", "anchor still present", "expired"),
];

#[test]
fn the_spec_catalogue_is_in_the_rules_and_in_the_docs() {
    let book = rules();
    let keys: Vec<&str> = book.annotations.keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys.len(), 19);
    for key in SPEC_KEYS {
        assert!(keys.contains(&key), "annotation `{key}` missing from rules/annotations.ron");
    }
    assert_eq!(
        book.annotations.anchor_clear_set,
        [
            "active-rotation",
            "active-rotation-state",
            "draining-at",
            "surge-wait",
            "surge-path",
            "rotation-mode"
        ]
    );
    assert_eq!(book.spec_table.len(), 12);
    for (i, (from, event, to)) in SPEC_ROWS.iter().enumerate() {
        let row = &book.spec_table[i];
        assert_eq!(
            (row.n as usize, row.from.as_str(), row.event.as_str(), row.to.as_str()),
            (i + 1, *from, *event, *to)
        );
    }
    let docs = repo().join("docs");
    let annotations =
        std::fs::read_to_string(docs.join("annotations.md")).expect("docs/annotations.md");
    for key in SPEC_KEYS {
        assert!(annotations.contains(&format!("/{key}`")), "docs/annotations.md lacks `{key}`");
    }
    let transitions =
        std::fs::read_to_string(docs.join("transitions.md")).expect("docs/transitions.md");
    for (from, event, to) in SPEC_ROWS {
        let line = format!("| `{from}` | {event} | `{to}` |");
        assert!(transitions.contains(&line), "docs/transitions.md lacks spec row {line}");
    }
    // Every rule a spec row names exists, and every row id appears in the docs.
    for (_, row) in book.rows() {
        assert!(
            transitions.contains(&format!("`{}`", row.decl.id)),
            "docs lack rule `{}`",
            row.decl.id
        );
    }
}

#[test]
fn generated_docs_are_fresh() {
    let book = rules();
    let mut stale = Vec::new();
    for (name, content) in render::all(&book) {
        let path = repo().join("docs").join(name);
        if std::fs::read_to_string(&path).unwrap_or_default() != content {
            stale.push(format!("docs/{name}"));
        }
    }
    assert!(
        stale.is_empty(),
        "generated docs are stale: {}\nregenerate them with `cargo run -- docs` and commit the result",
        stale.join(", ")
    );
}

/// A copy of the minimal fixture rulebook with one textual edit.
fn fixture_with(edit: (&str, &str, &str)) -> Result<Rulebook, String> {
    fixture_with_all(&[edit])
}

/// A copy of the minimal fixture rulebook with textual edits, in order.
fn fixture_with_all(edits: &[(&str, &str, &str)]) -> Result<Rulebook, String> {
    let src = repo().join("tests/fixtures/rules-min");
    let tag: usize = edits.iter().map(|(_, from, to)| from.len() + to.len()).sum();
    let dir = tempdir(&format!("bad-{tag}"));
    for f in noderotation::rulebook::check::FILES {
        let mut text = std::fs::read_to_string(src.join(f)).expect("fixture file");
        for (file, from, to) in edits {
            if f == *file {
                assert!(text.contains(from), "fixture {f} lacks {from:?}");
                text = text.replacen(from, to, 1);
            }
        }
        std::fs::write(dir.join(f), text).expect("write fixture");
    }
    let shown = Path::new("fixture");
    let sources: Vec<noderotation::rulebook::Source> = noderotation::rulebook::check::FILES
        .iter()
        .map(|f| noderotation::rulebook::Source {
            path: shown.join(f).display().to_string(),
            text: std::fs::read_to_string(dir.join(f)).expect("read back"),
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    Rulebook::from_sources(&sources)
        .map_err(|d| d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("\n"))
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "noderotation-test-{}-{tag}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn the_minimal_fixture_is_valid() {
    fixture_with(("spec-table.ron", "picked", "picked")).expect("fixture checks clean");
}

#[test]
fn bad_rules_are_reported_with_file_line_and_column() {
    let cases: [(&str, (&str, &str, &str)); 13] = [
        ("unknown verb", ("transitions.ron", "emit(done)", "shout(done)")),
        ("unknown annotation key", ("transitions.ron", "cand[since]", "cand[sinse]")),
        ("guard syntax error", ("transitions.ron", "cand == nil", "cand == == nil")),
        ("duplicate row id", ("transitions.ron", "id: \"wait\"", "id: \"claim\"")),
        ("type error", ("transitions.ron", "> 15m", "> now")),
        ("unknown enum value", ("transitions.ron", "[none, busy]", "[none, bsy]")),
        ("ron syntax error", ("vocabulary.ron", "doc: \"d\")],", "doc: \"d\"],")),
        (
            "a row's `)` missing at the end of its line",
            (
                "transitions.ron",
                "spec: \"s\"),\n                (id: \"dispatch\"",
                "spec: \"s\",\n                (id: \"dispatch\"",
            ),
        ),
        (
            "unreachable row",
            (
                "transitions.ron",
                "(id: \"claim\"",
                "(id: \"early\", then: Requeue(\"1m\"), spec: \"s\"),\n                (id: \"claim\"",
            ),
        ),
        (
            "state with no handler",
            (
                "transitions.ron",
                "handles: [\"none\", \"busy\", \"done\"]",
                "handles: [\"none\", \"busy\"]",
            ),
        ),
        ("announce without a won write", ("transitions.ron", "out == won and ", "")),
        ("unknown goto target", ("transitions.ron", "Goto(\"work\")", "Goto(\"wrok\")")),
        ("nil compared with a non-nil value", ("transitions.ron", "cand == nil", "np == nil")),
    ];
    let mut report = String::new();
    for (name, edit) in cases {
        let err = fixture_with(edit).expect_err(name);
        assert!(err.starts_with("fixture/"), "{name}: no file:line:col in {err}");
        report.push_str(&format!("## {name}\n{err}\n\n"));
    }
    insta::assert_snapshot!(report);
}

/// A `holds=` guard is re-evaluated on the write's fresh read: it must be a bool and may name
/// only what that read rebinds (`np`) or what no read changes (`policy`, `now`).
#[test]
fn a_holds_guard_may_name_only_what_the_fresh_read_rebinds() {
    let param = (
        "vocabulary.ron",
        "(name: \"from\", ty: States, named: true),",
        "(name: \"from\", ty: States, named: true),\n            (name: \"holds\", ty: Guard, named: true, optional: true),",
    );
    let with = |guard: &str| {
        let to = format!("from=[none, busy], holds={guard}, set=");
        fixture_with_all(&[param, ("transitions.ron", "from=[none, busy], set=", to.as_str())])
    };
    with("now == now").expect("a guard over now is accepted");
    let err = with("cand.state == busy").expect_err("cand is the pass's copy");
    assert!(err.contains("may name only np, policy and now (found `cand`)"), "{err}");
    let err = with("now").expect_err("not a bool");
    assert!(err.contains("takes a bool guard"), "{err}");
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_noderotation"))
}

fn copy_rules(tag: &str, edit: impl Fn(&str, String) -> String) -> PathBuf {
    let dir = tempdir(tag);
    for f in noderotation::rulebook::check::FILES {
        let text = std::fs::read_to_string(repo().join("rules").join(f)).expect("rules file");
        std::fs::write(dir.join(f), edit(f, text)).expect("write copy");
    }
    dir
}

#[test]
fn rules_diff_names_a_changed_guard_and_exits_1() {
    let old = copy_rules("diff-old", |_, t| t);
    let new = copy_rules("diff-new", |f, t| {
        if f == "transitions.ron" {
            t.replacen("claim.state in [pending, draining]", "claim.state in [pending]", 1)
        } else {
            t
        }
    });
    let out = bin().args(["rules", "diff"]).arg(&old).arg(&new).output().expect("run rules diff");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("| guard: conjunct changed | `claim.state in [pending, draining]` | `claim.state in [pending]` |"),
        "{text}"
    );
    assert!(
        text.contains("| `sweep_unanchored_in_flight` | `sweep_claim` #1/3, first · §5.3 sweep"),
        "{text}"
    );
    assert_eq!(text.matches("\n| `").count(), 1, "exactly one change expected:\n{text}");
    let _ = (std::fs::remove_dir_all(old), std::fs::remove_dir_all(new));
}

#[test]
fn rules_diff_of_a_reformatted_copy_has_no_semantic_changes() {
    let old = copy_rules("fmt-old", |_, t| t);
    let new = copy_rules("fmt-new", |f, t| {
        // Comments, spacing and line breaks change; meaning does not.
        if f != "transitions.ron" {
            return format!("// reformatted\n{t}");
        }
        // Only inside strings: " and " does not occur in this file's comments.
        let body: String = t
            .lines()
            .map(|l| {
                if l.contains("when: \"") {
                    l.replace(" and ", "  and\n   ").replace("(np)", "( np )")
                } else if l.ends_with("then: Continue,") {
                    format!("{l} // go on")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        body
    });
    let out = bin().args(["rules", "diff"]).arg(&old).arg(&new).output().expect("run rules diff");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("no semantic changes"), "{text}");
    let _ = (std::fs::remove_dir_all(old), std::fs::remove_dir_all(new));
}

#[test]
fn rules_diff_reports_added_and_removed_rows_and_order() {
    let old = copy_rules("rows-old", |_, t| t);
    let new = copy_rules("rows-new", |f, t| {
        if f == "transitions.ron" {
            t.replacen("(id: \"pending_wait\"", "(id: \"pending_idle\"", 1)
        } else if f == "spec-table.ron" {
            t.replace("\"pending_wait\"", "\"pending_idle\"")
        } else {
            t
        }
    });
    let out = bin().args(["rules", "diff"]).arg(&old).arg(&new).output().expect("run rules diff");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line =
        |id: &str| text.lines().find(|l| l.starts_with(&format!("| `{id}` |"))).unwrap_or("");
    assert!(line("pending_idle").contains("| added |"), "{text}");
    assert!(line("pending_wait").contains("| removed |"), "{text}");
    assert!(text.contains("| rule rows mapped | — | `pending_idle` |"), "the remap shows:\n{text}");
    let _ = (std::fs::remove_dir_all(old), std::fs::remove_dir_all(new));
}

#[test]
fn the_embedded_rules_are_the_rules_directory() {
    let embedded = noderotation::engine::embedded_rulebook();
    let d = noderotation::rulebook::diff::diff(&embedded, &rules());
    assert!(d.is_empty() && d.documentation == 0, "binary embeds stale rules: {d:?}");
    // Every handler and row compiles onto the generated vocabulary.
    let engine = noderotation::engine::Engine::embedded();
    assert_eq!(engine.row_ids().count(), rules().rows().count());
}

/// `rules diff` of one kind of edit each, as the pull-request comment shows it (the temporary
/// directories' names are replaced by `old` and `new`).
#[test]
fn rules_diff_shows_each_kind_of_change_in_context() {
    type Edit = (&'static str, &'static str, &'static str);
    let moved_from = "                (id: \"pending_surge_unschedulable\", when: \"surge_unschedulable(cand)\",\n                 do: [\"warn_once(cand, SurgeUnschedulable)\"], then: Continue, spec: \"SUPPLEMENT §3.3: PodScheduled=False gives a deduplicated SurgeUnschedulable with the scheduler's reason\"),\n                (id: \"pending_frozen\", when: \"frozen(np)\",\n                 then: Requeue(\"1m\"), spec: \"§5.2: escalation held while frozen\"),\n";
    let moved_to = "                (id: \"pending_frozen\", when: \"frozen(np)\",\n                 then: Requeue(\"1m\"), spec: \"§5.2: escalation held while frozen\"),\n                (id: \"pending_surge_unschedulable\", when: \"surge_unschedulable(cand)\",\n                 do: [\"warn_once(cand, SurgeUnschedulable)\"], then: Continue, spec: \"SUPPLEMENT §3.3: PodScheduled=False gives a deduplicated SurgeUnschedulable with the scheduler's reason\"),\n";
    let cases: Vec<(&str, Vec<Edit>)> = vec![
        (
            "a guard negated",
            vec![(
                "transitions.ron",
                "when: \"surge_unschedulable(cand)\"",
                "when: \"not surge_unschedulable(cand)\"",
            )],
        ),
        (
            "a conjunct added",
            vec![(
                "transitions.ron",
                "when: \"not surge_headroom(np, pick)\"",
                "when: \"not surge_headroom(np, pick) and in_window(now)\"",
            )],
        ),
        ("a row moved", vec![("transitions.ron", moved_from, moved_to)]),
        ("a verb removed", vec![("transitions.ron", "\"event(np, ForcefulFallback)\", ", "")]),
        (
            "a requeue changed",
            vec![(
                "transitions.ron",
                "(id: \"pending_wait\", then: Requeue(\"30s\")",
                "(id: \"pending_wait\", then: Requeue(\"1m\")",
            )],
        ),
        (
            "a definition changed",
            vec![(
                "transitions.ron",
                "deadline(pick) - now < t_rot(pick)",
                "deadline(pick) - now <= t_rot(pick)",
            )],
        ),
        (
            "a spec-table row remapped",
            vec![(
                "spec-table.ron",
                "rules: [\"pending_surge_path_unknown\", \"pending_surge_ready\", \"pending_surge_draining\", \"pending_surge_delete\"]",
                "rules: [\"pending_surge_ready\", \"pending_surge_draining\", \"pending_surge_delete\", \"pending_wait\"]",
            )],
        ),
        (
            "an annotation key changed",
            vec![
                (
                    "annotations.ron",
                    "value: Enum([\"provisioned\", \"absorbed\"])",
                    "value: Enum([\"provisioned\", \"absorbed\", \"unknown\"])",
                ),
                (
                    "annotations.ron",
                    "purpose: \"Which §3.3 path reserved the capacity; qualifies surge-wait.\"",
                    "purpose: \"How the capacity came about.\"",
                ),
            ],
        ),
        (
            "a spec obligation dropped",
            vec![(
                "obligations.ron",
                "            Conjunct(of: \"start_gates\", expr: \"since_last_rotation(np) >= policy.cooldown_after\"),\n",
                "",
            )],
        ),
    ];
    let mut report = String::new();
    for (name, edits) in cases {
        let tag = name.replace(' ', "-");
        let old = copy_rules(&format!("kinds-old-{tag}"), |_, t| t);
        let new = copy_rules(&format!("kinds-new-{tag}"), |f, mut t| {
            for (file, from, to) in &edits {
                if *file == f {
                    assert!(t.contains(from), "{name}: {f} lacks {from:?}");
                    t = t.replacen(from, to, 1);
                }
            }
            t
        });
        let out = bin().args(["rules", "diff"]).arg(&old).arg(&new).output().expect("rules diff");
        let text = String::from_utf8_lossy(&out.stdout)
            .replace(&old.display().to_string(), "old")
            .replace(&new.display().to_string(), "new");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() == Some(1) && err.is_empty(), "{name}: {text}{err}");
        report.push_str(&format!("## {name}\n{text}\n"));
        let _ = (std::fs::remove_dir_all(old), std::fs::remove_dir_all(new));
    }
    insta::assert_snapshot!(report);
}

/// Each edit that breaks the spec outright fails `rules check` with a diagnostic that names the
/// spec row (or step) and the rule row or handler.
#[test]
fn rules_check_rejects_edits_that_break_a_spec_obligation() {
    let cases: [(&str, &str, &str, &str, &[&str]); 4] = [
        (
            "the rollback no longer reaps the surge claim",
            "transitions.ron",
            "\"reap_surge_claim(cand)\", ",
            "",
            &[
                "spec row 5 (pending → failed: readyTimeout)",
                "handler `rollback_pending`",
                "`rollback_cleanup`",
                "`reap_surge_claim(cand)`: it is missing",
            ],
        ),
        (
            "gate B dropped from the start gates",
            "transitions.ron",
            " and since_last_failure(np) >= policy.failure_pause",
            "",
            &[
                "§5.2 step 2",
                "definition `start_gates` (used by rows `start_gates_closed`, `failed_retry`)",
                "`since_last_failure(np) >= policy.failure_pause`; it is missing",
            ],
        ),
        (
            "rotation-mode dropped from the anchor clear set",
            "annotations.ron",
            "        \"rotation-mode\",\n",
            "",
            &[
                "§5.3 anchor clear",
                "`anchor_clear_set` to contain `rotation-mode`",
                "`complete_cleanup`",
            ],
        ),
        (
            "the readyTimeout guard negated",
            "transitions.ron",
            "when: \"elapsed(cand[started-at]) > policy.ready_timeout\"",
            "when: \"not (elapsed(cand[started-at]) > policy.ready_timeout)\"",
            &["spec row 5", "row `pending_ready_timeout`", "it is negated"],
        ),
    ];
    for (name, file, from, to, expect) in cases {
        let dir = copy_rules(&format!("oblige-{}", name.len()), |f, t| {
            if f == file {
                assert!(t.contains(from), "{name}: {f} lacks {from:?}");
                t.replacen(from, to, 1)
            } else {
                t
            }
        });
        let out = bin().args(["rules", "check"]).arg(&dir).output().expect("rules check");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: accepted\n{err}");
        for e in expect {
            assert!(err.contains(e), "{name}: expected {e:?} in\n{err}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
    let shipped = bin().args(["rules", "check"]).arg(repo().join("rules")).output().expect("check");
    assert!(shipped.status.success(), "{}", String::from_utf8_lossy(&shipped.stderr));
}
