//! Kubernetes Events for what a user should see first in `kubectl describe`: a machine
//! created, a deployment scaled, a cluster provisioned, a machine found unhealthy. Written as
//! core v1 Events (what `kubectl describe` and `kubectl get events` read), deduplicated as
//! client-go's recorder does: the same event about the same object again raises its `count`
//! and `lastTimestamp` instead of adding an object. The API server expires them (`--event-ttl`).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::kind::Cached;

/// `Normal` for what went as planned, `Warning` for what a user should look into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Publishes Events; each names the component that saw it (`machineset-controller`, ...).
pub struct Recorder {
    client: Client,
    /// Events this process published, by dedup key: their count so far.
    published: Mutex<HashMap<String, i32>>,
}

impl Recorder {
    pub fn new(client: Client) -> Recorder {
        Recorder {
            client,
            published: Mutex::default(),
        }
    }

    /// Records that `reason` happened to `object` (`kind` as Kubernetes names it), seen by
    /// `<kind>-controller`. A failure to record is logged at debug level and never fails the caller:
    /// an Event is a courtesy to the user, not part of the reconcile.
    pub async fn publish(
        &self,
        object: &impl Cached,
        kind: &str,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let component = format!("{}-controller", kind.to_lowercase());
        self.record(&component, object, kind, type_, reason, message, false)
            .await;
    }

    /// Like [`publish`](Self::publish), in the name of `component` (`default-scheduler`,
    /// `kubelet`) rather than the kind's controller.
    pub async fn publish_as(
        &self,
        component: &str,
        object: &impl Cached,
        kind: &str,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        self.record(component, object, kind, type_, reason, message, false)
            .await;
    }

    /// Like [`publish`](Self::publish), for what happens once in an object's life ("never
    /// boots", "has Node X"): published at most once by this process and never counted up,
    /// however often a reconcile reading a cache that lags behind the object's own status
    /// concludes it again.
    pub async fn publish_once(
        &self,
        object: &impl Cached,
        kind: &str,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let component = format!("{}-controller", kind.to_lowercase());
        self.publish_once_as(&component, object, kind, type_, reason, message)
            .await;
    }

    /// Like [`publish_once`](Self::publish_once), in the name of `component`.
    pub async fn publish_once_as(
        &self,
        component: &str,
        object: &impl Cached,
        kind: &str,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let key = dedup_key(object, type_, reason, message);
        if self.published.lock().expect("lock").contains_key(&key) {
            return;
        }
        self.record(component, object, kind, type_, reason, message, true)
            .await;
    }

    // The component as Kubernetes' own controllers name it: `machineset-controller`.
    #[allow(clippy::too_many_arguments)]
    async fn record(
        &self,
        component: &str,
        object: &impl Cached,
        kind: &str,
        type_: EventType,
        reason: &str,
        message: &str,
        once: bool,
    ) {
        let event = Occurrence {
            component,
            kind,
            type_,
            reason,
            message,
            once,
        };
        if let Err(error) = self.try_publish(object, &event).await {
            tracing::debug!(object = %object.name_any(), reason, %error, "cannot record an event");
        }
    }

    async fn try_publish(&self, object: &impl Cached, event: &Occurrence<'_>) -> kube::Result<()> {
        let Occurrence {
            component,
            kind,
            type_,
            reason,
            message,
            once,
        } = *event;
        let namespace = object.namespace().unwrap_or_else(|| "default".into());
        let uid = object.uid().unwrap_or_default();
        let key = dedup_key(object, type_, reason, message);
        // A stable name per (object, type, reason, message), so the same event found again,
        // by this process or after a restart, is counted on the same object.
        let name = format!("{}.{}", object.name_any(), &stable_hash(&key)[..16]);
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let known = self.published.lock().expect("lock").get(&key).copied();
        let count = match known {
            Some(count) if self.bump(&events, &name, count + 1, &now).await? => count + 1,
            // Not published by this process yet, or expired since: a new Event, created
            // without asking first (most are new; one that exists answers 409).
            _ => {
                let event: Event = serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": namespace},
                    "involvedObject": {
                        "apiVersion": object.type_names().0,
                        "kind": kind, "name": object.name_any(),
                        "namespace": object.namespace(), "uid": uid,
                        "resourceVersion": object.resource_version(),
                    },
                    "type": type_.as_str(),
                    "reason": reason,
                    "message": message,
                    "count": 1,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "source": {"component": component},
                    "reportingComponent": component,
                    "reportingInstance": component,
                }))
                .expect("a well-formed Event");
                match events.create(&PostParams::default(), &event).await {
                    Ok(_) => 1,
                    // Published before a restart: a once-only event stays as it is.
                    Err(kube::Error::Api(e)) if e.code == 409 && once => 1,
                    // Published before a restart, or by another writer: counted once more.
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        let so_far = events
                            .get_opt(&name)
                            .await?
                            .and_then(|e| e.count)
                            .unwrap_or(1);
                        self.bump(&events, &name, so_far + 1, &now).await?;
                        so_far + 1
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let mut published = self.published.lock().expect("lock");
        // Bounded: forget everything rather than grow without end; a forgotten event is read
        // back from the API on its next occurrence.
        if published.len() > 10_000 {
            published.clear();
        }
        published.insert(key, count);
        Ok(())
    }

    /// Raises an existing Event's count; `false` when it no longer exists (it expired).
    async fn bump(
        &self,
        events: &Api<Event>,
        name: &str,
        count: i32,
        now: &str,
    ) -> kube::Result<bool> {
        let patch = json!({"count": count, "lastTimestamp": now});
        match events
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// One thing that happened, as `publish` was told it.
#[derive(Clone, Copy)]
struct Occurrence<'a> {
    component: &'a str,
    kind: &'a str,
    type_: EventType,
    reason: &'a str,
    message: &'a str,
    /// Happens once in the object's life: never counted up.
    once: bool,
}

/// What makes two occurrences the same Event: the object, the type, the reason and the
/// message.
fn dedup_key(object: &impl Cached, type_: EventType, reason: &str, message: &str) -> String {
    let uid = object.uid().unwrap_or_default();
    format!("{uid}\n{}\n{reason}\n{message}", type_.as_str())
}

fn stable_hash(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
