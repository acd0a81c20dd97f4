//! `noderotation uninstall`: removes everything the operator owns in a cluster, so that an
//! uninstall in the middle of a rotation leaves nothing behind.
//!
//! What it removes (the keys come from `rules/annotations.ron`, never from string literals):
//!
//! - every placeholder pod (label `app.kubernetes.io/managed-by=noderotation`) in the operator's
//!   namespace;
//! - on every Node, what [`release_patch`] lifts (the same patch the start-up sweep and
//!   `unfreeze` write): `surge-for`, `karpenter.sh/do-not-disrupt` only where our
//!   `do-not-disrupt-owned` marker says we set it, our cordon only where our `cordoned` marker
//!   says we flipped it, and the markers; an operator's own cordon or do-not-disrupt carries no
//!   marker and stays;
//! - on every NodeClaim, the claim state of in-flight and failed rotations (`state`,
//!   `started-at`, `surge-claim`, `failed-at`, `retry-count`, ...), and `launched-for`; a claim
//!   with `launched-for` (Karpenter launched it for a placeholder) that never initialized, whose
//!   node is not Ready and hosts nothing but DaemonSet, static or completed pods and our
//!   placeholders, is deleted instead: its rotation ends here, and without Karpenter's node
//!   repair nothing else would (docs/decisions/reap-attribution.md);
//! - on every NodePool, the anchor set, the window stamp and the gate anchors
//!   (`last-rotation-at`, `last-failure-at`) — but not `noderotation.io/freeze`, which the
//!   operator (a person) writes and only they remove.
//!
//! Pools are cleaned last, as the anchor is cleared last in a rotation: a run cut short leaves
//! an anchored pool that a second run (or a restarted operator's start-up sweep) finishes.
//!
//! Every write is conditional, like the controller's: the cache (one list of each kind) finds
//! the objects, a fresh read decides the patch, and the patch carries that read's
//! resourceVersion; a 409 starts over from a new read. Running it twice changes nothing the
//! second time. `--dry-run` prints the same changes and writes nothing.
//!
//! `noderotation run` must not be running: a leader would re-assert what this removes (or start
//! a new rotation). The command refuses while the leader Lease is held, and `--stop-deployment`
//! scales the operator's Deployment to zero first (what the Helm pre-delete hook does).
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, Patch as KubePatch, PatchParams};
use kube::runtime::events::Reporter;

use crate::clock::{Clock, SystemClock};
use crate::cluster::kube::{FIELD_MANAGER, KubeCluster};
use crate::cluster::{
    ApiError, CacheView, Cluster, MANAGED_BY_LABEL, MANAGED_BY_VALUE, ObjectKind, ObjectRef, Patch,
};
use crate::engine::Key;
use crate::karpenter::NodeClaim;
use crate::reconcile::{release_patch, slots};

/// Attempts of one conditional write before the object is reported as an error.
const ATTEMPTS: usize = 5;

/// Flags of `noderotation uninstall`; the shared ones read the same environment variables as
/// `noderotation run`.
#[derive(Debug, Clone, Args)]
pub struct UninstallArgs {
    /// Namespace of the operator: its placeholder pods and leader Lease live here.
    #[arg(long, env = "NODEROTATION_NAMESPACE", default_value = "noderotation-system")]
    pub namespace: String,
    /// Name of the operator's leader-election Lease (uninstall refuses while it is held).
    #[arg(long, env = "NODEROTATION_LEADER_ELECTION_ID", default_value = "noderotation")]
    pub leader_election_id: String,
    /// Print every change it would make (object, annotation removed, cordon lifted, pod
    /// deleted) and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Scale this Deployment (the operator's, in --namespace) to zero replicas and wait until
    /// its pods are gone and the Lease is free before cleaning up.
    #[arg(long, value_name = "NAME")]
    pub stop_deployment: Option<String>,
    /// How long to wait for the operator to stop, in seconds.
    #[arg(long, default_value_t = 180)]
    pub wait_seconds: u64,
    /// Delete this ValidatingAdmissionPolicyBinding first (the policy that lets only the
    /// operator write noderotation.io/ annotations), so that nothing this run leaves behind
    /// is out of reach of a person finishing by hand.
    #[arg(long, value_name = "NAME")]
    pub admission_policy_binding: Option<String>,
}

/// One change, applied or (with `--dry-run`) planned.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Change {
    pub object: ObjectRef,
    pub what: What,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum What {
    /// An annotation removed (full key).
    RemoveAnnotation(String),
    /// `spec.unschedulable` set back to false: our cordon lifted.
    Uncordon,
    /// A placeholder pod deleted.
    DeletePod,
    /// A NodeClaim Karpenter launched for a placeholder (`launched-for`) deleted: it never
    /// turned Ready and hosts nothing.
    DeleteSurgeClaim,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.what {
            What::RemoveAnnotation(key) => write!(f, "{}: remove annotation {key}", self.object),
            What::Uncordon => {
                write!(f, "{}: lift our cordon (spec.unschedulable=false)", self.object)
            }
            What::DeletePod => write!(f, "{}: delete placeholder pod", self.object),
            What::DeleteSurgeClaim => {
                write!(f, "{}: delete surge claim that never turned Ready", self.object)
            }
        }
    }
}

/// What one run did (or would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub dry_run: bool,
    /// Every change, in the order it was made.
    pub changes: Vec<Change>,
    /// Objects that could not be cleaned (the run goes on with the others).
    pub errors: Vec<String>,
}

impl Report {
    fn count(&self, kind: ObjectKind) -> usize {
        let mut objects: Vec<&ObjectRef> = self
            .changes
            .iter()
            .filter(|c| c.object.kind == kind && c.what != What::DeletePod)
            .map(|c| &c.object)
            .collect();
        objects.dedup();
        objects.len()
    }

    /// One line: what was (or would be) changed.
    pub fn summary(&self) -> String {
        let verb = if self.dry_run { "would clean" } else { "cleaned" };
        let annotations =
            self.changes.iter().filter(|c| matches!(c.what, What::RemoveAnnotation(_))).count();
        let cordons = self.changes.iter().filter(|c| c.what == What::Uncordon).count();
        let pods = self.changes.iter().filter(|c| c.what == What::DeletePod).count();
        let surges = self.changes.iter().filter(|c| c.what == What::DeleteSurgeClaim).count();
        let mut line = format!(
            "uninstall: {verb} {} NodePool(s), {} NodeClaim(s), {} Node(s): {annotations} annotation(s) removed, {cordons} cordon(s) lifted, {pods} placeholder pod(s) deleted, {surges} never-Ready surge claim(s) deleted",
            self.count(ObjectKind::NodePool),
            self.count(ObjectKind::NodeClaim),
            self.count(ObjectKind::Node),
        );
        if self.changes.is_empty() && self.errors.is_empty() {
            line.push_str(" (nothing of noderotation's is left)");
        }
        if !self.errors.is_empty() {
            line.push_str(&format!("; {} error(s)", self.errors.len()));
        }
        line
    }
}

/// The keys the controller writes, which uninstall removes wherever it finds them: the keys the
/// annotation reference says the controller owns, not the operator's `freeze` nor Karpenter's
/// `do-not-disrupt` (ours only where our marker says so, see [`release_patch`]).
pub fn owned_keys() -> impl Iterator<Item = Key> {
    Key::ALL.iter().copied().filter(|k| k.is_ours())
}

fn has(meta: &ObjectMeta, key: &str) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(key))
}

/// Removes every owned key present on `meta` (adds to `patch`), the copies of every rotation
/// slot of a pool included (`noderotation.io/active-rotation.1`, ...).
fn strip_owned(meta: &ObjectMeta, patch: &mut Patch) {
    for key in owned_keys() {
        if has(meta, key.full()) {
            patch.remove.insert(key.full().to_string());
        }
    }
    let slotted = meta.annotations.iter().flatten().map(|(k, _)| k);
    patch.remove.extend(slotted.filter(|k| slots::is_slot_key(k)).cloned());
}

/// What uninstall removes from a NodePool or NodeClaim: the owned keys.
fn annotations_patch<K: Resource>(obj: &K) -> Patch {
    let mut patch = Patch::default();
    strip_owned(obj.meta(), &mut patch);
    patch
}

/// What uninstall removes from a Node: our markers, cordon and do-not-disrupt, and the owned keys.
fn node_patch(node: &k8s_openapi::api::core::v1::Node) -> Patch {
    let mut patch = release_patch(node, true);
    strip_owned(&node.metadata, &mut patch);
    patch
}

fn changes_of(object: &ObjectRef, patch: &Patch) -> Vec<Change> {
    let mut out: Vec<Change> = patch
        .remove
        .iter()
        .map(|k| Change { object: object.clone(), what: What::RemoveAnnotation(k.clone()) })
        .collect();
    if patch.unschedulable == Some(false) {
        out.push(Change { object: object.clone(), what: What::Uncordon });
    }
    out
}

/// A fresh read: the object's resourceVersion and the patch it needs (`None`: gone).
type Fresh = Result<Option<(Option<String>, Patch)>, ApiError>;

/// Read fresh, decide, write with the read's resourceVersion; on 409 start over.
fn clean(cluster: &dyn Cluster, target: ObjectRef, read: impl Fn() -> Fresh, report: &mut Report) {
    for _ in 0..ATTEMPTS {
        let (rv, patch) = match read() {
            Ok(Some(fresh)) => fresh,
            Ok(None) => return,
            Err(e) => {
                report.errors.push(format!("{target}: read: {e}"));
                return;
            }
        };
        if patch.is_empty() {
            return;
        }
        if report.dry_run {
            report.changes.extend(changes_of(&target, &patch));
            return;
        }
        match cluster.patch(&target, &patch, rv.as_deref()) {
            Ok(_) => {
                report.changes.extend(changes_of(&target, &patch));
                return;
            }
            Err(ApiError::Conflict) => continue,
            Err(ApiError::NotFound) => return,
            Err(e) => {
                report.errors.push(format!("{target}: patch: {e}"));
                return;
            }
        }
    }
    report.errors.push(format!("{target}: kept changing under {ATTEMPTS} conditional writes"));
}

/// Removes everything the operator owns (see the module docs). Never fails as a whole: an
/// object that cannot be cleaned is recorded in [`Report::errors`] and the run goes on.
pub fn uninstall(cluster: &dyn Cluster, dry_run: bool) -> Report {
    let mut report = Report { dry_run, ..Report::default() };
    let cache = cluster.cache();

    // Placeholders first: the surge capacity they hold is released before anything else.
    for (name, pod) in &cache.placeholders {
        let labels = pod.metadata.labels.as_ref();
        if labels.and_then(|l| l.get(MANAGED_BY_LABEL)).map(String::as_str)
            != Some(MANAGED_BY_VALUE)
        {
            continue;
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let target = ObjectRef::pod(namespace, name.clone());
        let change = Change { object: target.clone(), what: What::DeletePod };
        if dry_run {
            report.changes.push(change);
            continue;
        }
        match cluster.delete(&target, pod.metadata.uid.as_deref(), None) {
            Ok(()) => report.changes.push(change),
            Err(ApiError::NotFound) => {}
            Err(e) => report.errors.push(format!("{target}: delete: {e}")),
        }
    }

    let node = |n: &str| cluster.get_node(n);
    clean_all(cluster, ObjectKind::Node, &cache.nodes, node_patch, node, &mut report);
    let reaped = reap_surge_claims(cluster, &cache, &mut report);
    let claims: BTreeMap<String, Arc<NodeClaim>> = cache
        .claims
        .iter()
        .filter(|(n, _)| !reaped.contains(*n))
        .map(|(n, c)| (n.clone(), c.clone()))
        .collect();
    let claim = |n: &str| cluster.get_claim(n);
    clean_all(cluster, ObjectKind::NodeClaim, &claims, annotations_patch, claim, &mut report);
    // Pools last: the anchor is the last thing a rotation clears.
    let pool = |n: &str| cluster.get_pool(n);
    clean_all(cluster, ObjectKind::NodePool, &cache.pools, annotations_patch, pool, &mut report);
    report
}

/// Deletes each claim marked `launched-for` that never initialized, whose node (if any) is not
/// Ready and hosts nothing but DaemonSet, static or completed pods and our placeholders, all on
/// fresh reads; the delete is preconditioned on the uid and resourceVersion of the claim's read
/// (a 409 starts over). Returns the claims deleted (or, dry, to be deleted).
fn reap_surge_claims(
    cluster: &dyn Cluster,
    cache: &CacheView,
    report: &mut Report,
) -> BTreeSet<String> {
    let ours: BTreeSet<&str> =
        cache.placeholders.values().filter_map(|p| p.metadata.uid.as_deref()).collect();
    let mut reaped = BTreeSet::new();
    for (name, cached) in &cache.claims {
        if !surge_left(cached) {
            continue;
        }
        let target = ObjectRef::cluster(ObjectKind::NodeClaim, name.clone());
        for attempt in 0..=ATTEMPTS {
            if attempt == ATTEMPTS {
                report.errors.push(format!("{target}: kept changing under {ATTEMPTS} deletes"));
                break;
            }
            let fresh = match cluster.get_claim(name) {
                Ok(Some(c)) if surge_left(&c) => c,
                Ok(_) => break,
                Err(e) => {
                    report.errors.push(format!("{target}: read: {e}"));
                    break;
                }
            };
            match strands_nothing(cluster, &fresh, &ours) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    report.errors.push(format!("{target}: read its node: {e}"));
                    break;
                }
            }
            let change = Change { object: target.clone(), what: What::DeleteSurgeClaim };
            if report.dry_run {
                report.changes.push(change);
                reaped.insert(name.clone());
                break;
            }
            let meta = &fresh.metadata;
            match cluster.delete(&target, meta.uid.as_deref(), meta.resource_version.as_deref()) {
                Ok(()) => {
                    report.changes.push(change);
                    reaped.insert(name.clone());
                    break;
                }
                Err(ApiError::Conflict) => continue,
                Err(ApiError::NotFound) => break,
                Err(e) => {
                    report.errors.push(format!("{target}: delete: {e}"));
                    break;
                }
            }
        }
    }
    reaped
}

/// A claim Karpenter launched for a placeholder (`launched-for`) that never initialized and is
/// not being deleted.
fn surge_left(claim: &NodeClaim) -> bool {
    has(&claim.metadata, Key::LaunchedFor.full())
        && !claim.is_initialized()
        && claim.metadata.deletion_timestamp.is_none()
}

/// The claim's node (by `status.nodeName`, else by providerID) is absent or not Ready, and hosts
/// nothing but DaemonSet, static or completed pods and the placeholders with uids in `ours`.
fn strands_nothing(
    cluster: &dyn Cluster,
    claim: &NodeClaim,
    ours: &BTreeSet<&str>,
) -> Result<bool, ApiError> {
    let status = claim.status.as_ref();
    let node = match status.and_then(|s| s.node_name.as_deref()) {
        Some(n) => cluster.get_node(n)?,
        None => match (claim.node_pool(), status.and_then(|s| s.provider_id.as_deref())) {
            (Some(pool), Some(id)) => cluster.node_with_provider_id(pool, id)?,
            _ => None,
        },
    };
    let Some(node) = node else { return Ok(true) };
    if crate::karpenter::node_ready(&node) {
        return Ok(false);
    }
    let pods = cluster.pods_on_node(node.metadata.name.as_deref().unwrap_or(""))?;
    Ok(crate::placeholder::hosts_nothing_but(&pods, |p| {
        p.metadata.uid.as_deref().is_some_and(|u| ours.contains(u))
    }))
}

/// [`clean`] every cached object of one kind that `patch_of` finds something of ours on,
/// deciding again on a fresh read (`get`) before each conditional write.
fn clean_all<K: Resource>(
    cluster: &dyn Cluster,
    kind: ObjectKind,
    cached: &BTreeMap<String, Arc<K>>,
    patch_of: fn(&K) -> Patch,
    get: impl Fn(&str) -> Result<Option<K>, ApiError>,
    report: &mut Report,
) {
    for (name, obj) in cached {
        if patch_of(obj).is_empty() {
            continue;
        }
        let target = ObjectRef::cluster(kind, name.clone());
        let read = || -> Fresh {
            Ok(get(name)?.map(|fresh| (fresh.meta().resource_version.clone(), patch_of(&fresh))))
        };
        clean(cluster, target, read, report);
    }
}

/// Who holds the leader Lease at `now` (the one definition `run` shares).
pub use crate::runtime::install::lease_holder;

/// Runs `noderotation uninstall`; the process exit code.
pub fn run(args: &UninstallArgs) -> anyhow::Result<i32> {
    crate::runtime::block_on(run_async(args.clone()))
}

async fn run_async(args: UninstallArgs) -> anyhow::Result<i32> {
    let client = crate::runtime::client().await?;
    let clock = SystemClock;
    if let Some(binding) = &args.admission_policy_binding {
        if args.dry_run {
            println!("ValidatingAdmissionPolicyBinding {binding}: would delete it first");
        } else {
            lift_admission_policy(&client, binding).await?;
        }
    }
    if let Some(deployment) = &args.stop_deployment {
        if args.dry_run {
            println!(
                "Deployment {}/{deployment}: would scale to 0 replicas and wait for its pods",
                args.namespace
            );
        } else {
            stop_deployment(&client, &args, deployment, &clock).await?;
        }
    }
    let leases = Api::<Lease>::namespaced(client.clone(), &args.namespace);
    let lease = leases.get_opt(&args.leader_election_id).await.with_context(|| {
        format!("reading the leader Lease {}/{}", args.namespace, args.leader_election_id)
    })?;
    if let Some(holder) = lease.as_ref().and_then(|l| lease_holder(l, clock.now())) {
        let message = format!(
            "noderotation run is running: {holder} holds the leader Lease {}/{}. Stop the operator first (kubectl -n {} scale deployment <name> --replicas=0, or pass --stop-deployment <name>): a running leader re-asserts what uninstall removes",
            args.namespace, args.leader_election_id, args.namespace
        );
        if !args.dry_run {
            anyhow::bail!(message);
        }
        eprintln!("warning: {message}");
    }

    let reporter = Reporter { controller: "noderotation-uninstall".into(), instance: None };
    let cluster =
        KubeCluster::listed(client, args.namespace.clone(), reporter).await.map_err(|e| {
            anyhow::anyhow!("listing NodePools, NodeClaims, Nodes and placeholder pods: {e}")
        })?;
    let dry_run = args.dry_run;
    let shared: Arc<KubeCluster> = cluster;
    // The Cluster trait blocks on the runtime: run it on a blocking thread (see cluster::kube).
    let report = tokio::task::spawn_blocking(move || uninstall(shared.as_ref(), dry_run))
        .await
        .context("the uninstall worker panicked")?;
    print_report(&report);
    Ok(if report.errors.is_empty() { 0 } else { 1 })
}

/// Prints every change (prefixed `would` under `--dry-run`), the errors and the summary.
pub(crate) fn print_report(report: &Report) {
    for change in &report.changes {
        if report.dry_run {
            println!("would {change}");
        } else {
            println!("{change}");
        }
    }
    for error in &report.errors {
        eprintln!("error: {error}");
    }
    println!("{}", report.summary());
}

/// Deletes the binding of the admission policy that reserves noderotation.io/ annotations for
/// the operator: the Helm pre-delete hook does this before anything else, so that the keys stay
/// removable by hand if the hook fails halfway (or a person runs the cleanup).
async fn lift_admission_policy(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    match bindings.delete(name, &DeleteParams::default()).await {
        Ok(_) => println!(
            "ValidatingAdmissionPolicyBinding {name}: deleted (noderotation.io/ annotations are no longer reserved for the operator)"
        ),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            println!("ValidatingAdmissionPolicyBinding {name} does not exist: nothing to lift")
        }
        Err(err) => {
            return Err(err)
                .with_context(|| format!("deleting ValidatingAdmissionPolicyBinding {name}"));
        }
    }
    Ok(())
}

async fn stop_deployment(
    client: &kube::Client,
    args: &UninstallArgs,
    name: &str,
    clock: &dyn Clock,
) -> anyhow::Result<()> {
    let deployments = Api::<Deployment>::namespaced(client.clone(), &args.namespace);
    let Some(deployment) = deployments
        .get_opt(name)
        .await
        .with_context(|| format!("reading Deployment {}/{name}", args.namespace))?
    else {
        println!("Deployment {}/{name} does not exist: nothing to stop", args.namespace);
        return Ok(());
    };
    let selector = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .map(|labels| labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
        .filter(|s| !s.is_empty())
        .with_context(|| {
            format!("Deployment {}/{name} has no matchLabels selector", args.namespace)
        })?;
    let params =
        PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
    deployments
        .patch_scale(name, &params, &KubePatch::Merge(serde_json::json!({"spec": {"replicas": 0}})))
        .await
        .with_context(|| format!("scaling Deployment {}/{name} to 0", args.namespace))?;
    println!("Deployment {}/{name}: scaled to 0; waiting for its pods to stop", args.namespace);
    let pods = Api::<Pod>::namespaced(client.clone(), &args.namespace);
    let leases = Api::<Lease>::namespaced(client.clone(), &args.namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.wait_seconds);
    loop {
        let running = pods.list(&ListParams::default().labels(&selector)).await?.items.len();
        let lease = leases.get_opt(&args.leader_election_id).await?;
        let holder = lease.as_ref().and_then(|l| lease_holder(l, clock.now()));
        if running == 0 && holder.is_none() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the operator did not stop within {}s ({running} pod(s) left, Lease holder {:?})",
                args.wait_seconds,
                holder
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
