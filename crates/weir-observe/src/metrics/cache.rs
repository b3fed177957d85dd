//! Handles for the cache and compression of a virtual server (weir-cache
//! records into them). Kept apart from the rest of `metrics.rs` so the cache's families
//! live in one place.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Metrics, register};
use crate::names;

/// The cache handles of one virtual server. `Default` gives unregistered
/// handles (for tests and benchmarks).
#[derive(Debug, Clone, Default)]
pub struct CacheMetrics {
    /// Requests answered from the cache with a fresh object.
    pub hits: Counter,
    /// Cacheable requests sent to a node because nothing usable was stored.
    pub misses: Counter,
    /// Requests answered with a stale object.
    pub stale_served: Counter,
    /// Requests answered from another request's fill they waited for, instead of going to
    /// a node.
    pub coalesced: Counter,
    /// Requests waiting now for another request's fill.
    pub waiting: Gauge,
    /// Stored objects confirmed by a node with 304 Not Modified.
    pub revalidated: Counter,
    /// Bytes held by the store now.
    pub bytes_stored: Gauge,
    /// Bytes of bodies being filled that the store does not charge (their length unknown
    /// until complete, or taken out of the store while filling).
    pub bytes_filling: Gauge,
    /// Objects held by the store now.
    pub objects: Gauge,
    /// Objects evicted to make room.
    pub evictions: Counter,
}

/// Compression byte counters of one virtual server, per algorithm.
#[derive(Debug, Clone, Default)]
pub struct CompressionMetrics {
    /// Indexed like [`CompressionMetrics::ALGORITHMS`].
    pub bytes_in: [Counter; 3],
    /// Bytes out of each compressor, indexed like `bytes_in`.
    pub bytes_out: [Counter; 3],
}

impl CompressionMetrics {
    /// The `algorithm` label values, in the order of the arrays.
    pub const ALGORITHMS: [&'static str; 3] = ["gzip", "brotli", "zstd"];

    /// The (in, out) counters of an algorithm named as in [`Self::ALGORITHMS`].
    pub fn of(&self, algorithm: &str) -> Option<(Counter, Counter)> {
        let index = Self::ALGORITHMS
            .iter()
            .position(|name| *name == algorithm)?;
        Some((self.bytes_in[index].clone(), self.bytes_out[index].clone()))
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    virtual_server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlgorithmLabels {
    virtual_server: String,
    algorithm: &'static str,
}

/// The cache's metric families, registered by [`Metrics::new`].
#[derive(Debug, Default)]
pub(crate) struct CacheFamilies {
    hits: Family<Labels, Counter>,
    misses: Family<Labels, Counter>,
    stale_served: Family<Labels, Counter>,
    coalesced: Family<Labels, Counter>,
    waiting: Family<Labels, Gauge>,
    revalidated: Family<Labels, Counter>,
    bytes_stored: Family<Labels, Gauge>,
    bytes_filling: Family<Labels, Gauge>,
    objects: Family<Labels, Gauge>,
    evictions: Family<Labels, Counter>,
    compression_in: Family<AlgorithmLabels, Counter>,
    compression_out: Family<AlgorithmLabels, Counter>,
}

impl CacheFamilies {
    pub(crate) fn register(&self, r: &mut Registry) {
        register(r, names::CACHE_HITS, self.hits.clone());
        register(r, names::CACHE_MISSES, self.misses.clone());
        register(r, names::CACHE_STALE_SERVED, self.stale_served.clone());
        register(r, names::CACHE_COALESCED, self.coalesced.clone());
        register(r, names::CACHE_WAITING, self.waiting.clone());
        register(r, names::CACHE_REVALIDATED, self.revalidated.clone());
        register(r, names::CACHE_BYTES_STORED, self.bytes_stored.clone());
        register(r, names::CACHE_BYTES_FILLING, self.bytes_filling.clone());
        register(r, names::CACHE_OBJECTS, self.objects.clone());
        register(r, names::CACHE_EVICTIONS, self.evictions.clone());
        register(r, names::COMPRESSION_BYTES_IN, self.compression_in.clone());
        register(
            r,
            names::COMPRESSION_BYTES_OUT,
            self.compression_out.clone(),
        );
    }
}

impl Metrics {
    /// The cache handles of one virtual server; the same name always gives the same series.
    pub fn cache(&self, virtual_server: &str) -> CacheMetrics {
        let f = &self.cache;
        let labels = Labels {
            virtual_server: virtual_server.to_owned(),
        };
        CacheMetrics {
            hits: f.hits.get_or_create_owned(&labels),
            misses: f.misses.get_or_create_owned(&labels),
            stale_served: f.stale_served.get_or_create_owned(&labels),
            coalesced: f.coalesced.get_or_create_owned(&labels),
            waiting: f.waiting.get_or_create_owned(&labels),
            revalidated: f.revalidated.get_or_create_owned(&labels),
            bytes_stored: f.bytes_stored.get_or_create_owned(&labels),
            bytes_filling: f.bytes_filling.get_or_create_owned(&labels),
            objects: f.objects.get_or_create_owned(&labels),
            evictions: f.evictions.get_or_create_owned(&labels),
        }
    }

    /// The compression counters of one virtual server.
    pub fn compression(&self, virtual_server: &str) -> CompressionMetrics {
        let f = &self.cache;
        let labels = |algorithm| AlgorithmLabels {
            virtual_server: virtual_server.to_owned(),
            algorithm,
        };
        CompressionMetrics {
            bytes_in: CompressionMetrics::ALGORITHMS
                .map(|algorithm| f.compression_in.get_or_create_owned(&labels(algorithm))),
            bytes_out: CompressionMetrics::ALGORITHMS
                .map(|algorithm| f.compression_out.get_or_create_owned(&labels(algorithm))),
        }
    }

    /// Drops a virtual server's cache and compression series (after a reload removed it).
    pub fn remove_cache(&self, virtual_server: &str) {
        let f = &self.cache;
        let labels = Labels {
            virtual_server: virtual_server.to_owned(),
        };
        for family in [
            &f.hits,
            &f.misses,
            &f.stale_served,
            &f.coalesced,
            &f.revalidated,
            &f.evictions,
        ] {
            family.remove(&labels);
        }
        f.bytes_stored.remove(&labels);
        f.bytes_filling.remove(&labels);
        f.objects.remove(&labels);
        f.waiting.remove(&labels);
        for algorithm in CompressionMetrics::ALGORITHMS {
            let labels = AlgorithmLabels {
                virtual_server: virtual_server.to_owned(),
                algorithm,
            };
            f.compression_in.remove(&labels);
            f.compression_out.remove(&labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_handles_record_into_the_registry() {
        let metrics = Metrics::new();
        let cache = metrics.cache("web");
        cache.hits.inc();
        cache.bytes_stored.set(1234);
        let compression = metrics.compression("web");
        let (bytes_in, bytes_out) = compression.of("brotli").unwrap();
        bytes_in.inc_by(100);
        bytes_out.inc_by(20);
        assert!(compression.of("lzma").is_none());
        let text = metrics.encode();
        assert!(
            text.contains("weir_cache_hits_total{virtual_server=\"web\"} 1"),
            "{text}"
        );
        assert!(text.contains("weir_cache_bytes_stored{virtual_server=\"web\"} 1234"));
        assert!(text.contains(
            "weir_compression_bytes_in_total{virtual_server=\"web\",algorithm=\"brotli\"} 100"
        ));
        assert!(text.contains(
            "weir_compression_bytes_out_total{virtual_server=\"web\",algorithm=\"brotli\"} 20"
        ));
        // The same name gives the same series.
        metrics.cache("web").hits.inc();
        assert!(
            metrics
                .encode()
                .contains("weir_cache_hits_total{virtual_server=\"web\"} 2")
        );
        metrics.remove_cache("web");
        assert!(!metrics.encode().contains("virtual_server=\"web\""));
    }
}
