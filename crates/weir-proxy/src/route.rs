//! The `route` stage: which pool serves a request.

use std::sync::Arc;

use weir_http::RequestHead;
use weir_tls::client_hello::ClientHello;
use weir_upstream::Pool;

pub use crate::model::VirtualServerRuntime;

pub(crate) mod index;

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
        self.route_index.first_match(&host, &path)
    }
}
