//! [`Validator`]s: a kind's write rules that read other objects or judge the writer
//! (kube-apiserver's validating admission with its listers), as a [`super::Strategy`] is those
//! that read the object alone. The crate that owns the kind hands them to the server in its
//! configuration (`Config::validators`).

use serde_json::Value;

use crate::identity::User;
use crate::rbac::Rbac;
use crate::status::{ApiResult, Cause};

/// Reads objects as they are stored now, for a validator.
#[async_trait::async_trait]
pub trait Reader: Send + Sync {
    /// The object `name` of `group`/`plural` in `namespace`; `None` when there is none, or the
    /// kind is not served.
    async fn get(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Option<Value>>;
}

/// One write being admitted, as a [`Validator`] sees it.
pub struct Write<'a> {
    /// What the validator reads other objects from (as stored now, so objects applied
    /// together are judged in order).
    pub reader: &'a dyn Reader,
    /// The writer's rules, for escalation checks.
    pub rbac: &'a Rbac,
    /// Who writes, when the writer is to be judged: `None` for the server's own writes, a
    /// status write, or a write already invalid.
    pub requester: Option<&'a User>,
    /// Whether one of the server's own in-process clients (its controllers) writes: a caller
    /// over the network never is one, whatever name it goes by.
    pub in_process: bool,
    /// The resource written (its plural).
    pub plural: &'a str,
}

/// A kind's write rules that read other objects or judge the writer; it runs after the
/// kind's schema and strategy. Returns what makes the write invalid (422, with field causes),
/// or `Err` for a refusal of its writer (403).
#[async_trait::async_trait]
pub trait Validator: Send + Sync {
    async fn validate(
        &self,
        write: Write<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<Cause>>;
}

/// Validators by group and resource (given as `Arc::new(validator)` to `with_shared`).
pub type Validators = lariat_api::admission::ByResource<dyn Validator>;
