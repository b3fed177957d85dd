//! The `filter_response` stage: the node's response given to the cache and
//! compression. Answered from the cache (a 304 merged, stale-if-error); stored
//! while the client reads it from the store (bounded size: the node's side and
//! the client's run together, neither waits for the other); stored as it
//! passes (unknown length; read ahead of a slow client, [`read_ahead`]); or
//! passed on, compressed when eligible. The
//! client is an HTTP/1.1 connection or an HTTP/2 stream: one relay loop,
//! two sinks ([`Sink`]).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use weir_cache::directives::ResponseDirectives;
use weir_cache::object::StoredHead;
use weir_cache::policy::storable::content_length;
use weir_cache::{
    CacheStatus, Coding, Compressor, Fill, Follower, Forward, HeadEdits, Hit, Http1Request, Reply,
    ResponseView, UnixTime,
};
use weir_core::{Error, ErrorKind, Side};
use weir_http::{BodyFraming, HeaderEdit, RequestHead, ResponseHead, Version};
use weir_upstream::Pool;

use super::{Content, Flow, deliver, lookup};
use crate::answer::Failure;
use crate::client::Client;
use crate::exchange::{self, AnsweredBy, Exchange, NodeLink};
use crate::policy::Forwarding;
use crate::request_body::RequestBody;
use crate::response::{self, Sent, Upstream};
use crate::route::VirtualServerRuntime;
use crate::traffic::{Edits, Upstream as TrafficUpstream};

/// What to do with the node's response.
enum Plan {
    /// The pipeline's usual relay, with the cache status when there is one.
    Plain(Option<CacheStatus>),
    /// Answer from the cache; the node's response is dropped.
    Hit(Hit),
    /// Store the body; the client reads it from the store, followed from now until it is
    /// answered ([`weir_cache::Fill::follower`]).
    Store(Transform, Hit, Option<Follower>),
    /// Relay the body through `transform`, the head edited.
    Relay {
        edits: Option<HeadEdits>,
        transform: Transform,
        status: Option<CacheStatus>,
    },
    /// A 304 the stored object cannot take: send the request again, as this exchange says.
    Refetch(weir_cache::Exchange),
}

/// What sending the request to the node again takes ([`planned`]): the forward stage's
/// arguments, as the pipeline gave them to the first exchange.
pub(crate) type Resend<'a, 'b> = (Forwarding, TrafficUpstream<'a>, &'b mut RequestBody);

/// The node's answer as [`respond`] takes it: the exchange, whether the client's connection
/// may be kept, what sending the request again takes, and the node noted as answering.
pub(crate) type Answered<'p, 'a, 'b> = (Exchange, bool, Resend<'a, 'b>, &'b mut AnsweredBy<'p>);

/// What the body goes through on its way.
enum Transform {
    Pass,
    Compress(Compressor),
    Fill(Fill),
    /// Taken to a blocking thread for a slow encoder's work ([`Pieces::on_transform`]),
    /// and not back: a use fails, rather than passing bytes on unencoded.
    Away,
}

/// `filter_response` and `respond` for a request with a [`Flow`]: the node's `exchange`,
/// whether the client's connection may be kept, what sending the request again takes
/// (`resend`, for a 304 the cache cannot use), and the node that answered, which a
/// second exchange replaces (`answered_by`).
pub(crate) async fn respond<'p>(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &'p Arc<Pool>,
    head: &RequestHead,
    (flow, decor): (Flow<'_>, &Edits<'_>),
    answered: Answered<'p, '_, '_>,
) -> Result<Sent, Failure> {
    let (exchange, keep_alive, resend, answered_by) = answered;
    let stall = pool.config.timeouts.response;
    let version = head.version();
    let content = flow.content;
    let resend = (resend, Some(answered_by));
    let (exchange, planned) = planned(client, vs, pool, head, flow, exchange, resend).await?;
    let keep_alive = keep_alive && !exchange.body_cut;
    let via = via_entry(&exchange);
    match planned {
        Plan::Plain(status) => {
            let extra = content.status_header().zip(status.map(CacheStatus::as_str));
            let decor = (decor, extra);
            let sent = response::respond(client, vs, exchange, version, keep_alive, stall, decor);
            let mut sent = sent.await?;
            sent.cache = status.map(CacheStatus::as_str);
            Ok(sent)
        }
        Plan::Hit(hit) => {
            let (mut upstream, _) = Upstream::of(exchange, stall);
            if upstream.is_bodyless() {
                upstream.finish(&client.upstream_in);
            }
            // A body (a 5xx answered with stale-if-error) goes with the connection.
            drop(upstream);
            deliver::hit(client, (vs, content), &hit, version, keep_alive, decor).await
        }
        Plan::Store(transform, hit, follower) => {
            let (mut upstream, _) = Upstream::of(exchange, stall);
            let mut input = std::mem::take(&mut client.upstream_in);
            let deliver = async {
                let delivered =
                    deliver::hit(client, (vs, content), &hit, version, keep_alive, decor).await;
                // Done with it, answered or gone: the fill goes on only for others.
                drop(follower);
                delivered
            };
            let (pumped, delivered) =
                tokio::join!(pump(&mut upstream, &mut input, transform), deliver);
            client.upstream_in = input;
            if let Err(failure) = pumped {
                tracing::debug!(virtual_server = %vs.config.name, error = %failure.error, "cache fill ended early");
            }
            delivered
        }
        Plan::Relay {
            edits,
            transform,
            status,
        } => {
            let (upstream, response) = Upstream::of(exchange, stall);
            let extra = content.status_header().zip(status.map(CacheStatus::as_str));
            let how = Relay {
                edits,
                client_edits: decor.as_edit(),
                status,
                extra,
                version,
                keep_alive,
                via,
                trailers: matches!(transform, Transform::Pass),
            };
            relay(client, vs, upstream, &response, transform, how).await
        }
        Plan::Refetch(_) => Err(refetch_twice()),
    }
}

/// The plan for the node's response; for a 304 the stored object cannot take
/// ([`Plan::Refetch`]), the 304 is dropped, the request sent again as the cache says
/// (without validators), and the plan for that response. The second answer's node is
/// noted (passive health, response time) and, when asked, named in `answered_by`.
async fn planned<'p>(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &'p Arc<Pool>,
    head: &RequestHead,
    flow: Flow<'_>,
    exchange: Exchange,
    ((forwarding, upstream, body), answered_by): (Resend<'_, '_>, Option<&mut AnsweredBy<'p>>),
) -> Result<(Exchange, Plan), Failure> {
    let view = Http1Request {
        head,
        scheme: flow.scheme,
    };
    let again = Flow {
        cached: None,
        forward_head: None,
        ..flow
    };
    let via = via_entry(&exchange);
    let cached = match plan(flow, &view, &exchange.response, via) {
        Plan::Refetch(cached) => cached,
        planned => return Ok((exchange, planned)),
    };
    let (mut dropped, _) = Upstream::of(exchange, pool.config.timeouts.response);
    if dropped.is_bodyless() {
        dropped.finish(&client.upstream_in);
    }
    drop(dropped);
    let again = lookup::with_head(again, cached, head, vs);
    let sent = again.forward_head.as_ref().unwrap_or(head);
    let exchange = exchange::exchange(client, vs, pool, sent, forwarding, body, upstream).await?;
    let noted = exchange::note_response(pool, &exchange);
    if let Some(answered_by) = answered_by {
        *answered_by = noted;
    }
    let via = via_entry(&exchange);
    let planned = plan(again, &view, &exchange.response, via);
    Ok((exchange, planned))
}

/// The cache asked for a second refetch, which it never does (its refetch fetches).
fn refetch_twice() -> Failure {
    Failure::from_error(
        Error::new(ErrorKind::Io, Side::Internal).context("the cache asked to refetch twice"),
    )
}

/// The node could not be reached or did not answer: a stale object within
/// `stale-if-error` when the cache has one, else the failure.
pub(crate) async fn node_failed(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    head: &RequestHead,
    flow: Flow<'_>,
    failure: Failure,
    (keep_alive, edits): (bool, &Edits<'_>),
) -> Result<Sent, Failure> {
    let view = Http1Request {
        head,
        scheme: flow.scheme,
    };
    let stale = match (flow.cached, flow.content.cache.as_ref()) {
        // The client left: its waiters, if any, go on behind one of them.
        (Some(exchange), Some(cache)) if failure.error.kind() == ErrorKind::ClientClosed => {
            cache.abandoned(exchange);
            None
        }
        (Some(exchange), Some(cache)) => cache.node_failed(exchange, &view, UnixTime::now()),
        _ => None,
    };
    match stale {
        Some(hit) => {
            let vs = (vs, flow.content);
            deliver::hit(client, vs, &hit, head.version(), keep_alive, edits).await
        }
        None => Err(failure),
    }
}

/// A stale-while-revalidate refresh, after the client has its (stale) answer:
/// the request goes to the node again, and what it answers is stored. Nothing
/// is sent to the client; a failure leaves the stale object as it is.
pub(crate) async fn refresh(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    head: &RequestHead,
    (forwarding, upstream): (Forwarding, TrafficUpstream<'_>),
    body: &mut RequestBody,
    flow: Flow<'_>,
) {
    let forwarding = Forwarding {
        background: true,
        ..forwarding
    };
    let planning = async {
        let sent = flow.forward_head.as_ref().unwrap_or(head);
        let exchange =
            exchange::exchange(client, vs, pool, sent, forwarding, body, upstream).await?;
        // A background answer says as much about the node as any other.
        exchange::note_response(pool, &exchange);
        let resend = ((forwarding, upstream, &mut *body), None);
        planned(client, vs, pool, head, flow, exchange, resend).await
    };
    let (exchange, planned) = match planning.await {
        Ok(planned) => planned,
        Err(failure) => {
            tracing::debug!(virtual_server = %vs.config.name, error = %failure.error, "background refresh failed");
            return;
        }
    };
    let (mut upstream, _) = Upstream::of(exchange, pool.config.timeouts.response);
    let transform = match planned {
        Plan::Store(transform, _, _) => transform,
        Plan::Relay {
            transform: transform @ Transform::Fill(_),
            ..
        } => transform,
        Plan::Hit(_) if upstream.is_bodyless() => {
            upstream.finish(&client.upstream_in);
            return;
        }
        // Not stored: the connection goes rather than read a body nobody wants.
        _ => return,
    };
    if let Err(failure) = pump(&mut upstream, &mut client.upstream_in, transform).await {
        tracing::debug!(virtual_server = %vs.config.name, error = %failure.error, "background refresh ended early");
    }
}

/// Asks the cache (or the compression policy) what to do with `response`.
/// `via`: this hop's `Via` entry, stored with the response.
fn plan(
    flow: Flow<'_>,
    view: &Http1Request<'_>,
    response: &ResponseHead,
    via: &'static str,
) -> Plan {
    let Flow {
        content,
        policy,
        cached,
        coding,
        ..
    } = flow;
    let compression = policy.compression.as_ref();
    let (Some(exchange), Some(cache), Some(cache_policy)) =
        (cached, content.cache.as_ref(), policy.cache.as_ref())
    else {
        return compress_only(content, compression, coding, view, response);
    };
    let now = UnixTime::now();
    let relayed = Relayed {
        head: response,
        via,
    };
    match cache.response(exchange, cache_policy, compression, view, &relayed, now) {
        Reply::Hit(hit) => Plan::Hit(hit),
        Reply::Forward(Forward {
            edits: None,
            status,
            ..
        }) => Plan::Plain(Some(status)),
        Reply::Forward(Forward {
            edits,
            compressor,
            status,
        }) => Plan::Relay {
            edits,
            transform: compressor.map_or(Transform::Pass, Transform::Compress),
            status: Some(status),
        },
        Reply::Refetch(exchange) => Plan::Refetch(exchange),
        Reply::Fill(mut fill) => {
            match fill.take_hit().or_else(|| fill.conditional_hit(view, now)) {
                Some(hit) => {
                    let follower = fill.follower();
                    Plan::Store(Transform::Fill(fill), hit, follower)
                }
                None => Plan::Relay {
                    edits: fill.tee_edits(),
                    status: Some(fill.cache_status()),
                    transform: Transform::Fill(fill),
                },
            }
        }
    }
}

/// A route that compresses without caching.
fn compress_only(
    content: &Content,
    compression: Option<&weir_cache::CompressionPolicy>,
    coding: Coding,
    view: &Http1Request<'_>,
    response: &ResponseHead,
) -> Plan {
    let Some(compression) = compression else {
        return Plan::Plain(None);
    };
    // The cache's own rule for responses it passes on (`Cache::forward`), so HEAD and 304
    // get the head the compressed 200 gets, here as there.
    let directives = ResponseDirectives::parse(response);
    let Some(passed) = compression.passed_on(view, response, &directives, coding) else {
        return Plan::Plain(None);
    };
    if !passed.body {
        return Plan::Relay {
            edits: Some(passed.edits),
            transform: Transform::Pass,
            status: None,
        };
    }
    let compressor = Compressor::new(
        coding,
        compression.levels,
        content_length(response),
        content.compression_metrics.of(coding.label()),
    )
    .ok()
    .flatten();
    // Without an encoder (identity, or zstd without memory) only `Vary` is added.
    let coding = compressor
        .as_ref()
        .map_or(Coding::Identity, Compressor::coding);
    Plan::Relay {
        edits: Some(HeadEdits { coding }),
        transform: compressor.map_or(Transform::Pass, Transform::Compress),
        status: None,
    }
}

impl Transform {
    fn push(&mut self, chunk: Bytes) -> io::Result<Bytes> {
        match self {
            Transform::Pass => Ok(chunk),
            Transform::Compress(compressor) => compressor.push(&chunk),
            Transform::Fill(fill) => fill.push(chunk),
            Transform::Away => Err(away()),
        }
    }

    /// Whether its encoder is a slow one ([`Compressor::is_slow`]).
    fn is_slow(&self) -> bool {
        match self {
            Transform::Compress(compressor) => compressor.is_slow(),
            Transform::Fill(fill) => fill.compresses_slowly(),
            Transform::Pass | Transform::Away => false,
        }
    }

    /// Whether input pushed may be held back (an encoder's window) until more comes.
    fn holds_back(&self) -> bool {
        match self {
            Transform::Pass | Transform::Away => false,
            Transform::Compress(_) => true,
            Transform::Fill(fill) => fill.compresses(),
        }
    }

    /// [`Transform::push`], then [`Transform::flush`]: all of `chunk` put out.
    fn push_flushed(&mut self, chunk: Bytes) -> io::Result<Bytes> {
        let out = self.push(chunk)?;
        let tail = self.flush()?;
        Ok(match (out.is_empty(), tail.is_empty()) {
            (_, true) => out,
            (true, false) => tail,
            (false, false) => [out, tail].concat().into(),
        })
    }

    /// Puts out everything pushed so far (an encoder's sync flush).
    fn flush(&mut self) -> io::Result<Bytes> {
        match self {
            Transform::Pass => Ok(Bytes::new()),
            Transform::Compress(compressor) => compressor.flush(),
            Transform::Fill(fill) => fill.flush(),
            Transform::Away => Err(away()),
        }
    }

    /// Whether the body still goes into the store.
    fn stores(&self) -> bool {
        matches!(self, Transform::Fill(fill) if fill.is_storing())
    }

    fn finish(self) -> io::Result<Bytes> {
        match self {
            Transform::Pass => Ok(Bytes::new()),
            Transform::Compress(compressor) => compressor.finish(),
            Transform::Fill(fill) => fill.finish(),
            Transform::Away => Err(away()),
        }
    }
}

/// The node's body through a [`Transform`], piece by piece, for [`relay`] and [`pump`].
/// An encoder holds what it was given until its window fills: what it holds is flushed
/// once the oldest of it has waited [`response::NODE_PAUSE`] (a progressive answer, whose
/// node pauses, or one that sends a line every 40 ms without a pause that long: measured
/// from when the encoder started holding, not from the last chunk, or such a stream was
/// held to its end), and, from a node that never pauses, once it has held for
/// [`HOLD_AT_MOST`]; with `eager` (an event stream) every chunk is flushed as it comes.
struct Pieces {
    transform: Transform,
    eager: bool,
    /// Since when the transform holds input it has not put out.
    held_since: Option<tokio::time::Instant>,
}

/// The longest an encoder holds input it was given before it is flushed, however fast
/// the node sends: without a pause the encoder could take a whole large body (brotli 11,
/// zstd 19 take megabytes before putting anything out) with nothing written to the client,
/// who could have left long ago unnoticed, weir compressing on for no one (an audit saw a
/// core busy for 10 s after its clients went, and gigabytes held).
const HOLD_AT_MOST: std::time::Duration = std::time::Duration::from_secs(1);

impl Pieces {
    fn new(transform: Transform, eager: bool) -> Pieces {
        Pieces {
            transform,
            eager,
            held_since: None,
        }
    }

    /// The next piece (possibly empty: an encoder that holds all it was given); `None`
    /// at the end of the body. The node's failures come as they are, the encoder's as
    /// [`encoder_failed`].
    async fn next(
        &mut self,
        upstream: &mut Upstream,
        input: &mut BytesMut,
    ) -> Result<Option<Bytes>, Failure> {
        let read = self.read(upstream, input).await?;
        self.take(read).await
    }

    /// What comes next from the node: `Some(Some(chunk))`, `Some(None)` at the end of the
    /// body, or `None` when what the encoder holds is to be flushed instead (the node
    /// paused, or it held for [`HOLD_AT_MOST`]). Cancel-safe: it only waits for the node,
    /// and nothing read is lost if it is dropped ([`Pieces::read_rest`] races it).
    async fn read(
        &mut self,
        upstream: &mut Upstream,
        input: &mut BytesMut,
    ) -> Result<Option<Option<Bytes>>, Failure> {
        if self
            .held_since
            .is_some_and(|since| since.elapsed() >= HOLD_AT_MOST)
        {
            return Ok(None);
        }
        let pause = self.held_since.map(|since| {
            (since + response::NODE_PAUSE).saturating_duration_since(tokio::time::Instant::now())
        });
        upstream.next_chunk_within(input, pause).await
    }

    /// [`Pieces::read`]'s outcome through the transform. Not to be cancelled: a slow
    /// encoder's work goes to a blocking thread with the transform ([`Pieces::on_transform`]).
    async fn take(&mut self, read: Option<Option<Bytes>>) -> Result<Option<Bytes>, Failure> {
        let piece = match read {
            Some(Some(chunk)) if self.eager => {
                self.on_transform(move |transform| transform.push_flushed(chunk))
                    .await
            }
            Some(Some(chunk)) => {
                if self.transform.holds_back() {
                    self.held_since
                        .get_or_insert_with(tokio::time::Instant::now);
                }
                self.on_transform(move |transform| transform.push(chunk))
                    .await
            }
            Some(None) => return Ok(None),
            None => {
                self.held_since = None;
                self.on_transform(Transform::flush).await
            }
        };
        piece.map(Some).map_err(encoder_failed)
    }

    /// `work` on the transform: here for the usual levels; for a slow encoder (brotli 10
    /// and 11, zstd 16 and up) on tokio's blocking threads, where its seconds of work on
    /// a large piece hold up none of this worker's other connections (those of other
    /// virtual servers included), as they would if it ran here.
    async fn on_transform<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut Transform) -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        if !self.transform.is_slow() {
            return work(&mut self.transform);
        }
        let mut transform = std::mem::replace(&mut self.transform, Transform::Away);
        let (transform, done) = tokio::task::spawn_blocking(move || {
            let done = work(&mut transform);
            (transform, done)
        })
        .await
        .map_err(|_| io::Error::other("the encoder's thread failed"))?;
        self.transform = transform;
        done
    }

    /// Reads the rest of the node's body through the transform, its pieces going nowhere
    /// but where the transform keeps them (the store): while it keeps them. A fill that
    /// stops storing (past its room, or its object gone from the store with no one
    /// following it, which a node that pauses must not delay: [`weir_cache::OrphanWatch`])
    /// leaves the rest unread, and the node's connection closes.
    async fn read_rest(
        &mut self,
        upstream: &mut Upstream,
        input: &mut BytesMut,
    ) -> Result<(), Failure> {
        let watch = match &self.transform {
            Transform::Fill(fill) => fill.orphan_watch(),
            _ => None,
        };
        loop {
            // Made before the fill is settled: a change from then on wakes it.
            let changed = watch.as_ref().map(weir_cache::OrphanWatch::changed);
            if let Transform::Fill(fill) = &mut self.transform {
                fill.settle();
            }
            if !self.transform.stores() {
                return Ok(());
            }
            // The watch races the node only, never the encoder's work ([`Pieces::take`]).
            let read = match changed {
                None => self.read(upstream, input).await?,
                Some(changed) => tokio::select! {
                    read = self.read(upstream, input) => read?,
                    () = changed => continue,
                },
            };
            if self.take(read).await?.is_none() {
                return Ok(());
            }
        }
    }

    /// The last bytes, once the body has ended (a slow encoder's on a blocking thread:
    /// [`Pieces::on_transform`]).
    async fn finish(mut self) -> Result<Bytes, Failure> {
        self.on_transform(|transform| std::mem::replace(transform, Transform::Away).finish())
            .await
            .map_err(encoder_failed)
    }
}

/// The node's body to the client one piece at a time, each sent before the next is read.
/// A client that fails in the middle of a body the fill stores leaves the rest to be read
/// into the store all the same, as a body read from the store is (`pump`), so the requests
/// waiting on this fill get it rather than each going to the node again.
async fn relay_in_step(
    client: &mut Client,
    upstream: &mut Upstream,
    pieces: &mut Pieces,
    sink: Sink,
    timeout: Duration,
) -> ReadAhead {
    let mut sent = 0;
    let mut body_out = false;
    loop {
        let piece = match pieces.next(upstream, &mut client.upstream_in).await {
            Ok(Some(piece)) => piece,
            Ok(None) => break ReadAhead::ended(sent, body_out, Ok(()), Ok(())),
            Err(failure) => break ReadAhead::ended(sent, body_out, Ok(()), Err(failure)),
        };
        body_out |= !piece.is_empty();
        let size = piece.len() as u64;
        if let Err(failure) = sink.piece(client, piece, timeout).await {
            let node = match pieces.transform.stores() {
                true => pieces.read_rest(upstream, &mut client.upstream_in).await,
                false => Ok(()),
            };
            break ReadAhead::ended(sent, body_out, Err(failure), node);
        }
        sent += size;
    }
}

/// How [`read_ahead`] (or [`relay_in_step`]) ended: the body's bytes that went out,
/// whether any did, how the client's side ended (gone, or stalled past the write timeout)
/// and how the node's did (broken off, or the encoder failed).
struct ReadAhead {
    sent: u64,
    body_out: bool,
    client: Result<(), Failure>,
    node: Result<(), Failure>,
}

impl ReadAhead {
    fn ended(
        sent: u64,
        body_out: bool,
        client: Result<(), Failure>,
        node: Result<(), Failure>,
    ) -> ReadAhead {
        ReadAhead {
            sent,
            body_out,
            client,
            node,
        }
    }
}

/// The body of a fill stored as it passes (its length unknown, so no growing object its
/// waiters could read), relayed to the client while it is read from the node. The node is
/// read at its own pace, not the client's: the pieces a slow client has not taken yet wait
/// in a queue, so the fill (and every request waiting on it, and the node connection) never
/// waits for one client. The queue holds the same bytes the fill keeps for the store, and
/// the fill is bounded by `max_object_size`: past it the fill is dropped and reading waits
/// for the client again, as a plain relay does. The fill is finished (stored) as soon as
/// the node's body ends, its last bytes queued after the rest, and `pieces` left an empty
/// pass-through. A client that fails leaves the rest to be read into the store. Both sides
/// run in this one task.
async fn read_ahead(
    client: &mut Client,
    upstream: &mut Upstream,
    pieces: &mut Pieces,
    sink: Sink,
    timeout: Duration,
) -> ReadAhead {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::Notify;

    let queue = Mutex::new(std::collections::VecDeque::<Bytes>::new());
    // Set by the reader with the node's outcome, once it has put its last piece.
    let node_end: Mutex<Option<Result<(), Failure>>> = Mutex::new(None);
    let client_gone = AtomicBool::new(false);
    // Reader → writer: a piece, or the end. Writer → reader: the queue is empty, or the
    // client has gone.
    let (more, drained) = (Notify::new(), Notify::new());
    let mut input = std::mem::take(&mut client.upstream_in);
    let read = async {
        let ended = loop {
            // Read ahead only while the pieces are the fill's too.
            while !pieces.transform.stores()
                && !client_gone.load(Ordering::Acquire)
                && !queue.lock().expect("queue").is_empty()
            {
                drained.notified().await;
            }
            let gone = client_gone.load(Ordering::Acquire);
            if gone && !pieces.transform.stores() {
                break Ok(());
            }
            match pieces.next(upstream, &mut input).await {
                // (The client may have gone while the node was read.)
                Ok(Some(piece)) if !client_gone.load(Ordering::Acquire) => {
                    queue.lock().expect("queue").push_back(piece);
                    more.notify_one();
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    // The node's body is whole: the fill goes into the store now, not once
                    // the client has taken it all. Its last bytes (an encoder's) go last.
                    let whole =
                        std::mem::replace(&mut *pieces, Pieces::new(Transform::Pass, false));
                    match whole.finish().await {
                        Ok(tail) if !client_gone.load(Ordering::Acquire) => {
                            queue.lock().expect("queue").push_back(tail);
                            break Ok(());
                        }
                        Ok(_) => break Ok(()),
                        Err(failure) => break Err(failure),
                    }
                }
                Err(failure) => break Err(failure),
            }
        };
        *node_end.lock().expect("end") = Some(ended);
        more.notify_one();
    };
    let mut sent = 0;
    let mut body_out = false;
    let write = async {
        let written = loop {
            let next = queue.lock().expect("queue").pop_front();
            match next {
                Some(piece) => {
                    if queue.lock().expect("queue").is_empty() {
                        drained.notify_one();
                    }
                    let size = piece.len() as u64;
                    body_out |= size > 0;
                    if let Err(failure) = sink.piece(client, piece, timeout).await {
                        break Err(failure);
                    }
                    sent += size;
                }
                None if node_end.lock().expect("end").is_some() => break Ok(()),
                None => more.notified().await,
            }
        };
        if written.is_err() {
            client_gone.store(true, Ordering::Release);
            queue.lock().expect("queue").clear();
            drained.notify_one();
        }
        written
    };
    let ((), written) = tokio::join!(read, write);
    client.upstream_in = input;
    let node = node_end
        .into_inner()
        .expect("end")
        .expect("set when reading ended");
    ReadAhead {
        sent,
        body_out,
        client: written,
        node,
    }
}

/// Reads the node's body into the store (a failure drops the fill, which
/// aborts it: readers close, waiters go to the node).
async fn pump(
    upstream: &mut Upstream,
    input: &mut BytesMut,
    transform: Transform,
) -> Result<(), Failure> {
    let mut pieces = Pieces::new(transform, false);
    pieces.read_rest(upstream, input).await?;
    pieces.finish().await?;
    Ok(())
}

/// A use of a transform that went to a blocking thread and never came back.
fn away() -> io::Error {
    io::Error::other("the encoder was left on another thread")
}

fn encoder_failed(error: io::Error) -> Failure {
    Failure::silent(
        Error::new(ErrorKind::Io, Side::Internal).context(format!("compressing: {error}")),
    )
}

/// How a relayed response's head is written.
struct Relay<'a> {
    edits: Option<HeadEdits>,
    /// The request's response edits (its rules' edits, its request id).
    client_edits: Option<&'a (dyn HeaderEdit + Sync)>,
    status: Option<CacheStatus>,
    extra: Option<(&'a str, &'a str)>,
    version: Version,
    keep_alive: bool,
    /// This hop's `Via` entry ([`via_entry`]).
    via: &'static str,
    /// The body passes as the node sent it: its `Trailer` field and trailers go with it
    /// (a compressed or stored body drops them, docs/design/cache.md).
    trailers: bool,
}

/// Where a relayed body goes: the one relay loop ([`relay`]: node →
/// [`Transform`] → client) writes to either protocol through this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sink {
    /// An HTTP/1.1 connection: the head and body through `write_buf`, the
    /// body framed as the head says (chunked when compressed or of unknown
    /// length).
    Http1(BodyFraming),
    /// An HTTP/2 stream: the head as HEADERS, the body as DATA sent as the
    /// stream's window allows ([`crate::http2::H2Stream::send_data`] waits
    /// for it), so weir holds at most one piece per stream and a slow reader
    /// slows this relay only. The pipeline ends the stream.
    Http2 {
        /// The head ended the stream (no body: HEAD, 204, 304).
        bodiless: bool,
    },
}

impl Sink {
    /// Writes the head (`head`: what [`write_head`] wrote in the client's
    /// `write_buf`, which it goes back to) and returns its size. HTTP/1.1:
    /// the head waits there to go out with the first piece of body.
    fn head(self, client: &mut Client, mut head: BytesMut) -> Result<u64, Failure> {
        let size = head.len() as u64;
        let sent = match self {
            Sink::Http1(_) => Ok(()),
            Sink::Http2 { bodiless } => {
                let sent = deliver::send_h2_head(client, &head, bodiless);
                head.clear();
                sent
            }
        };
        client.write_buf = head;
        sent.map(|()| size)
    }

    /// Sends a piece of body (after the head, on HTTP/1.1 still in `write_buf`).
    async fn piece(
        self,
        client: &mut Client,
        piece: Bytes,
        timeout: Duration,
    ) -> Result<(), Failure> {
        if piece.is_empty() {
            return Ok(());
        }
        match self {
            Sink::Http1(BodyFraming::Chunked) => {
                weir_http::encode_chunk(&piece, &mut client.write_buf);
                client.flush(timeout).await
            }
            Sink::Http1(_) => client.send(&piece, timeout).await,
            // A body the head said had none (a HEAD's) is not sent.
            Sink::Http2 { bodiless: true } => Ok(()),
            Sink::Http2 { bodiless: false } => {
                let stream = client.h2().ok_or_else(deliver::not_a_stream)?;
                Ok(stream.send_data(piece, false, timeout).await?)
            }
        }
    }

    /// Ends the body: the last chunk with `trailers` (lines), and whatever `write_buf`
    /// still holds; on HTTP/2 the trailers as the HEADERS frame that ends the stream
    /// (without them the pipeline ends it).
    async fn end(
        self,
        client: &mut Client,
        trailers: &[u8],
        timeout: Duration,
    ) -> Result<(), Failure> {
        match self {
            Sink::Http2 { bodiless: false } if !trailers.is_empty() => {
                response::send_end(client, BodyFraming::None, trailers, timeout).await
            }
            Sink::Http2 { .. } => Ok(()),
            Sink::Http1(framing) => {
                if framing == BodyFraming::Chunked {
                    weir_http::encode_last_chunk(trailers, &mut client.write_buf);
                }
                if !client.write_buf.is_empty() {
                    client.flush(timeout).await?;
                }
                Ok(())
            }
        }
    }
}

/// Relays the node's body through `transform` with the head edited, to an
/// HTTP/1.1 connection or an HTTP/2 stream ([`Sink`]). Once the head is out
/// a failure can only close the connection (reset the stream).
async fn relay(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    mut upstream: Upstream,
    response: &ResponseHead,
    transform: Transform,
    how: Relay<'_>,
) -> Result<Sent, Failure> {
    let compressed = how
        .edits
        .is_some_and(|edits| edits.coding != Coding::Identity);
    let h2 = client.is_h2();
    let framing = match response.framing() {
        BodyFraming::None => BodyFraming::None,
        BodyFraming::Length(length) if !compressed => BodyFraming::Length(length),
        // HTTP/2 frames the body itself: the head names no framing.
        _ if how.version == Version::Http11 && !h2 => BodyFraming::Chunked,
        _ => BodyFraming::CloseDelimited,
    };
    client.open_ended = framing == BodyFraming::CloseDelimited && !h2;
    // Trailers follow chunks or HTTP/2 frames; an HTTP/1.0 client's body ends with the
    // connection, and has no place for them. A HEAD's answer (no body) announces them as
    // its GET's does.
    let how = Relay {
        trailers: how.trailers
            && (h2
                || framing == BodyFraming::Chunked
                || (framing == BodyFraming::None && how.version == Version::Http11)),
        ..how
    };
    let keep_alive = how.keep_alive && framing != BodyFraming::CloseDelimited && !h2;
    let sink = match h2 {
        true => Sink::Http2 {
            bodiless: matches!(framing, BodyFraming::None | BodyFraming::Length(0)),
        },
        false => Sink::Http1(framing),
    };
    let mut head = std::mem::take(&mut client.write_buf);
    head.clear();
    write_head(&mut head, vs, response, framing, keep_alive, &how);
    let head_bytes = sink.head(client, head)?;
    client.answering = response.status();
    let timeout = vs.config.timeouts.write;
    let status = response.status();
    // Past the head, a failure cuts the answer short: it says how far it got.
    let cache = how.status.map(CacheStatus::as_str);
    let cut =
        |failure: Failure, sent: u64| failure.after(status, head_bytes + sent).in_cache(cache);
    // An event stream's events each go on as they come.
    let eager = response::is_event_stream(response.header("content-type"));
    let mut pieces = Pieces::new(transform, eager);
    // On HTTP/1.1 the head waits in `write_buf` for the first piece of body: an encoder
    // that holds its input back (brotli, zstd) may have given none when the node fails.
    let mut head_waiting = matches!(sink, Sink::Http1(_));
    // A fill stored as it passes is read at the node's pace, not the client's; otherwise
    // each piece goes out before the next is read.
    let body = match pieces.transform.stores() {
        true => read_ahead(client, &mut upstream, &mut pieces, sink, timeout).await,
        false => relay_in_step(client, &mut upstream, &mut pieces, sink, timeout).await,
    };
    let mut body_bytes = body.sent;
    head_waiting &= !body.body_out;
    match (body.client, body.node) {
        (Ok(()), Ok(())) => {}
        (Err(failure), node) => {
            // The client failed; the rest of the body was read into the store if the
            // fill still takes it.
            let stored = match node {
                Ok(()) if pieces.transform.stores() => pieces.finish().await.map(drop),
                Ok(()) => Ok(()),
                Err(ended) => Err(ended),
            };
            if let Err(ended) = stored {
                tracing::debug!(virtual_server = %vs.config.name, error = %ended.error, "cache fill ended early");
            }
            return Err(cut(failure, body_bytes));
        }
        (Ok(()), Err(failure)) if head_waiting => {
            // Nothing went out: the request fails as it would have before the head (a
            // 502 for a node that broke off), rather than a close with no answer.
            client.write_buf.clear();
            client.answering = 0;
            client.open_ended = false;
            return Err(Failure::from_error(failure.error).in_cache(cache));
        }
        (Ok(()), Err(failure)) => {
            return Err(cut(Failure::silent(failure.error), body_bytes));
        }
    }
    let tail = pieces
        .finish()
        .await
        .map_err(|failure| cut(failure, body_bytes))?;
    let size = tail.len() as u64;
    sink.piece(client, tail, timeout)
        .await
        .map_err(|failure| cut(failure, body_bytes))?;
    body_bytes += size;
    let trailers = match how.trailers {
        true => upstream.take_trailers(),
        false => Bytes::new(),
    };
    sink.end(client, &trailers, timeout)
        .await
        .map_err(|failure| cut(failure, body_bytes))?;
    Ok(Sent {
        grpc_status: None,
        status,
        bytes: head_bytes + body_bytes,
        keep_alive,
        cache: how.status.map(CacheStatus::as_str),
    })
}

/// The node's head as the client gets it: hop-by-hop and framing fields
/// dropped, the compression edits applied, the virtual server's response
/// headers, `Via`, the cache status, then framing and `Connection`.
fn write_head(
    out: &mut BytesMut,
    vs: &VirtualServerRuntime,
    response: &ResponseHead,
    framing: BodyFraming,
    keep_alive: bool,
    how: &Relay<'_>,
) {
    let set = &vs.config.response_headers;
    let replaced = |name: &[u8]| {
        set.iter()
            .any(|(set, _)| name.eq_ignore_ascii_case(set.as_bytes()))
            || how.client_edits.is_some_and(|edit| edit.drops(name))
    };
    let head = match how.edits {
        Some(edits) => StoredHead::from_fields(response, edits.apply(response), replaced),
        None => StoredHead::from_response(response, replaced),
    };
    let status = response.status();
    let mut number = itoa::Buffer::new();
    let reason = match response.reason() {
        [] => weir_http::reason_phrase(status).as_bytes(),
        reason => reason,
    };
    weir_http::write_status_line(status, reason, out);
    out.extend_from_slice(head.lines());
    // RFC 9110 §6.6.1, as `weir_http::write_response_head_edited` does it: a final
    // answer forwarded without `Date` (or with one its `Connection` named) gets weir's.
    let dated = head
        .headers()
        .any(|(name, _)| name.eq_ignore_ascii_case(b"date"));
    if status >= 200 && !dated && !replaced(b"date") {
        weir_http::write_date(out);
    }
    let length;
    let framing_field = match framing {
        BodyFraming::Length(n) => {
            length = number.format(n).to_owned();
            Some(("Content-Length", length.as_str()))
        }
        BodyFraming::Chunked => Some(("Transfer-Encoding", "chunked")),
        // HEAD and 304: the node's length describes the representation.
        BodyFraming::None if how.edits.is_none_or(|e| e.coding == Coding::Identity) => response
            .header("content-length")
            .and_then(|value| std::str::from_utf8(value).ok())
            .map(|value| ("Content-Length", value)),
        _ => None,
    };
    let set = set
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()));
    let push = |out: &mut BytesMut, (name, value): (&str, &str)| {
        for piece in [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
            out.extend_from_slice(piece);
        }
    };
    for field in set {
        push(out, field);
    }
    if let Some(edit) = how.client_edits {
        edit.write_added(out);
    }
    let fields = [("Via", how.via)]
        .into_iter()
        .chain(how.extra)
        .chain(framing_field);
    for field in fields {
        push(out, field);
    }
    // Where the trailers can follow (chunks, or HTTP/2), the field that announces them.
    if how.trailers {
        for value in response.header_values("trailer") {
            out.extend_from_slice(b"Trailer: ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
    weir_http::write_connection(how.version, keep_alive, false, out);
    out.extend_from_slice(b"\r\n");
}

/// This hop's `Via` entry (`crate::VIA` is "weir"), in the version the node
/// answered in: `2` for a node reached over HTTP/2 (its head, converted,
/// says HTTP/1.1), as `response.rs` writes it.
fn via_entry(exchange: &Exchange) -> &'static str {
    match (&exchange.lease, exchange.response.version()) {
        (NodeLink::Http2 { .. }, _) => "2 weir",
        (_, Version::Http10) => "1.0 weir",
        (_, Version::Http11) => "1.1 weir",
    }
}

/// The node's response as the cache sees it: its fields, then this hop's
/// `Via` entry, so a stored object carries the entry the relay writes and
/// its hits name the version the node answered in (kept when the node's
/// `Connection` names `Via`: that drops only the node's own entries).
struct Relayed<'a> {
    head: &'a ResponseHead,
    via: &'static str,
}

impl ResponseView for Relayed<'_> {
    fn status(&self) -> u16 {
        self.head.status()
    }

    fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.head.headers()
    }

    fn hop_fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let via: (&[u8], &[u8]) = (b"Via", self.via.as_bytes());
        std::iter::once(via)
    }
}
