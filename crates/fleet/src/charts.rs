//! Charts from Helm repositories, fetched when a commit is read (as Fleet's `fleet apply`
//! fetches them) and carried in the bundle as the chart's archive, so that agents never reach
//! the repository: `helm.repo` with `helm.chart` (a name) and `helm.version` (a version or a
//! range; the newest stable version when none), or `helm.chart` an https URL of an archive.
//!
//! Every request goes through the same guarded client as git's (addresses refused unless
//! `--fleet-allow-networks` allows them, the server's proxies, the GitRepo's `caBundle`),
//! credentials only over https, each answer bounded in size and time, and the archive checked
//! against the digest the index gives.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
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
    Fetcher::new(source.ca, limits)?.fetch(source)
}

/// Fetches charts for one commit: one https client, each repository's index read once,
/// each archive downloaded once, and all archives together within a bundle's size.
struct Fetcher {
    client: reqwest::blocking::Client,
    limits: Limits,
    indexes: HashMap<String, Arc<Index>>,
    archives: HashMap<String, Arc<Vec<u8>>>,
    fetched_bytes: u64,
}

/// The longest `helm.version` read: 256 bytes (real ranges are a few dozen).
const MAX_VERSION_BYTES: usize = 256;
/// Redirects followed, each to https only.
const MAX_REDIRECTS: usize = 5;

impl Fetcher {
    fn new(ca: Option<&[u8]>, limits: &Limits) -> Result<Fetcher, ChartError> {
        let certificates = git::certificates(ca).map_err(|e| ChartError::Invalid(e.to_string()))?;
        let mut configure = git::guarded_client(limits, certificates);
        // A redirect may not leave https (reqwest drops the credential on another host).
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else if attempt.url().scheme() != "https" {
                attempt.error("a redirect away from https")
            } else {
                attempt.follow()
            }
        });
        let builder = reqwest::blocking::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(redirects);
        let client = configure(builder)
            .build()
            .map_err(|e| ChartError::Invalid(git::describe(&e)))?;
        Ok(Fetcher {
            client,
            limits: limits.clone(),
            indexes: HashMap::new(),
            archives: HashMap::new(),
            fetched_bytes: 0,
        })
    }

    fn fetch(&mut self, source: &ChartSource) -> Result<FetchedChart, ChartError> {
        if source.version.is_some_and(|v| v.len() > MAX_VERSION_BYTES) {
            return Err(ChartError::Invalid(format!(
                "helm.version is longer than {MAX_VERSION_BYTES} bytes"
            )));
        }
        let Some(repo) = source.repo else {
            let url = parse(source.chart)?;
            let archive = self.archive(&url, source.auth)?;
            let version = source.version.unwrap_or_default().to_string();
            return Ok(FetchedChart {
                version,
                archive: archive.to_vec(),
            });
        };
        let base = parse(&format!("{}/", repo.trim_end_matches('/')))?;
        let index = self.index(&base, source.auth)?;
        let entries = index.entries.get(source.chart).ok_or_else(|| {
            ChartError::Invalid(format!("{} has no chart {:?}", shown(&base), source.chart))
        })?;
        let version =
            lariat_helm::semver::newest(source.version, entries.iter().map(|e| e.version.as_str()))
                .map_err(|e| ChartError::Invalid(format!("helm.version: {e}")))?
                .ok_or_else(|| {
                    ChartError::Invalid(format!(
                        "{} has no version of {:?} that meets {:?}",
                        shown(&base),
                        source.chart,
                        source.version.unwrap_or("the newest stable")
                    ))
                })?;
        let Some(entry) = entries.iter().find(|e| e.version == version) else {
            return Err(ChartError::Invalid(format!("{version}: not in the index")));
        };
        let first = entry.urls.first().ok_or_else(|| {
            ChartError::Invalid(format!(
                "{}: {} {version} has no URL",
                shown(&base),
                source.chart
            ))
        })?;
        let url = base
            .join(first)
            .map_err(|e| ChartError::Invalid(format!("{first}: {e}")))?;
        // Credentials go to the repository's own host only.
        let same_origin = url.host_str() == base.host_str()
            && url.port_or_known_default() == base.port_or_known_default();
        let archive = self.archive(&url, source.auth.filter(|_| same_origin))?;
        if let Some(expected) = entry.digest.as_deref().filter(|d| !d.is_empty()) {
            let actual = format!("{:x}", Sha256::digest(archive.as_slice()));
            if !actual.eq_ignore_ascii_case(expected) {
                return Err(ChartError::Invalid(format!(
                    "{}: its SHA-256 is {actual}, not the index's {expected}",
                    shown(&url)
                )));
            }
        }
        Ok(FetchedChart {
            version: version.to_string(),
            archive: archive.to_vec(),
        })
    }

    /// Refuses a URL whose host the limits refuse, before any request, as a git remote's:
    /// the https client checks every address it connects to itself, but through a proxy of
    /// the server's environment it connects only to the proxy.
    fn check(&self, url: &reqwest::Url) -> Result<(), ChartError> {
        match git::checked_host(url.as_str(), &self.limits) {
            Ok(_) => Ok(()),
            Err(git::GitError::NetworkNotAllowed { .. }) => {
                Err(ChartError::NetworkNotAllowed { url: shown(url) })
            }
            Err(e) => Err(ChartError::Invalid(format!("{}: {e}", shown(url)))),
        }
    }

    /// A repository's index, read once per commit.
    fn index(
        &mut self,
        base: &reqwest::Url,
        auth: Option<&BasicAuth>,
    ) -> Result<Arc<Index>, ChartError> {
        if let Some(index) = self.indexes.get(base.as_str()) {
            return Ok(index.clone());
        }
        let url = base
            .join("index.yaml")
            .map_err(|e| ChartError::Invalid(e.to_string()))?;
        self.check(&url)?;
        let text = get(&self.client, &url, auth, MAX_INDEX_BYTES)?;
        let invalid = |what: &str| ChartError::Invalid(format!("{} {what}", shown(&url)));
        let text = String::from_utf8(text).map_err(|_| invalid("is not UTF-8 text"))?;
        // Not quoted: an error could show what the answer holds.
        let document = lariat_yaml::documents(&text)
            .into_iter()
            .next()
            .unwrap_or(Ok(serde_json::Value::Null))
            .map_err(|_| invalid("is not YAML"))?;
        let index: Index = serde_json::from_value(document).map_err(|_| {
            invalid("is not a Helm repository index (entries of versions and urls)")
        })?;
        let index = Arc::new(index);
        self.indexes.insert(base.to_string(), index.clone());
        Ok(index)
    }

    /// An archive, downloaded once per commit; all of a commit's together at most a
    /// bundle's size.
    fn archive(
        &mut self,
        url: &reqwest::Url,
        auth: Option<&BasicAuth>,
    ) -> Result<Arc<Vec<u8>>, ChartError> {
        if let Some(archive) = self.archives.get(url.as_str()) {
            return Ok(archive.clone());
        }
        let left = self
            .limits
            .max_bundle_bytes
            .saturating_sub(self.fetched_bytes);
        let archive = get(&self.client, url, auth, left)?;
        self.fetched_bytes += archive.len() as u64;
        let archive = Arc::new(archive);
        self.archives.insert(url.to_string(), archive.clone());
        Ok(archive)
    }
}

/// A URL as errors show it: without a password it may hold.
fn shown(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    let _ = url.set_password(None);
    url.to_string()
}

fn parse(url: &str) -> Result<reqwest::Url, ChartError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| ChartError::Invalid(format!("helm.repo or helm.chart is not a URL: {e}")))?;
    match parsed.scheme() {
        "https" | "http" => Ok(parsed),
        "oci" => Err(ChartError::Invalid(format!(
            "{}: charts from OCI registries are not supported by lariat yet; use the chart's Helm repository, or put the chart in the git repository",
            shown(&parsed)
        ))),
        other => Err(ChartError::Invalid(format!(
            "{}: {other}:// is not a Helm repository URL (https://)",
            shown(&parsed)
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
    let shown = shown(url);
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
/// `helmSecretName`'s `username`/`password`, for the repositories whose URL
/// `helmRepoURLRegex` matches from its start (none without it, as in Fleet: a credential is
/// never sent where the GitRepo did not say), and `cacerts`, with `caBundle`.
pub struct RepoAccess {
    auth: Option<BasicAuth>,
    /// `helmRepoURLRegex`, anchored at the start (`^(?:...)`).
    url_pattern: Option<regex::Regex>,
    ca: Option<Vec<u8>>,
}

impl RepoAccess {
    pub fn new(
        auth: Option<BasicAuth>,
        url_pattern: Option<&str>,
        ca: Option<Vec<u8>>,
    ) -> Result<RepoAccess, regex::Error> {
        let url_pattern = url_pattern
            .filter(|p| !p.is_empty())
            .map(|p| {
                regex::RegexBuilder::new(&format!("^(?:{p})"))
                    .size_limit(1 << 20)
                    .build()
            })
            .transpose()?;
        Ok(RepoAccess {
            auth,
            url_pattern,
            ca,
        })
    }

    fn auth_for(&self, url: &str) -> Option<&BasicAuth> {
        self.auth
            .as_ref()
            .filter(|_| self.url_pattern.as_ref().is_some_and(|p| p.is_match(url)))
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
    let mut fetcher = Fetcher::new(access.ca.as_deref(), limits);
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
        let fetched = fetcher
            .as_mut()
            .map_err(|e| e.to_string())
            .and_then(|fetcher| fetcher.fetch(&source).map_err(|e| e.to_string()))
            .and_then(|fetched| {
                let name = chart
                    .rsplit('/')
                    .next()
                    .unwrap_or("chart")
                    .trim_end_matches(".tgz");
                let stem = match repo {
                    Some(_) => format!("{name}-{}", fetched.version),
                    None => name.to_string(),
                };
                // A file name of the bundle: what the repository says, tamed.
                let stem: String = stem
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let file = format!("{FETCHED_CHARTS_DIR}/{}.tgz", stem.trim_start_matches('.'));
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
