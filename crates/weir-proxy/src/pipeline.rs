//! The HTTP/1.1 pipeline for one client connection. It reads like the chart
//! in ARCHITECTURE.md ("The HTTP data path"):
//!
//! ```text
//! [handshake →] read_head → route → filter_request → read body → select → checkout → forward → respond → log → release
//!   ↑                                                                                          │
//!   └─────────────────────────────────────── kept alive ──────────────────────────────────────┘
//! ```
//!
//! Any stage may answer early (4xx/5xx) and close. Each stage lives in its
//! own module; this file only calls them in order.

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::time::Instant;
use weir_core::{ErrorKind, ShutdownSignal};
use weir_http::{RequestHead, Version};
use weir_observe::AccessRecord;
use weir_tls::ServerStream;
use weir_upstream::Pool;

use crate::answer::Failure;
use crate::client::Client;
use crate::exchange::{self, Exchange};
use crate::policy;
use crate::request_body;
use crate::response::{self, Sent};
use crate::route::VirtualServerRuntime;
use crate::upgrade;

/// Serves one client connection until it closes.
pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    vs: Arc<VirtualServerRuntime>,
    mut shutdown: ShutdownSignal,
) {
    // handshake (HTTPS virtual servers)
    let (stream, client_subject) = match &vs.tls {
        None => (ServerStream::Plain(stream), None),
        Some(tls) => match tls.handshake(stream, peer).await {
            Some((stream, info)) => (stream, info.client_subject),
            None => return,
        },
    };
    let mut client = Client::new(stream, peer, Instant::now());
    client.client_subject = client_subject;
    let next = loop {
        // read_head
        let head = match client.read_head(&vs, &mut shutdown).await {
            Ok(Some(head)) => head,
            Ok(None) => break Next::Close,
            Err(failure) => {
                answer_failure(&mut client, &vs, None, None, failure, Instant::now()).await;
                return;
            }
        };
        let started = Instant::now();
        // route
        let pool = Arc::clone(vs.route(&head));
        let keep_alive = wants_keep_alive(&client, &vs, &head, &shutdown);
        match serve_request(
            &mut client,
            &vs,
            &pool,
            &head,
            keep_alive,
            &shutdown,
            started,
        )
        .await
        {
            Ok(Next::KeepAlive) => continue,
            Ok(next) => break next,
            Err(failure) => {
                answer_failure(&mut client, &vs, Some(&head), Some(&pool), failure, started).await;
                return;
            }
        }
    };
    // weir ends the connection: with a close_notify on TLS.
    match next {
        Next::Linger => client.linger_close().await,
        _ => client.close().await,
    }
}

/// What happens to the client connection after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    KeepAlive,
    Close,
    /// Close, but read what the client still sends first (the rest of a
    /// body the node did not wait for), so the answer is not lost to a reset.
    Linger,
}

/// One request from filter to log. Returns what becomes of the connection.
async fn serve_request(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    head: &RequestHead,
    keep_alive: bool,
    shutdown: &ShutdownSignal,
    started: Instant,
) -> Result<Next, Failure> {
    // filter_request: CONNECT, TRACE, upgrades and header names, as the virtual server allows
    let forwarding = policy::filter(vs, head)?;
    // read body (up to request_buffer) before any upstream connection is taken
    let mut body = request_body::read(client, vs, head).await?;
    // select → checkout → forward, with bounded retries
    let exchange = exchange::exchange(client, vs, pool, head, forwarding, &mut body).await?;
    let body_cut = exchange.body_cut;
    let node = exchange.node;
    let node_state = &pool.nodes[node];
    let head_received = Instant::now();
    let response_time = head_received.saturating_duration_since(exchange.sent_at);
    node_state.record_response_time(response_time);
    if exchange.response.status() >= 500 {
        node_state.metrics.responses_5xx.inc();
        node_state.record_failure(head_received.into_std());
    } else {
        node_state.record_success(head_received.into_std());
    }
    // respond (the upstream connection is released inside, as soon as the node is done);
    // a drain that began meanwhile closes the connection after this response.
    let keep_alive = keep_alive && !shutdown.is_triggered() && !forwarding.connect;
    let status = exchange.response.status();
    let tunnelled = status == 101 || (forwarding.connect && (200..300).contains(&status));
    let sent = if tunnelled {
        upgrade::tunnel(client, vs, exchange, head.version()).await?
    } else {
        respond(client, vs, pool, exchange, head.version(), keep_alive).await?
    };
    // log
    vs.metrics.record_status(sent.status);
    pool.metrics.record_status(sent.status);
    vs.metrics
        .bytes_received
        .inc_by(head.raw().len() as u64 + body.received);
    vs.metrics.bytes_sent.inc_by(sent.bytes);
    if vs.access_log {
        AccessRecord {
            virtual_server: &vs.config.name,
            client: client.peer,
            method: lossy(head.method_bytes()),
            target: lossy(head.target()),
            version: version_str(head.version()),
            status: sent.status,
            bytes_sent: sent.bytes,
            pool: Some(&pool.name),
            node: Some(node_state.address),
            duration: started.elapsed(),
            upstream_duration: Some(response_time),
            error: None,
        }
        .emit();
    }
    Ok(match sent.keep_alive {
        true => Next::KeepAlive,
        false if body_cut => Next::Linger,
        // A CONNECT the node refused: whatever the client sent after it was meant for a tunnel.
        false if forwarding.connect && !tunnelled => Next::Linger,
        false => Next::Close,
    })
}

async fn respond(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Pool,
    exchange: Exchange,
    version: Version,
    keep_alive: bool,
) -> Result<Sent, Failure> {
    let timeout = pool.config.timeouts.response;
    response::respond(client, vs, exchange, version, keep_alive, timeout).await
}

/// Whether this request's connection may be kept after the response.
fn wants_keep_alive(
    client: &Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    shutdown: &ShutdownSignal,
) -> bool {
    let under_limit = vs
        .config
        .limits
        .max_requests_per_connection
        .is_none_or(|max| client.requests < max.get());
    head.keep_alive() && under_limit && !shutdown.is_triggered()
}

/// Answers a failed request (when there is still someone to answer), counts it and logs it.
async fn answer_failure(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: Option<&RequestHead>,
    pool: Option<&Arc<Pool>>,
    failure: Failure,
    started: Instant,
) {
    let version = head.map_or(Version::Http11, |h| h.version());
    let kind = failure.error.kind();
    let mut bytes = 0;
    if let Some(status) = failure.status {
        // After an error the rest of the request may still be in flight: close.
        bytes = client
            .answer(status, version, false, vs.config.timeouts.write)
            .await
            .unwrap_or(0);
        vs.metrics.record_status(status);
        if let Some(pool) = pool {
            pool.metrics.record_status(status);
        }
        if matches!(
            kind,
            ErrorKind::BadRequest | ErrorKind::HeadTooLarge | ErrorKind::BodyTooLarge
        ) {
            vs.metrics.bad_requests.inc();
        }
    }
    let status = failure.status.unwrap_or(0);
    // Client-caused closes are expected traffic; gateway failures are worth a warning.
    match kind {
        ErrorKind::ClientClosed | ErrorKind::ClientTimeout => {
            tracing::debug!(virtual_server = %vs.config.name, client = %client.peer, status, error = %failure.error, "request ended early");
        }
        ErrorKind::BadRequest
        | ErrorKind::HeadTooLarge
        | ErrorKind::BodyTooLarge
        | ErrorKind::MethodNotAllowed => {
            tracing::info!(virtual_server = %vs.config.name, client = %client.peer, status, error = %failure.error, "rejected request");
        }
        _ => {
            tracing::warn!(virtual_server = %vs.config.name, client = %client.peer, status, error = %failure.error, "request failed");
        }
    }
    if vs.access_log && status != 0 {
        AccessRecord {
            virtual_server: &vs.config.name,
            client: client.peer,
            method: head.map_or("-", |h| lossy(h.method_bytes())),
            target: head.map_or("-", |h| lossy(h.target())),
            version: version_str(version),
            status,
            bytes_sent: bytes,
            pool: pool.map(|p| p.name.as_str()),
            node: None,
            duration: started.elapsed(),
            upstream_duration: None,
            error: Some(kind.as_str()),
        }
        .emit();
    }
    if bytes > 0 {
        client.linger_close().await;
    }
}

fn lossy(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or("<non-utf8>")
}

fn version_str(version: Version) -> &'static str {
    match version {
        Version::Http10 => "HTTP/1.0",
        Version::Http11 => "HTTP/1.1",
    }
}
