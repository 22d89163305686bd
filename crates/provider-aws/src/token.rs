//! The bearer token EKS accepts, made as `aws eks get-token` (and aws-iam-authenticator) make
//! it: an STS `GetCallerIdentity` request presigned for 60 seconds with the cluster's name in
//! the signed `x-k8s-aws-id` header, base64url-encoded behind `k8s-aws-v1.`. EKS replays the
//! request to learn who is calling; the token carries no secret key.

use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use base64::Engine;

/// How long the presigned request is valid, as `aws eks get-token` signs it.
const PRESIGNED_FOR: Duration = Duration::from_secs(60);

/// A token for `cluster` with the credentials of `config`, signed at `now`.
pub async fn eks_token(
    config: &SdkConfig,
    cluster: &str,
    now: SystemTime,
) -> Result<String, String> {
    let credentials = config
        .credentials_provider()
        .ok_or("no credentials")?
        .provide_credentials()
        .await
        .map_err(|e| aws_smithy_types::error::display::DisplayErrorContext(e).to_string())?;
    let region = config
        .region()
        .map(|r| r.to_string())
        .unwrap_or_else(|| crate::sdk::FALLBACK_REGION.into());
    // STS's regional endpoint, or the endpoint the SDK was pointed at (moto in tests).
    let endpoint = config
        .endpoint_url()
        .map(|e| e.trim_end_matches('/').to_owned())
        .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"));
    let url = format!("{endpoint}/?Action=GetCallerIdentity&Version=2011-06-15");
    let identity = credentials.into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGNED_FOR);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name("sts")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let host = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default()
        .to_owned();
    let headers = [("host", host.as_str()), ("x-k8s-aws-id", cluster)];
    let signable = SignableRequest::new("GET", &url, headers.into_iter(), SignableBody::Bytes(&[]))
        .map_err(|e| e.to_string())?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    let mut request = http::Request::get(&url)
        .body(())
        .map_err(|e| e.to_string())?;
    instructions.apply_to_request_http1x(&mut request);
    Ok(format!(
        "k8s-aws-v1.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(request.uri().to_string())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tokens_are_presigned_get_caller_identity_requests_naming_the_cluster() {
        let config = SdkConfig::builder()
            .region(aws_config::Region::from_static("eu-west-1"))
            .credentials_provider(
                aws_credential_types::provider::SharedCredentialsProvider::new(
                    aws_credential_types::Credentials::new(
                        "AKIDEXAMPLE",
                        "secret",
                        None,
                        None,
                        "test",
                    ),
                ),
            )
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let token = eks_token(
            &config,
            "default_prod",
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        )
        .await
        .unwrap();
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token.strip_prefix("k8s-aws-v1.").unwrap())
                .unwrap(),
        )
        .unwrap();
        assert!(
            url.starts_with(
                "https://sts.eu-west-1.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15&"
            ),
            "{url}"
        );
        for part in [
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Credential=AKIDEXAMPLE%2F20231114%2Feu-west-1%2Fsts%2Faws4_request",
            "X-Amz-Date=20231114T221320Z",
            "X-Amz-Expires=60",
            "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id",
            "X-Amz-Signature=",
        ] {
            assert!(url.contains(part), "{part} in {url}");
        }
        assert!(!url.contains("secret"));
    }
}
