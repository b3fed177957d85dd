//! The metrics registry and the pre-resolved handles the data path records into.
//!
//! A [`Metrics`] value owns one `prometheus-client` registry. Components ask it once (at
//! start-up or reload) for the handles of their virtual server, pool or node and keep them:
//! recording is then one atomic operation, with no label lookup per request.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};

use crate::names::{self, MetricSpec};
use crate::stats::{LatencyHistogram, Totals};

mod cache;
mod dns;
mod http2;
mod layer4;
mod process;
pub use process::count_log_lines_dropped;
mod traffic;
mod tunnel;

pub use cache::{CacheMetrics, CompressionMetrics};
pub use dns::{DnsMetrics, RESOLUTION_RESULTS};
pub use http2::{Flood, Http2Metrics, UpstreamHttp2Metrics};
pub use layer4::{Layer4Metrics, SESSION_RESULTS};
pub use traffic::{CLIENT_CONNECTIONS_LIMIT, TrafficMetrics};
pub use tunnel::TunnelMetrics;

/// The HTTP `Content-Type` of [`Metrics::encode`]'s output (OpenMetrics text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of [`openmetrics_to_text`]'s output, Prometheus's classic text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// [`Metrics::encode`]'s OpenMetrics text in Prometheus's classic text format (0.0.4), for
/// scrapers that do not ask for OpenMetrics: a counter family is named with its `_total`
/// suffix in `# HELP` and `# TYPE` (OpenMetrics names the family without it), and the
/// `# UNIT` and `# EOF` lines go. Samples are the same lines in both.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // A family's `# HELP` waits for its `# TYPE`, which says whether it is a counter.
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some(waiting) = help.replace(rest) {
                out.push_str("# HELP ");
                out.push_str(waiting);
                out.push('\n');
            }
            continue;
        }
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let suffix = if kind == "counter" && !name.ends_with("_total") {
                "_total"
            } else {
                ""
            };
            if let Some(text) = help.take() {
                let text = text.strip_prefix(name).unwrap_or(text);
                out.push_str(&format!("# HELP {name}{suffix}{text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
            continue;
        }
        if let Some(waiting) = help.take() {
            out.push_str("# HELP ");
            out.push_str(waiting);
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A gauge holding a floating-point value.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// One contributor's part of a gauge that several add up to (a node's open connections:
/// its HTTP/1.1 pool, and its HTTP/2 sides, one a reload withdrew still draining): each
/// sets its own value, the gauge shows the sum, and a part dropped takes its value with it.
#[derive(Debug)]
pub struct GaugePart {
    gauge: Gauge,
    /// What this part last added to the gauge.
    published: AtomicI64,
}

impl GaugePart {
    /// A part of `gauge`, adding nothing yet.
    pub fn new(gauge: Gauge) -> GaugePart {
        GaugePart {
            gauge,
            published: AtomicI64::new(0),
        }
    }

    /// Makes this part `value`: the gauge moves by the difference. Calls in any order
    /// leave the gauge at the sum of the parts' last values.
    pub fn set(&self, value: i64) {
        let before = self.published.swap(value, Ordering::Relaxed);
        self.gauge.inc_by(value - before);
    }
}

impl Drop for GaugePart {
    fn drop(&mut self) {
        self.gauge.dec_by(*self.published.get_mut());
    }
}

/// All of weir's metrics: the registry, the metric families and the handles handed out so far.
///
/// Created once by the binary and passed to every component that records; there is no global.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    families: Families,
    reuse_ratio: FloatGauge,
    offload_ratio: FloatGauge,
    reloads: ReloadMetrics,
    /// Admin API requests refused for their token.
    admin_unauthorized: Counter,
    /// Every request's duration, for the percentiles the admin API and dashboard show.
    latency: Arc<LatencyHistogram>,
    handles: Mutex<Handles>,
    /// Cache and compression families (issue 12), in `metrics/cache.rs`.
    pub(crate) cache: cache::CacheFamilies,
    /// Rule and limit families (issue 14), in `metrics/traffic.rs`.
    pub(crate) traffic: traffic::TrafficFamilies,
    /// HTTP/2 families (issue 11), in `metrics/http2.rs`.
    pub(crate) http2: http2::Http2Families,
    /// Layer 4 families (issue 13), in `metrics/layer4.rs`.
    pub(crate) layer4: layer4::Layer4Families,
    /// Node-name resolution families, in `metrics/dns.rs`.
    pub(crate) dns: dns::DnsFamilies,
    /// Descriptors, memory and start time, in `metrics/process.rs`.
    process: process::ProcessGauges,
    refreshers: Refreshers,
}

/// Handles for configuration reloads.
#[derive(Debug, Clone)]
pub struct ReloadMetrics {
    /// Reloads applied (`weir_config_reloads_total{result="applied"}`).
    pub applied: Counter,
    /// Reloads refused, the running config kept (`result="refused"`).
    pub refused: Counter,
    /// Generation of the running model: 1 at start, one more per applied reload and per
    /// new set of addresses of a node given by DNS name.
    pub generation: Gauge,
    /// Unix time, seconds, of the last reload tried.
    pub last_reload_timestamp_seconds: FloatGauge,
    /// 1 when the last reload tried was applied (or none was tried), 0 when it was refused.
    pub last_reload_success: Gauge,
}

/// What [`Metrics::encode`] calls first, to bring values read from elsewhere up to date.
#[derive(Default)]
struct Refreshers(Mutex<Vec<Box<dyn Fn() + Send + Sync>>>);

/// HTTP status classes, the `class` label of request counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusClass {
    /// 1xx
    Informational,
    /// 2xx
    Success,
    /// 3xx
    Redirection,
    /// 4xx
    ClientError,
    /// 5xx
    ServerError,
}

/// Handles for one virtual server (client side).
#[derive(Debug, Clone)]
pub struct VirtualServerMetrics {
    /// Client connections open now.
    pub connections_open: Gauge,
    /// Idle client connections parked now (counted in `connections_open` too).
    pub connections_parked: Gauge,
    /// Idle client connections resting now (counted in `connections_open` too).
    pub connections_resting: Gauge,
    /// Client connections accepted.
    pub connections_accepted: Counter,
    /// Connections refused because the virtual server was at `max_connections`.
    pub connections_rejected: Counter,
    /// Responses sent, indexed by [`StatusClass::index`]; see [`Self::record_status`].
    pub requests: [Counter; 5],
    /// Requests rejected while parsing.
    pub bad_requests: Counter,
    /// Bytes read from clients.
    pub bytes_received: Counter,
    /// Bytes written to clients.
    pub bytes_sent: Counter,
    /// Request durations (shared by every virtual server).
    pub latency: Arc<LatencyHistogram>,
    /// HTTP/2 connections, streams and floods of this virtual server's clients.
    pub http2: Http2Metrics,
}

/// Handles for one pool.
#[derive(Debug, Clone)]
pub struct PoolMetrics {
    /// Responses by status class, indexed by [`StatusClass::index`]; see [`Self::record_status`].
    pub requests: [Counter; 5],
    /// Requests currently waiting for a connection, summed over the pool's nodes.
    pub queue_length: Gauge,
    /// Requests that gave up waiting in the queue for a connection.
    pub queue_timeouts: Counter,
    /// Requests whose client left while they waited in the queue.
    pub queue_abandoned: Counter,
    /// Requests refused because the queue was full.
    pub queue_full: Counter,
    /// Requests sent again to a node after a retry-safe failure.
    pub retries: Counter,
    /// Requests for which the balancer found no healthy node.
    pub no_node_available: Counter,
}

/// Handles for one node of one pool (upstream side).
#[derive(Debug, Clone)]
pub struct NodeMetrics {
    /// Connections to the node open now, idle or busy.
    pub connections_open: Gauge,
    /// Connections to the node opened.
    pub connections_created: Counter,
    /// Requests that reused an idle keep-alive connection to the node.
    pub connections_reused: Counter,
    /// Requests sent to the node.
    pub requests_forwarded: Counter,
    /// Connects to the node that failed or timed out.
    pub connect_failures: Counter,
    /// Responses from the node with a 5xx status.
    pub responses_5xx: Counter,
    /// 1 while up, 0 while down; starts at 0 until the owner sets it.
    pub healthy: Gauge,
    /// Times the node was marked down by health checks.
    pub ejections: Counter,
    /// Moving average of the node's response time, seconds.
    pub response_time_ewma_seconds: FloatGauge,
    /// Tunnels (WebSocket, CONNECT) open to the node now.
    pub tunnels_open: Gauge,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VirtualServerLabels {
    virtual_server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VirtualServerClassLabels {
    virtual_server: String,
    class: StatusClass,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    pool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolClassLabels {
    pool: String,
    class: StatusClass,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    pool: String,
    node: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TlsHandshakeLabels {
    virtual_server: String,
    version: &'static str,
    suite: &'static str,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TlsFailureLabels {
    virtual_server: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    virtual_server: String,
    certificate: String,
    key_type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolKindLabels {
    pool: String,
    kind: &'static str,
}

/// TLS handles of one virtual server. Handshakes are labelled by version and
/// suite as they happen (one label lookup per handshake, which costs far
/// less than the handshake).
#[derive(Debug, Clone)]
pub struct TlsMetrics {
    virtual_server: String,
    /// The label sets this virtual server's TLS series were made with, shared by every
    /// handle of it, so that its removal can drop them (the families cannot be listed).
    seen: Arc<Mutex<TlsSeen>>,
    /// Handshakes of every virtual server by kind (for the admin API's totals).
    full: Counter,
    resumed: Counter,
    handshakes: Family<TlsHandshakeLabels, Counter>,
    failures: Family<TlsFailureLabels, Counter>,
    expiry: Family<CertificateLabels, FloatGauge>,
    ocsp_next_update: Family<CertificateLabels, FloatGauge>,
}

/// The label sets of one virtual server's TLS series.
#[derive(Debug, Default)]
struct TlsSeen {
    /// The virtual server was removed: handles still held (handshakes in progress when it
    /// went) count in the totals only, as other handles of a removed one are no longer
    /// exported.
    removed: bool,
    handshakes: HashSet<(&'static str, &'static str, &'static str)>,
    failures: HashSet<&'static str>,
    certificates: HashSet<(String, &'static str)>,
}

impl TlsSeen {
    /// Nothing was exported for it.
    fn is_empty(&self) -> bool {
        !self.removed
            && self.handshakes.is_empty()
            && self.failures.is_empty()
            && self.certificates.is_empty()
    }
}

impl TlsMetrics {
    fn seen(&self) -> MutexGuard<'_, TlsSeen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a completed handshake by protocol version, cipher suite and kind.
    pub fn record_handshake(&self, version: &'static str, suite: &'static str, resumed: bool) {
        if resumed {
            self.resumed.inc();
        } else {
            self.full.inc();
        }
        let kind = if resumed { "resumed" } else { "full" };
        // Held while the series is made or counted, so that a removal (which takes it
        // first) never races a series back in.
        let mut seen = self.seen();
        if seen.removed {
            return;
        }
        seen.handshakes.insert((version, suite, kind));
        self.handshakes
            .get_or_create(&TlsHandshakeLabels {
                virtual_server: self.virtual_server.clone(),
                version,
                suite,
                kind,
            })
            .inc();
    }

    /// Counts a handshake that did not complete, by reason (a `FailureReason` label).
    pub fn record_failure(&self, reason: &'static str) {
        let mut seen = self.seen();
        if seen.removed {
            return;
        }
        seen.failures.insert(reason);
        self.failures
            .get_or_create(&TlsFailureLabels {
                virtual_server: self.virtual_server.clone(),
                reason,
            })
            .inc();
    }

    /// Drops every series of this virtual server (a reload removed it).
    fn remove_all(&self) {
        // Once marked, no handle makes a series again; those made are dropped below.
        let seen = {
            let mut held = self.seen();
            let seen = std::mem::take(&mut *held);
            held.removed = true;
            seen
        };
        for (version, suite, kind) in seen.handshakes {
            self.handshakes.remove(&TlsHandshakeLabels {
                virtual_server: self.virtual_server.clone(),
                version,
                suite,
                kind,
            });
        }
        for reason in seen.failures {
            self.failures.remove(&TlsFailureLabels {
                virtual_server: self.virtual_server.clone(),
                reason,
            });
        }
        for (certificate, key_type) in seen.certificates {
            self.remove_certificate(&certificate, key_type);
        }
    }

    /// Replaces the expiry series of this virtual server with `certificates` (name, key
    /// type, notAfter and the stapled OCSP response's nextUpdate as Unix seconds).
    pub fn set_certificates(&self, certificates: &[(String, &'static str, f64, Option<f64>)]) {
        for (certificate, key_type, not_after, next_update) in certificates {
            let labels = CertificateLabels {
                virtual_server: self.virtual_server.clone(),
                certificate: certificate.clone(),
                key_type,
            };
            let mut seen = self.seen();
            if seen.removed {
                return;
            }
            seen.certificates.insert((certificate.clone(), key_type));
            self.expiry.get_or_create(&labels).set(*not_after);
            match next_update {
                Some(next_update) => {
                    self.ocsp_next_update
                        .get_or_create(&labels)
                        .set(*next_update);
                }
                None => {
                    self.ocsp_next_update.remove(&labels);
                }
            }
        }
    }

    /// Removes one certificate's expiry series (it is no longer served).
    pub fn remove_certificate(&self, certificate: &str, key_type: &'static str) {
        self.seen()
            .certificates
            .remove(&(certificate.to_owned(), key_type));
        let labels = CertificateLabels {
            virtual_server: self.virtual_server.clone(),
            certificate: certificate.to_owned(),
            key_type,
        };
        self.ocsp_next_update.remove(&labels);
        self.expiry.remove(&labels);
    }
}

/// Upstream TLS handles of one pool.
#[derive(Debug, Clone)]
pub struct UpstreamTlsMetrics {
    /// Full handshakes with the pool's nodes.
    pub full: Counter,
    /// Resumed handshakes with the pool's nodes.
    pub resumed: Counter,
    /// Handshakes with the pool's nodes that failed.
    pub failed: Counter,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The labelled families, one per [`names`] entry that has labels.
#[derive(Debug, Default)]
struct Families {
    client_connections_open: Family<VirtualServerLabels, Gauge>,
    client_connections_parked: Family<VirtualServerLabels, Gauge>,
    client_connections_resting: Family<VirtualServerLabels, Gauge>,
    client_connections_accepted: Family<VirtualServerLabels, Counter>,
    client_connections_rejected: Family<VirtualServerLabels, Counter>,
    requests: Family<VirtualServerClassLabels, Counter>,
    bad_requests: Family<VirtualServerLabels, Counter>,
    client_bytes_received: Family<VirtualServerLabels, Counter>,
    client_bytes_sent: Family<VirtualServerLabels, Counter>,

    pool_requests: Family<PoolClassLabels, Counter>,
    queue_length: Family<PoolLabels, Gauge>,
    queue_timeouts: Family<PoolLabels, Counter>,
    queue_abandoned: Family<PoolLabels, Counter>,
    queue_full: Family<PoolLabels, Counter>,
    retries: Family<PoolLabels, Counter>,
    no_node_available: Family<PoolLabels, Counter>,

    upstream_connections_open: Family<NodeLabels, Gauge>,
    upstream_connections_created: Family<NodeLabels, Counter>,
    upstream_connections_reused: Family<NodeLabels, Counter>,
    node_requests_forwarded: Family<NodeLabels, Counter>,
    node_connect_failures: Family<NodeLabels, Counter>,
    node_responses_5xx: Family<NodeLabels, Counter>,
    node_healthy: Family<NodeLabels, Gauge>,
    node_ejections: Family<NodeLabels, Counter>,
    node_response_time_ewma: Family<NodeLabels, FloatGauge>,
    node_tunnels_open: Family<NodeLabels, Gauge>,

    tls_handshakes: Family<TlsHandshakeLabels, Counter>,
    tls_handshake_failures: Family<TlsFailureLabels, Counter>,
    tls_certificate_expiry_timestamp: Family<CertificateLabels, FloatGauge>,
    tls_ocsp_next_update_timestamp: Family<CertificateLabels, FloatGauge>,
    upstream_tls_handshakes: Family<PoolKindLabels, Counter>,
    /// Not exported: the sums of `tls_handshakes` by kind.
    tls_full: Counter,
    tls_resumed: Counter,
}

/// Every handle given out, kept to compute the derived ratios and to make lookups idempotent.
#[derive(Debug, Default)]
struct Handles {
    virtual_servers: HashMap<String, VirtualServerMetrics>,
    pools: HashMap<String, PoolMetrics>,
    /// Keyed by (pool, node address).
    nodes: HashMap<(String, String), NodeMetrics>,
    /// The TLS series each virtual server made, by its name.
    tls: HashMap<String, Arc<Mutex<TlsSeen>>>,
}

impl Metrics {
    /// Creates the registry with every metric of [`names::ALL`] registered.
    pub fn new() -> Arc<Metrics> {
        Metrics::build(None)
    }

    /// The registry of a tunnel side, [`names::ALL`] and [`names::TUNNEL`], and the latter's
    /// handles.
    pub fn for_tunnel() -> (Arc<Metrics>, TunnelMetrics) {
        let tunnel = TunnelMetrics::default();
        (Metrics::build(Some(&tunnel)), tunnel)
    }

    fn build(tunnel: Option<&TunnelMetrics>) -> Arc<Metrics> {
        let mut registry = Registry::with_prefix(names::PREFIX);
        let families = Families::default();
        let reuse_ratio = FloatGauge::default();
        let offload_ratio = FloatGauge::default();
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: weir_core::VERSION,
            })
            .set(1);

        let reload_results = Family::<ResultLabels, Counter>::default();
        let reloads = ReloadMetrics {
            applied: reload_results.get_or_create_owned(&ResultLabels { result: "applied" }),
            refused: reload_results.get_or_create_owned(&ResultLabels { result: "refused" }),
            generation: Gauge::default(),
            last_reload_timestamp_seconds: FloatGauge::default(),
            last_reload_success: Gauge::default(),
        };
        reloads.generation.set(1);
        reloads.last_reload_success.set(1);

        let r = &mut registry;
        register(r, names::BUILD_INFO, build_info);
        let process = process::ProcessGauges::default();
        process.register(r);
        register(r, names::REUSE_RATIO, reuse_ratio.clone());
        register(r, names::OFFLOAD_RATIO, offload_ratio.clone());
        register(r, names::CONFIG_RELOADS, reload_results);
        register(r, names::CONFIG_GENERATION, reloads.generation.clone());
        register(
            r,
            names::CONFIG_LAST_RELOAD_TIMESTAMP,
            reloads.last_reload_timestamp_seconds.clone(),
        );
        register(
            r,
            names::CONFIG_LAST_RELOAD_SUCCESS,
            reloads.last_reload_success.clone(),
        );
        let admin_unauthorized = Counter::default();
        register(r, names::ADMIN_UNAUTHORIZED, admin_unauthorized.clone());
        families.register(r);
        let cache = cache::CacheFamilies::default();
        cache.register(r);
        let traffic = traffic::TrafficFamilies::default();
        traffic.register(r);
        let http2 = http2::Http2Families::default();
        http2.register(r);
        let layer4 = layer4::Layer4Families::default();
        layer4.register(r);
        let dns = dns::DnsFamilies::default();
        dns.register(r);
        if let Some(tunnel) = tunnel {
            tunnel.register(r);
        }

        Arc::new(Metrics {
            registry,
            families,
            reuse_ratio,
            offload_ratio,
            reloads,
            admin_unauthorized,
            latency: Arc::new(LatencyHistogram::default()),
            handles: Mutex::new(Handles::default()),
            cache,
            traffic,
            http2,
            layer4,
            dns,
            process,
            refreshers: Refreshers::default(),
        })
    }

    /// The reload handles.
    pub fn reloads(&self) -> &ReloadMetrics {
        &self.reloads
    }

    /// `weir_admin_unauthorized_total`: admin API requests refused for their token.
    pub fn admin_unauthorized(&self) -> &Counter {
        &self.admin_unauthorized
    }

    /// Durations of every request, all virtual servers together.
    pub fn latency(&self) -> &LatencyHistogram {
        &self.latency
    }

    /// Calls `refresh` at the start of every [`Metrics::encode`], to set values kept
    /// elsewhere (a QUIC connection's own counters, say) before they are written.
    pub fn before_encode(&self, refresh: impl Fn() + Send + Sync + 'static) {
        self.refreshers.lock().push(Box::new(refresh));
    }

    /// The handles of one virtual server; the same name always gives the same series.
    pub fn virtual_server(&self, name: &str) -> VirtualServerMetrics {
        let mut handles = self.handles();
        if let Some(existing) = handles.virtual_servers.get(name) {
            return existing.clone();
        }
        let f = &self.families;
        let labels = VirtualServerLabels {
            virtual_server: name.to_owned(),
        };
        let requests = StatusClass::ALL.map(|class| {
            f.requests.get_or_create_owned(&VirtualServerClassLabels {
                virtual_server: name.to_owned(),
                class,
            })
        });
        let created = VirtualServerMetrics {
            connections_open: f.client_connections_open.get_or_create_owned(&labels),
            connections_parked: f.client_connections_parked.get_or_create_owned(&labels),
            connections_resting: f.client_connections_resting.get_or_create_owned(&labels),
            connections_accepted: f.client_connections_accepted.get_or_create_owned(&labels),
            connections_rejected: f.client_connections_rejected.get_or_create_owned(&labels),
            requests,
            bad_requests: f.bad_requests.get_or_create_owned(&labels),
            bytes_received: f.client_bytes_received.get_or_create_owned(&labels),
            bytes_sent: f.client_bytes_sent.get_or_create_owned(&labels),
            latency: Arc::clone(&self.latency),
            http2: self.http2(name),
        };
        handles
            .virtual_servers
            .insert(name.to_owned(), created.clone());
        created
    }

    /// The handles of one pool; the same name always gives the same series.
    pub fn pool(&self, name: &str) -> PoolMetrics {
        let mut handles = self.handles();
        if let Some(existing) = handles.pools.get(name) {
            return existing.clone();
        }
        let f = &self.families;
        let labels = PoolLabels {
            pool: name.to_owned(),
        };
        let requests = StatusClass::ALL.map(|class| {
            f.pool_requests.get_or_create_owned(&PoolClassLabels {
                pool: name.to_owned(),
                class,
            })
        });
        let created = PoolMetrics {
            requests,
            queue_length: f.queue_length.get_or_create_owned(&labels),
            queue_timeouts: f.queue_timeouts.get_or_create_owned(&labels),
            queue_abandoned: f.queue_abandoned.get_or_create_owned(&labels),
            queue_full: f.queue_full.get_or_create_owned(&labels),
            retries: f.retries.get_or_create_owned(&labels),
            no_node_available: f.no_node_available.get_or_create_owned(&labels),
        };
        handles.pools.insert(name.to_owned(), created.clone());
        created
    }

    /// The handles of one node of a pool, labelled `pool` and `node` (the address as
    /// configured); the same pair always gives the same series.
    pub fn node(&self, pool: &str, address: &str) -> NodeMetrics {
        let mut handles = self.handles();
        let key = (pool.to_owned(), address.to_owned());
        if let Some(existing) = handles.nodes.get(&key) {
            return existing.clone();
        }
        let f = &self.families;
        let labels = NodeLabels {
            pool: key.0.clone(),
            node: key.1.clone(),
        };
        let created = NodeMetrics {
            connections_open: f.upstream_connections_open.get_or_create_owned(&labels),
            connections_created: f.upstream_connections_created.get_or_create_owned(&labels),
            connections_reused: f.upstream_connections_reused.get_or_create_owned(&labels),
            requests_forwarded: f.node_requests_forwarded.get_or_create_owned(&labels),
            connect_failures: f.node_connect_failures.get_or_create_owned(&labels),
            responses_5xx: f.node_responses_5xx.get_or_create_owned(&labels),
            healthy: f.node_healthy.get_or_create_owned(&labels),
            ejections: f.node_ejections.get_or_create_owned(&labels),
            response_time_ewma_seconds: f.node_response_time_ewma.get_or_create_owned(&labels),
            tunnels_open: f.node_tunnels_open.get_or_create_owned(&labels),
        };
        handles.nodes.insert(key, created.clone());
        created
    }

    /// The TLS handles of one virtual server.
    pub fn tls(&self, virtual_server: &str) -> TlsMetrics {
        let mut handles = self.handles();
        if !handles.tls.contains_key(virtual_server) {
            // Entries no handle holds that made no series are left by terminations built
            // for a dry run or a refused reload, which never served: they go before a new
            // one comes, so that such checks cannot grow the map.
            handles.tls.retain(|_, seen| {
                Arc::strong_count(seen) > 1
                    || !seen
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .is_empty()
            });
        }
        let seen = Arc::clone(handles.tls.entry(virtual_server.to_owned()).or_default());
        drop(handles);
        self.tls_of(virtual_server, seen)
    }

    fn tls_of(&self, virtual_server: &str, seen: Arc<Mutex<TlsSeen>>) -> TlsMetrics {
        let f = &self.families;
        TlsMetrics {
            virtual_server: virtual_server.to_owned(),
            seen,
            full: f.tls_full.clone(),
            resumed: f.tls_resumed.clone(),
            handshakes: f.tls_handshakes.clone(),
            failures: f.tls_handshake_failures.clone(),
            expiry: f.tls_certificate_expiry_timestamp.clone(),
            ocsp_next_update: f.tls_ocsp_next_update_timestamp.clone(),
        }
    }

    /// The upstream TLS handles of one pool.
    pub fn upstream_tls(&self, pool: &str) -> UpstreamTlsMetrics {
        let f = &self.families;
        let get = |kind| {
            f.upstream_tls_handshakes
                .get_or_create_owned(&PoolKindLabels {
                    pool: pool.to_owned(),
                    kind,
                })
        };
        UpstreamTlsMetrics {
            full: get("full"),
            resumed: get("resumed"),
            failed: get("failed"),
        }
    }

    /// Drops a virtual server's series (after a reload removed it). Handles still held keep
    /// working but are no longer exported.
    pub fn remove_virtual_server(&self, name: &str) {
        self.traffic.remove(name);
        self.remove_tls(name);
        let mut handles = self.handles();
        if handles.virtual_servers.remove(name).is_none() {
            return;
        }
        let f = &self.families;
        let labels = VirtualServerLabels {
            virtual_server: name.to_owned(),
        };
        f.client_connections_open.remove(&labels);
        f.client_connections_parked.remove(&labels);
        f.client_connections_resting.remove(&labels);
        f.client_connections_accepted.remove(&labels);
        f.client_connections_rejected.remove(&labels);
        f.bad_requests.remove(&labels);
        f.client_bytes_received.remove(&labels);
        f.client_bytes_sent.remove(&labels);
        for class in StatusClass::ALL {
            f.requests.remove(&VirtualServerClassLabels {
                virtual_server: name.to_owned(),
                class,
            });
        }
        self.remove_http2(name);
    }

    /// Drops a virtual server's TLS series: a reload removed it, or it no longer speaks TLS
    /// (an `https` one now `http`). Handles still held count in the totals only.
    pub fn remove_tls(&self, virtual_server: &str) {
        let seen = self.handles().tls.remove(virtual_server);
        if let Some(seen) = seen {
            self.tls_of(virtual_server, seen).remove_all();
        }
    }

    /// Drops a pool's series (after a reload removed it); its nodes are removed separately.
    pub fn remove_pool(&self, name: &str) {
        let mut handles = self.handles();
        if handles.pools.remove(name).is_none() {
            return;
        }
        let f = &self.families;
        let labels = PoolLabels {
            pool: name.to_owned(),
        };
        for kind in ["full", "resumed", "failed"] {
            f.upstream_tls_handshakes.remove(&PoolKindLabels {
                pool: name.to_owned(),
                kind,
            });
        }
        f.queue_length.remove(&labels);
        f.queue_timeouts.remove(&labels);
        f.queue_abandoned.remove(&labels);
        f.queue_full.remove(&labels);
        f.retries.remove(&labels);
        f.no_node_available.remove(&labels);
        for class in StatusClass::ALL {
            f.pool_requests.remove(&PoolClassLabels {
                pool: name.to_owned(),
                class,
            });
        }
    }

    /// Drops a node's series (after a reload removed it) and its share of the derived ratios.
    pub fn remove_node(&self, pool: &str, address: &str) {
        let mut handles = self.handles();
        let key = (pool.to_owned(), address.to_owned());
        if handles.nodes.remove(&key).is_none() {
            return;
        }
        let f = &self.families;
        let labels = NodeLabels {
            pool: key.0,
            node: key.1,
        };
        f.upstream_connections_open.remove(&labels);
        f.upstream_connections_created.remove(&labels);
        f.upstream_connections_reused.remove(&labels);
        f.node_requests_forwarded.remove(&labels);
        f.node_connect_failures.remove(&labels);
        f.node_responses_5xx.remove(&labels);
        f.node_healthy.remove(&labels);
        f.node_ejections.remove(&labels);
        f.node_response_time_ewma.remove(&labels);
        f.node_tunnels_open.remove(&labels);
        self.remove_upstream_http2(&labels.pool, &labels.node);
    }

    /// Requests forwarded per upstream connection created, over all nodes; 0 when none created.
    pub fn reuse_ratio(&self) -> f64 {
        let handles = self.handles();
        let (forwarded, created) = handles.nodes.values().fold((0u64, 0u64), |(f, c), node| {
            (
                f.saturating_add(node.requests_forwarded.get()),
                c.saturating_add(node.connections_created.get()),
            )
        });
        ratio(forwarded as f64, created as f64)
    }

    /// Open client connections per open upstream connection; 0 when no upstream one is open.
    pub fn offload_ratio(&self) -> f64 {
        let handles = self.handles();
        let client_open: i64 = handles
            .virtual_servers
            .values()
            .map(|vs| vs.connections_open.get().max(0))
            .sum();
        let upstream_open: i64 = handles
            .nodes
            .values()
            .map(|node| node.connections_open.get().max(0))
            .sum();
        ratio(client_open as f64, upstream_open as f64)
    }

    /// Sums over every virtual server and node, for the admin API's stats snapshot.
    pub fn totals(&self) -> Totals {
        let handles = self.handles();
        let mut totals = Totals::default();
        for vs in handles.virtual_servers.values() {
            totals.client_connections_open += vs.connections_open.get().max(0) as u64;
            totals.client_connections_accepted += vs.connections_accepted.get();
            for (class, counter) in vs.requests.iter().enumerate() {
                totals.responses[class] += counter.get();
            }
            totals.bad_requests += vs.bad_requests.get();
        }
        for node in handles.nodes.values() {
            totals.upstream_connections_open += node.connections_open.get().max(0) as u64;
            totals.upstream_connections_created += node.connections_created.get();
            totals.upstream_connections_reused += node.connections_reused.get();
            totals.requests_forwarded += node.requests_forwarded.get();
            totals.connect_failures += node.connect_failures.get();
        }
        drop(handles);
        totals.tls_handshakes_full = self.families.tls_full.get();
        totals.tls_handshakes_resumed = self.families.tls_resumed.get();
        totals
    }

    /// Every metric in OpenMetrics text format (served as [`CONTENT_TYPE`]), with the derived
    /// ratios computed first.
    pub fn encode(&self) -> String {
        for refresh in self.refreshers.lock().iter() {
            refresh();
        }
        self.process.refresh();
        self.reuse_ratio.set(self.reuse_ratio());
        self.offload_ratio.set(self.offload_ratio());
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail, and every label value here encodes infallibly.
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding metrics into a String is infallible");
        out
    }

    fn handles(&self) -> MutexGuard<'_, Handles> {
        // A panic while holding the lock leaves only complete map entries behind, so the
        // data is still consistent: recover it rather than propagate the poison.
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Refreshers {
    fn lock(&self) -> MutexGuard<'_, Vec<Box<dyn Fn() + Send + Sync>>> {
        // A refresher that panicked leaves the list itself intact.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for Refreshers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Refreshers({})", self.lock().len())
    }
}

impl StatusClass {
    /// All classes, in the order of the `requests` arrays.
    pub const ALL: [StatusClass; 5] = [
        StatusClass::Informational,
        StatusClass::Success,
        StatusClass::Redirection,
        StatusClass::ClientError,
        StatusClass::ServerError,
    ];

    /// The class of a status code; `None` outside 100..=599.
    pub fn of(status: u16) -> Option<StatusClass> {
        match status {
            100..=199 => Some(StatusClass::Informational),
            200..=299 => Some(StatusClass::Success),
            300..=399 => Some(StatusClass::Redirection),
            400..=499 => Some(StatusClass::ClientError),
            500..=599 => Some(StatusClass::ServerError),
            _ => None,
        }
    }

    /// The position of this class in a `requests` array.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The label value: `"1xx"` to `"5xx"`.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusClass::Informational => "1xx",
            StatusClass::Success => "2xx",
            StatusClass::Redirection => "3xx",
            StatusClass::ClientError => "4xx",
            StatusClass::ServerError => "5xx",
        }
    }
}

impl VirtualServerMetrics {
    /// Counts one response sent with `status`; statuses outside 100..=599 are not counted.
    #[inline]
    pub fn record_status(&self, status: u16) {
        if let Some(class) = StatusClass::of(status) {
            self.requests[class.index()].inc();
        }
    }

    /// Counts one answered request as its access record has it: its status, the bytes read
    /// of it (head and body), the bytes of its answer, and how long it took.
    #[inline]
    pub fn record_answer(&self, status: u16, received: u64, sent: u64, took: std::time::Duration) {
        self.record_status(status);
        self.bytes_received.inc_by(received);
        self.bytes_sent.inc_by(sent);
        self.latency.record(took);
    }
}

impl PoolMetrics {
    /// Counts one response with `status`; statuses outside 100..=599 are not counted.
    #[inline]
    pub fn record_status(&self, status: u16) {
        if let Some(class) = StatusClass::of(status) {
            self.requests[class.index()].inc();
        }
    }
}

impl Families {
    fn register(&self, r: &mut Registry) {
        register(
            r,
            names::CLIENT_CONNECTIONS_OPEN,
            self.client_connections_open.clone(),
        );
        register(
            r,
            names::CLIENT_CONNECTIONS_PARKED,
            self.client_connections_parked.clone(),
        );
        register(
            r,
            names::CLIENT_CONNECTIONS_RESTING,
            self.client_connections_resting.clone(),
        );
        register(
            r,
            names::CLIENT_CONNECTIONS_ACCEPTED,
            self.client_connections_accepted.clone(),
        );
        register(
            r,
            names::CLIENT_CONNECTIONS_REJECTED,
            self.client_connections_rejected.clone(),
        );
        register(r, names::REQUESTS, self.requests.clone());
        register(r, names::BAD_REQUESTS, self.bad_requests.clone());
        register(
            r,
            names::CLIENT_BYTES_RECEIVED,
            self.client_bytes_received.clone(),
        );
        register(r, names::CLIENT_BYTES_SENT, self.client_bytes_sent.clone());

        register(r, names::POOL_REQUESTS, self.pool_requests.clone());
        register(r, names::QUEUE_LENGTH, self.queue_length.clone());
        register(r, names::QUEUE_TIMEOUTS, self.queue_timeouts.clone());
        register(r, names::QUEUE_ABANDONED, self.queue_abandoned.clone());
        register(r, names::QUEUE_FULL, self.queue_full.clone());
        register(r, names::RETRIES, self.retries.clone());
        register(r, names::NO_NODE_AVAILABLE, self.no_node_available.clone());

        register(
            r,
            names::UPSTREAM_CONNECTIONS_OPEN,
            self.upstream_connections_open.clone(),
        );
        register(
            r,
            names::UPSTREAM_CONNECTIONS_CREATED,
            self.upstream_connections_created.clone(),
        );
        register(
            r,
            names::UPSTREAM_CONNECTIONS_REUSED,
            self.upstream_connections_reused.clone(),
        );
        register(
            r,
            names::NODE_REQUESTS_FORWARDED,
            self.node_requests_forwarded.clone(),
        );
        register(
            r,
            names::NODE_CONNECT_FAILURES,
            self.node_connect_failures.clone(),
        );
        register(
            r,
            names::NODE_RESPONSES_5XX,
            self.node_responses_5xx.clone(),
        );
        register(r, names::NODE_HEALTHY, self.node_healthy.clone());
        register(r, names::NODE_EJECTIONS, self.node_ejections.clone());
        register(
            r,
            names::NODE_RESPONSE_TIME_EWMA,
            self.node_response_time_ewma.clone(),
        );
        register(r, names::NODE_TUNNELS_OPEN, self.node_tunnels_open.clone());

        register(r, names::TLS_HANDSHAKES, self.tls_handshakes.clone());
        register(
            r,
            names::TLS_HANDSHAKE_FAILURES,
            self.tls_handshake_failures.clone(),
        );
        register(
            r,
            names::TLS_CERTIFICATE_EXPIRY_TIMESTAMP,
            self.tls_certificate_expiry_timestamp.clone(),
        );
        register(
            r,
            names::TLS_OCSP_NEXT_UPDATE_TIMESTAMP,
            self.tls_ocsp_next_update_timestamp.clone(),
        );
        register(
            r,
            names::UPSTREAM_TLS_HANDSHAKES,
            self.upstream_tls_handshakes.clone(),
        );
    }
}

impl EncodeLabelValue for StatusClass {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

pub(crate) fn register(registry: &mut Registry, spec: MetricSpec, metric: impl Metric) {
    registry.register(spec.name, spec.help, metric);
}

fn ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator > 0.0 {
        numerator / denominator
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
