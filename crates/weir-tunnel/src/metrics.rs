//! A tunnel side's metrics: weir's registry with the tunnel's set (names and handles in
//! `weir-observe`, like every other metric; `docs/metrics.md` lists them), served by the
//! admin listener, plus the link counters quinn keeps per connection, read into them
//! whenever the registry is written out.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use weir_observe::TunnelMetrics;

/// A tunnel side's registry and handles, and the connections whose counters it reads.
#[derive(Debug)]
pub struct Metrics {
    registry: Arc<weir_observe::Metrics>,
    tunnel: TunnelMetrics,
    link: Mutex<Link>,
}

/// Where the link counters come from.
#[derive(Debug, Default)]
struct Link {
    /// Counters of connections that have closed (the live one is added on reading).
    closed: LinkCounters,
    live: Option<quinn::Connection>,
}

/// Counters quinn keeps per connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LinkCounters {
    sent: u64,
    received: u64,
    lost_packets: u64,
    congestion_events: u64,
}

impl Metrics {
    /// A fresh set of tunnel metrics in their own registry, all at zero.
    pub fn new() -> Arc<Metrics> {
        let (registry, tunnel) = weir_observe::Metrics::for_tunnel();
        let metrics = Arc::new(Metrics {
            registry: Arc::clone(&registry),
            tunnel,
            link: Mutex::new(Link::default()),
        });
        let weak: Weak<Metrics> = Arc::downgrade(&metrics);
        registry.before_encode(move || {
            if let Some(metrics) = weak.upgrade() {
                metrics.refresh();
            }
        });
        metrics
    }

    /// The registry, for the admin listener.
    pub fn registry(&self) -> &Arc<weir_observe::Metrics> {
        &self.registry
    }

    /// The handles: what the tunnel counts.
    pub fn handles(&self) -> &TunnelMetrics {
        &self.tunnel
    }

    /// One line of `name=value` pairs (names without the `weir_tunnel_` prefix), the link
    /// counters brought up to date first.
    pub fn summary(&self) -> String {
        self.refresh();
        self.tunnel.summary()
    }

    /// A connection the far side accepted: its counters are read live (one at a time on the
    /// near side; the far side shows the latest), and it is counted as established.
    pub(crate) fn connection_opened(&self, connection: &quinn::Connection) {
        self.link_opened(connection);
        self.connection_established();
    }

    /// A connection whose link counters are followed from now on (the near side's, before
    /// the far side has accepted it: its packets count whether or not it is accepted).
    pub(crate) fn link_opened(&self, connection: &quinn::Connection) {
        self.link().live = Some(connection.clone());
    }

    /// A connection both ends accepted: counted, and open until
    /// [`Metrics::connection_closed`] says `established`.
    pub(crate) fn connection_established(&self) {
        self.tunnel.connections.inc();
        self.tunnel.connected.inc();
    }

    /// Folds a closed connection's counters into the totals; `established`: it was
    /// counted as open ([`Metrics::connection_established`]).
    pub(crate) fn connection_closed(&self, connection: &quinn::Connection, established: bool) {
        if established {
            self.tunnel.connected.dec();
        }
        let counters = link_counters(connection);
        let mut link = self.link();
        link.closed.sent += counters.sent;
        link.closed.received += counters.received;
        link.closed.lost_packets += counters.lost_packets;
        link.closed.congestion_events += counters.congestion_events;
        if link
            .live
            .as_ref()
            .is_some_and(|live| live.stable_id() == connection.stable_id())
        {
            link.live = None;
        }
    }

    /// Sets the link counters and gauges from quinn.
    fn refresh(&self) {
        let (closed, live) = {
            let link = self.link();
            (link.closed, link.live.clone())
        };
        let (current, rtt, window) = match &live {
            Some(connection) => (
                link_counters(connection),
                connection.rtt().as_secs_f64(),
                connection.stats().path.cwnd,
            ),
            None => (LinkCounters::default(), 0.0, 0),
        };
        let t = &self.tunnel;
        advance(&t.link_sent_bytes, closed.sent + current.sent);
        advance(&t.link_received_bytes, closed.received + current.received);
        advance(&t.lost_packets, closed.lost_packets + current.lost_packets);
        advance(
            &t.congestion_events,
            closed.congestion_events + current.congestion_events,
        );
        t.rtt_seconds.set(rtt);
        t.congestion_window_bytes
            .set(i64::try_from(window).unwrap_or(i64::MAX));
    }

    fn link(&self) -> MutexGuard<'_, Link> {
        // A poisoned lock only means another thread panicked mid-update of plain counters.
        self.link.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Moves a counter up to `total` (quinn's totals only grow; a lower reading, taken while a
/// connection was being folded in, is skipped).
fn advance(counter: &weir_observe::Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_and_the_summary_show_the_values() {
        let metrics = Metrics::new();
        metrics.handles().stream_read_bytes.inc_by(1234);
        metrics.handles().flows.inc();
        let text = metrics.registry().encode();
        assert!(
            text.contains("weir_tunnel_stream_read_bytes_total 1234\n"),
            "{text}"
        );
        assert!(text.contains("weir_tunnel_link_sent_bytes_total 0\n"));
        assert!(metrics.summary().contains("flows_total=1"));
    }

    #[test]
    fn counters_only_advance() {
        let counter = weir_observe::Counter::default();
        advance(&counter, 10);
        advance(&counter, 7);
        assert_eq!(counter.get(), 10);
        advance(&counter, 12);
        assert_eq!(counter.get(), 12);
    }
}
