//! Requests in progress at once through the rules that name a limit, per key: one atomic
//! counter for `route` (every request the rules send here), else a count per key's hash
//! ([`KeyCounts`]), the entry gone when its key's last request ends, so memory follows the
//! requests in progress. A permit per request gives its slot back on drop.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use weir_config::{ConcurrencyLimit, KeySource};

use super::Refusal;
use super::counts::KeyCounts;
use crate::key::Key;

/// One concurrency limit: counts the requests in progress through the rules that name it.
#[derive(Debug)]
pub struct ConcurrencyLimiter {
    config: ConcurrencyLimit,
    counts: Arc<Counts>,
}

/// What a limit counts, apart from its settings: a reload that changes `max`, `status` or
/// `retry_after` keeps it, so the requests already in progress still count against the
/// new `max` (and their permits, made by the old limiter, give their slots back here).
#[derive(Debug)]
struct Counts {
    /// Every request holding a slot, whatever its key.
    all: AtomicU32,
    /// Per key (the hash of a [`Key`]), for a limit not keyed by `route`.
    keyed: KeyCounts<u64>,
    /// Hashes the keys for `keyed`.
    hasher: RandomState,
}

/// One request's slot; freed when dropped.
#[derive(Debug)]
pub struct ConcurrencyPermit {
    counts: Arc<Counts>,
    /// The key's hash, for a keyed limit.
    key: Option<u64>,
}

/// The slots one request holds (usually none or one).
#[derive(Debug, Default)]
pub struct ConcurrencyPermits(Vec<ConcurrencyPermit>);

impl ConcurrencyLimiter {
    /// A limiter with no request in progress.
    pub fn new(config: &ConcurrencyLimit) -> ConcurrencyLimiter {
        ConcurrencyLimiter {
            config: config.clone(),
            counts: Arc::new(Counts {
                all: AtomicU32::new(0),
                keyed: KeyCounts::new(),
                hasher: RandomState::new(),
            }),
        }
    }

    /// The limiter for `config` after a reload: `previous`'s counts when it counted by the
    /// same key (only its numbers changed), else a new one.
    pub fn carried(config: &ConcurrencyLimit, previous: &ConcurrencyLimiter) -> ConcurrencyLimiter {
        if previous.config.key != config.key {
            return ConcurrencyLimiter::new(config);
        }
        ConcurrencyLimiter {
            config: config.clone(),
            counts: Arc::clone(&previous.counts),
        }
    }

    /// The limit's settings.
    pub fn config(&self) -> &ConcurrencyLimit {
        &self.config
    }

    /// Requests holding a slot now, all keys together.
    pub fn in_progress(&self) -> u32 {
        self.counts.all.load(Ordering::Relaxed)
    }

    /// Keys with at least one request in progress (0 for a limit keyed by `route`).
    pub fn keys(&self) -> usize {
        self.counts.keyed.keys()
    }

    /// A slot for a request of `key`, or a refusal when `max` requests of that key (of
    /// any, for `route`) are in progress.
    pub fn acquire(self: &Arc<Self>, key: Key<'_>) -> Result<ConcurrencyPermit, Refusal> {
        let max = self.config.max.get();
        let refusal = Refusal {
            status: self.config.status,
            retry_after: self.config.retry_after,
        };
        let counts = &self.counts;
        if self.config.key == KeySource::Route {
            return counts
                .all
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |count| {
                    (count < max).then_some(count + 1)
                })
                .map(|_| ConcurrencyPermit {
                    counts: Arc::clone(counts),
                    key: None,
                })
                .map_err(|_| refusal);
        }
        let hash = {
            let mut hasher = counts.hasher.build_hasher();
            key.hash_into(&mut hasher);
            hasher.finish()
        };
        if !counts.keyed.take(hash, max) {
            return Err(refusal);
        }
        counts.all.fetch_add(1, Ordering::AcqRel);
        Ok(ConcurrencyPermit {
            counts: Arc::clone(counts),
            key: Some(hash),
        })
    }
}

impl Drop for ConcurrencyPermit {
    fn drop(&mut self) {
        self.counts.all.fetch_sub(1, Ordering::AcqRel);
        if let Some(hash) = self.key {
            self.counts.keyed.give_back(hash);
        }
    }
}

impl From<Vec<ConcurrencyPermit>> for ConcurrencyPermits {
    fn from(permits: Vec<ConcurrencyPermit>) -> ConcurrencyPermits {
        ConcurrencyPermits(permits)
    }
}

impl ConcurrencyPermits {
    /// How many slots the request holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the request holds no slot.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
