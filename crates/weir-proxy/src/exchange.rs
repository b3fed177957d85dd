//! The select → checkout → forward stages: pick a node, take a connection,
//! send the request, and wait for the response head — retrying on another
//! node (or a fresh connection) only when the error says a retry is safe.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, Side};
use weir_http::{ForwardRequest, Parsed, RequestHead, ResponseHead, parse_response};
use weir_upstream::node::NodeState;
use weir_upstream::{Lease, Pool, StreamLease, Tried, TunnelPermit};

use crate::VIA;
use crate::answer::Failure;
use crate::client::{Client, Downstream};
use crate::http2;
use crate::policy::Forwarding;
use crate::request_body::{self, PumpWatch, RequestBody, Streamed};
use crate::route::VirtualServerRuntime;
use crate::traffic::Upstream;

mod h2_websocket;

/// Retries on a reused connection that the node had closed, per request.
const MAX_STALE_RETRIES: u32 = 3;

/// What carries a request to its node and its response back.
#[derive(Debug)]
pub(crate) enum NodeLink {
    /// An HTTP/1.1 connection, the response body read from its bytes.
    Http1(Lease),
    /// A stream on a shared HTTP/2 connection (pools with protocol `h2`/`h2c`).
    Http2 {
        body: http2::upstream::NodeBody,
        /// An extended CONNECT's (RFC 8441) side towards the node: the stream
        /// stays open, to carry the tunnel once the node answers 2xx.
        upload: Option<http2::SendHalf>,
        /// The rest of an HTTP/2 client's body, still moving on its own: should it fail
        /// (past `max_body_bytes`, say), the node's stream is reset for the client's fault.
        pump: Option<PumpWatch>,
        /// The start of `body`, read ahead while the request body still went
        /// (`http2::upstream::send_reading_ahead`): relayed first.
        ahead: Vec<bytes::Bytes>,
        /// Held until the body is read: dropping it frees the stream slot. Last, so
        /// that the stream's halves go first and its connection counts it closed
        /// before the slot is offered to another request.
        lease: StreamLease,
    },
}

/// A request sent and its response head received.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub lease: NodeLink,
    /// Counts the request on its node until the response has been relayed.
    pub in_flight: weir_upstream::node::InFlight,
    pub node: usize,
    pub response: ResponseHead,
    /// When the request was handed to the node: an HTTP/1.1 node's once the head and
    /// the buffered body are written, an HTTP/2 node's as its stream starts.
    pub sent_at: Instant,
    /// A tunnel place on the node, held by a request that may switch protocols.
    pub tunnel: Option<TunnelPermit>,
    /// The node answered before the whole request body was sent: its
    /// connection cannot carry another request, and the client's must close.
    pub body_cut: bool,
}

impl Exchange {
    /// Whether the node's answer opened a tunnel: a `101` (HTTP/1.1 node), a
    /// 2xx to a CONNECT (`connect`), or a 2xx to an extended CONNECT (a
    /// WebSocket to an HTTP/2 node, which holds a tunnel place). An HTTP/2 stream whose
    /// sending side is kept after an early answer (the node answered before the request
    /// body was all sent) is no tunnel: that answer is relayed.
    pub(crate) fn switched(&self, connect: bool) -> bool {
        let status = self.response.status();
        let success = (200..300).contains(&status);
        match &self.lease {
            NodeLink::Http2 {
                upload: Some(_), ..
            } => success && self.tunnel.is_some(),
            _ => status == 101 || (connect && success),
        }
    }
}

/// Where a failed attempt may be tried again, as its error says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Nothing reached the node (connect or handshake failed): another node.
    OtherNode,
    /// A reused connection the node had closed: a fresh one to the same node.
    SameNode,
    /// The node was disabled, removed or marked down while the request was on its way to
    /// it (waiting in its queue): another node, as if it had been chosen first. Neither a
    /// retry nor a failure of the node.
    Reselect,
    No,
}

impl Retry {
    fn of(error: &Error) -> Retry {
        match error.kind() {
            _ if !error.is_retry_safe() => Retry::No,
            ErrorKind::ConnectFailed | ErrorKind::ConnectTimeout => Retry::OtherNode,
            ErrorKind::NoNodeAvailable => Retry::Reselect,
            _ => Retry::SameNode,
        }
    }
}

/// The node whose response the client is answered from, and when it was sent the request.
#[derive(Clone, Copy)]
pub(crate) struct AnsweredBy<'p> {
    pub node: &'p NodeState,
    /// When the request was handed to the node.
    pub sent_at: Instant,
}

/// Passive health and the EWMA from the node's response head (the time to it).
pub(crate) fn note_response<'p>(pool: &'p Pool, exchange: &Exchange) -> AnsweredBy<'p> {
    let node = &pool.nodes[exchange.node];
    let head_received = Instant::now();
    let response_time = head_received.saturating_duration_since(exchange.sent_at);
    let head_received = head_received.into_std();
    node.record_response_time_at(response_time, head_received);
    if exchange.response.status() >= 500 {
        node.metrics.responses_5xx.inc();
        pool.record_failure(node, head_received);
    } else {
        pool.record_success(node, head_received);
    }
    AnsweredBy {
        node,
        sent_at: exchange.sent_at,
    }
}

/// Runs select → checkout → forward until a response head arrives or a
/// failure must be answered.
pub(crate) async fn exchange(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    head: &RequestHead,
    forwarding: Forwarding,
    body: &mut RequestBody,
    upstream: Upstream<'_>,
) -> Result<Exchange, Failure> {
    let mut tried = Tried::default();
    let mut stale_retries = 0;
    let mut node_retries = 0;
    let mut current: Option<usize> = None;
    let mut last_error: Option<Error> = None;
    // The node the last failed attempt went to: a request no other node can take is
    // logged with it (the access record's `node`, docs/logging.md).
    let mut last_node: Option<std::net::SocketAddr> = None;
    // After a reused connection the node had closed: the next try opens a new one.
    let mut fresh = false;
    loop {
        // select (again only when moving to another node)
        let index = match current {
            Some(index) => index,
            None => {
                // Moving off a node withdrawn before the request reached it is no retry.
                let moving = last_error
                    .as_ref()
                    .is_some_and(|error| Retry::of(error) != Retry::Reselect);
                let index = select(pool, tried, last_error.take(), head, upstream.client).map_err(
                    |failure| match last_node {
                        Some(node) => failure.at_node(node),
                        None => failure,
                    },
                )?;
                // A retry is counted once another node was found for it.
                if moving {
                    pool.metrics.retries.inc();
                }
                index
            }
        };
        tried.add(index);
        current = Some(index);
        let node = &pool.nodes[index];
        client.node = u32::try_from(index).ok();
        let on = Attempt {
            index,
            head,
            forwarding,
            upstream,
            fresh,
        };
        let failure = match attempt(client, vs, pool, on, body).await {
            Ok(exchange) => return Ok(exchange),
            Err(failure) => failure,
        };
        match Retry::of(&failure.error) {
            Retry::SameNode if stale_retries < MAX_STALE_RETRIES => {
                tracing::debug!(pool = %pool.name, node = %node.address, error = %failure.error, "reused connection was closed by the node; retrying");
                // Sent again (on a new connection to the same node): a retry too.
                pool.metrics.retries.inc();
                stale_retries += 1;
                fresh = true;
            }
            Retry::OtherNode if node_retries < pool.config.retries => {
                pool.record_failure(node, Instant::now().into_std());
                tracing::debug!(pool = %pool.name, node = %node.address, error = %failure.error, "retrying on another node");
                node_retries += 1;
                current = None;
                last_error = Some(failure.error);
                last_node = Some(node.address);
                fresh = false;
            }
            Retry::Reselect => {
                tracing::debug!(pool = %pool.name, node = %node.address, "node withdrawn while the request waited for it; choosing another");
                current = None;
                last_error = Some(failure.error);
                last_node = Some(node.address);
                fresh = false;
            }
            _ => {
                // Passive health: a node that fails or stalls an exchange counts a failure.
                if failure.error.side() == Side::Upstream {
                    pool.record_failure(node, Instant::now().into_std());
                }
                return Err(failure.at_node(node.address));
            }
        }
    }
}

/// The select stage: a node not tried yet (persistence, then a consistent-hash key, then
/// the balancer), or the failure to answer with.
fn select(
    pool: &Pool,
    tried: Tried,
    last_error: Option<Error>,
    head: &RequestHead,
    client: std::net::IpAddr,
) -> Result<usize, Failure> {
    let now = Instant::now().into_std();
    if let Some(index) = pool.select_request(tried, now, head, client) {
        return Ok(index);
    }
    // Every node was tried: answer with what went wrong last.
    if let Some(error) = last_error {
        // Moved off a withdrawn node, and no other available: none was, in the end.
        if error.kind() == ErrorKind::NoNodeAvailable {
            pool.metrics.no_node_available.inc();
        }
        return Err(Failure::from_error(error));
    }
    pool.metrics.no_node_available.inc();
    Err(Failure::from_error(
        Error::new(ErrorKind::NoNodeAvailable, Side::Internal)
            .context(format!("every node of pool {} is down", pool.name)),
    ))
}

/// What one try sends, and to which node.
#[derive(Clone, Copy)]
struct Attempt<'a> {
    index: usize,
    head: &'a RequestHead,
    forwarding: Forwarding,
    upstream: Upstream<'a>,
    /// On a new connection, not an idle one: the request is sent again after the node
    /// closed the reused connection it went on, and the other idle ones may be as dead.
    fresh: bool,
}

/// One try on one node: checkout, write the request, read the response head.
async fn attempt(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    on: Attempt<'_>,
    body: &mut RequestBody,
) -> Result<Exchange, Failure> {
    let Attempt {
        index,
        head,
        forwarding,
        upstream,
        fresh,
    } = on;
    if let Some(node) = pool.http2.get(index) {
        // Boxed: the HTTP/2 attempt's future is larger than the rest of this one,
        // and HTTP/1.1 requests would carry (and copy) its size unboxed.
        return crate::boxed(|| attempt_h2(client, vs, pool, (index, node), on, body)).await;
    }
    let connections = &pool.connections[index];
    // A request that may leave HTTP takes a tunnel place first, so tunnels
    // never grow past max_tunnels and never hold the node's request slots.
    let tunnel = match forwarding.may_tunnel() {
        true => Some(connections.reserve_tunnel()?),
        false => None,
    };
    let in_flight = pool.nodes[index].start_request();
    let leave = pool.config.connections.leave_queue_on_close;
    let flow = upstream.flow();
    let mut lease = match fresh {
        // Boxed: only a request sent again takes this path.
        true => {
            let checkout = connections.checkout_new_watching(flow, || client.stream.left(leave));
            Box::pin(checkout).await?
        }
        false => {
            connections
                .checkout_watching(flow, || client.stream.left(leave))
                .await?
        }
    };
    // A reused connection may have been closed by the node meanwhile; the
    // request can be sent again only if the node cannot have acted on it twice.
    let replayable = lease.is_reused() && head.method().is_idempotent() && body.is_complete();

    // forward: head and buffered body in one write (a large body from its own buffer)
    let after = write_head(client, vs, head, forwarding, body, upstream);
    let write_stall = pool.config.timeouts.write;
    send(&mut lease, &client.upstream_out, write_stall, replayable).await?;
    if let Some(after) = after {
        send(&mut lease, &body.buffered, write_stall, replayable).await?;
        if !after.is_empty() {
            send(&mut lease, &after, write_stall, replayable).await?;
        }
    }
    // The node has what weir held of the request: its response time counts from here
    // (and, for a whole request, the response timeout too: one reading of the clock).
    let sent_at = Instant::now();
    // Counted once the head is the node's: a body that fails after it (the client gone, a
    // chunked body past `max_body_bytes`) does not unsend it.
    pool.nodes[index].metrics.requests_forwarded.inc();
    let mut answer = std::mem::take(&mut client.upstream_in);
    answer.clear();
    // Whether the node can be sent the request again from what weir holds: not once part of
    // its body streamed from the client (whatever `body` says after it).
    let whole = body.is_complete();
    let streamed = match whole {
        true => Ok(Streamed::Complete),
        false => {
            let node = lease.stream();
            // Boxed: a body still to stream is the rarer case, and its future inline would
            // be carried (and copied) by every request's.
            Box::pin(request_body::stream_rest(
                client,
                vs,
                head,
                body,
                node,
                write_stall,
                &mut answer,
            ))
            .await
        }
    };
    client.upstream_in = answer;
    let body_cut = streamed? == Streamed::NodeAnswered;

    // wait for the response head
    let response = read_response_head(
        client,
        vs,
        pool,
        &mut lease,
        head,
        forwarding,
        (replayable, whole.then_some(sent_at)),
    )
    .await?;
    Ok(Exchange {
        lease: NodeLink::Http1(lease),
        in_flight,
        node: index,
        response,
        sent_at,
        tunnel,
        body_cut,
    })
}

/// One try on an HTTP/2 node: a stream (the node's queue counts streams),
/// the head rewritten as for HTTP/1.1 then put in HTTP/2 form, the buffered
/// body, the rest streamed within the node's window, the response head.
async fn attempt_h2(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    (index, node): (usize, &Arc<weir_upstream::H2Node>),
    on: Attempt<'_>,
    body: &mut RequestBody,
) -> Result<Exchange, Failure> {
    let Attempt {
        head,
        forwarding,
        upstream,
        ..
    } = on;
    if forwarding.connect {
        // weir is no forward proxy: a plain CONNECT does not cross to an HTTP/2 node.
        return Err(Failure::not_implemented("CONNECT to an HTTP/2 node"));
    }
    if forwarding.upgrade {
        // WebSocket crosses as an extended CONNECT (RFC 8441); nothing else switches.
        // Boxed: the rare case, kept out of every HTTP/2 request's future.
        return Box::pin(h2_websocket::attempt(client, vs, pool, (index, node), on)).await;
    }
    let in_flight = pool.nodes[index].start_request();
    let write_stall = pool.config.timeouts.write;
    // Once the rest of the body has streamed, the request cannot be sent again.
    let streams = !body.is_complete();
    let sent_at = Instant::now();
    let mut request = send_start_h2(
        client,
        (vs, pool, node),
        (head, forwarding, &upstream),
        body,
    )
    .await?;
    // Answered (refused, say) before any of the rest of the body left the client: the
    // request can still be sent again whole.
    let answered_before_body = request.early.is_some();
    let (mut pump, upload) = send_rest_h2(client, body, &mut request, write_stall).await?;
    let mut early = request.early.take();
    // (`requests_forwarded` is counted by the node's HTTP/2 side as the stream is sent.)
    // The node's time to answer counts from when the whole request has gone, as to an
    // HTTP/1.1 node (`attempt`): a body streamed in a task of its own (a client-streaming
    // gRPC call) lasts as long as the client keeps it going, bounded by its own clocks.
    let response_time = pool.config.timeouts.response;
    let mut deadline = None;
    // As on a reused HTTP/1.1 connection (`attempt`): a lost connection sends the request
    // again only when the node cannot have acted on it twice.
    let reading = http2::upstream::Reading {
        method: head.method(),
        limits: &vs.head_limits,
        replay: request.lease.is_reused() && head.method().is_idempotent() && !streams,
    };
    let mut waiting = request.response;
    // A client that goes meanwhile takes its stream at the node with it (reset).
    let watch = (
        !forwarding.background,
        pool.config.connections.leave_queue_on_close,
    );
    // Those that came while the body went first, in their order.
    let held = std::mem::take(&mut request.interims);
    let mut interims = relay_held_interims(client, (vs, head), held, reading, forwarding).await?;
    let response = loop {
        if let Some(answered) = early.take() {
            // A refusal that came while the rest of the body streamed cannot be answered
            // by sending the request again: the bytes that went are gone.
            let read_ahead = !request.ahead.is_empty();
            break http2::upstream::early_answer(answered, reading, read_ahead).map_err(
                |error| match streams && !answered_before_body {
                    true => error.retry_safe(false),
                    false => error,
                },
            )?;
        }
        let answered = next_h2_answer(
            (&mut waiting, &request.lease),
            reading,
            pump.as_mut(),
            &mut deadline,
            response_time,
        );
        let next = unless_client_leaves(&mut client.stream, watch, answered)
            .await?
            .map_err(|error| match streams {
                true => error.retry_safe(false),
                false => error,
            })?;
        let interim = match next {
            http2::upstream::Answer::Final(response) => break response,
            http2::upstream::Answer::Interim(interim) => interim,
        };
        interims += 1;
        if interims > crate::MAX_INTERIM_RESPONSES {
            return Err(bad_response("too many interim (1xx) responses"));
        }
        // 103 Early Hints and the like go on as they come (as from HTTP/1.1 nodes).
        if !forwarding.background {
            relay_interim(client, vs, (head, forwarding, true), &interim).await?;
        }
    };
    Ok(Exchange {
        // The rest of a body cut by an early answer is still at the client: its
        // connection closes after the answer.
        body_cut: upload.is_some(),
        lease: NodeLink::Http2 {
            body: response.body,
            upload,
            pump,
            ahead: std::mem::take(&mut request.ahead),
            lease: request.lease,
        },
        in_flight,
        node: index,
        response: response.head,
        sent_at,
        tunnel: None,
    })
}

/// Relays the interim answers an HTTP/2 node sent while the request body went (at most
/// [`crate::MAX_INTERIM_RESPONSES`]); returns how many there were.
async fn relay_held_interims(
    client: &mut Client,
    (vs, head): (&VirtualServerRuntime, &RequestHead),
    held: Vec<http2::upstream::RawInterim>,
    reading: http2::upstream::Reading<'_>,
    forwarding: Forwarding,
) -> Result<u32, Failure> {
    let mut interims = 0;
    for interim in held {
        interims += 1;
        if interims > crate::MAX_INTERIM_RESPONSES {
            return Err(bad_response("too many interim (1xx) responses"));
        }
        let interim =
            http2::upstream::interim_head(interim, reading).map_err(Failure::from_error)?;
        if !forwarding.background {
            relay_interim(client, vs, (head, forwarding, true), &interim).await?;
        }
    }
    Ok(interims)
}

/// The request's head and the buffered start of its body on a stream of `node`
/// ([`http2::upstream::send_request`]), its client watched while it waits (in the node's
/// queue, or for the node's window).
async fn send_start_h2(
    client: &mut Client,
    (vs, pool, node): (&VirtualServerRuntime, &Pool, &Arc<weir_upstream::H2Node>),
    (head, forwarding, upstream): (&RequestHead, Forwarding, &Upstream<'_>),
    body: &RequestBody,
) -> Result<http2::upstream::H2Request, Failure> {
    let forward = forward_request(client, vs, forwarding, body.framing);
    let scheme = if client.stream.is_tls() {
        "https"
    } else {
        "http"
    };
    // The buffered body is copied, not moved: a refused stream is sent again.
    let buffered = bytes::Bytes::copy_from_slice(&body.buffered);
    let ends = body.is_complete() && body.trailers.is_empty();
    let converted = http2::upstream::convert_request(
        (head, upstream.path, &upstream.edits),
        &forward,
        (scheme, node.codec()),
    )?;
    let leave = pool.config.connections.leave_queue_on_close;
    // A background request has no client to watch.
    let left = async {
        match forwarding.background {
            true => std::future::pending().await,
            false => client.stream.left(leave).await,
        }
    };
    let request = http2::upstream::send_request(
        node,
        converted,
        (buffered, ends),
        pool.config.timeouts.write,
        upstream.flow(),
        std::pin::pin!(left),
    )
    .await?;
    Ok(request)
}

/// The rest of a request body to an HTTP/2 node, after what `send_request` sent. From an
/// HTTP/2 client it moves on its own, full duplex (the pump, watched); from an HTTP/1.1 one
/// it is sent before the response is awaited, unless the node answers first: it may send a
/// whole answer (a 413 of its own) and stop reading (RFC 9113 §8.1). That final answer
/// (`request.early`, which `send_request` may have set already) ends the upload: the rest
/// of the body stays with the client, whose connection then closes after the answer (as
/// after an HTTP/1.1 node's early answer), and the stream's sending side is returned, to
/// be kept open (not reset) until the answer's body is read. Interim answers wait for the
/// body to be sent.
async fn send_rest_h2(
    client: &mut Client,
    body: &mut RequestBody,
    request: &mut http2::upstream::H2Request,
    write_stall: std::time::Duration,
) -> Result<(Option<PumpWatch>, Option<http2::SendHalf>), Failure> {
    let Some(stream) = request.body.take() else {
        return Ok((None, None));
    };
    // A whole answer, or one whose read-ahead filled while the first part of the body went
    // (`send_request`), is relayed now; the rest of the body stays with the client.
    let over = match &request.early {
        Some(answered) => {
            http2::upstream::ends_the_upload(answered)
                || http2::upstream::read_ahead_full(&request.ahead)
        }
        None => false,
    };
    if over {
        return Ok((None, Some(stream)));
    }
    // No answer yet, or only its head: the body goes on.
    let mut stream = match request_body::spawn_h2_pump(client, body, stream, write_stall) {
        Ok(watch) => return Ok((Some(watch), None)),
        Err(stream) => stream,
    };
    // An HTTP/1.1 client's body goes before the answer is relayed, the answer's body read
    // ahead meanwhile once its head has come.
    let cut = {
        let sending = request_body::stream_rest_h2(client, body, &mut stream, write_stall);
        tokio::pin!(sending);
        let sent = http2::upstream::send_until_answered(
            sending,
            &mut request.response,
            (&mut request.early, &mut request.interims),
            &mut request.ahead,
        )
        .await;
        match sent {
            http2::upstream::Upload::Sent(Ok(())) => false,
            // After the node's head, a stream it stopped (reset once its answer was whole)
            // ends the upload: the answer stands. A failure of the client's own is still the
            // client's, and a node that took no more within `timeouts.write` a stall (504;
            // dropping the stream resets it at the node).
            http2::upstream::Upload::Sent(Err(failure))
                if request.early.is_some()
                    && failure.error.side() == Side::Upstream
                    && failure.error.kind() != ErrorKind::ResponseTimeout =>
            {
                true
            }
            http2::upstream::Upload::Sent(Err(failure)) => {
                http2::upstream::suspect_on_timeout(&request.lease, &failure.error);
                return Err(failure);
            }
            http2::upstream::Upload::Answered => true,
        }
    };
    Ok((None, cut.then_some(stream)))
}

/// The HTTP/2 node's next answer to a request whose body may still be streaming (`body`).
/// The node's time to answer (`response_time`) starts once the body has all gone (its
/// `deadline`, set then and kept across interim answers). A node that lets the deadline
/// pass makes its connection suspect (`http2::upstream::suspect_on_timeout`).
async fn next_h2_answer(
    (waiting, lease): (&mut http2::upstream::NodeResponse, &StreamLease),
    reading: http2::upstream::Reading<'_>,
    body: Option<&mut PumpWatch>,
    deadline: &mut Option<Instant>,
    response_time: std::time::Duration,
) -> Result<http2::upstream::Answer, Error> {
    let answer = wait_h2_answer(waiting, reading, body, deadline, response_time).await;
    if let Err(error) = &answer {
        http2::upstream::suspect_on_timeout(lease, error);
    }
    answer
}

/// [`next_h2_answer`], the node's connection aside.
async fn wait_h2_answer(
    waiting: &mut http2::upstream::NodeResponse,
    reading: http2::upstream::Reading<'_>,
    mut body: Option<&mut PumpWatch>,
    deadline: &mut Option<Instant>,
    response_time: std::time::Duration,
) -> Result<http2::upstream::Answer, Error> {
    loop {
        let Some(flowing) = body.as_deref_mut().filter(|body| body.flowing()) else {
            let by = *deadline.get_or_insert_with(|| Instant::now() + response_time);
            let next = http2::upstream::next_answer(waiting, reading, Some(by)).await;
            return next.map_err(|error| body.and_then(PumpWatch::failure).unwrap_or(error));
        };
        // A body that fails before the node answers is the client's fault, answered as such
        // (413 past `max_body_bytes`, as on the way to an HTTP/1.1 node), not as the node's
        // stream that weir reset for it. An answer the node gave first wins: it may answer
        // before the body and then reset the stream with NO_ERROR to stop it (RFC 9113
        // §8.1), which ends the pump.
        tokio::select! {
            biased;
            next = http2::upstream::next_answer(waiting, reading, None) => {
                return next.map_err(|error| flowing.failure().unwrap_or(error));
            }
            // All of it went (`Ok`): the node's time to answer starts.
            ended = flowing.ended() => ended?,
        }
    }
}

/// How the head is rewritten for the node, whatever its protocol.
fn forward_request<'a>(
    client: &'a Client,
    vs: &'a VirtualServerRuntime,
    forwarding: Forwarding,
    framing: weir_http::BodyFraming,
) -> ForwardRequest<'a> {
    ForwardRequest {
        framing,
        client_addr: vs.config.forwarded_headers.then_some(client.peer.ip()),
        proto: if client.stream.is_tls() {
            "https"
        } else {
            "http"
        },
        via: vs.config.forwarded_headers.then_some(VIA),
        // Via names the protocol weir received the request in (RFC 9110 §7.6.3).
        via_version: client.is_h2().then_some("2"),
        upgrade: forwarding.upgrade,
        strip_expect: true,
        owned_header: vs
            .tls
            .as_ref()
            .and_then(|tls| tls.subject_header.as_deref())
            .map(|name| (name, client.client_subject.as_deref())),
        drop_underscore_names: forwarding.drop_underscore_names,
    }
}

/// A buffered body up to this size is copied behind the head, to go out in one write; a
/// larger one is written from its own buffer after it.
const COPIED_BODY: usize = 64 * 1024;

/// Rewrites the head for the node into `client.upstream_out`, followed by the buffered body
/// when it is at most [`COPIED_BODY`]; else by the framing before it, and returns the
/// framing after it ([`RequestBody::write_buffered_up_to`]).
/// `edits`: the rules' path and header edits, and the request id.
fn write_head(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    forwarding: Forwarding,
    body: &RequestBody,
    upstream: Upstream<'_>,
) -> Option<BytesMut> {
    let mut out = std::mem::take(&mut client.upstream_out);
    out.clear();
    weir_http::write_request_head_edited(
        head,
        &forward_request(client, vs, forwarding, body.framing),
        upstream.path,
        &upstream.edits,
        &mut out,
    );
    let after = body.write_buffered_up_to(&mut out, COPIED_BODY);
    client.upstream_out = out;
    after
}

/// Writes `bytes` to the node, stalling at most `write_stall`.
async fn send(
    lease: &mut Lease,
    bytes: &[u8],
    write_stall: Duration,
    replayable: bool,
) -> Result<(), Failure> {
    let stream = lease.stream();
    let written = async {
        stream.write_all(bytes).await?;
        // A no-op on plain TCP; on TLS it pushes the records out.
        stream.flush().await
    };
    match weir_core::timeout::timeout(write_stall, written).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(Failure::from_error(
            Error::upstream(ErrorKind::BadResponse, error)
                .context("writing the request")
                .retry_safe(replayable),
        )),
        Err(_) => Err(Failure::from_error(
            Error::new(ErrorKind::ResponseTimeout, Side::Upstream)
                .context("node did not take the request within timeouts.write"),
        )),
    }
}

/// Whether a 101 names in `Upgrade` what it switches to, and only protocols `request`
/// offered (RFC 9110 §7.8: a server must not switch to one the client did not offer;
/// §15.2.2: a 101 must say which). Otherwise the node would take the connection out of
/// HTTP to something weir never allowed (`upgrades`), h2c included, and weir would see no
/// more requests on it.
/// Protocols are compared by name (`websocket/13` offered, `websocket` answered).
fn switches_to_offered(response: &ResponseHead, request: &RequestHead) -> bool {
    fn names<'a>(
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> impl Iterator<Item = &'a [u8]> {
        fields
            .filter(|(name, _)| name.eq_ignore_ascii_case(b"upgrade"))
            .flat_map(|(_, value)| weir_http::upgrade_protocols(value))
            .map(|(_, name)| name)
    }
    let offered: Vec<&[u8]> = names(request.headers()).collect();
    let mut named = names(response.headers()).peekable();
    named.peek().is_some()
        && named.all(|protocol| offered.iter().any(|o| o.eq_ignore_ascii_case(protocol)))
}

/// Reads the final response head, passing interim (1xx) responses on to the client.
/// `sent`: when the whole request was sent; `None` when its body streamed, sent now.
async fn read_response_head(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    lease: &mut Lease,
    head: &RequestHead,
    forwarding: Forwarding,
    (replayable, sent): (bool, Option<Instant>),
) -> Result<ResponseHead, Failure> {
    let now = sent.unwrap_or_else(Instant::now);
    let deadline = now + pool.config.timeouts.response;
    // A background refresh has no client; the others watch theirs from `watch_from`.
    let watch_from = (!forwarding.background).then_some(now + crate::WATCH_CLIENT_AFTER);
    let mut watching = false;
    let mut got_any = !client.upstream_in.is_empty();
    let mut interim = 0;
    loop {
        if !client.upstream_in.is_empty() {
            match parse_response(&client.upstream_in, &vs.head_limits, head.method()) {
                Ok(Parsed::Complete(response, used)) => {
                    bytes::Buf::advance(&mut client.upstream_in, used);
                    if response.status() == 101 && !forwarding.upgrade {
                        return Err(bad_response(
                            "101 Switching Protocols to a request without an allowed Upgrade",
                        ));
                    }
                    if response.status() == 101 && !switches_to_offered(&response, head) {
                        return Err(bad_response(
                            "101 Switching Protocols to a protocol the request did not offer \
                             (or naming none in Upgrade)",
                        ));
                    }
                    if !response.is_interim() || response.status() == 101 {
                        return Ok(response);
                    }
                    interim += 1;
                    if interim > crate::MAX_INTERIM_RESPONSES {
                        return Err(bad_response("too many interim (1xx) responses"));
                    }
                    if !forwarding.background {
                        relay_interim(client, vs, (head, forwarding, false), &response).await?;
                    }
                    continue;
                }
                Ok(Parsed::Partial) => {}
                Err(error) => return Err(Failure::bad_response(error)),
            }
        }
        client.upstream_in.reserve(8 * 1024);
        let until = match watch_from {
            Some(from) if !watching && from < deadline => from,
            _ => deadline,
        };
        let reading = lease.stream().read_buf(&mut client.upstream_in);
        let read = match watching {
            false => weir_core::timeout::timeout_at_settled(until, reading).await,
            true => {
                let fin = pool.config.connections.leave_queue_on_close;
                tokio::select! {
                    biased;
                    read = weir_core::timeout::timeout_at_settled(until, reading) => read,
                    _ = client.stream.left(fin) => return Err(left_at_node()),
                }
            }
        };
        let error = match read {
            Err(_) if until < deadline => {
                watching = true;
                continue;
            }
            Ok(Ok(0)) => Error::new(ErrorKind::BadResponse, Side::Upstream)
                .context("node closed the connection before a complete response head"),
            Ok(Ok(_)) => {
                got_any = true;
                continue;
            }
            // A fresh TLS connection whose first record is a certificate alert: the node
            // refused weir's client certificate after the handshake ended on weir's side
            // (TLS 1.3 sends it after weir's Finished, with the request already written).
            // The node never took the request, so it goes to another node, as a handshake
            // that failed outright does, if weir still holds all of it: a body partly
            // streamed from the client cannot be sent again (its start would go as all of it).
            Ok(Err(io))
                if !got_any && !lease.is_reused() && weir_tls::is_handshake_refusal(&io) =>
            {
                let address = lease.node();
                if let Some(index) = pool.nodes.iter().position(|n| n.address == address) {
                    pool.nodes[index].metrics.connect_failures.inc();
                    if let Some(connections) = pool.connections.get(index) {
                        connections.record_refused_handshake();
                    }
                }
                return Err(Failure::from_error(
                    Error::upstream(ErrorKind::ConnectFailed, io)
                        .context("the node refused the TLS session after the handshake")
                        .retry_safe(sent.is_some()),
                ));
            }
            Ok(Err(io)) => {
                Error::upstream(ErrorKind::BadResponse, io).context("reading the response head")
            }
            Err(_) => {
                return Err(Failure::from_error(
                    Error::new(ErrorKind::ResponseTimeout, Side::Upstream).context(format!(
                        "no response head within {:?}",
                        pool.config.timeouts.response
                    )),
                ));
            }
        };
        // Closed before any byte of a response: the node had closed a reused connection.
        return Err(Failure::from_error(
            error.retry_safe(replayable && !got_any),
        ));
    }
}

/// `waiting` (for the node's answer) to its end, unless the client goes first: watched
/// from [`crate::WATCH_CLIENT_AFTER`] on, when `watch.0` (a request with a client), a FIN
/// counting when `watch.1` (`leave_queue_on_close`), an HTTP/2 reset always.
async fn unless_client_leaves<O>(
    stream: &mut Downstream,
    (watch, fin): (bool, bool),
    waiting: impl std::future::Future<Output = O>,
) -> Result<O, Failure> {
    if !watch {
        return Ok(waiting.await);
    }
    crate::unless_left(waiting, std::pin::pin!(stream.left(fin)))
        .await
        .map_err(|_| left_at_node())
}

/// The client went while its request was at the node ([`crate::WATCH_CLIENT_AFTER`]).
fn left_at_node() -> Failure {
    Failure::from_error(
        Error::new(ErrorKind::ClientClosed, Side::Downstream)
            .context("the client went while the node worked on its request"),
    )
}

/// A 1xx from the node goes on to HTTP/1.1 and HTTP/2 clients (RFC 9110 §15.2: a
/// proxy forwards every 1xx it did not ask for itself). weir answers `Expect` itself
/// and never sends it on, so a node's 100 is one nobody asked for: it goes on too, at
/// worst a second 100, which a client must read past.
///
/// An interim answer carries weir's `Via` entry after the node's, as the final answer does,
/// or no `Via` at all when a rule takes it off the response (`forwarding.hide_via`).
async fn relay_interim(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    (head, forwarding, from_h2_node): (&RequestHead, Forwarding, bool),
    response: &ResponseHead,
) -> Result<(), Failure> {
    if head.version() != weir_http::Version::Http11 {
        return Ok(());
    }
    let forward = weir_http::ForwardResponse {
        framing: weir_http::BodyFraming::None,
        version: head.version(),
        keep_alive: true,
        via: (!forwarding.hide_via).then_some(crate::VIA),
        // The protocol weir received it in, as for the final answer (`Via: 2 weir`).
        via_version: from_h2_node.then_some("2"),
        upgrade: false,
        set_headers: &[],
    };
    let edits = HideVia(forwarding.hide_via);
    if let Some(stream) = client.h2() {
        let mut written = BytesMut::new();
        weir_http::http2::write_response_head_for_h2(response, &forward, &edits, &mut written);
        let head = http2::Head::Written(response.status(), &written);
        stream.send_interim(head).map_err(|error| {
            Failure::node_head_on_stream(error, "interim head not representable in HTTP/2")
        })?;
        return Ok(());
    }
    let mut interim = BytesMut::new();
    weir_http::write_response_head_edited(response, &forward, &edits, &mut interim);
    client.send(&interim, vs.config.timeouts.write).await
}

/// The edits of an interim answer: the node's `Via` left out when a rule hides it.
struct HideVia(bool);

impl weir_http::HeaderEdit for HideVia {
    fn drops(&self, name: &[u8]) -> bool {
        self.0 && name.eq_ignore_ascii_case(b"via")
    }

    fn write_added(&self, _out: &mut BytesMut) {}
}

fn bad_response(context: &'static str) -> Failure {
    Failure::from_error(Error::new(ErrorKind::BadResponse, Side::Upstream).context(context))
}
