//! OpenID Connect ID tokens (`--oidc-issuer-url`, `--oidc-client-id`), taken as kube-apiserver
//! takes them, so lariat works with Dex, Keycloak or any OIDC provider: the token's signature
//! is checked against the provider's published keys (its discovery document's `jwks_uri`,
//! fetched over HTTPS and cached), its `iss` must be the issuer, its `aud` the client ID, and
//! it must be in its validity period. The keys are fetched at the first token, and again
//! when a token is signed with a key not in hand (at most once a [`REFETCH_INTERVAL`]), so the
//! provider's key rotation needs no restart, and keys it dropped stop working at the next
//! fetch. A fetch, however slow, never holds up tokens of keys already in hand.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::identity::User;
use crate::status::{ApiError, ApiResult};

/// How often an unknown key may make lariat fetch the provider's keys again: a stream of
/// tokens with made-up key IDs costs the provider one request per interval at most.
const REFETCH_INTERVAL: Duration = Duration::from_secs(1);
/// Clock skew allowed between the provider and lariat, for `exp` and `nbf`.
const LEEWAY_SECONDS: u64 = 60;
/// The largest discovery document or key set read.
const MAX_DOCUMENT: usize = 1 << 20;

/// What `lariat server --oidc-*` says, with kube-apiserver's defaults.
#[derive(Clone, Debug)]
pub struct OidcConfig {
    /// `--oidc-issuer-url`: an https URL, exactly the tokens' `iss`.
    pub issuer_url: String,
    /// `--oidc-client-id`: what the tokens' `aud` must contain.
    pub client_id: String,
    /// `--oidc-username-claim` (default `sub`).
    pub username_claim: String,
    /// `--oidc-username-prefix`: `None` is kube-apiserver's default (the issuer URL and `#`,
    /// except for the `email` claim); `-` is none.
    pub username_prefix: Option<String>,
    /// `--oidc-groups-claim`: a string or a list of strings; `None`, no groups.
    pub groups_claim: Option<String>,
    /// `--oidc-groups-prefix`.
    pub groups_prefix: String,
    /// `--oidc-ca-file`: the authority the provider's certificate is checked against, instead
    /// of the system's.
    pub ca_file: Option<PathBuf>,
    /// `--oidc-signing-algs` (default RS256).
    pub signing_algs: Vec<String>,
    /// `--oidc-required-claim KEY=VALUE`: claims every token must carry with that value.
    pub required_claims: Vec<String>,
}

impl OidcConfig {
    pub fn new(issuer_url: &str, client_id: &str) -> OidcConfig {
        OidcConfig {
            issuer_url: issuer_url.into(),
            client_id: client_id.into(),
            username_claim: "sub".into(),
            username_prefix: None,
            groups_claim: None,
            groups_prefix: String::new(),
            ca_file: None,
            signing_algs: vec!["RS256".into()],
            required_claims: vec![],
        }
    }
}

/// The provider lariat trusts, and its keys as last fetched.
pub struct Oidc {
    issuer: String,
    client_id: String,
    username_claim: String,
    username_prefix: String,
    groups_claim: Option<String>,
    groups_prefix: String,
    algorithms: Vec<Algorithm>,
    required: Vec<(String, String)>,
    http: reqwest::Client,
    keys: std::sync::RwLock<Keys>,
    /// Held across a fetch, so the requests that need one wait for one fetch instead of each
    /// making their own.
    fetching: tokio::sync::Mutex<()>,
    /// The last refusal's reason, logged once until it changes.
    last_refusal: std::sync::Mutex<String>,
}

/// What the keys in hand say of a token.
enum Checked {
    Valid(Value),
    Refused(String),
    /// No key in hand verifies its signature.
    NoKey,
}

#[derive(Default)]
struct Keys {
    keys: Vec<Jwk>,
    fetched: Option<Instant>,
    /// The last fetch's failure, logged once until it changes.
    failure: Option<String>,
}

impl Oidc {
    /// Checks the configuration (an https issuer, a client ID, known algorithms, readable CA)
    /// and prepares the client; nothing is fetched until the first token comes.
    pub fn new(config: OidcConfig) -> Result<Oidc, String> {
        if !config.issuer_url.starts_with("https://") {
            return Err(format!(
                "--oidc-issuer-url {:?} must be an https:// URL",
                config.issuer_url
            ));
        }
        if config.client_id.is_empty() {
            return Err(
                "--oidc-issuer-url needs --oidc-client-id, the audience tokens are issued for"
                    .into(),
            );
        }
        if config.username_claim.is_empty() {
            return Err("--oidc-username-claim may not be empty".into());
        }
        let mut algorithms = Vec::new();
        for name in &config.signing_algs {
            let algorithm: Algorithm = name.parse().ok().filter(|a| !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)).ok_or_else(|| {
                format!("--oidc-signing-algs: {name:?} is not an asymmetric JWS algorithm (RS256, RS384, RS512, ES256, ES384, PS256, PS384, PS512, EdDSA)")
            })?;
            algorithms.push(algorithm);
        }
        let mut required = Vec::new();
        for pair in &config.required_claims {
            let (key, value) = pair
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| format!("--oidc-required-claim {pair:?} must be KEY=VALUE"))?;
            required.push((key.to_string(), value.to_string()));
        }
        let username_prefix = match config.username_prefix.as_deref() {
            Some("-") => String::new(),
            Some(prefix) => prefix.to_string(),
            None if config.username_claim == "email" => String::new(),
            None => format!("{}#", config.issuer_url),
        };
        // reqwest's TLS takes rustls' process-wide provider: ring, lariat's one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder()
            .https_only(true)
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| format!("--oidc-ca-file {}: {e}", path.display()))?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("--oidc-ca-file {}: {e}", path.display()))?;
            if certificates.is_empty() {
                return Err(format!(
                    "--oidc-ca-file {}: no BEGIN CERTIFICATE block in it",
                    path.display()
                ));
            }
            http = http.tls_certs_only(certificates);
        }
        Ok(Oidc {
            issuer: config.issuer_url,
            client_id: config.client_id,
            username_claim: config.username_claim,
            username_prefix,
            groups_claim: config.groups_claim,
            groups_prefix: config.groups_prefix,
            algorithms,
            required,
            http: http.build().map_err(|e| format!("OIDC client: {e}"))?,
            keys: Default::default(),
            fetching: Default::default(),
            last_refusal: Default::default(),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The user an ID token names, or 401 for any token that does not pass every check. Why
    /// a token the provider signed was refused is logged (each distinct reason once in a row),
    /// never answered; anyone can make a token that is not signed, so why such a one was
    /// refused is only logged at debug level.
    pub async fn authenticate(&self, token: &str) -> ApiResult<User> {
        let signed = match self.verify(token).await {
            Ok(signed) => signed,
            Err(why) => {
                tracing::debug!(issuer = %self.issuer, "an OIDC token was refused: {why:?}");
                return Err(ApiError::Unauthorized);
            }
        };
        let refused = match signed.and_then(|claims| self.user(&claims)) {
            Ok(user) => return Ok(user),
            Err(why) => why,
        };
        let mut last = self.last_refusal.lock().expect("lock");
        if *last != refused {
            tracing::info!(issuer = %self.issuer, "an OIDC token was refused: {refused:?}");
            *last = refused;
        }
        Err(ApiError::Unauthorized)
    }

    /// The claims of `token`: `Ok(Err(why))` for a token the provider signed whose claims are
    /// refused, `Err(why)` for one no key of the provider's verifies.
    async fn verify(&self, token: &str) -> Result<Result<Value, String>, String> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| format!("not a signed JWT: {e}"))?;
        if names_critical_extensions(token) {
            return Err(
                "its header names critical extensions (crit), which this server does not understand"
                    .into(),
            );
        }
        if !self.algorithms.contains(&header.alg) {
            return Err(format!(
                "signed with {:?}, not one of --oidc-signing-algs",
                header.alg
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.client_id]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECONDS;
        let fetched = self.keys.read().expect("lock").fetched;
        if fetched.is_some() {
            match self.check(token, &header, &validation) {
                Checked::Valid(claims) => return Ok(Ok(claims)),
                Checked::Refused(why) => return Ok(Err(why)),
                Checked::NoKey => {}
            }
        }
        // One fetch at a time; who waited for another's uses its keys.
        let _fetching = self.fetching.lock().await;
        let now = self.keys.read().expect("lock").fetched;
        if now == fetched && now.is_none_or(|at| at.elapsed() >= REFETCH_INTERVAL) {
            self.refresh().await;
        }
        match self.check(token, &header, &validation) {
            Checked::Valid(claims) => Ok(Ok(claims)),
            Checked::Refused(why) => Ok(Err(why)),
            Checked::NoKey => Err(format!(
                "no key the provider publishes verifies its signature (kid {:?})",
                header.kid.unwrap_or_default()
            )),
        }
    }

    fn check(
        &self,
        token: &str,
        header: &jsonwebtoken::Header,
        validation: &Validation,
    ) -> Checked {
        use jsonwebtoken::errors::ErrorKind;
        let keys = self.keys.read().expect("lock");
        let candidates = keys
            .keys
            .iter()
            .filter(|jwk| match (&header.kid, &jwk.common.key_id) {
                (Some(wanted), Some(id)) => wanted == id,
                _ => true,
            })
            .filter_map(|jwk| DecodingKey::from_jwk(jwk).ok());
        for key in candidates {
            match jsonwebtoken::decode::<Value>(token, &key, validation) {
                Ok(data) => return Checked::Valid(data.claims),
                // Not this key's signature (or not a key of this algorithm): try the next.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::InvalidSignature
                            | ErrorKind::InvalidAlgorithm
                            | ErrorKind::InvalidKeyFormat
                            | ErrorKind::InvalidEcdsaKey
                            | ErrorKind::InvalidRsaKey(_)
                    ) => {}
                // The signature is good: the claims are what is wrong (expired, not yet
                // valid, another audience), and no other key or fetch changes that.
                Err(e) => return Checked::Refused(e.to_string()),
            }
        }
        Checked::NoKey
    }

    /// Fetches the provider's keys through its discovery document. A failed fetch keeps the
    /// keys already held and is logged once until it changes.
    async fn refresh(&self) {
        let fetched = self.fetch().await;
        let mut keys = self.keys.write().expect("lock");
        keys.fetched = Some(Instant::now());
        match fetched {
            Ok(fetched) => {
                if keys.failure.take().is_some() {
                    tracing::info!(issuer = %self.issuer, "the OIDC provider's keys are fetched again");
                }
                keys.keys = fetched;
            }
            Err(e) => {
                if keys.failure.as_deref() != Some(e.as_str()) {
                    tracing::warn!(issuer = %self.issuer, "cannot fetch the OIDC provider's keys: {e}; ID tokens signed with keys not yet fetched are refused");
                    keys.failure = Some(e);
                }
            }
        }
    }

    async fn fetch(&self) -> Result<Vec<Jwk>, String> {
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let discovery = self.get_json(&discovery_url).await?;
        if discovery["issuer"].as_str() != Some(self.issuer.as_str()) {
            return Err(format!(
                "{discovery_url} names issuer {}, not {}",
                discovery["issuer"], self.issuer
            ));
        }
        let jwks_uri = discovery["jwks_uri"]
            .as_str()
            .ok_or_else(|| format!("{discovery_url} has no jwks_uri"))?;
        let set = self.get_json(jwks_uri).await?;
        // Keys of a type this build does not know are skipped, not the whole set.
        Ok(set["keys"]
            .as_array()
            .ok_or_else(|| format!("{jwks_uri} has no keys"))?
            .iter()
            .filter_map(|key| serde_json::from_value::<Jwk>(key.clone()).ok())
            .collect())
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let mut response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {}", with_causes(&e)))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_DOCUMENT {
                return Err(format!("{url}: larger than {MAX_DOCUMENT} bytes"));
            }
        }
        serde_json::from_slice(&body).map_err(|e| format!("{url}: not JSON: {e}"))
    }

    /// The user the verified claims name, as kube-apiserver maps them; `None` when a claim it
    /// needs is missing or a required one differs. `system:` names are Kubernetes's own
    /// identities, never a provider's to hand out: such a username is refused and such groups
    /// are dropped.
    fn user(&self, claims: &Value) -> Result<User, String> {
        for (key, value) in &self.required {
            if claims[key].as_str() != Some(value.as_str()) {
                return Err(format!(
                    "claim {key:?} is not {value:?} (--oidc-required-claim)"
                ));
            }
        }
        let claim = &self.username_claim;
        let name = claims[claim]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                format!("no {claim:?} claim to name the user (--oidc-username-claim)")
            })?;
        if claim == "email"
            && !matches!(claims.get("email_verified"), None | Some(Value::Bool(true)))
        {
            return Err("its email is not verified (email_verified is not true)".into());
        }
        let name = format!("{}{name}", self.username_prefix);
        if name.starts_with("system:") {
            return Err(format!("user {name:?}: system: names are Kubernetes's own"));
        }
        let groups = match self
            .groups_claim
            .as_deref()
            .map(|claim| (claim, &claims[claim]))
        {
            None | Some((_, Value::Null)) => vec![],
            Some((_, Value::String(group))) => vec![group.clone()],
            Some((claim, Value::Array(groups))) => groups
                .iter()
                .map(|g| g.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("claim {claim:?} has a group that is not a string"))?,
            Some((claim, _)) => {
                return Err(format!(
                    "claim {claim:?} is neither a string nor a list of strings"
                ));
            }
        };
        Ok(User {
            name,
            groups: groups
                .into_iter()
                .map(|g| format!("{}{g}", self.groups_prefix))
                .filter(|g| !g.is_empty() && !g.starts_with("system:"))
                .collect(),
        })
    }
}

/// An error and its causes in one line: reqwest's own says only "error sending request".
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether a JWT's header carries `crit` (RFC 7515 4.1.11): a verifier must refuse a token
/// whose critical extensions it does not understand, as kube-apiserver's go-jose does, and
/// this one understands none. jsonwebtoken's `Header` drops the field, so it is read here.
fn names_critical_extensions(token: &str) -> bool {
    let Some(encoded) = token.split('.').next() else {
        return false;
    };
    URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()
        .and_then(|raw| serde_json::from_slice::<Value>(&raw).ok())
        .is_some_and(|header| header.get("crit").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn provider(change: impl FnOnce(&mut OidcConfig)) -> Oidc {
        let mut config = OidcConfig::new("https://idp.example.com", "lariat");
        change(&mut config);
        Oidc::new(config).unwrap()
    }

    #[test]
    fn claims_map_to_users_as_kube_apiserver_maps_them() {
        let claims = json!({"sub": "42", "email": "a@example.com", "groups": ["devs", "system:masters"], "team": "x"});
        let user = provider(|_| {}).user(&claims).unwrap();
        assert_eq!(
            user.name, "https://idp.example.com#42",
            "sub gets the issuer as prefix"
        );
        assert!(user.groups.is_empty(), "no groups claim, no groups");
        let by_email = provider(|c| {
            c.username_claim = "email".into();
            c.groups_claim = Some("groups".into());
        });
        let user = by_email.user(&claims).unwrap();
        assert_eq!(user.name, "a@example.com");
        assert_eq!(
            user.groups,
            vec!["devs"],
            "system: groups are Kubernetes's, never a provider's"
        );
        assert!(
            by_email
                .user(&json!({"email": "a@example.com", "email_verified": false}))
                .is_err()
        );
        let unprefixed = provider(|c| c.username_prefix = Some("-".into()));
        assert!(unprefixed.user(&json!({"sub": "system:admin"})).is_err());
        assert_eq!(unprefixed.user(&json!({"sub": "bob"})).unwrap().name, "bob");
        let required = provider(|c| c.required_claims = vec!["team=x".into()]);
        assert!(required.user(&claims).is_ok());
        let groups = provider(|c| c.groups_claim = Some("groups".into()));
        assert_eq!(
            groups
                .user(&json!({"sub": "1", "groups": "ops"}))
                .unwrap()
                .groups,
            ["ops"]
        );
        assert!(
            groups.user(&json!({"sub": "1", "groups": [1, 2]})).is_err(),
            "as kube-apiserver: not strings, no user"
        );
        assert!(required.user(&json!({"sub": "42", "team": "y"})).is_err());
    }

    #[test]
    fn bad_configurations_are_refused_with_the_flag_to_fix() {
        let refused = |change: fn(&mut OidcConfig)| {
            let mut config = OidcConfig::new("https://idp.example.com", "lariat");
            change(&mut config);
            Oidc::new(config).err().unwrap()
        };
        assert!(
            refused(|c| c.issuer_url = "http://idp.example.com".into())
                .contains("--oidc-issuer-url")
        );
        assert!(refused(|c| c.client_id.clear()).contains("--oidc-client-id"));
        assert!(refused(|c| c.signing_algs = vec!["HS256".into()]).contains("--oidc-signing-algs"));
        assert!(
            refused(|c| c.required_claims = vec!["nokey".into()]).contains("--oidc-required-claim")
        );
        assert!(refused(|c| c.ca_file = Some("/nonexistent".into())).contains("--oidc-ca-file"));
    }
}
