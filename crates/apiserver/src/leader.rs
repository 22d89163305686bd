//! Which replica runs the controllers: leader election on a `coordination.k8s.io/v1` Lease
//! (`lariat-system/lariat-controllers`), as kube-controller-manager elects itself with
//! client-go's `leaderelection`.
//!
//! A Lease rather than etcd's own leases because it works the same on every store (SQLite
//! and etcd), is what Kubernetes users read (`kubectl get leases -n lariat-system` shows the
//! holder), and goes through the API's conditional writes like any object. The election is
//! written here rather than taken from a crate because the maintained ones pin older kube
//! releases than lariat's, which would put a second kube-rs in the binary.
//!
//! Fencing is by time, measured on each replica's own monotonic clock (no clock is compared
//! with another's): the leader may write only until `renew_deadline` after the start of its
//! last successful renewal, and a candidate takes the Lease only after it has seen the same
//! record unchanged for the Lease's whole `leaseDurationSeconds`. Since `renew_deadline` is
//! shorter, a leader that cannot renew (cut off from the datastore, stalled) has stopped
//! writing before anyone else may start; [`Leadership::holds`] is checked by every write the
//! controllers send (see `local::controller_client`) and by the server's own loops.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use lariat_store::{KeyValue, ListOptions, ListResult, Revision, Store, WatchStream};
use tokio::sync::watch;

pub const LEASE_NAMESPACE: &str = "lariat-system";
pub const LEASE_NAME: &str = "lariat-controllers";

/// client-go's three durations. Takeover after a leader dies takes at most
/// `lease_duration + 2 × retry_period`.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a candidate waits on an unchanged Lease before taking it.
    pub lease_duration: Duration,
    /// How long after its last renewal began a leader stops acting; shorter than
    /// `lease_duration` by the margin fencing relies on.
    pub renew_deadline: Duration,
    /// How often the Lease is renewed, or looked at by candidates.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            lease_duration: Duration::from_secs(10),
            renew_deadline: Duration::from_secs(6),
            retry_period: Duration::from_secs(1),
        }
    }
}

/// This replica's standing in the election.
pub struct Leadership {
    identity: String,
    timing: Timing,
    /// The only server on its store (SQLite, which one process holds): it leads from the
    /// start and never steps down; the Lease is kept for who reads it.
    sole: bool,
    /// Until when this replica may act as leader (monotonic); `None` when it does not lead.
    until: Mutex<Option<Instant>>,
    leading: watch::Sender<bool>,
}

impl Leadership {
    /// A candidate named `identity` (unique per process: a restarted replica is a new one).
    pub fn candidate(identity: String, timing: Timing) -> Arc<Leadership> {
        Arc::new(Leadership {
            identity,
            timing,
            sole: false,
            until: Mutex::new(None),
            leading: watch::channel(false).0,
        })
    }

    /// The only server on its store: leads at once.
    pub fn sole(identity: String) -> Arc<Leadership> {
        Arc::new(Leadership {
            identity,
            timing: Timing::default(),
            sole: true,
            until: Mutex::new(None),
            leading: watch::channel(true).0,
        })
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this replica may write as the leader at this instant.
    pub fn holds(&self) -> bool {
        self.sole
            || self
                .until
                .lock()
                .expect("leadership lock")
                .is_some_and(|until| Instant::now() < until)
    }

    /// `true` while this replica leads; changes as it gains or loses the Lease.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    fn renewed(&self, at: Instant) {
        *self.until.lock().expect("leadership lock") = Some(at + self.timing.renew_deadline);
        self.leading.send_if_modified(|leading| {
            let changed = !*leading;
            *leading = true;
            changed
        });
    }

    fn step_down(&self) {
        *self.until.lock().expect("leadership lock") = None;
        self.leading.send_if_modified(|leading| {
            let changed = *leading;
            *leading = false;
            changed
        });
    }
}

/// Campaigns for, renews and (on stop) releases the Lease until `stop` turns true.
pub async fn run(
    leadership: Arc<Leadership>,
    client: kube::Client,
    mut stop: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut election = Election {
        leadership: leadership.clone(),
        holder: String::new(),
        observed: None,
        last_error: None,
    };
    loop {
        let started = Instant::now();
        // A renewal that takes longer than the deadline is worth nothing: bound it.
        let attempt = tokio::time::timeout(
            leadership.timing.renew_deadline,
            election.try_acquire_or_renew(&api),
        )
        .await
        .unwrap_or_else(|_| Err("the datastore did not answer in time".to_string()));
        election.settle(started, attempt);
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = tokio::time::sleep(leadership.timing.retry_period) => {}
        }
    }
    if leadership.holds() && !leadership.sole {
        // Let another replica take over at once rather than after the lease runs out.
        leadership.step_down();
        let _ = tokio::time::timeout(Duration::from_secs(2), election.release(&api)).await;
    }
}

struct Election {
    leadership: Arc<Leadership>,
    /// Who held the Lease when it was last read.
    holder: String,
    /// The Lease record as last seen (its resourceVersion) and when it was first seen so.
    observed: Option<(String, Instant)>,
    last_error: Option<String>,
}

impl Election {
    /// Whether this replica holds the Lease after this attempt.
    async fn try_acquire_or_renew(&mut self, api: &Api<Lease>) -> Result<bool, String> {
        let me = self.leadership.identity.clone();
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds = i32::try_from(self.leadership.timing.lease_duration.as_secs()).unwrap_or(15);
        let Some(mut lease) = api.get_opt(LEASE_NAME).await.map_err(|e| e.to_string())? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    namespace: Some(LEASE_NAMESPACE.into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return conflict_is_no(api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if holder == me && (self.leadership.sole || self.leadership.holds()) {
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(seconds);
        } else {
            let unchanged_since = match &self.observed {
                Some((seen, since)) if *seen == version => *since,
                _ => {
                    self.observed = Some((version, Instant::now()));
                    Instant::now()
                }
            };
            // Never longer than this replica's own: a Lease edited by hand (or by anyone with
            // rights on Leases in lariat-system) to last a day holds the controllers back for
            // one lease duration, not a day.
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.leadership.timing.lease_duration, Duration::from_secs)
                .min(self.leadership.timing.lease_duration);
            self.holder = holder.clone();
            let expired = unchanged_since.elapsed() >= duration;
            // The sole server on its store may take the Lease at once: nobody else can write.
            if !(holder.is_empty() || expired || self.leadership.sole) {
                return Ok(false);
            }
            spec.holder_identity = Some(me);
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(seconds);
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        // The resourceVersion the record was read at makes this write conditional: of two
        // candidates taking the same expired Lease, one is refused.
        conflict_is_no(
            api.replace(LEASE_NAME, &PostParams::default(), &lease)
                .await,
        )
    }

    fn settle(&mut self, started: Instant, attempt: Result<bool, String>) {
        let leadership = &self.leadership;
        match attempt {
            Ok(true) => {
                if !leadership.holds() {
                    tracing::info!(identity = %leadership.identity, "this replica leads the controllers");
                }
                leadership.renewed(started);
                self.last_error = None;
            }
            Ok(false) => {
                if *leadership.leading.borrow() && !leadership.sole {
                    tracing::warn!(
                        holder = %self.holder,
                        "the controllers' lease is held by another; stepping down"
                    );
                }
                if !leadership.sole {
                    leadership.step_down();
                }
                self.last_error = None;
            }
            Err(error) => {
                if self.last_error.as_ref() != Some(&error) {
                    tracing::warn!(%error, "cannot renew or acquire the controllers' lease");
                    self.last_error = Some(error);
                }
                if !leadership.sole && !leadership.holds() && *leadership.leading.borrow() {
                    tracing::warn!(
                        "the controllers' lease was not renewed within {:?}: stepping down",
                        leadership.timing.renew_deadline
                    );
                    leadership.step_down();
                }
            }
        }
    }

    async fn release(&self, api: &Api<Lease>) {
        let Ok(Some(mut lease)) = api.get_opt(LEASE_NAME).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.leadership.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        let _ = api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await;
    }
}

/// A conditional write refused (409) means another replica wrote first: not an error.
fn conflict_is_no(result: kube::Result<Lease>) -> Result<bool, String> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `start` for each term this replica leads, and stops what it started when the term
/// ends (or `stop` turns true): each term gets a stop signal of its own, and what has not
/// finished `grace` after it is aborted. Whatever runs late cannot write anyway: its writes
/// check [`Leadership::holds`].
pub async fn while_leading<F>(
    leadership: Arc<Leadership>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
    mut start: F,
) where
    F: FnMut(watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>>,
{
    let mut leading = leadership.subscribe();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            result = leading.wait_for(|l| *l) => if result.is_err() { return },
        }
        let (end_term, term) = watch::channel(false);
        let mut tasks = start(term);
        tokio::select! {
            _ = stop.wait_for(|s| *s) => {}
            _ = leading.wait_for(|l| !*l) => {}
        }
        let _ = end_term.send(true);
        let finished = tokio::time::timeout(grace, futures::future::join_all(tasks.iter_mut()))
            .await
            .is_ok();
        if !finished {
            tasks.iter().for_each(tokio::task::JoinHandle::abort);
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// A store whose writes are refused while this replica does not lead: what the server's own
/// leader-only loops (garbage collection, Event expiry, compaction) write through, so a loop
/// still running after its term ended cannot write.
pub struct LeaderOnly {
    inner: Arc<dyn Store>,
    leadership: Arc<Leadership>,
}

impl LeaderOnly {
    pub fn around(inner: Arc<dyn Store>, leadership: Arc<Leadership>) -> Arc<dyn Store> {
        Arc::new(LeaderOnly { inner, leadership })
    }

    fn check(&self) -> lariat_store::Result<()> {
        if self.leadership.holds() {
            Ok(())
        } else {
            Err(lariat_store::Error::Unavailable(
                "this replica no longer holds the controllers' lease".into(),
            ))
        }
    }
}

#[async_trait::async_trait]
impl Store for LeaderOnly {
    async fn get(&self, key: &str) -> lariat_store::Result<Option<KeyValue>> {
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str, options: ListOptions) -> lariat_store::Result<ListResult> {
        self.inner.list(prefix, options).await
    }
    async fn count(&self, prefix: &str) -> lariat_store::Result<i64> {
        self.inner.count(prefix).await
    }
    async fn create(&self, key: &str, value: Vec<u8>) -> lariat_store::Result<KeyValue> {
        self.check()?;
        self.inner.create(key, value).await
    }
    async fn update(
        &self,
        key: &str,
        value: Vec<u8>,
        expected: Revision,
    ) -> lariat_store::Result<KeyValue> {
        self.check()?;
        self.inner.update(key, value, expected).await
    }
    async fn delete(&self, key: &str, expected: Revision) -> lariat_store::Result<KeyValue> {
        self.check()?;
        self.inner.delete(key, expected).await
    }
    async fn watch(&self, prefix: &str, after: Revision) -> lariat_store::Result<WatchStream> {
        self.inner.watch(prefix, after).await
    }
    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
        every: std::time::Duration,
    ) -> lariat_store::Result<WatchStream> {
        self.inner.watch_with_progress(prefix, after, every).await
    }
    async fn current_revision(&self) -> lariat_store::Result<Revision> {
        self.inner.current_revision().await
    }
    async fn compact(&self, revision: Revision) -> lariat_store::Result<()> {
        self.check()?;
        self.inner.compact(revision).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_stops_before_a_candidate_may_start() {
        let timing = Timing::default();
        assert!(timing.renew_deadline + timing.retry_period < timing.lease_duration);
        // Takeover after a leader dies: under the 15 s operators are promised.
        assert!(timing.lease_duration + 2 * timing.retry_period < Duration::from_secs(15));
    }

    #[test]
    fn leadership_lapses_at_the_renew_deadline() {
        let timing = Timing {
            lease_duration: Duration::from_millis(300),
            renew_deadline: Duration::from_millis(100),
            retry_period: Duration::from_millis(10),
        };
        let leadership = Leadership::candidate("a".into(), timing);
        assert!(!leadership.holds());
        leadership.renewed(Instant::now());
        assert!(leadership.holds());
        assert!(*leadership.subscribe().borrow());
        std::thread::sleep(Duration::from_millis(120));
        assert!(
            !leadership.holds(),
            "no renewal within the deadline: no writes"
        );
        leadership.step_down();
        assert!(!*leadership.subscribe().borrow());
        assert!(Leadership::sole("b".into()).holds());
    }
}
