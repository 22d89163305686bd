//! The init lock: the ConfigMap `<cluster>-lock` that makes exactly one control-plane Machine
//! run `kubeadm init`, as Cluster API's `ControlPlaneInitMutex` does.
//!
//! Creating an object is the API's one atomic create-if-absent, so whichever reconcile creates
//! the ConfigMap holds the lock; everyone else gets a 409. The ConfigMap names its holder in the
//! same `lock-information` key Cluster API uses, plus the holder's uid, so a Machine recreated
//! under the same name is not mistaken for the holder. A lock whose holder no longer exists is
//! stale and is deleted (guarded by its uid and resourceVersion, so a lock taken in between is
//! never deleted); the lock is released once the Cluster is initialized, and is owned by the
//! Cluster so it goes with it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, Preconditions};
use kube::{Client, ResourceExt};
use lariat_api::capi::{Cluster, Machine};
use serde_json::json;

use crate::Error;
use crate::object::{cluster_labels, is_status, owner_reference, post_params};

/// The ConfigMap key, as Cluster API names it.
pub const LOCK_KEY: &str = "lock-information";

pub fn name(cluster: &str) -> String {
    format!("{cluster}-lock")
}

/// Who holds the lock after [`acquire`].
#[derive(Debug, PartialEq, Eq)]
pub enum Lock {
    /// This Machine holds it (just now, or since an earlier reconcile).
    Held,
    /// Another Machine holds it (its name), or held it until a moment ago.
    HeldBy(String),
}

/// Takes the init lock for `machine`, or says who has it.
pub async fn acquire(
    client: &Client,
    cluster: &Cluster,
    machine: &impl kube::Resource,
) -> Result<Lock, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let lock_name = name(&cluster.name_any());
    if let Some(existing) = api.get_opt(&lock_name).await? {
        let info: serde_json::Value = existing
            .data
            .as_ref()
            .and_then(|d| d.get(LOCK_KEY))
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        let holder = info["machineName"].as_str().unwrap_or_default().to_string();
        let holder_uid = info["machineUID"].as_str();
        if holder == machine.name_any()
            && holder_uid.is_none_or(|uid| Some(uid) == machine.uid().as_deref())
        {
            return Ok(Lock::Held);
        }
        let machines: Api<Machine> = Api::namespaced(client.clone(), &namespace);
        let alive = match holder.as_str() {
            "" => None,
            holder => machines.get_opt(holder).await?,
        }
        .filter(|m| holder_uid.is_none_or(|uid| Some(uid) == m.uid().as_deref()));
        if alive.is_some() {
            return Ok(Lock::HeldBy(holder));
        }
        tracing::info!(cluster = %crate::object::key(cluster), %holder, "releasing the init lock of a Machine that no longer exists");
        let guarded = DeleteParams {
            preconditions: Some(Preconditions {
                uid: existing.uid(),
                resource_version: existing.resource_version(),
            }),
            ..Default::default()
        };
        match api.delete(&lock_name, &guarded).await {
            Ok(_) => {}
            // Gone or changed meanwhile: someone else is handling it; look again next time.
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => {
                return Ok(Lock::HeldBy(holder));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let info = json!({"machineName": machine.name_any(), "machineUID": machine.uid()});
    let lock = ConfigMap {
        metadata: ObjectMeta {
            name: Some(lock_name.clone()),
            namespace: Some(namespace),
            labels: Some(cluster_labels(&cluster.name_any())),
            owner_references: Some(vec![owner_reference(
                cluster,
                "cluster.x-k8s.io/v1beta1",
                "Cluster",
                false,
            )]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(LOCK_KEY.to_string(), info.to_string())])),
        ..Default::default()
    };
    match api.create(&post_params(), &lock).await {
        Ok(_) => {
            tracing::info!(cluster = %crate::object::key(cluster), machine = %machine.name_any(), "took the init lock");
            Ok(Lock::Held)
        }
        Err(e) if is_status(&e, 409) => {
            let holder = api
                .get_opt(&lock_name)
                .await?
                .and_then(|cm| cm.data?.get(LOCK_KEY).cloned())
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .and_then(|info| info["machineName"].as_str().map(String::from))
                .unwrap_or_default();
            Ok(Lock::HeldBy(holder))
        }
        Err(e) => Err(e.into()),
    }
}

/// Releases the lock of an initialized cluster; a missing lock is already released.
pub async fn release(client: &Client, namespace: &str, cluster: &str) -> Result<(), Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let lock_name = name(cluster);
    if api.get_opt(&lock_name).await?.is_none() {
        return Ok(());
    }
    match api.delete(&lock_name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
