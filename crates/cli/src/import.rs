//! Bringing clusters lariat did not create under its management, as Rancher's import does:
//! `lariat cluster import` records the Cluster and a registration token and prints how to
//! install the agent; `lariat agent` is that agent; `lariat kubeconfig` prints a kubeconfig
//! that reaches a connected cluster through the server's proxy.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kube::api::{Api, DynamicObject, PostParams};
use lariat_api::management::{IMPORTED_ANNOTATION, NAMESPACE};
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum ClusterCommand {
    /// Create a Cluster for an existing Kubernetes cluster and print how to install its agent.
    Import(ImportArgs),
}

#[derive(clap::Args)]
pub struct ImportArgs {
    /// Name of the Cluster to create (or reuse, if it was imported before).
    name: String,
    /// Namespace of the Cluster.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// How long the registration token works, e.g. 30m, 24h.
    #[arg(long, default_value = "24h")]
    ttl: String,
    /// Write the registration token to this new file (readable by you only; an existing path
    /// is refused) instead of printing it: the printed commands read it from there, so it
    /// stays out of terminals and shell history, and `lariat agent --token-file` out of `ps`.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Kubeconfig of the lariat server [default: $KUBECONFIG, ~/.kube/config, ./lariat-data/kubeconfig.yaml].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct AgentArgs {
    /// The lariat server, https://HOST:PORT; or several replicas' URLs separated by commas,
    /// tried in turn.
    #[arg(long, env = "LARIAT_SERVER")]
    server: String,
    /// The registration token from `lariat cluster import` (visible in `ps`: prefer
    /// --token-file or $LARIAT_TOKEN).
    #[arg(long, env = "LARIAT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the registration token (`lariat cluster import --token-file`).
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// sha256 of the server's CA certificate (PEM), from `lariat cluster import`.
    #[arg(long, env = "LARIAT_CA_CHECKSUM")]
    ca_checksum: String,
    /// Kubeconfig of the cluster the agent serves [default: in-cluster configuration, then
    /// $KUBECONFIG and ~/.kube/config].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct KubeconfigArgs {
    /// The Cluster whose API to reach through lariat.
    name: String,
    /// Namespace of the Cluster.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// Kubeconfig of the lariat server [default: $KUBECONFIG, ~/.kube/config, ./lariat-data/kubeconfig.yaml].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// `30m`, `24h`, `7d`, `90s` as a duration.
pub(crate) fn parse_ttl(text: &str) -> anyhow::Result<Duration> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let number: u64 = number.parse().ok().filter(|n| *n > 0).with_context(|| {
        format!("invalid --ttl {text:?}: use a positive number with s, m, h or d, e.g. 24h")
    })?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => bail!("invalid --ttl {text:?}: use a positive number with s, m, h or d, e.g. 24h"),
    };
    let total = number
        .checked_mul(seconds)
        .filter(|s| *s <= 10 * 365 * 86400)
        .with_context(|| format!("invalid --ttl {text:?}: at most 10 years"))?;
    Ok(Duration::from_secs(total))
}

/// The server URL of the kubeconfig `lariat` talks to.
/// The URL a remote cluster dials: the address the server advertises in discovery
/// (`--advertise-url`), else the one this kubeconfig reaches it at.
pub(crate) async fn server_url(
    client: &kube::Client,
    kubeconfig: Option<&PathBuf>,
) -> anyhow::Result<String> {
    let advertised = client
        .list_core_api_versions()
        .await
        .ok()
        .and_then(|v| v.server_address_by_client_cidrs.into_iter().next())
        .map(|a| format!("https://{}", a.server_address));
    let url = match advertised {
        Some(url) => url,
        None => crate::connect::config(kubeconfig)
            .await?
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string(),
    };
    let host = url
        .trim_start_matches("https://")
        .rsplit_once(':')
        .map_or(url.as_str(), |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified());
    if loopback {
        eprintln!(
            "warning: the server's address {url} is a loopback address, which a cluster on another machine cannot dial: start the server with --advertise-url https://HOST:PORT (and --listen on an address others reach)"
        );
    }
    Ok(url)
}

pub async fn import(args: ImportArgs) -> anyhow::Result<()> {
    let ttl = parse_ttl(&args.ttl)?;
    // The token's file is made first (never over an existing path), so a path that cannot be
    // written refuses the import before a Cluster or a token exists.
    let mut token_file = match &args.token_file {
        Some(path) => Some(TokenFile::create(path)?),
        None => None,
    };
    let client = crate::connect::client(args.kubeconfig.as_ref()).await?;
    let server = server_url(&client, args.kubeconfig.as_ref()).await?;
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &args.namespace,
        &lariat_controllers::capi("Cluster"),
    );
    match clusters.get_opt(&args.name).await? {
        Some(existing) => {
            if !existing
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(IMPORTED_ANNOTATION))
            {
                bail!(
                    "cluster {}/{} exists and was provisioned by lariat, not imported: choose another name",
                    args.namespace,
                    args.name
                );
            }
        }
        None => {
            let cluster: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Cluster",
                "metadata": {"name": args.name, "namespace": args.namespace,
                             "annotations": {IMPORTED_ANNOTATION: "true"}},
                "spec": {},
            }))?;
            clusters
                .create(&PostParams::default(), &cluster)
                .await
                .with_context(|| {
                    format!("cannot create cluster {}/{}", args.namespace, args.name)
                })?;
        }
    }
    let token = lariat_management::credentials::create_registration_token(
        &client,
        &args.namespace,
        &args.name,
        ttl,
    )
    .await
    .context("cannot create the registration token")?;
    let id = token.split('.').next().unwrap_or_default().to_string();
    let expires = (chrono::Utc::now() + chrono::Duration::from_std(ttl)?)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let ca = client
        .request_text(http::Request::get("/cacerts").body(Vec::new())?)
        .await?;
    let checksum = lariat_apiserver::identity::sha256_hex(&ca);
    println!(
        "Cluster {}/{} is ready to import.",
        args.namespace, args.name
    );
    println!("Registration token {id} expires {expires}; revoke it with:");
    println!("  kubectl delete clusterregistrationtoken {id} -n {NAMESPACE}\n");
    let token = match token_file.as_mut() {
        Some(file) => {
            file.write(&token)?;
            println!("Registration token written to {}", file.path.display());
            format!("$(cat {})", shell_word(&file.path))
        }
        None => token,
    };
    let token_flag = match &args.token_file {
        Some(path) => format!("--token-file {}", shell_word(path)),
        None => format!("--token {token}"),
    };
    println!("Install the agent in the cluster (run with that cluster's kubeconfig):");
    println!("  curl --insecure -sfL {server}/v3/import/{token}.yaml | kubectl apply -f -");
    println!(
        "(--insecure only fetches the manifest; the agent trusts the server only if its CA matches the checksum.)\n"
    );
    println!("Or run the agent anywhere that reaches both:");
    println!(
        "  lariat agent --server {server} {token_flag} --ca-checksum {checksum} --kubeconfig CLUSTER_KUBECONFIG"
    );
    Ok(())
}

/// The file `--token-file` names: made empty, only its owner may read it, before the import
/// does anything; filled with the token once there is one; removed if the import fails first.
struct TokenFile {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl TokenFile {
    fn create(path: &std::path::Path) -> anyhow::Result<TokenFile> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => anyhow::anyhow!(
                    "--token-file {} exists: remove it, or name a new file",
                    path.display()
                ),
                _ => anyhow::anyhow!("cannot create --token-file {}: {e}", path.display()),
            })?;
        Ok(TokenFile {
            path: path.to_path_buf(),
            file: Some(file),
        })
    }

    fn write(&mut self, token: &str) -> anyhow::Result<()> {
        use std::io::Write as _;
        let mut file = self.file.take().context("the token is written once")?;
        writeln!(file, "{token}")
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write the token to {}", self.path.display()))
    }
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        // Still open: the import failed before the token was written.
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A path as one shell word, quoted when it needs to be.
fn shell_word(path: &std::path::Path) -> String {
    let text = path.display().to_string();
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c))
    {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// The registration token: given (`--token`, `$LARIAT_TOKEN`), or read from its file.
fn registration_token(args: &AgentArgs) -> anyhow::Result<String> {
    use std::io::Read as _;
    /// A token is some tens of bytes: a file past this is not one (nor is /dev/zero).
    const MAX_TOKEN_FILE: u64 = 4096;
    let path = match (&args.token, &args.token_file) {
        (Some(_), Some(_)) => {
            bail!("a token is given twice: --token (or $LARIAT_TOKEN) and --token-file; pass one")
        }
        (Some(token), None) => return Ok(token.clone()),
        (None, Some(path)) => path,
        (None, None) => bail!(
            "no registration token: pass --token-file PATH (from lariat cluster import --token-file), --token, or $LARIAT_TOKEN"
        ),
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_TOKEN_FILE + 1).read_to_string(&mut text))
        .with_context(|| {
            format!(
                "cannot read --token-file {}: pass the file lariat cluster import --token-file wrote",
                path.display()
            )
        })?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines[..] {
        [token] if text.len() as u64 <= MAX_TOKEN_FILE && !token.contains(char::is_whitespace) => {
            Ok(token.to_string())
        }
        [] => bail!(
            "--token-file {} holds no token: expected the one line lariat cluster import --token-file writes",
            path.display()
        ),
        _ => bail!(
            "--token-file {} holds more than a token ({} lines): expected the one line lariat cluster import --token-file writes",
            path.display(),
            lines.len()
        ),
    }
}

pub async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    let downstream = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
            kube::Client::try_from(
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?,
            )?
        }
        None => kube::Client::try_default()
            .await
            .context("no cluster to serve: run in a pod, or pass --kubeconfig")?,
    };
    let servers = lariat_agent::servers(&args.server);
    if servers.is_empty() || servers.iter().any(|s| !s.starts_with("https://")) {
        bail!(
            "invalid --server {:?}: expected https://HOST:PORT, or several replicas' URLs separated by commas",
            args.server
        );
    }
    let token = registration_token(&args)?;
    eprintln!("lariat agent dialling {}", args.server);
    lariat_agent::run(
        lariat_agent::Config::new(args.server, token, args.ca_checksum, downstream),
        crate::shutdown_signal(),
    )
    .await;
    Ok(())
}

/// Prints a kubeconfig for a connected cluster: lariat's own credentials, with the server set
/// to the cluster's proxy path.
pub async fn kubeconfig(args: KubeconfigArgs) -> anyhow::Result<()> {
    let client = crate::connect::client(args.kubeconfig.as_ref()).await?;
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client,
        &args.namespace,
        &lariat_controllers::capi("Cluster"),
    );
    let found = clusters.get_opt(&args.name).await.map_err(|e| {
        let forbidden = matches!(&e, kube::Error::Api(status) if status.code == 403);
        let error = crate::connect::refused(e, &format!("read cluster {}/{}", args.namespace, args.name));
        if forbidden {
            anyhow::anyhow!("{error}; ask an administrator for a binding in that cluster (a ClusterRoleTemplateBinding, or a ProjectRoleTemplateBinding of one of its projects)")
        } else {
            error
        }
    })?;
    let Some(found) = found else {
        bail!(
            "cluster {:?} not found in namespace {:?}",
            args.name,
            args.namespace
        );
    };
    // A kubeconfig for a cluster whose agent never connected would only earn the user
    // kubectl's discovery errors; say why instead. One that is reconnecting gets its
    // kubeconfig, and a word of warning.
    let condition = |type_: &str| {
        found.data["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == type_))
            .cloned()
    };
    let connected = condition("Connected");
    let is_true = |c: &Option<serde_json::Value>| c.as_ref().is_some_and(|c| c["status"] == "True");
    let why = connected
        .as_ref()
        .and_then(|c| c["message"].as_str())
        .filter(|m| !m.is_empty())
        .unwrap_or("no agent is connected")
        .to_string();
    if !is_true(&connected) && !is_true(&condition("ControlPlaneInitialized")) {
        bail!(
            "cluster {}/{} has never connected ({why}): lariat reaches it only through its agent; run `lariat cluster import {}` and apply the manifest it prints in that cluster",
            args.namespace,
            args.name,
            args.name
        );
    }
    if !is_true(&connected) {
        eprintln!(
            "warning: cluster {}/{} is not connected right now ({why}); this kubeconfig works once its agent is back",
            args.namespace, args.name
        );
    }
    let (mut config, mut named) = crate::connect::current_context(args.kubeconfig.as_ref())?;
    let context = named
        .context
        .clone()
        .context("the kubeconfig's current context is missing")?;
    let mut cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .cloned()
        .context("the kubeconfig's cluster is missing")?;
    let name = format!("{}-{}", args.namespace, args.name);
    if let Some(c) = cluster.cluster.as_mut() {
        let base = c.server.clone().unwrap_or_default();
        c.server = Some(format!(
            "{}/k8s/clusters/{}/{}",
            base.trim_end_matches('/'),
            args.namespace,
            args.name
        ));
    }
    cluster.name = name.clone();
    let user = config
        .auth_infos
        .iter()
        .find(|a| Some(&a.name) == context.user.as_ref())
        .cloned()
        .context("the kubeconfig's user is missing")?;
    config.clusters = vec![cluster];
    config.auth_infos = vec![user.clone()];
    named.name = name.clone();
    if let Some(c) = named.context.as_mut() {
        c.cluster = name.clone();
        c.namespace = None;
    }
    config.contexts = vec![named];
    config.current_context = Some(name);
    print!("{}", serde_yaml_ng::to_string(&config)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ttls() {
        assert_eq!(super::parse_ttl("90s").unwrap().as_secs(), 90);
        assert_eq!(super::parse_ttl("24h").unwrap().as_secs(), 86400);
        assert_eq!(super::parse_ttl("7d").unwrap().as_secs(), 7 * 86400);
        assert!(super::parse_ttl("0h").is_err());
        assert!(super::parse_ttl("soon").is_err());
        assert!(super::parse_ttl("5w").is_err());
        assert!(super::parse_ttl("99999999999999999d").is_err());
    }
}
