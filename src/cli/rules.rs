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
    /// Load and check a rule directory; print every problem as file:line:col.
    Check {
        #[arg(default_value = "rules")]
        dir: PathBuf,
    },
    /// Print the semantic differences between two rule sets as Markdown (exit 1 if any).
    Diff(DiffArgs),
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Old rules: a directory, or a git revision (its `rules/` folder).
    pub old: Option<String>,
    /// New rules: a directory or a git revision; default `rules`.
    pub new: Option<String>,
    /// Compare the working tree's `rules/` with this git revision.
    #[arg(long, conflicts_with = "old")]
    pub base: Option<String>,
}

/// Loads a rule directory, or fails with every diagnostic.
pub fn load(dir: &Path) -> anyhow::Result<Rulebook> {
    Rulebook::load_dir(dir).map_err(|diags| report(&diags, &dir.display().to_string()))
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
                "`{spec}` is neither a directory nor a git revision with rules/{file}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        sources.push(Source { path: object, text: String::from_utf8(out.stdout)? });
    }
    Rulebook::from_sources(&sources).map_err(|d| report(&d, spec))
}

pub fn docs(args: &DocsArgs) -> anyhow::Result<i32> {
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
            let book = load(dir)?;
            let rows: usize = book.handlers.iter().map(|h| h.rows.len()).sum();
            println!(
                "{}: {} handlers, {} rows, {} annotation keys: ok",
                dir.display(),
                book.handlers.len(),
                rows,
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
