//! The filter_request stage: what this virtual server lets through besides
//! ordinary requests (`[virtual_servers.NAME.http]`). CONNECT and TRACE are
//! answered 405 unless allowed; a protocol switch passes only to an allowed
//! protocol (else the request goes on without its `Upgrade`); header names
//! with `_` are dropped, refused or kept.

use weir_config::UnderscoreHeaders;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{Method, RequestHead};

use crate::answer::Failure;
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
}

impl Forwarding {
    /// Whether the request may leave HTTP (and so needs a tunnel place on its node).
    pub(crate) fn may_tunnel(&self) -> bool {
        self.upgrade || self.connect
    }
}

/// The filter_request stage.
pub(crate) fn filter(vs: &VirtualServerRuntime, head: &RequestHead) -> Result<Forwarding, Failure> {
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
        upgrade: head.asks_to_upgrade()
            && head
                .header("upgrade")
                .is_some_and(|offered| allowed_upgrade(offered, &policy.upgrades)),
        connect: head.method() == Method::Connect,
        drop_underscore_names: underscores && policy.underscore_headers == UnderscoreHeaders::Drop,
    })
}

/// Every protocol the client offers must be allowed (compared without case;
/// `websocket` allows `websocket/13` too), so the node can only pick one of them.
fn allowed_upgrade(offered: &[u8], allowed: &[String]) -> bool {
    let mut protocols = offered
        .split(|&b| b == b',')
        .map(|p| p.trim_ascii())
        .filter(|p| !p.is_empty())
        .peekable();
    protocols.peek().is_some()
        && protocols.all(|protocol| {
            let name = protocol.split(|&b| b == b'/').next().unwrap_or(protocol);
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
