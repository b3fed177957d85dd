//! The HTTP/1.1 pipeline for one client connection. It reads like the chart
//! in ARCHITECTURE.md ("The HTTP data path"):
//!
//! ```text
//! [handshake →] read_head → rules → route → filter_request → read body → select → checkout → forward → respond → log → release
//!   ↑                                                                                          │
//!   └─────────────────────────────────────── kept alive ──────────────────────────────────────┘
//! ```
//!
//! Any stage may answer early (4xx/5xx) and close. Each stage lives in its
//! own module; this file only calls them in order.

use std::pin::{Pin, pin};
use std::sync::Arc;

use bytes::Bytes;

use tokio::net::TcpStream;
use tokio::time::Instant;
use weir_cache::Lookup;
use weir_core::{Error, ErrorKind, ShutdownSignal, Side};
use weir_http::{Method, RequestHead, Unedited, Version};
use weir_observe::AccessRecord;
use weir_tls::{FirstSpeaker, ServerStream};
use weir_upstream::Pool;

use crate::answer::Failure;
use crate::answer::lossy;
use crate::client::{Client, IdleConnection, IdleTimer, OwnAnswer, Verified, Waited};
use crate::content::{self, Early, Looked};
use crate::drain::{Admission, Drain, DrainGuard, Parking, Roused, or_cut};
use crate::exchange;
use crate::policy;
use crate::request_body;
use crate::response::{self, Sent};
use crate::route::VirtualServerRuntime;
use crate::rules::{RequestTraffic, Routed};
use crate::upgrade;

mod h2;

pub(crate) use h2::prior_knowledge;

/// Serves one client connection until it closes.
///
/// Between requests the connection holds no buffer and its task waits in
/// [`IdleConnection::wait_for_request`]; the requests themselves run in a
/// boxed future with buffers lent from a per-thread pool, and so does the
/// handshake, so what an idle connection keeps is a few hundred bytes of task
/// (see the `idle_memory` tests). `handshake`: where an HTTPS connection's handshake
/// stands when its ClientHello was read first (passthrough rules).
pub(crate) fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    admission: Admission,
    shutdown: ShutdownSignal,
    handshake: Option<weir_tls::HandshakeStart>,
) -> impl Future<Output = ()> + Send + 'static {
    let (vs, signal, drain) = (
        Arc::clone(&admission.vs),
        shutdown.clone(),
        admission.drain.shared(),
    );
    let start = crate::boxed(|| start_connection((stream, handshake), peer, vs, signal, drain));
    serve_kept_alive(start, admission, shutdown, None)
}

/// The handshake stage (HTTPS virtual servers): `None` if it failed, or when
/// the client chose HTTP/2 by ALPN (the connection was then served here, by
/// the HTTP/2 driver, to its end).
async fn start_connection(
    (stream, start): (TcpStream, Option<weir_tls::HandshakeStart>),
    peer: std::net::SocketAddr,
    vs: Arc<VirtualServerRuntime>,
    shutdown: ShutdownSignal,
    drain: Arc<Drain>,
) -> Option<IdleConnection> {
    let (stream, verified) = handshake((stream, start), peer, &vs).await?;
    if stream.alpn_is_h2() {
        let client = (peer, verified);
        h2::serve_connection(stream, Bytes::new(), client, vs, shutdown, drain).await;
        return None;
    }
    let accepted_at = Instant::now();
    Some(IdleConnection::new(stream, peer, accepted_at, verified))
}

/// The TLS handshake of an HTTPS virtual server (plain: nothing to do), with
/// what it verified of the client; `None` if it failed.
pub(crate) async fn handshake(
    (stream, start): (TcpStream, Option<weir_tls::HandshakeStart>),
    peer: std::net::SocketAddr,
    vs: &VirtualServerRuntime,
) -> Option<(ServerStream, Verified)> {
    Some(match &vs.tls {
        None => (ServerStream::Plain(stream), (None, 0)),
        Some(tls) => {
            let (stream, info) = tls
                .handshake(stream, peer, FirstSpeaker::Client, start)
                .await?;
            let subject = info.client_subject.map(String::into_boxed_str);
            (stream, (subject, info.checks_epoch))
        }
    })
}

/// Whether the connection's client may no longer be served: its TLS handshake passed
/// client certificate checks that a reload or a certificate reload has changed since (other
/// CAs, revocation lists or mode), and the certificate it presented does not pass the
/// checks configured now. One that passes them goes on under them (one verification per
/// connection and change). Takes the newest model's virtual server first.
fn handshake_outdated(client: &mut Client, latest: &mut Arc<VirtualServerRuntime>) -> bool {
    if let Some(newer) = latest.newer() {
        *latest = newer;
    }
    let Some(tls) = latest.tls.as_ref() else {
        return false;
    };
    let chain = match &client.stream {
        crate::client::Downstream::Http1(stream) => stream.peer_certificates(),
        crate::client::Downstream::Http2 { .. } => None,
    };
    match tls.recheck(client.checks_epoch, chain) {
        Some(epoch) => {
            client.checks_epoch = epoch;
            false
        }
        None => true,
    }
}

/// Refuses a request on a connection whose handshake is outdated
/// ([`handshake_outdated`]): 421 and a close, which a client may retry on a new
/// connection whatever the method (RFC 9110, section 15.5.20).
async fn refuse_outdated(client: &mut Client, vs: &VirtualServerRuntime, head: &RequestHead) {
    let error = Error::new(ErrorKind::Misdirected, Side::Downstream)
        .context("the client certificate checks changed since this connection's handshake");
    let request = Request {
        head,
        keep_alive: false,
        started: Instant::now(),
    };
    answer_failure(
        client,
        vs,
        Some(request),
        None,
        None,
        Failure::from_error(error),
    )
    .await;
}

/// Waits for each request's first bytes with no buffer, then serves what came.
///
/// `roused`: the connection comes back from waiting in the lot (`park.rs`) with its
/// bytes seen, and whether it had waited past its `rest_idle` before them. Its first
/// wait then arms no timer, and one that had waited that long rests again as soon as
/// its request is answered, rather than `rest_idle` later (a connection roused from
/// resting is served by the lot's crew instead, [`serve_roused`], which does the same).
///
/// A block, not an `async fn`: an `async fn` moves each argument into a local
/// of its own at its start and keeps the argument's slot as well, and the
/// slots of `admission` and `shutdown` would add 24 bytes to every
/// connection's task, which tokio rounds up to a multiple of 128 bytes
/// (`crates/weir-proxy/tests/idle_memory.rs` counts what an idle connection holds).
///
/// Never inlined, so that where it is boxed (`spawn_rested`) the box is the place its
/// future is built in (`crate::boxed`).
#[allow(clippy::manual_async_fn)]
#[inline(never)]
fn serve_kept_alive(
    start: Pin<Box<impl Future<Output = Option<IdleConnection>>>>,
    admission: Admission,
    shutdown: ShutdownSignal,
    roused: Option<bool>,
) -> impl Future<Output = ()> {
    async move {
        let Some(mut idle) = start.await else {
            return;
        };
        // The virtual server of the latest model a request of this connection took.
        let mut vs = Arc::clone(&admission.vs);
        // One timer and one shutdown watch for all of the connection's idle waits.
        let watch = std::pin::pin!(shutdown.watch());
        let sleep = std::pin::pin!(tokio::time::sleep_until(idle.deadline(&vs)));
        let mut timer = IdleTimer::new(sleep, watch);
        // Whether the connection may be parked: only where the proxy has a lot.
        let parkable = admission.drain.lot().is_some();
        let mut roused = roused;
        let mut rest_early = false;
        let h2c_client = loop {
            let waited = match roused.take() {
                Some(long) => {
                    rest_early = long;
                    match idle.poll_roused(timer.watch()).await {
                        Some(waited) => waited,
                        // Woken for nothing after all: the usual wait.
                        None => idle.wait_for_request(&vs, parkable, &mut timer).await,
                    }
                }
                None if std::mem::take(&mut rest_early) && idle.rests_first(&vs, parkable) => {
                    Waited::Rest
                }
                None => idle.wait_for_request(&vs, parkable, &mut timer).await,
            };
            match waited {
                Waited::Bytes => {}
                Waited::Park | Waited::Rest => {
                    leave_task(waited, idle, admission, shutdown.clone());
                    return;
                }
                Waited::Close => {
                    // Idle timeout or drain: weir ends the connection (close_notify on TLS).
                    Box::pin(idle.close()).await;
                    return;
                }
            }
            // What woke the connection; the `Client` (with its buffers) never lives
            // across an await of this task, only inside the boxed futures.
            let next: Pin<Box<dyn Future<Output = Served> + Send + '_>> =
                match woken(idle, &mut vs, &shutdown) {
                    ToServe::Nothing(back) => {
                        idle = back;
                        continue;
                    }
                    ToServe::Closed(back) => Box::pin(async move {
                        back.close().await;
                        Served::Closed
                    }),
                    ToServe::Gone => return,
                    ToServe::Requests(client, first) => {
                        serve_next(client, first, &mut vs, &shutdown, &admission.drain)
                    }
                };
            match next.await {
                Served::Idle(back) => idle = back,
                Served::Closed => return,
                Served::H2c(client) => break client,
            }
        };
        // An h2c connection, served here once the future that read its preface is gone
        // (only HTTP/2's is held); made in a block so that no more than its box stays in
        // this task's state across the wait.
        let serve = { h2c(*h2c_client, &vs, &shutdown, &admission.drain) };
        serve.await;
    }
}

/// A parked connection served by a task again (`park.rs`), from where it waited.
///
/// The lot saw bytes (or a close) on its socket, but the runtime learns of them only
/// when its reactor next turns, and until then the connection's wait would see nothing
/// and, past `park_idle`, park it again at once. So it first waits for the runtime to
/// see its socket readable (or its timeout, or the drain its lot resumed it for).
pub(crate) fn resume(
    idle: IdleConnection,
    admission: Admission,
    shutdown: ShutdownSignal,
) -> impl Future<Output = ()> + Send + 'static {
    let deadline = idle.deadline(&admission.vs);
    let ended = shutdown.clone();
    let start = Box::pin(async move {
        tokio::select! {
            () = idle.readable() => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = ended.triggered() => {}
        }
        Some(idle)
    });
    serve_kept_alive(start, admission, shutdown, Some(true))
}

/// Parks an idle connection or lets it rest (`park.rs`), as its wait ended (`how`:
/// [`Waited::Park`] or [`Waited::Rest`]); the task that waited for it ends.
fn leave_task(how: Waited, idle: IdleConnection, admission: Admission, shutdown: ShutdownSignal) {
    match admission.drain.lot().cloned() {
        Some(lot) if matches!(how, Waited::Rest) => lot.rest(idle, admission, shutdown),
        Some(lot) => lot.park(idle, admission, shutdown),
        // Never asked for without a lot; served on rather than lost.
        None => spawn_resumed(idle, admission, shutdown),
    }
}

/// Serves an idle connection in a task of its own again (see [`resume`]).
pub(crate) fn spawn_resumed(idle: IdleConnection, admission: Admission, shutdown: ShutdownSignal) {
    tokio::spawn(resume(idle, admission, shutdown));
}

/// Serves a resting connection again, from where it waited: the runtime saw its socket
/// readable (or a drain ends it, which its wait sees). A waiting member of the lot's crew
/// takes it, or a new member starts with it (`crew.rs`).
///
/// The member's future is boxed where it is made (`crate::boxed`), so tokio moves a
/// pointer, and the member serves one wake after another in it ([`serve_roused`]).
pub(crate) fn spawn_rested(idle: IdleConnection, admission: Admission, shutdown: ShutdownSignal) {
    let long = idle.waited_past(admission.vs.config.timeouts.rest_idle);
    let Some(lot) = admission.drain.lot().cloned() else {
        // Never rested without a lot; served on rather than lost.
        return spawn_kept_alive(idle, admission, shutdown, Some(long));
    };
    let job = Roused {
        idle,
        admission,
        shutdown,
        long,
    };
    if let Err(job) = lot.crew().hand(job) {
        tokio::spawn(crate::boxed(|| crew_member(lot, job)));
    }
}

/// Serves an idle connection in a task of its own (`roused`: as in [`serve_kept_alive`]).
fn spawn_kept_alive(
    idle: IdleConnection,
    admission: Admission,
    shutdown: ShutdownSignal,
    roused: Option<bool>,
) {
    let start = Box::pin(std::future::ready(Some(idle)));
    tokio::spawn(crate::boxed(|| {
        serve_kept_alive(start, admission, shutdown, roused)
    }));
}

/// A member of the lot's crew: serves its first job, then each one the crew hands it,
/// until the crew lets it go (`crew.rs`). Never inlined, so that `spawn_rested` builds
/// it in its box.
#[inline(never)]
async fn crew_member(lot: Arc<dyn Parking>, first: Roused) {
    let mut job = first;
    loop {
        // Pinned where it is made: awaited by value, the future (several KiB) was built
        // on the stack and copied in for every job (`bench/insns`, sparse).
        pin!(serve_roused(job)).await;
        match lot.crew().next().await {
            Some(next) => job = next,
            None => return,
        }
    }
}

/// One wake of a resting connection, served by a crew member as [`serve_kept_alive`]
/// would serve it in a task of its own, up to where the connection would wait again:
/// there it rests again at once if it had waited past `rest_idle` before this wake
/// (most of those roused), and otherwise goes on waiting in a task of its own.
///
/// The request's future is part of the member's (not boxed for each wake as
/// [`serve_next`] boxes it for a connection's own task): a member keeps it for all its
/// jobs, while a connection's task holds it only while a request is served.
#[inline(never)]
async fn serve_roused(job: Roused) {
    let Roused {
        idle,
        admission,
        shutdown,
        long,
    } = job;
    // Pinned where it is made (see `crew_member`), and gone before what it borrows moves.
    let after = { pin!(serve_wake(idle, long, &admission, &shutdown)).await };
    match after {
        AfterWake::Done => {}
        AfterWake::Rest(idle) => leave_task(Waited::Rest, idle, admission, shutdown),
        AfterWake::Wait(idle, roused) => spawn_kept_alive(idle, admission, shutdown, roused),
        AfterWake::H2c(client, vs) => {
            tokio::spawn(async move {
                h2c(*client, &vs, &shutdown, &admission.drain).await;
                drop(admission);
            });
        }
    }
}

/// What a crew member leaves to do once a wake is served ([`serve_wake`]).
enum AfterWake {
    /// The connection is closed.
    Done,
    /// It rests again.
    Rest(IdleConnection),
    /// It waits in a task of its own (starting as [`serve_kept_alive`]'s `roused`
    /// says).
    Wait(IdleConnection, Option<bool>),
    /// Its first bytes opened h2c: served in a task of its own, with the latest
    /// virtual server.
    H2c(Box<Client>, Arc<VirtualServerRuntime>),
}

/// See [`serve_roused`]: the wake itself, with the connection's shutdown watch (it
/// wakes the member if a drain begins while a request is in flight, see
/// [`IdleTimer`]).
async fn serve_wake(
    idle: IdleConnection,
    long: bool,
    admission: &Admission,
    shutdown: &ShutdownSignal,
) -> AfterWake {
    let mut vs = Arc::clone(&admission.vs);
    let parkable = admission.drain.lot().is_some();
    let mut watch = pin!(shutdown.watch());
    // Where it would wait again: rest at once if it had waited long, else in a task.
    let again = |idle: IdleConnection, vs: &VirtualServerRuntime| match long
        && idle.rests_first(vs, parkable)
    {
        true => AfterWake::Rest(idle),
        false => AfterWake::Wait(idle, None),
    };
    match idle.poll_roused(watch.as_mut()).await {
        Some(Waited::Bytes) => {}
        Some(_) => {
            Box::pin(idle.close()).await;
            return AfterWake::Done;
        }
        // Not readable after all: the usual wait, in a task of its own.
        None => return AfterWake::Wait(idle, Some(long)),
    }
    let (client, first) = match woken(idle, &mut vs, shutdown) {
        ToServe::Nothing(back) => return again(back, &vs),
        ToServe::Closed(back) => {
            Box::pin(back.close()).await;
            return AfterWake::Done;
        }
        ToServe::Gone => return AfterWake::Done,
        ToServe::Requests(client, first) => (client, first),
    };
    let served = if tells_first_bytes(&client, first.as_deref(), &vs) {
        crate::boxed(|| serve_first_bytes(client, &mut vs, shutdown, &admission.drain)).await
    } else {
        pin!(serve_requests(
            client,
            first,
            &mut vs,
            shutdown,
            &admission.drain
        ))
        .await
    };
    match served {
        Served::Idle(back) => again(back, &vs),
        Served::Closed => AfterWake::Done,
        Served::H2c(client) => AfterWake::H2c(client, vs),
    }
}

/// The future that serves an h2c connection, boxed where it is made: built in the
/// connection's task, its state would take room in every connection's task, HTTP/1.1
/// ones too (tokio rounds a task up to a multiple of 128 bytes).
fn h2c(
    client: Client,
    vs: &Arc<VirtualServerRuntime>,
    shutdown: &ShutdownSignal,
    drain: &DrainGuard,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let (vs, shutdown, drain) = (Arc::clone(vs), shutdown.clone(), drain.shared());
    crate::boxed(|| h2::serve_cleartext(client, vs, shutdown, drain))
}

/// How a connection's requests (or its first bytes) were served.
enum Served {
    /// The connection is idle again, its buffers back in the pool.
    Idle(IdleConnection),
    /// The connection closed.
    Closed,
    /// Its first bytes are an HTTP/2 preface: h2c with prior knowledge, to be served by
    /// the connection's task once the future that told it has gone. Boxed: held in the
    /// connection's task, a `Client` would make every connection's task larger.
    H2c(Box<Client>),
}

/// The future that serves what woke the connection: its requests, or on a connection's
/// first bytes where h2c with prior knowledge is on, whichever protocol they open.
fn serve_next<'a>(
    client: Client,
    first: Option<Box<Started>>,
    latest: &'a mut Arc<VirtualServerRuntime>,
    shutdown: &'a ShutdownSignal,
    drain: &'a DrainGuard,
) -> Pin<Box<dyn Future<Output = Served> + Send + 'a>> {
    if tells_first_bytes(&client, first.as_deref(), latest) {
        crate::boxed(|| serve_first_bytes(client, latest, shutdown, drain))
    } else {
        // `serve_requests`' own future in the box, with no block around it: a block
        // would hold that future (about 5 KB) and copy it in once more.
        crate::boxed(|| serve_requests(client, first, latest, shutdown, drain))
    }
}

/// h2c with prior knowledge told apart from HTTP/1.1 by a connection's first bytes, in a
/// future of its own that an HTTP/2 connection leaves ([`Served::H2c`]): it is then
/// served without the HTTP/1.1 future around it, which it held, unused, for its life
/// (5.8 KB; BENCHMARKING.md, "Where an idle HTTP/2 connection's memory goes").
async fn serve_first_bytes(
    mut client: Client,
    latest: &mut Arc<VirtualServerRuntime>,
    shutdown: &ShutdownSignal,
    drain: &DrainGuard,
) -> Served {
    match h2::prior_knowledge(&mut client, latest).await {
        Ok(false) => crate::boxed(|| serve_requests(client, None, latest, shutdown, drain)).await,
        Ok(true) => Served::H2c(Box::new(client)),
        Err(failure) => {
            answer_failure(&mut client, latest, None, None, None, failure).await;
            client.release();
            Served::Closed
        }
    }
}

/// Whether what the connection sent first is to be told apart as HTTP/1.1 or h2c with
/// prior knowledge ([`serve_first_bytes`]): its first bytes, no request begun from them,
/// on a virtual server with h2c on.
fn tells_first_bytes(client: &Client, first: Option<&Started>, vs: &VirtualServerRuntime) -> bool {
    first.is_none() && client.requests == 0 && vs.config.http2.cleartext
}

/// What a woken idle connection leaves to serve ([`woken`]).
enum ToServe {
    /// Nothing came after all (or every request that came is answered): back to waiting.
    Nothing(IdleConnection),
    /// The client closed while idle: so do we.
    Closed(IdleConnection),
    /// The connection is gone (a failed read, or closed by [`answer_at_once`]).
    Gone,
    /// Requests to serve, beginning with this one if [`answer_at_once`] began it.
    Requests(Client, Option<Box<Started>>),
}

/// Lends a woken idle connection its buffers, reads what woke it without waiting, and
/// answers at once what the cache can answer whole ([`answer_at_once`], only on a virtual
/// server with a cache): what is left to serve, for a connection's own task
/// ([`serve_kept_alive`]) and for a crew member ([`serve_wake`]) alike.
fn woken(
    idle: IdleConnection,
    vs: &mut Arc<VirtualServerRuntime>,
    shutdown: &ShutdownSignal,
) -> ToServe {
    let mut client = idle.into_client();
    // An HTTP/1.1 connection: `into_idle` gives it back (it is `None` only for HTTP/2 streams).
    match client.read_now() {
        // Readiness without bytes: the buffers go back to the pool.
        None => return client.into_idle().map_or(ToServe::Gone, ToServe::Nothing),
        Some(Ok(0)) => return client.into_idle().map_or(ToServe::Gone, ToServe::Closed),
        Some(Err(_)) => {
            client.release();
            return ToServe::Gone;
        }
        Some(Ok(_)) => {}
    }
    if !caches(vs) {
        return ToServe::Requests(client, None);
    }
    match answer_at_once(&mut client, vs, shutdown) {
        AtOnce::Idle => client.into_idle().map_or(ToServe::Gone, ToServe::Nothing),
        AtOnce::Rest(first) => ToServe::Requests(client, first),
    }
}

/// A connection whose requests are all answered, idle (its buffers back in the pool).
fn idled(client: Client) -> Served {
    client.into_idle().map_or(Served::Closed, Served::Idle)
}

/// What [`answer_at_once`] leaves to do.
enum AtOnce {
    /// Every request that was in the read buffer is answered: the connection idles.
    Idle,
    /// The rest goes to [`serve_requests`], starting with this request if one was
    /// begun (else with the bytes in the read buffer). Boxed: the begun request is
    /// rare (a miss on a caching virtual server), and inline it would make every
    /// `serve_requests` future, and each copy of it, larger by its size.
    Rest(Option<Box<Started>>),
}

/// Answers, with no future of their own, the requests at the head of the read buffer
/// that the cache answers whole at once (small fresh hits on a kept-alive
/// connection, [`answer_now`]): those then cost no `serve_requests` future, built and
/// copied into its box for each burst of requests. Stops at the first request that
/// needs more (a miss, a refusal, an answer the socket did not take at once, a close),
/// which [`serve_requests`] goes on with as it was begun, or when no whole head is
/// left (a partial or malformed one is `read_head`'s to finish or refuse).
fn answer_at_once(
    client: &mut Client,
    latest: &mut Arc<VirtualServerRuntime>,
    shutdown: &ShutdownSignal,
) -> AtOnce {
    loop {
        let vs: &VirtualServerRuntime = latest;
        // h2c with prior knowledge is told apart from HTTP/1.1 before any parse.
        if !caches(vs) || (client.requests == 0 && vs.config.http2.cleartext) {
            return AtOnce::Rest(None);
        }
        // Refused by serve_requests, which reads the head again.
        if vs.tls.is_some() && handshake_outdated(client, latest) {
            return AtOnce::Rest(None);
        }
        let vs: &VirtualServerRuntime = latest;
        let Some(head) = client.head_now(vs) else {
            return AtOnce::Rest(None);
        };
        let started = start(client, latest, (head, None), shutdown);
        let vs: &VirtualServerRuntime = latest;
        let sent = match &started.early {
            Early::Answered(sent, true) if sent.keep_alive => sent,
            // Not answered, not all of it written yet, or the connection ends with
            // it: serve_requests finishes it (and closes the connection).
            _ => return AtOnce::Rest(Some(Box::new(started))),
        };
        finish_now(client, vs, started.request(), sent, &started.traffic);
        if client.read_buf.is_empty() {
            return AtOnce::Idle;
        }
    }
}

/// A request read from the buffer whose stages up to the cache lookup ran without
/// waiting ([`start`]): already answered, or to be served with what was found.
struct Started {
    head: RequestHead,
    keep_alive: bool,
    started: Instant,
    traffic: RequestTraffic,
    routed: Routed,
    early: Early,
}

impl Started {
    fn request(&self) -> Request<'_> {
        Request {
            head: &self.head,
            keep_alive: self.keep_alive,
            started: self.started,
        }
    }
}

/// The stages of a request that never wait, up to the cache lookup: the current
/// model's virtual server, the rules (request id, client address, limits), route,
/// and an answer from the cache if one can be sent at once ([`answer_now`]).
/// Inlined: its result is several hundred bytes, better built where the caller
/// keeps it than copied there.
#[inline(always)]
fn start(
    client: &mut Client,
    latest: &mut Arc<VirtualServerRuntime>,
    (head, began): (RequestHead, Option<Instant>),
    shutdown: &ShutdownSignal,
) -> Started {
    // The request takes the current model's virtual server and keeps it to its end.
    if let Some(newer) = latest.newer() {
        *latest = newer;
    }
    let vs: &VirtualServerRuntime = latest;
    let keep_alive = wants_keep_alive(client, vs, &head, shutdown);
    // The request's duration counts from its first byte (`docs/logging.md`).
    let started = began.unwrap_or_else(Instant::now);
    // rules (request id, client address, limits), then route
    let mut traffic = RequestTraffic::begin(vs, client, &head);
    let routed = traffic.route(vs, &head);
    let early = match &routed {
        Routed::Pool(pool) => {
            let request = Request {
                head: &head,
                keep_alive,
                started,
            };
            answer_now(client, vs, pool, request, &traffic, shutdown)
        }
        _ => Early::Later(None),
    };
    Started {
        head,
        keep_alive,
        started,
        traffic,
        routed,
        early,
    }
}

/// Serves requests for as long as the client has bytes waiting: read_head →
/// route → the rest of the stages, starting with `first` when
/// [`answer_at_once`] began one. Returns the connection once it is idle again
/// (its buffers back in the pool), or [`Served::Closed`] once it closed.
async fn serve_requests(
    mut client: Client,
    mut first: Option<Box<Started>>,
    latest: &mut Arc<VirtualServerRuntime>,
    shutdown: &ShutdownSignal,
    drain: &DrainGuard,
) -> Served {
    // A connection's first bytes on an h2c virtual server came through
    // `serve_first_bytes`, which told HTTP/1.1 from HTTP/2.
    let next = loop {
        // Used in place below, field by field: taking it apart would copy its
        // several hundred bytes once more for every request.
        let mut started = match first.take() {
            Some(started) => *started,
            None => {
                let vs: &VirtualServerRuntime = latest;
                // read_head
                let (head, began) = match client.read_head(vs, shutdown).await {
                    Ok(Some(read)) => read,
                    Ok(None) => break Next::Close,
                    Err(failure) => {
                        answer_failure(&mut client, vs, None, None, None, failure).await;
                        client.release();
                        return Served::Closed;
                    }
                };
                if handshake_outdated(&mut client, latest) {
                    refuse_outdated(&mut client, latest, &head).await;
                    client.release();
                    return Served::Closed;
                }
                start(&mut client, latest, (head, began), shutdown)
            }
        };
        let vs: &VirtualServerRuntime = latest;
        let request = Request {
            head: &started.head,
            keep_alive: started.keep_alive,
            started: started.started,
        };
        let (routed, traffic) = (&started.routed, &mut started.traffic);
        client.tunnelled = None;
        let before = client.bytes_out();
        client.answering = 0;
        client.node = None;
        // Each stage's future is pinned where it is built and raced against the drain's
        // cut by reference (`or_cut`): a wrapper future holding it would copy its several
        // KiB once more for every request.
        let cut = || cut_after_trigger(shutdown, drain);
        let served = match (routed, started.early) {
            (_, Early::Answered(sent, written)) => {
                let serving = pin!(answered_now(
                    &mut client,
                    vs,
                    request,
                    &sent,
                    written,
                    traffic
                ));
                or_cut(serving, cut()).await
            }
            (Routed::Pool(pool), Early::Later(prior)) => {
                let stages = (&mut *traffic, prior);
                let serving = pin!(serve_request(
                    &mut client,
                    vs,
                    pool,
                    request,
                    stages,
                    shutdown
                ));
                or_cut(serving, cut()).await
            }
            (_, Early::Later(_)) => {
                let serving = pin!(answer_unrouted(&mut client, vs, routed, request, traffic));
                or_cut(serving, cut()).await
            }
        };
        // The drain timeout passed with the request in flight: it ends here, answered (503)
        // if nothing of its answer went out, and logged either way.
        let served = served.unwrap_or_else(|| Err(cut_at_drain(&mut client, before)));
        match served {
            // Pipelined bytes are served at once; otherwise the connection idles.
            Ok(Next::KeepAlive) if client.read_buf.is_empty() => return idled(client),
            Ok(Next::KeepAlive) => continue,
            Ok(next) => break ending(next, &started.head),
            Err(failure) => {
                let pool = routed.pool();
                let traffic = Some(&*traffic);
                // A drain that began meanwhile closes the connection after this answer.
                let request = Request {
                    keep_alive: request.keep_alive && !shutdown.is_triggered(),
                    ..request
                };
                match answer_failure(&mut client, vs, Some(request), pool, traffic, failure).await {
                    true if client.read_buf.is_empty() => return idled(client),
                    true => continue,
                    false => {
                        client.release();
                        return Served::Closed;
                    }
                }
            }
        }
    };
    // weir ends the connection: with a close_notify on TLS.
    match next {
        Next::Linger => client.linger_close().await,
        _ => client.close().await,
    }
    client.release();
    Served::Closed
}

/// A stream whose request was refused before it formed a head: the refusal, then the
/// stream ends.
async fn refuse_stream(mut client: Client, vs: &VirtualServerRuntime, failure: Failure) {
    answer_failure(&mut client, vs, None, None, None, failure).await;
    client.release();
}

/// One request of an HTTP/2 stream: route → the same stages as an HTTP/1.1
/// request (`serve_request`) → the stream ends.
///
/// An `async` block, not an `async fn`: such a function's future keeps each argument's
/// slot beside the local it is moved into, and this future is copied whole twice per
/// stream (into its caller's, and that one into the stream task's box).
#[allow(clippy::manual_async_fn)]
fn serve_stream<'a>(
    mut client: Client,
    vs: &'a VirtualServerRuntime,
    head: RequestHead,
    (shutdown, drain): (&'a ShutdownSignal, &'a Drain),
    started: Instant,
) -> impl Future<Output = ()> + 'a {
    async move {
        let request = Request {
            head: &head,
            // The stream ends with its response; the connection is the driver's.
            keep_alive: false,
            started,
        };
        // rules (request id, client address, limits), then route
        let mut traffic = RequestTraffic::begin(vs, &client, &head);
        let routed = traffic.route(vs, &head);
        // As for an HTTP/1.1 request (`serve_requests`).
        let served = match &routed {
            Routed::Pool(pool) => {
                let stages = (&mut traffic, None);
                let serving = pin!(serve_request(
                    &mut client,
                    vs,
                    pool,
                    request,
                    stages,
                    shutdown
                ));
                or_cut(serving, drain.cut_off()).await
            }
            _ => {
                let serving = pin!(answer_unrouted(
                    &mut client,
                    vs,
                    &routed,
                    request,
                    &mut traffic
                ));
                or_cut(serving, drain.cut_off()).await
            }
        };
        let served = served.unwrap_or_else(|| Err(cut_at_drain(&mut client, 0)));
        match served {
            Ok(_) => {
                if let Some(stream) = client.h2() {
                    stream.finish(true);
                }
            }
            Err(failure) => {
                let pool = routed.pool();
                let traffic = Some(&traffic);
                answer_failure(&mut client, vs, Some(request), pool, traffic, failure).await;
                if let Some(stream) = client.h2() {
                    // A response cut short: the client learns from a reset.
                    stream.finish(false);
                }
            }
        }
        client.release();
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

/// Answers a request the rules stage did not send to a pool: a rule's
/// answer, or a limit's refusal. (A routed request goes to `serve_request`
/// straight from its caller: a wrapper future around it would be one more
/// copy of its several KiB for every request.)
async fn answer_unrouted(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    routed: &Routed,
    request: Request<'_>,
    traffic: &mut RequestTraffic,
) -> Result<Next, Failure> {
    let refusal = match routed {
        Routed::Refused(refusal) => Some(*refusal),
        Routed::Answer | Routed::Pool(_) => None,
    };
    let Request {
        head,
        keep_alive,
        started,
    } = request;
    let sent = traffic
        .answer(client, vs, head, (refusal, None), keep_alive, started)
        .await?;
    Ok(answered(&sent, head))
}

/// What becomes of the connection after weir answered a request itself.
fn answered(sent: &Sent, head: &RequestHead) -> Next {
    match sent.keep_alive {
        true => Next::KeepAlive,
        false if matches!(head.framing(), weir_http::BodyFraming::None) => Next::Close,
        // The request's body was not read: read what still comes before closing.
        false => Next::Linger,
    }
}

/// weir's own answer to a request it is the final recipient of
/// ([`policy::final_recipient`]), logged as its other answers are.
async fn answer_as_final_recipient(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    request: Request<'_>,
    traffic: &RequestTraffic,
    own: &weir_rules::Answer,
) -> Result<Next, Failure> {
    let (head, keep_alive) = (request.head, request.keep_alive);
    let own = (None, Some(own));
    let sent = traffic
        .answer(client, vs, head, own, keep_alive, request.started)
        .await?;
    Ok(answered(&sent, head))
}

/// The request being served, as read.
#[derive(Clone, Copy)]
struct Request<'a> {
    head: &'a RequestHead,
    /// The connection may be kept after the response, as far as the request goes.
    keep_alive: bool,
    started: Instant,
}

/// One request from filter to log. Returns what becomes of the connection.
/// `prior`: the cache's answer for the request, when [`answer_now`] looked
/// it up already.
async fn serve_request(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Arc<Pool>,
    request: Request<'_>,
    (traffic, prior): (&mut RequestTraffic, Option<Box<Lookup>>),
    shutdown: &ShutdownSignal,
) -> Result<Next, Failure> {
    let Request {
        head, keep_alive, ..
    } = request;
    // filter_request: CONNECT, TRACE, upgrades and header names, as the virtual server allows
    let mut forwarding = policy::filter_for(client, vs, pool, head)?;
    // An OPTIONS or TRACE with no hop left is weir's to answer (RFC 9110 §7.6.2).
    if let Some(own) = policy::final_recipient(vs, head) {
        return answer_as_final_recipient(client, vs, request, traffic, &own).await;
    }
    // read body (up to request_buffer) before any upstream connection is taken
    let mut body = request_body::read(client, vs, head, traffic.request_edits()).await?;
    // cache_lookup: a hit is answered here; a miss goes on (rewritten for the node if need be)
    let answer_keep_alive = keep_alive && body.is_complete() && !shutdown.is_triggered();
    let (route, edits) = (vs.matched_route(head), traffic.response_edits(vs));
    forwarding.hide_via = weir_http::HeaderEdit::drops(&edits, b"via");
    // An upgrade (a WebSocket, over HTTP/1.1 or HTTP/2) or a CONNECT is never answered from
    // the cache nor coalesced: its answer starts a tunnel that would hold the others asking
    // for its URL as long as it lasts, and the switch is the node's to make.
    let cache_allowed = !traffic.reshapes_forwarding() && !forwarding.may_tunnel();
    let bodiless = body.is_complete() && body.received == 0;
    let answering = (bodiless, answer_keep_alive, cache_allowed);
    // The stages that run for few requests (a refresh, stale-if-error, a tunnel, a cache fill)
    // are boxed below: their futures are several KiB, and an unboxed one would make this
    // future (copied whole each time a request starts) as large as the largest of them.
    let looked = content::lookup(client, vs, route, head, answering, &edits, prior);
    let flow = match looked.await.map_err(|f| f.with_body(body.received))? {
        Looked::Answered { sent, refresh } => {
            record(client, vs, request, body.received, &sent, None, traffic);
            if let Some(flow) = refresh {
                // A stream ends with its answer: the client does not wait for the refresh.
                if let Some(stream) = client.h2() {
                    stream.finish(true);
                }
                let forwarding = (forwarding, traffic.upstream(vs));
                let refreshing =
                    content::refresh(client, vs, pool, head, forwarding, &mut body, flow);
                Box::pin(refreshing).await;
            }
            return Ok(match sent.keep_alive {
                true => Next::KeepAlive,
                false if !body.is_complete() => Next::Linger,
                false => Next::Close,
            });
        }
        Looked::Forward(flow) => flow,
    };
    // select → checkout → forward, with bounded retries
    let forward_head = flow.as_ref().and_then(|flow| flow.forward_head.as_ref());
    let exchanged = exchange::exchange(
        client,
        vs,
        pool,
        forward_head.unwrap_or(head),
        forwarding,
        &mut body,
        traffic.upstream(vs),
    );
    // The exchange and `flow` stay where they are: a tuple of the two would move the
    // exchange (several hundred bytes) twice more for every request.
    let exchange = match exchanged.await {
        Ok(exchange) => exchange,
        Err(failure) => {
            let failure = failure.with_body(body.received);
            let Some(flow) = flow else {
                return Err(failure);
            };
            // A stale object may stand in for a failed node (stale-if-error).
            let answering = (answer_keep_alive, &edits);
            let failed = content::node_failed(client, vs, head, flow, failure, answering);
            let sent = Box::pin(failed).await?;
            record(client, vs, request, body.received, &sent, None, traffic);
            return Ok(answered(&sent, head));
        }
    };
    let body_cut = exchange.body_cut;
    let node = exchange.node;
    // filter_response: what persistence learns from the node's answer
    traffic.learn(pool, head, &exchange.response, node);
    let mut answered_by = exchange::note_response(pool, &exchange);
    // respond (the upstream connection is released inside, as soon as the node is done);
    // a drain that began meanwhile closes the connection after this response.
    let keep_alive = keep_alive && !shutdown.is_triggered() && !forwarding.connect;
    let tunnelled = exchange.switched(forwarding.connect);
    upgrade::h2_websocket_answered(client, tunnelled, exchange.response.status())
        .map_err(|f| f.with_body(body.received))?;
    let edits = traffic.response_edits(vs);
    let sent = match flow {
        _ if tunnelled => Box::pin(upgrade::tunnel(client, vs, exchange, head, &edits)).await,
        // filter_response → respond: stored, compressed, or answered from the cache
        Some(flow) => {
            // A 304 the cache cannot use sends the request again: `answered_by` then
            // names the node of that second answer.
            let resend = (forwarding, traffic.upstream(vs), &mut body);
            let answered = (exchange, keep_alive, resend, &mut answered_by);
            crate::boxed(|| content::respond(client, vs, pool, head, (flow, &edits), answered))
                .await
        }
        None => {
            let timeout = pool.config.timeouts.response;
            let version = head.version();
            let decor = (&edits, None);
            response::respond(client, vs, exchange, version, keep_alive, timeout, decor).await
        }
    };
    // A failure from here on happened at the node: the access record names it.
    let sent = sent.map_err(|f| f.at_node_after(answered_by.node.address, body.received))?;
    // log
    pool.metrics.record_status(sent.status);
    let upstream = Some(Upstream {
        pool,
        node: answered_by.node.address,
        sent_at: answered_by.sent_at,
    });
    record(client, vs, request, body.received, &sent, upstream, traffic);
    Ok(match sent.keep_alive {
        true => Next::KeepAlive,
        false if body_cut => Next::Linger,
        // A CONNECT the node refused: whatever the client sent after it was meant for a tunnel.
        false if forwarding.connect && !tunnelled => Next::Linger,
        false => Next::Close,
    })
}

/// The stages up to `cache_lookup` for a request that may be answered from
/// the cache without waiting (see [`content::hit_now`]): no body to read, the
/// virtual server's filter passed, HTTP/1.1. [`Early::Later`] hands anything
/// else to [`serve_request`] with what was found, which then also answers a
/// refused request.
fn answer_now(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    pool: &Pool,
    request: Request<'_>,
    traffic: &RequestTraffic,
    shutdown: &ShutdownSignal,
) -> Early {
    let head = request.head;
    if !caches(vs)
        || !matches!(head.framing(), weir_http::BodyFraming::None)
        || traffic.reshapes_forwarding()
    {
        return Early::Later(None);
    }
    // A refused request goes on to serve_request, which answers it; one that may switch
    // protocols is not the cache's (see serve_request).
    match policy::filter_for(client, vs, pool, head) {
        Ok(forwarding) if !forwarding.may_tunnel() => {}
        _ => return Early::Later(None),
    }
    let keep_alive = request.keep_alive && !shutdown.is_triggered();
    let edits = traffic.response_edits(vs);
    content::hit_now(client, vs, vs.matched_route(head), head, keep_alive, &edits)
}

/// Finishes a request [`answer_now`] answered: the rest of the answer, if
/// the socket did not take all of it at once (`written`), then the log.
async fn answered_now(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    request: Request<'_>,
    sent: &Sent,
    written: bool,
    traffic: &RequestTraffic,
) -> Result<Next, Failure> {
    if !written {
        client.flush(vs.config.timeouts.write).await?;
    }
    Ok(finish_now(client, vs, request, sent, traffic))
}

/// The end of a request [`answer_now`] answered, once all of its answer left: the log.
fn finish_now(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    request: Request<'_>,
    sent: &Sent,
    traffic: &RequestTraffic,
) -> Next {
    record(client, vs, request, 0, sent, None, traffic);
    // No body was read: nothing is left of the request on the connection.
    match sent.keep_alive {
        true => Next::KeepAlive,
        false => Next::Close,
    }
}

/// Whether the virtual server has a cache that can answer a request at once.
fn caches(vs: &VirtualServerRuntime) -> bool {
    vs.content
        .as_ref()
        .is_some_and(|content| content.cache().is_some())
}

/// The node that answered a request.
struct Upstream<'a> {
    pool: &'a Pool,
    node: std::net::SocketAddr,
    /// When the request was handed to the node: the record's upstream duration runs from
    /// there to the end of the answer.
    sent_at: Instant,
}

/// The log line of a failed request: client-caused closes are expected traffic (debug),
/// refused requests are news (info), gateway failures are worth a warning; the last two a
/// few a second each (`left_out` says how many more since the line before; each is in the
/// access log). A failure at a node names the pool and the node.
fn log_failure(
    client: &Client,
    vs: &VirtualServerRuntime,
    (status, pool): (u16, Option<&Arc<Pool>>),
    failure: &Failure,
) {
    let (name, peer, error) = (&vs.config.name, client.peer, &failure.error);
    match error.kind() {
        ErrorKind::ClientClosed | ErrorKind::ClientTimeout => {
            tracing::debug!(virtual_server = %name, client = %peer, status, error = %error, "request ended early");
        }
        // Neither the client's fault nor a node's: the connection was retired by a
        // reload (its client certificate checks changed); the access log has each.
        ErrorKind::Misdirected => {
            tracing::debug!(virtual_server = %name, client = %peer, status, error = %error, "request on a retired connection");
        }
        ErrorKind::BadRequest
        | ErrorKind::HeadTooLarge
        | ErrorKind::BodyTooLarge
        | ErrorKind::MethodNotAllowed => {
            if let Some(left_out) = vs.shared.rejection_log.take() {
                tracing::info!(virtual_server = %name, client = %peer, status, error = %error, left_out, "rejected request");
            }
        }
        _ => {
            // Under load a node that is down fails every request.
            if let Some(left_out) = vs.shared.failure_log.take() {
                let pool = pool.map(|pool| pool.name.as_str());
                let node = failure.node().map(tracing::field::display);
                tracing::warn!(virtual_server = %name, client = %peer, status, pool, node, error = %error, left_out, "request failed");
            }
        }
    }
}

/// The log stage: metrics and the access record of an answered request
/// (`upstream` is `None` when weir answered it from the cache).
fn record(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    request: Request<'_>,
    body_received: u64,
    sent: &Sent,
    upstream: Option<Upstream<'_>>,
    traffic: &RequestTraffic,
) {
    let Request { head, started, .. } = request;
    let done = client.answered();
    let duration = done.saturating_duration_since(started);
    let received = head.raw().len() as u64 + body_received;
    vs.metrics
        .record_answer(sent.status, received, sent.bytes, duration);
    if let Some(log) = &vs.access_log {
        log.write(&AccessRecord {
            virtual_server: &vs.config.name,
            client: client.peer,
            client_address: traffic.forwarded_client(client.peer),
            method: lossy(head.method_bytes()),
            target: lossy(head.target()),
            version: client.version_label(head.version()),
            status: sent.status,
            bytes_sent: sent.bytes,
            pool: upstream.as_ref().map(|u| u.pool.name.as_str()),
            node: upstream.as_ref().map(|u| u.node),
            duration,
            upstream_duration: upstream
                .as_ref()
                .map(|u| done.saturating_duration_since(u.sent_at)),
            error: None,
            request_id: traffic.id(),
            rule: traffic.rule_name(vs),
            grpc_status: sent.grpc_status,
            cache: sent.cache,
            tls: client.tls_record(),
        });
    }
}

/// How a connection ends after the last answer, to `head`. When weir ends one its client
/// asked to keep (a request limit, a drain, an answer only a close can end), the client
/// may have sent its next request already, and closing with it unread would reset the
/// connection and drop what it has not read of the answer: close in stages, reading what
/// still comes (RFC 9112 §9.6). A client that asked for the close sends nothing more.
fn ending(next: Next, head: &RequestHead) -> Next {
    match next {
        Next::Close if head.keep_alive() => Next::Linger,
        next => next,
    }
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

/// The request line of a head refused whole, copied (the buffer it is in is the client's).
struct RefusedLine {
    method: String,
    target: String,
    version: Option<String>,
}

impl RefusedLine {
    fn of(line: weir_http::RequestLine<'_>) -> RefusedLine {
        RefusedLine {
            method: lossy(line.method).to_owned(),
            target: lossy(line.target).to_owned(),
            version: line.version.map(|v| lossy(v).to_owned()),
        }
    }
}

/// The method, target and version a failed request's access record names: its head's;
/// for a head refused whole, what its sound request line named (a 505's `HTTP/2.0`), else
/// `-` for each.
fn named<'a>(
    client: &Client,
    head: Option<&'a RequestHead>,
    line: Option<&'a RefusedLine>,
    version: Version,
) -> [&'a str; 3] {
    match (head, line) {
        (Some(head), _) => [
            lossy(head.method_bytes()),
            lossy(head.target()),
            client.version_label(version),
        ],
        // An HTTP/2 stream's request that formed no head: its version is the stream's.
        (None, _) if client.is_h2() => ["-", "-", client.version_label(version)],
        (None, Some(line)) => [
            &line.method,
            &line.target,
            line.version.as_deref().unwrap_or("-"),
        ],
        (None, None) => ["-", "-", "-"],
    }
}

/// Completes at the drain's cut ([`DrainGuard::cut_off`]), and joins no waiter list
/// before the shutdown begins: a request costs one atomic load per poll for it. The
/// connection's task is woken when the shutdown begins all the same, by the shutdown
/// watch its idle waits joined before its first request ([`IdleTimer`]), and then waits
/// for the cut.
async fn cut_after_trigger(shutdown: &ShutdownSignal, drain: &DrainGuard) {
    std::future::poll_fn(|_| match shutdown.is_triggered() {
        true => std::task::Poll::Ready(()),
        false => std::task::Poll::Pending,
    })
    .await;
    drain.cut_off().await;
}

/// The failure of a request cut at the drain timeout: answered 503 when nothing of its
/// answer went out (`before`: [`Client::bytes_out`] when it began), else ended with the
/// status and about the bytes its answer had (those handed to writes; a write under way
/// may have sent less).
fn cut_at_drain(client: &mut Client, before: u64) -> Failure {
    let error = Error::new(ErrorKind::ShuttingDown, Side::Internal)
        .context("request cut at the drain timeout");
    let sent = client.bytes_out() - before;
    let started = match client.h2() {
        Some(stream) => stream.responded(),
        None => sent > 0,
    };
    match (started, client.answering) {
        (false, _) => Failure::from_error(error),
        // Interim answers only: no final one is written after them, to be safe.
        (true, 0) => Failure::silent(error),
        (true, status) => Failure::silent(error).after(status, sent),
    }
}

/// `failure` naming the node the client kept for its request when it names none: a request
/// cut from outside (the drain's timeout) lost the exchange that knew its node.
fn with_kept_node(failure: Failure, client: &Client, pool: Option<&Arc<Pool>>) -> Failure {
    let kept = client.node.zip(pool).filter(|_| failure.node().is_none());
    match kept.and_then(|(index, pool)| pool.nodes.get(index as usize)) {
        Some(node) => failure.at_node(node.address),
        None => failure,
    }
}

/// The form of weir's answer to a failed request: (a gRPC call, a HEAD). A gRPC client
/// gets it in gRPC's form (a status it can read), and a HEAD no body, also when its head
/// was refused whole (an HTTP/1.1 one is still in `read_buf`; an HTTP/2 one says so in the
/// failure).
fn answer_form(client: &Client, head: Option<&RequestHead>, failure: &Failure) -> (bool, bool) {
    match head {
        Some(head) => (
            request_body::is_grpc(head.header("content-type")),
            head.method() == Method::Head,
        ),
        None => failure
            .detail
            .as_ref()
            .and_then(|detail| detail.refused)
            .unwrap_or((false, client.read_buf.starts_with(b"HEAD "))),
    }
}

/// Ends an HTTP/2 answer cut short, where the cut calls for more than the reset
/// (`INTERNAL_ERROR`) that ends the others. A node that reset its stream: the client's
/// is reset with the node's reason, so that a gRPC client reads what it would have from
/// the node (CANCEL as CANCELLED, INTERNAL_ERROR as INTERNAL; NO_ERROR and REFUSED_STREAM,
/// which say nothing of a cut answer, as INTERNAL_ERROR). A gRPC call (`grpc`) whose node
/// failed or went quiet, or that the drain ended: trailers with the status weir's own
/// answer would have carried, 14 UNAVAILABLE, since a reset reads as 13 INTERNAL to gRPC
/// clients, a fault of the server's. The gRPC status sent, if any. A cut that is the
/// client's own doing (its body past a limit, too slow) ends with the reset.
fn end_cut_stream(client: &mut Client, error: &Error, grpc: bool) -> Option<u32> {
    let stream = client.h2()?;
    if let Some(reason) = crate::http2::upstream::node_reset(error) {
        let passed = match reason {
            ::h2::Reason::NO_ERROR | ::h2::Reason::REFUSED_STREAM => ::h2::Reason::INTERNAL_ERROR,
            reason => reason,
        };
        stream.finish_reset(passed);
        return None;
    }
    if !grpc {
        return None;
    }
    let status = crate::answer::status_for(error.kind())?;
    let code = crate::answer::grpc_status_for(status);
    if code != 14 {
        return None;
    }
    let message = std::str::from_utf8(crate::answer::body_for(status)).unwrap_or_default();
    stream.finish_grpc(code, message.trim_end()).then_some(code)
}

/// Sends weir's own answer `(status, keep_alive, version)` to a failed request, with the
/// rules' response edits and the request id as on its other answers; returns its size (0
/// when it could not be sent).
async fn answer_own_error(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    traffic: Option<&RequestTraffic>,
    (status, keep_alive, version): (u16, bool, Version),
    answering: (bool, bool),
) -> u64 {
    let edits = traffic.map(|traffic| traffic.response_edits(vs));
    let timeout = vs.config.timeouts.write;
    let set = &vs.config.response_headers;
    let shape = (status, keep_alive);
    let sent = match &edits {
        Some(edits) => {
            let own = OwnAnswer { set, edits };
            client
                .answer_error(shape, version, timeout, &own, answering)
                .await
        }
        None => {
            let own = OwnAnswer {
                set,
                edits: &Unedited,
            };
            client
                .answer_error(shape, version, timeout, &own, answering)
                .await
        }
    };
    sent.unwrap_or(0)
}

/// Whether the connection may carry another request after weir's answer to `failure`:
/// a node's failure or the lack of a node (502, 503, 504, but not the drain's 503) to
/// an HTTP/1.1 request that may keep it (`keep_alive`), read whole (no body, or a
/// `Content-Length` body all received; a chunked one closes), and that asked for no
/// tunnel (what a client sends after a CONNECT or an upgrade was meant for it).
/// Anything else may leave bytes of the request in flight, and closes.
fn keeps_connection(client: &Client, request: Option<Request<'_>>, failure: &Failure) -> bool {
    let Some(Request {
        head,
        keep_alive: true,
        ..
    }) = request
    else {
        return false;
    };
    let read_whole = match head.framing() {
        weir_http::BodyFraming::None => true,
        weir_http::BodyFraming::Length(length) => failure.body_received() == length,
        _ => false,
    };
    matches!(failure.status, Some(502..=504))
        && failure.error.side() != Side::Downstream
        && failure.error.kind() != ErrorKind::ShuttingDown
        && failure.answered().is_none()
        && read_whole
        && head.method() != Method::Connect
        && head.header("upgrade").is_none()
        && !client.is_h2()
        && client.tunnelled.is_none()
}

/// Answers a failed request (when there is still someone to answer), counts it and logs it.
/// Returns whether the connection stays open for the next request ([`keeps_connection`]).
async fn answer_failure(
    client: &mut Client,
    vs: &VirtualServerRuntime,
    request: Option<Request<'_>>,
    pool: Option<&Arc<Pool>>,
    traffic: Option<&RequestTraffic>,
    failure: Failure,
) -> bool {
    let head = request.map(|r| r.head);
    let mut failure = with_kept_node(failure, client, pool);
    let keep_alive = keeps_connection(client, request, &failure);
    if failure.error.kind() == ErrorKind::ClientClosed && client.went_silent() {
        // The stream failed because weir closed its connection: the client stopped
        // answering, it did not leave.
        failure.error = Error::new(ErrorKind::ClientTimeout, Side::Downstream)
            .context("the client did not answer a PING within http2.ping_timeout");
    }
    // A head refused whole (417, 501, 505, a bad field) still names its request line in
    // the record when it is sound; it is still in `read_buf`.
    let line = match head {
        None => weir_http::request_line(&client.read_buf).map(RefusedLine::of),
        Some(_) => None,
    };
    // Without a request, the head failed: `read_head` left when it began in `since`.
    let started = request.map_or(client.since, |r| r.started);
    let version = head.map_or(Version::Http11, |h| h.version());
    let kind = failure.error.kind();
    // An answer that started and was cut short. One whose end is the connection's (an
    // HTTP/1.0 client, no length) ends with a reset; any other has a length or chunks,
    // whose lack tells the client the cut, and ends with a close that lingers (a reset
    // would throw away what is still queued of it and of earlier pipelined answers).
    let cut_short = failure.status.is_none() && failure.answered().is_some();
    let cut = cut_short && client.open_ended;
    let answering = answer_form(client, head, &failure);
    let grpc_cut = cut_short.then(|| end_cut_stream(client, &failure.error, answering.0));
    let mut bytes = 0;
    if let Some(status) = failure.status {
        let shape = (status, keep_alive, version);
        bytes = answer_own_error(client, vs, traffic, shape, answering).await;
        if matches!(
            kind,
            ErrorKind::BadRequest | ErrorKind::HeadTooLarge | ErrorKind::BodyTooLarge
        ) {
            vs.metrics.bad_requests.inc();
        }
    }
    // A request that got no answer of weir's (the client went away, or the answer was cut
    // short) is still a request: counted and logged with the status its answer had, or 499.
    let (status, logged_bytes) = match (failure.status, request) {
        (Some(status), _) => (status, bytes),
        (None, Some(_)) => (
            failure.logged_status(),
            failure.answered().map_or(0, |answered| answered.bytes),
        ),
        (None, None) => (0, 0),
    };
    log_failure(client, vs, (status, pool), &failure);
    // The idle time of a connection kept after this answer counts from it, as after
    // any other (`record`).
    let duration = match keep_alive && bytes > 0 {
        true => client.answered().saturating_duration_since(started),
        false => started.elapsed(),
    };
    if status != 0 {
        // As for an answered request (`record`): the access record's bytes and duration
        // are the metrics' too. What was read of the request counts as received: its head
        // (or, refused, the bytes of it read), and its body as far as it went.
        let head_bytes = head.map_or(client.read_buf.len(), |h| h.raw().len());
        let received = head_bytes as u64 + failure.body_received();
        vs.metrics
            .record_answer(status, received, logged_bytes, duration);
        if let Some(pool) = pool {
            pool.metrics.record_status(status);
        }
    }
    if let Some(log) = vs.access_log.as_ref().filter(|_| status != 0) {
        let [method, target, version] = named(client, head, line.as_ref(), version);
        log.write(&AccessRecord {
            virtual_server: &vs.config.name,
            client: client.peer,
            client_address: traffic.and_then(|t| t.forwarded_client(client.peer)),
            method,
            target,
            version,
            status,
            bytes_sent: logged_bytes,
            pool: pool.map(|p| p.name.as_str()),
            node: failure.node(),
            duration,
            upstream_duration: None,
            error: Some(kind.as_str()),
            request_id: traffic.and_then(RequestTraffic::id),
            rule: traffic.and_then(|t| t.rule_name(vs)),
            // Only a status weir sent (its trailers-only answer, the trailers of a cut call).
            grpc_status: (answering.0 && failure.status.is_some())
                .then(|| crate::answer::grpc_status_for(status))
                .or(grpc_cut.flatten()),
            cache: failure.cache(),
            tls: client.tls_record(),
        });
    }
    if bytes > 0 && keep_alive {
        return true;
    } else if bytes > 0 {
        client.linger_close().await;
    } else if cut {
        client.reset();
    } else if cut_short {
        client.linger_cut().await;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::Drain;

    /// What a kept-alive connection's task holds while it waits for the next
    /// request: the state of `serve_connection` at its idle await point, the
    /// largest one left after boxing the handshake and the requests. The
    /// requests' state (over 3 KiB) or the buffers inline would fail this.
    #[tokio::test]
    async fn the_connection_task_keeps_only_the_idle_state() {
        let config = weir_config::embedded_default();
        let metrics = weir_observe::Metrics::new();
        let proxy = crate::Proxy::build(&config, &metrics).expect("default config builds");
        let vs = Arc::clone(&proxy.current().virtual_servers[0]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("bound");
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (_owner, signal) = weir_core::Shutdown::new();
        let drain = Arc::new(Drain::default());
        vs.shared
            .open
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let admission = Admission {
            vs: Arc::clone(&vs),
            drain: drain.enter(),
            permit: None,
        };
        let task = serve_connection(stream, addr, admission, signal, None);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 512, "the connection future is {size} bytes");
    }
}
