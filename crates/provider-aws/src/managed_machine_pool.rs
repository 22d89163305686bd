//! AWSManagedMachinePool: an EKS managed node group behind a MachinePool. The pool's replicas
//! are the group's desired size (`kubectl scale machinepool --replicas=5` is seed 000's
//! "desired capacity 3 to 5"), `spec.scaling` its bounds; the group is created in the control
//! plane's private subnets with its own IAM role, and deleted (then the role) with the pool.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::aws::{AWSManagedControlPlane, AWSManagedMachinePool};
use lariat_api::capi::MachinePool;
use lariat_controllers::Error;
use lariat_controllers::conditions::json as conditions;
use lariat_controllers::events::EventType;
use lariat_controllers::object::{ensure_finalizer, patch_status, remove_finalizer};
use serde_json::json;

use crate::Context;
use crate::iam::{self, RoleSpec};
use crate::identity::Session;
use crate::sdk::{AwsError, AwsResult};
use crate::tags::Owner;
use crate::updates;

pub const FINALIZER: &str = "awsmanagedmachinepools.infrastructure.cluster.x-k8s.io";

pub fn resource() -> ApiResource {
    ApiResource::erase::<AWSManagedMachinePool>(&())
}

/// The MachinePool that owns the object, once core has claimed it.
fn owning_pool(object: &DynamicObject) -> Option<String> {
    lariat_controllers::object::cluster_api_owner(object, "MachinePool")
}

/// Cluster API AWS's name of the node role it creates (IAM allows 64 characters).
fn default_role_name(nodegroup: &str) -> String {
    crate::iam::role_name(nodegroup, "-nodegroup-iam-service-role")
}

/// What a reconcile needs from the pool's owners.
pub(crate) struct Owners {
    /// `None` once the MachinePool is gone (the group is then being deleted).
    pub(crate) pool: Option<Arc<MachinePool>>,
    pub(crate) cluster: String,
    pub(crate) control_plane: AWSManagedControlPlane,
}

/// The pool's MachinePool, and its Cluster's control plane, found through the Cluster's label
/// (core's MachinePool sets it), so a group whose MachinePool is already gone can still be
/// deleted.
pub(crate) async fn owners(ctx: &Context, object: &DynamicObject) -> Result<Option<Owners>, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let pool = match owning_pool(object) {
        Some(name) => {
            ctx.caches
                .typed::<MachinePool>()
                .get(&namespace, &name)
                .await?
        }
        None => None,
    };
    let Some(cluster_name) = object
        .labels()
        .get("cluster.x-k8s.io/cluster-name")
        .cloned()
        .or_else(|| pool.as_ref().map(|p| p.spec.cluster_name.clone()))
    else {
        return Ok(None);
    };
    let crate::EksControlPlane::Found(control_plane) =
        crate::eks_control_plane(ctx, &namespace, &cluster_name).await?
    else {
        return Ok(None);
    };
    Ok(Some(Owners {
        pool,
        cluster: cluster_name,
        control_plane: *control_plane,
    }))
}

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cluster API's paused contract, deletion included (see `object_paused`).
    if lariat_controllers::cluster::object_paused(&ctx.caches, &object.metadata).await? {
        return Ok(lariat_controllers::resync());
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource());
    let machine_pool: AWSManagedMachinePool = DynamicObject::clone(&object)
        .try_parse()
        .map_err(|e| Error::Invalid(format!("AWSManagedMachinePool {namespace}/{name}: {e}")))?;
    let Some(Owners {
        pool,
        cluster,
        control_plane,
    }) = owners(&ctx, &object).await?
    else {
        if object.metadata.deletion_timestamp.is_some() {
            // Never claimed by a cluster: nothing was made in AWS.
            remove_finalizer(&api, &object, FINALIZER).await?;
        }
        return Ok(Action::await_change());
    };
    let mut status_conditions = conditions::existing(&object.data["status"]);
    let (Some(region), Some(eks_cluster)) = (
        control_plane.spec.region.clone(),
        control_plane.spec.eks_cluster_name.clone(),
    ) else {
        // The control plane has not made its EKS cluster yet; its change wakes the pool.
        return Ok(Action::requeue(
            ctx.identities.aws().settings().poll_while_changing,
        ));
    };
    let session = match ctx
        .identities
        .session(
            &namespace,
            &region,
            control_plane.spec.identity_ref.as_ref(),
        )
        .await
    {
        Ok(session) => session,
        Err(error) => {
            return report(
                &ctx,
                &api,
                &object,
                &mut status_conditions,
                error.reason(),
                &error.to_string(),
            )
            .await;
        }
    };
    let owner = Owner {
        namespace: namespace.clone(),
        cluster,
        additional: machine_pool
            .spec
            .additional_tags
            .clone()
            .unwrap_or_default(),
    };
    let nodegroup = machine_pool
        .spec
        .eks_nodegroup_name
        .clone()
        .unwrap_or_else(|| crate::control_plane::eks_name(&namespace, &name));
    let role_name = machine_pool
        .spec
        .role_name
        .clone()
        .unwrap_or_else(|| default_role_name(&nodegroup));
    let eks = session.aws().eks(&session.config);

    if object.metadata.deletion_timestamp.is_some() {
        return match delete(&session, &owner, &eks_cluster, &nodegroup, &role_name).await {
            Ok(true) => Ok(Action::requeue(
                ctx.identities.aws().settings().poll_while_changing,
            )),
            Ok(false) => {
                remove_finalizer(&api, &object, FINALIZER).await?;
                Ok(Action::await_change())
            }
            Err(error) => {
                report(
                    &ctx,
                    &api,
                    &object,
                    &mut status_conditions,
                    "DeletionFailed",
                    &error.to_string(),
                )
                .await
            }
        };
    }
    let Some(pool) = pool else {
        return Ok(Action::await_change());
    };
    if ensure_finalizer(&api, &object, FINALIZER).await? {
        return Ok(Action::await_change());
    }
    if control_plane.status.as_ref().is_none_or(|s| !s.ready) {
        conditions::set(
            &mut status_conditions,
            "EKSNodegroupReady",
            false,
            "WaitingForEKSControlPlane",
            "the EKS control plane is not ready yet",
        );
        if status_conditions != conditions::existing(&object.data["status"]) {
            patch_status(&api, &name, json!({"conditions": status_conditions})).await?;
        }
        return Ok(Action::requeue(
            ctx.identities.aws().settings().poll_while_changing,
        ));
    }

    let desired = pool.spec.replicas.unwrap_or(1);
    let scaling = machine_pool.spec.scaling.clone().unwrap_or_default();
    let (min, max) = (
        scaling.min_size.unwrap_or(desired.min(1)),
        scaling.max_size.unwrap_or(desired.max(1)),
    );
    if desired < min || desired > max {
        let message = format!(
            "MachinePool {} wants {desired} replicas, outside spec.scaling [{min}, {max}]: change the replicas or the scaling bounds",
            pool.name_any()
        );
        return report(
            &ctx,
            &api,
            &object,
            &mut status_conditions,
            "InvalidScaling",
            &message,
        )
        .await;
    }
    let found = match eks
        .describe_nodegroup()
        .cluster_name(&eks_cluster)
        .nodegroup_name(&nodegroup)
        .send()
        .await
        .aws()
    {
        Ok(found) => found.nodegroup,
        Err(error) if error.is_not_found() => None,
        Err(error) => {
            return report(
                &ctx,
                &api,
                &object,
                &mut status_conditions,
                "EKSNodegroupReconciliationFailed",
                &error.to_string(),
            )
            .await;
        }
    };
    let wanted_version = pool
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.version.as_deref())
        .and_then(crate::control_plane::eks_version);
    let group = match found {
        Some(group) => group,
        None => {
            let created = create(
                &session,
                &owner,
                &machine_pool,
                &control_plane,
                &eks_cluster,
                &nodegroup,
                &role_name,
                (min, max, desired),
                wanted_version.clone(),
                object.uid().unwrap_or_default(),
            )
            .await;
            match created {
                Ok(group) => {
                    ctx.events
                        .publish(
                            object.as_ref(),
                            "AWSManagedMachinePool",
                            EventType::Normal,
                            "Creating",
                            &format!("EKS node group {nodegroup} of {desired} nodes requested"),
                        )
                        .await;
                    group
                }
                Err(error) => {
                    return report(
                        &ctx,
                        &api,
                        &object,
                        &mut status_conditions,
                        "EKSNodegroupReconciliationFailed",
                        &error.to_string(),
                    )
                    .await;
                }
            }
        }
    };
    let state = group
        .status()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default();
    let current = group.scaling_config();
    let current_desired = current.and_then(|c| c.desired_size());
    if state == "ACTIVE"
        && (current_desired != Some(desired)
            || current.and_then(|c| c.min_size()) != Some(min)
            || current.and_then(|c| c.max_size()) != Some(max))
    {
        // seed 000: the desired capacity of the group follows the MachinePool.
        let update = eks
            .update_nodegroup_config()
            .cluster_name(&eks_cluster)
            .nodegroup_name(&nodegroup)
            .scaling_config(
                aws_sdk_eks::types::NodegroupScalingConfig::builder()
                    .min_size(min)
                    .max_size(max)
                    .desired_size(desired)
                    .build(),
            )
            .send()
            .await
            .aws();
        if let Err(error) = update {
            return report(
                &ctx,
                &api,
                &object,
                &mut status_conditions,
                "EKSNodegroupUpdateFailed",
                &error.to_string(),
            )
            .await;
        }
        ctx.events
            .publish(
                object.as_ref(),
                "AWSManagedMachinePool",
                EventType::Normal,
                "Scaling",
                &format!(
                    "EKS node group {nodegroup}: desired size {} to {desired}",
                    current_desired.unwrap_or_default()
                ),
            )
            .await;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let step = match (&wanted_version, group.version()) {
        (Some(wanted), Some(running)) if state == "ACTIVE" => {
            crate::control_plane::version_step(running, wanted)
        }
        _ => crate::control_plane::Step::None,
    };
    let upgrade = match &step {
        crate::control_plane::Step::Upgrade { running, .. } => Some(Upgrade {
            from: running.clone(),
            to: wanted_version.clone().unwrap_or_default(),
        }),
        _ => None,
    };
    // The nodes run through an update: ready, as Cluster API AWS says it.
    let ready = matches!(state.as_str(), "ACTIVE" | "UPDATING");
    if let crate::control_plane::Step::Downgrade { running, wanted } = &step {
        // EKS cannot go back; the nodes keep running the version they have.
        let message = format!(
            "MachinePool {} asks for {wanted}, older than the {running} node group {nodegroup} runs: EKS cannot downgrade; set v{running} or later",
            pool.name_any()
        );
        conditions::set(
            &mut status_conditions,
            "EKSNodegroupReady",
            false,
            "DowngradeRefused",
            &message,
        );
        conditions::set(&mut status_conditions, "Ready", true, "", "");
    } else if let Some(upgrade) = upgrade {
        // After the control plane, never before: EKS refuses nodes newer than their
        // control plane, so a pool whose version moved with the cluster's waits for it.
        let control_plane_version = control_plane
            .status
            .as_ref()
            .and_then(|s| s.version.as_deref())
            .and_then(crate::control_plane::eks_version);
        if !at_least(control_plane_version.as_deref(), &upgrade.to) {
            let message = format!(
                "EKS node group {nodegroup} waits for its control plane (at {}) to reach {} before it upgrades from {}",
                control_plane_version
                    .as_deref()
                    .unwrap_or("an unknown version"),
                upgrade.to,
                upgrade.from
            );
            conditions::set(
                &mut status_conditions,
                "EKSNodegroupReady",
                false,
                "WaitingForControlPlaneUpgrade",
                &message,
            );
        } else {
            let retry_after = ctx.identities.aws().settings().sync_period;
            let upgraded = updates::upgrade(
                &eks,
                &eks_cluster,
                Some(&nodegroup),
                &object.metadata,
                &upgrade.to,
                retry_after,
            )
            .await;
            match upgraded {
                Ok(updates::Upgrade::Upgrading { record }) => {
                    if let Some(record) = record {
                        updates::remember(&api, &object.name_any(), &record).await?;
                    }
                }
                Ok(updates::Upgrade::Failed(why)) => {
                    // The nodes still run at the old version: `status.ready` stays true, the
                    // Ready condition says what failed.
                    let message = format!(
                        "EKS node group {nodegroup} stays at {}: {why}",
                        upgrade.from
                    );
                    let failure = crate::Failure::new(
                        "EKSNodegroupReady",
                        "EKSNodegroupUpgradeFailed",
                        message,
                    );
                    let wait = crate::report_failure(
                        &ctx,
                        &api,
                        &object,
                        &mut status_conditions,
                        failure,
                        json!({}),
                    )
                    .await?;
                    return Ok(Action::requeue(wait.min(retry_after)));
                }
                Err(error) => {
                    return report(
                        &ctx,
                        &api,
                        &object,
                        &mut status_conditions,
                        "EKSNodegroupUpgradeFailed",
                        &error.to_string(),
                    )
                    .await;
                }
            }
            let message = format!(
                "EKS node group {nodegroup}: upgrading from {} to {}",
                upgrade.from, upgrade.to
            );
            ctx.events
                .publish(
                    object.as_ref(),
                    "AWSManagedMachinePool",
                    EventType::Normal,
                    "Upgrading",
                    &message,
                )
                .await;
            conditions::set(
                &mut status_conditions,
                "EKSNodegroupReady",
                false,
                "EKSNodegroupUpgrading",
                &message,
            );
        }
        // The nodes still run: the pool stays ready while its group is upgraded.
        conditions::set(&mut status_conditions, "Ready", true, "", "");
    } else if state == "ACTIVE" {
        conditions::set(&mut status_conditions, "EKSNodegroupReady", true, "", "");
        conditions::set(&mut status_conditions, "Ready", true, "", "");
    } else {
        let message = format!("EKS node group {nodegroup} is {state}");
        let reason = match state.as_str() {
            "UPDATING" => "EKSNodegroupUpdating",
            _ => "EKSNodegroupCreating",
        };
        conditions::set(
            &mut status_conditions,
            "EKSNodegroupReady",
            false,
            reason,
            &message,
        );
        // An update keeps the nodes running; only a group being made is not ready.
        conditions::set(
            &mut status_conditions,
            "Ready",
            state == "UPDATING",
            if state == "UPDATING" { "" } else { reason },
            if state == "UPDATING" { "" } else { &message },
        );
    }
    let status = json!({
        "ready": ready,
        // The group's desired size once EKS has it: the instances EKS keeps running.
        "replicas": if ready { current_desired } else { None },
        "conditions": status_conditions,
    });
    if object.data["status"]["ready"] != status["ready"]
        || object.data["status"]["replicas"] != status["replicas"]
        || object.data["status"]["conditions"] != status["conditions"]
    {
        patch_status(&api, &name, status).await?;
    }
    // Nothing to wait for: done, or refused until the spec changes.
    let settled = ready
        && (conditions::is_true(&status_conditions, "EKSNodegroupReady")
            || status_conditions
                .iter()
                .any(|c| c["type"] == "EKSNodegroupReady" && c["reason"] == "DowngradeRefused"));
    Ok(if settled {
        Action::requeue(ctx.identities.aws().settings().sync_period)
    } else {
        Action::requeue(ctx.identities.aws().settings().poll_while_changing)
    })
}

/// A node group's version change.
struct Upgrade {
    from: String,
    to: String,
}

/// Whether EKS version `have` (`1.31`) is at least `want`.
fn at_least(have: Option<&str>, want: &str) -> bool {
    use crate::control_plane::minor_version;
    match (have.and_then(minor_version), minor_version(want)) {
        (Some(have), Some(want)) => have >= want,
        _ => false,
    }
}

#[allow(clippy::too_many_arguments)]
async fn create(
    session: &Session,
    owner: &Owner,
    machine_pool: &AWSManagedMachinePool,
    control_plane: &AWSManagedControlPlane,
    eks_cluster: &str,
    nodegroup: &str,
    role_name: &str,
    (min, max, desired): (i32, i32, i32),
    version: Option<String>,
    uid: String,
) -> Result<aws_sdk_eks::types::Nodegroup, AwsError> {
    use aws_sdk_eks::types::{AmiTypes, CapacityTypes, NodegroupScalingConfig, Taint, TaintEffect};
    let spec = &machine_pool.spec;
    let aws = session.aws();
    let mut policies: Vec<String> = iam::EKS_NODE_POLICIES
        .iter()
        .map(|p| p.to_string())
        .collect();
    policies.extend(spec.role_additional_policies.clone().unwrap_or_default());
    let role_arn = iam::ensure_role(
        &aws.iam(&session.config),
        owner,
        &RoleSpec {
            name: role_name,
            path: spec.role_path.as_deref(),
            permissions_boundary: spec.role_permissions_boundary.as_deref(),
            service: "ec2.amazonaws.com",
            policies,
        },
    )
    .await?;
    let subnets = match &spec.subnet_ids {
        Some(ids) => ids.clone(),
        None => crate::workers::private_subnets(control_plane, spec.availability_zones.as_deref()),
    };
    let taints = spec.taints.as_ref().map(|taints| {
        taints
            .iter()
            .map(|t| {
                Taint::builder()
                    .key(&t.key)
                    .value(&t.value)
                    .effect(match t.effect.as_str() {
                        "no-execute" => TaintEffect::NoExecute,
                        "prefer-no-schedule" => TaintEffect::PreferNoSchedule,
                        _ => TaintEffect::NoSchedule,
                    })
                    .build()
            })
            .collect()
    });
    let created = aws
        .eks(&session.config)
        .create_nodegroup()
        .cluster_name(eks_cluster)
        .nodegroup_name(nodegroup)
        .node_role(role_arn)
        .set_subnets(Some(subnets))
        .scaling_config(
            NodegroupScalingConfig::builder()
                .min_size(min)
                .max_size(max)
                .desired_size(desired)
                .build(),
        )
        .set_instance_types(spec.instance_type.clone().map(|t| vec![t]))
        .set_ami_type(spec.ami_type.as_deref().map(AmiTypes::from))
        .set_version(version)
        .set_release_version(spec.ami_version.clone())
        .set_disk_size(spec.disk_size)
        .set_labels(spec.labels.clone().map(|l| l.into_iter().collect()))
        .set_taints(taints)
        .set_capacity_type(spec.capacity_type.as_deref().map(|c| match c {
            "spot" => CapacityTypes::Spot,
            _ => CapacityTypes::OnDemand,
        }))
        .set_tags(Some(owner.tags(nodegroup, "node").into_iter().collect()))
        .client_request_token(uid)
        .send()
        .await
        .aws();
    match created {
        Ok(created) => created
            .nodegroup
            .ok_or_else(|| AwsError::missing("node group")),
        Err(error) if error.code == "ResourceInUseException" => aws
            .eks(&session.config)
            .describe_nodegroup()
            .cluster_name(eks_cluster)
            .nodegroup_name(nodegroup)
            .send()
            .await
            .aws()?
            .nodegroup
            .ok_or_else(|| AwsError::missing("node group")),
        Err(error) => Err(error),
    }
}

/// Deletes the node group, then its role. `Ok(true)` while the group is going away.
async fn delete(
    session: &Session,
    owner: &Owner,
    eks_cluster: &str,
    nodegroup: &str,
    role_name: &str,
) -> Result<bool, AwsError> {
    let eks = session.aws().eks(&session.config);
    match eks
        .describe_nodegroup()
        .cluster_name(eks_cluster)
        .nodegroup_name(nodegroup)
        .send()
        .await
        .aws()
    {
        Ok(found) => {
            let group = found
                .nodegroup
                .ok_or_else(|| AwsError::missing("node group"))?;
            let tags = group
                .tags()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str()));
            if owner.owns(tags) {
                if group.status().map(|s| s.as_str()) != Some("DELETING") {
                    eks.delete_nodegroup()
                        .cluster_name(eks_cluster)
                        .nodegroup_name(nodegroup)
                        .send()
                        .await
                        .aws()?;
                }
                return Ok(true);
            }
        }
        Err(error) if error.is_not_found() => {}
        Err(error) => return Err(error),
    }
    iam::delete_role(&session.aws().iam(&session.config), owner, role_name).await?;
    Ok(false)
}

async fn report(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &Arc<DynamicObject>,
    status_conditions: &mut Vec<serde_json::Value>,
    reason: &str,
    message: &str,
) -> Result<Action, Error> {
    let failure = crate::Failure::new("EKSNodegroupReady", reason, message);
    let wait = crate::report_failure(
        ctx,
        api,
        object,
        status_conditions,
        failure,
        json!({"ready": false}),
    )
    .await?;
    Ok(Action::requeue(wait))
}
