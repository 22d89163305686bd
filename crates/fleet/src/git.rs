//! Git, through gix (pure Rust; no `git` program): a bare clone per GitRepo under the data
//! directory, fetched shallowly, and files read straight from the fetched commit's tree (no
//! work tree to keep in step).
//!
//! Over ssh, gix runs the machine's OpenSSH client (as git does), confined here to the
//! Secret's key and known hosts: no ssh configuration, agent or default key of the server's
//! own user is ever used, and an unknown host key is refused.
//!
//! What is read is bounded by [`Limits`]: sizes come from the objects' headers and are
//! checked before any content is inflated, and gix itself allocates no object larger than
//! [`Limits::object_ceiling`] (`gitoxide.objects.allocLimit`), not even while a fetch indexes
//! the pack it received. A remote's host is resolved and every address checked against the
//! networks the server may fetch from before any connection ([`Limits::allows`]); see
//! [`checked_host`] for how the connection is then held to the checked addresses.
//!
//! Everything here blocks (gix's network client is blocking): callers run it on a blocking
//! thread.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use gix::remote::Direction;
use gix::remote::fetch::Shallow;

use crate::limits::{LimitError, Limits};

/// Where to fetch from, what, and as whom.
#[derive(Clone, Debug)]
pub struct Source {
    /// `https://`, `http://`, `ssh://` (or `user@host:path`), or `file://`.
    pub url: String,
    pub reference: Reference,
    pub auth: Option<Credential>,
    /// PEM certificates of authorities trusted for https besides the public ones.
    pub ca_bundle: Option<Vec<u8>>,
}

/// What to deploy: the tip of a branch, or one fixed revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reference {
    Branch(String),
    /// A tag, a branch, or a full commit id.
    Revision(String),
}

/// The credential a GitRepo's Secret holds.
#[derive(Clone, Debug)]
pub enum Credential {
    Basic(BasicAuth),
    Ssh(SshKey),
}

/// A user name and password (or token) for https.
#[derive(Clone)]
pub struct BasicAuth {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password, not even in a debug log.
        f.debug_struct("BasicAuth")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A private key for ssh, and the host keys the server must present (OpenSSH's
/// `known_hosts` format).
#[derive(Clone)]
pub struct SshKey {
    pub private_key: Vec<u8>,
    pub known_hosts: Vec<u8>,
}

impl std::fmt::Debug for SshKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshKey").finish_non_exhaustive()
    }
}

/// Why a fetch or a read failed, in words a GitRepo's condition can carry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GitError {
    #[error("{0} is not a URL lariat can fetch: use https://, http://, ssh:// or file://")]
    UnsupportedUrl(String),
    #[error("spec.caBundle holds no PEM certificate lariat can read: {0}")]
    InvalidCaBundle(String),
    #[error("{0:?} is not a valid branch or revision name")]
    InvalidName(String),
    #[error(
        "{url} is an ssh URL: spec.clientSecretName must name a Secret with ssh-privatekey and known_hosts"
    )]
    SshKeyMissing { url: String },
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} refused the credential: {reason}")]
    Unauthorized { url: String, reason: String },
    #[error("the host key of {url} is not one the Secret's known_hosts lists: {reason}")]
    HostKeyRefused { url: String, reason: String },
    #[error("branch {branch:?} does not exist in {url}")]
    NoSuchBranch { url: String, branch: String },
    #[error(
        "revision {revision:?} is no tag, branch or commit {url} serves (a commit is named by its full 40-character id)"
    )]
    NoSuchRevision { url: String, revision: String },
    #[error("path {path:?} does not exist at commit {commit}")]
    NoSuchPath { path: String, commit: String },
    #[error("the local clone in {dir} is unusable: {reason}")]
    Local { dir: String, reason: String },
    /// One fixed message, decided before any connection: whether anything answers at the
    /// address is never told.
    #[error(
        "the repository's address {host} is in a network this server does not fetch from; an administrator allows it with --fleet-allow-networks"
    )]
    NetworkNotAllowed { host: String },
    #[error(transparent)]
    TooLarge(#[from] LimitError),
}

impl GitError {
    /// The same error with `secret` replaced wherever it appears.
    fn without(self, secret: &str) -> GitError {
        let scrub = |text: String| text.replace(secret, "***");
        match self {
            GitError::UnsupportedUrl(url) => GitError::UnsupportedUrl(scrub(url)),
            GitError::InvalidCaBundle(reason) => GitError::InvalidCaBundle(scrub(reason)),
            GitError::InvalidName(name) => GitError::InvalidName(scrub(name)),
            GitError::SshKeyMissing { url } => GitError::SshKeyMissing { url: scrub(url) },
            GitError::Unreachable { url, reason } => GitError::Unreachable {
                url: scrub(url),
                reason: scrub(reason),
            },
            GitError::Unauthorized { url, reason } => GitError::Unauthorized {
                url: scrub(url),
                reason: scrub(reason),
            },
            GitError::HostKeyRefused { url, reason } => GitError::HostKeyRefused {
                url: scrub(url),
                reason: scrub(reason),
            },
            GitError::NoSuchBranch { url, branch } => GitError::NoSuchBranch {
                url: scrub(url),
                branch,
            },
            GitError::NoSuchRevision { url, revision } => GitError::NoSuchRevision {
                url: scrub(url),
                revision,
            },
            GitError::NoSuchPath { path, commit } => GitError::NoSuchPath { path, commit },
            GitError::Local { dir, reason } => GitError::Local {
                dir,
                reason: scrub(reason),
            },
            GitError::NetworkNotAllowed { host } => {
                GitError::NetworkNotAllowed { host: scrub(host) }
            }
            GitError::TooLarge(error) => GitError::TooLarge(error),
        }
    }
}

/// The password of a URL's user information (`https://user:password@host/...`).
fn url_password(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

/// What a fetch found: the commit the branch or revision points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub commit: String,
}

/// Where ssh's standard error goes, beside the key, to be read when a fetch fails.
const SSH_STDERR: &str = "stderr";

/// Where a fetched reference is kept in the bare clone.
const TRACKING: &str = "refs/lariat/deployed";

/// Fetches `source`'s branch or revision (its commit only) into the bare repository at
/// `dir`, creating it on first use, within `limits` (a remote in a network they do not allow
/// is refused before any connection). A password in the URL, or the Secret's, is in no
/// error.
pub fn fetch(dir: &Path, source: &Source, limits: &Limits) -> Result<Fetched, GitError> {
    let mut result = fetch_unscrubbed(dir, source, limits);
    let secrets = [
        url_password(&source.url),
        match &source.auth {
            Some(Credential::Basic(auth)) => Some(auth.password.as_str()),
            _ => None,
        },
    ];
    for secret in secrets.into_iter().flatten().filter(|s| s.len() >= 3) {
        result = result.map_err(|e| e.without(secret));
    }
    result
}

fn fetch_unscrubbed(dir: &Path, source: &Source, limits: &Limits) -> Result<Fetched, GitError> {
    // gix's https client (reqwest) takes rustls' process-wide provider: ring, lariat's one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = &source.url;
    let scheme = gix::url::parse(gix::bstr::BStr::new(url))
        .map(|parsed| parsed.scheme)
        .map_err(|_| GitError::UnsupportedUrl(url.clone()))?;
    let local = |reason: String| GitError::Local {
        dir: dir.display().to_string(),
        reason,
    };
    // The clone's directory (ssh's files go beside it); the clone in it is made on first use.
    std::fs::create_dir_all(dir).map_err(|e| local(e.to_string()))?;
    // The key and known hosts live in files only for the length of the fetch.
    let mut ssh_files = None;
    let mut overrides = vec![alloc_limit(limits)];
    match scheme {
        gix::url::Scheme::Https | gix::url::Scheme::Http => {
            // Refused here with the fixed message; the https client checks again every
            // address it connects to (`guarded`).
            checked_host(url, limits)?;
        }
        // Only an explicit `file://` URL is a repository on this disk: gix would also take a
        // bare path, which the server's allowed directories (checked on `file://`) never see.
        // A `file://` repository is no network's: the server's allowed directories decide.
        gix::url::Scheme::File if url.starts_with("file://") => {}
        gix::url::Scheme::Ssh => {
            let Some(Credential::Ssh(key)) = &source.auth else {
                return Err(GitError::SshKeyMissing { url: url.clone() });
            };
            let pinned = match checked_host(url, limits)? {
                Some(checked) => checked.ssh_pin(),
                None => {
                    return Err(GitError::Unreachable {
                        url: url.clone(),
                        reason: "its host name does not resolve".into(),
                    });
                }
            };
            let (files, command) =
                ssh_command(dir, key, pinned.as_ref()).map_err(|e| local(e.to_string()))?;
            ssh_files = Some(files);
            overrides.push(format!("core.sshCommand={command}"));
            overrides.push("ssh.variant=ssh".to_string());
        }
        _ => return Err(GitError::UnsupportedUrl(url.clone())),
    };
    // Opened once per poll (a poll is mostly this and the remote's references); made on the
    // first.
    let open = || gix::open_opts(dir, isolated().config_overrides(overrides.clone()));
    let repo = match open() {
        Ok(repo) => repo,
        // Only an empty directory is new: a clone that does not open says why.
        Err(error) if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) => {
            return Err(local(error.to_string()));
        }
        Err(_) => {
            gix::init_bare(dir).map_err(|e| local(e.to_string()))?;
            open().map_err(|e| local(e.to_string()))?
        }
    };
    let received = receive_reference(&repo, source, limits);
    // ssh says why it failed on its standard error, which gix does not read for host keys.
    let received = match (received, &ssh_files) {
        (
            Err(GitError::Unreachable { reason, .. } | GitError::Unauthorized { reason, .. }),
            Some(files),
        ) => {
            let said = std::fs::read_to_string(files.path().join(SSH_STDERR)).unwrap_or_default();
            let said: Vec<&str> = said
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with('@'))
                .collect();
            let said = said[said.len().saturating_sub(2)..].join(" ");
            Err(classify(
                url,
                if said.is_empty() { reason } else { said },
                limits,
            ))
        }
        (received, _) => received,
    };
    received?;
    let commit = repo
        .find_reference(TRACKING)
        .map_err(|e| local(e.to_string()))?
        .peel_to_id()
        .map_err(|e| local(e.to_string()))?;
    Ok(Fetched {
        commit: commit.to_string(),
    })
}

/// Fetches the branch, or finds the revision among the remote's tags, branches and commits.
fn receive_reference(
    repo: &gix::Repository,
    source: &Source,
    limits: &Limits,
) -> Result<(), GitError> {
    let url = &source.url;
    let receive = |remote_ref: &str| receive(repo, source, remote_ref, limits);
    match &source.reference {
        Reference::Branch(branch) => {
            let name = valid_name(branch)?;
            let fetched = receive(&format!("refs/heads/{name}"))?;
            if !fetched {
                return Err(GitError::NoSuchBranch {
                    url: url.clone(),
                    branch: branch.clone(),
                });
            }
        }
        Reference::Revision(revision) => {
            let name = valid_name(revision)?;
            let named =
                receive(&format!("refs/tags/{name}"))? || receive(&format!("refs/heads/{name}"))?;
            let no_such = || GitError::NoSuchRevision {
                url: url.clone(),
                revision: revision.clone(),
            };
            // A commit id is asked for by itself (servers allow any reachable commit with
            // git's protocol version 2). The server was just reached twice: failing now, it
            // refused the commit (and may hang up before reading the whole request).
            if !named {
                let id = gix::ObjectId::from_hex(name.as_bytes()).map_err(|_| no_such())?;
                match receive(&id.to_string()) {
                    Ok(_) => {}
                    Err(GitError::Unreachable { .. }) => return Err(no_such()),
                    Err(other) => return Err(other),
                }
            }
        }
    }
    Ok(())
}

/// A branch or revision name that can stand in a refspec: no `:`, `*`, `^` and the like
/// (what git refuses in a reference name), so a name never widens what is fetched.
fn valid_name(name: &str) -> Result<&str, GitError> {
    let invalid = || GitError::InvalidName(name.to_string());
    if name.is_empty() || name.starts_with('-') || name.starts_with("refs/") {
        return Err(invalid());
    }
    gix::validate::reference::name_partial(name.into()).map_err(|_| invalid())?;
    Ok(name)
}

/// Fetches `remote_ref` (a full reference name or a commit id) shallowly into [`TRACKING`];
/// false if the remote has no such reference.
fn receive(
    repo: &gix::Repository,
    source: &Source,
    remote_ref: &str,
    limits: &Limits,
) -> Result<bool, GitError> {
    let url = &source.url;
    let refspec = format!("+{remote_ref}:{TRACKING}");
    let remote = repo
        .remote_at(url.as_str())
        .map_err(|e| GitError::UnsupportedUrl(format!("{url} ({e})")))?
        .with_refspecs(Some(refspec.as_str()), Direction::Fetch)
        .map_err(|e| GitError::Local {
            dir: repo.path().display().to_string(),
            reason: e.to_string(),
        })?;
    let mut connection = remote
        .connect(Direction::Fetch)
        .map_err(|e| classify(url, describe(&e), limits))?;
    if let Some(options) = guarded(repo, url, source.ca_bundle.as_deref(), limits)? {
        connection = connection.with_transport_options(options);
    }
    let auth = match &source.auth {
        Some(Credential::Basic(auth)) => Some(auth.clone()),
        _ => None,
    };
    // Only the Secret's credential, never a helper or a prompt from the machine's git config.
    connection.set_credentials(move |action| match (action, &auth) {
        (gix::credentials::helper::Action::Get(context), Some(auth)) => {
            Ok(Some(gix::credentials::protocol::Outcome {
                credentials: gix::sec::identity::Credentials::UsernamePassword {
                    username: auth.username.clone(),
                    password: auth.password.clone(),
                    oauth_refresh_token: None,
                },
                next: context.into(),
            }))
        }
        _ => Ok(None),
    });
    let prepared = connection
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| classify(url, describe(&e), limits))?;
    // A named reference is looked for among the remote's before anything is downloaded, and
    // nothing is downloaded when it still points where the clone's copy does: most polls find
    // no new commit, and Fleet too asks first (`git ls-remote`).
    let by_id = !remote_ref.starts_with("refs/");
    if !by_id {
        let advertised = prepared
            .ref_map()
            .remote_refs
            .iter()
            .map(|r| r.unpack())
            .find(|(name, ..)| *name == remote_ref);
        let Some((_, target, _)) = advertised else {
            return Ok(false);
        };
        if target.is_some_and(|id| holds(repo, id)) {
            return Ok(true);
        }
    }
    prepared
        .with_shallow(Shallow::DepthAtRemote(NonZeroU32::MIN))
        .receive(gix::progress::Discard, &AtomicBool::new(false))
        .map_err(|e| classify(url, describe(&e), limits))?;
    Ok(true)
}

/// Whether the clone's fetched reference points at `id` already, and has it.
fn holds(repo: &gix::Repository, id: &gix::oid) -> bool {
    repo.find_reference(TRACKING)
        .ok()
        .and_then(|tracking| tracking.target().try_id().map(ToOwned::to_owned))
        .is_some_and(|tracked| tracked == id && repo.has_object(id))
}

/// A remote's host, resolved, with every address checked against the networks the server
/// may fetch from.
///
/// How the connection is then held to the checked addresses, so that a name that resolves
/// elsewhere a moment later (DNS rebinding) gains nothing:
/// - https and http: the client resolves through [`Guard`], which checks again every address
///   it hands out, so no connection is ever made to an address the check refuses, redirects
///   included (gix follows the first request's redirects); an IP address named in a
///   redirect is refused by a proxy rule ([`refusing_proxy`]) before any connection. Through
///   a proxy of the server's environment (`HTTPS_PROXY`), the proxy resolves the name
///   itself: only this check, at resolve time, applies to it then.
/// - ssh: OpenSSH connects to the checked address (`HostName`), the known hosts still matched
///   against the URL's host (`HostKeyAlias`).
#[derive(Debug)]
pub(crate) struct Checked {
    host: String,
    port: u16,
    addresses: Vec<SocketAddr>,
}

impl Checked {
    /// What ssh is told to connect to, and the name it looks the host key up by (OpenSSH
    /// writes a host on another port than 22 as `[host]:port` in known_hosts).
    fn ssh_pin(&self) -> Option<(IpAddr, String)> {
        let address = self.addresses.first()?;
        let alias = if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        };
        Some((address.ip(), alias))
    }
}

/// Resolves `url`'s host (no DNS for an IP address) and refuses it, before any connection,
/// if one of its addresses is in a network `limits` do not allow. `None` when the name does
/// not resolve: nothing is reached then.
pub(crate) fn checked_host(url: &str, limits: &Limits) -> Result<Option<Checked>, GitError> {
    let parsed = gix::url::parse(gix::bstr::BStr::new(url))
        .map_err(|_| GitError::UnsupportedUrl(url.to_string()))?;
    let (Some(host), Some(port)) = (parsed.host_unbracketed(), parsed.port_or_default()) else {
        return Err(GitError::UnsupportedUrl(url.to_string()));
    };
    let refused = || GitError::NetworkNotAllowed {
        host: host.to_string(),
    };
    let addresses: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        // getaddrinfo, as the connection's own resolver: it also reads 2130706433 or
        // 0x7f.1 as addresses, as the https client does.
        Err(_) => match (host, port).to_socket_addrs() {
            Ok(addresses) => addresses.collect(),
            Err(_) => return Ok(None),
        },
    };
    if addresses.is_empty() {
        return Ok(None);
    }
    if addresses.iter().any(|address| !limits.allows(address.ip())) {
        return Err(refused());
    }
    Ok(Some(Checked {
        host: host.to_string(),
        port,
        addresses,
    }))
}

/// In the error of a connection [`Guard`] refused: the fetch's error becomes
/// [`GitError::NetworkNotAllowed`], whatever else it says.
const REFUSED: &str = "lariat-network-not-allowed";
/// The proxy a request to a refused IP address is sent to: a name only [`Guard`] resolves,
/// by refusing it, so the request fails before any connection.
const REFUSED_PROXY_HOST: &str = "network-not-allowed.lariat.invalid";

#[derive(Debug)]
struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REFUSED)
    }
}

impl std::error::Error for Refused {}

/// The https client's resolver: the system's (getaddrinfo), every address checked, the
/// whole name refused if one is not allowed. The proxies of the server's environment are
/// the administrator's own, and not checked.
struct Guard {
    limits: Limits,
    proxies: Vec<String>,
}

impl reqwest::dns::Resolve for Guard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let limits = self.limits.clone();
        let trusted = self
            .proxies
            .iter()
            .any(|proxy| proxy.eq_ignore_ascii_case(&host));
        Box::pin(async move {
            if host.eq_ignore_ascii_case(REFUSED_PROXY_HOST) {
                return Err(Box::new(Refused) as Box<dyn std::error::Error + Send + Sync>);
            }
            let addresses: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !trusted && addresses.iter().any(|address| !limits.allows(address.ip())) {
                return Err(Box::new(Refused) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A proxy rule for every request, redirects included: one to an IP address the limits
/// refuse goes to [`REFUSED_PROXY_HOST`], which [`Guard`] refuses (the client resolves no
/// IP address, so a resolver alone never sees one).
fn refusing_proxy(limits: Limits) -> reqwest::Proxy {
    reqwest::Proxy::custom(move |url| {
        let host = url.host_str()?;
        let ip: IpAddr = host.trim_matches(['[', ']']).parse().ok()?;
        (!limits.allows(ip)).then(|| format!("http://{REFUSED_PROXY_HOST}"))
    })
}

/// The proxies of the server's environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, with
/// `NO_PROXY`), as the https client would use them by itself (a proxy rule of its own turns
/// those off), and their hosts.
fn environment_proxies() -> Vec<(String, reqwest::Proxy)> {
    let variable = |names: [&str; 2]| {
        names
            .iter()
            .filter_map(|name| std::env::var(name).ok())
            .find(|value| !value.trim().is_empty())
    };
    type Make = fn(&str) -> reqwest::Result<reqwest::Proxy>;
    let mut proxies = Vec::new();
    for (names, make) in [
        (
            ["https_proxy", "HTTPS_PROXY"],
            (|v| reqwest::Proxy::https(v)) as Make,
        ),
        (["http_proxy", "HTTP_PROXY"], |v| reqwest::Proxy::http(v)),
        (["all_proxy", "ALL_PROXY"], |v| reqwest::Proxy::all(v)),
    ] {
        let Some(value) = variable(names) else {
            continue;
        };
        let Ok(proxy) = make(&value) else {
            continue;
        };
        let with_scheme = if value.contains("://") {
            value.clone()
        } else {
            format!("http://{value}")
        };
        let host = reqwest::Url::parse(&with_scheme)
            .ok()
            .and_then(|url| url.host_str().map(str::to_string))
            .unwrap_or_default();
        proxies.push((host, proxy.no_proxy(reqwest::NoProxy::from_env())));
    }
    proxies
}

/// The authorities of a PEM bundle (`caBundle`), refused if it holds none.
pub(crate) fn certificates(
    pem: Option<&[u8]>,
) -> Result<Option<Vec<reqwest::Certificate>>, GitError> {
    let Some(pem) = pem else {
        return Ok(None);
    };
    let certificates = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|e| GitError::InvalidCaBundle(describe(&e)))?;
    if certificates.is_empty() {
        return Err(GitError::InvalidCaBundle(
            "no BEGIN CERTIFICATE block in it (it is the PEM text, base64-encoded once more in the GitRepo)".into(),
        ));
    }
    Ok(Some(certificates))
}

/// Sets up an https client as every client of Fleet's is: it connects only to addresses
/// `limits` allow (every name it resolves checked, every IP address it is sent to refused
/// unless allowed), through the proxies of the server's environment, also trusting
/// `certificates`.
pub(crate) fn guarded_client(
    limits: &Limits,
    certificates: Option<Vec<reqwest::Certificate>>,
) -> impl FnMut(reqwest::blocking::ClientBuilder) -> reqwest::blocking::ClientBuilder
+ Send
+ Sync
+ 'static {
    let proxies = environment_proxies();
    let guard = Arc::new(Guard {
        limits: limits.clone(),
        proxies: proxies.iter().map(|(host, _)| host.clone()).collect(),
    });
    let refusing = refusing_proxy(limits.clone());
    move |builder| {
        let mut builder = builder.dns_resolver(guard.clone()).proxy(refusing.clone());
        for (_, proxy) in &proxies {
            builder = builder.proxy(proxy.clone());
        }
        if let Some(certificates) = &certificates {
            builder = builder.tls_certs_merge(certificates.clone());
        }
        builder
    }
}

/// Whether an error (as [`describe`] words it) is [`Guard`]'s refusal of where a request was
/// going.
pub(crate) fn is_refusal(described: &str) -> bool {
    described.contains(REFUSED)
}

/// Transport options whose https client connects only to addresses `limits` allow and also
/// trusts the authorities of `pem`; `None` for a URL that is not http(s).
fn guarded(
    repo: &gix::Repository,
    url: &str,
    pem: Option<&[u8]>,
    limits: &Limits,
) -> Result<Option<Box<dyn std::any::Any>>, GitError> {
    use gix::protocol::transport::client::blocking_io::http;
    let certificates = certificates(pem)?;
    let options = repo
        .transport_options(gix::bstr::BStr::new(url), None)
        .map_err(|e| GitError::Local {
            dir: repo.path().display().to_string(),
            reason: e.to_string(),
        })?;
    let Some(Ok(mut options)) = options.map(|o| o.downcast::<http::Options>()) else {
        return Ok(None);
    };
    let mut configure = guarded_client(limits, certificates);
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder| Ok(configure(builder)))),
        configure_request: None,
    };
    options.backend = Some(std::sync::Arc::new(std::sync::Mutex::new(backend)));
    Ok(Some(options))
}

/// The ssh command gix runs: OpenSSH with no configuration file, no agent, no password
/// prompt, only the Secret's key, and only the Secret's known hosts (strictly checked),
/// connecting to the checked address of `pinned` (looking its key up by the URL's host). The
/// files are removed when the returned directory is dropped.
fn ssh_command(
    dir: &Path,
    key: &SshKey,
    pinned: Option<&(IpAddr, String)>,
) -> std::io::Result<(tempfile::TempDir, String)> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let parent = dir.parent().unwrap_or(dir);
    let files = tempfile::Builder::new()
        .prefix(".ssh-")
        .tempdir_in(parent)?;
    let write = |name: &str, content: &[u8]| -> std::io::Result<std::path::PathBuf> {
        let path = files.path().join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(content)?;
        // OpenSSH wants a key file to end with a newline.
        if !content.ends_with(b"\n") {
            file.write_all(b"\n")?;
        }
        Ok(path)
    };
    let identity = write("key", &key.private_key)?;
    let known_hosts = write("known_hosts", &key.known_hosts)?;
    let quote = |path: &Path| format!("'{}'", path.display().to_string().replace('\'', "'\\''"));
    let stderr = files.path().join(SSH_STDERR);
    // A redirection may stand anywhere in a shell command: gix appends the arguments.
    let mut command = format!(
        "ssh 2>{} -F /dev/null -i {} -o IdentitiesOnly=yes -o IdentityAgent=none \
         -o UserKnownHostsFile={} -o GlobalKnownHostsFile=/dev/null \
         -o StrictHostKeyChecking=yes -o UpdateHostKeys=no -o BatchMode=yes \
         -o ConnectTimeout=20 -o LogLevel=ERROR",
        quote(&stderr),
        quote(&identity),
        quote(&known_hosts),
    );
    if let Some((address, alias)) = pinned {
        // Both are an address and a host name as gix parsed them: no quote, no space, no
        // leading `-` (gix refuses such a host).
        let safe = |text: &str| {
            !text.starts_with('-')
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "[]:.-_".contains(c))
        };
        if safe(alias) {
            command.push_str(&format!(" -o HostName={address} -o HostKeyAlias={alias}"));
        } else {
            command.push_str(&format!(" -o HostName={address}"));
        }
    }
    Ok((files, command))
}

/// A repository opened without the machine's git configuration (no credential helpers, URL
/// rewrites or proxies from `~/.gitconfig`): what a GitRepo says is all that counts.
fn isolated() -> gix::open::Options {
    gix::open::Options::isolated()
}

/// The configuration that keeps gix from allocating any object larger than the limits'
/// ceiling: while a fetch indexes the pack it received, and while a file is read.
fn alloc_limit(limits: &Limits) -> String {
    format!("gitoxide.objects.allocLimit={}", limits.object_ceiling())
}

/// An error and its causes, one line ("what failed: why: ...").
pub(crate) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        let next = error.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = error.source();
    }
    text
}

/// A failure after connecting: an address the limits refuse (a redirect's, or a name that
/// resolves elsewhere than when it was checked), an object over their ceiling, the server's
/// refusal of the credential, or anything else on the way.
fn classify(url: &str, reason: String, limits: &Limits) -> GitError {
    if reason.contains(REFUSED) {
        let host = gix::url::parse(gix::bstr::BStr::new(url))
            .ok()
            .and_then(|parsed| parsed.host_unbracketed().map(str::to_string))
            .unwrap_or_default();
        return GitError::NetworkNotAllowed { host };
    }
    // gix's words for an allocation `gitoxide.objects.allocLimit` refused.
    if reason.contains("too large to fit in memory") {
        return GitError::TooLarge(LimitError::Unread {
            ceiling: limits.object_ceiling(),
            limit: limits.max_file_bytes,
        });
    }
    // Read without the URL, whose port may hold a "401" (port 40115 was taken for a refusal).
    let lower = reason.replace(url, "").to_lowercase();
    if lower.contains("host key verification failed") || lower.contains("host key for") {
        return GitError::HostKeyRefused {
            url: url.to_string(),
            reason,
        };
    }
    let status = |code: &str| {
        lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| word == code)
    };
    if ["authenticat", "credential", "permission denied"]
        .iter()
        .any(|word| lower.contains(word))
        || status("401")
        || status("403")
    {
        GitError::Unauthorized {
            url: url.to_string(),
            reason,
        }
    } else {
        GitError::Unreachable {
            url: url.to_string(),
            reason,
        }
    }
}

/// A file of a commit as its tree lists it: its path (relative to the repository's root),
/// its object, and its size, read from the object's header (its content is not inflated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub id: gix::ObjectId,
    pub size: u64,
}

/// The clone at `dir`, opened to read: gix inflates no object over the limits' ceiling.
fn open_to_read(dir: &Path, limits: &Limits) -> Result<gix::Repository, GitError> {
    gix::open_opts(dir, isolated().config_overrides([alloc_limit(limits)])).map_err(|e| {
        GitError::Local {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        }
    })
}

/// The files under `path` (relative to the repository's root; `""` or `"."` for all) at
/// `commit`, sorted by path, with their sizes and not their content. More than
/// `limits.max_files` files and directories under `path` are refused as soon as counted.
pub fn list(dir: &Path, commit: &str, path: &str, limits: &Limits) -> Result<Vec<Entry>, GitError> {
    let local = |reason: String| GitError::Local {
        dir: dir.display().to_string(),
        reason,
    };
    let repo = open_to_read(dir, limits)?;
    let id = gix::ObjectId::from_hex(commit.as_bytes()).map_err(|e| local(e.to_string()))?;
    let root = repo
        .find_commit(id)
        .map_err(|e| local(e.to_string()))?
        .tree()
        .map_err(|e| local(e.to_string()))?;
    let path = path.trim_matches('/');
    let path = if path == "." { "" } else { path };
    let start = if path.is_empty() {
        root.id
    } else {
        let missing = || GitError::NoSuchPath {
            path: path.to_string(),
            commit: commit.to_string(),
        };
        let entry = root
            .lookup_entry_by_path(path)
            .map_err(|e| local(e.to_string()))?
            .ok_or_else(missing)?;
        if !entry.mode().is_tree() {
            return Err(missing());
        }
        entry.object_id()
    };
    // Depth-first with a stack of its own: a tree nested a million deep overflows nothing.
    let mut pending = vec![(path.to_string(), start)];
    let mut counted = 0usize;
    let mut found = Vec::new();
    while let Some((prefix, tree)) = pending.pop() {
        let tree = repo.find_tree(tree).map_err(|e| local(e.to_string()))?;
        for entry in tree.iter() {
            let entry = entry.map_err(|e| local(e.to_string()))?;
            counted += 1;
            if counted > limits.max_files {
                return Err(LimitError::Files {
                    limit: limits.max_files,
                }
                .into());
            }
            let name = entry.filename().to_string();
            let path = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let mode = entry.mode();
            if mode.is_tree() {
                pending.push((path, entry.oid().to_owned()));
            } else if mode.is_blob() {
                let id = entry.oid().to_owned();
                let size = repo
                    .find_header(id)
                    .map_err(|e| local(format!("{path}: {e}")))?
                    .size();
                found.push(Entry { path, id, size });
            }
            // Symlinks and submodules are not manifests.
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The content of `entries` (as [`list`] found them), each refused by its path if its
/// header says it is larger than `limits.max_file_bytes`, before it is inflated.
pub fn read<'a>(
    dir: &Path,
    entries: impl IntoIterator<Item = &'a Entry>,
    limits: &Limits,
) -> Result<Vec<(String, Vec<u8>)>, GitError> {
    let local = |reason: String| GitError::Local {
        dir: dir.display().to_string(),
        reason,
    };
    let repo = open_to_read(dir, limits)?;
    let mut read = Vec::new();
    for entry in entries {
        let size = repo
            .find_header(entry.id)
            .map_err(|e| local(format!("{}: {e}", entry.path)))?
            .size();
        if size > limits.max_file_bytes {
            return Err(LimitError::File {
                path: entry.path.clone(),
                size,
                limit: limits.max_file_bytes,
            }
            .into());
        }
        let mut blob = repo
            .find_blob(entry.id)
            .map_err(|e| local(format!("{}: {e}", entry.path)))?;
        read.push((entry.path.clone(), blob.take_data()));
    }
    Ok(read)
}

/// The files under `path` (relative to the repository's root; `""` or `"."` for all) at
/// `commit`, as (path relative to the root, content), sorted by path: [`list`], then
/// [`read`] of every one, within `limits`.
pub fn files(
    dir: &Path,
    commit: &str,
    path: &str,
    limits: &Limits,
) -> Result<Vec<(String, Vec<u8>)>, GitError> {
    let entries = list(dir, commit, path, limits)?;
    // Every size is checked before anything is inflated.
    if let Some(entry) = entries.iter().find(|e| e.size > limits.max_file_bytes) {
        return Err(LimitError::File {
            path: entry.path.clone(),
            size: entry.size,
            limit: limits.max_file_bytes,
        }
        .into());
    }
    read(dir, &entries, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_that_reads_401_is_not_a_refusal() {
        let url = "https://127.0.0.1:40115/upstream";
        let reason = format!(
            "error sending request for url ({url}/info/refs?service=git-upload-pack): invalid peer certificate: UnknownIssuer"
        );
        let limits = Limits::default();
        assert!(matches!(
            classify(url, reason, &limits),
            GitError::Unreachable { .. }
        ));
        assert!(matches!(
            classify(url, "HTTP 401 Unauthorized".into(), &limits),
            GitError::Unauthorized { .. }
        ));
        assert!(matches!(
            classify(url, "status 403".into(), &limits),
            GitError::Unauthorized { .. }
        ));
    }
}
