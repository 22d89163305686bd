//! Charts from Helm repositories, fetched when a commit is read (as Fleet's `fleet apply`
//! fetches them) and carried in the bundle as the chart's archive, so that agents never reach
//! the repository: `helm.repo` with `helm.chart` (a name) and `helm.version` (a version or a
//! range; the newest stable version when none), or `helm.chart` an https URL of an archive.
//!
//! Every request goes through the same guarded client as git's (addresses refused unless
//! `--fleet-allow-networks` allows them, the server's proxies, the GitRepo's `caBundle`),
//! credentials only over https, each answer bounded in size and time, and the archive checked
//! against the digest the index gives.

use std::io::Read;
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::git::{self, BasicAuth};
use crate::limits::Limits;

/// A repository's `index.yaml`, at most: 32 MiB (large public repositories' indexes run to
/// tens of MB). Fixed.
pub const MAX_INDEX_BYTES: u64 = 32 * 1024 * 1024;
/// How long one request may take, connecting included: 60 s. Fixed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a chart comes from.
#[derive(Debug)]
pub struct ChartSource<'a> {
    /// The repository's URL (`helm.repo`), or `None` when `chart` is an archive's URL.
    pub repo: Option<&'a str>,
    pub chart: &'a str,
    pub version: Option<&'a str>,
    /// The credentials of `helmSecretName`, for this repository.
    pub auth: Option<&'a BasicAuth>,
    /// `caBundle`, PEM.
    pub ca: Option<&'a [u8]>,
}

/// A fetched chart: its version and archive.
#[derive(Debug)]
pub struct FetchedChart {
    pub version: String,
    pub archive: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered {status}")]
    Status { url: String, status: u16 },
    #[error("{url} refers to an address lariat may not fetch from (--fleet-allow-networks)")]
    NetworkNotAllowed { url: String },
    #[error("{url} is larger than {limit} bytes")]
    TooLarge { url: String, limit: u64 },
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    entries: std::collections::BTreeMap<String, Vec<IndexEntry>>,
}

#[derive(Deserialize)]
struct IndexEntry {
    #[serde(default)]
    version: String,
    #[serde(default)]
    urls: Vec<String>,
    #[serde(default)]
    digest: Option<String>,
}

/// Fetches the chart `source` names, within `limits` (its archive at most a bundle's size).
pub fn fetch(source: &ChartSource, limits: &Limits) -> Result<FetchedChart, ChartError> {
    let certificates =
        git::certificates(source.ca).map_err(|e| ChartError::Invalid(e.to_string()))?;
    let mut configure = git::guarded_client(limits, certificates);
    let client = configure(reqwest::blocking::Client::builder().timeout(REQUEST_TIMEOUT))
        .build()
        .map_err(|e| ChartError::Invalid(git::describe(&e)))?;
    let Some(repo) = source.repo else {
        let url = parse(source.chart)?;
        let archive = get(&client, &url, source.auth, limits.max_bundle_bytes)?;
        let version = source.version.unwrap_or_default().to_string();
        return Ok(FetchedChart { version, archive });
    };
    let base = parse(&format!("{}/", repo.trim_end_matches('/')))?;
    let index_url = base
        .join("index.yaml")
        .map_err(|e| ChartError::Invalid(e.to_string()))?;
    let text = get(&client, &index_url, source.auth, MAX_INDEX_BYTES)?;
    let text = String::from_utf8(text)
        .map_err(|_| ChartError::Invalid(format!("{index_url} is not UTF-8 text")))?;
    let document = lariat_yaml::documents(&text)
        .into_iter()
        .next()
        .unwrap_or(Ok(serde_json::Value::Null))
        .map_err(|e| ChartError::Invalid(format!("{index_url} is not YAML: {e}")))?;
    let index: Index = serde_json::from_value(document).map_err(|e| {
        ChartError::Invalid(format!("{index_url} is not a Helm repository index: {e}"))
    })?;
    let entries = index
        .entries
        .get(source.chart)
        .ok_or_else(|| ChartError::Invalid(format!("{repo} has no chart {:?}", source.chart)))?;
    let version =
        lariat_helm::semver::newest(source.version, entries.iter().map(|e| e.version.as_str()))
            .map_err(|e| ChartError::Invalid(format!("helm.version: {e}")))?
            .ok_or_else(|| {
                ChartError::Invalid(format!(
                    "{repo} has no version of {:?} that meets {:?}",
                    source.chart,
                    source.version.unwrap_or("the newest stable")
                ))
            })?;
    let entry = entries
        .iter()
        .find(|e| e.version == version)
        .expect("chosen among them");
    let first = entry.urls.first().ok_or_else(|| {
        ChartError::Invalid(format!(
            "{index_url}: {} {version} has no URL",
            source.chart
        ))
    })?;
    let url = base
        .join(first)
        .map_err(|e| ChartError::Invalid(format!("{first}: {e}")))?;
    // Credentials go to the repository's own host only.
    let auth = source.auth.filter(|_| {
        url.host_str() == base.host_str()
            && url.port_or_known_default() == base.port_or_known_default()
    });
    let archive = get(&client, &url, auth, limits.max_bundle_bytes)?;
    if let Some(expected) = entry.digest.as_deref().filter(|d| !d.is_empty()) {
        let actual = format!("{:x}", Sha256::digest(&archive));
        if !actual.eq_ignore_ascii_case(expected) {
            return Err(ChartError::Invalid(format!(
                "{url}: its SHA-256 is {actual}, not the index's {expected}"
            )));
        }
    }
    Ok(FetchedChart {
        version: version.to_string(),
        archive,
    })
}

fn parse(url: &str) -> Result<reqwest::Url, ChartError> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| ChartError::Invalid(format!("{url}: {e}")))?;
    match parsed.scheme() {
        "https" | "http" => Ok(parsed),
        "oci" => Err(ChartError::Invalid(format!(
            "{url}: charts from OCI registries are not supported by lariat yet; use the chart's Helm repository, or put the chart in the git repository"
        ))),
        other => Err(ChartError::Invalid(format!(
            "{url}: {other}:// is not a Helm repository URL (https://)"
        ))),
    }
}

/// The body of `url`, at most `limit` bytes; credentials only over https.
fn get(
    client: &reqwest::blocking::Client,
    url: &reqwest::Url,
    auth: Option<&BasicAuth>,
    limit: u64,
) -> Result<Vec<u8>, ChartError> {
    let shown = url.to_string();
    let mut request = client.get(url.clone());
    if let Some(auth) = auth {
        if url.scheme() != "https" {
            return Err(ChartError::Invalid(format!(
                "{shown}: credentials (helmSecretName) are sent over https only"
            )));
        }
        request = request.basic_auth(&auth.username, Some(&auth.password));
    }
    let response = request.send().map_err(|e| {
        let reason = git::describe(&e);
        if git::is_refusal(&reason) {
            ChartError::NetworkNotAllowed { url: shown.clone() }
        } else {
            ChartError::Unreachable {
                url: shown.clone(),
                reason,
            }
        }
    })?;
    if !response.status().is_success() {
        return Err(ChartError::Status {
            url: shown,
            status: response.status().as_u16(),
        });
    }
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(ChartError::TooLarge { url: shown, limit });
    }
    let mut body = Vec::new();
    response
        .take(limit + 1)
        .read_to_end(&mut body)
        .map_err(|e| ChartError::Unreachable {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
    if body.len() as u64 > limit {
        return Err(ChartError::TooLarge { url: shown, limit });
    }
    Ok(body)
}

/// Where a bundle keeps the archive of a chart fetched for it, among its files.
pub const FETCHED_CHARTS_DIR: &str = ".fleet-charts";
/// On a Bundle whose chart could not be fetched: why. Its clusters keep what they run and
/// say so (`InvalidCustomization`), and the other bundles of the commit deploy.
pub const CHART_ERROR_ANNOTATION: &str = "fleet.lariat.dev/chart-error";

/// The credential and authorities a GitRepo gives charts from Helm repositories:
/// `helmSecretName`'s `username`/`password` (for repositories `helmRepoURLRegex` matches)
/// and `cacerts`, with `caBundle`.
pub struct RepoAccess {
    pub auth: Option<BasicAuth>,
    pub url_pattern: Option<regex::Regex>,
    pub ca: Option<Vec<u8>>,
}

impl RepoAccess {
    fn auth_for(&self, url: &str) -> Option<&BasicAuth> {
        self.auth
            .as_ref()
            .filter(|_| self.url_pattern.as_ref().is_none_or(|p| p.is_match(url)))
    }
}

/// Fetches the chart of each of `bundles` that comes from a Helm repository or a URL, and
/// puts its archive among the bundle's files (`helm.chart` then names it); returns, for
/// each bundle, why its chart could not be fetched, if it could not.
pub fn fetch_all(
    bundles: &mut [crate::scan::ScannedBundle],
    access: &RepoAccess,
    limits: &Limits,
) -> Vec<Option<String>> {
    use base64::Engine as _;
    let mut errors = Vec::with_capacity(bundles.len());
    for bundle in bundles.iter_mut() {
        let Some(helm) = bundle
            .spec
            .helm
            .as_mut()
            .filter(|h| crate::scan::is_remote(h))
        else {
            errors.push(None);
            continue;
        };
        let chart = helm.chart.clone().unwrap_or_default();
        let repo = helm.repo.clone().filter(|r| !r.is_empty());
        let source = ChartSource {
            repo: repo.as_deref(),
            chart: &chart,
            version: helm.version.as_deref(),
            auth: access.auth_for(repo.as_deref().unwrap_or(&chart)),
            ca: access.ca.as_deref(),
        };
        let shown = match &repo {
            Some(repo) => format!("chart {chart:?} from {repo}"),
            None => format!("chart {chart}"),
        };
        let fetched = fetch(&source, limits)
            .map_err(|e| e.to_string())
            .and_then(|fetched| {
                let name = chart
                    .rsplit('/')
                    .next()
                    .unwrap_or("chart")
                    .trim_end_matches(".tgz");
                let file = match repo {
                    Some(_) => format!("{FETCHED_CHARTS_DIR}/{name}-{}.tgz", fetched.version),
                    None => format!("{FETCHED_CHARTS_DIR}/{name}.tgz"),
                };
                lariat_helm::Chart::load_archive(&file, &fetched.archive)
                    .map(|_| (file, fetched.archive))
                    .map_err(|e| e.to_string())
            });
        match fetched {
            Ok((file, archive)) => {
                helm.chart = Some(file.clone());
                bundle.spec.resources.get_or_insert_default().push(
                    lariat_api::fleet::BundleResource {
                        name: Some(file),
                        content: Some(base64::engine::general_purpose::STANDARD.encode(archive)),
                        encoding: Some("base64".into()),
                    },
                );
                errors.push(None);
            }
            Err(e) => {
                let fleet_yaml = match bundle.root.as_str() {
                    "" => "fleet.yaml".to_string(),
                    root => format!("{root}/fleet.yaml"),
                };
                errors.push(Some(format!("{fleet_yaml}: {shown}: {e}")));
            }
        }
    }
    errors
}
