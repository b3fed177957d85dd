//! `[cache]` and `[compression]` on a virtual server and their per-route
//! overrides: the store's settings belong to the virtual server; the rules
//! (and compression) can be overridden per route, key by key.

use std::time::Duration;

use super::values::{self, show_size};
use super::{Checker, Zero};
use crate::cache::{
    CacheRules, CacheStore, CacheTable, Cidr, Compression, CompressionAlgorithm, CompressionTable,
    ContentPolicy, SetCookieRule,
};
use crate::defaults;
use crate::error::KeyPath;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Store keys, which a route cannot set.
const STORE_KEYS: &[&str] = &["size", "max_object_size", "purge_from", "status_header"];

impl Checker {
    /// A virtual server's cache store and the policy of requests that match no route.
    pub(super) fn content(
        &mut self,
        path: &KeyPath,
        cache: Option<&CacheTable>,
        compression: Option<&CompressionTable>,
    ) -> (Option<CacheStore>, ContentPolicy) {
        let cache_path = path.key("cache");
        let (store, rules) = match cache {
            Some(table) => {
                let store = self.cache_store(&cache_path, table);
                let rules = self.cache_rules(&cache_path, table, &CacheRules::default());
                match table.enabled.unwrap_or(true) {
                    true => (Some(store), Some(rules)),
                    false => (None, None),
                }
            }
            None => (None, None),
        };
        let compression = compression.and_then(|table| {
            self.compression(&path.key("compression"), table, &Compression::default())
        });
        (
            store,
            ContentPolicy {
                cache: rules,
                compression,
            },
        )
    }

    /// A route's policy: the virtual server's, with the route's tables over it.
    pub(super) fn route_content(
        &mut self,
        path: &KeyPath,
        base: &ContentPolicy,
        store: Option<&CacheStore>,
        cache: Option<&CacheTable>,
        compression: Option<&CompressionTable>,
    ) -> ContentPolicy {
        let mut content = base.clone();
        if let Some(table) = cache {
            let cache_path = path.key("cache");
            self.store_keys_on_route(&cache_path, table);
            let base_rules = base.cache.clone().unwrap_or_default();
            let rules = self.cache_rules(&cache_path, table, &base_rules);
            content.cache = match table.enabled {
                Some(false) => None,
                _ if store.is_none() => {
                    self.report(
                        &cache_path,
                        "caching a route needs the virtual server's cache table (it holds the \
                         store): add [virtual_servers.NAME.cache]",
                    );
                    None
                }
                _ => Some(rules),
            };
        }
        if let Some(table) = compression {
            let base = base.compression.clone().unwrap_or_default();
            content.compression = self.compression(&path.key("compression"), table, &base);
        }
        content
    }

    fn store_keys_on_route(&mut self, path: &KeyPath, table: &CacheTable) {
        let set = [
            table.size.is_some(),
            table.max_object_size.is_some(),
            table.purge_from.is_some(),
            table.status_header.is_some(),
        ];
        for (key, present) in STORE_KEYS.iter().zip(set) {
            if present {
                self.report(
                    &path.key(key),
                    "set this on the virtual server's cache table; a route overrides only the rules",
                );
            }
        }
    }

    fn cache_store(&mut self, path: &KeyPath, table: &CacheTable) -> CacheStore {
        let size = self.size(
            &path.key("size"),
            table.size.as_ref(),
            defaults::CACHE_SIZE,
            MIB..=1024 * GIB,
        );
        let max_object_size = self.size(
            &path.key("max_object_size"),
            table.max_object_size.as_ref(),
            defaults::CACHE_MAX_OBJECT_SIZE,
            KIB..=GIB,
        );
        if max_object_size > size / 4 {
            self.report(
                &path.key("max_object_size"),
                format!(
                    "must be at most a quarter of size ({}), so that the store holds several of the largest objects",
                    show_size(size / 4)
                ),
            );
        }
        let purge_from = table.purge_from.as_ref().map_or_else(Vec::new, |networks| {
            networks
                .iter()
                .enumerate()
                .filter_map(|(index, text)| {
                    text.parse::<Cidr>()
                        .map_err(|message| {
                            self.report(&path.key("purge_from").index(index), message)
                        })
                        .ok()
                })
                .collect()
        });
        let status_header = table.status_header.as_ref().and_then(|name| {
            if values::is_token(name) {
                Some(name.trim().to_owned())
            } else {
                self.report(
                    &path.key("status_header"),
                    format!("\"{name}\" is not a valid header name"),
                );
                None
            }
        });
        CacheStore {
            size,
            max_object_size,
            purge_from,
            status_header,
        }
    }

    fn cache_rules(&mut self, path: &KeyPath, table: &CacheTable, base: &CacheRules) -> CacheRules {
        let mut duration = |key: &str, value, default: Duration, zero: Zero| {
            self.duration(&path.key(key), value, default, zero)
        };
        let heuristic_max = duration(
            "heuristic_max",
            table.heuristic_max.as_ref(),
            base.heuristic_max,
            Zero::Allowed,
        );
        let stale_while_revalidate = duration(
            "stale_while_revalidate",
            table.stale_while_revalidate.as_ref(),
            base.stale_while_revalidate,
            Zero::Allowed,
        );
        let stale_if_error = duration(
            "stale_if_error",
            table.stale_if_error.as_ref(),
            base.stale_if_error,
            Zero::Allowed,
        );
        let coalesce_timeout = duration(
            "coalesce_timeout",
            table.coalesce_timeout.as_ref(),
            base.coalesce_timeout,
            Zero::Rejected,
        );
        CacheRules {
            heuristic_percent: self.count(
                &path.key("heuristic_percent"),
                table.heuristic_percent,
                u32::from(base.heuristic_percent),
                0..=100,
            ) as u8,
            heuristic_max,
            stale_while_revalidate,
            stale_if_error,
            set_cookie: self.choice(
                &path.key("set_cookie"),
                table.set_cookie.as_deref(),
                base.set_cookie,
                &[
                    ("pass", SetCookieRule::Pass),
                    ("strip", SetCookieRule::Strip),
                ],
            ),
            request_cache_control: table
                .request_cache_control
                .unwrap_or(base.request_cache_control),
            coalesce: table.coalesce.unwrap_or(base.coalesce),
            coalesce_timeout,
            coalesce_max_waiters: self.count(
                &path.key("coalesce_max_waiters"),
                table.coalesce_max_waiters,
                base.coalesce_max_waiters,
                1..=1_000_000,
            ),
        }
    }

    /// `None` when the table says `enabled = false`.
    fn compression(
        &mut self,
        path: &KeyPath,
        table: &CompressionTable,
        base: &Compression,
    ) -> Option<Compression> {
        let algorithms = match &table.algorithms {
            None => base.algorithms.clone(),
            Some(names) => self.algorithms(&path.key("algorithms"), names),
        };
        let content_types = match &table.content_types {
            None => base.content_types.clone(),
            Some(types) => self.content_types(&path.key("content_types"), types),
        };
        let compression = Compression {
            algorithms,
            min_size: self.size(
                &path.key("min_size"),
                table.min_size.as_ref(),
                base.min_size,
                0..=GIB,
            ),
            content_types,
            gzip_level: self.count(
                &path.key("gzip_level"),
                table.gzip_level,
                base.gzip_level,
                1..=9,
            ),
            brotli_level: self.count(
                &path.key("brotli_level"),
                table.brotli_level,
                base.brotli_level,
                0..=11,
            ),
            zstd_level: self.count(
                &path.key("zstd_level"),
                table.zstd_level,
                base.zstd_level.unsigned_abs(),
                1..=19,
            ) as i32,
        };
        table.enabled.unwrap_or(true).then_some(compression)
    }

    fn algorithms(&mut self, path: &KeyPath, names: &[String]) -> Vec<CompressionAlgorithm> {
        if names.is_empty() {
            self.report(
                path,
                "list at least one of \"zstd\", \"br\", \"gzip\" (or set enabled = false)",
            );
        }
        let mut algorithms = Vec::new();
        for (index, name) in names.iter().enumerate() {
            let algorithm = match name.trim().to_ascii_lowercase().as_str() {
                "gzip" => CompressionAlgorithm::Gzip,
                "br" | "brotli" => CompressionAlgorithm::Brotli,
                "zstd" => CompressionAlgorithm::Zstd,
                _ => {
                    self.report(
                        &path.index(index),
                        format!(
                            "unknown algorithm \"{name}\"; expected \"zstd\", \"br\" or \"gzip\""
                        ),
                    );
                    continue;
                }
            };
            if algorithms.contains(&algorithm) {
                self.report(&path.index(index), format!("\"{name}\" is listed twice"));
            } else {
                algorithms.push(algorithm);
            }
        }
        algorithms
    }

    fn content_types(&mut self, path: &KeyPath, types: &[String]) -> Vec<String> {
        let mut kept = Vec::new();
        for (index, text) in types.iter().enumerate() {
            let lower = text.trim().to_ascii_lowercase();
            let valid = lower.split_once('/').is_some_and(|(top, sub)| {
                values::is_token(top) && (sub == "*" || values::is_token(sub))
            });
            if valid {
                kept.push(lower);
            } else {
                self.report(
                    &path.index(index),
                    format!(
                        "invalid media type \"{text}\"; write it like \"text/html\" or \"text/*\""
                    ),
                );
            }
        }
        kept
    }
}
