//! AWSManagedControlPlane: an EKS cluster, its IAM role and its network, reconciled step by
//! step (each step finds what an earlier attempt made before it makes anything), its status
//! as Cluster API's control-plane contract says (`ready`, `initialized`, the endpoint), and
//! the `<cluster>-kubeconfig` Secret with a token made the way `aws eks get-token` makes it.
//! Deletion goes the other way: the EKS cluster, its role, then the network, each found by
//! its tags.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_eks::types::{LogSetup, LogType, Logging};
use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::aws::AWSManagedControlPlane;
use lariat_api::aws::network::SecurityGroupRole;
use lariat_controllers::Error;
use lariat_controllers::conditions::json as conditions;
use lariat_controllers::events::EventType;
use lariat_controllers::object::{ensure_finalizer, patch, patch_status, remove_finalizer};
use serde_json::{Value, json};

use crate::Context;
use crate::addons::{self, Progress};
use crate::iam::{self, RoleSpec};
use crate::identity::Session;
use crate::network;
use crate::sdk::{AwsError, AwsResult};
use crate::security_groups::{self, Wanted};
use crate::tags::Owner;
use crate::updates;

pub const FINALIZER: &str = "awsmanagedcontrolplane.controlplane.cluster.x-k8s.io";
/// How long a token lasts: `aws eks get-token`'s 15 minutes (the presigned request is valid
/// for 60 seconds; EKS accepts the token for 15 minutes after it was signed).
const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// How often the kubeconfig's token is renewed: a token is at most about twice this old when
/// it is replaced, well inside its 15 minutes.
const TOKEN_RENEWAL: Duration = Duration::from_secs(5 * 60);
/// Annotation on the kubeconfig Secret: when its token was made (seconds since the epoch).
const TOKEN_ISSUED: &str = "lariat.dev/token-issued-at";

pub fn resource() -> ApiResource {
    ApiResource::erase::<AWSManagedControlPlane>(&())
}

/// The Cluster (cluster.x-k8s.io) that owns the object, once core has claimed it.
pub fn owning_cluster(object: &DynamicObject) -> Option<String> {
    lariat_controllers::object::cluster_api_owner(object, "Cluster")
}

/// Cluster API AWS's EKS name for a control plane the spec does not name:
/// `<namespace>_<name>`, within EKS's 100 characters.
pub fn eks_name(namespace: &str, name: &str) -> String {
    let mut full = format!("{namespace}_{name}");
    if full.len() > 100 {
        use sha2::{Digest, Sha256};
        let hash = Sha256::digest(full.as_bytes());
        let hash: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
        full.truncate(91);
        full = format!("{full}-{hash}");
    }
    full
}

/// `v1.31.0` or `1.31` as EKS wants it: `1.31`.
pub fn eks_version(version: &str) -> Option<String> {
    let version = version.trim_start_matches('v');
    let mut parts = version.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    (major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok())
        .then(|| format!("{major}.{minor}"))
}

/// A step's failure, as the conditions and Events say it.
struct Failed {
    condition: &'static str,
    reason: &'static str,
    message: String,
}

impl From<Failed> for crate::Failure {
    fn from(failed: Failed) -> Self {
        crate::Failure::new(failed.condition, failed.reason, failed.message)
    }
}

impl Failed {
    fn aws(condition: &'static str, reason: &'static str, error: AwsError) -> Failed {
        Failed {
            condition,
            reason,
            message: error.to_string(),
        }
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
    let control_plane: AWSManagedControlPlane = lariat_controllers::object::parse(&object)?;
    let Some(cluster) = owning_cluster(&object) else {
        if object.metadata.deletion_timestamp.is_some() {
            remove_finalizer(&api, &object, FINALIZER).await?;
        }
        // Contract: wait until core has set the owner reference (that write wakes this).
        return Ok(Action::await_change());
    };
    let owner = Owner {
        namespace: namespace.clone(),
        cluster: cluster.clone(),
        additional: control_plane
            .spec
            .additional_tags
            .clone()
            .unwrap_or_default(),
    };
    let mut status_conditions = conditions::existing(&object.data["status"]);

    let session = match crate::session(
        &ctx,
        &namespace,
        control_plane.spec.region.as_deref(),
        control_plane.spec.identity_ref.as_ref(),
        &mut status_conditions,
    )
    .await
    {
        Ok(session) => session,
        Err(failure) => {
            return report_failure(&ctx, &api, &object, &mut status_conditions, failure).await;
        }
    };
    let eks_cluster = control_plane
        .spec
        .eks_cluster_name
        .clone()
        .unwrap_or_else(|| eks_name(&namespace, &name));
    let role_name = control_plane
        .spec
        .role_name
        .clone()
        .unwrap_or_else(|| default_role_name(&eks_cluster));

    let scope = Scope {
        ctx: &ctx,
        api: &api,
        object: &object,
        control_plane: &control_plane,
        cluster: &cluster,
        eks_cluster: &eks_cluster,
    };
    if object.metadata.deletion_timestamp.is_some() {
        return delete_cluster(&scope, &session, &owner, &role_name, &mut status_conditions).await;
    }
    if ensure_finalizer(&api, &object, FINALIZER).await? {
        return Ok(Action::await_change());
    }
    // The names are recorded before anything is made under them, as Cluster API AWS's webhook
    // defaults them: admission keeps them from changing after, so what deletion looks for is
    // what was made.
    if control_plane.spec.eks_cluster_name.is_none() || control_plane.spec.role_name.is_none() {
        patch(
            &api,
            &name,
            json!({"spec": {"eksClusterName": eks_cluster, "roleName": role_name}}),
        )
        .await?;
        return Ok(Action::await_change());
    }

    // The Cluster's service range, given to EKS (else EKS picks one), so nodes' bootstrap
    // data and the cluster agree on it.
    let service_cidr = ctx
        .caches
        .typed::<lariat_api::capi::Cluster>()
        .get(&namespace, &cluster)
        .await?
        .and_then(|c| c.spec.cluster_network.clone())
        .and_then(|n| n.services)
        .and_then(|s| s.cidr_blocks.first().cloned());
    let outcome = provision(
        &session,
        &owner,
        &control_plane,
        &eks_cluster,
        &role_name,
        service_cidr.as_deref(),
        &mut status_conditions,
    )
    .await;
    let provisioned = match outcome {
        Ok(provisioned) => provisioned,
        Err(failed) => {
            return report_failure(&ctx, &api, &object, &mut status_conditions, failed).await;
        }
    };

    if let Some(update) = &provisioned.requested_update {
        updates::remember(&api, &name, update).await?;
    }
    let observed_generation = record_spec(&scope, &role_name, &provisioned).await?;

    finish(
        &scope,
        &session,
        &owner,
        &provisioned,
        observed_generation,
        &mut status_conditions,
    )
    .await
}

/// What every step of a reconcile works on.
struct Scope<'a> {
    ctx: &'a Context,
    api: &'a Api<DynamicObject>,
    object: &'a Arc<DynamicObject>,
    control_plane: &'a AWSManagedControlPlane,
    /// The Cluster API Cluster's name.
    cluster: &'a str,
    eks_cluster: &'a str,
}

/// Once the EKS cluster is provisioned: its kubeconfig and additions (addons, OIDC provider,
/// encryption, logging) while it is ready, its IAM authenticator's mappings, and the status.
async fn finish(
    scope: &Scope<'_>,
    session: &Session,
    owner: &Owner,
    provisioned: &Provisioned,
    observed_generation: Option<i64>,
    status_conditions: &mut Vec<Value>,
) -> Result<Action, Error> {
    let namespace = scope.object.namespace().unwrap_or_default();
    // An upgrading cluster still serves: it stays ready.
    let ready = matches!(provisioned.status.as_str(), "ACTIVE" | "UPDATING");
    if ready {
        ensure_kubeconfig(
            scope.ctx,
            session,
            scope.object,
            &namespace,
            scope.cluster,
            scope.eks_cluster,
            provisioned,
        )
        .await?;
    }
    let additions = if ready
        && provisioned.failure.is_none()
        && conditions::is_true(status_conditions, "EKSControlPlaneReady")
    {
        reconcile_additions(
            session,
            owner,
            scope.control_plane,
            scope.eks_cluster,
            provisioned.oidc_issuer.as_deref(),
            status_conditions,
        )
        .await
    } else {
        Additions::default()
    };
    if ready && provisioned.failure.is_none() {
        reconcile_iam_authenticator(
            scope.ctx,
            &namespace,
            scope.cluster,
            scope.control_plane,
            status_conditions,
        )
        .await?;
    }
    report_status(
        scope,
        provisioned,
        additions,
        observed_generation,
        status_conditions,
    )
    .await
}

/// Deletes the EKS cluster, then the role and network made for it; the finalizer goes once
/// they are gone.
async fn delete_cluster(
    scope: &Scope<'_>,
    session: &Session,
    owner: &Owner,
    role_name: &str,
    status_conditions: &mut Vec<Value>,
) -> Result<Action, Error> {
    let Scope {
        ctx,
        api,
        object,
        control_plane,
        eks_cluster,
        ..
    } = *scope;
    // Looked for only when the cluster asked for one: a listing of the account's providers.
    let oidc = control_plane.spec.associate_oidc_provider == Some(true)
        || control_plane
            .status
            .as_ref()
            .is_some_and(|s| s.oidc_provider.as_ref().is_some_and(|p| p.arn.is_some()));
    match delete(session, owner, eks_cluster, role_name, oidc).await {
        Ok(true) => Ok(Action::requeue(
            ctx.identities.aws().settings().poll_while_changing,
        )),
        Ok(false) => {
            ctx.events
                .publish(
                    object.as_ref(),
                    "AWSManagedControlPlane",
                    EventType::Normal,
                    "Deleted",
                    &format!("EKS cluster {eks_cluster} deleted, with the role and network lariat made for it"),
                )
                .await;
            remove_finalizer(api, object, FINALIZER).await?;
            Ok(Action::await_change())
        }
        Err(failed) => report_failure(ctx, api, object, status_conditions, failed).await,
    }
}

/// Records what was found or made in the spec, as Cluster API AWS's does: the VPC, subnets,
/// EKS name, role and endpoint (the VPC column of `kubectl get` reads it there). Returns the
/// generation the status observes: the spec as just recorded (what lariat wrote there is what
/// it found, so the next pass need not walk the network again to see it).
async fn record_spec(
    scope: &Scope<'_>,
    role_name: &str,
    provisioned: &Provisioned,
) -> Result<Option<i64>, Error> {
    let mut spec_patch = json!({
        "eksClusterName": scope.eks_cluster,
        "roleName": role_name,
        "network": provisioned.network.spec_record(),
    });
    if let Some(endpoint) = &provisioned.endpoint {
        spec_patch["controlPlaneEndpoint"] = json!({"host": endpoint, "port": 443});
    }
    let current = serde_json::to_value(&scope.control_plane.spec).unwrap_or_default();
    let mut observed_generation = scope.object.metadata.generation;
    if !contains(&current, &spec_patch) {
        let name = scope.object.name_any();
        let recorded = patch(scope.api, &name, json!({"spec": spec_patch})).await?;
        if recorded.metadata.generation == observed_generation.map(|g| g + 1) {
            observed_generation = recorded.metadata.generation;
        }
    }
    Ok(observed_generation)
}

/// Writes the status (ready while EKS serves, failure domains, security groups, addons, the
/// OIDC provider, conditions) and its Events; the action the reconcile ends with.
async fn report_status(
    scope: &Scope<'_>,
    provisioned: &Provisioned,
    additions: Additions,
    observed_generation: Option<i64>,
    status_conditions: &mut Vec<Value>,
) -> Result<Action, Error> {
    let Scope {
        ctx,
        api,
        object,
        cluster,
        eks_cluster,
        ..
    } = *scope;
    // An upgrading cluster still serves: it stays ready.
    let ready = matches!(provisioned.status.as_str(), "ACTIVE" | "UPDATING");
    let failure_domains: serde_json::Map<String, Value> = provisioned
        .network
        .subnets
        .iter()
        .filter(|s| s.is_public != Some(true))
        .filter_map(|s| s.availability_zone.clone())
        .map(|zone| (zone, json!({"controlPlane": true})))
        .collect();
    // As Cluster API AWS records them: its own group for nodes, and EKS's cluster group
    // (role `node`), which nodes join to reach the control plane and each other.
    let mut security_groups = json!({
        "node-eks-additional": {
            "id": provisioned.network.group_id(SecurityGroupRole::NodeEksAdditional),
            "name": format!("{cluster}-node-eks-additional"),
        },
    });
    if let Some(id) = &provisioned.cluster_security_group {
        security_groups["node"] = json!({"id": id, "name": id});
    }
    let mut status = json!({
        "ready": ready,
        "initialized": ready,
        "externalManagedControlPlane": true,
        "version": provisioned.version.as_ref().map(|v| format!("v{v}")),
        "failureDomains": failure_domains,
        "networkStatus": {
            "securityGroups": security_groups,
            "natGatewaysIPs": provisioned.network.nat_gateway_ips,
        },
        "conditions": status_conditions,
        "observedGeneration": observed_generation,
    });
    if let Some(states) = additions.addons {
        status["addons"] = json!(states);
    }
    if let Some(provider) = additions.oidc_provider {
        status["oidcProvider"] = provider;
    }
    // A failed upgrade, addon or OIDC provider leaves the control plane ready (it serves), not
    // Ready.
    let failure = provisioned.failure.as_ref().or(additions.failure.as_ref());
    if let Some(failure) = failure {
        crate::mark_failed(status_conditions, failure);
    }
    let stored = conditions::existing(&object.data["status"]);
    conditions::keep_transition_times(status_conditions, &stored);
    status["conditions"] = json!(status_conditions);
    if !contains(&object.data["status"], &status) {
        patch_status(api, &object.name_any(), status).await?;
        if let Some(failure) = failure
            && json!(status_conditions) != object.data["status"]["conditions"]
        {
            crate::announce_failure(ctx, object, failure).await;
        }
        if ready
            && !conditions::is_true(
                &conditions::existing(&object.data["status"]),
                "EKSControlPlaneReady",
            )
        {
            ctx.events
                .publish(
                    object.as_ref(),
                    "AWSManagedControlPlane",
                    EventType::Normal,
                    "Provisioned",
                    &format!("EKS cluster {eks_cluster} is ACTIVE"),
                )
                .await;
        }
    }
    if failure.is_some() {
        // Within the sync period, when that is shorter: a failed update is asked again then.
        return Ok(Action::requeue(
            crate::FAILURE_RETRY.min(ctx.identities.aws().settings().sync_period),
        ));
    }
    // Nothing to wait for: done, or refused until the spec changes.
    let settled = !additions.changing
        && ready
        && (conditions::is_true(status_conditions, "EKSControlPlaneReady")
            || status_conditions
                .iter()
                .any(|c| c["type"] == "EKSControlPlaneReady" && c["reason"] == "DowngradeRefused"));
    Ok(if settled {
        // The token must be renewed before it expires.
        Action::requeue(TOKEN_RENEWAL)
    } else {
        Action::requeue(ctx.identities.aws().settings().poll_while_changing)
    })
}

/// What an ACTIVE cluster is given beside EKS itself: its addons and its OIDC provider.
#[derive(Default)]
struct Additions {
    /// `status.addons`, when the addons were read.
    addons: Option<Vec<lariat_api::aws::managed_control_plane::AddonState>>,
    /// `status.oidcProvider`, when one was made or found.
    oidc_provider: Option<Value>,
    /// Something is being created, updated or deleted.
    changing: bool,
    failure: Option<crate::Failure>,
}

async fn reconcile_additions(
    session: &Session,
    owner: &Owner,
    control_plane: &AWSManagedControlPlane,
    eks_cluster: &str,
    oidc_issuer: Option<&str>,
    status_conditions: &mut Vec<Value>,
) -> Additions {
    // The OIDC provider first: addons whose service-account role needs it (vpc-cni, the EBS
    // CSI driver) cannot become healthy without it.
    let oidc =
        reconcile_oidc_provider(session, owner, control_plane, eks_cluster, oidc_issuer).await;
    let mut additions = reconcile_addons(
        session,
        owner,
        control_plane,
        eks_cluster,
        status_conditions,
    )
    .await;
    match oidc {
        Ok(provider) => {
            if provider.is_some() {
                conditions::set(status_conditions, OIDC_PROVIDER_READY, true, "", "");
            }
            additions.oidc_provider = provider;
        }
        Err(error) => {
            additions.failure = Some(crate::Failure::new(
                OIDC_PROVIDER_READY,
                &error.code,
                error.to_string(),
            ))
        }
    }
    additions
}

/// lariat's condition for the OIDC provider (Cluster API AWS folds its failures into
/// EKSControlPlaneReady; the cluster itself is fine when only its provider failed).
const OIDC_PROVIDER_READY: &str = "OIDCProviderReady";

/// `status.oidcProvider` once `spec.associateOIDCProvider` has an IAM OIDC provider made or
/// found for the cluster's issuer. As Cluster API AWS: done once (the status records it),
/// kept until the cluster is deleted. The trust policy roles of service accounts need is in
/// the status; Cluster API AWS also copies it into a ConfigMap of the workload cluster, which
/// lariat does not.
async fn reconcile_oidc_provider(
    session: &Session,
    owner: &Owner,
    control_plane: &AWSManagedControlPlane,
    eks_cluster: &str,
    oidc_issuer: Option<&str>,
) -> Result<Option<Value>, AwsError> {
    let recorded = control_plane
        .status
        .as_ref()
        .and_then(|s| s.oidc_provider.as_ref())
        .and_then(|p| p.arn.as_ref())
        .is_some_and(|arn| !arn.is_empty());
    if control_plane.spec.associate_oidc_provider != Some(true) || recorded {
        return Ok(None);
    }
    let Some(issuer) = oidc_issuer else {
        return Err(AwsError::missing("OIDC issuer in the EKS cluster"));
    };
    let iam = session.aws().iam(&session.config);
    let arn = iam::ensure_oidc_provider(&iam, owner, eks_cluster, issuer).await?;
    Ok(Some(json!({
        "arn": arn,
        "trustPolicy": iam::oidc_trust_policy(&arn),
    })))
}

/// The addons of an ACTIVE cluster that is not upgrading. They are read when the spec names
/// some or the status shows some: a cluster without addons costs no call. (An addon whose
/// creation was answered, then lost to a crash, then dropped from the spec before the status
/// showed it, stays until the cluster is deleted, and EKS deletes it with the cluster.)
async fn reconcile_addons(
    session: &Session,
    owner: &Owner,
    control_plane: &AWSManagedControlPlane,
    eks_cluster: &str,
    status_conditions: &mut Vec<Value>,
) -> Additions {
    let wanted = control_plane.spec.addons.clone().unwrap_or_default();
    let status = control_plane.status.clone().unwrap_or_default();
    let shown = status.addons.as_ref().is_some_and(|a| !a.is_empty());
    if wanted.is_empty() && !shown {
        return Additions::default();
    }
    const CONDITION: &str = "EKSAddonsConfigured";
    const FAILED: &str = "EKSAddonsConfiguredFailed";
    let eks = session.aws().eks(&session.config);
    let addons = match addons::reconcile(&eks, owner, eks_cluster, &wanted).await {
        Ok(addons) => addons,
        Err(error) => {
            return Additions {
                failure: Some(crate::Failure::new(
                    CONDITION,
                    &error.code,
                    error.to_string(),
                )),
                ..Additions::default()
            };
        }
    };
    let mut outcome = Additions {
        addons: Some(addons.states),
        ..Additions::default()
    };
    match addons.progress {
        Progress::Configured => conditions::set(status_conditions, CONDITION, true, "", ""),
        Progress::Changing(what) => {
            conditions::set(
                status_conditions,
                CONDITION,
                false,
                "EKSAddonsConfiguring",
                &what,
            );
            outcome.changing = true;
        }
        Progress::Failed(what) => {
            outcome.failure = Some(crate::Failure::new(CONDITION, FAILED, what))
        }
        // Running with health issues that may pass: said, without holding Ready (Cluster API
        // AWS counts DEGRADED as configured), and looked at again at the sync period.
        Progress::Degraded(what) => {
            conditions::set(
                status_conditions,
                CONDITION,
                false,
                "EKSAddonsDegraded",
                &what,
            );
            if let Some(condition) = status_conditions
                .iter_mut()
                .find(|c| c["type"] == CONDITION)
            {
                condition["severity"] = json!("Warning");
            }
        }
    }
    outcome
}

/// What a version change asks of EKS.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    None,
    /// The next minor version on the way to the wanted one.
    Upgrade {
        running: String,
        next: String,
    },
    Downgrade {
        running: String,
        wanted: String,
    },
}

/// `1.31` as numbers.
pub(crate) fn minor_version(version: &str) -> Option<(u32, u32)> {
    let (major, minor) = version.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The step from the `running` EKS version to the `wanted` one (both `1.31`).
pub(crate) fn version_step(running: &str, wanted: &str) -> Step {
    match (minor_version(running), minor_version(wanted)) {
        (Some(have), Some(want)) if want > have => Step::Upgrade {
            running: running.to_owned(),
            next: if want.0 == have.0 {
                format!("{}.{}", have.0, have.1 + 1)
            } else {
                wanted.to_owned()
            },
        },
        (Some(have), Some(want)) if want < have => Step::Downgrade {
            running: running.to_owned(),
            wanted: wanted.to_owned(),
        },
        _ => Step::None,
    }
}

/// Cluster API AWS's name of the control plane role it creates (IAM allows 64 characters).
fn default_role_name(eks_cluster: &str) -> String {
    crate::iam::role_name(eks_cluster, "-iam-service-role")
}

/// Whether every field `want` sets has that value in `have`.
pub(crate) fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(have), Value::Object(want)) => want.iter().all(|(k, v)| {
            v.is_null() && !have.contains_key(k) || have.get(k).is_some_and(|h| contains(h, v))
        }),
        _ => have == want,
    }
}

/// What the cloud holds for the control plane.
struct Provisioned {
    network: network::Network,
    status: String,
    endpoint: Option<String>,
    certificate_authority: Option<String>,
    version: Option<String>,
    /// The security group EKS made for the cluster, which self-managed nodes must join.
    cluster_security_group: Option<String>,
    /// Where EKS's service-account tokens come from (`https://oidc.eks...`).
    oidc_issuer: Option<String>,
    /// The update asked for in this pass, for [`updates::remember`].
    requested_update: Option<String>,
    /// An update EKS took and could not finish.
    failure: Option<crate::Failure>,
}

async fn provision(
    session: &Session,
    owner: &Owner,
    control_plane: &AWSManagedControlPlane,
    eks_cluster: &str,
    role_name: &str,
    service_cidr: Option<&str>,
    status_conditions: &mut Vec<Value>,
) -> Result<Provisioned, Failed> {
    let aws = session.aws();
    // The network and role are walked (each resource found or made) until both are ready
    // and after each change of the spec; in between, what the object records of them is
    // used, so waiting for EKS costs one read per poll, not a walk of the whole network.
    let recorded = recorded_network(control_plane, status_conditions);
    let walk = recorded.is_none();
    let network = match recorded {
        Some(network) => network,
        None => network::ensure(
            &aws.ec2(&session.config),
            owner,
            &control_plane.spec.network.clone().unwrap_or_default(),
            // The group Cluster API AWS adds to EKS nodes; its rules are the user's.
            &[Wanted {
                role: SecurityGroupRole::NodeEksAdditional,
                rules: None,
            }],
        )
        .await
        .map_err(|e| Failed::aws("VpcReady", "VpcReconciliationFailed", e))?,
    };
    for condition in ["VpcReady", "SubnetsReady", "ClusterSecurityGroupsReady"] {
        conditions::set(status_conditions, condition, true, "", "");
    }
    let role = || async {
        ensure_control_plane_role(session, owner, control_plane, role_name)
            .await
            .map_err(|e| {
                Failed::aws(
                    "IAMControlPlaneRolesReady",
                    "IAMControlPlaneRolesReconciliationFailed",
                    e,
                )
            })
    };
    let mut role_arn = None;
    if walk {
        role_arn = Some(role().await?);
    }
    conditions::set(status_conditions, "IAMControlPlaneRolesReady", true, "", "");

    let eks = aws.eks(&session.config);
    let found = match eks.describe_cluster().name(eks_cluster).send().await.aws() {
        Ok(found) => found.cluster,
        Err(error) if error.is_not_found() => None,
        Err(error) => {
            return Err(Failed::aws(
                "EKSControlPlaneReady",
                "EKSControlPlaneReconciliationFailed",
                error,
            ));
        }
    };
    // Another lariat cluster's EKS cluster (a spec naming the same eksClusterName from another
    // namespace) is never adopted, or its addons and logs would follow this spec.
    if let Some(other) = found
        .as_ref()
        .and_then(|c| owner.owned_by_another(eks_tags(c)))
    {
        return Err(Failed {
            condition: "EKSControlPlaneReady",
            reason: "EKSClusterOwnedByAnother",
            message: format!(
                "EKS cluster {eks_cluster} belongs to Cluster {other}: name another spec.eksClusterName"
            ),
        });
    }
    let cluster = match found {
        Some(cluster) => cluster,
        None => {
            let role_arn = match role_arn.take() {
                Some(arn) => arn,
                None => role().await?,
            };
            create_cluster(
                &eks,
                owner,
                control_plane,
                eks_cluster,
                &role_arn,
                &network,
                service_cidr,
            )
            .await
            .map_err(|e| {
                Failed::aws(
                    "EKSControlPlaneReady",
                    "EKSControlPlaneReconciliationFailed",
                    e,
                )
            })?
        }
    };
    continue_provision(
        &eks,
        session.aws().settings().sync_period,
        control_plane,
        eks_cluster,
        network,
        cluster,
        status_conditions,
    )
    .await
}

/// The network as the object records it, once the network and role are ready and the spec
/// has not changed since; `None` when they must be walked.
fn recorded_network(
    control_plane: &AWSManagedControlPlane,
    status_conditions: &[Value],
) -> Option<network::Network> {
    let status = control_plane.status.as_ref()?;
    let current = status.observed_generation == control_plane.metadata.generation;
    let ready = ["VpcReady", "IAMControlPlaneRolesReady"]
        .iter()
        .all(|c| conditions::is_true(status_conditions, c));
    if !current || !ready {
        return None;
    }
    let spec = control_plane.spec.network.as_ref()?;
    let vpc = spec.vpc.as_ref()?;
    let groups = status.network_status.as_ref()?.security_groups.as_ref()?;
    Some(network::Network {
        vpc_id: vpc.id.clone()?,
        cidr_block: vpc.cidr_block.clone()?,
        managed: true,
        internet_gateway_id: vpc.internet_gateway_id.clone(),
        subnets: spec.subnets.clone().filter(|s| !s.is_empty())?,
        security_groups: BTreeMap::from([(
            SecurityGroupRole::NodeEksAdditional,
            security_groups::Group {
                id: groups.get("node-eks-additional")?.id.clone(),
                name: groups.get("node-eks-additional")?.name.clone(),
            },
        )]),
        nat_gateway_ips: status
            .network_status
            .as_ref()
            .and_then(|n| n.nat_gateways_ips.clone())
            .unwrap_or_default(),
    })
}

async fn ensure_control_plane_role(
    session: &Session,
    owner: &Owner,
    control_plane: &AWSManagedControlPlane,
    role_name: &str,
) -> Result<String, AwsError> {
    let iam = session.aws().iam(&session.config);
    let mut policies = vec![iam::EKS_CLUSTER_POLICY.to_owned()];
    policies.extend(
        control_plane
            .spec
            .role_additional_policies
            .clone()
            .unwrap_or_default(),
    );
    iam::ensure_role(
        &iam,
        owner,
        &RoleSpec {
            name: role_name,
            path: control_plane.spec.role_path.as_deref(),
            permissions_boundary: control_plane.spec.role_permissions_boundary.as_deref(),
            service: "eks.amazonaws.com",
            policies,
        },
    )
    .await
}

/// The EKS cluster found or made: its upgrade, status and conditions.
async fn continue_provision(
    eks: &aws_sdk_eks::Client,
    // How long after a failed update it is asked again.
    retry_after: Duration,
    control_plane: &AWSManagedControlPlane,
    eks_cluster: &str,
    network: network::Network,
    cluster: aws_sdk_eks::types::Cluster,
    status_conditions: &mut Vec<Value>,
) -> Result<Provisioned, Failed> {
    let status = cluster
        .status()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default();
    let wanted = control_plane.spec.version.as_deref().and_then(eks_version);
    let mut upgrading = false;
    let step = match (&wanted, cluster.version()) {
        (Some(wanted), Some(running)) if status == "ACTIVE" => version_step(running, wanted),
        _ => Step::None,
    };
    if let Step::Downgrade { running, wanted } = &step {
        // EKS cannot go back: said once in the condition, nothing asked of AWS.
        let message = format!(
            "spec.version {wanted} is older than the {running} EKS cluster {eks_cluster} runs: EKS cannot downgrade; set v{running} or later"
        );
        conditions::set(
            status_conditions,
            "EKSControlPlaneReady",
            false,
            "DowngradeRefused",
            &message,
        );
        upgrading = true;
    }
    let mut requested_update = None;
    let mut failure = None;
    if let Step::Upgrade { running, next } = &step {
        // One minor version at a time, whatever the spec asks (admission refuses skips, but a
        // cluster adopted at an older version can be further behind): EKS says when it is done.
        match updates::upgrade(
            eks,
            eks_cluster,
            None,
            &control_plane.metadata,
            next,
            retry_after,
        )
        .await
        .map_err(|e| Failed {
            condition: "EKSControlPlaneReady",
            reason: "EKSControlPlaneUpgradeFailed",
            message: e.to_string(),
        })? {
            updates::Upgrade::Upgrading { record } => requested_update = record,
            // Said, and asked again later; the cluster serves (and its kubeconfig is renewed)
            // meanwhile.
            updates::Upgrade::Failed(why) => {
                failure = Some(crate::Failure::new(
                    "EKSControlPlaneReady",
                    "EKSControlPlaneUpgradeFailed",
                    format!("EKS cluster {eks_cluster} stays at {running}: {why}"),
                ));
            }
        }
        let message = format!("EKS cluster {eks_cluster}: upgrading from {running} to {next}");
        conditions::set(
            status_conditions,
            "EKSControlPlaneReady",
            false,
            "EKSControlPlaneUpgrading",
            &message,
        );
        // Still serving: the cluster stays ready while EKS upgrades it.
        upgrading = true;
    }
    let wanted_logging = control_plane.spec.logging.as_ref().map(logging);
    if let Some(wanted_logging) = wanted_logging.filter(|wanted| {
        status == "ACTIVE"
            && !upgrading
            && enabled_logs(cluster.logging()) != enabled_logs(Some(wanted))
    }) {
        update_logging(eks, eks_cluster, wanted_logging, status_conditions).await?;
        upgrading = true;
    }
    record_state(
        &status,
        upgrading,
        eks_cluster,
        wanted.as_deref(),
        status_conditions,
    )?;
    Ok(Provisioned {
        failure,
        requested_update,
        network,
        status,
        endpoint: cluster.endpoint().map(|e| {
            e.trim_start_matches("https://")
                .trim_end_matches('/')
                .to_owned()
        }),
        certificate_authority: cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .map(str::to_owned),
        version: cluster.version().map(str::to_owned),
        cluster_security_group: cluster
            .resources_vpc_config()
            .and_then(|c| c.cluster_security_group_id())
            .map(str::to_owned),
        oidc_issuer: cluster
            .identity()
            .and_then(|i| i.oidc())
            .and_then(|o| o.issuer())
            .map(str::to_owned),
    })
}

/// Asks EKS to send the logs the spec wants (an update already under way is taken as
/// asked), and says so in the conditions.
async fn update_logging(
    eks: &aws_sdk_eks::Client,
    eks_cluster: &str,
    wanted: aws_sdk_eks::types::Logging,
    status_conditions: &mut Vec<Value>,
) -> Result<(), Failed> {
    let requested = eks
        .update_cluster_config()
        .name(eks_cluster)
        .logging(wanted)
        .send()
        .await
        .aws();
    match requested {
        Ok(_) => {}
        // An update in progress already.
        Err(error) if error.code == "ResourceInUseException" => {}
        Err(error) => {
            return Err(Failed::aws(
                "EKSControlPlaneReady",
                "EKSControlPlaneReconciliationFailed",
                error,
            ));
        }
    }
    let message = format!("EKS cluster {eks_cluster}: updating which logs it sends");
    conditions::set(
        status_conditions,
        "EKSControlPlaneReady",
        false,
        "EKSControlPlaneUpdating",
        &message,
    );
    Ok(())
}

/// What the EKS cluster's state says in the conditions; a FAILED cluster is a failure.
fn record_state(
    status: &str,
    upgrading: bool,
    eks_cluster: &str,
    wanted: Option<&str>,
    status_conditions: &mut Vec<Value>,
) -> Result<(), Failed> {
    match status {
        "ACTIVE" if upgrading => {}
        "ACTIVE" => {
            conditions::set(status_conditions, "EKSControlPlaneReady", true, "", "");
            conditions::set(status_conditions, "Ready", true, "", "");
        }
        "FAILED" => {
            return Err(Failed {
                condition: "EKSControlPlaneReady",
                reason: "EKSControlPlaneFailed",
                message: format!("EKS reports cluster {eks_cluster} FAILED"),
            });
        }
        // EKS upgrades a cluster in place; it serves throughout.
        "UPDATING" => {
            let message = format!(
                "EKS cluster {eks_cluster} is UPDATING{}",
                wanted.map(|w| format!(" to {w}")).unwrap_or_default()
            );
            conditions::set(
                status_conditions,
                "EKSControlPlaneReady",
                false,
                "EKSControlPlaneUpgrading",
                &message,
            );
        }
        other => {
            let message = format!("EKS cluster {eks_cluster} is {other}");
            conditions::set(
                status_conditions,
                "EKSControlPlaneReady",
                false,
                "EKSControlPlaneCreating",
                &message,
            );
            conditions::set(
                status_conditions,
                "Ready",
                false,
                "EKSControlPlaneCreating",
                &message,
            );
        }
    }
    Ok(())
}

async fn create_cluster(
    eks: &aws_sdk_eks::Client,
    owner: &Owner,
    control_plane: &AWSManagedControlPlane,
    eks_cluster: &str,
    role_arn: &str,
    network: &network::Network,
    service_cidr: Option<&str>,
) -> Result<aws_sdk_eks::types::Cluster, AwsError> {
    use aws_sdk_eks::types::{
        AuthenticationMode, CreateAccessConfigRequest, EncryptionConfig,
        KubernetesNetworkConfigRequest, Provider, SupportType, UpgradePolicyRequest,
        VpcConfigRequest,
    };
    let spec = &control_plane.spec;
    let access = spec.endpoint_access.clone().unwrap_or_default();
    let subnets = if spec.restrict_private_subnets == Some(true) {
        network.private_subnet_ids()
    } else {
        network.subnet_ids()
    };
    let version = spec.version.as_deref().and_then(eks_version);
    let created = eks
        .create_cluster()
        .name(eks_cluster)
        .set_version(version)
        .role_arn(role_arn)
        .set_kubernetes_network_config(service_cidr.map(|cidr| {
            KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr(cidr)
                .build()
        }))
        .resources_vpc_config(
            VpcConfigRequest::builder()
                .set_subnet_ids(Some(subnets))
                .security_group_ids(network.group_id(SecurityGroupRole::NodeEksAdditional))
                .endpoint_public_access(access.public.unwrap_or(true))
                .endpoint_private_access(access.private.unwrap_or(false))
                .set_public_access_cidrs(access.public_cid_rs.clone())
                .build(),
        )
        .set_tags(Some(
            owner.tags(eks_cluster, "common").into_iter().collect(),
        ))
        .set_logging(spec.logging.as_ref().map(logging))
        .set_encryption_config(
            spec.encryption_config
                .as_ref()
                .filter(|e| e.provider.is_some())
                .map(|e| {
                    vec![
                        // `resources` (`secrets`) is no longer EKS's to choose: it encrypts all
                        // Kubernetes API data with the key now, so only the key is sent.
                        EncryptionConfig::builder()
                            .set_provider(
                                e.provider
                                    .clone()
                                    .map(|key| Provider::builder().key_arn(key).build()),
                            )
                            .build(),
                    ]
                }),
        )
        .set_access_config(spec.access_config.as_ref().map(|a| {
            CreateAccessConfigRequest::builder()
                .set_authentication_mode(a.authentication_mode.as_deref().map(|mode| {
                    // Cluster API AWS's `api_and_config_map` is EKS's `API_AND_CONFIG_MAP`.
                    AuthenticationMode::from(mode.to_uppercase().as_str())
                }))
                .set_bootstrap_cluster_creator_admin_permissions(
                    a.bootstrap_cluster_creator_admin_permissions,
                )
                .build()
        }))
        .set_bootstrap_self_managed_addons(spec.bootstrap_self_managed_addons)
        .set_upgrade_policy(spec.upgrade_policy.as_deref().map(|policy| {
            UpgradePolicyRequest::builder()
                .support_type(SupportType::from(policy.to_uppercase().as_str()))
                .build()
        }))
        // A retried create after a crash is the same request, not a second cluster.
        .client_request_token(control_plane.metadata.uid.clone().unwrap_or_default())
        .send()
        .await
        .aws();
    match created {
        Ok(created) => created.cluster.ok_or_else(|| AwsError::missing("cluster")),
        // Made by an earlier attempt whose answer was lost.
        Err(error) if error.code == "ResourceInUseException" => eks
            .describe_cluster()
            .name(eks_cluster)
            .send()
            .await
            .aws()?
            .cluster
            .ok_or_else(|| AwsError::missing("cluster")),
        Err(error) => Err(error),
    }
}

/// EKS's logging settings for Cluster API AWS's: every type said, enabled or not, so a type
/// turned off in the spec is turned off in EKS.
fn logging(spec: &lariat_api::aws::managed_control_plane::ControlPlaneLoggingSpec) -> Logging {
    let (mut enabled, mut disabled) = (LogSetup::builder(), LogSetup::builder());
    for (on, kind) in [
        (spec.api_server, LogType::Api),
        (spec.audit, LogType::Audit),
        (spec.authenticator, LogType::Authenticator),
        (spec.controller_manager, LogType::ControllerManager),
        (spec.scheduler, LogType::Scheduler),
    ] {
        if on {
            enabled = enabled.types(kind);
        } else {
            disabled = disabled.types(kind);
        }
    }
    // EKS refuses a setup without types.
    let (enabled, disabled) = (
        enabled.enabled(true).build(),
        disabled.enabled(false).build(),
    );
    Logging::builder()
        .set_cluster_logging(Some(
            [enabled, disabled]
                .into_iter()
                .filter(|setup| !setup.types().is_empty())
                .collect(),
        ))
        .build()
}

/// The log types EKS has enabled, in a stable order.
fn enabled_logs(logging: Option<&Logging>) -> Vec<String> {
    let mut types: Vec<String> = logging
        .map(|l| l.cluster_logging())
        .unwrap_or_default()
        .iter()
        .filter(|setup| setup.enabled() == Some(true))
        .flat_map(|setup| setup.types().iter().map(|t| t.as_str().to_owned()))
        .collect();
    types.sort();
    types.dedup();
    types
}

/// An EKS cluster's tags, as ownership checks read them.
fn eks_tags(cluster: &aws_sdk_eks::types::Cluster) -> impl Iterator<Item = (&str, &str)> {
    cluster
        .tags()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
}

/// Deletes the EKS cluster, then its OIDC provider and role, then the network. `Ok(true)` while something is
/// still going away.
async fn delete(
    session: &Session,
    owner: &Owner,
    eks_cluster: &str,
    role_name: &str,
    oidc: bool,
) -> Result<bool, Failed> {
    let aws = session.aws();
    let eks = aws.eks(&session.config);
    let failed = |e| Failed::aws("EKSControlPlaneReady", "DeletionFailed", e);
    match eks.describe_cluster().name(eks_cluster).send().await.aws() {
        Ok(found) => {
            let cluster = found
                .cluster
                .ok_or_else(|| failed(AwsError::missing("cluster")))?;
            // Only a cluster this one made: its tags say so.
            if owner.owns(eks_tags(&cluster)) {
                if cluster.status().map(|s| s.as_str()) != Some("DELETING") {
                    eks.delete_cluster()
                        .name(eks_cluster)
                        .send()
                        .await
                        .aws()
                        .map_err(failed)?;
                }
                return Ok(true);
            }
        }
        Err(error) if error.is_not_found() => {}
        Err(error) => return Err(failed(error)),
    }
    let iam = aws.iam(&session.config);
    if oidc {
        iam::delete_oidc_providers(&iam, owner)
            .await
            .map_err(failed)?;
    }
    iam::delete_role(&iam, owner, role_name)
        .await
        .map_err(failed)?;
    network::delete(&aws.ec2(&session.config), owner)
        .await
        .map_err(failed)
}

/// Sets the failed step's condition, records a Warning Event once per distinct failure, and
/// waits a minute (an AWS error is not a watch event).
async fn report_failure(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &Arc<DynamicObject>,
    status_conditions: &mut Vec<Value>,
    failure: impl Into<crate::Failure>,
) -> Result<Action, Error> {
    let failure = failure.into();
    let wait =
        crate::report_failure(ctx, api, object, status_conditions, failure, json!({})).await?;
    // Within the sync period, when that is shorter: a failed update is asked again then.
    Ok(Action::requeue(
        wait.min(ctx.identities.aws().settings().sync_period),
    ))
}

/// Cluster API AWS's condition for `iamAuthenticatorConfig`.
const IAM_AUTHENTICATOR: &str = "IAMAuthenticatorConfigured";

/// Writes the spec's `iamAuthenticatorConfig` into the cluster's aws-auth through
/// `<cluster>-kubeconfig`, once the spec has mappings or had some (to remove them), and says
/// so in `IAMAuthenticatorConfigured`. A failure is a Warning: the cluster serves meanwhile.
async fn reconcile_iam_authenticator(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    control_plane: &AWSManagedControlPlane,
    status_conditions: &mut Vec<Value>,
) -> Result<(), Error> {
    let config = control_plane.spec.iam_authenticator_config.as_ref();
    let roles: Vec<Value> = config
        .and_then(|c| c.map_roles.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect();
    let users: Vec<Value> = config
        .and_then(|c| c.map_users.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|u| serde_json::to_value(u).ok())
        .collect();
    let mapped_before = status_conditions
        .iter()
        .any(|c| c["type"] == IAM_AUTHENTICATOR);
    if roles.is_empty() && users.is_empty() && !mapped_before {
        return Ok(());
    }
    let secret = format!("{cluster}-kubeconfig");
    let workload = match ctx.caches.secrets().get(namespace, &secret).await? {
        Some(secret) => lariat_controllers::cache::workload_client(&secret).await,
        None => None,
    };
    let Some(workload) = workload else {
        // Written this pass; the cache shows it by the next.
        return Ok(());
    };
    match crate::aws_auth::ensure_mappings(&workload, &roles, &users).await {
        Ok(()) if roles.is_empty() && users.is_empty() => {
            status_conditions.retain(|c| c["type"] != IAM_AUTHENTICATOR);
        }
        Ok(()) => conditions::set(status_conditions, IAM_AUTHENTICATOR, true, "", ""),
        Err(message) => {
            conditions::set(
                status_conditions,
                IAM_AUTHENTICATOR,
                false,
                "IAMAuthenticatorConfigurationFailed",
                &message,
            );
            for failed in status_conditions
                .iter_mut()
                .filter(|c| c["type"] == IAM_AUTHENTICATOR)
            {
                failed["severity"] = json!("Warning");
            }
        }
    }
    Ok(())
}

/// Writes `<cluster>-kubeconfig` with a fresh token when there is none, it is about to
/// expire, or the endpoint changed.
async fn ensure_kubeconfig(
    ctx: &Context,
    session: &Session,
    object: &DynamicObject,
    namespace: &str,
    cluster: &str,
    eks_cluster: &str,
    provisioned: &Provisioned,
) -> Result<(), Error> {
    let (Some(endpoint), Some(ca)) = (&provisioned.endpoint, &provisioned.certificate_authority)
    else {
        return Ok(());
    };
    let secret_name = format!("{cluster}-kubeconfig");
    let now = SystemTime::now();
    let since_epoch = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    };
    if let Some(cached) = ctx.caches.secrets().get(namespace, &secret_name).await? {
        let issued = cached
            .annotations()
            .get(TOKEN_ISSUED)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        // A minute's slack: the reconcile that renews runs TOKEN_RENEWAL after the one that
        // wrote, which took a moment itself.
        let fresh = since_epoch(now).saturating_sub(issued) + 60 < TOKEN_RENEWAL.as_secs();
        let same_server = cached
            .annotations()
            .get("lariat.dev/server")
            .map(String::as_str)
            == Some(endpoint.as_str());
        if fresh && same_server {
            return Ok(());
        }
    }
    let token = crate::token::eks_token(&session.config, eks_cluster, now)
        .await
        .map_err(|e| Error::Invalid(format!("cannot make a token for {eks_cluster}: {e}")))?;
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": format!("https://{endpoint}"), "certificate-authority-data": ca}}],
        "users": [{"name": format!("{cluster}-admin"), "user": {"token": token}}],
        "contexts": [{"name": format!("{cluster}-admin@{cluster}"), "context": {"cluster": cluster, "user": format!("{cluster}-admin")}}],
        "current-context": format!("{cluster}-admin@{cluster}"),
    });
    let kubeconfig =
        serde_yaml_ng::to_string(&kubeconfig).map_err(|e| Error::Invalid(e.to_string()))?;
    let cluster_uid = object
        .owner_references()
        .iter()
        .find(|o| o.kind == "Cluster")
        .map(|o| o.uid.clone())
        .unwrap_or_default();
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name,
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
            "annotations": {
                TOKEN_ISSUED: since_epoch(now).to_string(),
                "lariat.dev/server": endpoint,
                "lariat.dev/token-expires-at": since_epoch(now + TOKEN_LIFETIME).to_string(),
            },
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": cluster, "uid": cluster_uid, "controller": true}],
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {"value": base64::engine::general_purpose::STANDARD.encode(kubeconfig)},
    }))
    .map_err(|e| Error::Invalid(e.to_string()))?;
    Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .patch(
            &secret_name,
            &PatchParams::apply("lariat-aws").force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions_follow_cluster_api_aws() {
        assert_eq!(
            eks_name("default", "prod-control-plane"),
            "default_prod-control-plane"
        );
        let long = eks_name(&"n".repeat(60), &"c".repeat(60));
        assert_eq!(long.len(), 100);
        assert_eq!(eks_version("v1.31.0").as_deref(), Some("1.31"));
        assert_eq!(eks_version("1.30").as_deref(), Some("1.30"));
        assert_eq!(eks_version("latest"), None);
        assert_eq!(
            default_role_name("default_prod"),
            "default-prod-iam-service-role"
        );
        assert!(default_role_name(&"x".repeat(100)).len() <= 64);
    }

    #[test]
    fn versions_move_one_minor_at_a_time_and_never_back() {
        assert_eq!(
            version_step("1.29", "1.31"),
            Step::Upgrade {
                running: "1.29".into(),
                next: "1.30".into()
            }
        );
        assert_eq!(
            version_step("1.30", "1.31"),
            Step::Upgrade {
                running: "1.30".into(),
                next: "1.31".into()
            }
        );
        assert_eq!(version_step("1.31", "1.31"), Step::None);
        assert_eq!(
            version_step("1.31", "1.30"),
            Step::Downgrade {
                running: "1.31".into(),
                wanted: "1.30".into()
            }
        );
        assert_eq!(version_step("1.31", "latest"), Step::None);
    }

    #[test]
    fn contains_compares_only_what_is_wanted() {
        assert!(contains(
            &json!({"a": 1, "b": {"c": 2, "d": 3}}),
            &json!({"b": {"c": 2}})
        ));
        assert!(!contains(&json!({"a": 1}), &json!({"a": 2})));
        assert!(contains(&json!({"a": 1}), &json!({"z": null})));
    }
}
