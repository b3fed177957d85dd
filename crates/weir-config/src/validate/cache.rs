//! `[cache]` and `[compression]` on a virtual server and their per-route
//! overrides: the store's settings belong to the virtual server; the rules
//! (and compression) can be overridden per route, key by key.

use std::time::Duration;

use super::values::{self, show_size};
use super::{Checker, Zero};
use crate::cache::{
    CacheRules, CacheStore, Compression, CompressionAlgorithm, ContentPolicy, SetCookieRule,
};
use crate::defaults;
use crate::error::KeyPath;
use crate::schema::{CacheTable, CompressionTable};

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
                    values::cidr(text)
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
            targeted_cache_control: match &table.targeted_cache_control {
                None => base.targeted_cache_control.clone(),
                Some(names) => self.targeted_fields(&path.key("targeted_cache_control"), names),
            },
        }
    }

    /// Field names for RFC 9213's targeted cache control, lower-cased: tokens, not
    /// one of the fields they stand in for, each once, at most 8.
    fn targeted_fields(&mut self, path: &KeyPath, names: &[String]) -> Vec<String> {
        if names.len() > 8 {
            self.report(path, format!("{} names; at most 8", names.len()));
        }
        let mut kept: Vec<String> = Vec::new();
        for (index, name) in names.iter().enumerate().take(8) {
            let lower = name.trim().to_ascii_lowercase();
            let problem = if !values::is_token(&lower) {
                Some(format!("\"{name}\" is not a valid header name"))
            } else if matches!(lower.as_str(), "cache-control" | "expires" | "pragma") {
                Some(format!(
                    "\"{name}\" is what a targeted field overrides; name a field such as \"CDN-Cache-Control\""
                ))
            } else if kept.contains(&lower) {
                Some(format!("\"{name}\" is listed twice"))
            } else {
                None
            };
            match problem {
                Some(message) => self.report(&path.index(index), message),
                None => kept.push(lower),
            }
        }
        kept
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
            // `type/subtype`, `type/*`, or `*/*` for every type.
            let valid = lower.split_once('/').is_some_and(|(top, sub)| {
                values::is_token(top) && (sub == "*" || (top != "*" && values::is_token(sub)))
            });
            if valid {
                kept.push(lower);
            } else {
                self.report(
                    &path.index(index),
                    format!(
                        "invalid media type \"{text}\"; write it like \"text/html\", \"text/*\" or \"*/*\""
                    ),
                );
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::model::*;
    use crate::parse_str;

    /// A valid file with `tables` after `[virtual_servers.web]` and a route.
    fn file(tables: &str) -> String {
        format!(
            "[virtual_servers.web]\nlisten = \"127.0.0.1:8080\"\npool = \"web\"\n\
             [[virtual_servers.web.routes]]\npath_prefix = \"/api/\"\npool = \"web\"\n\
             [pools.web]\nnodes = [{{ address = \"127.0.0.1:8081\" }}]\n{tables}"
        )
    }

    fn valid(tables: &str) -> Config {
        parse_str(&file(tables), "t.toml")
            .unwrap_or_else(|error| panic!("expected valid, got:\n{error}"))
    }

    /// Every error line for `tables`.
    fn errors(tables: &str) -> Vec<String> {
        match parse_str(&file(tables), "t.toml") {
            Ok(_) => panic!("expected errors for:\n{tables}"),
            Err(error) => error.to_string().lines().map(str::to_owned).collect(),
        }
    }

    /// As in every other list of networks: a mistyped prefix would let a whole network
    /// purge.
    #[test]
    fn purge_from_refuses_networks_with_host_bits() {
        for (network, meant) in [
            ("10.0.0.1/8", "10.0.0.0/8"),
            ("2001:db8::1/64", "2001:db8::/64"),
        ] {
            let lines = errors(&format!(
                "[virtual_servers.web.cache]\npurge_from = [\"127.0.0.1\", \"{network}\"]\n"
            ));
            assert!(
                lines.iter().any(|line| line.contains("cache.purge_from[1]")
                    && line.contains(&format!("did you mean \"{meant}\"?"))),
                "{lines:?}"
            );
        }
    }

    #[test]
    fn absent_tables_cache_and_compress_nothing() {
        let config = valid("");
        let server = &config.virtual_servers[0];
        assert_eq!(server.cache, None);
        assert_eq!(server.content, ContentPolicy::default());
        assert_eq!(server.routes[0].content, ContentPolicy::default());
    }

    #[test]
    fn empty_tables_take_the_defaults() {
        let config = valid("[virtual_servers.web.cache]\n[virtual_servers.web.compression]\n");
        let server = &config.virtual_servers[0];
        let store = server.cache.as_ref().unwrap();
        assert_eq!((store.size, store.max_object_size), (256 << 20, 8 << 20));
        assert!(store.purge_from.is_empty() && store.status_header.is_none());
        assert_eq!(server.content.cache, Some(CacheRules::default()));
        assert_eq!(server.content.compression, Some(Compression::default()));
        // Routes inherit the virtual server's policy.
        assert_eq!(server.routes[0].content, server.content);
    }

    #[test]
    fn every_key_converts() {
        let config = valid(
            "[virtual_servers.web.cache]\nsize = \"64MiB\"\nmax_object_size = \"1MiB\"\n\
             purge_from = [\"10.0.0.0/8\", \"::1\"]\nstatus_header = \"X-Cache\"\n\
             heuristic_percent = 10\nheuristic_max = \"1h\"\nstale_while_revalidate = \"30s\"\n\
             stale_if_error = \"10m\"\nset_cookie = \"strip\"\nrequest_cache_control = false\n\
             coalesce = false\ncoalesce_timeout = \"2s\"\ncoalesce_max_waiters = 10\n\
             targeted_cache_control = [\"Weir-Cache-Control\", \"CDN-Cache-Control\"]\n\
             [virtual_servers.web.compression]\nalgorithms = [\"gzip\", \"brotli\"]\n\
             min_size = 0\ncontent_types = [\"Text/HTML\", \"application/*\"]\n\
             gzip_level = 9\nbrotli_level = 11\nzstd_level = 19\n",
        );
        let server = &config.virtual_servers[0];
        let store = server.cache.as_ref().unwrap();
        assert_eq!((store.size, store.max_object_size), (64 << 20, 1 << 20));
        assert_eq!(
            store.purge_from,
            ["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]
        );
        assert_eq!(store.status_header.as_deref(), Some("X-Cache"));
        assert_eq!(
            server.content.cache,
            Some(CacheRules {
                heuristic_percent: 10,
                heuristic_max: Duration::from_secs(3600),
                stale_while_revalidate: Duration::from_secs(30),
                stale_if_error: Duration::from_secs(600),
                set_cookie: SetCookieRule::Strip,
                request_cache_control: false,
                coalesce: false,
                coalesce_timeout: Duration::from_secs(2),
                coalesce_max_waiters: 10,
                targeted_cache_control: vec![
                    "weir-cache-control".into(),
                    "cdn-cache-control".into()
                ],
            })
        );
        assert_eq!(
            server.content.compression,
            Some(Compression {
                algorithms: vec![CompressionAlgorithm::Gzip, CompressionAlgorithm::Brotli],
                min_size: 0,
                content_types: vec!["text/html".into(), "application/*".into()],
                gzip_level: 9,
                brotli_level: 11,
                zstd_level: 19,
            })
        );
    }

    #[test]
    fn routes_override_key_by_key() {
        let config = valid(
            "[virtual_servers.web.cache]\nstale_if_error = \"1m\"\n\
             [virtual_servers.web.compression]\nmin_size = 10\n\
             [virtual_servers.web.routes.cache]\nstale_while_revalidate = \"5s\"\n\
             [virtual_servers.web.routes.compression]\nenabled = false\n",
        );
        let server = &config.virtual_servers[0];
        let route = server.routes[0].content.cache.as_ref().unwrap();
        assert_eq!(route.stale_if_error, Duration::from_secs(60), "inherited");
        assert_eq!(
            route.stale_while_revalidate,
            Duration::from_secs(5),
            "overridden"
        );
        assert_eq!(server.routes[0].content.compression, None);
        assert_eq!(server.content.compression.as_ref().unwrap().min_size, 10);

        let off = valid(
            "[virtual_servers.web.cache]\n[virtual_servers.web.routes.cache]\nenabled = false\n",
        );
        assert_eq!(off.virtual_servers[0].routes[0].content.cache, None);
        // Compression alone needs no store.
        let compress_route = valid("[virtual_servers.web.routes.compression]\n");
        assert!(
            compress_route.virtual_servers[0].routes[0]
                .content
                .compression
                .is_some()
        );
        assert!(
            compress_route.virtual_servers[0]
                .content
                .compression
                .is_none()
        );
    }

    #[test]
    fn errors_name_the_line_and_key() {
        let cases: &[(&str, &str)] = &[
            (
                "[virtual_servers.web.cache]\nsize = \"1KiB\"\n",
                "t.toml:10: virtual_servers.web.cache.size: must be at least 1MiB",
            ),
            (
                "[virtual_servers.web.cache]\nsize = \"16MiB\"\nmax_object_size = \"8MiB\"\n",
                "t.toml:11: virtual_servers.web.cache.max_object_size: must be at most a quarter of size",
            ),
            (
                "[virtual_servers.web.cache]\npurge_from = [\"10.0.0.0/40\"]\n",
                "t.toml:10: virtual_servers.web.cache.purge_from[0]: invalid network \"10.0.0.0/40\"",
            ),
            (
                "[virtual_servers.web.cache]\nstatus_header = \"X Cache\"\n",
                "virtual_servers.web.cache.status_header: \"X Cache\" is not a valid header name",
            ),
            (
                "[virtual_servers.web.cache]\nheuristic_percent = 101\n",
                "virtual_servers.web.cache.heuristic_percent: must be between 0 and 100",
            ),
            (
                "[virtual_servers.web.cache]\nset_cookie = \"keep\"\n",
                "virtual_servers.web.cache.set_cookie: invalid value \"keep\"",
            ),
            (
                "[virtual_servers.web.cache]\ncoalesce_timeout = \"0s\"\n",
                "virtual_servers.web.cache.coalesce_timeout: must be longer than zero",
            ),
            (
                "[virtual_servers.web.cache]\ncoalesce_max_waiters = 0\n",
                "virtual_servers.web.cache.coalesce_max_waiters: must be between 1 and 1000000",
            ),
            (
                "[virtual_servers.web.cache]\ntargeted_cache_control = [\"CDN Cache\"]\n",
                "virtual_servers.web.cache.targeted_cache_control[0]: \"CDN Cache\" is not a valid header name",
            ),
            (
                "[virtual_servers.web.cache]\ntargeted_cache_control = [\"Cache-Control\"]\n",
                "virtual_servers.web.cache.targeted_cache_control[0]: \"Cache-Control\" is what a targeted field overrides",
            ),
            (
                "[virtual_servers.web.cache]\ntargeted_cache_control = [\"a\", \"A\"]\n",
                "virtual_servers.web.cache.targeted_cache_control[1]: \"A\" is listed twice",
            ),
            (
                "[virtual_servers.web.cache]\nttl = \"5s\"\n",
                "t.toml:10: virtual_servers.web.cache.ttl: unknown key",
            ),
            (
                "[virtual_servers.web.routes.cache]\n",
                "t.toml:9: virtual_servers.web.routes[0].cache: caching a route needs the virtual server's cache table",
            ),
            (
                "[virtual_servers.web.cache]\n[virtual_servers.web.routes.cache]\nsize = \"1GiB\"\n",
                "virtual_servers.web.routes[0].cache.size: set this on the virtual server's cache table",
            ),
            (
                "[virtual_servers.web.compression]\nalgorithms = [\"lzma\"]\n",
                "t.toml:10: virtual_servers.web.compression.algorithms[0]: unknown algorithm \"lzma\"",
            ),
            (
                "[virtual_servers.web.compression]\nalgorithms = [\"gzip\", \"gzip\"]\n",
                "virtual_servers.web.compression.algorithms[1]: \"gzip\" is listed twice",
            ),
            (
                "[virtual_servers.web.compression]\nalgorithms = []\n",
                "virtual_servers.web.compression.algorithms: list at least one",
            ),
            (
                "[virtual_servers.web.compression]\ncontent_types = [\"html\"]\n",
                "virtual_servers.web.compression.content_types[0]: invalid media type \"html\"",
            ),
            (
                "[virtual_servers.web.compression]\ngzip_level = 10\n",
                "virtual_servers.web.compression.gzip_level: must be between 1 and 9",
            ),
            (
                "[virtual_servers.web.compression]\nbrotli_level = 12\n",
                "virtual_servers.web.compression.brotli_level: must be between 0 and 11",
            ),
            (
                "[virtual_servers.web.compression]\nzstd_level = 0\n",
                "virtual_servers.web.compression.zstd_level: must be between 1 and 19",
            ),
        ];
        for (tables, expected) in cases {
            let lines = errors(tables);
            assert_eq!(lines.len(), 1, "{tables}: {lines:#?}");
            assert!(
                lines[0].contains(expected),
                "{tables}: expected {expected:?}, got {:?}",
                lines[0]
            );
        }
    }
}
