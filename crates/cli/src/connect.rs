//! How CLI commands find the lariat server: `--kubeconfig`, then `$KUBECONFIG` and
//! `~/.kube/config` as kubectl does, then the data directory of a server started here.

use std::path::PathBuf;

use anyhow::Context as _;

/// The kubeconfig file to read, or `None` to let kube-rs infer (in-cluster configuration).
pub fn kubeconfig_path(kubeconfig: Option<&PathBuf>) -> Option<PathBuf> {
    if let Some(path) = kubeconfig {
        return Some(path.clone());
    }
    if let Some(paths) = std::env::var_os("KUBECONFIG") {
        return std::env::split_paths(&paths).find(|p| p.exists());
    }
    let home = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".kube/config"));
    match home {
        Some(path) if path.exists() => Some(path),
        _ => Some(PathBuf::from("lariat-data/kubeconfig.yaml")),
    }
}

pub async fn config(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Config> {
    match kubeconfig_path(kubeconfig) {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(&path).map_err(|e| {
                // kube's error repeats its cause in its own text: name the cause once.
                let mut cause: &dyn std::error::Error = &e;
                while let Some(source) = cause.source() {
                    cause = source;
                }
                anyhow::anyhow!(
                    "cannot read the kubeconfig {}: {cause}: pass --kubeconfig or start `lariat server` here",
                    path.display()
                )
            })?;
            Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig found: pass --kubeconfig"),
    }
}

pub async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(config(kubeconfig).await?)?)
}

/// The kubeconfig CLI commands read (as [`kubeconfig_path`] finds it) and its current context,
/// for commands that print a kubeconfig derived from it.
pub fn current_context(
    kubeconfig: Option<&PathBuf>,
) -> anyhow::Result<(kube::config::Kubeconfig, kube::config::NamedContext)> {
    let path = kubeconfig_path(kubeconfig).context("no kubeconfig found: pass --kubeconfig")?;
    let config = kube::config::Kubeconfig::read_from(&path)
        .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
    let current = config
        .current_context
        .clone()
        .context("the kubeconfig has no current context")?;
    let named = config
        .contexts
        .iter()
        .find(|c| c.name == current)
        .filter(|c| c.context.is_some())
        .cloned()
        .context("the kubeconfig's current context is missing")?;
    Ok((config, named))
}

/// The server's refusal in its own words (a 403 names what is missing), not kube-rs's dump.
pub fn refused(e: kube::Error, doing: &str) -> anyhow::Error {
    match e {
        kube::Error::Api(status) => anyhow::anyhow!("cannot {doing}: {}", status.message),
        other => anyhow::anyhow!("cannot {doing}: {other}"),
    }
}
