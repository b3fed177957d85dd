//! The `[cache]` and `[compression]` tables of a virtual server and their
//! per-route overrides, validated (their schema as written is in `schema.rs`),
//! and the `Cidr` networks that may send `PURGE`. Validation is in
//! `validate/cache.rs`; defaults in `defaults.rs` (cache block).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

/// A virtual server's cache store and the settings that belong to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStore {
    /// Bound on the bytes held in memory.
    pub size: u64,
    /// Responses larger than this are not stored.
    pub max_object_size: u64,
    /// Client networks allowed to send `PURGE`; empty: the method is forwarded like any other.
    pub purge_from: Vec<Cidr>,
    /// Response header that tells the cache status (`HIT`, `MISS`, ...); `None`: not sent.
    pub status_header: Option<String>,
}

/// What the cache and compression do for the requests of a route (or of
/// the virtual server when no route matches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContentPolicy {
    /// `None`: not cached.
    pub cache: Option<CacheRules>,
    /// `None`: not compressed.
    pub compression: Option<Compression>,
}

/// How responses are cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheRules {
    /// Heuristic freshness (RFC 9111 §4.2.2) as a percentage of the time since
    /// `Last-Modified`; 0 turns it off.
    pub heuristic_percent: u8,
    /// Upper bound on a heuristic lifetime.
    pub heuristic_max: Duration,
    /// Defaults for responses that carry no `stale-while-revalidate` / `stale-if-error`.
    pub stale_while_revalidate: Duration,
    /// How long a stale object may be served while the nodes fail, for responses without their own
    /// `stale-if-error`.
    pub stale_if_error: Duration,
    /// What happens to responses that set cookies.
    pub set_cookie: SetCookieRule,
    /// Honour the client's `Cache-Control` and `Pragma`.
    pub request_cache_control: bool,
    /// Concurrent misses for one object make one request to the node; the others wait for it.
    pub coalesce: bool,
    /// How long a coalesced request waits for the fill before going to the node itself.
    pub coalesce_timeout: Duration,
    /// Most requests waiting for one fill; past it they go to the node themselves.
    pub coalesce_max_waiters: u32,
    /// Targeted cache-control fields obeyed in place of `Cache-Control` (RFC 9213),
    /// most specific first, lower case; empty: none.
    pub targeted_cache_control: Vec<String>,
}

/// What happens to responses that set cookies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCookieRule {
    /// Not stored.
    Pass,
    /// Stored without their `Set-Cookie` fields.
    Strip,
}

/// How responses are compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compression {
    /// In order of preference.
    pub algorithms: Vec<CompressionAlgorithm>,
    /// Bodies declared shorter than this many bytes are sent as they are.
    pub min_size: u64,
    /// Lower-case media types; `text/*` covers a whole type.
    pub content_types: Vec<String>,
    /// gzip level, 1 to 9.
    pub gzip_level: u32,
    /// Brotli quality, 0 to 11.
    pub brotli_level: u32,
    /// zstd level, 1 to 19.
    pub zstd_level: i32,
}

/// A content coding weir can compress responses with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionAlgorithm {
    /// `gzip` (`Content-Encoding: gzip`).
    Gzip,
    /// Brotli (`br`).
    Brotli,
    /// Zstandard (`zstd`).
    Zstd,
}

/// An IP network: an address and a prefix length (`10.0.0.0/8`, `::1/128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    address: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The network's address as written (canonical: IPv4-mapped IPv6 as IPv4).
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// The prefix length in bits (at most 32 for IPv4, 128 for IPv6).
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in this network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match (self.address, ip) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(network) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(network) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// `address/prefix`, or a lone address (a network of one).
    fn from_str(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address.parse().map_err(|_| {
            format!("invalid network \"{text}\": write it like \"10.0.0.0/8\" or \"::1/128\"")
        })?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|prefix| *prefix <= bits)
                .ok_or_else(|| {
                    format!("invalid network \"{text}\": the prefix length must be 0 to {bits}")
                })?,
        };
        // An IPv4-mapped network (`::ffff:127.0.0.0/104`) is the IPv4 one it maps,
        // which is what clients are matched as; a shorter prefix stays IPv6.
        match address {
            IpAddr::V6(v6) if prefix >= 96 && v6.to_ipv4_mapped().is_some() => Ok(Cidr {
                address: address.to_canonical(),
                prefix: prefix - 96,
            }),
            _ => Ok(Cidr { address, prefix }),
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks() {
        let net: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains("10.1.255.1".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()));
        let any: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains("192.0.2.1".parse().unwrap()));
        assert!(!any.contains("::1".parse().unwrap()));
        // IPv4-mapped networks are the IPv4 networks they map.
        let mapped: Cidr = "::ffff:127.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "127.0.0.0/8");
        assert!(mapped.contains("127.1.2.3".parse().unwrap()));
        let mapped: Cidr = "::ffff:0:0/96".parse().unwrap();
        assert_eq!(mapped.to_string(), "0.0.0.0/0");
        let mapped: Cidr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(mapped.to_string(), "127.0.0.1/32");
        let one: Cidr = "::1".parse().unwrap();
        assert_eq!(one.to_string(), "::1/128");
        assert!(one.contains("::1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "::/129", "host/8", "10.0.0.0/x", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
