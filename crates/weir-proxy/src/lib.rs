//! The L7 data path: listeners, the HTTP/1.1 pipeline and the mapping of
//! errors to answers.
//!
//! [`Proxy::bind`] binds every listener of a validated config (so an address
//! in use fails before anything serves), and [`BoundProxy::run`] serves until
//! shutdown, then drains. The pipeline itself reads in one file:
//! `src/pipeline.rs`.
//!
//! Time on the data path is `tokio::time::Instant` throughout (deadlines,
//! durations, the access record), so tests can pause the clock; a std
//! `Instant` is made with `.into_std()` only where weir-upstream's API takes
//! one (node selection and passive health).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let config = weir_config::embedded_default();
//! let metrics = weir_observe::Metrics::new();
//! let (shutdown, signal) = weir_core::Shutdown::new();
//! let proxy = weir_proxy::Proxy::bind(&config, &metrics).expect("certificates load, ports bind");
//! proxy.run(signal).await?;
//! # drop(shutdown);
//! # Ok(()) }
//! ```

mod answer;
mod buffers;
mod client;
mod content;
mod crew;
mod drain;
mod exchange;
mod front;
pub mod handoff;
mod http2;
mod listener;
mod live;
mod model;
mod names;
mod park;
mod pipeline;
mod policy;
mod proxy;
mod refuse;
mod request_body;
mod response;
mod route;
mod rules;
mod stage;
pub mod tcp;
mod tls;
mod traffic;
mod upgrade;

/// This hop's name in `Via` headers.
const VIA: &str = "weir";
/// Bound on chunk-size lines and trailer sections from nodes. gRPC puts rich error
/// details (`grpc-status-details-bin`) in its trailers, which can take more than a head:
/// Envoy bounds them at 60 KiB, grpc-go at 16 MiB. At 8 KiB a node's status with 10 KB
/// of details reached the client as a reset stream, its status lost.
const MAX_TRAILER_BYTES: usize = 64 * 1024;

/// How long a request waits for its node (its answer, or room in the node's window for its
/// body) before weir also watches its client: a client that then goes (FIN, HTTP/2 reset)
/// ends the request, and the node's connection is closed (an HTTP/2 node's stream reset)
/// instead of carrying an answer nobody reads. Waits that end sooner (nearly all) cost no
/// watch at all.
const WATCH_CLIENT_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// `waiting`'s outcome, or `left`'s error when it is ready first (the client went),
/// watched from [`WATCH_CLIENT_AFTER`] on: most waits end sooner, with no watch at all.
async fn unless_left<O, L: std::future::Future<Output = weir_core::Error>>(
    waiting: impl std::future::Future<Output = O>,
    left: std::pin::Pin<&mut L>,
) -> Result<O, weir_core::Error> {
    let mut waiting = std::pin::pin!(waiting);
    if let Ok(done) = tokio::time::timeout(WATCH_CLIENT_AFTER, waiting.as_mut()).await {
        return Ok(done);
    }
    tokio::select! {
        biased;
        done = waiting => Ok(done),
        error = left => Err(error),
    }
}

// Futures boxed where they are made (`weir_core::boxed`).
use weir_core::boxed;

/// Interim (1xx) responses relayed before the final one, whenever the node sends them (the
/// request body still going included); past it → 502.
const MAX_INTERIM_RESPONSES: u32 = 10;

/// The same bound on what clients send: a client's trailers carry no status, and a client
/// stalled in them holds what they took, so they are held to less than a head
/// (`limits.max_header_bytes`, 16 KiB by default).
const MAX_REQUEST_TRAILER_BYTES: usize = 8 * 1024;

pub use listener::{adopt, bind_tcp};
pub use live::{Applied, Live, ReloadError, ReloadRecord};
pub use model::Model;
pub use proxy::{BoundProxy, Proxy, StartError};
pub use route::VirtualServerRuntime;
pub use tls::TlsTermination;
