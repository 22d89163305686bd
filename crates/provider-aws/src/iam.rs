//! IAM roles a cluster needs (the EKS control plane's, the node groups'), and the OIDC provider
//! of an EKS cluster's issuer (IAM roles for service accounts): used as they are when they
//! exist, created with Cluster API AWS's tags when they do not, and deleted with the cluster
//! only when lariat created them.

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

/// A role name made from `base` and `suffix`, within IAM's 64 characters: a base too long is
/// cut and given a hash of the whole, so two long names never become the same role.
pub fn role_name(base: &str, suffix: &str) -> String {
    let base = base.replace('_', "-");
    let full = format!("{base}{suffix}");
    if full.len() <= 64 {
        return full;
    }
    use sha2::{Digest, Sha256};
    let hash = Sha256::digest(full.as_bytes());
    let hash: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let mut cut = base;
    cut.truncate(64 - suffix.len() - 9);
    format!("{cut}-{hash}{suffix}")
}

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
            let tags: Vec<(&str, &str)> =
                found.tags().iter().map(|t| (t.key(), t.value())).collect();
            if owner.owns(tags.iter().copied()) {
                attach(iam, role).await?;
            } else if let Some(other) = owner.owned_by_another(tags.iter().copied()) {
                // Another cluster's role: sharing it would tie the two clusters together, and
                // that cluster deletes it with itself.
                return Err(AwsError {
                    code: "RoleOwnedByAnotherCluster".into(),
                    message: format!(
                        "IAM role {} was made by lariat for cluster {other}: name another role in spec.roleName",
                        role.name
                    ),
                });
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
        .set_tags(Some(iam_tags(owner, role.name)?))
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

/// The audience EKS's service-account tokens are presented to STS with.
const STS_AUDIENCE: &str = "sts.amazonaws.com";

/// The ARN of the IAM OIDC provider of `issuer` (`https://oidc.eks.<region>.amazonaws.com/id/X`):
/// one that already exists (made by eksctl, say) is used; otherwise it is created with the
/// cluster's tags. No thumbprint is sent: IAM finds it itself and, for EKS's issuers, trusts
/// its own CA library, so lariat never connects to the issuer.
pub async fn ensure_oidc_provider(
    iam: &Client,
    owner: &Owner,
    eks_cluster: &str,
    issuer: &str,
) -> Result<String, AwsError> {
    let wanted = issuer.trim_start_matches("https://").trim_end_matches('/');
    let listed = iam.list_open_id_connect_providers().send().await.aws()?;
    if let Some(found) = listed
        .open_id_connect_provider_list()
        .iter()
        .filter_map(|p| p.arn())
        .find(|arn| arn.ends_with(&format!(":oidc-provider/{wanted}")))
    {
        return Ok(found.to_owned());
    }
    let created = iam
        .create_open_id_connect_provider()
        .url(issuer)
        .client_id_list(STS_AUDIENCE)
        .set_tags(Some(iam_tags(owner, eks_cluster)?))
        .send()
        .await
        .aws()?;
    // One made by an attempt whose answer was lost is listed above: IAM refuses a second
    // provider of the same issuer (`EntityAlreadyExists`), so none is ever duplicated.
    created
        .open_id_connect_provider_arn
        .ok_or_else(|| AwsError::missing("OIDC provider ARN"))
}

/// The cluster's tags for an IAM resource named `name`.
fn iam_tags(owner: &Owner, name: &str) -> Result<Vec<Tag>, AwsError> {
    owner
        .tags(name, "common")
        .into_iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AwsError {
            code: "InvalidTag".into(),
            message: e.to_string(),
        })
}

/// Deletes the OIDC providers lariat made for this cluster (their tags say so).
pub async fn delete_oidc_providers(iam: &Client, owner: &Owner) -> Result<(), AwsError> {
    let listed = iam.list_open_id_connect_providers().send().await.aws()?;
    for arn in listed
        .open_id_connect_provider_list()
        .iter()
        .filter_map(|p| p.arn())
    {
        let found = match iam
            .get_open_id_connect_provider()
            .open_id_connect_provider_arn(arn)
            .send()
            .await
            .aws()
        {
            Ok(found) => found,
            Err(error) if error.is_not_found() => continue,
            Err(error) => return Err(error),
        };
        if !owner.owns(found.tags().iter().map(|t| (t.key(), t.value()))) {
            continue;
        }
        match iam
            .delete_open_id_connect_provider()
            .open_id_connect_provider_arn(arn)
            .send()
            .await
            .aws()
        {
            Err(error) if !error.is_not_found() => return Err(error),
            _ => {}
        }
    }
    Ok(())
}

/// Cluster API AWS's trust policy for roles of service accounts, as `status.oidcProvider`
/// shows it: the placeholders `${SERVICE_ACCOUNT_NAMESPACE}` and `${SERVICE_ACCOUNT_NAME}` are
/// for the user to fill in.
pub fn oidc_trust_policy(provider_arn: &str) -> String {
    let issuer = provider_arn
        .split_once('/')
        .map(|(_, issuer)| issuer)
        .unwrap_or_default();
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "",
            "Effect": "Allow",
            "Principal": {"Federated": [provider_arn]},
            "Action": ["sts:AssumeRoleWithWebIdentity"],
            "Condition": {"ForAnyValue:StringLike": {
                format!("{issuer}:sub"): ["system:serviceaccount:${SERVICE_ACCOUNT_NAMESPACE}:${SERVICE_ACCOUNT_NAME}"],
            }},
        }],
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_trust_policy_names_the_issuer_s_subject() {
        let policy: serde_json::Value = serde_json::from_str(&super::oidc_trust_policy(
            "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC",
        ))
        .unwrap();
        let statement = &policy["Statement"][0];
        assert_eq!(
            statement["Principal"]["Federated"][0],
            "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
        );
        assert_eq!(
            statement["Condition"]["ForAnyValue:StringLike"]["oidc.eks.us-east-1.amazonaws.com/id/ABC:sub"]
                [0],
            "system:serviceaccount:${SERVICE_ACCOUNT_NAMESPACE}:${SERVICE_ACCOUNT_NAME}"
        );
    }

    #[test]
    fn long_role_names_stay_apart() {
        assert_eq!(
            super::role_name("default_prod", "-iam-service-role"),
            "default-prod-iam-service-role"
        );
        let a = super::role_name(
            &format!("default_{}0123", "x".repeat(50)),
            "-iam-service-role",
        );
        let b = super::role_name(
            &format!("default_{}9999", "x".repeat(50)),
            "-iam-service-role",
        );
        assert!(a.len() <= 64 && b.len() <= 64, "{a} {b}");
        assert_ne!(a, b);
        assert!(a.ends_with("-iam-service-role"));
    }
}
