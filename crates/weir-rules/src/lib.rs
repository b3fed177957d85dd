//! Traffic rules for weir's HTTP pipeline, sans-IO: a virtual server's
//! match/action rules compiled once at load ([`RuleSet`]) and evaluated per
//! request into a [`Decision`] the pipeline applies; the request id; the
//! client address behind trusted proxies; keys taken from requests; and the
//! limits (request rate per key, requests in progress per limit, connections
//! per client address).
//!
//! Nothing here does I/O or reads a clock: evaluation takes the request head
//! and the connection's [`Facts`]; limiters take `now`. How the pipeline calls
//! each piece, stage by stage, is written down in `docs/design/rules.md`.
//!
//! ```
//! use std::net::IpAddr;
//! use weir_rules::{Facts, Outcome, RuleSet};
//!
//! let config = weir_config::parse_str(r#"
//!     [virtual_servers.web]
//!     listen = "127.0.0.1:8080"
//!     pool = "web"
//!     [[virtual_servers.web.rules]]
//!     match = { host = "old.example.com", path_regex = "^/post/([0-9]+)$" }
//!     redirect = { status = 301, location = "https://blog.example.com/p/${1}" }
//!     [pools.web]
//!     nodes = [{ address = "127.0.0.1:8081" }]
//! "#, "weir.toml").unwrap();
//! let rules = RuleSet::new(&config.virtual_servers[0].traffic).unwrap();
//!
//! let raw = b"GET /post/42 HTTP/1.1\r\nHost: old.example.com\r\n\r\n";
//! let head = match weir_http::parse_request(raw, &Default::default()).unwrap() {
//!     weir_http::Parsed::Complete(head, _) => head,
//!     weir_http::Parsed::Partial => unreachable!(),
//! };
//! let facts = Facts::plain(IpAddr::from([192, 0, 2, 1]));
//! let decision = rules.evaluate(&head, &facts);
//! let answer = decision.answer().unwrap();
//! assert_eq!(answer.status, 301);
//! assert_eq!(&answer.headers[0].1[..], b"https://blog.example.com/p/42");
//! ```

mod client_address;
mod condition;
mod decision;
mod facts;
mod index;
mod key;
pub mod limits;
mod request;
mod request_id;
mod rules;
mod template;

pub use client_address::client_address;
pub use decision::{Answer, Decision, HeaderEdits, Outcome};
pub use facts::{Facts, tls_version_text};
pub use key::{Key, each_request_key, limited_client, request_key, stable_hash};
pub use limits::{Refusal, TrafficLimits};
pub use request::{
    canonical_host, cookie, cookie_in, host, match_host, normalized_path, query, query_param, uri,
};
pub use request_id::{RequestId, incoming_request_id, request_id, valid_incoming};
pub use rules::{BuildError, RuleSet};

#[cfg(test)]
pub(crate) mod test_support {
    use weir_http::{Limits, Parsed, RequestHead, parse_request};

    /// Parses a whole request head (panics on anything else).
    pub(crate) fn head(raw: &str) -> RequestHead {
        head_bytes(raw.as_bytes())
    }

    /// [`head`] of bytes that need not be UTF-8.
    pub(crate) fn head_bytes(raw: &[u8]) -> RequestHead {
        match parse_request(raw, &Limits::default()) {
            Ok(Parsed::Complete(head, _)) => head,
            other => panic!(
                "not a complete head: {other:?}\n{}",
                String::from_utf8_lossy(raw)
            ),
        }
    }
}
