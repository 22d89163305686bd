//! The RoleTemplates and GlobalRoles Rancher ships, as lariat's `builtin` ones, kept from the
//! first start.

use lariat_api::rancher::GROUP;
use lariat_apiserver::resources::{Resources, WriteOptions};
use lariat_apiserver::status::{ApiError, ApiResult};
use serde_json::{Value, json};

const CAPI_GROUP: &str = "cluster.x-k8s.io";

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

const READ: &[&str] = &["get", "list", "watch"];

/// The RoleTemplates and GlobalRoles Rancher ships, as lariat's `builtin` ones.
pub fn builtins() -> Vec<(&'static str, Value)> {
    let everything = vec![
        rule(&["*"], &["*"], &["*"]),
        json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
    ];
    // What a project's members work with, namespaced (a RoleBinding in each namespace).
    let workloads = |verbs: &[&str], secrets: bool| {
        let mut core = vec![
            "pods",
            "pods/log",
            "services",
            "endpoints",
            "configmaps",
            "persistentvolumeclaims",
            "serviceaccounts",
            "events",
            "replicationcontrollers",
        ];
        if secrets {
            core.extend(["secrets", "pods/exec", "pods/attach", "pods/portforward"]);
        }
        vec![
            rule(&[""], &core, verbs),
            // The namespace itself, read: a RoleBinding in it reaches only it, so members
            // see their project's namespaces and no other.
            rule(&[""], &["namespaces"], &["get"]),
            rule(&["apps", "batch", "autoscaling"], &["*"], verbs),
            rule(
                &["networking.k8s.io"],
                &["ingresses", "networkpolicies"],
                verbs,
            ),
            rule(&["policy"], &["poddisruptionbudgets"], verbs),
        ]
    };
    let mut member = workloads(&["*"], true);
    member.push(rule(
        &[lariat_apiserver::rbac::GROUP],
        &["roles", "rolebindings"],
        READ,
    ));
    let template = |name: &str, display: &str, context: &str, rules: Vec<Value>| {
        json!({
            "apiVersion": lariat_api::rancher::API_VERSION, "kind": "RoleTemplate",
            "metadata": {"name": name}, "displayName": display, "context": context,
            "builtin": true, "rules": rules,
        })
    };
    let global = |name: &str, display: &str, rules: Vec<Value>, inherited: &[&str]| {
        json!({
            "apiVersion": lariat_api::rancher::API_VERSION, "kind": "GlobalRole",
            "metadata": {"name": name}, "displayName": display, "builtin": true,
            "rules": rules, "inheritedClusterRoles": inherited,
        })
    };
    vec![
        (
            "roletemplates",
            template(
                "cluster-owner",
                "Cluster Owner",
                "cluster",
                everything.clone(),
            ),
        ),
        (
            "roletemplates",
            template(
                "cluster-member",
                "Cluster Member",
                "cluster",
                vec![
                    rule(&[""], &["nodes", "namespaces", "persistentvolumes"], READ),
                    rule(&["storage.k8s.io"], &["storageclasses"], READ),
                    rule(
                        &["apiextensions.k8s.io"],
                        &["customresourcedefinitions"],
                        READ,
                    ),
                    rule(&["metrics.k8s.io"], &["nodes", "pods"], READ),
                ],
            ),
        ),
        (
            "roletemplates",
            template(
                "project-owner",
                "Project Owner",
                "project",
                vec![rule(&["*"], &["*"], &["*"])],
            ),
        ),
        (
            "roletemplates",
            template("project-member", "Project Member", "project", member),
        ),
        (
            "roletemplates",
            template("read-only", "Read-only", "project", workloads(READ, false)),
        ),
        (
            "globalroles",
            global("admin", "Admin", everything, &["cluster-owner"]),
        ),
        (
            "globalroles",
            global(
                "restricted-admin",
                "Restricted Admin",
                vec![rule(&[CAPI_GROUP], &["clusters"], READ)],
                &["cluster-owner"],
            ),
        ),
    ]
}

/// Creates the built-in RoleTemplates and GlobalRoles, and puts back what a newer build
/// changes in them: they are lariat's (`builtin: true`), as Rancher's are Rancher's.
pub async fn bootstrap(resources: &Resources) -> ApiResult<()> {
    let options = WriteOptions {
        field_manager: "lariat".into(),
        ..Default::default()
    };
    for (plural, wanted) in builtins() {
        let Some(scope) = resources.scope(GROUP, plural, None) else {
            return Err(ApiError::internal(format!(
                "{plural}.{GROUP} is not served: a server with Rancher's access control serves its kinds (add lariat_api::rancher::crds() to Config::kinds)"
            )));
        };
        let name = wanted["metadata"]["name"].as_str().unwrap_or_default();
        match resources.get(&scope, name).await {
            Ok(mut current) => {
                let mut changed = false;
                for (field, value) in wanted.as_object().into_iter().flatten() {
                    if field != "metadata" && current[field] != *value {
                        current[field] = value.clone();
                        changed = true;
                    }
                }
                if changed {
                    resources
                        .update(&scope, name, current, None, &options)
                        .await?;
                }
            }
            Err(ApiError::NotFound { .. }) => {
                match resources.create(&scope, wanted.clone(), &options).await {
                    Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
