//! Contents no BundleDeployment names any more are deleted: they hold manifests (Secrets
//! among them) of commits and customizations that are gone, and would pile up with every
//! commit.

use std::collections::HashSet;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use lariat_api::fleet::{BundleDeployment, Content};
use lariat_controllers::Error;

use crate::Context;

/// How often unused Contents are looked for.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// How old an unused Content must be to go: one made a moment ago may be about to be named
/// by the BundleDeployment its Bundle is writing.
const GRACE: Duration = Duration::from_secs(60);

/// Deletes the Contents no BundleDeployment names (now or staged); returns how many.
pub async fn sweep(ctx: &Context) -> Result<usize, Error> {
    let deployments = ctx.caches.typed::<BundleDeployment>();
    let contents = ctx.caches.typed::<Content>();
    deployments.synced().await?;
    contents.synced().await?;
    let named: HashSet<String> = deployments
        .store()
        .state()
        .iter()
        .flat_map(|bd| {
            [
                bd.spec.deployment_id.clone(),
                bd.spec.staged_deployment_id.clone(),
            ]
        })
        .flatten()
        .filter_map(|id| id.split(':').next().map(String::from))
        .collect();
    let api: Api<Content> = Api::all(ctx.client.clone());
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut deleted = 0;
    for content in contents.store().state() {
        let old_enough = content
            .metadata
            .creation_timestamp
            .as_ref()
            .is_some_and(|t| {
                now.duration_since(t.0)
                    >= k8s_openapi::jiff::SignedDuration::try_from(GRACE).unwrap_or_default()
            });
        if named.contains(&content.name_any()) || !old_enough {
            continue;
        }
        match api.delete(&content.name_any(), &Default::default()).await {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(deleted)
}
