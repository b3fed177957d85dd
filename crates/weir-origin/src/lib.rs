//! A built-in HTTP/1.1 origin server: the nodes behind `weir serve`'s default config,
//! `weir origin`, the proxy's end-to-end tests, benchmarks and labs.
//!
//! It speaks HTTP/1.0 and HTTP/1.1 with keep-alive and pipelining, reads request bodies framed by
//! Content-Length or chunked encoding, and answers a few routes (see [`routes`](crate#routes)).
//! Every response carries `X-Origin: <name>` so a test can tell which node answered.
//! Per request it allocates nothing on the common routes: buffers are reused per connection,
//! a response goes out in one write, and large bodies are cut from one shared static block.
//!
//! # Routes
//!
//! | target | answer |
//! |---|---|
//! | `/` | 200 `hello from weir origin <name>\n` |
//! | `/bytes/N` | 200 with N bytes (capped at 1 GiB) of [`BODY_PATTERN`] repeated |
//! | `/delay/MS` | 200 `delayed MS ms\n` after MS milliseconds (capped at 10 minutes) |
//! | `/status/CODE` | CODE (100..=599) with `CODE Reason\n`; no body for 1xx, 204, 304 |
//! | `/echo`, `/echo/...` | 200 JSON [`EchoReport`] of the request |
//! | `/stats` | 200 JSON [`StatsSnapshot`] |
//! | `/healthz` | 200 `ok` |
//! | anything else | 404 `not found\n` |
//!
//! With [`OriginOptions::tls`] set it serves HTTPS (rustls with the aws-lc-rs provider, TLS 1.2
//! and 1.3, ALPN `http/1.1`, resumption on unless turned off; see [`OriginTls`]): each
//! connection is handshaken in its own task, then served by the same HTTP driver, compiled
//! separately for the TLS stream so plain TCP pays nothing for it. `/stats` counts full and
//! resumed handshakes and failed ones.
//!
//! With [`OriginMode::Echo`] it is instead a raw TCP echo server (for the L4 benchmarks): every
//! byte read is written back, under the same connection cap, counters and shutdown.
//!
//! Every method is answered; HEAD gets the headers (and Content-Length) GET would get. Query
//! parameters combine on any path: `delay=MS`, `status=CODE`, `bytes=N` (replaces the body),
//! `chunked=1` (chunked transfer coding, for HTTP/1.1 clients) and `max_age=S`
//! (`Cache-Control: public, max-age=S`, for the cache rows of `weir bench suite`). A malformed head, an invalid
//! framing (both Content-Length and Transfer-Encoding, a bad chunk, an HTTP/1.1 request
//! without Host) or a bad number in the target is answered 400 (431 for oversized heads, 501
//! for unknown transfer codings, 413 for `/echo` bodies over 16 MiB) and the connection closes.
//!
//! # Its own HTTP parser, on purpose
//!
//! The origin reads requests with its own small parser (`request.rs` over `httparse`, and
//! `body.rs` for chunked bodies), not with `weir-http`, the proxy's codec. That is
//! deliberate: the origin is the far end of the proxy's end-to-end tests, labs and
//! benchmarks, so it is an independent check of what the proxy writes. A request head or
//! body framing that `weir-http` got wrong in both directions would pass a test whose origin
//! shared the codec; here it gets a 400 and a closed connection. Keep the two apart.
//!
//! # Example
//!
//! ```
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use weir_origin::{Origin, OriginOptions};
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! let (shutdown, signal) = weir_core::Shutdown::new();
//! let origin = Origin::bind(OriginOptions::new("node-1", "127.0.0.1:0".parse().unwrap())).await?;
//! let address = origin.local_addr();
//! let stats = origin.stats();
//! let server = tokio::spawn(origin.run(signal));
//!
//! let mut client = tokio::net::TcpStream::connect(address).await?;
//! client.write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await?;
//! let mut response = String::new();
//! client.read_to_string(&mut response).await?;
//! assert!(response.starts_with("HTTP/1.1 200 OK\r\n"));
//! assert!(response.contains("X-Origin: node-1\r\n"));
//! assert!(response.ends_with("\r\n\r\nok"));
//! assert_eq!(stats.requests(), 1);
//!
//! shutdown.trigger();
//! server.await??;
//! # Ok(())
//! # }
//! ```

mod body;
mod connection;
mod echo;
mod options;
mod request;
mod response;
mod routes;
mod server;
mod shared;
mod stats;
mod tcp_echo;
mod tls;

pub use echo::{EchoReport, parse_echo_json};
pub use options::{OriginMode, OriginOptions};
pub use response::BODY_PATTERN;
pub use routes::{MAX_BODY_BYTES, MAX_DELAY_MS};
pub use server::Origin;
pub use stats::{OriginStats, StatsSnapshot, parse_stats_json};
pub use tls::{OriginTls, TlsError};
