//! The tunnel's metrics, named in one place ([`ALL`]), counted with atomics, and written in
//! the Prometheus text format for `GET /metrics` (`[metrics] listen`) and as a summary line
//! when the tunnel stops. `docs/metrics.md` lists every name (a test checks it).

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a metric behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One metric: its exposed name, kind and help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

/// Identifies a metric in [`ALL`] (its index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Id(usize);

macro_rules! metrics {
    ($($id:ident = $index:literal: $name:literal, $kind:ident, $help:literal;)*) => {
        $(pub const $id: Id = Id($index);)*
        /// Every tunnel metric, in exposition order.
        pub const ALL: &[Spec] = &[$(Spec { name: $name, kind: Kind::$kind, help: $help },)*];
    };
}

metrics! {
    CONNECTIONS = 0: "weir_tunnel_connections_total", Counter,
        "Tunnel connections established (near side: including reconnections).";
    CONNECTED = 1: "weir_tunnel_connected", Gauge,
        "Tunnel connections open now.";
    FLOWS = 2: "weir_tunnel_flows_total", Counter,
        "TCP flows carried (opened as streams).";
    FLOWS_ACTIVE = 3: "weir_tunnel_flows_active", Gauge,
        "TCP flows open now.";
    FLOWS_FAILED = 4: "weir_tunnel_flows_failed_total", Counter,
        "Flows refused or broken: no tunnel in time, unknown service, connect failure, reset, protocol error.";
    STREAM_IN = 5: "weir_tunnel_stream_read_bytes_total", Counter,
        "Bytes read from local TCP connections (what the tunnel carries, before encoding).";
    STREAM_OUT = 6: "weir_tunnel_stream_written_bytes_total", Counter,
        "Bytes written to local TCP connections (after decoding).";
    ENCODED_OUT = 7: "weir_tunnel_encoded_sent_bytes_total", Counter,
        "Bytes of encoded blocks sent on flow streams (after compression and deduplication).";
    ENCODED_IN = 8: "weir_tunnel_encoded_received_bytes_total", Counter,
        "Bytes of encoded blocks received on flow streams.";
    COMPRESSION_SAVED = 9: "weir_tunnel_compression_saved_bytes_total", Counter,
        "Bytes compression removed from what was sent.";
    DEDUP_SAVED = 10: "weir_tunnel_dedup_saved_bytes_total", Counter,
        "Bytes sent as references to chunks the far end holds, instead of literally.";
    DEDUP_MISSES = 11: "weir_tunnel_dedup_misses_total", Counter,
        "References that missed this end's store and were fetched over the control stream.";
    STORE_BYTES = 12: "weir_tunnel_dedup_store_bytes", Gauge,
        "Bytes of chunks held in this end's store (current connection).";
    LINK_SENT = 13: "weir_tunnel_link_sent_bytes_total", Counter,
        "UDP payload bytes sent on the WAN link (QUIC packets, retransmissions included).";
    LINK_RECEIVED = 14: "weir_tunnel_link_received_bytes_total", Counter,
        "UDP payload bytes received from the WAN link.";
    LOST_PACKETS = 15: "weir_tunnel_lost_packets_total", Counter,
        "QUIC packets declared lost (and their data retransmitted).";
    CONGESTION_EVENTS = 16: "weir_tunnel_congestion_events_total", Counter,
        "Loss episodes the congestion controller was told of.";
    RTT = 17: "weir_tunnel_rtt_seconds", Gauge,
        "Smoothed round-trip time of the current connection.";
    WINDOW = 18: "weir_tunnel_congestion_window_bytes", Gauge,
        "Congestion window of the current connection.";
    FEC_RECOVERED = 19: "weir_tunnel_fec_repairs_total", Counter,
        "Lost datagrams rebuilt from FEC repair datagrams and passed to QUIC (no retransmission needed).";
    FEC_REPAIRS_SENT = 20: "weir_tunnel_fec_repair_datagrams_sent_total", Counter,
        "FEC repair datagrams sent (the redundancy).";
    FEC_REPAIR_BYTES = 21: "weir_tunnel_fec_repair_sent_bytes_total", Counter,
        "UDP payload bytes of FEC repair datagrams sent.";
    FEC_MALFORMED = 22: "weir_tunnel_fec_malformed_total", Counter,
        "Received datagrams that were neither QUIC nor a valid FEC frame (dropped).";
    FEC_LOSS = 23: "weir_tunnel_fec_link_loss_ppm", Gauge,
        "Loss rate of what this side sends, as the peer last reported it (parts per million, before FEC).";
    FEC_SEND_FAILURES = 24: "weir_tunnel_fec_send_failures_total", Counter,
        "FEC repair and report datagrams the socket refused (dropped; repairs are best effort).";
}

/// The values of every metric in [`ALL`].
#[derive(Debug)]
pub struct Metrics {
    values: Vec<AtomicU64>,
    /// Link counters of connections that have closed (the live one is added on reading).
    link_base: Mutex<LinkCounters>,
    live: Mutex<Option<quinn::Connection>>,
}

/// Counters quinn keeps per connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub sent: u64,
    pub received: u64,
    pub lost_packets: u64,
    pub congestion_events: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            values: ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            link_base: Mutex::new(LinkCounters::default()),
            live: Mutex::new(None),
        }
    }
}

impl Metrics {
    pub fn add(&self, id: Id, value: u64) {
        self.values[id.0].fetch_add(value, Ordering::Relaxed);
    }

    pub fn increment(&self, id: Id) {
        self.add(id, 1);
    }

    pub fn decrement(&self, id: Id) {
        self.values[id.0].fetch_sub(1, Ordering::Relaxed);
    }

    pub fn set(&self, id: Id, value: u64) {
        self.values[id.0].store(value, Ordering::Relaxed);
    }

    pub fn get(&self, id: Id) -> u64 {
        self.values[id.0].load(Ordering::Relaxed)
    }

    /// The connection whose counters are read live (one at a time on the near side; the far
    /// side shows the latest).
    pub fn connection_opened(&self, connection: &quinn::Connection) {
        self.increment(CONNECTIONS);
        self.increment(CONNECTED);
        *lock(&self.live) = Some(connection.clone());
    }

    /// Folds a closed connection's counters into the totals.
    pub fn connection_closed(&self, connection: &quinn::Connection) {
        self.decrement(CONNECTED);
        let counters = link_counters(connection);
        let mut base = lock(&self.link_base);
        base.sent += counters.sent;
        base.received += counters.received;
        base.lost_packets += counters.lost_packets;
        base.congestion_events += counters.congestion_events;
        let mut live = lock(&self.live);
        if live
            .as_ref()
            .is_some_and(|live| live.stable_id() == connection.stable_id())
        {
            *live = None;
        }
    }

    /// Refreshes the link gauges and counters from quinn.
    fn refresh(&self) {
        let base = *lock(&self.link_base);
        let live = lock(&self.live).clone();
        let (current, rtt, window) = match &live {
            Some(connection) => {
                let stats = connection.stats();
                (
                    link_counters(connection),
                    connection.rtt().as_micros() as u64,
                    stats.path.cwnd,
                )
            }
            None => (LinkCounters::default(), 0, 0),
        };
        self.set(LINK_SENT, base.sent + current.sent);
        self.set(LINK_RECEIVED, base.received + current.received);
        self.set(LOST_PACKETS, base.lost_packets + current.lost_packets);
        self.set(
            CONGESTION_EVENTS,
            base.congestion_events + current.congestion_events,
        );
        self.set(RTT, rtt);
        self.set(WINDOW, window);
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.refresh();
        let mut out = String::new();
        for (index, spec) in ALL.iter().enumerate() {
            let kind = match spec.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            let value = self.values[index].load(Ordering::Relaxed);
            let _ = writeln!(out, "# HELP {} {}", spec.name, spec.help);
            let _ = writeln!(out, "# TYPE {} {kind}", spec.name);
            if Id(index) == RTT {
                let _ = writeln!(out, "{} {}", spec.name, value as f64 / 1e6);
            } else {
                let _ = writeln!(out, "{} {value}", spec.name);
            }
        }
        out
    }

    /// One line of `key=value` pairs (names without the `weir_tunnel_` prefix).
    pub fn summary(&self) -> String {
        self.refresh();
        let mut out = String::new();
        for (index, spec) in ALL.iter().enumerate() {
            let name = spec.name.trim_start_matches("weir_tunnel_");
            if !out.is_empty() {
                out.push(' ');
            }
            let _ = write!(out, "{name}={}", self.values[index].load(Ordering::Relaxed));
        }
        out
    }
}

fn link_counters(connection: &quinn::Connection) -> LinkCounters {
    let stats = connection.stats();
    LinkCounters {
        sent: stats.udp_tx.bytes,
        received: stats.udp_rx.bytes,
        lost_packets: stats.path.lost_packets,
        congestion_events: stats.path.congestion_events,
    }
}

/// A poisoned lock only means another thread panicked mid-update of plain counters.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_list_every_metric() {
        let docs = include_str!("../../../docs/metrics.md");
        for spec in ALL {
            assert!(
                docs.contains(&format!("`{}`", spec.name)),
                "docs/metrics.md lacks {}",
                spec.name
            );
        }
    }

    #[test]
    fn names_are_unique_and_counters_end_in_total() {
        for (index, spec) in ALL.iter().enumerate() {
            assert!(spec.name.starts_with("weir_tunnel_"));
            assert_eq!(
                spec.kind == Kind::Counter,
                spec.name.ends_with("_total"),
                "{}",
                spec.name
            );
            assert!(ALL[..index].iter().all(|other| other.name != spec.name));
        }
    }

    #[test]
    fn render_and_summary_show_values() {
        let metrics = Metrics::default();
        metrics.add(STREAM_IN, 1234);
        metrics.increment(FLOWS);
        let text = metrics.render();
        assert!(
            text.contains("weir_tunnel_stream_read_bytes_total 1234\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE weir_tunnel_flows_active gauge\n"));
        assert!(metrics.summary().contains("flows_total=1"));
    }
}
