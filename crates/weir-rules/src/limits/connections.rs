//! Connections one client address holds open at once: a count per address in
//! sharded maps, the entry gone when its last connection closes, so memory
//! follows the connections open now.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use weir_config::ClientConnectionLimit;

use super::Refusal;

const SHARDS: usize = 16;

/// Counts the open connections of each client address against `max`; sharded by address.
#[derive(Debug)]
pub struct ConnectionLimiter {
    config: ClientConnectionLimit,
    counts: Arc<Counts>,
}

/// The open connections of each address, apart from the limit's settings: a reload that
/// changes `max` or `retry_after` keeps them, so the connections already open still count
/// against the new `max` (and their permits give their places back here).
#[derive(Debug)]
struct Counts {
    shards: [Mutex<HashMap<IpAddr, u32>>; SHARDS],
    hasher: RandomState,
}

/// One connection's place in its address's count; given back on drop.
#[derive(Debug)]
pub struct ConnectionPermit {
    counts: Arc<Counts>,
    client: IpAddr,
}

impl ConnectionLimiter {
    /// A limiter with no connection counted.
    pub fn new(config: &ClientConnectionLimit) -> ConnectionLimiter {
        ConnectionLimiter {
            config: config.clone(),
            counts: Arc::new(Counts {
                shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
                hasher: RandomState::new(),
            }),
        }
    }

    /// The limiter for `config` after a reload, with `previous`'s counts.
    pub fn carried(
        config: &ClientConnectionLimit,
        previous: &ConnectionLimiter,
    ) -> ConnectionLimiter {
        ConnectionLimiter {
            config: config.clone(),
            counts: Arc::clone(&previous.counts),
        }
    }

    /// The limit's settings.
    pub fn config(&self) -> &ClientConnectionLimit {
        &self.config
    }

    /// Connections `client` holds now.
    pub fn open(&self, client: IpAddr) -> u32 {
        let client = weir_config::canonical(client);
        let shard = self.counts.shard(client);
        shard.get(&client).copied().unwrap_or(0)
    }

    /// Addresses with at least one connection open.
    pub fn clients(&self) -> usize {
        self.counts
            .shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Counts a new connection from `client`, or refuses it (503) when the
    /// address already holds `max`.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let client = weir_config::canonical(client);
        let mut shard = self.counts.shard(client);
        let count = shard.entry(client).or_insert(0);
        if *count >= self.config.max.get() {
            return Err(Refusal {
                status: 503,
                retry_after: self.config.retry_after,
            });
        }
        *count += 1;
        Ok(ConnectionPermit {
            counts: Arc::clone(&self.counts),
            client,
        })
    }
}

impl Counts {
    fn shard(&self, client: IpAddr) -> std::sync::MutexGuard<'_, HashMap<IpAddr, u32>> {
        self.shards[self.hasher.hash_one(client) as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn release(&self, client: IpAddr) {
        let mut shard = self.shard(client);
        if let Some(count) = shard.get_mut(&client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                shard.remove(&client);
            }
        }
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.counts.release(self.client);
    }
}
