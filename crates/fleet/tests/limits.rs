//! What one GitRepo may cost the server (`lariat_fleet::Limits`), on real repositories made
//! with the `git` program: files, bundles and commits over the limits are refused by name,
//! a large file is never inflated, and a repository in an internal network is refused
//! before any connection, with one message whether or not anything answers there.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{commit, repository, source};
use lariat_fleet::Limits;
use lariat_fleet::git::{self, Credential, GitError, Source, SshKey};
use lariat_fleet::git_repo::read_commit;
use lariat_fleet::limits::{LimitError, parse_networks};

fn manifest(name: &str, padding: usize) -> Vec<u8> {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  pad: \"{}\"\n",
        "x".repeat(padding)
    )
    .into_bytes()
}

/// A line of /proc/self/status, in kB.
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// How much higher the process's resident memory peaked during `work` than it was before,
/// in MB (the peak is reset first: `clear_refs` 5).
fn peak_growth_mb<T>(work: impl FnOnce() -> T) -> (T, u64) {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak resident size");
    let before = status_kb("VmRSS");
    let result = work();
    let peak = status_kb("VmHWM");
    (result, peak.saturating_sub(before) / 1024)
}

#[test]
fn a_large_file_is_refused_by_its_header_and_never_inflated() {
    let root = tempfile::tempdir().unwrap();
    // 50 MB of zeros: some 50 KB in git.
    const SIZE: u64 = 50_000_000;
    let (upstream, _) = repository(root.path(), &[("cm.yaml", manifest("a", 0))]);
    let big = std::fs::File::create(upstream.join("big.bin")).unwrap();
    big.set_len(SIZE).unwrap();
    drop(big);
    let commit = commit::<&[u8]>(&upstream, &[], "change");
    let url = format!("file://{}", upstream.display());
    let small = Limits {
        max_file_bytes: 1024 * 1024,
        max_bundle_bytes: 2 * 1024 * 1024,
        ..Limits::default()
    };

    // Fetching: gix must inflate an object to learn its id, so one over the ceiling (the
    // larger size limit) fails the fetch itself, unread.
    let clone = root.path().join("clone");
    let (refused, growth) = peak_growth_mb(|| git::fetch(&clone, &source(url.clone()), &small));
    assert_eq!(
        refused,
        Err(GitError::TooLarge(LimitError::Unread {
            ceiling: 2 * 1024 * 1024,
            limit: 1024 * 1024
        }))
    );
    assert!(growth < 20, "the fetch took {growth} MB more at its peak");
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("over the 1048576-byte limit of one file (--fleet-max-file-bytes)")
    );

    // Under the ceiling it is fetched (inflated once, to be indexed), then refused by name
    // from its header when the commit's files are read: never inflated again.
    let fetched = git::fetch(&clone, &source(url.clone()), &Limits::default()).unwrap();
    assert_eq!(fetched.commit, commit);
    let too_large = Err(GitError::TooLarge(LimitError::File {
        path: "big.bin".into(),
        size: SIZE,
        limit: 1024 * 1024,
    }));
    let (refused, growth) = peak_growth_mb(|| git::files(&clone, &commit, "", &small));
    assert_eq!(refused, too_large);
    assert!(growth < 20, "reading took {growth} MB more at its peak");
    assert_eq!(
        refused.unwrap_err().to_string(),
        "big.bin is 50000000 bytes, more than the 1048576-byte limit of one file (--fleet-max-file-bytes)"
    );
    let (refused, growth) = peak_growth_mb(|| read_commit(&clone, &commit, &[], &small));
    assert_eq!(refused.unwrap_err().0, "FileTooLarge");
    assert!(growth < 20, "reading took {growth} MB more at its peak");
    // The blob only asked for (as `read` is, by the GitRepo's deploy) is refused too.
    let listing = git::list(&clone, &commit, "", &small).unwrap();
    let (refused, growth) = peak_growth_mb(|| git::read(&clone, &listing, &small));
    assert_eq!(refused, too_large);
    assert!(growth < 20, "reading took {growth} MB more at its peak");

    // The measure sees an inflated blob: with limits that let it through, the peak shows it.
    let roomy = Limits {
        max_file_bytes: 64 * 1024 * 1024,
        max_bundle_bytes: 64 * 1024 * 1024,
        ..Limits::default()
    };
    let (read, growth) = peak_growth_mb(|| git::files(&clone, &commit, "", &roomy));
    assert_eq!(read.unwrap()[0].1.len() as u64, SIZE);
    assert!(
        growth >= 40,
        "the measure missed a 50 MB read ({growth} MB)"
    );
}

#[test]
fn files_bundles_and_commits_over_the_limits_are_refused_by_name() {
    let root = tempfile::tempdir().unwrap();
    let (upstream, first) = repository(
        root.path(),
        &[
            ("apps/web/fleet.yaml", b"defaultNamespace: web\n".to_vec()),
            ("apps/web/a.yaml", manifest("a", 500)),
            ("apps/web/b.yaml", manifest("b", 500)),
            ("apps/db/fleet.yaml", b"defaultNamespace: db\n".to_vec()),
            ("apps/db/c.yaml", manifest("c", 10)),
            // Outside the GitRepo's paths: neither read nor limited by size.
            ("docs/guide.md", vec![b'#'; 5000]),
        ],
    );
    let clone = root.path().join("clone");
    let url = format!("file://{}", upstream.display());
    git::fetch(&clone, &source(url.clone()), &Limits::default()).unwrap();
    let paths = ["apps".to_string()];
    let limits = Limits {
        max_file_bytes: 1000,
        max_bundle_bytes: 2000,
        max_files: 100,
        ..Limits::default()
    };

    // Within the limits: the bundles' files are read, and nothing else.
    let files = read_commit(&clone, &first, &paths, &limits).unwrap();
    let content = |path: &str| &files.iter().find(|(p, _)| p == path).unwrap().1;
    assert_eq!(content("apps/web/a.yaml"), &manifest("a", 500));
    assert_eq!(content("apps/db/fleet.yaml"), b"defaultNamespace: db\n");
    assert!(
        content("docs/guide.md").is_empty(),
        "read outside the paths"
    );

    // One bundle's files together.
    let tight = Limits {
        max_bundle_bytes: 1000,
        ..limits.clone()
    };
    let (reason, message) = read_commit(&clone, &first, &paths, &tight).unwrap_err();
    assert_eq!(reason, "BundleTooLarge");
    assert!(
        message.starts_with("bundle apps/web holds 1")
            && message.ends_with(
                "bytes of files, more than the 1000-byte limit of one bundle (--fleet-max-bundle-bytes)"
            ),
        "{message}"
    );

    // The files and directories of the commit: 10 here (apps, apps/web and its 3 files,
    // apps/db and its 2, docs and its 1).
    let few = Limits {
        max_files: 9,
        ..limits.clone()
    };
    assert_eq!(
        read_commit(&clone, &first, &paths, &few).unwrap_err(),
        (
            "TooManyFiles",
            "the commit has more than 9 files and directories, the limit of one commit (--fleet-max-files)"
                .to_string()
        )
    );
    let ten = Limits {
        max_files: 10,
        ..limits.clone()
    };
    assert!(read_commit(&clone, &first, &paths, &ten).is_ok());

    // One file, named: under a bundle's root, even one that is no manifest.
    let second = commit(
        &upstream,
        &[("apps/web/charts/big.bin", vec![0; 5000])],
        "change",
    );
    git::fetch(&clone, &source(url), &Limits::default()).unwrap();
    assert_eq!(
        read_commit(&clone, &second, &paths, &limits).unwrap_err(),
        (
            "FileTooLarge",
            "apps/web/charts/big.bin is 5000 bytes, more than the 1000-byte limit of one file (--fleet-max-file-bytes)"
                .to_string()
        )
    );
    // A GitRepo whose paths leave it out is not concerned.
    assert!(read_commit(&clone, &second, &["apps/db".to_string()], &limits).is_ok());
}

/// Serves the repositories under `root` over git's smart http (`git http-backend`) on
/// `address`, counting the requests; or, with `redirect`, answers every request with a
/// redirect to the same path there.
async fn serve(
    root: PathBuf,
    address: &str,
    redirect: Option<String>,
) -> (String, Arc<AtomicUsize>) {
    use axum::body::Body;
    use axum::http::{Request, Response, StatusCode};
    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let (root, redirect, counted) = (root.clone(), redirect.clone(), counted.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            if let Some(target) = redirect {
                let location = format!("{target}{}", request.uri());
                return Response::builder()
                    .status(StatusCode::FOUND)
                    .header("location", location)
                    .body(Body::empty())
                    .unwrap();
            }
            let path = request.uri().path().to_string();
            common::http_backend(&root, &path, request, None).await
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, requests)
}

async fn fetch_blocking(
    clone: PathBuf,
    source: Source,
    limits: Limits,
) -> Result<String, GitError> {
    tokio::task::spawn_blocking(move || git::fetch(&clone, &source, &limits))
        .await
        .unwrap()
        .map(|fetched| fetched.commit)
}

#[tokio::test]
async fn internal_addresses_are_refused_before_any_connection_unless_allowed() {
    let root = tempfile::tempdir().unwrap();
    let (_, first) = repository(root.path(), &[("cm.yaml", manifest("a", 0))]);
    let (base, requests) = serve(root.path().to_path_buf(), "127.0.0.1:0", None).await;
    let port = base.rsplit(':').next().unwrap().to_string();
    let clone = root.path().join("clone");
    let fixed = |host: &str| {
        format!(
            "the repository's address {host} is in a network this server does not fetch from; an administrator allows it with --fleet-allow-networks"
        )
    };
    let refused = |host: &str| Err(GitError::NetworkNotAllowed { host: host.into() });

    // A git server on loopback, and a port where nothing listens: one answer for both.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let served = fetch_blocking(
        clone.clone(),
        source(format!("{base}/upstream")),
        Limits::default(),
    )
    .await;
    let nothing = fetch_blocking(
        clone.clone(),
        source(format!("http://127.0.0.1:{closed}/upstream")),
        Limits::default(),
    )
    .await;
    assert_eq!(served, refused("127.0.0.1"));
    assert_eq!(served, nothing);
    assert_eq!(served.unwrap_err().to_string(), fixed("127.0.0.1"));
    // Names and other spellings of internal addresses, over https and ssh as well.
    for (url, host) in [
        (format!("http://localhost:{port}/upstream"), "localhost"),
        (format!("https://[::1]:{port}/upstream"), "::1"),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/upstream"),
            "::ffff:127.0.0.1",
        ),
        (format!("http://2130706433:{port}/upstream"), "2130706433"),
        (
            "https://169.254.169.254/latest".to_string(),
            "169.254.169.254",
        ),
        ("http://10.0.0.1:2379/".to_string(), "10.0.0.1"),
        ("https://0.0.0.0/repo.git".to_string(), "0.0.0.0"),
    ] {
        let result = fetch_blocking(clone.clone(), source(url.clone()), Limits::default()).await;
        assert_eq!(result, refused(host), "{url}");
    }
    let mut ssh = source(format!("ssh://git@127.0.0.1:{port}/upstream"));
    ssh.auth = Some(Credential::Ssh(SshKey {
        private_key: b"not read".to_vec(),
        known_hosts: b"not read".to_vec(),
    }));
    assert_eq!(
        fetch_blocking(clone.clone(), ssh, Limits::default()).await,
        refused("127.0.0.1")
    );
    assert_eq!(
        requests.load(Ordering::SeqCst),
        0,
        "a refused address was connected to"
    );

    // Allowed by the administrator: the same server is fetched from.
    let loopback = Limits {
        allowed_networks: parse_networks("127.0.0.0/8").unwrap(),
        ..Limits::default()
    };
    let fetched = fetch_blocking(
        clone.clone(),
        source(format!("{base}/upstream")),
        loopback.clone(),
    )
    .await;
    assert_eq!(fetched, Ok(first.clone()));
    assert!(requests.load(Ordering::SeqCst) > 0);
    // A closed port there keeps its own message: the network is allowed.
    let unreachable = fetch_blocking(
        clone.clone(),
        source(format!("http://127.0.0.1:{closed}/upstream")),
        loopback,
    )
    .await;
    assert!(
        matches!(unreachable, Err(GitError::Unreachable { .. })),
        "{unreachable:?}"
    );
}

#[tokio::test]
async fn a_redirect_into_a_refused_network_is_refused_before_connecting_there() {
    let root = tempfile::tempdir().unwrap();
    let (_, first) = repository(root.path(), &[("cm.yaml", manifest("a", 0))]);
    // The repository on 127.0.0.1; a server on 127.0.0.2 sends every request there, by
    // address and by name.
    let (target, requests) = serve(root.path().to_path_buf(), "127.0.0.1:0", None).await;
    let port = target.rsplit(':').next().unwrap().to_string();
    let (by_address, _) = serve(PathBuf::new(), "127.0.0.2:0", Some(target.clone())).await;
    let (by_name, _) = serve(
        PathBuf::new(),
        "127.0.0.2:0",
        Some(format!("http://localhost:{port}")),
    )
    .await;
    let clone = root.path().join("clone");
    // Only the redirecting server's address is allowed.
    let only_redirector = Limits {
        allowed_networks: parse_networks("127.0.0.2/32").unwrap(),
        ..Limits::default()
    };
    for base in [&by_address, &by_name] {
        let result = fetch_blocking(
            clone.clone(),
            source(format!("{base}/upstream")),
            only_redirector.clone(),
        )
        .await;
        assert_eq!(
            result,
            Err(GitError::NetworkNotAllowed {
                host: "127.0.0.2".into()
            }),
            "{base}"
        );
    }
    assert_eq!(
        requests.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
    // Where both are allowed, the redirect is followed as before.
    let both = Limits {
        allowed_networks: parse_networks("127.0.0.0/8, ::1").unwrap(),
        ..Limits::default()
    };
    let result = fetch_blocking(clone, source(format!("{by_address}/upstream")), both).await;
    assert_eq!(result, Ok(first));
    assert!(requests.load(Ordering::SeqCst) > 0);
}
