//! The scheduler: each Pod without a Node goes to a Ready, schedulable Node whose labels its
//! `nodeSelector` and required node affinity match, whose taints it tolerates, and where its
//! resource requests fit beside the Pods already there; the least loaded such Node wins. A Pod
//! that fits nowhere stays Pending with the scheduler's reason, in its PodScheduled condition
//! and as a FailedScheduling Event (`0/3 nodes are available: 3 Insufficient cpu.`).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use lariat_controllers::events::EventType;
use serde_json::{Value, json};

use super::replica_sets::active;
use super::world::{World, deleting};
use super::{Action, Kind, Note, Plan, condition, matches_requirement, set_condition, timestamp};

const COMPONENT: &str = "default-scheduler";

/// What a Pod asks of a Node: CPU in millicores, memory in bytes, and one Pod.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Requests {
    pub cpu: f64,
    pub memory: f64,
    pub pods: f64,
}

impl std::ops::AddAssign for Requests {
    fn add_assign(&mut self, other: Requests) {
        self.cpu += other.cpu;
        self.memory += other.memory;
        self.pods += other.pods;
    }
}

fn quantity(value: &Value) -> f64 {
    value
        .as_str()
        .and_then(lariat_api::parse_quantity)
        .or_else(|| value.as_f64())
        .unwrap_or(0.0)
}

/// A Pod's requests: its containers' summed, or an init container's if larger, as the
/// scheduler counts them (a limit stands in for a missing request).
pub fn requests(pod: &Value) -> Requests {
    let of = |c: &Value, resource: &str| {
        let request = &c["resources"]["requests"][resource];
        if request.is_null() {
            quantity(&c["resources"]["limits"][resource])
        } else {
            quantity(request)
        }
    };
    let sum = |field: &str| -> (f64, f64) {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .fold((0.0, 0.0), |(cpu, memory), c| {
                (cpu + of(c, "cpu"), memory + of(c, "memory"))
            })
    };
    let (cpu, memory) = sum("containers");
    let (init_cpu, init_memory) = pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .fold((0.0f64, 0.0f64), |(cpu, memory), c| {
            (cpu.max(of(c, "cpu")), memory.max(of(c, "memory")))
        });
    Requests {
        cpu: cpu.max(init_cpu) * 1000.0,
        memory: memory.max(init_memory),
        pods: 1.0,
    }
}

/// What a Node offers: its allocatable CPU (millicores), memory and Pods.
fn allocatable(node: &DynamicObject) -> Requests {
    let allocatable = &node.data["status"]["allocatable"];
    Requests {
        cpu: quantity(&allocatable["cpu"]) * 1000.0,
        memory: quantity(&allocatable["memory"]),
        pods: quantity(&allocatable["pods"]),
    }
}

pub fn node_ready(node: &DynamicObject) -> bool {
    condition(&node.data["status"], "Ready").is_some_and(|c| c["status"] == "True")
}

/// Whether one of the Pod's tolerations tolerates the taint.
pub fn tolerates(pod: &Value, taint: &Value) -> bool {
    pod["spec"]["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| {
            let any_key = t["key"].as_str().is_none_or(str::is_empty);
            let key_matches = any_key && t["operator"] == "Exists" || t["key"] == taint["key"];
            let effect_matches = t["effect"].is_null()
                || t["effect"].as_str() == Some("")
                || t["effect"] == taint["effect"];
            let value_matches = t["operator"] == "Exists"
                || t["value"].as_str().unwrap_or_default()
                    == taint["value"].as_str().unwrap_or_default();
            key_matches && effect_matches && value_matches
        })
}

/// Why the Node cannot take the Pod, in the scheduler's words; `None` when it can.
fn unfit(pod: &Value, node: &DynamicObject, used: Requests) -> Option<String> {
    // The taints the node lifecycle controller puts on a Node that is not Ready or is
    // cordoned, which a Pod (a DaemonSet's) may tolerate.
    let not_ready = json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"});
    if !node_ready(node) && !tolerates(pod, &not_ready) {
        return Some("node(s) had untolerated taint {node.kubernetes.io/not-ready: }".into());
    }
    let cordoned = json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"});
    if node.data["spec"]["unschedulable"] == true && !tolerates(pod, &cordoned) {
        return Some("node(s) were unschedulable".into());
    }
    let taints = node.data["spec"]["taints"].as_array();
    for taint in taints.into_iter().flatten() {
        let blocks = matches!(taint["effect"].as_str(), Some("NoSchedule" | "NoExecute"));
        if blocks && !tolerates(pod, taint) {
            return Some(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint["key"].as_str().unwrap_or_default(),
                taint["value"].as_str().unwrap_or_default()
            ));
        }
    }
    if !matches_node(pod, node) {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    let wants = requests(pod);
    let has = allocatable(node);
    if used.pods + 1.0 > has.pods {
        return Some("Too many pods".into());
    }
    if wants.cpu > 0.0 && used.cpu + wants.cpu > has.cpu {
        return Some("Insufficient cpu".into());
    }
    if wants.memory > 0.0 && used.memory + wants.memory > has.memory {
        return Some("Insufficient memory".into());
    }
    None
}

/// Whether the Pod's `nodeSelector` and required node affinity (expressions on the Node's
/// labels, fields on its name) match the Node.
pub fn matches_node(pod: &Value, node: &DynamicObject) -> bool {
    let labels = serde_json::to_value(node.labels()).unwrap_or_default();
    let fields = json!({"metadata.name": node.name_any()});
    let selector_matches = pod["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels[k] == *v);
    let all = |term: &Value, field: &str, against: &Value| {
        term[field]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| matches_requirement(e, against))
    };
    let terms = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let affinity_matches = terms.as_array().is_none_or(|terms| {
        terms
            .iter()
            .any(|term| all(term, "matchExpressions", &labels) && all(term, "matchFields", &fields))
    });
    selector_matches && affinity_matches
}

/// How full the Node would be with the Pod: the mean of its CPU and memory shares.
fn load(node: &DynamicObject, used: Requests) -> f64 {
    let has = allocatable(node);
    let share = |used: f64, has: f64| if has > 0.0 { used / has } else { 1.0 };
    (share(used.cpu, has.cpu) + share(used.memory, has.memory) + share(used.pods, has.pods)) / 3.0
}

pub fn plan(world: &World, now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let mut used: HashMap<String, Requests> = HashMap::new();
    for pod in world.pods.iter().filter(|p| active(p)) {
        if let Some(node) = pod.data["spec"]["nodeName"].as_str() {
            *used.entry(node.to_string()).or_default() += requests(&pod.data);
        }
    }
    let nodes: Vec<&DynamicObject> = world.nodes.iter().collect();
    let pending = world.pods.iter().filter(|p| {
        !deleting(*p)
            && p.data["spec"]["nodeName"]
                .as_str()
                .is_none_or(str::is_empty)
            && p.data["spec"]["schedulerName"]
                .as_str()
                .is_none_or(|s| s == COMPONENT)
            && active(p)
    });
    for pod in pending {
        // Its claims first: a Pod waits for them to exist and be bound, on any Node.
        match unbound_claim(world, pod) {
            Claims::Bound => {}
            // Its volume is made now that a Pod uses it; no word until it is.
            Claims::Provisioning => continue,
            Claims::Unfit(reason) => {
                let n = nodes.len();
                let message = if n == 0 {
                    message(0, &BTreeMap::new())
                } else {
                    format!(
                        "0/{n} nodes are available: {reason}. preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
                    )
                };
                unschedulable(&mut plan, pod, message, now);
                continue;
            }
        }
        let mut why: BTreeMap<String, usize> = BTreeMap::new();
        let mut best: Option<(f64, &str)> = None;
        for node in &nodes {
            let mut after = used.get(&node.name_any()).copied().unwrap_or_default();
            match unfit(&pod.data, node, after) {
                Some(reason) => *why.entry(reason).or_default() += 1,
                None => {
                    after += requests(&pod.data);
                    let score = load(node, after);
                    if best.is_none_or(|(b, _)| score < b) {
                        best = Some((score, node.metadata.name.as_deref().unwrap_or_default()));
                    }
                }
            }
        }
        match best {
            Some((_, node)) => {
                *used.entry(node.to_string()).or_default() += requests(&pod.data);
                bind(&mut plan, pod, node);
            }
            None => unschedulable(&mut plan, pod, message(nodes.len(), &why), now),
        }
    }
    plan
}

fn bind(plan: &mut Plan, pod: &DynamicObject, node: &str) {
    plan.actions.push(Action::Patch {
        kind: Kind::Pod,
        object: pod.clone(),
        status: false,
        patch: json!({"spec": {"nodeName": node}}),
    });
    plan.actions.push(Action::Event {
        kind: Kind::Pod,
        object: pod.clone(),
        note: Note {
            component: COMPONENT,
            type_: EventType::Normal,
            reason: "Scheduled",
            message: format!(
                "Successfully assigned {}/{} to {node}",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            ),
            once: false,
        },
    });
}

/// The scheduler's message for a Pod no Node takes, e.g. `0/3 nodes are available: 1
/// Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3
/// nodes are available: 3 Preemption is not helpful for scheduling.`
pub fn message(nodes: usize, why: &BTreeMap<String, usize>) -> String {
    if nodes == 0 {
        return "no nodes available to schedule pods".into();
    }
    let reasons: Vec<String> = why.iter().map(|(r, n)| format!("{n} {r}")).collect();
    format!(
        "0/{nodes} nodes are available: {}. preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling.",
        reasons.join(", ")
    )
}

/// Where a Pod's claims stand.
enum Claims {
    Bound,
    /// Unbound claims of `WaitForFirstConsumer` classes only: provisioned for this Pod.
    Provisioning,
    /// Why they keep it from any Node, in the scheduler's words.
    Unfit(String),
}

fn unbound_claim(world: &World, pod: &DynamicObject) -> Claims {
    let namespace = pod.namespace().unwrap_or_default();
    let mut waiting = false;
    for name in super::volumes::claims_of(pod) {
        let claim = match world.claims.get(&namespace, name) {
            None => return Claims::Unfit(format!("persistentvolumeclaim {name:?} not found")),
            Some(claim) if deleting(claim) => {
                return Claims::Unfit(format!("persistentvolumeclaim {name:?} is being deleted"));
            }
            Some(claim) => claim,
        };
        if claim.data["status"]["phase"] == "Bound" {
            continue;
        }
        let class = claim.data["spec"]["storageClassName"]
            .as_str()
            .unwrap_or_default();
        let later = world
            .storage_classes
            .get("", class)
            .is_some_and(|c| c.data["volumeBindingMode"] == "WaitForFirstConsumer");
        if !later {
            return Claims::Unfit("pod has unbound immediate PersistentVolumeClaims".into());
        }
        waiting = true;
    }
    if waiting {
        Claims::Provisioning
    } else {
        Claims::Bound
    }
}

fn unschedulable(plan: &mut Plan, pod: &DynamicObject, message: String, now: DateTime<Utc>) {
    let status = &pod.data["status"];
    // Said once per reason, not every round.
    if condition(status, "PodScheduled").is_some_and(|c| c["message"] == message.as_str()) {
        return;
    }
    let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    set_condition(
        &mut conditions,
        "PodScheduled",
        "False",
        "Unschedulable",
        &message,
        &timestamp(now),
        false,
    );
    plan.actions.push(Action::Patch {
        kind: Kind::Pod,
        object: pod.clone(),
        status: true,
        patch: json!({"status": {"phase": "Pending", "conditions": conditions}}),
    });
    plan.actions.push(Action::Event {
        kind: Kind::Pod,
        object: pod.clone(),
        note: Note {
            component: COMPONENT,
            type_: EventType::Warning,
            reason: "FailedScheduling",
            message,
            once: false,
        },
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ready: bool, extra: Value) -> DynamicObject {
        let mut node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"zone": "a"}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            },
        });
        json_patch_merge(&mut node, extra);
        serde_json::from_value(node).unwrap()
    }

    fn json_patch_merge(target: &mut Value, patch: Value) {
        if let (Some(t), Value::Object(p)) = (target.as_object_mut(), patch.clone()) {
            for (k, v) in p {
                json_patch_merge(t.entry(k).or_insert(Value::Null), v);
            }
        } else {
            *target = patch;
        }
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "web"}, "spec": spec})
    }

    #[test]
    fn a_node_is_refused_for_the_reasons_the_scheduler_gives() {
        let big = pod(
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}}}]}),
        );
        let half = Requests {
            cpu: 1000.0,
            memory: 0.0,
            pods: 1.0,
        };
        assert_eq!(
            unfit(&big, &node("n", true, json!({})), half).as_deref(),
            Some("Insufficient cpu")
        );
        assert_eq!(
            unfit(&big, &node("n", true, json!({})), Requests::default()),
            None
        );
        assert!(
            unfit(&big, &node("n", false, json!({})), Requests::default())
                .unwrap()
                .contains("not-ready")
        );
        let tainted = node(
            "n",
            true,
            json!({"spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(
            unfit(&big, &tainted, Requests::default()).as_deref(),
            Some("node(s) had untolerated taint {gpu: yes}")
        );
        let tolerant =
            pod(json!({"containers": [], "tolerations": [{"key": "gpu", "operator": "Exists"}]}));
        assert_eq!(unfit(&tolerant, &tainted, Requests::default()), None);
        let elsewhere = pod(json!({"containers": [], "nodeSelector": {"zone": "b"}}));
        assert!(
            unfit(&elsewhere, &node("n", true, json!({})), Requests::default())
                .unwrap()
                .contains("selector")
        );
        let mut why = BTreeMap::new();
        why.insert("Insufficient cpu".to_string(), 3);
        assert_eq!(
            message(3, &why),
            "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn requests_add_containers_and_take_the_largest_init_container() {
        let p = pod(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "250m"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Gi"}}}],
        }));
        let r = requests(&p);
        assert_eq!(r.cpu, 500.0);
        assert_eq!(r.memory, 1024.0 * 1024.0 * 1024.0);
    }
}
