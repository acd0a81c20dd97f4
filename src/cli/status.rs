//! `noderotation status` (also the kubectl plugin `kubectl noderotation`): what the operator will
//! rotate and what is at risk, from the live cluster, read-only, with the user's kubeconfig.
//!
//! ```text
//! noderotation status [NODEPOOL...] [-o human|json|yaml] [--watch] [--all]
//! ```
//!
//! It lists NodePools, NodeClaims, Nodes, RotationPolicies and the placeholder pods in the
//! operator's namespace once (`--watch`: watches them and redraws on change) and prints, per
//! NodePool, [`crate::reconcile::summary::PoolSummary`]: the controller's own reading of the pool
//! (its candidate facts, slots, feasibility and lanes, through [`Controller::pool_summaries`]),
//! never a second implementation of it. It needs `list` (and for `--watch`, `watch`) on those
//! five, and nothing else; a missing permission is named before anything is listed.
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use clap::Args;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::runtime::events::Reporter;
use serde::Serialize;

use super::plan::OutputFormat;
use crate::clock::{Clock, SystemClock};
use crate::cluster::kube::KubeCluster;
use crate::cluster::{ApiError, Cluster};
use crate::engine::Engine;
use crate::policy::duration::format_human;
use crate::policy::feasibility::Severity;
use crate::reconcile::summary::{GovernanceSummary, PoolSummary};
use crate::reconcile::{Controller, ControllerConfig};

/// Exit code when what `status` reads cannot be read (a missing permission, no cluster).
pub(crate) const EXIT_UNREADABLE: i32 = 1;

/// The command line of `noderotation status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// NodePools to show (default: every NodePool a RotationPolicy selects).
    #[arg(value_name = "NODEPOOL")]
    pub node_pools: Vec<String>,
    /// Also show NodePools no RotationPolicy selects.
    #[arg(long)]
    pub all: bool,
    /// Namespace of the operator (its placeholder pods live there).
    #[arg(
        short = 'n',
        long,
        env = "NODEROTATION_NAMESPACE",
        default_value = "noderotation-system"
    )]
    pub namespace: String,
    /// Output format: human, json or yaml (one document, camelCase keys).
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Human)]
    pub output: OutputFormat,
    /// Watch the cluster and print again on every change (and every 30 s, as ages move).
    #[arg(short = 'w', long)]
    pub watch: bool,
}

/// What `status -o json|yaml` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusReport {
    pub evaluated_at: DateTime<Utc>,
    pub node_pools: Vec<PoolSummary>,
}

/// One permission `status` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Permission {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    /// `None`: cluster-wide.
    pub namespace: Option<String>,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resource = match self.group {
            "" => self.resource.to_string(),
            g => format!("{}.{g}", self.resource),
        };
        match &self.namespace {
            Some(ns) => write!(f, "{} {resource} in namespace {ns}", self.verb),
            None => write!(f, "{} {resource} (cluster-wide)", self.verb),
        }
    }
}

/// Every permission `status` needs: `list` on what it reads (and `watch` with `--watch`).
pub(crate) fn permissions(namespace: &str, watch: bool) -> Vec<Permission> {
    let kinds: [(&str, &str, bool); 5] = [
        ("karpenter.sh", "nodepools", false),
        ("karpenter.sh", "nodeclaims", false),
        ("", "nodes", false),
        ("noderotation.io", "rotationpolicies", false),
        ("", "pods", true),
    ];
    let verbs: &[&'static str] = if watch { &["list", "watch"] } else { &["list"] };
    let mut out = Vec::new();
    for (group, resource, namespaced) in kinds {
        for verb in verbs {
            out.push(Permission {
                verb,
                group,
                resource,
                namespace: namespaced.then(|| namespace.to_string()),
            });
        }
    }
    out
}

/// What to tell someone who lacks `missing`: the permissions, and the rules that grant them.
pub(crate) fn missing_message(missing: &[Permission]) -> String {
    let mut out = String::from(
        "noderotation status cannot read what it shows; this kubeconfig's user lacks:\n",
    );
    for p in missing {
        let _ = writeln!(out, "  {p}");
    }
    out.push_str("Grant them (read-only) with RBAC rules such as:\n");
    let mut seen = std::collections::BTreeSet::new();
    for p in missing {
        if !seen.insert((p.group, p.resource, p.namespace.clone())) {
            continue;
        }
        let scope = match &p.namespace {
            Some(ns) => format!("  # a Role in namespace {ns}\n"),
            None => "  # a ClusterRole\n".to_string(),
        };
        let _ = write!(
            out,
            "{scope}  - apiGroups: [\"{}\"]\n    resources: [\"{}\"]\n    verbs: [\"get\", \"list\", \"watch\"]\n",
            p.group, p.resource
        );
    }
    out.trim_end().to_string()
}

/// The permissions of `wanted` the API server says this user lacks (a SelfSubjectAccessReview
/// each, which every authenticated user may create). A review the server refuses is not
/// judged here: the list itself then says what is wrong.
async fn missing_permissions(client: &kube::Client, wanted: &[Permission]) -> Vec<Permission> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for p in wanted {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(p.verb.to_string()),
                    group: Some(p.group.to_string()),
                    resource: Some(p.resource.to_string()),
                    namespace: p.namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        if let Ok(answer) = reviews.create(&PostParams::default(), &review).await
            && answer.status.is_some_and(|s| !s.allowed)
        {
            missing.push(p.clone());
        }
    }
    missing
}

/// Runs `status`; the result is the exit code.
pub fn run(args: &StatusArgs) -> anyhow::Result<i32> {
    crate::runtime::block_on(run_async(args.clone()))
}

async fn run_async(args: StatusArgs) -> anyhow::Result<i32> {
    let client = crate::runtime::client().await?;
    let missing = missing_permissions(&client, &permissions(&args.namespace, args.watch)).await;
    if !missing.is_empty() {
        eprintln!("error: {}", missing_message(&missing));
        return Ok(EXIT_UNREADABLE);
    }
    let reporter = Reporter { controller: "noderotation-status".into(), instance: None };
    if !args.watch {
        let cluster = KubeCluster::listed(client, args.namespace.clone(), reporter)
            .await
            .map_err(|e| unreadable(&args, e))?;
        let report = tokio::task::spawn_blocking({
            let args = args.clone();
            move || report(cluster, &args)
        })
        .await
        .context("the status worker panicked")?;
        super::write_stdout(&render(&report, args.output)?)?;
        return Ok(0);
    }
    let (cluster, mut changes) = KubeCluster::start(client, args.namespace.clone(), reporter);
    tokio::time::timeout(StdDuration::from_secs(60), cluster.wait_synced())
        .await
        .context("the watches did not sync within 60 s")?
        .context("a watch stopped before it synced")?;
    let mut last = String::new();
    loop {
        let report = tokio::task::spawn_blocking({
            let (cluster, args) = (Arc::clone(&cluster), args.clone());
            move || report(cluster, &args)
        })
        .await
        .context("the status worker panicked")?;
        let text = render(&report, args.output)?;
        if text != last {
            let frame = match args.output {
                // Clear the terminal and draw again from the top.
                OutputFormat::Human => format!("\x1b[2J\x1b[H{text}"),
                OutputFormat::Yaml => format!("---\n{text}"),
                OutputFormat::Json => text.clone(),
            };
            super::write_stdout(&frame)?;
            last = text;
        }
        // The next change (and the burst after it), or the ages moving on.
        let first = tokio::time::timeout(StdDuration::from_secs(30), changes.recv()).await;
        if matches!(first, Ok(None)) {
            anyhow::bail!("the watches stopped");
        }
        tokio::time::sleep(StdDuration::from_millis(500)).await;
        while changes.try_recv().is_ok() {}
    }
}

/// A list the API server refused, in the words of [`missing_message`] when it was a 403.
fn unreadable(args: &StatusArgs, e: ApiError) -> anyhow::Error {
    match e {
        ApiError::Forbidden(message) => anyhow::anyhow!(
            "{}\n(the API server said: {message})",
            missing_message(&permissions(&args.namespace, false))
        ),
        other => anyhow::anyhow!(
            "listing NodePools, NodeClaims, Nodes, RotationPolicies and the placeholder pods in \
             {}: {other}",
            args.namespace
        ),
    }
}

/// The controller's summary of each NodePool `args` selects (blocks: call it on a blocking
/// thread, see `cluster::kube`).
fn report(cluster: Arc<KubeCluster>, args: &StatusArgs) -> StatusReport {
    let clock = Arc::new(SystemClock);
    let now = clock.now();
    let config = ControllerConfig { namespace: args.namespace.clone(), ..Default::default() };
    let shared: Arc<dyn Cluster> = cluster;
    let mut controller =
        Controller::new(shared, clock, Arc::new(Engine::embedded().clone()), config);
    let node_pools = controller
        .pool_summaries()
        .into_iter()
        .filter(|p| match args.node_pools.is_empty() {
            true => args.all || p.governance != GovernanceSummary::Ungoverned,
            false => args.node_pools.contains(&p.node_pool),
        })
        .collect();
    StatusReport { evaluated_at: now, node_pools }
}

/// The report in `format`.
pub(crate) fn render(report: &StatusReport, format: OutputFormat) -> anyhow::Result<String> {
    Ok(format.document(report)?.unwrap_or_else(|| render_human(report)))
}

fn utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `in 3h20m` / `4m ago`.
fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let d = t - now;
    if d >= chrono::Duration::zero() {
        format!("in {}", format_human(whole_minutes(d)))
    } else {
        format!("{} ago", format_human(whole_minutes(-d)))
    }
}

/// Rounded down to the minute above one minute (`3h20m`, not `3h20m12.5s`).
fn whole_minutes(d: chrono::Duration) -> chrono::Duration {
    if d < chrono::Duration::minutes(1) {
        chrono::Duration::seconds(d.num_seconds())
    } else {
        chrono::Duration::minutes(d.num_minutes())
    }
}

fn secs(s: i64) -> String {
    let d = chrono::Duration::seconds(s);
    if s < 0 {
        format!("-{}", format_human(whole_minutes(-d)))
    } else {
        format_human(whole_minutes(d))
    }
}

/// The human rendering: one block per NodePool.
pub(crate) fn render_human(r: &StatusReport) -> String {
    let now = r.evaluated_at;
    let mut out = String::new();
    if r.node_pools.is_empty() {
        let _ = writeln!(
            out,
            "No NodePool is selected by a RotationPolicy (--all shows every NodePool)."
        );
    }
    for (i, p) in r.node_pools.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        render_pool(&mut out, p, now);
    }
    let _ = writeln!(out, "\nAs of {}", utc(now));
    out
}

fn render_pool(out: &mut String, p: &PoolSummary, now: DateTime<Utc>) {
    let governance = match &p.governance {
        GovernanceSummary::Ready { policy } => format!("RotationPolicy {policy}, Ready"),
        GovernanceSummary::Conflict { policies } => format!(
            "CONFLICT: equally specific policies {} select it; it is not rotated until one is \
             made more specific",
            policies.join(", ")
        ),
        GovernanceSummary::Invalid { policy, message } => {
            format!("RotationPolicy {policy}, INVALID (nothing rotates): {message}")
        }
        GovernanceSummary::Ungoverned => "no RotationPolicy selects it: left alone".into(),
    };
    let _ = writeln!(out, "NodePool {}  ({} nodes)  {governance}", p.node_pool, p.nodes);
    let row = |out: &mut String, what: &str, text: String| {
        let _ = writeln!(out, "  {what:<13}{text}");
    };
    if let Some(w) = &p.window {
        let text = match (w.always_open, w.start, w.end) {
            (true, _, _) => "open around the clock".to_string(),
            (false, Some(start), Some(end)) if w.open => {
                format!("open until {} UTC ({})", utc(end), relative(end, now))
                    + &format!(", since {} UTC", utc(start))
            }
            (false, Some(start), Some(end)) => {
                format!("next {} - {} UTC ({})", utc(start), utc(end), relative(start, now))
            }
            _ => "none".to_string(),
        };
        row(out, "window", text);
        // The policy's own zones (UTC is the line above).
        for l in w.local.iter().filter(|l| l.timezone != "UTC" && l.timezone != "Etc/UTC") {
            row(out, "", format!("{} - {} {}", l.start, l.end, l.timezone));
        }
    } else if p.governance != GovernanceSummary::Ungoverned {
        row(out, "window", "none".into());
    }
    if let Some(f) = &p.freeze {
        let text = match (f.frozen, f.until) {
            (true, Some(until)) => {
                format!("frozen until {} ({})", utc(until), relative(until, now))
            }
            (true, None) => format!("frozen: unreadable value {:?} counts as frozen", f.value),
            (false, _) => format!("ended ({})", f.value),
        };
        row(out, "freeze", text);
    }
    if let Some(l) = &p.max_unavailable {
        row(out, "in flight", format!("{}/{}  ({})", p.in_flight.len(), l.in_use, l.reason));
    } else if !p.in_flight.is_empty() {
        row(out, "in flight", p.in_flight.len().to_string());
    }
    for r in &p.in_flight {
        let mut text = format!("slot {}  {}  {}", r.slot, r.node_claim, r.stage);
        if let Some(age) = r.age_seconds {
            let _ = write!(text, " for {}", secs(age));
        }
        if let Some(ph) = &r.placeholder {
            let _ = write!(text, ", placeholder {ph}");
        }
        if let Some(path) = &r.surge_path {
            let _ = write!(text, ", surge {path}");
        }
        if let Some(c) = &r.surge_claim {
            let _ = write!(text, " ({c})");
        }
        row(out, "", text);
    }
    if p.window.is_some() {
        let when = match &p.window {
            Some(w) if w.open || w.always_open => "this window",
            _ => "the next window",
        };
        row(out, "due", format!("{} in {when}", p.due.len()));
        for d in &p.due {
            let mut text = d.node_claim.clone();
            if let Some(at) = d.due_at {
                let _ = write!(text, "  due {}", relative(at, now));
            }
            if let Some(dl) = d.deadline {
                let _ = write!(text, ", deadline {} UTC", utc(dl));
            }
            if d.retry {
                text.push_str(" (retry)");
            }
            row(out, "", text);
        }
    }
    if !p.deadlines.is_empty() {
        row(out, "deadlines", "nearest forced expiries".into());
        for d in &p.deadlines {
            let flight = if d.in_flight { "  (rotating)" } else { "" };
            row(
                out,
                "",
                format!(
                    "{}  {} UTC  margin {}{flight}",
                    d.node_claim,
                    utc(d.deadline),
                    secs(d.margin_seconds)
                ),
            );
        }
    }
    for f in &p.findings {
        let severity = match f.severity {
            Severity::Fatal => "FATAL",
            Severity::Warning => "WARNING",
        };
        row(out, "finding", format!("{severity} {}: {}", f.reason, f.message));
        row(out, "", format!("fix: {}", f.fix));
    }
    if let Some(until) = p.failure_pause_until {
        row(
            out,
            "paused",
            format!("after a failure, until {} UTC ({})", utc(until), relative(until, now)),
        );
    }
    for f in &p.failures {
        let mut text = format!("{} {}", f.node_claim, f.state);
        if let Some(at) = f.failed_at {
            let _ = write!(text, " at {} UTC", utc(at));
        }
        if let Some(n) = f.retry_count {
            let _ = write!(text, ", {n} failure(s)");
        }
        if let Some(at) = f.eligible_at {
            let _ = write!(text, ", retried from {} UTC", utc(at));
        }
        row(out, "failure", text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_permission_is_named_with_the_rule_that_grants_it() {
        let all = permissions("ops", true);
        assert_eq!(all.len(), 10, "list and watch on five kinds");
        let missing: Vec<Permission> = all
            .into_iter()
            .filter(|p| p.resource == "nodeclaims" || p.resource == "pods")
            .collect();
        let text = missing_message(&missing);
        assert!(text.contains("  list nodeclaims.karpenter.sh (cluster-wide)\n"), "{text}");
        assert!(text.contains("  watch pods in namespace ops\n"), "{text}");
        assert!(text.contains("apiGroups: [\"karpenter.sh\"]\n    resources: [\"nodeclaims\"]"));
        assert!(text.contains("# a Role in namespace ops"), "{text}");
        assert_eq!(text.matches("resources: [\"nodeclaims\"]").count(), 1, "one rule per kind");
    }
}
