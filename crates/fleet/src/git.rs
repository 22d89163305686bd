//! Git, through gix (pure Rust; no `git` program): a bare clone per GitRepo under the data
//! directory, fetched shallowly, and files read straight from the fetched commit's tree (no
//! work tree to keep in step).
//!
//! Over ssh, gix runs the machine's OpenSSH client (as git does), confined here to the
//! Secret's key and known hosts: no ssh configuration, agent or default key of the server's
//! own user is ever used, and an unknown host key is refused.
//!
//! Everything here blocks (gix's network client is blocking): callers run it on a blocking
//! thread.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use gix::remote::Direction;
use gix::remote::fetch::Shallow;

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
/// `dir`, creating it on first use. A password in the URL, or the Secret's, is in no error.
pub fn fetch(dir: &Path, source: &Source) -> Result<Fetched, GitError> {
    let mut result = fetch_unscrubbed(dir, source);
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

fn fetch_unscrubbed(dir: &Path, source: &Source) -> Result<Fetched, GitError> {
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
    if gix::open_opts(dir, isolated()).is_err() {
        std::fs::create_dir_all(dir).map_err(|e| local(e.to_string()))?;
        gix::init_bare(dir).map_err(|e| local(e.to_string()))?;
    }
    // The key and known hosts live in files only for the length of the fetch.
    let mut ssh_files = None;
    let options = match scheme {
        gix::url::Scheme::Https | gix::url::Scheme::Http => isolated(),
        // Only an explicit `file://` URL is a repository on this disk: gix would also take a
        // bare path, which the server's allowed directories (checked on `file://`) never see.
        gix::url::Scheme::File if url.starts_with("file://") => isolated(),
        gix::url::Scheme::Ssh => {
            let Some(Credential::Ssh(key)) = &source.auth else {
                return Err(GitError::SshKeyMissing { url: url.clone() });
            };
            let (files, command) = ssh_command(dir, key).map_err(|e| local(e.to_string()))?;
            ssh_files = Some(files);
            isolated().config_overrides([
                format!("core.sshCommand={command}"),
                "ssh.variant=ssh".to_string(),
            ])
        }
        _ => return Err(GitError::UnsupportedUrl(url.clone())),
    };
    let repo = gix::open_opts(dir, options).map_err(|e| local(e.to_string()))?;
    let received = receive_reference(&repo, source);
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
            Err(classify(url, if said.is_empty() { reason } else { said }))
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
fn receive_reference(repo: &gix::Repository, source: &Source) -> Result<(), GitError> {
    let url = &source.url;
    match &source.reference {
        Reference::Branch(branch) => {
            let name = valid_name(branch)?;
            let fetched = receive(repo, source, &format!("refs/heads/{name}"))?;
            if !fetched {
                return Err(GitError::NoSuchBranch {
                    url: url.clone(),
                    branch: branch.clone(),
                });
            }
        }
        Reference::Revision(revision) => {
            let name = valid_name(revision)?;
            let named = receive(repo, source, &format!("refs/tags/{name}"))?
                || receive(repo, source, &format!("refs/heads/{name}"))?;
            let no_such = || GitError::NoSuchRevision {
                url: url.clone(),
                revision: revision.clone(),
            };
            // A commit id is asked for by itself (servers allow any reachable commit with
            // git's protocol version 2). The server was just reached twice: failing now, it
            // refused the commit (and may hang up before reading the whole request).
            if !named {
                let id = gix::ObjectId::from_hex(name.as_bytes()).map_err(|_| no_such())?;
                match receive(repo, source, &id.to_string()) {
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
fn receive(repo: &gix::Repository, source: &Source, remote_ref: &str) -> Result<bool, GitError> {
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
        .map_err(|e| classify(url, describe(&e)))?;
    if let Some(pem) = &source.ca_bundle
        && let Some(options) = trusting(repo, url, pem)?
    {
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
        .map_err(|e| classify(url, describe(&e)))?;
    // A named reference is looked for among the remote's before anything is downloaded.
    let by_id = !remote_ref.starts_with("refs/");
    if !by_id
        && !prepared
            .ref_map()
            .remote_refs
            .iter()
            .any(|r| r.unpack().0 == remote_ref)
    {
        return Ok(false);
    }
    prepared
        .with_shallow(Shallow::DepthAtRemote(NonZeroU32::MIN))
        .receive(gix::progress::Discard, &AtomicBool::new(false))
        .map_err(|e| classify(url, describe(&e)))?;
    Ok(true)
}

/// Transport options whose https client also trusts the authorities of `pem`; `None` for
/// a URL that is not http(s).
fn trusting(
    repo: &gix::Repository,
    url: &str,
    pem: &[u8],
) -> Result<Option<Box<dyn std::any::Any>>, GitError> {
    use gix::protocol::transport::client::blocking_io::http;
    let certificates = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|e| GitError::InvalidCaBundle(describe(&e)))?;
    if certificates.is_empty() {
        return Err(GitError::InvalidCaBundle(
            "no BEGIN CERTIFICATE block in it (it is the PEM text, base64-encoded once more in the GitRepo)".into(),
        ));
    }
    let options = repo
        .transport_options(gix::bstr::BStr::new(url), None)
        .map_err(|e| GitError::Local {
            dir: repo.path().display().to_string(),
            reason: e.to_string(),
        })?;
    let Some(Ok(mut options)) = options.map(|o| o.downcast::<http::Options>()) else {
        return Ok(None);
    };
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder| {
            Ok(builder.tls_certs_merge(certificates.clone()))
        })),
        configure_request: None,
    };
    options.backend = Some(std::sync::Arc::new(std::sync::Mutex::new(backend)));
    Ok(Some(options))
}

/// The ssh command gix runs: OpenSSH with no configuration file, no agent, no password
/// prompt, only the Secret's key, and only the Secret's known hosts (strictly checked). The
/// files are removed when the returned directory is dropped.
fn ssh_command(dir: &Path, key: &SshKey) -> std::io::Result<(tempfile::TempDir, String)> {
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
    let command = format!(
        "ssh 2>{} -F /dev/null -i {} -o IdentitiesOnly=yes -o IdentityAgent=none \
         -o UserKnownHostsFile={} -o GlobalKnownHostsFile=/dev/null \
         -o StrictHostKeyChecking=yes -o UpdateHostKeys=no -o BatchMode=yes \
         -o ConnectTimeout=20 -o LogLevel=ERROR",
        quote(&stderr),
        quote(&identity),
        quote(&known_hosts),
    );
    Ok((files, command))
}

/// A repository opened without the machine's git configuration (no credential helpers, URL
/// rewrites or proxies from `~/.gitconfig`): what a GitRepo says is all that counts.
fn isolated() -> gix::open::Options {
    gix::open::Options::isolated()
}

/// An error and its causes, one line ("what failed: why: ...").
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
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

/// A failure after connecting: the server's refusal of the credential, or anything else on
/// the way.
fn classify(url: &str, reason: String) -> GitError {
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

/// The files under `path` (relative to the repository's root; `""` or `"."` for all) at
/// `commit`, as (path relative to the root, content), sorted by path.
pub fn files(dir: &Path, commit: &str, path: &str) -> Result<Vec<(String, Vec<u8>)>, GitError> {
    let local = |reason: String| GitError::Local {
        dir: dir.display().to_string(),
        reason,
    };
    let repo = gix::open_opts(dir, isolated()).map_err(|e| local(e.to_string()))?;
    let id = gix::ObjectId::from_hex(commit.as_bytes()).map_err(|e| local(e.to_string()))?;
    let root = repo
        .find_commit(id)
        .map_err(|e| local(e.to_string()))?
        .tree()
        .map_err(|e| local(e.to_string()))?;
    let path = path.trim_matches('/');
    let path = if path == "." { "" } else { path };
    let start = if path.is_empty() {
        root
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
        entry
            .object()
            .map_err(|e| local(e.to_string()))?
            .into_tree()
    };
    let mut found = Vec::new();
    collect(&repo, start, path, &mut found).map_err(local)?;
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}

fn collect(
    repo: &gix::Repository,
    tree: gix::Tree<'_>,
    prefix: &str,
    found: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), String> {
    for entry in tree.iter() {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.filename().to_string();
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let mode = entry.mode();
        if mode.is_tree() {
            let subtree = repo.find_tree(entry.oid()).map_err(|e| e.to_string())?;
            collect(repo, subtree, &path, found)?;
        } else if mode.is_blob() {
            let blob = repo.find_blob(entry.oid()).map_err(|e| e.to_string())?;
            found.push((path, blob.data.clone()));
        }
        // Symlinks and submodules are not manifests.
    }
    Ok(())
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
        assert!(matches!(
            classify(url, reason),
            GitError::Unreachable { .. }
        ));
        assert!(matches!(
            classify(url, "HTTP 401 Unauthorized".into()),
            GitError::Unauthorized { .. }
        ));
        assert!(matches!(
            classify(url, "status 403".into()),
            GitError::Unauthorized { .. }
        ));
    }
}
