//! A tunnel side's handles (`weir tunnel client|server`): the metrics of [`names::TUNNEL`],
//! without labels, registered only in a tunnel side's registry ([`super::Metrics::for_tunnel`]).

use std::fmt::Write as _;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{FloatGauge, register};
use crate::names::{self, MetricSpec};

macro_rules! tunnel_metrics {
    ($($field:ident: $kind:ty = $spec:ident,)*) => {
        /// The handles of a tunnel side's metrics, one per entry of [`names::TUNNEL`] (see
        /// there for what each counts); clones share the series.
        #[derive(Debug, Clone, Default)]
        pub struct TunnelMetrics {
            $(
                #[doc = concat!("The series of [`names::", stringify!($spec), "`].")]
                pub $field: $kind,
            )*
        }

        impl TunnelMetrics {
            pub(super) fn register(&self, registry: &mut Registry) {
                $(register(registry, names::$spec, self.$field.clone());)*
            }

            /// Every value as `name=value`, separated by spaces, named as exposed less the
            /// `weir_tunnel_` prefix: the line a tunnel side prints when it stops.
            pub fn summary(&self) -> String {
                let mut out = String::new();
                $(push(&mut out, names::$spec, &self.$field);)*
                out
            }
        }
    };
}

tunnel_metrics! {
    connections: Counter = TUNNEL_CONNECTIONS,
    connected: Gauge = TUNNEL_CONNECTED,
    flows: Counter = TUNNEL_FLOWS,
    flows_active: Gauge = TUNNEL_FLOWS_ACTIVE,
    flows_failed: Counter = TUNNEL_FLOWS_FAILED,
    stream_read_bytes: Counter = TUNNEL_STREAM_READ_BYTES,
    stream_written_bytes: Counter = TUNNEL_STREAM_WRITTEN_BYTES,
    encoded_sent_bytes: Counter = TUNNEL_ENCODED_SENT_BYTES,
    encoded_received_bytes: Counter = TUNNEL_ENCODED_RECEIVED_BYTES,
    compression_saved_bytes: Counter = TUNNEL_COMPRESSION_SAVED_BYTES,
    dedup_saved_bytes: Counter = TUNNEL_DEDUP_SAVED_BYTES,
    dedup_misses: Counter = TUNNEL_DEDUP_MISSES,
    dedup_store_bytes: Gauge = TUNNEL_DEDUP_STORE_BYTES,
    dedup_pinned_bytes: Gauge = TUNNEL_DEDUP_PINNED_BYTES,
    link_sent_bytes: Counter = TUNNEL_LINK_SENT_BYTES,
    link_received_bytes: Counter = TUNNEL_LINK_RECEIVED_BYTES,
    lost_packets: Counter = TUNNEL_LOST_PACKETS,
    congestion_events: Counter = TUNNEL_CONGESTION_EVENTS,
    rtt_seconds: FloatGauge = TUNNEL_RTT,
    congestion_window_bytes: Gauge = TUNNEL_CONGESTION_WINDOW,
    fec_repairs: Counter = TUNNEL_FEC_REPAIRS,
    fec_repair_datagrams_sent: Counter = TUNNEL_FEC_REPAIR_DATAGRAMS_SENT,
    fec_repair_sent_bytes: Counter = TUNNEL_FEC_REPAIR_SENT_BYTES,
    fec_malformed: Counter = TUNNEL_FEC_MALFORMED,
    fec_link_loss_ppm: Gauge = TUNNEL_FEC_LINK_LOSS,
    fec_send_failures: Counter = TUNNEL_FEC_SEND_FAILURES,
}

/// A value as the summary line writes it.
trait Value {
    fn write(&self, out: &mut String);
}

impl Value for Counter {
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{}", self.get());
    }
}

impl Value for Gauge {
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{}", self.get());
    }
}

impl Value for FloatGauge {
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{}", self.get());
    }
}

fn push(out: &mut String, spec: MetricSpec, value: &impl Value) {
    if !out.is_empty() {
        out.push(' ');
    }
    let name = spec.exposed_name();
    out.push_str(name.trim_start_matches("weir_tunnel_"));
    out.push('=');
    value.write(out);
}

#[cfg(test)]
mod tests {
    use crate::Metrics;

    #[test]
    fn a_tunnel_registry_exposes_and_sums_up_its_metrics() {
        let (metrics, tunnel) = Metrics::for_tunnel();
        tunnel.stream_read_bytes.inc_by(1234);
        tunnel.flows.inc();
        tunnel.rtt_seconds.set(0.25);
        let text = metrics.encode();
        assert!(
            text.contains("weir_tunnel_stream_read_bytes_total 1234\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE weir_tunnel_flows_active gauge\n"),
            "{text}"
        );
        assert!(text.contains("weir_tunnel_rtt_seconds 0.25\n"), "{text}");
        let summary = tunnel.summary();
        assert!(summary.starts_with("connections_total=0 connected=0 flows_total=1 "));
        assert!(summary.contains(" rtt_seconds=0.25 "), "{summary}");
        assert_eq!(summary.split(' ').count(), crate::names::TUNNEL.len());
    }

    #[test]
    fn a_proxy_registry_has_no_tunnel_metrics() {
        assert!(!Metrics::new().encode().contains("weir_tunnel_"));
    }
}
