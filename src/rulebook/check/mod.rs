//! Loading and checking `rules/`: every error carries `file:line:col` and says what to fix.
//!
//! The result, [`Rulebook`], holds the files as written plus every guard and verb statement
//! parsed, type-checked and resolved (each bare word classified as root, outcome or literal;
//! definitions inlined), which is what the engine compiles and what docs and diff print.
//!
//! One file per concern, each adding its passes to `Checker`: `source` (files, RON and
//! positions), `declarations` (annotations.ron and vocabulary.ron), `types` (the guard types),
//! `resolve` (name resolution and typing of guards), `statement` (verb statements), `flow`
//! (handlers row by row, with flow typing), `structure` (reachability, claim-state ownership,
//! a decision at the end of every handler), `announce` (claim-then-announce) and `spec` (the
//! spec table and the obligations). `resolved` holds what the checker produces.
use std::collections::HashMap;
use std::path::Path;

use super::model::*;

mod announce;
mod declarations;
mod flow;
mod resolve;
mod resolved;
mod source;
mod spec;
mod statement;
mod structure;
mod types;

pub(crate) use resolved::{CheckedHandler, CheckedRow, Lit, RArg, RExpr, RStatement};
pub use source::{Diagnostic, Source};
pub(super) use spec::{canonical, conjunct_texts};

use self::resolve::Definition1;
use self::source::parse_ron;

/// The files of a rule directory, in load order.
pub const FILES: [&str; 5] =
    ["annotations.ron", "vocabulary.ron", "transitions.ron", "spec-table.ron", "obligations.ron"];

/// A checked rule directory.
#[derive(Debug, Clone)]
pub struct Rulebook {
    pub annotations: Annotations,
    pub vocabulary: Vocabulary,
    pub transitions: Transitions,
    pub spec_table: Vec<SpecRow>,
    pub obligations: Vec<Obligation>,
    pub handlers: Vec<CheckedHandler>,
}

impl Rulebook {
    /// Loads and checks `dir/*.ron`; diagnostics name files as `dir/<file>`.
    pub fn load_dir(dir: &Path) -> Result<Rulebook, Vec<Diagnostic>> {
        let mut sources = Vec::new();
        for file in FILES {
            let path = dir.join(file);
            let shown = path.display().to_string();
            match std::fs::read_to_string(&path) {
                Ok(text) => sources.push(Source { path: shown, text }),
                Err(e) => {
                    return Err(vec![Diagnostic {
                        file: shown,
                        line: 1,
                        col: 1,
                        message: format!("cannot read: {e}"),
                    }]);
                }
            }
        }
        Self::from_sources(&sources)
    }

    /// Checks the files given in [`FILES`] order.
    pub fn from_sources(sources: &[Source]) -> Result<Rulebook, Vec<Diagnostic>> {
        let [ann_src, voc_src, tr_src, spec_src, obl_src] = sources else {
            return Err(vec![Diagnostic {
                file: "rules".into(),
                line: 1,
                col: 1,
                message: format!("expected the files {}", FILES.join(", ")),
            }]);
        };
        let mut diags = Vec::new();
        let annotations: Option<Annotations> = parse_ron(ann_src, &mut diags);
        let vocabulary: Option<Vocabulary> = parse_ron(voc_src, &mut diags);
        let transitions: Option<Transitions> = parse_ron(tr_src, &mut diags);
        let spec_table: Option<Vec<SpecRow>> = parse_ron(spec_src, &mut diags);
        let obligations: Option<Vec<Obligation>> = parse_ron(obl_src, &mut diags);
        let (
            Some(annotations),
            Some(vocabulary),
            Some(transitions),
            Some(spec_table),
            Some(obligations),
        ) = (annotations, vocabulary, transitions, spec_table, obligations)
        else {
            return Err(diags);
        };
        let mut checker = Checker {
            ann: &annotations,
            voc: &vocabulary,
            ann_src,
            voc_src,
            tr_src,
            diags: Vec::new(),
            definitions: HashMap::new(),
        };
        checker.check_annotations();
        checker.check_vocabulary();
        checker.check_events_and_metrics();
        let handlers = checker.check_transitions(&transitions);
        checker.check_spec_table(spec_src, &spec_table, &handlers);
        if checker.diags.is_empty() {
            // Obligations speak of a rulebook that is otherwise well formed.
            checker.check_obligations(obl_src, &obligations, &transitions, &spec_table, &handlers);
        }
        diags.extend(checker.diags);
        if diags.is_empty() {
            Ok(Rulebook { annotations, vocabulary, transitions, spec_table, obligations, handlers })
        } else {
            Err(diags)
        }
    }

    pub(crate) fn handler(&self, name: &str) -> Option<&CheckedHandler> {
        self.handlers.iter().find(|h| h.name == name)
    }

    pub fn rows(&self) -> impl Iterator<Item = (&CheckedHandler, &CheckedRow)> {
        self.handlers.iter().flat_map(|h| h.rows.iter().map(move |r| (h, r)))
    }

    pub(crate) fn annotation(&self, key: &str) -> Option<&AnnotationKey> {
        self.annotations.keys.iter().find(|k| k.key == key)
    }
}

/// One check of a rule directory: the files, the diagnostics so far and the checked definitions.
struct Checker<'a> {
    ann: &'a Annotations,
    voc: &'a Vocabulary,
    ann_src: &'a Source,
    voc_src: &'a Source,
    tr_src: &'a Source,
    diags: Vec<Diagnostic>,
    definitions: HashMap<String, Definition1>,
}

impl Checker<'_> {
    fn err_ann(&mut self, offset: usize, msg: String) {
        self.diags.push(self.ann_src.diag(offset, msg));
    }
    fn err_voc(&mut self, offset: usize, msg: String) {
        self.diags.push(self.voc_src.diag(offset, msg));
    }
    fn err_tr(&mut self, offset: usize, msg: String) {
        self.diags.push(self.tr_src.diag(offset, msg));
    }
}
