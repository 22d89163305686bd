//! Rancher's access control (`management.cattle.io/v3`, see `lariat_api::rancher`) on lariat:
//! what its bindings grant on lariat itself (`grants.rs`, through RBAC's index) and in each
//! downstream cluster (`accesses.rs`, each Cluster's ClusterAccess, applied by its agent); the
//! rules writes of its kinds must follow (`strategies.rs` on the object alone, `admission.rs`
//! with what they refer to and who writes them); and the roles Rancher ships (`builtins.rs`).
//! [`Rancher`] hands the server what runs inside it; the write rules go in its configuration
//! ([`strategies`], [`validators`]).

use lariat_apiserver::extension::{Extension, Handle};
use lariat_apiserver::rbac::GrantSource;
use lariat_apiserver::resources::Resources;
use lariat_apiserver::status::ApiResult;

mod accesses;
mod admission;
mod builtins;
mod grants;
mod strategies;

pub use admission::validators;
pub use builtins::builtins;
pub use grants::cluster_role_name;
pub use strategies::strategies;

/// Rancher's access control as an extension of the server: its grants in RBAC's index, its
/// built-in roles kept from the first start, and the leader's publishing of ClusterAccesses.
#[derive(Clone, Copy, Default)]
pub struct Rancher;

#[async_trait::async_trait]
impl Extension for Rancher {
    fn grant_source(&self) -> Option<Box<dyn GrantSource>> {
        Some(Box::new(grants::Grants::default()))
    }

    async fn prepare(&self, resources: &Resources) -> ApiResult<()> {
        builtins::bootstrap(resources).await
    }

    fn lead(
        &self,
        server: Handle,
        term: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        vec![tokio::spawn(accesses::publish_accesses(
            server.controller_client(),
            term,
        ))]
    }
}
