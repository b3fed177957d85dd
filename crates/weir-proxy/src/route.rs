//! The `route` stage: which pool serves a request.

use std::sync::Arc;

use weir_http::RequestHead;
use weir_tls::client_hello::ClientHello;
use weir_upstream::Pool;

pub use crate::model::VirtualServerRuntime;

impl VirtualServerRuntime {
    /// The route stage of TLS passthrough: the first rule that matches the ClientHello.
    pub(crate) fn passthrough_pool(&self, hello: &ClientHello) -> Option<&Arc<Pool>> {
        self.passthrough
            .iter()
            .find(|(rule, _)| rule.matches(hello.server_name.as_deref(), &hello.alpn))
            .map(|(_, pool)| pool)
    }

    /// The pool of a route found by [`Self::matched_route`]; the default pool for `None`.
    pub(crate) fn route_pool(&self, route: Option<usize>) -> &Arc<Pool> {
        route
            .and_then(|index| self.routes.get(index))
            .map_or(&self.default_pool, |(_, pool)| pool)
    }

    /// The route stage: the index in `routes` of the first rule `head`
    /// matches (`None`: the default pool serves it).
    pub(crate) fn matched_route(&self, head: &RequestHead) -> Option<usize> {
        if self.routes.is_empty() {
            return None;
        }
        // The host and path as rules match them (port and trailing dot gone, dot segments
        // resolved, unreserved escapes decoded): a route and a rule written alike take the
        // same requests, and `/public/../admin` is not `/public/`'s to serve.
        let host = weir_rules::match_host(head);
        let path = weir_rules::normalized_path(head.path());
        self.routes.iter().position(|(rule, _)| {
            let host_ok = rule
                .host
                .as_deref()
                .is_none_or(|want| host_matches(want, &host));
            let path_ok = rule
                .path_prefix
                .as_deref()
                .is_none_or(|prefix| path.starts_with(prefix.as_bytes()));
            host_ok && path_ok
        })
    }
}

/// `want` is lower case; `*.example.com` matches any subdomain of example.com.
fn host_matches(want: &str, host: &[u8]) -> bool {
    if let Some(suffix) = want.strip_prefix("*.") {
        let suffix = suffix.as_bytes();
        host.len() > suffix.len() + 1
            && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            && host[host.len() - suffix.len() - 1] == b'.'
    } else {
        host.eq_ignore_ascii_case(want.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_exactly_or_by_wildcard() {
        assert!(host_matches("api.example.com", b"API.example.com"));
        assert!(!host_matches("api.example.com", b"example.com"));
        assert!(host_matches("*.example.com", b"a.example.com"));
        assert!(host_matches("*.example.com", b"a.b.example.com"));
        assert!(!host_matches("*.example.com", b"example.com"));
        assert!(!host_matches("*.example.com", b"aexample.com"));
        assert!(!host_matches("a.com", b""));
        assert!(!host_matches("*.a.com", b""));
    }
}
