//! The `noderotation` command line.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use noderotation::{cli, runtime};

#[derive(Debug, Parser)]
#[command(name = "noderotation", version = noderotation::VERSION_LINE, about, long_about = None)]
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
    Crd(cli::crd::CrdArgs),
    /// Show what a RotationPolicy will do to a NodePool: P, A, t_rot, chances, findings.
    Plan(cli::plan::PlanArgs),
    /// Run the operator: preflight, leader election, watches, reconcile (needs a cluster).
    Run(runtime::RunArgs),
    /// Simulate a fleet over weeks of virtual time, next to Karpenter alone (no cluster needed).
    Simulate(cli::simulate::SimulateArgs),
    /// What will rotate and what is at risk, per NodePool, from the live cluster (read-only):
    /// the governing policy, the next window, the claims due and in flight, the nearest
    /// deadlines, the findings and the last failures. Also the kubectl plugin `kubectl
    /// noderotation` (this binary named or linked as `kubectl-noderotation`).
    ///
    /// It needs `list` (with --watch, `watch`) on NodePools, NodeClaims, Nodes and
    /// RotationPolicies, and on pods in --namespace; a missing permission is named with the rule
    /// that grants it (exit code 1).
    Status(cli::status::StatusArgs),
    /// Remove every annotation, cordon, do-not-disrupt and placeholder pod the operator owns.
    /// `noderotation run` must not be running (stop it first, or pass --stop-deployment).
    ///
    /// On every NodePool: the rotation anchor, its mirrors, the window stamp and the gate
    /// anchors (the operator's own `noderotation.io/freeze` stays). On every NodeClaim: the
    /// state of in-flight and failed rotations. On Nodes: `noderotation.io/surge-for`, and our
    /// cordon and `karpenter.sh/do-not-disrupt` only where our markers say we set them (an
    /// operator's own cordon or do-not-disrupt is never touched), and the markers. Placeholder
    /// pods in --namespace are deleted.
    ///
    /// `noderotation run` must not be running: a leader would re-assert what this removes. The
    /// command refuses while the leader Lease is held; --stop-deployment scales the operator's
    /// Deployment to zero and waits first (the Helm chart's pre-delete hook does this).
    /// Idempotent; every write is conditional (fresh read + resourceVersion). Exit code 0 when
    /// everything was cleaned, 1 otherwise.
    Uninstall(cli::uninstall::UninstallArgs),
}

/// The name kubectl runs this binary under as the plugin `kubectl noderotation`.
const KUBECTL_PLUGIN: &str = "kubectl-noderotation";

/// The command line, read as `noderotation status ...` when run as the kubectl plugin
/// (`kubectl noderotation [status] ...`).
fn command_line() -> Cli {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let plugin = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|name| name == KUBECTL_PLUGIN);
    if !plugin {
        return Cli::parse();
    }
    let rest = args.split_off(1.min(args.len()));
    let rest = match rest.first() {
        Some(first) if first == "status" => rest[1..].to_vec(),
        _ => rest,
    };
    let argv = ["noderotation", "status"].into_iter().map(Into::into).chain(rest);
    Cli::parse_from(argv)
}

fn main() -> ExitCode {
    let cli = command_line();
    let result = match &cli.command {
        Command::Docs(args) => cli::rules::docs(args),
        Command::Rules(cmd) => cli::rules::rules(cmd),
        Command::Crd(args) => cli::crd::run(args),
        Command::Plan(args) => cli::plan::run(args),
        Command::Run(args) => runtime::run(args),
        Command::Simulate(args) => cli::simulate::simulate(args),
        Command::Status(args) => cli::status::run(args),
        Command::Uninstall(args) => cli::uninstall::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(1)
        }
    }
}
