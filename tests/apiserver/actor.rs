//! The world around the controller, for the rotation tests: a small actor that plays Karpenter
//! and the kubelet against the real API server for one NodePool.
//!
//! - **Provisioning**: a pending placeholder of its pool (no node yet) gets, after
//!   `provision_delay`, a new NodeClaim and Node, and the `Nominated` Event Karpenter's
//!   provisioner records on the pod (`Pod should schedule on: nodeclaim/<name>`); in
//!   [`Mode::Ready`] both turn Ready, the placeholder is bound to the node (the `binding`
//!   subresource, as the scheduler does) and set Running (as the kubelet does). In
//!   [`Mode::NeverReady`] the node registers and never turns Ready, so the placeholder stays
//!   Pending and unbound (the scheduler never binds to a NotReady node). [`Mode::Off`]
//!   provisions nothing.
//! - **Scheduling onto capacity already launched**: a node it launched for a placeholder that
//!   holds no pod any more (the placeholder was deleted) takes the next pending placeholder of
//!   the same name at once, without a new NodeClaim, as the scheduler binds a pod to an empty
//!   node (and Karpenter counts an in-flight claim's room before it launches another). Only the
//!   same name: the tests run no workload controller, so the pods a drain evicts never arrive on
//!   the surge node, and it stays empty although in a real cluster they fill it.
//! - **Termination**: a NodeClaim of its pool with a deletionTimestamp is finalized after
//!   `drain_delay`: the pods on its node are deleted, then the Node, then the finalizer.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::{
    CONTROLLER_NS, Error, NODEPOOL_LABEL, create, dyn_api, node_json, nodeclaim_json, patch_status,
    ready_claim_and_node, remove_finalizers,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Ready = 0,
    NeverReady = 1,
    Off = 2,
}

pub struct Actor {
    stop: Arc<AtomicBool>,
    mode: Arc<AtomicU8>,
    handle: Option<tokio::task::JoinHandle<()>>,
    /// What it launched, in order.
    launched: Arc<std::sync::Mutex<Vec<Launched>>>,
    /// Placeholders it bound, in order: (pod uid, node).
    pub bound: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl Actor {
    pub fn start(
        client: Client,
        pool: &str,
        mode: Mode,
        provision_delay: Duration,
        drain_delay: Duration,
    ) -> Actor {
        let stop = Arc::new(AtomicBool::new(false));
        let mode_cell = Arc::new(AtomicU8::new(mode as u8));
        let launched = Arc::new(std::sync::Mutex::new(Vec::new()));
        let bound = Arc::new(std::sync::Mutex::new(Vec::new()));
        let world = World {
            client,
            pool: pool.to_string(),
            mode: mode_cell.clone(),
            provision_delay,
            drain_delay,
            pending_since: BTreeMap::new(),
            deleting_since: BTreeMap::new(),
            provisioned: BTreeSet::new(),
            launched: launched.clone(),
            bound: bound.clone(),
            counter: 0,
        };
        let s = stop.clone();
        let handle = tokio::spawn(async move {
            let mut world = world;
            while !s.load(Ordering::Acquire) {
                if let Err(err) = world.step().await {
                    eprintln!("actor[{}]: {err}", world.pool);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Actor { stop, mode: mode_cell, handle: Some(handle), launched, bound }
    }

    pub fn set_mode(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::Release);
    }

    pub async fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
    }

    /// The surge claims it created, in order.
    pub fn surge_claims(&self) -> Vec<String> {
        self.launched
            .lock()
            .map(|v| v.iter().map(|l| l.claim.clone()).collect())
            .unwrap_or_default()
    }

    pub fn bindings(&self) -> Vec<(String, String)> {
        self.bound.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// A NodeClaim and Node it launched, and the placeholder they were launched for.
#[derive(Clone)]
struct Launched {
    claim: String,
    node: String,
    placeholder: String,
}

struct World {
    client: Client,
    pool: String,
    mode: Arc<AtomicU8>,
    provision_delay: Duration,
    drain_delay: Duration,
    pending_since: BTreeMap<String, Instant>,
    deleting_since: BTreeMap<String, Instant>,
    provisioned: BTreeSet<String>,
    launched: Arc<std::sync::Mutex<Vec<Launched>>>,
    bound: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    counter: u32,
}

impl World {
    fn mode(&self) -> Mode {
        match self.mode.load(Ordering::Acquire) {
            0 => Mode::Ready,
            1 => Mode::NeverReady,
            _ => Mode::Off,
        }
    }

    async fn step(&mut self) -> Result<(), Error> {
        self.provision().await?;
        self.terminate().await
    }

    async fn provision(&mut self) -> Result<(), Error> {
        // Placeholders of any namespace: the in-cluster tests install the operator elsewhere.
        let all: Api<Pod> = Api::all(self.client.clone());
        let list = all
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=noderotation"))
            .await?;
        let mode = self.mode();
        for pod in list.items {
            let name = pod.name_any();
            let ns = pod.namespace().unwrap_or_else(|| CONTROLLER_NS.to_string());
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            let ours = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|s| s.get(NODEPOOL_LABEL))
                .is_some_and(|p| *p == self.pool);
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            // A recreated placeholder has a new uid: key by uid.
            let key = pod.uid().unwrap_or_else(|| name.clone());
            if !ours || bound || pod.metadata.deletion_timestamp.is_some() || mode == Mode::Off {
                continue;
            }
            if self.provisioned.contains(&key) {
                continue;
            }
            // The scheduler binds at once to an empty node it launched; a new one takes
            // `provision_delay`.
            let since = *self.pending_since.entry(key.clone()).or_insert_with(Instant::now);
            let node = match self.empty_node_launched_for(&name).await? {
                Some(node) => node,
                None if since.elapsed() < self.provision_delay => continue,
                None => self.launch(mode, &name).await?,
            };
            if mode == Mode::NeverReady {
                // Karpenter counts the pod against the claim (launched for it, or in flight);
                // the node is NotReady, so the scheduler leaves the pod Pending.
                if let Some(claim) = self.claim_of_node(&node) {
                    self.nominate(&pod, &claim).await?;
                }
                self.provisioned.insert(key);
                continue;
            }
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}
            });
            pods.create_subresource::<serde_json::Value, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await?;
            if let Ok(mut bound) = self.bound.lock() {
                bound.push((key.clone(), node.clone()));
            }
            if mode == Mode::Ready {
                pods.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": {"phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"},
                                       {"type": "PodScheduled", "status": "True"}]}})),
                )
                .await?;
            }
            self.provisioned.insert(key);
        }
        Ok(())
    }

    /// A new NodeClaim and Node of the pool (Ready in [`Mode::Ready`]); returns the node.
    async fn launch(&mut self, mode: Mode, placeholder: &str) -> Result<String, Error> {
        self.counter += 1;
        let claim = format!("{}-s{}", self.pool, self.counter);
        let node = format!("{claim}-node");
        match mode {
            Mode::Ready => ready_claim_and_node(&self.client, &claim, &node, &self.pool).await?,
            _ => {
                create(&self.client, &nodeclaim_json(&claim, &self.pool)).await?;
                create(&self.client, &node_json(&node, &self.pool)).await?;
                patch_status(
                    &self.client,
                    "NodeClaim",
                    &claim,
                    json!({"nodeName": node, "providerID": format!("kwok://{node}"),
                       "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                                   "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
                )
                .await?;
            }
        }
        if let Ok(mut launched) = self.launched.lock() {
            launched.push(Launched { claim, node: node.clone(), placeholder: placeholder.into() });
        }
        Ok(node)
    }

    /// The claim it launched with `node`.
    fn claim_of_node(&self, node: &str) -> Option<String> {
        let launched = self.launched.lock().ok()?;
        launched.iter().find(|l| l.node == node).map(|l| l.claim.clone())
    }

    /// Karpenter's `Nominated` Event on `pod`: it launched `claim` for it.
    async fn nominate(&mut self, pod: &Pod, claim: &str) -> Result<(), Error> {
        let ns = pod.namespace().unwrap_or_else(|| CONTROLLER_NS.to_string());
        self.counter += 1;
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": format!("{}.nominated-{}", pod.name_any(), self.counter), "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns,
                "name": pod.name_any(), "uid": pod.uid()},
            "reason": "Nominated",
            "message": format!("Pod should schedule on: nodeclaim/{claim}"),
            "type": "Normal",
            "source": {"component": "karpenter"},
            "firstTimestamp": "2026-01-01T00:00:00Z",
            "lastTimestamp": "2026-01-01T00:00:00Z",
            "count": 1
        }))?;
        Api::<Event>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &event)
            .await?;
        Ok(())
    }

    /// A node it launched for `placeholder` whose claim is not being deleted and that holds no
    /// pod.
    async fn empty_node_launched_for(&self, placeholder: &str) -> Result<Option<String>, Error> {
        let claims = dyn_api(&self.client, "NodeClaim");
        let pods: Api<Pod> = Api::all(self.client.clone());
        let ours: Vec<Launched> = self
            .launched
            .lock()
            .map(|v| v.iter().filter(|l| l.placeholder == placeholder).cloned().collect())
            .unwrap_or_default();
        for Launched { claim, node, .. } in ours {
            let Some(c) = claims.get_opt(&claim).await? else { continue };
            if c.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let on_node =
                pods.list(&ListParams::default().fields(&format!("spec.nodeName={node}"))).await?;
            if on_node.items.iter().all(|p| p.metadata.deletion_timestamp.is_some()) {
                return Ok(Some(node));
            }
        }
        Ok(None)
    }

    async fn terminate(&mut self) -> Result<(), Error> {
        let claims = dyn_api(&self.client, "NodeClaim");
        let list = claims
            .list(&ListParams::default().labels(&format!("{NODEPOOL_LABEL}={}", self.pool)))
            .await?;
        for claim in list.items {
            if claim.metadata.deletion_timestamp.is_none() {
                continue;
            }
            let name = claim.name_any();
            let since = *self.deleting_since.entry(name.clone()).or_insert_with(Instant::now);
            if since.elapsed() < self.drain_delay {
                continue;
            }
            let node = claim.data["status"]["nodeName"].as_str().map(str::to_string);
            if let Some(node) = node {
                let pods: Api<Pod> = Api::all(self.client.clone());
                let on_node = pods
                    .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
                    .await?;
                for p in on_node.items {
                    let ns = p.namespace().unwrap_or_default();
                    let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
                    let _ =
                        api.delete(&p.name_any(), &DeleteParams::default().grace_period(0)).await;
                }
                let _ = dyn_api(&self.client, "Node").delete(&node, &DeleteParams::default()).await;
            }
            remove_finalizers(&self.client, "NodeClaim", &name).await?;
            self.deleting_since.remove(&name);
        }
        Ok(())
    }
}
