//! Handles for layer 4 (issue 13): TCP sessions by how they ended, PROXY protocol headers
//! and ClientHellos read for passthrough, per virtual server. Every label value is fixed, so
//! the handles are resolved once and recording is one atomic add.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{Metrics, register};
use crate::names;

/// The `result` values of `weir_tcp_sessions_total`.
pub const SESSION_RESULTS: [&str; 11] = [
    "closed",
    "idle_timeout",
    "client_error",
    "node_error",
    "connect_failed",
    "out_of_resources",
    "no_node",
    "queue_full",
    "queue_timeout",
    "client_left",
    "shutting_down",
];
/// The `result` values of `weir_proxy_protocol_headers_total`.
pub const PROXY_HEADER_RESULTS: [&str; 6] = [
    "accepted",
    "missing",
    "malformed",
    "too_long",
    "timeout",
    "closed",
];
/// The `result` values of `weir_client_hellos_total`.
pub const CLIENT_HELLO_RESULTS: [&str; 10] = [
    "passthrough",
    "terminated",
    "default_pool",
    "not_tls",
    "not_client_hello",
    "malformed",
    "too_large",
    "too_many_records",
    "timeout",
    "closed",
];

/// The layer 4 handles of one virtual server. `Default` gives unregistered handles.
#[derive(Debug, Clone, Default)]
pub struct Layer4Metrics {
    sessions: [Counter; SESSION_RESULTS.len()],
    proxy_headers: [Counter; PROXY_HEADER_RESULTS.len()],
    client_hellos: [Counter; CLIENT_HELLO_RESULTS.len()],
}

impl Layer4Metrics {
    /// Counts a TCP session that ended with `result` (one of [`SESSION_RESULTS`]).
    pub fn session(&self, result: &str) {
        count(&self.sessions, &SESSION_RESULTS, result);
    }

    /// Counts a PROXY header read (or not) with `result` (one of `PROXY_HEADER_RESULTS`).
    pub fn proxy_header(&self, result: &str) {
        count(&self.proxy_headers, &PROXY_HEADER_RESULTS, result);
    }

    /// Counts a ClientHello read with `result` (one of `CLIENT_HELLO_RESULTS`).
    pub fn client_hello(&self, result: &str) {
        count(&self.client_hellos, &CLIENT_HELLO_RESULTS, result);
    }
}

fn count(counters: &[Counter], names: &[&str], value: &str) {
    match names.iter().position(|name| *name == value) {
        Some(index) => {
            counters[index].inc();
        }
        None => debug_assert!(false, "unknown label value {value}"),
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    virtual_server: String,
    result: &'static str,
}

/// The layer 4 families, registered by [`Metrics::new`].
#[derive(Debug, Default)]
pub(crate) struct Layer4Families {
    sessions: Family<ResultLabels, Counter>,
    proxy_headers: Family<ResultLabels, Counter>,
    client_hellos: Family<ResultLabels, Counter>,
}

impl Layer4Families {
    pub(crate) fn register(&self, r: &mut Registry) {
        register(r, names::TCP_SESSIONS, self.sessions.clone());
        register(r, names::PROXY_PROTOCOL_HEADERS, self.proxy_headers.clone());
        register(r, names::CLIENT_HELLOS, self.client_hellos.clone());
    }
}

impl Metrics {
    /// The layer 4 handles of one virtual server; the same name always gives the same series.
    pub fn layer4(&self, virtual_server: &str) -> Layer4Metrics {
        let f = &self.layer4;
        let handles = |family: &Family<ResultLabels, Counter>, result| {
            family.get_or_create_owned(&ResultLabels {
                virtual_server: virtual_server.to_owned(),
                result,
            })
        };
        Layer4Metrics {
            sessions: SESSION_RESULTS.map(|r| handles(&f.sessions, r)),
            proxy_headers: PROXY_HEADER_RESULTS.map(|r| handles(&f.proxy_headers, r)),
            client_hellos: CLIENT_HELLO_RESULTS.map(|r| handles(&f.client_hellos, r)),
        }
    }

    /// Drops a virtual server's layer 4 series (after a reload removed it).
    pub fn remove_layer4(&self, virtual_server: &str) {
        let f = &self.layer4;
        let remove = |family: &Family<ResultLabels, Counter>, results: &[&'static str]| {
            for &result in results {
                family.remove(&ResultLabels {
                    virtual_server: virtual_server.to_owned(),
                    result,
                });
            }
        };
        remove(&f.sessions, &SESSION_RESULTS);
        remove(&f.proxy_headers, &PROXY_HEADER_RESULTS);
        remove(&f.client_hellos, &CLIENT_HELLO_RESULTS);
    }
}
