//! The rule tables: the spec's catalogue is present, bad rules are reported precisely, the
//! generated docs are fresh, and `rules diff` reports exactly the semantic changes.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use noderotation::rulebook::model::ObjectKind;
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

/// Keys the project added beyond the spec's reference (docs/decisions/reconciler.md).
const ADDED_KEYS: [&str; 3] = ["placeholder-uid", "surge-host", "launched-for"];

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

/// Rows the project added to the §5.3 table, numbered after the spec's (each with its decision
/// record): a surge host lost before a re-issued delete (docs/decisions/surge-host.md).
const ADDED_ROWS: [(&str, &str, &str); 1] =
    [("draining", "no deletionTimestamp, surge host lost", "pending")];

#[test]
fn the_spec_catalogue_is_in_the_rules_and_in_the_docs() {
    let book = rules();
    let keys: Vec<&str> = book.annotations.keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys.len(), SPEC_KEYS.len() + ADDED_KEYS.len(), "{keys:?}");
    for key in SPEC_KEYS.iter().chain(&ADDED_KEYS) {
        assert!(keys.contains(key), "annotation `{key}` missing from rules/annotations.ron");
    }
    assert_eq!(
        book.annotations.anchor_clear_set,
        [
            "active-rotation",
            "active-rotation-state",
            "draining-at",
            "surge-wait",
            "surge-path",
            "rotation-mode",
            // Added (docs/decisions/reconciler.md): rotation-scoped, so cleared with the rest.
            "surge-host"
        ]
    );
    assert_eq!(book.spec_table.len(), SPEC_ROWS.len() + ADDED_ROWS.len());
    for (i, (from, event, to)) in SPEC_ROWS.iter().chain(&ADDED_ROWS).enumerate() {
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
    for (from, event, to) in SPEC_ROWS.iter().chain(&ADDED_ROWS) {
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

/// Who owns each key is declared once, in rules/annotations.ron; uninstall, the sweep and the
/// simulator read it from `Key::is_ours`. The operator's `freeze` and Karpenter's
/// `do-not-disrupt` are the only keys that are not the controller's, and the controller's Node
/// markers are exactly the three the sweep looks for.
#[test]
fn key_ownership_is_declared_in_the_rules() {
    use noderotation::engine::Key;
    let theirs: Vec<Key> = Key::ALL.iter().copied().filter(|k| !k.is_ours()).collect();
    assert_eq!(theirs, [Key::DoNotDisrupt, Key::Freeze]);
    let node_markers: Vec<Key> =
        Key::ALL.iter().copied().filter(|k| k.is_ours() && k.on_nodes()).collect();
    assert_eq!(node_markers, [Key::SurgeFor, Key::DoNotDisruptOwned, Key::Cordoned]);
    let owned: Vec<Key> = noderotation::cli::uninstall::owned_keys().collect();
    assert_eq!(owned.len(), Key::ALL.len() - 2);
}

#[test]
fn generated_files_are_fresh() {
    let book = rules();
    let mut stale = Vec::new();
    let files = noderotation::cli::rules::generated(&book).expect("generated files");
    for (path, content) in &files {
        if std::fs::read_to_string(repo().join(path)).unwrap_or_default() != *content {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "generated files are stale: {}\nregenerate them with `cargo run -- docs` and commit the result",
        stale.join(", ")
    );
    let named = |p: &str| files.iter().any(|(path, _)| path == std::path::Path::new(p));
    assert!(named("docs/transitions.md") && named("crds/rotationpolicy.yaml"));
    assert!(named("deploy/helm/noderotation/crds/rotationpolicy.yaml"), "the chart's copy");
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
fn a_report_tag_belongs_to_sweep_rows_only() {
    let err = fixture_with((
        "transitions.ron",
        "(id: \"gone\", when: \"cand == nil\", then: Requeue(\"1m\"), spec: \"s\")",
        "(id: \"gone\", when: \"cand == nil\", then: Requeue(\"1m\"), spec: \"s\", report: PoolCleaned)",
    ))
    .expect_err("a pool row with a report tag");
    assert!(err.contains("row `gone`: `report` tags the sweep's report"), "{err}");
}

#[test]
fn the_minimal_fixture_is_valid() {
    fixture_with(("spec-table.ron", "picked", "picked")).expect("fixture checks clean");
}

/// An Event message names only declared slots and annotation keys; a slot no message uses is
/// an error too.
#[test]
fn event_messages_are_checked_templates() {
    let cases = [
        ("{claim} is dnoe {when}", 16, "unknown placeholder `{when}`"),
        ("{claim} is done {key:sinse}", 16, "`{key:sinse}` names no key"),
        ("{claim} is done {", 16, "bad message template"),
        ("it is done", 17, "slot `claim` is used by no reason's message"),
    ];
    for (to, line, want) in cases {
        let err = fixture_with(("vocabulary.ron", "{claim} is done", to)).expect_err(to);
        let at = format!("fixture/vocabulary.ron:{line}:");
        assert!(err.starts_with(&at), "{to}: not at {at} {err}");
        assert!(err.contains(want), "{to}: want {want:?} in {err}");
    }
    fixture_with(("vocabulary.ron", "{claim} is done", "{claim} is done {key:since} {{}}"))
        .expect("a key and literal braces are fine");
}

#[test]
fn bad_rules_are_reported_with_file_line_and_column() {
    let cases: [(&str, (&str, &str, &str)); 14] = [
        ("unknown verb", ("transitions.ron", "emit(done)", "shout(done)")),
        ("unknown annotation key", ("transitions.ron", "cand[since]", "cand[sinse]")),
        ("guard syntax error", ("transitions.ron", "cand == nil", "cand == == nil")),
        ("duplicate row id", ("transitions.ron", "id: \"wait\"", "id: \"claim\"")),
        ("type error", ("transitions.ron", "> 15m", "> now")),
        ("unknown enum value", ("transitions.ron", "[none, busy]", "[none, bsy]")),
        ("unknown outcome value", ("transitions.ron", "out == won", "out == wun")),
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
    with("cand.name == cand.name").expect("a name is the same on any read");
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
        text.contains(
            "| `sweep_unanchored_in_flight` | `sweep_claim` #2/4, below `sweep_launched_surge` · §5.3 sweep"
        ),
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
    let moved_from = "                (id: \"pending_surge_unschedulable\", when: \"surge_unschedulable(cand)\",\n                 do: [\"warn_once(cand, SurgeUnschedulable)\"], then: Continue, spec: \"§3.3: PodScheduled=False gives a deduplicated SurgeUnschedulable with the scheduler's reason\"),\n                (id: \"pending_frozen\", when: \"frozen(np)\",\n                 then: Requeue(\"1m\"), spec: \"§5.2: escalation held while frozen\"),\n";
    let moved_to = "                (id: \"pending_frozen\", when: \"frozen(np)\",\n                 then: Requeue(\"1m\"), spec: \"§5.2: escalation held while frozen\"),\n                (id: \"pending_surge_unschedulable\", when: \"surge_unschedulable(cand)\",\n                 do: [\"warn_once(cand, SurgeUnschedulable)\"], then: Continue, spec: \"§3.3: PodScheduled=False gives a deduplicated SurgeUnschedulable with the scheduler's reason\"),\n";
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

// ---- The design document: every citation resolves to one of its headings -----------------

/// The section sign, spelled out so that this file's own code is not read as a citation.
const SECTION: char = '\u{a7}';

/// Files of the repository (tracked by git; without git, walked, skipping `target/` and
/// hidden entries), with their text. Files that are not UTF-8 are left out.
fn repository_files() -> Vec<(String, String)> {
    let root = repo();
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success() && !o.stdout.is_empty())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split('\0')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        });
    let paths = listed.unwrap_or_else(|| {
        let mut found = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().to_string();
                if name.starts_with('.') || (dir == root && name == "target") {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path.strip_prefix(&root).expect("under the root");
                    found.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        found
    });
    let mut files: Vec<(String, String)> = paths
        .into_iter()
        .filter_map(|p| {
            let bytes = std::fs::read(root.join(&p)).ok()?;
            Some((p, String::from_utf8(bytes).ok()?))
        })
        .collect();
    files.sort();
    files
}

/// The design document's headings, outside fenced code blocks: (heading text, anchor).
fn design_headings() -> Vec<(String, String)> {
    let design = std::fs::read_to_string(repo().join("docs/design.md")).expect("docs/design.md");
    let mut fenced = false;
    let mut headings = Vec::new();
    for line in design.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.bytes().take_while(|b| *b == b'#').count();
        if fenced || hashes == 0 || hashes > 6 || line.as_bytes().get(hashes) != Some(&b' ') {
            continue;
        }
        let text = line[hashes + 1..].trim().to_string();
        let anchor = render::heading_anchor(&text);
        headings.push((text, anchor));
    }
    headings
}

/// The section numbers the design has as headings (`## §5.3 State model` -> `5.3`), with titles.
fn design_sections() -> Vec<(String, String)> {
    design_headings()
        .into_iter()
        .filter_map(|(text, _)| {
            let number = render::citation_at(&text, 0)?.to_string();
            let title = text[SECTION.len_utf8() + number.len()..].trim().to_string();
            Some((number, title))
        })
        .collect()
}

/// Every section citation in the repository (`rules/`, `src/`, `docs/`, `tests/`, `benches/`,
/// `deploy/`, the README, ARCHITECTURE.md, `build.rs`: every tracked file) names a section that
/// is a heading of `docs/design.md`.
#[test]
fn every_section_citation_resolves_to_a_design_heading() {
    let sections: Vec<String> = design_sections().into_iter().map(|(n, _)| n).collect();
    assert!(!sections.is_empty(), "docs/design.md has no section headings");
    let mut unresolved = Vec::new();
    for (path, text) in repository_files() {
        for (i, line) in text.lines().enumerate() {
            for (at, _) in line.match_indices(SECTION) {
                let after = &line[at + SECTION.len_utf8()..];
                match render::citation_at(line, at) {
                    Some(number) if sections.iter().any(|s| s == number) => {}
                    Some(number) => unresolved.push(format!(
                        "{path}:{}: {SECTION}{number} is not a heading of docs/design.md",
                        i + 1
                    )),
                    None if after.trim_start().starts_with(|c: char| c.is_ascii_digit()) => {
                        unresolved.push(format!(
                            "{path}:{}: write a citation without a space after the section sign",
                            i + 1
                        ))
                    }
                    None => {}
                }
            }
        }
    }
    assert!(
        unresolved.is_empty(),
        "{} citation(s) do not resolve (add the section to docs/design.md or cite one it has):\n{}",
        unresolved.len(),
        unresolved.join("\n")
    );
}

/// No tracked file points at documents that are not in the repository: the design is
/// `docs/design.md`, cited by section number.
#[test]
fn no_file_names_a_document_outside_the_repository() {
    // Spelled in pieces so that this file does not match itself.
    let outside = [
        concat!("SUPPLE", "MENT"),
        concat!("karpenter", "-facts"),
        concat!("/wo", "rk/"),
        concat!("../sha", "red"),
        concat!("000_", "06d7"),
        concat!("ADR", "-0"),
    ];
    let mut found = Vec::new();
    for (path, text) in repository_files() {
        for (i, line) in text.lines().enumerate() {
            for needle in outside {
                if line.contains(needle) {
                    found.push(format!("{path}:{}: `{needle}`: {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} line(s) name a document outside the repository; cite docs/design.md sections instead:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The renderer's section table (which the generated docs link with) is exactly the design's
/// numbered headings, and every link into the design (from a Markdown file) lands on a heading.
#[test]
fn design_links_land_on_design_headings() {
    let sections = design_sections();
    let table: Vec<(String, String)> =
        render::DESIGN_SECTIONS.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
    assert_eq!(
        table, sections,
        "render::DESIGN_SECTIONS (src/rulebook/render.rs) must list the numbered headings of docs/design.md in order"
    );
    let anchors: Vec<String> = design_headings().into_iter().map(|(_, a)| a).collect();
    let mut broken = Vec::new();
    for (path, text) in repository_files().into_iter().filter(|(p, _)| p.ends_with(".md")) {
        let prefixes: &[&str] =
            if path == "docs/design.md" { &["design.md#", "](#"] } else { &["design.md#"] };
        for (i, line) in text.lines().enumerate() {
            for prefix in prefixes {
                for (at, _) in line.match_indices(prefix) {
                    let rest = &line[at + prefix.len()..];
                    let end = rest
                        .find(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
                        .unwrap_or(rest.len());
                    let anchor = &rest[..end];
                    if !anchors.iter().any(|a| a == anchor) {
                        broken.push(format!("{path}:{}: #{anchor}", i + 1));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "links to missing design headings:\n{}", broken.join("\n"));
}

/// The rows of the Markdown table in `text` whose header line is `header`, split into cells.
fn markdown_table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| l.trim() != header);
    assert!(lines.next().is_some(), "docs/design.md has no table `{header}`");
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect())
        .collect()
}

/// The design's annotation reference and transition table say what `rules/` says: the same
/// keys on the same objects, the same rows.
#[test]
fn the_design_tables_match_the_rules() {
    let book = rules();
    let design = std::fs::read_to_string(repo().join("docs/design.md")).expect("docs/design.md");
    let keys: Vec<(String, String)> = markdown_table(&design, "| key | on | value | purpose |")
        .into_iter()
        .map(|cells| (cells[0].trim_matches('`').to_string(), cells[1].clone()))
        .collect();
    let expected: Vec<(String, String)> = book
        .annotations
        .keys
        .iter()
        .map(|k| {
            let targets: Vec<&str> = k.targets.iter().map(|t| t.name()).collect();
            (k.full_key.clone().unwrap_or_else(|| k.key.clone()), targets.join(" + "))
        })
        .collect();
    assert_eq!(keys, expected, "docs/design.md §5.3 annotation table vs rules/annotations.ron");
    let rows: Vec<(String, String, String, String)> =
        markdown_table(&design, "| # | from | event | to | side effects |")
            .into_iter()
            .map(|c| {
                let plain = |s: &String| s.trim_matches('`').to_string();
                (c[0].clone(), plain(&c[1]), c[2].clone(), plain(&c[3]))
            })
            .collect();
    let expected: Vec<(String, String, String, String)> = book
        .spec_table
        .iter()
        .map(|r| (r.n.to_string(), r.from.clone(), r.event.clone(), r.to.clone()))
        .collect();
    assert_eq!(rows, expected, "docs/design.md §5.3 transition table vs rules/spec-table.ron");
}

/// The lines of the design under the heading that starts with `heading`, up to the next heading
/// of the same or a higher level (its subsections included).
fn design_part(design: &str, heading: &str) -> String {
    let level = heading.bytes().take_while(|b| *b == b'#').count();
    let mut lines = design.lines().skip_while(|l| !l.starts_with(heading));
    assert!(lines.next().is_some(), "docs/design.md has no heading `{heading}`");
    lines
        .take_while(|l| {
            let hashes = l.bytes().take_while(|b| *b == b'#').count();
            hashes == 0 || hashes > level || l.as_bytes().get(hashes) != Some(&b' ')
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The code spans (`...`) of a Markdown text.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// An Event reason as the design writes one: a CamelCase word.
fn is_reason(span: &str) -> bool {
    span.starts_with(|c: char| c.is_ascii_uppercase())
        && span.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Names only one side has, for the messages of the two tests below.
fn one_sided(design: &BTreeSet<String>, rules: &BTreeSet<String>) -> String {
    let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| {
        a.difference(b).cloned().collect::<Vec<_>>().join(", ")
    };
    format!(
        "named by the design only: [{}]; in rules/vocabulary.ron only: [{}]",
        only(design, rules),
        only(rules, design)
    )
}

/// The metric names of §4.2 (its Extensions included) are the metrics of rules/vocabulary.ron:
/// a metric is added with its design line, and the design names no metric that does not exist.
#[test]
fn the_design_names_the_metrics_of_the_rules() {
    let design = std::fs::read_to_string(repo().join("docs/design.md")).expect("docs/design.md");
    let section = design_part(&design, "### §4.2 ");
    let named: BTreeSet<String> = code_spans(&section)
        .into_iter()
        .filter(|s| s.starts_with("noderotation_"))
        .map(|s| s.split('{').next().unwrap_or(s).to_string())
        .collect();
    assert!(
        named.len() > 20,
        "§4.2 names only {} metrics: is the section still there?",
        named.len()
    );
    let declared: BTreeSet<String> =
        rules().vocabulary.metrics.iter().map(|m| m.name.clone()).collect();
    assert_eq!(
        named,
        declared,
        "docs/design.md §4.2 vs `metrics`: {}",
        one_sided(&named, &declared)
    );
}

/// The Event reasons of §4.3 (its Extensions included) are the reasons the rules record (the
/// rules' `reasons` and the feasibility warnings of `findings`), each on the object the design's
/// lists put it on.
#[test]
fn the_design_names_the_event_reasons_of_the_rules() {
    let design = std::fs::read_to_string(repo().join("docs/design.md")).expect("docs/design.md");
    let events = design_part(&design, "#### Events");
    let named: BTreeSet<String> =
        code_spans(&events).into_iter().filter(|s| is_reason(s)).map(str::to_string).collect();
    assert!(
        named.len() > 30,
        "§4.3 names only {} reasons: is the section still there?",
        named.len()
    );
    let book = rules();
    let voc = &book.vocabulary;
    let declared: BTreeSet<String> = voc.event_reasons().into_iter().map(str::to_string).collect();
    assert_eq!(
        named,
        declared,
        "docs/design.md §4.3 vs the rules: {}",
        one_sided(&named, &declared)
    );

    // The object: the design's two lists, against `kind` (a reason) or the layer (a finding).
    let kind_of = |name: &str| {
        voc.reasons
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.kind)
            .or_else(|| voc.findings.iter().find(|f| f.name == name).map(|f| f.layer.kind()))
    };
    for (bullet, kind) in [
        ("- On the NodePool:", ObjectKind::NodePool),
        ("- On the old NodeClaim:", ObjectKind::NodeClaim),
    ] {
        let start = events.find(bullet).unwrap_or_else(|| panic!("§4.3 has no `{bullet}`"));
        let rest = &events[start + bullet.len()..];
        let end = rest.find("\n- ").or_else(|| rest.find("\n\n")).unwrap_or(rest.len());
        let listed: Vec<&str> =
            code_spans(&rest[..end]).into_iter().filter(|s| is_reason(s)).collect();
        assert!(!listed.is_empty(), "§4.3 `{bullet}` lists no reasons");
        for name in listed {
            assert_eq!(
                kind_of(name),
                Some(kind),
                "§4.3 lists `{name}` {bullet:?}; rules/vocabulary.ron disagrees"
            );
        }
    }
}

/// ARCHITECTURE.md's rules of the road, checked on the source text so that a violation fails
/// `cargo test` instead of waiting for a reviewer.
mod tidy {
    use super::repo;
    use std::path::{Path, PathBuf};

    fn rust_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(rust_files(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
        out.sort();
        out
    }

    /// `(file:line, code)` of every line of code under `dir` (comments dropped).
    fn code_lines(dir: &str) -> Vec<(String, String)> {
        let root = repo();
        let files = rust_files(&root.join(dir));
        // Files that are unit tests themselves (`#[cfg(test)] mod name;` in their parent).
        let mut test_only = Vec::new();
        for path in &files {
            let text = std::fs::read_to_string(path).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for w in lines.windows(2) {
                if w[0].trim() == "#[cfg(test)]"
                    && let Some(name) =
                        w[1].trim().strip_prefix("mod ").and_then(|m| m.strip_suffix(';'))
                {
                    test_only.push(path.parent().unwrap().join(format!("{name}.rs")));
                }
            }
        }
        let mut out = Vec::new();
        for path in files.iter().filter(|f| !test_only.contains(f)) {
            let rel = path.strip_prefix(&root).unwrap().display().to_string();
            let text = std::fs::read_to_string(path).unwrap();
            // Unit tests (`#[cfg(test)] mod ...` at the end of a file) may read fixtures.
            let mut lines: Vec<&str> = text.lines().collect();
            if let Some(at) = lines.windows(2).position(|w| {
                w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod ")
            }) {
                lines.truncate(at);
            }
            for (i, line) in lines.into_iter().enumerate() {
                let code = match line.find("//") {
                    Some(at) => &line[..at],
                    None => line,
                };
                if !code.trim().is_empty() {
                    out.push((format!("{rel}:{}", i + 1), code.to_string()));
                }
            }
        }
        out
    }

    fn offenders(dir: &str, bad: impl Fn(&str) -> bool) -> Vec<String> {
        code_lines(dir)
            .into_iter()
            .filter(|(_, code)| bad(code))
            .map(|(at, code)| format!("{at}: {}", code.trim()))
            .collect()
    }

    #[test]
    fn rulebook_depends_on_std_serde_ron_and_pest_only() {
        // build.rs compiles src/rulebook by #[path]: it cannot see the crate it builds.
        let allowed =
            ["std", "core", "alloc", "serde", "ron", "pest", "pest_derive", "super", "self"];
        let found = offenders("src/rulebook", |code| {
            if code.contains("crate::") {
                return true;
            }
            let Some(path) = code.trim().strip_prefix("use ") else { return false };
            let first = path.trim_start_matches("::").split([':', ';', ' ', '{']).next().unwrap();
            !allowed.contains(&first)
        });
        assert!(
            found.is_empty(),
            "src/rulebook must not use the crate or other dependencies:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn reconcile_never_names_a_cluster_implementation() {
        // The same reconcile runs against the real cluster and the in-memory one: only the
        // Cluster trait may be named.
        let banned = ["memory", "Memory", "kube::", "KubeCluster", "cluster::kube", "kube_runtime"];
        let found = offenders("src/reconcile", |code| banned.iter().any(|b| code.contains(b)));
        assert!(
            found.is_empty(),
            "src/reconcile names a Cluster implementation:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn no_rust_code_outside_the_engine_decides_on_a_claim_state() {
        // The rules' states are matched only by the interpreter that runs them, and inside verb
        // implementations (which branch on what they read while carrying out a verb).
        let states = [
            "ClaimState::None",
            "ClaimState::Pending",
            "ClaimState::Draining",
            "ClaimState::Expired",
        ];
        let mut found = Vec::new();
        for dir in ["src", "benches"] {
            found.extend(offenders(dir, |code| {
                states.iter().any(|s| code.contains(s))
                    || code.contains("engine::ClaimState::")
                    || code.contains("engine::ClaimState as")
            }));
        }
        found
            .retain(|at| !at.starts_with("src/engine/") && !at.starts_with("src/reconcile/verbs/"));
        assert!(found.is_empty(), "claim-state decisions belong in rules/:\n{}", found.join("\n"));
    }

    #[test]
    fn pure_modules_do_no_io_and_read_no_clock() {
        let banned = [
            "std::fs",
            "std::net",
            "tokio",
            "reqwest",
            "Clock",
            "Utc::now",
            "SystemTime",
            "Instant::now",
        ];
        let mut found = Vec::new();
        // (src/rulebook reads the rules directory it models; build.rs and the binary call it.)
        for dir in ["src/engine", "src/policy", "src/trigger"] {
            found.extend(offenders(dir, |code| banned.iter().any(|b| code.contains(b))));
        }
        found.extend(
            offenders("src", |code| banned.iter().any(|b| code.contains(b)))
                .into_iter()
                .filter(|at| at.starts_with("src/placeholder")),
        );
        assert!(
            found.is_empty(),
            "pure modules must not do I/O or read the clock:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn the_simulation_wakes_pools_only_through_the_trigger_seam() {
        // `run` wakes a pool on a watch change its Mapper maps, a requeue, or the tick; the
        // simulation must too, or a change to that mapping would still pass it. Only the driver
        // schedules passes, and it takes wake-ups only from the leader's watch changes.
        let scheduling = ["set_due(", "add_at(", ".wake(", "wakes", "request_status_at("];
        let found: Vec<String> =
            offenders("src/sim", |code| scheduling.iter().any(|s| code.contains(s)))
                .into_iter()
                .filter(|at| !at.starts_with("src/sim/driver/"))
                .collect();
        assert!(
            found.is_empty(),
            "only the driver schedules passes, from mapped watch changes:\n{}",
            found.join("\n")
        );
        let driver = code_lines("src/sim")
            .into_iter()
            .filter(|(at, _)| at.starts_with("src/sim/driver/"))
            .map(|(_, code)| code)
            .collect::<Vec<_>>()
            .join("\n");
        for seam in ["Mapper", "Schedule", "Retries", "take_changes"] {
            assert!(driver.contains(seam), "the driver runs the runtime's {seam}");
        }
    }

    #[test]
    fn policy_modules_import_each_other_without_a_cycle() {
        use std::collections::{BTreeMap, BTreeSet};
        // module -> the policy modules its non-test code names
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (at, code) in code_lines("src/policy") {
            let file = at.split(':').next().unwrap();
            let path = file.trim_start_matches("src/policy/").trim_end_matches(".rs");
            // A directory module (`plan/mod.rs`, `plan/render.rs`) is one module, `plan`; in the
            // files beside its `mod.rs`, `super::` is that module and the policy modules are
            // `super::super::`.
            let (module, nested) = match path.split_once('/') {
                Some((dir, file)) => (dir.to_string(), file != "mod"),
                None => (path.to_string(), false),
            };
            let prefixes = if nested {
                ["super::super::", "crate::policy::"]
            } else {
                ["super::", "crate::policy::"]
            };
            for prefix in prefixes {
                for (i, _) in code.match_indices(prefix) {
                    let rest = &code[i + prefix.len()..];
                    let name: String =
                        rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
                    if !name.is_empty() && name != module {
                        graph.entry(module.clone()).or_default().insert(name);
                    }
                }
            }
        }
        // depth-first search for a back edge
        fn visit(
            m: &str,
            graph: &BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<String>,
            done: &mut BTreeSet<String>,
        ) -> Option<Vec<String>> {
            if let Some(at) = path.iter().position(|p| p == m) {
                let mut cycle = path[at..].to_vec();
                cycle.push(m.to_string());
                return Some(cycle);
            }
            if !done.insert(m.to_string()) {
                return None;
            }
            path.push(m.to_string());
            for next in graph.get(m).into_iter().flatten() {
                if let Some(cycle) = visit(next, graph, path, done) {
                    return Some(cycle);
                }
            }
            path.pop();
            None
        }
        let mut done = BTreeSet::new();
        for module in graph.keys() {
            let mut path = Vec::new();
            if let Some(cycle) = visit(module, &graph, &mut path, &mut done) {
                panic!("src/policy has an import cycle: {}", cycle.join(" -> "));
            }
        }
    }
}

#[test]
fn per_rotation_keys_are_nodepool_keys_and_cover_the_anchor_clear_set() {
    let claim_key = (
        "annotations.ron",
        "(key: \"state\", targets: [NodeClaim], value: Enum([\"busy\", \"done\"]), purpose: \"p\", lifecycle: \"l\", spec: \"s\", owner: Controller),",
        "(key: \"state\", targets: [NodeClaim], value: Enum([\"busy\", \"done\"]), purpose: \"p\", lifecycle: \"l\", spec: \"s\", owner: Controller, per_rotation: true),",
    );
    let err = fixture_with_all(&[claim_key]).expect_err("a claim key has no slots");
    assert!(err.contains("only a NodePool-only key can be per_rotation"), "{err}");
    let shared_anchor = ("annotations.ron", ", per_rotation: true),", "),");
    let err = fixture_with_all(&[shared_anchor]).expect_err("a shared key in the clear set");
    assert!(err.contains("anchor_clear_set key `anchor` is not per_rotation"), "{err}");
}
