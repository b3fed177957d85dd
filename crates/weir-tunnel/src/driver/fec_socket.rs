//! The driver: a quinn [`AsyncUdpSocket`] that runs every datagram through a [`FecCore`]
//! on its way out and in, and a timer task that closes quiet blocks and sends reports.
//!
//! GSO: a transmit of several segments is framed segment by segment into one buffer with a
//! stride five bytes longer, and sent as one GSO transmit (quinn sends at most ten segments
//! at once, so the total stays far below UDP's limit). GRO: datagrams are read into this
//! socket's own buffers, split at their stride, unframed, and handed to quinn one per
//! buffer (quinn is told `max_receive_segments() == 1`), which costs a copy per datagram.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Instant;

use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Runtime, UdpPoller};
use tokio::sync::Notify;
use weir_observe::TunnelMetrics;

use crate::sans_io::fec::{Counters, FecCore, FecSettings, Timing};

/// Receive buffers of this socket, each large enough for a GRO batch.
const RECEIVE_BUFFERS: usize = 8;
const RECEIVE_BUFFER: usize = 64 << 10;

/// A UDP socket with the FEC layer in it.
pub struct FecSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    state: Mutex<State>,
    metrics: TunnelMetrics,
    wake: Arc<Notify>,
}

struct State {
    core: FecCore,
    framed: Vec<u8>,
    pending: VecDeque<Received>,
    buffers: Vec<Vec<u8>>,
    /// The source address quinn last used towards each peer, for repairs and reports.
    source_ips: HashMap<SocketAddr, Option<IpAddr>>,
    /// What the timer task sleeps until (`None`: until woken).
    timer: Option<Instant>,
}

struct Received {
    address: SocketAddr,
    ecn: Option<EcnCodepoint>,
    destination_ip: Option<IpAddr>,
    bytes: Vec<u8>,
}

impl FecSocket {
    /// Wraps `socket` (bound, with its buffers set) and starts the timer task; call from
    /// within a tokio runtime.
    pub fn wrap(
        socket: std::net::UdpSocket,
        settings: FecSettings,
        timing: Timing,
        metrics: TunnelMetrics,
    ) -> io::Result<Arc<FecSocket>> {
        let inner = quinn::TokioRuntime.wrap_udp_socket(socket)?;
        let wake = Arc::new(Notify::new());
        let socket = Arc::new(FecSocket {
            inner,
            state: Mutex::new(State {
                core: FecCore::new(settings, timing),
                framed: Vec::new(),
                pending: VecDeque::new(),
                buffers: vec![vec![0; RECEIVE_BUFFER]; RECEIVE_BUFFERS],
                source_ips: HashMap::new(),
                timer: None,
            }),
            metrics,
            wake: Arc::clone(&wake),
        });
        tokio::spawn(run_timer(Arc::downgrade(&socket), wake));
        Ok(socket)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a panic elsewhere mid-update; the state is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends what the core queued (best effort: a repair the socket refuses is dropped),
    /// counts, and wakes the timer if it must now wake earlier.
    fn flush(&self, state: &mut State) {
        for outgoing in state.core.take_outgoing() {
            let source_ip = state
                .source_ips
                .get(&outgoing.destination)
                .copied()
                .flatten();
            let transmit = Transmit {
                destination: outgoing.destination,
                ecn: None,
                contents: &outgoing.bytes,
                segment_size: None,
                src_ip: source_ip,
            };
            match self.inner.try_send(&transmit) {
                Ok(()) if outgoing.repair => {
                    self.metrics.fec_repair_datagrams_sent.inc();
                    self.metrics
                        .fec_repair_sent_bytes
                        .inc_by(outgoing.bytes.len() as u64);
                }
                Ok(()) => {}
                Err(_) => {
                    self.metrics.fec_send_failures.inc();
                }
            }
        }
        let Counters {
            recovered,
            malformed,
            loss_ppm,
        } = state.core.take_counters();
        self.metrics.fec_repairs.inc_by(recovered);
        self.metrics.fec_malformed.inc_by(malformed);
        if let Some(loss_ppm) = loss_ppm {
            self.metrics
                .fec_link_loss_ppm
                .set(i64::try_from(loss_ppm).unwrap_or(i64::MAX));
        }
        let deadline = state.core.deadline();
        if deadline.is_some_and(|deadline| state.timer.is_none_or(|timer| deadline < timer)) {
            state.timer = deadline;
            self.wake.notify_one();
        }
    }
}

impl Drop for FecSocket {
    fn drop(&mut self) {
        // The timer task holds only a weak reference: woken, it finds us gone and ends.
        self.wake.notify_one();
    }
}

impl fmt::Debug for FecSocket {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("FecSocket")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl AsyncUdpSocket for FecSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Arc::clone(&self.inner).create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let mut state = self.state();
        let state = &mut *state;
        let now = Instant::now();
        let segment = transmit.segment_size.unwrap_or(transmit.contents.len());
        let stride = state.core.frame(
            now,
            transmit.destination,
            transmit.contents,
            segment,
            &mut state.framed,
        );
        let Some(stride) = stride else {
            self.inner.try_send(transmit)?;
            state.core.sent_bare(now, transmit.contents.len());
            return Ok(());
        };
        self.inner.try_send(&Transmit {
            destination: transmit.destination,
            ecn: transmit.ecn,
            contents: &state.framed,
            segment_size: transmit.segment_size.map(|_| stride),
            src_ip: transmit.src_ip,
        })?;
        state
            .core
            .commit(now, transmit.destination, transmit.contents, segment);
        if state.source_ips.len() > 1024 {
            state.source_ips.clear();
        }
        state
            .source_ips
            .insert(transmit.destination, transmit.src_ip);
        self.flush(state);
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut state = self.state();
        let state = &mut *state;
        loop {
            if !state.pending.is_empty() {
                return Poll::Ready(Ok(hand_up(&mut state.pending, bufs, meta)));
            }
            let mut slices: Vec<IoSliceMut<'_>> = state
                .buffers
                .iter_mut()
                .map(|buffer| IoSliceMut::new(buffer))
                .collect();
            let mut metas = [RecvMeta::default(); RECEIVE_BUFFERS];
            let count = match self.inner.poll_recv(cx, &mut slices, &mut metas) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Ready(Ok(count)) => count,
            };
            drop(slices);
            let now = Instant::now();
            for (received, buffer) in metas.iter().zip(&state.buffers).take(count) {
                let filled = &buffer[..received.len.min(buffer.len())];
                for datagram in filled.chunks(received.stride.max(1)) {
                    state.core.receive(now, received.addr, datagram, &mut |up| {
                        state.pending.push_back(Received {
                            address: received.addr,
                            ecn: received.ecn,
                            destination_ip: received.dst_ip,
                            bytes: up.to_vec(),
                        });
                    });
                }
            }
            self.flush(state);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        1
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// Copies pending datagrams into quinn's buffers, one per buffer; returns how many.
fn hand_up(
    pending: &mut VecDeque<Received>,
    bufs: &mut [IoSliceMut<'_>],
    meta: &mut [RecvMeta],
) -> usize {
    let mut count = 0;
    for (buffer, slot) in bufs.iter_mut().zip(meta.iter_mut()) {
        let Some(received) = pending.front() else {
            break;
        };
        // quinn's buffers hold a whole UDP payload; a longer one cannot exist.
        let length = received.bytes.len().min(buffer.len());
        buffer[..length].copy_from_slice(&received.bytes[..length]);
        *slot = RecvMeta {
            addr: received.address,
            len: length,
            stride: length,
            ecn: received.ecn,
            dst_ip: received.destination_ip,
        };
        pending.pop_front();
        count += 1;
    }
    count
}

/// Closes quiet blocks and sends due reports at the core's deadlines; sleeps until woken
/// when there is none. Ends when the socket is gone.
async fn run_timer(socket: Weak<FecSocket>, wake: Arc<Notify>) {
    loop {
        let deadline = match socket.upgrade() {
            Some(socket) => socket.state().timer,
            None => return,
        };
        match deadline {
            Some(deadline) => {
                let at = tokio::time::Instant::from_std(deadline);
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = wake.notified() => continue,
                }
            }
            None => wake.notified().await,
        }
        let Some(socket) = socket.upgrade() else {
            return;
        };
        let mut state = socket.state();
        state.core.poll(Instant::now());
        state.timer = None;
        socket.flush(&mut state);
    }
}
