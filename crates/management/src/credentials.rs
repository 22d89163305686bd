//! The agents' credentials, all through the API: registration tokens (ClusterRegistrationTokens,
//! only the secret's hash stored) that register one Cluster once, and the cluster credential
//! (a Secret in `lariat-system`, hashed) an agent is issued when it registers and dials with
//! from then on, which is also its identity on the API (see `agents.rs`).

use k8s_openapi::api::core::v1::Secret;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use lariat_api::management::{self, AGENT_CREDENTIAL_TYPE, NAMESPACE};
use lariat_apiserver::identity::{same_secret, sha256_hex};
use lariat_apiserver::status::ApiError;
use serde_json::json;

use crate::records::cluster_resource;

/// On agent credential Secrets: which Cluster the credential belongs to (see [`cluster_label`]).
pub(crate) const CLUSTER_LABEL: &str = "management.lariat.dev/cluster";

/// A label value for a Cluster (`namespace/name` may be longer than a label allows).
pub(crate) fn cluster_label(cluster: &str) -> String {
    sha256_hex(cluster)[..40].to_string()
}
fn random(len: usize) -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// A new token `<id>.<secret>` and the hash of its secret.
pub fn new_token() -> (String, String, String) {
    let (id, secret, hash) = new_token_parts();
    (format!("{id}.{secret}"), id, hash)
}

/// A new token's id, secret and the secret's SHA-256 (hex), for tokens of other shapes.
pub fn new_token_parts() -> (String, String, String) {
    let (id, secret) = (random(6), random(32));
    let hash = sha256_hex(&secret);
    (id, secret, hash)
}

/// Creates a ClusterRegistrationToken for the Cluster `namespace/name` valid for `ttl`,
/// through any client, and returns the token (`<id>.<secret>`); only the secret's hash is
/// stored. The token registers that Cluster only, by uid: not one created again under its
/// name.
pub async fn create_registration_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    ttl: Duration,
) -> kube::Result<String> {
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &cluster_resource());
    let uid = clusters.get(name).await?.metadata.uid.unwrap_or_default();
    let (token, id, hash) = new_token();
    let expires =
        chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::days(1));
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &management::registration_token_resource(),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": management::API_VERSION,
        "kind": "ClusterRegistrationToken",
        "metadata": {"name": id, "namespace": NAMESPACE},
        "spec": {"clusterNamespace": namespace, "clusterName": name, "clusterUID": uid, "tokenHash": hash,
                 "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
    }))
    .expect("a well-formed ClusterRegistrationToken");
    tokens.create(&PostParams::default(), &object).await?;
    Ok(token)
}

/// Whom an agent's bearer token identifies.
pub(crate) struct Identity {
    /// `namespace/name` of the Cluster.
    pub(crate) cluster: String,
    /// Whether it was a registration token (so the agent needs a credential of its own).
    pub(crate) registering: bool,
}

/// What any token that is not a live one gets, whichever way it is wrong: telling a wrong
/// secret from an unknown id would let anyone find out which clusters exist (a credential's
/// id is derived from its cluster's name).
const UNKNOWN_TOKEN: &str =
    "unknown, revoked or wrong agent token: create a new one with lariat cluster import";

/// A refused agent credential, answered with what was wrong (whoever asked counts and logs
/// the refusal, with the path and address it came to).
fn unauthorized(message: &str) -> ApiError {
    tracing::debug!("agent refused: {message}");
    ApiError::Forbidden {
        message: message.to_string(),
    }
}

/// The Cluster a still-valid registration token registers.
pub async fn registration_cluster(client: &kube::Client, token: &str) -> Result<String, ApiError> {
    match authenticate(client, token).await? {
        Identity {
            cluster,
            registering: true,
        } => Ok(cluster),
        _ => Err(unauthorized("not a registration token")),
    }
}

/// An agent token's id and the SHA-256 (hex) of its secret, if it is shaped as one.
pub(crate) fn token_parts(token: &str) -> Result<(&str, String), ApiError> {
    let Some((id, secret)) = token.split_once('.') else {
        return Err(unauthorized(
            "malformed agent token: expected <id>.<secret>",
        ));
    };
    if id.is_empty()
        || id.len() > 63
        || !id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return Err(unauthorized("malformed agent token id"));
    }
    Ok((id, sha256_hex(secret)))
}

/// The name of the Secret holding the agent credential whose token id is `id`.
pub(crate) fn credential_secret_name(id: &str) -> String {
    format!("agent-{id}")
}

/// What an agent credential Secret (as JSON) says: the Cluster (`namespace/name`) it was
/// issued for and that Cluster's uid, if it is one and the secret's hash is `hash`.
pub(crate) fn credential_owner(secret: &serde_json::Value, hash: &str) -> Option<(String, String)> {
    if secret["type"] != AGENT_CREDENTIAL_TYPE {
        return None;
    }
    let field = |key: &str| -> String {
        secret["data"][key]
            .as_str()
            .and_then(|v| {
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, v).ok()
            })
            .map(|v| String::from_utf8_lossy(&v).to_string())
            .unwrap_or_default()
    };
    same_secret(field("hash").as_bytes(), hash.as_bytes()).then(|| (field("cluster"), field("uid")))
}

/// Whether a Cluster (as JSON) is the live one of uid `uid`: a credential dies with its
/// Cluster, and is not one created again under the same name.
pub(crate) fn is_live_cluster(cluster: Option<&DynamicObject>, uid: &str) -> bool {
    cluster
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .and_then(|c| c.metadata.uid.as_deref())
        .is_some_and(|live| same_secret(live.as_bytes(), uid.as_bytes()))
}

/// Checks a bearer token: first as an agent credential, then as a registration token. Every
/// refusal says what was wrong, without echoing the secret.
pub(crate) async fn authenticate(client: &kube::Client, token: &str) -> Result<Identity, ApiError> {
    let (id, hash) = token_parts(token)?;
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &kube::core::ApiResource::erase::<Secret>(&()),
    );
    if let Some(credential) = secrets
        .get_opt(&credential_secret_name(id))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .filter(|s| s.data["type"] == AGENT_CREDENTIAL_TYPE)
    {
        let Some((cluster, uid)) = credential_owner(&credential.data, &hash) else {
            return Err(unauthorized(UNKNOWN_TOKEN));
        };
        if !is_live_cluster(live_cluster(client, &cluster).await?.as_ref(), &uid) {
            return Err(unauthorized(
                "the cluster this agent credential was issued for no longer exists: import the cluster again",
            ));
        }
        return Ok(Identity {
            cluster,
            registering: false,
        });
    }
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &management::registration_token_resource(),
    );
    let Some(registration) = tokens
        .get_opt(id)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    else {
        return Err(unauthorized(UNKNOWN_TOKEN));
    };
    let spec = &registration.data["spec"];
    if !same_secret(
        spec["tokenHash"].as_str().unwrap_or_default().as_bytes(),
        hash.as_bytes(),
    ) {
        return Err(unauthorized(UNKNOWN_TOKEN));
    }
    let expired = spec["expirationTimestamp"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_none_or(|t| t < chrono::Utc::now());
    if expired {
        return Err(unauthorized(
            "expired registration token: create a new one with lariat cluster import",
        ));
    }
    let cluster = format!(
        "{}/{}",
        spec["clusterNamespace"].as_str().unwrap_or_default(),
        spec["clusterName"].as_str().unwrap_or_default()
    );
    let issued_for = spec["clusterUID"].as_str().unwrap_or_default();
    match cluster_uid(client, &cluster).await? {
        Some(uid) if same_secret(uid.as_bytes(), issued_for.as_bytes()) => {}
        _ => {
            return Err(unauthorized(
                "the cluster this registration token is for no longer exists: import the cluster again",
            ));
        }
    }
    Ok(Identity {
        cluster,
        registering: true,
    })
}

/// The Cluster (`namespace/name`) whose agent credential `token` is, if it is a live one; a
/// registration token, or anything else, is `None`.
pub(crate) async fn credential_cluster(client: &kube::Client, token: &str) -> Option<String> {
    match authenticate(client, token).await {
        Ok(Identity {
            cluster,
            registering: false,
        }) => Some(cluster),
        _ => None,
    }
}

/// The Cluster `namespace/name`, read from the store.
async fn live_cluster(
    client: &kube::Client,
    cluster: &str,
) -> Result<Option<DynamicObject>, ApiError> {
    let Some((namespace, name)) = cluster.split_once('/') else {
        return Ok(None);
    };
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &cluster_resource());
    clusters
        .get_opt(name)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// The uid of the Cluster `namespace/name`, if it exists and is not being deleted.
pub(crate) async fn cluster_uid(
    client: &kube::Client,
    cluster: &str,
) -> Result<Option<String>, ApiError> {
    Ok(live_cluster(client, cluster)
        .await?
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .and_then(|c| c.metadata.uid))
}

/// Issues the credential a registered agent uses from now on (so its registration token can
/// expire). A Cluster has one credential Secret, named after it, so issuing a new one retires
/// the previous one in the same write.
pub(crate) async fn issue_credential(
    client: &kube::Client,
    cluster: &str,
) -> Result<String, ApiError> {
    let uid = cluster_uid(client, cluster)
        .await?
        .ok_or_else(|| unauthorized("the cluster to register no longer exists"))?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let id = cluster_label(cluster)[..20].to_string();
    let secret = random(32);
    let name = format!("agent-{id}");
    let object: Secret = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {CLUSTER_LABEL: cluster_label(cluster)}},
        "type": AGENT_CREDENTIAL_TYPE,
        "data": {
            "hash": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sha256_hex(&secret)),
            "cluster": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, cluster),
            "uid": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, uid),
        },
    }))
    .expect("a well-formed Secret");
    secrets
        .patch(
            &name,
            &kube::api::PatchParams::apply("lariat-tunnel").force(),
            &kube::api::Patch::Apply(&object),
        )
        .await
        .map_err(|e| ApiError::internal(format!("cannot store the agent credential: {e}")))?;
    Ok(format!("{id}.{secret}"))
}

pub(crate) async fn consume_registration_token(client: &kube::Client, token: &str) {
    let id = token.split('.').next().unwrap_or_default();
    let tokens: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &management::registration_token_resource(),
    );
    if let Err(error) = tokens.delete(id, &Default::default()).await {
        tracing::warn!(%error, "cannot delete a used registration token");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_id_dot_secret_and_hashes_match() {
        let (token, id, hash) = new_token();
        let (token_id, secret) = token.split_once('.').unwrap();
        assert_eq!(token_id, id);
        assert_eq!(secret.len(), 32);
        assert_eq!(sha256_hex(secret), hash);
    }
}
