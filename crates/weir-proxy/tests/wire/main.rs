//! Raw-bytes wire tests: HTTP/1.1 sent byte for byte through the proxy, and the
//! exact status and bytes that come back.
//!
//! - `rejections`: every parse rejection, its status, and that nothing reaches the node
//! - `framing`: bodies both ways (chunked, lengths, HEAD, 204/304, HTTP/1.0, Expect)
//! - `forwarding`: hop-by-hop removal, forwarding headers, header-name case
//! - `connections`: keep-alive, timeouts, protocol upgrades
//! - `routing`: host and path rules
//! - `hardening`: CONNECT, tunnel caps and idle timeouts, slow uploads, nodes that stop reading or answer early, late bodies

mod connections;
mod forwarding;
mod framing;
mod hardening;
mod rejections;
mod routing;
mod support;
