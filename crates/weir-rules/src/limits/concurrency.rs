//! Requests in progress at once through the rules that name a limit: one
//! atomic counter, a permit per request that gives its slot back on drop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use weir_config::ConcurrencyLimit;

use super::Refusal;

/// One concurrency limit: counts the requests in progress through the rules that name it.
#[derive(Debug)]
pub struct ConcurrencyLimiter {
    config: ConcurrencyLimit,
    in_progress: AtomicU32,
}

/// One request's slot; freed when dropped.
#[derive(Debug)]
pub struct ConcurrencyPermit {
    limiter: Arc<ConcurrencyLimiter>,
}

/// The slots one request holds (usually none or one).
#[derive(Debug, Default)]
pub struct ConcurrencyPermits(Vec<ConcurrencyPermit>);

impl ConcurrencyLimiter {
    /// A limiter with no request in progress.
    pub fn new(config: &ConcurrencyLimit) -> ConcurrencyLimiter {
        ConcurrencyLimiter {
            config: config.clone(),
            in_progress: AtomicU32::new(0),
        }
    }

    /// The limit's settings.
    pub fn config(&self) -> &ConcurrencyLimit {
        &self.config
    }

    /// Requests holding a slot now.
    pub fn in_progress(&self) -> u32 {
        self.in_progress.load(Ordering::Relaxed)
    }

    /// A slot, or a refusal when `max` requests are in progress.
    pub fn acquire(self: &Arc<Self>) -> Result<ConcurrencyPermit, Refusal> {
        let max = self.config.max.get();
        self.in_progress
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |count| {
                (count < max).then_some(count + 1)
            })
            .map(|_| ConcurrencyPermit {
                limiter: Arc::clone(self),
            })
            .map_err(|_| Refusal {
                status: self.config.status,
                retry_after: self.config.retry_after,
            })
    }
}

impl Drop for ConcurrencyPermit {
    fn drop(&mut self) {
        self.limiter.in_progress.fetch_sub(1, Ordering::AcqRel);
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
