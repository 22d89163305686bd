//! Cluster API AWS's provider, on the AWS SDK for Rust: identities (this module's first
//! part), then the EKS control plane, node groups, auto-scaling groups and EC2 machines.
//!
//! `sdk.rs` is how every request reaches AWS (TLS, retries, the endpoint, call counts);
//! `identity.rs` whose credentials a cluster's requests carry; `moto.rs` a throwaway moto
//! server for tests and benchmarks.

pub mod identity;
pub mod moto;
pub mod sdk;

use std::sync::Arc;

use kube::api::{Api, PostParams};
use lariat_api::aws::{
    AWSClusterControllerIdentity, AWSClusterControllerIdentitySpec, AllowedNamespaces,
    CONTROLLER_IDENTITY_NAME,
};
use lariat_controllers::cache::Caches;

pub use identity::{Caller, Identities, IdentityError, Session};
pub use sdk::{Aws, AwsError, Settings};

/// Why the provider cannot start: the controller's own credentials are missing or refused.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    NoCredentials(String),
    #[error("the AWS credentials where lariat server runs were refused: {0}")]
    Refused(AwsError),
}

impl StartError {
    pub fn reason(&self) -> &'static str {
        match self {
            StartError::NoCredentials(_) => "CredentialsNotFound",
            StartError::Refused(_) => "CredentialsRefused",
        }
    }
}

/// Checks the controller's own credentials (the SDK's default chain: environment, profile,
/// web identity, container or instance role) with STS, and says whose they are.
pub async fn check_controller_credentials(aws: &Arc<Aws>) -> Result<Caller, StartError> {
    use aws_credential_types::provider::ProvideCredentials;
    let credentials = aws.default_credentials().await;
    if let Err(error) = credentials.provide_credentials().await {
        return Err(StartError::NoCredentials(missing_credentials(&error)));
    }
    let session = Session::new(aws.clone(), aws.config(None, Some(credentials)).await);
    session.caller().await.map_err(StartError::Refused)
}

/// What to set, said precisely: a half-set environment names the variable missing.
fn missing_credentials(error: &aws_credential_types::provider::error::CredentialsError) -> String {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let how = if set("AWS_ACCESS_KEY_ID") && !set("AWS_SECRET_ACCESS_KEY") {
        "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".to_owned()
    } else if set("AWS_SECRET_ACCESS_KEY") && !set("AWS_ACCESS_KEY_ID") {
        "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".to_owned()
    } else if set("AWS_PROFILE") {
        format!(
            "profile {:?} (AWS_PROFILE) gave none: {}",
            std::env::var("AWS_PROFILE").unwrap_or_default(),
            aws_smithy_types::error::display::DisplayErrorContext(error)
        )
    } else {
        "none of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, or an instance role is set".to_owned()
    };
    format!(
        "no AWS credentials where lariat server runs: {how}; set them in lariat server's environment and restart it (clusters may still name an AWSClusterStaticIdentity or AWSClusterRoleIdentity)"
    )
}

/// The provider's controllers. For now: Cluster API AWS's controller identity, created as its
/// `AutoControllerIdentityCreator` does (every namespace may use the controller's credentials
/// until an administrator narrows `allowedNamespaces`).
pub async fn run(caches: Arc<Caches>, shutdown: impl Future<Output = ()> + Send + 'static) {
    let identities: Api<AWSClusterControllerIdentity> = Api::all(caches.client().clone());
    let identity = AWSClusterControllerIdentity::new(
        CONTROLLER_IDENTITY_NAME,
        AWSClusterControllerIdentitySpec {
            allowed_namespaces: Some(AllowedNamespaces::default()),
        },
    );
    match identities.create(&PostParams::default(), &identity).await {
        Ok(_) => tracing::info!("created AWSClusterControllerIdentity default for every namespace"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(error) => tracing::warn!(%error, "cannot create AWSClusterControllerIdentity default"),
    }
    shutdown.await;
}
