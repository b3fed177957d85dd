//! The one driver: threads, each with a current-thread runtime and its share of the
//! connection slots; every slot runs the same loop whatever the stop condition, pacing,
//! connection mode and protocol (those are values, consulted at one place each).
//!
//! ```text
//! slot: next intended time (cadence) → admitted? (budget) → wait until intended
//!       → issue (connect if needed, exchange, under the timeout) → record → again
//! ```

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::LocalSet;

use crate::http1::{BUFFER_CAPACITY, Connection, Failure, Response};
use crate::http2::{self, Opened};
use crate::plan::{ConnectionMode, Plan, Protocol, Target, UrlOrder};
use crate::progress::{self, Live};
use crate::record::{ErrorKind, Record, micros};
use crate::schedule::{Budget, Cadence, share};
use crate::tls::TlsClient;

/// The timer wakes on whole milliseconds and late, by about a millisecond on average; aiming
/// this much early centres the actual send times on the intended ones. A request sent early
/// has its latency counted from the actual send (never less than its service time).
const TIMER_EARLY: Duration = Duration::from_millis(1);

/// What a run measured, merged over its threads.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub record: Record,
    /// From the start to the last response (or failure).
    pub elapsed: Duration,
    /// CPU seconds (user + system) the bench threads used, summed; `None` where the
    /// operating system does not say (see [`crate::cpu`]).
    pub client_cpu_s: Option<f64>,
}

/// Runs `plan` to its stop condition on its own threads; blocks until done.
pub fn execute(plan: &Plan) -> io::Result<Outcome> {
    let budget = Arc::new(Budget::new(plan.stop));
    let live = Arc::new(Live::new(plan.threads, plan.progress));
    let plan = Arc::new(plan.clone());
    // Open loop: slot i starts at (i + offset) / connections of an interval, so the slots
    // together send on an even grid `1 / rate` apart; the offset is random per run.
    let phase_offset: f64 = rand::random();
    let start = Instant::now();
    let progress = progress::spawn(Arc::clone(&live), start);
    let mut first_slot = 0;
    let mut threads = Vec::with_capacity(plan.threads);
    for index in 0..plan.threads {
        let slots = first_slot..first_slot + share(plan.connections, plan.threads, index);
        first_slot = slots.end;
        let context = ThreadContext {
            plan: Arc::clone(&plan),
            budget: Arc::clone(&budget),
            live: Arc::clone(&live),
            start,
            phase_offset,
            index,
        };
        threads.push(
            std::thread::Builder::new()
                .name(format!("weir-bench-{index}"))
                .spawn(move || context.run(slots))?,
        );
    }
    let mut record = Record::new();
    let mut failure = None;
    let mut client_cpu_s = Some(0.0);
    for thread in threads {
        match thread.join() {
            Ok(Ok((thread_record, cpu))) => {
                record.merge(&thread_record);
                client_cpu_s = client_cpu_s.zip(cpu).map(|(sum, cpu)| sum + cpu);
            }
            Ok(Err(error)) => failure = Some(error),
            Err(_) => failure = Some(io::Error::other("a bench thread panicked")),
        }
    }
    let elapsed = start.elapsed();
    progress::finish(&live, progress);
    match failure {
        Some(error) => Err(error),
        None => Ok(Outcome {
            record,
            elapsed,
            client_cpu_s,
        }),
    }
}

/// What one thread's slots share.
struct ThreadContext {
    plan: Arc<Plan>,
    budget: Arc<Budget>,
    live: Arc<Live>,
    start: Instant,
    phase_offset: f64,
    index: usize,
}

impl ThreadContext {
    /// Runs the thread's slots; returns what they recorded and the thread's CPU time.
    fn run(self, slots: std::ops::Range<usize>) -> io::Result<(Record, Option<f64>)> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let record = Rc::new(RefCell::new(Record::new()));
        let context = Rc::new(self);
        let local = LocalSet::new();
        let streams = context.plan.protocol.streams();
        for slot in slots {
            // HTTP/2: the connection slot's stream loops share its connection;
            // each is a slot of its own for pacing and recording.
            let shared = Rc::new(http2::Shared::default());
            for stream in 0..streams {
                let connection = match context.plan.protocol {
                    Protocol::Http2 { .. } => SlotConnection::Shared(Rc::clone(&shared)),
                    _ => SlotConnection::Own {
                        connection: None,
                        buffer: BytesMut::with_capacity(BUFFER_CAPACITY),
                    },
                };
                let index = slot * streams + stream;
                local.spawn_local(drive_slot(
                    Rc::clone(&context),
                    Rc::clone(&record),
                    index,
                    connection,
                ));
            }
        }
        runtime.block_on(local);
        // A fresh thread: its whole CPU time is this run's.
        Ok((record.take(), crate::cpu::thread_cpu_seconds()))
    }
}

/// What a slot sends on: its own HTTP/1.1 or L4 connection (and read buffer),
/// or, over HTTP/2, the connection its connection slot's streams share.
enum SlotConnection {
    Own {
        connection: Option<Connection>,
        buffer: BytesMut,
    },
    Shared(Rc<http2::Shared>),
}

impl SlotConnection {
    /// After a failed or final exchange: an own connection is dropped (a
    /// shared one is reopened by whoever finds it failed).
    fn drop_own(&mut self) {
        if let SlotConnection::Own { connection, .. } = self {
            *connection = None;
        }
    }
}

/// One slot's loop, until the budget refuses its next request. A slot is a
/// connection (HTTP/1.1, L4) or one stream of a shared connection (HTTP/2).
async fn drive_slot(
    context: Rc<ThreadContext>,
    record: Rc<RefCell<Record>>,
    slot: usize,
    mut connection: SlotConnection,
) {
    let plan = &context.plan;
    let start = tokio::time::Instant::from_std(context.start);
    let mut rng = SmallRng::seed_from_u64(rand::random());
    let slots = plan.connections * plan.protocol.streams();
    let phase = (slot as f64 + context.phase_offset) / slots as f64;
    let mut cadence = Cadence::new(plan.pacing, slots, phase);
    let mut urls = (slot / plan.protocol.streams()) % plan.targets.len();
    loop {
        // Closed loop: intended = this instant = the send time, exactly.
        let mut sent = tokio::time::Instant::now();
        let now = sent - start;
        let intended = cadence.next(now);
        if !context.budget.admit(intended) {
            break;
        }
        if let Some(deadline) = context.budget.deadline()
            && now >= deadline
        {
            // Open loop, behind at the end: what was due and never sent is counted, not waited for.
            record.borrow_mut().unsent += cadence.due_before(intended, deadline);
            break;
        }
        if intended > now + TIMER_EARLY {
            tokio::time::sleep_until(start + intended - TIMER_EARLY).await;
            sent = tokio::time::Instant::now();
        }
        let target = &plan.targets[urls];
        urls = match plan.order {
            UrlOrder::Sequential => (urls + 1) % plan.targets.len(),
            UrlOrder::Random => rng.random_range(0..plan.targets.len()),
        };
        let mut opened = Opened::default();
        let result = tokio::time::timeout(
            plan.timeout,
            issue(&mut connection, target, plan, &mut opened),
        )
        .await;
        let end = tokio::time::Instant::now();
        let at = end - start;
        let mut record = record.borrow_mut();
        record.connections_opened += u64::from(opened.connection);
        if let Some(handshake) = &opened.handshake {
            record.handshake(handshake);
        }
        match result {
            Ok(Ok(response)) => {
                // From the intended time, or from the actual send if the timer woke early.
                let corrected = end - (start + intended).min(sent);
                // From when the request went out: a wait for a stream is not the server's.
                let service = (end - sent).saturating_sub(response.queued);
                record.bytes += response.bytes;
                record.allow_streams(response.streams_allowed);
                record.response(response.status, corrected, service, at);
                context.live.response(context.index, micros(corrected));
                if !response.keep_alive {
                    connection.drop_own();
                }
            }
            Ok(Err(failure)) => {
                record.bytes += failure.bytes;
                record.error(failure.kind, at);
                context.live.error();
                connection.drop_own();
            }
            Err(_elapsed) => {
                record.error(ErrorKind::Timeout, at);
                context.live.error();
                connection.drop_own();
            }
        }
    }
}

/// Sends one request on the slot's connection, opening one first if there is none (or it goes
/// elsewhere); in close mode the connection is used once. The protocol is consulted here and
/// nowhere else in the driver: an HTTP/1.1 exchange (over TCP or TLS), or an L4 echo
/// transaction.
async fn issue(
    slot: &mut SlotConnection,
    target: &Target,
    plan: &Plan,
    opened: &mut Opened,
) -> Result<Response, Failure> {
    let (connection, buffer) = match slot {
        SlotConnection::Own { connection, buffer } => (connection, buffer),
        SlotConnection::Shared(shared) => {
            let request = target.h2.as_ref().ok_or(Failure {
                kind: ErrorKind::Write,
                bytes: 0,
            })?;
            let tls = tls_for(plan.tls.as_ref(), target);
            // `opened` is the caller's: a request that times out still counts the
            // connection and handshake it made.
            return shared.exchange(target.address, tls, request, opened).await;
        }
    };
    let (protocol, mode) = (plan.protocol, plan.mode);
    // A kept-alive connection the server closed while it idled (its keep-alive timeout)
    // is replaced before a request is sent on it: the server never sees one there, as
    // browsers and curl do (RFC 9112 section 9.3.1). A request that was sent and then
    // failed is an error, as wrk and ab count it: the server may have done its work.
    let reusable = matches!(connection, Some(open)
        if open.address == target.address && !open.closed_by_server());
    if !reusable || mode == ConnectionMode::Close {
        *connection = None;
        *connection = Some(open_for(target, plan, opened).await?);
    }
    let open = connection.as_mut().ok_or(Failure {
        kind: ErrorKind::Connect,
        bytes: 0,
    })?;
    let response = match protocol {
        Protocol::Http1 => {
            open.exchange(buffer, &target.request, target.method)
                .await?
        }
        Protocol::Tcp { mode, .. } => open.echo(buffer, &target.request, mode).await?,
        // Served by the shared connection above.
        Protocol::Http2 { .. } => {
            return Err(Failure {
                kind: ErrorKind::Write,
                bytes: 0,
            });
        }
    };
    if mode == ConnectionMode::Close {
        *connection = None;
    }
    Ok(response)
}

/// A new connection to `target` (and its TLS handshake), noted in `opened`.
async fn open_for(
    target: &Target,
    plan: &Plan,
    opened: &mut Opened,
) -> Result<Connection, Failure> {
    let tls = tls_for(plan.tls.as_ref(), target);
    let (open, handshake) = Connection::open(target.address, tls)
        .await
        .map_err(|kind| {
            // The TCP connection was opened when only the handshake failed.
            opened.connection = kind == ErrorKind::Tls;
            Failure { kind, bytes: 0 }
        })?;
    *opened = Opened {
        connection: true,
        handshake,
    };
    Ok(open)
}

/// The TLS client and server name for `target`, when the run is over TLS.
fn tls_for<'a>(
    client: Option<&'a TlsClient>,
    target: &'a Target,
) -> Option<(&'a TlsClient, &'a rustls::pki_types::ServerName<'static>)> {
    client.zip(target.server_name.as_ref())
}
