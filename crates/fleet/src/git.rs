//! Git, through gix (pure Rust; no `git` program): a bare clone per GitRepo under the data
//! directory, fetched shallowly, and files read straight from the fetched commit's tree (no
//! work tree to keep in step).
//!
//! Everything here blocks (gix's network client is blocking): callers run it on a blocking
//! thread.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use gix::remote::Direction;
use gix::remote::fetch::Shallow;

/// Where to fetch from, and as whom.
#[derive(Clone, Debug)]
pub struct Source {
    /// `https://`, `http://` or `file://` (ssh comes with known_hosts checking).
    pub url: String,
    /// The branch to follow.
    pub branch: String,
    pub auth: Option<BasicAuth>,
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

/// Why a fetch or a read failed, in words a GitRepo's condition can carry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GitError {
    #[error("{0} is not a URL lariat can fetch: use https://, http:// or file://")]
    UnsupportedUrl(String),
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} refused the credential: {reason}")]
    Unauthorized { url: String, reason: String },
    #[error("branch {branch:?} does not exist in {url}")]
    NoSuchBranch { url: String, branch: String },
    #[error("path {path:?} does not exist at commit {commit}")]
    NoSuchPath { path: String, commit: String },
    #[error("the local clone in {dir} is unusable: {reason}")]
    Local { dir: String, reason: String },
}

/// What a fetch found: the commit the branch points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub commit: String,
}

/// Fetches `source`'s branch (its last commit only) into the bare repository at `dir`,
/// creating it on first use.
pub fn fetch(dir: &Path, source: &Source) -> Result<Fetched, GitError> {
    // gix's https client (reqwest) takes rustls' process-wide provider: ring, lariat's one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = &source.url;
    if !["https://", "http://", "file://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
    {
        return Err(GitError::UnsupportedUrl(url.clone()));
    }
    let local = |reason: String| GitError::Local {
        dir: dir.display().to_string(),
        reason,
    };
    if gix::open_opts(dir, isolated()).is_err() {
        std::fs::create_dir_all(dir).map_err(|e| local(e.to_string()))?;
        gix::init_bare(dir).map_err(|e| local(e.to_string()))?;
    }
    let repo = gix::open_opts(dir, isolated()).map_err(|e| local(e.to_string()))?;
    let tracking = format!("refs/remotes/origin/{}", source.branch);
    let refspec = format!("+refs/heads/{}:{tracking}", source.branch);
    let unreachable = |reason: String| GitError::Unreachable {
        url: url.clone(),
        reason,
    };
    let remote = repo
        .remote_at(url.as_str())
        .map_err(|e| GitError::UnsupportedUrl(format!("{url} ({e})")))?
        .with_refspecs(Some(refspec.as_str()), Direction::Fetch)
        .map_err(|e| local(e.to_string()))?;
    let mut connection = remote
        .connect(Direction::Fetch)
        .map_err(|e| unreachable(describe(&e)))?;
    let auth = source.auth.clone();
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
    // The branch is looked for among the remote's refs before anything is downloaded.
    if !prepared
        .ref_map()
        .remote_refs
        .iter()
        .any(|r| r.unpack().0 == format!("refs/heads/{}", source.branch).as_str())
    {
        return Err(GitError::NoSuchBranch {
            url: url.clone(),
            branch: source.branch.clone(),
        });
    }
    prepared
        .with_shallow(Shallow::DepthAtRemote(NonZeroU32::MIN))
        .receive(gix::progress::Discard, &AtomicBool::new(false))
        .map_err(|e| classify(url, describe(&e)))?;
    let commit = repo
        .find_reference(tracking.as_str())
        .map_err(|e| local(e.to_string()))?
        .peel_to_id()
        .map_err(|e| local(e.to_string()))?;
    Ok(Fetched {
        commit: commit.to_string(),
    })
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
    let lower = reason.to_lowercase();
    if [
        "authenticat",
        "credential",
        "permission denied",
        "401",
        "403",
    ]
    .iter()
    .any(|word| lower.contains(word))
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
