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
    /// An attempt at a proof by a caller at `address`, refused with 429 and its Retry-After
    /// when the address has spent its failed proofs; `failures` names them in the message
    /// ("failed agent handshakes").
    ///
    /// The failure the attempt may become is paid for up front and repaid unless it is
    /// refused: attempts in flight together (their proofs are checked against the store)
    /// would otherwise each find the budget unspent, and an address with twenty connections
    /// open got twenty failures for every one it had left.
    pub fn attempt(
        &self,
        address: Option<IpAddr>,
        failures: &str,
    ) -> Result<Attempt<'_>, ApiError> {
        let mut attempt = Attempt {
            proofs: self,
            address,
            paid: false,
        };
        let Some(address) = address else {
            return Ok(attempt);
        };
        let mut buckets = self.failures.lock().expect("lock");
        // An address that never failed has no bucket: its first attempts are counted when
        // they fail, so valid callers cost no memory here.
        let Some(bucket) = buckets.get_mut(&address) else {
            return Ok(attempt);
        };
        bucket.refill(Instant::now());
        if bucket.tokens < 1.0 {
            let retry_after = ((1.0 - bucket.tokens) / FAILURES_PER_SECOND)
                .ceil()
                .max(1.0) as u64;
            return Err(ApiError::TooManyRequests {
                message: format!("too many {failures} from {address}; retry in {retry_after}s"),
                retry_after_seconds: retry_after,
            });
        }
        bucket.tokens -= 1.0;
        attempt.paid = true;
        Ok(attempt)
    }

    /// Counts a failed proof against `address`.
    fn failed(&self, address: IpAddr) {
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

    /// Gives back a failure paid for by an attempt that did not fail.
    fn repay(&self, address: IpAddr) {
        if let Some(bucket) = self.failures.lock().expect("lock").get_mut(&address) {
            bucket.tokens = (bucket.tokens + 1.0).min(FAILURE_BURST);
        }
    }
}

/// One attempt at a proof ([`FailedProofs::attempt`]): [`refused`](Attempt::refused) or
/// [`failed`](Attempt::failed) if it fails; dropped otherwise, which repays what it paid.
#[must_use = "an attempt that fails must say so"]
pub struct Attempt<'a> {
    proofs: &'a FailedProofs,
    address: Option<IpAddr>,
    /// Whether a failure was paid for up front.
    paid: bool,
}

impl Attempt<'_> {
    /// The proof was refused at `path`: counted against the address, and recorded as a
    /// refusal (metrics, and the log at most once per interval).
    pub fn refused(self, path: &str) {
        crate::auth::record_refusal(path, self.address.map(|ip| (ip, 0).into()));
        self.failed();
    }

    /// The proof failed: counted against the address.
    pub fn failed(mut self) {
        if let Some(address) = self.address
            && !std::mem::take(&mut self.paid)
        {
            self.proofs.failed(address);
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let (true, Some(address)) = (self.paid, self.address) {
            self.proofs.repay(address);
        }
    }
}
