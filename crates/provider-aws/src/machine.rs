//! AWSMachine: one EC2 instance behind a Machine: a MachineDeployment's worker in an EKS
//! cluster, as Cluster API AWS's `eks` flavour makes them, or a worker or control-plane
//! machine of an AWSCluster (a control-plane instance is registered with the cluster's load
//! balancer, and deregistered before it is terminated). The instance boots with its Machine's
//! bootstrap data (kept for it in Secrets Manager or Parameter Store by `bootstrap_store`,
//! unless the spec says `insecureSkipSecretsManager`), in a private subnet of the Machine's
//! failure domain, in the security groups its cluster gives its role. Its ID is recorded in
//! the spec (`instanceID`, `providerID`); before that it is found by its ownership and Name tags,
//! so a create retried after a crash finds the first instance (and the client token makes a
//! request whose answer was lost the same request). Deleting the AWSMachine terminates it.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{IamInstanceProfileSpecification, InstanceStateName, ResourceType};
use base64::Engine;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::aws::AWSMachine;
use lariat_api::capi::Machine;
use lariat_controllers::Error;
use lariat_controllers::conditions::json as conditions;
use lariat_controllers::events::EventType;
use lariat_controllers::object::{ensure_finalizer, patch, patch_status, remove_finalizer};
use serde_json::{Value, json};

use crate::bootstrap_store::{self, Backend, Entries, Packed};
use crate::identity::Session;
use crate::load_balancer;
use crate::sdk::{AwsError, AwsResult};
use crate::tags::{Owner, filter};
use crate::workers::{ImageLookup, Infrastructure};
use crate::{ClusterInfrastructure, Context, Failure, workers};

pub const FINALIZER: &str = "awsmachine.infrastructure.cluster.x-k8s.io";
/// Cluster API AWS's condition for the instance.
const INSTANCE_READY: &str = "InstanceReady";

pub fn resource() -> ApiResource {
    ApiResource::erase::<AWSMachine>(&())
}

/// The instance as a reconcile needs it.
struct Instance {
    id: String,
    zone: String,
    state: String,
    addresses: Vec<Value>,
    /// Whether its tags say it is this machine's, of this cluster (only such instances are
    /// touched: a `spec.instanceID` set by hand cannot hand over another's).
    owned: bool,
}

/// What EC2 says of a machine's instance.
enum Lookup {
    Found(Instance),
    /// The recorded instance is unknown to EC2: just launched (EC2's reads lag its writes),
    /// or terminated long ago.
    Unknown(String),
    /// None was recorded, and none carries the machine's tags.
    None,
}

impl Instance {
    fn from_ec2(owner: &Owner, name: &str, instance: &aws_sdk_ec2::types::Instance) -> Instance {
        let mut addresses = Vec::new();
        let mut add = |type_: &str, address: Option<&str>| {
            if let Some(address) = address.filter(|a| !a.is_empty()) {
                addresses.push(json!({"type": type_, "address": address}));
            }
        };
        add("InternalIP", instance.private_ip_address());
        add("InternalDNS", instance.private_dns_name());
        add("ExternalIP", instance.public_ip_address());
        add("ExternalDNS", instance.public_dns_name());
        Instance {
            id: instance.instance_id().unwrap_or_default().to_owned(),
            zone: instance
                .placement()
                .and_then(|p| p.availability_zone())
                .unwrap_or_default()
                .to_owned(),
            state: instance
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_owned())
                .unwrap_or_default(),
            addresses,
            owned: owner.owns(crate::tags::pairs(instance.tags()))
                && crate::tags::pairs(instance.tags()).any(|(k, v)| k == "Name" && v == name),
        }
    }

    fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }
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
    let Some(machine) = pass.machine.clone() else {
        // Core claims it for its Machine (that write wakes this).
        return Ok(Action::await_change());
    };
    if ensure_finalizer(&pass.api, &object, FINALIZER).await? {
        return Ok(Action::await_change());
    }
    if let Some(field) = unsupported(&pass.aws_machine) {
        let failure = Failure::new(
            INSTANCE_READY,
            "InvalidSpec",
            format!("spec.{field} is not supported by lariat yet: remove it"),
        );
        return pass.fail(failure).await;
    }
    let instance = match proceed!(pass.find().await?) {
        Some(instance) => instance,
        None => proceed!(pass.launch(&machine).await?),
    };
    pass.observe(&machine, instance).await
}

/// One reconcile of an AWSMachine whose cluster's region and identity are known: its
/// Machine, its cluster's infrastructure, a session in the region, and the status conditions
/// it builds.
struct Pass<'a> {
    ctx: &'a Context,
    object: &'a DynamicObject,
    api: Api<DynamicObject>,
    name: String,
    aws_machine: AWSMachine,
    machine: Option<Arc<Machine>>,
    cluster: String,
    infrastructure: Infrastructure,
    region: String,
    session: Session,
    owner: Owner,
    /// How soon to look again while something changes.
    poll: Duration,
    /// The load balancer a control-plane machine of an AWSCluster sits behind.
    load_balancer: Option<String>,
    conditions: Vec<Value>,
}

impl<'a> Pass<'a> {
    /// Finds what the machine belongs to; ends the reconcile while that is missing or wrong.
    async fn start(
        object: &'a DynamicObject,
        ctx: &'a Context,
    ) -> Result<ControlFlow<Action, Pass<'a>>, Error> {
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &namespace, &resource());
        let aws_machine: AWSMachine = lariat_controllers::object::parse(object)?;
        let machine = match lariat_controllers::object::cluster_api_owner(object, "Machine") {
            Some(owner) => {
                ctx.caches
                    .typed::<Machine>()
                    .get(&namespace, &owner)
                    .await?
            }
            None => None,
        };
        let cluster = object
            .labels()
            .get(lariat_api::capi::labels::CLUSTER_NAME)
            .cloned()
            .or_else(|| machine.as_ref().map(|m| m.spec.cluster_name.clone()));
        let mut status_conditions = conditions::existing(&object.data["status"]);
        let infrastructure = match &cluster {
            Some(cluster) => crate::cluster_infrastructure(ctx, &namespace, cluster).await?,
            None => ClusterInfrastructure::Missing,
        };
        let (cluster, infrastructure) = match (cluster, infrastructure) {
            (Some(cluster), ClusterInfrastructure::Found(infrastructure)) => {
                (cluster, infrastructure)
            }
            (Some(cluster), ClusterInfrastructure::OtherKind(kind)) => {
                if object.metadata.deletion_timestamp.is_some() {
                    // Refused before anything was made.
                    remove_finalizer(&api, object, FINALIZER).await?;
                    return Ok(ControlFlow::Break(Action::await_change()));
                }
                let failure = Failure::new(
                    INSTANCE_READY,
                    "InvalidClusterType",
                    format!(
                        "lariat's AWSMachines run in EKS clusters (AWSManagedControlPlane) and AWSClusters; Cluster {cluster}'s control plane is a {kind}"
                    ),
                );
                let action = report(ctx, &api, object, &mut status_conditions, failure).await?;
                return Ok(ControlFlow::Break(action));
            }
            _ => {
                let action = without_infrastructure(ctx, &api, object, &aws_machine).await?;
                return Ok(ControlFlow::Break(action));
            }
        };
        let poll = ctx.identities.aws().settings().poll_while_changing;
        let Some(region) = infrastructure.region().map(String::from) else {
            return Ok(ControlFlow::Break(Action::requeue(poll)));
        };
        let session = match ctx
            .identities
            .session(&namespace, &region, infrastructure.identity())
            .await
        {
            Ok(session) => session,
            Err(error) => {
                let failure = Failure::new(INSTANCE_READY, error.reason(), error.to_string());
                let action = report(ctx, &api, object, &mut status_conditions, failure).await?;
                return Ok(ControlFlow::Break(action));
            }
        };
        let owner = Owner {
            namespace,
            cluster: cluster.clone(),
            additional: aws_machine.spec.additional_tags.clone().unwrap_or_default(),
        };
        let load_balancer = infrastructure
            .load_balancer()
            .filter(|_| is_control_plane(object, machine.as_deref()));
        Ok(ControlFlow::Continue(Pass {
            ctx,
            object,
            api,
            name,
            aws_machine,
            machine,
            cluster,
            infrastructure,
            region,
            session,
            owner,
            poll,
            load_balancer,
            conditions: status_conditions,
        }))
    }

    /// Reports a failure in the status and Events; the reconcile ends with its retry.
    async fn fail(&mut self, failure: Failure) -> Result<Action, Error> {
        report(
            self.ctx,
            &self.api,
            self.object,
            &mut self.conditions,
            failure,
        )
        .await
    }

    /// Deletes what the machine made: its bootstrap data's entries, its place behind the load
    /// balancer, then the instance; the finalizer goes once the instance is gone.
    async fn delete(&mut self) -> Result<Action, Error> {
        if let Some(entries) = recorded_entries(self.object, &self.aws_machine)
            && let Err(error) = bootstrap_store::delete(&self.session, &entries).await
        {
            let failure = Failure::new(
                INSTANCE_READY,
                &error.code,
                format!("cannot delete the bootstrap data's entries: {error}"),
            );
            return self.fail(failure).await;
        }
        let elb = self.session.aws().elb(&self.session.config);
        let deregistered = match (&self.load_balancer, &self.aws_machine.spec.instance_id) {
            (Some(balancer), Some(instance)) => {
                load_balancer::deregister(&elb, balancer, instance).await
            }
            _ => Ok(()),
        };
        if let Err(error) = deregistered {
            let failure = Failure::new(INSTANCE_READY, &error.code, error.to_string());
            return self.fail(failure).await;
        }
        match terminate(&self.session, &self.owner, &self.aws_machine, &self.name).await {
            Ok(Some(instance)) => {
                if self.object.data["status"]["instanceState"] != instance.state {
                    patch_status(
                        &self.api,
                        &self.name,
                        json!({"instanceState": instance.state, "ready": false}),
                    )
                    .await?;
                }
                Ok(Action::requeue(self.poll))
            }
            Ok(None) => {
                remove_finalizer(&self.api, self.object, FINALIZER).await?;
                Ok(Action::await_change())
            }
            Err(error) => {
                let failure = Failure::new(INSTANCE_READY, &error.code, error.to_string());
                self.fail(failure).await
            }
        }
    }

    /// The machine's instance, if EC2 knows one; ends the reconcile while EC2 cannot say.
    async fn find(&mut self) -> Result<ControlFlow<Action, Option<Instance>>, Error> {
        let lookup = find(&self.session, &self.owner, &self.aws_machine, &self.name).await;
        let failure = match lookup {
            Ok(Lookup::Found(instance)) if !instance.owned => Failure::new(
                INSTANCE_READY,
                "InvalidSpec",
                format!(
                    "spec.instanceID {} is not this AWSMachine's instance (its ownership and Name tags differ): lariat manages only the instances it launched",
                    instance.id
                ),
            ),
            Ok(Lookup::Found(instance)) => return Ok(ControlFlow::Continue(Some(instance))),
            Ok(Lookup::None) => return Ok(ControlFlow::Continue(None)),
            Ok(Lookup::Unknown(id)) => {
                // Not a failure: EC2 may not list an instance for a while after launching
                // it. Looked at again until it does (an instance terminated long ago stays
                // here, as in Cluster API AWS).
                let failure = Failure::transient(
                    INSTANCE_READY,
                    "InstanceNotFound",
                    format!("EC2 does not know instance {id} (yet)"),
                );
                self.report_transient(failure).await?;
                return Ok(ControlFlow::Break(Action::requeue(self.poll)));
            }
            Err(error) => {
                // A read that failed says nothing of the instance: `ready` stays as it was.
                let failure = Failure::transient(INSTANCE_READY, &error.code, error.to_string());
                let wait = self.report_transient(failure).await?;
                return Ok(ControlFlow::Break(Action::requeue(wait)));
            }
        };
        Ok(ControlFlow::Break(self.fail(failure).await?))
    }

    /// Reports a failure that says nothing of the instance (`ready` stays as it was); how
    /// soon to look again.
    async fn report_transient(&mut self, failure: Failure) -> Result<Duration, Error> {
        crate::report_failure(
            self.ctx,
            &self.api,
            self.object,
            &mut self.conditions,
            failure,
            json!({}),
        )
        .await
    }

    /// Launches the instance once the cluster's infrastructure and the Machine's bootstrap
    /// data are there (the condition says which it waits for).
    async fn launch(&mut self, machine: &Machine) -> Result<ControlFlow<Action, Instance>, Error> {
        let waiting = if !self.infrastructure.ready() {
            let (reason, message) = self.infrastructure.waiting();
            Some((reason, message.to_owned()))
        } else if machine.spec.bootstrap.data_secret_name.is_none() {
            Some((
                "WaitingForBootstrapData",
                format!("Machine {} has no bootstrap data yet", machine.name_any()),
            ))
        } else {
            None
        };
        if let Some((reason, message)) = waiting {
            conditions::set(
                &mut self.conditions,
                INSTANCE_READY,
                false,
                reason,
                &message,
            );
            if self.conditions != conditions::existing(&self.object.data["status"]) {
                patch_status(
                    &self.api,
                    &self.name,
                    json!({"conditions": self.conditions}),
                )
                .await?;
            }
            return Ok(ControlFlow::Break(Action::requeue(self.poll)));
        }
        let secret = machine
            .spec
            .bootstrap
            .data_secret_name
            .clone()
            .unwrap_or_default();
        let namespace = &self.owner.namespace;
        let user_data =
            match workers::bootstrap_data(self.ctx, namespace, &self.cluster, &secret).await? {
                Ok(data) => data,
                Err(message) => {
                    let failure = Failure::new(INSTANCE_READY, "WaitingForBootstrapData", message);
                    return Ok(ControlFlow::Break(self.fail(failure).await?));
                }
            };
        let stashed = stash(
            self.ctx,
            &self.session,
            &self.owner,
            &self.api,
            self.object,
            (&self.aws_machine, machine),
            &self.infrastructure,
            &self.region,
            user_data,
        )
        .await?;
        let launched = match stashed {
            Ok(user_data) => {
                create(
                    &self.session,
                    &self.owner,
                    self.object,
                    &self.aws_machine,
                    machine,
                    &self.infrastructure,
                    &user_data,
                )
                .await
            }
            Err(failure) => Err(failure),
        };
        let created = match launched {
            Ok(created) => created,
            Err(failure) => return Ok(ControlFlow::Break(self.fail(failure).await?)),
        };
        self.ctx
            .events
            .publish(
                self.object,
                "AWSMachine",
                EventType::Normal,
                "InstanceCreated",
                &format!(
                    "created EC2 instance {} ({}) in {}",
                    created.id, self.aws_machine.spec.instance_type, created.zone
                ),
            )
            .await;
        Ok(ControlFlow::Continue(created))
    }

    /// Records the instance in the spec and reports what it has become: its state, its
    /// place behind the load balancer, its node role's mapping, in the status.
    async fn observe(&mut self, machine: &Machine, instance: Instance) -> Result<Action, Error> {
        // The instance is recorded in the spec before anything else, as Cluster API AWS does.
        let provider_id = instance.provider_id();
        if self.aws_machine.spec.instance_id.as_deref() != Some(instance.id.as_str())
            || self.aws_machine.spec.provider_id.as_deref() != Some(provider_id.as_str())
        {
            patch(
                &self.api,
                &self.name,
                json!({"spec": {"instanceID": instance.id, "providerID": provider_id}}),
            )
            .await?;
        }
        let (ready, failure) = match instance.state.as_str() {
            "running" => (true, None),
            "pending" => (false, None),
            // Gone while its Machine still wants it: the Machine fails, and a
            // MachineHealthCheck (or a person) replaces it, as in Cluster API AWS.
            "shutting-down" | "terminated" => (
                false,
                Some(format!(
                    "EC2 instance {} is {} while its Machine still exists",
                    instance.id, instance.state
                )),
            ),
            _ => (false, None),
        };
        // Once the Machine has its Node, or the instance is gone, nobody needs the entries.
        if let Some(entries) = recorded_entries(self.object, &self.aws_machine)
            && (failure.is_some() || lariat_controllers::machine::has_node(machine))
        {
            clean_up(self.ctx, &self.session, &self.api, self.object, &entries).await?;
        }
        let attached = self.attach(&instance, ready).await?;
        self.set_conditions(&instance, ready, failure.as_deref(), &attached)
            .await;
        let status = json!({
            "ready": ready,
            "instanceState": instance.state,
            "addresses": instance.addresses,
            "failureReason": failure.as_ref().map(|_| "UpdateError"),
            "failureMessage": failure,
            "conditions": self.conditions,
        });
        if [
            "ready",
            "instanceState",
            "addresses",
            "failureReason",
            "failureMessage",
            "conditions",
        ]
        .iter()
        .any(|k| self.object.data["status"][*k] != status[*k])
        {
            patch_status(&self.api, &self.name, status).await?;
        }
        Ok(if ready && attached.is_ok() || failure.is_some() {
            Action::requeue(self.ctx.identities.aws().settings().sync_period)
        } else if ready {
            Action::requeue(Duration::from_secs(60))
        } else {
            Action::requeue(self.poll)
        })
    }

    /// Lets the node in: its role mapped in aws-auth (EKS lets a node join once its role is
    /// there; kubeadm's token is its ticket), and a running control-plane instance behind
    /// its cluster's load balancer. `Err` says what is missing.
    async fn attach(
        &mut self,
        instance: &Instance,
        ready: bool,
    ) -> Result<Result<(), String>, Error> {
        let mut attached = match &self.infrastructure {
            Infrastructure::Eks(_) => {
                workers::map_node_role(
                    self.ctx,
                    &self.session,
                    &self.api,
                    self.object,
                    &self.cluster,
                    self.aws_machine.spec.iam_instance_profile.as_deref(),
                )
                .await?
            }
            Infrastructure::Ec2(_) => Ok(()),
        };
        let Some(balancer) = self.load_balancer.clone().filter(|_| ready) else {
            return Ok(attached);
        };
        let elb = self.session.aws().elb(&self.session.config);
        match load_balancer::register(&elb, &balancer, &instance.id).await {
            Ok(registered) => {
                conditions::set(&mut self.conditions, "ELBAttached", true, "", "");
                if registered {
                    self.ctx
                        .events
                        .publish(
                            self.object,
                            "AWSMachine",
                            EventType::Normal,
                            "SuccessfulAttachControlPlaneELB",
                            &format!(
                                "control-plane instance {} registered with load balancer {balancer}",
                                instance.id
                            ),
                        )
                        .await;
                }
            }
            Err(error) => {
                let message = format!(
                    "cannot register instance {} with load balancer {balancer}: {error}",
                    instance.id
                );
                conditions::set(
                    &mut self.conditions,
                    "ELBAttached",
                    false,
                    &error.code,
                    &message,
                );
                attached = Err(message);
            }
        }
        Ok(attached)
    }

    /// `InstanceReady` and `Ready` from the instance's state, its `failure` (gone while its
    /// Machine wants it) and what [`Pass::attach`] found.
    async fn set_conditions(
        &mut self,
        instance: &Instance,
        ready: bool,
        failure: Option<&str>,
        attached: &Result<(), String>,
    ) {
        match (failure, ready, attached) {
            (Some(message), ..) => {
                // Cluster API AWS's severity and Event: a person (or a MachineHealthCheck)
                // must replace the machine.
                crate::mark_failed(
                    &mut self.conditions,
                    &Failure::new(INSTANCE_READY, "InstanceTerminated", message),
                );
                self.ctx
                    .events
                    .publish_once(
                        self.object,
                        "AWSMachine",
                        EventType::Warning,
                        "InstanceUnexpectedTermination",
                        message,
                    )
                    .await;
            }
            (None, true, Ok(())) => {
                conditions::set(&mut self.conditions, INSTANCE_READY, true, "", "");
                conditions::set(&mut self.conditions, "Ready", true, "", "");
            }
            (None, true, Err(message)) => {
                conditions::set(&mut self.conditions, INSTANCE_READY, true, "", "");
                let reason = if self.load_balancer.is_some() {
                    "ELBAttachFailed"
                } else {
                    "NodeRoleMappingFailed"
                };
                conditions::set(&mut self.conditions, "Ready", false, reason, message);
            }
            (None, false, _) => {
                let message = format!("EC2 instance {} is {}", instance.id, instance.state);
                let reason = match instance.state.as_str() {
                    "pending" => "InstancePending",
                    _ => "InstanceNotRunning",
                };
                conditions::set(
                    &mut self.conditions,
                    INSTANCE_READY,
                    false,
                    reason,
                    &message,
                );
                conditions::set(&mut self.conditions, "Ready", false, reason, &message);
            }
        }
    }
}

/// An AWSMachine whose Cluster or cluster infrastructure is not (or no longer) there: made
/// before them, it waits; being deleted, it goes if it never launched, and otherwise says why
/// its instance cannot be terminated (the region and credentials to reach it went first).
async fn without_infrastructure(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    aws_machine: &AWSMachine,
) -> Result<Action, Error> {
    if object.metadata.deletion_timestamp.is_none() {
        // Made before its Cluster or control plane (neither is watched here).
        return Ok(Action::requeue(
            ctx.identities.aws().settings().poll_while_changing,
        ));
    }
    let Some(instance) = aws_machine.spec.instance_id.as_deref() else {
        // Never launched: nothing to terminate.
        remove_finalizer(api, object, FINALIZER).await?;
        return Ok(Action::await_change());
    };
    let failure = Failure::new(
        INSTANCE_READY,
        "ControlPlaneGone",
        format!(
            "cannot terminate EC2 instance {instance}: the Cluster's AWSManagedControlPlane or AWSCluster (its region and identity) is gone; terminate the instance, then remove the finalizer {FINALIZER}"
        ),
    );
    let mut status_conditions = conditions::existing(&object.data["status"]);
    report(ctx, api, object, &mut status_conditions, failure).await
}

/// The entries the spec records (`spec.cloudInit`), if lariat made them for this machine.
fn recorded_entries(object: &DynamicObject, machine: &AWSMachine) -> Option<Entries> {
    Entries::recorded(machine.spec.cloud_init.as_ref(), &object.uid()?)
}

/// The user data the instance boots with: the bootstrap data itself, or (unless the spec
/// says `insecureSkipSecretsManager`) the script that fetches it from the entries written
/// here, recorded in the spec first.
#[allow(clippy::too_many_arguments)]
async fn stash(
    ctx: &Context,
    session: &Session,
    owner: &Owner,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    (aws_machine, machine): (&AWSMachine, &Machine),
    infrastructure: &Infrastructure,
    region: &str,
    data: Vec<u8>,
) -> Result<Result<Vec<u8>, Failure>, Error> {
    let Some(backend) = Backend::of(aws_machine.spec.cloud_init.as_ref()) else {
        return Ok(Ok(data));
    };
    let invalid = |message: String| Ok(Err(Failure::new(INSTANCE_READY, "InvalidSpec", message)));
    let bootstrap_kind = machine
        .spec
        .bootstrap
        .config_ref
        .as_ref()
        .and_then(|r| r.kind.as_deref());
    if bootstrap_kind == Some("NodeadmConfig") {
        // nodeadm reads its NodeConfig from the instance's user data itself, not through
        // cloud-init.
        return invalid(
            "a NodeadmConfig's data must be the instance's user data, where nodeadm reads it: set spec.cloudInit.insecureSkipSecretsManager: true, as Cluster API AWS's EKS templates do".into(),
        );
    }
    let uid = object
        .uid()
        .ok_or_else(|| Error::Invalid(format!("AWSMachine {} has no uid", object.name_any())))?;
    let packed = Packed::new(backend, &data);
    if packed.chunks.len() > bootstrap_store::MAX_ENTRIES {
        return invalid(format!(
            "the bootstrap data ({} bytes) would take {} entries of {}, more than {}",
            data.len(),
            packed.chunks.len(),
            backend.service(),
            bootstrap_store::MAX_ENTRIES
        ));
    }
    let entries = packed.entries(backend, &uid);
    let recorded = recorded_entries(object, aws_machine);
    if recorded.as_ref() != Some(&entries) {
        // Entries of other data (the bootstrap Secret changed before the instance was
        // launched) go first.
        if let Some(recorded) = recorded
            && let Err(error) = bootstrap_store::delete(session, &recorded).await
        {
            return Ok(Err(Failure::new(
                INSTANCE_READY,
                &error.code,
                error.to_string(),
            )));
        }
        patch(
            api,
            &object.name_any(),
            json!({"spec": {"cloudInit": {
                "secretPrefix": entries.prefix,
                "secretCount": entries.count,
            }}}),
        )
        .await?;
    }
    let name = object.name_any();
    let tags = infrastructure.instance_tags(owner, &name, is_control_plane(object, Some(machine)));
    if let Err(error) = bootstrap_store::store(session, &entries, &packed, &tags).await {
        let message = format!(
            "cannot keep the bootstrap data in {}: {error}",
            backend.service()
        );
        ctx.events
            .publish_once(
                object,
                "AWSMachine",
                EventType::Warning,
                "FailedCreateAWSSecrets",
                &message,
            )
            .await;
        return Ok(Err(Failure::new(INSTANCE_READY, &error.code, message)));
    }
    Ok(Ok(entries.user_data(region).into_bytes()))
}

/// Deletes the entries the instance left and forgets them; a failure is retried at the next
/// pass, and does not make the machine any less ready.
async fn clean_up(
    ctx: &Context,
    session: &Session,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    entries: &Entries,
) -> Result<(), Error> {
    let service = entries.backend.service();
    match bootstrap_store::delete(session, entries).await {
        Ok(()) => {
            patch(
                api,
                &object.name_any(),
                json!({"spec": {"cloudInit": {"secretPrefix": null, "secretCount": null}}}),
            )
            .await?;
            ctx.events
                .publish_once(
                    object,
                    "AWSMachine",
                    EventType::Normal,
                    "SuccessfulDeleteEncryptedBootstrapDataSecrets",
                    &format!("the bootstrap data's entries in {service} are deleted"),
                )
                .await;
        }
        Err(error) => {
            ctx.events
                .publish_once(
                    object,
                    "AWSMachine",
                    EventType::Warning,
                    "FailedDeleteEncryptedBootstrapDataSecrets",
                    &format!("cannot delete the bootstrap data's entries in {service}: {error}"),
                )
                .await;
        }
    }
    Ok(())
}

/// The first field of the spec that lariat would otherwise drop, if any: refused by name.
fn unsupported(machine: &AWSMachine) -> Option<&'static str> {
    let spec = &machine.spec;
    [
        (
            "additionalSecurityGroups (by filter)",
            spec.additional_security_groups
                .iter()
                .flatten()
                .any(|g| g.id.is_none()),
        ),
        (
            "subnet (by filter)",
            spec.subnet.as_ref().is_some_and(|s| s.id.is_none()),
        ),
        ("ignition", spec.ignition.is_some()),
        ("rootVolume", spec.root_volume.is_some()),
        (
            "nonRootVolumes",
            spec.non_root_volumes
                .as_ref()
                .is_some_and(|v| !v.is_empty()),
        ),
        ("publicIP", spec.public_ip == Some(true)),
        (
            "securityGroupOverrides",
            spec.security_group_overrides.is_some(),
        ),
        ("spotMarketOptions", spec.spot_market_options.is_some()),
        (
            "marketType",
            spec.market_type.as_deref().is_some_and(|m| m != "OnDemand"),
        ),
        (
            "capacityReservationId",
            spec.capacity_reservation_id.is_some(),
        ),
        (
            "capacityReservationPreference",
            spec.capacity_reservation_preference.is_some(),
        ),
        ("cpuOptions", spec.cpu_options.is_some()),
        (
            "dynamicHostAllocation",
            spec.dynamic_host_allocation.is_some(),
        ),
        ("elasticIpPool", spec.elastic_ip_pool.is_some()),
        (
            "hostAffinity",
            spec.host_affinity
                .as_deref()
                .is_some_and(|h| h != "default"),
        ),
        ("hostID", spec.host_id.is_some()),
        ("networkInterfaces", spec.network_interfaces.is_some()),
        (
            "networkInterfaceType",
            spec.network_interface_type.is_some(),
        ),
        ("placementGroupName", spec.placement_group_name.is_some()),
        (
            "placementGroupPartition",
            spec.placement_group_partition.is_some(),
        ),
        ("privateDnsName", spec.private_dns_name.is_some()),
        (
            "tenancy",
            spec.tenancy.as_deref().is_some_and(|t| t != "default"),
        ),
        (
            "assignPrimaryIPv6",
            spec.assign_primary_i_pv6.as_deref() == Some("enabled"),
        ),
    ]
    .into_iter()
    .find(|(_, set)| *set)
    .map(|(field, _)| field)
}

/// The machine's instance: the one its spec records, else one tagged with its name by an
/// earlier attempt whose answer was never recorded. A recorded instance that AWS no longer
/// knows is reported terminated.
async fn find(
    session: &Session,
    owner: &Owner,
    machine: &AWSMachine,
    name: &str,
) -> Result<Lookup, AwsError> {
    let ec2 = session.aws().ec2(&session.config);
    if let Some(id) = &machine.spec.instance_id {
        let found = match ec2.describe_instances().instance_ids(id).send().await.aws() {
            Ok(found) => found,
            Err(error) if error.is_not_found() => return Ok(Lookup::Unknown(id.clone())),
            Err(error) => return Err(error),
        };
        return Ok(found
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .next()
            .map_or_else(
                || Lookup::Unknown(id.clone()),
                |i| Lookup::Found(Instance::from_ec2(owner, name, i)),
            ));
    }
    find_by_tags(session, owner, name).await
}

/// The machine's instance by its tags: one an earlier attempt launched but never recorded.
async fn find_by_tags(session: &Session, owner: &Owner, name: &str) -> Result<Lookup, AwsError> {
    // Any role: a worker's and a control-plane machine's instances are found alike.
    let mut filters = owner.ec2_filters();
    filters.push(filter("tag:Name", name));
    filters.push(
        aws_sdk_ec2::types::Filter::builder()
            .name("instance-state-name")
            .set_values(Some(
                ["pending", "running", "stopping", "stopped", "shutting-down"]
                    .map(str::to_owned)
                    .to_vec(),
            ))
            .build(),
    );
    let found = session
        .aws()
        .ec2(&session.config)
        .describe_instances()
        .set_filters(Some(filters))
        .send()
        .await
        .aws()?;
    Ok(found
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .next()
        .map_or(Lookup::None, |i| {
            Lookup::Found(Instance::from_ec2(owner, name, i))
        }))
}

/// Whether the machine is one of its cluster's control plane (Cluster API's label, on it or
/// its Machine).
fn is_control_plane(object: &DynamicObject, machine: Option<&Machine>) -> bool {
    let label = lariat_api::capi::labels::MACHINE_CONTROL_PLANE;
    object.labels().contains_key(label) || machine.is_some_and(|m| m.labels().contains_key(label))
}

/// Launches the machine's instance.
async fn create(
    session: &Session,
    owner: &Owner,
    object: &DynamicObject,
    aws_machine: &AWSMachine,
    machine: &Machine,
    infrastructure: &Infrastructure,
    user_data: &[u8],
) -> Result<Instance, Failure> {
    let spec = &aws_machine.spec;
    let control_plane_machine = is_control_plane(object, Some(machine));
    let failed = |reason: &str, message: String| Failure::new(INSTANCE_READY, reason, message);
    // As Cluster API AWS picks it: the AMI named; else, for an EKS cluster whose machine and
    // cluster set no image lookup, the EKS-optimized one; else image-builder's.
    let lookup = ImageLookup {
        format: spec.image_lookup_format.clone(),
        org: spec.image_lookup_org.clone(),
        base_os: spec.image_lookup_base_os.clone(),
    }
    .or(infrastructure.image_lookup());
    let image_id = match (spec.ami.as_ref().and_then(|a| a.id.clone()), infrastructure) {
        (Some(id), _) => Ok(id),
        (None, Infrastructure::Eks(control_plane)) if !lookup.is_set() => {
            let version = workers::version(machine.spec.version.as_deref(), control_plane);
            workers::ami(
                session,
                spec.ami.as_ref(),
                version.as_deref(),
                Some(&spec.instance_type),
                "spec.ami",
            )
            .await
        }
        (None, _) => {
            workers::image_builder_ami(
                session,
                &lookup,
                machine.spec.version.as_deref(),
                &spec.instance_type,
            )
            .await
        }
    }
    .map_err(|message| failed("InstanceProvisionFailed", message))?;
    let zone = machine.spec.failure_domain.as_deref();
    let subnet = match spec.subnet.as_ref().and_then(|s| s.id.clone()) {
        Some(id) => id,
        None => {
            let zones = zone.map(|z| vec![z.to_owned()]);
            infrastructure
                .private_subnets(zones.as_deref())
                .into_iter()
                .next()
                .ok_or_else(|| {
                    failed(
                        "InstanceProvisionFailed",
                        match zone {
                            Some(zone) => format!(
                                "the cluster has no private subnet in failure domain {zone}: set the Machine's failureDomain to a zone of the cluster, or spec.subnet.id"
                            ),
                            None => "the cluster's network has no private subnet yet".into(),
                        },
                    )
                })?
        }
    };
    // EC2 takes 16 KiB of user data, before base64.
    if user_data.len() > 16 * 1024 {
        return Err(failed(
            "InvalidSpec",
            format!(
                "the user data would be {} bytes, and EC2 takes at most 16384: keep the bootstrap data in Secrets Manager (drop spec.cloudInit.insecureSkipSecretsManager)",
                user_data.len()
            ),
        ));
    }
    let name = object.name_any();
    let tags = infrastructure
        .instance_tags(owner, &name, control_plane_machine)
        .into_iter()
        .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
        .collect();
    let launched = session
        .aws()
        .ec2(&session.config)
        .run_instances()
        .image_id(image_id)
        .instance_type(spec.instance_type.as_str().into())
        .min_count(1)
        .max_count(1)
        .subnet_id(subnet)
        .set_security_group_ids(Some(infrastructure.security_groups(
            control_plane_machine,
            spec.additional_security_groups.iter().flatten(),
        )))
        .set_iam_instance_profile(
            spec.iam_instance_profile
                .as_ref()
                .map(|p| IamInstanceProfileSpecification::builder().name(p).build()),
        )
        .set_key_name(
            spec.ssh_key_name
                .as_deref()
                .or(infrastructure.ssh_key_name())
                .filter(|k| !k.is_empty())
                .map(str::to_owned),
        )
        // Cluster API AWS writes its defaults here on every AWSMachine it has seen.
        .set_metadata_options(spec.instance_metadata_options.as_ref().map(|o| {
            use aws_sdk_ec2::types::*;
            InstanceMetadataOptionsRequest::builder()
                .set_http_endpoint(o.http_endpoint.as_deref().map(Into::into))
                .set_http_protocol_ipv6(o.http_protocol_ipv6.as_deref().map(Into::into))
                .set_http_put_response_hop_limit(
                    o.http_put_response_hop_limit
                        .and_then(|l| i32::try_from(l).ok()),
                )
                .set_http_tokens(o.http_tokens.as_deref().map(Into::into))
                .set_instance_metadata_tags(o.instance_metadata_tags.as_deref().map(Into::into))
                .build()
        }))
        .user_data(base64::engine::general_purpose::STANDARD.encode(user_data))
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .set_tags(Some(tags))
                .build(),
        )
        // One instance per AWSMachine, however often the request is retried.
        .client_token(object.uid().unwrap_or_default())
        .send()
        .await
        .aws()
        .map_err(|e| failed(&e.code, format!("cannot launch the instance: {e}")))?;
    launched
        .instances()
        .first()
        .map(|i| Instance::from_ec2(owner, &object.name_any(), i))
        .ok_or_else(|| failed("InvalidResponse", AwsError::missing("instance").to_string()))
}

/// Terminates the machine's instance: `Some` while it is going away, `None` once it is gone.
async fn terminate(
    session: &Session,
    owner: &Owner,
    machine: &AWSMachine,
    name: &str,
) -> Result<Option<Instance>, AwsError> {
    // Only this machine's instance is terminated: the recorded one if it is, else the one
    // its tags name (a record set by hand, or lost).
    let instance = match find(session, owner, machine, name).await? {
        Lookup::Found(instance) if instance.owned => Some(instance),
        _ => match find_by_tags(session, owner, name).await? {
            Lookup::Found(instance) => Some(instance),
            _ => None,
        },
    };
    let Some(instance) = instance.filter(|i| i.state != InstanceStateName::Terminated.as_str())
    else {
        return Ok(None);
    };
    if instance.state != InstanceStateName::ShuttingDown.as_str() {
        session
            .aws()
            .ec2(&session.config)
            .terminate_instances()
            .instance_ids(&instance.id)
            .send()
            .await
            .aws()?;
    }
    Ok(Some(instance))
}

async fn report(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    status_conditions: &mut Vec<Value>,
    failure: Failure,
) -> Result<Action, Error> {
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
