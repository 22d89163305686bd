//! How lariat talks to AWS: one HTTPS client (rustls on ring, the process's TLS provider),
//! the SDK's standard retries (exponential backoff with jitter, throttling and transient
//! errors retried), an identity cache that renews short-lived credentials before they expire,
//! and a count of every request by service and operation (`lariat bench aws` prints it).
//!
//! The endpoint is the SDK's to find (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`, the
//! profile), so tests point it at moto the way users point the AWS CLI anywhere; `Settings`
//! may also name one, for tests that run several endpoints in one process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::identity::IdentityCache;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// The region used where AWS needs one and nothing names it (STS for the controller's own
/// identity); AWS_REGION or the profile's region win.
pub const FALLBACK_REGION: &str = "us-east-1";

/// What may differ between deployments and tests.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The endpoint of every AWS service; `None` leaves it to the SDK (`AWS_ENDPOINT_URL`, the
    /// profile, or AWS's own endpoints).
    pub endpoint_url: Option<String>,
    /// How long before they expire short-lived credentials (assumed roles) are renewed: the
    /// SDK's cache renews them between half of this and this much before (jitter, so
    /// sessions assumed together do not renew together).
    pub renew_before_expiry: Duration,
    /// Attempts per request, retries included.
    pub max_attempts: u32,
    /// The longest one attempt may take.
    pub attempt_timeout: Duration,
    /// How often something AWS is still creating or deleting (an EKS cluster, a node group, a
    /// NAT gateway) is looked at again.
    pub poll_while_changing: Duration,
    /// How often something settled is looked at again, for what changed in AWS without lariat
    /// (an instance terminated by hand): Cluster API's sync period.
    pub sync_period: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            endpoint_url: None,
            renew_before_expiry: Duration::from_secs(10 * 60),
            max_attempts: 5,
            attempt_timeout: Duration::from_secs(30),
            poll_while_changing: Duration::from_secs(15),
            sync_period: Duration::from_secs(10 * 60),
        }
    }
}

/// A service's client on an SDK configuration, with the call counter.
macro_rules! client {
    ($service:ident, $config:expr, $calls:expr) => {
        $service::Client::from_conf(
            $service::config::Builder::from($config)
                .interceptor($calls.clone())
                .build(),
        )
    };
}

/// The process's AWS access: settings, the shared HTTPS client and the request counts.
pub struct Aws {
    settings: Settings,
    http: SharedHttpClient,
    calls: CallCounter,
}

impl Aws {
    pub fn new(settings: Settings) -> Arc<Aws> {
        Arc::new(Aws {
            settings,
            http: https_client(),
            calls: CallCounter::default(),
        })
    }

    /// The SDK's default credential chain (environment, profile, web identity, container
    /// and instance roles), on lariat's HTTPS client.
    pub async fn default_credentials(&self) -> SharedCredentialsProvider {
        let config = aws_config::provider_config::ProviderConfig::without_region()
            .with_http_client(self.http.clone());
        SharedCredentialsProvider::new(
            aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
                .configure(config)
                .build()
                .await,
        )
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The SDK configuration for `region` with `credentials` (the SDK's default chain when
    /// `None`): lariat's HTTPS client, retries, timeouts and credential cache.
    pub async fn config(
        &self,
        region: Option<&str>,
        credentials: Option<SharedCredentialsProvider>,
    ) -> SdkConfig {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(self.http.clone())
            .retry_config(RetryConfig::standard().with_max_attempts(self.settings.max_attempts))
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_attempt_timeout(self.settings.attempt_timeout)
                    .build(),
            )
            .identity_cache(
                IdentityCache::lazy()
                    .buffer_time(self.settings.renew_before_expiry)
                    .build(),
            );
        if let Some(region) = region {
            loader = loader.region(Region::new(region.to_owned()));
        }
        if let Some(credentials) = credentials {
            loader = loader.credentials_provider(credentials);
        }
        if let Some(url) = &self.settings.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        let config = loader.load().await;
        if config.region().is_none() {
            return config
                .into_builder()
                .region(Region::from_static(FALLBACK_REGION))
                .build();
        }
        config
    }

    /// An STS client on `config`, counted.
    pub fn sts(&self, config: &SdkConfig) -> aws_sdk_sts::Client {
        client!(aws_sdk_sts, config, self.calls)
    }

    /// An EC2 client on `config`, counted.
    pub fn ec2(&self, config: &SdkConfig) -> aws_sdk_ec2::Client {
        client!(aws_sdk_ec2, config, self.calls)
    }

    /// An Auto Scaling client on `config`, counted.
    pub fn autoscaling(&self, config: &SdkConfig) -> aws_sdk_autoscaling::Client {
        client!(aws_sdk_autoscaling, config, self.calls)
    }

    /// An EKS client on `config`, counted.
    pub fn eks(&self, config: &SdkConfig) -> aws_sdk_eks::Client {
        client!(aws_sdk_eks, config, self.calls)
    }

    /// A classic Elastic Load Balancing client on `config`, counted.
    pub fn elb(&self, config: &SdkConfig) -> aws_sdk_elasticloadbalancing::Client {
        client!(aws_sdk_elasticloadbalancing, config, self.calls)
    }

    /// An SSM client on `config`, counted (EKS-optimized AMIs are published there, and
    /// bootstrap data may wait there).
    pub fn ssm(&self, config: &SdkConfig) -> aws_sdk_ssm::Client {
        client!(aws_sdk_ssm, config, self.calls)
    }

    /// A Secrets Manager client on `config`, counted (instances' bootstrap data waits there).
    pub fn secrets_manager(&self, config: &SdkConfig) -> aws_sdk_secretsmanager::Client {
        client!(aws_sdk_secretsmanager, config, self.calls)
    }

    /// An IAM client on `config`, counted.
    pub fn iam(&self, config: &SdkConfig) -> aws_sdk_iam::Client {
        client!(aws_sdk_iam, config, self.calls)
    }

    /// Requests sent so far, by service and operation (each attempt counts).
    pub fn calls(&self) -> BTreeMap<(String, String), u64> {
        self.calls.counts.lock().expect("lock").clone()
    }
}

/// SDK results as lariat reports them.
pub trait AwsResult<T> {
    fn aws(self) -> Result<T, AwsError>;
}

impl<T, E> AwsResult<T> for Result<T, SdkError<E, HttpResponse>>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    fn aws(self) -> Result<T, AwsError> {
        self.map_err(|e| AwsError::from_sdk(&e))
    }
}

impl AwsError {
    /// AWS answered a create without the thing created.
    pub fn missing(what: &str) -> AwsError {
        AwsError {
            code: "InvalidResponse".into(),
            message: format!("AWS's answer has no {what}"),
        }
    }

    /// Whether AWS said the thing is not there (`NoSuchEntity`, `ResourceNotFoundException`,
    /// `InvalidVpcID.NotFound`, ...).
    pub fn is_not_found(&self) -> bool {
        self.code.ends_with("NotFound")
            || self.code.ends_with("NotFoundException")
            || self.code == "NoSuchEntity"
    }
}

/// The text of the first `<tag>` element of an XML document, if it has no children.
fn xml_text<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{tag}>"))? + tag.len() + 2;
    let len = xml[start..].find(&format!("</{tag}>"))?;
    Some(&xml[start..start + len]).filter(|text| !text.contains('<'))
}

/// The HTTPS client every AWS request goes through: rustls on ring, the system's roots.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// Counts every request the SDK sends, retries included, by service and operation.
#[derive(Debug, Default, Clone)]
struct CallCounter {
    counts: Arc<Mutex<BTreeMap<(String, String), u64>>>,
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "lariat-call-counter"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(operation) = cfg.load::<Metadata>() {
            *self
                .counts
                .lock()
                .expect("lock")
                .entry((operation.service().to_owned(), operation.name().to_owned()))
                .or_default() += 1;
        }
        Ok(())
    }
}

/// An AWS error as users see it in conditions: AWS's code and message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct AwsError {
    /// AWS's error code (`InvalidClientTokenId`, `AccessDenied`, `Throttling`), or what kind
    /// of failure it was when AWS was never reached (`Timeout`, `Unreachable`).
    pub code: String,
    pub message: String,
}

impl AwsError {
    /// The code and message of an SDK error, looked for down its chain of causes (a credential
    /// provider's failure arrives wrapped in the request's).
    pub fn from_sdk<E>(error: &SdkError<E, HttpResponse>) -> AwsError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        if let SdkError::ServiceError(service) = error {
            let inner = service.err();
            if let Some(code) = inner.code() {
                return AwsError {
                    code: code.to_owned(),
                    message: inner.message().unwrap_or_default().to_owned(),
                };
            }
            // An error body in another protocol's shape (moto answers STS's authentication
            // failures in EC2's `<Errors><Error>`): its Code and Message are still there.
            let body = String::from_utf8_lossy(service.raw().body().bytes().unwrap_or_default());
            return AwsError {
                code: xml_text(&body, "Code").unwrap_or("Unknown").to_owned(),
                message: xml_text(&body, "Message")
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("HTTP {}", service.raw().status())),
            };
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(current) = cause {
            if let Some(found) = current.downcast_ref::<AwsError>() {
                return found.clone();
            }
            cause = current.source();
        }
        let code = match error {
            SdkError::TimeoutError(_) => "Timeout",
            SdkError::DispatchFailure(_) => "Unreachable",
            SdkError::ResponseError(_) => "InvalidResponse",
            _ => "RequestFailed",
        };
        AwsError {
            code: code.to_owned(),
            message: aws_smithy_types::error::display::DisplayErrorContext(error).to_string(),
        }
    }
}
