//! `run`'s leader election: [`Elector`] (which decides, on this replica's own clock) over the
//! Kubernetes API, moving the write [`Fence`] from its own writes.
//!
//! The holder renews its Lease every `--lease-duration - --lease-grace` seconds with one merge
//! patch that carries the resourceVersion of its previous write, and moves the fence to that
//! renewal's send time plus the duration less the margin: no read of the Lease while it leads
//! (a 409 is read again). A standby reads the Lease as often, and takes it with one conditional
//! patch once it has read the same record for a whole duration. Why it replaced
//! kube-lease-manager: `docs/decisions/leader-election.md`.
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::cluster::fence::Fence;
use crate::cluster::lease::{Elector, Step};

use super::install;

/// The field manager of this replica's Lease writes.
const FIELD_MANAGER: &str = "noderotation-leader-election";

/// The election of one replica on one Lease.
pub(crate) struct LeaderElection {
    pub client: Client,
    pub namespace: String,
    pub api: Api<Lease>,
    pub name: String,
    pub elector: Elector,
    /// Times the election and the fence (a clock that never steps: only its rate matters).
    pub clock: Arc<dyn Clock>,
    /// Stamps `renewTime` and `acquireTime` (for people and tools; no replica decides on them).
    pub wall: Arc<dyn Clock>,
    pub fence: Arc<Fence>,
    /// Bound of one request.
    pub timeout: Duration,
}

impl LeaderElection {
    /// Runs the election until the receiver is dropped, then gives the Lease up if this replica
    /// holds it. The receiver says whether this replica leads now; the fence follows it.
    pub(crate) fn watch(self) -> (watch::Receiver<bool>, JoinHandle<LeaderElection>) {
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut me = self;
            me.run(&tx).await;
            me.release().await;
            me
        });
        (rx, task)
    }

    async fn run(&mut self, tx: &watch::Sender<bool>) {
        loop {
            let now = self.clock.now();
            self.publish(tx, now);
            if tx.is_closed() {
                return;
            }
            match self.elector.next(now) {
                Step::Wait(until) => {
                    // Wake at the deadline too, to say that this replica no longer leads.
                    let wake = match self.elector.deadline() {
                        Some(d) if d > now => until.min(d),
                        _ => until,
                    };
                    let pause = (wake - now).to_std().unwrap_or(Duration::ZERO);
                    tokio::select! {
                        _ = tx.closed() => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
                Step::Read => self.read().await,
                Step::Renew => {
                    let body = self.elector.renew_patch(self.wall.now());
                    self.write(body).await;
                }
                Step::Acquire => {
                    let body = self.elector.acquire_patch(self.wall.now());
                    self.write(body).await;
                }
            }
        }
    }

    /// Tells the runtime whether this replica leads, and moves the fence with it.
    fn publish(&self, tx: &watch::Sender<bool>, now: DateTime<Utc>) {
        let leads = self.elector.leads(now);
        match self.elector.deadline() {
            Some(deadline) if leads => self.fence.open_until(deadline),
            _ => self.fence.close(),
        }
        let changed = tx.send_if_modified(|led| std::mem::replace(led, leads) != leads);
        if changed && !leads {
            match self.elector.holder() {
                Some(h) if h == self.elector.identity() => tracing::warn!(
                    lease = %self.name,
                    "the leader Lease was not renewed in time: writes are fenced until it is"
                ),
                holder => {
                    tracing::warn!(lease = %self.name, ?holder, "the leader Lease is held by another replica: writes are fenced")
                }
            }
        }
    }

    async fn read(&mut self) {
        match tokio::time::timeout(self.timeout, self.api.get_opt(&self.name)).await {
            Ok(Ok(Some(lease))) => self.elector.read(Some(&lease), self.clock.now()),
            Ok(Ok(None)) => {
                // Deleted under us: created again, marked (read again after the retry delay).
                let create = install::mark_own_lease(&self.client, &self.namespace, &self.name);
                match tokio::time::timeout(self.timeout, create).await {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => {
                        tracing::warn!(error = %err, lease = %self.name, "creating the leader Lease failed");
                    }
                    Err(_) => {
                        tracing::warn!(lease = %self.name, "creating the leader Lease timed out")
                    }
                }
                self.elector.read(None, self.clock.now());
            }
            Ok(Err(err)) => {
                tracing::debug!(error = %err, lease = %self.name, "reading the leader Lease failed");
                self.elector.failed(self.clock.now());
            }
            Err(_) => {
                tracing::debug!(lease = %self.name, "reading the leader Lease timed out");
                self.elector.failed(self.clock.now());
            }
        }
    }

    /// One conditional write of the Lease; its outcome goes to the elector. `None`: no
    /// resourceVersion to write on, read first.
    async fn write(&mut self, body: Option<Value>) {
        let Some(body) = body else {
            self.elector.lost(self.clock.now());
            return;
        };
        match self.patch(&body).await {
            (sent, Some(Ok(lease))) => self.elector.wrote(&lease, sent),
            (_, Some(Err(kube::Error::Api(status)))) if status.code == 409 => {
                tracing::debug!(lease = %self.name, "the leader Lease changed since it was read");
                self.elector.lost(self.clock.now());
            }
            (_, Some(Err(err))) => {
                tracing::debug!(error = %err, lease = %self.name, "writing the leader Lease failed");
                self.elector.failed(self.clock.now());
            }
            (_, None) => {
                tracing::debug!(lease = %self.name, "writing the leader Lease timed out");
                self.elector.failed(self.clock.now());
            }
        }
    }

    /// One merge patch of the Lease, bounded by the request timeout: when it was sent, and the
    /// answer (`None`: it timed out).
    async fn patch(&self, body: &Value) -> (DateTime<Utc>, Option<kube::Result<Lease>>) {
        let sent = self.clock.now();
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        let merge = Patch::Merge(body);
        let answer =
            tokio::time::timeout(self.timeout, self.api.patch(&self.name, &params, &merge)).await;
        (sent, answer.ok())
    }

    /// Stops writing, then clears the holder if the Lease is still as this replica last wrote
    /// it (a standby then takes it at once instead of after a duration).
    async fn release(&mut self) {
        self.fence.close();
        self.elector.resign();
        let Some(body) = self.elector.release_patch() else { return };
        match self.patch(&body).await {
            (sent, Some(Ok(lease))) => {
                self.elector.wrote(&lease, sent);
                tracing::info!(lease = %self.name, "leader Lease released");
            }
            (_, Some(Err(err))) => {
                tracing::warn!(error = %err, lease = %self.name, "releasing the leader Lease failed")
            }
            (_, None) => tracing::warn!(lease = %self.name, "releasing the leader Lease timed out"),
        }
    }
}
