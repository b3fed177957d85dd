//! The tunnel's sans-IO core: plain state machines and functions over bytes and times, with
//! no socket, task or quinn type in them, each tested on its own.
//!
//! - [`wire`]: records, blocks, the open header; [`frame`]: datagrams framed on TCP.
//! - [`control`]: the store protocol's messages.
//! - [`dedup`]: FastCDC chunking, chunk ids, the bounded FIFO store.
//! - [`compress`]: the skip-incompressible policy.
//! - [`codec`]: a flow's encoder and decoder.
//! - [`congestion`]: the loss-tolerant controller's window logic.
//! - [`fec`]: forward error correction below QUIC (frames, blocks, recovery, loss reports,
//!   the redundancy policy, the spare-capacity bucket).
//!
//! The drivers around them are in [`crate::driver`].

pub mod codec;
pub mod compress;
pub mod congestion;
pub mod control;
pub mod dedup;
pub mod fec;
pub mod frame;
pub mod wire;
