//! The tunnel's drivers: thin I/O around the sans-IO core ([`crate::sans_io`]).
//!
//! - [`quic`]: TLS and QUIC set-up (quinn, rustls + aws-lc-rs, mutual authentication) and
//!   the adapter of the congestion window to quinn's controller trait.
//! - The sockets under QUIC: [`fec_socket`] (UDP with the FEC layer) and [`tcp`] (the
//!   fallback over TCP), both quinn `AsyncUdpSocket`s.
//! - [`session`]: one connection's shared state and its control stream.
//! - [`flow`]: one flow's pumps between TCP and a QUIC stream.
//! - [`client`] (the near side, with reconnection) and [`server`] (the far side).

pub mod client;
pub mod fec_socket;
pub mod flow;
mod places;
pub mod quic;
pub mod server;
pub mod session;
pub mod tcp;
