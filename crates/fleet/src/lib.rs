//! lariat's Fleet: GitRepos fetched with gix into Bundles, Bundles targeted at clusters as
//! BundleDeployments, and their status rolled up (see `ARCHITECTURE.md`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::Client;
use lariat_api::fleet::{Bundle, GitRepo};
use lariat_controllers::cache::Caches;
use lariat_controllers::{controller_on, controller_owner, error_policy, finished};

pub mod conditions;
pub mod git;
pub mod git_repo;
pub mod scan;

/// Shared by every Fleet reconcile.
pub struct Context {
    pub client: Client,
    pub caches: Arc<Caches>,
    pub events: lariat_controllers::events::Recorder,
    /// Where clones live (`git/<GitRepo uid>`), under the server's data directory.
    pub dir: PathBuf,
    /// When each GitRepo (by uid) was last fetched by this process.
    fetched: Mutex<HashMap<String, Instant>>,
}

impl Context {
    pub fn new(caches: Arc<Caches>, dir: PathBuf) -> Context {
        let client = caches.client().clone();
        Context {
            events: lariat_controllers::events::Recorder::new(client.clone()),
            client,
            caches,
            dir,
            fetched: Mutex::default(),
        }
    }
}

/// Runs the Fleet controllers until `shutdown` resolves, on the process's shared caches;
/// clones are kept under `dir`.
pub async fn run(
    caches: Arc<Caches>,
    dir: PathBuf,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let context = Arc::new(Context::new(caches.clone(), dir));
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    controller_on(&caches.typed::<GitRepo>())
        // A Bundle's status change rolls up into its GitRepo.
        .watches_shared_stream_with(
            caches.typed::<Bundle>().changes(),
            controller_owner::<GitRepo, Bundle>(()),
            (),
        )
        .graceful_shutdown_on(shutdown)
        .run(git_repo::reconcile, error_policy, context)
        .for_each(finished("gitrepo"))
        .await;
}
