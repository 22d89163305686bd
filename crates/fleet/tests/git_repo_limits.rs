//! The GitRepo controller with the server's `Limits`, against an in-process lariat API and
//! real repositories made with `git`: a commit over the limits is refused on the GitRepo's
//! `Accepted` condition, by file and limit, and the last good commit stays deployed; a
//! repository on loopback is refused with the fixed message until the network is allowed.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{commit, repository};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use lariat_api::fleet::{Bundle, GitRepo};
use lariat_fleet::{Context, Limits, Settings, git_repo};

const NS: &str = lariat_api::fleet::DEFAULT_WORKSPACE;

const CONFIG_MAP: &[u8] = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";

/// A lariat API on an in-memory store, and its in-process client.
async fn server(dir: &Path) -> Client {
    let store = Arc::new(lariat_store::memory::MemoryStore::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = lariat_apiserver::Config::new(dir);
    config.kinds = lariat_api::builtin_crds();
    config.namespaces = vec![NS.into()];
    let server = lariat_apiserver::Server::start(config, store, listener)
        .await
        .unwrap();
    server.local_client()
}

/// Reconciles the GitRepo `name` as the controller would, each time as if the process had
/// just started (so the repository is due a fetch), until `done` holds of it.
async fn reconcile_until(
    client: &Client,
    caches: &Arc<lariat_controllers::cache::Caches>,
    settings: &Settings,
    name: &str,
    done: impl Fn(&GitRepo) -> bool,
) -> GitRepo {
    let api: Api<GitRepo> = Api::namespaced(client.clone(), NS);
    for _ in 0..50 {
        let repo = api.get(name).await.unwrap();
        if done(&repo) {
            return repo;
        }
        let context = Arc::new(Context::new(caches.clone(), settings.clone()));
        git_repo::reconcile(Arc::new(repo), context).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let repo = api.get(name).await.unwrap();
    panic!("GitRepo {name} never got there: {:?}", repo.status);
}

async fn create(client: &Client, name: &str, url: &str) {
    let repo: GitRepo = serde_json::from_value(serde_json::json!({
        "apiVersion": lariat_api::fleet::API_VERSION, "kind": "GitRepo",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"repo": url, "branch": "main"},
    }))
    .unwrap();
    Api::<GitRepo>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &repo)
        .await
        .unwrap();
}

fn accepted(repo: &GitRepo) -> Option<(String, String, String)> {
    let condition = repo
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Accepted")?
        .clone();
    Some((
        condition.status,
        condition.reason.unwrap_or_default(),
        condition.message.unwrap_or_default(),
    ))
}

fn deployed(repo: &GitRepo) -> Option<&str> {
    repo.status.as_ref()?.commit.as_deref()
}

#[tokio::test]
async fn a_commit_over_the_limits_is_refused_by_name_and_the_last_good_one_stays_deployed() {
    let work = tempfile::tempdir().unwrap();
    let client = server(&work.path().join("server")).await;
    let caches = lariat_controllers::cache::Caches::new(client.clone());
    let repos = work.path().join("repos");
    let (upstream, first) = repository(&repos, &[("app/cm.yaml", CONFIG_MAP)]);
    let settings = Settings {
        dir: work.path().join("fleet"),
        file_roots: vec![repos.clone()],
        limits: Limits {
            max_file_bytes: 1000,
            ..Limits::default()
        },
    };
    create(&client, "apps", &format!("file://{}", upstream.display())).await;
    reconcile_until(&client, &caches, &settings, "apps", |repo| {
        deployed(repo) == Some(first.as_str())
    })
    .await;

    // A file over the limit, beside the manifest: the commit is refused, by the file's name.
    let second = commit(
        &upstream,
        &[
            ("app/charts/big.bin", vec![0; 5000]),
            ("app/cm.yaml", [CONFIG_MAP, b"data:\n  v: \"2\"\n"].concat()),
        ],
        "change",
    );
    let repo = reconcile_until(&client, &caches, &settings, "apps", |repo| {
        repo.status
            .as_ref()
            .and_then(|s| s.polling_commit.as_deref())
            == Some(second.as_str())
    })
    .await;
    let (status, reason, message) = accepted(&repo).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FileTooLarge")
    );
    assert_eq!(
        message,
        format!(
            "commit {}: app/charts/big.bin is 5000 bytes, more than the 1000-byte limit of one file (--fleet-max-file-bytes); commit {} stays deployed",
            &second[..12],
            &first[..12]
        )
    );
    assert_eq!(deployed(&repo), Some(first.as_str()));
    let bundle = Api::<Bundle>::namespaced(client.clone(), NS)
        .get(&repo.name_any())
        .await
        .unwrap();
    assert_eq!(
        bundle.labels().get(git_repo::COMMIT_LABEL),
        Some(&first),
        "the Bundle changed"
    );

    // Too many files and directories (4 here: app, its cm.yaml, charts and big.bin), and one
    // bundle's files together: refused by reason and limit, the first commit still deployed.
    let cases = [
        (
            Limits {
                max_file_bytes: 10_000,
                max_files: 3,
                ..Limits::default()
            },
            "TooManyFiles",
            "the commit has more than 3 files and directories, the limit of one commit (--fleet-max-files)",
        ),
        (
            Limits {
                max_file_bytes: 10_000,
                max_bundle_bytes: 4000,
                ..Limits::default()
            },
            "BundleTooLarge",
            "bytes of files, more than the 4000-byte limit of one bundle (--fleet-max-bundle-bytes)",
        ),
    ];
    for (limits, wanted, says) in cases {
        let tight = Settings {
            limits,
            ..settings.clone()
        };
        let repo = reconcile_until(&client, &caches, &tight, "apps", |repo| {
            accepted(repo).is_some_and(|(_, reason, _)| reason == wanted)
        })
        .await;
        assert!(
            accepted(&repo).unwrap().2.contains(says),
            "{:?}",
            accepted(&repo)
        );
        assert_eq!(deployed(&repo), Some(first.as_str()));
    }

    // Within limits that allow it, the new commit goes out.
    let roomy = Settings {
        limits: Limits {
            max_file_bytes: 10_000,
            ..Limits::default()
        },
        ..settings.clone()
    };
    reconcile_until(&client, &caches, &roomy, "apps", |repo| {
        deployed(repo) == Some(second.as_str())
    })
    .await;
}

/// Serves the repositories under `root` with `git http-backend` on loopback.
async fn serve(root: PathBuf) -> String {
    use axum::body::Body;
    use axum::http::Request;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let root = root.clone();
        async move {
            let path = request.uri().path().to_string();
            common::http_backend(&root, &path, request, None).await
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn a_repository_on_loopback_is_refused_with_one_message_until_its_network_is_allowed() {
    let work = tempfile::tempdir().unwrap();
    let client = server(&work.path().join("server")).await;
    let caches = lariat_controllers::cache::Caches::new(client.clone());
    let repos = work.path().join("repos");
    let (_, first) = repository(&repos, &[("cm.yaml", CONFIG_MAP)]);
    let base = serve(repos.clone()).await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let settings = Settings {
        dir: work.path().join("fleet"),
        ..Settings::default()
    };
    create(&client, "served", &format!("{base}/upstream")).await;
    create(
        &client,
        "nothing-there",
        &format!("http://127.0.0.1:{closed}/upstream"),
    )
    .await;
    let mut messages = Vec::new();
    for name in ["served", "nothing-there"] {
        let repo = reconcile_until(&client, &caches, &settings, name, |repo| {
            accepted(repo).is_some()
        })
        .await;
        let (status, reason, message) = accepted(&repo).unwrap();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "NetworkNotAllowed")
        );
        messages.push(message);
    }
    let fixed = "the repository's address 127.0.0.1 is in a network this server does not fetch from; an administrator allows it with --fleet-allow-networks; nothing is deployed yet";
    assert_eq!(messages, [fixed, fixed], "the messages tell the two apart");

    let allowed = Settings {
        limits: Limits {
            allowed_networks: lariat_fleet::limits::parse_networks("127.0.0.0/8").unwrap(),
            ..Limits::default()
        },
        ..settings.clone()
    };
    reconcile_until(&client, &caches, &allowed, "served", |repo| {
        deployed(repo) == Some(first.as_str())
    })
    .await;
    let repo = reconcile_until(&client, &caches, &allowed, "nothing-there", |repo| {
        accepted(repo).is_some_and(|(_, reason, _)| reason == "Unreachable")
    })
    .await;
    assert!(
        accepted(&repo).unwrap().2.starts_with("cannot reach"),
        "{:?}",
        accepted(&repo)
    );
}
