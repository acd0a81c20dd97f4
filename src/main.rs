//! The `noderotation` command line.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use noderotation::{cli, policy, runtime, sim};

#[derive(Debug, Parser)]
#[command(name = "noderotation", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Regenerate (or with --check, verify) the docs generated from `rules/`.
    Docs(cli::rules::DocsArgs),
    /// Work with the rule tables in `rules/`.
    #[command(subcommand)]
    Rules(cli::rules::RulesCommand),
    /// Print the RotationPolicy CustomResourceDefinition.
    Crd(policy::crd::CrdArgs),
    /// Show what a RotationPolicy will do to a NodePool: P, A, t_rot, chances, findings.
    Plan(policy::plan::PlanArgs),
    /// Run the operator: preflight, leader election, watches, reconcile (needs a cluster).
    Run(runtime::RunArgs),
    /// Simulate a fleet over weeks of virtual time, next to Karpenter alone (no cluster needed).
    Simulate(sim::cli::SimulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Docs(args) => cli::rules::docs(args),
        Command::Rules(cmd) => cli::rules::rules(cmd),
        Command::Crd(args) => policy::crd::run(args),
        Command::Plan(args) => policy::plan::run(args),
        Command::Run(args) => runtime::run(args),
        Command::Simulate(args) => sim::cli::simulate(args),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(1)
        }
    }
}
