//! AWSManagedCluster: the infrastructure cluster of an EKS cluster. It owns nothing in AWS (the
//! control plane does); like Cluster API AWS's, it mirrors its AWSManagedControlPlane's
//! endpoint, readiness and failure domains, so core's Cluster controller sees the
//! infrastructure contract fulfilled.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use lariat_api::aws::AWSManagedCluster;
use lariat_api::capi::Cluster;
use lariat_controllers::Error;
use lariat_controllers::object::{patch, patch_status};
use serde_json::json;

use crate::Context;
use crate::control_plane::owning_cluster;

pub fn resource() -> ApiResource {
    ApiResource::erase::<AWSManagedCluster>(&())
}

pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Cluster API's paused contract, deletion included (see `object_paused`).
    if lariat_controllers::cluster::object_paused(&ctx.caches, &object.metadata).await? {
        return Ok(lariat_controllers::resync());
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let Some(cluster_name) = owning_cluster(&object) else {
        return Ok(Action::await_change());
    };
    let Some(cluster) = ctx
        .caches
        .typed::<Cluster>()
        .get(&namespace, &cluster_name)
        .await?
    else {
        return Ok(Action::await_change());
    };
    let Some(reference) = cluster.spec.control_plane_ref.as_ref() else {
        return Ok(Action::await_change());
    };
    if reference.kind.as_deref() != Some("AWSManagedControlPlane") {
        return Err(Error::Invalid(format!(
            "AWSManagedCluster {namespace}/{name} needs an AWSManagedControlPlane as its Cluster's control plane, not {}",
            reference.kind.as_deref().unwrap_or("none")
        )));
    }
    let control_plane = ctx
        .caches
        .of(&crate::control_plane::resource())
        .get(&namespace, reference.name.as_deref().unwrap_or_default())
        .await?;
    let Some(control_plane) = control_plane else {
        return Ok(Action::await_change());
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource());
    let endpoint = &control_plane.data["spec"]["controlPlaneEndpoint"];
    if endpoint["host"].is_string() && object.data["spec"]["controlPlaneEndpoint"] != *endpoint {
        patch(
            &api,
            &name,
            json!({"spec": {"controlPlaneEndpoint": endpoint}}),
        )
        .await?;
    }
    let ready = control_plane.data["status"]["ready"] == true && endpoint["host"].is_string();
    let status = json!({
        "ready": ready,
        "failureDomains": control_plane.data["status"]["failureDomains"],
    });
    if object.data["status"]["ready"] != status["ready"]
        || object.data["status"]["failureDomains"] != status["failureDomains"]
    {
        patch_status(&api, &name, status).await?;
    }
    Ok(Action::await_change())
}
