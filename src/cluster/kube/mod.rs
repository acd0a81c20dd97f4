//! [`KubeCluster`]: the [`Cluster`] interface over kube-rs, for `noderotation run`.
//!
//! Reads come from reflector stores (NodePools, NodeClaims, Nodes, placeholder Pods,
//! RotationPolicies and, for `run` ([`Watches::Controller`]), the placeholders' PriorityClass and
//! Karpenter's `Nominated` Events in the controller's namespace), written by one watcher task per
//! kind; [`Cluster::cache`] turns them into a
//! [`CacheView`] and rebuilds it only when a store changed since the last call. Fresh reads are
//! `GET`s; the pods of a node are listed on demand with a `spec.nodeName` field selector, served
//! from the API server's watch cache ([`pods_on_node_params`]; there is no cache of every pod in
//! the cluster here). Writes are JSON merge patches on
//! `metadata.annotations` (a `null` value removes a key) and, for nodes, `spec.unschedulable`;
//! a resourceVersion precondition travels in the patch body as `metadata.resourceVersion`, so
//! the API server answers 409 when the object moved on. Deletes carry a uid precondition (and
//! the resourceVersion of the read that verified them, when the caller has one).
//!
//! The watches and the requests may use two clients ([`KubeCluster::start_with`]): `run` bounds
//! every request ([`Requests::timeout`], on top of the client's own connect/read/write bounds)
//! while a watch may stay quiet for minutes.
//!
//! # Threads
//!
//! The [`Cluster`] trait is synchronous: every method blocks the calling thread on the tokio
//! runtime with [`Handle::block_on`]. **Call it only from a blocking thread** (a
//! `tokio::task::spawn_blocking` closure or a plain `std::thread`), never from an async task on
//! a runtime worker: `block_on` panics there. `noderotation run` drives the
//! [`crate::reconcile::Controller`] inside `spawn_blocking` for exactly this reason.
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, ObjectReference, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch as KubePatch, PatchParams,
    PostParams, Preconditions,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event as WatchEvent};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::change::{Change, Watched};
use super::events::EventSink;
use super::projection;
use super::{
    ApiError, ApiResult, CacheView, Cluster, EventRecord, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    NOMINATED_REASON, ObjectKind, ObjectRef, Patch,
};
use crate::karpenter::{NODEPOOL_LABEL, NodeClaim, NodePool};
use crate::policy::crd::{RotationPolicy, RotationPolicyStatus as Status};

/// The field manager of every write.
pub(crate) const FIELD_MANAGER: &str = "noderotation";

/// The label selector of the placeholder-pod watch.
pub(crate) fn placeholder_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

/// The field selector of the nominations watch: Karpenter's `Nominated` Events on pods.
pub(crate) fn nomination_selector() -> String {
    format!("reason={NOMINATED_REASON},involvedObject.kind=Pod")
}

/// Maps a kube-rs error to what the API server answered.
pub(crate) fn map_error(err: kube::Error, creating: bool) -> ApiError {
    match err {
        kube::Error::Api(status) => {
            let message = if status.message.is_empty() {
                status.reason.clone()
            } else {
                status.message.clone()
            };
            match status.code {
                404 => ApiError::NotFound,
                409 if creating || status.reason == "AlreadyExists" => ApiError::AlreadyExists,
                409 => ApiError::Conflict,
                403 => ApiError::Forbidden(message),
                408 | 429 => ApiError::Transient(message),
                400..=499 => ApiError::Invalid(message),
                _ => ApiError::Transient(format!("{} {message}", status.code)),
            }
        }
        other => ApiError::Transient(other.to_string()),
    }
}

/// How long after its last error a watch counts as broken when no event came since. The
/// watcher retries a failing watch with a backoff of at most 30s, so a watch still failing
/// reports an error well within this; a watch re-established on a quiet cluster delivers no
/// event, and its last error ages out instead.
pub(crate) const WATCH_RECOVERY: std::time::Duration = std::time::Duration::from_secs(120);

/// Objects per page of every watch's initial list and re-list (kube-runtime's default is 500).
/// A page is decoded whole before the projection keeps about 4 KB of each object: at
/// EKS/Karpenter shapes (a Node is about 17.5 KB of JSON) 500 Nodes are about 9 MB of JSON and
/// 23 MB of decoded objects, and the allocator keeps that peak resident long after, interleaved
/// with the stored copies. Pages of 100 cost 50 list requests per 5,000 objects instead of 10,
/// at start-up and re-list only (docs/performance.md: the RSS rows, and the start-up column of
/// the request table).
pub const LIST_PAGE: u32 = 100;

/// Whether each watch still delivers after the first sync, for `/readyz`: a reflector whose
/// watch broke serves an ever older cache.
#[derive(Debug, Default)]
pub(crate) struct WatchHealth {
    /// Kinds whose last outcome was an error, with that error's time.
    failing: Mutex<std::collections::BTreeMap<ObjectKind, std::time::Instant>>,
}

impl WatchHealth {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<ObjectKind, std::time::Instant>> {
        self.failing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watch of `kind` returned an error at `at`.
    pub(crate) fn failed(&self, kind: ObjectKind, at: std::time::Instant) {
        self.lock().insert(kind, at);
    }

    /// The watch of `kind` delivered an event.
    pub(crate) fn delivered(&self, kind: ObjectKind) {
        self.lock().remove(&kind);
    }

    /// Kinds whose watch failed within [`WATCH_RECOVERY`] before `now` and delivered nothing
    /// since.
    pub(crate) fn broken(&self, now: std::time::Instant) -> Vec<ObjectKind> {
        self.lock()
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) < WATCH_RECOVERY)
            .map(|(kind, _)| *kind)
            .collect()
    }
}

/// What a [`KubeCluster`] watches beside NodePools, NodeClaims, Nodes, placeholder Pods and
/// RotationPolicies.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Watches<'a> {
    /// Nothing more: a reader (`noderotation status --watch`), whose user needs no more RBAC.
    Readers,
    /// The controller (`run`): also the PriorityClass the placeholders name, by name (its
    /// changes only rebuild the cached view: see [`CacheView::placeholder_class`]), and
    /// Karpenter's `Nominated` Events on pods of the namespace (which claim it launched for each
    /// placeholder: [`CacheView::nominations`]).
    Controller { placeholder_class: &'a str },
}

struct Stores {
    pools: Store<NodePool>,
    claims: Store<NodeClaim>,
    nodes: Store<Node>,
    placeholders: Store<Pod>,
    policies: Store<RotationPolicy>,
    /// The placeholders' PriorityClass, watched by name (`run` only).
    placeholder_class: Option<Store<PriorityClass>>,
    /// Karpenter's `Nominated` Events in the controller's namespace (`run` only).
    nominations: Option<Store<Event>>,
}

/// The client of the requests (reads, writes, Events) and the bound of each.
#[derive(Clone)]
pub(crate) struct Requests {
    pub client: Client,
    /// A request (with whatever the client does inside it) that has not answered by then is
    /// abandoned: `Transient`, the write may or may not have been applied.
    pub timeout: Option<std::time::Duration>,
}

/// The kube-rs cluster. Cheap to share (`Arc`); see the module docs for the threading rule.
pub struct KubeCluster {
    client: Client,
    timeout: Option<std::time::Duration>,
    handle: Handle,
    namespace: String,
    stores: Stores,
    /// Bumped by every watch event; the cached view remembers the value it was built at.
    generation: Arc<AtomicU64>,
    view: Mutex<Option<(u64, Arc<CacheView>)>>,
    synced: Arc<AtomicBool>,
    watches: Arc<WatchHealth>,
    recorder: EventSink,
}

/// Removes what the controller never reads before an object enters a store
/// ([`super::projection`]): managed fields everywhere, and more of Nodes and NodeClaims.
fn strip<K: Resource>(obj: &mut K) {
    projection::metadata(obj.meta_mut());
}

/// Where a reflector reports: the cache generation, the change stream, the watch health.
#[derive(Clone)]
struct Sinks {
    generation: Arc<AtomicU64>,
    tx: mpsc::UnboundedSender<Change>,
    watches: Arc<WatchHealth>,
}

/// What a reflector reports besides rebuilding the view: its changes, as `wrap` makes them,
/// and its health under `kind`. `None`: a watch whose changes wake no pool (the placeholder
/// PriorityClass), only logged when it fails.
type Report<K> = Option<(fn(Arc<K>) -> Watched, ObjectKind)>;

fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    modify: fn(&mut K),
    sinks: Sinks,
    report: Report<K>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = watcher(api, config).default_backoff().modify(modify);
    let stream = reflector::reflector(writer, stream);
    let Sinks { generation, tx, watches } = sinks;
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match (event, report) {
                (Ok(_), None) => {
                    generation.fetch_add(1, Ordering::AcqRel);
                }
                (Err(err), None) => {
                    tracing::warn!(kind = K::kind(&()).as_ref(), error = %err, "watch failed; retrying with backoff")
                }
                (Ok(event), Some((wrap, kind))) => {
                    watches.delivered(kind);
                    generation.fetch_add(1, Ordering::AcqRel);
                    let change = match event {
                        WatchEvent::Apply(obj) => Change::Applied(wrap(Arc::new(obj))),
                        WatchEvent::Delete(obj) => Change::Deleted(wrap(Arc::new(obj))),
                        WatchEvent::InitDone => Change::Resynced(kind),
                        WatchEvent::Init | WatchEvent::InitApply(_) => continue,
                    };
                    // The receiver is gone only at shutdown.
                    let _ = tx.send(change);
                }
                (Err(err), Some((_, kind))) => {
                    watches.failed(kind, std::time::Instant::now());
                    tracing::warn!(kind = ?kind, error = %err, "watch failed; retrying with backoff")
                }
            }
        }
    });
    reader
}

use kube::runtime::watcher::watcher;

/// One list of `api`, in pages of [`LIST_PAGE`], as a ready store (see [`KubeCluster::listed`]).
async fn list_into_store<K>(
    api: Api<K>,
    params: &ListParams,
    modify: fn(&mut K),
) -> Result<Store<K>, ApiError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut writer = reflector::store::Writer::<K>::default();
    writer.apply_watcher_event(&WatchEvent::Init);
    let mut page = params.clone().limit(LIST_PAGE);
    loop {
        let list = match api.list(&page).await {
            Ok(list) => list,
            Err(err) => match map_error(err, false) {
                // The kind is not served: its CRD is gone. Only on the first page (no continue
                // token yet): a list cut short would hide objects (uninstall would leave them
                // behind).
                ApiError::NotFound if page.continue_token.is_none() => break,
                other => return Err(other),
            },
        };
        for mut item in list.items {
            modify(&mut item);
            writer.apply_watcher_event(&WatchEvent::InitApply(item));
        }
        match list.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => page = page.continue_token(&token),
            None => break,
        }
    }
    writer.apply_watcher_event(&WatchEvent::InitDone);
    Ok(writer.as_reader())
}

impl KubeCluster {
    /// Starts the five watches on the current runtime and returns the cluster and the stream
    /// of changes. Must be called inside the runtime (it spawns tasks).
    pub fn start(
        client: Client,
        namespace: impl Into<String>,
        reporter: Reporter,
    ) -> (Arc<KubeCluster>, mpsc::UnboundedReceiver<Change>) {
        let requests = Requests { client: client.clone(), timeout: None };
        KubeCluster::start_with(client, requests, namespace, reporter, Watches::Readers)
    }

    /// [`KubeCluster::start`] with the watches on `client` and every request on `requests`, and
    /// the controller's own watches with [`Watches::Controller`].
    pub(crate) fn start_with(
        client: Client,
        requests: Requests,
        namespace: impl Into<String>,
        reporter: Reporter,
        watches: Watches<'_>,
    ) -> (Arc<KubeCluster>, mpsc::UnboundedReceiver<Change>) {
        let placeholder_class = match watches {
            Watches::Readers => None,
            Watches::Controller { placeholder_class } => Some(placeholder_class),
        };
        let namespace = namespace.into();
        let generation = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::unbounded_channel();
        let watches = Arc::new(WatchHealth::default());
        let sinks = Sinks { generation: generation.clone(), tx, watches: watches.clone() };
        // Every watch lists in pages of LIST_PAGE; the selected ones narrow this config.
        let paged = watcher::Config::default().page_size(LIST_PAGE);
        let stores = Stores {
            pools: spawn_reflector(
                Api::<NodePool>::all(client.clone()),
                paged.clone(),
                strip,
                sinks.clone(),
                Some((Watched::Pool, ObjectKind::NodePool)),
            ),
            claims: spawn_reflector(
                Api::<NodeClaim>::all(client.clone()),
                paged.clone(),
                projection::claim,
                sinks.clone(),
                Some((Watched::Claim, ObjectKind::NodeClaim)),
            ),
            nodes: spawn_reflector(
                Api::<Node>::all(client.clone()),
                paged.clone(),
                projection::node,
                sinks.clone(),
                Some((Watched::Node, ObjectKind::Node)),
            ),
            placeholders: spawn_reflector(
                Api::<Pod>::namespaced(client.clone(), &namespace),
                paged.clone().labels(&placeholder_selector()),
                strip,
                sinks.clone(),
                Some((Watched::Placeholder, ObjectKind::Pod)),
            ),
            policies: spawn_reflector(
                Api::<RotationPolicy>::all(client.clone()),
                paged.clone(),
                strip,
                sinks.clone(),
                Some((Watched::Policy, ObjectKind::RotationPolicy)),
            ),
            // By name (a metadata.name field selector), so RBAC can narrow it to that class.
            placeholder_class: placeholder_class.map(|name| {
                spawn_reflector(
                    Api::<PriorityClass>::all(client.clone()),
                    paged.clone().fields(&format!("metadata.name={name}")),
                    strip,
                    sinks.clone(),
                    None,
                )
            }),
            nominations: placeholder_class.is_some().then(|| {
                spawn_reflector(
                    Api::<Event>::namespaced(client.clone(), &namespace),
                    paged.fields(&nomination_selector()),
                    strip,
                    sinks,
                    Some((Watched::Nomination, ObjectKind::Event)),
                )
            }),
        };
        let recorder =
            EventSink::new(requests.client.clone(), reporter.controller, reporter.instance);
        let cluster = KubeCluster {
            client: requests.client,
            timeout: requests.timeout,
            handle: Handle::current(),
            namespace,
            stores,
            generation,
            view: Mutex::new(None),
            synced: Arc::new(AtomicBool::new(false)),
            watches,
            recorder,
        };
        (Arc::new(cluster), rx)
    }

    /// A cluster whose stores hold one list of each of the five kinds, taken now, with no
    /// watches (and none of [`Watches::Controller`]'s): for one-shot commands
    /// (`noderotation uninstall`, `noderotation status`) that read the cache to find objects and
    /// then verify each with a fresh read before a preconditioned write. A kind whose API is not
    /// served (404: its CRD is gone) lists as empty. Each kind is listed in pages of
    /// [`LIST_PAGE`], as the watches list, so that one command on a large cluster asks the API
    /// server for no list of thousands of whole objects at once. Must be called inside the
    /// runtime.
    pub async fn listed(
        client: Client,
        namespace: impl Into<String>,
        reporter: Reporter,
    ) -> Result<Arc<KubeCluster>, ApiError> {
        let namespace = namespace.into();
        let all = ListParams::default();
        let stores = Stores {
            pools: list_into_store(Api::<NodePool>::all(client.clone()), &all, strip).await?,
            claims: list_into_store(Api::<NodeClaim>::all(client.clone()), &all, projection::claim)
                .await?,
            nodes: list_into_store(Api::<Node>::all(client.clone()), &all, projection::node)
                .await?,
            placeholders: list_into_store(
                Api::<Pod>::namespaced(client.clone(), &namespace),
                &ListParams::default().labels(&placeholder_selector()),
                strip,
            )
            .await?,
            policies: list_into_store(Api::<RotationPolicy>::all(client.clone()), &all, strip)
                .await?,
            placeholder_class: None,
            nominations: None,
        };
        let recorder = EventSink::new(client.clone(), reporter.controller, reporter.instance);
        Ok(Arc::new(KubeCluster {
            client,
            timeout: None,
            handle: Handle::current(),
            namespace,
            stores,
            generation: Arc::new(AtomicU64::new(0)),
            view: Mutex::new(None),
            synced: Arc::new(AtomicBool::new(true)),
            watches: Arc::new(WatchHealth::default()),
            recorder,
        }))
    }

    /// Waits until every store has completed its first list (async; call from the runtime).
    pub async fn wait_synced(&self) -> Result<(), reflector::store::WriterDropped> {
        self.stores.pools.wait_until_ready().await?;
        self.stores.claims.wait_until_ready().await?;
        self.stores.nodes.wait_until_ready().await?;
        self.stores.placeholders.wait_until_ready().await?;
        self.stores.policies.wait_until_ready().await?;
        if let Some(class) = &self.stores.placeholder_class {
            class.wait_until_ready().await?;
        }
        if let Some(nominations) = &self.stores.nominations {
            nominations.wait_until_ready().await?;
        }
        self.synced.store(true, Ordering::Release);
        Ok(())
    }

    /// Every store has completed its first list.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The kinds whose watch is failing now ([`WatchHealth::broken`]).
    pub(crate) fn broken_watches(&self) -> Vec<ObjectKind> {
        self.watches.broken(std::time::Instant::now())
    }

    /// The names of every NodePool in the store.
    pub(crate) fn pool_names(&self) -> Vec<String> {
        self.stores.pools.state().iter().map(|p| p.name_any()).collect()
    }

    /// The pool of a claim in the store (its `karpenter.sh/nodepool` label).
    pub(crate) fn pool_of_claim(&self, claim: &str) -> Option<String> {
        let key = reflector::ObjectRef::<NodeClaim>::new(claim);
        self.stores.claims.get(&key).and_then(|c| c.node_pool().map(str::to_string))
    }

    fn block<F: std::future::Future>(&self, fut: F) -> F::Output {
        self.handle.block_on(fut)
    }

    /// One request, bounded by [`Requests::timeout`], its error mapped.
    fn request<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, kube::Error>>,
        creating: bool,
    ) -> Result<T, ApiError> {
        let answer = match self.timeout {
            Some(bound) => match self.block(tokio::time::timeout(bound, fut)) {
                Ok(answer) => answer,
                Err(_) => {
                    return Err(ApiError::Transient(format!("no answer within {bound:?}")));
                }
            },
            None => self.block(fut),
        };
        answer.map_err(|e| map_error(e, creating))
    }

    fn resource(kind: ObjectKind) -> ApiResource {
        match kind {
            ObjectKind::NodePool => ApiResource::erase::<NodePool>(&()),
            ObjectKind::NodeClaim => ApiResource::erase::<NodeClaim>(&()),
            ObjectKind::Node => ApiResource::erase::<Node>(&()),
            ObjectKind::Pod => ApiResource::erase::<Pod>(&()),
            ObjectKind::RotationPolicy => ApiResource::erase::<RotationPolicy>(&()),
            ObjectKind::Event => ApiResource::erase::<Event>(&()),
        }
    }

    fn dynamic_api(&self, target: &ObjectRef) -> Api<DynamicObject> {
        let resource = Self::resource(target.kind);
        match (&target.namespace, target.kind.namespaced()) {
            (Some(ns), _) => Api::namespaced_with(self.client.clone(), ns, &resource),
            (None, true) => Api::namespaced_with(self.client.clone(), &self.namespace, &resource),
            (None, false) => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// The JSON merge patch for `patch` (see the module docs).
    pub(crate) fn merge_patch_body(
        target: &ObjectRef,
        patch: &Patch,
        resource_version: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut metadata = Map::new();
        if !patch.set.is_empty() || !patch.remove.is_empty() {
            let mut annotations = Map::new();
            for key in &patch.remove {
                annotations.insert(key.clone(), Value::Null);
            }
            for (key, value) in &patch.set {
                annotations.insert(key.clone(), Value::String(value.clone()));
            }
            metadata.insert("annotations".into(), Value::Object(annotations));
        }
        if let Some(rv) = resource_version {
            metadata.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let mut body = Map::new();
        body.insert("metadata".into(), Value::Object(metadata));
        if let Some(unschedulable) = patch.unschedulable {
            if target.kind != ObjectKind::Node {
                return Err(ApiError::Invalid(format!("{target}: only nodes can be cordoned")));
            }
            body.insert("spec".into(), json!({ "unschedulable": unschedulable }));
        }
        Ok(Value::Object(body))
    }

    fn uid_of(&self, target: &ObjectRef) -> Option<String> {
        let name = target.name.as_str();
        match target.kind {
            ObjectKind::NodePool => {
                self.stores.pools.get(&reflector::ObjectRef::new(name)).and_then(|o| o.uid())
            }
            ObjectKind::NodeClaim => {
                self.stores.claims.get(&reflector::ObjectRef::new(name)).and_then(|o| o.uid())
            }
            ObjectKind::Node => {
                self.stores.nodes.get(&reflector::ObjectRef::new(name)).and_then(|o| o.uid())
            }
            ObjectKind::Pod => {
                let ns = target.namespace.as_deref().unwrap_or(&self.namespace);
                self.stores
                    .placeholders
                    .get(&reflector::ObjectRef::new(name).within(ns))
                    .and_then(|o| o.uid())
            }
            ObjectKind::RotationPolicy => {
                self.stores.policies.get(&reflector::ObjectRef::new(name)).and_then(|o| o.uid())
            }
            ObjectKind::Event => {
                let ns = target.namespace.as_deref().unwrap_or(&self.namespace);
                self.stores
                    .nominations
                    .as_ref()?
                    .get(&reflector::ObjectRef::new(name).within(ns))
                    .and_then(|o| o.uid())
            }
        }
    }

    /// The `regarding` reference of an Event about `target`.
    fn object_reference(&self, target: &ObjectRef) -> ObjectReference {
        let resource = Self::resource(target.kind);
        let namespace = target
            .kind
            .namespaced()
            .then(|| target.namespace.clone().unwrap_or_else(|| self.namespace.clone()));
        ObjectReference {
            api_version: Some(resource.api_version),
            kind: Some(resource.kind),
            name: Some(target.name.clone()),
            namespace,
            uid: self.uid_of(target),
            ..ObjectReference::default()
        }
    }
}

fn index<K: Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> BTreeMap<String, Arc<K>> {
    store.state().into_iter().map(|o| (o.meta().name.clone().unwrap_or_default(), o)).collect()
}

impl Cluster for KubeCluster {
    fn cache(&self) -> Arc<CacheView> {
        // Read the generation before building: a change during the build bumps it again, so
        // the next call rebuilds.
        let generation = self.generation.load(Ordering::Acquire);
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((built_at, cached)) = view.as_ref()
            && *built_at == generation
        {
            return cached.clone();
        }
        let fresh = Arc::new(CacheView {
            pools: index(&self.stores.pools),
            claims: index(&self.stores.claims),
            nodes: index(&self.stores.nodes),
            placeholders: index(&self.stores.placeholders),
            policies: index(&self.stores.policies),
            placeholder_class: self
                .stores
                .placeholder_class
                .as_ref()
                .and_then(|store| store.state().into_iter().next()),
            nominations: self.stores.nominations.as_ref().map(index).unwrap_or_default(),
        });
        *view = Some((generation, fresh.clone()));
        fresh
    }

    fn get_pool(&self, name: &str) -> ApiResult<Option<NodePool>> {
        let api = Api::<NodePool>::all(self.client.clone());
        self.request(api.get_opt(name), false)
    }

    fn get_claim(&self, name: &str) -> ApiResult<Option<NodeClaim>> {
        let api = Api::<NodeClaim>::all(self.client.clone());
        self.request(api.get_opt(name), false)
    }

    fn get_node(&self, name: &str) -> ApiResult<Option<Node>> {
        let api = Api::<Node>::all(self.client.clone());
        self.request(api.get_opt(name), false)
    }

    fn get_pod(&self, namespace: &str, name: &str) -> ApiResult<Option<Pod>> {
        let api = Api::<Pod>::namespaced(self.client.clone(), namespace);
        self.block(api.get_opt(name)).map_err(|e| map_error(e, false))
    }

    fn pods_on_node(&self, node: &str) -> ApiResult<Vec<Pod>> {
        let api = Api::<Pod>::all(self.client.clone());
        self.request(api.list(&pods_on_node_params(node)), false).map(|list| list.items)
    }

    fn node_with_provider_id(&self, pool: &str, provider_id: &str) -> ApiResult<Option<Node>> {
        // Nodes have no field selector on spec.providerID; the pool's label narrows the list.
        let api = Api::<Node>::all(self.client.clone());
        let params = ListParams::default().labels(&format!("{NODEPOOL_LABEL}={pool}"));
        let list = self.request(api.list(&params), false)?;
        Ok(list
            .items
            .into_iter()
            .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id)))
    }

    fn nominations(&self, pod_uid: &str) -> ApiResult<Vec<Event>> {
        let api = Api::<Event>::namespaced(self.client.clone(), &self.namespace);
        let fields = format!("{},involvedObject.uid={pod_uid}", nomination_selector());
        let params = ListParams::default().fields(&fields);
        self.request(api.list(&params), false).map(|list| list.items)
    }

    fn patch(
        &self,
        target: &ObjectRef,
        patch: &Patch,
        rv: Option<&str>,
    ) -> ApiResult<Option<String>> {
        let body = Self::merge_patch_body(target, patch, rv)?;
        let api = self.dynamic_api(target);
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        self.request(api.patch(&target.name, &params, &KubePatch::Merge(&body)), false)
            .map(|object| object.metadata.resource_version)
    }

    fn delete(&self, target: &ObjectRef, uid: Option<&str>, rv: Option<&str>) -> ApiResult<()> {
        let api = self.dynamic_api(target);
        let preconditions = (uid.is_some() || rv.is_some()).then(|| Preconditions {
            uid: uid.map(str::to_string),
            resource_version: rv.map(str::to_string),
        });
        let params = DeleteParams { preconditions, ..DeleteParams::default() };
        self.request(api.delete(&target.name, &params), false).map(|_| ())
    }

    fn create_pod(&self, pod: &Pod) -> ApiResult<Pod> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or(&self.namespace);
        let api = Api::<Pod>::namespaced(self.client.clone(), namespace);
        let params =
            PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
        self.request(api.create(&params, pod), true)
    }

    fn update_policy_status(&self, name: &str, status: &Status, rv: Option<&str>) -> ApiResult<()> {
        let api = Api::<RotationPolicy>::all(self.client.clone());
        // A PUT of the status subresource replaces the whole status (a merge patch would keep
        // fields the new status leaves unset); the API server takes only `status` from the body.
        let resource_version = match rv {
            Some(rv) => rv.to_string(),
            None => {
                let current = self.request(api.get_opt(name), false)?;
                current.and_then(|p| p.resource_version()).ok_or(ApiError::NotFound)?
            }
        };
        let resource = Self::resource(ObjectKind::RotationPolicy);
        let mut body = DynamicObject::new(name, &resource).data(json!({ "status": status }));
        body.metadata.resource_version = Some(resource_version);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let params =
            PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() };
        self.request(api.replace_status(name, &params, &body), false).map(|_| ())
    }

    fn record_event(&self, event: &EventRecord) -> ApiResult<()> {
        let reference = self.object_reference(&event.object);
        let note = truncate(&event.message, 1024);
        self.request(self.recorder.publish(&reference, event.warning, &event.reason, &note), true)
    }
}

/// The list of one node's pods in every namespace: a `spec.nodeName` field selector, served
/// from the API server's watch cache (`resourceVersion=0`). A consistent list (no
/// resourceVersion) is read through from etcd on API servers without consistent reads from
/// cache (before Kubernetes 1.31), and etcd cannot filter by field: every such list would read
/// every pod of the cluster. The watch cache indexes pods by node and lags etcd by the time a
/// watch event takes to arrive, which is what every informer-based controller decides on.
pub(crate) fn pods_on_node_params(node: &str) -> ListParams {
    ListParams::default().fields(&format!("spec.nodeName={node}")).at("0")
}

/// At most `max` bytes, cut on a character boundary (the Events API limit for `note`).
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests;
