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
    shards: [Mutex<HashMap<IpAddr, u32>>; SHARDS],
    hasher: RandomState,
}

/// One connection's place in its address's count; given back on drop.
#[derive(Debug)]
pub struct ConnectionPermit {
    limiter: Arc<ConnectionLimiter>,
    client: IpAddr,
}

impl ConnectionLimiter {
    /// A limiter with no connection counted.
    pub fn new(config: &ClientConnectionLimit) -> ConnectionLimiter {
        ConnectionLimiter {
            config: config.clone(),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            hasher: RandomState::new(),
        }
    }

    /// The limit's settings.
    pub fn config(&self) -> &ClientConnectionLimit {
        &self.config
    }

    /// Connections `client` holds now.
    pub fn open(&self, client: IpAddr) -> u32 {
        let client = weir_config::canonical(client);
        let shard = self
            .shard(client)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        shard.get(&client).copied().unwrap_or(0)
    }

    /// Addresses with at least one connection open.
    pub fn clients(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Counts a new connection from `client`, or refuses it (503) when the
    /// address already holds `max`.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let client = weir_config::canonical(client);
        let mut shard = self
            .shard(client)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = shard.entry(client).or_insert(0);
        if *count >= self.config.max.get() {
            return Err(Refusal {
                status: 503,
                retry_after: self.config.retry_after,
            });
        }
        *count += 1;
        Ok(ConnectionPermit {
            limiter: Arc::clone(self),
            client,
        })
    }

    fn shard(&self, client: IpAddr) -> &Mutex<HashMap<IpAddr, u32>> {
        &self.shards[self.hasher.hash_one(client) as usize % SHARDS]
    }

    fn release(&self, client: IpAddr) {
        let mut shard = self
            .shard(client)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
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
        self.limiter.release(self.client);
    }
}
