//! Issue 14's settings besides the rules: named rate and concurrency limits,
//! per-client connections, the request id, where the client address comes
//! from, and a pool's consistent-hash key and session persistence.

use std::num::NonZeroU32;
use std::time::Duration;

use super::{Checker, Zero, values};
use crate::defaults;
use crate::error::KeyPath;
use crate::model::{
    Algorithm, ClientAddressSource, ClientConnectionLimit, ConcurrencyLimit, HashSettings,
    InsertedCookie, KeySource, Persistence, PersistenceMode, Pool, RateLimit, RequestIdSettings,
};
use crate::schema::{
    ClientAddressTable, ClientConnectionsTable, ConcurrencyLimitTable, HashTable, Named,
    PersistenceTable, RateLimitTable, RequestIdTable,
};

/// Shortest secret accepted for signing persistence cookies.
const MIN_KEY_BYTES: usize = 16;
/// Longest a rate limit's empty bucket may take to refill (`burst × per / rate`).
const MAX_RATE_LIMIT_REFILL: Duration = Duration::from_secs(10 * 365 * 86_400);

impl Checker {
    pub(super) fn rate_limits(
        &mut self,
        path: &KeyPath,
        tables: Option<&Named<RateLimitTable>>,
    ) -> Vec<RateLimit> {
        let Some(tables) = tables else {
            return Vec::new();
        };
        let mut limits = Vec::new();
        for (name, table) in &tables.0 {
            let at = path.key(name);
            self.name(&at, name);
            let key = match &table.key {
                None => KeySource::ClientAddress,
                Some(text) => self.key_source(&at.key("key"), text, true),
            };
            let Some(rate) = table.rate else {
                self.report(
                    &at.key("rate"),
                    "missing required key: requests allowed per `per`",
                );
                continue;
            };
            let rate = self.nonzero(
                &at.key("rate"),
                Some(rate),
                NonZeroU32::MIN,
                1..=1_000_000_000,
            );
            let per = self.duration(
                &at.key("per"),
                table.per.as_ref(),
                defaults::RATE_LIMIT_PER,
                Zero::Rejected,
            );
            if per.as_nanos() < u128::from(rate.get()) {
                self.report(&at.key("rate"), "more than one request per nanosecond");
            }
            let burst = self.nonzero(&at.key("burst"), table.burst, rate, 1..=1_000_000_000);
            // The limiter keeps each key's state as nanoseconds in 64 bits: a bucket that
            // takes centuries to refill would overflow them and admit everything.
            let refill = per.as_nanos() / u128::from(rate.get()) * u128::from(burst.get());
            if refill > MAX_RATE_LIMIT_REFILL.as_nanos() {
                self.report(
                    &at.key("burst"),
                    "an empty bucket would take more than 10 years to refill (burst × per / rate); \
                     lower burst or per, or raise rate",
                );
            }
            limits.push(RateLimit {
                name: name.clone(),
                key,
                rate,
                per,
                burst,
                max_keys: self.nonzero(
                    &at.key("max_keys"),
                    table.max_keys,
                    NonZeroU32::new(defaults::RATE_LIMIT_MAX_KEYS).unwrap_or(NonZeroU32::MIN),
                    1..=100_000_000,
                ),
                status: table.status.map_or(defaults::RATE_LIMIT_STATUS, |code| {
                    self.status(&at.key("status"), code, 400..=599)
                }),
            });
        }
        limits
    }

    pub(super) fn concurrency_limits(
        &mut self,
        path: &KeyPath,
        tables: Option<&Named<ConcurrencyLimitTable>>,
    ) -> Vec<ConcurrencyLimit> {
        let Some(tables) = tables else {
            return Vec::new();
        };
        let mut limits = Vec::new();
        for (name, table) in &tables.0 {
            let at = path.key(name);
            self.name(&at, name);
            let Some(max) = table.max else {
                self.report(
                    &at.key("max"),
                    "missing required key: requests in progress at once",
                );
                continue;
            };
            let key = match &table.key {
                None => KeySource::Route,
                Some(text) => self.key_source(&at.key("key"), text, true),
            };
            limits.push(ConcurrencyLimit {
                name: name.clone(),
                key,
                max: self.nonzero(&at.key("max"), Some(max), NonZeroU32::MIN, 1..=u32::MAX),
                status: table
                    .status
                    .map_or(defaults::CONCURRENCY_LIMIT_STATUS, |code| {
                        self.status(&at.key("status"), code, 400..=599)
                    }),
                retry_after: self.retry_after(&at.key("retry_after"), table.retry_after.as_ref()),
            });
        }
        limits
    }

    pub(super) fn client_connections(
        &mut self,
        path: &KeyPath,
        table: &ClientConnectionsTable,
    ) -> ClientConnectionLimit {
        if table.max.is_none() {
            self.report(
                &path.key("max"),
                "missing required key: connections per client address",
            );
        }
        ClientConnectionLimit {
            max: self.nonzero(&path.key("max"), table.max, NonZeroU32::MIN, 1..=u32::MAX),
            retry_after: self.retry_after(&path.key("retry_after"), table.retry_after.as_ref()),
        }
    }

    fn retry_after(
        &mut self,
        path: &KeyPath,
        value: Option<&crate::schema::DurationText>,
    ) -> Duration {
        let duration = self.duration(path, value, defaults::LIMIT_RETRY_AFTER, Zero::Rejected);
        if duration < Duration::from_secs(1) {
            self.report(
                path,
                "Retry-After counts whole seconds: use at least \"1s\"",
            );
        }
        duration
    }

    pub(super) fn request_id(
        &mut self,
        path: &KeyPath,
        table: Option<&RequestIdTable>,
    ) -> RequestIdSettings {
        let Some(table) = table else {
            return RequestIdSettings::default();
        };
        let header = match &table.header {
            Some(name) => match values::added_request_header(name) {
                Ok(()) => name.clone(),
                Err(message) => {
                    self.report(&path.key("header"), message);
                    defaults::REQUEST_ID_HEADER.to_owned()
                }
            },
            None => defaults::REQUEST_ID_HEADER.to_owned(),
        };
        RequestIdSettings {
            enabled: table.enabled.unwrap_or(defaults::REQUEST_ID_ENABLED),
            header,
            trust_incoming: table
                .trust_incoming
                .unwrap_or(defaults::REQUEST_ID_TRUST_INCOMING),
            to_client: table.to_client.unwrap_or(defaults::REQUEST_ID_TO_CLIENT),
        }
    }

    pub(super) fn client_address(
        &mut self,
        path: &KeyPath,
        table: Option<&ClientAddressTable>,
    ) -> ClientAddressSource {
        let Some(table) = table else {
            return ClientAddressSource::default();
        };
        let trusted_proxies = match &table.trusted_proxies {
            Some(list) => self.each(&path.key("trusted_proxies"), list, values::cidr),
            None => Vec::new(),
        };
        let header = match &table.header {
            Some(name) if !values::is_token(name) => {
                self.report(
                    &path.key("header"),
                    format!("\"{name}\" is not a valid header name"),
                );
                None
            }
            Some(_) if table.trusted_proxies.is_none() => {
                self.report(
                    &path.key("trusted_proxies"),
                    "missing required key: a forwarding header is only believed from the \
                     proxies listed here (anyone else could forge it)",
                );
                None
            }
            Some(name) => Some(name.to_ascii_lowercase()),
            None => None,
        };
        if header.is_none() && table.header.is_none() && table.trusted_proxies.is_some() {
            self.report(
                &path.key("header"),
                "missing required key: the header trusted proxies set, such as \"X-Forwarded-For\"",
            );
        }
        ClientAddressSource {
            header,
            trusted_proxies,
        }
    }

    /// `client_address`, `uri`, `path`, `route`, `header:NAME`, `cookie:NAME`, `query:NAME`.
    pub(super) fn key_source(
        &mut self,
        path: &KeyPath,
        text: &str,
        route_allowed: bool,
    ) -> KeySource {
        let source = match text.trim().split_once(':') {
            None => match text.trim() {
                "client_address" => Some(KeySource::ClientAddress),
                "uri" => Some(KeySource::Uri),
                "path" => Some(KeySource::Path),
                "route" if route_allowed => Some(KeySource::Route),
                _ => None,
            },
            Some(("header", name)) if values::is_token(name) => {
                Some(KeySource::Header(name.to_ascii_lowercase()))
            }
            Some(("cookie", name)) if !name.is_empty() => Some(KeySource::Cookie(name.to_owned())),
            Some(("query", name)) if !name.is_empty() => {
                Some(KeySource::QueryParam(name.to_owned()))
            }
            Some(_) => None,
        };
        source.unwrap_or_else(|| {
            let route = if route_allowed { ", \"route\"" } else { "" };
            self.report(
                path,
                format!(
                    "invalid key \"{text}\"; expected \"client_address\", \"uri\", \"path\"{route}, \
                     \"header:NAME\", \"cookie:NAME\" or \"query:NAME\""
                ),
            );
            KeySource::ClientAddress
        })
    }

    /// `[pools.NAME.hash]`, which goes with `algorithm = "consistent_hash"`.
    pub(super) fn hash_settings(
        &mut self,
        path: &KeyPath,
        algorithm: Algorithm,
        table: Option<&HashTable>,
    ) -> Option<HashSettings> {
        if algorithm != Algorithm::ConsistentHash {
            if table.is_some() {
                self.report(path, "a hash table needs algorithm = \"consistent_hash\"");
            }
            return None;
        }
        let Some(table) = table else {
            return Some(HashSettings {
                key: KeySource::ClientAddress,
                max_load: defaults::HASH_MAX_LOAD,
            });
        };
        let key = match &table.key {
            Some(text) => self.key_source(&path.key("key"), text, false),
            None => KeySource::ClientAddress,
        };
        let max_load = match table.max_load {
            None => defaults::HASH_MAX_LOAD,
            Some(value) if (1.0..=100.0).contains(&value.0) => value.0,
            Some(_) => {
                self.report(&path.key("max_load"), "must be between 1.0 and 100.0");
                defaults::HASH_MAX_LOAD
            }
        };
        Some(HashSettings { key, max_load })
    }

    /// Two pools inserting persistence cookies of one name that a browser sends to both
    /// (same domain, one path within the other) overwrite each other's on every answer:
    /// a site routing to both would stick to neither. Refused at the later pool's `cookie`
    /// key, so one is given its own name.
    pub(super) fn persistence_cookies_apart(&mut self, pools_path: &KeyPath, pools: &[Pool]) {
        let mut seen: Vec<(&str, &InsertedCookie)> = Vec::new();
        for pool in pools {
            let Some(Persistence {
                mode: PersistenceMode::Cookie(cookie),
                ..
            }) = &pool.persistence
            else {
                continue;
            };
            let overlaps = |other: &InsertedCookie| {
                other.name == cookie.name
                    && same_cookie_domain(other.domain.as_deref(), cookie.domain.as_deref())
                    && (path_matches(&other.path, &cookie.path)
                        || path_matches(&cookie.path, &other.path))
            };
            if let Some((first, _)) = seen.iter().find(|(_, other)| overlaps(other)) {
                self.report(
                    &pools_path.key(&pool.name).key("persistence").key("cookie"),
                    format!(
                        "pool \"{first}\" inserts the persistence cookie \"{}\" for the same \
                         paths: each pool's answers would overwrite the other's, and clients of \
                         a site that reaches both stick to neither; give this pool its own \
                         `cookie` name",
                        cookie.name
                    ),
                );
            }
            seen.push((&pool.name, cookie));
        }
    }

    pub(super) fn persistence(
        &mut self,
        path: &KeyPath,
        table: &PersistenceTable,
    ) -> Option<Persistence> {
        let kind = table.kind.as_deref().map(str::trim);
        let mode = match kind {
            Some("cookie") => PersistenceMode::Cookie(self.inserted_cookie(path, table)),
            Some("client_address") => PersistenceMode::ClientAddress,
            Some("app_cookie") => match table.cookie.as_deref() {
                Some(name) if values::is_token(name) => PersistenceMode::AppCookie(name.to_owned()),
                _ => {
                    self.report(
                        &path.key("cookie"),
                        "app_cookie needs cookie = the application's cookie name",
                    );
                    return None;
                }
            },
            Some("app_header") => match table.header.as_deref() {
                Some(name) if values::is_token(name) => {
                    PersistenceMode::AppHeader(name.to_ascii_lowercase())
                }
                _ => {
                    self.report(
                        &path.key("header"),
                        "app_header needs header = the application's header name",
                    );
                    return None;
                }
            },
            None => {
                self.report(&path.key("type"), "missing required key: \"cookie\", \"client_address\", \"app_cookie\" or \"app_header\"");
                return None;
            }
            Some(other) => {
                self.report(&path.key("type"), format!("unknown persistence type \"{other}\"; expected \"cookie\", \"client_address\", \"app_cookie\" or \"app_header\""));
                return None;
            }
        };
        self.persistence_keys_fit(path, table, &mode);
        let key = table.key.as_ref().and_then(|key| {
            if key.len() < MIN_KEY_BYTES {
                self.report(
                    &path.key("key"),
                    format!("a signing key needs at least {MIN_KEY_BYTES} bytes"),
                );
                None
            } else {
                Some(key.as_bytes().to_vec())
            }
        });
        Some(Persistence {
            mode,
            key,
            timeout: self.duration(
                &path.key("timeout"),
                table.timeout.as_ref(),
                defaults::PERSISTENCE_TIMEOUT,
                Zero::Rejected,
            ),
            max_entries: self.nonzero(
                &path.key("max_entries"),
                table.max_entries,
                NonZeroU32::new(defaults::PERSISTENCE_MAX_ENTRIES).unwrap_or(NonZeroU32::MIN),
                1..=100_000_000,
            ),
        })
    }

    fn inserted_cookie(&mut self, path: &KeyPath, table: &PersistenceTable) -> InsertedCookie {
        let name = match table.cookie.as_deref() {
            None => defaults::PERSISTENCE_COOKIE.to_owned(),
            Some(name) if values::is_token(name) => name.to_owned(),
            Some(name) => {
                self.report(
                    &path.key("cookie"),
                    format!("\"{name}\" is not a valid cookie name"),
                );
                defaults::PERSISTENCE_COOKIE.to_owned()
            }
        };
        let attribute_ok = |text: &str| {
            !text.is_empty()
                && text
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b';' && b != b',')
        };
        let cookie_path = match table.path.as_deref() {
            None => defaults::PERSISTENCE_PATH.to_owned(),
            Some(text) if text.starts_with('/') && attribute_ok(text) => text.to_owned(),
            Some(text) => {
                self.report(&path.key("path"), format!("invalid cookie path \"{text}\""));
                defaults::PERSISTENCE_PATH.to_owned()
            }
        };
        let domain = table.domain.as_deref().and_then(|text| {
            if attribute_ok(text) {
                Some(text.to_owned())
            } else {
                self.report(
                    &path.key("domain"),
                    format!("invalid cookie domain \"{text}\""),
                );
                None
            }
        });
        let same_site = table.same_site.as_deref().and_then(|text| {
            let value = match text.to_ascii_lowercase().as_str() {
                "lax" => "Lax",
                "strict" => "Strict",
                "none" => "None",
                _ => {
                    self.report(
                        &path.key("same_site"),
                        format!(
                            "invalid value \"{text}\"; expected \"lax\", \"strict\" or \"none\""
                        ),
                    );
                    return None;
                }
            };
            // Browsers drop a `SameSite=None` cookie that is not `Secure`.
            if value == "None" && table.secure == Some(false) {
                self.report(
                    &path.key("same_site"),
                    "\"none\" needs the cookie to be secure (browsers drop it otherwise); \
                     remove secure = false",
                );
                return None;
            }
            Some(value)
        });
        InsertedCookie {
            name,
            secure: table.secure,
            http_only: table.http_only.unwrap_or(defaults::PERSISTENCE_HTTP_ONLY),
            same_site,
            path: cookie_path,
            domain,
            max_age: table.max_age.as_ref().map(|max_age| {
                let at = path.key("max_age");
                // A lifetime, not a timeout: up to the 400 days browsers keep a cookie
                // (RFC 6265bis, Max-Age), as HAProxy's `maxlife` takes days.
                let duration = self.duration_within(
                    &at,
                    Some(max_age),
                    (defaults::PERSISTENCE_TIMEOUT, Zero::Rejected),
                    (Duration::from_secs(400 * 24 * 60 * 60), "400 days"),
                );
                if duration < Duration::from_secs(1) {
                    // Max-Age=0 would tell the browser to drop the cookie at once.
                    self.report(&at, "Max-Age counts whole seconds: use at least \"1s\"");
                }
                duration
            }),
        }
    }

    /// Keys that belong to another persistence type are mistakes, not no-ops.
    fn persistence_keys_fit(
        &mut self,
        path: &KeyPath,
        table: &PersistenceTable,
        mode: &PersistenceMode,
    ) {
        let cookie_only = [
            ("secure", table.secure.is_some()),
            ("http_only", table.http_only.is_some()),
            ("same_site", table.same_site.is_some()),
            ("path", table.path.is_some()),
            ("domain", table.domain.is_some()),
            ("max_age", table.max_age.is_some()),
            ("key", table.key.is_some()),
        ];
        let learned_only = [
            ("timeout", table.timeout.is_some()),
            ("max_entries", table.max_entries.is_some()),
        ];
        let (inserted, cookie_named, header_named) = match mode {
            PersistenceMode::Cookie(_) => (true, true, false),
            PersistenceMode::ClientAddress => (false, false, false),
            PersistenceMode::AppCookie(_) => (false, true, false),
            PersistenceMode::AppHeader(_) => (false, false, true),
        };
        let mut misplaced: Vec<&str> = Vec::new();
        misplaced.extend(
            cookie_only
                .iter()
                .filter(|(_, set)| *set && !inserted)
                .map(|(key, _)| *key),
        );
        misplaced.extend(
            learned_only
                .iter()
                .filter(|(_, set)| *set && inserted)
                .map(|(key, _)| *key),
        );
        if table.cookie.is_some() && !cookie_named {
            misplaced.push("cookie");
        }
        if table.header.is_some() && !header_named {
            misplaced.push("header");
        }
        for key in misplaced {
            self.report(&path.key(key), "does not apply to this persistence type");
        }
    }
}

/// Two `Domain` attributes name the same cookie domain as a browser reads them (RFC 6265
/// §5.2.3): a leading dot left out, without regard to case.
fn same_cookie_domain(a: Option<&str>, b: Option<&str>) -> bool {
    let canonical = |domain: Option<&str>| {
        domain.map(|domain| {
            domain
                .strip_prefix('.')
                .unwrap_or(domain)
                .to_ascii_lowercase()
        })
    };
    canonical(a) == canonical(b)
}

/// A cookie for `path` is sent on requests for `request_path` (RFC 6265 §5.1.4): the same
/// path, or one below it at a `/`.
fn path_matches(path: &str, request_path: &str) -> bool {
    request_path == path
        || (request_path.starts_with(path)
            && (path.ends_with('/') || request_path.as_bytes().get(path.len()) == Some(&b'/')))
}
