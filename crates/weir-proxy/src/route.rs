//! A virtual server at run time, and the `route` stage: which pool serves a request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use weir_config::{PoolId, VirtualServer};
use weir_http::{Limits, RequestHead};
use weir_observe::{AccessLog, VirtualServerMetrics};
use weir_upstream::Pool;

use crate::model::{ModelCell, ModelLink, VirtualServerShared};
use crate::tls::TlsTermination;

/// A virtual server of one model (one generation of the configuration), with its pools
/// resolved and its metric handles taken. A request keeps the one it started with.
#[derive(Debug)]
pub struct VirtualServerRuntime {
    pub config: VirtualServer,
    pub default_pool: Arc<Pool>,
    pub routes: Vec<(weir_config::Route, Arc<Pool>)>,
    pub metrics: VirtualServerMetrics,
    /// Where this virtual server's access records go; `None` when `log.access_log` is off.
    pub access_log: Option<Arc<AccessLog>>,
    pub(crate) head_limits: Limits,
    /// The model this virtual server belongs to.
    pub generation: u64,
    /// What outlives a model: the count of open client connections, the stop signal.
    pub(crate) shared: Arc<VirtualServerShared>,
    /// Where newer models appear (weak: a model must not keep the cell alive).
    pub(crate) cell: Weak<ModelCell>,
    /// The generation serving now (the cell's counter).
    current_generation: Arc<AtomicU64>,
    /// TLS termination, on an HTTPS virtual server.
    pub tls: Option<Arc<TlsTermination>>,
}

impl VirtualServerRuntime {
    pub(crate) fn new(
        config: &VirtualServer,
        pools: &[Arc<Pool>],
        metrics: VirtualServerMetrics,
        access_log: Option<Arc<AccessLog>>,
        tls: Option<Arc<TlsTermination>>,
        link: ModelLink,
    ) -> VirtualServerRuntime {
        let pool = |PoolId(index): PoolId| Arc::clone(&pools[index]);
        VirtualServerRuntime {
            generation: link.generation,
            shared: link.shared,
            cell: link.cell,
            current_generation: link.current_generation,
            default_pool: pool(config.default_pool),
            routes: config
                .routes
                .iter()
                .map(|route| (route.clone(), pool(route.pool)))
                .collect(),
            metrics,
            access_log,
            head_limits: Limits {
                max_head_bytes: config.limits.max_header_bytes,
                max_headers: config.limits.max_headers,
            },
            tls,
            config: config.clone(),
        }
    }

    /// This virtual server in the model running now, when that is a newer one than this
    /// (`None` when this one is current, or when a reload removed it). A kept-alive
    /// connection calls it before each request; the check is one atomic load.
    pub(crate) fn newer(&self) -> Option<Arc<VirtualServerRuntime>> {
        if self.current_generation.load(Ordering::Acquire) == self.generation {
            return None;
        }
        let cell = self.cell.upgrade()?;
        cell.current().virtual_server(&self.config.name).cloned()
    }

    /// The route stage: the first matching rule's pool, else the default pool.
    pub(crate) fn route(&self, head: &RequestHead) -> &Arc<Pool> {
        if self.routes.is_empty() {
            return &self.default_pool;
        }
        let host = head.host().map(host_without_port);
        let path = head.path();
        for (rule, pool) in &self.routes {
            if rule
                .host
                .as_deref()
                .is_some_and(|want| !host.is_some_and(|h| host_matches(want, h)))
            {
                continue;
            }
            if rule
                .path_prefix
                .as_deref()
                .is_some_and(|prefix| !path.starts_with(prefix.as_bytes()))
            {
                continue;
            }
            return pool;
        }
        &self.default_pool
    }
}

fn host_without_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        // [v6]:port
        return match host.iter().position(|&b| b == b']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(colon) => &host[..colon],
        None => host,
    }
}

/// `want` is lower case; `*.example.com` matches any subdomain of example.com.
fn host_matches(want: &str, host: &[u8]) -> bool {
    if let Some(suffix) = want.strip_prefix("*.") {
        let suffix = suffix.as_bytes();
        host.len() > suffix.len() + 1
            && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            && host[host.len() - suffix.len() - 1] == b'.'
    } else {
        host.eq_ignore_ascii_case(want.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_exactly_or_by_wildcard() {
        assert!(host_matches("api.example.com", b"API.example.com"));
        assert!(!host_matches("api.example.com", b"example.com"));
        assert!(host_matches("*.example.com", b"a.example.com"));
        assert!(host_matches("*.example.com", b"a.b.example.com"));
        assert!(!host_matches("*.example.com", b"example.com"));
        assert!(!host_matches("*.example.com", b"aexample.com"));
        assert_eq!(host_without_port(b"a.com:8080"), b"a.com");
        assert_eq!(host_without_port(b"[::1]:8080"), b"[::1]");
        assert_eq!(host_without_port(b"a.com"), b"a.com");
    }
}
