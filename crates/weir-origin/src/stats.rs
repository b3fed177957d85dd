//! Counters an origin keeps about itself, readable in-process or as JSON over `/stats`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Live counters of one origin, shared by its accept loop and every connection.
#[derive(Debug)]
pub struct OriginStats {
    name: String,
    connections_accepted: AtomicU64,
    connections_open: AtomicU64,
    connections_peak: AtomicU64,
    connections_refused: AtomicU64,
    requests: AtomicU64,
    bytes_echoed: AtomicU64,
    tls_handshakes_full: AtomicU64,
    tls_handshakes_resumed: AtomicU64,
    tls_handshake_failures: AtomicU64,
}

/// A copy of [`OriginStats`] at one moment; this is the body of `GET /stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// The origin's name.
    pub name: String,
    /// Connections accepted and served (refused ones are not counted here).
    pub connections_accepted: u64,
    /// Connections open now.
    pub connections_open: u64,
    /// The most connections that were open at once.
    pub connections_peak: u64,
    /// Connections reset at once because `max_connections` were already open.
    pub connections_refused: u64,
    /// Request heads parsed (malformed ones are not counted).
    pub requests: u64,
    /// Echo mode: bytes written back to clients (0 in HTTP mode; absent in older documents).
    #[serde(default)]
    pub bytes_echoed: u64,
    /// HTTPS: TLS handshakes completed in full (absent in older documents).
    #[serde(default)]
    pub tls_handshakes_full: u64,
    /// HTTPS: TLS handshakes that resumed a session (absent in older documents).
    #[serde(default)]
    pub tls_handshakes_resumed: u64,
    /// HTTPS: connections whose TLS handshake failed or timed out (absent in older documents).
    #[serde(default)]
    pub tls_handshake_failures: u64,
}

/// Reads a `/stats` JSON body; `None` if it is not one.
pub fn parse_stats_json(body: &[u8]) -> Option<StatsSnapshot> {
    serde_json::from_slice(body).ok()
}

/// Holds one open connection in the counters; dropping it closes the connection there.
#[derive(Debug)]
pub(crate) struct OpenConnection {
    stats: Arc<OriginStats>,
}

impl OriginStats {
    pub(crate) fn new(name: String) -> OriginStats {
        OriginStats {
            name,
            connections_accepted: AtomicU64::new(0),
            connections_open: AtomicU64::new(0),
            connections_peak: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            bytes_echoed: AtomicU64::new(0),
            tls_handshakes_full: AtomicU64::new(0),
            tls_handshakes_resumed: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
        }
    }

    /// The origin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connections accepted and served since the start (refused ones excluded).
    pub fn connections_accepted(&self) -> u64 {
        self.connections_accepted.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn connections_open(&self) -> u64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    /// The most connections open at once since the start.
    pub fn connections_peak(&self) -> u64 {
        self.connections_peak.load(Ordering::Relaxed)
    }

    /// Connections reset on accept because the connection cap was reached.
    pub fn connections_refused(&self) -> u64 {
        self.connections_refused.load(Ordering::Relaxed)
    }

    /// Requests parsed since the start, on every connection.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Echo mode: bytes written back to clients.
    pub fn bytes_echoed(&self) -> u64 {
        self.bytes_echoed.load(Ordering::Relaxed)
    }

    /// HTTPS: TLS handshakes completed in full.
    pub fn tls_handshakes_full(&self) -> u64 {
        self.tls_handshakes_full.load(Ordering::Relaxed)
    }

    /// HTTPS: TLS handshakes that resumed a session.
    pub fn tls_handshakes_resumed(&self) -> u64 {
        self.tls_handshakes_resumed.load(Ordering::Relaxed)
    }

    /// HTTPS: TLS handshakes that failed or timed out.
    pub fn tls_handshake_failures(&self) -> u64 {
        self.tls_handshake_failures.load(Ordering::Relaxed)
    }

    /// All counters at once (each read on its own; they may be a request apart).
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            name: self.name.clone(),
            connections_accepted: self.connections_accepted(),
            connections_open: self.connections_open(),
            connections_peak: self.connections_peak(),
            connections_refused: self.connections_refused(),
            requests: self.requests(),
            bytes_echoed: self.bytes_echoed(),
            tls_handshakes_full: self.tls_handshakes_full(),
            tls_handshakes_resumed: self.tls_handshakes_resumed(),
            tls_handshake_failures: self.tls_handshake_failures(),
        }
    }

    /// Counts an accepted connection as open until the returned guard drops.
    pub(crate) fn open_connection(self: &Arc<Self>) -> OpenConnection {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        let open = self.connections_open.fetch_add(1, Ordering::Relaxed) + 1;
        self.connections_peak.fetch_max(open, Ordering::Relaxed);
        OpenConnection {
            stats: Arc::clone(self),
        }
    }

    pub(crate) fn count_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_echoed(&self, bytes: u64) {
        self.bytes_echoed.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A completed TLS handshake, full or resumed.
    pub(crate) fn count_handshake(&self, resumed: bool) {
        let counter = if resumed {
            &self.tls_handshakes_resumed
        } else {
            &self.tls_handshakes_full
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_handshake_failure(&self) {
        self.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_connections_track_peak_and_close_on_drop() {
        let stats = Arc::new(OriginStats::new("a".to_owned()));
        let first = stats.open_connection();
        let second = stats.open_connection();
        drop(first);
        let _third = stats.open_connection();
        drop(second);
        stats.count_refused();
        stats.count_request();
        stats.count_echoed(7);
        stats.count_handshake(false);
        stats.count_handshake(true);
        stats.count_handshake(true);
        stats.count_handshake_failure();
        let snapshot = stats.snapshot();
        assert_eq!(
            snapshot,
            StatsSnapshot {
                name: "a".to_owned(),
                connections_accepted: 3,
                connections_open: 1,
                connections_peak: 2,
                connections_refused: 1,
                requests: 1,
                bytes_echoed: 7,
                tls_handshakes_full: 1,
                tls_handshakes_resumed: 2,
                tls_handshake_failures: 1,
            }
        );
    }

    #[test]
    fn snapshot_round_trips_through_json() {
        let stats = Arc::new(OriginStats::new("node-1".to_owned()));
        let _open = stats.open_connection();
        let json = serde_json::to_vec(&stats.snapshot()).expect("plain struct serialises");
        assert_eq!(parse_stats_json(&json), Some(stats.snapshot()));
        assert_eq!(parse_stats_json(b"not json"), None);
        // Documents from before `bytes_echoed` still parse.
        let old = br#"{"name":"a","connections_accepted":1,"connections_open":0,"connections_peak":1,"connections_refused":0,"requests":2}"#;
        assert_eq!(
            parse_stats_json(old).map(|snapshot| snapshot.bytes_echoed),
            Some(0)
        );
    }
}
