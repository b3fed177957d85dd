//! Observability for weir: the metric names and pre-resolved metric handles, the
//! per-request access log, and the sums and latency histogram the admin API reports.
//!
//! There is no global registry. The binary creates one [`Metrics`], hands it to every
//! component, and each component resolves its handles once; recording on the data path is
//! then a single atomic operation.
//!
//! ```
//! use weir_observe::Metrics;
//!
//! let metrics = Metrics::new();
//! let web = metrics.virtual_server("web");
//! web.connections_accepted.inc();
//! web.record_status(200);
//!
//! let node = metrics.node("app", "10.0.0.1:8080");
//! node.connections_created.inc();
//! node.requests_forwarded.inc_by(4);
//!
//! let text = metrics.encode();
//! assert!(text.contains("weir_requests_total{virtual_server=\"web\",class=\"2xx\"} 1"));
//! assert!(text.contains("weir_reuse_ratio 4.0"));
//! ```

pub mod access;
pub mod budget;
pub mod metrics;
pub mod names;
pub mod stats;

pub use access::{AccessLog, AccessRecord, SessionRecord, TlsRecord};
pub use budget::{AcceptFailures, LogBudget};
pub use metrics::{
    CONTENT_TYPE, CacheMetrics, CompressionMetrics, DnsMetrics, FloatGauge, Flood, GaugePart,
    Http2Metrics, Layer4Metrics, Metrics, NodeMetrics, PoolMetrics, ReloadMetrics, StatusClass,
    TEXT_CONTENT_TYPE, TlsMetrics, TunnelMetrics, UpstreamHttp2Metrics, UpstreamTlsMetrics,
    VirtualServerMetrics, count_log_lines_dropped, openmetrics_to_text,
};
pub use prometheus_client::metrics::counter::Counter;
pub use prometheus_client::metrics::gauge::Gauge;
pub use stats::{LatencyHistogram, Totals};
