//! The KubeadmConfig reconciler: finds the config's Machine and Cluster, decides whether the
//! node inits or joins, and writes the bootstrap data Secret, then the status
//! (docs/contracts/bootstrap.md, "Typical reconcile workflow").
//!
//! It is level-triggered and idempotent: every run recomputes the whole status from what it
//! observes, writes it only when it differs, and leaves a ready config's data alone (a machine
//! may already have booted with it).

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::certs::Purpose;
use crate::cloudinit::{self, RenderError, RenderInput};
use crate::conditions::{self as cond, Severity};
use crate::kubeadm::{ClusterFacts, KubeadmError, Role};
use crate::lock::{self, Lock};
use crate::object::{key, write_status};
use crate::secrets::{self, Certificates, DataSecret};
use crate::{Context, Error, kubeadm_config_resource};
use lariat_api::bootstrap::KubeadmConfigSpec;
use lariat_api::bootstrap::kubeadm_config::Format;
use lariat_api::capi::{Cluster, Machine, MachinePool};
use lariat_controllers::cache::{Caches, IndexKey};
use lariat_controllers::events::EventType;

/// Label on each data Secret recording which kubeadm role it was rendered for. The init
/// election reads it: a cluster that already has another node's bootstrap data never gets a
/// second `kubeadm init`, even if its lock ConfigMap disappears (once the Secrets' cache has
/// seen that data: it is read from the cache, which follows the store by a watch event).
pub const ROLE_LABEL: &str = "bootstrap.lariat.dev/kubeadm-role";

/// How long a config waits before looking again at something no watch reports (a referenced
/// Secret, a cluster certificate).
const WAIT: Duration = Duration::from_secs(5);

/// How long a config waits for what its Cluster's watch reports (infrastructure ready, the
/// control plane endpoint, the control plane initialized) before it looks again anyway: the
/// watch wakes it as soon as that changes, so this is only the fallback for a missed event,
/// Cluster API's own 30 s. At 5 s, a worker waiting for its control plane looked every five
/// seconds: with 1,000 clusters provisioning, about half of all KubeadmConfig reconciles.
const CLUSTER_WAIT: Duration = Duration::from_secs(30);

/// `status.failureReason` for configurations that can never be rendered.
const INVALID_CONFIGURATION_FAILURE: &str = "InvalidConfiguration";

/// The object that owns the config: a Machine, or a MachinePool (whose Machines share one
/// config; they are always workers).
enum ConfigOwner {
    Machine(Arc<Machine>),
    Pool(Arc<MachinePool>),
}

impl ConfigOwner {
    fn machine(&self) -> Option<&Machine> {
        match self {
            ConfigOwner::Machine(machine) => Some(machine),
            ConfigOwner::Pool(_) => None,
        }
    }

    fn is_control_plane(&self) -> bool {
        self.machine().is_some_and(|m| {
            m.labels()
                .contains_key(lariat_api::capi::labels::MACHINE_CONTROL_PLANE)
        })
    }

    fn version(&self) -> Option<&str> {
        match self {
            ConfigOwner::Machine(machine) => machine.spec.version.as_deref(),
            ConfigOwner::Pool(pool) => pool.spec.template.spec.as_ref()?.version.as_deref(),
        }
    }

    fn data_secret_name(&self) -> Option<&str> {
        match self {
            ConfigOwner::Machine(machine) => machine.spec.bootstrap.data_secret_name.as_deref(),
            ConfigOwner::Pool(pool) => pool
                .spec
                .template
                .spec
                .as_ref()?
                .bootstrap
                .data_secret_name
                .as_deref(),
        }
    }

    fn cluster_name(&self) -> Option<String> {
        match self {
            ConfigOwner::Machine(machine) => Some(machine.spec.cluster_name.clone()),
            ConfigOwner::Pool(pool) => Some(pool.spec.cluster_name.clone()),
        }
    }
}

/// What a KubeadmConfig reads of its Machine (see `Cache::changes_in`): its cluster, role,
/// version and bootstrap data.
pub fn reads_of_machine(machine: &Machine, hash: &mut std::collections::hash_map::DefaultHasher) {
    use std::hash::Hash;
    let spec = &machine.spec;
    spec.cluster_name.hash(hash);
    spec.version.hash(hash);
    spec.bootstrap.data_secret_name.hash(hash);
    machine
        .labels()
        .contains_key(lariat_api::capi::labels::MACHINE_CONTROL_PLANE)
        .hash(hash);
}

/// The owner reference that makes a Machine (or MachinePool) this config's owner.
fn owner_reference(config: &DynamicObject) -> Option<(String, String, String, String)> {
    config
        .owner_references()
        .iter()
        .filter(|o| {
            (o.kind == "Machine" || o.kind == "MachinePool")
                && o.api_version.starts_with("cluster.x-k8s.io/")
        })
        // The controller reference first, as the contract names it.
        .max_by_key(|o| o.controller == Some(true))
        .map(|o| {
            (
                o.api_version.clone(),
                o.kind.clone(),
                o.name.clone(),
                o.uid.clone(),
            )
        })
}

async fn get_owner(
    caches: &Caches,
    namespace: &str,
    (_, kind, name, uid): (String, String, String, String),
) -> Result<Option<ConfigOwner>, Error> {
    // A Machine recreated under the same name is not this config's owner.
    let same = |meta: &kube::api::ObjectMeta| meta.uid.as_deref() == Some(uid.as_str());
    if kind == "Machine" {
        let machine = caches.typed::<Machine>().get(namespace, &name).await?;
        return Ok(machine
            .filter(|m| same(&m.metadata))
            .map(ConfigOwner::Machine));
    }
    let pool = caches.typed::<MachinePool>().get(namespace, &name).await?;
    Ok(pool.filter(|p| same(&p.metadata)).map(ConfigOwner::Pool))
}

/// Reconciles one KubeadmConfig.
#[tracing::instrument(skip_all, fields(kubeadmconfig = %key(config.as_ref())))]
pub async fn reconcile(config: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = config.namespace().unwrap_or_default();
    // The data Secret is owned by the config and goes with it; nothing else to clean up.
    if config.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Contract: find the Machine through the ownerReference and wait quietly without one. The
    // Machine controller adopting the config triggers the next reconcile through the watch.
    let Some(reference) = owner_reference(&config) else {
        return Ok(Action::await_change());
    };
    let owner = match get_owner(&ctx.caches, &namespace, reference).await {
        Ok(Some(owner)) => owner,
        Ok(None) => return Ok(Action::requeue(WAIT)),
        Err(Error::UnknownKind { kind, .. }) => {
            tracing::debug!(%kind, "owner kind is not served; waiting");
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
        Err(e) => return Err(e),
    };
    let cluster_name = config
        .labels()
        .get(lariat_api::capi::labels::CLUSTER_NAME)
        .cloned()
        .or_else(|| owner.cluster_name());
    let Some(cluster_name) = cluster_name else {
        return Ok(Action::requeue(WAIT));
    };
    let Some(cluster) = ctx
        .caches
        .typed::<Cluster>()
        .get(&namespace, &cluster_name)
        .await?
    else {
        return Ok(Action::requeue(WAIT));
    };
    // Contract: no change to the config or anything else while paused.
    let conditions = &config.data["status"]["v1beta2"]["conditions"];
    let conditions: Vec<lariat_api::capi::MetaCondition> = match conditions {
        Value::Null => vec![],
        conditions => serde_json::from_value(conditions.clone()).map_err(|e| {
            let config = key(config.as_ref());
            Error::Invalid(format!(
                "KubeadmConfig {config}: status.v1beta2.conditions: {e}"
            ))
        })?,
    };
    let api: Api<lariat_api::bootstrap::KubeadmConfig> =
        Api::namespaced(ctx.client.clone(), &namespace);
    if lariat_controllers::paused::check(&api, &config.metadata, &conditions, Some(&cluster))
        .await?
    {
        return Ok(Action::await_change());
    }

    let spec: KubeadmConfigSpec =
        serde_json::from_value(config.data["spec"].clone()).map_err(|e| {
            Error::Invalid(format!("KubeadmConfig {}: spec: {e}", key(config.as_ref())))
        })?;
    let mut scope = Scope {
        client: ctx.client.clone(),
        caches: &ctx.caches,
        events: &ctx.events,
        config: &config,
        spec,
        owner: &owner,
        cluster: &cluster,
        cluster_name,
        status: match &config.data["status"] {
            Value::Object(status) => Value::Object(status.clone()),
            _ => json!({}),
        },
        conditions: cond::existing(&config.data["status"]),
    };
    let action = scope.run().await?;
    scope.finish().await?;
    Ok(action)
}

/// What one reconcile works with, and the status it builds.
struct Scope<'a> {
    client: Client,
    caches: &'a Caches,
    events: &'a lariat_controllers::events::Recorder,
    /// The config as stored, for its metadata and status.
    config: &'a DynamicObject,
    spec: KubeadmConfigSpec,
    owner: &'a ConfigOwner,
    cluster: &'a Cluster,
    cluster_name: String,
    status: Value,
    conditions: Vec<Value>,
}

impl Scope<'_> {
    async fn event(&self, type_: EventType, reason: &str, message: &str) {
        self.events
            .publish(self.config, "KubeadmConfig", type_, reason, message)
            .await;
    }

    fn namespace(&self) -> String {
        self.config.namespace().unwrap_or_default()
    }

    fn cluster_initialized(&self) -> bool {
        let status = self.cluster.status.as_ref();
        status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
            c.iter()
                .any(|c| c.is_true(lariat_api::capi::conditions::CONTROL_PLANE_INITIALIZED))
        })
    }

    /// Says what the config waits for, and looks again `after` ([`CLUSTER_WAIT`] for what the
    /// Cluster's watch reports, [`WAIT`] for what nothing it watches reports).
    fn wait(&mut self, reason: &str, message: &str, after: Duration) -> Action {
        cond::mark_false(
            &mut self.conditions,
            cond::DATA_SECRET_AVAILABLE,
            reason,
            Severity::Info,
            message,
        );
        Action::requeue(after)
    }

    /// A problem only a change to the spec fixes: reported, not retried.
    fn invalid(&mut self, reason: &str, message: &str, terminal: bool) -> Action {
        cond::mark_false(
            &mut self.conditions,
            cond::DATA_SECRET_AVAILABLE,
            reason,
            Severity::Error,
            message,
        );
        if terminal {
            self.status["failureReason"] = json!(INVALID_CONFIGURATION_FAILURE);
            self.status["failureMessage"] = json!(message);
        }
        Action::await_change()
    }

    /// The phases, in order; each returns early with the action to take while it waits.
    async fn run(&mut self) -> Result<Action, Error> {
        let name = self.config.name_any();
        let initialized = self.cluster_initialized();

        // Already done: the data must not change once ready, so only the side duty remains.
        if self.status["ready"] == true
            && let Some(secret) = self.status["dataSecretName"].as_str().map(String::from)
        {
            return self.keep_ready(&secret, initialized).await;
        }
        // The Machine already has data (given by the user, or copied before a `lariat move`).
        if let Some(secret) = self.owner.data_secret_name().map(String::from) {
            self.status["ready"] = json!(true);
            self.status["dataSecretName"] = json!(secret);
            cond::mark_true(&mut self.conditions, cond::DATA_SECRET_AVAILABLE);
            return Ok(Action::await_change());
        }

        if self.spec.format == Some(Format::Ignition) {
            let message = "spec.format ignition is not supported: the kubeadm bootstrap provider produces cloud-config only";
            return Ok(self.invalid(cond::UNSUPPORTED_FORMAT_REASON, message, true));
        }
        if self
            .cluster
            .status
            .as_ref()
            .and_then(|s| s.infrastructure_ready)
            != Some(true)
        {
            return Ok(self.wait(
                cond::WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON,
                &format!(
                    "waiting for Cluster {}'s infrastructure to be ready",
                    self.cluster_name
                ),
                CLUSTER_WAIT,
            ));
        }

        let role = match self.elect(initialized).await? {
            Ok(role) => role,
            Err(waiting) => return Ok(waiting),
        };
        if role != Role::Init {
            // Initialized: nobody inits any more, so the lock has done its job.
            lock::release(&self.client, &self.namespace(), &self.cluster_name).await?;
        }

        let certificates = match self.certificates(role).await? {
            Ok(certificates) => certificates,
            Err(waiting) => return Ok(waiting),
        };

        let token = match secrets::join_token(self.caches, self.cluster).await? {
            Ok(token) => token,
            Err(message) => {
                cond::mark_false(
                    &mut self.conditions,
                    cond::DATA_SECRET_AVAILABLE,
                    cond::DATA_SECRET_GENERATION_FAILED_REASON,
                    Severity::Error,
                    &message,
                );
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
        };
        let spec = serde_json::to_value(&self.spec).map_err(|e| Error::Invalid(e.to_string()))?;
        let spec = match secrets::resolve_references(&self.client, &self.namespace(), &spec).await?
        {
            Ok(spec) => spec,
            Err(message) => {
                cond::mark_false(
                    &mut self.conditions,
                    cond::DATA_SECRET_AVAILABLE,
                    cond::DATA_SECRET_GENERATION_FAILED_REASON,
                    Severity::Warning,
                    &message,
                );
                return Ok(Action::requeue(WAIT));
            }
        };
        let facts = ClusterFacts::from_cluster(
            &self.cluster_name,
            &self.cluster.spec,
            self.owner.version(),
        );
        let rendered = cloudinit::render(&RenderInput {
            role,
            spec: &spec,
            facts: &facts,
            certificates: &certificates,
            token: &token,
        });
        let value = match rendered {
            Ok(value) => value,
            Err(RenderError::Kubeadm(KubeadmError::NoEndpoint)) => {
                return Ok(self.wait(
                    cond::WAITING_FOR_CLUSTER_INFRASTRUCTURE_REASON,
                    &format!(
                        "waiting for Cluster {}'s spec.controlPlaneEndpoint",
                        self.cluster_name
                    ),
                    CLUSTER_WAIT,
                ));
            }
            Err(e) => {
                return Ok(self.invalid(cond::INVALID_CONFIGURATION_REASON, &e.to_string(), false));
            }
        };

        if let Some(waiting) = self.write_data(role, &value).await? {
            return Ok(waiting);
        }
        // Contract: the Secret first, then ready.
        self.status["ready"] = json!(true);
        self.status["dataSecretName"] = json!(name);
        cond::mark_true(&mut self.conditions, cond::DATA_SECRET_AVAILABLE);
        Ok(Action::await_change())
    }

    /// The cluster's certificates the node's role needs (generated by the init); `Err` with
    /// the action to wait with while they are missing or unusable (the condition says why).
    async fn certificates(
        &mut self,
        role: Role,
    ) -> Result<Result<crate::certs::ClusterCertificates, Action>, Error> {
        let purposes: &[Purpose] = if role.is_control_plane() {
            &Purpose::ALL
        } else {
            &[Purpose::ClusterCa]
        };
        match secrets::certificates(self.caches, self.cluster, purposes, role == Role::Init).await {
            Ok(Certificates::Available(certificates)) => {
                cond::mark_true(&mut self.conditions, cond::CERTIFICATES_AVAILABLE);
                Ok(Ok(certificates))
            }
            Ok(Certificates::Missing(names)) => {
                cond::mark_false(
                    &mut self.conditions,
                    cond::CERTIFICATES_AVAILABLE,
                    cond::CERTIFICATES_CORRUPTED_REASON,
                    Severity::Warning,
                    &format!(
                        "the cluster is initialized but Secret(s) {} do not exist",
                        names.join(", ")
                    ),
                );
                Ok(Err(Action::requeue(WAIT)))
            }
            Ok(Certificates::Corrupted(message)) => {
                cond::mark_false(
                    &mut self.conditions,
                    cond::CERTIFICATES_AVAILABLE,
                    cond::CERTIFICATES_CORRUPTED_REASON,
                    Severity::Error,
                    &message,
                );
                Ok(Err(Action::requeue(Duration::from_secs(30))))
            }
            Err(Error::Certificates(e)) => {
                cond::mark_false(
                    &mut self.conditions,
                    cond::CERTIFICATES_AVAILABLE,
                    cond::CERTIFICATES_GENERATION_FAILED_REASON,
                    Severity::Warning,
                    &e.to_string(),
                );
                self.finish().await?;
                Err(Error::Certificates(e))
            }
            Err(e) => Err(e),
        }
    }

    /// A ready config's one duty: its data Secret still there (said in
    /// `DataSecretAvailable`), and the init lock released once the cluster is initialized.
    async fn keep_ready(&mut self, secret: &str, initialized: bool) -> Result<Action, Error> {
        let mut role = self
            .caches
            .secrets()
            .get(&self.namespace(), secret)
            .await?
            .map(|data| data.labels().get(ROLE_LABEL).cloned().unwrap_or_default());
        if role.is_none() {
            // The cache may not show yet the Secret this config wrote a moment ago: only
            // the API itself can say it was deleted.
            let secrets: Api<k8s_openapi::api::core::v1::Secret> =
                Api::namespaced(self.client.clone(), &self.namespace());
            role = secrets
                .get_opt(secret)
                .await?
                .map(|data| data.labels().get(ROLE_LABEL).cloned().unwrap_or_default());
        }
        match role {
            Some(role) => {
                cond::mark_true(&mut self.conditions, cond::DATA_SECRET_AVAILABLE);
                let init = role == Role::Init.as_str();
                if initialized && init {
                    lock::release(&self.client, &self.namespace(), &self.cluster_name).await?;
                }
            }
            // Not regenerated: the node may have booted with the old data, and a new
            // render could differ (another role, another token). Replace the Machine.
            None => {
                cond::mark_false(
                    &mut self.conditions,
                    cond::DATA_SECRET_AVAILABLE,
                    cond::DATA_SECRET_GENERATION_FAILED_REASON,
                    Severity::Error,
                    &format!(
                        "Secret {secret} was deleted after the Machine got it; replace the Machine"
                    ),
                );
            }
        }
        Ok(Action::await_change())
    }

    /// Writes the rendered bootstrap data into the config's Secret, with an Event when it
    /// changed; the action to wait with when a Secret of that name is not this config's.
    async fn write_data(&mut self, role: Role, value: &str) -> Result<Option<Action>, Error> {
        let name = self.config.name_any();
        let mut labels = crate::object::cluster_labels(&self.cluster_name);
        labels.insert(ROLE_LABEL.into(), role.as_str().into());
        match secrets::write_data_secret(&self.client, self.config, labels, value).await? {
            DataSecret::Foreign => {
                self.event(
                    EventType::Warning,
                    cond::DATA_SECRET_GENERATION_FAILED_REASON,
                    &format!("Secret {name} exists and is not controlled by this KubeadmConfig"),
                )
                .await;
                cond::mark_false(
                    &mut self.conditions,
                    cond::DATA_SECRET_AVAILABLE,
                    cond::DATA_SECRET_GENERATION_FAILED_REASON,
                    Severity::Error,
                    &format!(
                        "Secret {name} exists and is not controlled by this KubeadmConfig; delete or rename it"
                    ),
                );
                return Ok(Some(Action::requeue(Duration::from_secs(30))));
            }
            DataSecret::Unchanged => {}
            written => {
                tracing::info!(role = role.as_str(), ?written, "wrote bootstrap data");
                self.event(
                    EventType::Normal,
                    "BootstrapDataWritten",
                    &format!(
                        "Wrote bootstrap data Secret {name}: cloud-init that runs kubeadm {}",
                        role.as_str()
                    ),
                )
                .await;
            }
        }
        Ok(None)
    }

    /// Decides init or join; `Err` with the action to wait with while the node has to wait
    /// (the condition says why).
    ///
    /// Joins wait for the Cluster's `ControlPlaneInitialized`. Before that, one control-plane
    /// Machine inits: it must be a control-plane Machine whose config is not join-only, no other
    /// config of the cluster may have bootstrap data already, and it must hold the init lock.
    /// What the Cluster's watch reports ends a wait at once; the lock's holder going away, or
    /// the other config's data, is reported by nothing this config watches, so those waits
    /// look again after [`WAIT`].
    async fn elect(&mut self, initialized: bool) -> Result<Result<Role, Action>, Error> {
        if initialized {
            return Ok(Ok(if self.owner.is_control_plane() {
                Role::JoinControlPlane
            } else {
                Role::JoinWorker
            }));
        }
        let waiting =
            |who: &str| format!("waiting for the control plane to be initialized ({who})");
        if !self.owner.is_control_plane() || join_only(&self.spec) {
            return Ok(Err(self.wait(
                cond::WAITING_FOR_CONTROL_PLANE_AVAILABLE_REASON,
                &waiting("this node joins it"),
                CLUSTER_WAIT,
            )));
        }
        if let Some((other, role)) = self.other_bootstrap_data().await? {
            let who = match role.as_str() {
                "init" => format!("KubeadmConfig {other} has the init data"),
                _ => format!("KubeadmConfig {other} already joined this cluster"),
            };
            return Ok(Err(self.wait(
                cond::WAITING_FOR_CONTROL_PLANE_AVAILABLE_REASON,
                &waiting(&who),
                WAIT,
            )));
        }
        let Some(machine) = self.owner.machine() else {
            return Ok(Err(Action::requeue(CLUSTER_WAIT)));
        };
        match lock::acquire(&self.client, self.cluster, machine).await? {
            Lock::Held => Ok(Ok(Role::Init)),
            Lock::HeldBy(holder) => Ok(Err(self.wait(
                cond::WAITING_FOR_CONTROL_PLANE_AVAILABLE_REASON,
                &waiting(&format!("Machine {holder} holds the init lock")),
                WAIT,
            ))),
        }
    }

    /// Another existing config of this cluster that already has bootstrap data, and its role.
    /// Read from the cache of clusters' Secrets (indexed by cluster), not listed: a list by
    /// label reads every Secret of the namespace, and each control-plane config waiting for
    /// the first one asked at every wake-up (at 1,000 clusters, a fifth of the server's CPU).
    async fn other_bootstrap_data(&self) -> Result<Option<(String, String)>, Error> {
        let secrets = self.caches.secrets();
        secrets.synced().await?;
        let namespace = self.namespace();
        let configs = self.caches.of(&kubeadm_config_resource());
        for secret in secrets.indexed_now(IndexKey::Cluster {
            namespace: &namespace,
            name: &self.cluster_name,
        }) {
            let Some(role) = secret.labels().get(ROLE_LABEL) else {
                continue;
            };
            if secret.name_any() == self.config.name_any() {
                continue;
            }
            let Some(owner) = secret
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true) && o.kind == "KubeadmConfig")
            else {
                continue;
            };
            // Data whose config is gone (or going) is garbage waiting for collection.
            let live = configs.get(&namespace, &owner.name).await?.filter(|c| {
                c.uid().as_deref() == Some(owner.uid.as_str())
                    && c.metadata.deletion_timestamp.is_none()
            });
            if live.is_some() {
                return Ok(Some((owner.name.clone(), role.clone())));
            }
        }
        Ok(None)
    }

    /// Summarizes `Ready` and writes the status if it changed.
    async fn finish(&mut self) -> Result<(), Error> {
        if cond::is_true(&self.conditions, cond::DATA_SECRET_AVAILABLE)
            && self.status["failureReason"].is_string()
        {
            let status = self.status.as_object_mut().expect("status is an object");
            status.remove("failureReason");
            status.remove("failureMessage");
        }
        cond::summarize(&mut self.conditions);
        self.status["conditions"] = json!(self.conditions);
        self.status["observedGeneration"] = json!(self.config.metadata.generation.unwrap_or(0));
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace(),
            &kubeadm_config_resource(),
        );
        write_status(&api, self.config, &self.status).await?;
        Ok(())
    }
}

/// A config with only a join configuration (as KubeadmControlPlane writes for every Machine
/// after the first) is meant to join, never to init.
fn join_only(spec: &KubeadmConfigSpec) -> bool {
    spec.join_configuration.is_some()
        && spec.init_configuration.is_none()
        && spec.cluster_configuration.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_only_configs_never_init() {
        let check = |spec: Value, expect: bool| {
            let typed: KubeadmConfigSpec = serde_json::from_value(spec.clone()).unwrap();
            assert_eq!(join_only(&typed), expect, "{spec}")
        };
        check(json!({}), false);
        check(json!({"joinConfiguration": {}}), true);
        check(
            json!({"joinConfiguration": {}, "initConfiguration": {}}),
            false,
        );
        check(
            json!({"joinConfiguration": {}, "clusterConfiguration": {}}),
            false,
        );
        check(json!({"initConfiguration": {}}), false);
    }
}
