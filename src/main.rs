//! The `noderotation` command line.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use noderotation::{cli, runtime};

#[derive(Debug, Parser)]
#[command(name = "noderotation", version = noderotation::VERSION_LINE, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The operator's commands come first in `--help`; these, for working on the repository, are
/// listed under a heading of their own.
const DEVELOPER_COMMANDS: [&str; 2] = ["rules", "docs"];

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator: preflight, leader election, watches, reconcile (needs a cluster).
    Run(runtime::RunArgs),
    /// Show what a RotationPolicy will do to a NodePool: P, A, t_rot, chances, findings.
    Plan(cli::plan::PlanArgs),
    /// Simulate a fleet over weeks of virtual time, next to Karpenter alone (no cluster needed).
    Simulate(cli::simulate::SimulateArgs),
    /// Show what will rotate next and what is at risk, per NodePool, from the live cluster.
    ///
    /// Read-only, with your kubeconfig: the governing policy, the window open now or next, the
    /// claims due and in flight, the nearest deadlines, the findings and the last failures. Also
    /// the kubectl plugin `kubectl noderotation` (this binary named or linked as
    /// `kubectl-noderotation`).
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
    /// Print the RotationPolicy CustomResourceDefinition.
    Crd(cli::crd::CrdArgs),
    /// Print a shell completion script: `source <(noderotation completion bash)`.
    Completion(CompletionArgs),
    /// Work with the rule tables in `rules/`.
    #[command(subcommand)]
    Rules(cli::rules::RulesCommand),
    /// Regenerate (or with --check, verify) every generated file of a checkout: the docs from
    /// `rules/`, the RotationPolicy CRD and its copy in the Helm chart.
    Docs(cli::rules::DocsArgs),
}

#[derive(Debug, clap::Args)]
struct CompletionArgs {
    /// The shell to complete in.
    shell: clap_complete::Shell,
}

/// The command line with `--help` listing the operator's commands, then the developer ones.
fn command() -> clap::Command {
    let cmd = Cli::command();
    let line = |c: &clap::Command| {
        let about = c.get_about().map(ToString::to_string).unwrap_or_default();
        format!("  {:<12}{}\n", c.get_name(), about.split(". ").next().unwrap_or_default())
    };
    let (developer, operator): (Vec<_>, Vec<_>) =
        cmd.get_subcommands().partition(|c| DEVELOPER_COMMANDS.contains(&c.get_name()));
    let operator: String = operator.into_iter().map(line).collect();
    let developer: String = developer.into_iter().map(line).collect();
    cmd.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\nCommands:\n{operator}  {:<12}\
         Print this message or the help of the given subcommand(s)\n\nDeveloper commands (in a \
         checkout of the repository):\n{developer}\nOptions:\n{{options}}{{after-help}}",
        "help"
    ))
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
    if plugin {
        let rest = args.split_off(1.min(args.len()));
        let rest = match rest.first() {
            Some(first) if first == "status" => rest[1..].to_vec(),
            _ => rest,
        };
        args = ["noderotation", "status"].into_iter().map(Into::into).chain(rest).collect();
    }
    match Cli::from_arg_matches(&command().get_matches_from(args)) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    }
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
        Command::Completion(args) => {
            let mut script = Vec::new();
            clap_complete::generate(args.shell, &mut command(), "noderotation", &mut script);
            cli::write_stdout(&String::from_utf8_lossy(&script)).map(|()| 0)
        }
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(1)
        }
    }
}
