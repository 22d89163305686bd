//! Each Node's kubelet: a Pod placed on a Ready Node starts at once (no image is pulled, no
//! container runs) and reports what a kubelet reports: phase, IPs, conditions and a status per
//! container, Ready after its readiness probe's initial delay. A Pod that does not restart (a
//! Job's) exits a second after it starts. The Node's failure injection
//! (`behavior.pods` of its InMemoryMachine, carried in a Node annotation) makes images fail to
//! pull (`ErrImagePull`, then `ImagePullBackOff`), containers crash (`CrashLoopBackOff`, with
//! restarts and the kubelet's back-off) or never become ready. When a Node stops being Ready,
//! its Pods turn not Ready, and are evicted once their toleration of `not-ready` (300 s unless
//! the Pod says otherwise) runs out; a Pod bound to a Node that no longer exists is deleted,
//! as the Pod garbage collector does.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use lariat_controllers::events::EventType;
use serde_json::{Value, json};

use super::deployments::same_status;
use super::replica_sets::active;
use super::scheduler::{node_ready, tolerates};
use super::world::{World, deleting};
use super::{Action, Kind, Note, Plan, condition, parse_time, set_condition, timestamp};
use lariat_api::infrastructure::in_memory::{
    ContainerFate, InMemoryPodBehavior, POD_BEHAVIOR_ANNOTATION,
};

const COMPONENT: &str = "kubelet";
/// How long a Pod stays on a Node that is not Ready unless it tolerates longer, as the
/// DefaultTolerationSeconds admission plugin gives every Pod.
const DEFAULT_TOLERATION_SECONDS: i64 = 300;
/// How long a Pod bound to a Node that does not exist is kept before it is deleted.
const ORPHAN_QUARANTINE_SECONDS: i64 = 40;
/// How long a simulated container that does not restart runs before it exits 0.
const RUN_SECONDS: i64 = 1;

pub fn plan(world: &World, now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let mut addresses: HashSet<String> = world
        .pods
        .iter()
        .filter_map(|p| p.data["status"]["podIP"].as_str().map(String::from))
        .collect();
    // Each Node's place among them, for its Pods' address range (the objects iterate by name).
    let node_index: std::collections::HashMap<String, usize> = world
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name_any(), i))
        .collect();
    for pod in world.pods.iter().filter(|p| !deleting(*p)) {
        let Some(node_name) = pod.data["spec"]["nodeName"]
            .as_str()
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        let Some(node) = world.nodes.get("", node_name) else {
            // Bound to a Node that does not exist: the Pod garbage collector deletes it after
            // a quarantine (a Node may be about to register).
            let created = pod
                .creation_timestamp()
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
                .unwrap_or(now);
            if (now - created).num_seconds() >= ORPHAN_QUARANTINE_SECONDS {
                plan.actions.push(Action::Delete {
                    kind: Kind::Pod,
                    object: pod.clone(),
                });
            } else {
                plan.due_at(created, ORPHAN_QUARANTINE_SECONDS, now);
            }
            continue;
        };
        if !active(pod) {
            continue;
        }
        if !node_ready(node) {
            node_not_ready(&mut plan, pod, node, now);
            continue;
        }
        let index = node_index.get(node_name).copied().unwrap_or(0);
        run(&mut plan, pod, node, index, &mut addresses, now);
    }
    plan
}

/// The Node is not Ready: its Pods are not Ready either, and go once they stop tolerating it.
fn node_not_ready(plan: &mut Plan, pod: &DynamicObject, node: &DynamicObject, now: DateTime<Utc>) {
    let status = &pod.data["status"];
    if condition(status, "Ready").is_some_and(|c| c["status"] == "True") {
        let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        set_condition(
            &mut conditions,
            "Ready",
            "False",
            "NodeNotReady",
            &format!("Node {} is not ready", node.name_any()),
            &timestamp(now),
            false,
        );
        plan.actions.push(Action::Patch {
            kind: Kind::Pod,
            object: pod.clone(),
            status: true,
            patch: json!({"status": {"conditions": conditions}}),
        });
        plan.actions.push(Action::Event {
            kind: Kind::Pod,
            object: pod.clone(),
            note: Note {
                component: "node-controller",
                type_: EventType::Warning,
                reason: "NodeNotReady",
                message: "Node is not ready".into(),
                once: false,
            },
        });
    }
    let since = condition(&node.data["status"], "Ready")
        .and_then(|c| parse_time(&c["lastTransitionTime"]))
        .unwrap_or(now);
    let taint = json!({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"});
    let tolerated = pod.data["spec"]["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| tolerates(&json!({"spec": {"tolerations": [t]}}), &taint))
        .map_or(Some(DEFAULT_TOLERATION_SECONDS), |t| {
            t["tolerationSeconds"].as_i64()
        });
    let Some(seconds) = tolerated else {
        // Tolerated for ever.
        return;
    };
    if (now - since).num_seconds() < seconds {
        plan.due_at(since, seconds, now);
        return;
    }
    plan.actions.push(Action::Event {
        kind: Kind::Pod,
        object: pod.clone(),
        note: Note {
            component: "taint-eviction-controller",
            type_: EventType::Normal,
            reason: "TaintManagerEviction",
            message: format!(
                "Marking for deletion Pod {}/{}",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            ),
            once: false,
        },
    });
    plan.actions.push(Action::Delete {
        kind: Kind::Pod,
        object: pod.clone(),
    });
}

// Long: a kubelet's whole report of a running Pod, field by field.
/// The Pod runs on a Ready Node: its status as a kubelet reports it.
fn run(
    plan: &mut Plan,
    pod: &DynamicObject,
    node: &DynamicObject,
    node_index: usize,
    addresses: &mut HashSet<String>,
    now: DateTime<Utc>,
) {
    let current = &pod.data["status"];
    let stamp = timestamp(now);
    let started = current["startTime"].as_str().unwrap_or(&stamp).to_string();
    let first_start = current["startTime"].is_null();
    let behavior = pod_behavior(node);
    let fates: Vec<ContainerFate> = pod.data["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let image = c["image"].as_str().unwrap_or_default();
            behavior.fate(image, &normalize_image(image))
        })
        .collect();
    // A Pod that does not restart (a Job's) runs to completion a second after it started:
    // it succeeds, or fails if a container crashes and may not restart.
    let restarts = pod.data["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or("Always");
    let crashes = fates.contains(&ContainerFate::CrashLoops);
    let keeps_restarting = restarts == "Always" || (crashes && restarts == "OnFailure");
    if !(keeps_restarting || first_start || fates.contains(&ContainerFate::PullFails)) {
        let since = parse_time(&current["startTime"]).unwrap_or(now);
        if (now - since).num_seconds() >= RUN_SECONDS {
            finish(plan, pod, &stamp, crashes);
            return;
        }
        plan.due_at(since, RUN_SECONDS, now);
    }
    let host_ip = node.data["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap_or("10.0.0.1")
        .to_string();
    let pod_ip = match current["podIP"].as_str() {
        Some(ip) => ip.to_string(),
        None => allocate(addresses, node_index),
    };
    let known = |name: &str| {
        current["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == name)
            .cloned()
    };
    let mut statuses = vec![];
    let mut not_ready = vec![];
    let mut any_started = false;
    for spec in pod.data["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = spec["name"].as_str().unwrap_or_default().to_string();
        let container = Container {
            pod,
            spec,
            previous: known(&name),
            name,
        };
        let (status, ready) = container.status(&behavior, plan, now);
        any_started |= status["started"] == true
            || status["restartCount"].as_i64().unwrap_or(0) > 0
            || container.has_run();
        if !ready {
            not_ready.push(container.name.clone());
        }
        statuses.push(status);
    }
    let mut conditions = current["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for type_ in ["PodReadyToStartContainers", "Initialized", "PodScheduled"] {
        set_condition(&mut conditions, type_, "True", "", "", &stamp, false);
    }
    let (status, reason, message) = if not_ready.is_empty() {
        ("True", "", String::new())
    } else {
        (
            "False",
            "ContainersNotReady",
            format!("containers with unready status: [{}]", not_ready.join(" ")),
        )
    };
    for type_ in ["ContainersReady", "Ready"] {
        set_condition(
            &mut conditions,
            type_,
            status,
            reason,
            &message,
            &stamp,
            false,
        );
    }
    let mut wanted = json!({
        // Pending until a container has started (an image that cannot be pulled).
        "phase": if any_started { "Running" } else { "Pending" },
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "containerStatuses": statuses,
        "qosClass": qos_class(&pod.data),
    });
    let inits = pod.data["spec"]["initContainers"].as_array();
    if let Some(inits) = inits.filter(|i| !i.is_empty()) {
        wanted["initContainerStatuses"] = inits
            .iter()
            .map(|c| {
                let image = normalize_image(c["image"].as_str().unwrap_or_default());
                json!({
                    "name": c["name"], "image": image, "imageID": image_id(&image),
                    "ready": true, "restartCount": 0, "started": false,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                             "startedAt": started, "finishedAt": started}},
                })
            })
            .collect();
    }
    if same_status(current, &wanted) {
        return;
    }
    plan.actions.push(Action::Patch {
        kind: Kind::Pod,
        object: pod.clone(),
        status: true,
        patch: json!({"status": wanted}),
    });
    if first_start {
        started_events(plan, pod, &fates);
    }
}

/// The failure injection of the Pods on `node`, from its annotation (none when it has none
/// or it does not parse).
fn pod_behavior(node: &DynamicObject) -> InMemoryPodBehavior {
    node.annotations()
        .get(POD_BEHAVIOR_ANNOTATION)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// One container of a Pod on a Ready Node, with what the kubelet last reported of it.
struct Container<'a> {
    pod: &'a DynamicObject,
    spec: &'a Value,
    name: String,
    previous: Option<Value>,
}

/// The back-off before a crashed container starts again: 10 s, doubled per restart, at
/// most 300 s, as the kubelet's.
fn crash_back_off(restarts: i64) -> i64 {
    let doublings = (restarts - 1).clamp(0, 5) as u32;
    (10 * 2i64.pow(doublings)).min(300)
}

impl Container<'_> {
    fn previous(&self, pointer: &str) -> &Value {
        self.previous
            .as_ref()
            .and_then(|p| p.pointer(pointer))
            .unwrap_or(&Value::Null)
    }

    fn has_run(&self) -> bool {
        self.previous("/restartCount").as_i64().unwrap_or(0) > 0
    }

    fn event(&self, plan: &mut Plan, type_: EventType, reason: &'static str, message: String) {
        plan.actions.push(Action::Event {
            kind: Kind::Pod,
            object: self.pod.clone(),
            note: Note {
                component: COMPONENT,
                type_,
                reason,
                message,
                once: false,
            },
        });
    }

    /// The pod as the kubelet names it in messages: `web-7d4b9-x2k4q_default(uid)`.
    fn pod_name(&self) -> String {
        format!(
            "{}_{}({})",
            self.pod.name_any(),
            self.pod.namespace().unwrap_or_default(),
            self.pod.uid().unwrap_or_default()
        )
    }

    // Long: the four fates of a container, each a few lines of the kubelet's report.
    /// The container's status as the kubelet reports it now, and whether it is ready.
    fn status(
        &self,
        behavior: &InMemoryPodBehavior,
        plan: &mut Plan,
        now: DateTime<Utc>,
    ) -> (Value, bool) {
        let stamp = timestamp(now);
        let written = self.spec["image"].as_str().unwrap_or_default();
        let image = normalize_image(written);
        let restarts = self.previous("/restartCount").as_i64().unwrap_or(0);
        let mut status = json!({
            "name": self.name,
            "image": image,
            // The digest is what the last report said, unless the image changed.
            "imageID": match self.previous("/imageID").as_str() {
                Some(id) if self.previous("/image") == image.as_str() && !id.is_empty() => id.to_string(),
                _ => image_id(&image),
            },
            "restartCount": restarts,
            // Never null: a merge patch's null removes the field, and the next round would
            // write it again.
            "lastState": self.previous("/lastState").as_object().map_or(json!({}), |l| json!(l)),
        });
        let container_id = self
            .previous("/containerID")
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| format!("containerd://{}", random_hex()));
        let running_since = self.previous("/state/running/startedAt").as_str();
        let pod_started = parse_time(&self.pod.data["status"]["startTime"]).unwrap_or(now);
        match behavior.fate(written, &image) {
            ContainerFate::PullFails => {
                // ErrImagePull at first, then ImagePullBackOff: said once each.
                let backing_off = (now - pod_started).num_seconds() >= 1
                    && !self.pod.data["status"]["startTime"].is_null();
                let (reason, message) = if backing_off {
                    (
                        "ImagePullBackOff",
                        format!("Back-off pulling image {written:?}"),
                    )
                } else {
                    plan.due_at(pod_started, 1, now);
                    (
                        "ErrImagePull",
                        format!(
                            "failed to pull and unpack image {image:?}: failed to resolve reference {image:?}: {image}: not found"
                        ),
                    )
                };
                if self.previous("/state/waiting/reason").as_str() != Some(reason) {
                    if backing_off {
                        self.event(plan, EventType::Normal, "BackOff", message.clone());
                    } else {
                        self.event(
                            plan,
                            EventType::Normal,
                            "Pulling",
                            format!("Pulling image {written:?}"),
                        );
                        self.event(
                            plan,
                            EventType::Warning,
                            "Failed",
                            format!("Failed to pull image {written:?}: {message}"),
                        );
                    }
                    self.event(
                        plan,
                        EventType::Warning,
                        "Failed",
                        format!("Error: {reason}"),
                    );
                }
                status["imageID"] = "".into();
                status["ready"] = false.into();
                status["started"] = false.into();
                status["state"] = json!({"waiting": {"reason": reason, "message": message}});
                (status, false)
            }
            ContainerFate::CrashLoops => {
                status["containerID"] = container_id.into();
                status["ready"] = false.into();
                if let Some(since) = running_since {
                    let since_time = parse_time(&Value::from(since)).unwrap_or(now);
                    if (now - since_time).num_seconds() < RUN_SECONDS {
                        plan.due_at(since_time, RUN_SECONDS, now);
                        status["started"] = true.into();
                        status["state"] = json!({"running": {"startedAt": since}});
                        return (status, false);
                    }
                    // It exits 1: back off before the next start.
                    let back_off = crash_back_off(restarts + 1);
                    status["restartCount"] = (restarts + 1).into();
                    status["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error",
                        "startedAt": since, "finishedAt": stamp, "containerID": status["containerID"]}});
                    status["started"] = false.into();
                    status["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message":
                        format!("back-off {back_off}s restarting failed container={} pod={}", self.name, self.pod_name())}});
                    self.event(
                        plan,
                        EventType::Warning,
                        "BackOff",
                        format!(
                            "Back-off restarting failed container {} in pod {}",
                            self.name,
                            self.pod_name()
                        ),
                    );
                    plan.due_at(now, back_off, now);
                    return (status, false);
                }
                let finished = parse_time(self.previous("/lastState/terminated/finishedAt"));
                match finished {
                    Some(finished) if (now - finished).num_seconds() < crash_back_off(restarts) => {
                        plan.due_at(finished, crash_back_off(restarts), now);
                        status["started"] = false.into();
                        status["state"] = self.previous("/state").clone();
                        (status, false)
                    }
                    _ => {
                        // Starts (again).
                        if finished.is_some() {
                            self.event(
                                plan,
                                EventType::Normal,
                                "Started",
                                format!("Started container {}", self.name),
                            );
                        }
                        plan.due_at(now, RUN_SECONDS, now);
                        status["started"] = true.into();
                        status["state"] = json!({"running": {"startedAt": stamp}});
                        (status, false)
                    }
                }
            }
            fate => {
                let since = running_since
                    .map(String::from)
                    .unwrap_or_else(|| stamp.clone());
                let since_time = parse_time(&Value::from(since.clone())).unwrap_or(now);
                let delay = self.spec["readinessProbe"]["initialDelaySeconds"]
                    .as_i64()
                    .unwrap_or(0);
                let ready = fate == ContainerFate::Runs
                    && (self.spec["readinessProbe"].is_null()
                        || (now - since_time).num_seconds() >= delay);
                if fate == ContainerFate::Runs && !ready {
                    plan.due_at(since_time, delay, now);
                }
                if fate == ContainerFate::NeverReady && running_since.is_none() {
                    self.event(
                        plan,
                        EventType::Warning,
                        "Unhealthy",
                        "Readiness probe failed: (simulated: the image never becomes ready)".into(),
                    );
                }
                status["containerID"] = container_id.into();
                status["ready"] = ready.into();
                status["started"] = true.into();
                status["state"] = json!({"running": {"startedAt": since}});
                (status, ready)
            }
        }
    }
}

/// The Pod's containers exited: 0, and it Succeeded, or 1, and it Failed.
fn finish(plan: &mut Plan, pod: &DynamicObject, stamp: &str, failed: bool) {
    let (phase, exit_code, reason) = if failed {
        ("Failed", 1, "Error")
    } else {
        ("Succeeded", 0, "Completed")
    };
    let current = &pod.data["status"];
    let statuses: Vec<Value> = current["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let mut c = c.clone();
            let started = c["state"]["running"]["startedAt"].clone();
            c["state"] = json!({"terminated": {"exitCode": exit_code, "reason": reason,
                                               "startedAt": started, "finishedAt": stamp,
                                               "containerID": c["containerID"]}});
            c["ready"] = false.into();
            c["started"] = false.into();
            c
        })
        .collect();
    let mut conditions = current["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for type_ in ["ContainersReady", "Ready"] {
        set_condition(
            &mut conditions,
            type_,
            "False",
            "PodCompleted",
            "",
            stamp,
            false,
        );
    }
    plan.actions.push(Action::Patch {
        kind: Kind::Pod,
        object: pod.clone(),
        status: true,
        patch: json!({"status": {"phase": phase, "conditions": conditions,
                                 "containerStatuses": statuses}}),
    });
}

/// What a kubelet records as it starts each container (whose image it has).
fn started_events(plan: &mut Plan, pod: &DynamicObject, fates: &[ContainerFate]) {
    let containers = pod.data["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten();
    for (container, _) in containers
        .zip(fates)
        .filter(|(_, fate)| **fate != ContainerFate::PullFails)
    {
        let name = container["name"].as_str().unwrap_or_default();
        let image = container["image"].as_str().unwrap_or_default();
        for (reason, message) in [
            (
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            ),
            ("Created", format!("Created container: {name}")),
            ("Started", format!("Started container {name}")),
        ] {
            plan.actions.push(Action::Event {
                kind: Kind::Pod,
                object: pod.clone(),
                note: Note {
                    component: COMPONENT,
                    type_: EventType::Normal,
                    reason,
                    message,
                    once: false,
                },
            });
        }
    }
}

/// A free Pod address in the Node's range: `10.244.<node>.<n>`.
fn allocate(addresses: &mut HashSet<String>, node_index: usize) -> String {
    for third in (node_index % 256..256).chain(0..node_index % 256) {
        for fourth in 2..255 {
            let ip = format!("10.244.{third}.{fourth}");
            if addresses.insert(ip.clone()) {
                return ip;
            }
        }
    }
    "10.244.255.255".into()
}

/// An image as the container runtime reports it: `nginx` is `docker.io/library/nginx:latest`.
pub fn normalize_image(image: &str) -> String {
    let (name, tagged) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (
            image,
            image
                .rsplit('/')
                .next()
                .is_some_and(|last| last.contains(':')),
        ),
    };
    let first = name.split('/').next().unwrap_or_default();
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_registry {
        image.to_string()
    } else if name.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    };
    if !tagged {
        full.push_str(":latest");
    }
    full
}

/// A digest standing for the image, the same for the same image.
fn image_id(image: &str) -> String {
    use sha2::Digest;
    let name = image.split('@').next().unwrap_or(image);
    let repository = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => name,
    };
    let digest: String = sha2::Sha256::digest(image.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{repository}@sha256:{digest}")
}

fn random_hex() -> String {
    (0..4)
        .map(|_| format!("{:016x}", rand::random::<u64>()))
        .collect()
}

/// The Pod's quality of service class: `Guaranteed` when every container's CPU and memory
/// limits equal its requests, `BestEffort` when no container asks for anything, else
/// `Burstable`.
pub fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|f| pod["spec"][*f].as_array().into_iter().flatten())
        .collect();
    let asks = |c: &Value| {
        ["requests", "limits"].iter().any(|k| {
            c["resources"][*k]
                .as_object()
                .is_some_and(|r| r.contains_key("cpu") || r.contains_key("memory"))
        })
    };
    if !containers.iter().any(|c| asks(c)) {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = &c["resources"]["limits"][*r];
            let request = &c["resources"]["requests"][*r];
            !limit.is_null() && (request.is_null() || request == limit)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_named_as_the_runtime_names_them() {
        assert_eq!(normalize_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(
            normalize_image("nginx:1.27"),
            "docker.io/library/nginx:1.27"
        );
        assert_eq!(
            normalize_image("bitnami/redis"),
            "docker.io/bitnami/redis:latest"
        );
        assert_eq!(normalize_image("ghcr.io/org/app:v1"), "ghcr.io/org/app:v1");
        assert_eq!(
            normalize_image("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
        assert!(
            image_id("docker.io/library/nginx:1.27").starts_with("docker.io/library/nginx@sha256:")
        );
    }

    #[test]
    fn quality_of_service_follows_requests_and_limits() {
        let pod = |resources: Value| json!({"spec": {"containers": [{"name": "c", "resources": resources}]}});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&pod(json!({"requests": {"cpu": "100m"}}))),
            "Burstable"
        );
        assert_eq!(
            qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
    }
}
