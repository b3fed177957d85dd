//! A connection past its client's `client_connections` limit: its first request head is
//! read (so the client gets an answer, not a reset), answered with the limit's status
//! and `Retry-After`, and the connection closes. The handshake and the head get
//! [`REFUSAL_WAIT`] at most, not the virtual server's timeouts: a refused connection
//! holds a place of the virtual server's `max_connections` and a descriptor, and one
//! client must not fill those with connections it was refused.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::time::Instant;
use weir_core::ShutdownSignal;
use weir_http::SimpleResponse;
use weir_observe::AccessRecord;
use weir_rules::Refusal;

use crate::answer::{body_for, lossy};
use crate::client::IdleConnection;
use crate::drain::Admission;
use crate::pipeline::handshake;

/// How long a refused connection is given for its TLS handshake and first head.
const REFUSAL_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The HTTP pipeline for a connection whose client address came from a PROXY header
/// (`crate::front`): within its client's connection limit, the pipeline, holding its
/// place until the connection ends; past it, the refusal.
pub(crate) async fn serve_limited(
    stream: TcpStream,
    client: SocketAddr,
    admission: Admission,
    shutdown: ShutdownSignal,
) {
    let vs = Arc::clone(&admission.vs);
    match vs.traffic.limits.admit_connection(client.ip()) {
        Ok(permit) => {
            let _permit = permit;
            crate::pipeline::serve_connection(stream, client, admission, shutdown).await;
        }
        Err(refusal) => {
            vs.traffic.metrics.client_connection_refusals.inc();
            drop(vs);
            Box::pin(refuse_connection(
                stream, client, admission, refusal, shutdown,
            ))
            .await;
        }
    }
}

/// Serves a refused connection: one answer, then close.
pub(crate) async fn refuse_connection(
    stream: TcpStream,
    peer: SocketAddr,
    admission: Admission,
    refusal: Refusal,
    shutdown: ShutdownSignal,
) {
    let vs = Arc::clone(&admission.vs);
    let started = Instant::now();
    let deadline = started + REFUSAL_WAIT;
    let handshake = tokio::time::timeout_at(deadline, Box::pin(handshake(stream, peer, &vs)));
    let Ok(Some((stream, verified))) = handshake.await else {
        return;
    };
    if stream.alpn_is_h2() {
        // No HTTP/1.1 answer can go to a client that chose HTTP/2: close it (counted).
        tracing::debug!(virtual_server = %vs.config.name, client = %peer, "too many connections from this client; closing an HTTP/2 connection");
        return;
    }
    let idle = IdleConnection::new(stream, peer, started, verified);
    let mut client = idle.into_client();
    let head = tokio::time::timeout_at(deadline, client.read_head(&vs, &shutdown)).await;
    if let Ok(Ok(Some(head))) = head {
        let retry_after = refusal.retry_after_seconds().to_string();
        let shape = SimpleResponse {
            status: refusal.status,
            version: head.version(),
            keep_alive: false,
            head_request: head.method() == weir_http::Method::Head,
        };
        client.write_buf.clear();
        let own = crate::client::OwnAnswer {
            set: &vs.config.response_headers,
            edits: &weir_http::Unedited,
        };
        weir_http::write_simple_response_edited(
            &shape,
            &[("Retry-After", &retry_after)],
            &own,
            body_for(refusal.status),
            &mut client.write_buf,
        );
        let bytes = client.write_buf.len() as u64;
        // The connection's last answer: it leaves with the FIN (and close_notify).
        if client.send_last(vs.config.timeouts.write).await.is_ok() {
            let duration = started.elapsed();
            // As for any answer (`pipeline::record`): the record's bytes and duration are
            // the metrics' too.
            let received = head.raw().len() as u64;
            vs.metrics
                .record_answer(refusal.status, received, bytes, duration);
            tracing::debug!(virtual_server = %vs.config.name, client = %peer, "too many connections from this client; answered and closing");
            if let Some(log) = &vs.access_log {
                log.write(&AccessRecord {
                    virtual_server: &vs.config.name,
                    client: peer,
                    method: lossy(head.method_bytes()),
                    target: lossy(head.target()),
                    version: client.version_label(head.version()),
                    status: refusal.status,
                    bytes_sent: bytes,
                    pool: None,
                    node: None,
                    duration,
                    upstream_duration: None,
                    error: Some("client_connections"),
                    request_id: None,
                    rule: None,
                    grpc_status: None,
                    cache: None,
                    tls: client.tls_record(),
                });
            }
        }
    }
    client.linger_close().await;
    client.release();
    drop(admission);
}
