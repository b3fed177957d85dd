//! Cache keys. The primary key is the target URI (RFC 9111 §2):
//! `scheme://authority/path?query`, with the authority lower-cased and a
//! default port dropped; everything else byte for byte. The secondary key
//! holds the request's values of the fields the response's `Vary` names
//! (§4.1), with `Accept-Encoding` normalised so that equivalent clients share
//! one variant.

use std::sync::Arc;

use crate::compress::{AcceptEncoding, Coding};
use crate::view::{RequestView, Scheme, list_elements, trim};

/// How `Accept-Encoding` is normalised in a secondary key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodingKey {
    /// The response does not vary on `Accept-Encoding`.
    None,
    /// The node chose the coding: clients that accept the same set of codings share a variant.
    AcceptedSet,
    /// weir compresses: clients for whom weir chooses the same coding share a
    /// variant, so each compressed variant is stored once.
    Chosen,
}

/// What a stored response varies on: the `Vary` field names (lower case,
/// `accept-encoding` left out) and how `Accept-Encoding` is keyed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarySpec {
    /// The `Vary` field names other than `Accept-Encoding`, lower case.
    pub names: Box<[Box<str>]>,
    /// How `Accept-Encoding` takes part in the secondary key.
    pub encoding: EncodingKey,
}

/// A `Vary: *` response: never reused (§4.1), so never stored. Nor is one whose `Vary`
/// names more than [`MAX_VARY_NAMES`] fields: every lookup of its URL would read each of
/// them from the request, and a response varying on so many is personal to each client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VaryStar;

/// The most distinct fields (other than `Accept-Encoding`) a stored response may vary on.
pub const MAX_VARY_NAMES: usize = 32;

impl VarySpec {
    /// A response that varies on nothing.
    pub fn none() -> Arc<VarySpec> {
        Arc::new(VarySpec {
            names: Box::new([]),
            encoding: EncodingKey::None,
        })
    }

    /// Reads `Vary` field values; `weir_compresses` says weir adds
    /// `Vary: Accept-Encoding` itself (and picks the coding).
    pub fn from_values<'a>(
        values: impl Iterator<Item = &'a [u8]>,
        weir_compresses: bool,
    ) -> Result<VarySpec, VaryStar> {
        let mut names: Vec<Box<str>> = Vec::new();
        let mut encoding = if weir_compresses {
            EncodingKey::Chosen
        } else {
            EncodingKey::None
        };
        for element in list_elements(values) {
            if element == b"*" {
                return Err(VaryStar);
            }
            if element.eq_ignore_ascii_case(b"accept-encoding") {
                if encoding == EncodingKey::None {
                    encoding = EncodingKey::AcceptedSet;
                }
                continue;
            }
            // Duplicates are dropped below, by sorting (a check against each name kept
            // so far costs the square of a long list).
            if names.len() > 4 * MAX_VARY_NAMES {
                return Err(VaryStar);
            }
            let name = String::from_utf8_lossy(element).to_ascii_lowercase();
            names.push(name.into_boxed_str());
        }
        names.sort_unstable();
        names.dedup();
        if names.len() > MAX_VARY_NAMES {
            return Err(VaryStar);
        }
        Ok(VarySpec {
            names: names.into_boxed_slice(),
            encoding,
        })
    }

    /// Appends the secondary key of `request` for this spec to `out`:
    /// each named field's values joined with `, `, one per line, then the
    /// encoding key. `chosen` is the coding weir would pick for this client.
    /// A field the request has starts its line with `=`: one sent empty is not one
    /// missing (RFC 9111 §4.1: a missing field matches only a missing one).
    ///
    /// A field the request's `Connection` names is removed before the request is
    /// forwarded (RFC 9110 §7.6.1): the node answered as if it were missing, so the key
    /// reads it as missing. Keyed by the value the client sent, the answer made without
    /// it would be served to every later client that sends that value.
    pub fn secondary_key(&self, request: &impl RequestView, chosen: Coding, out: &mut Vec<u8>) {
        // A spec that reads no field of the request (the common case: no `Vary`, or only
        // weir's) does not read its `Connection` list either.
        let dropped = if self.names.is_empty() && self.encoding != EncodingKey::AcceptedSet {
            [false; MAX_VARY_NAMES + 1]
        } else {
            self.dropped_by_connection(request)
        };
        for (index, name) in self.names.iter().enumerate() {
            let mut first = true;
            if !dropped[index] {
                for value in request.header_values(name) {
                    out.extend_from_slice(if first { b"=" } else { b", " });
                    out.extend_from_slice(trim(value));
                    first = false;
                }
            }
            out.push(b'\n');
        }
        match self.encoding {
            EncodingKey::None => {}
            EncodingKey::Chosen => out.extend_from_slice(chosen.token().as_bytes()),
            EncodingKey::AcceptedSet => {
                let accept = if !dropped[MAX_VARY_NAMES] {
                    AcceptEncoding::parse(request.header_values("accept-encoding"))
                } else {
                    AcceptEncoding::parse(std::iter::empty())
                };
                // Without the field any coding is acceptable (RFC 9110 §12.5.3); with
                // it, only those it lists, and an empty one or `identity` lists none.
                // The node may encode for the first: the two are never one variant.
                if accept.present() {
                    out.push(b'0' + accept.acceptable_set());
                } else {
                    out.push(b'*');
                }
            }
        }
    }

    /// Which of the names (and `Accept-Encoding`, last) the request's `Connection` drops:
    /// its list read once, each token looked up among the sorted names.
    fn dropped_by_connection(&self, request: &impl RequestView) -> [bool; MAX_VARY_NAMES + 1] {
        let mut dropped = [false; MAX_VARY_NAMES + 1];
        let mut lower = Vec::new();
        for token in list_elements(request.header_values("connection")) {
            if token.eq_ignore_ascii_case(b"accept-encoding") {
                dropped[MAX_VARY_NAMES] = true;
                continue;
            }
            lower.clear();
            lower.extend(token.iter().map(u8::to_ascii_lowercase));
            if let Ok(index) = self
                .names
                .binary_search_by(|name| name.as_bytes().cmp(&lower[..]))
            {
                dropped[index] = true;
            }
        }
        dropped
    }
}

/// Appends the primary key of `request` to `out`; `false` (and nothing
/// appended) when the request has no authority, which is never cached.
pub fn primary_key(request: &impl RequestView, out: &mut Vec<u8>) -> bool {
    let Some(authority) = request.authority() else {
        return false;
    };
    if authority.is_empty() {
        return false;
    }
    let scheme = request.scheme();
    let start = out.len();
    if !push_origin(scheme, authority, out) {
        out.truncate(start);
        return false;
    }
    let path = request.path_and_query();
    if !path.starts_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(path);
    true
}

/// The primary key of an absolute URL as an operator writes it for a purge
/// (`https://example.com/a?b`), normalised like a request's; `None` when it
/// is not an `http`/`https` URL with an authority.
pub fn primary_key_of_url(url: &str) -> Option<Vec<u8>> {
    let (scheme, rest) = split_scheme(url)?;
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.is_empty() {
        return None;
    }
    let mut key = Vec::with_capacity(url.len());
    if !push_origin(scheme, authority.as_bytes(), &mut key) {
        return None;
    }
    if !path.starts_with('/') {
        key.push(b'/');
    }
    key.extend_from_slice(path.as_bytes());
    Some(key)
}

/// An absolute `http`/`https` URL's scheme (in any case, RFC 3986 §3.1) and
/// what follows `://`.
pub(crate) fn split_scheme(url: &str) -> Option<(Scheme, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.eq_ignore_ascii_case("http") {
        Some((Scheme::Http, rest))
    } else if scheme.eq_ignore_ascii_case("https") {
        Some((Scheme::Https, rest))
    } else {
        None
    }
}

/// `scheme://authority`, the authority lower-cased without its default port (or an empty
/// one: RFC 3986 §6.2.3) and without a trailing dot on the host, and an IPv6 literal in
/// its canonical form (RFC 5952): `example.com.` and `[0:0::1]` name the hosts
/// `example.com` and `[::1]` do, as routes and rules take them
/// (crates/weir-rules/src/request.rs). `false` when the host is empty (`.`, `:80`): no
/// `http` URI has one (RFC 9110 §4.2.1), and no key is made for it.
fn push_origin(scheme: Scheme, authority: &[u8], out: &mut Vec<u8>) -> bool {
    let (prefix, default_port): (&[u8], &[u8]) = match scheme {
        Scheme::Http => (b"http://", b":80"),
        Scheme::Https => (b"https://", b":443"),
    };
    out.extend_from_slice(prefix);
    let authority = authority.strip_suffix(default_port).unwrap_or(authority);
    let authority = authority.strip_suffix(b":").unwrap_or(authority);
    let start = out.len();
    match authority.first() {
        // An empty host (`:80`, or `.` once its dot is dropped below).
        None | Some(b':') => return false,
        Some(b'[') => push_ip_literal(authority, out),
        Some(_) => match trailing_dot(authority) {
            None => out.extend_from_slice(authority),
            Some(0) => return false,
            Some(dot) => {
                out.extend_from_slice(&authority[..dot]);
                out.extend_from_slice(&authority[dot + 1..]);
            }
        },
    }
    out[start..].make_ascii_lowercase();
    true
}

/// An authority whose host is an IP literal (`[...]`, then nothing or a port), with an
/// IPv6 address in its canonical form; anything else as it is.
fn push_ip_literal(authority: &[u8], out: &mut Vec<u8>) {
    let canonical = memchr::memchr(b']', authority).and_then(|close| {
        let text = std::str::from_utf8(&authority[1..close]).ok()?;
        let address = text.parse::<std::net::Ipv6Addr>().ok()?;
        Some((address, close))
    });
    match canonical {
        Some((address, close)) => {
            use std::io::Write;
            let _ = write!(out, "[{address}]");
            out.extend_from_slice(&authority[close + 1..]);
        }
        None => out.extend_from_slice(authority),
    }
}

/// Where the host of `authority` (port included or not) ends in a dot, if it does. On
/// every cache lookup: a few byte comparisons, no scan of the host. A port has at most
/// five digits, so its colon is among the last six bytes; an IPv6 literal without a port
/// ends in `]`, and its colons are no port's.
fn trailing_dot(authority: &[u8]) -> Option<usize> {
    let (&last, _) = authority.split_last()?;
    if last == b'.' {
        return Some(authority.len() - 1);
    }
    if last == b']' {
        return None;
    }
    let tail = authority.len().saturating_sub(6);
    let colon = tail + authority[tail..].iter().rposition(|&b| b == b':')?;
    (colon > 0 && authority[colon - 1] == b'.').then(|| colon - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Req;

    fn key(request: &Req) -> String {
        let mut out = Vec::new();
        assert!(primary_key(request, &mut out));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn primary_keys_normalise_the_authority_only() {
        assert_eq!(key(&Req::get("/a?b=1")), "http://example.com/a?b=1");
        assert_eq!(
            key(&Req::get("/A").authority("Example.COM:80")),
            "http://example.com/A"
        );
        assert_eq!(key(&Req::get("/").authority("h:8080")), "http://h:8080/");
        assert_eq!(key(&Req::get("/").https().authority("h:443")), "https://h/");
        // A trailing dot names the same host; an IPv6 literal keeps its colons.
        assert_eq!(
            key(&Req::get("/").authority("H.example.:80")),
            "http://h.example/"
        );
        assert_eq!(key(&Req::get("/").authority("h.:8080")), "http://h:8080/");
        assert_eq!(key(&Req::get("/").authority("[::1]:80")), "http://[::1]/");
        // An IPv6 literal in its canonical form (RFC 5952), an empty port as the default.
        assert_eq!(key(&Req::get("/").authority("[0:0::1]")), "http://[::1]/");
        assert_eq!(
            key(&Req::get("/").authority("[2001:DB8:0:0::7]:8443")),
            "http://[2001:db8::7]:8443/"
        );
        assert_eq!(key(&Req::get("/").authority("a.test:")), "http://a.test/");
        assert_eq!(key(&Req::get("/").authority("a.test.:")), "http://a.test/");
        // No key for an empty host, however it is spelled.
        for empty in [".", ":80", ".:8080", ":"] {
            let mut out = b"kept".to_vec();
            assert!(
                !primary_key(&Req::get("/").authority(empty), &mut out),
                "{empty}"
            );
            assert_eq!(out, b"kept");
        }
        assert_eq!(primary_key_of_url("http://./a"), None);
        assert_eq!(
            primary_key_of_url("http://[0:0::1]:80/a"),
            primary_key_of_url("http://[::1]/a")
        );
        assert_eq!(key(&Req::get("/").authority("[::1]")), "http://[::1]/");
        assert_eq!(
            key(&Req::get("/").authority("[::1]:81")),
            "http://[::1]:81/"
        );
        assert_eq!(
            key(&Req::get("/").authority("[2001:DB8::1]:8080")),
            "http://[2001:db8::1]:8080/"
        );
        assert_eq!(key(&Req::get("/").authority("h.:12345")), "http://h:12345/");
        assert_eq!(key(&Req::get("/").authority("h.x:1")), "http://h.x:1/");
        let mut out = Vec::new();
        assert!(!primary_key(&Req::get("/").no_authority(), &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn urls_give_the_same_keys_as_requests() {
        let cases = [
            ("http://Example.com/a?b=1", "/a?b=1", false),
            ("https://example.com:443/x", "/x", true),
            ("http://example.com", "/", false),
            ("http://example.com?q", "/?q", false),
        ];
        for (url, path, https) in cases {
            let mut request = Req::get(path);
            if https {
                request = request.https();
            }
            assert_eq!(
                primary_key_of_url(url).map(String::from_utf8),
                Some(Ok(key(&request))),
                "{url}"
            );
        }
        assert_eq!(primary_key_of_url("ftp://h/"), None);
        assert_eq!(
            primary_key_of_url("HTTPS://Example.com/x"),
            primary_key_of_url("https://example.com/x")
        );
        assert_eq!(primary_key_of_url("http:///x"), None);
    }

    #[test]
    fn vary_specs() {
        let spec =
            |value: &str, compress| VarySpec::from_values([value.as_bytes()].into_iter(), compress);
        assert_eq!(spec("*", false), Err(VaryStar));
        assert_eq!(spec("Accept-Language, *", true), Err(VaryStar));
        let parsed = spec("Accept-Language, accept-encoding, X-A, x-a", false).unwrap();
        assert_eq!(
            &*parsed.names,
            [Box::from("accept-language"), Box::from("x-a")]
        );
        assert_eq!(parsed.encoding, EncodingKey::AcceptedSet);
        assert_eq!(spec("", true).unwrap().encoding, EncodingKey::Chosen);
        assert_eq!(
            spec("Accept-Encoding", true).unwrap().encoding,
            EncodingKey::Chosen
        );
    }

    #[test]
    fn a_response_varying_on_more_fields_than_the_bound_is_not_stored() {
        let names = |count: usize| {
            (0..count)
                .map(|i| format!("X-F{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let spec = |value: String| VarySpec::from_values([value.as_bytes()].into_iter(), false);
        assert_eq!(
            spec(names(MAX_VARY_NAMES)).unwrap().names.len(),
            MAX_VARY_NAMES
        );
        assert_eq!(spec(names(MAX_VARY_NAMES + 1)), Err(VaryStar));
        // Repeats count once, however many (until they are many times the bound).
        let repeated = vec!["X-A"; 3 * MAX_VARY_NAMES].join(", ");
        assert_eq!(spec(repeated).unwrap().names.len(), 1);
        assert_eq!(spec(vec!["X-A"; 100_000].join(",")), Err(VaryStar));
    }

    #[test]
    fn secondary_keys_normalise_accept_encoding() {
        let secondary = |spec: &VarySpec, request: &Req, chosen| {
            let mut out = Vec::new();
            spec.secondary_key(request, chosen, &mut out);
            out
        };
        let node = VarySpec::from_values(
            [&b"Accept-Encoding, Accept-Language"[..]].into_iter(),
            false,
        )
        .unwrap();
        let a = Req::get("/")
            .header("Accept-Encoding", "gzip, br")
            .header("Accept-Language", "en");
        let b = Req::get("/")
            .header("accept-encoding", "br,gzip")
            .header("accept-language", "en");
        let c = Req::get("/")
            .header("accept-encoding", "gzip")
            .header("accept-language", "en");
        assert_eq!(
            secondary(&node, &a, Coding::Identity),
            secondary(&node, &b, Coding::Identity)
        );
        assert_ne!(
            secondary(&node, &a, Coding::Identity),
            secondary(&node, &c, Coding::Identity)
        );

        // A field sent empty and one not sent are two variants.
        let flag = VarySpec::from_values([&b"X-Flag"[..]].into_iter(), false).unwrap();
        let empty = Req::get("/").header("X-Flag", "");
        assert_ne!(
            secondary(&flag, &empty, Coding::Identity),
            secondary(&flag, &Req::get("/"), Coding::Identity)
        );

        // A node may encode for a client that sends no `Accept-Encoding`: its answer is
        // not for one that accepts none, or only identity.
        let absent = secondary(
            &node,
            &Req::get("/").header("Accept-Language", "en"),
            Coding::Identity,
        );
        for accept in ["", "identity", "gzip;q=0", "*;q=0, identity", "x-unknown"] {
            let listed = Req::get("/")
                .header("Accept-Encoding", accept)
                .header("Accept-Language", "en");
            assert_ne!(
                secondary(&node, &listed, Coding::Identity),
                absent,
                "{accept:?}"
            );
        }

        let weir = VarySpec::from_values(std::iter::empty(), true).unwrap();
        assert_eq!(secondary(&weir, &a, Coding::Brotli), b"br");
        assert_ne!(
            secondary(&weir, &a, Coding::Brotli),
            secondary(&weir, &c, Coding::Gzip)
        );
    }

    #[test]
    fn fields_the_connection_header_names_are_keyed_as_missing() {
        let secondary = |spec: &VarySpec, request: &Req| {
            let mut out = Vec::new();
            spec.secondary_key(request, Coding::Identity, &mut out);
            out
        };
        let spec =
            VarySpec::from_values([&b"Origin, Accept-Encoding"[..]].into_iter(), false).unwrap();
        let plain = Req::get("/").header("Origin", "https://app.test");
        // weir removes the named fields before forwarding: the node saw neither.
        let nominated = Req::get("/")
            .header("Origin", "https://app.test")
            .header("Accept-Encoding", "gzip")
            .header("Connection", "close, origin , Accept-Encoding");
        assert_ne!(secondary(&spec, &nominated), secondary(&spec, &plain));
        assert_eq!(
            secondary(&spec, &nominated),
            secondary(&spec, &Req::get("/"))
        );
        // A `Connection` that names other fields changes nothing.
        let other = Req::get("/")
            .header("Origin", "https://app.test")
            .header("Connection", "keep-alive, x-other");
        assert_eq!(secondary(&spec, &other), secondary(&spec, &plain));
    }
}
