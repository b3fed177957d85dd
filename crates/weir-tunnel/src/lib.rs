//! weir's WAN tunnel: two weir instances carry TCP flows between them through one
//! long-lived, mutually authenticated QUIC connection (split TCP: each end host talks to a
//! peer at local latency), with zstd compression, content-defined deduplication against
//! chunk stores kept in step at both ends, and a loss-tolerant congestion controller sized
//! from the configured link.
//!
//! Data path, near side: `accept → route (service) → open_stream → encode (chunk, dedupe,
//! compress) → link`; far side: `link → decode → connect → splice`.
//!
//! Layers (every module is private; the public API is below):
//! - `sans_io`: the core, plain state machines over bytes and times — wire format,
//!   control messages, dedup, compression policy, a flow's codec, the congestion window,
//!   forward error correction.
//! - `driver`: thin I/O around it — quinn and TLS set-up, the UDP socket with FEC and the
//!   TCP fallback socket, the per-connection session, per-flow pumps, the near and far sides.
//! - `config` (file → validated model), `metrics` (handles in `weir-observe`, served by the
//!   admin listener), [`pipeline`] (the codec's CPU cost, without I/O).
//!
//! Why it is built this way: `docs/design/tunnel.md`; the states of a session, a flow and an
//! FEC block: `LIFECYCLE.md` in this crate.
//!
//! The public API: [`Client`] and [`Server`] (bind, then run until a shutdown future
//! resolves), their [`TunnelConfig`] ([`load_file`], [`parse_str`]), their [`Metrics`], and
//! [`pipeline`].
//!
//! ```
//! use weir_tunnel::pipeline::{Ends, default_settings, log_lines, measure};
//!
//! // A flow's encoder and decoder, round trip checked: log text compresses, and the same
//! // bytes again cost only references to what the far end's store holds.
//! let text = log_lines(1 << 20, 1);
//! let mut ends = Ends::new(64 << 20);
//! let first = measure(&text, default_settings(), &mut ends);
//! assert!(first.encoded * 3 < first.bytes);
//! let again = measure(&text, default_settings(), &mut ends);
//! assert!(again.encoded * 100 < again.bytes);
//! ```

mod config;
mod driver;
mod metrics;
pub mod pipeline;
mod sans_io;

use std::net::SocketAddr;

/// The parsers of bytes from a peer, for the fuzz targets (`fuzz/src/tunnel_check.rs`);
/// not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::sans_io::codec::FlowDecoder;
    pub use crate::sans_io::control::Control;
    pub use crate::sans_io::fec::wire as fec_wire;
    pub use crate::sans_io::{frame, wire};
}

pub use config::{DEFAULT_LEVEL, Role, TunnelConfig, load_file, parse_str};
pub use driver::client::Client;
pub use driver::server::Server;
pub use metrics::Metrics;

/// Why a tunnel side could not start.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The configuration file could not be read or is invalid.
    #[error(transparent)]
    Config(#[from] weir_config::ConfigError),
    /// QUIC or TLS could not be set up (certificates, keys, endpoint).
    #[error(transparent)]
    Transport(#[from] driver::quic::TransportError),
    /// The config lacks the section this side needs (`[client]` or `[server]`).
    #[error("this side needs {0} in the config")]
    Role(&'static str),
    /// A listening socket could not be bound (the system's error is the source, which
    /// error reports print after this line: not repeated in it).
    #[error("cannot listen on {address}")]
    Bind {
        /// The address that could not be bound.
        address: SocketAddr,
        /// The error from the system.
        source: std::io::Error,
    },
}
