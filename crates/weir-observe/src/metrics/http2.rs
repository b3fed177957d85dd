//! Handles for HTTP/2 (issue 11): per virtual server (connections by how
//! HTTP/2 was chosen, streams, floods detected by kind, protocol errors) and
//! per node (streams open, GOAWAYs received, PINGs unanswered). Kept apart
//! from the rest of `metrics.rs` so HTTP/2's families live in one place.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Metrics, register};
use crate::names;

/// The kinds of abuse the HTTP/2 server detects, as `kind` label values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flood {
    /// Streams opened and reset at once (CVE-2023-44487).
    RapidReset,
    /// A header block that never ends (CVE-2024-27316).
    Continuation,
    /// SETTINGS frames (not acknowledgements) far beyond what a client needs.
    Settings,
    /// PING frames (not acknowledgements) far beyond keep-alive needs.
    Ping,
    /// DATA, HEADERS or CONTINUATION frames that carry nothing.
    EmptyFrames,
    /// WINDOW_UPDATE frames far beyond the data weir sent.
    WindowUpdate,
    /// Frames the server acts on not at all (PRIORITY, PRIORITY_UPDATE, unknown
    /// types) far beyond what the client's requests explain.
    IgnoredFrames,
    /// Other abuse the `h2` codec caught itself and answered with
    /// `ENHANCE_YOUR_CALM` (too many streams reset for the client's errors,
    /// too many small DATA frames, resets of streams not yet accepted).
    Codec,
}

impl Flood {
    /// Every kind, in the order of the `floods` handles.
    pub const ALL: [Flood; 8] = [
        Flood::RapidReset,
        Flood::Continuation,
        Flood::Settings,
        Flood::Ping,
        Flood::EmptyFrames,
        Flood::WindowUpdate,
        Flood::IgnoredFrames,
        Flood::Codec,
    ];

    /// The `kind` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Flood::RapidReset => "rapid_reset",
            Flood::Continuation => "continuation",
            Flood::Settings => "settings",
            Flood::Ping => "ping",
            Flood::EmptyFrames => "empty_frames",
            Flood::WindowUpdate => "window_update",
            Flood::IgnoredFrames => "ignored_frames",
            Flood::Codec => "codec",
        }
    }

    fn index(self) -> usize {
        Flood::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }
}

/// The HTTP/2 handles of one virtual server. `Default` gives unregistered
/// handles (for tests).
#[derive(Debug, Clone, Default)]
pub struct Http2Metrics {
    /// Connections served as HTTP/2 after ALPN chose `h2`.
    pub connections_alpn: Counter,
    /// Connections served as HTTP/2 with prior knowledge (h2c).
    pub connections_h2c: Counter,
    /// Streams (requests) received.
    pub streams: Counter,
    /// Connections closed for a protocol error by the client.
    pub protocol_errors: Counter,
    /// Indexed like [`Flood::ALL`].
    floods: [Counter; 8],
}

impl Http2Metrics {
    /// The counter of connections closed for a flood of `kind`.
    pub fn flood(&self, kind: Flood) -> &Counter {
        &self.floods[kind.index()]
    }
}

/// The HTTP/2 handles of one node of one pool.
#[derive(Debug, Clone, Default)]
pub struct UpstreamHttp2Metrics {
    /// Streams open on the node's HTTP/2 connections.
    pub streams_open: Gauge,
    /// GOAWAY frames received from the node.
    pub goaways: Counter,
    /// Connections closed because a PING went unanswered.
    pub ping_timeouts: Counter,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    virtual_server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViaLabels {
    virtual_server: String,
    via: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    virtual_server: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    pool: String,
    node: String,
}

/// HTTP/2's metric families, registered by [`Metrics::new`].
#[derive(Debug, Default)]
pub(crate) struct Http2Families {
    connections: Family<ViaLabels, Counter>,
    streams: Family<Labels, Counter>,
    protocol_errors: Family<Labels, Counter>,
    floods: Family<KindLabels, Counter>,
    upstream_streams_open: Family<NodeLabels, Gauge>,
    upstream_goaways: Family<NodeLabels, Counter>,
    upstream_ping_timeouts: Family<NodeLabels, Counter>,
}

impl Http2Families {
    pub(crate) fn register(&self, r: &mut Registry) {
        register(r, names::HTTP2_CONNECTIONS, self.connections.clone());
        register(r, names::HTTP2_STREAMS, self.streams.clone());
        register(
            r,
            names::HTTP2_PROTOCOL_ERRORS,
            self.protocol_errors.clone(),
        );
        register(r, names::HTTP2_FLOODS, self.floods.clone());
        register(
            r,
            names::UPSTREAM_HTTP2_STREAMS_OPEN,
            self.upstream_streams_open.clone(),
        );
        register(
            r,
            names::UPSTREAM_HTTP2_GOAWAYS,
            self.upstream_goaways.clone(),
        );
        register(
            r,
            names::UPSTREAM_HTTP2_PING_TIMEOUTS,
            self.upstream_ping_timeouts.clone(),
        );
    }
}

impl Metrics {
    /// The HTTP/2 handles of one virtual server; the same name always gives the same series.
    pub fn http2(&self, virtual_server: &str) -> Http2Metrics {
        let f = &self.http2;
        let labels = Labels {
            virtual_server: virtual_server.to_owned(),
        };
        let via = |via| ViaLabels {
            virtual_server: virtual_server.to_owned(),
            via,
        };
        Http2Metrics {
            connections_alpn: f.connections.get_or_create_owned(&via("alpn")),
            connections_h2c: f.connections.get_or_create_owned(&via("h2c")),
            streams: f.streams.get_or_create_owned(&labels),
            protocol_errors: f.protocol_errors.get_or_create_owned(&labels),
            floods: Flood::ALL.map(|kind| {
                f.floods.get_or_create_owned(&KindLabels {
                    virtual_server: virtual_server.to_owned(),
                    kind: kind.as_str(),
                })
            }),
        }
    }

    /// Drops a virtual server's HTTP/2 series (with its other series, after a reload removed it).
    pub(crate) fn remove_http2(&self, virtual_server: &str) {
        let f = &self.http2;
        let labels = Labels {
            virtual_server: virtual_server.to_owned(),
        };
        for via in ["alpn", "h2c"] {
            f.connections.remove(&ViaLabels {
                virtual_server: virtual_server.to_owned(),
                via,
            });
        }
        f.streams.remove(&labels);
        f.protocol_errors.remove(&labels);
        for kind in Flood::ALL {
            f.floods.remove(&KindLabels {
                virtual_server: virtual_server.to_owned(),
                kind: kind.as_str(),
            });
        }
    }

    /// Drops a node's HTTP/2 series (with its other series).
    pub(crate) fn remove_upstream_http2(&self, pool: &str, node: &str) {
        let f = &self.http2;
        let labels = NodeLabels {
            pool: pool.to_owned(),
            node: node.to_owned(),
        };
        f.upstream_streams_open.remove(&labels);
        f.upstream_goaways.remove(&labels);
        f.upstream_ping_timeouts.remove(&labels);
    }

    /// The HTTP/2 handles of one node of a pool.
    pub fn upstream_http2(&self, pool: &str, node: &str) -> UpstreamHttp2Metrics {
        let f = &self.http2;
        let labels = NodeLabels {
            pool: pool.to_owned(),
            node: node.to_owned(),
        };
        UpstreamHttp2Metrics {
            streams_open: f.upstream_streams_open.get_or_create_owned(&labels),
            goaways: f.upstream_goaways.get_or_create_owned(&labels),
            ping_timeouts: f.upstream_ping_timeouts.get_or_create_owned(&labels),
        }
    }
}
