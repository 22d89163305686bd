//! The budget of failed proofs per client address: callers that prove themselves to a route
//! (an agent's token at a handshake, a registration token in an import URL, a git host's
//! webhook signature) draw on it when they fail. An address past it is refused before its
//! proof is even looked at, so a flood of bad tokens costs the store nothing and never
//! touches what valid callers are served from.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use crate::status::ApiError;

/// Failed proofs one client address may offer: a burst, then this many per second.
pub const FAILURE_BURST: f64 = 60.0;
pub const FAILURES_PER_SECOND: f64 = 5.0;
/// Addresses whose budget is remembered at most; those with a full budget are forgotten first.
const FAILURE_ADDRESSES: usize = 65_536;

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * FAILURES_PER_SECOND).min(FAILURE_BURST);
        self.last = now;
    }
}

/// Failed proofs by client address (one per server: every route shares it).
#[derive(Default)]
pub struct FailedProofs {
    failures: Mutex<HashMap<IpAddr, Bucket>>,
}

impl FailedProofs {
    /// Whether `address` still has failed proofs left; if not, in how many seconds it has.
    pub fn may_try(&self, address: IpAddr) -> Result<(), u64> {
        let mut failures = self.failures.lock().expect("lock");
        let Some(bucket) = failures.get_mut(&address) else {
            return Ok(());
        };
        bucket.refill(Instant::now());
        if bucket.tokens >= 1.0 {
            Ok(())
        } else {
            Err(((1.0 - bucket.tokens) / FAILURES_PER_SECOND)
                .ceil()
                .max(1.0) as u64)
        }
    }

    /// Refuses, with 429 and its Retry-After, a caller at `address` that has spent its failed
    /// proofs; `failures` names them in the message ("failed agent handshakes").
    pub fn may_try_or_refuse(
        &self,
        address: Option<IpAddr>,
        failures: &str,
    ) -> Result<(), ApiError> {
        match address.map(|address| (address, self.may_try(address))) {
            Some((address, Err(retry_after))) => Err(ApiError::TooManyRequests {
                message: format!("too many {failures} from {address}; retry in {retry_after}s"),
                retry_after_seconds: retry_after,
            }),
            _ => Ok(()),
        }
    }

    /// A proof refused at `path`: counted against `address`, and recorded as a refusal
    /// (metrics, and the log at most once per interval).
    pub fn refused(&self, path: &str, address: Option<IpAddr>) {
        crate::auth::record_refusal(path, address.map(|ip| (ip, 0).into()));
        if let Some(address) = address {
            self.failed(address);
        }
    }

    /// Counts a failed proof against `address`.
    pub fn failed(&self, address: IpAddr) {
        let now = Instant::now();
        let mut failures = self.failures.lock().expect("lock");
        if failures.len() >= FAILURE_ADDRESSES && !failures.contains_key(&address) {
            failures.retain(|_, b| {
                b.refill(now);
                b.tokens < FAILURE_BURST
            });
            if failures.len() >= FAILURE_ADDRESSES {
                // Every remembered address is still failing: forget one rather than grow.
                if let Some(any) = failures.keys().next().copied() {
                    failures.remove(&any);
                }
            }
        }
        let bucket = failures.entry(address).or_insert(Bucket {
            tokens: FAILURE_BURST,
            last: now,
        });
        bucket.refill(now);
        bucket.tokens = (bucket.tokens - 1.0).max(0.0);
    }
}
