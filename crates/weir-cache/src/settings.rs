//! From the validated configuration (`weir-config`) to the values the cache
//! reads: built once per model, at start-up and on reload.

use weir_config::{CacheRules, CacheStore, Compression, CompressionAlgorithm, SetCookieRule};

use crate::cache::StoreSettings;
use crate::compress::{Coding, CompressionPolicy, Levels};
use crate::policy::{CachePolicy, SetCookie};

impl StoreSettings {
    /// The store settings of a virtual server's `[cache]` table.
    pub fn from_config(store: &CacheStore) -> StoreSettings {
        StoreSettings {
            size: usize::try_from(store.size).unwrap_or(usize::MAX),
            max_object_size: usize::try_from(store.max_object_size).unwrap_or(usize::MAX),
        }
    }
}

impl CachePolicy {
    /// A route's cache policy: its rules and its virtual server's store limits.
    pub fn from_config(store: &CacheStore, rules: &CacheRules) -> CachePolicy {
        CachePolicy {
            max_object_size: store.max_object_size,
            heuristic_percent: rules.heuristic_percent,
            heuristic_max: rules.heuristic_max.as_secs(),
            stale_while_revalidate: rules.stale_while_revalidate.as_secs(),
            stale_if_error: rules.stale_if_error.as_secs(),
            set_cookie: match rules.set_cookie {
                SetCookieRule::Pass => SetCookie::Pass,
                SetCookieRule::Strip => SetCookie::Strip,
            },
            request_directives: rules.request_cache_control,
            coalesce: rules.coalesce,
            coalesce_timeout: rules.coalesce_timeout,
            coalesce_max_waiters: rules.coalesce_max_waiters,
            targeted: rules.targeted_cache_control.clone(),
            ..CachePolicy::default()
        }
    }
}

impl CompressionPolicy {
    /// The compression policy of a `[compression]` table.
    pub fn from_config(compression: &Compression) -> CompressionPolicy {
        CompressionPolicy {
            codings: compression
                .algorithms
                .iter()
                .map(|algorithm| match algorithm {
                    CompressionAlgorithm::Gzip => Coding::Gzip,
                    CompressionAlgorithm::Brotli => Coding::Brotli,
                    CompressionAlgorithm::Zstd => Coding::Zstd,
                })
                .collect(),
            levels: Levels {
                gzip: compression.gzip_level,
                brotli: compression.brotli_level,
                zstd: compression.zstd_level,
            },
            min_size: compression.min_size,
            content_types: compression.content_types.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_agree_with_the_configuration() {
        // The crate's own defaults and weir-config's must say the same thing.
        let config = weir_config::Compression::default();
        assert_eq!(
            CompressionPolicy::from_config(&config),
            CompressionPolicy::default()
        );
        let store = CacheStore {
            size: weir_config::defaults::CACHE_SIZE,
            max_object_size: weir_config::defaults::CACHE_MAX_OBJECT_SIZE,
            purge_from: Vec::new(),
            status_header: None,
        };
        assert_eq!(
            CachePolicy::from_config(&store, &CacheRules::default()),
            CachePolicy::default()
        );
    }
}
