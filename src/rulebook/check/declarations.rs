//! `annotations.ron` and `vocabulary.ron`: every name declared once, every type known, and the
//! lookups the other passes make in them.
use std::collections::BTreeSet;

use super::super::model::*;
use super::Checker;

impl<'a> Checker<'a> {
    pub(super) fn check_annotations(&mut self) {
        let ann = self.ann;
        for dup in dup_names(ann.keys.iter().map(|k| k.key.as_str())) {
            let at = self.ann_src.decl("key", dup);
            self.err_ann(at, format!("annotation key `{dup}` is declared twice"));
        }
        for k in &ann.keys {
            let at = self.ann_src.decl("key", &k.key);
            if k.targets.is_empty() {
                self.err_ann(at, format!("annotation `{}` has no targets", k.key));
            }
            if let ValueType::Enum(v) = &k.value
                && v.is_empty()
            {
                self.err_ann(at, format!("annotation `{}`: an Enum needs values", k.key));
            }
            if k.per_rotation && k.targets != [ObjectKind::NodePool] {
                self.err_ann(
                    at,
                    format!("annotation `{}`: only a NodePool-only key can be per_rotation", k.key),
                );
            }
        }
        for key in &ann.anchor_clear_set {
            let at = self.ann_src.string_after(0, key).unwrap_or(0);
            match ann.keys.iter().find(|k| &k.key == key) {
                None => self.err_ann(at, format!("anchor_clear_set names unknown key `{key}`")),
                Some(k) if !k.targets.contains(&ObjectKind::NodePool) => self
                    .err_ann(at, format!("anchor_clear_set key `{key}` does not target NodePool")),
                Some(k) if !k.per_rotation => self.err_ann(
                    at,
                    format!("anchor_clear_set key `{key}` is not per_rotation: it would clear every slot's"),
                ),
                Some(_) => {}
            }
        }
    }

    pub(super) fn check_vocabulary(&mut self) {
        let voc = self.voc;
        let lists: [(&str, Vec<&str>); 9] = [
            ("enum", voc.enums.iter().map(|e| e.name.as_str()).collect()),
            ("kind", voc.kinds.iter().map(|e| e.name.as_str()).collect()),
            ("predicate", voc.predicates.iter().map(|e| e.name.as_str()).collect()),
            ("reason", voc.reasons.iter().map(|e| e.name.as_str()).collect()),
            ("slot", voc.slots.iter().map(|e| e.name.as_str()).collect()),
            ("finding", voc.findings.iter().map(|e| e.name.as_str()).collect()),
            ("signal", voc.signals.iter().map(|e| e.name.as_str()).collect()),
            ("metric", voc.metrics.iter().map(|e| e.name.as_str()).collect()),
            ("verb", voc.verbs.iter().map(|e| e.name.as_str()).collect()),
        ];
        for (what, names) in lists {
            for dup in dup_names(names.into_iter()) {
                let at = self.voc_src.decl("name", dup);
                self.err_voc(at, format!("{what} `{dup}` is declared twice"));
            }
        }
        if !voc.enums.iter().any(|e| e.name == "ClaimState") {
            self.err_voc(0, "the enum `ClaimState` must be declared".into());
        }
        let mut types: Vec<(String, TypeDecl)> = Vec::new();
        for k in &voc.kinds {
            for f in &k.fields {
                types.push((k.name.clone(), f.ty.clone()));
            }
        }
        for c in &voc.contexts {
            for r in &c.roots {
                types.push((r.name.clone(), r.ty.clone()));
            }
        }
        for p in &voc.predicates {
            for a in p.args.iter().chain(std::iter::once(&p.ret)) {
                types.push((p.name.clone(), a.clone()));
            }
        }
        for (owner, t) in types {
            if let Err(msg) = self.type_decl(&t) {
                let at = self.voc_src.decl("name", &owner);
                self.err_voc(at, msg);
            }
        }
        for v in &voc.verbs {
            let at = self.voc_src.decl("name", &v.name);
            if v.outcomes.is_empty() {
                self.err_voc(at, format!("verb `{}` declares no outcomes", v.name));
            }
            for w in v.winning_outcomes() {
                if !v.outcomes.contains(&w) {
                    self.err_voc(
                        at,
                        format!(
                            "verb `{}`: winning outcome `{w}` is not one of its outcomes",
                            v.name
                        ),
                    );
                }
            }
            for p in &v.params {
                if let ParamType::Target(kinds) = &p.ty {
                    for k in kinds {
                        if !voc.kinds.iter().any(|d| &d.name == k) {
                            self.err_voc(at, format!("verb `{}`: unknown kind `{k}`", v.name));
                        }
                    }
                }
            }
        }
    }

    /// Reasons: recorded on a NodePool or a NodeClaim; every message a valid template whose
    /// slots are declared and whose keys are annotations; every slot used by some message.
    /// Metrics: named `noderotation_*`, with their labels.
    pub(super) fn check_events_and_metrics(&mut self) {
        let voc = self.voc;
        let mut used: BTreeSet<&str> = BTreeSet::new();
        for r in &voc.reasons {
            let at = self.voc_src.decl("name", &r.name);
            if !matches!(r.kind, ObjectKind::NodePool | ObjectKind::NodeClaim) {
                self.err_voc(
                    at,
                    format!(
                        "reason `{}`: Events are recorded on a NodePool or a NodeClaim",
                        r.name
                    ),
                );
            }
            for dup in dup_names(r.cases.iter().map(|c| c.name.as_str())) {
                self.err_voc(at, format!("reason `{}`: case `{dup}` is declared twice", r.name));
            }
            for c in &r.cases {
                if !is_snake(&c.name) {
                    self.err_voc(
                        at,
                        format!("reason `{}`: case `{}` is not snake_case", r.name, c.name),
                    );
                }
            }
            for (case, text) in r.messages() {
                let at = self.voc_src.string_after(at, text).unwrap_or(at);
                let what = match case {
                    None => format!("reason `{}`", r.name),
                    Some(c) => format!("reason `{}` case `{c}`", r.name),
                };
                let pieces = match parse_template(text) {
                    Ok(p) => p,
                    Err(e) => {
                        self.err_voc(at, format!("{what}: bad message template: {e}"));
                        continue;
                    }
                };
                for piece in &pieces {
                    match piece {
                        Piece::Text(_) => {}
                        Piece::Slot(name) => match voc.slots.iter().find(|s| &s.name == name) {
                            Some(s) => {
                                used.insert(&s.name);
                            }
                            None => {
                                let known: Vec<&str> =
                                    voc.slots.iter().map(|s| s.name.as_str()).collect();
                                self.err_voc(
                                    at,
                                    format!(
                                        "{what}: unknown placeholder `{{{name}}}` in its message (slots: {}; an annotation key is `{{key:name}}`)",
                                        known.join(", ")
                                    ),
                                );
                            }
                        },
                        Piece::Key(key) => {
                            if !self.ann.keys.iter().any(|k| &k.key == key) {
                                self.err_voc(
                                    at,
                                    format!(
                                        "{what}: `{{key:{key}}}` names no key of annotations.ron"
                                    ),
                                );
                            }
                        }
                    }
                }
            }
        }
        for s in &voc.slots {
            if !used.contains(s.name.as_str()) {
                let at = self.voc_src.decl("name", &s.name);
                self.err_voc(at, format!("slot `{}` is used by no reason's message", s.name));
            }
        }
        for m in &voc.metrics {
            let at = self.voc_src.decl("name", &m.name);
            let snake = m.name.strip_prefix("noderotation_").is_some_and(is_snake);
            if !snake {
                self.err_voc(
                    at,
                    format!("metric `{}` is not named `noderotation_<snake_case>`", m.name),
                );
            }
            if m.labels.is_empty() || m.labels.iter().any(|l| !is_snake(l)) {
                self.err_voc(
                    at,
                    format!("metric `{}`: labels are snake_case, at least one", m.name),
                );
            }
        }
    }

    pub(super) fn claim_states(&self) -> Vec<String> {
        self.voc
            .enums
            .iter()
            .find(|e| e.name == "ClaimState")
            .map(|e| e.values.clone())
            .unwrap_or_default()
    }

    pub(super) fn context(&self, name: &str) -> Option<&'a ContextDecl> {
        self.voc.contexts.iter().find(|c| c.name == name)
    }
}

pub(super) fn dup_names<'x>(names: impl Iterator<Item = &'x str>) -> Vec<&'x str> {
    let mut seen = BTreeSet::new();
    names.filter(|n| !seen.insert(*n)).collect()
}

pub(super) fn is_snake(id: &str) -> bool {
    !id.is_empty()
        && id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && id.starts_with(|c: char| c.is_ascii_lowercase())
}
