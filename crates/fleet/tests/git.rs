//! Fetching real git repositories made by the tests (with the `git` program, as a user would
//! make them): over `file://`, over http through git's own smart-http backend behind a
//! small server that asks for a password, and over ssh to an OpenSSH server the test starts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{commit, loopback, repository, run_git, source};
use lariat_fleet::git::{self, BasicAuth, Credential, GitError, Reference, Source, SshKey};

#[test]
fn a_file_repository_is_fetched_and_its_files_read_from_the_commit() {
    let root = tempfile::tempdir().unwrap();
    let (upstream, first) = repository(
        root.path(),
        &[
            ("apps/web/deployment.yaml", "kind: Deployment\n"),
            ("apps/web/fleet.yaml", "defaultNamespace: web\n"),
            ("README.md", "hello\n"),
        ],
    );
    let clone = root.path().join("clone");
    let url = format!("file://{}", upstream.display());
    let fetched = git::fetch(&clone, &source(url.clone()), &loopback()).unwrap();
    assert_eq!(fetched.commit, first);
    let files = git::files(&clone, &fetched.commit, "apps", &loopback()).unwrap();
    let names: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["apps/web/deployment.yaml", "apps/web/fleet.yaml"]);
    assert_eq!(files[0].1, b"kind: Deployment\n");
    assert_eq!(
        git::files(&clone, &first, "", &loopback()).unwrap().len(),
        3
    );

    // A new commit is seen by the next fetch; the clone is reused.
    let second = commit(
        &upstream,
        &[("apps/web/deployment.yaml", "kind: Deployment\n# v2\n")],
        "second",
    );
    let fetched = git::fetch(&clone, &source(url.clone()), &loopback()).unwrap();
    assert_eq!(fetched.commit, second);
    assert_eq!(
        git::files(&clone, &second, "apps/web", &loopback()).unwrap()[0].1,
        b"kind: Deployment\n# v2\n"
    );
    // Shallow: a new clone gets the last commit only.
    let fresh = root.path().join("fresh");
    assert_eq!(
        git::fetch(&fresh, &source(url.clone()), &loopback())
            .unwrap()
            .commit,
        second
    );
    assert!(
        git::files(&fresh, &first, "apps", &loopback()).is_err(),
        "the first commit came too"
    );

    // What does not exist is said precisely.
    assert_eq!(
        git::files(&clone, &second, "nope", &loopback()),
        Err(GitError::NoSuchPath {
            path: "nope".into(),
            commit: second.clone()
        })
    );
    let mut other = source(url.clone());
    other.reference = Reference::Branch("release".into());
    assert_eq!(
        git::fetch(&clone, &other, &loopback()),
        Err(GitError::NoSuchBranch {
            url,
            branch: "release".into()
        })
    );
}

#[test]
fn unreachable_and_unsupported_repositories_are_named() {
    let root = tempfile::tempdir().unwrap();
    let clone = root.path().join("clone");
    let missing = format!("file://{}/nothing-here", root.path().display());
    assert!(matches!(
        git::fetch(&clone, &source(missing), &loopback()),
        Err(GitError::Unreachable { .. })
    ));
    assert!(matches!(
        git::fetch(
            &clone,
            &source("ftp://example.com/repo".into()),
            &loopback()
        ),
        Err(GitError::UnsupportedUrl(_))
    ));
    // A repository on this disk only as `file://`: a bare or relative path is refused (the
    // server checks its allowed directories on `file://` URLs).
    let (upstream, _) = repository(root.path(), &[("cm.yaml", "v: 1\n")]);
    for bare in [
        upstream.display().to_string(),
        format!("{}/.git", upstream.display()),
        "upstream".to_string(),
        "./upstream".to_string(),
    ] {
        assert!(
            matches!(
                git::fetch(&clone, &source(bare.clone()), &loopback()),
                Err(GitError::UnsupportedUrl(_))
            ),
            "{bare}"
        );
    }
    let refused = git::fetch(
        &clone,
        &source("http://127.0.0.1:1/repo.git".into()),
        &loopback(),
    );
    assert!(
        matches!(refused, Err(GitError::Unreachable { .. })),
        "{refused:?}"
    );
    // A password in the URL is in no error.
    let refused = git::fetch(
        &clone,
        &source("https://deploy:hunter2-token@127.0.0.1:1/repo.git".into()),
        &loopback(),
    )
    .unwrap_err();
    let text = format!("{refused} {refused:?}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("deploy:***@127.0.0.1"), "{text}");
}

mod http {
    //! git's smart-http backend (`git http-backend`, CGI) behind a server that wants a password.

    use super::*;
    use axum::body::Body;
    use axum::http::{Request, Response, StatusCode};
    use base64::Engine;

    pub use super::common::authority;

    /// Serves the repositories under `root` over https with `acceptor`'s certificate.
    pub async fn serve_tls(root: PathBuf, acceptor: tokio_rustls::TlsAcceptor) -> String {
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let root = root.clone();
            async move { backend(root, request).await }
        });
        super::common::serve_tls(app, acceptor).await
    }

    pub const USER: &str = "deploy";
    pub const PASSWORD: &str = "s3cret-token";

    /// Serves the repositories under `root` on loopback; returns the base URL.
    pub async fn serve(root: PathBuf) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let root = root.clone();
            async move { backend(root, request).await }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{address}")
    }

    /// The requests for git's `upload-pack` service of the repository at `/counted` (each
    /// POST is one command: `ls-refs`, or a `fetch` that negotiates and sends a pack). Only one
    /// test fetches that path, so tests running beside it do not add to the count.
    pub static COUNTED_UPLOAD_PACK_POSTS: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);

    async fn backend(root: PathBuf, request: Request<Body>) -> Response<Body> {
        if request.method() == axum::http::Method::POST
            && request.uri().path() == "/counted/git-upload-pack"
        {
            COUNTED_UPLOAD_PACK_POSTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
        );
        let authorized = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            == Some(expected.as_str());
        // `/private/...` wants the password; the rest is public.
        let path = request.uri().path().to_string();
        let (private, path) = match path.strip_prefix("/private") {
            Some(rest) => (true, rest.to_string()),
            None => (false, path),
        };
        if private && !authorized {
            return Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("www-authenticate", "Basic realm=\"git\"")
                .body(Body::empty())
                .unwrap();
        }
        common::http_backend(&root, &path, request, Some(USER)).await
    }
}

#[tokio::test]
async fn an_http_repository_is_fetched_and_a_password_is_never_sent_in_clear_text() {
    let root = tempfile::tempdir().unwrap();
    let (_, first) = repository(root.path(), &[("manifests/cm.yaml", "kind: ConfigMap\n")]);
    let base = http::serve(root.path().to_path_buf()).await;
    let fetch = |url: String, auth: Option<BasicAuth>| {
        let clone = root.path().join("clone");
        async move {
            tokio::task::spawn_blocking(move || {
                git::fetch(
                    &clone,
                    &Source {
                        url,
                        reference: Reference::Branch("main".into()),
                        auth: auth.map(Credential::Basic),
                        ca_bundle: None,
                    },
                    &loopback(),
                )
            })
            .await
            .unwrap()
        }
    };
    // A public repository over git's smart http.
    let fetched = fetch(format!("{base}/upstream"), None).await.unwrap();
    assert_eq!(fetched.commit, first);
    // A poll that finds the branch where it was asks for the references only, as
    // `git ls-remote` would: nothing is negotiated or sent.
    std::os::unix::fs::symlink(root.path().join("upstream"), root.path().join("counted")).unwrap();
    let posts = || http::COUNTED_UPLOAD_PACK_POSTS.load(std::sync::atomic::Ordering::SeqCst);
    let again = fetch(format!("{base}/counted"), None).await.unwrap();
    let before = posts();
    let again_and_again = fetch(format!("{base}/counted"), None).await.unwrap();
    assert_eq!(
        (again.commit, again_and_again.commit, posts() - before),
        (first.clone(), first.clone(), 1)
    );
    let clone = root.path().join("clone");
    assert_eq!(
        git::files(&clone, &first, "manifests", &loopback()).unwrap()[0].0,
        "manifests/cm.yaml"
    );
    // A private one: without a credential it is refused; with one, over plain http, lariat
    // refuses to send it (https only), and says so.
    let private = format!("{base}/private/upstream");
    let none = fetch(private.clone(), None).await;
    assert!(
        matches!(none, Err(GitError::Unauthorized { .. })),
        "{none:?}"
    );
    let clear = fetch(
        private,
        Some(BasicAuth {
            username: http::USER.into(),
            password: http::PASSWORD.into(),
        }),
    )
    .await;
    let Err(GitError::Unauthorized { reason, .. }) = &clear else {
        panic!("{clear:?}")
    };
    assert!(reason.contains("clear text"), "{reason}");
    assert!(!reason.contains(http::PASSWORD));
}

#[test]
fn a_revision_is_a_tag_a_branch_or_a_commit_id() {
    let root = tempfile::tempdir().unwrap();
    let (upstream, first) = repository(root.path(), &[("cm.yaml", "v: 1\n")]);
    // An annotated tag on the first commit, then the branch moves on.
    run_git(&upstream, &["tag", "-a", "v1", "-m", "release 1"]);
    let second = commit(&upstream, &[("cm.yaml", "v: 2\n")], "second");
    run_git(&upstream, &["branch", "stable", &first]);
    let third = commit(&upstream, &[("cm.yaml", "v: 3\n")], "third");
    let url = format!("file://{}", upstream.display());
    let clone = root.path().join("clone");
    let at = |revision: &str| {
        let mut pinned = source(url.clone());
        pinned.reference = Reference::Revision(revision.into());
        git::fetch(&clone, &pinned, &loopback()).map(|fetched| fetched.commit)
    };
    assert_eq!(at("v1").unwrap(), first, "a tag, peeled to its commit");
    assert_eq!(at("v1").unwrap(), first, "the same tag, polled again");
    assert_eq!(
        git::files(&clone, &first, "", &loopback()).unwrap()[0].1,
        b"v: 1\n"
    );
    assert_eq!(at(&second).unwrap(), second, "a commit id");
    assert_eq!(at("stable").unwrap(), first, "a branch");
    assert_eq!(at("main").unwrap(), third);
    // A tag moved to another commit, and a branch reset to an older one, are followed.
    run_git(
        &upstream,
        &["tag", "-f", "-a", "v1", "-m", "release 1 again", &second],
    );
    assert_eq!(at("v1").unwrap(), second, "a moved tag");
    run_git(&upstream, &["reset", "-q", "--hard", &first]);
    assert_eq!(at("main").unwrap(), first, "a branch reset");
    assert_eq!(
        at("v9"),
        Err(GitError::NoSuchRevision {
            url: url.clone(),
            revision: "v9".into()
        })
    );
    let unknown = "0123456789abcdef0123456789abcdef01234567";
    assert_eq!(
        at(unknown),
        Err(GitError::NoSuchRevision {
            url: url.clone(),
            revision: unknown.into()
        })
    );
    // A name that would widen or redirect the refspec is refused before any connection.
    for bad in [
        "main:refs/heads/x",
        "*",
        "refs/heads/main",
        "-x",
        "a..b",
        "",
    ] {
        assert_eq!(at(bad), Err(GitError::InvalidName(bad.into())), "{bad}");
        let mut branch = source(url.clone());
        branch.reference = Reference::Branch(bad.into());
        assert_eq!(
            git::fetch(&clone, &branch, &loopback()),
            Err(GitError::InvalidName(bad.into()))
        );
    }
}

mod ssh {
    //! An OpenSSH server on loopback (Debian's openssh-server, which `scripts/test` installs)
    //! with its own host key, letting in one client key.

    use super::*;

    pub struct Server {
        child: std::process::Child,
        pub port: u16,
        pub user: String,
        pub client_key: Vec<u8>,
        pub known_hosts: Vec<u8>,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn keygen(path: &Path) {
        let status = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(path)
            .status()
            .expect("ssh-keygen (openssh-client)");
        assert!(status.success());
    }

    /// A host's `known_hosts` line for the key at `public` on loopback's `port`.
    pub fn known_hosts_line(public: &Path, port: u16) -> Vec<u8> {
        let key = std::fs::read_to_string(public).unwrap();
        let mut fields = key.split_whitespace();
        let (kind, key) = (fields.next().unwrap(), fields.next().unwrap());
        format!("[127.0.0.1]:{port} {kind} {key}\n").into_bytes()
    }

    pub fn start(dir: &Path) -> Server {
        std::fs::create_dir_all(dir).unwrap();
        keygen(&dir.join("host_key"));
        keygen(&dir.join("client_key"));
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\n\
                 AuthorizedKeysFile {keys}\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
                 PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n\
                 PidFile none\nAcceptEnv GIT_PROTOCOL\n",
                host = dir.join("host_key").display(),
                keys = dir.join("authorized_keys").display(),
            ),
        )
        .unwrap();
        // sshd run as root wants its privilege-separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd"]
            .into_iter()
            .find(|path| Path::new(path).exists())
            .expect("sshd is not installed: scripts/test installs openssh-server");
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stderr(std::fs::File::create(dir.join("sshd.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "sshd did not listen: {}",
                std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        Server {
            child,
            port,
            user,
            client_key: std::fs::read(dir.join("client_key")).unwrap(),
            known_hosts: known_hosts_line(&dir.join("host_key.pub"), port),
        }
    }
}

#[test]
fn an_ssh_repository_is_fetched_with_the_secrets_key_and_only_a_known_host() {
    let root = tempfile::tempdir().unwrap();
    let (upstream, first) = repository(root.path(), &[("cm.yaml", "kind: ConfigMap\n")]);
    let server = ssh::start(&root.path().join("sshd"));
    let url = format!(
        "ssh://{}@127.0.0.1:{}{}",
        server.user,
        server.port,
        upstream.display()
    );
    let clone = root.path().join("clone");
    let with = |key: &[u8], known_hosts: &[u8]| {
        let mut source = source(url.clone());
        source.auth = Some(Credential::Ssh(SshKey {
            private_key: key.to_vec(),
            known_hosts: known_hosts.to_vec(),
        }));
        git::fetch(&clone, &source, &loopback())
    };
    let fetched = with(&server.client_key, &server.known_hosts).unwrap();
    assert_eq!(fetched.commit, first);
    assert_eq!(
        git::files(&clone, &first, "", &loopback()).unwrap()[0].0,
        "cm.yaml"
    );
    // The key files lived only for the fetch.
    let left: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".ssh-"))
        .collect();
    assert!(left.is_empty(), "key files left behind");

    // A host key the Secret does not list is refused (another server's key in its place).
    let other = root.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(other.join("key"))
        .status()
        .unwrap();
    assert!(status.success());
    let impostor = ssh::known_hosts_line(&other.join("key.pub"), server.port);
    let refused = with(&server.client_key, &impostor);
    assert!(
        matches!(refused, Err(GitError::HostKeyRefused { .. })),
        "{refused:?}"
    );
    // So is an empty known_hosts: there is no trust on first use.
    let refused = with(&server.client_key, b"");
    assert!(
        matches!(refused, Err(GitError::HostKeyRefused { .. })),
        "{refused:?}"
    );
    // A key the server does not know is refused as a credential.
    let refused = with(
        &std::fs::read(other.join("key")).unwrap(),
        &server.known_hosts,
    );
    assert!(
        matches!(refused, Err(GitError::Unauthorized { .. })),
        "{refused:?}"
    );
    // No key at all: never the server user's own keys or agent.
    assert_eq!(
        git::fetch(&clone, &source(url.clone()), &loopback()),
        Err(GitError::SshKeyMissing { url: url.clone() })
    );
    // The scp-like form is ssh too.
    let scp = format!("{}@127.0.0.1:{}", server.user, upstream.display());
    assert_eq!(
        git::fetch(&clone, &source(scp.clone()), &loopback()),
        Err(GitError::SshKeyMissing { url: scp })
    );
}

#[tokio::test]
async fn an_https_repository_signed_by_a_private_authority_is_trusted_through_ca_bundle() {
    let root = tempfile::tempdir().unwrap();
    let (_, first) = repository(root.path(), &[("cm.yaml", "kind: ConfigMap\n")]);
    let (ca, acceptor) = http::authority();
    let base = http::serve_tls(root.path().to_path_buf(), acceptor).await;
    let fetch = |ca_bundle: Option<Vec<u8>>| {
        let clone = root.path().join("clone");
        let url = format!("{base}/upstream");
        async move {
            tokio::task::spawn_blocking(move || {
                let mut source = source(url);
                source.ca_bundle = ca_bundle;
                git::fetch(&clone, &source, &loopback())
            })
            .await
            .unwrap()
        }
    };
    // Without the bundle, the certificate is not trusted.
    let refused = fetch(None).await;
    assert!(
        matches!(refused, Err(GitError::Unreachable { .. })),
        "{refused:?}"
    );
    // Another authority's bundle is no better.
    let (other, _) = http::authority();
    assert!(fetch(Some(other.into_bytes())).await.is_err());
    // With it, fetched.
    let fetched = fetch(Some(ca.clone().into_bytes())).await.unwrap();
    assert_eq!(fetched.commit, first);
    // A bundle that is not PEM is named as such.
    assert!(matches!(
        fetch(Some(b"not a certificate".to_vec())).await,
        Err(GitError::InvalidCaBundle(_))
    ));
}
