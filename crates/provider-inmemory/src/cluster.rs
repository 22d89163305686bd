//! InMemoryCluster: creates the simulated workload-cluster API and its kubeconfig Secret,
//! publishes the control plane endpoint, and reports ready.

use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use lariat_api::capi::cluster::FailureDomainSpec;
use lariat_api::infrastructure::InMemoryCluster;
use lariat_controllers::object::{
    cluster_api_owner, ensure_finalizer, patch, patch_status, remove_finalizer,
};
use lariat_controllers::{Error, conditions};
use serde_json::json;

use crate::{Context, cluster_key, resource};

pub const FINALIZER: &str = "inmemorycluster.infrastructure.cluster.x-k8s.io";

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cluster API's paused contract, deletion included (see `object_paused`).
    if lariat_controllers::cluster::object_paused(&ctx.caches, &object.metadata).await? {
        return Ok(lariat_controllers::resync());
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    // Read as JSON, as the Cluster's `infrastructureRef` reaches it (Cluster API's contract).
    let in_memory: InMemoryCluster = lariat_controllers::object::parse(&object)?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &resource("InMemoryCluster"));
    let key = cluster_key(&namespace, &name);
    if object.metadata.deletion_timestamp.is_some() {
        ctx.clusters.remove(&key);
        remove_finalizer(&api, &object, FINALIZER).await?;
        return Ok(Action::await_change());
    }
    if ensure_finalizer(&api, &object, FINALIZER).await? {
        // The write's own watch event brings the object back.
        return Ok(Action::await_change());
    }
    // Contract: wait until core has set the owner reference to the Cluster (that write
    // wakes this object).
    let Some(cluster) = cluster_api_owner(object.as_ref(), "Cluster") else {
        return Ok(Action::await_change());
    };
    let created = ctx
        .clusters
        .ensure(&key)
        .await
        .map_err(|e| Error::Invalid(e.to_string()))?;
    if created {
        ctx.events
            .publish(
                object.as_ref(),
                "InMemoryCluster",
                lariat_controllers::events::EventType::Normal,
                "Provisioned",
                &format!(
                    "Simulated API server up at {}",
                    ctx.clusters.server_url(&key)
                ),
            )
            .await;
    }

    // Best effort, once per new simulated cluster: a machine not rejoined here makes its Node
    // in its own reconcile, only later than the kubeconfig.
    if created
        && let Some(workload) = ctx.clusters.client(&key)
        && let Err(error) =
            crate::machine::rejoin_booted(&ctx, &namespace, &cluster, workload).await
    {
        tracing::warn!(cluster = %key, %error, "not every booted machine rejoined the restarted cluster; each rejoins on its own");
    }

    write_kubeconfig(&ctx, &object, &key, &cluster, created).await?;

    let host = in_memory
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.host.as_deref());
    if host.is_none_or(str::is_empty) {
        patch(&api, &name, json!({"spec": {"controlPlaneEndpoint": {"host": format!("{name}.{namespace}.inmemory.lariat"), "port": 6443}}})).await?;
    }
    let failure_domains = in_memory.spec.failure_domains.clone().unwrap_or_else(|| {
        ["zone-a", "zone-b", "zone-c"]
            .map(|zone| {
                let domain = FailureDomainSpec {
                    control_plane: Some(true),
                    attributes: None,
                };
                (zone.to_string(), domain)
            })
            .into()
    });
    let status = in_memory.status.unwrap_or_default();
    let mut list = conditions::json::existing(&object.data["status"]);
    conditions::json::set(&mut list, "Ready", true, "", "");
    let generation = object.metadata.generation.unwrap_or(0);
    if status.ready != Some(true)
        || status.failure_domains.as_ref() != Some(&failure_domains)
        || status.observed_generation != Some(generation)
    {
        let status = json!({"ready": true, "failureDomains": failure_domains, "conditions": list, "observedGeneration": generation});
        patch_status(&api, &name, status).await?;
    }
    // Its own changes and its Cluster's wake it.
    Ok(lariat_controllers::resync())
}

/// The kubeconfig Secret core and users reach the workload cluster with. It is rewritten
/// when the simulated cluster is new (after a server restart it is a new cluster with a
/// new CA, so the old credential is void) or no longer points at this server.
async fn write_kubeconfig(
    ctx: &Context,
    object: &DynamicObject,
    key: &str,
    cluster: &str,
    created: bool,
) -> Result<(), Error> {
    let namespace = object.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret_name = format!("{cluster}-kubeconfig");
    let url = ctx.clusters.server_url(key);
    let points_here = |kubeconfig: Option<&[u8]>| {
        kubeconfig.is_some_and(|v| String::from_utf8_lossy(v).contains(&format!("server: {url}\n")))
    };
    let cached = ctx.caches.secrets().get(&namespace, &secret_name).await?;
    let cached_value = cached.as_ref().and_then(|secret| {
        use base64::Engine;
        lariat_controllers::object::str_at(&secret.data, &["data", "value"])
            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
    });
    let mut exists = cached.is_some();
    let mut up_to_date = points_here(cached_value.as_deref());
    if !created && !up_to_date {
        // The cache may not show yet a Secret written a moment ago, and a new kubeconfig
        // revokes the one before it: ask the API itself before making one.
        let live = secrets.get_opt(&secret_name).await?;
        exists = live.is_some();
        up_to_date = points_here(
            live.as_ref()
                .and_then(|s| s.data.as_ref()?.get("value"))
                .map(|v| v.0.as_slice()),
        );
    }
    if created || !up_to_date {
        let kubeconfig = ctx
            .clusters
            .kubeconfig(key)
            .await
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {
                "name": secret_name,
                "labels": {"cluster.x-k8s.io/cluster-name": cluster},
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": cluster,
                    "uid": object.owner_references().iter().find(|o| o.kind == "Cluster").map(|o| o.uid.clone()).unwrap_or_default(),
                    "controller": true}],
            },
            "type": "cluster.x-k8s.io/secret",
            "data": {"value": ByteString(kubeconfig.into_bytes())},
        }))
        .map_err(|e| Error::Invalid(e.to_string()))?;
        // The kubeconfig just made is the only valid one (making it revoked the one before):
        // it must be what the Secret holds, created or not.
        let update = || async {
            secrets
                .patch(
                    &secret_name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"data": secret.data})),
                )
                .await
                .map(|_| ())
        };
        let written = if exists {
            update().await
        } else {
            match secrets.create(&PostParams::default(), &secret).await {
                Err(kube::Error::Api(e)) if e.code == 409 => update().await,
                other => other.map(|_| ()),
            }
        };
        written?;
    }

    Ok(())
}
