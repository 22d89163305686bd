//! The verbs on stored objects (get, list, create, update, patch, apply, delete), with
//! Kubernetes object semantics, independent of HTTP so in-process callers share them.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures::stream::{self, BoxStream, StreamExt};
use lariat_store::{KeyValue, ListOptions, Store};
use serde_json::{Value, json};

use crate::encryption::Cipher;
use crate::managed::{self, Writer};
use crate::objects::{self, Selector, meta_mut, now_rfc3339};
use crate::patch::{self, PatchType};
use crate::registry::{Origin, Registry, ResourceType};
use crate::schema;
use crate::sending::{Permit, Share};
use crate::status::{ApiError, ApiResult, Cause};

/// What every write does with fields the schema does not know (`?fieldValidation=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub field_manager: String,
    pub validation: FieldValidation,
    pub dry_run: bool,
    pub force: bool,
    /// Who asks, when a write's admission depends on it (RBAC's escalation prevention);
    /// `None` for the server's own writes.
    pub requester: Option<crate::identity::User>,
    /// Sent by one of the server's own in-process clients (its controllers), not by a caller
    /// over the network, whatever name the caller goes by.
    pub in_process: bool,
    /// Why the requester may not create the object, should a PUT or an apply find it absent:
    /// authorized to update or patch is not authorized to create (kube-apiserver asks the
    /// authorizer for `create` on that path too). `None`: it may, or the write cannot create.
    pub create_refused: Option<ApiError>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    #[default]
    Background,
    Foreground,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

#[derive(Clone, Debug, Default)]
pub struct ListParams {
    pub label_selector: Selector,
    pub field_selector: Selector,
    pub limit: usize,
    pub continue_token: Option<String>,
    /// Which revision to list at (`resourceVersion` with `resourceVersionMatch`).
    pub at: ListAt,
}

/// The revision a list reads, as `resourceVersion` and `resourceVersionMatch` choose it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListAt {
    /// The latest state (no resourceVersion, or "0").
    #[default]
    Latest,
    /// The latest state, which must be at least this revision (`NotOlderThan`, and a bare
    /// resourceVersion).
    NotOlderThan(i64),
    /// Exactly this revision (`Exact`).
    Exact(i64),
}

pub struct ListOutcome {
    pub items: Vec<Value>,
    pub resource_version: i64,
    pub continue_token: Option<String>,
}

/// A successful write: the object as stored, and warnings for the `Warning` header.
pub struct Written {
    pub object: Value,
    pub created: bool,
    pub warnings: Vec<String>,
}

/// Where one request points: a resource type at a served version, in a namespace.
#[derive(Clone)]
pub struct Scope {
    pub rt: Arc<ResourceType>,
    pub version: String,
    pub namespace: Option<String>,
}

impl Scope {
    pub fn key(&self, name: &str) -> String {
        self.rt.key(self.namespace.as_deref(), name)
    }

    pub(crate) fn api_version(&self) -> String {
        self.rt.api_version(&self.version)
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.rt.plural, &self.rt.group, name)
    }
}

/// Finalizers the API server itself acts on while an object is being deleted.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";

/// How long a read or watch from a revision the store has not reached waits for it: the 3 s
/// kube-apiserver's watch cache waits before it answers `ResourceVersionTooLarge`.
const REVISION_WAIT: Duration = Duration::from_secs(3);

/// Stored objects and the rules that keep them valid.
#[derive(Clone)]
pub struct Resources {
    pub store: Arc<dyn Store>,
    pub registry: Registry,
    /// Encrypts Secrets at rest.
    cipher: Arc<Cipher>,
    /// Recent changes as watchers see them, decoded and encoded once for all of them.
    pub(crate) fanout: Arc<crate::fanout::Fanout>,
    /// RBAC, which checks writes of roles and bindings against their writer's own rules.
    rbac: Option<Arc<crate::rbac::Rbac>>,
    /// How large a stored object may be.
    pub limits: crate::limits::ResourceLimits,
    /// What each kind checks when written, beyond its schema.
    strategies: Arc<crate::strategy::Strategies>,
    /// What some kinds check when written by reading other objects or judging the writer.
    validators: Arc<crate::strategy::Validators>,
}

impl Resources {
    pub fn new(store: Arc<dyn Store>, registry: Registry, cipher: Cipher) -> Resources {
        Resources {
            store,
            registry,
            cipher: Arc::new(cipher),
            fanout: Default::default(),
            rbac: None,
            limits: Default::default(),
            strategies: Arc::new(crate::strategy::builtin()),
            validators: Default::default(),
        }
    }

    /// These resources admitting writes with `validators` too (after strategies).
    pub fn with_validators(mut self, validators: crate::strategy::Validators) -> Resources {
        self.validators = Arc::new(validators);
        self
    }

    /// These resources admitting writes with the built-in kinds' strategies and `more`.
    pub fn with_strategies(mut self, more: crate::strategy::Strategies) -> Resources {
        self.strategies = Arc::new(crate::strategy::builtin().and(more));
        self
    }

    /// These resources with `limits` on what one object may cost.
    pub fn with_limits(mut self, limits: crate::limits::ResourceLimits) -> Resources {
        self.limits = limits;
        self.fanout = Arc::new(crate::fanout::Fanout::new(
            limits.watch_cache_bytes,
            crate::fanout::FANOUT_AGE,
        ));
        self
    }

    /// What the watch cache holds now, in bytes (`lariat_watch_cache_bytes`).
    pub fn watch_cache_bytes(&self) -> usize {
        self.fanout.bytes()
    }

    /// These resources writing only while this replica leads (see [`crate::leader`]), for
    /// the server's leader-only loops; they share everything else, watches included.
    pub fn leader_only(&self, leadership: Arc<crate::leader::Leadership>) -> Resources {
        Resources {
            store: crate::leader::LeaderOnly::around(self.store.clone(), leadership),
            ..self.clone()
        }
    }

    /// These resources with RBAC's escalation prevention on writes of roles and bindings.
    pub fn with_rbac(mut self, rbac: Arc<crate::rbac::Rbac>) -> Resources {
        self.rbac = Some(rbac);
        self
    }

    /// Where requests for `group`/`plural` in `namespace` point, at the kind's storage
    /// version; `None` when the kind is not served.
    pub fn scope(&self, group: &str, plural: &str, namespace: Option<&str>) -> Option<Scope> {
        let rt = self.registry.get(group, plural)?;
        Some(Scope {
            version: rt.storage_version().name.clone(),
            rt,
            namespace: namespace.map(String::from),
        })
    }

    /// The stored JSON of any value, decrypted when it was stored encrypted.
    pub fn plaintext(&self, kv: &KeyValue) -> ApiResult<Value> {
        let bytes = self.plaintext_bytes(kv)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::internal(format!("stored object {} is corrupt: {e}", kv.key)))
    }

    /// The stored JSON's bytes, decrypted, for a reader that parses only what it needs.
    pub(crate) fn plaintext_bytes<'a>(
        &self,
        kv: &'a KeyValue,
    ) -> ApiResult<std::borrow::Cow<'a, [u8]>> {
        self.cipher.decrypt(&kv.value)
    }

    /// The object as clients see it: stored JSON plus the served apiVersion and the
    /// store's revision as `resourceVersion`.
    pub fn decode(&self, scope: &Scope, kv: &KeyValue) -> ApiResult<Value> {
        let mut object = self.plaintext(kv)?;
        if let Some(stored) = &scope.rt.stored_as {
            object = (stored.from_storage)(object);
        }
        object["apiVersion"] = json!(scope.api_version());
        meta_mut(&mut object).insert("resourceVersion".into(), json!(kv.mod_revision.to_string()));
        Ok(object)
    }

    /// The bytes to store: JSON without `resourceVersion`, encrypted for Secrets.
    fn encode(&self, scope: &Scope, object: &Value) -> ApiResult<Vec<u8>> {
        let aliased = scope
            .rt
            .stored_as
            .as_ref()
            .map(|alias| (alias.to_storage)(object.clone()));
        let bytes = serde_json::to_vec(&WithoutResourceVersion(aliased.as_ref().unwrap_or(object)))
            .map_err(|e| ApiError::internal(format!("cannot encode object: {e}")))?;
        self.limits.check_stored(bytes.len())?;
        if scope.rt.is_secret() {
            return self.cipher.encrypt(&bytes);
        }
        Ok(bytes)
    }

    pub async fn get(&self, scope: &Scope, name: &str) -> ApiResult<Value> {
        match self.store.get(&scope.key(name)).await? {
            Some(kv) => self.decode(scope, &kv),
            None => Err(scope.not_found(name)),
        }
    }

    pub async fn list(&self, scope: &Scope, params: &ListParams) -> ApiResult<ListOutcome> {
        let prefix = scope.rt.list_prefix(scope.namespace.as_deref());
        let (mut revision, mut start_after) = match &params.continue_token {
            Some(token) => decode_continue(token)?,
            None => (self.revision_to_list_at(params.at).await?, None),
        };
        if params.continue_token.is_some() {
            match self.reached(revision).await {
                Err(ApiError::TooLargeResourceVersion { .. }) => {
                    return Err(ApiError::bad_request(
                        "invalid continue token: it names a revision this server has not reached; start a new list without the continue parameter",
                    ));
                }
                reached => reached?,
            }
        }
        let filtered = !params.label_selector.is_empty() || !params.field_selector.is_empty();
        let mut items = Vec::new();
        // What the items read so far weigh: a paged list's response stops at a page's bytes
        // and continues from there (clients follow `continue` whatever the count).
        let mut bytes = 0;
        loop {
            let page = if params.limit == 0 {
                0
            } else {
                (params.limit - items.len()).max(if filtered { 500 } else { 0 })
            };
            let options = ListOptions {
                start_after: start_after.clone(),
                limit: page,
                revision,
                max_bytes: LIST_PAGE_BYTES,
            };
            let result = self.store.list(&prefix, options).await.map_err(|e| match e {
                lariat_store::Error::Compacted { .. } if params.continue_token.is_some() => ApiError::Gone {
                    message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                },
                other => other.into(),
            })?;
            revision = result.revision;
            let mut last_key = None;
            let mut full = false;
            for kv in &result.items {
                last_key = Some(kv.key.clone());
                if !labels_may_match(&params.label_selector, kv) {
                    continue;
                }
                let object = self.decode(scope, kv)?;
                if params.label_selector.matches_labels(&object)
                    && params.field_selector.matches_fields(&object)
                {
                    bytes += kv.value.len();
                    items.push(object);
                    full = params.limit > 0
                        && (items.len() == params.limit || bytes >= LIST_PAGE_BYTES);
                    if full {
                        break;
                    }
                }
            }
            let stopped_early = last_key.as_ref() != result.items.last().map(|kv| &kv.key);
            let more = result.more || stopped_early;
            if full && more {
                let token = encode_continue(revision, last_key.as_deref().unwrap_or_default());
                return Ok(ListOutcome {
                    items,
                    resource_version: revision,
                    continue_token: Some(token),
                });
            }
            if !more {
                break;
            }
            start_after = last_key;
        }
        Ok(ListOutcome {
            items,
            resource_version: revision,
            continue_token: None,
        })
    }

    /// Waits until the store has reached `requested`, for [`REVISION_WAIT`] at most, then
    /// refuses it as kube-apiserver does (`ResourceVersionTooLarge`). A revision this server
    /// just handed out can be a moment ahead of the revision the store reports: SQLite's
    /// readers see a commit before its writer publishes the new head, and an etcd member may
    /// answer a moment behind another.
    pub async fn reached(&self, requested: i64) -> ApiResult<()> {
        let deadline = tokio::time::Instant::now() + REVISION_WAIT;
        let mut pause = Duration::from_millis(1);
        loop {
            let current = self.store.current_revision().await?;
            if requested <= current {
                return Ok(());
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(ApiError::TooLargeResourceVersion { requested, current });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// The store revision a list starts at (0: the latest), refusing a revision the store has
    /// not reached as kube-apiserver does.
    async fn revision_to_list_at(&self, at: ListAt) -> ApiResult<i64> {
        let (ListAt::NotOlderThan(requested) | ListAt::Exact(requested)) = at else {
            return Ok(0);
        };
        self.reached(requested).await?;
        Ok(if let ListAt::Exact(revision) = at {
            revision
        } else {
            0
        })
    }

    /// A whole list (no `limit`), read page by page from the store at one revision and
    /// decoded an item at a time as the caller takes them, so a reader holds one store page
    /// ([`LIST_PAGE_BYTES`], taken from [`crate::sending`]'s budget) however many objects
    /// there are. Returns the revision and the matching objects in key order; a 429 when the
    /// budget is spent.
    pub async fn list_stream(
        &self,
        scope: &Scope,
        params: &ListParams,
        share: &Share,
    ) -> ApiResult<(i64, BoxStream<'static, ApiResult<Value>>)> {
        let prefix = scope.rt.list_prefix(scope.namespace.as_deref());
        let at = self.revision_to_list_at(params.at).await?;
        let permit = crate::sending::hold(share, LIST_PAGE_BYTES)?;
        let first = self.store.list(&prefix, stream_page(None, at)).await?;
        let revision = first.revision;
        let reading = StreamedPage::new(first, permit);
        let (this, scope, params, share) =
            (self.clone(), scope.clone(), params.clone(), share.clone());
        let items = stream::unfold(Some(reading), move |reading| {
            let (this, scope, params, prefix, share) = (
                this.clone(),
                scope.clone(),
                params.clone(),
                prefix.clone(),
                share.clone(),
            );
            async move {
                let mut reading = reading?;
                loop {
                    if let Some(kv) = reading.items.next() {
                        match this.decode(&scope, &kv) {
                            Ok(object)
                                if params.label_selector.matches_labels(&object)
                                    && params.field_selector.matches_fields(&object) =>
                            {
                                return Some((Ok(object), Some(reading)));
                            }
                            Ok(_) => continue,
                            Err(e) => return Some((Err(e), None)),
                        }
                    }
                    let start_after = reading.last_key.take()?;
                    // The page read is given back before the next is waited for.
                    drop(reading);
                    let permit = crate::sending::hold_waiting(&share, LIST_PAGE_BYTES).await;
                    match this
                        .store
                        .list(&prefix, stream_page(Some(start_after), revision))
                        .await
                    {
                        Ok(next) => reading = StreamedPage::new(next, permit),
                        Err(e) => return Some((Err(e.into()), None)),
                    }
                }
            }
        });
        Ok((revision, items.boxed()))
    }

    pub async fn create(
        &self,
        scope: &Scope,
        body: Value,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        let (mut object, warnings) = self.admit(scope, body, None, None, options).await?;
        if !options.field_manager.is_empty() {
            managed::record_update(None, &mut object, &self.writer(scope, options, None));
        }
        if let Some(ns) = &scope.namespace {
            self.check_namespace_open(ns).await?;
        }
        let name = objects::name_of(&object).to_string();
        if options.dry_run {
            return Ok(Written {
                object,
                created: true,
                warnings,
            });
        }
        let kv = match self
            .store
            .create(&scope.key(&name), self.encode(scope, &object)?)
            .await
        {
            Ok(kv) => kv,
            Err(lariat_store::Error::AlreadyExists(_)) => {
                return Err(ApiError::already_exists(
                    &scope.rt.plural,
                    &scope.rt.group,
                    &name,
                ));
            }
            Err(e) => return Err(e.into()),
        };
        let object = with_revision(object, kv.mod_revision);
        self.after_write(scope, None, Some(&object)).await?;
        Ok(Written {
            object,
            created: true,
            warnings,
        })
    }

    /// A namespaced object can only be created in a namespace that exists and is not being
    /// deleted.
    async fn check_namespace_open(&self, namespace: &str) -> ApiResult<()> {
        let Some(kv) = self
            .store
            .get(&format!("/registry/core/namespaces/{namespace}"))
            .await?
        else {
            return Err(ApiError::not_found("namespaces", "", namespace));
        };
        let ns: Value =
            serde_json::from_slice(&kv.value).map_err(|e| ApiError::internal(e.to_string()))?;
        if !ns["metadata"]["deletionTimestamp"].is_null() {
            return Err(ApiError::Forbidden {
                message: format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            });
        }
        Ok(())
    }

    /// PUT: replaces the object (or creates it when it is absent and the kind allows it).
    pub async fn update(
        &self,
        scope: &Scope,
        name: &str,
        body: Value,
        subresource: Option<&str>,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        let requested_rv = body["metadata"]["resourceVersion"]
            .as_str()
            .map(String::from);
        self.write_loop(
            scope,
            name,
            subresource,
            options,
            requested_rv,
            |current| match current {
                None if !creates_on_update(scope) => Err(scope.not_found(name)),
                _ => Ok(body.clone()),
            },
        )
        .await
    }

    /// PATCH with a JSON, merge or strategic patch; a server-side apply patch goes to `apply`.
    pub async fn patch(
        &self,
        scope: &Scope,
        name: &str,
        patch_type: PatchType,
        body: &[u8],
        subresource: Option<&str>,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        if patch_type == PatchType::Strategic && scope.rt.origin != Origin::Core {
            return Err(ApiError::UnsupportedMediaType {
                message: "strategic merge patch is not supported for custom resources; use --type merge or --type json".into(),
            });
        }
        if patch_type == PatchType::Apply {
            return self.apply(scope, name, body, subresource, options).await;
        }
        // A resourceVersion the patch sets (a merge patch's metadata, or a JSON patch's
        // add, replace or test of /metadata/resourceVersion) is a precondition, as in
        // Kubernetes: a stale one is a 409, not a silent overwrite.
        let parsed = patch::Patch::parse(patch_type, body)?;
        let requested_rv = match parsed.value() {
            Value::Array(ops) => ops.iter().find_map(|op| {
                (op["path"] == "/metadata/resourceVersion"
                    && matches!(op["op"].as_str(), Some("add" | "replace" | "test")))
                .then(|| op["value"].as_str().map(String::from))
                .flatten()
            }),
            parsed => parsed["metadata"]["resourceVersion"]
                .as_str()
                .map(String::from),
        };
        let max_bytes = self.limits.max_object_bytes;
        self.write_loop(scope, name, subresource, options, requested_rv, |current| {
            let current = current.ok_or_else(|| scope.not_found(name))?;
            let patched =
                crate::limits::offload(body.len(), || parsed.apply(current, max_bytes))?;
            // A patch edits an object; one that removes what makes it an object of its kind
            // (or replaces it whole with something else) is refused, as kube-apiserver cannot
            // decode the result.
            for field in ["apiVersion", "kind"] {
                if patched.is_object() && patched[field].as_str().is_none_or(str::is_empty) {
                    return Err(ApiError::bad_request(format!(
                        "Object '{field}' is missing in the patched object: a patch may not remove it"
                    )));
                }
            }
            Ok(patched)
        })
        .await
    }

    async fn apply(
        &self,
        scope: &Scope,
        name: &str,
        body: &[u8],
        subresource: Option<&str>,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        if options.field_manager.is_empty() {
            return Err(ApiError::bad_request(
                "fieldManager is required for apply requests",
            ));
        }
        let applied: Value = crate::limits::yaml(body, "the apply patch").map_err(|e| match e {
            ApiError::BadRequest { message } => {
                ApiError::bad_request(format!("error decoding YAML: {message}"))
            }
            other => other,
        })?;
        if !applied.is_object() {
            return Err(ApiError::bad_request("an apply patch must be an object"));
        }
        for field in ["apiVersion", "kind"] {
            if applied[field].as_str().is_none_or(str::is_empty) {
                return Err(ApiError::bad_request(format!(
                    "error decoding YAML: Object '{field}' is missing: an apply patch names the object's apiVersion and kind"
                )));
            }
        }
        if objects::name_of(&applied) != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                objects::name_of(&applied)
            )));
        }
        let writer = self.writer(scope, options, subresource);
        let force = options.force;
        let mut options = options.clone();
        options.field_manager = String::new();
        self.write_loop(scope, name, subresource, &options, None, |current| {
            let mut applied = applied.clone();
            if let Some(meta) = applied["metadata"].as_object_mut() {
                meta.remove("resourceVersion");
                meta.remove("managedFields");
            }
            managed::apply(current, &applied, &writer, force)
        })
        .await
    }

    fn writer(&self, scope: &Scope, options: &WriteOptions, subresource: Option<&str>) -> Writer {
        Writer {
            manager: options.field_manager.clone(),
            api_version: scope.api_version(),
            subresource: subresource.map(String::from),
        }
    }

    /// Read, change, compare-and-swap, retried on conflict unless the client named a
    /// resourceVersion (then a stale one is the client's 409).
    pub(crate) async fn write_loop<F>(
        &self,
        scope: &Scope,
        name: &str,
        subresource: Option<&str>,
        options: &WriteOptions,
        requested_rv: Option<String>,
        change: F,
    ) -> ApiResult<Written>
    where
        F: Fn(Option<&Value>) -> ApiResult<Value>,
    {
        let key = scope.key(name);
        loop {
            let current_kv = self.store.get(&key).await?;
            let current = current_kv
                .as_ref()
                .map(|kv| self.decode(scope, kv))
                .transpose()?;
            let Some((kv, current)) = current_kv.zip(current) else {
                // Creating through PUT or apply, as Kubernetes allows for these kinds.
                if subresource.is_some() {
                    return Err(scope.not_found(name));
                }
                if let Some(refused) = &options.create_refused {
                    return Err(refused.clone());
                }
                let mut body = change(None)?;
                check_changed_object(&body, name)?;
                meta_mut(&mut body).insert("name".into(), json!(name));
                return self.create(scope, body, options).await;
            };
            if let Some(rv) = &requested_rv
                && rv != &kv.mod_revision.to_string()
            {
                return Err(ApiError::conflict(&scope.rt.plural, &scope.rt.group, name));
            }
            let mut desired = change(Some(&current))?;
            check_changed_object(&desired, name)?;
            meta_mut(&mut desired)
                .insert("resourceVersion".into(), json!(kv.mod_revision.to_string()));
            let (mut object, warnings) = self
                .admit(scope, desired, Some(&current), subresource, options)
                .await?;
            if !options.field_manager.is_empty() {
                managed::record_update(
                    Some(&current),
                    &mut object,
                    &self.writer(scope, options, subresource),
                );
            }
            if options.dry_run {
                return Ok(Written {
                    object,
                    created: false,
                    warnings,
                });
            }
            // A write that changes nothing is not written, as in Kubernetes: the
            // resourceVersion stays and watchers see no event.
            if unchanged(&current, &object) {
                return Ok(Written {
                    object: current,
                    created: false,
                    warnings,
                });
            }
            if deletion_complete(&object) {
                return match self.store.delete(&key, kv.mod_revision).await {
                    Ok(_) => {
                        self.after_write(scope, Some(&current), None).await?;
                        Ok(Written {
                            object,
                            created: false,
                            warnings,
                        })
                    }
                    Err(lariat_store::Error::Conflict { .. }) if requested_rv.is_none() => continue,
                    Err(lariat_store::Error::Conflict { .. }) => {
                        Err(ApiError::conflict(&scope.rt.plural, &scope.rt.group, name))
                    }
                    Err(lariat_store::Error::NotFound(_)) => Err(scope.not_found(name)),
                    Err(e) => Err(e.into()),
                };
            }
            match self
                .store
                .update(&key, self.encode(scope, &object)?, kv.mod_revision)
                .await
            {
                Ok(kv) => {
                    let object = with_revision(object, kv.mod_revision);
                    self.after_write(scope, Some(&current), Some(&object))
                        .await?;
                    return Ok(Written {
                        object,
                        created: false,
                        warnings,
                    });
                }
                Err(lariat_store::Error::Conflict { .. }) if requested_rv.is_none() => continue,
                Err(lariat_store::Error::Conflict { .. }) => {
                    return Err(ApiError::conflict(&scope.rt.plural, &scope.rt.group, name));
                }
                Err(lariat_store::Error::NotFound(_)) => return Err(scope.not_found(name)),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Validates and completes an object for writing: identity and server-owned metadata,
    /// subresource rules, schema (defaults, pruning, validation), kind-specific rules.
    async fn admit(
        &self,
        scope: &Scope,
        body: Value,
        old: Option<&Value>,
        subresource: Option<&str>,
        options: &WriteOptions,
    ) -> ApiResult<(Value, Vec<String>)> {
        let rt = &scope.rt;
        let mut object = envelope(scope, body)?;
        let mut causes = match old {
            None => new_metadata(rt, &mut object),
            Some(old) => {
                carried_metadata(rt, &mut object, old, subresource)?;
                Vec::new()
            }
        };
        causes.extend(metadata_causes(&object["metadata"]));
        let strategy = self.strategies.get(&rt.group, &rt.plural);
        if subresource.is_none()
            && let Some(strategy) = strategy
        {
            strategy.default_fields(&mut object, old);
        }
        let warnings = schema_findings(scope, &mut object, options.validation, &mut causes)?;
        if rt.is_crd() {
            causes.extend(crate::strategy::crd::admit(
                &self.registry,
                &mut object,
                old,
            ));
        } else if let Some(strategy) = strategy {
            causes.extend(strategy.admit(&mut object, old));
        }
        if let Some(rbac) = &self.rbac
            && let Some(validator) = self.validators.get(&rt.group, &rt.plural)
        {
            // Who may write it is asked only of a write that is otherwise valid, and not of a
            // status write.
            let requester = options
                .requester
                .as_ref()
                .filter(|_| causes.is_empty() && subresource.is_none());
            let write = crate::strategy::Write {
                reader: self,
                rbac,
                requester,
                in_process: options.in_process,
                plural: &rt.plural,
            };
            causes.extend(validator.validate(write, &mut object, old).await?);
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                objects::name_of(&object),
                causes,
            ));
        }
        if let (Some(rbac), Some(requester)) = (&self.rbac, &options.requester) {
            rbac.confirm_write(requester, &rt.group, &rt.plural, &object)?;
        }
        Ok((object, warnings))
    }

    /// Keeps in-memory state that mirrors stored objects (served CRDs) in step with writes.
    async fn after_write(
        &self,
        scope: &Scope,
        old: Option<&Value>,
        new: Option<&Value>,
    ) -> ApiResult<()> {
        if !scope.rt.is_crd() {
            return Ok(());
        }
        match (old, new) {
            (_, Some(crd)) => self.register_crd(crd),
            (Some(crd), None) => self.unregister_crd(crd).await?,
            (None, None) => {}
        }
        Ok(())
    }

    /// Stops serving a deleted CRD's kind and deletes its objects, as Kubernetes does.
    async fn unregister_crd(&self, crd: &Value) -> ApiResult<()> {
        let Ok(rt) = ResourceType::from_crd(crd, Origin::Custom) else {
            return Ok(());
        };
        if self
            .registry
            .get(&rt.group, &rt.plural)
            .is_some_and(|e| e.origin != Origin::Custom)
        {
            return Ok(());
        }
        self.registry.remove(&rt.group, &rt.plural);
        let listed = self
            .store
            .list(&rt.key_prefix(), ListOptions::default())
            .await?;
        for kv in listed.items {
            match self.store.delete(&kv.key, 0).await {
                Ok(_) | Err(lariat_store::Error::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Keeps this server's served kinds in step with CRDs written through any server sharing
    /// the store (several replicas on one etcd), until `stop` turns true.
    pub async fn follow_crds(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        use futures::StreamExt;
        const PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";
        loop {
            let listed = match self.store.list(PREFIX, ListOptions::default()).await {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list CRDs; retrying");
                    tokio::select! { _ = stop.changed() => return, _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue }
                }
            };
            for kv in &listed.items {
                if let Ok(crd) = serde_json::from_slice::<Value>(&kv.value) {
                    self.register_crd(&crd);
                }
            }
            let Ok(mut changes) = self.store.watch(PREFIX, listed.revision).await else {
                continue;
            };
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    change = changes.next() => match change {
                        Some(Ok(change)) => {
                            let Ok(crd) = serde_json::from_slice::<Value>(&change.kv.value) else { continue };
                            match change.kind {
                                lariat_store::EventKind::Put => self.register_crd(&crd),
                                lariat_store::EventKind::Delete => {
                                    if let Ok(rt) = ResourceType::from_crd(&crd, Origin::Custom)
                                        && self.registry.get(&rt.group, &rt.plural).is_some_and(|e| e.origin == Origin::Custom) {
                                            self.registry.remove(&rt.group, &rt.plural);
                                        }
                                }
                                lariat_store::EventKind::Progress => {}
                            }
                        }
                        _ => break,
                    },
                }
            }
        }
    }

    /// Writes a CustomResourceDefinition for each kind lariat serves itself (Cluster API's,
    /// the providers', lariat's own), so `kubectl get crds` lists them as a Cluster API
    /// management cluster would. These are the server's own objects: written here, bypassing
    /// the CRD strategy (which refuses any user write to them), rewritten when a new build
    /// serves them differently, and never deletable (see [`Resources::delete`]).
    pub async fn publish_builtin_crds(&self, crds: Vec<Value>) -> ApiResult<()> {
        let scope = self
            .scope("apiextensions.k8s.io", "customresourcedefinitions", None)
            .expect("CRDs are built in");
        for mut crd in crds {
            let name = objects::name_of(&crd).to_string();
            let key = scope.key(&name);
            let existing = self.store.get(&key).await?;
            let current = existing
                .as_ref()
                .map(|kv| self.decode(&scope, kv))
                .transpose()?;
            if current.as_ref().is_some_and(|c| c["spec"] == crd["spec"]) {
                continue;
            }
            crd["apiVersion"] = json!("apiextensions.k8s.io/v1");
            crd["kind"] = json!("CustomResourceDefinition");
            let meta = meta_mut(&mut crd);
            let (uid, created) = match &current {
                Some(c) => (
                    c["metadata"]["uid"].clone(),
                    c["metadata"]["creationTimestamp"].clone(),
                ),
                None => (
                    json!(uuid::Uuid::new_v4().to_string()),
                    json!(now_rfc3339()),
                ),
            };
            meta.insert("uid".into(), uid);
            meta.insert("creationTimestamp".into(), created);
            meta.insert("generation".into(), json!(1));
            crate::strategy::accept_crd(&mut crd);
            let bytes = self.encode(&scope, &crd)?;
            let written = match existing {
                Some(kv) => self.store.update(&key, bytes, kv.mod_revision).await,
                None => self.store.create(&key, bytes).await,
            };
            match written {
                // Another replica published it meanwhile.
                Ok(_)
                | Err(lariat_store::Error::AlreadyExists(_))
                | Err(lariat_store::Error::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Whether `crd` defines a kind lariat serves itself.
    fn is_builtin_crd(&self, crd: &Value) -> bool {
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        self.registry
            .get(group, plural)
            .is_some_and(|rt| rt.origin != Origin::Custom)
    }

    /// Serves (or re-serves) a stored CRD's kind.
    pub fn register_crd(&self, crd: &Value) {
        if let Ok(rt) = ResourceType::from_crd(crd, Origin::Custom) {
            let builtin = self
                .registry
                .get(&rt.group, &rt.plural)
                .is_some_and(|e| e.origin != Origin::Custom);
            if !builtin {
                self.registry.insert(rt);
            }
        }
    }

    pub async fn delete(
        &self,
        scope: &Scope,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<(Value, bool)> {
        let key = scope.key(name);
        loop {
            let kv = self
                .store
                .get(&key)
                .await?
                .ok_or_else(|| scope.not_found(name))?;
            let mut object = self.decode(scope, &kv)?;
            if scope.rt.group == "apiextensions.k8s.io" && self.is_builtin_crd(&object) {
                return Err(ApiError::Forbidden {
                    message: format!(
                        "customresourcedefinitions.apiextensions.k8s.io \"{name}\" is forbidden: lariat serves this kind itself; deleting its definition would delete every object of it"
                    ),
                });
            }
            if let Some(uid) = &options.precondition_uid
                && object["metadata"]["uid"].as_str() != Some(uid.as_str())
            {
                return Err(ApiError::Conflict {
                    message: format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        object["metadata"]["uid"].as_str().unwrap_or_default()
                    ),
                    target: None,
                    causes: vec![],
                });
            }
            if let Some(rv) = &options.precondition_resource_version
                && rv != &kv.mod_revision.to_string()
            {
                return Err(ApiError::conflict(&scope.rt.plural, &scope.rt.group, name));
            }
            let mut finalizers = objects::finalizers(&object);
            let already_deleting = !object["metadata"]["deletionTimestamp"].is_null();
            match options.propagation {
                Some(Propagation::Foreground)
                    if !finalizers.iter().any(|f| f == FOREGROUND_FINALIZER)
                        && !already_deleting =>
                {
                    finalizers.push(FOREGROUND_FINALIZER.into())
                }
                Some(Propagation::Orphan)
                    if !finalizers.iter().any(|f| f == ORPHAN_FINALIZER) && !already_deleting =>
                {
                    finalizers.push(ORPHAN_FINALIZER.into())
                }
                _ => {}
            }
            let namespace_pending = scope.rt.origin == Origin::Core
                && scope.rt.plural == "namespaces"
                && object["spec"]["finalizers"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty());
            if options.dry_run {
                return Ok((object, finalizers.is_empty() && !namespace_pending));
            }
            if finalizers.is_empty() && !namespace_pending {
                return match self.store.delete(&key, kv.mod_revision).await {
                    Ok(_) => {
                        self.after_write(scope, Some(&object), None).await?;
                        Ok((object, true))
                    }
                    Err(lariat_store::Error::Conflict { .. }) => continue,
                    Err(lariat_store::Error::NotFound(_)) => Err(scope.not_found(name)),
                    Err(e) => Err(e.into()),
                };
            }
            if already_deleting {
                return Ok((object, false));
            }
            let meta = meta_mut(&mut object);
            meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            meta.insert("finalizers".into(), json!(finalizers));
            if namespace_pending {
                if !object["status"].is_object() {
                    object["status"] = json!({});
                }
                object["status"]["phase"] = json!("Terminating");
            }
            match self
                .store
                .update(&key, self.encode(scope, &object)?, kv.mod_revision)
                .await
            {
                Ok(kv) => return Ok((self.decode(scope, &kv)?, false)),
                Err(lariat_store::Error::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Whether a PUT of an absent object creates it ([`crate::strategy::CREATE_ON_UPDATE`]).
pub(crate) fn creates_on_update(scope: &Scope) -> bool {
    crate::strategy::CREATE_ON_UPDATE.contains(&(scope.rt.group.as_str(), scope.rt.plural.as_str()))
}

/// What a PUT body, or a patch's result, must be before anything else looks at it: an object
/// that keeps the name in the URL (Kubernetes refuses a rename rather than ignoring it).
fn check_changed_object(object: &Value, name: &str) -> ApiResult<()> {
    if !object.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object must be a JSON object, not {} {}",
            match crate::status::json_type(object) {
                "array" | "integer" => "an",
                _ => "a",
            },
            crate::status::json_type(object)
        )));
    }
    if !object["metadata"].is_null() && !object["metadata"].is_object() {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    let given = objects::name_of(object);
    if !given.is_empty() && given != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        )));
    }
    if !object["metadata"]["name"].is_null() && !object["metadata"]["name"].is_string() {
        return Err(ApiError::bad_request("metadata.name must be a string"));
    }
    Ok(())
}

/// The object just written, as a read would return it, without decoding the stored bytes again.
fn with_revision(mut object: Value, revision: i64) -> Value {
    meta_mut(&mut object).insert("resourceVersion".into(), json!(revision.to_string()));
    object
}

/// An object serialized as stored: without `metadata.resourceVersion` (the store's revision
/// is the version), written straight from the object rather than from a copy without it.
struct WithoutResourceVersion<'a>(&'a Value);

impl serde::Serialize for WithoutResourceVersion<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        /// Fields of `.0` but for `.1`.
        struct Without<'a>(&'a serde_json::Map<String, Value>, &'a str);
        impl serde::Serialize for Without<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let fields = self.0.iter().filter(|(key, _)| *key != self.1);
                let mut map = serializer.serialize_map(None)?;
                for (key, value) in fields {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
        let Some(fields) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(Some(fields.len()))?;
        for (key, value) in fields {
            match value.as_object() {
                Some(metadata) if key == "metadata" => {
                    map.serialize_entry(key, &Without(metadata, "resourceVersion"))?
                }
                _ => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

/// Whether `new` is `old` again, but for the bookkeeping a write itself adds (the times in
/// managedFields, the resourceVersion). Who manages which fields is not bookkeeping.
fn unchanged(old: &Value, new: &Value) -> bool {
    same_but(old, new, &[], &|key, old, new| match key {
        "metadata" => same_but(old, new, &["resourceVersion"], &|key, old, new| match (
            key,
            old.as_array(),
            new.as_array(),
        ) {
            ("managedFields", Some(old), Some(new)) => {
                old.len() == new.len()
                    && old
                        .iter()
                        .zip(new)
                        .all(|(old, new)| same_but(old, new, &["time"], &|_, a, b| a == b))
            }
            _ => old == new,
        }),
        _ => old == new,
    })
}

/// Whether two JSON values are equal but for the top-level keys `ignored`, each kept key's
/// values compared by `same`; values that are not objects compare whole. Compared in place:
/// cloning both objects to take the ignored keys out was a tenth of every write.
fn same_but(
    old: &Value,
    new: &Value,
    ignored: &[&str],
    same: &dyn Fn(&str, &Value, &Value) -> bool,
) -> bool {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return old == new;
    };
    let kept = |map: &'_ serde_json::Map<String, Value>| {
        map.iter()
            .filter(|(key, _)| !ignored.contains(&key.as_str()))
            .count()
    };
    kept(old) == kept(new)
        && old
            .iter()
            .filter(|(key, _)| !ignored.contains(&key.as_str()))
            .all(|(key, value)| new.get(key).is_some_and(|other| same(key, value, other)))
}

/// An object marked for deletion whose finalizers are all gone is deleted by the write that
/// removed the last one.
fn deletion_complete(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
        && objects::finalizers(object).is_empty()
        && !(object["kind"] == "Namespace"
            && object["spec"]["finalizers"]
                .as_array()
                .is_some_and(|a| !a.is_empty()))
}

/// Everything but metadata and status counts as the spec for `generation`.
fn spec_changed(old: &Value, new: &Value) -> bool {
    !same_but(
        old,
        new,
        &["metadata", "status", "apiVersion", "kind"],
        &|_, a, b| a == b,
    )
}

fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn encode_continue(revision: i64, start_after: &str) -> String {
    let raw = json!({"rv": revision, "start": start_after}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// Whether a stored object's labels may match `selector`, read without building the whole
/// object: a LIST by label of 1,300 Machines used to decode every one of them, and the
/// controllers' LISTs by label were most of an idle fleet's CPU. What this cannot read
/// (encrypted values, labels that are not strings) is left to the full decode and check.
fn labels_may_match(selector: &crate::objects::Selector, kv: &KeyValue) -> bool {
    #[derive(serde::Deserialize)]
    struct Stored {
        #[serde(default)]
        metadata: Metadata,
    }
    #[derive(serde::Deserialize, Default)]
    struct Metadata {
        #[serde(default)]
        labels: Option<std::collections::BTreeMap<String, String>>,
    }
    if selector.is_empty() {
        return true;
    }
    match serde_json::from_slice::<Stored>(&kv.value) {
        Ok(stored) => {
            let labels = stored.metadata.labels.unwrap_or_default();
            selector.matches(&|key| labels.get(key).cloned())
        }
        Err(_) => true,
    }
}

fn decode_continue(token: &str) -> ApiResult<(i64, Option<String>)> {
    let bad = || {
        ApiError::bad_request(
            "invalid continue token: start a new list without the continue parameter",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let revision = value["rv"].as_i64().ok_or_else(bad)?;
    let start = value["start"].as_str().ok_or_else(bad)?;
    Ok((revision, Some(start.to_string())))
}

/// What one page of a list reads from the store at most, and what one response of a paged
/// list holds before it ends with `continue`: 4 MiB of stored objects (and one more object).
/// Fixed.
pub const LIST_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// The store page a streamed list reads next.
fn stream_page(start_after: Option<String>, revision: i64) -> ListOptions {
    ListOptions {
        start_after,
        limit: 1000,
        revision,
        max_bytes: LIST_PAGE_BYTES,
    }
}

/// A store page a streamed list hands out, with its share of the response budget.
struct StreamedPage {
    items: std::vec::IntoIter<KeyValue>,
    /// Where the next page starts; `None` when this is the last.
    last_key: Option<String>,
    _permit: Permit,
}

impl StreamedPage {
    fn new(page: lariat_store::ListResult, mut permit: Permit) -> Self {
        let bytes: usize = page.items.iter().map(|kv| kv.value.len()).sum();
        // Only what the page holds stays taken.
        permit.keep(bytes);
        StreamedPage {
            last_key: page
                .more
                .then(|| page.items.last().map(|kv| kv.key.clone()))
                .flatten(),
            items: page.items.into_iter(),
            _permit: permit,
        }
    }
}

/// A written body checked and placed: a JSON object of this kind and version, in the request's
/// namespace (or none, for a cluster-scoped kind).
fn envelope(scope: &Scope, body: Value) -> ApiResult<Value> {
    let rt = &scope.rt;
    let mut object = body;
    if !object.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body of a {} must be a JSON object",
            rt.kind
        )));
    }
    let api_version = scope.api_version();
    if let Some(given) = object.get("apiVersion").and_then(Value::as_str)
        && given != api_version
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({given}) does not match the expected API version ({api_version})"
        )));
    }
    if let Some(given) = object.get("kind").and_then(Value::as_str)
        && given != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({given}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    if !object["metadata"].is_null() && !object["metadata"].is_object() {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(rt.kind);
    let meta = meta_mut(&mut object);
    match (
        rt.namespaced,
        &scope.namespace,
        meta.get("namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty()),
    ) {
        (true, Some(ns), Some(given)) if given != ns => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (true, Some(ns), _) => {
            meta.insert("namespace".into(), json!(ns));
        }
        (true, None, _) => {
            return Err(ApiError::bad_request(
                "a namespace is required for this resource",
            ));
        }
        (false, _, _) => {
            meta.remove("namespace");
        }
    }
    Ok(object)
}

/// A new object's metadata: its name (generated from `generateName` if asked), uid, creation
/// time and first generation; what only the server sets is dropped. Returns what is wrong
/// with its name.
fn new_metadata(rt: &ResourceType, object: &mut Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let meta = meta_mut(object);
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if name.is_empty()
        && let Some(prefix) = meta.get("generateName").and_then(Value::as_str)
    {
        let generated = format!("{prefix}{}", random_suffix());
        meta.insert("name".into(), json!(generated));
    }
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if rt.group == crate::rbac::GROUP {
        causes.extend(objects::path_segment_name_causes(&name));
    } else {
        causes.extend(objects::name_causes(&name, rt.plural == "namespaces"));
    }
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
    meta.insert("generation".into(), json!(1));
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.remove("resourceVersion");
    if rt.storage_version().status_subresource && rt.origin != Origin::Core {
        object.as_object_mut().expect("object").remove("status");
    }
    causes
}

/// An updated object's metadata: what the server set stays as it was (name, uid, creation
/// and deletion times, generation, which moves when the spec changed), no finalizer is added
/// to an object being deleted, and the status (or all but the status) comes from the old
/// object, as the subresource written says.
fn carried_metadata(
    rt: &ResourceType,
    object: &mut Value,
    old: &Value,
    subresource: Option<&str>,
) -> ApiResult<()> {
    let meta = meta_mut(object);
    if let Some(uid) = meta.get("uid").and_then(Value::as_str)
        && uid != old["metadata"]["uid"].as_str().unwrap_or_default()
    {
        return Err(ApiError::Conflict {
            message: format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old["metadata"]["uid"].as_str().unwrap_or_default()
            ),
            target: None,
            causes: vec![],
        });
    }
    for field in [
        "name",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old["metadata"].get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    if !old["metadata"]["deletionTimestamp"].is_null() {
        let before = objects::finalizers(old);
        let after: Vec<String> = meta
            .get("finalizers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if after.iter().any(|f| !before.contains(f)) {
            return Err(ApiError::Forbidden {
                message: "no new finalizers can be added if the object is being deleted".into(),
            });
        }
    }
    let has_status_subresource = rt.storage_version().status_subresource;
    match subresource {
        Some("status") => {
            // Everything but the status is the old object's, the resourceVersion the
            // request's: what already equals it is kept rather than the whole object cloned
            // (a status patch is applied to the current object, so only its status differs).
            let rv = object["metadata"]["resourceVersion"].clone();
            take_all_but_status(object, old);
            meta_mut(object).insert("resourceVersion".into(), rv);
            return Ok(());
        }
        None if has_status_subresource => match old.get("status") {
            Some(status) => object["status"] = status.clone(),
            None => {
                object.as_object_mut().expect("object").remove("status");
            }
        },
        _ => {}
    }
    if spec_changed(old, object) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        meta_mut(object).insert("generation".into(), json!(generation));
    }
    Ok(())
}

/// Makes `object` the `old` object but for its status, copying only what differs.
fn take_all_but_status(object: &mut Value, old: &Value) {
    let (Some(fields), Some(old)) = (object.as_object_mut(), old.as_object()) else {
        *object = old.clone();
        return;
    };
    fields.retain(|key, _| key == "status" || old.contains_key(key));
    for (key, value) in old.iter().filter(|(key, _)| *key != "status") {
        match fields.get_mut(key) {
            Some(current) if key == "metadata" => {
                let same = same_but(current, value, &["resourceVersion"], &|_, a, b| a == b);
                if !same {
                    *current = value.clone();
                }
            }
            Some(current) if current == value => {}
            Some(current) => *current = value.clone(),
            None => {
                fields.insert(key.clone(), value.clone());
            }
        }
    }
}

/// What is wrong with an object's labels, annotations, owner references and finalizers.
fn metadata_causes(metadata: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    causes.extend(objects::label_causes(
        &metadata["labels"],
        "metadata.labels",
    ));
    if !metadata["annotations"].is_null() {
        let ok = metadata["annotations"]
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string));
        if !ok {
            causes.push(Cause::invalid(
                "metadata.annotations",
                &metadata["annotations"],
                "must be a map of strings",
            ));
        } else if metadata["annotations"].to_string().len() > 256 * 1024 {
            causes.push(Cause::invalid(
                "metadata.annotations",
                &json!("..."),
                "may not be more than 262144 bytes",
            ));
        }
    }
    causes.extend(objects::owner_reference_causes(
        &metadata["ownerReferences"],
    ));
    let finalizers = &metadata["finalizers"];
    if !finalizers.is_null()
        && !finalizers
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string))
    {
        causes.push(Cause::type_invalid(
            "metadata.finalizers",
            finalizers,
            "array of strings",
        ));
    }
    causes
}

/// The object checked, pruned and defaulted by its version's schema, what is wrong added to
/// `causes`; unknown fields are refused, warned of or ignored as `validation` says.
fn schema_findings(
    scope: &Scope,
    object: &mut Value,
    validation: FieldValidation,
    causes: &mut Vec<Cause>,
) -> ApiResult<Vec<String>> {
    let rt = &scope.rt;
    let mut warnings = vec![];
    let version = rt
        .version(&scope.version)
        .expect("scope has a served version");
    if let Some(schema) = &version.schema {
        let findings = schema::process(schema, object);
        causes.extend(findings.causes);
        if !findings.unknown.is_empty() {
            match validation {
                FieldValidation::Strict => {
                    let listed: Vec<String> = findings
                        .unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "strict decoding error: {}",
                        listed.join(", ")
                    )));
                }
                FieldValidation::Warn => {
                    warnings.extend(
                        findings
                            .unknown
                            .iter()
                            .map(|f| format!("unknown field \"{f}\"")),
                    );
                }
                FieldValidation::Ignore => {}
            }
        }
    }
    Ok(warnings)
}

/// What validators read other objects through: the store as it is now.
#[async_trait::async_trait]
impl crate::strategy::Reader for Resources {
    async fn get(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Option<Value>> {
        let Some(scope) = self.scope(group, plural, namespace) else {
            return Ok(None);
        };
        if name.is_empty() {
            return Ok(None);
        }
        match Resources::get(self, &scope, name).await {
            Ok(object) => Ok(Some(object)),
            Err(ApiError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod label_prefilter_tests {
    use super::labels_may_match;
    use crate::objects::Selector;
    use lariat_store::KeyValue;

    fn stored(value: &[u8]) -> KeyValue {
        KeyValue {
            key: "k".into(),
            value: value.to_vec(),
            create_revision: 1,
            mod_revision: 1,
        }
    }

    #[test]
    fn labels_are_read_without_the_whole_object() {
        let selector = Selector::parse_labels("example.com/cluster-name=a,!gone").unwrap();
        let object = |labels: &str| {
            stored(
                format!(
                    r#"{{"spec":{{"big":[1,2,3]}},"metadata":{{"name":"m","labels":{labels}}}}}"#
                )
                .as_bytes(),
            )
        };
        assert!(labels_may_match(
            &selector,
            &object(r#"{"example.com/cluster-name":"a"}"#)
        ));
        assert!(!labels_may_match(
            &selector,
            &object(r#"{"example.com/cluster-name":"b"}"#)
        ));
        assert!(!labels_may_match(
            &selector,
            &object(r#"{"example.com/cluster-name":"a","gone":"x"}"#)
        ));
        assert!(!labels_may_match(&selector, &object("null")));
        assert!(!labels_may_match(
            &selector,
            &stored(br#"{"metadata":{"name":"m"}}"#)
        ));
        // What it cannot read is left to the full decode: encrypted bytes, odd label values.
        assert!(labels_may_match(
            &selector,
            &stored(b"k8s:enc:aescbc:v1:...")
        ));
        assert!(labels_may_match(
            &selector,
            &object(r#"{"example.com/cluster-name":1}"#)
        ));
        assert!(labels_may_match(
            &Selector::parse_labels("").unwrap(),
            &stored(b"not json")
        ));
    }
}

#[cfg(test)]
mod comparison_tests {
    use super::{WithoutResourceVersion, spec_changed, take_all_but_status, unchanged};
    use serde_json::{Value, json};

    fn object() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "7", "labels": {"x": "1"},
                "managedFields": [{"manager": "m", "time": "2026-01-01T00:00:00Z", "fieldsV1": {}}]},
            "data": {"k": "v"},
            "status": {"ready": true}
        })
    }

    #[test]
    fn a_write_is_unchanged_but_for_its_bookkeeping() {
        let old = object();
        let mut new = object();
        new["metadata"]["resourceVersion"] = json!("8");
        new["metadata"]["managedFields"][0]["time"] = json!("2026-02-02T00:00:00Z");
        assert!(unchanged(&old, &new));
        for change in [
            json!({"metadata": {"labels": {"x": "2"}}}),
            json!({"metadata": {"managedFields": [{"manager": "n", "time": "t", "fieldsV1": {}}]}}),
            json!({"data": {"k": "w"}}),
            json!({"status": null}),
        ] {
            let mut changed = new.clone();
            json_patch::merge(&mut changed, &change);
            assert!(!unchanged(&old, &changed), "{change}");
        }
        let mut extra = new.clone();
        extra["spec"] = json!({});
        assert!(!unchanged(&old, &extra));
    }

    #[test]
    fn only_what_is_not_metadata_or_status_is_the_spec() {
        let old = object();
        let mut new = object();
        new["metadata"]["labels"] = json!({"y": "2"});
        new["status"] = json!({"ready": false});
        new["apiVersion"] = json!("v2");
        assert!(!spec_changed(&old, &new));
        new["data"]["k"] = json!("w");
        assert!(spec_changed(&old, &new));
        let mut removed = object();
        removed.as_object_mut().unwrap().remove("data");
        assert!(spec_changed(&old, &removed));
    }

    #[test]
    fn a_status_write_keeps_all_but_the_status_of_the_old_object() {
        let old = object();
        let mut written = json!({"metadata": {"name": "other"}, "data": {"k": "changed"},
            "extra": 1, "status": {"ready": false}});
        take_all_but_status(&mut written, &old);
        let mut expected = old.clone();
        expected["status"] = json!({"ready": false});
        assert_eq!(written, expected);
        let mut cleared = object();
        cleared.as_object_mut().unwrap().remove("status");
        take_all_but_status(&mut cleared, &old);
        assert!(cleared.get("status").is_none());
    }

    #[test]
    fn the_stored_form_has_no_resource_version() {
        let stored = serde_json::to_value(WithoutResourceVersion(&object())).unwrap();
        let mut expected = object();
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert_eq!(stored, expected);
    }
}
