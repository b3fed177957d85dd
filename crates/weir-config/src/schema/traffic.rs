//! Traffic rules, request ids, limits and persistence as written in the file
//! (issue 14). Validated by `crate::validate::traffic`.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::{DurationText, Named, OneOrMany};

/// `[[virtual_servers.NAME.rules]]`: a match and the actions taken when it holds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleTable {
    pub name: Option<String>,
    /// The conditions; absent means every request.
    #[serde(rename = "match")]
    pub condition: Option<MatchTable>,
    pub pool: Option<String>,
    pub redirect: Option<RedirectTable>,
    pub respond: Option<RespondTable>,
    pub deny: Option<DenyValue>,
    pub rewrite_path: Option<RewritePathTable>,
    pub request_headers: Option<HeaderEditsTable>,
    pub response_headers: Option<HeaderEditsTable>,
    pub rate_limit: Option<OneOrMany<String>>,
    pub concurrency_limit: Option<OneOrMany<String>>,
}

/// A rule's `match`: every key present must hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchTable {
    pub host: Option<OneOrMany<String>>,
    pub path: Option<OneOrMany<String>>,
    pub path_prefix: Option<OneOrMany<String>>,
    pub path_regex: Option<String>,
    pub method: Option<OneOrMany<String>>,
    pub header: Option<OneOrMany<FieldMatchTable>>,
    pub query: Option<OneOrMany<FieldMatchTable>>,
    pub cookie: Option<OneOrMany<FieldMatchTable>>,
    pub client_address: Option<OneOrMany<String>>,
    pub sni: Option<OneOrMany<String>>,
    pub client_subject: Option<OneOrMany<String>>,
    pub client_subject_regex: Option<String>,
    pub all: Option<Vec<MatchTable>>,
    pub any: Option<Vec<MatchTable>>,
    pub not: Option<Box<MatchTable>>,
}

/// A header, query parameter or cookie test: `name` and one of the others.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldMatchTable {
    pub name: Option<String>,
    pub present: Option<bool>,
    pub equals: Option<OneOrMany<String>>,
    pub regex: Option<String>,
}

/// `redirect = { status = 301, location = "..." }`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedirectTable {
    pub status: Option<i64>,
    pub location: Option<String>,
}

/// `respond = { status = 200, headers = { ... }, body = "..." }`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RespondTable {
    pub status: Option<i64>,
    pub headers: Option<Named<String>>,
    pub body: Option<String>,
}

/// `deny = true` (403) or `deny = 451` (that status).
#[derive(Debug, Clone, Copy)]
pub enum DenyValue {
    Flag(bool),
    Status(i64),
}

/// `rewrite_path`: one of the three forms.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewritePathTable {
    pub strip_prefix: Option<String>,
    pub replace_prefix: Option<String>,
    pub regex: Option<String>,
    pub with: Option<String>,
}

/// `request_headers` / `response_headers` of a rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderEditsTable {
    pub set: Option<Named<String>>,
    pub add: Option<Named<String>>,
    pub remove: Option<OneOrMany<String>>,
}

/// `[virtual_servers.NAME.request_id]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestIdTable {
    pub enabled: Option<bool>,
    pub header: Option<String>,
    pub trust_incoming: Option<bool>,
    pub to_client: Option<bool>,
}

/// `[virtual_servers.NAME.client_address]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientAddressTable {
    pub header: Option<String>,
    pub trusted_proxies: Option<OneOrMany<String>>,
}

/// `[virtual_servers.NAME.rate_limits.LIMIT]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitTable {
    pub key: Option<String>,
    pub rate: Option<i64>,
    pub per: Option<DurationText>,
    pub burst: Option<i64>,
    pub max_keys: Option<i64>,
    pub status: Option<i64>,
}

/// `[virtual_servers.NAME.concurrency_limits.LIMIT]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyLimitTable {
    pub key: Option<String>,
    pub max: Option<i64>,
    pub status: Option<i64>,
    pub retry_after: Option<DurationText>,
}

/// `[virtual_servers.NAME.client_connections]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConnectionsTable {
    pub max: Option<i64>,
    pub retry_after: Option<DurationText>,
}

/// `[pools.NAME.hash]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashTable {
    pub key: Option<String>,
    pub max_load: Option<NumberValue>,
}

/// `[pools.NAME.persistence]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersistenceTable {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub cookie: Option<String>,
    pub header: Option<String>,
    pub secure: Option<bool>,
    pub http_only: Option<bool>,
    pub same_site: Option<String>,
    pub path: Option<String>,
    pub domain: Option<String>,
    pub max_age: Option<DurationText>,
    pub key: Option<String>,
    pub timeout: Option<DurationText>,
    pub max_entries: Option<i64>,
}

/// A number written as an integer (`2`) or a float (`1.25`).
#[derive(Debug, Clone, Copy)]
pub struct NumberValue(pub f64);

impl MatchTable {
    /// No condition written (`match = {}`).
    pub fn is_empty(&self) -> bool {
        let MatchTable {
            host,
            path,
            path_prefix,
            path_regex,
            method,
            header,
            query,
            cookie,
            client_address,
            sni,
            client_subject,
            client_subject_regex,
            all,
            any,
            not,
        } = self;
        host.is_none()
            && path.is_none()
            && path_prefix.is_none()
            && path_regex.is_none()
            && method.is_none()
            && header.is_none()
            && query.is_none()
            && cookie.is_none()
            && client_address.is_none()
            && sni.is_none()
            && client_subject.is_none()
            && client_subject_regex.is_none()
            && all.is_none()
            && any.is_none()
            && not.is_none()
    }
}

impl<'de> Deserialize<'de> for DenyValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DenyVisitor;

        impl Visitor<'_> for DenyVisitor {
            type Value = DenyValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true (answer 403) or a status such as 451")
            }

            fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Self::Value, E> {
                Ok(DenyValue::Flag(flag))
            }

            fn visit_i64<E: de::Error>(self, code: i64) -> Result<Self::Value, E> {
                Ok(DenyValue::Status(code))
            }

            fn visit_u64<E: de::Error>(self, code: u64) -> Result<Self::Value, E> {
                Ok(DenyValue::Status(i64::try_from(code).unwrap_or(i64::MAX)))
            }
        }

        deserializer.deserialize_any(DenyVisitor)
    }
}

impl<'de> Deserialize<'de> for NumberValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberVisitor;

        impl Visitor<'_> for NumberVisitor {
            type Value = NumberValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number such as 1.25")
            }

            fn visit_f64<E: de::Error>(self, value: f64) -> Result<Self::Value, E> {
                Ok(NumberValue(value))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(NumberValue(value as f64))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
                Ok(NumberValue(value as f64))
            }
        }

        deserializer.deserialize_any(NumberVisitor)
    }
}
