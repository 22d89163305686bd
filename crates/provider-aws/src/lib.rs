//! Cluster API AWS's provider, on the AWS SDK for Rust.
//!
//! - `sdk.rs`: how every request reaches AWS (TLS, retries, the endpoint, call counts);
//! - `identity.rs`: whose credentials a cluster's requests carry;
//! - `tags.rs`: who owns an AWS resource, so it is found again and deleted with its cluster;
//! - `network.rs`, `iam.rs`: a cluster's VPC and roles;
//! - `control_plane.rs`: AWSManagedControlPlane, the EKS cluster; `token.rs` its tokens;
//!   `managed_cluster.rs`: AWSManagedCluster, which mirrors it;
//! - `managed_machine_pool.rs`: AWSManagedMachinePool, an EKS managed node group;
//! - `machine_pool.rs`: AWSMachinePool, self-managed workers on an auto-scaling group;
//!   `machine.rs`: AWSMachine, one EC2 instance behind a Machine; both booted with
//!   `bootstrap.rs`'s user data (EKSConfig, NodeadmConfig), sharing `workers.rs` (AMI, tags,
//!   security groups, subnets), their role mapped in the cluster's aws-auth by `aws_auth.rs`;
//! - `moto.rs`: a throwaway moto server for tests and benchmarks.

mod addons;
pub mod admission;
pub mod aws_auth;
pub mod bootstrap;
pub mod bootstrap_store;
pub mod cluster;
pub mod control_plane;
pub mod iam;
pub mod identity;
pub mod load_balancer;
pub mod machine;
pub mod machine_pool;
pub mod managed_cluster;
pub mod managed_machine_pool;
pub mod moto;
pub mod network;
pub mod sdk;
pub mod security_groups;
pub mod tags;
pub mod token;
mod updates;
pub mod workers;

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use lariat_api::aws::{
    AWSClusterControllerIdentity, AWSClusterControllerIdentitySpec, AWSManagedControlPlane,
    AllowedNamespaces, CONTROLLER_IDENTITY_NAME,
};
use lariat_api::capi::Cluster;
use lariat_controllers::Shutdown;
use lariat_controllers::cache::Caches;
use lariat_controllers::external::refers_to;

pub use identity::{Caller, Identities, IdentityError, Session};
pub use sdk::{Aws, AwsError, Settings};

/// Why the provider cannot start: the controller's own credentials are missing or refused.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    NoCredentials(String),
    #[error("the AWS credentials where lariat server runs were refused: {0}")]
    Refused(AwsError),
}

impl StartError {
    pub fn reason(&self) -> &'static str {
        match self {
            StartError::NoCredentials(_) => "CredentialsNotFound",
            StartError::Refused(_) => "CredentialsRefused",
        }
    }
}

/// Checks the controller's own credentials (the SDK's default chain: environment, profile,
/// web identity, container or instance role) with STS, and says whose they are.
pub async fn check_controller_credentials(aws: &Arc<Aws>) -> Result<Caller, StartError> {
    use aws_credential_types::provider::ProvideCredentials;
    let credentials = aws.default_credentials().await;
    if let Err(error) = credentials.provide_credentials().await {
        return Err(StartError::NoCredentials(missing_credentials(&error)));
    }
    let session = Session::new(aws.clone(), aws.config(None, Some(credentials)).await);
    session.caller().await.map_err(StartError::Refused)
}

/// What to set, said precisely: a half-set environment names the variable missing.
fn missing_credentials(error: &aws_credential_types::provider::error::CredentialsError) -> String {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let how = if set("AWS_ACCESS_KEY_ID") && !set("AWS_SECRET_ACCESS_KEY") {
        "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".to_owned()
    } else if set("AWS_SECRET_ACCESS_KEY") && !set("AWS_ACCESS_KEY_ID") {
        "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".to_owned()
    } else if set("AWS_PROFILE") {
        format!(
            "profile {:?} (AWS_PROFILE) gave none: {}",
            std::env::var("AWS_PROFILE").unwrap_or_default(),
            aws_smithy_types::error::display::DisplayErrorContext(error)
        )
    } else {
        "none of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, or an instance role is set".to_owned()
    };
    format!(
        "no AWS credentials where lariat server runs: {how}; set them in lariat server's environment and restart it"
    )
}

/// A Cluster's control plane, as its workers find it.
pub(crate) enum EksControlPlane {
    Found(Box<AWSManagedControlPlane>),
    /// The Cluster or its control plane is not there (yet, or any more).
    Missing,
    /// The Cluster's control plane is of another kind (named).
    OtherKind(String),
}

/// The EKS control plane of Cluster `cluster` in `namespace`.
pub(crate) async fn eks_control_plane(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
) -> Result<EksControlPlane, lariat_controllers::Error> {
    let Some(cluster) = ctx
        .caches
        .typed::<Cluster>()
        .get(namespace, cluster)
        .await?
    else {
        return Ok(EksControlPlane::Missing);
    };
    let Some(reference) = cluster.spec.control_plane_ref.as_ref() else {
        return Ok(EksControlPlane::Missing);
    };
    if reference.kind.as_deref() != Some("AWSManagedControlPlane") {
        return Ok(EksControlPlane::OtherKind(
            reference.kind.clone().unwrap_or_default(),
        ));
    }
    let Some(control_plane) = ctx
        .caches
        .of(&control_plane::resource())
        .get(namespace, reference.name.as_deref().unwrap_or_default())
        .await?
    else {
        return Ok(EksControlPlane::Missing);
    };
    DynamicObject::clone(&control_plane)
        .try_parse()
        .map(|found| EksControlPlane::Found(Box::new(found)))
        .map_err(|e| lariat_controllers::Error::Invalid(e.to_string()))
}

/// The AWS session of an object's identity in its `region`, with `PrincipalUsageAllowed` set;
/// or the failure to report.
pub(crate) async fn session(
    ctx: &Context,
    namespace: &str,
    region: Option<&str>,
    identity: Option<&lariat_api::aws::identity::AWSIdentityReference>,
    status_conditions: &mut Vec<serde_json::Value>,
) -> Result<Session, Failure> {
    use lariat_controllers::conditions::json as conditions;
    let Some(region) = region.filter(|r| !r.is_empty()) else {
        return Err(Failure::new(
            "Ready",
            "InvalidSpec",
            "spec.region is empty: name the AWS region of the cluster",
        ));
    };
    match ctx.identities.session(namespace, region, identity).await {
        Ok(session) => {
            conditions::set(status_conditions, "PrincipalUsageAllowed", true, "", "");
            Ok(session)
        }
        Err(error) => Err(Failure::new(
            "PrincipalUsageAllowed",
            error.reason(),
            error.to_string(),
        )),
    }
}

/// What a Cluster's instances run in, as an AWSMachine finds it.
pub(crate) enum ClusterInfrastructure {
    Found(workers::Infrastructure),
    /// The Cluster, its control plane or its AWSCluster is not there (yet, or any more).
    Missing,
    /// Neither an EKS control plane nor an AWSCluster: the control plane's kind.
    OtherKind(String),
}

/// The infrastructure of Cluster `cluster` in `namespace`: its AWSCluster, else its EKS
/// control plane.
pub(crate) async fn cluster_infrastructure(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
) -> Result<ClusterInfrastructure, lariat_controllers::Error> {
    let Some(found) = ctx
        .caches
        .typed::<Cluster>()
        .get(namespace, cluster)
        .await?
    else {
        return Ok(ClusterInfrastructure::Missing);
    };
    let reference = found.spec.infrastructure_ref.as_ref();
    if reference.and_then(|r| r.kind.as_deref()) != Some("AWSCluster") {
        return Ok(match eks_control_plane(ctx, namespace, cluster).await? {
            EksControlPlane::Found(plane) => {
                ClusterInfrastructure::Found(workers::Infrastructure::Eks(plane))
            }
            EksControlPlane::Missing => ClusterInfrastructure::Missing,
            EksControlPlane::OtherKind(kind) => ClusterInfrastructure::OtherKind(kind),
        });
    }
    let name = reference
        .and_then(|r| r.name.as_deref())
        .unwrap_or_default();
    let Some(aws_cluster) = ctx
        .caches
        .of(&cluster::resource())
        .get(namespace, name)
        .await?
    else {
        return Ok(ClusterInfrastructure::Missing);
    };
    DynamicObject::clone(&aws_cluster)
        .try_parse()
        .map(|found| ClusterInfrastructure::Found(workers::Infrastructure::Ec2(Box::new(found))))
        .map_err(|e| lariat_controllers::Error::Invalid(e.to_string()))
}

/// A step a reconcile cannot get past: the condition it fails, the reason (AWS's error code
/// when AWS said no), and the message, which says what to do.
pub(crate) struct Failure {
    pub(crate) condition: &'static str,
    pub(crate) reason: String,
    pub(crate) message: String,
    /// Cluster API's severity: `Error` for what needs a person, `Warning` for what may pass.
    pub(crate) severity: &'static str,
}

impl Failure {
    pub(crate) fn new(condition: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Failure {
            condition,
            reason: reason.to_owned(),
            message: message.into(),
            severity: "Error",
        }
    }

    /// One that may pass by itself (a read that failed, an instance not listed yet).
    pub(crate) fn transient(
        condition: &'static str,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Failure {
            severity: "Warning",
            ..Failure::new(condition, reason, message)
        }
    }
}

/// Sets the failed condition and Ready to False, with `status`'s other fields (`ready: false`,
/// a failure reason); records a Warning Event and logs once per distinct failure; looks again
/// in a minute (an AWS error is not a watch event).
pub(crate) async fn report_failure(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    status_conditions: &mut Vec<serde_json::Value>,
    failure: Failure,
    mut status: serde_json::Value,
) -> Result<std::time::Duration, lariat_controllers::Error> {
    use kube::ResourceExt;
    mark_failed(status_conditions, &failure);
    if serde_json::json!(status_conditions) != object.data["status"]["conditions"] {
        status["conditions"] = serde_json::json!(status_conditions);
        lariat_controllers::object::patch_status(api, &object.name_any(), status).await?;
        announce_failure(ctx, object, &failure).await;
    }
    Ok(FAILURE_RETRY)
}

/// How soon a failure is looked at again.
pub(crate) const FAILURE_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// Sets the failed condition, and Ready, to False with the failure's reason and severity.
pub(crate) fn mark_failed(status_conditions: &mut Vec<serde_json::Value>, failure: &Failure) {
    use lariat_controllers::conditions::json as conditions;
    let Failure {
        condition,
        reason,
        message,
        severity,
    } = failure;
    conditions::set(status_conditions, condition, false, reason, message);
    conditions::set(status_conditions, "Ready", false, reason, message);
    // Cluster API's severities: whether a person is needed.
    for failed in status_conditions
        .iter_mut()
        .filter(|c| c["type"] == *condition || c["type"] == "Ready")
    {
        failed["severity"] = serde_json::json!(severity);
    }
}

/// Logs a failure once and records it as a Warning Event; called when it is first written.
pub(crate) async fn announce_failure(ctx: &Context, object: &DynamicObject, failure: &Failure) {
    use kube::ResourceExt;
    use lariat_controllers::events::EventType;
    let kind = object
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    let (reason, message) = (&failure.reason, &failure.message);
    lariat_controllers::warn_once(
        &format!(
            "{kind}/{}/{}",
            object.namespace().unwrap_or_default(),
            object.name_any()
        ),
        &format!("{kind} cannot go on: {reason}: {message}"),
    );
    ctx.events
        .publish(object, &kind, EventType::Warning, reason, message)
        .await;
}

/// What every reconcile of the provider shares.
pub struct Context {
    pub client: kube::Client,
    pub caches: Arc<Caches>,
    pub identities: Arc<Identities>,
    /// Events for `kubectl describe`.
    pub events: lariat_controllers::events::Recorder,
}

/// Runs the provider's controllers until `shutdown`, on the process's shared caches.
pub async fn run(
    caches: Arc<Caches>,
    aws: Arc<Aws>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    ensure_controller_identity(&caches).await;
    let client = caches.client().clone();
    let context = Arc::new(Context {
        client: client.clone(),
        identities: Identities::new(aws, caches.clone()).await,
        caches: caches.clone(),
        events: lariat_controllers::events::Recorder::new(client),
    });
    let shutdown = lariat_controllers::shared_shutdown(shutdown);
    tokio::join!(
        cluster_controllers(&caches, &context, shutdown.clone()),
        machine_controllers(&caches, &context, shutdown),
    );
}

/// The controllers of the cluster-wide kinds: AWSManagedControlPlane, AWSCluster and
/// AWSManagedCluster.
async fn cluster_controllers(caches: &Arc<Caches>, context: &Arc<Context>, shutdown: Shutdown) {
    let control_planes = lariat_controllers::controller_on(&caches.of(&control_plane::resource()))
        .watches_shared_stream_with(
            caches.typed::<Cluster>().changes(),
            |cluster: Arc<Cluster>| {
                let reference = cluster.spec.control_plane_ref.as_ref()?;
                let namespace = cluster.metadata.namespace.as_deref()?;
                refers_to(
                    reference,
                    "AWSManagedControlPlane",
                    control_plane::resource(),
                    namespace,
                )
            },
            (),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(
            control_plane::reconcile,
            lariat_controllers::error_policy,
            context.clone(),
        )
        .for_each(lariat_controllers::finished("awsmanagedcontrolplane"));
    // An AWSCluster follows its Cluster (the owner reference it waits for).
    let clusters = lariat_controllers::controller_on(&caches.of(&cluster::resource()))
        .watches_shared_stream_with(
            caches.typed::<Cluster>().changes(),
            |cluster: Arc<Cluster>| {
                let reference = cluster.spec.infrastructure_ref.as_ref()?;
                let namespace = cluster.metadata.namespace.as_deref()?;
                refers_to(reference, "AWSCluster", cluster::resource(), namespace)
            },
            (),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(
            cluster::reconcile,
            lariat_controllers::error_policy,
            context.clone(),
        )
        .for_each(lariat_controllers::finished("awscluster"));
    // An AWSManagedCluster follows its Cluster's control plane: a change of the control plane
    // wakes the infrastructure cluster of the same Cluster.
    let clusters_cache = caches.typed::<Cluster>();
    let managed_clusters =
        lariat_controllers::controller_on(&caches.of(&managed_cluster::resource()))
            .reconcile_on(lariat_controllers::woken_by_pause_changes_of(
                caches,
                caches.of(&managed_cluster::resource()),
            ))
            .watches_shared_stream_with(
                caches.of(&control_plane::resource()).changes(),
                move |control_plane: Arc<DynamicObject>| {
                    let namespace = control_plane.metadata.namespace.clone()?;
                    let cluster = clusters_cache
                        .get_now(&namespace, &control_plane::owning_cluster(&control_plane)?)?;
                    let reference = cluster.spec.infrastructure_ref.as_ref()?;
                    let resource = managed_cluster::resource();
                    refers_to(reference, "AWSManagedCluster", resource, &namespace)
                },
                control_plane::resource(),
            )
            .graceful_shutdown_on(shutdown)
            .run(
                managed_cluster::reconcile,
                lariat_controllers::error_policy,
                context.clone(),
            )
            .for_each(lariat_controllers::finished("awsmanagedcluster"));
    tokio::join!(clusters, control_planes, managed_clusters);
}

/// The controllers of the machines' kinds: the node groups, the self-managed pools, the
/// machines and their bootstrap configs.
async fn machine_controllers(caches: &Arc<Caches>, context: &Arc<Context>, shutdown: Shutdown) {
    use lariat_api::capi::{Machine, MachinePool};
    // A node group follows its MachinePool's replicas: a pool's change wakes its group.
    let node_groups =
        lariat_controllers::controller_on(&caches.of(&managed_machine_pool::resource()))
            .reconcile_on(lariat_controllers::woken_by_pause_changes_of(
                caches,
                caches.of(&managed_machine_pool::resource()),
            ))
            .watches_shared_stream_with(
                caches.typed::<MachinePool>().changes(),
                |pool: Arc<MachinePool>| {
                    let reference = &pool.spec.template.spec.as_ref()?.infrastructure_ref;
                    let resource = managed_machine_pool::resource();
                    let namespace = pool.metadata.namespace.as_deref()?;
                    refers_to(reference, "AWSManagedMachinePool", resource, namespace)
                },
                (),
            )
            .graceful_shutdown_on(shutdown.clone())
            .run(
                managed_machine_pool::reconcile,
                lariat_controllers::error_policy,
                context.clone(),
            )
            .for_each(lariat_controllers::finished("awsmanagedmachinepool"));
    // Self-managed pools follow their MachinePool too (its replicas, its bootstrap data).
    let self_managed = lariat_controllers::controller_on(&caches.of(&machine_pool::resource()))
        .reconcile_on(lariat_controllers::woken_by_pause_changes_of(
            caches,
            caches.of(&machine_pool::resource()),
        ))
        .watches_shared_stream_with(
            caches.typed::<MachinePool>().changes(),
            |pool: Arc<MachinePool>| {
                let reference = &pool.spec.template.spec.as_ref()?.infrastructure_ref;
                let namespace = pool.metadata.namespace.as_deref()?;
                refers_to(
                    reference,
                    "AWSMachinePool",
                    machine_pool::resource(),
                    namespace,
                )
            },
            (),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(
            machine_pool::reconcile,
            lariat_controllers::error_policy,
            context.clone(),
        )
        .for_each(lariat_controllers::finished("awsmachinepool"));
    // A machine follows its Machine (its bootstrap data, its deletion).
    let machines = lariat_controllers::controller_on(&caches.of(&machine::resource()))
        .reconcile_on(lariat_controllers::woken_by_pause_changes_of(
            caches,
            caches.of(&machine::resource()),
        ))
        .watches_shared_stream_with(
            caches.typed::<Machine>().changes(),
            |owner: Arc<Machine>| {
                let reference = &owner.spec.infrastructure_ref;
                let namespace = owner.metadata.namespace.as_deref()?;
                refers_to(reference, "AWSMachine", machine::resource(), namespace)
            },
            (),
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(
            machine::reconcile,
            lariat_controllers::error_policy,
            context.clone(),
        )
        .for_each(lariat_controllers::finished("awsmachine"));
    let eks_configs =
        lariat_controllers::controller_on(&caches.of(&bootstrap::eks_config_resource()))
            .graceful_shutdown_on(shutdown.clone())
            .run(
                bootstrap::reconcile_eks_config,
                lariat_controllers::error_policy,
                context.clone(),
            )
            .for_each(lariat_controllers::finished("eksconfig"));
    let nodeadm_configs =
        lariat_controllers::controller_on(&caches.of(&bootstrap::nodeadm_config_resource()))
            .graceful_shutdown_on(shutdown)
            .run(
                bootstrap::reconcile_nodeadm_config,
                lariat_controllers::error_policy,
                context.clone(),
            )
            .for_each(lariat_controllers::finished("nodeadmconfig"));
    tokio::join!(
        node_groups,
        self_managed,
        machines,
        eks_configs,
        nodeadm_configs
    );
}

/// Cluster API AWS's controller identity, created as its `AutoControllerIdentityCreator`
/// does: every namespace may use the controller's credentials until an administrator narrows
/// `allowedNamespaces`.
async fn ensure_controller_identity(caches: &Caches) {
    let identities: Api<AWSClusterControllerIdentity> = Api::all(caches.client().clone());
    let identity = AWSClusterControllerIdentity::new(
        CONTROLLER_IDENTITY_NAME,
        AWSClusterControllerIdentitySpec {
            allowed_namespaces: Some(AllowedNamespaces::default()),
        },
    );
    match identities.create(&PostParams::default(), &identity).await {
        Ok(_) => tracing::info!("created AWSClusterControllerIdentity default for every namespace"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(error) => tracing::warn!(%error, "cannot create AWSClusterControllerIdentity default"),
    }
}
