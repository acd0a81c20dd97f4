//! Event recording for `KubeCluster` (events.k8s.io/v1).
//!
//! kube-runtime's `Recorder` folds repeats into an Event series keyed on (type, action, reason,
//! regarding, related) but **not the note**, and a repeat re-sends the first occurrence's note.
//! Our notes carry the detail an operator acts on (which NodeClaim a rotation started for, the
//! new shortfall of a re-raised warning), so the second `RotationStarted` of a pool would show
//! the first claim's name. Here the note is part of the key: only identical reports become a
//! series (count, lastObservedTime), anything else is a new Event.
use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

/// A series is continued while its last occurrence is this recent (kube-runtime's value).
const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    reason: String,
    regarding: (Option<String>, Option<String>, Option<String>, Option<String>),
    note: String,
}

pub(crate) struct EventSink {
    client: Client,
    controller: String,
    instance: String,
    series: Mutex<HashMap<Key, Event>>,
}

impl EventSink {
    pub(crate) fn new(client: Client, controller: String, instance: Option<String>) -> EventSink {
        let instance = instance.unwrap_or_else(|| controller.clone());
        EventSink { client, controller, instance, series: Mutex::new(HashMap::new()) }
    }

    /// Creates the Event, or continues the series of an identical one reported recently.
    pub(crate) async fn publish(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = Key {
            warning,
            reason: reason.to_string(),
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
            note: note.to_string(),
        };
        let previous = {
            let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
            series.retain(|_, e| last_seen(e).is_some_and(|t| t + SERIES_TTL > now));
            series.get(&key).cloned()
        };
        // Events of cluster-scoped objects live in `default`, as kubectl and kube-runtime do.
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let written = match previous {
            Some(mut event) => {
                let count = event.series.as_ref().map_or(2, |s| s.count + 1);
                event.series = Some(EventSeries { count, last_observed_time: MicroTime(now) });
                let body = serde_json::json!({"series": event.series});
                match api
                    .patch(&event.name_any(), &PatchParams::default(), &Patch::Merge(&body))
                    .await
                {
                    Ok(_) => event,
                    // The first occurrence expired on the server (event TTL): start over.
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        let fresh = self.fresh(regarding, &namespace, warning, reason, note, now);
                        api.create(&PostParams::default(), &fresh).await?
                    }
                    Err(e) => return Err(e),
                }
            }
            None => {
                let fresh = self.fresh(regarding, &namespace, warning, reason, note, now);
                api.create(&PostParams::default(), &fresh).await?
            }
        };
        self.series.lock().unwrap_or_else(|e| e.into_inner()).insert(key, written);
        Ok(())
    }

    fn fresh(
        &self,
        regarding: &ObjectReference,
        namespace: &str,
        warning: bool,
        reason: &str,
        note: &str,
        now: Timestamp,
    ) -> Event {
        let name = regarding.name.as_deref().unwrap_or(&self.controller);
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            action: Some(reason.to_string()),
            reason: Some(reason.to_string()),
            note: Some(note.to_string()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }
}

fn last_seen(e: &Event) -> Option<Timestamp> {
    e.series.as_ref().map(|s| s.last_observed_time.0).or_else(|| e.event_time.as_ref().map(|t| t.0))
}
