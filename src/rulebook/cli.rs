use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct DocsArgs {
    /// Fail instead of writing when a generated doc is stale.
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Compare two rule sets and print the semantic differences as Markdown.
    Diff {},
}

pub fn docs(_args: &DocsArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}

pub fn rules(_cmd: &RulesCommand) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
