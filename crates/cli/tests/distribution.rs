//! What lariat ships, checked as users receive it: the static release binary and its checksum;
//! the OCI image `scripts/release` packs, against the Containerfile that builds the same image;
//! that image run as a runtime would run it (its user, a read-only root): `lariat version`, the
//! agent of an imported cluster with the files and environment its pod has, and the server as
//! `deploy/`'s StatefulSet runs it, probed as the kubelet probes it; and `deploy/` validated by
//! a lariat server.
//!
//! `scripts/test` runs `scripts/release` first; the artifacts are read from target/dist.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::container::{
    Container, dist, env_pairs, image_reference, output_of, repository, uid_of, version,
};
use common::{TestServer, cluster_condition, eventually, import_cluster};
use serde_json::Value;

fn release_binary() -> PathBuf {
    dist().join(format!("lariat-{}-linux-amd64", version()))
}

/// The packed image's configuration, as `skopeo inspect --config` prints it.
fn image_config() -> Value {
    let text = output_of(Command::new("skopeo").args(["inspect", "--config", &image_reference()]));
    serde_json::from_str(&text).expect("image config is JSON")
}

#[test]
fn the_release_binary_is_static_stripped_versioned_and_checksummed() {
    let binary = release_binary();
    output_of(
        Command::new("sha256sum")
            .current_dir(dist())
            .args(["--check", "--strict"])
            .arg(format!(
                "{}.sha256",
                binary.file_name().unwrap().to_str().unwrap()
            )),
    );
    let headers = output_of(
        Command::new("readelf")
            .args(["--program-headers", "--wide"])
            .arg(&binary),
    );
    assert!(
        !headers.contains("program interpreter"),
        "the release binary must need no dynamic loader:\n{headers}"
    );
    let dynamic = output_of(
        Command::new("readelf")
            .args(["--dynamic", "--wide"])
            .arg(&binary),
    );
    assert!(
        !dynamic.contains("(NEEDED)"),
        "no shared libraries:\n{dynamic}"
    );
    // crates/cli/build.rs: packed, the relocations take kilobytes rather than 4 MB.
    assert!(
        dynamic.contains("(RELR)"),
        "relative relocations packed (DT_RELR):\n{dynamic}"
    );
    let sections = output_of(
        Command::new("readelf")
            .args(["--sections", "--wide"])
            .arg(&binary),
    );
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_"),
        "the release binary is stripped:\n{sections}"
    );

    let printed = output_of(Command::new(&binary).args(["version", "--client"]));
    let revision = image_config()["config"]["Labels"]["org.opencontainers.image.revision"]
        .as_str()
        .expect("revision label")
        .to_string();
    assert_eq!(
        printed.trim(),
        format!(
            "Client Version: lariat {} (commit {revision})",
            env!("CARGO_PKG_VERSION")
        )
    );
    let head = output_of(Command::new("git").current_dir(repository()).args([
        "rev-parse",
        "--short=12",
        "HEAD",
    ]));
    assert!(
        revision.starts_with(head.trim()) || revision == "unknown",
        "the embedded commit {revision} is not HEAD {head}"
    );
}

/// The Containerfile's instructions, continuation lines joined, comments dropped.
fn containerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repository().join("Containerfile")).expect("Containerfile");
    let mut instructions = Vec::new();
    let mut pending = String::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        match line.trim_end().strip_suffix('\\') {
            Some(start) => pending.push_str(start),
            None => {
                pending.push_str(line);
                let joined = std::mem::take(&mut pending);
                if let Some((word, rest)) = joined.trim().split_once(char::is_whitespace) {
                    instructions.push((word.to_uppercase(), rest.trim().to_string()));
                }
            }
        }
    }
    instructions
}

/// `k=v k2=v2`, as ENV and LABEL write them (values here have no spaces).
fn pairs(text: &str) -> Vec<(String, String)> {
    text.split_whitespace()
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every path below `root` (relative, "/"-rooted) with its owner and, for files, contents.
fn tree(
    root: &Path,
    at: &str,
    owner: Option<(u32, u32)>,
    into: &mut BTreeMap<String, (u32, u32, Option<Vec<u8>>)>,
) {
    let metadata = std::fs::symlink_metadata(root).expect("metadata");
    let ids = owner.unwrap_or((metadata.uid(), metadata.gid()));
    let contents = metadata
        .is_file()
        .then(|| std::fs::read(root).expect("read"));
    into.insert(at.to_string(), (ids.0, ids.1, contents));
    if metadata.is_dir() {
        for entry in std::fs::read_dir(root).expect("read dir") {
            let entry = entry.expect("entry");
            let name = entry.file_name().into_string().expect("utf-8 name");
            tree(
                &entry.path(),
                &format!("{}/{name}", at.trim_end_matches('/')),
                owner,
                into,
            );
        }
    }
}

/// docker and podman build the Containerfile from `target/dist/context`; no daemon runs here,
/// so its instructions are read and compared with what umoci packed: the same entrypoint,
/// user, working directory, environment, labels, and the same files with the same owners.
#[test]
fn the_image_is_what_the_containerfile_builds() {
    let config = image_config();
    let revision = config["config"]["Labels"]["org.opencontainers.image.revision"]
        .as_str()
        .expect("revision label")
        .to_string();
    let created = config["config"]["Labels"]["org.opencontainers.image.created"]
        .as_str()
        .expect("created label")
        .to_string();
    assert_eq!(config["created"], created.as_str());
    let build_args = BTreeMap::from([
        ("VERSION", version()),
        ("REVISION", revision),
        ("CREATED", created),
    ]);
    let substitute = |text: &str| {
        build_args
            .iter()
            .fold(text.to_string(), |t, (name, value)| {
                t.replace(&format!("${name}"), value)
            })
    };
    let context = dist().join("context");
    let mut expected_files = BTreeMap::new();
    let mut env = Vec::new();
    let mut labels = BTreeMap::new();
    for (instruction, rest) in containerfile() {
        match instruction.as_str() {
            "FROM" => assert_eq!(rest, "scratch", "the image has no base: nothing but lariat"),
            "ARG" => assert!(build_args.contains_key(rest.as_str()), "unknown ARG {rest}"),
            "COPY" => {
                let mut words: Vec<&str> = rest.split_whitespace().collect();
                let owner = words
                    .first()
                    .and_then(|w| w.strip_prefix("--chown="))
                    .map(|ids| {
                        let (u, g) = ids.split_once(':').expect("uid:gid");
                        (
                            u.parse().expect("numeric uid"),
                            g.parse().expect("numeric gid"),
                        )
                    });
                if owner.is_some() {
                    words.remove(0);
                }
                let [source, destination] = words[..] else {
                    panic!("COPY {rest}")
                };
                tree(
                    &context.join(source),
                    destination,
                    Some(owner.unwrap_or((0, 0))),
                    &mut expected_files,
                );
                // The directories above a destination are created, owned by root.
                let mut parent = Path::new(destination).parent();
                while let Some(dir) = parent.filter(|d| *d != Path::new("/")) {
                    let dir_name = dir.to_str().expect("utf-8 path").to_string();
                    expected_files.entry(dir_name).or_insert((0, 0, None));
                    parent = dir.parent();
                }
            }
            "ENV" => env.extend(pairs(&rest)),
            "LABEL" => labels.extend(pairs(&substitute(&rest))),
            "USER" => assert_eq!(config["config"]["User"], rest.as_str(), "USER"),
            "WORKDIR" => assert_eq!(config["config"]["WorkingDir"], rest.as_str(), "WORKDIR"),
            "ENTRYPOINT" => assert_eq!(
                config["config"]["Entrypoint"],
                serde_json::from_str::<Value>(&rest).expect("exec-form ENTRYPOINT"),
                "ENTRYPOINT"
            ),
            other => panic!("the comparison does not know Containerfile's {other}: teach it"),
        }
    }
    assert_eq!(env_pairs(&config["config"]["Env"]), env, "ENV");
    let image_labels: BTreeMap<String, String> =
        serde_json::from_value(config["config"]["Labels"].clone()).expect("labels");
    assert_eq!(image_labels, labels, "LABEL");
    assert!(
        config["config"]["Cmd"].is_null(),
        "no CMD: arguments are the pod's"
    );
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["os"], "linux");

    let container = Container::unpack();
    let mut image_files = BTreeMap::new();
    tree(&container.rootfs(), "/", None, &mut image_files);
    image_files.remove("/");
    let listing = |files: &BTreeMap<String, (u32, u32, Option<Vec<u8>>)>| {
        files
            .iter()
            .map(|(path, (uid, gid, contents))| {
                let kind = if contents.is_some() { "file" } else { "dir" };
                format!("{path} {uid}:{gid} {kind}")
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listing(&image_files),
        listing(&expected_files),
        "the image's files and owners"
    );
    for (path, (_, _, contents)) in &expected_files {
        assert!(
            contents == &image_files[path].2,
            "{path} differs between the image and the context"
        );
    }
    assert!(
        !container.rootfs().join("bin/sh").exists(),
        "no shell in the image"
    );
    let passwd = std::fs::read_to_string(container.rootfs().join("etc/passwd")).unwrap();
    let user = config["config"]["User"].as_str().unwrap();
    let uid = user.split(':').next().unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some(uid) && l.starts_with("lariat:")),
        "the image's user {uid} is named in /etc/passwd:\n{passwd}"
    );
    assert_ne!(uid, "0", "the image runs as a non-root user");

    // The documented way to publish: skopeo copies the layout anywhere; here, to another layout.
    let copy = tempfile::tempdir().unwrap();
    output_of(
        Command::new("skopeo")
            .args(["copy", &image_reference()])
            .arg(format!("oci:{}:{}", copy.path().display(), version())),
    );
    let copied = output_of(
        Command::new("skopeo")
            .args(["inspect", "--format", "{{.Digest}}"])
            .arg(format!("oci:{}:{}", copy.path().display(), version())),
    );
    let original = output_of(Command::new("skopeo").args([
        "inspect",
        "--format",
        "{{.Digest}}",
        &image_reference(),
    ]));
    assert_eq!(copied, original, "skopeo copies the image unchanged");
}

#[test]
fn the_unpacked_image_runs_as_its_user_on_a_read_only_root() {
    let container = Container::unpack();
    let printed = output_of(&mut container.command(&["version", "--client"], &[], &[]));
    assert!(
        printed.starts_with(&format!(
            "Client Version: lariat {}",
            env!("CARGO_PKG_VERSION")
        )),
        "{printed}"
    );
    // The root is read-only: a server with no volume for its data cannot start, and says why.
    let refused = container
        .command(&["server", "--listen", "127.0.0.1:0"], &[], &[])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("Read-only file system"), "{stderr}");
}

/// The value a pod's `env` entry gives: literal, or from a Secret's key.
fn resolve_env(cluster: &TestServer, namespace: &str, entry: &Value) -> (String, String) {
    let name = entry["name"].as_str().expect("env name").to_string();
    if let Some(value) = entry["value"].as_str() {
        return (name, value.to_string());
    }
    let key = &entry["valueFrom"]["secretKeyRef"];
    let secret = key["name"].as_str().expect("secretKeyRef name");
    let field = key["key"].as_str().expect("secretKeyRef key");
    let value = cluster.kubectl_ok(&[
        "get",
        "secret",
        secret,
        "-n",
        namespace,
        "-o",
        &format!("go-template={{{{index .data \"{field}\" | base64decode}}}}"),
    ]);
    (name, value)
}

/// A process killed when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The import manifest applied to a cluster, and its agent run from the image with what its pod
/// would have: the Deployment's arguments and environment (Secret keys resolved), the
/// service-account token, CA and namespace files, KUBERNETES_SERVICE_HOST/PORT, and an
/// /etc/hosts, so the agent reaches the server by name (static glibc resolving from files).
#[test]
fn the_agent_runs_from_the_image_with_a_pods_in_cluster_configuration() {
    let management =
        TestServer::start_with(&["--agent-image", "registry.example/mirror/lariat:ci"]);
    let downstream = TestServer::start();
    let (token, _) = import_cluster(&management, "shipped", "1h");
    let (code, manifest) =
        management.curl("GET", &format!("/v3/import/{token}.yaml"), None, None, None);
    assert_eq!(code, 200, "{manifest}");
    downstream.apply_ok(&["apply", "-f", "-"], &manifest);
    // The server's name, as a pod resolves it: /etc/hosts here, cluster DNS on a real cluster.
    let port = management.address.rsplit(':').next().unwrap();
    downstream.kubectl_ok(&[
        "patch",
        "secret",
        "lariat-agent",
        "-n",
        "lariat-system",
        "--type",
        "merge",
        "-p",
        &format!(r#"{{"stringData":{{"server":"https://localhost:{port}"}}}}"#),
    ]);

    let deployment: Value = serde_json::from_str(&downstream.kubectl_ok(&[
        "get",
        "deployment",
        "lariat-agent",
        "-n",
        "lariat-system",
        "-o",
        "json",
    ]))
    .unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let agent = &pod["containers"][0];
    assert_eq!(agent["image"], "registry.example/mirror/lariat:ci");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(agent["securityContext"]["readOnlyRootFilesystem"], true);
    let args: Vec<&str> = agent["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mut env: Vec<(String, String)> = agent["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| resolve_env(&downstream, "lariat-system", e))
        .collect();

    let container = Container::unpack();
    env.extend(container.give_service_account(&downstream, "lariat-system"));
    env.push((
        "HOSTNAME".to_string(),
        "lariat-agent-7d9f8c6b5-x2x4q".to_string(),
    ));
    std::fs::write(
        container.rootfs().join("etc/hosts"),
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n",
    )
    .unwrap();
    let log_path = management.data_dir().join("shipped-agent.log");
    let mut command = container.command(&args, &env, &[]);
    let agent = Running(
        command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    eventually("the agent from the image connects", || {
        cluster_condition(&management, "shipped", "Connected") == "True"
    });
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.0.id())).unwrap();
    assert_eq!(
        uid_of(&status),
        65532,
        "the agent runs as the image's user:\n{status}"
    );
    // It found its cluster from the pod's files: its credential is in the pod's namespace.
    eventually("the agent keeps its credential in its namespace", || {
        downstream
            .kubectl(&[
                "get",
                "secret",
                "lariat-agent-credential",
                "-n",
                "lariat-system",
            ])
            .status
            .success()
    });
    // And the cluster is reached through the tunnel.
    let namespaces = management.kubectl_as(
        &management.proxied_kubeconfig("shipped"),
        &["get", "namespaces", "-o", "name"],
    );
    assert!(
        String::from_utf8_lossy(&namespaces.stdout).contains("namespace/lariat-system"),
        "{namespaces:?}\n{}",
        log()
    );
    assert!(
        !log().contains(&token),
        "the agent logs no token:\n{}",
        log()
    );
}

/// `kubectl kustomize deploy/`.
fn deploy_manifests() -> String {
    output_of(
        Command::new("kubectl")
            .arg("kustomize")
            .arg(repository().join("deploy")),
    )
}

fn rendered(kind: &str) -> Value {
    deploy_manifests()
        .split("\n---\n")
        .map(|doc| serde_yaml_ng::from_str::<Value>(doc).expect("YAML"))
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("deploy/ has a {kind}"))
}

#[test]
fn the_deploy_manifests_pass_a_servers_strict_validation() {
    let server = TestServer::start();
    let manifests = deploy_manifests();
    let dry_run = server.apply_ok(
        &["apply", "--dry-run=server", "--validate=strict", "-f", "-"],
        &manifests,
    );
    // (A lariat server has a lariat-system namespace of its own: there the Namespace is
    // "configured".)
    for created in [
        "serviceaccount/lariat created (server dry run)",
        "service/lariat created (server dry run)",
        "statefulset.apps/lariat created (server dry run)",
        "networkpolicy.networking.k8s.io/lariat created (server dry run)",
    ] {
        assert!(dry_run.contains(created), "{created} in\n{dry_run}");
    }
    assert!(
        !server
            .kubectl(&["get", "statefulset", "lariat", "-n", "lariat-system"])
            .status
            .success(),
        "a dry run writes nothing"
    );
    // Strict validation is real: a misspelt field is refused, by name.
    let misspelt = manifests.replacen("readinessProbe:", "readinesProbe:", 1);
    let refused = server.kubectl_stdin(
        &["apply", "--dry-run=server", "--validate=strict", "-f", "-"],
        &misspelt,
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("readinesProbe"),
        "{refused:?}"
    );
    // Applied for real, every field is kept as written.
    server.apply_ok(&["apply", "--validate=strict", "-f", "-"], &manifests);
    let probes = server.kubectl_ok(&[
        "get",
        "statefulset",
        "lariat",
        "-n",
        "lariat-system",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].readinessProbe.httpGet.path} {.spec.template.spec.containers[0].livenessProbe.httpGet.path} {.spec.template.spec.securityContext.runAsNonRoot}",
    ]);
    assert_eq!(probes, "/readyz /livez true");

    let statefulset = rendered("StatefulSet");
    let service = rendered("Service");
    let policy = rendered("NetworkPolicy");
    let pod_labels = &statefulset["spec"]["template"]["metadata"]["labels"];
    for selector in [
        &service["spec"]["selector"],
        &policy["spec"]["podSelector"]["matchLabels"],
    ] {
        for (key, value) in selector.as_object().unwrap() {
            assert_eq!(&pod_labels[key], value, "{key} selects the server's pod");
        }
    }
    assert_eq!(
        statefulset["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("ghcr.io/lariat-dev/lariat:{}", version()),
        "deploy/ names this release's image"
    );
}

/// The server from the image, as deploy/'s StatefulSet runs it: its arguments (the listener on
/// a free port instead of 6443, which other servers here may hold), the settings ConfigMap as
/// environment, its volume at /var/lib/lariat as a kubelet prepares a fresh volume for the
/// pod's fsGroup (owned by root, group-writable for the fsGroup, setgid), a read-only root;
/// probed on /readyz and /livez as the kubelet probes, without credentials.
#[test]
fn the_server_runs_from_the_image_as_the_statefulset_runs_it() {
    let statefulset = rendered("StatefulSet");
    let settings = rendered("ConfigMap");
    let server = &statefulset["spec"]["template"]["spec"]["containers"][0];
    let volume_path = server["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let args: Vec<&str> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let mut env: Vec<(String, String)> = server["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .chain(
            settings["data"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())),
        )
        .collect();
    for (name, value) in &mut env {
        if name == "LARIAT_LISTEN" {
            *value = "127.0.0.1:0".to_string();
        }
    }
    let container = Container::unpack();
    let volume = tempfile::tempdir().unwrap();
    let fs_group = statefulset["spec"]["template"]["spec"]["securityContext"]["fsGroup"]
        .as_u64()
        .unwrap();
    output_of(
        Command::new("chown")
            .arg(format!("0:{fs_group}"))
            .arg(volume.path()),
    );
    output_of(Command::new("chmod").arg("2775").arg(volume.path()));
    let data = |path: &str| {
        let dir = env.iter().find(|(k, _)| k == "LARIAT_DATA_DIR").unwrap();
        let inside = dir
            .1
            .strip_prefix(volume_path)
            .expect("the data directory is on the volume");
        volume
            .path()
            .join(inside.trim_start_matches('/'))
            .join(path)
    };
    let logs = tempfile::tempdir().unwrap();
    // The volume's root itself cannot be the data directory (it is root's): said in one line.
    let mut at_root = env.clone();
    at_root.retain(|(k, _)| k != "LARIAT_DATA_DIR");
    at_root.push(("LARIAT_DATA_DIR".into(), volume_path.into()));
    let refused = container
        .command(&args, &at_root, &[(volume.path(), volume_path)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("a directory of its own"),
        "{stderr}"
    );
    let log_path = logs.path().join("server.log");
    let _server = Running(
        container
            .command(&args, &env, &[(volume.path(), volume_path)])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let address = loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        // Up to the `;` after the address: the log may be read mid-line.
        if let Some((address, _)) = log
            .split("listening on https://")
            .nth(1)
            .and_then(|rest| rest.split_once(';'))
        {
            break address.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the server from the image did not start:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for probe in ["/readyz", "/livez"] {
        let status = output_of(
            Command::new("curl")
                .args(["--insecure", "-s", "-o", "/dev/null", "-w", "%{http_code}"])
                .arg(format!("https://{address}{probe}")),
        );
        assert_eq!(status, "200", "{probe}");
    }
    // The settings took effect: the certificate names the Service, and imports name the image.
    let certificate = output_of(
        Command::new("openssl")
            .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
            .arg(data("tls/server.crt")),
    );
    for name in [
        "DNS:lariat.lariat-system.svc.cluster.local",
        "DNS:lariat.lariat-system.svc,",
        "DNS:lariat.lariat-system,",
        "DNS:lariat,",
    ] {
        assert!(certificate.contains(name), "{name} in {certificate}");
    }
    eventually("the server writes its kubeconfig on its volume", || {
        data("kubeconfig.yaml").is_file()
    });
    // `kubectl exec lariat-0 -- lariat admin kubeconfig`: the container's environment, no flags
    // but the address to reach it at.
    let kubeconfig = output_of(&mut container.command(
        &[
            "admin",
            "kubeconfig",
            "--server",
            &format!("https://{address}"),
        ],
        &env,
        &[(volume.path(), volume_path)],
    ));
    let path = logs.path().join("admin.kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    let nodes = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&path)
        .args(["get", "namespaces", "-o", "name"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&nodes.stdout).contains("namespace/default"),
        "{nodes:?}"
    );
}
