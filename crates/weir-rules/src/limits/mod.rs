//! Service protection: request rate per key, requests in progress per limit,
//! connections per client address. Each answers with a [`Refusal`] (status
//! and `Retry-After`) the pipeline turns into a response.
//!
//! State is shared by every thread and survives a reload: [`TrafficLimits::new`]
//! takes the previous generation's limits and keeps each limiter whose
//! configuration did not change.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_config::Traffic;
use weir_http::RequestHead;

use crate::decision::Decision;
use crate::key::each_request_key;

mod concurrency;
mod connections;
mod counts;
mod rate;

pub use concurrency::{ConcurrencyLimiter, ConcurrencyPermit, ConcurrencyPermits};
pub use connections::{ConnectionLimiter, ConnectionPermit};
pub use rate::RateLimiter;

/// A request or connection past a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// 429 for rates, 503 for concurrency and connections (configurable).
    pub status: u16,
    /// When the client may try again.
    pub retry_after: Duration,
}

impl Refusal {
    pub(crate) fn new(status: u16, wait_nanos: u64) -> Refusal {
        Refusal {
            status,
            retry_after: Duration::from_nanos(wait_nanos),
        }
    }

    /// The `Retry-After` value: whole seconds, rounded up, at least 1.
    pub fn retry_after_seconds(&self) -> u64 {
        self.retry_after.as_nanos().div_ceil(1_000_000_000).max(1) as u64
    }
}

/// A virtual server's limiters.
#[derive(Debug, Default)]
pub struct TrafficLimits {
    /// In the order of the configured `rate_limits` (the indexes rules use).
    pub rates: Vec<Arc<RateLimiter>>,
    /// In the order of the configured `concurrency_limits` (the indexes rules use).
    pub concurrency: Vec<Arc<ConcurrencyLimiter>>,
    /// The per-client connection limit, if configured.
    pub connections: Option<Arc<ConnectionLimiter>>,
    /// Peers the connection limit does not count: the trusted proxies whose forwarding
    /// header names the client (`client_address`). One of their connections carries the
    /// requests of many clients, whose address is known only per request, so the limits
    /// counted per request (rates, concurrency) key on it instead.
    forwarders: Vec<weir_config::Cidr>,
}

impl TrafficLimits {
    /// Builds the limiters for `traffic`, keeping those of `previous` (the
    /// last generation of the same virtual server) whose settings are equal,
    /// so buckets and counts carry over a reload. `epoch` is the clock's zero
    /// for rate limiters (one `Instant` for the whole process).
    pub fn new(
        traffic: &Traffic,
        previous: Option<&TrafficLimits>,
        epoch: Instant,
    ) -> TrafficLimits {
        // A rate limit of the same name whose settings changed keeps what each key spent.
        let now = Instant::now();
        let rates = traffic
            .rate_limits
            .iter()
            .map(|config| {
                let old = previous.and_then(|old| {
                    old.rates
                        .iter()
                        .find(|limiter| limiter.config().name == config.name)
                });
                match old {
                    Some(old) if old.config() == config => Arc::clone(old),
                    Some(old) => Arc::new(RateLimiter::carried(config, old, now)),
                    None => Arc::new(RateLimiter::new(config, epoch)),
                }
            })
            .collect();
        // A limit of the same name whose numbers changed keeps its counts: the requests and
        // connections in progress count against the new numbers.
        let concurrency = traffic
            .concurrency_limits
            .iter()
            .map(|config| {
                let old = previous.and_then(|old| {
                    old.concurrency
                        .iter()
                        .find(|limiter| limiter.config().name == config.name)
                });
                match old {
                    Some(old) if old.config() == config => Arc::clone(old),
                    Some(old) => Arc::new(ConcurrencyLimiter::carried(config, old)),
                    None => Arc::new(ConcurrencyLimiter::new(config)),
                }
            })
            .collect();
        let connections = traffic.client_connections.as_ref().map(|config| {
            match previous.and_then(|old| old.connections.as_ref()) {
                Some(old) if old.config() == config => Arc::clone(old),
                Some(old) => Arc::new(ConnectionLimiter::carried(config, old)),
                None => Arc::new(ConnectionLimiter::new(config)),
            }
        });
        let forwarders = match traffic.client_address.header {
            Some(_) => traffic.client_address.trusted_proxies.clone(),
            None => Vec::new(),
        };
        TrafficLimits {
            rates,
            concurrency,
            connections,
            forwarders,
        }
    }

    /// Counts the request against every rate limit the decision names, in
    /// order; the first refusal is the answer (earlier limits have counted it).
    pub fn check_rates(
        &self,
        decision: &Decision,
        head: &RequestHead,
        client: IpAddr,
        now: Instant,
    ) -> Result<(), Refusal> {
        for &index in &decision.rate_limits {
            self.check_rate(index, head, client, now)?;
        }
        Ok(())
    }

    /// Counts the request against the rate limit at `index` (of the rule set's
    /// `rate_limits`), under each key it counts by ([`each_request_key`]: one, or each
    /// value of a repeated cookie or parameter; the first refusal answers); no such
    /// limit refuses nothing.
    pub fn check_rate(
        &self,
        index: usize,
        head: &RequestHead,
        client: IpAddr,
        now: Instant,
    ) -> Result<(), Refusal> {
        let Some(limiter) = self.rates.get(index) else {
            return Ok(());
        };
        each_request_key(&limiter.config().key, head, client, |key| {
            limiter.check(key, now)
        })
    }

    /// Takes a slot in every concurrency limit the decision names, under the key each
    /// limit counts by; the permits free them when dropped (at the end of the request).
    /// All or nothing: on a refusal the slots already taken are freed.
    pub fn acquire_concurrency(
        &self,
        decision: &Decision,
        head: &RequestHead,
        client: IpAddr,
    ) -> Result<ConcurrencyPermits, Refusal> {
        let mut permits = Vec::new();
        for &index in &decision.concurrency_limits {
            self.acquire_one(index, head, client, &mut permits)?;
        }
        Ok(ConcurrencyPermits::from(permits))
    }

    /// Takes a slot in the concurrency limit at `index` (of the rule set's
    /// `concurrency_limits`) under each key it counts by ([`each_request_key`]: one, or
    /// each value of a repeated cookie or parameter), into `permits`; no such limit takes
    /// nothing. On a refusal the slots this call took are freed.
    pub fn acquire_one(
        &self,
        index: usize,
        head: &RequestHead,
        client: IpAddr,
        permits: &mut Vec<ConcurrencyPermit>,
    ) -> Result<(), Refusal> {
        let Some(limiter) = self.concurrency.get(index) else {
            return Ok(());
        };
        let before = permits.len();
        each_request_key(&limiter.config().key, head, client, |key| {
            permits.push(limiter.acquire(key)?);
            Ok(())
        })
        .inspect_err(|_| permits.truncate(before))
    }

    /// Admits a connection from `client` (held until the permit drops);
    /// `Ok(None)` when connections per client are not limited, or not for this one (a
    /// trusted proxy that reports its clients in a header).
    pub fn admit_connection(&self, client: IpAddr) -> Result<Option<ConnectionPermit>, Refusal> {
        match &self.connections {
            Some(_) if self.forwards(client) => Ok(None),
            Some(limiter) => limiter.admit(client).map(Some),
            None => Ok(None),
        }
    }

    fn forwards(&self, peer: IpAddr) -> bool {
        let peer = weir_config::canonical(peer);
        self.forwarders.iter().any(|network| network.contains(peer))
    }
}

#[cfg(test)]
mod tests;
