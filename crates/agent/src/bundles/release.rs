//! Helm's record of a release in this cluster, kept as Helm's Secret driver keeps it: one
//! Secret per revision, `sh.helm.release.v1.<release>.v<N>` of type `helm.sh/release.v1`,
//! labelled `owner=helm`, `name`, `status`, `version`, holding the release as JSON, gzipped
//! and base64-encoded. So `helm list`, `helm history` and `helm get values` run by a user on
//! this cluster show what lariat deployed, and a `helm upgrade` by hand finds the release and
//! its objects (marked as Helm marks them) as its own (Fleet's agent deploys through Helm,
//! and leaves the same).

use std::io::{Read, Write};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::BUNDLE_DEPLOYMENT_LABEL;

const SECRET_TYPE: &str = "helm.sh/release.v1";
/// The most a release may inflate to when read back: a Secret holds at most 1 MiB, and a
/// release Secret in the cluster can have been written by anyone who may write Secrets.
const MAX_RELEASE_BYTES: u64 = 16 << 20;

/// What one revision of a release holds, besides its number and state.
#[derive(Clone, Debug)]
pub(super) struct ReleaseData {
    pub name: String,
    pub namespace: String,
    /// Helm's chart as it stores it: metadata, templates, values, files.
    pub chart: Value,
    /// The values given for this release (what `helm get values` prints).
    pub config: Value,
    /// The rendered manifests, as `helm get manifest` prints them.
    pub manifest: String,
    pub notes: String,
    /// The BundleDeployment that keeps the release (a label on its Secrets).
    pub bundle_deployment: String,
    /// Whether a revision was there before this one.
    pub is_upgrade: bool,
}

fn base64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The release as Helm's Secret driver encodes it: JSON, gzip, base64.
fn encode(release: &Value) -> Result<String, String> {
    let json = serde_json::to_vec(release).map_err(|e| e.to_string())?;
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gzip.write_all(&json).map_err(|e| e.to_string())?;
    Ok(base64().encode(gzip.finish().map_err(|e| e.to_string())?))
}

/// A release Secret's `release`, decoded (gzipped or not, as Helm reads both).
pub(super) fn decode(data: &[u8]) -> Result<Value, String> {
    let bytes = base64()
        .decode(data)
        .map_err(|e| format!("not base64: {e}"))?;
    let json = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .take(MAX_RELEASE_BYTES)
            .read_to_end(&mut out)
            .map_err(|e| format!("not gzip: {e}"))?;
        out
    } else {
        bytes
    };
    serde_json::from_slice(&json).map_err(|e| format!("not a release: {e}"))
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

fn secret(
    data: &ReleaseData,
    version: i64,
    status: &str,
    release: &Value,
) -> Result<Secret, String> {
    let name = &data.name;
    let body = json!({
        "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
        "metadata": {
            "name": format!("sh.helm.release.v1.{name}.v{version}"),
            "namespace": data.namespace,
            "labels": {"name": name, "owner": "helm", "status": status, "version": version.to_string(),
                "createdAt": chrono::Utc::now().timestamp().to_string(),
                BUNDLE_DEPLOYMENT_LABEL: data.bundle_deployment},
        },
        "data": {"release": base64().encode(encode(release)?)},
    });
    serde_json::from_value(body).map_err(|e| e.to_string())
}

fn version_of(secret: &Secret) -> i64 {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("version"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn release_of(secret: &Secret) -> Option<Value> {
    decode(&secret.data.as_ref()?.get("release")?.0).ok()
}

/// The revision the next install or upgrade of release `name` will be, and whether one is
/// there already (an upgrade), for `.Release.Revision` and `.Release.IsUpgrade`. A release
/// another bundle keeps is refused: two bundles would take turns upgrading one release, and
/// the first to go would delete the other's history.
pub(super) async fn next_revision(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    bundle_deployment: &str,
) -> Result<(u64, bool), String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let selector = format!("owner=helm,name={name}");
    let revisions: Vec<Secret> = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| format!("cannot read release {name}'s history: {e}"))?
        .items
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some(SECRET_TYPE))
        .collect();
    let keeper = revisions
        .iter()
        .filter_map(|s| s.metadata.labels.as_ref()?.get(BUNDLE_DEPLOYMENT_LABEL))
        .find(|keeper| *keeper != bundle_deployment);
    if let Some(keeper) = keeper {
        return Err(format!(
            "release {name} in namespace {namespace} is bundle {keeper}'s: give this bundle another helm.releaseName"
        ));
    }
    let latest = revisions.iter().map(version_of).max().unwrap_or(0);
    Ok((u64::try_from(latest).unwrap_or(0) + 1, latest > 0))
}

/// The revisions of release `data.name`, oldest first.
async fn history(api: &Api<Secret>, name: &str) -> Result<Vec<Secret>, String> {
    let selector = format!("owner=helm,name={name}");
    let mut revisions = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| format!("cannot read release {name}'s history: {e}"))?
        .items;
    revisions.retain(|s| s.type_.as_deref() == Some(SECRET_TYPE));
    revisions.sort_by_key(version_of);
    Ok(revisions)
}

/// How a revision ended, and what `helm history` says of it.
pub(super) enum Outcome {
    Deployed,
    /// A failed install or upgrade, with Helm's description of it.
    Failed(String),
    /// Deployed again from revision N, as `helm rollback` records it.
    RolledBackTo(i64),
}

/// Records a new revision of the release, unless it is deployed and the latest already holds
/// these manifests and values (an apply repeated after a restart is not an upgrade). A
/// deployed revision makes the older deployed ones `superseded`; beyond `max_history` (when
/// above 0) the oldest are deleted.
pub(super) async fn record(
    client: &kube::Client,
    data: &ReleaseData,
    hooks: &[Value],
    max_history: i32,
    outcome: Outcome,
) -> Result<(), String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &data.namespace);
    let revisions = history(&api, &data.name).await?;
    let latest = revisions.last().and_then(release_of);
    if let (Outcome::Deployed, Some(latest)) = (&outcome, &latest)
        && latest["manifest"] == data.manifest.as_str()
        && latest["config"] == data.config
        && latest["info"]["status"] == "deployed"
    {
        return Ok(());
    }
    let version = revisions.last().map_or(0, version_of) + 1;
    let first_deployed = revisions
        .first()
        .and_then(release_of)
        .and_then(|r| r["info"]["first_deployed"].as_str().map(String::from))
        .unwrap_or_else(now);
    let (status, description) = match outcome {
        Outcome::Deployed if version == 1 => ("deployed", "Install complete".to_string()),
        Outcome::Deployed => ("deployed", "Upgrade complete".to_string()),
        Outcome::Failed(description) => ("failed", description),
        Outcome::RolledBackTo(revision) => ("deployed", format!("Rollback to {revision}")),
    };
    let release = json!({
        "name": data.name,
        "info": {
            "first_deployed": first_deployed, "last_deployed": now(), "deleted": "0001-01-01T00:00:00Z",
            "description": description, "status": status, "notes": data.notes,
        },
        "chart": data.chart, "config": data.config, "manifest": data.manifest, "hooks": hooks,
        "version": version, "namespace": data.namespace,
    });
    api.create(
        &PostParams::default(),
        &secret(data, version, status, &release)?,
    )
    .await
    .map_err(|e| {
        format!(
            "cannot record release {} revision {version}: {e}",
            data.name
        )
    })?;
    if status != "deployed" {
        return Ok(());
    }
    for older in &revisions {
        let Some(mut old) = release_of(older) else {
            continue;
        };
        if old["info"]["status"] != "deployed" {
            continue;
        }
        old["info"]["status"] = json!("superseded");
        let replaced = secret(data, version_of(older), "superseded", &old)?;
        let patch =
            json!({"metadata": {"labels": replaced.metadata.labels}, "data": replaced.data});
        api.patch(
            &older.metadata.name.clone().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(|e| {
            format!(
                "cannot mark release {} revision {} superseded: {e}",
                data.name,
                version_of(older)
            )
        })?;
    }
    let keep = usize::try_from(max_history).unwrap_or(0);
    if keep > 0 && revisions.len() + 1 > keep {
        for gone in &revisions[..revisions.len() + 1 - keep] {
            let name = gone.metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(format!("cannot delete release history {name}: {e}")),
            }
        }
    }
    Ok(())
}

/// The newest revision of release `name` that was deployed (`deployed` or `superseded`, as
/// Helm's rollback on failure chooses), with its number, whose manifest has digest
/// `manifest`: the release's Secrets live in a namespace others may write to, so only the
/// manifest the agent deployed itself is taken.
pub(super) async fn last_deployed(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    manifest: &str,
) -> Result<Option<(i64, Value)>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(history(&api, name)
        .await?
        .iter()
        .rev()
        .filter_map(|s| Some((version_of(s), release_of(s)?)))
        .find(|(_, r)| {
            matches!(
                r["info"]["status"].as_str(),
                Some("deployed" | "superseded")
            ) && r["manifest"].as_str().map(manifest_digest).as_deref() == Some(manifest)
        }))
}

/// The digest by which the agent knows a manifest it deployed.
pub(super) fn manifest_digest(manifest: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(manifest.as_bytes()))
}

/// The newest revision of release `name`, as the cluster keeps it; `None` when there is none.
pub(super) async fn latest(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let selector = format!("owner=helm,name={name}");
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .filter(|s| s.type_.as_deref() == Some(SECRET_TYPE))
        .max_by_key(|s| version_of(s))
        .and_then(release_of))
}

/// Deletes every revision of a release, as `helm uninstall` does.
pub(super) async fn remove(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<(), kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let selector = format!("owner=helm,name={name}");
    for secret in api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
    {
        if secret.type_.as_deref() != Some(SECRET_TYPE) {
            continue;
        }
        match api
            .delete(
                &secret.metadata.name.unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Helm's chart as a release stores it: metadata under Helm's JSON names, templates and
/// other files base64-encoded, and the chart's own values.
pub(super) fn chart_json(chart: &lariat_helm::Chart) -> Value {
    let file = |name: &str, data: &[u8]| json!({"name": name, "data": base64().encode(data)});
    let metadata = serde_json::to_value(&chart.metadata).unwrap_or(Value::Null);
    json!({
        "metadata": metadata,
        "lock": null,
        "templates": chart.templates.iter().map(|f| file(&f.name, &f.data)).collect::<Vec<_>>(),
        "values": chart.values,
        "schema": chart.schema.as_ref().map(|s| base64().encode(s)),
        "files": chart.files.iter().map(|f| file(&f.name, &f.data)).collect::<Vec<_>>(),
    })
}
