//! Services: a ClusterIP from the service range (`10.96.0.0/12`) for each Service that has
//! none, node ports for NodePort and LoadBalancer Services, a load balancer address from the
//! simulated cloud for LoadBalancer ones, and the EndpointSlice controller: one slice per
//! Service with a selector, naming its Pods' addresses, whether each is ready, and the ports
//! its `targetPort`s resolve to.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::replica_sets::ready;
use super::world::{World, deleting};
use super::{Action, Kind, Plan, controller_reference, selects};

const SERVICE_NAME: &str = "kubernetes.io/service-name";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const CONTROLLER: &str = "endpointslice-controller.k8s.io";

pub fn plan(world: &World, _now: DateTime<Utc>) -> Plan {
    let mut plan = Plan::default();
    let mut cluster_ips: HashSet<String> = world
        .services
        .iter()
        .filter_map(|s| s.data["spec"]["clusterIP"].as_str().map(String::from))
        .collect();
    let mut node_ports: HashSet<i64> = world
        .services
        .iter()
        .flat_map(|s| {
            s.data["spec"]["ports"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|p| p["nodePort"].as_i64())
        .collect();
    let mut balancers: HashSet<String> = world
        .services
        .iter()
        .filter_map(|s| {
            s.data["status"]["loadBalancer"]["ingress"][0]["ip"]
                .as_str()
                .map(String::from)
        })
        .collect();
    for service in world.services.iter().filter(|s| !deleting(*s)) {
        allocate(
            &mut plan,
            service,
            &mut cluster_ips,
            &mut node_ports,
            &mut balancers,
        );
        endpoints(world, service, &mut plan);
    }
    plan
}

fn free<T: std::hash::Hash + Eq + Clone>(
    taken: &mut HashSet<T>,
    candidates: impl Iterator<Item = T>,
) -> Option<T> {
    candidates.into_iter().find(|c| taken.insert(c.clone()))
}

/// What the API server and the cloud give a Service: its ClusterIP, node ports, and a load
/// balancer's address.
fn allocate(
    plan: &mut Plan,
    service: &DynamicObject,
    cluster_ips: &mut HashSet<String>,
    node_ports: &mut HashSet<i64>,
    balancers: &mut HashSet<String>,
) {
    let spec = &service.data["spec"];
    let type_ = spec["type"].as_str().unwrap_or("ClusterIP");
    if type_ == "ExternalName" {
        return;
    }
    let mut patch = json!({});
    if spec["clusterIP"].as_str().is_none_or(str::is_empty) {
        let ip = free(
            cluster_ips,
            (1..4096u32).map(|n| format!("10.96.{}.{}", n / 254, n % 254 + 1)),
        );
        if let Some(ip) = ip {
            patch["spec"]["clusterIP"] = ip.clone().into();
            patch["spec"]["clusterIPs"] = json!([ip]);
        }
    }
    if matches!(type_, "NodePort" | "LoadBalancer") {
        let mut ports = spec["ports"].as_array().cloned().unwrap_or_default();
        let mut changed = false;
        for port in &mut ports {
            if port["nodePort"].as_i64().is_none()
                && let Some(n) = free(node_ports, 30000..32768)
            {
                port["nodePort"] = n.into();
                changed = true;
            }
        }
        if changed {
            patch["spec"]["ports"] = Value::Array(ports);
        }
    }
    if patch.as_object().is_some_and(|p| !p.is_empty()) {
        plan.actions.push(Action::Patch {
            kind: Kind::Service,
            object: service.clone(),
            status: false,
            patch,
        });
    }
    if type_ == "LoadBalancer"
        && service.data["status"]["loadBalancer"]["ingress"]
            .as_array()
            .is_none_or(|i| i.is_empty())
        && let Some(ip) = free(balancers, (1..=254).map(|n| format!("172.18.255.{n}")))
    {
        plan.actions.push(Action::Patch {
            kind: Kind::Service,
            object: service.clone(),
            status: true,
            patch: json!({"status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}}}),
        });
    }
}

/// The port a Service port sends to on `pod`: its `targetPort` by number, or by the name of a
/// container port.
fn target_port(port: &Value, pod: &DynamicObject) -> Option<i64> {
    match &port["targetPort"] {
        Value::Number(n) => n.as_i64(),
        Value::String(name) => name.parse().ok().or_else(|| {
            pod.data["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                .find(|p| p["name"] == name.as_str())
                .and_then(|p| p["containerPort"].as_i64())
        }),
        _ => port["port"].as_i64(),
    }
}

// Long: selecting the Pods, building the slice, creating or updating it.
fn endpoints(world: &World, service: &DynamicObject, plan: &mut Plan) {
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let spec = &service.data["spec"];
    let ours = |s: &&DynamicObject| {
        s.namespace().as_deref() == Some(&namespace)
            && s.labels().get(SERVICE_NAME) == Some(&name)
            && s.labels().get(MANAGED_BY).map(String::as_str) == Some(CONTROLLER)
    };
    let mut slices: Vec<&DynamicObject> = world
        .endpoint_slices
        .iter()
        .filter(ours)
        .filter(|s| !deleting(*s))
        .collect();
    slices.sort_by_key(|s| s.name_any());
    let Some(selector) = spec["selector"].as_object().filter(|s| !s.is_empty()) else {
        // Without a selector the Service's endpoints are someone else's to write: the slices
        // this controller wrote while it had one go.
        for slice in slices {
            plan.actions.push(Action::Delete {
                kind: Kind::EndpointSlice,
                object: slice.clone(),
            });
        }
        return;
    };
    let selector = json!({"matchLabels": selector});
    let pods: Vec<&DynamicObject> = world
        .pods
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(&namespace))
        .filter(|p| p.data["status"]["podIP"].is_string())
        .filter(|p| {
            !matches!(
                p.data["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        })
        .filter(|p| {
            selects(
                &selector,
                &serde_json::to_value(p.labels()).unwrap_or_default(),
            )
        })
        .collect();
    let service_ports = spec["ports"].as_array().cloned().unwrap_or_default();
    let ports: Vec<Value> = service_ports
        .iter()
        .map(|port| {
            let number = pods
                .first()
                .and_then(|p| target_port(port, p))
                .or_else(|| port["port"].as_i64());
            let mut out = json!({"protocol": port["protocol"].as_str().unwrap_or("TCP")});
            if let Some(number) = number {
                out["port"] = number.into();
            }
            if let Some(name) = port["name"].as_str() {
                out["name"] = name.into();
            }
            out
        })
        .collect();
    let mut endpoints: Vec<Value> = pods
        .iter()
        .map(|pod| {
            let is_ready = ready(pod) && !deleting(*pod);
            let mut endpoint = json!({
                "addresses": [pod.data["status"]["podIP"]],
                "conditions": {"ready": is_ready, "serving": ready(pod), "terminating": deleting(*pod)},
                "targetRef": {"kind": "Pod", "namespace": namespace, "name": pod.name_any(), "uid": pod.uid()},
            });
            if let Some(node) = pod.data["spec"]["nodeName"].as_str() {
                endpoint["nodeName"] = node.into();
            }
            endpoint
        })
        .collect();
    endpoints.sort_by_key(|e| e["targetRef"]["name"].as_str().map(String::from));
    let chunks = place(&slices, endpoints);
    // A Service with no endpoints keeps one empty slice; other empty slices go.
    let all_empty = chunks.iter().all(Vec::is_empty);
    for (at, chunk) in chunks.iter().enumerate() {
        let slice = slices.get(at).copied();
        if chunk.is_empty() && !(all_empty && at == 0) {
            if let Some(slice) = slice {
                plan.actions.push(Action::Delete {
                    kind: Kind::EndpointSlice,
                    object: slice.clone(),
                });
            }
            continue;
        }
        let body = json!({"addressType": "IPv4", "endpoints": chunk, "ports": ports});
        write_slice(plan, service, slice, body);
    }
}

/// The endpoints of each slice: every endpoint stays in the slice that holds it (as the
/// controller keeps them, so one Pod more or less rewrites one slice, not every one after
/// it); new ones fill the slices with room, then new slices, at most
/// [`MAX_ENDPOINTS_PER_SLICE`] each. One entry per existing slice (in `slices`' order), then
/// the new ones.
fn place(slices: &[&DynamicObject], endpoints: Vec<Value>) -> Vec<Vec<Value>> {
    let name = |e: &Value| e["targetRef"]["name"].as_str().map(String::from);
    let mut holder = std::collections::HashMap::new();
    for (at, slice) in slices.iter().enumerate() {
        for endpoint in slice.data["endpoints"].as_array().into_iter().flatten() {
            if let Some(name) = name(endpoint) {
                holder.insert(name, at);
            }
        }
    }
    let mut chunks: Vec<Vec<Value>> = vec![Vec::new(); slices.len().max(1)];
    let mut unplaced = Vec::new();
    for endpoint in endpoints {
        match name(&endpoint).and_then(|n| holder.get(&n).copied()) {
            Some(at) if chunks[at].len() < MAX_ENDPOINTS_PER_SLICE => chunks[at].push(endpoint),
            _ => unplaced.push(endpoint),
        }
    }
    for endpoint in unplaced {
        match chunks
            .iter_mut()
            .find(|c| c.len() < MAX_ENDPOINTS_PER_SLICE)
        {
            Some(chunk) => chunk.push(endpoint),
            None => chunks.push(vec![endpoint]),
        }
    }
    for chunk in &mut chunks {
        chunk.sort_by_key(|e| name(e));
    }
    chunks
}

/// The EndpointSlice controller's `--max-endpoints-per-slice` default.
const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// Writes one slice of `service`'s endpoints: `slice` updated where it differs, or a new one.
fn write_slice(
    plan: &mut Plan,
    service: &DynamicObject,
    slice: Option<&DynamicObject>,
    body: Value,
) {
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    match slice {
        Some(slice) => {
            let same = ["addressType", "endpoints", "ports"].iter().all(|k| {
                slice.data[*k] == body[*k]
                    || (slice.data[*k].is_null()
                        && body[*k].as_array().is_some_and(|a| a.is_empty()))
            });
            if !same {
                plan.actions.push(Action::Patch {
                    kind: Kind::EndpointSlice,
                    object: (*slice).clone(),
                    status: false,
                    patch: body,
                });
            }
        }
        None => {
            let mut slice = body;
            slice["apiVersion"] = "discovery.k8s.io/v1".into();
            slice["kind"] = "EndpointSlice".into();
            slice["metadata"] = json!({
                "generateName": format!("{name}-"),
                "namespace": namespace,
                "labels": {SERVICE_NAME: name, MANAGED_BY: CONTROLLER},
                "ownerReferences": [controller_reference(service, Kind::Service)],
            });
            plan.actions.push(Action::Create {
                kind: Kind::EndpointSlice,
                object: serde_json::from_value(slice).expect("a well-formed EndpointSlice"),
                announce: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn service(selector: Value) -> DynamicObject {
        object(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "a", "uid": "s1", "resourceVersion": "1"},
            "spec": {"clusterIP": "10.96.0.1", "selector": selector,
                     "ports": [{"port": 80, "protocol": "TCP"}]},
        }))
    }

    fn pod(n: usize) -> DynamicObject {
        object(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{n:03}"), "namespace": "a", "uid": format!("p{n}"),
                         "resourceVersion": "1", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "podIP": format!("10.244.{}.{}", n / 250, n % 250 + 1),
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
    }

    fn slice(name: &str) -> DynamicObject {
        object(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "a", "uid": name, "resourceVersion": "1",
                         "labels": {SERVICE_NAME: "web", MANAGED_BY: CONTROLLER}},
            "addressType": "IPv4", "endpoints": [],
        }))
    }

    /// (creates, patches, deletes) of EndpointSlices, each with its endpoint count.
    fn slice_writes(plan: &Plan) -> (Vec<usize>, Vec<usize>, Vec<String>) {
        let count = |o: &Value| o["endpoints"].as_array().map_or(0, Vec::len);
        let mut writes = (vec![], vec![], vec![]);
        for action in &plan.actions {
            match action {
                Action::Create {
                    kind: Kind::EndpointSlice,
                    object,
                    ..
                } => writes.0.push(count(&object.data)),
                Action::Patch {
                    kind: Kind::EndpointSlice,
                    patch,
                    ..
                } => writes.1.push(count(patch)),
                Action::Delete {
                    kind: Kind::EndpointSlice,
                    object,
                } => writes.2.push(object.name_any()),
                _ => {}
            }
        }
        writes
    }

    /// The patch `planned` makes to slice `name`.
    fn slice_patch(planned: &Plan, name: &str) -> Value {
        planned
            .actions
            .iter()
            .find_map(|a| match a {
                Action::Patch {
                    kind: Kind::EndpointSlice,
                    object,
                    patch,
                    ..
                } if object.name_any() == name => Some(patch.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no patch of {name}"))
    }

    #[test]
    fn slices_hold_a_hundred_endpoints_and_go_with_the_selector() {
        let mut world = World::default();
        world.services.record(service(json!({"app": "web"})));
        for n in 0..250 {
            world.pods.record(pod(n));
        }
        world.endpoint_slices.record(slice("web-a"));
        assert_eq!(
            slice_writes(&plan(&world, Utc::now())),
            (vec![100, 50], vec![100], vec![])
        );

        // Fewer Pods than slices: the extra slices go.
        world.endpoint_slices.record(slice("web-b"));
        world.endpoint_slices.record(slice("web-c"));
        world.endpoint_slices.record(slice("web-d"));
        let mut fewer = World::default();
        std::mem::swap(&mut fewer.endpoint_slices, &mut world.endpoint_slices);
        fewer.services.record(service(json!({"app": "web"})));
        for n in 0..120 {
            fewer.pods.record(pod(n));
        }
        let (created, patched, deleted) = slice_writes(&plan(&fewer, Utc::now()));
        assert_eq!((created, patched), (vec![], vec![100, 20]));
        assert_eq!(deleted, ["web-c", "web-d"]);

        // One Pod gone rewrites the one slice that held it.
        let held = |name: &str, pods: std::ops::Range<usize>| {
            let mut slice = slice(name);
            let endpoints: Vec<Value> = pods
                .map(|n| json!({"targetRef": {"name": format!("web-{n:03}")}}))
                .collect();
            slice.data["endpoints"] = json!(endpoints);
            slice
        };
        let mut one_gone = World::default();
        one_gone.services.record(service(json!({"app": "web"})));
        for n in (0..150).filter(|n| *n != 5) {
            one_gone.pods.record(pod(n));
        }
        one_gone.endpoint_slices.record(held("web-a", 0..100));
        one_gone.endpoint_slices.record(held("web-b", 100..150));
        let planned = plan(&one_gone, Utc::now());
        let patched: Vec<String> = planned
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Patch {
                    kind: Kind::EndpointSlice,
                    object,
                    ..
                } => Some(object.name_any()),
                _ => None,
            })
            .collect();
        // web-b's endpoints gain their conditions and addresses here; web-a loses web-005.
        assert!(patched.contains(&"web-a".to_string()), "{patched:?}");
        let (created, _, deleted) = slice_writes(&planned);
        assert!(created.is_empty() && deleted.is_empty());
        let web_a = slice_patch(&planned, "web-a");
        assert_eq!(web_a["endpoints"].as_array().unwrap().len(), 99);
        let web_b = slice_patch(&planned, "web-b");
        assert_eq!(
            web_b["endpoints"][0]["targetRef"]["name"], "web-100",
            "nothing moved to web-b"
        );

        // Without a selector, the controller's slices are deleted.
        let mut unselected = World::default();
        unselected.services.record(service(json!({})));
        unselected.endpoint_slices.record(slice("web-a"));
        assert_eq!(
            slice_writes(&plan(&unselected, Utc::now())),
            (vec![], vec![], vec!["web-a".to_string()])
        );
    }
}
