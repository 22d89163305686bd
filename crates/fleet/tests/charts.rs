//! Charts from Helm repositories: a real chart archive made by `tar`, served over https by a
//! repository that wants a password, fetched as a commit's bundles are read.

mod common;

use std::path::Path;
use std::process::Command;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use base64::Engine as _;
use lariat_api::fleet::{BundleSpec, HelmOptions};
use lariat_fleet::charts::{self, ChartError, ChartSource, RepoAccess};
use lariat_fleet::git::BasicAuth;
use lariat_fleet::scan::ScannedBundle;
use sha2::{Digest, Sha256};

const USER: &str = "charts";
const PASSWORD: &str = "s3cret";

/// `web-VERSION.tgz`, packaged as `helm package` does (the chart under its own directory).
fn package(dir: &Path, version: &str) -> Vec<u8> {
    let chart = dir.join(format!("build-{version}/web"));
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: web\nversion: {version}\n"),
    )
    .unwrap();
    std::fs::write(chart.join("values.yaml"), "color: blue\n").unwrap();
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  color: {{ .Values.color }}\n",
    )
    .unwrap();
    let archive = dir.join(format!("web-{version}.tgz"));
    let status = Command::new("tar")
        .arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.join(format!("build-{version}")))
        .arg("web")
        .status()
        .expect("run tar");
    assert!(status.success());
    std::fs::read(archive).unwrap()
}

/// A Helm repository over https: `index.yaml` and the archives, behind basic auth.
async fn repository(dir: &Path) -> (String, String) {
    let mut index = String::from("apiVersion: v1\nentries:\n  web:\n");
    let mut archives = std::collections::HashMap::new();
    for version in ["1.1.0", "1.2.0", "1.3.0-rc.1"] {
        let archive = package(dir, version);
        let digest = format!("{:x}", Sha256::digest(&archive));
        index.push_str(&format!(
            "  - version: {version}\n    urls: [web-{version}.tgz]\n    digest: {digest}\n"
        ));
        archives.insert(format!("/charts/web-{version}.tgz"), archive);
    }
    // An entry whose archive is not the one the index vouches for.
    index.push_str(&format!(
        "  bad:\n  - version: 1.0.0\n    urls: [web-1.1.0.tgz]\n    digest: {}\n",
        "0".repeat(64)
    ));
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
    );
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let (index, archives, expected) = (index.clone(), archives.clone(), expected.clone());
        async move {
            let authorized = request
                .headers()
                .get("authorization")
                .is_some_and(|v| v.as_bytes() == expected.as_bytes());
            if !authorized {
                return Response::builder()
                    .status(StatusCode::UNAUTHORIZED)
                    .body(Body::empty())
                    .unwrap();
            }
            let path = request.uri().path();
            let body = match path {
                "/charts/index.yaml" => Some(index.into_bytes()),
                _ => archives.get(path).cloned(),
            };
            match body {
                Some(body) => Response::new(Body::from(body)),
                None => Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Body::empty())
                    .unwrap(),
            }
        }
    });
    let (ca, acceptor) = common::authority();
    (common::serve_tls(app, acceptor).await, ca)
}

fn source<'a>(
    repo: &'a str,
    chart: &'a str,
    version: Option<&'a str>,
    auth: Option<&'a BasicAuth>,
    ca: &'a str,
) -> ChartSource<'a> {
    ChartSource {
        repo: Some(repo),
        chart,
        version,
        auth,
        ca: Some(ca.as_bytes()),
    }
}

/// Runs blocking fetches off the test's runtime, as the GitRepo controller does.
async fn fetch_off(
    repo: String,
    chart: &'static str,
    version: Option<&'static str>,
    auth: Option<BasicAuth>,
    ca: String,
    limits: lariat_fleet::Limits,
) -> Result<charts::FetchedChart, ChartError> {
    tokio::task::spawn_blocking(move || {
        charts::fetch(&source(&repo, chart, version, auth.as_ref(), &ca), &limits)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_is_fetched_from_its_repository_at_the_version_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let (base, ca) = repository(dir.path()).await;
    let repo = format!("{base}/charts");
    let auth = BasicAuth {
        username: USER.into(),
        password: PASSWORD.into(),
    };
    let limits = common::loopback();
    // No version: the newest stable one; a range: the newest in it; a prerelease only asked for.
    for (version, expected) in [
        (None, "1.2.0"),
        (Some("~1.1"), "1.1.0"),
        (Some(">=1.3.0-0"), "1.3.0-rc.1"),
        (Some("1.2.0"), "1.2.0"),
    ] {
        let fetched = fetch_off(
            repo.clone(),
            "web",
            version,
            Some(auth.clone()),
            ca.clone(),
            limits.clone(),
        )
        .await
        .unwrap();
        assert_eq!(fetched.version, expected, "{version:?}");
        let chart = lariat_helm::Chart::load_archive("web.tgz", &fetched.archive).unwrap();
        assert_eq!(chart.name(), "web");
    }
    let wrong = BasicAuth {
        username: USER.into(),
        password: "guess".into(),
    };
    let refused = fetch_off(
        repo.clone(),
        "web",
        None,
        Some(wrong),
        ca.clone(),
        limits.clone(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, ChartError::Status { status: 401, .. }),
        "{refused}"
    );
    assert!(!refused.to_string().contains("guess"));
    let missing = fetch_off(
        repo.clone(),
        "nosuch",
        None,
        Some(auth.clone()),
        ca.clone(),
        limits.clone(),
    )
    .await
    .unwrap_err();
    assert!(
        missing.to_string().contains("has no chart \"nosuch\""),
        "{missing}"
    );
    let none = fetch_off(
        repo.clone(),
        "web",
        Some(">=2"),
        Some(auth.clone()),
        ca.clone(),
        limits.clone(),
    )
    .await
    .unwrap_err();
    assert!(
        none.to_string()
            .contains("no version of \"web\" that meets \">=2\""),
        "{none}"
    );
    let forged = fetch_off(
        repo.clone(),
        "bad",
        None,
        Some(auth.clone()),
        ca.clone(),
        limits.clone(),
    )
    .await
    .unwrap_err();
    assert!(forged.to_string().contains("not the index's"), "{forged}");
    // An authority the repository's certificate is not signed by.
    let (other, _) = common::authority();
    let untrusted = fetch_off(
        repo.clone(),
        "web",
        None,
        Some(auth.clone()),
        other,
        limits.clone(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(untrusted, ChartError::Unreachable { .. }),
        "{untrusted}"
    );
    // Loopback is not a network the server may fetch from by default.
    let refused = fetch_off(
        repo.clone(),
        "web",
        None,
        Some(auth.clone()),
        ca.clone(),
        lariat_fleet::Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, ChartError::NetworkNotAllowed { .. }),
        "{refused}"
    );
    // An archive larger than a bundle may be.
    let small = lariat_fleet::Limits {
        max_bundle_bytes: 100,
        ..limits.clone()
    };
    let large = fetch_off(
        repo.clone(),
        "web",
        None,
        Some(auth.clone()),
        ca.clone(),
        small,
    )
    .await
    .unwrap_err();
    assert!(matches!(large, ChartError::TooLarge { .. }), "{large}");
}

fn helm_bundle(root: &str, chart: &str) -> ScannedBundle {
    ScannedBundle {
        root: root.into(),
        labels: Default::default(),
        spec: BundleSpec {
            helm: Some(HelmOptions {
                chart: Some(chart.into()),
                repo: Some("REPO".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        chart_dependencies: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_carries_its_fetched_chart_and_a_chart_that_fails_stays_with_its_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let (base, ca) = repository(dir.path()).await;
    let repo = format!("{base}/charts");
    let mut bundles = vec![helm_bundle("web", "web"), helm_bundle("other", "nosuch")];
    for bundle in &mut bundles {
        bundle.spec.helm.as_mut().unwrap().repo = Some(repo.clone());
    }
    let auth = || {
        Some(BasicAuth {
            username: USER.into(),
            password: PASSWORD.into(),
        })
    };
    // Without helmRepoURLRegex, or with one that does not match from the URL's start, no
    // credential is sent: the repository refuses.
    for pattern in [None, Some("charts"), Some("evil|https://127")] {
        let access = RepoAccess::new(auth(), pattern, Some(ca.clone().into_bytes())).unwrap();
        let mut one = vec![helm_bundle("web", "web")];
        one[0].spec.helm.as_mut().unwrap().repo = Some(repo.clone());
        let errors = tokio::task::spawn_blocking(move || {
            charts::fetch_all(&mut one, &access, &common::loopback())
        })
        .await
        .unwrap();
        let error = errors[0].as_deref().unwrap_or_default();
        if pattern == Some("evil|https://127") {
            assert_eq!(errors[0], None, "{pattern:?}");
        } else {
            assert!(error.contains("answered 401"), "{pattern:?}: {error}");
        }
    }
    // Credentials only for this repository.
    let access =
        RepoAccess::new(auth(), Some(&regex::escape(&repo)), Some(ca.into_bytes())).unwrap();
    let (bundles, errors) = tokio::task::spawn_blocking(move || {
        let errors = charts::fetch_all(&mut bundles, &access, &common::loopback());
        (bundles, errors)
    })
    .await
    .unwrap();
    let web = &bundles[0].spec;
    assert_eq!(errors[0], None);
    let chart = web.helm.as_ref().unwrap().chart.clone().unwrap();
    assert_eq!(chart, ".fleet-charts/web-1.2.0.tgz");
    let file = &web.resources.as_ref().unwrap()[0];
    assert_eq!(file.name.as_deref(), Some(chart.as_str()));
    assert_eq!(file.encoding.as_deref(), Some("base64"));
    let error = errors[1].as_deref().unwrap();
    assert!(
        error.starts_with("other/fleet.yaml: chart \"nosuch\" from https://"),
        "{error}"
    );
    assert!(bundles[1].spec.resources.is_none());
}

/// What `helm dependency update` does for a chart kept in git: the dependencies its
/// `Chart.yaml` lists and its `charts/` lacks, fetched into `charts/` (a version range chosen
/// from the repository's index, a `file://` directory of the bundle copied); a repository lariat
/// cannot fetch from fails that bundle alone, by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charts_missing_dependencies_are_fetched_into_its_charts_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (base, ca) = repository(dir.path()).await;
    let repo = format!("{base}/charts");
    let chart_yaml = format!(
        "apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n- name: web\n  version: ~1.1.0\n  repository: {repo}\n- name: lib\n  version: 0.1.0\n  repository: file://../lib\n"
    );
    let file = |name: &str, content: &str| lariat_api::fleet::BundleResource {
        name: Some(name.into()),
        content: Some(content.into()),
        encoding: None,
    };
    let bundle = |dependencies: &str| {
        let chart =
            format!("apiVersion: v2\nname: app\nversion: 0.1.0\ndependencies:\n{dependencies}");
        let loaded = lariat_helm::Chart::load(
            &[("Chart.yaml".to_string(), chart.clone().into_bytes())].into(),
        )
        .unwrap();
        ScannedBundle {
            root: "app".into(),
            labels: Default::default(),
            spec: BundleSpec {
                helm: Some(HelmOptions {
                    chart: Some("chart".into()),
                    ..Default::default()
                }),
                resources: Some(vec![
                    file("chart/Chart.yaml", &chart),
                    file("chart/templates/cm.yaml", "kind: ConfigMap\n"),
                    file(
                        "lib/Chart.yaml",
                        "apiVersion: v2\nname: lib\nversion: 0.1.0\n",
                    ),
                    file("lib/templates/lib.yaml", "kind: Secret\n"),
                ]),
                ..Default::default()
            },
            chart_dependencies: loaded.missing_dependencies().into_iter().cloned().collect(),
        }
    };
    let fetchable = chart_yaml
        .split_once("dependencies:\n")
        .unwrap()
        .1
        .to_string();
    let mut bundles = vec![
        bundle(&fetchable),
        bundle("- name: db\n  version: 1.0.0\n  repository: \"@bitnami\"\n"),
    ];
    assert_eq!(bundles[0].chart_dependencies.len(), 2);
    let access = RepoAccess::new(
        Some(BasicAuth {
            username: USER.into(),
            password: PASSWORD.into(),
        }),
        Some(&regex::escape(&repo)),
        Some(ca.into_bytes()),
    )
    .unwrap();
    let (bundles, errors) = tokio::task::spawn_blocking(move || {
        let errors = charts::fetch_all(&mut bundles, &access, &common::loopback());
        (bundles, errors)
    })
    .await
    .unwrap();
    assert_eq!(errors[0], None);
    // The chart as the agent loads it from the bundle: nothing missing any more.
    let files: std::collections::BTreeMap<String, Vec<u8>> = bundles[0]
        .spec
        .resources
        .iter()
        .flatten()
        .filter_map(|r| {
            let name = r.name.as_deref()?.strip_prefix("chart/")?.to_string();
            let content = r.content.as_deref()?;
            let bytes = match r.encoding.as_deref() {
                Some("base64") => base64::engine::general_purpose::STANDARD
                    .decode(content)
                    .unwrap(),
                _ => content.as_bytes().to_vec(),
            };
            Some((name, bytes))
        })
        .collect();
    assert!(
        files.contains_key("charts/web-1.1.0.tgz"),
        "{:?}",
        files.keys()
    );
    assert!(
        files.contains_key("charts/lib/Chart.yaml"),
        "{:?}",
        files.keys()
    );
    let chart = lariat_helm::Chart::load(&files).unwrap();
    assert!(chart.missing_dependencies().is_empty());
    let error = errors[1].as_deref().unwrap();
    assert!(
        error.starts_with("app/fleet.yaml: Chart.yaml: dependency db from \"@bitnami\"")
            && error.contains("cannot be fetched by lariat"),
        "{error}"
    );
}

/// A real OCI registry (Debian's docker-registry, CNCF distribution) over https with a
/// password, stopped when dropped.
struct Registry {
    child: std::process::Child,
    address: String,
    ca: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = common::authority_pem();
        std::fs::write(dir.path().join("cert.pem"), cert).unwrap();
        std::fs::write(dir.path().join("key.pem"), key).unwrap();
        let hash = bcrypt::hash(PASSWORD, 4).unwrap();
        std::fs::write(dir.path().join("htpasswd"), format!("{USER}:{hash}\n")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let d = dir.path().display();
        std::fs::write(
            dir.path().join("config.yml"),
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {d}/data}}}}\nhttp:\n  addr: {address}\n  tls: {{certificate: {d}/cert.pem, key: {d}/key.pem}}\nauth:\n  htpasswd: {{realm: charts, path: {d}/htpasswd}}\n"
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect(
                "run docker-registry (Debian's package docker-registry; scripts/test installs it)",
            );
        let registry = Registry {
            child,
            address,
            ca,
            _dir: dir,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(&registry.address).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the registry did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        registry
    }

    fn client(&self) -> reqwest::blocking::Client {
        reqwest::blocking::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca.as_bytes()).unwrap())
            .build()
            .unwrap()
    }

    /// Pushes `archive` as Helm pushes a chart: a config blob, the chart's layer, a manifest
    /// tagged with the version (`+` written `_`).
    fn push(&self, repository: &str, version: &str, archive: &[u8]) {
        let client = self.client();
        let base = format!("https://{}/v2/{repository}", self.address);
        let blob = |data: &[u8]| {
            let digest = format!("sha256:{:x}", Sha256::digest(data));
            let started = client
                .post(format!("{base}/blobs/uploads/"))
                .basic_auth(USER, Some(PASSWORD))
                .send()
                .unwrap();
            assert_eq!(started.status(), 202, "{:?}", started.text());
            let location = started.headers()["location"].to_str().unwrap().to_string();
            let location = if location.starts_with("https://") {
                location
            } else {
                format!("https://{}{location}", self.address)
            };
            let separator = if location.contains('?') { '&' } else { '?' };
            let put = client
                .put(format!("{location}{separator}digest={digest}"))
                .basic_auth(USER, Some(PASSWORD))
                .header("Content-Type", "application/octet-stream")
                .body(data.to_vec())
                .send()
                .unwrap();
            assert_eq!(put.status(), 201, "{:?}", put.text());
            serde_json::json!({"digest": digest, "size": data.len()})
        };
        let config = format!(r#"{{"name":"web","version":"{version}","apiVersion":"v2"}}"#);
        let mut config_descriptor = blob(config.as_bytes());
        config_descriptor["mediaType"] = "application/vnd.cncf.helm.config.v1+json".into();
        let mut layer = blob(archive);
        layer["mediaType"] = "application/vnd.cncf.helm.chart.content.v1.tar+gzip".into();
        let manifest = serde_json::json!({"schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_descriptor, "layers": [layer]});
        let put = client
            .put(format!("{base}/manifests/{}", version.replace('+', "_")))
            .basic_auth(USER, Some(PASSWORD))
            .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            .body(manifest.to_string())
            .send()
            .unwrap();
        assert_eq!(put.status(), 201, "{:?}", put.text());
    }
}

/// Charts pulled from an OCI registry as Helm pulls them: a version or a range chosen from
/// the tags, the layer checked against its digest, the credential sent only when the
/// registry asks and helmRepoURLRegex allows; `repo: oci://...` plus `chart` too, and a
/// chart's dependency from a registry.
#[test]
fn charts_are_pulled_from_an_oci_registry_with_the_git_repos_credential() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let work = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    for version in ["1.1.0", "1.2.0", "1.3.0-rc.1"] {
        registry.push("charts/web", version, &package(work.path(), version));
    }
    let reference = format!("oci://{}/charts/web", registry.address);
    let auth = BasicAuth {
        username: USER.into(),
        password: PASSWORD.into(),
    };
    let ca = registry.ca.clone();
    let fetch = move |repo: Option<String>,
                      chart: String,
                      version: Option<&'static str>,
                      auth: Option<BasicAuth>| {
        let ca = ca.clone();
        std::thread::spawn(move || {
            charts::fetch(
                &ChartSource {
                    repo: repo.as_deref(),
                    chart: &chart,
                    version,
                    auth: auth.as_ref(),
                    ca: Some(ca.as_bytes()),
                },
                &common::loopback(),
            )
        })
        .join()
        .unwrap()
    };
    for (version, expected) in [
        (Some("~1.1"), "1.1.0"),
        (Some("1.2.0"), "1.2.0"),
        (None, "1.2.0"),
    ] {
        let fetched = fetch(None, reference.clone(), version, Some(auth.clone())).unwrap();
        assert_eq!(fetched.version, expected, "{version:?}");
        let chart = lariat_helm::Chart::load_archive("web.tgz", &fetched.archive).unwrap();
        assert_eq!(chart.metadata.version, expected);
    }
    let by_repo = fetch(
        Some(format!("oci://{}/charts", registry.address)),
        "web".into(),
        Some(">=1.3.0-0"),
        Some(auth.clone()),
    )
    .unwrap();
    assert_eq!(by_repo.version, "1.3.0-rc.1");
    // No credential: the registry refuses; a version it does not have is said so.
    let refused = fetch(None, reference.clone(), Some("1.2.0"), None).unwrap_err();
    assert!(
        matches!(refused, ChartError::Status { status: 401, .. }),
        "{refused}"
    );
    let missing = fetch(None, reference.clone(), Some("9.9.9"), Some(auth.clone())).unwrap_err();
    assert!(
        matches!(missing, ChartError::Status { status: 404, .. }),
        "{missing}"
    );
}
