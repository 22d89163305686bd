//! AWSManagedMachinePool: an EKS managed node group behind a MachinePool. The pool's replicas
//! are the group's desired size (`kubectl scale machinepool --replicas=5` is seed 000's
//! "desired capacity 3 to 5"), `spec.scaling` its bounds; the group is created in the control
//! plane's private subnets with its own IAM role, and deleted (then the role) with the pool.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_eks::types::Nodegroup;

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

/// Goes on with a step's value, or ends the reconcile with the action it chose.
macro_rules! proceed {
    ($step:expr) => {
        match $step {
            ControlFlow::Continue(value) => value,
            ControlFlow::Break(action) => return Ok(action),
        }
    };
}

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cluster API's paused contract, deletion included (see `object_paused`).
    if lariat_controllers::cluster::object_paused(&ctx.caches, &object.metadata).await? {
        return Ok(lariat_controllers::resync());
    }
    let mut pass = proceed!(Pass::start(&object, &ctx).await?);
    if object.metadata.deletion_timestamp.is_some() {
        return pass.delete().await;
    }
    let Some(pool) = pass.pool.clone() else {
        return Ok(Action::await_change());
    };
    if ensure_finalizer(&pass.api, &object, FINALIZER).await? {
        return Ok(Action::await_change());
    }
    proceed!(pass.wait_for_control_plane().await?);
    let scaling = proceed!(pass.scaling(&pool).await?);
    let group = proceed!(pass.group(&pool, scaling).await?);
    proceed!(pass.scale(&group, scaling).await?);
    pass.converge(&pool, &group).await
}

/// The size a node group keeps: `(min, max, desired)`.
type Scaling = (i32, i32, i32);

/// One reconcile of an AWSManagedMachinePool whose EKS cluster exists: its owners, a session
/// in the cluster's region, its node group's names, and the status conditions it builds.
struct Pass<'a> {
    ctx: &'a Context,
    object: &'a Arc<DynamicObject>,
    api: Api<DynamicObject>,
    name: String,
    machine_pool: AWSManagedMachinePool,
    pool: Option<Arc<MachinePool>>,
    control_plane: AWSManagedControlPlane,
    eks_cluster: String,
    session: Session,
    owner: Owner,
    nodegroup: String,
    role_name: String,
    conditions: Vec<serde_json::Value>,
}

impl<'a> Pass<'a> {
    /// Finds the pool's owners and EKS cluster; ends the reconcile while they are missing.
    async fn start(
        object: &'a Arc<DynamicObject>,
        ctx: &'a Context,
    ) -> Result<ControlFlow<Action, Pass<'a>>, Error> {
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &namespace, &resource());
        let machine_pool: AWSManagedMachinePool = lariat_controllers::object::parse(object)?;
        let Some(Owners {
            pool,
            cluster,
            control_plane,
        }) = owners(ctx, object).await?
        else {
            if object.metadata.deletion_timestamp.is_some() {
                // Never claimed by a cluster: nothing was made in AWS.
                remove_finalizer(&api, object, FINALIZER).await?;
            }
            return Ok(ControlFlow::Break(Action::await_change()));
        };
        let mut status_conditions = conditions::existing(&object.data["status"]);
        let (Some(region), Some(eks_cluster)) = (
            control_plane.spec.region.clone(),
            control_plane.spec.eks_cluster_name.clone(),
        ) else {
            // The control plane has not made its EKS cluster yet; its change wakes the pool.
            let poll = ctx.identities.aws().settings().poll_while_changing;
            return Ok(ControlFlow::Break(Action::requeue(poll)));
        };
        let identity = control_plane.spec.identity_ref.as_ref();
        let session = match ctx.identities.session(&namespace, &region, identity).await {
            Ok(session) => session,
            Err(error) => {
                let (reason, message) = (error.reason(), error.to_string());
                let action =
                    report(ctx, &api, object, &mut status_conditions, reason, &message).await?;
                return Ok(ControlFlow::Break(action));
            }
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
        let owner = Owner {
            namespace,
            cluster,
            additional: machine_pool
                .spec
                .additional_tags
                .clone()
                .unwrap_or_default(),
        };
        Ok(ControlFlow::Continue(Pass {
            ctx,
            object,
            api,
            name,
            machine_pool,
            pool,
            control_plane,
            eks_cluster,
            session,
            owner,
            nodegroup,
            role_name,
            conditions: status_conditions,
        }))
    }

    fn poll(&self) -> Duration {
        self.ctx.identities.aws().settings().poll_while_changing
    }

    /// Reports a failure of the node group; the reconcile ends with its retry.
    async fn fail(&mut self, reason: &str, message: &str) -> Result<Action, Error> {
        report(
            self.ctx,
            &self.api,
            self.object,
            &mut self.conditions,
            reason,
            message,
        )
        .await
    }

    /// Deletes the node group, then its role; the finalizer goes once both are gone.
    async fn delete(&mut self) -> Result<Action, Error> {
        let deleted = delete(
            &self.session,
            &self.owner,
            &self.eks_cluster,
            &self.nodegroup,
            &self.role_name,
        )
        .await;
        match deleted {
            Ok(true) => Ok(Action::requeue(self.poll())),
            Ok(false) => {
                remove_finalizer(&self.api, self.object, FINALIZER).await?;
                Ok(Action::await_change())
            }
            Err(error) => self.fail("DeletionFailed", &error.to_string()).await,
        }
    }

    /// Nodes join a ready control plane only: until then the condition says so.
    async fn wait_for_control_plane(&mut self) -> Result<ControlFlow<Action>, Error> {
        if self.control_plane.status.as_ref().is_some_and(|s| s.ready) {
            return Ok(ControlFlow::Continue(()));
        }
        conditions::set(
            &mut self.conditions,
            "EKSNodegroupReady",
            false,
            "WaitingForEKSControlPlane",
            "the EKS control plane is not ready yet",
        );
        if self.conditions != conditions::existing(&self.object.data["status"]) {
            patch_status(
                &self.api,
                &self.name,
                json!({"conditions": self.conditions}),
            )
            .await?;
        }
        Ok(ControlFlow::Break(Action::requeue(self.poll())))
    }

    /// The size the group keeps: the MachinePool's replicas within `spec.scaling`, refused
    /// outside it.
    async fn scaling(&mut self, pool: &MachinePool) -> Result<ControlFlow<Action, Scaling>, Error> {
        let desired = pool.spec.replicas.unwrap_or(1);
        let scaling = self.machine_pool.spec.scaling.clone().unwrap_or_default();
        let (min, max) = (
            scaling.min_size.unwrap_or(desired.min(1)),
            scaling.max_size.unwrap_or(desired.max(1)),
        );
        if (min..=max).contains(&desired) {
            return Ok(ControlFlow::Continue((min, max, desired)));
        }
        let message = format!(
            "MachinePool {} wants {desired} replicas, outside spec.scaling [{min}, {max}]: change the replicas or the scaling bounds",
            pool.name_any()
        );
        Ok(ControlFlow::Break(
            self.fail("InvalidScaling", &message).await?,
        ))
    }

    /// The version the MachinePool asks its nodes to run, as EKS names it (`1.31`).
    fn wanted_version(pool: &MachinePool) -> Option<String> {
        pool.spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.version.as_deref())
            .and_then(crate::control_plane::eks_version)
    }

    /// The node group as EKS describes it, created when there is none.
    async fn group(
        &mut self,
        pool: &MachinePool,
        scaling: Scaling,
    ) -> Result<ControlFlow<Action, Nodegroup>, Error> {
        let eks = self.session.aws().eks(&self.session.config);
        let found = eks
            .describe_nodegroup()
            .cluster_name(&self.eks_cluster)
            .nodegroup_name(&self.nodegroup)
            .send()
            .await
            .aws();
        let failed = match found {
            Ok(found) if found.nodegroup.is_some() => {
                return Ok(ControlFlow::Continue(found.nodegroup.expect("some")));
            }
            Ok(_) => None,
            Err(error) if error.is_not_found() => None,
            Err(error) => Some(error),
        };
        let created = match failed {
            Some(error) => Err(error),
            None => {
                create(
                    &self.session,
                    &self.owner,
                    &self.machine_pool,
                    &self.control_plane,
                    &self.eks_cluster,
                    &self.nodegroup,
                    &self.role_name,
                    scaling,
                    Self::wanted_version(pool),
                    self.object.uid().unwrap_or_default(),
                )
                .await
            }
        };
        match created {
            Ok(group) => {
                let message = format!(
                    "EKS node group {} of {} nodes requested",
                    self.nodegroup, scaling.2
                );
                self.event("Creating", &message).await;
                Ok(ControlFlow::Continue(group))
            }
            Err(error) => {
                let action = self
                    .fail("EKSNodegroupReconciliationFailed", &error.to_string())
                    .await?;
                Ok(ControlFlow::Break(action))
            }
        }
    }

    async fn event(&self, reason: &str, message: &str) {
        self.ctx
            .events
            .publish(
                self.object.as_ref(),
                "AWSManagedMachinePool",
                EventType::Normal,
                reason,
                message,
            )
            .await;
    }

    /// Seed 000: the desired capacity of an active group follows the MachinePool.
    async fn scale(
        &mut self,
        group: &Nodegroup,
        scaling: Scaling,
    ) -> Result<ControlFlow<Action>, Error> {
        let (min, max, desired) = scaling;
        let current = group.scaling_config();
        let current_desired = current.and_then(|c| c.desired_size());
        let active = group.status().is_some_and(|s| s.as_str() == "ACTIVE");
        if !active
            || current_desired == Some(desired)
                && current.and_then(|c| c.min_size()) == Some(min)
                && current.and_then(|c| c.max_size()) == Some(max)
        {
            return Ok(ControlFlow::Continue(()));
        }
        let update = self
            .session
            .aws()
            .eks(&self.session.config)
            .update_nodegroup_config()
            .cluster_name(&self.eks_cluster)
            .nodegroup_name(&self.nodegroup)
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
            let action = self
                .fail("EKSNodegroupUpdateFailed", &error.to_string())
                .await?;
            return Ok(ControlFlow::Break(action));
        }
        let message = format!(
            "EKS node group {}: desired size {} to {desired}",
            self.nodegroup,
            current_desired.unwrap_or_default()
        );
        self.event("Scaling", &message).await;
        Ok(ControlFlow::Break(Action::requeue(Duration::from_secs(1))))
    }

    /// Brings the group's version to the MachinePool's (after the control plane, never
    /// back), and reports the group's state in the status.
    async fn converge(&mut self, pool: &MachinePool, group: &Nodegroup) -> Result<Action, Error> {
        let state = group
            .status()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default();
        let wanted_version = Self::wanted_version(pool);
        let step = match (&wanted_version, group.version()) {
            (Some(wanted), Some(running)) if state == "ACTIVE" => {
                crate::control_plane::version_step(running, wanted)
            }
            _ => crate::control_plane::Step::None,
        };
        // The nodes run through an update: ready, as Cluster API AWS says it.
        let ready = matches!(state.as_str(), "ACTIVE" | "UPDATING");
        match step {
            crate::control_plane::Step::Downgrade { running, wanted } => {
                // EKS cannot go back; the nodes keep running the version they have.
                let message = format!(
                    "MachinePool {} asks for {wanted}, older than the {running} node group {} runs: EKS cannot downgrade; set v{running} or later",
                    pool.name_any(),
                    self.nodegroup
                );
                conditions::set(
                    &mut self.conditions,
                    "EKSNodegroupReady",
                    false,
                    "DowngradeRefused",
                    &message,
                );
                conditions::set(&mut self.conditions, "Ready", true, "", "");
            }
            crate::control_plane::Step::Upgrade { running, .. } => {
                let upgrade = Upgrade {
                    from: running,
                    to: wanted_version.unwrap_or_default(),
                };
                proceed!(self.upgrade(upgrade).await?);
                // The nodes still run: the pool stays ready while its group is upgraded.
                conditions::set(&mut self.conditions, "Ready", true, "", "");
            }
            _ => self.report_state(&state),
        }
        let status = json!({
            "ready": ready,
            // The group's desired size once EKS has it: the instances EKS keeps running.
            "replicas": if ready { group.scaling_config().and_then(|c| c.desired_size()) } else { None },
            "conditions": self.conditions,
        });
        let stored = &self.object.data["status"];
        if ["ready", "replicas", "conditions"]
            .iter()
            .any(|k| stored[*k] != status[*k])
        {
            patch_status(&self.api, &self.name, status).await?;
        }
        // Nothing to wait for: done, or refused until the spec changes.
        let settled = ready
            && (conditions::is_true(&self.conditions, "EKSNodegroupReady")
                || self.conditions.iter().any(|c| {
                    c["type"] == "EKSNodegroupReady" && c["reason"] == "DowngradeRefused"
                }));
        Ok(Action::requeue(if settled {
            self.ctx.identities.aws().settings().sync_period
        } else {
            self.poll()
        }))
    }

    /// The conditions of a group with no version to change: ready when active, and while
    /// updating (the nodes keep running), not while it is made.
    fn report_state(&mut self, state: &str) {
        if state == "ACTIVE" {
            conditions::set(&mut self.conditions, "EKSNodegroupReady", true, "", "");
            conditions::set(&mut self.conditions, "Ready", true, "", "");
            return;
        }
        let message = format!("EKS node group {} is {state}", self.nodegroup);
        let reason = match state {
            "UPDATING" => "EKSNodegroupUpdating",
            _ => "EKSNodegroupCreating",
        };
        conditions::set(
            &mut self.conditions,
            "EKSNodegroupReady",
            false,
            reason,
            &message,
        );
        let updating = state == "UPDATING";
        conditions::set(
            &mut self.conditions,
            "Ready",
            updating,
            if updating { "" } else { reason },
            if updating { "" } else { &message },
        );
    }

    /// Upgrades the group after its control plane, never before: EKS refuses nodes newer
    /// than their control plane, so a pool whose version moved with the cluster's waits.
    async fn upgrade(&mut self, upgrade: Upgrade) -> Result<ControlFlow<Action>, Error> {
        let nodegroup = self.nodegroup.clone();
        let control_plane_version = self
            .control_plane
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
                &mut self.conditions,
                "EKSNodegroupReady",
                false,
                "WaitingForControlPlaneUpgrade",
                &message,
            );
            return Ok(ControlFlow::Continue(()));
        }
        let retry_after = self.ctx.identities.aws().settings().sync_period;
        let eks = self.session.aws().eks(&self.session.config);
        let upgraded = updates::upgrade(
            &eks,
            &self.eks_cluster,
            Some(&nodegroup),
            &self.object.metadata,
            &upgrade.to,
            retry_after,
        )
        .await;
        match upgraded {
            Ok(updates::Upgrade::Upgrading { record }) => {
                if let Some(record) = record {
                    updates::remember(&self.api, &self.name, &record).await?;
                }
            }
            Ok(updates::Upgrade::Failed(why)) => {
                // The nodes still run at the old version: `status.ready` stays true, the
                // Ready condition says what failed.
                let message = format!(
                    "EKS node group {nodegroup} stays at {}: {why}",
                    upgrade.from
                );
                let failure =
                    crate::Failure::new("EKSNodegroupReady", "EKSNodegroupUpgradeFailed", message);
                let wait = crate::report_failure(
                    self.ctx,
                    &self.api,
                    self.object,
                    &mut self.conditions,
                    failure,
                    json!({}),
                )
                .await?;
                return Ok(ControlFlow::Break(Action::requeue(wait.min(retry_after))));
            }
            Err(error) => {
                let action = self
                    .fail("EKSNodegroupUpgradeFailed", &error.to_string())
                    .await?;
                return Ok(ControlFlow::Break(action));
            }
        }
        let message = format!(
            "EKS node group {nodegroup}: upgrading from {} to {}",
            upgrade.from, upgrade.to
        );
        self.event("Upgrading", &message).await;
        conditions::set(
            &mut self.conditions,
            "EKSNodegroupReady",
            false,
            "EKSNodegroupUpgrading",
            &message,
        );
        Ok(ControlFlow::Continue(()))
    }
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
