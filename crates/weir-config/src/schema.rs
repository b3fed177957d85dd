//! The file as written: serde structs that mirror the TOML, key for key.
//!
//! Every key is optional here and every value keeps its written form (numbers as
//! `i64`, durations and sizes as text) so that validation can check them all and
//! report every problem at once with its key path. Defaults live in
//! [`crate::defaults`]; the rules in [`crate::validate`].

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

// Traffic rules, limits and persistence (issue 14).
pub mod traffic;
pub use traffic::*;
// Layer 4 (issue 13).
pub mod layer4;
pub use layer4::*;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub runtime: Option<RuntimeTable>,
    pub admin: Option<AdminTable>,
    pub log: Option<LogTable>,
    #[serde(default)]
    pub virtual_servers: Named<VirtualServerTable>,
    #[serde(default)]
    pub pools: Named<PoolTable>,
    #[serde(default)]
    pub origins: Vec<OriginTable>,
}

/// `[runtime]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeTable {
    pub threads: Option<i64>,
    pub drain_timeout: Option<DurationText>,
    pub upgrade_socket: Option<String>,
}

/// `[admin]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminTable {
    pub listen: Option<String>,
    pub token_file: Option<String>,
}

/// `[log]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogTable {
    pub access_log: Option<bool>,
    pub access_log_format: Option<String>,
    pub access_log_file: Option<String>,
    pub level: Option<String>,
    pub format: Option<String>,
}

/// `[virtual_servers.NAME]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualServerTable {
    pub listen: Option<OneOrMany<String>>,
    pub protocol: Option<String>,
    pub tls: Option<ServerTlsTable>,
    pub pool: Option<String>,
    pub forwarded_headers: Option<bool>,
    pub backlog: Option<i64>,
    pub defer_accept: Option<bool>,
    pub limits: Option<LimitsTable>,
    pub timeouts: Option<ClientTimeoutsTable>,
    pub http: Option<HttpPolicyTable>,
    #[serde(default)]
    pub routes: Vec<RouteTable>,
    /// Header name → value set on every response.
    pub response_headers: Option<Named<String>>,
    pub cache: Option<CacheTable>,
    pub compression: Option<CompressionTable>,
    pub http2: Option<Http2Table>,
    // --- traffic rules, request id, limits (issue 14) ---
    #[serde(default)]
    pub rules: Vec<RuleTable>,
    pub request_id: Option<RequestIdTable>,
    pub client_address: Option<ClientAddressTable>,
    pub rate_limits: Option<Named<RateLimitTable>>,
    pub concurrency_limits: Option<Named<ConcurrencyLimitTable>>,
    pub client_connections: Option<ClientConnectionsTable>,
    // --- end issue 14 ---
    pub tcp: Option<TcpTable>,
    pub proxy_protocol: Option<ProxyProtocolTable>,
    #[serde(default)]
    pub passthrough: Vec<PassthroughTable>,
}

/// `[virtual_servers.NAME.limits]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsTable {
    pub max_connections: Option<i64>,
    pub max_header_bytes: Option<SizeValue>,
    pub max_headers: Option<i64>,
    pub max_body_bytes: Option<SizeValue>,
    pub request_buffer: Option<SizeValue>,
    pub response_buffer: Option<SizeValue>,
    pub max_requests_per_connection: Option<i64>,
    pub min_body_rate: Option<SizeValue>,
}

/// `[virtual_servers.NAME.timeouts]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTimeoutsTable {
    pub header_read: Option<DurationText>,
    pub idle: Option<DurationText>,
    pub body_read: Option<DurationText>,
    pub body_total: Option<DurationText>,
    pub write: Option<DurationText>,
    pub tunnel_idle: Option<DurationText>,
    pub park_idle: Option<DurationText>,
    pub rest_idle: Option<DurationText>,
}

/// `[virtual_servers.NAME.http]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpPolicyTable {
    pub connect: Option<bool>,
    pub trace: Option<bool>,
    pub upgrades: Option<Vec<String>>,
    pub underscore_headers: Option<String>,
}

/// `[[virtual_servers.NAME.routes]]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTable {
    pub host: Option<String>,
    pub path_prefix: Option<String>,
    pub pool: Option<String>,
    pub cache: Option<CacheTable>,
    pub compression: Option<CompressionTable>,
}

/// `[pools.NAME]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolTable {
    pub algorithm: Option<String>,
    pub nodes: Option<Vec<NodeTable>>,
    pub retries: Option<i64>,
    pub fail_open: Option<bool>,
    pub connections: Option<ConnectionsTable>,
    pub timeouts: Option<UpstreamTimeoutsTable>,
    pub health: Option<HealthTable>,
    pub passive_health: Option<PassiveHealthTable>,
    pub tls: Option<UpstreamTlsTable>,
    pub protocol: Option<String>,
    pub http2: Option<UpstreamHttp2Table>,
    // --- consistent hashing and persistence (issue 14) ---
    pub hash: Option<HashTable>,
    pub persistence: Option<PersistenceTable>,
    // --- end issue 14 ---
    pub proxy_protocol: Option<String>,
    pub dns: Option<DnsTable>,
}

/// `[pools.NAME.dns]`: how nodes given by name are resolved.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsTable {
    pub servers: Option<Vec<String>>,
    pub timeout: Option<DurationText>,
    pub min_ttl: Option<DurationText>,
    pub max_ttl: Option<DurationText>,
    pub families: Option<String>,
}

/// `[virtual_servers.NAME.tls]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsTable {
    pub certificates: Option<Vec<CertificateTable>>,
    pub versions: Option<OneOrMany<String>>,
    pub cipher_suites: Option<Vec<String>>,
    pub groups: Option<Vec<String>>,
    pub alpn: Option<Vec<String>>,
    pub handshake_timeout: Option<DurationText>,
    pub max_handshakes: Option<i64>,
    pub session_tickets: Option<bool>,
    pub ticket_rotation: Option<DurationText>,
    pub session_cache_size: Option<i64>,
    pub session_cache_lifetime: Option<DurationText>,
    pub client_certificates: Option<String>,
    pub client_ca: Option<String>,
    pub client_crl: Option<String>,
    pub client_subject_header: Option<String>,
}

/// One entry of `tls.certificates`: files, or a generated self-signed certificate.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateTable {
    pub cert: Option<String>,
    pub key: Option<String>,
    pub ocsp: Option<String>,
    pub self_signed: Option<Vec<String>>,
}

/// `[pools.NAME.tls]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTlsTable {
    pub verify: Option<bool>,
    pub ca: Option<String>,
    pub server_name: Option<String>,
    pub certificate: Option<String>,
    pub key: Option<String>,
    pub session_resumption: Option<bool>,
    pub versions: Option<OneOrMany<String>>,
}

/// One entry of `nodes`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeTable {
    pub address: Option<String>,
    pub srv: Option<String>,
    pub weight: Option<i64>,
    pub state: Option<String>,
}

/// `[pools.NAME.connections]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsTable {
    pub max_connections: Option<i64>,
    pub queue_length: Option<i64>,
    pub queue_timeout: Option<DurationText>,
    pub fair_queue: Option<bool>,
    pub leave_queue_on_close: Option<bool>,
    pub idle_timeout: Option<DurationText>,
    pub max_requests_per_connection: Option<i64>,
    pub max_tunnels: Option<i64>,
}

/// `[pools.NAME.timeouts]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTimeoutsTable {
    pub connect: Option<DurationText>,
    pub response: Option<DurationText>,
    pub write: Option<DurationText>,
}

/// `[pools.NAME.health]`: one table for both kinds; validation rejects HTTP keys on
/// a TCP monitor.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthTable {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub method: Option<String>,
    pub path: Option<String>,
    pub host: Option<String>,
    pub expect_status: Option<OneOrMany<StatusValue>>,
    pub interval: Option<DurationText>,
    pub timeout: Option<DurationText>,
    pub rise: Option<i64>,
    pub fall: Option<i64>,
}

/// `[pools.NAME.passive_health]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassiveHealthTable {
    pub consecutive_failures: Option<i64>,
    pub base_ejection: Option<DurationText>,
    pub max_ejection: Option<DurationText>,
    pub max_ejected_percent: Option<i64>,
}

/// `[[origins]]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginTable {
    pub name: Option<String>,
    pub listen: Option<String>,
    pub max_connections: Option<i64>,
    pub keep_alive: Option<bool>,
}

/// A table of named tables (`[pools.web]`, `[pools.api]`), kept in file order.
#[derive(Debug)]
pub struct Named<T>(pub Vec<(String, T)>);

/// A value written either alone or as an array: `listen = "a"` or `listen = ["a", "b"]`.
#[derive(Debug)]
pub struct OneOrMany<T> {
    pub values: Vec<T>,
    /// Written as an array (so errors name elements as `key[i]`).
    pub array: bool,
}

/// A duration as written (`"5s"`); parsed during validation.
#[derive(Debug, Clone)]
pub struct DurationText(pub String);

/// A byte size as written: whole bytes, or text with a unit (`"16KiB"`).
#[derive(Debug, Clone)]
pub enum SizeValue {
    Bytes(i64),
    Text(String),
}

/// An expected status as written: `200`, `"200"`, `"200-399"` or `"2xx"`.
#[derive(Debug, Clone)]
pub enum StatusValue {
    Code(i64),
    Text(String),
}

/// The one key of the table the TOML reader hands a date-time on as.
pub(crate) const TOML_DATETIME_KEY: &str = "$__toml_private_datetime";

impl<T> Default for Named<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Named<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NamedVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for NamedVisitor<T> {
            type Value = Named<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of named tables")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    // The TOML reader hands a date-time on as a table with this one key:
                    // taken as a name, it would become a header called so.
                    if name == TOML_DATETIME_KEY {
                        return Err(serde::de::Error::custom(
                            "invalid type: date-time, expected a table",
                        ));
                    }
                    let value = map.next_value::<T>()?;
                    entries.push((name, value));
                }
                Ok(Named(entries))
            }
        }

        deserializer.deserialize_map(NamedVisitor(PhantomData))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OneOrManyVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrManyVisitor<T> {
            type Value = OneOrMany<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value or an array of values")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut values = Vec::new();
                while let Some(value) = seq.next_element()? {
                    values.push(value);
                }
                Ok(OneOrMany {
                    values,
                    array: true,
                })
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                let value = T::deserialize(de::value::StrDeserializer::new(text))?;
                Ok(OneOrMany {
                    values: vec![value],
                    array: false,
                })
            }

            fn visit_i64<E: de::Error>(self, number: i64) -> Result<Self::Value, E> {
                let value = T::deserialize(de::value::I64Deserializer::new(number))?;
                Ok(OneOrMany {
                    values: vec![value],
                    array: false,
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let value = T::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(OneOrMany {
                    values: vec![value],
                    array: false,
                })
            }
        }

        deserializer.deserialize_any(OneOrManyVisitor(PhantomData))
    }
}

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = DurationText;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"250ms\", \"5s\" or \"2m\"")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(DurationText(text.to_owned()))
            }
        }

        deserializer.deserialize_str(DurationVisitor)
    }
}

impl<'de> Deserialize<'de> for SizeValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;

        impl Visitor<'_> for SizeVisitor {
            type Value = SizeValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: whole bytes such as 65536, or a string such as \"64KiB\"")
            }

            fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<Self::Value, E> {
                Ok(SizeValue::Bytes(bytes))
            }

            fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<Self::Value, E> {
                Ok(SizeValue::Bytes(i64::try_from(bytes).unwrap_or(i64::MAX)))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(SizeValue::Text(text.to_owned()))
            }
        }

        deserializer.deserialize_any(SizeVisitor)
    }
}

impl<'de> Deserialize<'de> for StatusValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StatusVisitor;

        impl Visitor<'_> for StatusVisitor {
            type Value = StatusValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a status such as 200, \"200-399\" or \"2xx\"")
            }

            fn visit_i64<E: de::Error>(self, code: i64) -> Result<Self::Value, E> {
                Ok(StatusValue::Code(code))
            }

            fn visit_u64<E: de::Error>(self, code: u64) -> Result<Self::Value, E> {
                Ok(StatusValue::Code(i64::try_from(code).unwrap_or(i64::MAX)))
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(StatusValue::Text(text.to_owned()))
            }
        }

        deserializer.deserialize_any(StatusVisitor)
    }
}

/// `[virtual_servers.NAME.cache]`, or a route's `cache` (rules only).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheTable {
    pub enabled: Option<bool>,
    // The store: virtual server only.
    pub size: Option<SizeValue>,
    pub max_object_size: Option<SizeValue>,
    pub purge_from: Option<Vec<String>>,
    pub status_header: Option<String>,
    // Rules: a route may override them.
    pub heuristic_percent: Option<i64>,
    pub heuristic_max: Option<DurationText>,
    pub stale_while_revalidate: Option<DurationText>,
    pub stale_if_error: Option<DurationText>,
    pub set_cookie: Option<String>,
    pub request_cache_control: Option<bool>,
    pub coalesce: Option<bool>,
    pub coalesce_timeout: Option<DurationText>,
    pub coalesce_max_waiters: Option<i64>,
    pub targeted_cache_control: Option<Vec<String>>,
}

/// `[virtual_servers.NAME.compression]`, or a route's `compression`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressionTable {
    pub enabled: Option<bool>,
    pub algorithms: Option<Vec<String>>,
    pub min_size: Option<SizeValue>,
    pub content_types: Option<Vec<String>>,
    pub gzip_level: Option<i64>,
    pub brotli_level: Option<i64>,
    pub zstd_level: Option<i64>,
}

// HTTP/2 (issue 11): the validated model is in `http2.rs`.

/// `[virtual_servers.NAME.http2]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Http2Table {
    pub cleartext: Option<bool>,
    pub codec: Option<String>,
    pub max_concurrent_streams: Option<i64>,
    pub max_header_list_size: Option<SizeValue>,
    pub header_table_size: Option<SizeValue>,
    pub initial_stream_window: Option<SizeValue>,
    pub initial_connection_window: Option<SizeValue>,
    pub max_frame_size: Option<SizeValue>,
    pub ping_interval: Option<DurationText>,
    pub ping_timeout: Option<DurationText>,
}

/// `[pools.NAME.http2]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamHttp2Table {
    pub codec: Option<String>,
    pub max_concurrent_streams: Option<i64>,
    pub initial_stream_window: Option<SizeValue>,
    pub initial_connection_window: Option<SizeValue>,
    pub ping_interval: Option<DurationText>,
    pub ping_timeout: Option<DurationText>,
}

// End of HTTP/2.
