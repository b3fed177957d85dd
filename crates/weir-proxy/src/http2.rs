//! HTTP/2 towards clients: the server driver over the `h2` codec
//! (`server.rs`), the stream under it with flood detection (`io.rs`,
//! `flood.rs`). Requests become `weir_http::RequestHead`s at this boundary
//! (`weir_http::http2`), so the pipeline's stages see one type whatever the
//! protocol. Design: `docs/design/http2.md`.

// The forward stage's HTTP/2 half (`upstream.rs`) and WebSocket across
// versions (`websocket.rs`) are not called by the pipeline yet.
#![allow(dead_code, unused_imports)]

mod flood;
mod io;
mod server;
mod stream;
pub(crate) mod upstream;
mod websocket;

pub(crate) use io::starts_with_preface;
pub(crate) use server::{StreamHandler, Timing, Via, serve};
pub(crate) use stream::H2Stream;

#[cfg(test)]
mod h2spec_tests;
#[cfg(test)]
mod tests;
