//! HTTP/2 towards clients: the server driver over the `h2` codec
//! (`server.rs`), the stream under it with flood detection (`io.rs`,
//! `flood.rs`). Requests become `weir_http::RequestHead`s at this boundary
//! (`weir_http::http2`), so the pipeline's stages see one type whatever the
//! protocol. Design: `docs/design/http2.md`.

mod flood;
mod io;
mod own;
mod server;
pub(crate) mod stream;
mod tunnel;
pub(crate) mod upstream;
pub(crate) mod websocket;

pub(crate) use io::starts_with_preface;
pub(crate) use server::{ConnectionLimits, Incoming, Refused, StreamHandler, Via, serve};
pub(crate) use stream::{H2Stream, Head, RecvHalf, SendHalf};
pub(crate) use tunnel::{TunnelEnd, relay, relay_websocket, take_tunnel};

#[cfg(test)]
mod h2spec_tests;
#[cfg(test)]
mod tests;
