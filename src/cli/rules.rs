//! `noderotation docs` and `noderotation rules ...`.
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::rulebook::Rulebook;

#[derive(Debug, Args)]
pub struct DocsArgs {
    /// Fail instead of writing when a generated doc is stale.
    #[arg(long)]
    pub check: bool,
    /// The rule directory to render.
    #[arg(long, default_value = "rules")]
    pub rules: PathBuf,
    /// Where the docs go.
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
    /// Compare two rule sets and print the semantic differences as Markdown.
    Diff(crate::cli::rules::DiffArgs),
}

#[derive(Debug, Args)]
pub struct DiffArgs {}

pub fn load(dir: &Path) -> anyhow::Result<Rulebook> {
    Rulebook::load_dir(dir).map_err(|diags| {
        let lines: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
        anyhow::anyhow!("{} problem(s) in {}:\n{}", diags.len(), dir.display(), lines.join("\n"))
    })
}

pub fn docs(_args: &DocsArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}

pub fn rules(cmd: &RulesCommand) -> anyhow::Result<i32> {
    match cmd {
        RulesCommand::Check { dir } => {
            let book = load(dir).context("checking rules")?;
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
        RulesCommand::Diff(_) => anyhow::bail!("not implemented yet"),
    }
}
