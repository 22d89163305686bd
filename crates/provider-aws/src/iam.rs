//! IAM roles a cluster needs (the EKS control plane's, the node groups'): used as they are when
//! they exist, created with Cluster API AWS's tags when they do not, and deleted with the
//! cluster only when lariat created them.

use aws_sdk_iam::Client;
use aws_sdk_iam::types::Tag;
use serde_json::json;

use crate::sdk::{AwsError, AwsResult};
use crate::tags::Owner;

/// The managed policy EKS control planes need.
pub const EKS_CLUSTER_POLICY: &str = "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy";
/// The managed policies EKS nodes need.
pub const EKS_NODE_POLICIES: &[&str] = &[
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
];

/// A role AWS `service` (e.g. `eks.amazonaws.com`) assumes.
pub struct RoleSpec<'a> {
    pub name: &'a str,
    pub path: Option<&'a str>,
    pub permissions_boundary: Option<&'a str>,
    pub service: &'a str,
    pub policies: Vec<String>,
}

/// The role's ARN, the role created if it does not exist.
pub async fn ensure_role(
    iam: &Client,
    owner: &Owner,
    role: &RoleSpec<'_>,
) -> Result<String, AwsError> {
    match iam.get_role().role_name(role.name).send().await.aws() {
        Ok(found) => {
            let found = found.role.ok_or_else(|| AwsError::missing("role"))?;
            let owned = owner.owns(found.tags().iter().map(|t| (t.key(), t.value())));
            if owned {
                attach(iam, role).await?;
            }
            return Ok(found.arn);
        }
        Err(error) if error.is_not_found() => {}
        Err(error) => return Err(error),
    }
    let trust = json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": role.service},
            "Action": "sts:AssumeRole",
        }],
    });
    let created = iam
        .create_role()
        .role_name(role.name)
        .set_path(role.path.map(str::to_owned))
        .set_permissions_boundary(role.permissions_boundary.map(str::to_owned))
        .assume_role_policy_document(trust.to_string())
        .set_tags(Some(
            owner
                .tags(role.name, "common")
                .into_iter()
                .map(|(k, v)| Tag::builder().key(k).value(v).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| AwsError {
                    code: "InvalidTag".into(),
                    message: e.to_string(),
                })?,
        ))
        .send()
        .await
        .aws()?
        .role
        .ok_or_else(|| AwsError::missing("role"))?;
    attach(iam, role).await?;
    Ok(created.arn)
}

async fn attach(iam: &Client, role: &RoleSpec<'_>) -> Result<(), AwsError> {
    let attached = iam
        .list_attached_role_policies()
        .role_name(role.name)
        .send()
        .await
        .aws()?;
    for policy in &role.policies {
        if !attached
            .attached_policies()
            .iter()
            .any(|p| p.policy_arn() == Some(policy))
        {
            iam.attach_role_policy()
                .role_name(role.name)
                .policy_arn(policy)
                .send()
                .await
                .aws()?;
        }
    }
    Ok(())
}

/// Deletes the role if lariat created it for this cluster; a role it was given stays.
pub async fn delete_role(iam: &Client, owner: &Owner, name: &str) -> Result<(), AwsError> {
    let found = match iam.get_role().role_name(name).send().await.aws() {
        Ok(found) => found.role.ok_or_else(|| AwsError::missing("role"))?,
        Err(error) if error.is_not_found() => return Ok(()),
        Err(error) => return Err(error),
    };
    if !owner.owns(found.tags().iter().map(|t| (t.key(), t.value()))) {
        return Ok(());
    }
    let attached = iam
        .list_attached_role_policies()
        .role_name(name)
        .send()
        .await
        .aws()?;
    for policy in attached.attached_policies() {
        iam.detach_role_policy()
            .role_name(name)
            .policy_arn(policy.policy_arn().unwrap_or_default())
            .send()
            .await
            .aws()?;
    }
    match iam.delete_role().role_name(name).send().await.aws() {
        Err(error) if !error.is_not_found() => Err(error),
        _ => Ok(()),
    }
}
