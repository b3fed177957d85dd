//! A real gRPC stack (tonic, client and server) through weir: the server is
//! the node of an h2c pool, the client reaches weir over h2c and over TLS
//! (ALPN `h2`). Unary, server streaming, client streaming and bidirectional
//! calls; a non-OK status with its message reaches the client, from a
//! trailers-only answer and from the trailers after streamed messages; the
//! access log records each call's `grpc-status`. And a gRPC call to a pool
//! of HTTP/1.1 nodes, which cannot carry gRPC, fails at once with a clear
//! status instead of hanging.
//!
//! Messages are raw bytes ([`RawCodec`]) instead of protobuf, so the test
//! needs no `protoc` and no build script: the gRPC framing, HTTP/2 and the
//! trailers are tonic's own.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::tokio_stream::{self, StreamExt as _};
use tonic::codegen::{Body, BoxFuture, BoxStream, Context, Poll, Service, StdError, http};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Response, Status, Streaming};
use weir_testkit::{TestOrigin, TestProxy};

/// How long any one call may take: a hang fails the test instead of blocking it.
const CALL: Duration = Duration::from_secs(10);

/// Messages as they are: no protobuf, so no `protoc`.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

#[derive(Debug)]
struct RawEncoder;

#[derive(Debug)]
struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// The node's four methods, one per kind of call.
const UNARY: &str = "/weir.test.Echo/Unary";
const EXPAND: &str = "/weir.test.Echo/Expand";
const COLLECT: &str = "/weir.test.Echo/Collect";
const CHAT: &str = "/weir.test.Echo/Chat";

/// The gRPC node: routes each call by path to its method, as generated code would.
#[derive(Debug, Clone, Copy)]
struct EchoNode;

impl<B> Service<http::Request<B>> for EchoNode
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawCodec);
            Ok(match request.uri().path() {
                UNARY => grpc.unary(Unary, request).await,
                EXPAND => grpc.server_streaming(Expand, request).await,
                COLLECT => grpc.client_streaming(Collect, request).await,
                CHAT => grpc.streaming(Chat, request).await,
                _ => Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

/// Unary: the message back; `deny` is refused with PERMISSION_DENIED
/// (a trailers-only answer: the status in the response's only HEADERS).
struct Unary;

impl tonic::server::UnaryService<Bytes> for Unary {
    type Response = Bytes;
    type Future = BoxFuture<Response<Bytes>, Status>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        Box::pin(async move {
            let message = request.into_inner();
            if &message[..] == b"deny" {
                return Err(Status::permission_denied("not for you"));
            }
            Ok(Response::new(message))
        })
    }
}

/// Server streaming: each comma-separated part of the request as a message;
/// a part `boom` ends the call with ABORTED after the parts before it (the
/// status then travels in real trailers, after DATA); a part `hang` sends
/// nothing more, ever (a node that froze mid-call).
struct Expand;

impl tonic::server::ServerStreamingService<Bytes> for Expand {
    type Response = Bytes;
    type ResponseStream = BoxStream<Bytes>;
    type Future = BoxFuture<Response<BoxStream<Bytes>>, Status>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        Box::pin(async move {
            let text = String::from_utf8_lossy(&request.into_inner()).into_owned();
            let mut parts = Vec::new();
            let mut hangs = false;
            for part in text.split(',') {
                if part == "hang" {
                    hangs = true;
                    break;
                }
                if part == "boom" {
                    parts.push(Err(Status::aborted("boom after the parts before it")));
                    break;
                }
                if part == "details" {
                    // Rich error details: trailers larger than a head.
                    let details = Bytes::from(vec![b'd'; 12_000]);
                    let status =
                        Status::with_details(Code::FailedPrecondition, "with details", details);
                    parts.push(Err(status));
                    break;
                }
                parts.push(Ok(Bytes::from(part.to_owned())));
            }
            let stream: BoxStream<Bytes> = match hangs {
                false => Box::pin(tokio_stream::iter(parts)),
                true => Box::pin(tokio_stream::iter(parts).chain(tokio_stream::pending())),
            };
            Ok(Response::new(stream))
        })
    }
}

/// Client streaming: all messages joined with `+`, once the client is done.
struct Collect;

impl tonic::server::ClientStreamingService<Bytes> for Collect {
    type Response = Bytes;
    type Future = BoxFuture<Response<Bytes>, Status>;

    fn call(&mut self, request: Request<Streaming<Bytes>>) -> Self::Future {
        Box::pin(async move {
            let mut messages = request.into_inner();
            let mut all = Vec::new();
            while let Some(message) = messages.message().await? {
                all.push(String::from_utf8_lossy(&message).into_owned());
            }
            // Asked to, the node takes its time to answer.
            if all.iter().any(|message| message == "linger") {
                tokio::time::sleep(LINGER).await;
            }
            Ok(Response::new(Bytes::from(all.join("+"))))
        })
    }
}

/// How long the node's `Collect` takes to answer a call that ends with `linger`.
const LINGER: Duration = Duration::from_secs(3);

/// Bidirectional: each message answered as it arrives.
struct Chat;

impl tonic::server::StreamingService<Bytes> for Chat {
    type Response = Bytes;
    type ResponseStream = BoxStream<Bytes>;
    type Future = BoxFuture<Response<BoxStream<Bytes>>, Status>;

    fn call(&mut self, request: Request<Streaming<Bytes>>) -> Self::Future {
        Box::pin(async move {
            let answers = request.into_inner().map(|message| {
                message.map(|m| Bytes::from(format!("echo: {}", String::from_utf8_lossy(&m))))
            });
            let stream: BoxStream<Bytes> = Box::pin(answers);
            Ok(Response::new(stream))
        })
    }
}

/// Starts the tonic server on a free port (h2c, as gRPC servers run behind a proxy).
async fn grpc_node() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(EchoNode, incoming));
    addr
}

/// A proxy in front of `node` (pool `protocol`), plain with h2c and over TLS
/// with ALPN `h2` (a second virtual server, `secure`), writing a JSON access log.
struct Setup {
    proxy: TestProxy,
    log: std::path::PathBuf,
    pki: weir_testkit::tls::Pki,
}

async fn setup(node: SocketAddr, protocol: &str, name: &str) -> Setup {
    setup_with(node, protocol, name, "").await
}

/// [`setup`] with `plain_extra` TOML after the plain virtual server's table.
async fn setup_with(node: SocketAddr, protocol: &str, name: &str, plain_extra: &str) -> Setup {
    let pki = weir_testkit::tls::Pki::new();
    let (cert, key) = pki.server("proxy", &["localhost"], weir_tls::KeyType::EcdsaP256);
    let log = std::env::temp_dir().join(format!("weir-grpc-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "[log]\naccess_log = true\naccess_log_format = \"json\"\naccess_log_file = \"{}\"\n\
         level = \"warn\"\n\n[pools.grpc]\nnodes = [{{ address = \"{node}\" }}]\n\
         protocol = \"{protocol}\"\n\n\
         [virtual_servers.plain]\nlisten = [\"127.0.0.1:0\"]\npool = \"grpc\"\n\
         [virtual_servers.plain.http2]\ncleartext = true\n{plain_extra}\n\n\
         [virtual_servers.secure]\nlisten = [\"127.0.0.1:0\"]\npool = \"grpc\"\nprotocol = \"https\"\n\
         [virtual_servers.secure.tls]\ncertificates = [{{ cert = \"{}\", key = \"{}\" }}]\n\
         alpn = [\"h2\", \"http/1.1\"]\n",
        log.display(),
        cert.display(),
        key.display(),
    );
    let proxy = TestProxy::start(&toml).await;
    Setup { proxy, log, pki }
}

impl Setup {
    /// A tonic client through the plain (h2c) or the TLS (ALPN `h2`) virtual server.
    async fn client(&self, tls: bool) -> tonic::client::Grpc<Channel> {
        let (_, addr) = &self.proxy.addrs[usize::from(tls)];
        let endpoint = match tls {
            false => Endpoint::from_shared(format!("http://{addr}")).expect("uri"),
            true => {
                let ca = std::fs::read(self.pki.ca_path()).expect("the CA");
                let config = ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(ca))
                    .domain_name("localhost");
                Endpoint::from_shared(format!("https://{addr}"))
                    .expect("uri")
                    .tls_config(config)
                    .expect("TLS config")
            }
        };
        let channel = tokio::time::timeout(CALL, endpoint.timeout(CALL).connect())
            .await
            .expect("connected in time")
            .expect("connected");
        tonic::client::Grpc::new(channel)
    }

    /// The `grpc_status` of every access record, sorted, once there are `expected` of
    /// them: a stream's record is written after its answer went out, so the client can
    /// have the answer a moment before the record exists.
    async fn logged_statuses(&self, expected: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let text = loop {
            self.proxy.live.flush_access_log();
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if text.lines().count() >= expected || tokio::time::Instant::now() > deadline {
                break text;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let mut statuses: Vec<String> = text
            .lines()
            .map(|line| {
                assert!(line.contains("\"version\":\"HTTP/2.0\""), "{line}");
                line.split("\"grpc_status\":")
                    .nth(1)
                    .map_or("-".to_owned(), |rest| {
                        rest.chars().take_while(char::is_ascii_digit).collect()
                    })
            })
            .collect();
        // Sorted: a stream is logged once its last frame is handed to the connection,
        // and the client may have its answer and start the next call before that, so
        // the records of calls that follow each other can be written in either order.
        statuses.sort();
        statuses
    }

    async fn stop(self) {
        self.proxy.stop().await;
        let _ = std::fs::remove_file(&self.log);
    }
}

async fn unary(
    grpc: &mut tonic::client::Grpc<Channel>,
    message: &'static str,
) -> Result<Bytes, Status> {
    unary_to(grpc, UNARY, message).await
}

async fn unary_to(
    grpc: &mut tonic::client::Grpc<Channel>,
    path: &'static str,
    message: &'static str,
) -> Result<Bytes, Status> {
    grpc.ready().await.expect("ready");
    let call = grpc.unary(
        Request::new(Bytes::from_static(message.as_bytes())),
        PathAndQuery::from_static(path),
        RawCodec,
    );
    let response = tokio::time::timeout(CALL, call).await.expect("in time")?;
    Ok(response.into_inner())
}

/// Every message of a response stream, and how it ended.
async fn drain(mut stream: Streaming<Bytes>) -> (Vec<String>, Result<(), Status>) {
    let mut messages = Vec::new();
    loop {
        match tokio::time::timeout(CALL, stream.message())
            .await
            .expect("in time")
        {
            Ok(Some(message)) => messages.push(String::from_utf8_lossy(&message).into_owned()),
            Ok(None) => return (messages, Ok(())),
            Err(status) => return (messages, Err(status)),
        }
    }
}

/// The four kinds of call and two failures, on one client.
/// A server-streaming call to `Expand` with `parts`: the messages, and how the call ended.
async fn expand(
    grpc: &mut tonic::client::Grpc<Channel>,
    parts: &'static str,
) -> (Vec<String>, Result<(), Status>) {
    grpc.ready().await.expect("ready");
    let call = grpc.server_streaming(
        Request::new(Bytes::from_static(parts.as_bytes())),
        PathAndQuery::from_static(EXPAND),
        RawCodec,
    );
    let stream = tokio::time::timeout(CALL, call)
        .await
        .expect("in time")
        .expect("head OK");
    drain(stream.into_inner()).await
}

async fn every_kind_of_call(grpc: &mut tonic::client::Grpc<Channel>) {
    // Unary, and a unary refusal: a trailers-only answer.
    assert_eq!(&unary(grpc, "hello").await.expect("OK")[..], b"hello");
    let denied = unary(grpc, "deny").await.expect_err("refused");
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert_eq!(denied.message(), "not for you");

    // Server streaming; then a stream that fails after two messages: the
    // status comes in the trailers after them.
    let (messages, end) = expand(grpc, "a,b,c").await;
    assert_eq!(messages, strings(&["a", "b", "c"]));
    end.expect("OK in the trailers");
    let (messages, end) = expand(grpc, "x,y,boom,z").await;
    assert_eq!(messages, strings(&["x", "y"]));
    let aborted = end.expect_err("ended by the status in the trailers");
    assert_eq!(aborted.code(), Code::Aborted, "{aborted:?}");
    assert_eq!(aborted.message(), "boom after the parts before it");
    // A status with 12 KB of details (base64 in `grpc-status-details-bin`, 16 KB of
    // trailers) after a message reaches the client whole.
    let (messages, end) = expand(grpc, "x,details").await;
    assert_eq!(messages, strings(&["x"]));
    let detailed = end.expect_err("ended by the status in the trailers");
    assert_eq!(detailed.code(), Code::FailedPrecondition, "{detailed:?}");
    assert_eq!(detailed.details().len(), 12_000);

    // Client streaming.
    grpc.ready().await.expect("ready");
    let outgoing = tokio_stream::iter(["one", "two", "three"].map(Bytes::from));
    let call = grpc.client_streaming(
        Request::new(outgoing),
        PathAndQuery::from_static(COLLECT),
        RawCodec,
    );
    let collected = tokio::time::timeout(CALL, call)
        .await
        .expect("in time")
        .expect("OK");
    assert_eq!(&collected.into_inner()[..], b"one+two+three");

    // Bidirectional: each answer arrives before the next message is sent, so
    // neither direction may be held back by weir.
    let (sender, call) = open_chat(grpc).await;
    sender
        .send(Bytes::from_static(b"first"))
        .await
        .expect("queued");
    let mut answers = tokio::time::timeout(CALL, call)
        .await
        .expect("in time")
        .expect("OK")
        .into_inner();
    for (i, message) in ["first", "second", "third"].into_iter().enumerate() {
        if i > 0 {
            sender.send(Bytes::from(message)).await.expect("queued");
        }
        let answer = tokio::time::timeout(CALL, answers.message())
            .await
            .expect("the answer before the next message")
            .expect("OK")
            .expect("a message");
        assert_eq!(answer, format!("echo: {message}").as_bytes());
    }
    drop(sender);
    let (rest, end) = drain(answers).await;
    assert!(rest.is_empty(), "{rest:?}");
    end.expect("OK in the trailers");
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_calls_of_every_kind_cross_weir_over_h2c_and_tls() {
    let node = grpc_node().await;
    let setup = setup(node, "h2c", "kinds").await;
    for tls in [false, true] {
        let mut grpc = setup.client(tls).await;
        every_kind_of_call(&mut grpc).await;
    }
    // The access log: one record per call, with its gRPC status (0 OK,
    // 7 PERMISSION_DENIED, 10 ABORTED, 9 FAILED_PRECONDITION), over both virtual servers.
    let once = strings(&["0", "7", "0", "10", "9", "0", "0"]);
    let mut both: Vec<String> = once.iter().chain(once.iter()).cloned().collect();
    both.sort();
    assert_eq!(setup.logged_statuses(both.len()).await, both);
    setup.stop().await;
}

/// gRPC needs HTTP/2 to the node: a pool of HTTP/1.1 nodes cannot carry it
/// (no full duplex, trailers only by the client's grace). weir refuses the
/// call at once with a trailers-only gRPC answer (UNAVAILABLE), which the
/// client reads as a status instead of failing to decode a text body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_to_an_http1_pool_fails_clearly() {
    let origin = TestOrigin::start("h1").await;
    let setup = setup(origin.addr, "http1", "h1").await;
    let mut grpc = setup.client(false).await;
    let refused = unary(&mut grpc, "hello").await.expect_err("refused");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(refused.message(), "bad gateway", "{refused:?}");
    // Logged with the status the client read; the node never saw the call.
    assert_eq!(setup.logged_statuses(1).await, strings(&["14"]));
    setup.stop().await;
    origin.stop().await;
}

/// weir's own refusal of a gRPC call (here a rule's `deny`) is a
/// trailers-only gRPC answer: the client reads PERMISSION_DENIED with the
/// reason, and the access log has the status; other calls still pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weirs_own_refusal_of_a_grpc_call_is_a_grpc_status() {
    let node = grpc_node().await;
    let rule = "[[virtual_servers.plain.rules]]\n\
                match = { path_prefix = \"/weir.test.Closed/\" }\ndeny = true";
    let setup = setup_with(node, "h2c", "deny", rule).await;
    let mut grpc = setup.client(false).await;
    let denied = unary_to(&mut grpc, "/weir.test.Closed/Unary", "hello")
        .await
        .expect_err("denied");
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert_eq!(denied.message(), "forbidden", "{denied:?}");
    assert_eq!(
        &unary(&mut grpc, "still open").await.expect("OK")[..],
        b"still open"
    );
    assert_eq!(setup.logged_statuses(2).await, strings(&["0", "7"]));
    setup.stop().await;
}

/// A call the client cancels got no gRPC status from anyone: its access record has none
/// (its `error` says the client went away), where a call answered has the one it got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_logged_without_a_grpc_status() {
    let node = grpc_node().await;
    let setup = setup(node, "h2c", "cancel").await;
    let mut grpc = setup.client(false).await;
    let (sender, call) = open_chat(&mut grpc).await;
    sender
        .send(Bytes::from_static(b"one"))
        .await
        .expect("queued");
    let mut answers = tokio::time::timeout(CALL, call)
        .await
        .expect("in time")
        .expect("answered")
        .into_inner();
    let first = tokio::time::timeout(CALL, answers.message()).await;
    assert!(matches!(first, Ok(Ok(Some(_)))), "{first:?}");
    // The answers dropped first: the call is reset (CANCEL), not ended by the client.
    drop(answers);
    drop(sender);
    assert_eq!(&unary(&mut grpc, "after").await.expect("OK")[..], b"after");
    assert_eq!(setup.logged_statuses(2).await, strings(&["-", "0"]));
    let log = std::fs::read_to_string(&setup.log).unwrap();
    assert!(log.contains("\"error\":\"client_closed\""), "{log}");
    setup.stop().await;
}

/// A call whose node fails after its answer began (here a node that froze mid-stream,
/// cut at the pool's response timeout) ends with UNAVAILABLE in trailers, the status of
/// weir's own answer had it come before the head, and is logged with it: a reset, which
/// it was, reads as INTERNAL to gRPC clients, a fault of the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_short_by_its_node_ends_unavailable() {
    let node = grpc_node().await;
    let timeouts = "[pools.grpc.timeouts]\nresponse = \"1s\"\n";
    let setup = setup_with(node, "h2c", "cut-short", timeouts).await;
    for tls in [false, true] {
        let mut grpc = setup.client(tls).await;
        let (messages, ended) = expand(&mut grpc, "a,b,hang").await;
        assert_eq!(messages, ["a", "b"]);
        let status = ended.expect_err("cut short");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert_eq!(status.message(), "gateway timeout");
    }
    assert_eq!(setup.logged_statuses(2).await, strings(&["14", "14"]));
    setup.stop().await;
}

/// A bidirectional call to the node's chat: the sender of its messages, and the call
/// (ready once the first message is sent and the answer's head is back).
async fn open_chat(
    grpc: &mut tonic::client::Grpc<Channel>,
) -> (
    tokio::sync::mpsc::Sender<Bytes>,
    impl std::future::Future<Output = Result<Response<Streaming<Bytes>>, Status>> + '_,
) {
    grpc.ready().await.expect("ready");
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(1);
    let outgoing = tokio_stream::wrappers::ReceiverStream::new(receiver);
    let call = grpc.streaming(
        Request::new(outgoing),
        PathAndQuery::from_static(CHAT),
        RawCodec,
    );
    (sender, call)
}

/// Sends `messages` on a bidirectional call, `pause` apart, each answered before the
/// next; the call's end status.
async fn chat_slowly(
    grpc: &mut tonic::client::Grpc<Channel>,
    messages: usize,
    pause: Duration,
) -> Result<(), Status> {
    let (sender, call) = open_chat(grpc).await;
    let message = Bytes::from(vec![b'm'; 400]);
    sender.send(message.clone()).await.expect("queued");
    let mut answers = tokio::time::timeout(CALL, call)
        .await
        .expect("in time")?
        .into_inner();
    for i in 0..messages {
        if i > 0 {
            tokio::time::sleep(pause).await;
            if sender.send(message.clone()).await.is_err() {
                break;
            }
        }
        match tokio::time::timeout(CALL, answers.message()).await {
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => return Err(Status::unknown("the call ended early")),
            Ok(Err(status)) => return Err(status),
            Err(_) => return Err(Status::deadline_exceeded("no answer in time")),
        }
    }
    drop(sender);
    drain(answers).await.1
}

/// A gRPC call's body is a stream of messages as long as the call: a slow chat that
/// outlives `body_total` and sends less than `min_body_rate` is served whole; only a
/// pause past `body_read` ends it (and `max_body_bytes`, the bytes of the whole call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_slow_grpc_stream_is_bounded_only_by_its_pauses() {
    let node = grpc_node().await;
    let limits = "[virtual_servers.plain.limits]\nmin_body_rate = \"100KiB\"\n\
                  [virtual_servers.plain.timeouts]\nbody_read = \"1s\"\nbody_total = \"2s\"\n";
    let setup = setup_with(node, "h2c", "slow-chat", limits).await;
    let mut grpc = setup.client(false).await;
    // 8 messages of 400 bytes, 400 ms apart: 3.2 KB over 2.8 s.
    chat_slowly(&mut grpc, 8, Duration::from_millis(400))
        .await
        .expect("the whole chat");
    // A pause past body_read still ends it.
    let stalled = chat_slowly(&mut grpc, 3, Duration::from_millis(1800))
        .await
        .expect_err("stalled past body_read");
    assert_ne!(stalled.code(), Code::Ok, "{stalled:?}");
    setup.stop().await;
}

/// Sends `messages` on a client-streaming call, 400 ms apart; the node's answer.
async fn collect_slowly(
    grpc: &mut tonic::client::Grpc<Channel>,
    messages: &'static [&'static str],
) -> Result<Bytes, Status> {
    grpc.ready().await.expect("ready");
    let outgoing =
        tokio_stream::iter(messages.iter().enumerate()).then(|(i, message)| async move {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            Bytes::from_static(message.as_bytes())
        });
    let call = grpc.client_streaming(
        Request::new(outgoing),
        PathAndQuery::from_static(COLLECT),
        RawCodec,
    );
    let answer = tokio::time::timeout(CALL, call).await.expect("in time")?;
    Ok(answer.into_inner())
}

/// The pool's `response` timeout is the node's time to answer once the whole request
/// has gone, as for an HTTP/1.1 node: a client-streaming call that sends for longer
/// than it, and is answered only at its end, is served whole; a node that then takes
/// longer than it to answer is still timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stream_longer_than_the_response_timeout_is_answered() {
    let node = grpc_node().await;
    let timeouts = "[pools.grpc.timeouts]\nresponse = \"1s\"\n";
    let setup = setup_with(node, "h2c", "long-upload", timeouts).await;
    let mut grpc = setup.client(false).await;
    // Six messages 400 ms apart: the upload lasts 2 s, twice the response timeout.
    let collected = collect_slowly(&mut grpc, &["m0", "m1", "m2", "m3", "m4", "m5"])
        .await
        .expect("the whole call answered");
    assert_eq!(collected, "m0+m1+m2+m3+m4+m5");
    // The same upload to a node that answers 3 s after it: weir's 504 (UNAVAILABLE),
    // not the node's late answer.
    let late = collect_slowly(&mut grpc, &["m0", "m1", "m2", "m3", "m4", "linger"])
        .await
        .expect_err("timed out");
    assert_eq!(late.code(), Code::Unavailable, "{late:?}");
    setup.stop().await;
}
