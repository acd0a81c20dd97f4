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
pub fn load(dir: &Path) -> anyhow::Result<Rulebook> {
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
    let mut stale = Vec::new();
    for (name, content) in render::all(&book) {
        let path = args.out.join(name);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == content {
            continue;
        }
        if args.check {
            stale.push(path.display().to_string());
        } else {
            std::fs::create_dir_all(&args.out)?;
            std::fs::write(&path, content)
                .with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    if !stale.is_empty() {
        eprintln!(
            "stale generated docs: {}\nregenerate them with `cargo run -- docs`",
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
