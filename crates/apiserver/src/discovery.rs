//! Discovery (`/api`, `/apis`, group and group-version resource lists) and `/version`.

use serde_json::{Value, json};

use crate::registry::{Registry, ResourceType};

/// Every verb a stored kind serves (what `cluster-admin`-like roles list).
pub const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The Kubernetes version lariat's API is compatible with (what kubectl checks skew against).
pub const KUBERNETES_MINOR: &str = "33";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBERNETES_MINOR,
        "gitVersion": format!("v1.{KUBERNETES_MINOR}.0-lariat.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// The version document of a cluster running Kubernetes `version` (`v1.30.2`): what a
/// simulated workload cluster reports.
pub fn version_of(kubernetes: &str) -> Value {
    let mut info = version();
    let numbers: Vec<&str> = kubernetes.trim_start_matches('v').split('.').collect();
    if let [major, minor, ..] = numbers.as_slice() {
        info["major"] = json!(major);
        info["minor"] = json!(minor);
    }
    info["gitVersion"] = json!(kubernetes);
    info
}

pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// Served versions of a group, preferred (storage) version first.
fn group_versions(types: &[&ResourceType]) -> Vec<String> {
    let mut versions: Vec<String> = vec![];
    for rt in types {
        let storage = rt.storage_version().name.clone();
        if !versions.contains(&storage) {
            versions.insert(0, storage);
        }
        for v in &rt.versions {
            if !versions.contains(&v.name) {
                versions.push(v.name.clone());
            }
        }
    }
    versions
}

fn group_entry(name: &str, types: &[&ResourceType]) -> Value {
    let versions = group_versions(types);
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": entries,
        "preferredVersion": entries.first().cloned().unwrap_or(Value::Null),
    })
}

/// Kinds that are asked, never stored: created and answered at once (`http.rs`), so
/// `kubectl create -f` finds them as on any cluster. (group, plural, kind).
const REVIEWS: &[(&str, &str, &str)] = &[
    (
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
    ),
    (
        "authorization.k8s.io",
        "subjectaccessreviews",
        "SubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
    ),
    (
        "authentication.k8s.io",
        "selfsubjectreviews",
        "SelfSubjectReview",
    ),
];

fn review_group(name: &str) -> Option<Value> {
    REVIEWS.iter().any(|(g, _, _)| *g == name).then(|| {
        let version = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
        json!({"name": name, "versions": [version], "preferredVersion": version})
    })
}

pub fn groups(registry: &Registry) -> Value {
    let all = registry.all();
    let mut names: Vec<&str> = all
        .iter()
        .map(|rt| rt.group.as_str())
        .filter(|g| !g.is_empty())
        .collect();
    names.dedup();
    names.sort();
    names.dedup();
    let groups: Vec<Value> = names
        .iter()
        .map(|name| {
            let types: Vec<&ResourceType> = all
                .iter()
                .filter(|rt| rt.group == *name)
                .map(|rt| rt.as_ref())
                .collect();
            group_entry(name, &types)
        })
        .collect();
    let mut groups = groups;
    groups.extend(
        ["authentication.k8s.io", "authorization.k8s.io"]
            .map(|g| review_group(g).expect("a review group")),
    );
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let all = registry.all();
    let types: Vec<&ResourceType> = all
        .iter()
        .filter(|rt| rt.group == name)
        .map(|rt| rt.as_ref())
        .collect();
    let mut entry = if types.is_empty() {
        review_group(name)?
    } else {
        group_entry(name, &types)
    };
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

pub fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let all = registry.all();
    let mut resources = vec![];
    for rt in all.iter().filter(|rt| rt.group == group) {
        let Some(served) = rt.version(version) else {
            continue;
        };
        let mut entry = json!({
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
        });
        if !rt.short_names.is_empty() {
            entry["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            entry["categories"] = json!(rt.categories);
        }
        resources.push(entry);
        if served.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if rt.group.is_empty() && rt.plural == "serviceaccounts" {
            resources.push(json!({
                "name": "serviceaccounts/token",
                "singularName": "",
                "namespaced": true,
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }));
        }
        if served.scale.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if version == "v1" {
        for (_, plural, kind) in REVIEWS.iter().filter(|(g, _, _)| *g == group) {
            resources.push(json!({
                "name": plural, "singularName": "", "namespaced": plural.starts_with("local"),
                "kind": kind, "verbs": ["create"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}
