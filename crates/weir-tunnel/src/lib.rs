//! weir's WAN tunnel: two weir instances carry TCP flows between them through one
//! long-lived, mutually authenticated QUIC connection (split TCP: each end host talks to a
//! peer at local latency), with zstd compression, content-defined deduplication against
//! chunk stores kept in step at both ends, and a loss-tolerant congestion controller sized
//! from the configured link. Also the WAN lab, `weir lab wan` ([`lab`]).
//!
//! Data path, near side: `accept → route (service) → open_stream → encode (chunk, dedupe,
//! compress) → link`; far side: `link → decode → connect → splice`.
//!
//! - sans-IO cores: [`wire`] (records, blocks, open header), [`control`] (the store
//!   protocol's messages), [`dedup`] (FastCDC chunking, chunk ids, the bounded FIFO store),
//!   [`compress`] (the skip-incompressible policy), [`codec`] (a flow's encoder and decoder),
//!   [`congestion`] (the controller's window logic), [`config`] (file → validated model),
//!   [`fec`] (forward error correction below QUIC: frames, blocks, recovery, loss reports,
//!   the redundancy policy).
//! - drivers: [`session`] (per connection, the control stream), [`flow`] (per flow),
//!   [`client`], [`server`], [`transport`] (TLS and QUIC set-up), the sockets under QUIC
//!   ([`fec::socket`] over UDP, [`tcp`] the fallback over TCP), [`metrics`] and
//!   [`metrics_http`].
//!
//! Why it is built this way: `docs/design/tunnel.md`.
//!
//! ```
//! use weir_tunnel::codec::{EncoderSettings, FlowDecoder, FlowEncoder, Piece};
//! use weir_tunnel::dedup::ChunkParams;
//! use weir_tunnel::wire::take_record;
//!
//! let settings = EncoderSettings { dedup: Some(ChunkParams::DEFAULT), compression: Some(1) };
//! let mut encoder = FlowEncoder::new(settings);
//! let text = b"the same line again and again\n".repeat(1000);
//! let chunked = encoder.chunk(&text, true);
//! let mut wire = bytes::BytesMut::new();
//! for block in encoder.emit(chunked, &[]) {
//!     block.block.encode(&mut wire);
//! }
//! assert!(wire.len() < text.len() / 10, "compressed");
//!
//! let mut decoder = FlowDecoder::new(1 << 20).unwrap();
//! let mut output = Vec::new();
//! while let Some(record) = take_record(&mut wire).unwrap() {
//!     for piece in decoder.decode(record).unwrap() {
//!         if let Piece::Literal { bytes, .. } = piece {
//!             output.extend_from_slice(&bytes);
//!         }
//!     }
//! }
//! assert_eq!(output, text);
//! ```

pub mod client;
pub mod codec;
pub mod compress;
pub mod config;
pub mod congestion;
pub mod control;
pub mod dedup;
pub mod fec;
pub mod flow;
pub mod lab;
pub mod metrics;
pub mod metrics_http;
pub mod server;
pub mod session;
pub mod tcp;
pub mod transport;
pub mod wire;

use std::net::SocketAddr;

pub use client::Client;
pub use config::{Role, TunnelConfig};
pub use metrics::Metrics;
pub use server::Server;

use crate::codec::EncoderSettings;

/// The longest chunk a decoder accepts a reference to (four times the largest average).
pub const MAX_CHUNK: u32 = 1 << 20;

/// Why a tunnel side could not start.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error(transparent)]
    Config(#[from] weir_config::ConfigError),
    #[error(transparent)]
    Transport(#[from] transport::TransportError),
    #[error("this side needs {0} in the config")]
    Role(&'static str),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// The most literal bytes per block for a link: about 25 ms of it, 16 KiB to 256 KiB (a
/// 256 KiB block would hold its first byte back for 1.4 s on a T1).
pub fn block_limit(link: &config::LinkParams) -> usize {
    let bytes = link.bandwidth as f64 / 8.0 * 0.025;
    (bytes as usize).clamp(16 << 10, wire::MAX_BLOCK_PAYLOAD)
}

/// The encoder settings, this end's store budget and the decoder's chunk limit.
pub fn session_settings(config: &TunnelConfig) -> (EncoderSettings, u64, u32) {
    let settings = EncoderSettings {
        dedup: config.dedup.enabled.then_some(config.dedup.chunks),
        compression: config.compression,
    };
    (settings, config.dedup.store, MAX_CHUNK)
}
