//! EKS's updates (a version upgrade) run for minutes and may fail after EKS accepted them:
//! the cluster or node group is ACTIVE again at its old version, and only DescribeUpdate says
//! why. So the update lariat asked for is remembered on the object (annotation
//! `lariat.dev/eks-update`: `<generation>/<update id>`) and followed. A failed one is reported
//! with EKS's errors and asked again once per sync period, not at every poll.
//!
//! [`upgrade`] makes that decision for the control plane and its node groups alike; each
//! caller keeps only what it says of the outcome.

use std::time::{Duration, SystemTime};

use aws_sdk_eks::types::UpdateStatus;
use kube::core::ObjectMeta;

use lariat_controllers::object::{Object, patch};

use crate::sdk::{AwsError, AwsResult};

const ANNOTATION: &str = "lariat.dev/eks-update";

/// Where an upgrade stands after [`upgrade`].
#[derive(Debug, PartialEq)]
pub enum Upgrade {
    /// EKS is upgrading; `record` is the update asked for in this pass, for [`remember`].
    Upgrading { record: Option<String> },
    /// The last update failed (EKS's errors, said for a person); it is asked again once it
    /// is `retry_after` old.
    Failed(String),
}

/// Upgrades `eks_cluster`, or its `nodegroup`, to `version` unless EKS is at it already or
/// the last attempt failed less than `retry_after` ago.
pub async fn upgrade(
    eks: &aws_sdk_eks::Client,
    eks_cluster: &str,
    nodegroup: Option<&str>,
    metadata: &ObjectMeta,
    version: &str,
    retry_after: Duration,
) -> Result<Upgrade, AwsError> {
    let after = match follow(eks, eks_cluster, nodegroup, metadata, version, retry_after).await? {
        Followed::InProgress => return Ok(Upgrade::Upgrading { record: None }),
        Followed::Failed {
            why,
            ask_again: false,
            ..
        } => return Ok(Upgrade::Failed(why)),
        Followed::Failed { id, .. } => Some(id),
        Followed::Nothing => None,
    };
    let token = token(metadata, version, after.as_deref());
    let asked = match nodegroup {
        Some(nodegroup) => eks
            .update_nodegroup_version()
            .cluster_name(eks_cluster)
            .nodegroup_name(nodegroup)
            .version(version)
            .client_request_token(token)
            .send()
            .await
            .aws()
            .map(|answer| answer.update),
        None => eks
            .update_cluster_version()
            .name(eks_cluster)
            .version(version)
            .client_request_token(token)
            .send()
            .await
            .aws()
            .map(|answer| answer.update),
    };
    match asked {
        Ok(update) => Ok(Upgrade::Upgrading {
            record: update.and_then(|u| u.id).map(|id| record(metadata, &id)),
        }),
        // In progress already (a lost answer, or EKS not showing it yet).
        Err(error) if error.code == "ResourceInUseException" => {
            Ok(Upgrade::Upgrading { record: None })
        }
        Err(error) => Err(error),
    }
}

/// Records on the object the update [`upgrade`] asked for, so later passes follow it.
pub async fn remember<K: Object>(
    api: &kube::Api<K>,
    name: &str,
    record: &str,
) -> Result<K, lariat_controllers::Error> {
    patch(
        api,
        name,
        serde_json::json!({"metadata": {"annotations": {ANNOTATION: record}}}),
    )
    .await
}

/// What EKS says of the update asked for at the object's current generation.
#[derive(Debug, PartialEq)]
enum Followed {
    /// None was asked for, or it is over (done or cancelled): one may be asked for.
    Nothing,
    InProgress,
    Failed {
        /// EKS's errors, said for a person.
        why: String,
        /// The failed update, which names the next attempt.
        id: String,
        /// Whether it failed long enough ago to ask again.
        ask_again: bool,
    },
}

/// The annotation's value for update `id` asked for at `metadata`'s generation.
fn record(metadata: &ObjectMeta, id: &str) -> String {
    format!("{}/{id}", metadata.generation.unwrap_or(0))
}

/// The client token of an update to `version` at `metadata`'s generation, after the failed
/// update `after` if any: the same request after a lost answer, a new one for a new attempt.
fn token(metadata: &ObjectMeta, version: &str, after: Option<&str>) -> String {
    use sha2::{Digest, Sha256};
    let seed = format!(
        "{}/{version}/{}/{}",
        metadata.uid.as_deref().unwrap_or_default(),
        metadata.generation.unwrap_or(0),
        after.unwrap_or_default()
    );
    Sha256::digest(seed.as_bytes())
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Looks up the update to `version` recorded for the current generation of `metadata`, of
/// `eks_cluster` or of its `nodegroup`; a failed one may be asked again `retry_after` it was
/// made.
async fn follow(
    eks: &aws_sdk_eks::Client,
    eks_cluster: &str,
    nodegroup: Option<&str>,
    metadata: &ObjectMeta,
    version: &str,
    retry_after: Duration,
) -> Result<Followed, AwsError> {
    let recorded = metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .and_then(|value| value.split_once('/'))
        .filter(|(generation, _)| *generation == metadata.generation.unwrap_or(0).to_string())
        .map(|(_, id)| id.to_owned());
    let Some(id) = recorded else {
        return Ok(Followed::Nothing);
    };
    let described = eks
        .describe_update()
        .name(eks_cluster)
        .set_nodegroup_name(nodegroup.map(str::to_owned))
        .update_id(&id)
        .send()
        .await
        .aws();
    let update = match described {
        Ok(described) => described.update,
        // Gone from EKS's history: nothing to follow. An identity without eks:DescribeUpdate
        // (Cluster API AWS's own policy lacks it) upgrades as before, without following.
        Err(error) if error.is_not_found() || error.code == "AccessDeniedException" => None,
        Err(error) => return Err(error),
    };
    // One asked for another version (the spec moved on since) says nothing of this one.
    let Some(update) = update.filter(|u| {
        u.params().iter().any(|p| {
            p.r#type().is_some_and(|t| t.as_str() == "Version") && p.value() == Some(version)
        })
    }) else {
        return Ok(Followed::Nothing);
    };
    Ok(match update.status() {
        Some(UpdateStatus::InProgress) => Followed::InProgress,
        Some(UpdateStatus::Failed) => {
            let errors: Vec<String> = update
                .errors()
                .iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.error_code().map(|c| c.as_str()).unwrap_or("Unknown"),
                        e.error_message().unwrap_or_default()
                    )
                })
                .collect();
            let made = update
                .created_at()
                .and_then(|t| SystemTime::try_from(*t).ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            Followed::Failed {
                why: format!(
                    "EKS update {id} failed: {}; lariat asks again every {} s",
                    if errors.is_empty() {
                        "EKS gave no reason".to_owned()
                    } else {
                        errors.join(", ")
                    },
                    retry_after.as_secs()
                ),
                ask_again: made + retry_after <= SystemTime::now(),
                id,
            }
        }
        _ => Followed::Nothing,
    })
}
