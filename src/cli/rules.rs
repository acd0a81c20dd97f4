//! `noderotation docs` and `noderotation rules {check,diff}`.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use crate::rulebook::check::FILES;
use crate::rulebook::{Rulebook, Source, diff, render};

#[derive(Debug, Args)]
pub struct DocsArgs {
    /// Verify instead of writing: exit 1 naming every stale file.
    #[arg(long)]
    pub check: bool,
    /// The rule directory to render.
    #[arg(long, default_value = "rules")]
    pub rules: PathBuf,
    /// Where the generated docs go.
    #[arg(long, default_value = "docs")]
    pub out: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Load and check a rule directory; print every problem as file:line:col. Outside a
    /// checkout (no rules/ here), checks the rules built into this binary.
    Check {
        #[arg(default_value = RULES)]
        dir: PathBuf,
    },
    /// Print the semantic differences between two rule sets as Markdown (exit 1 if any).
    Diff(DiffArgs),
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Old rules: a directory, or a git revision (its `rules/` folder).
    pub old: Option<String>,
    /// New rules: a directory or a git revision; default `rules` (outside a checkout, the rules
    /// built into this binary).
    pub new: Option<String>,
    /// Compare the working tree's `rules/` with this git revision.
    #[arg(long, conflicts_with = "old")]
    pub base: Option<String>,
}

/// The rule directory of a checkout, the default of every command here.
const RULES: &str = "rules";

/// What the developer commands say when run outside a checkout of the repository.
const NEEDS_CHECKOUT: &str = "run it from the root of a checkout of the noderotation repository";

/// Loads a rule directory, or fails with every diagnostic.
pub(crate) fn load(dir: &Path) -> anyhow::Result<Rulebook> {
    Rulebook::load_dir(dir).map_err(|diags| report(&diags, &dir.display().to_string()))
}

/// The default `rules` directory outside a checkout: the commands that only read rules use the
/// rules built into this binary instead.
fn builtin_instead(dir: &Path) -> bool {
    dir == Path::new(RULES) && !dir.exists()
}

fn report(diags: &[crate::rulebook::Diagnostic], what: &str) -> anyhow::Error {
    let lines: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    anyhow::anyhow!("{} problem(s) in {what}:\n{}", diags.len(), lines.join("\n"))
}

/// Loads rules from a directory, or from `rules/` at a git revision.
fn load_spec(spec: &str) -> anyhow::Result<Rulebook> {
    let path = Path::new(spec);
    if path.is_dir() {
        return load(path);
    }
    if builtin_instead(path) {
        return Ok(crate::engine::embedded_rulebook());
    }
    let mut sources = Vec::new();
    for file in FILES {
        let object = format!("{spec}:rules/{file}");
        let out = Command::new("git")
            .args(["show", &object])
            .output()
            .context("running git (is it installed?)")?;
        if !out.status.success() && file == "obligations.ron" {
            // Rule sets from before the spec obligations existed oblige nothing.
            sources.push(Source { path: object, text: "[]".into() });
            continue;
        }
        if !out.status.success() {
            bail!(
                "`{spec}` is neither a directory nor a git revision with rules/{file} (a \
                 revision needs a git checkout: {NEEDS_CHECKOUT}): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        sources.push(Source { path: object, text: String::from_utf8(out.stdout)? });
    }
    Rulebook::from_sources(&sources).map_err(|d| report(&d, spec))
}

/// The RotationPolicy CRD's generated file and its copy in the Helm chart, relative to a
/// checkout.
pub(crate) const CRD_FILES: [&str; 2] =
    ["crds/rotationpolicy.yaml", "deploy/helm/noderotation/crds/rotationpolicy.yaml"];

/// Every file of a checkout that is generated, relative to it, with its content: the docs
/// rendered from `rules/` (under `docs/`) and the RotationPolicy CRD with its chart copy.
/// `noderotation docs` writes them all and `--check` (run by `tests/all.sh`, and this list by
/// `tests/rules.rs`) fails on any difference.
pub fn generated(book: &Rulebook) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut files: Vec<(PathBuf, String)> = render::all(book)
        .into_iter()
        .map(|(name, text)| (Path::new("docs").join(name), text))
        .collect();
    let crd = crate::policy::crd::crd_yaml()?;
    files.extend(CRD_FILES.iter().map(|path| (PathBuf::from(path), crd.clone())));
    Ok(files)
}

pub fn docs(args: &DocsArgs) -> anyhow::Result<i32> {
    if !args.rules.exists() {
        bail!(
            "docs renders {} into {} of a checkout, and there is no {} here: {NEEDS_CHECKOUT}",
            args.rules.display(),
            args.out.display(),
            args.rules.display()
        );
    }
    let book = load(&args.rules)?;
    // The checkout holding the rules: where the CRD files go; the docs go to `--out`.
    let root = args.rules.parent().unwrap_or(Path::new(""));
    let mut stale = Vec::new();
    for (relative, content) in generated(&book)? {
        let path = match relative.strip_prefix("docs") {
            Ok(name) => args.out.join(name),
            Err(_) => root.join(&relative),
        };
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == content {
            continue;
        }
        if args.check {
            stale.push(path.display().to_string());
        } else {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&path, content)
                .with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    if !stale.is_empty() {
        eprintln!(
            "stale generated files: {}\nregenerate them with `cargo run -- docs`",
            stale.join(", ")
        );
        return Ok(1);
    }
    Ok(0)
}

pub fn rules(cmd: &RulesCommand) -> anyhow::Result<i32> {
    match cmd {
        RulesCommand::Check { dir } => {
            let (book, what) = if builtin_instead(dir) {
                let what = format!("no {RULES}/ here; the rules built into this binary");
                (crate::engine::embedded_rulebook(), what)
            } else {
                (load(dir)?, dir.display().to_string())
            };
            let rows: usize = book.handlers.iter().map(|h| h.rows.len()).sum();
            println!(
                "{what}: {} handlers, {rows} rows, {} annotation keys: ok",
                book.handlers.len(),
                book.annotations.keys.len()
            );
            Ok(0)
        }
        RulesCommand::Diff(args) => {
            let (old, new) = match (&args.base, &args.old, &args.new) {
                (Some(base), None, None) => (base.clone(), "rules".to_string()),
                (None, Some(old), new) => {
                    (old.clone(), new.clone().unwrap_or_else(|| "rules".into()))
                }
                _ => bail!("give OLD [NEW], or --base REV (compares ./rules with REV)"),
            };
            let d = diff::diff(&load_spec(&old)?, &load_spec(&new)?);
            print!("{}", diff::markdown(&d, &old, &new));
            Ok(if d.is_empty() { 0 } else { 1 })
        }
    }
}
