//! A connection past its client's `client_connections` limit: its first request head is
//! read (so the client gets an answer, not a reset), answered with the limit's status
//! and `Retry-After`, and the connection closes. An HTTP/2 client (ALPN `h2`, or h2c with
//! prior knowledge) gets the same answer on its first stream, then GOAWAY. The handshake
//! and the head get [`REFUSAL_WAIT`] at most, not the virtual server's timeouts: a refused
//! connection holds a place of the virtual server's `max_connections` and a descriptor,
//! and one client must not fill those with connections it was refused.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::time::Instant;
use weir_core::ShutdownSignal;
use weir_http::SimpleResponse;
use weir_observe::AccessRecord;
use weir_rules::Refusal;
use weir_tls::ServerStream;

use crate::answer::{body_for, lossy};
use crate::client::IdleConnection;
use crate::drain::Admission;
use crate::pipeline::handshake;
use crate::route::VirtualServerRuntime;

/// How long a refused connection is given for its TLS handshake and first head.
const REFUSAL_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A refused HTTP/2 connection: its first stream gets the refusal (status, `Retry-After`,
/// the virtual server's `response_headers`, an access record), then GOAWAY; the streams it
/// opened meanwhile are refused with `REFUSED_STREAM`, and the connection gets
/// [`REFUSAL_WAIT`] for its preface and to go idle.
async fn refuse_h2(
    stream: ServerStream,
    rewind: Bytes,
    peer: SocketAddr,
    vs: &Arc<VirtualServerRuntime>,
    refusal: Refusal,
    shutdown: ShutdownSignal,
) {
    let tls = crate::client::TlsFacts::of(&stream);
    let via = match tls {
        Some(_) => crate::http2::Via::Alpn,
        None => crate::http2::Via::H2c,
    };
    let timing = crate::http2::ConnectionLimits {
        handshake: REFUSAL_WAIT,
        idle: REFUSAL_WAIT,
        max_streams: Some(1),
        head: vs.head_limits,
    };
    let handler = RefusedStreams {
        vs: Arc::clone(vs),
        peer,
        tls,
        refusal,
        accepted_at: Instant::now(),
    };
    let watch = (&vs.metrics.http2, &vs.shared.rejection_log);
    // One stream at a time, and a client that does not answer the GOAWAY's PING is closed
    // within the refusal's wait too.
    let mut settings = vs.config.http2.clone();
    settings.max_concurrent_streams = 1;
    settings.ping_timeout = settings.ping_timeout.min(REFUSAL_WAIT);
    crate::http2::serve(
        stream, rewind, via, &settings, timing, watch, handler, shutdown,
    )
    .await;
}

/// Answers the streams of a refused HTTP/2 connection with the refusal.
#[derive(Clone)]
struct RefusedStreams {
    vs: Arc<VirtualServerRuntime>,
    peer: SocketAddr,
    tls: Option<Arc<crate::client::TlsFacts>>,
    refusal: Refusal,
    accepted_at: Instant,
}

impl crate::http2::StreamHandler for RefusedStreams {
    async fn serve(&self, mut stream: crate::http2::H2Stream, request: crate::http2::Incoming) {
        let vs = &self.vs;
        let status = self.refusal.status;
        let body = body_for(status);
        let (method, target) = request_line(&request);
        let head_request = method == "HEAD";
        // The fields weir's own answers carry (`Client::answer_simple`), in HTTP/2 form.
        let retry_after = self.refusal.retry_after_seconds().to_string();
        let shape = SimpleResponse {
            status,
            version: weir_http::Version::Http11,
            keep_alive: false,
            head_request,
        };
        let extra = [("Retry-After", retry_after.as_str())];
        let own = crate::client::OwnAnswer {
            set: &vs.config.response_headers,
            edits: &weir_http::Unedited,
        };
        let mut written = bytes::BytesMut::new();
        weir_http::http2::write_simple_head_for_h2(&shape, &extra, &own, body, &mut written);
        let end = head_request || body.is_empty();
        let head = crate::http2::Head::Written(status, &written);
        if stream.send_head(head, end).is_ok() && !end {
            let _ = stream
                .send_data(Bytes::from_static(body), true, REFUSAL_WAIT)
                .await;
        }
        let duration = self.accepted_at.elapsed();
        // Counted as an HTTP/2 answer is: its head in HTTP/1.1 form, then its body.
        let mut counted = bytes::BytesMut::new();
        weir_http::write_simple_response_edited(&shape, &extra, &own, body, &mut counted);
        let bytes_sent = counted.len() as u64;
        let tls = self.tls.as_deref().and_then(|facts| facts.record(None));
        let line = [method.as_str(), target.as_str(), "HTTP/2.0"];
        account(vs, self.peer, line, (status, 0, bytes_sent, duration), tls);
    }
}

/// A stream's method and target for its access record (`-` where it has none).
fn request_line(request: &crate::http2::Incoming) -> (String, String) {
    match request {
        crate::http2::Incoming::Parts(parts) => (
            parts.method.as_str().to_owned(),
            parts
                .uri
                .path_and_query()
                .map_or("-", http::uri::PathAndQuery::as_str)
                .to_owned(),
        ),
        crate::http2::Incoming::Own(Ok(request)) => (
            String::from_utf8_lossy(request.head.method_bytes()).into_owned(),
            String::from_utf8_lossy(request.head.target()).into_owned(),
        ),
        crate::http2::Incoming::Own(Err(_)) => ("-".to_owned(), "-".to_owned()),
    }
}

/// Counts a refusal's answer and writes its access record, as for any answer
/// (`pipeline::record`): the record's bytes and duration are the metrics' too. `line` is
/// the method, target and version; `sizes` the status, bytes received and sent, and the
/// duration.
fn account(
    vs: &VirtualServerRuntime,
    peer: SocketAddr,
    [method, target, version]: [&str; 3],
    (status, received, bytes_sent, duration): (u16, u64, u64, std::time::Duration),
    tls: Option<weir_observe::TlsRecord<'_>>,
) {
    vs.metrics
        .record_answer(status, received, bytes_sent, duration);
    if let Some(log) = &vs.access_log {
        log.write(&AccessRecord {
            virtual_server: &vs.config.name,
            client: peer,
            client_address: None,
            method,
            target,
            version,
            status,
            bytes_sent,
            pool: None,
            node: None,
            duration,
            upstream_duration: None,
            error: Some("client_connections"),
            request_id: None,
            rule: None,
            grpc_status: None,
            cache: None,
            tls,
        });
    }
}

/// The HTTP pipeline for a connection whose client address came from a PROXY header
/// (`crate::front`): within its client's connection limit, the pipeline, holding its
/// place until the connection ends; past it, the refusal.
pub(crate) async fn serve_limited(
    (stream, start): (TcpStream, Option<weir_tls::HandshakeStart>),
    client: SocketAddr,
    mut admission: Admission,
    shutdown: ShutdownSignal,
) {
    let vs = Arc::clone(&admission.vs);
    match vs.traffic.limits.admit_connection(client.ip()) {
        Ok(permit) => {
            admission.permit = permit.map(Box::new);
            crate::pipeline::serve_connection(stream, client, admission, shutdown, start).await;
        }
        Err(refusal) => {
            vs.traffic.metrics.client_connection_refusals.inc();
            drop(vs);
            Box::pin(refuse_connection(
                (stream, start),
                client,
                admission,
                refusal,
                shutdown,
            ))
            .await;
        }
    }
}

/// Serves a refused connection: one answer, then close.
pub(crate) async fn refuse_connection(
    stream: (TcpStream, Option<weir_tls::HandshakeStart>),
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
        refuse_h2(stream, Bytes::new(), peer, &vs, refusal, shutdown).await;
        return;
    }
    let idle = IdleConnection::new(stream, peer, started, verified);
    let mut client = idle.into_client();
    if vs.config.http2.cleartext {
        let h2c =
            tokio::time::timeout_at(deadline, crate::pipeline::prior_knowledge(&mut client, &vs));
        if let Ok(Ok(true)) = h2c.await {
            if let Some((stream, rewind, _)) = client.into_stream() {
                refuse_h2(stream, rewind, peer, &vs, refusal, shutdown).await;
            }
            return;
        }
    }
    let head = tokio::time::timeout_at(deadline, client.read_head(&vs, &shutdown)).await;
    if let Ok(Ok(Some((head, _)))) = head {
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
            let received = head.raw().len() as u64;
            tracing::debug!(virtual_server = %vs.config.name, client = %peer, "too many connections from this client; answered and closing");
            let line = [
                lossy(head.method_bytes()),
                lossy(head.target()),
                client.version_label(head.version()),
            ];
            let sizes = (refusal.status, received, bytes, duration);
            account(&vs, peer, line, sizes, client.tls_record());
        }
    }
    client.linger_close().await;
    client.release();
    drop(admission);
}
