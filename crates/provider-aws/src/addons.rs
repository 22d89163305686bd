//! EKS addons of an AWSManagedControlPlane (`spec.addons`), planned as Cluster API AWS plans
//! them: an addon the spec names and the cluster lacks is created; one whose version,
//! configuration or service-account role differs is updated once it is not busy; one the
//! spec dropped is deleted. Unlike Cluster API AWS, lariat deletes only addons it made (their
//! ownership tags say so): an addon installed with the console or eksctl shows in
//! `status.addons` and is never removed behind its owner's back.
//!
//! Names are the idempotency key: CreateAddon refuses a name the cluster has
//! (`ResourceInUseException`), so an answer lost to a crash never makes a second addon.

use aws_sdk_eks::types::{Addon as EksAddon, AddonStatus, ResolveConflicts};
use lariat_api::aws::managed_control_plane::{Addon, AddonIssue, AddonState};

use crate::sdk::{AwsError, AwsResult};
use crate::tags::Owner;

/// Tag on an addon lariat made: whether deleting it leaves its Kubernetes objects running
/// (`preserveOnDelete`). It is remembered on the addon because, once the addon is dropped
/// from the spec, the spec no longer says.
const PRESERVE_TAG: &str = "lariat.dev/preserve-on-delete";
/// Tag on an addon lariat created or updated: a hash of the version, configuration and role
/// it last asked for. An addon EKS could not create or update at that spec is reported, not
/// asked again at every poll (EKS shows the old spec after a failed update).
const SPEC_TAG: &str = "lariat.dev/addon-spec";

/// Where the addons stand after one pass.
#[derive(Debug, PartialEq)]
pub(crate) enum Progress {
    /// Every addon of the spec is ACTIVE at what the spec asks; none lariat made is left over.
    Configured,
    /// Something is being created, updated or deleted: what.
    Changing(String),
    /// An addon EKS could not create, update or delete, with EKS's health issues: a person
    /// must change the spec (or the cluster).
    Failed(String),
    /// An addon runs but EKS reports health issues (DEGRADED), which may pass.
    Degraded(String),
}

pub(crate) struct Addons {
    /// Every addon the cluster has, as `status.addons` shows it.
    pub states: Vec<AddonState>,
    pub progress: Progress,
}

/// One pass: reads every addon of `eks_cluster`, then creates, updates or deletes what the
/// spec's `wanted` list asks. Only ever called on an ACTIVE cluster that is not upgrading
/// (EKS refuses addon changes meanwhile).
pub(crate) async fn reconcile(
    eks: &aws_sdk_eks::Client,
    owner: &Owner,
    eks_cluster: &str,
    wanted: &[Addon],
) -> Result<Addons, AwsError> {
    let mut installed = vec![];
    let mut pages = eks
        .list_addons()
        .cluster_name(eks_cluster)
        .into_paginator()
        .items()
        .send();
    while let Some(name) = pages.next().await {
        let name = name.aws()?;
        match eks
            .describe_addon()
            .cluster_name(eks_cluster)
            .addon_name(&name)
            .send()
            .await
            .aws()
        {
            Ok(found) => installed.extend(found.addon),
            // Deleted between the list and the read.
            Err(error) if error.is_not_found() => {}
            Err(error) => return Err(error),
        }
    }

    let mut changing = vec![];
    let mut failed = vec![];
    let mut degraded = vec![];
    for addon in wanted {
        let Some(have) = installed
            .iter()
            .find(|a| a.addon_name() == Some(&addon.name))
        else {
            match create(eks, owner, eks_cluster, addon).await {
                Ok(created) => installed.push(created),
                // Made by an attempt whose answer was lost: the next pass reads it.
                Err(error) if error.code == "ResourceInUseException" => {}
                Err(error) => return Err(named(&addon.name, error)),
            }
            changing.push(format!("{} is being created", addon.name));
            continue;
        };
        let status = have.status().cloned().unwrap_or(AddonStatus::Creating);
        if matches!(
            status,
            AddonStatus::Creating | AddonStatus::Updating | AddonStatus::Deleting
        ) {
            changing.push(format!("{} is {}", addon.name, status.as_str()));
            continue;
        }
        let failed_at_this_spec = matches!(
            status,
            AddonStatus::CreateFailed | AddonStatus::UpdateFailed
        ) && tags(have)
            .any(|(k, v)| k == SPEC_TAG && v == spec_hash(addon));
        if differs(addon, have) && !failed_at_this_spec {
            update(eks, eks_cluster, addon)
                .await
                .map_err(|e| named(&addon.name, e))?;
            tag(eks, have, SPEC_TAG, &spec_hash(addon))
                .await
                .map_err(|e| named(&addon.name, e))?;
            changing.push(format!("{} is being updated", addon.name));
            continue;
        }
        let preserve = addon.preserve_on_delete.unwrap_or(false);
        if owner.owns(tags(have)) && preserved(have) != preserve {
            tag(eks, have, PRESERVE_TAG, &preserve.to_string())
                .await
                .map_err(|e| named(&addon.name, e))?;
        }
        if status == AddonStatus::Degraded {
            degraded.push(format!("addon {} is DEGRADED{}", addon.name, issues(have)));
        } else if status != AddonStatus::Active {
            failed.push(format!(
                "addon {} is {}{}",
                addon.name,
                status.as_str(),
                issues(have)
            ));
        }
    }
    for have in &installed {
        let name = have.addon_name().unwrap_or_default();
        if wanted.iter().any(|a| a.name == name) || !owner.owns(tags(have)) {
            continue;
        }
        match have.status() {
            Some(AddonStatus::Deleting) => {}
            Some(AddonStatus::DeleteFailed) => {
                failed.push(format!("addon {name} is DELETE_FAILED{}", issues(have)));
                continue;
            }
            _ => {
                eks.delete_addon()
                    .cluster_name(eks_cluster)
                    .addon_name(name)
                    .preserve(preserved(have))
                    .send()
                    .await
                    .aws()
                    .map_err(|e| named(name, e))?;
            }
        }
        changing.push(format!("{name} is being deleted"));
    }

    let progress = if !failed.is_empty() {
        Progress::Failed(failed.join("; "))
    } else if !changing.is_empty() {
        Progress::Changing(changing.join(", "))
    } else if !degraded.is_empty() {
        Progress::Degraded(degraded.join("; "))
    } else {
        Progress::Configured
    };
    Ok(Addons {
        states: installed.iter().map(state).collect(),
        progress,
    })
}

async fn create(
    eks: &aws_sdk_eks::Client,
    owner: &Owner,
    eks_cluster: &str,
    addon: &Addon,
) -> Result<EksAddon, AwsError> {
    let mut tags = owner.tags(&format!("{eks_cluster}-{}", addon.name), "common");
    tags.insert(
        PRESERVE_TAG.to_owned(),
        addon.preserve_on_delete.unwrap_or(false).to_string(),
    );
    tags.insert(SPEC_TAG.to_owned(), spec_hash(addon));
    eks.create_addon()
        .cluster_name(eks_cluster)
        .addon_name(&addon.name)
        .addon_version(&addon.version)
        .set_service_account_role_arn(addon.service_account_role_arn.clone())
        .set_configuration_values(configuration(addon))
        .resolve_conflicts(resolve_conflicts(addon))
        .set_tags(Some(tags.into_iter().collect()))
        .send()
        .await
        .aws()?
        .addon
        .ok_or_else(|| AwsError::missing("addon"))
}

async fn update(
    eks: &aws_sdk_eks::Client,
    eks_cluster: &str,
    addon: &Addon,
) -> Result<(), AwsError> {
    eks.update_addon()
        .cluster_name(eks_cluster)
        .addon_name(&addon.name)
        .addon_version(&addon.version)
        // An empty role or configuration removes what the addon had, as EKS documents it.
        .service_account_role_arn(addon.service_account_role_arn.clone().unwrap_or_default())
        .configuration_values(configuration(addon).unwrap_or_default())
        .resolve_conflicts(resolve_conflicts(addon))
        .send()
        .await
        .aws()
        .map(|_| ())
}

async fn tag(
    eks: &aws_sdk_eks::Client,
    have: &EksAddon,
    key: &str,
    value: &str,
) -> Result<(), AwsError> {
    eks.tag_resource()
        .resource_arn(have.addon_arn().unwrap_or_default())
        .tags(key, value)
        .send()
        .await
        .aws()
        .map(|_| ())
}

/// Whether what EKS runs differs from what the spec asks.
fn differs(addon: &Addon, have: &EksAddon) -> bool {
    have.addon_version() != Some(addon.version.as_str())
        || have.service_account_role_arn() != addon.service_account_role_arn.as_deref()
        || have.configuration_values().filter(|c| !c.is_empty()) != configuration(addon).as_deref()
}

/// What [`SPEC_TAG`] records of the spec's addon.
fn spec_hash(addon: &Addon) -> String {
    use sha2::{Digest, Sha256};
    let seed = format!(
        "{}\n{}\n{}",
        addon.version,
        addon
            .service_account_role_arn
            .as_deref()
            .unwrap_or_default(),
        configuration(addon).unwrap_or_default()
    );
    Sha256::digest(seed.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Cluster API AWS sends no configuration when the spec's is empty.
fn configuration(addon: &Addon) -> Option<String> {
    addon.configuration.clone().filter(|c| !c.is_empty())
}

/// Cluster API AWS's default is `overwrite`.
fn resolve_conflicts(addon: &Addon) -> ResolveConflicts {
    match addon.conflict_resolution.as_deref() {
        Some("none") => ResolveConflicts::None,
        Some("preserve") => ResolveConflicts::Preserve,
        _ => ResolveConflicts::Overwrite,
    }
}

fn tags(addon: &EksAddon) -> impl Iterator<Item = (&str, &str)> {
    addon
        .tags()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

fn preserved(addon: &EksAddon) -> bool {
    tags(addon).any(|(k, v)| k == PRESERVE_TAG && v == "true")
}

/// `: code: message, ...` of EKS's health issues, or nothing.
fn issues(addon: &EksAddon) -> String {
    let issues: Vec<String> = addon
        .health()
        .map(|h| h.issues())
        .unwrap_or_default()
        .iter()
        .map(|i| {
            format!(
                "{}: {}",
                i.code().map(|c| c.as_str()).unwrap_or("Unknown"),
                i.message().unwrap_or_default()
            )
        })
        .collect();
    if issues.is_empty() {
        String::new()
    } else {
        format!(": {}", issues.join(", "))
    }
}

/// The error, saying which addon it is about.
fn named(addon: &str, error: AwsError) -> AwsError {
    AwsError {
        message: format!("addon {addon}: {}", error.message),
        ..error
    }
}

fn state(addon: &EksAddon) -> AddonState {
    let time = |t: Option<&aws_smithy_types::DateTime>| {
        t.and_then(|t| t.fmt(aws_smithy_types::date_time::Format::DateTime).ok())
    };
    let issues: Vec<AddonIssue> = addon
        .health()
        .map(|h| h.issues())
        .unwrap_or_default()
        .iter()
        .map(|i| AddonIssue {
            code: i.code().map(|c| c.as_str().to_owned()),
            message: i.message().map(str::to_owned),
            resource_ids: Some(i.resource_ids().to_vec()).filter(|r| !r.is_empty()),
        })
        .collect();
    AddonState {
        arn: addon.addon_arn().unwrap_or_default().to_owned(),
        created_at: time(addon.created_at()),
        issues: Some(issues).filter(|i| !i.is_empty()),
        modified_at: time(addon.modified_at()),
        name: addon.addon_name().unwrap_or_default().to_owned(),
        service_account_role_arn: addon.service_account_role_arn().map(str::to_owned),
        status: addon.status().map(|s| s.as_str().to_owned()),
        version: addon.addon_version().unwrap_or_default().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(version: &str, configuration: Option<&str>) -> Addon {
        Addon {
            name: "vpc-cni".into(),
            version: version.into(),
            configuration: configuration.map(str::to_owned),
            ..Addon::default()
        }
    }

    #[test]
    fn an_addon_differs_only_in_what_the_spec_sets() {
        let have = EksAddon::builder()
            .addon_name("vpc-cni")
            .addon_version("v1.19.0-eksbuild.1")
            .configuration_values("")
            .build();
        assert!(!differs(&wanted("v1.19.0-eksbuild.1", None), &have));
        assert!(!differs(&wanted("v1.19.0-eksbuild.1", Some("")), &have));
        assert!(differs(&wanted("v1.19.2-eksbuild.1", None), &have));
        assert!(differs(&wanted("v1.19.0-eksbuild.1", Some("{}")), &have));
        let with_role = Addon {
            service_account_role_arn: Some("arn:aws:iam::1:role/cni".into()),
            ..wanted("v1.19.0-eksbuild.1", None)
        };
        assert!(differs(&with_role, &have));
    }

    #[test]
    fn conflicts_are_overwritten_unless_the_spec_says_otherwise() {
        assert_eq!(
            resolve_conflicts(&wanted("v1", None)),
            ResolveConflicts::Overwrite
        );
        let preserve = Addon {
            conflict_resolution: Some("preserve".into()),
            ..wanted("v1", None)
        };
        assert_eq!(resolve_conflicts(&preserve), ResolveConflicts::Preserve);
    }
}
