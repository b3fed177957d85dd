//! The task of one node connection on weir's own HTTP/2 client: reads the
//! socket into the codec and hands what it reads to the streams' slots,
//! writes what the codec and the streams put out, and keeps the clocks the
//! `h2` crate's driver keeps (`../connection.rs`): a PING at once (its answer,
//! or the node's first SETTINGS, tells that the node's limits are known), one
//! every `ping_interval` where set, one when a stream timed out (at most once
//! in [`SUSPECT_PING_SPACING`], else the connection drains), and the end when
//! a PING goes unanswered past `ping_timeout`, the node closes, or the pool
//! stops it (a GOAWAY, then the socket closed).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, watch};
use weir_http::frame::ErrorCode;
use weir_http::h2client::Event;

use super::StreamError;
use super::{Inner, MAX_UNWRITTEN, Shared};
use crate::http2::H2Node;
use crate::http2::connection::{GRACEFUL_CLOSE, SUSPECT_PING_SPACING};

/// Bytes read from the socket at once.
const READ_SIZE: usize = 16 * 1024;

/// What reaches a connection's task from the pool.
pub(in crate::http2) struct Signals {
    /// The pool stops the connection (idle, drained, shut down).
    pub stopped: oneshot::Receiver<()>,
    /// Told once the node's settings are known.
    pub settled: Arc<watch::Sender<bool>>,
    /// A stream on the connection timed out.
    pub suspect: Arc<tokio::sync::Notify>,
}

/// What one read of the node's bytes told the task.
#[derive(Default)]
struct Told {
    settled: bool,
    goaway: bool,
    pong: bool,
}

/// Runs connection `id` of `node` over `io` until it ends, then tells the node.
pub(in crate::http2) async fn drive<S>(
    io: S,
    shared: Arc<Shared>,
    (node, id): (Weak<H2Node>, u64),
    signals: Signals,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Some((interval, timeout, address)) = node.upgrade().map(|node| {
        let settings = node.settings.load();
        (settings.ping_interval, settings.ping_timeout, node.address)
    }) else {
        return;
    };
    let Signals {
        mut stopped,
        settled,
        suspect,
    } = signals;
    let (mut reader, mut writer) = tokio::io::split(io);
    let mut input = BytesMut::with_capacity(READ_SIZE);
    let mut output: Vec<u8> = Vec::new();
    let mut at = 0;
    let mut unflushed = false;
    // The first PING goes out at once: its answer tells the node's settings are applied.
    shared.lock().core.ping(*b"weir-set");
    let mut clock = Clock::new(interval, timeout);
    let mut ticker = tokio::time::interval(clock.period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let by_node = loop {
        if at >= output.len() {
            take(&shared, &mut output, &mut at);
        }
        input.reserve(READ_SIZE);
        tokio::select! {
            biased;
            _ = &mut stopped => {
                // Taken out of the node's list: no stream is left on it, and none will
                // come. GOAWAY, then the socket closes (a close_notify over TLS).
                shared.lock().core.go_away(ErrorCode::NO_ERROR);
                let last = async {
                    let rest = take_all(&shared, &mut output, &mut at);
                    let _ = writer.write_all(&rest).await;
                    let _ = writer.shutdown().await;
                };
                let _ = tokio::time::timeout(GRACEFUL_CLOSE, last).await;
                break false;
            }
            moved = weir_core::wait::write_or_flush(&mut writer, &output[at..]), if at < output.len() || unflushed => {
                match moved {
                    Ok(Some(n)) if n > 0 => {
                        at += n;
                        unflushed = true;
                        wrote(&shared, output.len() - at);
                    }
                    Ok(None) => unflushed = false,
                    _ => break false,
                }
            }
            read = reader.read_buf(&mut input) => {
                // The node closed (or the connection broke).
                if !read_some(read, (&node, address)) {
                    break true;
                }
                let told = match receive(&shared, &mut input) {
                    Ok(told) => told,
                    Err(error) => {
                        tracing::debug!(node = %address, code = ?error.code, reason = error.reason, "HTTP/2 node broke the protocol; connection closed");
                        let rest = take_all(&shared, &mut output, &mut at);
                        let _ = tokio::time::timeout(GRACEFUL_CLOSE, writer.write_all(&rest)).await;
                        break false;
                    }
                };
                told.apply(&mut clock, &settled, (&node, id));
            }
            () = shared.wake.notified() => {}
            () = suspect.notified() => {
                match clock.suspect(&shared) {
                    Some(true) => {
                        tracing::debug!(node = %address, "a stream timed out on an HTTP/2 connection; PING to see that it is alive");
                        ticker.reset();
                    }
                    Some(false) => if let Some(node) = node.upgrade() {
                        tracing::debug!(node = %address, "streams keep timing out on an HTTP/2 connection; draining it");
                        node.drain(id, false);
                    },
                    None => {}
                }
            }
            _ = ticker.tick() => {
                if !clock.tick(&shared) {
                    if let Some(node) = node.upgrade() {
                        node.h2_metrics.ping_timeouts.inc();
                    }
                    tracing::warn!(node = %address, "HTTP/2 node did not answer a PING; closing the connection");
                    break false;
                }
            }
        }
    };
    close(&shared);
    if let Some(node) = node.upgrade() {
        node.ended(id, by_node);
    }
}

/// Whether a read from the node gave bytes; else why not is logged (and counted, for a
/// refused handshake).
fn read_some(
    read: std::io::Result<usize>,
    (node, address): (&Weak<H2Node>, std::net::SocketAddr),
) -> bool {
    match read {
        Ok(n) if n > 0 => true,
        Ok(_) => {
            tracing::debug!(node = %address, "HTTP/2 node closed the connection");
            false
        }
        Err(error) => {
            tracing::debug!(node = %address, %error, "HTTP/2 connection to node broke");
            refused_handshake(node, &error);
            false
        }
    }
}

/// A TLS 1.3 node refusing weir's client certificate says so only with its first
/// records, after weir's side of the handshake: a failed handshake and a connect failure of
/// the node after all, as the `h2` crate's path counts it (`../connection.rs`).
fn refused_handshake(node: &Weak<H2Node>, error: &std::io::Error) {
    if let Some(node) = node.upgrade()
        && weir_tls::is_handshake_refusal(error)
    {
        node.metrics.connect_failures.inc();
        if let Some(tls) = &node.settings.load().tls {
            tls.metrics.failed.inc();
        }
    }
}

impl Told {
    /// Acts on what the node said: a PING answered, its settings known, its GOAWAY.
    fn apply(
        &self,
        clock: &mut Clock,
        settled: &watch::Sender<bool>,
        (node, id): (&Weak<H2Node>, u64),
    ) {
        if self.pong {
            clock.ping_sent = None;
        }
        if self.settled || self.pong {
            crate::http2::settle(settled, node, id);
        }
        if self.goaway
            && let Some(node) = node.upgrade()
        {
            node.drain(id, true);
        }
    }
}

/// Bytes went to the socket, `unwritten` are left: streams held back for the
/// bytes waiting look again.
fn wrote(shared: &Shared, unwritten: usize) {
    let mut inner = shared.lock();
    inner.unwritten = unwritten;
    if inner.send_blocked && inner.unwritten + inner.core.output().len() < MAX_UNWRITTEN {
        inner.send_blocked = false;
        wake_all(&mut inner);
    }
}

/// The connection's PINGs: the first, the periodic ones, those for a stream that
/// timed out, and the answer each waits for.
struct Clock {
    interval: Duration,
    timeout: Duration,
    period: Duration,
    /// A PING due within this much of a tick goes at that tick.
    slack: Duration,
    ping_sent: Option<Instant>,
    last_ping: Instant,
    /// When a timed-out stream last made the connection PING.
    suspected: Option<Instant>,
}

impl Clock {
    /// The first PING was just sent.
    fn new(interval: Duration, timeout: Duration) -> Clock {
        let period = match interval.is_zero() {
            false => interval.min(timeout),
            true => timeout,
        };
        Clock {
            interval,
            timeout,
            period,
            slack: (period / 4).min(Duration::from_millis(50)),
            ping_sent: Some(Instant::now()),
            last_ping: Instant::now(),
            suspected: None,
        }
    }

    /// A stream timed out: `Some(true)` when a PING went, `Some(false)` when one went
    /// too lately to send another (the connection drains), `None` when one is out.
    fn suspect(&mut self, shared: &Shared) -> Option<bool> {
        if self.ping_sent.is_some() {
            return None;
        }
        let now = Instant::now();
        let may_ping = self
            .suspected
            .is_none_or(|at| now.saturating_duration_since(at) >= SUSPECT_PING_SPACING);
        if may_ping {
            shared.lock().core.ping(*b"weir-chk");
            self.ping_sent = Some(now);
            self.last_ping = now;
            self.suspected = Some(now);
        }
        Some(may_ping)
    }

    /// A tick: false when the PING out went unanswered past the timeout.
    fn tick(&mut self, shared: &Shared) -> bool {
        let now = Instant::now();
        if let Some(sent) = self.ping_sent {
            return now.saturating_duration_since(sent) < self.timeout;
        }
        let periodic = !self.interval.is_zero();
        if periodic && now.saturating_duration_since(self.last_ping) + self.slack >= self.interval {
            shared.lock().core.ping(*b"weir-png");
            self.ping_sent = Some(now);
            self.last_ping = now;
        }
        true
    }
}

/// Feeds the codec what came in and hands its events to the streams' slots.
fn receive(
    shared: &Shared,
    input: &mut BytesMut,
) -> Result<Told, weir_http::h2client::ConnectionError> {
    let mut guard = shared.lock();
    let Inner { core, slots, .. } = &mut *guard;
    let mut told = Told::default();
    let mut give_back: Vec<(u32, u32)> = Vec::new();
    let mut opened = false;
    let used = core.receive(input, |event| match event {
        Event::Settings { .. } => told.settled = true,
        Event::Interim {
            stream,
            status,
            lines,
        } => {
            if let Some(slot) = slots.get_mut(&stream) {
                slot.interims.push_back((status, lines));
                slot.wake();
            }
        }
        Event::Response {
            stream,
            head,
            end_stream,
        } => {
            if let Some(slot) = slots.get_mut(&stream) {
                slot.head = Some((head, end_stream));
                slot.ended |= end_stream;
                slot.wake();
            }
        }
        Event::Malformed { stream, error } => {
            if let Some(slot) = slots.get_mut(&stream) {
                slot.failed = Some(StreamError::Malformed(error.reason.to_string()));
                slot.wake();
            }
        }
        Event::Data {
            stream,
            data,
            end_stream,
        } => match slots.get_mut(&stream) {
            Some(slot) if slot.receivers > 0 => {
                if !data.is_empty() {
                    slot.received.push_back(Bytes::copy_from_slice(data));
                }
                slot.ended |= end_stream;
                slot.wake();
            }
            _ if !data.is_empty() => give_back.push((stream, data.len() as u32)),
            _ => {}
        },
        Event::Trailers { stream, lines } => {
            if let Some(slot) = slots.get_mut(&stream) {
                slot.trailers = Some(lines);
                slot.ended = true;
                slot.wake();
            }
        }
        Event::Reset {
            stream,
            error,
            by_node,
            unprocessed,
        } => {
            if let Some(slot) = slots.get_mut(&stream) {
                slot.failed.get_or_insert(StreamError::Reset {
                    code: error,
                    by_node,
                    unprocessed,
                });
                slot.done = true;
                slot.wake();
            }
        }
        Event::GoAway { .. } => told.goaway = true,
        Event::PingAnswered { .. } => told.pong = true,
        Event::WindowOpened => opened = true,
    });
    let used = used?;
    input.advance(used);
    for (stream, len) in give_back {
        core.release(stream, len);
    }
    if opened {
        wake_all(&mut guard);
    }
    Ok(told)
}

/// Every stream waiting to send looks again.
fn wake_all(inner: &mut Inner) {
    for slot in inner.slots.values_mut() {
        slot.wake();
    }
}

/// The connection is over: every stream's wait ends.
fn close(shared: &Shared) {
    let mut inner = shared.lock();
    inner.closed = true;
    wake_all(&mut inner);
}

/// Takes the codec's output, all of what was taken before being written.
fn take(shared: &Shared, output: &mut Vec<u8>, at: &mut usize) {
    output.clear();
    *at = 0;
    let mut inner = shared.lock();
    std::mem::swap(inner.core.output(), output);
    inner.unwritten = output.len();
}

/// What is left to write: the rest of `output` and the codec's output since.
fn take_all(shared: &Shared, output: &mut Vec<u8>, at: &mut usize) -> Vec<u8> {
    let mut rest = output.split_off(*at);
    *at = 0;
    output.clear();
    rest.append(shared.lock().core.output());
    rest
}
