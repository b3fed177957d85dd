//! The accept loop: binds the listener, admits or refuses connections against the cap, spawns
//! one task per connection and drains them at shutdown.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::SockRef;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::{JoinError, JoinSet};
use tokio::time::timeout;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, error, warn};
use weir_core::ShutdownSignal;

use crate::options::{OriginMode, OriginOptions};
use crate::shared::Shared;
use crate::stats::{OpenConnection, OriginStats};
use crate::tls::OriginTls;
use crate::{connection, tcp_echo};

/// Pending connections the kernel queues for `accept`.
const LISTEN_BACKLOG: u32 = 1024;
/// After shutdown, connections still busy this long are aborted.
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// Pause after an accept failure such as running out of file descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// A bound origin server; [`Origin::run`] serves it.
#[derive(Debug)]
pub struct Origin {
    listener: TcpListener,
    local_addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Origin {
    /// Binds `options.listen` now (port 0 picks a free port). Fails if the address cannot be
    /// bound or the name cannot be sent as a header value.
    pub async fn bind(options: OriginOptions) -> io::Result<Origin> {
        if options.mode == OriginMode::Echo && options.tls.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an echo origin does not speak TLS",
            ));
        }
        if !is_header_value(&options.name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "origin name {:?} cannot be sent as a header value",
                    options.name
                ),
            ));
        }
        let socket = if options.listen.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(options.listen)?;
        let listener = socket.listen(LISTEN_BACKLOG)?;
        let local_addr = listener.local_addr()?;
        let shared = Shared {
            fixed_headers: format!("X-Origin: {}\r\n", options.name).into_bytes(),
            hello: format!("hello from weir origin {}\n", options.name).into_bytes(),
            stats: Arc::new(OriginStats::new(options.name.clone())),
            options,
        };
        Ok(Origin {
            listener,
            local_addr,
            shared: Arc::new(shared),
        })
    }

    /// The bound address, with the real port when bound to port 0.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The origin's name.
    pub fn name(&self) -> &str {
        &self.shared.options.name
    }

    /// The live counters; stays readable after [`Origin::run`] returns.
    pub fn stats(&self) -> Arc<OriginStats> {
        Arc::clone(&self.shared.stats)
    }

    /// Serves until `shutdown` triggers; then stops accepting, closes idle connections, lets
    /// busy ones finish their current response (with `Connection: close`) for up to 5 s,
    /// aborts the rest and returns. Accept failures are logged and retried, never returned.
    pub async fn run(self, shutdown: ShutdownSignal) -> io::Result<()> {
        let Origin {
            listener,
            local_addr,
            shared,
        } = self;
        debug!(name = %shared.options.name, %local_addr, "origin serving");
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                () = shutdown.triggered() => break,
                Some(finished) = connections.join_next(), if !connections.is_empty() => {
                    report_task_failure(finished);
                }
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => admit(stream, peer, &shared, &shutdown, &mut connections),
                    Err(error) => accept_failed(error).await,
                },
            }
        }
        drop(listener);
        drain(&mut connections).await;
        debug!(name = %shared.options.name, %local_addr, "origin stopped");
        Ok(())
    }
}

/// Spawns a task for the connection, or resets it when the cap is reached.
fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    shutdown: &ShutdownSignal,
    connections: &mut JoinSet<()>,
) {
    if let Some(cap) = shared.options.max_connections
        && shared.stats.connections_open() >= u64::from(cap)
    {
        refuse(stream, peer);
        shared.stats.count_refused();
        return;
    }
    let open = shared.stats.open_connection();
    if let Err(error) = stream.set_nodelay(true) {
        debug!(%peer, %error, "origin could not set TCP_NODELAY");
    }
    let (shared, shutdown) = (Arc::clone(shared), shutdown.clone());
    match (shared.options.mode, shared.options.tls.clone()) {
        (OriginMode::Http, None) => {
            connections.spawn(connection::serve(stream, peer, shared, shutdown, open))
        }
        (OriginMode::Http, Some(config)) => {
            connections.spawn(serve_tls(stream, peer, shared, shutdown, open, config))
        }
        (OriginMode::Echo, _) => {
            connections.spawn(tcp_echo::serve(stream, peer, shared, shutdown, open))
        }
    };
}

/// Closes with SO_LINGER 0, so the client sees a reset, as from an overloaded server.
fn refuse(stream: TcpStream, peer: SocketAddr) {
    if let Err(error) = SockRef::from(&stream).set_linger(Some(Duration::ZERO)) {
        debug!(%peer, %error, "origin could not set SO_LINGER 0 on a refused connection");
    }
    debug!(%peer, "origin refused a connection past its cap");
    drop(stream);
}

async fn accept_failed(error: io::Error) {
    match error.kind() {
        // The client gave up before we accepted: nothing to do.
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset => {
            debug!(%error, "origin accept aborted by the client");
        }
        // Out of descriptors or memory: wait a little rather than spin.
        _ => {
            warn!(%error, "origin accept failed");
            tokio::time::sleep(ACCEPT_BACKOFF).await;
        }
    }
}

/// Waits for connections to finish, aborting those still busy after the grace period.
async fn drain(connections: &mut JoinSet<()>) {
    let grace = tokio::time::sleep(DRAIN_GRACE);
    tokio::pin!(grace);
    while !connections.is_empty() {
        tokio::select! {
            Some(finished) = connections.join_next() => report_task_failure(finished),
            () = &mut grace => {
                debug!(busy = connections.len(), "origin drain grace over; aborting connections");
                connections.abort_all();
                while connections.join_next().await.is_some() {}
            }
        }
    }
}

fn report_task_failure(finished: Result<(), JoinError>) {
    if let Err(failure) = finished
        && failure.is_panic()
    {
        error!(%failure, "origin connection task panicked");
    }
}

/// Visible ASCII and spaces, not starting or ending with a space (RFC 9110 §5.5, minus obs-text).
fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|byte| byte == b' ' || byte.is_ascii_graphic())
        && !value.starts_with(' ')
        && !value.ends_with(' ')
}

/// Runs the TLS handshake (bounded by `idle_timeout`, cut short by shutdown), counts how it
/// went, then serves HTTP over the TLS stream. Errors end the connection with one debug line.
async fn serve_tls(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    shutdown: ShutdownSignal,
    open: OpenConnection,
    tls: OriginTls,
) {
    let acceptor = TlsAcceptor::from(Arc::clone(tls.config()));
    let handshake = tokio::select! {
        () = shutdown.triggered() => return,
        done = timeout(shared.options.idle_timeout, acceptor.accept(stream)) => done,
    };
    let stream = match handshake {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => return handshake_failed(&shared, peer, &error),
        Err(_elapsed) => {
            let error = io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out");
            return handshake_failed(&shared, peer, &error);
        }
    };
    let resumed = stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    shared.stats.count_handshake(resumed);
    connection::serve(stream, peer, shared, shutdown, open).await;
}

fn handshake_failed(shared: &Shared, peer: SocketAddr, error: &io::Error) {
    shared.stats.count_handshake_failure();
    debug!(%peer, %error, "origin TLS handshake failed");
}
