//! AWSMachinePool: self-managed workers of an EKS cluster on an EC2 launch template and an
//! auto-scaling group, as Cluster API AWS makes them. The instances boot with their
//! MachinePool's bootstrap data (an EKSConfig's `bootstrap.sh` script), the group's desired
//! capacity follows the MachinePool's replicas, and its instances are listed in the status
//! and as the pool's provider IDs. Both are named after the AWSMachinePool and found again by
//! name, and owned by their cluster's tags; deleting the pool deletes the group (and so its
//! instances), then the launch template.

use std::sync::Arc;

use aws_sdk_autoscaling::types::{AutoScalingGroup, LaunchTemplateSpecification, Tag as AsgTag};
use aws_sdk_ec2::types::{
    LaunchTemplateIamInstanceProfileSpecificationRequest, RequestLaunchTemplateData, ResourceType,
};
use base64::Engine;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::aws::{AWSMachinePool, AWSManagedControlPlane};
use lariat_api::capi::MachinePool;
use lariat_controllers::Error;
use lariat_controllers::conditions::json as conditions;
use lariat_controllers::events::EventType;
use lariat_controllers::object::{ensure_finalizer, patch, patch_status, remove_finalizer};
use serde_json::{Value, json};

use crate::Context;
use crate::identity::Session;
use crate::managed_machine_pool::{Owners, owners};
use crate::sdk::{AwsError, AwsResult};
use crate::tags::Owner;
use crate::workers::{self, node_tags};

pub const FINALIZER: &str = "awsmachinepool.infrastructure.cluster.x-k8s.io";
/// Annotation: a hash of the launch template data the last version was made from, so a
/// steady reconcile need not read the template back.
const TEMPLATE_HASH: &str = "lariat.dev/launch-template-hash";

pub fn resource() -> ApiResource {
    ApiResource::erase::<AWSMachinePool>(&())
}

/// What the launch template holds.
struct TemplateData {
    /// The EKS cluster the instances join (their `kubernetes.io/cluster/<name>` tag).
    eks_cluster: String,
    image_id: String,
    instance_type: Option<String>,
    instance_profile: Option<String>,
    key_name: Option<String>,
    security_groups: Vec<String>,
    user_data: Vec<u8>,
}

impl TemplateData {
    fn hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let text = json!([
            self.image_id,
            self.instance_type,
            self.instance_profile,
            self.key_name,
            self.security_groups,
        ])
        .to_string();
        Sha256::new()
            .chain_update(text.as_bytes())
            .chain_update(&self.user_data)
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn request(&self, owner: &Owner, name: &str) -> RequestLaunchTemplateData {
        use aws_sdk_ec2::types::LaunchTemplateTagSpecificationRequest;
        let tags = node_tags(owner, name, &self.eks_cluster);
        RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .set_instance_type(self.instance_type.as_deref().map(Into::into))
            .set_iam_instance_profile(self.instance_profile.as_ref().map(|p| {
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(p)
                    .build()
            }))
            .set_key_name(self.key_name.clone())
            .set_security_group_ids(Some(self.security_groups.clone()))
            .user_data(base64::engine::general_purpose::STANDARD.encode(&self.user_data))
            .tag_specifications(
                LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(
                        tags.into_iter()
                            .map(|(k, v)| {
                                aws_sdk_ec2::types::Tag::builder().key(k).value(v).build()
                            })
                            .collect(),
                    ))
                    .build(),
            )
            .build()
    }
}

/// A step's failure: the condition's reason and message.
struct Failed(&'static str, String);

impl From<AwsError> for Failed {
    fn from(error: AwsError) -> Failed {
        Failed("ASGReconciliationFailed", error.to_string())
    }
}

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cluster API's paused contract, deletion included (see `object_paused`).
    if lariat_controllers::cluster::object_paused(&ctx.caches, &object.metadata).await? {
        return Ok(lariat_controllers::resync());
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource());
    let machine_pool: AWSMachinePool = lariat_controllers::object::parse(&object)?;
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
    let Some(region) = control_plane.spec.region.clone() else {
        return Ok(Action::await_change());
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
            let failed = Failed(error.reason(), error.to_string());
            return report(&ctx, &api, &object, &mut status_conditions, failed).await;
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
    let template_name = machine_pool
        .spec
        .aws_launch_template
        .name
        .clone()
        .unwrap_or_else(|| name.clone());

    if object.metadata.deletion_timestamp.is_some() {
        return match delete(&session, &owner, &name, &template_name).await {
            Ok(true) => Ok(Action::requeue(
                ctx.identities.aws().settings().poll_while_changing,
            )),
            Ok(false) => {
                remove_finalizer(&api, &object, FINALIZER).await?;
                Ok(Action::await_change())
            }
            Err(error) => {
                let failed = Failed("DeletionFailed", error.to_string());
                report(&ctx, &api, &object, &mut status_conditions, failed).await
            }
        };
    }
    let Some(pool) = pool else {
        return Ok(Action::await_change());
    };
    if ensure_finalizer(&api, &object, FINALIZER).await? {
        return Ok(Action::await_change());
    }
    let user_data = match bootstrap_data(&ctx, &control_plane, &pool, &owner).await? {
        Ok(user_data) => user_data,
        Err((reason, message)) => {
            conditions::set(&mut status_conditions, "ASGReady", false, reason, &message);
            if status_conditions != conditions::existing(&object.data["status"]) {
                patch_status(&api, &name, json!({"conditions": status_conditions})).await?;
            }
            return Ok(Action::requeue(
                ctx.identities.aws().settings().poll_while_changing,
            ));
        }
    };
    let plan = match plan(&session, &machine_pool, &pool, &control_plane, user_data).await {
        Ok(plan) => plan,
        Err(failed) => return report(&ctx, &api, &object, &mut status_conditions, failed).await,
    };
    let outcome = provision(
        &session,
        &owner,
        &object,
        &name,
        &template_name,
        &plan.data,
        &plan.subnets,
        plan.scaling,
    )
    .await;
    let provisioned = match outcome {
        Ok(provisioned) => provisioned,
        Err(failed) => return report(&ctx, &api, &object, &mut status_conditions, failed).await,
    };
    announce(&ctx, &object, &provisioned, &template_name, plan.desired).await;
    if object.annotations().get(TEMPLATE_HASH) != Some(&plan.data.hash()) {
        patch(
            &api,
            &name,
            json!({"metadata": {"annotations": {TEMPLATE_HASH: plan.data.hash()}}}),
        )
        .await?;
    }
    observe(
        &ctx,
        &session,
        &object,
        &owner,
        &plan,
        provisioned,
        status_conditions,
    )
    .await
}

/// The pool's bootstrap data (user data for its instances); the reason and message to wait
/// with while the EKS control plane is not ready or the data is not there yet.
async fn bootstrap_data(
    ctx: &Context,
    control_plane: &AWSManagedControlPlane,
    pool: &MachinePool,
    owner: &Owner,
) -> Result<Result<Vec<u8>, (&'static str, String)>, Error> {
    if control_plane.status.as_ref().is_none_or(|s| !s.ready) {
        return Ok(Err((
            "WaitingForEKSControlPlane",
            "the EKS control plane is not ready yet".to_owned(),
        )));
    }
    let data_secret = pool
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.bootstrap.data_secret_name.clone());
    let user_data = match &data_secret {
        Some(secret) => {
            workers::bootstrap_data(ctx, &owner.namespace, &owner.cluster, secret).await?
        }
        None => Err(format!(
            "MachinePool {} has no bootstrap data yet",
            pool.name_any()
        )),
    };
    Ok(user_data.map_err(|message| ("WaitingForBootstrapData", message)))
}

/// What the pool's instances boot from and where, and the size its group keeps; refused
/// (with the condition's reason) when the spec asks what lariat cannot do.
async fn plan(
    session: &Session,
    machine_pool: &AWSMachinePool,
    pool: &MachinePool,
    control_plane: &AWSManagedControlPlane,
    user_data: Vec<u8>,
) -> Result<Plan, Failed> {
    let launch_template = &machine_pool.spec.aws_launch_template;
    let version = workers::version(
        pool.spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.version.as_deref()),
        control_plane,
    );
    let image_id = workers::ami(
        session,
        launch_template.ami.as_ref(),
        version.as_deref(),
        launch_template.instance_type.as_deref(),
        "spec.awsLaunchTemplate.ami",
    )
    .await
    .map_err(|message| Failed("LaunchTemplateReconcileFailed", message))?;
    let security_groups = workers::security_groups(
        control_plane,
        launch_template.additional_security_groups.iter().flatten(),
    );
    let data = TemplateData {
        eks_cluster: workers::eks_cluster(control_plane),
        image_id,
        instance_type: launch_template.instance_type.clone(),
        instance_profile: launch_template.iam_instance_profile.clone(),
        key_name: launch_template
            .ssh_key_name
            .clone()
            .filter(|k| !k.is_empty()),
        security_groups,
        user_data,
    };
    let subnets: Vec<String> = match &machine_pool.spec.subnets {
        Some(subnets) => subnets.iter().filter_map(|s| s.id.clone()).collect(),
        None => workers::private_subnets(
            control_plane,
            machine_pool.spec.availability_zones.as_deref(),
        ),
    };
    if let Some(field) = unsupported(machine_pool) {
        return Err(Failed(
            "InvalidSpec",
            format!(
                "spec.{field} is not supported by lariat yet: remove it, or use an AWSManagedMachinePool"
            ),
        ));
    }
    let desired = pool.spec.replicas.unwrap_or(1);
    let externally_scaled = pool
        .annotations()
        .contains_key("cluster.x-k8s.io/replicas-managed-by");
    let (min, max) = (machine_pool.spec.min_size, machine_pool.spec.max_size);
    if !externally_scaled && (desired < min || desired > max) {
        return Err(Failed(
            "InvalidScaling",
            format!(
                "MachinePool {} wants {desired} replicas, outside [minSize {min}, maxSize {max}]: change the replicas or the bounds",
                pool.name_any()
            ),
        ));
    }
    Ok(Plan {
        data,
        subnets,
        desired,
        externally_scaled,
        // An autoscaler that owns the replicas (Cluster API's annotation) is not fought.
        scaling: (min, max, (!externally_scaled).then_some(desired)),
    })
}

/// What `plan` decided for one reconcile.
struct Plan {
    data: TemplateData,
    subnets: Vec<String>,
    desired: i32,
    externally_scaled: bool,
    /// `(min, max, desired)`, desired `None` when an autoscaler owns it.
    scaling: (i32, i32, Option<i32>),
}

/// Events for what provisioning changed: a new launch template version, a new desired
/// capacity.
async fn announce(
    ctx: &Context,
    object: &DynamicObject,
    provisioned: &Provisioned,
    template_name: &str,
    desired: i32,
) {
    let name = object.name_any();
    if provisioned.new_version {
        ctx.events
            .publish(
                object,
                "AWSMachinePool",
                EventType::Normal,
                "LaunchTemplateUpdated",
                &format!(
                    "launch template {template_name} version {}; new instances boot from it",
                    provisioned.template_version
                ),
            )
            .await;
    }
    if let Some(from) = provisioned.scaled_from {
        ctx.events
            .publish(
                object,
                "AWSMachinePool",
                EventType::Normal,
                "Scaling",
                &format!("auto-scaling group {name}: desired capacity {from} to {desired}"),
            )
            .await;
    }
}

/// Records what the group has: its instances in service, the node role mapped, the status
/// and the provider IDs; when to look again.
async fn observe(
    ctx: &Context,
    session: &Session,
    object: &DynamicObject,
    owner: &Owner,
    plan: &Plan,
    provisioned: Provisioned,
    mut status_conditions: Vec<Value>,
) -> Result<Action, Error> {
    let name = object.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &owner.namespace, &resource());
    let in_service = provisioned
        .instances
        .iter()
        .filter(|i| i.state == "InService")
        .count() as i32;
    let role_mapped = workers::map_node_role(
        ctx,
        session,
        &api,
        object,
        &owner.cluster,
        plan.data.instance_profile.as_deref(),
    )
    .await?;
    let (desired, externally_scaled) = (plan.desired, plan.externally_scaled);
    let ready = (externally_scaled || in_service == desired) && role_mapped.is_ok();
    match &role_mapped {
        Ok(()) => conditions::set(&mut status_conditions, "NodeRoleMapped", true, "", ""),
        Err(message) => {
            conditions::set(
                &mut status_conditions,
                "NodeRoleMapped",
                false,
                "NodeRoleMappingFailed",
                message,
            );
            conditions::set(
                &mut status_conditions,
                "Ready",
                false,
                "NodeRoleMappingFailed",
                message,
            );
        }
    }
    conditions::set(&mut status_conditions, "LaunchTemplateReady", true, "", "");
    if ready {
        conditions::set(&mut status_conditions, "ASGReady", true, "", "");
        conditions::set(&mut status_conditions, "Ready", true, "", "");
    } else if role_mapped.is_ok() {
        let message = format!("{in_service} of {desired} instances in service");
        conditions::set(
            &mut status_conditions,
            "ASGReady",
            false,
            "ASGScaling",
            &message,
        );
    }
    let provider_ids: Vec<String> = provisioned
        .instances
        .iter()
        .map(|i| format!("aws:///{}/{}", i.zone, i.id))
        .collect();
    let status = json!({
        // The group exists: the pool is ready to take instances (Cluster API AWS's meaning);
        // the instances that count are those in service.
        "ready": true,
        "replicas": in_service,
        "instances": provisioned.instances.iter().map(|i| json!({"instanceID": i.id})).collect::<Vec<_>>(),
        "launchTemplateID": provisioned.template_id,
        "launchTemplateVersion": provisioned.template_version,
        "conditions": status_conditions,
    });
    if [
        "ready",
        "replicas",
        "instances",
        "launchTemplateID",
        "launchTemplateVersion",
        "conditions",
    ]
    .iter()
    .any(|k| object.data["status"][*k] != status[*k])
    {
        patch_status(&api, &name, status).await?;
    }
    if object.data["spec"]["providerIDList"] != json!(provider_ids) {
        patch(
            &api,
            &name,
            json!({"spec": {"providerIDList": provider_ids}}),
        )
        .await?;
    }
    Ok(if ready {
        Action::requeue(ctx.identities.aws().settings().sync_period)
    } else {
        Action::requeue(ctx.identities.aws().settings().poll_while_changing)
    })
}

/// The first field of the pool that lariat would otherwise drop, if any: refused by name.
fn unsupported(pool: &AWSMachinePool) -> Option<&'static str> {
    let spec = &pool.spec;
    let template = &spec.aws_launch_template;
    [
        (
            "mixedInstancesPolicy",
            spec.mixed_instances_policy.is_some(),
        ),
        (
            "lifecycleHooks",
            spec.lifecycle_hooks.as_ref().is_some_and(|h| !h.is_empty()),
        ),
        ("suspendProcesses", spec.suspend_processes.is_some()),
        ("ignition", spec.ignition.is_some()),
        ("refreshPreferences", spec.refresh_preferences.is_some()),
        ("capacityRebalance", spec.capacity_rebalance.is_some()),
        // Cluster API AWS's webhook writes both at 300 s, which is also what AWS does with
        // neither set: only another value would be ignored.
        (
            "defaultCoolDown",
            !is_aws_default_wait(spec.default_cool_down.as_deref()),
        ),
        (
            "defaultInstanceWarmup",
            !is_aws_default_wait(spec.default_instance_warmup.as_deref()),
        ),
        (
            "availabilityZoneSubnetType",
            spec.availability_zone_subnet_type.is_some(),
        ),
        (
            "awsLaunchTemplate.enclaveOptions",
            template.enclave_options.is_some(),
        ),
        (
            "awsLaunchTemplate.capacityReservationPreference",
            template.capacity_reservation_preference.is_some(),
        ),
        (
            "awsLaunchTemplate.imageLookupOrg",
            template.image_lookup_org.is_some(),
        ),
        (
            "awsLaunchTemplate.imageLookupBaseOS",
            template.image_lookup_base_os.is_some(),
        ),
        (
            "awsLaunchTemplate.rootVolume",
            template.root_volume.is_some(),
        ),
        (
            "awsLaunchTemplate.nonRootVolumes",
            template
                .non_root_volumes
                .as_ref()
                .is_some_and(|v| !v.is_empty()),
        ),
        (
            "awsLaunchTemplate.instanceMetadataOptions",
            template.instance_metadata_options.is_some(),
        ),
        (
            "awsLaunchTemplate.spotMarketOptions",
            template.spot_market_options.is_some(),
        ),
        (
            "awsLaunchTemplate.marketType",
            template.market_type.is_some(),
        ),
        (
            "awsLaunchTemplate.capacityReservationId",
            template.capacity_reservation_id.is_some(),
        ),
        (
            "awsLaunchTemplate.privateDnsName",
            template.private_dns_name.is_some(),
        ),
        (
            "awsLaunchTemplate.imageLookupFormat",
            template.image_lookup_format.is_some(),
        ),
        (
            "awsLaunchTemplate.additionalSecurityGroups (by filter)",
            template
                .additional_security_groups
                .iter()
                .flatten()
                .any(|g| g.id.is_none()),
        ),
        (
            "subnets (by filter)",
            spec.subnets.iter().flatten().any(|s| s.id.is_none()),
        ),
    ]
    .into_iter()
    .find(|(_, set)| *set)
    .map(|(field, _)| field)
}

struct Instance {
    id: String,
    zone: String,
    state: String,
}

struct Provisioned {
    template_id: String,
    template_version: String,
    new_version: bool,
    scaled_from: Option<i32>,
    instances: Vec<Instance>,
}

#[allow(clippy::too_many_arguments)]
async fn provision(
    session: &Session,
    owner: &Owner,
    object: &DynamicObject,
    group_name: &str,
    template_name: &str,
    data: &TemplateData,
    subnets: &[String],
    (min, max, desired): (i32, i32, Option<i32>),
) -> Result<Provisioned, Failed> {
    let (template_id, template_version, new_version) =
        launch_template(session, owner, object, group_name, template_name, data).await?;
    let (group, scaled_from) = auto_scaling_group(
        session,
        owner,
        group_name,
        &template_id,
        data,
        subnets,
        (min, max, desired),
    )
    .await?;
    let instances = group
        .instances()
        .iter()
        .map(|i| Instance {
            id: i.instance_id().unwrap_or_default().to_owned(),
            zone: i.availability_zone().unwrap_or_default().to_owned(),
            state: i
                .lifecycle_state()
                .map(|s| s.as_str())
                .unwrap_or_default()
                .to_owned(),
        })
        .collect();
    Ok(Provisioned {
        template_id,
        template_version: template_version.to_string(),
        new_version,
        scaled_from,
        instances,
    })
}

/// The launch template: found by name, made once (a client token makes a retried create the
/// same request), a new version when what it holds changes. Its id, latest version, and
/// whether this call made that version.
async fn launch_template(
    session: &Session,
    owner: &Owner,
    object: &DynamicObject,
    group_name: &str,
    template_name: &str,
    data: &TemplateData,
) -> Result<(String, i64, bool), Failed> {
    let ec2 = session.aws().ec2(&session.config);
    let uid = object.uid().unwrap_or_default();
    let template_failed = |e: AwsError| Failed("LaunchTemplateReconcileFailed", e.to_string());

    let found = match ec2
        .describe_launch_templates()
        .launch_template_names(template_name)
        .send()
        .await
        .aws()
    {
        Ok(found) => found.launch_templates().first().cloned(),
        Err(error) if error.is_not_found() => None,
        Err(error) => return Err(template_failed(error)),
    };
    let (template_id, mut template_version, mut new_version) = match found {
        Some(template) => {
            let tags = crate::tags::pairs(template.tags());
            if !owner.owns(tags) {
                return Err(Failed(
                    "LaunchTemplateReconcileFailed",
                    format!(
                        "launch template {template_name} exists and belongs to another cluster: name another in spec.awsLaunchTemplate.name"
                    ),
                ));
            }
            (
                template.launch_template_id().unwrap_or_default().to_owned(),
                template.latest_version_number().unwrap_or(1),
                false,
            )
        }
        None => {
            let created = ec2
                .create_launch_template()
                .launch_template_name(template_name)
                .launch_template_data(data.request(owner, group_name))
                .tag_specifications(owner.ec2_tags(
                    ResourceType::LaunchTemplate,
                    template_name,
                    "node",
                ))
                .client_token(format!("{uid}-template"))
                .send()
                .await
                .aws()
                .map_err(template_failed)?;
            let template = created
                .launch_template()
                .ok_or_else(|| template_failed(AwsError::missing("launch template")))?;
            (
                template.launch_template_id().unwrap_or_default().to_owned(),
                template.latest_version_number().unwrap_or(1),
                true,
            )
        }
    };
    let recorded = object.annotations().get(TEMPLATE_HASH);
    if !new_version && recorded.is_some_and(|h| *h != data.hash()) {
        let created = ec2
            .create_launch_template_version()
            .launch_template_id(&template_id)
            .launch_template_data(data.request(owner, group_name))
            // The version it follows too: a configuration that comes back (A, B, A, B) is a
            // new version each time, not the answer to an earlier request.
            .client_token(format!("{uid}-{}-{template_version}", data.hash()))
            .send()
            .await
            .aws()
            .map_err(template_failed)?;
        template_version = created
            .launch_template_version()
            .and_then(|v| v.version_number())
            .unwrap_or(template_version + 1);
        new_version = true;
    }
    Ok((template_id, template_version, new_version))
}

/// The auto-scaling group, on the launch template's latest version, of the size `scaling`
/// asks; the group, and the desired capacity it had when this call changed it.
async fn auto_scaling_group(
    session: &Session,
    owner: &Owner,
    group_name: &str,
    template_id: &str,
    data: &TemplateData,
    subnets: &[String],
    (min, max, desired): (i32, i32, Option<i32>),
) -> Result<(AutoScalingGroup, Option<i32>), Failed> {
    let autoscaling = session.aws().autoscaling(&session.config);
    let group = autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(group_name)
        .send()
        .await
        .aws()?
        .auto_scaling_groups()
        .first()
        .cloned();
    let mut scaled_from = None;
    let group = match group {
        Some(group) => {
            let tags = crate::tags::pairs(group.tags());
            if !owner.owns(tags) {
                return Err(Failed(
                    "ASGReconciliationFailed",
                    format!(
                        "auto-scaling group {group_name} exists and belongs to another cluster"
                    ),
                ));
            }
            let other_template =
                group.launch_template().and_then(|t| t.launch_template_id()) != Some(template_id);
            let other_subnets = {
                let mut have: Vec<&str> = group
                    .vpc_zone_identifier()
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .collect();
                let mut want: Vec<&str> = subnets.iter().map(String::as_str).collect();
                have.sort_unstable();
                want.sort_unstable();
                have != want
            };
            let rescale = desired.is_some_and(|d| group.desired_capacity() != Some(d));
            if rescale
                || group.min_size() != Some(min)
                || group.max_size() != Some(max)
                || other_template
                || other_subnets
            {
                autoscaling
                    .update_auto_scaling_group()
                    .auto_scaling_group_name(group_name)
                    .min_size(min)
                    .max_size(max)
                    .set_desired_capacity(desired)
                    .launch_template(
                        LaunchTemplateSpecification::builder()
                            .launch_template_id(template_id)
                            .version("$Latest")
                            .build(),
                    )
                    .vpc_zone_identifier(subnets.join(","))
                    .send()
                    .await
                    .aws()?;
                if rescale {
                    scaled_from = group.desired_capacity();
                }
            }
            group
        }
        None => {
            let tags = node_tags(owner, group_name, &data.eks_cluster)
                .into_iter()
                .map(|(k, v)| {
                    AsgTag::builder()
                        .key(k)
                        .value(v)
                        .propagate_at_launch(false)
                        .build()
                })
                .collect();
            let created = autoscaling
                .create_auto_scaling_group()
                .auto_scaling_group_name(group_name)
                .launch_template(
                    LaunchTemplateSpecification::builder()
                        .launch_template_id(template_id)
                        .version("$Latest")
                        .build(),
                )
                .min_size(min)
                .max_size(max)
                .desired_capacity(desired.unwrap_or(min))
                .vpc_zone_identifier(subnets.join(","))
                .set_tags(Some(tags))
                .send()
                .await
                .aws();
            match created {
                Ok(_) => {}
                // Made by an earlier attempt whose answer was lost.
                Err(error) if error.code == "AlreadyExists" => {}
                Err(error) => return Err(error.into()),
            }
            autoscaling
                .describe_auto_scaling_groups()
                .auto_scaling_group_names(group_name)
                .send()
                .await
                .aws()?
                .auto_scaling_groups()
                .first()
                .cloned()
                .ok_or_else(|| AwsError::missing("auto-scaling group"))?
        }
    };
    Ok((group, scaled_from))
}

/// Deletes the group (its instances with it), then the launch template. `Ok(true)` while the
/// group is going away.
async fn delete(
    session: &Session,
    owner: &Owner,
    group_name: &str,
    template_name: &str,
) -> Result<bool, AwsError> {
    let aws = session.aws();
    let autoscaling = aws.autoscaling(&session.config);
    let group = autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(group_name)
        .send()
        .await
        .aws()?
        .auto_scaling_groups()
        .first()
        .cloned();
    if let Some(group) = group {
        let tags = crate::tags::pairs(group.tags());
        if owner.owns(tags) {
            if group.status().is_none() {
                autoscaling
                    .delete_auto_scaling_group()
                    .auto_scaling_group_name(group_name)
                    .force_delete(true)
                    .send()
                    .await
                    .aws()?;
            }
            return Ok(true);
        }
    }
    let ec2 = aws.ec2(&session.config);
    let template = match ec2
        .describe_launch_templates()
        .launch_template_names(template_name)
        .send()
        .await
        .aws()
    {
        Ok(found) => found.launch_templates().first().cloned(),
        Err(error) if error.is_not_found() => None,
        Err(error) => return Err(error),
    };
    if let Some(template) = template {
        let tags = crate::tags::pairs(template.tags());
        if owner.owns(tags) {
            ec2.delete_launch_template()
                .set_launch_template_id(template.launch_template_id().map(str::to_owned))
                .send()
                .await
                .aws()?;
        }
    }
    Ok(false)
}

async fn report(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &Arc<DynamicObject>,
    status_conditions: &mut Vec<Value>,
    Failed(reason, message): Failed,
) -> Result<Action, Error> {
    let failure = crate::Failure::new("ASGReady", reason, message);
    let wait =
        crate::report_failure(ctx, api, object, status_conditions, failure, json!({})).await?;
    Ok(Action::requeue(wait))
}

/// Whether a Go duration is unset or the 300 s that AWS's auto-scaling groups default their
/// cool-down and instance warm-up to.
fn is_aws_default_wait(duration: Option<&str>) -> bool {
    duration.is_none_or(|d| {
        lariat_controllers::object::duration(&serde_json::Value::String(d.to_owned()))
            == Some(std::time::Duration::from_secs(300))
    })
}

#[cfg(test)]
mod tests {
    use super::is_aws_default_wait;

    /// What Cluster API AWS's webhook writes into every AWSMachinePool is accepted; another
    /// value, which lariat would not pass on to AWS, is not.
    #[test]
    fn upstreams_defaults_are_accepted() {
        assert!(is_aws_default_wait(None));
        assert!(is_aws_default_wait(Some("5m0s")));
        assert!(is_aws_default_wait(Some("300s")));
        assert!(!is_aws_default_wait(Some("1m")));
        assert!(!is_aws_default_wait(Some("soon")));
    }
}
