//! The admin listener: Prometheus metrics, a health check, the REST API and the dashboard,
//! over weir-http's HTTP/1.1 codec.
//!
//! Endpoints:
//!
//! - `/metrics`: every metric of [`weir_observe::Metrics`], OpenMetrics text to a scraper that asks for it, the classic Prometheus text format to others.
//! - `/healthz`: `200 ok` while the health check returns true, `503 draining` otherwise.
//! - `/api/v1/...`: the REST API over the running model (JSON), when the state has a
//!   [`Control`]; documented in `docs/admin-api.md`.
//! - `/`: the dashboard (one page, its script and styles embedded in the binary).
//!
//! Other paths get 404, unsupported methods 405, and malformed requests 400 (431 when the
//! head is too large, 408 when it arrives too slowly), after which the connection closes.
//! With a bearer token configured, everything but `/healthz` and the dashboard page needs
//! it (`401` otherwise). This is not the data path: it favours simplicity over speed.
//!
//! A metrics-only admin listener (no API) is [`AdminState::new`] and [`serve`]:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! # async fn run() -> std::io::Result<()> {
//! let metrics = weir_observe::Metrics::new();
//! let draining = Arc::new(AtomicBool::new(false));
//! let health_view = draining.clone();
//! let state = weir_admin::AdminState::new(
//!     metrics,
//!     Arc::new(move || !health_view.load(Ordering::Relaxed)),
//! );
//! let (shutdown, signal) = weir_core::Shutdown::new();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9901").await?;
//! tokio::spawn(weir_admin::serve(listener, state, signal));
//! // ... later: report draining first, stop the admin listener last.
//! draining.store(true, Ordering::Relaxed);
//! shutdown.trigger();
//! # Ok(())
//! # }
//! ```

mod api;
mod auth;
mod cache_api;
mod connection;
mod dashboard;
mod guard;
mod http;
mod reclaim;
mod routes;
mod views;

pub use api::Control;

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use weir_core::ShutdownSignal;
use weir_observe::Metrics;

/// Answers whether this instance should receive traffic (`/healthz`).
pub type HealthCheck = Arc<dyn Fn() -> bool + Send + Sync>;

/// What the admin endpoints read from, and the limits they run under.
#[derive(Clone)]
pub struct AdminState {
    /// The registry `/metrics` encodes.
    pub metrics: Arc<Metrics>,
    /// Answers `/healthz`.
    pub health: HealthCheck,
    /// Bounds on request sizes and times per client.
    pub limits: Limits,
    /// The REST API and dashboard over a running proxy; `None` serves metrics and health only.
    pub control: Option<Arc<Control>>,
}

/// Bounds on what one client can make the admin listener do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head accepted; larger ones get 431.
    pub max_head_bytes: usize,
    /// Largest request body accepted (a whole config file for `PUT /api/v1/config`);
    /// larger ones get 413.
    pub max_body_bytes: usize,
    /// Time allowed to receive a whole request head once its first byte has arrived, and
    /// for a new connection's first byte.
    pub header_read_timeout: Duration,
    /// Time a request body may go with no byte arriving; a body that stalls longer gets
    /// 408.
    pub body_read_timeout: Duration,
    /// Time allowed to receive a whole request body once its head has arrived (8 MiB in
    /// a minute is 140 KB/s); a slower one gets 408.
    pub body_timeout: Duration,
    /// Time an idle kept-alive connection waits for its next request.
    pub keep_alive_timeout: Duration,
    /// Time allowed to write one response.
    pub write_timeout: Duration,
    /// Connections served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// After shutdown, how long open connections get to finish before they are cut.
    pub drain_timeout: Duration,
}

impl AdminState {
    /// State with default [`Limits`].
    pub fn new(metrics: Arc<Metrics>, health: HealthCheck) -> AdminState {
        AdminState {
            metrics,
            health,
            limits: Limits::default(),
            control: None,
        }
    }
}

/// Serves the admin endpoints on `listener` until `shutdown` triggers, then stops accepting,
/// lets open connections finish their current request (up to [`Limits::drain_timeout`])
/// and returns.
///
/// `/healthz` reports what `state.health` says; to have load balancers see `503 draining`
/// while the proxy drains, make the health check turn false when draining begins and pass
/// a `shutdown` signal that triggers only once draining is over.
///
/// Transient accept failures (aborted connections, descriptor exhaustion) are logged and
/// retried; an error is returned only when the listener itself is unusable.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: ShutdownSignal,
) -> io::Result<()> {
    let state = Arc::new(state);
    let local = listener.local_addr()?;
    let slots = Arc::new(Semaphore::new(state.limits.max_connections.max(1)));
    // The connections waiting for a request: when every slot is taken, the oldest close.
    let waiting = Arc::new(reclaim::Waiting::default());
    let mut connections = JoinSet::new();
    let mut failures = weir_observe::AcceptFailures::new("admin");
    let result = loop {
        while connections.try_join_next().is_some() {}
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let Some(slot) = full(&slots, &waiting, &shutdown).await else {
                    break Ok(());
                };
                slot
            }
        };
        let accepted = tokio::select! {
            () = shutdown.triggered() => break Ok(()),
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, peer)) => {
                failures.accepted();
                tracing::debug!(%peer, "admin connection accepted");
                stream
            }
            Err(error) => match accept_error_action(&error) {
                AcceptErrorAction::Retry => continue,
                AcceptErrorAction::Pause => {
                    failures.failed(&error);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                AcceptErrorAction::Stop => break Err(error),
            },
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "admin connection: cannot set TCP_NODELAY");
        }
        let state = state.clone();
        let signal = shutdown.clone();
        let waiting = Arc::clone(&waiting);
        connections.spawn(async move {
            connection::serve_connection(stream, &state, (signal, &waiting), local).await;
            drop(slot);
        });
    };
    drop(listener);
    drain(connections, state.limits.drain_timeout).await;
    result
}

/// Waits for a slot while every one is taken, asking the oldest connections that wait for
/// a request (kept alive, or new and silent) to give theirs back ([`reclaim::Waiting`]),
/// again every 100 ms. `None` when shutdown comes first.
async fn full(
    slots: &Arc<Semaphore>,
    waiting: &reclaim::Waiting,
    shutdown: &ShutdownSignal,
) -> Option<OwnedSemaphorePermit> {
    loop {
        waiting.reclaim();
        tokio::select! {
            () = shutdown.triggered() => return None,
            // The semaphore is never closed, so acquiring only fails if that changes.
            slot = slots.clone().acquire_owned() => return slot.ok(),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_head_bytes: 8 * 1024,
            max_body_bytes: 8 * 1024 * 1024,
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(60),
            keep_alive_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
            max_connections: 512,
            drain_timeout: Duration::from_secs(5),
        }
    }
}

impl fmt::Debug for AdminState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminState")
            .field("metrics", &"Metrics")
            .field("health", &"Fn() -> bool")
            .field("limits", &self.limits)
            .field("control", &self.control.is_some())
            .finish()
    }
}

/// What to do after `accept` fails.
enum AcceptErrorAction {
    /// The failure concerned one connection only.
    Retry,
    /// Out of descriptors or memory: wait before trying again rather than spin.
    Pause,
    /// The listener is unusable.
    Stop,
}

fn accept_error_action(error: &io::Error) -> AcceptErrorAction {
    use io::ErrorKind::*;
    match error.kind() {
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
        | TimedOut => AcceptErrorAction::Retry,
        InvalidInput | NotConnected | Unsupported => AcceptErrorAction::Stop,
        _ => AcceptErrorAction::Pause,
    }
}

/// Waits for open connections to finish, cutting those still open after `limit`.
async fn drain(mut connections: JoinSet<()>, limit: Duration) {
    let all_done = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limit, all_done).await.is_err() {
        tracing::debug!("admin connections still open after the drain timeout; closing them");
        connections.shutdown().await;
    }
}

#[cfg(test)]
mod test_log;
