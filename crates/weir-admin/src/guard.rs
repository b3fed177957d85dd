//! What a browser could be made to send to the admin listener, refused.
//!
//! An admin API without a token trusts whoever can reach its loopback address, and a
//! browser on the same host is such a client for any page it opens:
//!
//! - **Cross-site requests.** A page of another site can make the browser send a form
//!   POST (or a "simple" `fetch`) to `http://127.0.0.1:9090/api/v1/...` without asking
//!   first. It cannot read the answer, but the node is already disabled. Browsers name
//!   the page's origin in `Origin` on every such request (and say `Sec-Fetch-Site:
//!   cross-site`), so a request that changes something is refused unless it comes from
//!   the admin listener's own origin (the dashboard) or from a client that is not a
//!   browser page (curl sends neither header).
//! - **DNS rebinding.** A name the attacker controls is made to resolve to 127.0.0.1:
//!   the browser then sees the admin listener as the attacker's own origin and lets its
//!   page read every answer. Such a request carries the attacker's name in `Host`, so
//!   without a token only requests addressed by an IP address or `localhost` are served.
//!
//! With a token the second check is not needed (the page cannot learn it), and the
//! first still applies. `/healthz` and `/metrics` are read-only and answer everyone: a
//! scraper may name the host however its setup does.

use std::net::IpAddr;

use crate::http::{Method, Request, Response};

/// `Some(refusal)` when `request` must not be served; `tokenless` says whether the API
/// runs without a token.
pub(crate) fn refuse(request: &Request, tokenless: bool) -> Option<Response> {
    if tokenless
        && let Some(host) = &request.host
        && !addressed_by_ip(host)
    {
        tracing::warn!(
            host = %String::from_utf8_lossy(host),
            "admin request refused: addressed by a name while the API has no token"
        );
        return Some(Response::error(
            403,
            "without admin.token_file the admin API answers only requests addressed to an \
             IP address or localhost (a guard against DNS rebinding)",
        ));
    }
    if matches!(request.method, Method::Get | Method::Head) {
        return None;
    }
    let foreign_origin = request
        .origin
        .as_ref()
        .is_some_and(|origin| !same_origin(origin, request.host.as_deref()));
    let foreign_fetch = request
        .fetch_site
        .as_ref()
        .is_some_and(|site| !matches!(site.as_slice(), b"same-origin" | b"none"));
    if foreign_origin || foreign_fetch {
        tracing::warn!(
            origin = %String::from_utf8_lossy(request.origin.as_deref().unwrap_or(b"-")),
            "admin request refused: a change asked for by a page of another origin"
        );
        return Some(Response::error(
            403,
            "a change asked for by a page of another origin is refused",
        ));
    }
    None
}

/// Whether the `Host` value names an IP address (IPv6 in brackets) or `localhost`, with
/// or without a port.
fn addressed_by_ip(host: &[u8]) -> bool {
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some(parts) => parts,
            None => return false,
        },
        None => host.split_at(host.find(':').unwrap_or(host.len())),
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
    port_ok && (name.parse::<IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost"))
}

/// Whether `origin` is `http://` and the request's own `Host` (the admin listener speaks
/// plain HTTP), letters compared without case.
fn same_origin(origin: &[u8], host: Option<&[u8]>) -> bool {
    let Some(host) = host else { return false };
    origin
        .split_at_checked(7)
        .is_some_and(|(scheme, authority)| {
            scheme.eq_ignore_ascii_case(b"http://") && authority.eq_ignore_ascii_case(host)
        })
}

#[cfg(test)]
mod tests;
