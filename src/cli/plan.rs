//! `noderotation plan`: what a RotationPolicy will do to a NodePool, before it is applied.
//!
//! ```text
//! noderotation plan -f policy.yaml --nodepool nodepool.yaml
//! kubectl get rotationpolicy api -o yaml | noderotation plan -f - --from-cluster general
//! noderotation plan -f policy.yaml --expire-after 14d --tgp 1h --nodes 20 [--output json]
//! ```
//!
//! Reads the files and flags, then prints [`crate::policy::plan`]'s report. Exit codes: 0
//! feasible, 1 the input files (unreadable, invalid, unknown fields: named with file, field and
//! problem), 2 the command line (as clap's own usage errors), 3 infeasible (a fatal finding).
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use chrono::{DateTime, Duration, Utc};
use clap::{Args, ValueEnum};

use crate::clock::{Clock, SystemClock};
use crate::policy::duration::{self, ExpireAfter};
use crate::policy::feasibility::PoolFacts;
use crate::policy::plan::{
    PlanReport, PoolInput, parse_policies, pick_policy, pool_from_manifest, pool_from_nodepool,
    render_human, report, settings_of,
};

/// Exit code of a command-line mistake: the code clap uses for the flags it rejects itself, so
/// every usage error exits alike.
pub(crate) const EXIT_USAGE: i32 = 2;
pub(crate) use crate::policy::plan::EXIT_INFEASIBLE;

const EXIT_CODES_HELP: &str = "Exit codes:
  0  feasible: the plan was printed
  1  an input file cannot be used (unreadable, invalid, unknown field)
  2  usage: the command line is wrong
  3  infeasible: the plan was printed and has a fatal finding";

/// A command-line mistake (exit [`EXIT_USAGE`]), as opposed to a problem in an input file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(String);

fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// Output format of `plan` and `simulate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// For people.
    Human,
    /// One JSON document, camelCase keys.
    Json,
    /// The same document as YAML.
    Yaml,
}

impl OutputFormat {
    /// Whether the output is a document for machines (JSON or YAML) rather than text for people.
    pub(crate) fn is_document(self) -> bool {
        self != OutputFormat::Human
    }

    /// `doc` as this format's document, ending in a newline; `None` for [`OutputFormat::Human`].
    pub(crate) fn document(self, doc: &impl serde::Serialize) -> anyhow::Result<Option<String>> {
        Ok(match self {
            OutputFormat::Human => None,
            OutputFormat::Json => Some(format!("{}\n", serde_json::to_string_pretty(doc)?)),
            OutputFormat::Yaml => Some(serde_norway::to_string(doc)?),
        })
    }
}

/// The command line of `noderotation plan`.
#[derive(Debug, Args)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct PlanArgs {
    /// The RotationPolicy manifest (YAML); `-` reads it from standard input.
    #[arg(short = 'f', long = "filename", value_name = "POLICY_YAML")]
    pub filename: PathBuf,

    /// Which policy to plan when the manifest holds several.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// A karpenter.sh/v1 NodePool manifest to plan against.
    #[arg(long, value_name = "NODEPOOL_YAML")]
    pub nodepool: Option<PathBuf>,

    /// The NodePool of this name, read from the cluster (KUBECONFIG, or in-cluster).
    #[arg(long, value_name = "NAME", conflicts_with = "nodepool")]
    pub from_cluster: Option<String>,

    /// The pool's expireAfter instead of --nodepool: a Go duration, Nd for days, or Never.
    #[arg(long, value_name = "DURATION")]
    pub expire_after: Option<String>,

    /// The pool's terminationGracePeriod instead of --nodepool; omit when the pool has none.
    #[arg(long, value_name = "DURATION")]
    pub tgp: Option<String>,

    /// N, the number of nodes in the pool (with --nodepool default: status.resources.nodes).
    #[arg(long, value_name = "N")]
    pub nodes: Option<u64>,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Human)]
    pub output: OutputFormat,

    /// Evaluate at this instant (RFC 3339) instead of now, for reproducible output.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,

    /// How many upcoming occurrences to list.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub occurrences: usize,
}

/// Runs `plan`; the result is the exit code (0, [`EXIT_INFEASIBLE`], or [`EXIT_USAGE`] after
/// printing the usage error). Input errors are returned (the caller prints them, exit 1).
pub fn run(args: &PlanArgs) -> anyhow::Result<i32> {
    let report = match args
        .now
        .as_deref()
        .map(parse_now)
        .transpose()
        .and_then(|now| plan(args, now.unwrap_or_else(|| SystemClock.now())))
    {
        Ok(report) => report,
        Err(err) if err.is::<UsageError>() => {
            eprintln!("error: {err:#}");
            eprintln!("\nFor more information, try 'noderotation plan --help'.");
            return Ok(EXIT_USAGE);
        }
        Err(err) => return Err(err),
    };
    let text = match args.output.document(&report)? {
        Some(doc) => doc,
        None => render_human(&report),
    };
    super::write_stdout(&text)?;
    Ok(if report.fatal { EXIT_INFEASIBLE } else { 0 })
}

fn parse_now(s: &str) -> anyhow::Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| usage(format!("--now: {s:?} is not an RFC 3339 time: {e}")))
}

/// Builds the report for `args` at `now` (all input is read and checked here).
pub(crate) fn plan(args: &PlanArgs, now: DateTime<Utc>) -> anyhow::Result<PlanReport> {
    let (file, text) = if args.filename == Path::new(STDIN) {
        ("<stdin>".to_string(), read_limited(std::io::stdin().lock(), "<stdin>")?)
    } else {
        (args.filename.display().to_string(), read(&args.filename)?)
    };
    let policies = parse_policies(&text).map_err(|e| anyhow!("{file}: {e}"))?;
    let policy = pick_policy(policies, args.name.as_deref()).map_err(|e| anyhow!("{file}: {e}"))?;
    let settings = settings_of(&policy, &file)?;
    let (pool_input, facts) = match (&args.nodepool, &args.expire_after, &args.tgp) {
        _ if args.from_cluster.is_some() && (args.expire_after.is_some() || args.tgp.is_some()) => {
            return Err(usage("--from-cluster cannot be combined with --expire-after or --tgp"));
        }
        _ if let Some(name) = &args.from_cluster => {
            let pool = crate::runtime::block_on(nodepool_from_cluster(name))?;
            pool_from_nodepool(&format!("NodePool {name} (cluster)"), &pool, &policy, args.nodes)?
        }
        (Some(path), None, None) => {
            pool_from_manifest(&path.display().to_string(), &read(path)?, &policy, args.nodes)?
        }
        (Some(_), _, _) => {
            return Err(usage("--nodepool cannot be combined with --expire-after or --tgp"));
        }
        (None, Some(_), _) => pool_from_flags(args)?,
        (None, None, _) => {
            return Err(usage(
                "say which pool to plan for: --nodepool NODEPOOL_YAML, --from-cluster NAME, or \
                 --expire-after DURATION [--tgp DURATION] [--nodes N]",
            ));
        }
    };
    Ok(report(&policy, &file, &settings, pool_input, &facts, now, args.occurrences))
}

/// The largest manifest `plan` reads. A RotationPolicy or NodePool manifest is a few KiB; a
/// file past this is the wrong file, or hostile, and is refused before the YAML parser sees it.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// The `-f` value that reads standard input.
const STDIN: &str = "-";

fn read(path: &Path) -> anyhow::Result<String> {
    let file =
        std::fs::File::open(path).with_context(|| format!("{}: cannot read", path.display()))?;
    read_limited(file, &path.display().to_string())
}

/// At most [`MAX_MANIFEST_BYTES`] of `input` (named `what` in errors).
fn read_limited(input: impl std::io::Read, what: &str) -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    input
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("{what}: cannot read"))?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        anyhow::bail!(
            "{what}: larger than 1 MiB; a manifest for plan is a few KiB: pass the RotationPolicy \
             or NodePool file itself"
        );
    }
    Ok(text)
}

/// The NodePool `name` as the cluster has it now.
async fn nodepool_from_cluster(name: &str) -> anyhow::Result<crate::karpenter::NodePool> {
    let client = crate::runtime::client().await?;
    kube::Api::<crate::karpenter::NodePool>::all(client)
        .get(name)
        .await
        .with_context(|| format!("--from-cluster: cannot read NodePool {name:?} (karpenter.sh/v1)"))
}

fn pool_from_flags(args: &PlanArgs) -> anyhow::Result<(PoolInput, PoolFacts)> {
    let raw = args
        .expire_after
        .as_deref()
        .ok_or_else(|| usage("give either --nodepool FILE or --expire-after DURATION"))?;
    let expire_after = ExpireAfter::parse_with_days(raw).map_err(|_| {
        usage(format!(
            "--expire-after: {raw:?} is not a duration: use a Go duration such as 336h, days \
             such as 14d, or Never"
        ))
    })?;
    let tgp =
        args.tgp
            .as_deref()
            .map(|s| {
                duration::parse_with_days(s).ok().filter(|d| *d >= Duration::zero()).ok_or_else(
                    || usage(format!("--tgp: {s:?} is not a duration (e.g. 1h, 30m, 2d)")),
                )
            })
            .transpose()?;
    let input = PoolInput {
        source: "flags".into(),
        name: None,
        expire_after: expire_after.to_string(),
        termination_grace_period: tgp.map(duration::format),
        nodes: args.nodes,
        selected_by_policy: None,
    };
    let facts = PoolFacts {
        expire_after,
        termination_grace_period: tgp,
        nodes: args.nodes,
        exhausted_limits: Vec::new(),
        static_pool: false,
    };
    Ok((input, facts))
}
