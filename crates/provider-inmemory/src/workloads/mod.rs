//! Workloads in a simulated cluster: what a real cluster's workload controllers (Deployments,
//! ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs, Services' endpoints), its scheduler and each
//! Node's kubelet do for the objects users apply, acted out on the cluster's own API through
//! kube-rs, as those components act on a real one.
//!
//! KWOK (Kubernetes WithOut Kubelet) is the model: no container runs; Pods are placed on the
//! simulated Nodes and their status says what a kubelet would report. Each cluster has one
//! task: it watches the kinds it acts on, and after each batch of changes runs one round of
//! passes, each a pure function from what it knows to the writes to make (`Plan`), so the
//! passes are tested without a server. A round ends with when the next one is due without a
//! change (a readiness delay, a minimum ready time, a progress deadline).

mod cron_jobs;
mod daemon_sets;
mod deployments;
mod jobs;
mod kubelet;
mod kubelet_api;
mod replica_sets;
mod scheduler;
mod services;
mod stateful_sets;
mod volumes;
mod world;

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use lariat_controllers::events::{EventType, Recorder};
use serde_json::Value;

pub use kubelet_api::KubeletApi;
pub use volumes::default_storage_class;
use world::{Change, Kind, World};

/// How soon a round that failed to write is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// A cluster's simulation, running until dropped.
pub struct Simulation {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Simulation {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts simulating the workloads of the cluster `client` reaches.
pub fn start(client: Client) -> Simulation {
    Simulation {
        task: tokio::spawn(run(client)),
    }
}

async fn run(client: Client) {
    let mut changes = futures::stream::select_all(Kind::ALL.map(|kind| watch(&client, kind)));
    let mut writer = Writer::new(client);
    let mut world = World::default();
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let woken = tokio::select! {
            change = changes.next() => match change {
                Some(change) => Some(change),
                // Every watch ended: the cluster is gone.
                None => return,
            },
            _ = sleep_until(due) => None,
        };
        if let Some(change) = woken {
            world.apply(change);
            // Everything already delivered goes into the same round.
            while let Some(Some(change)) = changes.next().now_or_never() {
                world.apply(change);
            }
        }
        if !world.synced() {
            continue;
        }
        // A pass that panics on some object's odd field loses that round, not the cluster's
        // whole simulation.
        let outcome = std::panic::AssertUnwindSafe(round(&mut world, &mut writer))
            .catch_unwind()
            .await;
        due = match outcome {
            Ok(after) => after.map(|after| tokio::time::Instant::now() + after),
            Err(_) => {
                tracing::error!("simulated workloads: a round panicked; trying again");
                Some(tokio::time::Instant::now() + RETRY)
            }
        };
    }
}

async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How long the simulation's watches run before they are renewed: the longest the server
/// grants (an hour). kube-rs' default, 290 s, made a thousand clusters' thirteen thousand
/// watches 45 renewals a second of an idle fleet; renewing resumes from the last revision seen,
/// so a longer watch misses nothing.
const WATCH_SECONDS: u32 = 3600;

fn watch(client: &Client, kind: Kind) -> BoxStream<'static, Change> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &kind.resource());
    watcher(api, watcher::Config::default().timeout(WATCH_SECONDS))
        .default_backoff()
        .filter_map(move |event| async move {
            match event {
                Ok(event) => Some(Change { kind, event }),
                Err(error) => {
                    // The cluster going away ends its watches; anything else is retried.
                    tracing::debug!(?kind, %error, "simulated workloads: watch failed");
                    None
                }
            }
        })
        .boxed()
}

/// One pass of every component over what is known; when the next round is due if nothing
/// changes before.
async fn round(world: &mut World, writer: &mut Writer) -> Option<Duration> {
    // In the order each one's writes feed the next: owners make Pods (and a StatefulSet its
    // claims), volumes are bound, the scheduler places the Pods, the kubelets start them, and
    // Services find their addresses.
    let passes: [fn(&World, DateTime<Utc>) -> Plan; 10] = [
        deployments::plan,
        replica_sets::plan,
        stateful_sets::plan,
        daemon_sets::plan,
        cron_jobs::plan,
        jobs::plan,
        volumes::plan,
        scheduler::plan,
        kubelet::plan,
        services::plan,
    ];
    let mut due = Due::default();
    for pass in passes {
        let plan = pass(world, Utc::now());
        due.within(plan.due);
        if !writer.execute(world, plan.actions).await {
            due.within(Some(RETRY));
        }
    }
    due.0
}

/// The earliest of several deadlines.
#[derive(Default, Debug, Clone, Copy, PartialEq)]
pub struct Due(pub Option<Duration>);

impl Due {
    pub fn within(&mut self, after: Option<Duration>) {
        self.0 = match (self.0, after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Due `seconds` after `since`, as seen at `now` (at once when past).
    pub fn at(&mut self, since: DateTime<Utc>, seconds: i64, now: DateTime<Utc>) {
        // Whatever a user wrote (a year of seconds, or 2^62): at most a day away, never a
        // panic.
        let seconds = seconds.clamp(0, 86_400);
        let at = since
            .checked_add_signed(chrono::TimeDelta::seconds(seconds))
            .unwrap_or(now);
        let left = (at - now).to_std().unwrap_or(Duration::ZERO);
        // A second's grace: timestamps are whole seconds.
        self.within(Some(left + Duration::from_millis(50)));
    }
}

/// What a pass decided: the writes to make, and when to look again without a change.
#[derive(Default, Debug)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub due: Option<Duration>,
}

impl Plan {
    /// Creates `object` for `owner`, which says so once it is made, as its controller does
    /// (`SuccessfulCreate`, `{name}` in `message` standing for the made object's name).
    fn create_for(
        &mut self,
        owner: &DynamicObject,
        owner_kind: Kind,
        component: &'static str,
        kind: Kind,
        object: DynamicObject,
        message: String,
    ) {
        let note = Note {
            component,
            type_: EventType::Normal,
            reason: "SuccessfulCreate",
            message,
            once: false,
        };
        self.actions.push(Action::Create {
            kind,
            object,
            announce: Some(Box::new((owner.clone(), owner_kind, note))),
        });
    }

    /// Deletes an owner's Pod, and says so about the owner as its controller does
    /// (`Deleted pod: web-7d4b9-x2k4q`).
    fn delete_pod(
        &mut self,
        owner: &DynamicObject,
        owner_kind: Kind,
        component: &'static str,
        pod: &DynamicObject,
    ) {
        self.actions.push(Action::Delete {
            kind: Kind::Pod,
            object: pod.clone(),
        });
        self.actions.push(Action::Event {
            kind: owner_kind,
            object: owner.clone(),
            note: Note {
                component,
                type_: EventType::Normal,
                reason: "SuccessfulDelete",
                message: format!("Deleted pod: {}", pod.name_any()),
                once: false,
            },
        });
    }

    fn due_at(&mut self, since: DateTime<Utc>, seconds: i64, now: DateTime<Utc>) {
        let mut due = Due(self.due);
        due.at(since, seconds, now);
        self.due = due.0;
    }
}

/// An Event to record about an object, in a component's name.
#[derive(Debug)]
pub struct Note {
    pub component: &'static str,
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
    /// Said once by this process, not counted up each time it is concluded again (what a
    /// round concludes anew from an unchanged object).
    pub once: bool,
}

/// One write.
#[derive(Debug)]
pub enum Action {
    /// Creates the object; `announce` is recorded about its owner once it is made, with the
    /// new object's name for `{name}` in the message (`Created pod: web-7d4b9-x2k4q`).
    Create {
        kind: Kind,
        object: DynamicObject,
        announce: Option<Box<(DynamicObject, Kind, Note)>>,
    },
    /// A JSON merge patch of the object or of its status.
    Patch {
        kind: Kind,
        object: DynamicObject,
        status: bool,
        patch: Value,
    },
    Delete {
        kind: Kind,
        object: DynamicObject,
    },
    Event {
        kind: Kind,
        object: DynamicObject,
        note: Note,
    },
}

/// Makes a plan's writes and records their answers in the world.
struct Writer {
    client: Client,
    events: Recorder,
    /// Errors already logged, so each distinct one is logged once.
    logged: HashSet<String>,
}

impl Writer {
    fn new(client: Client) -> Writer {
        Writer {
            events: Recorder::new(client.clone()),
            client,
            logged: HashSet::new(),
        }
    }

    fn api(&self, kind: Kind, object: &DynamicObject) -> Api<DynamicObject> {
        let resource = kind.resource();
        match object.namespace() {
            Some(namespace) => Api::namespaced_with(self.client.clone(), &namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Whether error `text` is new, so logged (each distinct one once, at most 100 kept).
    fn first_time(&mut self, text: &str) -> bool {
        self.logged.len() < 100 && self.logged.insert(text.to_string())
    }

    /// Whether every write was made (a conflict counts as made: the watch brings the news).
    async fn execute(&mut self, world: &mut World, actions: Vec<Action>) -> bool {
        let mut all_made = true;
        for action in actions {
            let outcome = match action {
                Action::Create {
                    kind,
                    object,
                    announce,
                } => match self
                    .api(kind, &object)
                    .create(&PostParams::default(), &object)
                    .await
                {
                    Ok(created) => {
                        if let Some(announce) = announce {
                            let (owner, owner_kind, mut note) = *announce;
                            note.message = note.message.replace("{name}", &created.name_any());
                            self.note(&owner, owner_kind, &note).await;
                        }
                        world.objects(kind).record(created);
                        Ok(())
                    }
                    Err(error) => Err(error),
                },
                Action::Patch {
                    kind,
                    object,
                    status,
                    patch,
                } => {
                    let api = self.api(kind, &object);
                    let name = object.name_any();
                    let params = PatchParams::default();
                    let patched = if status {
                        api.patch_status(&name, &params, &Patch::Merge(&patch))
                            .await
                    } else {
                        api.patch(&name, &params, &Patch::Merge(&patch)).await
                    };
                    patched.map(|patched| world.objects(kind).record(patched))
                }
                Action::Delete { kind, object } => {
                    let deleted = self
                        .api(kind, &object)
                        .delete(&object.name_any(), &DeleteParams::background())
                        .await;
                    // Gone, or was already: forgotten until the watch says otherwise.
                    match &deleted {
                        Ok(_) => world.objects(kind).forget(&object),
                        Err(kube::Error::Api(status)) if status.code == 404 => {
                            world.objects(kind).forget(&object)
                        }
                        Err(_) => {}
                    }
                    deleted.map(|_| ())
                }
                Action::Event { kind, object, note } => {
                    self.note(&object, kind, &note).await;
                    Ok(())
                }
            };
            match outcome {
                Ok(()) => {}
                // Someone else's change came first, or the object is gone: the watch says
                // what is true now.
                Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
                // Refused as invalid (a claim template whose name makes no valid claim name):
                // trying again will not help until its owner changes, and that change starts a
                // round of its own. Logged once, not retried every second.
                Err(kube::Error::Api(status)) if status.code == 422 => {
                    if self.first_time(&status.message) {
                        tracing::warn!(error = %status.message, "simulated workloads: a write was refused");
                    }
                }
                Err(error) => {
                    all_made = false;
                    let text = error.to_string();
                    if self.first_time(&text) {
                        tracing::warn!(error = %text, "simulated workloads: a write failed");
                    }
                }
            }
        }
        all_made
    }

    async fn note(&self, object: &DynamicObject, kind: Kind, note: &Note) {
        let kind_name = kind.resource().kind;
        let mut object = object.clone();
        object.types = Some(kube::api::TypeMeta {
            api_version: kind.resource().api_version,
            kind: kind_name.clone(),
        });
        if note.once {
            self.events
                .publish_once_as(
                    note.component,
                    &object,
                    &kind_name,
                    note.type_,
                    note.reason,
                    &note.message,
                )
                .await;
        } else {
            self.events
                .publish_as(
                    note.component,
                    &object,
                    &kind_name,
                    note.type_,
                    note.reason,
                    &note.message,
                )
                .await;
        }
    }
}

/// A time as the API writes it: `2026-12-06T22:00:00Z`.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A time the API wrote.
pub fn parse_time(value: &Value) -> Option<DateTime<Utc>> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// The condition of `type_` in a status's `conditions`.
pub fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// `conditions` with the condition of `type_` set: its transition time moves only when its
/// status does; `lastUpdateTime` (for kinds that have it) moves with any change.
pub fn set_condition(
    conditions: &mut Vec<Value>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
    update_time: bool,
) {
    let existing = conditions.iter().position(|c| c["type"] == type_);
    let transition = existing
        .map(|i| &conditions[i])
        .filter(|c| c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or(now)
        .to_string();
    let unchanged = existing
        .map(|i| &conditions[i])
        .is_some_and(|c| c["status"] == status && c["reason"] == reason && c["message"] == message);
    let mut condition = serde_json::json!({
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": transition,
    });
    if update_time {
        let updated = existing
            .filter(|_| unchanged)
            .and_then(|i| conditions[i]["lastUpdateTime"].as_str())
            .unwrap_or(now)
            .to_string();
        condition["lastUpdateTime"] = updated.into();
    }
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}

/// An integer or a percentage of `total` (`25%`), rounded up or down as Kubernetes rounds
/// maxSurge (up) and maxUnavailable (down).
pub fn int_or_percent(value: &Value, total: i64, default: &str, round_up: bool) -> i64 {
    let value = if value.is_null() {
        &Value::from(default)
    } else {
        value
    };
    if let Some(n) = value.as_i64() {
        return n.clamp(0, i64::from(i32::MAX));
    }
    let Some(percent) = value
        .as_str()
        .and_then(|s| s.strip_suffix('%'))
        .and_then(|p| p.parse::<i64>().ok())
    else {
        return 0;
    };
    let scaled = percent.clamp(0, 100_000).saturating_mul(total.max(0));
    if round_up {
        (scaled + 99) / 100
    } else {
        scaled / 100
    }
}

/// A replica count field, 1 when unset as the API defaults it.
pub fn replicas(spec: &Value) -> i64 {
    spec["replicas"]
        .as_i64()
        .unwrap_or(1)
        .clamp(0, i64::from(i32::MAX))
}

/// The owner reference that makes `owner` the controller of what carries it.
pub fn controller_reference(owner: &DynamicObject, kind: Kind) -> Value {
    let resource = kind.resource();
    serde_json::json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "name": owner.name_any(), "uid": owner.uid().unwrap_or_default(),
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// Whether `labels` has every label of `selector`'s `matchLabels` and meets its
/// `matchExpressions`.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    let matched = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| &labels[k] == v);
    matched
        && selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| matches_requirement(e, labels))
}

/// One `matchExpressions` requirement (`In`, `NotIn`, `Exists`, `DoesNotExist`, and for node
/// affinity `Gt`, `Lt`) against `labels`.
pub fn matches_requirement(requirement: &Value, labels: &Value) -> bool {
    let key = requirement["key"].as_str().unwrap_or_default();
    let value = labels[key].as_str();
    let values: Vec<&str> = requirement["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let number = |v: Option<&str>| v.and_then(|v| v.parse::<i64>().ok());
    match requirement["operator"].as_str().unwrap_or_default() {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((number(value), number(values.first().copied())), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((number(value), number(values.first().copied())), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}
