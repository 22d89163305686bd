//! The hub: which Cluster's agent is connected through which tunnel, on this replica, and the
//! budget agents' handshakes are admitted from.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::client::conn::http2::SendRequest;

/// A connected agent's tunnel.
#[derive(Clone)]
pub(crate) struct Tunnel {
    pub(crate) sender: SendRequest<Body>,
    /// Tells connections apart, so an old one ending does not remove its successor.
    pub(crate) id: u64,
    pub(crate) since: Instant,
    /// The lariat version the agent reported in its handshake.
    pub(crate) agent_version: String,
}

/// Connected tunnels by Cluster (`namespace/name`) and the handshake admission budget.
pub struct Tunnels {
    pub(crate) connected: Mutex<HashMap<String, Tunnel>>,
    pub(crate) next_id: std::sync::atomic::AtomicU64,
    admission: Mutex<Admission>,
    /// Wakes the reporter when a tunnel opens or closes, or its cluster's Nodes change.
    pub(crate) changed: std::sync::Arc<tokio::sync::Notify>,
}

/// Handshakes admitted per second: a token bucket, so a reconnection storm after a restart is
/// spread out by telling agents when to come back instead of melting the server.
struct Admission {
    tokens: f64,
    last: Instant,
    per_second: f64,
    /// Refusals in the current and the previous second: how many agents are waiting.
    window: Instant,
    refused_now: u64,
    refused_before: u64,
}

impl Default for Tunnels {
    fn default() -> Self {
        Tunnels::with_rate(DEFAULT_HANDSHAKES_PER_SECOND)
    }
}

/// Agent handshakes admitted per second unless configured otherwise.
pub const DEFAULT_HANDSHAKES_PER_SECOND: f64 = 1000.0;

impl Tunnels {
    pub fn with_rate(per_second: f64) -> Tunnels {
        let per_second = per_second.max(1.0);
        Tunnels {
            connected: Mutex::default(),
            next_id: Default::default(),
            admission: Mutex::new(Admission {
                tokens: per_second,
                last: Instant::now(),
                per_second,
                window: Instant::now(),
                refused_now: 0,
                refused_before: 0,
            }),
            changed: Default::default(),
        }
    }

    /// Whether a handshake may proceed now; if not, after how many seconds the agent should
    /// come back. The wait is random over as many seconds as the waiting crowd needs at the
    /// admitted rate, so the crowd returns spread out rather than all at once.
    pub(crate) fn admit(&self) -> Result<(), u64> {
        let mut bucket = self.admission.lock().expect("lock");
        let now = Instant::now();
        let refill = now.duration_since(bucket.last).as_secs_f64() * bucket.per_second;
        bucket.tokens = (bucket.tokens + refill).min(bucket.per_second);
        bucket.last = now;
        let since_window = now.duration_since(bucket.window);
        if since_window >= Duration::from_secs(1) {
            bucket.refused_before = if since_window < Duration::from_secs(2) {
                bucket.refused_now
            } else {
                0
            };
            bucket.refused_now = 0;
            bucket.window = now;
        }
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        bucket.refused_now += 1;
        let waiting = bucket.refused_now.max(bucket.refused_before) as f64;
        let spread = (waiting / bucket.per_second).ceil().max(1.0) as u64;
        use rand::Rng;
        Err(rand::rng().random_range(1..=spread))
    }

    /// Whether `cluster` has a live tunnel.
    pub fn is_connected(&self, cluster: &str) -> bool {
        self.get(cluster).is_some()
    }

    pub(crate) fn get(&self, cluster: &str) -> Option<Tunnel> {
        let mut connected = self.connected.lock().expect("lock");
        match connected.get(cluster) {
            Some(tunnel) if !tunnel.sender.is_closed() => Some(tunnel.clone()),
            Some(_) => {
                connected.remove(cluster);
                None
            }
            None => None,
        }
    }

    /// Drops `cluster`'s tunnel `id` if it is still the one held: the agent has one
    /// connection at a time, and a newer one is up elsewhere.
    pub(crate) fn disconnect_stale(&self, cluster: &str, id: u64) {
        let mut connected = self.connected.lock().expect("lock");
        if connected.get(cluster).is_some_and(|t| t.id == id) {
            connected.remove(cluster);
        }
    }

    /// Drops `cluster`'s tunnel (its Cluster is gone): dropping the last sender closes it.
    pub fn disconnect(&self, cluster: &str) {
        if self
            .connected
            .lock()
            .expect("lock")
            .remove(cluster)
            .is_some()
        {
            tracing::info!(cluster = %cluster, "closing the tunnel of a deleted cluster");
        }
    }

    pub(crate) fn keys(&self) -> Vec<String> {
        self.connected
            .lock()
            .expect("lock")
            .keys()
            .cloned()
            .collect()
    }

    /// Connected clusters and since when.
    pub fn connected(&self) -> Vec<(String, Duration)> {
        let connected = self.connected.lock().expect("lock");
        connected
            .iter()
            .filter(|(_, t)| !t.sender.is_closed())
            .map(|(k, t)| (k.clone(), t.since.elapsed()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_is_a_token_bucket_that_spreads_the_rest() {
        let tunnels = Tunnels::with_rate(5.0);
        let outcomes: Vec<Result<(), u64>> = (0..100).map(|_| tunnels.admit()).collect();
        assert_eq!(
            outcomes.iter().filter(|o| o.is_ok()).count(),
            5,
            "a burst is cut at the rate"
        );
        let waits: Vec<u64> = outcomes.iter().filter_map(|o| o.err()).collect();
        assert!(waits.iter().all(|w| (1..=19).contains(w)), "{waits:?}");
        assert!(
            *waits.iter().max().unwrap() > 5,
            "95 waiting agents at 5/s are spread over many seconds: {waits:?}"
        );
    }
}
