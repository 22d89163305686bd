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

mod oci;

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
        // Each redirect's host checked against the allowed networks as the first URL's was
        // (through a proxy the client's own guard sees only the proxy).
        let guard = limits.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else if attempt.url().scheme() != "https" {
                attempt.error("a redirect away from https")
            } else if git::checked_host(attempt.url().as_str(), &guard).is_err() {
                attempt.error(
                    "a redirect to an address lariat may not fetch from (--fleet-allow-networks)",
                )
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
        let oci = match source.repo {
            Some(repo) if repo.starts_with("oci://") => {
                Some(format!("{}/{}", repo.trim_end_matches('/'), source.chart))
            }
            None if source.chart.starts_with("oci://") => Some(source.chart.to_string()),
            _ => None,
        };
        if let Some(reference) = oci {
            let reference = oci::Reference::parse(&reference)?;
            return oci::pull(self, &reference, source.version, source.auth);
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
    // helmRepoURLRegex reads the URL as written: a user part would move the host after it.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(ChartError::Invalid(format!(
            "{}: credentials belong in helmSecretName, not in the URL",
            shown(&parsed)
        )));
    }
    match parsed.scheme() {
        "https" | "http" => Ok(parsed),
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
    let mut request = client.get(url.clone());
    if let Some(auth) = auth {
        if url.scheme() != "https" {
            return Err(ChartError::Invalid(format!(
                "{}: credentials (helmSecretName) are sent over https only",
                shown(url)
            )));
        }
        request = request.basic_auth(&auth.username, Some(&auth.password));
    }
    read_body(send(request, url)?, url, limit)
}

/// Sends a request to `url`, its failure to connect said as the guard or the network saw it.
fn send(
    request: reqwest::blocking::RequestBuilder,
    url: &reqwest::Url,
) -> Result<reqwest::blocking::Response, ChartError> {
    request.send().map_err(|e| {
        let reason = git::describe(&e);
        if git::is_refusal(&reason) {
            ChartError::NetworkNotAllowed { url: shown(url) }
        } else {
            ChartError::Unreachable {
                url: shown(url),
                reason,
            }
        }
    })
}

/// A successful answer's body, at most `limit` bytes.
fn read_body(
    response: reqwest::blocking::Response,
    url: &reqwest::Url,
    limit: u64,
) -> Result<Vec<u8>, ChartError> {
    let shown = shown(url);
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
/// puts its archive among the bundle's files (`helm.chart` then names it), then the
/// dependencies a chart of the repository lacks (as `helm dependency update` would, into its
/// `charts/`); returns, for each bundle, why its chart could not be completed, if it could not.
pub fn fetch_all(
    bundles: &mut [crate::scan::ScannedBundle],
    access: &RepoAccess,
    limits: &Limits,
) -> Vec<Option<String>> {
    let mut fetcher = Fetcher::new(access.ca.as_deref(), limits).map_err(|e| e.to_string());
    bundles
        .iter_mut()
        .map(|bundle| {
            let fetcher = fetcher.as_mut().map_err(|e| e.clone());
            let done = fetcher.and_then(|fetcher| {
                fetch_chart(bundle, fetcher, access)?;
                fetch_dependencies(bundle, fetcher, access)
            });
            done.err().map(|e| {
                let fleet_yaml = match bundle.root.as_str() {
                    "" => "fleet.yaml".to_string(),
                    root => format!("{root}/fleet.yaml"),
                };
                format!("{fleet_yaml}: {e}")
            })
        })
        .collect()
}

/// The bytes of the bundle's files as it carries them.
fn bundle_bytes(bundle: &crate::scan::ScannedBundle) -> u64 {
    bundle
        .spec
        .resources
        .iter()
        .flatten()
        .map(|r| r.content.as_ref().map_or(0, String::len) as u64)
        .sum()
}

/// Adds `files` to the bundle, unless they would take it past the bundle limit (what is
/// fetched and copied counts as what is read from git).
fn add_files(
    bundle: &mut crate::scan::ScannedBundle,
    files: Vec<lariat_api::fleet::BundleResource>,
    limits: &Limits,
) -> Result<(), String> {
    let added: u64 = files
        .iter()
        .map(|r| r.content.as_ref().map_or(0, String::len) as u64)
        .sum();
    if bundle_bytes(bundle) + added > limits.max_bundle_bytes {
        return Err(format!(
            "with its fetched charts the bundle is larger than {} bytes (--fleet-max-bundle-bytes)",
            limits.max_bundle_bytes
        ));
    }
    bundle.spec.resources.get_or_insert_default().extend(files);
    Ok(())
}

/// A file of the bundle holding a fetched archive.
fn add_archive(
    bundle: &mut crate::scan::ScannedBundle,
    file: String,
    archive: &[u8],
    limits: &Limits,
) -> Result<(), String> {
    use base64::Engine as _;
    let resource = lariat_api::fleet::BundleResource {
        name: Some(file),
        content: Some(base64::engine::general_purpose::STANDARD.encode(archive)),
        encoding: Some("base64".into()),
    };
    add_files(bundle, vec![resource], limits)
}

/// A file name of the bundle made from what a repository says, tamed.
fn safe_stem(stem: &str) -> String {
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
    stem.trim_start_matches('.').to_string()
}

/// The bundle's chart, when it comes from a Helm repository or a URL.
fn fetch_chart(
    bundle: &mut crate::scan::ScannedBundle,
    fetcher: &mut Fetcher,
    access: &RepoAccess,
) -> Result<(), String> {
    let Some(helm) = bundle
        .spec
        .helm
        .as_ref()
        .filter(|h| crate::scan::is_remote(h))
    else {
        return Ok(());
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
        .fetch(&source)
        .map_err(|e| format!("{shown}: {e}"))?;
    let name = chart
        .rsplit('/')
        .next()
        .unwrap_or("chart")
        .trim_end_matches(".tgz");
    let stem = match repo {
        Some(_) => format!("{name}-{}", fetched.version),
        None => name.to_string(),
    };
    let file = format!("{FETCHED_CHARTS_DIR}/{}.tgz", safe_stem(&stem));
    lariat_helm::Chart::load_archive(&file, &fetched.archive)
        .map_err(|e| format!("{shown}: {e}"))?;
    add_archive(bundle, file.clone(), &fetched.archive, &fetcher.limits)?;
    if let Some(helm) = bundle.spec.helm.as_mut() {
        helm.chart = Some(file);
    }
    Ok(())
}

/// The dependencies the bundle's chart lacks, into its `charts/`: from an https Helm
/// repository (the version a range may choose, as `helm dependency update` chooses it), or a
/// `file://` directory within the bundle.
fn fetch_dependencies(
    bundle: &mut crate::scan::ScannedBundle,
    fetcher: &mut Fetcher,
    access: &RepoAccess,
) -> Result<(), String> {
    let mut dependencies = std::mem::take(&mut bundle.chart_dependencies);
    if dependencies.len() > MAX_DEPENDENCIES {
        return Err(format!(
            "Chart.yaml lists more than {MAX_DEPENDENCIES} dependencies to fetch"
        ));
    }
    // One fetch for a chart listed twice (under two aliases).
    let mut seen = std::collections::HashSet::new();
    dependencies.retain(|d| seen.insert((d.repository.clone(), d.name.clone(), d.version.clone())));
    // Copies are made from the files as they came from git, never from other copies.
    let original = bundle.spec.resources.clone().unwrap_or_default();
    let chart_dir = bundle
        .spec
        .helm
        .as_ref()
        .and_then(|h| h.chart.clone())
        .unwrap_or_default();
    let in_chart = |path: &str| match chart_dir.as_str() {
        "" => path.to_string(),
        dir => format!("{dir}/{path}"),
    };
    for dependency in dependencies {
        let name = &dependency.name;
        let repository = dependency.repository.as_str();
        if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
            return Err(format!(
                "Chart.yaml: dependency {name:?} is not a chart's name"
            ));
        }
        if let Some(path) = repository.strip_prefix("file://") {
            let from = normalize_path(&in_chart(path)).ok_or_else(|| {
                format!("Chart.yaml: dependency {name}: {repository} leaves the bundle")
            })?;
            let inside = |dir: &str, path: &str| {
                dir.is_empty() || path == dir || path.starts_with(&format!("{dir}/"))
            };
            if inside(&from, &chart_dir) {
                return Err(format!(
                    "Chart.yaml: dependency {name}: {repository} holds the chart itself"
                ));
            }
            let copies = copies_of(&original, &from, &in_chart(&format!("charts/{name}")))
                .map_err(|e| format!("Chart.yaml: dependency {name}: {e}"))?;
            add_files(bundle, copies, &fetcher.limits)?;
            continue;
        }
        if !repository.starts_with("https://") && !repository.starts_with("oci://") {
            return Err(format!(
                "Chart.yaml: dependency {name} from {repository:?} cannot be fetched by lariat \
                 (https Helm repositories, OCI registries and file:// directories of the bundle \
                 can; repository names cannot): put the chart under charts/"
            ));
        }
        let source = ChartSource {
            repo: Some(repository),
            chart: name,
            version: Some(dependency.version.as_str()).filter(|v| !v.is_empty()),
            auth: access.auth_for(repository),
            ca: access.ca.as_deref(),
        };
        let fetched = fetcher
            .fetch(&source)
            .map_err(|e| format!("Chart.yaml: dependency {name} from {repository}: {e}"))?;
        let file = in_chart(&format!(
            "charts/{}.tgz",
            safe_stem(&format!("{name}-{}", fetched.version))
        ));
        lariat_helm::Chart::load_archive(&file, &fetched.archive)
            .map_err(|e| format!("Chart.yaml: dependency {name}: {e}"))?;
        add_archive(bundle, file, &fetched.archive, &fetcher.limits)?;
    }
    Ok(())
}

/// The most dependencies fetched for one chart: 64 (real charts list a handful).
const MAX_DEPENDENCIES: usize = 64;

/// The files of `resources` under directory `from`, named under `to` (a `file://`
/// dependency, as `helm dependency update` packages it into `charts/`).
fn copies_of(
    resources: &[lariat_api::fleet::BundleResource],
    from: &str,
    to: &str,
) -> Result<Vec<lariat_api::fleet::BundleResource>, String> {
    let prefix = format!("{from}/");
    let copies: Vec<lariat_api::fleet::BundleResource> = resources
        .iter()
        .filter_map(|r| {
            let rest = r.name.as_deref()?.strip_prefix(&prefix)?;
            Some(lariat_api::fleet::BundleResource {
                name: Some(format!("{to}/{rest}")),
                ..r.clone()
            })
        })
        .collect();
    if copies.is_empty() {
        return Err(format!("{from} is not a directory of the bundle"));
    }
    Ok(copies)
}

/// `a/b/../c` as `a/c`; `None` when the path climbs above where it starts.
fn normalize_path(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}
