//! The Secrets this provider keeps in the management cluster: the cluster certificates
//! (`<cluster>-ca`, `-etcd`, `-proxy`, `-sa`), the join token (`<cluster>-bootstrap-token`) and
//! each config's bootstrap data (`<config>`).
//!
//! Cluster Secrets are created with create-if-absent semantics: whoever creates one first
//! (this provider for another Machine, the control plane provider, or the user ahead of time)
//! wins, and everyone else reads theirs. They are owned by the Cluster, not as controller, so
//! they go with it and a control plane provider may still claim them as their controller.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ObjectMeta};
use kube::{Client, ResourceExt};
use lariat_api::capi::Cluster;
use lariat_controllers::cache::Caches;

use crate::Error;
use crate::certs::{self, ClusterCertificates, KeyPairPem, Purpose};
use crate::object::{cluster_labels, is_status, owner_reference, post_params};
use crate::token::{BootstrapToken, NODE_BOOTSTRAP_GROUP};

/// The Secret type Cluster API gives everything it writes.
pub const CLUSTER_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";

/// What the cluster certificates look like right now.
#[derive(Debug)]
pub enum Certificates {
    Available(ClusterCertificates),
    /// Not there, and not this reconcile's to generate (joins never generate).
    Missing(Vec<String>),
    /// There, but unusable; a human has to look.
    Corrupted(String),
}

fn cluster_secret(cluster: &Cluster, name: String, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: cluster.namespace(),
            labels: Some(cluster_labels(&cluster.name_any())),
            owner_references: Some(vec![owner_reference(
                cluster,
                "cluster.x-k8s.io/v1beta1",
                "Cluster",
                false,
            )]),
            ..Default::default()
        },
        type_: Some(CLUSTER_SECRET_TYPE.into()),
        data: Some(data),
        ..Default::default()
    }
}

/// Creates `secret` unless one of that name exists; returns the one that exists afterwards.
/// A Secret from the shared cache. One not there yet (created a moment ago by another
/// reconcile) is created again, answered 409, and then read from the API.
async fn cached(caches: &Caches, namespace: &str, name: &str) -> Result<Option<Secret>, Error> {
    let Some(object) = caches.secrets().get(namespace, name).await? else {
        return Ok(None);
    };
    let secret = serde_json::to_value(object.as_ref())
        .and_then(serde_json::from_value)
        .map_err(|e| lariat_controllers::Error::Invalid(format!("Secret {name}: {e}")))?;
    Ok(Some(secret))
}

async fn create_if_absent(api: &Api<Secret>, secret: Secret) -> Result<Secret, Error> {
    match api.create(&post_params(), &secret).await {
        Ok(created) => Ok(created),
        // Lost the race to another reconcile or provider: theirs is the one.
        Err(e) if is_status(&e, 409) => Ok(api.get(&secret.name_any()).await?),
        Err(e) => Err(e.into()),
    }
}

fn text(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

/// The key pairs `purposes` names, generating missing ones when `generate` (init only:
/// generating a CA for a join would make a node that trusts nothing the cluster runs).
pub async fn certificates(
    caches: &Caches,
    cluster: &Cluster,
    purposes: &[Purpose],
    generate: bool,
) -> Result<Certificates, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(caches.client().clone(), &namespace);
    let mut pairs = vec![];
    let mut missing = vec![];
    for &purpose in purposes {
        let name = purpose.secret_name(&cluster.name_any());
        let secret = match cached(caches, &namespace, &name).await? {
            Some(secret) => secret,
            None if generate => {
                let pair = certs::generate(purpose)?;
                tracing::info!(cluster = %crate::object::key(cluster), secret = %name, "generated {}", purpose.describe());
                let data = BTreeMap::from([
                    ("tls.crt".to_string(), ByteString(pair.cert.into_bytes())),
                    ("tls.key".to_string(), ByteString(pair.key.into_bytes())),
                ]);
                create_if_absent(&api, cluster_secret(cluster, name.clone(), data)).await?
            }
            None => {
                missing.push(name);
                continue;
            }
        };
        let pair = KeyPairPem {
            cert: text(&secret, "tls.crt"),
            key: text(&secret, "tls.key"),
        };
        if let Err(e) = certs::validate(purpose, &pair) {
            return Ok(Certificates::Corrupted(format!("Secret {name}: {e}")));
        }
        pairs.push((purpose, pair));
    }
    if !missing.is_empty() {
        return Ok(Certificates::Missing(missing));
    }
    Ok(Certificates::Available(ClusterCertificates { pairs }))
}

/// The name of the management Secret holding the cluster's join token.
pub fn token_secret_name(cluster: &str) -> String {
    format!("{cluster}-bootstrap-token")
}

/// The cluster's join token, created on first use and reused by every node after.
///
/// The Secret has the data keys of a workload cluster's `bootstrap.kubernetes.io/token` Secret
/// (so it can be copied there as it is), but Cluster API's type: it is not a token of the
/// management cluster. `Err` carries a message when a stored token is unreadable.
pub async fn join_token(
    caches: &Caches,
    cluster: &Cluster,
) -> Result<Result<BootstrapToken, String>, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(caches.client().clone(), &namespace);
    let name = token_secret_name(&cluster.name_any());
    let secret = match cached(caches, &namespace, &name).await? {
        Some(secret) => secret,
        None => {
            let token = BootstrapToken::generate();
            let data = [
                ("token-id", token.id.clone()),
                ("token-secret", token.secret.clone()),
                (
                    "description",
                    format!("lariat: joins nodes to cluster {}", cluster.name_any()),
                ),
                ("usage-bootstrap-authentication", "true".into()),
                ("usage-bootstrap-signing", "true".into()),
                ("auth-extra-groups", NODE_BOOTSTRAP_GROUP.into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
            .collect();
            create_if_absent(&api, cluster_secret(cluster, name.clone(), data)).await?
        }
    };
    Ok(
        BootstrapToken::from_parts(&text(&secret, "token-id"), &text(&secret, "token-secret"))
            .ok_or_else(|| {
                format!("Secret {name} does not hold a token-id and token-secret in the bootstrap token format")
            }),
    )
}

/// What writing the data Secret did.
#[derive(Debug, PartialEq, Eq)]
pub enum DataSecret {
    Created,
    Updated,
    Unchanged,
    /// A Secret of that name exists and belongs to something else; it is left alone.
    Foreign,
}

/// Writes the bootstrap data Secret named after the config: created, replaced when its data
/// differs (only ever before `status.ready`), and otherwise left untouched so a reconcile that
/// renders the same data writes nothing.
pub async fn write_data_secret(
    client: &Client,
    config: &DynamicObject,
    labels: BTreeMap<String, String>,
    value: &str,
) -> Result<DataSecret, Error> {
    let namespace = config.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let data = BTreeMap::from([
        ("value".to_string(), ByteString(value.as_bytes().to_vec())),
        ("format".to_string(), ByteString(b"cloud-config".to_vec())),
    ]);
    let owner = owner_reference(
        config,
        lariat_api::bootstrap::API_VERSION,
        "KubeadmConfig",
        true,
    );
    match api.get_opt(&config.name_any()).await? {
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(config.name_any()),
                    namespace: Some(namespace),
                    labels: Some(labels),
                    owner_references: Some(vec![owner]),
                    ..Default::default()
                },
                type_: Some(CLUSTER_SECRET_TYPE.into()),
                data: Some(data),
                ..Default::default()
            };
            // A 409 (created since we looked) fails this reconcile; the retry compares it.
            api.create(&post_params(), &secret).await?;
            Ok(DataSecret::Created)
        }
        Some(mut existing) => {
            let ours = existing
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == config.uid().as_ref());
            if !ours {
                return Ok(DataSecret::Foreign);
            }
            let current_labels = existing.labels();
            let labels_match = labels.iter().all(|(k, v)| current_labels.get(k) == Some(v));
            if existing.data.as_ref() == Some(&data) && labels_match {
                return Ok(DataSecret::Unchanged);
            }
            existing.data = Some(data);
            existing.labels_mut().extend(labels);
            api.replace(&config.name_any(), &post_params(), &existing)
                .await?;
            Ok(DataSecret::Updated)
        }
    }
}

/// Resolves `spec.files[].contentFrom` and `spec.users[].passwdFrom` to inline values from
/// Secrets in the config's namespace, as Cluster API does at render time. `Err` carries a
/// message naming what is missing; the user can fix it by creating the Secret.
pub async fn resolve_references(
    client: &Client,
    namespace: &str,
    spec: &serde_json::Value,
) -> Result<Result<serde_json::Value, String>, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut spec = spec.clone();
    for (list, source, target) in [
        ("files", "contentFrom", "content"),
        ("users", "passwdFrom", "passwd"),
    ] {
        let Some(items) = spec[list].as_array_mut() else {
            continue;
        };
        for (index, item) in items.iter_mut().enumerate() {
            let reference = &item[source]["secret"];
            let (Some(name), Some(key)) = (reference["name"].as_str(), reference["key"].as_str())
            else {
                continue;
            };
            let (name, key) = (name.to_string(), key.to_string());
            let Some(secret) = api.get_opt(&name).await? else {
                return Ok(Err(format!(
                    "spec.{list}[{index}].{source}: Secret {name} not found"
                )));
            };
            let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&key)) else {
                return Ok(Err(format!(
                    "spec.{list}[{index}].{source}: Secret {name} has no key {key}"
                )));
            };
            let Ok(value) = String::from_utf8(bytes.0.clone()) else {
                return Ok(Err(format!(
                    "spec.{list}[{index}].{source}: key {key} of Secret {name} is not UTF-8 text (store it base64-encoded and set encoding)"
                )));
            };
            if let Some(object) = item.as_object_mut() {
                object.remove(source);
                object.insert(target.into(), serde_json::Value::String(value));
            }
        }
    }
    Ok(Ok(spec))
}
