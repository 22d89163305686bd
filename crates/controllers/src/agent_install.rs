//! Installs lariat's agent into every cluster a provider built for real (EKS, kubeadm on
//! machines), as Rancher deploys its agent into the clusters it provisions: once the control
//! plane is initialized, the import manifests `lariat cluster import` gives users are applied
//! through the cluster's `<cluster>-kubeconfig`, with a fresh registration token; the agent
//! then dials home and the Cluster turns `Connected`. One code path for every provider.
//!
//! In-memory clusters are left out: they have no kubelet to run the Deployment, so their
//! provider runs the same agent in-process.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use lariat_api::capi::Cluster;

use crate::cache::{Caches, workload_client};
use crate::events::{EventType, Recorder};
use crate::{Error, controller_on, error_policy, finished};
use futures::StreamExt;

/// The agent's namespace and Deployment in a workload cluster, as the import manifests name
/// them.
pub const AGENT_NAMESPACE: &str = "lariat-system";
pub const AGENT_DEPLOYMENT: &str = "lariat-agent";
/// Field manager of what the installer applies.
const MANAGER: &str = "lariat-agent-installer";
/// On the agent Deployment lariat installed (and its pods): the uid of the Cluster it was
/// installed for. A Deployment without it, or with another Cluster's (one deleted and made
/// again under the same name, or anybody's), is not trusted to register this Cluster.
const INSTALLED_FOR: &str = "lariat.dev/installed-for-cluster";
/// How long an installed agent may take to connect before the Cluster's Events say so.
const CONNECT_WITHIN: Duration = Duration::from_secs(600);
/// The longest the installer waits for a workload cluster's answers.
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(30);

fn timed_out() -> kube::Error {
    kube::Error::Service(format!("no answer within {} s", WORKLOAD_TIMEOUT.as_secs()).into())
}

/// The import manifests for Cluster `(namespace, name)`, with a new registration token: the
/// server's side of `lariat cluster import` (`lariat_management::Plane::import_manifests`).
pub type ImportManifests = Arc<
    dyn Fn(String, String) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>>
        + Send
        + Sync,
>;

struct Context {
    caches: Arc<Caches>,
    manifests: ImportManifests,
    events: Recorder,
}

/// Runs the installer until `shutdown`, on the process's caches.
pub async fn run(
    caches: Arc<Caches>,
    manifests: ImportManifests,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context {
        events: Recorder::new(caches.client().clone()),
        caches: caches.clone(),
        manifests,
    });
    controller_on(&caches.typed::<Cluster>())
        // A new or changed kubeconfig (an endpoint that moved, say) is worth another look.
        .watches_shared_stream_with(
            caches.secrets().changes(),
            |secret: Arc<DynamicObject>| {
                let cluster = secret.name_any().strip_suffix("-kubeconfig")?.to_owned();
                Some(ObjectRef::<Cluster>::new(&cluster).within(&secret.namespace()?))
            },
            ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        )
        .graceful_shutdown_on(futures::FutureExt::shared(Box::pin(shutdown)))
        .run(reconcile, error_policy, context)
        .for_each(finished("agent-installer"))
        .await;
}

fn condition_true(cluster: &Cluster, type_: &str) -> bool {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.is_true(type_)))
}

async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let in_memory = cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .and_then(|r| r.kind.as_deref())
        == Some("InMemoryCluster");
    // Imported clusters got their agent from whoever imported them.
    let imported = cluster.spec.infrastructure_ref.is_none();
    if in_memory
        || imported
        || cluster.paused()
        || cluster.metadata.deletion_timestamp.is_some()
        || !condition_true(&cluster, "ControlPlaneInitialized")
        || condition_true(&cluster, "Connected")
    {
        return Ok(Action::await_change());
    }
    let secret_name = format!("{name}-kubeconfig");
    let Some(secret) = ctx.caches.secrets().get(&namespace, &secret_name).await? else {
        // The provider writes it as the control plane comes up; the Cluster's next change,
        // or this, looks again.
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    let Some(workload) = workload_client(&secret).await else {
        return failed(
            &ctx,
            &cluster,
            &format!("{secret_name} holds no usable kubeconfig"),
        )
        .await;
    };
    let deployments: Api<Deployment> = Api::namespaced(workload.clone(), AGENT_NAMESPACE);
    // A cluster that accepts connections and never answers must not hold a worker forever.
    let found = tokio::time::timeout(WORKLOAD_TIMEOUT, deployments.get_opt(AGENT_DEPLOYMENT))
        .await
        .unwrap_or_else(|_| Err(timed_out()));
    let uid = cluster.uid().unwrap_or_default();
    let replaced = match found {
        // Installed for this Cluster: the agent registers it when it runs. A Deployment deleted
        // by hand is put back by the next look.
        Ok(Some(deployment)) if deployment.annotations().get(INSTALLED_FOR) == Some(&uid) => {
            return not_connected_yet(&ctx, &cluster, &deployment).await;
        }
        // Someone else's, or one installed for an earlier Cluster of this name: its token is
        // not this Cluster's, so it is installed again, with a fresh one.
        Ok(Some(_)) => true,
        Ok(None) => false,
        Err(error) => {
            return failed(
                &ctx,
                &cluster,
                &format!("cannot reach the cluster through {secret_name}: {error}"),
            )
            .await;
        }
    };
    let manifests = match (ctx.manifests)(namespace.clone(), name.clone()).await {
        Ok(manifests) => manifests,
        Err(error) => return failed(&ctx, &cluster, &error).await,
    };
    let applied = tokio::time::timeout(WORKLOAD_TIMEOUT, apply(&workload, &manifests, &uid))
        .await
        .unwrap_or_else(|_| Err(timed_out().to_string()));
    if let Err(error) = applied {
        return failed(
            &ctx,
            &cluster,
            &format!("cannot install the agent through {secret_name}: {error}"),
        )
        .await;
    }
    crate::forget_warning(&log_key(&cluster));
    tracing::info!(cluster = %format!("{namespace}/{name}"), replaced, "installed lariat's agent");
    if replaced {
        ctx.events
            .publish(
                cluster.as_ref(),
                "Cluster",
                EventType::Warning,
                "AgentReplaced",
                &format!(
                    "{AGENT_NAMESPACE}/{AGENT_DEPLOYMENT} in the cluster was not installed for this Cluster: replaced, with a fresh registration token"
                ),
            )
            .await;
    }
    ctx.events
        .publish(
            cluster.as_ref(),
            "Cluster",
            EventType::Normal,
            "AgentInstalled",
            &format!(
                "lariat's agent installed through {secret_name} ({AGENT_NAMESPACE}/{AGENT_DEPLOYMENT}); the cluster turns Connected when it dials in"
            ),
        )
        .await;
    Ok(Action::requeue(Duration::from_secs(600)))
}

/// An agent installed for this Cluster that has not connected: said once it has had
/// [`CONNECT_WITHIN`] to do so, then looked at again (a Connected Cluster stops this).
async fn not_connected_yet(
    ctx: &Context,
    cluster: &Cluster,
    deployment: &Deployment,
) -> Result<Action, Error> {
    let age = deployment
        .creation_timestamp()
        .map(|t| {
            let created =
                std::time::UNIX_EPOCH + Duration::from_secs(t.0.as_second().max(0) as u64);
            std::time::SystemTime::now()
                .duration_since(created)
                .unwrap_or_default()
        })
        .unwrap_or_default();
    if age < CONNECT_WITHIN {
        return Ok(Action::requeue(CONNECT_WITHIN - age));
    }
    let message = format!(
        "the agent installed {} minutes ago has not connected: see `kubectl logs -n {AGENT_NAMESPACE} deploy/{AGENT_DEPLOYMENT}` in the cluster, and whether it reaches the server's --advertise-url",
        age.as_secs() / 60
    );
    crate::warn_once(&log_key(cluster), &message);
    ctx.events
        .publish(
            cluster,
            "Cluster",
            EventType::Warning,
            "AgentNotConnected",
            &message,
        )
        .await;
    Ok(Action::requeue(CONNECT_WITHIN))
}

/// Applies every document of `manifests` with server-side apply (so a second install
/// updates what the first made), cluster-scoped or namespaced as each says; the agent
/// Deployment and its pods are marked as installed for Cluster `uid` (a new uid rolls them).
async fn apply(client: &kube::Client, manifests: &str, uid: &str) -> Result<(), String> {
    use serde::Deserialize;
    // Parsed before any request: the YAML parser is not Send.
    let mut objects = serde_yaml_ng::Deserializer::from_str(manifests)
        .map(DynamicObject::deserialize)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    for object in objects
        .iter_mut()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
    {
        object
            .annotations_mut()
            .insert(INSTALLED_FOR.into(), uid.into());
        object.data["spec"]["template"]["metadata"]["annotations"][INSTALLED_FOR] =
            serde_json::json!(uid);
    }
    for object in objects {
        let types = object
            .types
            .as_ref()
            .ok_or("a manifest without apiVersion and kind")?;
        let gvk = GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
        let resource = ApiResource::from_gvk(&gvk);
        let api: Api<DynamicObject> = match object.namespace() {
            Some(namespace) => Api::namespaced_with(client.clone(), &namespace, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let name = object.name_any();
        let params = PatchParams::apply(MANAGER).force();
        let applied = match api.patch(&name, &params, &Patch::Apply(&object)).await {
            // One the cluster will not change in place (another agent's Deployment, its
            // selector immutable) is replaced: the installed agent is lariat's to decide.
            Err(kube::Error::Api(e))
                if e.code == 422 && e.message.contains("field is immutable") =>
            {
                api.delete(&name, &kube::api::DeleteParams::foreground())
                    .await
                    .map_err(|e| format!("{} {name}: {e}", gvk.kind))?;
                api.patch(&name, &params, &Patch::Apply(&object)).await
            }
            outcome => outcome,
        };
        applied.map_err(|e| format!("{} {name}: {e}", gvk.kind))?;
    }
    Ok(())
}

fn log_key(cluster: &Cluster) -> String {
    format!(
        "agent-installer/{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    )
}

/// Says why the agent is not installed, on the Cluster's Events (deduplicated) and in the
/// log once, and looks again in a minute: what failed is outside lariat.
async fn failed(ctx: &Context, cluster: &Cluster, message: &str) -> Result<Action, Error> {
    crate::warn_once(&log_key(cluster), message);
    ctx.events
        .publish(
            cluster,
            "Cluster",
            EventType::Warning,
            "AgentInstallFailed",
            message,
        )
        .await;
    Ok(Action::requeue(Duration::from_secs(60)))
}
