//! Whose AWS credentials a cluster's objects are reconciled with, as Cluster API AWS decides
//! it: the `identityRef` of the cluster's AWS object (the controller's own identity when it
//! names none), each identity of a role chain checked against its `allowedNamespaces`, and a
//! session per namespace, region and identity kept while none of the objects it was built
//! from changes, so its credential cache renews assumed roles before they expire instead of
//! assuming them again on every reconcile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aws_config::SdkConfig;
use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{self, ProvideCredentials, SharedCredentialsProvider};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ApiResource, DynamicObject};
use lariat_api::aws::identity::secret_keys;
use lariat_api::aws::{
    AWSClusterControllerIdentity, AWSClusterRoleIdentity, AWSClusterStaticIdentity,
    AWSIdentityKind, AWSIdentityReference, AllowedNamespaces, CONTROLLER_IDENTITY_NAME,
};
use lariat_controllers::cache::Caches;

use crate::sdk::{Aws, AwsError};

/// Where static identities' Secrets live, as Cluster API AWS keeps them in its own namespace.
pub const SECRETS_NAMESPACE: &str = lariat_api::clusterctl::NAMESPACE;

/// The longest role chain followed (Cluster API AWS sets none; AWS allows chains of roles but
/// a loop must end somewhere).
const MAX_CHAIN: usize = 8;

/// Why no session could be built; `reason()` is the condition reason Cluster API AWS uses.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("Namespace is not permitted to use {kind}: {name}")]
    NotPermitted {
        kind: AWSIdentityKind,
        name: String,
        /// The identity is another's source, not the one the cluster names.
        source_identity: bool,
    },
    #[error("{kind} {name:?} does not exist")]
    NotFound { kind: AWSIdentityKind, name: String },
    #[error(
        "an AWSClusterControllerIdentity is always named {CONTROLLER_IDENTITY_NAME:?}; the reference names {0:?}"
    )]
    ControllerIdentityName(String),
    #[error("AWSClusterStaticIdentity {identity}: Secret {SECRETS_NAMESPACE}/{secret} {problem}")]
    Secret {
        identity: String,
        secret: String,
        problem: String,
    },
    #[error("the identities chain in a loop or past {MAX_CHAIN} roles: {0}")]
    Chain(String),
    #[error("cannot read identities: {0}")]
    Read(String),
}

impl IdentityError {
    pub fn reason(&self) -> &'static str {
        match self {
            IdentityError::NotPermitted {
                source_identity: false,
                ..
            } => "PrincipalUsageUnauthorized",
            IdentityError::NotPermitted {
                source_identity: true,
                ..
            } => "SourcePrincipalUsageUnauthorized",
            _ => "CredentialProviderBuildFailed",
        }
    }
}

/// An SDK configuration with a cluster's credentials and region.
#[derive(Clone)]
pub struct Session {
    pub config: SdkConfig,
    aws: Arc<Aws>,
}

/// Who a session's credentials belong to.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    pub account: String,
    pub arn: String,
}

impl Session {
    pub(crate) fn new(aws: Arc<Aws>, config: SdkConfig) -> Session {
        Session { config, aws }
    }

    pub fn aws(&self) -> &Arc<Aws> {
        &self.aws
    }

    /// Asks STS who the credentials belong to (it needs no permission, so it checks the
    /// credentials and nothing else).
    pub async fn caller(&self) -> Result<Caller, AwsError> {
        let out = self
            .aws
            .sts(&self.config)
            .get_caller_identity()
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(&e))?;
        Ok(Caller {
            account: out.account.unwrap_or_default(),
            arn: out.arn.unwrap_or_default(),
        })
    }
}

/// One identity of a chain, as credentials are built from it.
enum Link {
    Controller,
    Static(Credentials),
    Role(lariat_api::aws::AWSClusterRoleIdentitySpec),
}

/// What a session is kept for.
#[derive(Clone, PartialEq, Eq, Hash)]
struct SessionKey {
    namespace: String,
    region: String,
    identity: AWSIdentityReference,
}

/// Builds and keeps sessions.
pub struct Identities {
    aws: Arc<Aws>,
    caches: Arc<Caches>,
    secrets: Api<Secret>,
    /// The controller's own credentials (the SDK's default chain), built once: the chain
    /// caches what it found.
    controller: SharedCredentialsProvider,
    /// Each session with the versions of the objects it was built from.
    sessions: Mutex<HashMap<SessionKey, (Vec<String>, Session)>>,
}

impl Identities {
    pub async fn new(aws: Arc<Aws>, caches: Arc<Caches>) -> Arc<Identities> {
        let controller = aws.default_credentials().await;
        let secrets = Api::namespaced(caches.client().clone(), SECRETS_NAMESPACE);
        Arc::new(Identities {
            aws,
            caches,
            secrets,
            controller,
            sessions: Mutex::default(),
        })
    }

    pub fn aws(&self) -> &Arc<Aws> {
        &self.aws
    }

    /// A session for the clusters of `namespace` in `region`, with the credentials of
    /// `identity` (the controller's own identity, `default`, when `None`).
    pub async fn session(
        &self,
        namespace: &str,
        region: &str,
        identity: Option<&AWSIdentityReference>,
    ) -> Result<Session, IdentityError> {
        let identity = identity.cloned().unwrap_or(AWSIdentityReference {
            kind: AWSIdentityKind::AWSClusterControllerIdentity,
            name: CONTROLLER_IDENTITY_NAME.to_owned(),
        });
        let key = SessionKey {
            namespace: namespace.to_owned(),
            region: region.to_owned(),
            identity: identity.clone(),
        };
        let (links, versions) = self.chain(namespace, &identity).await?;
        if let Some((built_from, session)) = self.sessions.lock().expect("lock").get(&key)
            && *built_from == versions
        {
            return Ok(session.clone());
        }
        // The innermost source first: each role is assumed with the credentials before it.
        let mut credentials = self.controller.clone();
        for link in links.into_iter().rev() {
            credentials = match link {
                Link::Controller => self.controller.clone(),
                Link::Static(key) => SharedCredentialsProvider::new(key),
                Link::Role(spec) => {
                    let source = self.aws.config(Some(region), Some(credentials)).await;
                    SharedCredentialsProvider::new(AssumedRole {
                        sts: self.aws.sts(&source),
                        session_name: spec
                            .session_name
                            .clone()
                            .unwrap_or_else(|| session_name(namespace)),
                        spec,
                    })
                }
            };
        }
        let session = Session {
            config: self.aws.config(Some(region), Some(credentials)).await,
            aws: self.aws.clone(),
        };
        self.sessions
            .lock()
            .expect("lock")
            .insert(key, (versions, session.clone()));
        Ok(session)
    }

    /// The identities `identity` chains to, each checked for `namespace`, outermost first,
    /// with the versions of the objects read.
    async fn chain(
        &self,
        namespace: &str,
        identity: &AWSIdentityReference,
    ) -> Result<(Vec<Link>, Vec<String>), IdentityError> {
        let (mut links, mut versions, mut names) = (Vec::new(), Vec::new(), Vec::new());
        let mut next = Some(identity.clone());
        while let Some(reference) = next.take() {
            let name = format!("{}/{}", reference.kind, reference.name);
            let looped = names.contains(&name);
            names.push(name);
            if looped || names.len() > MAX_CHAIN {
                return Err(IdentityError::Chain(names.join(" -> ")));
            }
            let not_permitted = || IdentityError::NotPermitted {
                kind: reference.kind,
                name: reference.name.clone(),
                source_identity: names.len() > 1,
            };
            match reference.kind {
                AWSIdentityKind::AWSClusterControllerIdentity => {
                    if reference.name != CONTROLLER_IDENTITY_NAME {
                        return Err(IdentityError::ControllerIdentityName(
                            reference.name.clone(),
                        ));
                    }
                    let (identity, version) = self
                        .identity::<AWSClusterControllerIdentity>(&reference)
                        .await?;
                    versions.push(version);
                    if !self
                        .allowed(identity.spec.allowed_namespaces.as_ref(), namespace)
                        .await?
                    {
                        return Err(not_permitted());
                    }
                    links.push(Link::Controller);
                }
                AWSIdentityKind::AWSClusterStaticIdentity => {
                    let (identity, version) = self
                        .identity::<AWSClusterStaticIdentity>(&reference)
                        .await?;
                    versions.push(version);
                    if !self
                        .allowed(identity.spec.allowed_namespaces.as_ref(), namespace)
                        .await?
                    {
                        return Err(not_permitted());
                    }
                    let (key, version) = self
                        .static_credentials(&reference.name, &identity.spec.secret_ref)
                        .await?;
                    versions.push(version);
                    links.push(Link::Static(key));
                }
                AWSIdentityKind::AWSClusterRoleIdentity => {
                    let (identity, version) =
                        self.identity::<AWSClusterRoleIdentity>(&reference).await?;
                    versions.push(version);
                    if !self
                        .allowed(identity.spec.allowed_namespaces.as_ref(), namespace)
                        .await?
                    {
                        return Err(not_permitted());
                    }
                    next = identity.spec.source_identity_ref.clone();
                    links.push(Link::Role(identity.spec));
                    // Cluster API AWS assumes the role with the controller's own credentials
                    // when it names no source.
                    if next.is_none() {
                        links.push(Link::Controller);
                    }
                }
            }
        }
        Ok((links, versions))
    }

    /// An identity object and its resourceVersion, from the cache.
    async fn identity<K>(
        &self,
        reference: &AWSIdentityReference,
    ) -> Result<(K, String), IdentityError>
    where
        K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
    {
        let cache = self.caches.of(&ApiResource::erase::<K>(&()));
        let object = cache
            .get("", &reference.name)
            .await
            .map_err(|e| IdentityError::Read(e.to_string()))?
            .ok_or_else(|| IdentityError::NotFound {
                kind: reference.kind,
                name: reference.name.clone(),
            })?;
        let version = object.metadata.resource_version.clone().unwrap_or_default();
        let typed = DynamicObject::clone(&object)
            .try_parse::<K>()
            .map_err(|e| {
                IdentityError::Read(format!("{} {}: {e}", reference.kind, reference.name))
            })?;
        Ok((typed, version))
    }

    /// Whether `namespace` may use an identity with these `allowedNamespaces`.
    async fn allowed(
        &self,
        allowed: Option<&AllowedNamespaces>,
        namespace: &str,
    ) -> Result<bool, IdentityError> {
        let labels = self
            .caches
            .typed::<Namespace>()
            .get("", namespace)
            .await
            .map_err(|e| IdentityError::Read(e.to_string()))?
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        Ok(AllowedNamespaces::allow(allowed, namespace, &labels))
    }

    /// The access key of a static identity, and the Secret's resourceVersion. The Secret is
    /// read from the API, not a cache: this process caches only the Secrets of clusters, and
    /// a session is built only when a reconcile needs one.
    async fn static_credentials(
        &self,
        identity: &str,
        secret: &str,
    ) -> Result<(Credentials, String), IdentityError> {
        let problem = |problem: &str| IdentityError::Secret {
            identity: identity.to_owned(),
            secret: secret.to_owned(),
            problem: problem.to_owned(),
        };
        let found = self
            .secrets
            .get_opt(secret)
            .await
            .map_err(|e| IdentityError::Read(e.to_string()))?
            .ok_or_else(|| problem("does not exist"))?;
        let data = found.data.unwrap_or_default();
        let value = |key: &str| -> Option<String> {
            data.get(key)
                .map(|v| String::from_utf8_lossy(&v.0).trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let access_key = value(secret_keys::ACCESS_KEY_ID)
            .ok_or_else(|| problem(&format!("has no {} key", secret_keys::ACCESS_KEY_ID)))?;
        let secret_key = value(secret_keys::SECRET_ACCESS_KEY)
            .ok_or_else(|| problem(&format!("has no {} key", secret_keys::SECRET_ACCESS_KEY)))?;
        let credentials = Credentials::new(
            access_key,
            secret_key,
            value(secret_keys::SESSION_TOKEN),
            None,
            "AWSClusterStaticIdentity",
        );
        Ok((
            credentials,
            found.metadata.resource_version.unwrap_or_default(),
        ))
    }
}

/// The default role session name: who assumed the role, for CloudTrail (AWS allows 2 to 64
/// of `[\w+=,.@-]`; a namespace name fits).
fn session_name(namespace: &str) -> String {
    let mut name = format!("lariat-{namespace}");
    name.truncate(64);
    name
}

/// A role assumed through STS; the session's identity cache keeps the credentials and asks
/// again before they expire.
#[derive(Debug)]
struct AssumedRole {
    sts: aws_sdk_sts::Client,
    session_name: String,
    spec: lariat_api::aws::AWSClusterRoleIdentitySpec,
}

impl AssumedRole {
    async fn assume(&self) -> provider::Result {
        let policy_arns = self.spec.policy_arns.as_ref().map(|arns| {
            arns.iter()
                .map(|arn| {
                    aws_sdk_sts::types::PolicyDescriptorType::builder()
                        .arn(arn)
                        .build()
                })
                .collect()
        });
        let out = self
            .sts
            .assume_role()
            .role_arn(&self.spec.role_arn)
            .role_session_name(&self.session_name)
            .set_external_id(self.spec.external_id.clone())
            .set_duration_seconds(self.spec.duration_seconds)
            .set_policy(self.spec.inline_policy.clone())
            .set_policy_arns(policy_arns)
            .send()
            .await
            .map_err(|e| {
                let mut error = AwsError::from_sdk(&e);
                error.message = format!("assuming role {}: {}", self.spec.role_arn, error.message);
                CredentialsError::provider_error(error)
            })?;
        let Some(credentials) = out.credentials else {
            return Err(CredentialsError::unhandled(format!(
                "STS returned no credentials for role {}",
                self.spec.role_arn
            )));
        };
        let expiry =
            SystemTime::try_from(credentials.expiration).map_err(CredentialsError::unhandled)?;
        Ok(Credentials::new(
            credentials.access_key_id,
            credentials.secret_access_key,
            Some(credentials.session_token),
            Some(expiry),
            "AWSClusterRoleIdentity",
        ))
    }
}

impl ProvideCredentials for AssumedRole {
    fn provide_credentials<'a>(&'a self) -> provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        provider::future::ProvideCredentials::new(self.assume())
    }
}
