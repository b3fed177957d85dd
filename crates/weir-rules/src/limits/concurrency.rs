//! Requests in progress at once through the rules that name a limit, per key: one atomic
//! counter for `route` (every request the rules send here), else a count per key in
//! sharded maps, the entry gone when its key's last request ends, so memory follows the
//! requests in progress. A permit per request gives its slot back on drop.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use weir_config::{ConcurrencyLimit, KeySource};

use super::Refusal;
use crate::key::Key;

const SHARDS: usize = 16;

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
    keyed: [Mutex<HashMap<u64, u32>>; SHARDS],
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
                keyed: std::array::from_fn(|_| Mutex::new(HashMap::new())),
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
        self.counts
            .keyed
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
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
            std::hash::Hasher::finish(&hasher)
        };
        let mut shard = counts.shard(hash);
        let count = shard.entry(hash).or_insert(0);
        if *count >= max {
            return Err(refusal);
        }
        *count += 1;
        counts.all.fetch_add(1, Ordering::AcqRel);
        Ok(ConcurrencyPermit {
            counts: Arc::clone(counts),
            key: Some(hash),
        })
    }
}

impl Counts {
    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, HashMap<u64, u32>> {
        self.keyed[hash as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ConcurrencyPermit {
    fn drop(&mut self) {
        self.counts.all.fetch_sub(1, Ordering::AcqRel);
        if let Some(hash) = self.key {
            let mut shard = self.counts.shard(hash);
            if let Some(count) = shard.get_mut(&hash) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    shard.remove(&hash);
                }
            }
        }
    }
}

impl ConcurrencyPermits {
    pub(crate) fn push(&mut self, permit: ConcurrencyPermit) {
        self.0.push(permit);
    }

    /// How many slots the request holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the request holds no slot.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
