//! The TCP session: the layer 4 pipeline after the front stages (`front.rs`). It reads like
//! the chart in ARCHITECTURE.md ("The TCP data path"):
//!
//! ```text
//! [handshake (tls)] → select → connect [+ PROXY header] (retry on another node) → relay → log
//! ```
//!
//! The node connection is a dedicated checkout of the node's connection pool: it counts
//! against the node's `max_connections`, and at the cap the session waits in the node's queue,
//! in its client's turn (connection offload at layer 4). It is closed when the session ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpStream;
use weir_config::ProxyVersion;
use weir_core::{Error, ErrorKind};
use weir_observe::SessionRecord;
use weir_tls::{FirstSpeaker, ServerStream, Stream};
use weir_upstream::node::InFlight;
use weir_upstream::{Flow, Lease, Pool, Tried};

use super::{Ended, Relay, Tally, relay, relay_tcp, splice};
use crate::client::TlsFacts;
use crate::drain::DrainGuard;
use crate::route::VirtualServerRuntime;

/// The client side of a session, as the front stages found it.
#[derive(Debug)]
pub(crate) struct Client {
    /// The client: a trusted PROXY header's source, else the peer.
    pub address: SocketAddr,
    /// The address the client connected to, as a trusted PROXY header said.
    pub destination: Option<SocketAddr>,
    /// The server name of a passed-through ClientHello.
    pub server_name: Option<String>,
    pub accepted: Instant,
    /// What a tls virtual server's handshake settled, and the subject of the client
    /// certificate it verified, for the session's record.
    pub tls: Option<(Arc<TlsFacts>, Option<Box<str>>)>,
}

/// A node connection for one session.
struct Connected {
    node: usize,
    lease: Lease,
    /// Counts the session on its node for the balancers, until it ends.
    _in_flight: InFlight,
}

/// Serves a tcp or tls virtual server's session: TLS handshake first on a tls one.
pub(crate) async fn serve(
    (stream, start): (TcpStream, Option<weir_tls::HandshakeStart>),
    mut client: Client,
    vs: &VirtualServerRuntime,
    drain: &DrainGuard,
) {
    let pool = Arc::clone(&vs.default_pool);
    let stream = match &vs.tls {
        None => ServerStream::Plain(stream),
        Some(tls) => match tls
            .handshake(stream, client.address, FirstSpeaker::Either, start)
            .await
        {
            Some((stream, info)) => {
                client.tls = TlsFacts::of(&stream)
                    .map(|facts| (facts, info.client_subject.map(String::into_boxed_str)));
                stream
            }
            None => return,
        },
    };
    run(stream, client, vs, &pool, drain).await;
}

/// Serves a session that relays the client's bytes as they are (TLS passthrough).
pub(crate) async fn serve_plain(
    stream: TcpStream,
    client: Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    drain: &DrainGuard,
) {
    run(ServerStream::Plain(stream), client, vs, pool, drain).await;
}

async fn run(
    mut stream: ServerStream,
    client: Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    drain: &DrainGuard,
) {
    // select → connect, with the PROXY header first when the pool sends one
    let preamble = match pool.config.proxy_protocol {
        None => Vec::new(),
        Some(version) => proxy_header(version, &client, stream.tcp()),
    };
    let leave = pool.config.connections.leave_queue_on_close;
    let tcp = stream.tcp();
    let left = || async move {
        match leave {
            true => crate::client::client_closed(tcp, false).await,
            false => std::future::pending().await,
        }
    };
    let flow = Flow::client(client.address.ip());
    let connected = match connect(pool, &preamble, flow, left).await {
        Ok(connected) => connected,
        Err(error) => {
            let result = unconnected_result(error.kind());
            match error.kind() {
                ErrorKind::ClientClosed => {
                    tracing::debug!(virtual_server = %vs.config.name, client = %client.address, %error, "TCP session ended before it reached a node");
                }
                _ => {
                    if let Some(left_out) = vs.shared.failure_log.take() {
                        tracing::warn!(virtual_server = %vs.config.name, client = %client.address, %error, left_out, "TCP session failed before it reached a node");
                    }
                }
            }
            log(vs, &client, pool, None, (0, 0), result);
            return;
        }
    };
    let Connected {
        node, mut lease, ..
    } = connected;
    // relay
    let (kind, settings) = vs.relay;
    let tally = Tally::counting(
        vs.metrics.bytes_received.clone(),
        vs.metrics.bytes_sent.clone(),
    );
    // Pinned where it is made: moved into a `select!`'s own state, its 4 KB (the relays'
    // states) were copied there once per session. `None`: the drain's cut.
    let relayed = {
        let relaying = std::pin::pin!(async {
            match (&mut stream, lease.stream(), kind) {
                (Stream::Plain(client_tcp), Stream::Plain(node_tcp), Relay::Splice) => {
                    match splice(client_tcp, node_tcp, settings, &tally).await {
                        Some(relayed) => relayed,
                        // No descriptors for its pipes: the session is copied instead.
                        None => relay_tcp(client_tcp, node_tcp, settings, false, &tally).await,
                    }
                }
                (Stream::Plain(client_tcp), Stream::Plain(node_tcp), Relay::Copy) => {
                    relay_tcp(client_tcp, node_tcp, settings, false, &tally).await
                }
                (Stream::Plain(client_tcp), Stream::Plain(node_tcp), Relay::Adaptive) => {
                    relay_tcp(client_tcp, node_tcp, settings, true, &tally).await
                }
                (client_stream, node_stream, _) => {
                    relay(client_stream, node_stream, settings, &tally).await
                }
            }
        });
        crate::drain::or_cut(relaying, drain.cut_off()).await
    };
    drop(lease);
    // log
    let address = pool.nodes[node].address;
    let (bytes, result) = match &relayed {
        Some(relayed) => {
            if matches!(relayed.ended, Ended::Node(_)) {
                tracing::debug!(virtual_server = %vs.config.name, node = %address, ended = ?relayed.ended, "TCP session ended by a node error");
            }
            let bytes = (relayed.client_to_node, relayed.node_to_client);
            (bytes, relayed.ended.as_str())
        }
        // The drain timeout passed with the session still open: it ends here, logged with
        // what it carried until then.
        None => (tally.bytes(), "shutting_down"),
    };
    log(vs, &client, pool, Some(address), bytes, result);
}

/// select → connect, moving to another node after a connect failure, at most `retries` times.
/// `left` ends a wait in a node's queue when the client has gone.
async fn connect<F, L>(
    pool: &Arc<Pool>,
    preamble: &[u8],
    flow: Flow,
    left: F,
) -> Result<Connected, Error>
where
    F: Fn() -> L,
    L: Future<Output = Error>,
{
    let mut tried = Tried::default();
    let mut retries = 0;
    let mut last_error = None;
    loop {
        let Some(index) = pool.select(tried, Instant::now()) else {
            let error = last_error.unwrap_or_else(|| {
                Error::new(ErrorKind::NoNodeAvailable, weir_core::Side::Internal)
                    .context(format!("every node of pool {} is down", pool.name))
            });
            if error.kind() == ErrorKind::NoNodeAvailable {
                pool.metrics.no_node_available.inc();
            }
            return Err(error);
        };
        // A retry is counted once another node was found for it (not a move away from a
        // node withdrawn while the client waited for it).
        if last_error
            .as_ref()
            .is_some_and(|error: &Error| error.kind() != ErrorKind::NoNodeAvailable)
        {
            pool.metrics.retries.inc();
        }
        tried.add(index);
        let node = &pool.nodes[index];
        let in_flight = node.start_request();
        match pool.connections[index]
            .checkout_dedicated_watching(preamble, flow, &left)
            .await
        {
            Ok(lease) => {
                pool.record_success(node, Instant::now());
                return Ok(Connected {
                    node: index,
                    lease,
                    _in_flight: in_flight,
                });
            }
            Err(error)
                if matches!(
                    error.kind(),
                    ErrorKind::ConnectFailed | ErrorKind::ConnectTimeout
                ) =>
            {
                pool.record_failure(node, Instant::now());
                if retries >= pool.config.retries {
                    return Err(error);
                }
                tracing::debug!(pool = %pool.name, node = %node.address, %error, "connect failed; trying another node");
                retries += 1;
                last_error = Some(error);
            }
            // Disabled or removed while the client waited in its queue: another node, no
            // retry spent (`NodeConnections::set_taking_requests`).
            Err(error) if error.kind() == ErrorKind::NoNodeAvailable && error.is_retry_safe() => {
                last_error = Some(error);
            }
            Err(error) => return Err(error),
        }
    }
}

/// The PROXY header naming the client and the address it connected to.
fn proxy_header(version: ProxyVersion, client: &Client, local: &TcpStream) -> Vec<u8> {
    let destination = client
        .destination
        .or_else(|| local.local_addr().ok())
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut header = Vec::with_capacity(64);
    match version {
        ProxyVersion::V1 => weir_proxy_protocol::write_v1(client.address, destination, &mut header),
        ProxyVersion::V2 => weir_proxy_protocol::write_v2(client.address, destination, &mut header),
    }
    header
}

/// Counts the session and writes its access record.
fn log(
    vs: &VirtualServerRuntime,
    client: &Client,
    pool: &Pool,
    node: Option<SocketAddr>,
    (received, sent): (u64, u64),
    result: &'static str,
) {
    // The bytes counted in the virtual server's metrics as they moved (`Tally`).
    vs.layer4.session(result);
    if let Some(log) = &vs.access_log {
        log.write_session(&SessionRecord {
            virtual_server: &vs.config.name,
            client: client.address,
            server_name: client.server_name.as_deref(),
            tls: client
                .tls
                .as_ref()
                .and_then(|(facts, subject)| facts.record(subject.as_deref())),
            pool: Some(&pool.name),
            node,
            bytes_received: received,
            bytes_sent: sent,
            duration: client.accepted.elapsed(),
            result,
        });
    }
}

/// The `result` of a session that reached no node, by why (`weir_tcp_sessions_total`).
fn unconnected_result(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NoNodeAvailable => "no_node",
        ErrorKind::QueueFull => "queue_full",
        ErrorKind::QueueTimeout => "queue_timeout",
        ErrorKind::ClientClosed => "client_left",
        // weir's own descriptors or ports ran out: no node failed.
        ErrorKind::OutOfResources => "out_of_resources",
        _ => "connect_failed",
    }
}

#[cfg(test)]
mod tests {
    use weir_core::ErrorKind;
    use weir_observe::metrics::SESSION_RESULTS;

    use super::unconnected_result;

    /// weir's own lack of descriptors is not a node's failure; every result is a label the
    /// counter has.
    #[test]
    fn sessions_that_reached_no_node_say_why() {
        let cases = [
            (ErrorKind::OutOfResources, "out_of_resources"),
            (ErrorKind::ConnectFailed, "connect_failed"),
            (ErrorKind::ConnectTimeout, "connect_failed"),
            (ErrorKind::NoNodeAvailable, "no_node"),
            (ErrorKind::QueueFull, "queue_full"),
            (ErrorKind::QueueTimeout, "queue_timeout"),
            (ErrorKind::ClientClosed, "client_left"),
        ];
        for (kind, result) in cases {
            assert_eq!(unconnected_result(kind), result, "{kind:?}");
            assert!(SESSION_RESULTS.contains(&result), "{result}");
        }
    }
}
