//! HTTP/2 clients in the pipeline. A connection that chose `h2` by ALPN, or
//! that starts with the HTTP/2 preface on a virtual server with
//! `[http2] cleartext = true` (h2c, prior knowledge), goes to the HTTP/2
//! server driver (`crate::http2::serve`); each of its streams then runs the
//! same stages as an HTTP/1.1 request (`serve_stream` in `pipeline.rs`)
//! with an [`H2Stream`] as its client. One pipeline, two codecs
//! (`docs/design/http2.md`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use bytes::Bytes;
use tokio::time::Instant;
use weir_core::ShutdownSignal;
use weir_http::{BodyFraming, RequestHead};
use weir_tls::ServerStream;
use weir_tls::rustls::pki_types::CertificateDer;

use crate::answer::Failure;
use crate::client::{Client, TlsFacts, Verified};
use crate::drain::Drain;
use crate::http2::{self, ConnectionLimits, H2Stream, Incoming, StreamHandler, Via, websocket};
use crate::route::VirtualServerRuntime;

/// What every stream of one HTTP/2 connection shares.
#[derive(Clone)]
struct Streams {
    /// The virtual server of the model the connection started with; each
    /// stream takes the newest one (as each HTTP/1.1 request does).
    vs: Arc<VirtualServerRuntime>,
    peer: SocketAddr,
    accepted_at: Instant,
    tls: Option<Arc<TlsFacts>>,
    client_subject: Option<Arc<str>>,
    /// The epoch of the client certificate checks the client's certificate passed last
    /// (at the handshake, or checked again after a change: [`Streams::outdated`]).
    checks_epoch: Arc<AtomicU32>,
    /// The certificate chain the client presented, to check again after a change.
    peer_chain: Option<Arc<[CertificateDer<'static>]>>,
    shutdown: ShutdownSignal,
    /// The drain the connection is counted in: its streams end at its cut.
    drain: Arc<Drain>,
    /// Set when the driver closes the connection for an unanswered PING.
    silent: Arc<AtomicBool>,
}

/// Serves one client connection as HTTP/2 until it closes. `rewind`: bytes
/// already read from it (the start of the preface, with h2c); `client`: its
/// address and verified client-certificate subject.
pub(super) async fn serve_connection(
    stream: ServerStream,
    rewind: Bytes,
    (peer, (client_subject, checks_epoch)): (SocketAddr, Verified),
    vs: Arc<VirtualServerRuntime>,
    shutdown: ShutdownSignal,
    drain: Arc<Drain>,
) {
    let tls = TlsFacts::of(&stream);
    let peer_chain = stream.peer_certificates().map(Arc::from);
    let via = if tls.is_some() { Via::Alpn } else { Via::H2c };
    let settings = vs.config.http2.clone();
    let timing = ConnectionLimits {
        handshake: vs.config.timeouts.header_read,
        idle: vs.config.timeouts.idle,
        max_streams: vs
            .config
            .limits
            .max_requests_per_connection
            .map(std::num::NonZeroU32::get),
        head: vs.head_limits,
    };
    let metrics = vs.metrics.http2.clone();
    let shared = Arc::clone(&vs.shared);
    let streams = Streams {
        vs,
        peer,
        accepted_at: Instant::now(),
        tls,
        client_subject: client_subject.map(Arc::from),
        checks_epoch: Arc::new(AtomicU32::new(checks_epoch)),
        peer_chain,
        shutdown: shutdown.clone(),
        drain,
        silent: Arc::new(AtomicBool::new(false)),
    };
    let watch = (&metrics, &shared.rejection_log);
    http2::serve(
        stream, rewind, via, &settings, timing, watch, streams, shutdown,
    )
    .await;
}

impl StreamHandler for Streams {
    async fn serve(&self, stream: H2Stream, request: Incoming) {
        let started = Instant::now();
        let vs = self.vs.newer().unwrap_or_else(|| Arc::clone(&self.vs));
        let (client, head) = self.stream_client(stream, request, &vs);
        // The driver boxes the stream's task (`Driver::spawn_stream`): the pipeline's
        // state lives in that one allocation.
        match head {
            Ok(head) => {
                let ends = (&self.shutdown, &*self.drain);
                super::serve_stream(client, &vs, head, ends, started).await;
            }
            Err(failure) => super::refuse_stream(client, &vs, failure).await,
        }
    }

    fn outdated(&self) -> bool {
        // Only a TLS handshake passes client certificate checks.
        if self.tls.is_none() {
            return false;
        }
        let vs = self.vs.newer();
        let vs = vs.as_ref().unwrap_or(&self.vs);
        let Some(tls) = vs.tls.as_ref() else {
            return false;
        };
        // Checked again when the checks changed: a client they still let in keeps its
        // connection.
        let passed = self.checks_epoch.load(Ordering::Acquire);
        match tls.recheck(passed, self.peer_chain.as_deref()) {
            Some(epoch) => {
                if epoch != passed {
                    self.checks_epoch.store(epoch, Ordering::Release);
                }
                false
            }
            None => true,
        }
    }

    fn went_silent(&self) {
        self.silent.store(true, Ordering::Release);
    }

    /// As an HTTP/1.1 request that forms no head: counted as a bad request, a 400 in the
    /// metrics and the access log (method and target `-`; the client got RST_STREAM
    /// `PROTOCOL_ERROR`, RFC 9113 §8.1.1), and a `rejected request` line on the virtual
    /// server's budget. Without it a client probing with malformed requests left no trace.
    fn refused_malformed(&self, count: u32) {
        if count == 0 {
            return;
        }
        let vs = self.vs.newer().unwrap_or_else(|| Arc::clone(&self.vs));
        let tls = self
            .tls
            .as_deref()
            .and_then(|facts| facts.record(self.client_subject.as_deref()));
        for _ in 0..count {
            vs.metrics.bad_requests.inc();
            vs.metrics
                .record_answer(400, 0, 0, std::time::Duration::ZERO);
            if let Some(log) = &vs.access_log {
                log.write(&weir_observe::AccessRecord {
                    virtual_server: &vs.config.name,
                    client: self.peer,
                    client_address: None,
                    method: "-",
                    target: "-",
                    version: "HTTP/2.0",
                    status: 400,
                    bytes_sent: 0,
                    pool: None,
                    node: None,
                    duration: std::time::Duration::ZERO,
                    upstream_duration: None,
                    error: Some(weir_core::ErrorKind::BadRequest.as_str()),
                    cache: None,
                    request_id: None,
                    rule: None,
                    grpc_status: None,
                    tls,
                });
            }
        }
        if let Some(left_out) = vs.shared.rejection_log.take() {
            tracing::info!(virtual_server = %vs.config.name, client = %self.peer, status = 400, refused = count, left_out, "rejected request: malformed HTTP/2 request reset by the codec (PROTOCOL_ERROR)");
        }
    }
}

impl Streams {
    /// The stream as the pipeline's client, and its request head in HTTP/1.1
    /// form (or why it has none).
    fn stream_client(
        &self,
        mut stream: H2Stream,
        request: Incoming,
        vs: &VirtualServerRuntime,
    ) -> (Client, Result<RequestHead, Failure>) {
        stream.set_silence(Arc::clone(&self.silent));
        let head = match request {
            Incoming::Parts(parts) => head_of_parts(&parts, &mut stream, vs),
            Incoming::Own(request) => head_of_own(request, &mut stream, vs),
        };
        if let Ok(head) = &head {
            stream.set_chunked(head.framing() == BodyFraming::Chunked);
        }
        let client = Client::for_stream(
            stream,
            self.tls.clone(),
            self.peer,
            self.accepted_at,
            self.client_subject.as_deref(),
        );
        (client, head)
    }
}

/// The request head of a stream the `h2` crate read.
fn head_of_parts(
    parts: &http::request::Parts,
    stream: &mut H2Stream,
    vs: &VirtualServerRuntime,
) -> Result<RequestHead, Failure> {
    if websocket::is_extended_connect(parts) {
        // WebSocket over HTTP/2 (RFC 8441): the HTTP/1.1 upgrade it
        // stands for, with a key of weir's for the node to answer.
        let key = websocket::new_key();
        let head = websocket::upgrade_request(parts, &key, &vs.head_limits);
        stream.set_websocket_key(key);
        head.map_err(Failure::parse)
    } else if parts.method == http::Method::CONNECT {
        // A plain CONNECT, or an extended one for another protocol, is not
        // carried over HTTP/2: a clear refusal instead of a broken tunnel.
        Err(Failure::not_implemented(
            "CONNECT over HTTP/2 other than WebSocket",
        ))
    } else {
        weir_http::http2::request_from_h2(parts, stream.request_ended(), &vs.head_limits).map_err(
            |error| {
                // Refused, it is still a HEAD or a gRPC call, answered in their form.
                let grpc = crate::request_body::is_grpc(
                    parts
                        .headers
                        .get(http::header::CONTENT_TYPE)
                        .map(|v| v.as_bytes()),
                );
                Failure::parse(error).of_refused(grpc, parts.method == http::Method::HEAD)
            },
        )
    }
}

/// The request head of a stream weir's own codec read: built by the codec
/// (`weir_http::http2::RequestFields`), or refused by HTTP/1.1's rules.
fn head_of_own(
    request: Result<weir_http::http2::H2Request, http2::Refused>,
    stream: &mut H2Stream,
    vs: &VirtualServerRuntime,
) -> Result<RequestHead, Failure> {
    // Refused, it is still a HEAD or a gRPC call, answered in their form.
    let request = request.map_err(|refused| {
        Failure::parse(refused.error).of_refused(refused.grpc, refused.head_request)
    })?;
    match request.protocol.as_deref() {
        Some(protocol) if protocol.eq_ignore_ascii_case(b"websocket") => {
            let key = websocket::new_key();
            let head = websocket::upgrade_request_of_head(&request.head, &key, &vs.head_limits);
            stream.set_websocket_key(key);
            head.map_err(Failure::parse)
        }
        Some(_) => Err(Failure::not_implemented(
            "CONNECT over HTTP/2 other than WebSocket",
        )),
        None if request.head.method() == weir_http::Method::Connect => Err(
            Failure::not_implemented("CONNECT over HTTP/2 other than WebSocket"),
        ),
        None => Ok(request.head),
    }
}

/// Whether a connection of a virtual server with h2c enabled is to be served
/// as HTTP/2: it starts with the HTTP/2 preface, or with something that is
/// neither the preface nor shaped like an HTTP/1 request line (the HTTP/2 driver then
/// closes it as an invalid preface, RFC 9113 §3.4, instead of an HTTP/1.1
/// 400 that an HTTP/2 client could not read). Reads more while the first
/// bytes cannot tell, within `header_read` of the accept.
pub(crate) async fn prior_knowledge(
    client: &mut Client,
    vs: &VirtualServerRuntime,
) -> Result<bool, Failure> {
    let deadline = client.since + vs.config.timeouts.header_read;
    loop {
        let bytes = &client.read_buf[..];
        match http2::starts_with_preface(bytes) {
            Some(true) => return Ok(true),
            // Four bytes tell `PRI ` from every HTTP/1.1 method.
            None if bytes.len() >= 4 => return Ok(true),
            None => {}
            Some(false) => match bytes.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let line = bytes[..end].strip_suffix(b"\r").unwrap_or(&bytes[..end]);
                    return Ok(!(line.is_empty() || is_request_line(line)));
                }
                // A request line this long is HTTP/1.1's to refuse (431).
                None if bytes.len() >= vs.head_limits.max_head_bytes => return Ok(false),
                None => {}
            },
        }
        client
            .read_more(deadline, "request head not received in time")
            .await?;
    }
}

/// Whether `line` is shaped like an HTTP/1 request line, well formed or not: at least three
/// words (split at spaces and tabs), the last a version `HTTP/` digit(s) with dots in any
/// case, such as `HTTP/1.1`, `HTTP/1.7` (read as HTTP/1.1) or `HTTP/2.0` (505). The HTTP/1
/// parser answers it, with a 400 when it is malformed (`GET /a b HTTP/1.1`, two spaces,
/// `http/1.1`). Anything else, such as `INVALID CONNECTION PREFACE`, is an invalid HTTP/2
/// preface (closed without an HTTP/1 answer, which an HTTP/2 client could not read).
fn is_request_line(line: &[u8]) -> bool {
    let mut words = line
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|word| !word.is_empty());
    let count = words.clone().count();
    let version = words.next_back().map(<[u8]>::to_ascii_uppercase);
    count >= 3 && version.is_some_and(|version| weir_http::looks_like_version(&version))
}

/// Serves an h2c connection whose first bytes are in the client's buffer.
pub(super) async fn serve_cleartext(
    client: Client,
    vs: Arc<VirtualServerRuntime>,
    shutdown: ShutdownSignal,
    drain: Arc<Drain>,
) {
    let peer = client.peer;
    if let Some((stream, rewind, verified)) = client.into_stream() {
        serve_connection(stream, rewind, (peer, verified), vs, shutdown, drain).await;
    }
}

#[cfg(test)]
mod request_line_tests {
    use super::is_request_line;

    #[test]
    fn request_lines_well_formed_or_not_are_http1() {
        for line in [
            &b"GET / HTTP/1.1"[..],
            b"GET / HTTP/1.7",
            b"GET / HTTP/2.0",
            b"GET /a b HTTP/1.1",
            b"GET  / HTTP/1.1",
            b"GET\t/\tHTTP/1.1",
            b"get / http/1.1",
        ] {
            assert!(is_request_line(line), "{}", String::from_utf8_lossy(line));
        }
        for line in [
            &b"INVALID CONNECTION PREFACE"[..],
            b"PRI * HTTP",
            b"GET /",
            b"HELLO",
            b"",
            b"\x16\x03\x01\x02\x00\x01",
        ] {
            assert!(!is_request_line(line), "{}", String::from_utf8_lossy(line));
        }
    }
}
