//! Connections one client address holds open at once: a count per address
//! ([`KeyCounts`]), the entry gone when its last connection closes, so memory
//! follows the connections open now.

use std::net::IpAddr;
use std::sync::Arc;

use weir_config::ClientConnectionLimit;

use super::Refusal;
use super::counts::KeyCounts;

/// Counts the open connections of each client address against `max`.
#[derive(Debug)]
pub struct ConnectionLimiter {
    config: ClientConnectionLimit,
    /// The open connections of each address, apart from the limit's settings: a reload
    /// that changes `max` or `retry_after` keeps them, so the connections already open
    /// still count against the new `max` (and their permits give their places back here).
    counts: Arc<KeyCounts<IpAddr>>,
}

/// One connection's place in its address's count; given back on drop.
#[derive(Debug)]
pub struct ConnectionPermit {
    counts: Arc<KeyCounts<IpAddr>>,
    client: IpAddr,
}

impl ConnectionLimiter {
    /// A limiter with no connection counted.
    pub fn new(config: &ClientConnectionLimit) -> ConnectionLimiter {
        ConnectionLimiter {
            config: config.clone(),
            counts: Arc::new(KeyCounts::new()),
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
        self.counts.count(crate::key::limited_client(client))
    }

    /// Addresses with at least one connection open.
    pub fn clients(&self) -> usize {
        self.counts.keys()
    }

    /// Counts a new connection from `client`, or refuses it (503) when the
    /// address (an IPv6 one's /64, [`crate::key::limited_client`]) already holds `max`.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<ConnectionPermit, Refusal> {
        let client = crate::key::limited_client(client);
        if !self.counts.take(client, self.config.max.get()) {
            return Err(Refusal {
                status: 503,
                retry_after: self.config.retry_after,
            });
        }
        Ok(ConnectionPermit {
            counts: Arc::clone(&self.counts),
            client,
        })
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.counts.give_back(self.client);
    }
}
