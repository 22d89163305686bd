//! What an agent's credential may do on the management API. An agent pulls its cluster's
//! BundleDeployments and reports on them, as Fleet's agent does, with the credential the tunnel
//! issued it (see `credentials.rs`): that credential is the identity `system:lariat:agent:NS:NAME`
//! here, and its scope is fixed by the server, not granted by RBAC, so no binding can widen it:
//!
//! - get, list and watch the BundleDeployments in its cluster's namespace
//!   ([`lariat_api::fleet::cluster_namespace`]), and get, patch and update their status;
//! - get a Content by name, when one of those BundleDeployments names it;
//! - get and watch its Cluster's ClusterAccess (same namespace and name as the Cluster: the
//!   RBAC it keeps downstream for Rancher's bindings), and write its status.
//!
//! Everything else (other namespaces, other kinds, discovery, the cluster proxy, metrics) is
//! refused with 403. A registration token is no identity at all on the API.

use std::time::Duration;

use lariat_apiserver::extension::Handle;
use lariat_apiserver::identity::{Attributes, User};
use lariat_apiserver::resources::ListParams;
use lariat_apiserver::status::{ApiError, ApiResult};
use serde_json::Value;

/// The group of every agent identity.
pub const GROUP: &str = "system:lariat:agents";
const USER_PREFIX: &str = "system:lariat:agent:";
const FLEET_GROUP: &str = lariat_api::fleet::GROUP;
/// The only API paths an agent reaches (with a resource after them); the rest of the
/// authenticated API refuses it before routing (discovery and OpenAPI included: the agent's
/// typed client needs neither).
pub const PATH_PREFIXES: [&str; 2] = [
    "/apis/fleet.cattle.io/v1alpha1/",
    "/apis/management.lariat.dev/v1/",
];

/// Whether `user` may send a request for `path` at all: anyone but an agent may; an agent
/// only below [`PATH_PREFIXES`] (its scope decides the rest).
pub fn may_reach(user: &User, path: &str) -> Result<(), String> {
    let reaches = PATH_PREFIXES.iter().any(|prefix| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty())
    });
    if !is_agent(user) || reaches {
        return Ok(());
    }
    Err(format!(
        "User \"{}\" cannot reach {path}: an agent's credential reaches only its own cluster's BundleDeployments and ClusterAccess",
        user.name
    ))
}

/// The longest an agent's watch lasts before it is made (and authenticated) again.
pub const MAX_WATCH: Duration = Duration::from_secs(300);

/// Whether `user` is an agent identity (well-formed or not).
pub fn is_agent(user: &User) -> bool {
    user.groups.iter().any(|g| g == GROUP)
}

/// The identity of the agent of Cluster `namespace/name`.
pub fn user(cluster: &str) -> User {
    let (namespace, name) = cluster.split_once('/').unwrap_or(("", cluster));
    User {
        name: format!("{USER_PREFIX}{namespace}:{name}"),
        groups: vec![GROUP.to_string()],
    }
}

/// The Cluster (namespace, name) of the agent `user`, if `user` is an agent.
fn cluster_of(user: &User) -> Option<(&str, &str)> {
    if !user.groups.iter().any(|g| g == GROUP) {
        return None;
    }
    user.name.strip_prefix(USER_PREFIX)?.split_once(':')
}

/// The namespace of the BundleDeployments the agent `user` may read, if `user` is an agent.
pub fn bundle_namespace(user: &User) -> Option<String> {
    let (namespace, name) = cluster_of(user)?;
    Some(lariat_api::fleet::cluster_namespace(namespace, name))
}

/// An agent's request decided by its fixed scope; `None` (RBAC decides) for everyone else.
pub fn authorize(user: &User, attributes: &Attributes) -> Option<Result<(), String>> {
    if !is_agent(user) {
        return None;
    }
    Some(decide(user, attributes))
}

fn decide(user: &User, attributes: &Attributes) -> Result<(), String> {
    let Some(own) = bundle_namespace(user) else {
        return Err("a malformed agent identity reaches nothing".into());
    };
    let in_own = attributes.namespace.as_deref() == Some(own.as_str());
    let verb = attributes.verb.as_str();
    if attributes.group == lariat_api::management::GROUP && attributes.resource == "clusteraccesses"
    {
        let (namespace, name) = cluster_of(user).unwrap_or_default();
        let its_own = attributes.namespace.as_deref() == Some(namespace)
            && attributes.name.as_deref() == Some(name);
        let allowed = its_own
            && match attributes.subresource.as_deref() {
                None => matches!(verb, "get" | "list" | "watch"),
                Some("status") => matches!(verb, "get" | "patch" | "update"),
                Some(_) => false,
            };
        return if allowed {
            Ok(())
        } else {
            Err(format!(
                "an agent's credential reaches only its own Cluster's ClusterAccess ({namespace}/{name}), by name"
            ))
        };
    }
    let allowed = attributes.group == FLEET_GROUP
        && match (
            attributes.resource.as_str(),
            attributes.subresource.as_deref(),
        ) {
            ("bundledeployments", None) => in_own && matches!(verb, "get" | "list" | "watch"),
            ("bundledeployments", Some("status")) => {
                in_own && attributes.name.is_some() && matches!(verb, "get" | "patch" | "update")
            }
            // Whether one of its BundleDeployments names it is checked by
            // [`may_read_content`], which reads them.
            ("contents", None) => verb == "get" && attributes.name.is_some(),
            _ => false,
        };
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "an agent's credential reaches only its own cluster's BundleDeployments (namespace {own}), their status and the Contents they name"
        ))
    }
}

/// Whether the agent `user` may read the Content `attributes` name: one of the
/// BundleDeployments of its cluster names it (as `deploymentID` or `stagedDeploymentID`,
/// `<content>:<options>`). A Content no BundleDeployment of its names is refused whether or
/// not it exists, so an agent learns nothing about other clusters' manifests.
pub async fn may_read_content(
    server: &Handle,
    user: &User,
    attributes: &Attributes,
) -> ApiResult<()> {
    let (FLEET_GROUP, "contents", Some(name)) = (
        attributes.group.as_str(),
        attributes.resource.as_str(),
        attributes.name.as_deref(),
    ) else {
        return Ok(());
    };
    let Some(own) = bundle_namespace(user) else {
        return Ok(());
    };
    let resources = server.resources();
    let refused = || ApiError::Forbidden {
        message: format!(
            "contents.fleet.cattle.io \"{name}\" is forbidden: User \"{}\" may read only the Contents its cluster's BundleDeployments name",
            user.name
        ),
    };
    let Some(scope) = resources.scope(FLEET_GROUP, "bundledeployments", Some(&own)) else {
        return Err(refused());
    };
    let deployments = resources.list(&scope, &ListParams::default()).await?.items;
    let names = |bd: &Value| {
        ["deploymentID", "stagedDeploymentID"]
            .into_iter()
            .filter_map(|field| bd["spec"][field].as_str())
            .any(|id| id.split(':').next() == Some(name))
    };
    if deployments.iter().any(names) {
        Ok(())
    } else {
        Err(refused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(
        verb: &str,
        resource: &str,
        subresource: Option<&str>,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: FLEET_GROUP.into(),
            resource: resource.into(),
            subresource: subresource.map(String::from),
            namespace: namespace.map(String::from),
            name: name.map(String::from),
            path: None,
        }
    }

    #[test]
    fn an_agent_reaches_its_own_bundle_deployments_and_nothing_else() {
        let agent = user("fleet-default/prod");
        let own = lariat_api::fleet::cluster_namespace("fleet-default", "prod");
        let other = lariat_api::fleet::cluster_namespace("fleet-default", "dev");
        let ns = Some(own.as_str());
        let allowed = [
            attributes("list", "bundledeployments", None, ns, None),
            attributes("watch", "bundledeployments", None, ns, None),
            attributes("get", "bundledeployments", None, ns, Some("app")),
            attributes(
                "patch",
                "bundledeployments",
                Some("status"),
                ns,
                Some("app"),
            ),
            attributes(
                "update",
                "bundledeployments",
                Some("status"),
                ns,
                Some("app"),
            ),
            attributes("get", "contents", None, None, Some("s-1")),
        ];
        for a in &allowed {
            assert!(decide(&agent, a).is_ok(), "{a:?}");
        }
        let mut refused = vec![
            attributes("list", "bundledeployments", None, Some(&other), None),
            attributes("watch", "bundledeployments", None, None, None),
            attributes("patch", "bundledeployments", None, ns, Some("app")),
            attributes("delete", "bundledeployments", None, ns, Some("app")),
            attributes("create", "bundledeployments", None, ns, None),
            attributes(
                "patch",
                "bundledeployments",
                Some("status"),
                Some(&other),
                Some("app"),
            ),
            attributes("list", "contents", None, None, None),
            attributes("watch", "contents", None, None, None),
            attributes("delete", "contents", None, None, Some("s-1")),
            attributes("get", "bundles", None, Some("fleet-default"), Some("app")),
            attributes("list", "gitrepos", None, Some("fleet-default"), None),
            attributes("list", "clusters", None, Some("fleet-default"), None),
        ];
        let mut secrets = attributes("get", "secrets", None, Some("lariat-system"), Some("x"));
        secrets.group = String::new();
        refused.push(secrets);
        let mut proxy = attributes(
            "get",
            "clusters",
            Some("proxy"),
            Some("fleet-default"),
            Some("prod"),
        );
        proxy.group = "cluster.x-k8s.io".into();
        refused.push(proxy);
        for a in &refused {
            assert!(decide(&agent, a).is_err(), "{a:?}");
        }
        // A user who merely names itself like an agent, outside the group, is not one.
        let lookalike = User {
            name: agent.name.clone(),
            groups: vec![],
        };
        assert!(bundle_namespace(&lookalike).is_none());
        let malformed = User {
            name: "system:lariat:agent:nocolon".into(),
            groups: vec![GROUP.into()],
        };
        assert!(decide(&malformed, &allowed[0]).is_err());
    }

    #[test]
    fn an_agent_reads_its_own_cluster_access_by_name_and_writes_only_its_status() {
        let agent = user("fleet-default/prod");
        let access =
            |verb: &str, subresource: Option<&str>, namespace: &str, name: Option<&str>| {
                let mut a = attributes(verb, "clusteraccesses", subresource, Some(namespace), name);
                a.group = lariat_api::management::GROUP.into();
                a
            };
        let own = Some("prod");
        for allowed in [
            access("get", None, "fleet-default", own),
            // A list or watch of one name (`metadata.name=prod`), as kube-rs's watcher sends.
            access("list", None, "fleet-default", own),
            access("watch", None, "fleet-default", own),
            access("patch", Some("status"), "fleet-default", own),
            access("update", Some("status"), "fleet-default", own),
        ] {
            assert!(decide(&agent, &allowed).is_ok(), "{allowed:?}");
        }
        for refused in [
            // Another cluster's, in the same namespace or in another.
            access("get", None, "fleet-default", Some("dev")),
            access("watch", None, "fleet-default", Some("dev")),
            access("patch", Some("status"), "fleet-default", Some("dev")),
            access("get", None, "team-b", own),
            // All of them, unnamed.
            access("list", None, "fleet-default", None),
            access("watch", None, "fleet-default", None),
            // Its spec is lariat's to write, not the agent's.
            access("update", None, "fleet-default", own),
            access("patch", None, "fleet-default", own),
            access("delete", None, "fleet-default", own),
            access("create", None, "fleet-default", None),
        ] {
            assert!(decide(&agent, &refused).is_err(), "{refused:?}");
        }
    }
}
