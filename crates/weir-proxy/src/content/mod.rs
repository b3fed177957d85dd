//! The cache and compression stages of the pipeline (`weir-cache`, wired as
//! `docs/design/cache.md` describes): `cache_lookup` after the request body is
//! read (a hit is answered here, and the request goes no further), and
//! `filter_response` once the node's head is in (stored while it streams to
//! the client, compressed when eligible).
//!
//! What lives where: a virtual server's [`Content`] belongs to its model and
//! holds the route policies (plain values, rebuilt per model) and the
//! `Arc<Cache>` (carried from the previous model when the store's settings
//! are unchanged, contents and all). A request takes a [`Flow`] from
//! [`lookup`](lookup::lookup) when its route caches or compresses.

mod deliver;
mod lookup;
mod relay;

use std::sync::Arc;

use weir_cache::{Cache, CachePolicy, CompressionPolicy, StoreSettings};
use weir_config::{CacheStore, ContentPolicy, VirtualServer};
use weir_observe::{CompressionMetrics, Metrics};

pub(crate) use lookup::{Early, Flow, Looked, hit_now, lookup};
pub(crate) use relay::{node_failed, refresh, respond};

/// What a request may do with the cache and compression, by route.
#[derive(Debug)]
pub(crate) struct RoutePolicy {
    /// `Some` when the route caches (the virtual server has a store).
    pub cache: Option<CachePolicy>,
    pub compression: Option<CompressionPolicy>,
}

/// A virtual server's cache and the policies of its routes, for one model.
#[derive(Debug)]
pub struct Content {
    cache: Option<Arc<Cache>>,
    store: Option<CacheStore>,
    /// The virtual server's own policy (requests that match no route) first,
    /// then one per route, in the order of `config.routes`.
    policies: Vec<RoutePolicy>,
    /// Compression without a cache records here.
    compression_metrics: CompressionMetrics,
}

impl Content {
    /// The content stages of `vs`, or `None` when nothing of it caches or
    /// compresses (the stages are then skipped altogether). `previous` is the
    /// same virtual server's in the running model: its cache is kept when the
    /// store's settings did not change.
    pub(crate) fn build(
        vs: &VirtualServer,
        metrics: &Metrics,
        previous: Option<&Content>,
    ) -> Option<Content> {
        let policy = |content: &ContentPolicy| RoutePolicy {
            cache: vs
                .cache
                .as_ref()
                .zip(content.cache.as_ref())
                .map(|(store, rules)| CachePolicy::from_config(store, rules)),
            compression: content
                .compression
                .as_ref()
                .map(CompressionPolicy::from_config),
        };
        let policies: Vec<RoutePolicy> = std::iter::once(policy(&vs.content))
            .chain(vs.routes.iter().map(|route| policy(&route.content)))
            .collect();
        let used = policies
            .iter()
            .any(|p| p.cache.is_some() || p.compression.is_some());
        if !used && vs.cache.is_none() {
            return None;
        }
        let cache = vs.cache.as_ref().map(|store| {
            let settings = StoreSettings::from_config(store);
            match previous.and_then(|p| p.cache.as_ref()) {
                Some(running) if running.fits(settings) => Arc::clone(running),
                _ => Cache::new(
                    settings,
                    metrics.cache(&vs.name),
                    metrics.compression(&vs.name),
                ),
            }
        });
        Some(Content {
            cache,
            store: vs.cache.clone(),
            policies,
            compression_metrics: metrics.compression(&vs.name),
        })
    }

    /// The virtual server's cache, when it has a `[cache]` table.
    pub fn cache(&self) -> Option<&Arc<Cache>> {
        self.cache.as_ref()
    }

    /// The policy of the request routed by `route` (`None`: no route matched).
    pub(crate) fn policy(&self, route: Option<usize>) -> &RoutePolicy {
        let index = route.map_or(0, |route| route + 1);
        // Built with one entry per route plus the default: never out of range.
        self.policies.get(index).unwrap_or(&self.policies[0])
    }

    /// The debug header's name, when configured.
    pub(crate) fn status_header(&self) -> Option<&str> {
        self.store.as_ref()?.status_header.as_deref()
    }
}
