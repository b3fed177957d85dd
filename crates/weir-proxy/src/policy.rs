//! The filter_request stage: what this virtual server lets through besides
//! ordinary requests (`[virtual_servers.NAME.http]`). CONNECT and TRACE are
//! answered 405 unless allowed; a protocol switch passes only to an allowed
//! protocol (else the request goes on without its `Upgrade`); header names
//! with `_` are dropped, refused or kept.

use bytes::Bytes;
use weir_config::{UnderscoreHeaders, UpstreamProtocol};
use weir_core::{Error, ErrorKind, Side};
use weir_http::{Method, RequestHead};
use weir_rules::Answer;
use weir_upstream::Pool;

use crate::answer::Failure;
use crate::client::Client;
use crate::route::VirtualServerRuntime;

/// How a request that passed the filter is forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Forwarding {
    /// Forward `Upgrade` and `Connection: upgrade`: the switch is allowed.
    pub upgrade: bool,
    /// A CONNECT: on a 2xx the connection becomes a tunnel.
    pub connect: bool,
    /// Remove header fields whose names hold `_`.
    pub drop_underscore_names: bool,
    /// A background refresh of a cached answer: the client already has its answer, so
    /// nothing of this exchange (an interim 1xx either) goes to it.
    pub background: bool,
    /// A rule removes or sets `Via` on the response: the interim (1xx) answers relayed
    /// before it carry none either, neither weir's entry nor the node's.
    pub hide_via: bool,
}

impl Forwarding {
    /// Whether the request may leave HTTP (and so needs a tunnel place on its node).
    pub(crate) fn may_tunnel(&self) -> bool {
        self.upgrade || self.connect
    }
}

/// The filter_request stage.
fn filter(vs: &VirtualServerRuntime, head: &RequestHead) -> Result<Forwarding, Failure> {
    let policy = &vs.config.http;
    let refused = |what: &'static str| {
        Failure::from_error(Error::new(ErrorKind::MethodNotAllowed, Side::Downstream).context(what))
    };
    match head.method() {
        Method::Connect if !policy.connect => return Err(refused("CONNECT is not allowed here")),
        Method::Trace if !policy.trace => return Err(refused("TRACE is not allowed here")),
        _ => {}
    }
    let underscores = head.has_underscore_names();
    if underscores && policy.underscore_headers == UnderscoreHeaders::Reject {
        return Err(Failure::from_error(
            Error::new(ErrorKind::BadRequest, Side::Downstream)
                .context("header field name with an underscore"),
        ));
    }
    Ok(Forwarding {
        // Every `Upgrade` line, not the first alone: each protocol offered on any of them
        // must be allowed, or none is forwarded (a second line offering h2c would let the
        // node switch to it).
        upgrade: head.asks_to_upgrade()
            && head
                .headers()
                .filter(|(name, _)| name.eq_ignore_ascii_case(b"upgrade"))
                .all(|(_, offered)| allowed_upgrade(offered, &policy.upgrades)),
        connect: head.method() == Method::Connect,
        drop_underscore_names: underscores && policy.underscore_headers == UnderscoreHeaders::Drop,
        background: false,
        hide_via: false,
    })
}

/// RFC 9110 §7.6.2: weir is the final recipient of an OPTIONS or TRACE whose
/// `Max-Forwards` is 0, and answers it itself instead of forwarding it: OPTIONS with
/// 200 and, in `Allow`, the methods this virtual server lets through; TRACE (where
/// allowed: [`filter`] refused it otherwise) with 200 and the request as weir received it
/// (`message/http`, §9.3.8), less the fields that carry credentials.
pub(crate) fn final_recipient(vs: &VirtualServerRuntime, head: &RequestHead) -> Option<Answer> {
    if head.max_forwards() != Some(0) {
        return None;
    }
    let policy = &vs.config.http;
    let (headers, body) = match head.method() {
        Method::Trace => {
            let mut echo = Vec::with_capacity(head.raw().len());
            let version = match head.version() {
                weir_http::Version::Http10 => "HTTP/1.0",
                weir_http::Version::Http11 => "HTTP/1.1",
            };
            for part in [
                head.method_bytes(),
                b" ",
                head.target(),
                b" ",
                version.as_bytes(),
            ] {
                echo.extend_from_slice(part);
            }
            echo.extend_from_slice(b"\r\n");
            let secret = |name: &[u8]| {
                ["authorization", "proxy-authorization", "cookie"]
                    .iter()
                    .any(|secret| name.eq_ignore_ascii_case(secret.as_bytes()))
            };
            for (name, value) in head.headers().filter(|(name, _)| !secret(name)) {
                for part in [name, b": ", value, b"\r\n"] {
                    echo.extend_from_slice(part);
                }
            }
            echo.extend_from_slice(b"\r\n");
            let kind = (
                Bytes::from_static(b"Content-Type"),
                Bytes::from_static(b"message/http"),
            );
            (vec![kind], Bytes::from(echo))
        }
        _ => {
            let mut allow = String::from("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH");
            if policy.trace {
                allow.push_str(", TRACE");
            }
            if policy.connect {
                allow.push_str(", CONNECT");
            }
            (
                vec![(Bytes::from_static(b"Allow"), Bytes::from(allow))],
                Bytes::new(),
            )
        }
    };
    Some(Answer {
        status: 200,
        headers,
        body,
        written: true,
    })
}

/// The filter_request stage for a request routed to `pool`: [`filter`], then
/// [`across_protocols`].
pub(crate) fn filter_for(
    client: &Client,
    vs: &VirtualServerRuntime,
    pool: &Pool,
    head: &RequestHead,
) -> Result<Forwarding, Failure> {
    let forwarding = filter(vs, head)?;
    across_protocols(client, pool, head, forwarding)?;
    Ok(forwarding)
}

/// What the protocols on either side allow, once the pool is known:
///
/// - gRPC needs HTTP/2 to the node (full duplex, trailers): a gRPC request (a
///   POST with a gRPC content type) routed to a pool of HTTP/1.1 nodes is
///   refused with 502 (UNAVAILABLE for the client) and a log line that names
///   the pool, instead of a request the node would answer with something the
///   client cannot decode;
/// - an HTTP/2 WebSocket (extended CONNECT, RFC 8441) goes on only where the
///   virtual server lets WebSocket upgrades through: otherwise 405, as for a
///   CONNECT that is not allowed, rather than a request the node would
///   answer as a GET.
fn across_protocols(
    client: &Client,
    pool: &Pool,
    head: &RequestHead,
    forwarding: Forwarding,
) -> Result<(), Failure> {
    if client.is_h2_websocket() && !forwarding.upgrade {
        return Err(Failure::from_error(
            Error::new(ErrorKind::MethodNotAllowed, Side::Downstream)
                .context("WebSocket is not among this virtual server's upgrades"),
        ));
    }
    // gRPC calls are POSTs: other methods skip the field lookup.
    if pool.config.protocol == UpstreamProtocol::Http1
        && head.method() == Method::Post
        && crate::request_body::is_grpc(head.header("content-type"))
    {
        return Err(Failure::from_error(
            Error::new(ErrorKind::Io, Side::Internal).context(format!(
                "gRPC needs HTTP/2 to the node: pool {} speaks HTTP/1.1 (set protocol = \"h2\" or \"h2c\")",
                pool.name
            )),
        ));
    }
    Ok(())
}

/// Every protocol the client offers must be allowed (compared without case;
/// `websocket` allows `websocket/13` too), so the node can only pick one of them.
fn allowed_upgrade(offered: &[u8], allowed: &[String]) -> bool {
    let mut protocols = weir_http::upgrade_protocols(offered).peekable();
    protocols.peek().is_some()
        && protocols.all(|(protocol, name)| {
            allowed.iter().any(|allowed| {
                protocol.eq_ignore_ascii_case(allowed.as_bytes())
                    || name.eq_ignore_ascii_case(allowed.as_bytes())
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_protocols_may_be_switched_to() {
        let websocket = ["websocket".to_owned()];
        assert!(allowed_upgrade(b"websocket", &websocket));
        assert!(allowed_upgrade(b"WebSocket", &websocket));
        assert!(allowed_upgrade(b"websocket/13", &websocket));
        assert!(!allowed_upgrade(b"h2c", &websocket));
        assert!(!allowed_upgrade(b"websocket, h2c", &websocket));
        assert!(!allowed_upgrade(b"", &websocket));
        assert!(!allowed_upgrade(b"websocket", &[]));
    }
}
