//! ServiceAccount tokens as kube-apiserver issues them (`kubectl create token SA`): a
//! TokenRequest on `serviceaccounts/NAME/token` returns a JWT signed with this domain's
//! service-account key (ES256), naming the account by namespace, name and uid. The token is
//! accepted only here (this domain's key and issuer, and this API's audience), only until it
//! expires, and only while its ServiceAccount (and the Secret or Node it is bound to) exists
//! with the uid it was issued for: deleting the account revokes every token it had.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Digest;

use crate::identity::User;
use crate::resources::Resources;
use crate::status::{ApiError, ApiResult, Cause};

/// The issuer (and API audience) of the management plane's tokens, unless
/// `--service-account-issuer` names another.
pub const DEFAULT_ISSUER: &str = "https://lariat.default.svc";
/// The issuer of a simulated workload cluster's tokens, as a real cluster's default. Each such
/// cluster has its own key, so one's tokens are refused by every other.
pub const CLUSTER_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// kubectl's and kube-apiserver's default lifetime of a requested token.
const DEFAULT_LIFETIME: u64 = 3600;
/// kube-apiserver refuses shorter ones.
const MIN_LIFETIME: u64 = 600;
/// kube-apiserver refuses longer ones; lariat then caps what it grants at `max_lifetime`.
const MAX_REQUESTABLE: u64 = 1 << 32;

/// The kinds a token may be bound to (it dies with the object), as kube-apiserver's
/// `spec.boundObjectRef` (Pods are not served here).
const BINDABLE: [(&str, &str, bool); 2] = [("Secret", "secrets", true), ("Node", "nodes", false)];

/// One domain's signing key and what it issues.
pub struct ServiceAccounts {
    issuer: String,
    key_id: String,
    signing: EncodingKey,
    verifying: DecodingKey,
    /// The longest lifetime granted; longer requests get this, as with kube-apiserver's
    /// `--service-account-max-token-expiration`.
    max_lifetime: Duration,
    resources: Resources,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: Vec<String>,
    exp: i64,
    iat: i64,
    nbf: i64,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kubernetes: KubernetesClaims,
}

#[derive(Serialize, Deserialize)]
struct KubernetesClaims {
    namespace: String,
    serviceaccount: ObjectClaim,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<ObjectClaim>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node: Option<ObjectClaim>,
}

#[derive(Serialize, Deserialize)]
struct ObjectClaim {
    name: String,
    uid: String,
}

impl ServiceAccounts {
    /// The key at `path` (PKCS#8 PEM), created on first use, readable by its owner only.
    pub fn load_or_create(
        path: &Path,
        issuer: &str,
        max_lifetime: Duration,
        resources: Resources,
    ) -> Result<ServiceAccounts, String> {
        if issuer.is_empty() {
            return Err(
                "--service-account-issuer may not be empty: it names who signed the tokens".into(),
            );
        }
        if max_lifetime < Duration::from_secs(3600) {
            return Err(
                "--service-account-max-token-expiration must be at least 1h, as kube-apiserver's"
                    .into(),
            );
        }
        Self::with_key(&load_or_create_key(path)?, issuer, max_lifetime, resources)
    }

    /// A key that lives as long as the process: a simulated cluster's.
    pub fn in_memory(issuer: &str, resources: Resources) -> Result<ServiceAccounts, String> {
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        Self::with_key(&key, issuer, Duration::from_secs(86400), resources)
    }

    fn with_key(
        key: &rcgen::KeyPair,
        issuer: &str,
        max_lifetime: Duration,
        resources: Resources,
    ) -> Result<ServiceAccounts, String> {
        if !key.is_compatible(&rcgen::PKCS_ECDSA_P256_SHA256) {
            return Err("the service-account key must be an ECDSA P-256 key".into());
        }
        // The uncompressed point: 0x04, then x and y.
        let point = key.public_key_raw();
        let (x, y) = (
            URL_SAFE_NO_PAD.encode(&point[1..33]),
            URL_SAFE_NO_PAD.encode(&point[33..]),
        );
        let key_id = URL_SAFE_NO_PAD.encode(&sha2::Sha256::digest(key.public_key_raw())[..]);
        Ok(ServiceAccounts {
            issuer: issuer.to_string(),
            signing: EncodingKey::from_ec_der(&key.serialize_der()),
            verifying: DecodingKey::from_ec_components(&x, &y).map_err(|e| e.to_string())?,
            key_id,
            max_lifetime,
            resources,
        })
    }

    /// Answers a TokenRequest for ServiceAccount `namespace/name`: the request completed with
    /// its defaults, and `status.token` and `status.expirationTimestamp`.
    pub async fn request_token(
        &self,
        namespace: &str,
        name: &str,
        mut request: Value,
    ) -> ApiResult<Value> {
        let invalid =
            |causes| ApiError::invalid("TokenRequest", "authentication.k8s.io", name, causes);
        if let Some(kind) = request["kind"].as_str().filter(|k| *k != "TokenRequest") {
            return Err(ApiError::bad_request(format!(
                "the body of serviceaccounts/token is a TokenRequest (authentication.k8s.io/v1), not a {kind}"
            )));
        }
        // As kube-apiserver: a body naming another namespace is not quietly re-aimed.
        if let Some(other) = request["metadata"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty() && *n != namespace)
        {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({other}) does not match the namespace sent on the request ({namespace})"
            )));
        }
        let spec = &request["spec"];
        if !spec.is_object() && !spec.is_null() {
            return Err(invalid(vec![Cause::type_invalid("spec", spec, "object")]));
        }
        if !spec["audiences"].is_array() && !spec["audiences"].is_null() {
            return Err(invalid(vec![Cause::type_invalid(
                "spec.audiences",
                &spec["audiences"],
                "array",
            )]));
        }
        let requested = match &spec["expirationSeconds"] {
            Value::Null => DEFAULT_LIFETIME,
            value => match value
                .as_i64()
                .map(|s| u64::try_from(s).unwrap_or(0))
                .or(value.as_u64())
            {
                Some(seconds) if seconds < MIN_LIFETIME => {
                    return Err(invalid(vec![Cause::invalid(
                        "spec.expirationSeconds",
                        value,
                        "may not specify a duration less than 10 minutes",
                    )]));
                }
                Some(seconds) if seconds > MAX_REQUESTABLE => {
                    return Err(invalid(vec![Cause::invalid(
                        "spec.expirationSeconds",
                        value,
                        "may not specify a duration larger than 2^32 seconds",
                    )]));
                }
                Some(seconds) => seconds,
                None => {
                    return Err(invalid(vec![Cause::type_invalid(
                        "spec.expirationSeconds",
                        value,
                        "integer",
                    )]));
                }
            },
        };
        let lifetime = requested.min(self.max_lifetime.as_secs());
        let mut audiences = Vec::new();
        for (i, audience) in spec["audiences"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            match audience.as_str().filter(|a| !a.is_empty()) {
                Some(a) => audiences.push(a.to_string()),
                None => {
                    return Err(invalid(vec![Cause::invalid(
                        format!("spec.audiences[{i}]"),
                        audience,
                        "must be a non-empty string",
                    )]));
                }
            }
        }
        if audiences.is_empty() {
            audiences.push(self.issuer.clone());
        }
        let account = self
            .resources
            .get(&self.scope("serviceaccounts", Some(namespace))?, name)
            .await?;
        let mut claims = Claims {
            iss: self.issuer.clone(),
            sub: format!("system:serviceaccount:{namespace}:{name}"),
            aud: audiences.clone(),
            exp: 0,
            iat: 0,
            nbf: 0,
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes: KubernetesClaims {
                namespace: namespace.to_string(),
                serviceaccount: ObjectClaim {
                    name: name.to_string(),
                    uid: uid_of(&account),
                },
                secret: None,
                node: None,
            },
        };
        let bound = &spec["boundObjectRef"];
        if !bound.is_null() {
            let (kind, object) = self.bound_object(namespace, bound, &invalid).await?;
            match kind {
                "Secret" => claims.kubernetes.secret = Some(object),
                _ => claims.kubernetes.node = Some(object),
            }
        }
        let now = chrono::Utc::now();
        let expires = now + chrono::Duration::seconds(lifetime as i64);
        (claims.iat, claims.nbf, claims.exp) =
            (now.timestamp(), now.timestamp(), expires.timestamp());
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.key_id.clone());
        let token = jsonwebtoken::encode(&header, &claims, &self.signing)
            .map_err(|e| ApiError::internal(format!("signing the token: {e}")))?;
        request["apiVersion"] = json!("authentication.k8s.io/v1");
        request["kind"] = json!("TokenRequest");
        request["metadata"] = json!({
            "name": name,
            "namespace": namespace,
            "creationTimestamp": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
        if !request["spec"].is_object() {
            request["spec"] = json!({});
        }
        request["spec"]["audiences"] = json!(audiences);
        request["spec"]["expirationSeconds"] = json!(lifetime);
        request["status"] = json!({
            "token": token,
            "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
        Ok(request)
    }

    /// The object `spec.boundObjectRef` names, which must exist (with its uid, when given).
    async fn bound_object(
        &self,
        namespace: &str,
        bound: &Value,
        invalid: &impl Fn(Vec<Cause>) -> ApiError,
    ) -> ApiResult<(&'static str, ObjectClaim)> {
        let kind = bound["kind"].as_str().unwrap_or_default();
        let Some((kind, plural, namespaced)) = BINDABLE.iter().find(|(k, _, _)| *k == kind) else {
            return Err(invalid(vec![Cause::not_supported(
                "spec.boundObjectRef.kind",
                &bound["kind"],
                &BINDABLE.map(|(k, _, _)| json!(k)),
            )]));
        };
        let Some(name) = bound["name"].as_str().filter(|n| !n.is_empty()) else {
            return Err(invalid(vec![Cause::required("spec.boundObjectRef.name")]));
        };
        let object = self
            .resources
            .get(&self.scope(plural, namespaced.then_some(namespace))?, name)
            .await?;
        let uid = uid_of(&object);
        if let Some(wanted) = bound["uid"].as_str().filter(|u| !u.is_empty() && *u != uid) {
            return Err(ApiError::Conflict {
                message: format!(
                    "the uid in spec.boundObjectRef ({wanted}) is not that of {kind} {name:?}: it may have been deleted and made again"
                ),
                target: None,
                causes: vec![],
            });
        }
        Ok((
            kind,
            ObjectClaim {
                name: name.to_string(),
                uid,
            },
        ))
    }

    /// The ServiceAccount behind `token` (whose unchecked `iss` is `issuer`), if this domain
    /// signed it for this API, it has not expired, and what it names still exists with the
    /// uid it was issued for. `None` when the token is another issuer's, so another
    /// authenticator may try it.
    pub async fn authenticate(&self, token: &str, issuer: &str) -> ApiResult<Option<User>> {
        if issuer != self.issuer {
            return Ok(None);
        }
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.issuer]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        let Ok(data) = jsonwebtoken::decode::<Claims>(token, &self.verifying, &validation) else {
            return Err(ApiError::Unauthorized);
        };
        let claims = data.claims.kubernetes;
        let namespace = claims.namespace.as_str();
        let mut live = self
            .exists("serviceaccounts", Some(namespace), &claims.serviceaccount)
            .await?;
        if let Some(secret) = &claims.secret {
            live &= self.exists("secrets", Some(namespace), secret).await?;
        }
        if let Some(node) = &claims.node {
            live &= self.exists("nodes", None, node).await?;
        }
        if !live {
            return Err(ApiError::Unauthorized);
        }
        Ok(Some(User {
            name: format!(
                "system:serviceaccount:{namespace}:{}",
                claims.serviceaccount.name
            ),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
            ],
        }))
    }

    async fn exists(
        &self,
        plural: &str,
        namespace: Option<&str>,
        object: &ObjectClaim,
    ) -> ApiResult<bool> {
        match self
            .resources
            .get(&self.scope(plural, namespace)?, &object.name)
            .await
        {
            Ok(found) => Ok(
                uid_of(&found) == object.uid && found["metadata"]["deletionTimestamp"].is_null()
            ),
            Err(ApiError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn scope(&self, plural: &str, namespace: Option<&str>) -> ApiResult<crate::resources::Scope> {
        self.resources
            .scope("", plural, namespace)
            .ok_or_else(|| ApiError::internal(format!("{plural} are not served")))
    }
}

fn uid_of(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The `iss` claim of a JWT, read without checking anything: which authenticator to ask.
pub fn issuer_of(token: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims["iss"].as_str().map(String::from)
}

/// The signing key at `path`, created (readable by its owner only) if missing.
pub fn load_or_create_key(path: &Path) -> Result<rcgen::KeyPair, String> {
    match std::fs::read_to_string(path) {
        Ok(pem) => rcgen::KeyPair::from_pem(&pem)
            .map_err(|e| format!("{}: not a private key: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
            crate::pki::write_file(path, key.serialize_pem(), true).map_err(|e| e.to_string())?;
            Ok(key)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}
