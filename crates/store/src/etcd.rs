//! The etcd backend: lariat's keys under one prefix of a (possibly shared) etcd v3 cluster.
//!
//! It speaks etcd's gRPC API through client code generated from `proto/etcd.proto` and checked
//! in as `etcd/pb.rs`, so that building lariat needs no `protoc` (`codegen/` regenerates it).
//! Every lariat key `k` is stored as `prefix + k`, so several lariat servers (or tests) can
//! share one etcd. Revisions are etcd's own, global to the whole etcd, which is what lets
//! replicas of the API server agree on resource versions. Endpoints are `http://`, or `https://`
//! with [`EtcdTls`] (rustls on ring, as everywhere in lariat).

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::{
    Error, Event, EventKind, KeyValue, ListOptions, ListResult, Page, Result, Revision, Store,
    WatchStream, prefix_end, range_start,
};

#[allow(clippy::all, clippy::pedantic, missing_docs)]
#[rustfmt::skip]
mod pb;

use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::kv_client::KvClient;
use pb::watch_client::WatchClient;
use pb::{request_op, response_op, watch_request};

/// How long a unary request may take before the store reports etcd as unavailable.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The largest gRPC response accepted from etcd.
const MAX_MESSAGE_BYTES: usize = 512 * 1024 * 1024;

/// What lariat needs to reach etcd over TLS (PEM), as k3s's `--datastore-cafile`,
/// `--datastore-certfile` and `--datastore-keyfile`.
#[derive(Clone)]
pub struct EtcdTls {
    pub ca: Vec<u8>,
    /// Certificate and key for etcd's `--client-cert-auth`.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl EtcdTls {
    fn client_config(&self) -> tonic::transport::ClientTlsConfig {
        let config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca));
        match &self.client {
            Some((cert, key)) => config.identity(tonic::transport::Identity::from_pem(cert, key)),
            None => config,
        }
    }
}

/// How often each endpoint's health is checked, and how long a check may take.
const HEALTH_INTERVAL: Duration = Duration::from_secs(1);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// A [`Store`] on etcd; cheap to clone (clones share one HTTP/2 connection per endpoint).
///
/// Requests are balanced over the members that pass a health check, a linearizable read made
/// every second through each member's own connection: a member that is down, or cut off from
/// its quorum, takes no requests until it passes again. With no member healthy, requests wait
/// for one until they time out as `Error::Unavailable`.
#[derive(Clone)]
pub struct EtcdStore {
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
    prefix: String,
    /// Stops the health checks when the last clone is dropped.
    _health: std::sync::Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether the member behind `channel` serves a linearizable read (it has a quorum).
async fn member_healthy(channel: &Channel, key: &[u8]) -> bool {
    member_check(channel, key).await.is_ok()
}

/// The member's answer to a linearizable read, or why there was none.
async fn member_check(channel: &Channel, key: &[u8]) -> std::result::Result<(), String> {
    let mut kv = KvClient::new(channel.clone());
    let probe = kv.range(pb::RangeRequest {
        key: key.to_vec(),
        limit: 1,
        count_only: true,
        ..Default::default()
    });
    match tokio::time::timeout(HEALTH_TIMEOUT, probe).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => {
            // tonic puts the cause (refused connection, unknown certificate authority) in
            // the error's sources.
            let mut why = status.message().to_string();
            let mut source = std::error::Error::source(&status);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !why.contains(&cause_text) {
                    why = format!("{why}: {cause_text}");
                }
                source = cause.source();
            }
            Err(why)
        }
        Err(_) => Err(format!("no answer within {HEALTH_TIMEOUT:?}")),
    }
}

/// Keeps the healthy members in the balancer, checking each every [`HEALTH_INTERVAL`].
async fn follow_health(
    members: Vec<(Endpoint, Channel)>,
    mut healthy: Vec<bool>,
    changes: mpsc::Sender<tonic::transport::channel::Change<usize, Endpoint>>,
    key: Vec<u8>,
) {
    use tonic::transport::channel::Change;
    loop {
        tokio::time::sleep(HEALTH_INTERVAL).await;
        let checks = members
            .iter()
            .map(|(_, channel)| member_healthy(channel, &key));
        let now = futures::future::join_all(checks).await;
        for (i, (was, is)) in healthy.iter_mut().zip(now).enumerate() {
            if *was == is {
                continue;
            }
            *was = is;
            let change = if is {
                tracing::info!(endpoint = %members[i].0.uri(), "etcd member healthy again");
                Change::Insert(i, members[i].0.clone())
            } else {
                tracing::warn!(endpoint = %members[i].0.uri(), "etcd member unhealthy: no requests go to it");
                Change::Remove(i)
            };
            if changes.send(change).await.is_err() {
                return;
            }
        }
    }
}

impl EtcdStore {
    /// Connects to `endpoints` (`http://host:port`, or `host:port`) and checks that etcd
    /// answers; lariat's keys live under `prefix` (for example `/lariat/`).
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<EtcdStore> {
        EtcdStore::connect_with(endpoints, prefix, None).await
    }

    /// As [`EtcdStore::connect`], over TLS when `tls` is given (`https://` endpoints): the CA
    /// etcd's certificate is checked against and, for etcd's `--client-cert-auth`, the client
    /// certificate and key lariat presents.
    pub async fn connect_with(
        endpoints: &[String],
        prefix: &str,
        tls: Option<&EtcdTls>,
    ) -> Result<EtcdStore> {
        if endpoints.is_empty() {
            return Err(Error::Unavailable("no etcd endpoint given".into()));
        }
        let endpoints = endpoints
            .iter()
            .map(|endpoint| {
                let uri = if endpoint.contains("://") {
                    endpoint.clone()
                } else if tls.is_some() {
                    format!("https://{endpoint}")
                } else {
                    format!("http://{endpoint}")
                };
                let bad = |e: &dyn std::fmt::Display| {
                    Error::Unavailable(format!("bad etcd endpoint {endpoint}: {e}"))
                };
                if uri.starts_with("https://") != tls.is_some() {
                    return Err(bad(&if tls.is_some() {
                        "TLS files were given, so the endpoint must be https://"
                    } else {
                        "an https:// endpoint needs --datastore-cafile (the CA etcd's certificate is signed by)"
                    }));
                }
                let mut endpoint = Endpoint::from_shared(uri)
                    .map_err(|e| bad(&e))?
                    .connect_timeout(Duration::from_secs(5))
                    .tcp_nodelay(true)
                    // Keepalives notice a dead etcd even when a watch is quiet. etcd
                    // rejects pings more often than every 5 s.
                    .http2_keep_alive_interval(Duration::from_secs(10))
                    .keep_alive_timeout(Duration::from_secs(5))
                    .keep_alive_while_idle(true);
                if let Some(tls) = tls {
                    endpoint = endpoint.tls_config(tls.client_config()).map_err(|e| bad(&e))?;
                }
                Ok(endpoint)
            })
            .collect::<Result<Vec<_>>>()?;
        // The key `current_revision` reads: none of lariat's keys (those start `/registry/`).
        let probe_key = format!("{prefix}/health").into_bytes();
        let members: Vec<(Endpoint, Channel)> = endpoints
            .into_iter()
            .map(|endpoint| {
                let channel = endpoint.connect_lazy();
                (endpoint, channel)
            })
            .collect();
        let checks = futures::future::join_all(
            members
                .iter()
                .map(|(_, channel)| member_check(channel, &probe_key)),
        )
        .await;
        let healthy: Vec<bool> = checks.iter().map(std::result::Result::is_ok).collect();
        if !healthy.iter().any(|h| *h) {
            let first = checks.into_iter().find_map(std::result::Result::err);
            return Err(Error::Unavailable(format!(
                "no etcd member answered a linearizable read ({}): is etcd running, with a quorum, and are the TLS files right?",
                first.unwrap_or_default()
            )));
        }
        let (channel, changes) = Channel::balance_channel(members.len());
        for (i, (endpoint, _)) in members.iter().enumerate() {
            if healthy[i] {
                let _ = changes
                    .send(tonic::transport::channel::Change::Insert(
                        i,
                        endpoint.clone(),
                    ))
                    .await;
            }
        }
        let health = tokio::spawn(follow_health(members, healthy, changes, probe_key));
        let store = EtcdStore {
            // Lists of many objects exceed tonic's 4 MiB default; etcd's own limit applies per request.
            kv: KvClient::new(channel.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES),
            watch: WatchClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES),
            prefix: prefix.to_owned(),
            _health: std::sync::Arc::new(AbortOnDrop(health)),
        };
        store.current_revision().await?;
        Ok(store)
    }

    fn full_key(&self, key: &str) -> Vec<u8> {
        format!("{}{key}", self.prefix).into_bytes()
    }

    fn kv(&self, kv: pb::KeyValue) -> Result<KeyValue> {
        let key = kv
            .key
            .strip_prefix(self.prefix.as_bytes())
            .ok_or_else(|| Error::Internal("etcd returned a key outside the prefix".into()))?;
        Ok(KeyValue {
            key: String::from_utf8(key.to_vec())
                .map_err(|e| Error::Internal(format!("etcd returned a non-UTF-8 key: {e}")))?,
            value: kv.value,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
        })
    }

    fn event(&self, event: pb::Event) -> Result<Event> {
        let kv = event
            .kv
            .ok_or_else(|| Error::Internal("etcd sent an event without a key".into()))?;
        // etcd leaves out the previous value of a create, and of anything compacted.
        let first_version = kv.version == 1;
        let prev = event.prev_kv.map(|prev| self.kv(prev)).transpose()?;
        let revision = kv.mod_revision;
        let mut kv = self.kv(kv)?;
        if event.r#type == pb::event::EventType::Delete as i32 {
            // etcd's delete event carries only the key; the contract wants the last value.
            if let Some(prev) = &prev {
                kv = KeyValue {
                    mod_revision: revision,
                    ..prev.clone()
                };
            }
            return Ok(Event {
                kind: EventKind::Delete,
                kv,
                prev,
            });
        }
        Ok(Event {
            kind: EventKind::Put,
            kv,
            prev: if first_version { None } else { prev },
        })
    }

    async fn range(&self, request: pb::RangeRequest) -> Result<pb::RangeResponse> {
        let requested = request.revision;
        // A read may be sent again whatever became of it: another member answers.
        let result = retried(
            |_| true,
            || {
                let mut kv = self.kv.clone();
                let request = request.clone();
                async move { kv.range(request).await }
            },
        )
        .await;
        match result {
            Err(Failure::Compacted) => Err(self.compacted(requested).await),
            other => other.map_err(Failure::into_error),
        }
    }

    async fn txn(&self, request: pb::TxnRequest) -> Result<pb::TxnResponse> {
        // A write is sent again only when it never left (no connection to the member): one
        // lost in flight may have been applied, and is reported unavailable instead.
        retried(
            |message| message.contains("connect"),
            || {
                let mut kv = self.kv.clone();
                let request = request.clone();
                async move { kv.txn(request).await }
            },
        )
        .await
        .map_err(Failure::into_error)
    }

    /// The `Error::Compacted` for a request at `requested`. etcd's error does not say where the
    /// history starts, but a watch from revision 1 is told, at the cost of one more request.
    async fn compacted(&self, requested: Revision) -> Error {
        let compacted = tokio::time::timeout(Duration::from_secs(5), async {
            let (mut stream, _requests) = self
                .open_watch(&range_key(self.prefix.as_bytes()), &[], 1)
                .await?;
            while let Some(response) = stream.next().await {
                let response = response.map_err(|status| Failure::from(status).into_error())?;
                if response.compact_revision != 0 {
                    return Ok(response.compact_revision);
                }
            }
            Ok::<_, Error>(0)
        })
        .await;
        Error::Compacted {
            requested,
            compacted: compacted.ok().and_then(Result::ok).unwrap_or(0),
        }
    }

    /// Opens a watch stream with one watcher; the returned sender must outlive the stream, as
    /// closing the request side ends the watch.
    async fn open_watch(
        &self,
        key: &[u8],
        range_end: &[u8],
        start_revision: Revision,
    ) -> Result<(
        tonic::codec::Streaming<pb::WatchResponse>,
        mpsc::Sender<pb::WatchRequest>,
    )> {
        let (requests, outgoing) = mpsc::channel(1);
        let create = pb::WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    key: key.to_vec(),
                    range_end: range_end.to_vec(),
                    start_revision,
                    prev_kv: true,
                    ..Default::default()
                },
            )),
        };
        requests
            .send(create)
            .await
            .map_err(|_| Error::Internal("the watch request channel closed".into()))?;
        let mut client = self.watch.clone();
        let mut stream = unary(client.watch(ReceiverStream::new(outgoing)))
            .await
            .map_err(Failure::into_error)?;
        let created = tokio::time::timeout(REQUEST_TIMEOUT, stream.message())
            .await
            .map_err(|_| Error::Unavailable("etcd did not confirm the watch".into()))?
            .map_err(|status| Failure::from(status).into_error())?
            .ok_or_else(|| Error::Unavailable("etcd closed the watch stream".into()))?;
        if !created.created || created.canceled {
            return Err(Error::Internal(format!(
                "etcd refused the watch: {}",
                created.cancel_reason
            )));
        }
        Ok((stream, requests))
    }
}

/// Why a request failed, before it becomes an [`Error`].
enum Failure {
    Compacted,
    Future(String),
    Unavailable(String),
    Other(String),
}

impl From<tonic::Status> for Failure {
    fn from(status: tonic::Status) -> Failure {
        use tonic::Code;
        let message = status.message();
        if message.contains("required revision has been compacted") {
            return Failure::Compacted;
        }
        if message.contains("required revision is a future revision") {
            return Failure::Future(message.to_owned());
        }
        match status.code() {
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Aborted
            | Code::ResourceExhausted => Failure::Unavailable(message.to_owned()),
            // tonic reports a connection that cannot be made, or one lost mid-stream, as
            // `Unknown`; etcd itself uses that code only for errors it has no code for.
            Code::Unknown
                if [
                    "not ready",
                    "transport",
                    "connection",
                    "body",
                    "broken pipe",
                    "reset",
                ]
                .iter()
                .any(|hint| message.contains(hint)) =>
            {
                Failure::Unavailable(message.to_owned())
            }
            code => Failure::Other(format!("{message} ({code:?})")),
        }
    }
}

impl Failure {
    fn into_error(self) -> Error {
        match self {
            Failure::Compacted => Error::Compacted {
                requested: 0,
                compacted: 0,
            },
            Failure::Future(message) | Failure::Other(message) => {
                Error::Internal(format!("etcd: {message}"))
            }
            Failure::Unavailable(message) => Error::Unavailable(format!("etcd: {message}")),
        }
    }
}

/// Sends a request made by `call`, again (after a short pause, while the health checks move
/// requests off a member that went away) as long as it fails unavailable in a way `again`
/// accepts, for at most [`REQUEST_TIMEOUT`] in all.
async fn retried<T, F>(
    again: impl Fn(&str) -> bool,
    mut call: impl FnMut() -> F,
) -> Result<T, Failure>
where
    F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
    let mut pause = Duration::from_millis(100);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match answer(tokio::time::timeout(left, call()).await) {
            Err(Failure::Unavailable(message))
                if again(&message) && tokio::time::Instant::now() + pause < deadline =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

async fn unary<T>(
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, Failure> {
    answer(tokio::time::timeout(REQUEST_TIMEOUT, call).await)
}

/// A request's outcome once its time is up or it answered.
fn answer<T>(
    outcome: Result<Result<tonic::Response<T>, tonic::Status>, tokio::time::error::Elapsed>,
) -> Result<T, Failure> {
    match outcome {
        Err(_) => Err(Failure::Unavailable(format!(
            "no answer within {REQUEST_TIMEOUT:?}"
        ))),
        Ok(Err(status)) => Err(status.into()),
        Ok(Ok(response)) => Ok(response.into_inner()),
    }
}

fn compare(
    key: &[u8],
    target: CompareTarget,
    result: CompareResult,
    value: TargetUnion,
) -> pb::Compare {
    pb::Compare {
        result: result as i32,
        target: target as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(value),
    }
}

/// The key exists (it has a creation revision).
fn exists(key: &[u8]) -> pb::Compare {
    compare(
        key,
        CompareTarget::Create,
        CompareResult::Greater,
        TargetUnion::CreateRevision(0),
    )
}

/// etcd refuses an empty key; as the start of a range, `"\0"` (below every real key) stands
/// for it.
fn range_key(key: &[u8]) -> Vec<u8> {
    if key.is_empty() {
        vec![0]
    } else {
        key.to_vec()
    }
}

fn get_op(key: &[u8]) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(request_op::Request::RequestRange(pb::RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        })),
    }
}

fn header_revision(header: Option<&pb::ResponseHeader>) -> Result<Revision> {
    header
        .map(|header| header.revision)
        .ok_or_else(|| Error::Internal("etcd sent a response without a header".into()))
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let response = self
            .range(pb::RangeRequest {
                key: self.full_key(key),
                ..Default::default()
            })
            .await?;
        response
            .kvs
            .into_iter()
            .next()
            .map(|kv| self.kv(kv))
            .transpose()
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListResult> {
        let prefix = self.full_key(prefix);
        let start_after = options.start_after.as_deref().map(|key| self.full_key(key));
        let response = self
            .range(pb::RangeRequest {
                key: range_key(&range_start(&prefix, start_after.as_deref())),
                range_end: prefix_end(&prefix),
                limit: i64::try_from(options.limit).unwrap_or(i64::MAX),
                revision: options.revision,
                ..Default::default()
            })
            .await
            .map_err(|e| match e {
                Error::Compacted { compacted, .. } => Error::Compacted {
                    requested: options.revision,
                    compacted,
                },
                e => e,
            })?;
        let revision = match options.revision {
            0 => header_revision(response.header.as_ref())?,
            revision => revision,
        };
        // etcd's range has no byte limit: the page is cut here, so what the caller holds
        // beyond this call is bounded all the same.
        let mut page = Page::new(&options);
        for kv in response.kvs {
            if !page.has_room() {
                break;
            }
            page.push(self.kv(kv)?);
        }
        let mut listed = page.finish(revision);
        listed.more |= response.more;
        Ok(listed)
    }

    async fn count(&self, prefix: &str) -> Result<i64> {
        let prefix = self.full_key(prefix);
        let response = self
            .range(pb::RangeRequest {
                range_end: prefix_end(&prefix),
                key: range_key(&prefix),
                count_only: true,
                ..Default::default()
            })
            .await?;
        Ok(response.count)
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<KeyValue> {
        let full = self.full_key(key);
        let response = self
            .txn(pb::TxnRequest {
                compare: vec![compare(
                    &full,
                    CompareTarget::Create,
                    CompareResult::Equal,
                    TargetUnion::CreateRevision(0),
                )],
                success: vec![pb::RequestOp {
                    request: Some(request_op::Request::RequestPut(pb::PutRequest {
                        key: full,
                        value: value.clone(),
                        ..Default::default()
                    })),
                }],
                failure: Vec::new(),
            })
            .await?;
        if !response.succeeded {
            return Err(Error::AlreadyExists(key.to_owned()));
        }
        let revision = header_revision(response.header.as_ref())?;
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: revision,
            mod_revision: revision,
        })
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected: Revision) -> Result<KeyValue> {
        let full = self.full_key(key);
        let response = self
            .txn(pb::TxnRequest {
                // Without the existence test, `expected == 0` would match a missing key and
                // the put would create it.
                compare: vec![
                    exists(&full),
                    compare(
                        &full,
                        CompareTarget::Mod,
                        CompareResult::Equal,
                        TargetUnion::ModRevision(expected),
                    ),
                ],
                success: vec![pb::RequestOp {
                    request: Some(request_op::Request::RequestPut(pb::PutRequest {
                        key: full.clone(),
                        value: value.clone(),
                        prev_kv: true,
                        ..Default::default()
                    })),
                }],
                failure: vec![get_op(&full)],
            })
            .await?;
        if !response.succeeded {
            return Err(self.refused(key, expected, response)?);
        }
        let revision = header_revision(response.header.as_ref())?;
        let create_revision = match response.responses.into_iter().next() {
            Some(pb::ResponseOp {
                response: Some(response_op::Response::ResponsePut(put)),
            }) => put.prev_kv.map(|prev| prev.create_revision),
            _ => None,
        }
        .ok_or_else(|| Error::Internal("etcd did not return the updated key".into()))?;
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision,
            mod_revision: revision,
        })
    }

    async fn delete(&self, key: &str, expected: Revision) -> Result<KeyValue> {
        let full = self.full_key(key);
        let mut conditions = vec![exists(&full)];
        if expected != 0 {
            conditions.push(compare(
                &full,
                CompareTarget::Mod,
                CompareResult::Equal,
                TargetUnion::ModRevision(expected),
            ));
        }
        let response = self
            .txn(pb::TxnRequest {
                compare: conditions,
                success: vec![pb::RequestOp {
                    request: Some(request_op::Request::RequestDeleteRange(
                        pb::DeleteRangeRequest {
                            key: full.clone(),
                            prev_kv: true,
                            ..Default::default()
                        },
                    )),
                }],
                failure: vec![get_op(&full)],
            })
            .await?;
        if !response.succeeded {
            return Err(self.refused(key, expected, response)?);
        }
        let revision = header_revision(response.header.as_ref())?;
        let prev = match response.responses.into_iter().next() {
            Some(pb::ResponseOp {
                response: Some(response_op::Response::ResponseDeleteRange(deleted)),
            }) => deleted.prev_kvs.into_iter().next(),
            _ => None,
        }
        .ok_or_else(|| Error::Internal("etcd did not return the deleted key".into()))?;
        Ok(KeyValue {
            mod_revision: revision,
            ..self.kv(prev)?
        })
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let prefix = self.full_key(prefix);
        // etcd would accept a watch from `after + 1` when only `after` itself is compacted;
        // reading at `after` first makes etcd refuse exactly what the SQLite store refuses
        // (anything below the compaction point), and refuse it from this call.
        let check = self
            .range(pb::RangeRequest {
                key: range_key(&prefix),
                range_end: prefix_end(&prefix),
                revision: after.max(1),
                count_only: true,
                ..Default::default()
            })
            .await;
        match check {
            Err(Error::Compacted { compacted, .. }) => {
                return Err(Error::Compacted {
                    requested: after,
                    compacted,
                });
            }
            // A future `after` is fine: the watch waits for it.
            Err(Error::Internal(message)) if message.contains("future revision") => {}
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let (responses, requests) = self
            .open_watch(&range_key(&prefix), &prefix_end(&prefix), after + 1)
            .await?;
        let state = WatchState {
            store: self.clone(),
            responses,
            _requests: requests,
            pending: std::collections::VecDeque::new(),
            last: after,
            done: false,
        };
        Ok(futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        })
        .boxed())
    }

    async fn current_revision(&self) -> Result<Revision> {
        // Any linearizable read's header carries the revision: read one key, not a count of
        // the whole prefix, which etcd computes by walking every key.
        let response = self
            .range(pb::RangeRequest {
                key: self.full_key("/health"),
                count_only: true,
                ..Default::default()
            })
            .await?;
        header_revision(response.header.as_ref())
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut kv = self.kv.clone();
        match unary(kv.compact(pb::CompactionRequest {
            revision,
            physical: false,
        }))
        .await
        {
            // Compacting below the compaction point is a no-op, as in the SQLite store.
            Ok(_) | Err(Failure::Compacted) => Ok(()),
            Err(failure) => Err(failure.into_error()),
        }
    }
}

impl EtcdStore {
    /// The error for a conditional write whose comparison failed; the failure branch read the
    /// key.
    fn refused(&self, key: &str, expected: Revision, response: pb::TxnResponse) -> Result<Error> {
        let current = match response.responses.into_iter().next() {
            Some(pb::ResponseOp {
                response: Some(response_op::Response::ResponseRange(range)),
            }) => range.kvs.into_iter().next(),
            _ => None,
        };
        Ok(match current {
            None => Error::NotFound(key.to_owned()),
            Some(kv) => Error::Conflict {
                key: key.to_owned(),
                expected,
                current: Some(self.kv(kv)?),
            },
        })
    }
}

struct WatchState {
    store: EtcdStore,
    responses: tonic::codec::Streaming<pb::WatchResponse>,
    /// Held so the request side stays open: etcd ends a watch whose client stops sending.
    _requests: mpsc::Sender<pb::WatchRequest>,
    pending: std::collections::VecDeque<Event>,
    last: Revision,
    done: bool,
}

impl WatchState {
    async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            self.done = true;
            let response = match self.responses.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Some(Err(Error::Unavailable("etcd ended the watch".into()))),
                Err(status) => return Some(Err(Failure::from(status).into_error())),
            };
            if response.compact_revision != 0 {
                return Some(Err(Error::Compacted {
                    requested: self.last,
                    compacted: response.compact_revision,
                }));
            }
            if response.canceled {
                return Some(Err(Error::Unavailable(format!(
                    "etcd canceled the watch: {}",
                    response.cancel_reason
                ))));
            }
            self.done = false;
            for event in response.events {
                match self.store.event(event) {
                    // etcd delivers each revision once; the check keeps a misbehaving server
                    // from breaking the contract silently.
                    Ok(event) if event.revision() > self.last => {
                        self.last = event.revision();
                        self.pending.push_back(event);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.done = true;
                        self.pending.clear();
                        return Some(Err(e));
                    }
                }
            }
        }
    }
}
