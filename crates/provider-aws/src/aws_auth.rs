//! Lets a self-managed pool's instances join their EKS cluster: the role of their instance
//! profile is mapped to `system:bootstrappers` and `system:nodes` in the cluster's
//! `kube-system/aws-auth` ConfigMap, as Cluster API AWS's IAM authenticator step does. (EKS
//! maps the roles of its managed node groups itself.) The ConfigMap is written through the
//! cluster's own API with `<cluster>-kubeconfig`, with plain Kubernetes calls.
//!
//! The control plane's `iamAuthenticatorConfig` (`mapRoles`, `mapUsers`) is written there too.
//! Unlike Cluster API AWS, which only adds, lariat remembers on the ConfigMap which entries it
//! wrote (annotation [`MANAGED`]), so an entry the spec drops is removed, and entries others
//! wrote are never touched.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::identity::Session;
use crate::sdk::AwsResult;

const NAMESPACE: &str = "kube-system";
const NAME: &str = "aws-auth";
/// The longest a workload cluster may take to answer.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Annotation on aws-auth: the ARNs of the `iamAuthenticatorConfig` entries lariat wrote.
pub const MANAGED: &str = "lariat.dev/iam-authenticator-mappings";

/// `list` (aws-auth's YAML `mapRoles` or `mapUsers`) with the `wanted` entries (each keyed by
/// its `key`, `rolearn` or `userarn`) in place, and the entries of `managed` (lariat's from an
/// earlier spec) that are no longer wanted gone; `None` when nothing changes.
pub fn with_mappings(
    list: Option<&str>,
    key: &str,
    wanted: &[Value],
    managed: &[String],
) -> Result<Option<String>, String> {
    let entries: Vec<Value> = match list.filter(|m| !m.trim().is_empty()) {
        Some(text) => serde_yaml_ng::from_str(text)
            .map_err(|e| format!("{NAMESPACE}/{NAME} is not a YAML list: {e}"))?,
        None => Vec::new(),
    };
    let arn = |entry: &Value| entry[key].as_str().unwrap_or_default().to_owned();
    let wanted_arns: Vec<String> = wanted.iter().map(arn).collect();
    let mut next: Vec<Value> = entries
        .iter()
        .filter(|e| !managed.contains(&arn(e)) || wanted_arns.contains(&arn(e)))
        .cloned()
        .collect();
    for want in wanted {
        match next.iter_mut().find(|e| arn(e) == arn(want)) {
            Some(entry) => *entry = want.clone(),
            None => next.push(want.clone()),
        }
    }
    if next == entries {
        return Ok(None);
    }
    serde_yaml_ng::to_string(&next)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Writes `roles` and `users` (`iamAuthenticatorConfig`'s entries) into the cluster's
/// aws-auth, removing those lariat wrote before that are no longer there.
pub async fn ensure_mappings(
    workload: &kube::Client,
    roles: &[Value],
    users: &[Value],
) -> Result<(), String> {
    let api: Api<ConfigMap> = Api::namespaced(workload.clone(), NAMESPACE);
    let existing = tokio::time::timeout(TIMEOUT, api.get_opt(NAME))
        .await
        .map_err(|_| format!("the cluster did not answer within {} s", TIMEOUT.as_secs()))?
        .map_err(|e| format!("cannot read {NAMESPACE}/{NAME}: {e}"))?;
    let managed: Vec<String> = existing
        .as_ref()
        .and_then(|c| c.metadata.annotations.as_ref())
        .and_then(|a| a.get(MANAGED))
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let data = existing.as_ref().and_then(|c| c.data.as_ref());
    let current = |field: &str| data.and_then(|d| d.get(field)).map(String::as_str);
    let map_roles = with_mappings(current("mapRoles"), "rolearn", roles, &managed)?;
    let map_users = with_mappings(current("mapUsers"), "userarn", users, &managed)?;
    let now_managed: Vec<String> = roles
        .iter()
        .map(|r| &r["rolearn"])
        .chain(users.iter().map(|u| &u["userarn"]))
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    if map_roles.is_none() && map_users.is_none() && managed == now_managed {
        return Ok(());
    }
    let mut config = existing.clone().unwrap_or_else(|| ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some(NAME.into()),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    });
    let data = config.data.get_or_insert_with(Default::default);
    for (field, list) in [("mapRoles", map_roles), ("mapUsers", map_users)] {
        if let Some(list) = list {
            data.insert(field.into(), list);
        }
    }
    config
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(MANAGED.into(), now_managed.join(","));
    // Replaced at the version read: a concurrent change is a conflict, tried again later.
    let written = if existing.is_some() {
        tokio::time::timeout(TIMEOUT, api.replace(NAME, &PostParams::default(), &config)).await
    } else {
        tokio::time::timeout(TIMEOUT, api.create(&PostParams::default(), &config)).await
    };
    written
        .map_err(|_| format!("the cluster did not answer within {} s", TIMEOUT.as_secs()))?
        .map(|_| ())
        .map_err(|e| format!("cannot write {NAMESPACE}/{NAME}: {e}"))
}

/// The ARN of the role in `instance_profile`.
pub async fn profile_role(session: &Session, instance_profile: &str) -> Result<String, String> {
    let found = session
        .aws()
        .iam(&session.config)
        .get_instance_profile()
        .instance_profile_name(instance_profile)
        .send()
        .await
        .aws()
        .map_err(|e| format!("instance profile {instance_profile}: {e}"))?;
    found
        .instance_profile()
        .and_then(|p| p.roles().first())
        .map(|r| r.arn().to_owned())
        .ok_or_else(|| format!("instance profile {instance_profile} has no role"))
}

/// `mapRoles` with `role_arn` mapped as a node's, if it was not; `None` when it already is.
pub fn with_node_role(map_roles: Option<&str>, role_arn: &str) -> Result<Option<String>, String> {
    let mut roles: Vec<Value> = match map_roles.filter(|m| !m.trim().is_empty()) {
        Some(text) => serde_yaml_ng::from_str(text)
            .map_err(|e| format!("{NAMESPACE}/{NAME} mapRoles is not a YAML list: {e}"))?,
        None => Vec::new(),
    };
    if roles.iter().any(|r| r["rolearn"] == role_arn) {
        return Ok(None);
    }
    roles.push(json!({
        "rolearn": role_arn,
        "username": "system:node:{{EC2PrivateDNSName}}",
        "groups": ["system:bootstrappers", "system:nodes"],
    }));
    serde_yaml_ng::to_string(&roles)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Maps `role_arn` in the cluster's aws-auth ConfigMap (made if missing). A concurrent
/// writer makes this fail with a conflict, and the next reconcile tries again.
pub async fn ensure_node_role(workload: &kube::Client, role_arn: &str) -> Result<(), String> {
    let api: Api<ConfigMap> = Api::namespaced(workload.clone(), NAMESPACE);
    let within = |what: &'static str| {
        move |_| {
            format!(
                "the cluster did not answer within {} s ({what})",
                TIMEOUT.as_secs()
            )
        }
    };
    let existing = tokio::time::timeout(TIMEOUT, api.get_opt(NAME))
        .await
        .map_err(within("reading aws-auth"))?
        .map_err(|e| format!("cannot read {NAMESPACE}/{NAME}: {e}"))?;
    let current = existing
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get("mapRoles"))
        .map(String::as_str);
    let Some(map_roles) = with_node_role(current, role_arn)? else {
        return Ok(());
    };
    let written = match existing {
        Some(mut config) => {
            config
                .data
                .get_or_insert_with(Default::default)
                .insert("mapRoles".into(), map_roles);
            // Replaced at the version read: a concurrent change is a conflict, not lost.
            tokio::time::timeout(TIMEOUT, api.replace(NAME, &PostParams::default(), &config))
                .await
                .map_err(within("writing aws-auth"))?
        }
        None => {
            let config: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": NAME, "namespace": NAMESPACE},
                "data": {"mapRoles": map_roles},
            }))
            .map_err(|e| e.to_string())?;
            tokio::time::timeout(TIMEOUT, api.create(&PostParams::default(), &config))
                .await
                .map_err(within("creating aws-auth"))?
        }
    };
    written
        .map(|_| ())
        .map_err(|e| format!("cannot write {NAMESPACE}/{NAME}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_follow_the_spec_and_leave_others_alone() {
        let admin = json!({"rolearn": "arn:aws:iam::1:role/admin", "username": "admin", "groups": ["system:masters"]});
        let viewer = json!({"rolearn": "arn:aws:iam::1:role/viewer", "username": "viewer", "groups": ["view"]});
        let theirs = "- rolearn: arn:aws:iam::1:role/theirs\n  username: theirs\n  groups: []\n";
        let added = with_mappings(
            Some(theirs),
            "rolearn",
            &[admin.clone(), viewer.clone()],
            &[],
        )
        .unwrap()
        .unwrap();
        let roles: Vec<Value> = serde_yaml_ng::from_str(&added).unwrap();
        assert_eq!(roles.len(), 3);
        assert_eq!(
            with_mappings(
                Some(&added),
                "rolearn",
                &[admin.clone(), viewer.clone()],
                &[]
            )
            .unwrap(),
            None,
            "nothing to change"
        );
        // viewer dropped from the spec (lariat wrote it): removed; theirs stays.
        let managed = [
            "arn:aws:iam::1:role/admin".to_owned(),
            "arn:aws:iam::1:role/viewer".to_owned(),
        ];
        let mut changed_admin = admin.clone();
        changed_admin["groups"] = json!(["edit"]);
        let next = with_mappings(Some(&added), "rolearn", &[changed_admin.clone()], &managed)
            .unwrap()
            .unwrap();
        let roles: Vec<Value> = serde_yaml_ng::from_str(&next).unwrap();
        assert_eq!(roles.len(), 2);
        assert_eq!(roles[0]["username"], "theirs");
        assert_eq!(roles[1], changed_admin);
        // Someone else's entry is never removed, even if the spec dropped an entry of that ARN
        // lariat did not write.
        assert_eq!(
            with_mappings(Some(theirs), "rolearn", &[], &[]).unwrap(),
            None
        );
    }

    #[test]
    fn a_node_role_is_added_once_and_others_are_kept() {
        let role = "arn:aws:iam::123456789012:role/nodes";
        let added = with_node_role(None, role).unwrap().unwrap();
        let roles: Vec<Value> = serde_yaml_ng::from_str(&added).unwrap();
        assert_eq!(
            roles,
            [
                json!({"rolearn": role, "username": "system:node:{{EC2PrivateDNSName}}",
                    "groups": ["system:bootstrappers", "system:nodes"]})
            ]
        );
        assert_eq!(with_node_role(Some(&added), role).unwrap(), None);
        let admin = "- rolearn: arn:aws:iam::123456789012:role/admin\n  username: admin\n  groups: [system:masters]\n";
        let both = with_node_role(Some(admin), role).unwrap().unwrap();
        let roles: Vec<Value> = serde_yaml_ng::from_str(&both).unwrap();
        assert_eq!(roles.len(), 2);
        assert_eq!(roles[0]["username"], "admin");
        assert!(with_node_role(Some("not: [a list"), role).is_err());
    }
}
