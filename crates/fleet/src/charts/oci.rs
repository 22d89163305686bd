//! Charts from OCI registries (`oci://registry/path/chart`), pulled as Helm pulls them: the
//! tag's manifest, then its layer of Helm's chart media type, checked against its digest. A
//! version range (or none: the newest stable version) is chosen from the repository's tags,
//! where Helm writes a version's `+` as `_`.
//!
//! A registry asks for credentials with a `WWW-Authenticate` challenge: `Basic` gets
//! `helmSecretName`'s (when `helmRepoURLRegex` matches the reference), `Bearer` a token from
//! the realm it names, asked with them when the realm is on the registry's host (anonymously
//! otherwise, and without them). Registries are reached over
//! https only, through the same guarded client as Helm repositories.

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{ChartError, FetchedChart, Fetcher, read_body, send, shown};
use crate::git::BasicAuth;

/// Helm's media type for a chart's archive in an OCI manifest.
const CHART_LAYER: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
/// A manifest, a tag list or a token, at most: 4 MiB (Helm's own bound on a manifest).
const MAX_DOCUMENT_BYTES: u64 = 4 << 20;

/// `oci://host[:port]/path/name`.
pub(super) struct Reference {
    /// `https://host[:port]/`.
    registry: reqwest::Url,
    /// `path/name`, the repository in the registry.
    repository: String,
    /// The reference as written, for messages.
    written: String,
}

impl Reference {
    pub(super) fn parse(reference: &str) -> Result<Reference, ChartError> {
        let rest = reference
            .strip_prefix("oci://")
            .ok_or_else(|| ChartError::Invalid(format!("{reference}: not an oci:// reference")))?;
        if rest
            .split('/')
            .next()
            .is_some_and(|host| host.contains('@'))
        {
            return Err(ChartError::Invalid(format!(
                "{reference}: credentials belong in helmSecretName, not in the reference"
            )));
        }
        let (host, repository) = rest.split_once('/').ok_or_else(|| {
            ChartError::Invalid(format!(
                "{reference}: names no repository after the registry"
            ))
        })?;
        let repository = repository.trim_end_matches('/');
        // OCI's grammar: lowercase letters and digits, joined by `.`, `_` or `-`.
        let alphanumeric = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let valid = |part: &str| {
            let bytes = part.as_bytes();
            bytes.first().is_some_and(|b| alphanumeric(*b))
                && bytes.last().is_some_and(|b| alphanumeric(*b))
                && bytes.iter().all(|b| alphanumeric(*b) || b"._-".contains(b))
        };
        if !repository.split('/').all(valid) {
            return Err(ChartError::Invalid(format!(
                "{reference}: a repository is lowercase letters, digits and ._- between slashes"
            )));
        }
        let registry = reqwest::Url::parse(&format!("https://{host}/"))
            .map_err(|e| ChartError::Invalid(format!("{reference}: {e}")))?;
        Ok(Reference {
            registry,
            repository: repository.to_string(),
            written: reference.to_string(),
        })
    }

    fn url(&self, path: &str) -> Result<reqwest::Url, ChartError> {
        self.registry
            .join(&format!("v2/{}/{path}", self.repository))
            .map_err(|e| ChartError::Invalid(format!("{}: {e}", self.written)))
    }
}

#[derive(Deserialize)]
struct Tags {
    #[serde(default)]
    tags: Vec<String>,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    #[serde(default)]
    size: u64,
}

#[derive(Deserialize)]
struct Token {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
}

/// How a registry wants to be asked, once its challenge is known.
enum Credential {
    Anonymous,
    Basic,
    Bearer(String),
}

/// One chart pull: the registry's challenge answered once, for all its requests.
struct Pull<'a> {
    fetcher: &'a mut Fetcher,
    reference: &'a Reference,
    auth: Option<&'a BasicAuth>,
    credential: Credential,
}

/// Pulls the chart `reference` names, at `version` (a version, a range, or the newest stable).
pub(super) fn pull(
    fetcher: &mut Fetcher,
    reference: &Reference,
    version: Option<&str>,
    auth: Option<&BasicAuth>,
) -> Result<FetchedChart, ChartError> {
    let mut pull = Pull {
        fetcher,
        reference,
        auth,
        credential: Credential::Anonymous,
    };
    let exact = version.filter(|v| lariat_helm::semver::is_exact(v));
    let version = match exact {
        Some(version) => version.trim_start_matches('=').trim().to_string(),
        None => pull.choose(version)?,
    };
    let tag = version.replace('+', "_");
    // OCI's tag grammar, so that a version cannot make another path of the registry.
    let valid_tag = tag.len() <= 128
        && tag.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_alphanumeric() || b == b'_' || (i > 0 && (b == b'.' || b == b'-'))
        });
    if !valid_tag {
        return Err(ChartError::Invalid(format!(
            "helm.version {version:?} is not a tag an OCI registry holds"
        )));
    }
    let manifest: Manifest = pull.document(&format!("manifests/{tag}"), MANIFEST_TYPES)?;
    let layer = manifest
        .layers
        .iter()
        .find(|l| l.media_type == CHART_LAYER)
        .ok_or_else(|| {
            ChartError::Invalid(format!(
                "{}:{tag} holds no Helm chart (no layer of type {CHART_LAYER})",
                reference.written
            ))
        })?;
    let left = pull
        .fetcher
        .limits
        .max_bundle_bytes
        .saturating_sub(pull.fetcher.fetched_bytes);
    if layer.size > left {
        return Err(ChartError::TooLarge {
            url: reference.written.clone(),
            limit: left,
        });
    }
    let expected = layer
        .digest
        .strip_prefix("sha256:")
        .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            ChartError::Invalid(format!(
                "{}:{tag}: the chart's digest is not a sha256 digest",
                reference.written
            ))
        })?
        .to_string();
    let archive = pull.read(&format!("blobs/sha256:{expected}"), "*/*", left)?;
    pull.fetcher.fetched_bytes += archive.len() as u64;
    let actual = format!("{:x}", Sha256::digest(&archive));
    if !actual.eq_ignore_ascii_case(&expected) {
        return Err(ChartError::Invalid(format!(
            "{}:{tag}: its SHA-256 is {actual}, not the manifest's {expected}",
            reference.written
        )));
    }
    Ok(FetchedChart { version, archive })
}

impl Pull<'_> {
    /// The newest tag that meets `constraint` (the newest stable one without).
    fn choose(&mut self, constraint: Option<&str>) -> Result<String, ChartError> {
        let tags: Tags = self.document("tags/list", "application/json")?;
        let versions: Vec<String> = tags.tags.iter().map(|t| t.replace('_', "+")).collect();
        lariat_helm::semver::newest(constraint, versions.iter().map(String::as_str))
            .map_err(|e| ChartError::Invalid(format!("helm.version: {e}")))?
            .map(str::to_string)
            .ok_or_else(|| {
                ChartError::Invalid(format!(
                    "{} has no version that meets {:?}",
                    self.reference.written,
                    constraint.unwrap_or("the newest stable")
                ))
            })
    }

    fn document<T: serde::de::DeserializeOwned>(
        &mut self,
        path: &str,
        accept: &str,
    ) -> Result<T, ChartError> {
        let body = self.read(path, accept, MAX_DOCUMENT_BYTES)?;
        // Not quoted: an error could show what the answer holds.
        serde_json::from_slice(&body).map_err(|_| {
            ChartError::Invalid(format!(
                "{}: the registry's answer to {path} is not what the OCI distribution API answers",
                self.reference.written
            ))
        })
    }

    /// `path` of the repository, answering the registry's challenge once if it asks.
    fn read(&mut self, path: &str, accept: &str, limit: u64) -> Result<Vec<u8>, ChartError> {
        let url = self.reference.url(path)?;
        self.fetcher.check(&url)?;
        let response = send(self.request(&url, accept)?, &url)?;
        if response.status() != reqwest::StatusCode::UNAUTHORIZED
            || !matches!(self.credential, Credential::Anonymous)
        {
            return read_body(response, &url, limit);
        }
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        self.credential = self.answer(&challenge, &url)?;
        read_body(send(self.request(&url, accept)?, &url)?, &url, limit)
    }

    fn request(
        &self,
        url: &reqwest::Url,
        accept: &str,
    ) -> Result<reqwest::blocking::RequestBuilder, ChartError> {
        let request = self.fetcher.client.get(url.clone()).header(ACCEPT, accept);
        Ok(match (&self.credential, self.auth) {
            (Credential::Basic, Some(auth)) => {
                request.basic_auth(&auth.username, Some(&auth.password))
            }
            (Credential::Bearer(token), _) => {
                let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    ChartError::Invalid(format!(
                        "{}: the registry's token is not a header",
                        shown(url)
                    ))
                })?;
                request.header(AUTHORIZATION, value)
            }
            _ => request,
        })
    }

    /// What a `WWW-Authenticate` challenge asks for.
    fn answer(&mut self, challenge: &str, url: &reqwest::Url) -> Result<Credential, ChartError> {
        let denied = || ChartError::Status {
            url: shown(url),
            status: 401,
        };
        let (scheme, parameters) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return self.auth.map(|_| Credential::Basic).ok_or_else(denied);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(denied());
        }
        let parameter = |name: &str| challenge_parameter(parameters, name);
        let realm = parameter("realm").ok_or_else(denied)?;
        let mut realm = reqwest::Url::parse(&realm).map_err(|_| denied())?;
        if realm.scheme() != "https" {
            return Err(ChartError::Invalid(format!(
                "{}: the registry's token service {} is not https",
                self.reference.written,
                shown(&realm)
            )));
        }
        self.fetcher.check(&realm)?;
        {
            let mut query = realm.query_pairs_mut();
            if let Some(service) = parameter("service") {
                query.append_pair("service", &service);
            }
            let scope = parameter("scope")
                .unwrap_or_else(|| format!("repository:{}:pull", self.reference.repository));
            query.append_pair("scope", &scope);
        }
        let mut request = self.fetcher.client.get(realm.clone());
        // The credential goes to a token service on the registry's own host only; one
        // elsewhere is asked anonymously (helmRepoURLRegex approved the registry, not it).
        let same_host = realm.host_str() == self.reference.registry.host_str()
            && realm.port_or_known_default() == self.reference.registry.port_or_known_default();
        if let Some(auth) = self.auth.filter(|_| same_host) {
            request = request.basic_auth(&auth.username, Some(&auth.password));
        }
        let body = read_body(send(request, &realm)?, &realm, MAX_DOCUMENT_BYTES)?;
        let token: Token = serde_json::from_slice(&body).map_err(|_| {
            ChartError::Invalid(format!(
                "{}: the token service's answer is not a token",
                shown(&realm)
            ))
        })?;
        token
            .token
            .or(token.access_token)
            .filter(|t| !t.is_empty())
            .map(Credential::Bearer)
            .ok_or_else(denied)
    }
}

/// `name="value"` from a challenge's parameters.
fn challenge_parameter(parameters: &str, name: &str) -> Option<String> {
    let mut rest = parameters;
    while let Some(equals) = rest.find('=') {
        let key = rest[..equals].trim().trim_start_matches(',').trim();
        let after = &rest[equals + 1..];
        let (value, remaining) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if key.eq_ignore_ascii_case(name) {
            return Some(value.to_string());
        }
        rest = remaining;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_and_challenges_read_as_registries_write_them() {
        let r = Reference::parse("oci://registry.example.com:5000/charts/web").unwrap();
        assert_eq!(
            r.url("manifests/1.2.0").unwrap().as_str(),
            "https://registry.example.com:5000/v2/charts/web/manifests/1.2.0"
        );
        assert!(Reference::parse("oci://registry.example.com").is_err());
        assert!(Reference::parse("oci://registry.example.com/Web").is_err());
        assert!(Reference::parse("oci://registry.example.com/a/../b").is_err());
        let challenge = r#"realm="https://auth.example.com/token",service="registry.example.com",scope="repository:charts/web:pull""#;
        assert_eq!(
            challenge_parameter(challenge, "realm").as_deref(),
            Some("https://auth.example.com/token")
        );
        assert_eq!(
            challenge_parameter(challenge, "scope").as_deref(),
            Some("repository:charts/web:pull")
        );
        assert_eq!(challenge_parameter(challenge, "nosuch"), None);
    }
}
