//! `lariat token`: bearer tokens for people and scripts, as Rancher's API keys. The secret is
//! made here and only its SHA-256 is sent, in a `Token` (`management.lariat.dev/v1`), so the
//! server never holds a usable token; `create` prints it once. Deleting the Token (`revoke`)
//! refuses it at once. Who may create a token for whom is the server's RBAC to say: for
//! oneself and one's own groups with `create tokens`, for others with `impersonate` too.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use lariat_api::management;
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum TokenCommand {
    /// Create a token for a user (and groups) and print it once.
    Create(CreateArgs),
    /// List tokens: name, user, groups, expiry (never the token).
    List {
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// Revoke tokens by name, or every token of a user: they stop working at once.
    Revoke {
        /// Token names, as `lariat token list` shows them (`token-...`).
        #[arg(required_unless_present = "user")]
        names: Vec<String>,
        /// Revoke every token of this user.
        #[arg(long, conflicts_with = "names")]
        user: Option<String>,
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
pub struct CreateArgs {
    /// The user the token authenticates as.
    #[arg(long)]
    user: String,
    /// A group the user is in with this token (repeat for several).
    #[arg(long = "group")]
    groups: Vec<String>,
    /// How long the token works, e.g. 8h, 30d (at most 366d).
    #[arg(long, default_value = "30d")]
    ttl: String,
    /// What the token is for.
    #[arg(long, default_value = "")]
    description: String,
    /// Print a kubeconfig for this server that authenticates with the token, instead of the
    /// bare token.
    #[arg(long)]
    print_kubeconfig: bool,
    /// Kubeconfig of the lariat server [default: $KUBECONFIG, ~/.kube/config, ./lariat-data/kubeconfig.yaml].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

pub async fn run(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create(args) => create(args).await,
        TokenCommand::List { kubeconfig } => list(kubeconfig).await,
        TokenCommand::Revoke {
            names,
            user,
            kubeconfig,
        } => revoke(names, user, kubeconfig).await,
    }
}

fn tokens(client: kube::Client) -> Api<DynamicObject> {
    Api::all_with(client, &management::token_resource())
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let ttl = crate::import::parse_ttl(&args.ttl)?;
    if ttl.as_secs() > management::TOKEN_MAX_LIFETIME_DAYS as u64 * 86400 {
        bail!(
            "invalid --ttl {:?}: a token lives at most {}d",
            args.ttl,
            management::TOKEN_MAX_LIFETIME_DAYS
        );
    }
    if args.user.trim().is_empty() {
        bail!("--user is empty: name the user the token authenticates as");
    }
    let client = crate::connect::client(args.kubeconfig.as_ref()).await?;
    let (id, secret, hash) = lariat_management::credentials::new_token_parts();
    let name = format!("token-{id}");
    let expires = (chrono::Utc::now() + chrono::Duration::from_std(ttl)?)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": management::API_VERSION,
        "kind": "Token",
        "metadata": {"name": name},
        "spec": {"user": args.user, "groups": args.groups, "tokenHash": hash,
                 "expirationTimestamp": expires, "description": args.description},
    }))?;
    tokens(client)
        .create(&PostParams::default(), &object)
        .await
        .map_err(|e| crate::connect::refused(e, "create the token"))?;
    let token = format!("{name}:{secret}");
    if !args.print_kubeconfig {
        println!("{token}");
        eprintln!(
            "Token {name} for user {:?} expires {expires}; it is shown only now. Revoke it with: lariat token revoke {name}",
            args.user
        );
        return Ok(());
    }
    print!(
        "{}",
        kubeconfig_with_token(args.kubeconfig.as_ref(), &args.user, &token)?
    );
    Ok(())
}

/// The current kubeconfig's server and CA with `token` as the only user.
pub(crate) fn kubeconfig_with_token(
    kubeconfig: Option<&PathBuf>,
    user: &str,
    token: &str,
) -> anyhow::Result<String> {
    let (mut config, mut context) = crate::connect::current_context(kubeconfig)?;
    let inner = context
        .context
        .as_mut()
        .context("the kubeconfig's current context is empty")?;
    config.clusters.retain(|c| c.name == inner.cluster);
    inner.user = Some(user.to_string());
    inner.namespace = None;
    context.name = format!("{user}@{}", inner.cluster);
    config.auth_infos = vec![serde_json::from_value(
        json!({"name": user, "user": {"token": token}}),
    )?];
    config.current_context = Some(context.name.clone());
    config.contexts = vec![context];
    Ok(serde_yaml_ng::to_string(&config)?)
}

async fn list(kubeconfig: Option<PathBuf>) -> anyhow::Result<()> {
    let client = crate::connect::client(kubeconfig.as_ref()).await?;
    let listed = tokens(client)
        .list(&ListParams::default())
        .await
        .map_err(|e| crate::connect::refused(e, "list tokens"))?;
    let rows: Vec<[String; 5]> = listed
        .items
        .iter()
        .map(|t| {
            let spec = &t.data["spec"];
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            let groups: Vec<String> = spec["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(String::from))
                .collect();
            [
                t.metadata.name.clone().unwrap_or_default(),
                text(&spec["user"]),
                groups.join(","),
                text(&spec["expirationTimestamp"]),
                text(&spec["description"]),
            ]
        })
        .collect();
    let header = ["NAME", "USER", "GROUPS", "EXPIRES", "DESCRIPTION"].map(String::from);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<width$}", width = widths[i]))
            .collect();
        println!("{}", line.join("   ").trim_end());
    }
    Ok(())
}

async fn revoke(
    mut names: Vec<String>,
    user: Option<String>,
    kubeconfig: Option<PathBuf>,
) -> anyhow::Result<()> {
    let client = crate::connect::client(kubeconfig.as_ref()).await?;
    let api = tokens(client);
    if let Some(user) = user {
        let listed = api
            .list(&ListParams::default())
            .await
            .map_err(|e| crate::connect::refused(e, "list tokens"))?;
        names = listed
            .items
            .iter()
            .filter(|t| t.data["spec"]["user"] == user.as_str())
            .filter_map(|t| t.metadata.name.clone())
            .collect();
        if names.is_empty() {
            bail!("user {user:?} has no tokens: `lariat token list` shows who has");
        }
    }
    for name in names {
        // A whole token pasted in names its Token before the colon.
        let name = name.split(':').next().unwrap_or_default().to_string();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => println!("token {name} revoked"),
            Err(kube::Error::Api(status)) if status.code == 404 => {
                bail!("no token {name:?}: `lariat token list` shows the names")
            }
            Err(e) => return Err(crate::connect::refused(e, &format!("revoke token {name}"))),
        }
    }
    Ok(())
}
