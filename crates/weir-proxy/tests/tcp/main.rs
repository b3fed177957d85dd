//! Layer 4 end to end: TCP and TLS virtual servers, TLS passthrough and the PROXY protocol,
//! through an in-process proxy to test nodes on loopback.
//!
//! - `sessions`: half-close both ways, idle timeout, connect failure moving to the next node,
//!   the queue at a node's cap, TLS-terminated TCP
//! - `passthrough`: routing by SNI with ClientHellos split at every byte boundary, on a tcp and
//!   on an https virtual server
//! - `proxy_protocol`: accepted from trusted clients (TCP and HTTP), refused or treated as
//!   data otherwise, and sent to nodes
//! - `reload`: a TCP virtual server reloaded with a changed pool, added and removed, and an
//!   HTTP one turned into a TCP one

mod passthrough;
mod proxy_protocol;
mod reload;
mod sessions;
mod support;
