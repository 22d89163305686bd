//! The default ClusterRoles and ClusterRoleBindings kube-apiserver ships, kept from the first
//! start as kube-apiserver keeps its own.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{AUTHENTICATED, GROUP, MASTERS};
use crate::status::{ApiError, ApiResult};

/// The label kube-apiserver marks its default roles with.
const BOOTSTRAPPING: &str = "kubernetes.io/bootstrapping";
/// `"false"` on a default role or binding: an administrator changed it and start must not
/// put it back.
const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";
fn rule(groups: &[&str], resources: &[String], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>) -> Value {
    let mut labels = labels;
    labels[BOOTSTRAPPING] = json!("rbac-defaults");
    json!({
        "metadata": {"name": name, "labels": labels, "annotations": {AUTOUPDATE: "true"}},
        "rules": rules,
    })
}

fn aggregated(name: &str, labels: Value, selects: &str) -> Value {
    let mut role = cluster_role(name, labels, vec![]);
    role["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {format!("{AGGREGATE_TO}{selects}"): "true"}}]});
    role.as_object_mut().expect("object").remove("rules");
    role
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    json!({
        "metadata": {
            "name": name,
            "labels": {BOOTSTRAPPING: "rbac-defaults"},
            "annotations": {AUTOUPDATE: "true"},
        },
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
        "subjects": groups.iter().map(|g| json!({"apiGroup": GROUP, "kind": "Group", "name": g})).collect::<Vec<_>>(),
    })
}

// Long: kube-apiserver's default roles and bindings, a table read down, one entry each.
/// The default ClusterRoles and ClusterRoleBindings, as kube-apiserver ships them, with
/// `edit` and `view` reaching lariat's kinds (`kinds`: each group's plurals). The cluster
/// proxy (`clusters/proxy`) is in none but `cluster-admin`: what a caller may do downstream
/// is the downstream cluster's RBAC to say.
pub fn defaults(kinds: &[(String, Vec<String>)]) -> Vec<(&'static str, Value)> {
    let s = |items: &[&str]| items.iter().map(|i| i.to_string()).collect::<Vec<_>>();
    let write = ["create", "delete", "deletecollection", "patch", "update"];
    let read = ["get", "list", "watch"];
    let all = crate::discovery::VERBS;
    let workloads = s(&["configmaps", "secrets", "services", "serviceaccounts"]);
    let viewable = s(&[
        "configmaps",
        "services",
        "serviceaccounts",
        "events",
        "namespaces",
    ]);
    let apps = s(&[
        "deployments",
        "statefulsets",
        "deployments/scale",
        "statefulsets/scale",
    ]);
    let apps_status = s(&["deployments/status", "statefulsets/status"]);
    let mut edit = vec![
        rule(&[""], &workloads, &write),
        // What `view` leaves out and `edit` reads, as Kubernetes's own `edit`.
        rule(&[""], &s(&["secrets"]), &read),
        rule(&[""], &s(&["serviceaccounts/token"]), &["create"]),
        rule(&["apps"], &apps, &write),
        rule(&["networking.k8s.io"], &s(&["networkpolicies"]), &write),
    ];
    let mut view = vec![
        rule(&[""], &viewable, &read),
        rule(&["apps"], &apps, &read),
        rule(&["apps"], &apps_status, &read),
        rule(&["networking.k8s.io"], &s(&["networkpolicies"]), &read),
        rule(&["events.k8s.io"], &s(&["events"]), &read),
    ];
    for (group, plurals) in kinds {
        let with_status: Vec<String> = plurals
            .iter()
            .flat_map(|p| match p.contains('/') {
                true => vec![p.clone()],
                false => vec![p.clone(), format!("{p}/status")],
            })
            .collect();
        edit.push(rule(&[group.as_str()], plurals, &write));
        view.push(rule(&[group.as_str()], &with_status, &read));
    }
    // lariat's own kinds are credentials (Tokens, registration tokens) and what the server
    // reports (ClusterConnections): the last are for everyone who views, the rest for admins.
    view.push(rule(
        &[lariat_api::management::GROUP],
        &s(&["clusterconnections"]),
        &read,
    ));
    let admin = vec![
        rule(&[GROUP], &s(&["roles", "rolebindings"]), &all),
        rule(
            &["authorization.k8s.io"],
            &s(&["localsubjectaccessreviews"]),
            &["create"],
        ),
    ];
    let to = |role: &str| json!({format!("{AGGREGATE_TO}{role}"): "true"});
    let discovery = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ];
    let public = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    vec![
        (
            "clusterroles",
            cluster_role(
                "cluster-admin",
                json!({}),
                vec![
                    json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
                    json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
                ],
            ),
        ),
        ("clusterroles", aggregated("admin", json!({}), "admin")),
        ("clusterroles", aggregated("edit", to("admin"), "edit")),
        ("clusterroles", aggregated("view", to("edit"), "view")),
        (
            "clusterroles",
            cluster_role("system:aggregate-to-admin", to("admin"), admin),
        ),
        (
            "clusterroles",
            cluster_role("system:aggregate-to-edit", to("edit"), edit),
        ),
        (
            "clusterroles",
            cluster_role("system:aggregate-to-view", to("view"), view),
        ),
        (
            "clusterroles",
            cluster_role(
                "system:basic-user",
                json!({}),
                vec![
                    rule(
                        &["authorization.k8s.io"],
                        &s(&["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                        &["create"],
                    ),
                    rule(
                        &["authentication.k8s.io"],
                        &s(&["selfsubjectreviews"]),
                        &["create"],
                    ),
                ],
            ),
        ),
        (
            "clusterroles",
            cluster_role(
                "system:discovery",
                json!({}),
                vec![json!({"nonResourceURLs": discovery, "verbs": ["get"]})],
            ),
        ),
        (
            "clusterroles",
            cluster_role(
                "system:public-info-viewer",
                json!({}),
                vec![json!({"nonResourceURLs": public, "verbs": ["get"]})],
            ),
        ),
        (
            "clusterrolebindings",
            binding("cluster-admin", "cluster-admin", &[MASTERS]),
        ),
        (
            "clusterrolebindings",
            binding("system:basic-user", "system:basic-user", &[AUTHENTICATED]),
        ),
        (
            "clusterrolebindings",
            binding("system:discovery", "system:discovery", &[AUTHENTICATED]),
        ),
        (
            "clusterrolebindings",
            binding(
                "system:public-info-viewer",
                "system:public-info-viewer",
                &[AUTHENTICATED, "system:unauthenticated"],
            ),
        ),
    ]
}

/// Creates the default roles and bindings (with `edit` and `view` reaching the kinds of the
/// groups `edit_and_view`), and on every start puts back what a newer build
/// adds to them (missing rules, subjects, aggregation), as kube-apiserver reconciles its own:
/// what an administrator added stays, and one marked `autoupdate: "false"` is left alone.
pub async fn bootstrap(
    resources: &crate::resources::Resources,
    edit_and_view: &[String],
) -> ApiResult<()> {
    let mut kinds: HashMap<String, Vec<String>> = HashMap::new();
    for rt in resources.registry.all() {
        if edit_and_view.contains(&rt.group) {
            kinds
                .entry(rt.group.clone())
                .or_default()
                .push(rt.plural.clone());
            if rt.storage_version().scale.is_some() {
                kinds
                    .entry(rt.group.clone())
                    .or_default()
                    .push(format!("{}/scale", rt.plural));
            }
        }
    }
    let mut kinds: Vec<(String, Vec<String>)> = kinds.into_iter().collect();
    kinds.sort();
    for (_, plurals) in &mut kinds {
        plurals.sort();
    }
    let options = crate::resources::WriteOptions {
        field_manager: "lariat".into(),
        ..Default::default()
    };
    for (plural, wanted) in defaults(&kinds) {
        let scope = resources
            .scope(GROUP, plural, None)
            .expect("RBAC kinds are built in");
        let name = wanted["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut current = match resources.get(&scope, &name).await {
            Ok(current) => current,
            Err(ApiError::NotFound { .. }) => {
                match resources.create(&scope, wanted, &options).await {
                    Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if current["metadata"]["annotations"][AUTOUPDATE] == "false" {
            continue;
        }
        let before = current.clone();
        for field in ["rules", "subjects"] {
            for item in wanted[field].as_array().into_iter().flatten() {
                let list = &mut current[field];
                if !list.is_array() {
                    *list = json!([]);
                }
                let list = list.as_array_mut().expect("array");
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
        }
        if !wanted["aggregationRule"].is_null() {
            current["aggregationRule"] = wanted["aggregationRule"].clone();
        }
        if current != before {
            resources
                .update(&scope, &name, current, None, &options)
                .await?;
        }
    }
    Ok(())
}
