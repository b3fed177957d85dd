//! The TCP fallback transport (`[link] transport = "tcp"`), for paths that block UDP: the
//! same QUIC connection (TLS, mutual authentication, one stream per flow, the control
//! stream, dedup) runs over a quinn [`AsyncUdpSocket`] whose datagrams travel as
//! length-prefixed frames on one TCP connection per peer, with BBR and buffers of the
//! link's bandwidth-delay product. TCP recovers losses, so QUIC sees none, and flows share
//! TCP's in-order delivery: a loss holds every flow back until it is repaired (the
//! head-of-line blocking QUIC over UDP avoids).
//!
//! Frames ([`crate::sans_io::frame`]): `length u16 (1..=65535) | datagram`. The near side
//! connects lazily, on the first datagram QUIC sends to the far side, and again after the
//! connection breaks; the far side accepts any number of near sides and answers each on its
//! own connection.
//!
//! One connection's full queue makes QUIC wait (backpressure, as a full UDP socket buffer
//! would), but not forever and not for everyone: a connection whose queue is full and that
//! has taken no byte for [`STALL_GRACE`] is stalled (a peer that does not read, such as an
//! unauthenticated client sending packets it never reads the answers to). What QUIC sends
//! it is dropped, as UDP drops, and it no longer holds up the others; one whose write has
//! waited, or that has sent nothing, for the link's idle timeout is closed.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use super::places::Places;
use crate::sans_io::frame::{put_frame, take_frame};

/// Datagrams received and not yet taken by quinn; past it the readers wait (TCP's flow
/// control then slows the peer).
const MAX_RECEIVED: usize = 4096;
/// How long connecting to the far side may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections the far side holds at once; past it new ones are closed at accept. A
/// tunnel has a few near sides, each with one connection.
const MAX_PEERS: usize = 256;
/// Connections one source address may hold: a near side has one at a time (a few while it
/// reconnects), so one address cannot take the places every near side needs.
const PEERS_PER_ADDRESS: usize = 8;
/// How long a connection with a full queue may take no byte before it is stalled: longer
/// than a slow link's round trips, where a live peer's kernel takes bytes as acks return.
const STALL_GRACE: Duration = Duration::from_secs(2);

/// How much QUIC may queue per connection before it is told to wait (about a
/// bandwidth-delay product); the socket's send buffer is twice that. `idle`: the link's
/// idle timeout, after which a connection that sent nothing, or whose write has waited
/// that long, is closed.
#[derive(Debug, Clone, Copy)]
pub struct TcpSettings {
    pub buffer: usize,
    pub idle: Duration,
}

/// A quinn socket over TCP connections.
pub struct TcpDatagrams {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    settings: TcpSettings,
    /// Woken when a peer's outgoing buffer drains (quinn waits on it after `WouldBlock`).
    writable: Notify,
    /// Woken when quinn takes received datagrams (readers wait on it when full).
    space: Notify,
    local: SocketAddr,
    /// The near side connects on demand to whatever QUIC sends to (its far side); the far
    /// side only answers connections it accepted.
    connects: bool,
    /// Set when the socket is dropped: every task ends and its connection closes.
    closed: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    peers: HashMap<SocketAddr, Peer>,
    received: VecDeque<(SocketAddr, Bytes)>,
    receiver: Option<Waker>,
}

struct Peer {
    /// Which connection this is (an address may be reused by a new one after a break).
    id: u64,
    outgoing: BytesMut,
    wake_writer: Arc<Notify>,
    /// When the kernel last took bytes for this connection (or it was made).
    progress: Instant,
}

impl Peer {
    /// A full queue and no byte taken for [`STALL_GRACE`]: not reading.
    fn stalled(&self, limit: usize, now: Instant) -> bool {
        self.outgoing.len() >= limit && now.saturating_duration_since(self.progress) >= STALL_GRACE
    }
}

impl TcpDatagrams {
    /// The far side: accepts near sides on `listener`.
    pub fn listen(listener: TcpListener, settings: TcpSettings) -> io::Result<Arc<TcpDatagrams>> {
        let local = listener.local_addr()?;
        let shared = Arc::new(Shared::new(settings, local, false));
        let weak = Arc::downgrade(&shared);
        let mut closed = shared.closed.subscribe();
        let peers = Places::new(MAX_PEERS, PEERS_PER_ADDRESS);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        // Out of descriptors and the like: pause rather than spin.
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                    () = until_closed(&mut closed) => return,
                };
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                // Before QUIC authenticates anyone, each connection is a stranger's: a
                // bounded number of them, in all and per address (the rest are closed at once).
                let Some(slot) = peers.take(peer.ip()) else {
                    tracing::debug!(%peer, "TCP transport: too many connections; closing");
                    continue;
                };
                shared.configure(&stream);
                let (read, write) = stream.into_split();
                let (id, wake) = shared.add_peer(peer);
                let reading = read_frames(Arc::clone(&shared), peer, id, read);
                tokio::spawn(async move {
                    reading.await;
                    drop(slot);
                });
                tokio::spawn(write_frames(shared, peer, id, Ok(write), wake));
            }
        });
        Ok(Arc::new(TcpDatagrams { shared }))
    }

    /// The near side: connects to the far side when QUIC first sends to it (and again
    /// after the connection broke). `local` is only what `local_addr` reports.
    pub fn connecting(local: SocketAddr, settings: TcpSettings) -> Arc<TcpDatagrams> {
        Arc::new(TcpDatagrams {
            shared: Arc::new(Shared::new(settings, local, true)),
        })
    }
}

impl Shared {
    fn new(settings: TcpSettings, local: SocketAddr, connects: bool) -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            settings,
            writable: Notify::new(),
            space: Notify::new(),
            local,
            connects,
            closed: watch::Sender::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a panic elsewhere mid-update; the queues are still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a connection to `address`; returns its id and its writer's wake-up.
    fn add_peer(&self, address: SocketAddr) -> (u64, Arc<Notify>) {
        let mut state = self.state();
        state.add_peer(address)
    }

    /// Forgets connection `id` (if `address` still names it) and wakes its writer and the
    /// senders waiting for room, so that they see it gone.
    fn remove_peer(&self, address: SocketAddr, id: u64) {
        let removed = {
            let mut state = self.state();
            match state.peers.get(&address) {
                Some(peer) if peer.id == id => state.peers.remove(&address),
                _ => None,
            }
        };
        if let Some(peer) = removed {
            peer.wake_writer.notify_one();
        }
        self.writable.notify_waiters();
    }

    /// BBR, no Nagle, and a send buffer of twice the queue (BBR keeps about two BDP in
    /// flight, and a hole holds everything after it until repaired); each best effort (the
    /// kernel may lack BBR, and caps the buffer at `wmem_max`, doubled). The receive buffer
    /// is left to the kernel's autotuning, which grows further than `rmem_max`.
    fn configure(&self, stream: &TcpStream) {
        let socket = socket2::SockRef::from(stream);
        let _ = socket.set_tcp_nodelay(true);
        let _ = socket.set_send_buffer_size(2 * self.settings.buffer);
        if let Err(error) = socket.set_tcp_congestion(b"bbr") {
            tracing::debug!(%error, "TCP transport: BBR unavailable, using the system default");
        }
    }

    /// `Ok` with room in every queue, a stalled connection's aside (its datagrams are
    /// dropped); otherwise when the first full queue would count as stalled.
    fn room(&self) -> Result<(), Instant> {
        let limit = self.settings.buffer;
        let now = Instant::now();
        let full = self
            .state()
            .peers
            .values()
            .filter(|peer| peer.outgoing.len() >= limit && !peer.stalled(limit, now))
            .map(|peer| peer.progress + STALL_GRACE)
            .min();
        match full {
            None => Ok(()),
            Some(stalls_at) => Err(stalls_at),
        }
    }

    /// The kernel took bytes for connection `id` to `address`.
    fn progressed(&self, address: SocketAddr, id: u64) {
        if let Some(peer) = self.state().peers.get_mut(&address)
            && peer.id == id
        {
            peer.progress = Instant::now();
        }
    }
}

impl State {
    fn add_peer(&mut self, address: SocketAddr) -> (u64, Arc<Notify>) {
        self.next_id += 1;
        let wake = Arc::new(Notify::new());
        self.peers.insert(
            address,
            Peer {
                id: self.next_id,
                outgoing: BytesMut::new(),
                wake_writer: Arc::clone(&wake),
                progress: Instant::now(),
            },
        );
        (self.next_id, wake)
    }
}

impl Drop for TcpDatagrams {
    fn drop(&mut self) {
        self.shared.closed.send_replace(true);
    }
}

impl fmt::Debug for TcpDatagrams {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("TcpDatagrams")
            .field("local", &self.shared.local)
            .field("connects", &self.shared.connects)
            .finish_non_exhaustive()
    }
}

/// Resolves once the socket is dropped.
async fn until_closed(closed: &mut watch::Receiver<bool>) {
    // An error means the sender is gone: closed too.
    let _ = closed.wait_for(|closed| *closed).await;
}

/// Reads frames from one peer into the shared queue until the connection ends: one whose
/// next whole frame does not arrive within the link's idle timeout of the last (QUIC's
/// keep-alives come far more often) is closed, however it trickles bytes meanwhile.
async fn read_frames(shared: Arc<Shared>, peer: SocketAddr, id: u64, mut read: OwnedReadHalf) {
    let mut closed = shared.closed.subscribe();
    let mut buffer = BytesMut::with_capacity(256 << 10);
    let mut last_frame = tokio::time::Instant::now();
    'reading: loop {
        loop {
            let frame = match take_frame(&mut buffer) {
                Ok(Some(frame)) => {
                    last_frame = tokio::time::Instant::now();
                    frame
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%peer, %error, "TCP transport: bad framing; closing");
                    break 'reading;
                }
            };
            loop {
                let space = shared.space.notified();
                {
                    let mut state = shared.state();
                    if state.received.len() < MAX_RECEIVED {
                        state.received.push_back((peer, frame));
                        if let Some(waker) = state.receiver.take() {
                            waker.wake();
                        }
                        break;
                    }
                }
                tokio::select! {
                    () = space => {}
                    () = until_closed(&mut closed) => break 'reading,
                }
            }
        }
        tokio::select! {
            read = tokio::time::timeout_at(last_frame + shared.settings.idle, read.read_buf(&mut buffer)) => match read {
                Ok(Ok(0) | Err(_)) => break,
                Ok(Ok(_)) => {}
                // No whole frame for the link's idle timeout: QUIC's keep-alives would have come.
                Err(_) => {
                    tracing::debug!(%peer, "TCP transport: no frame within the idle timeout; closing");
                    break;
                }
            },
            () = until_closed(&mut closed) => break,
        }
    }
    shared.remove_peer(peer, id);
}

/// Writes one peer's outgoing frames as they come; on the near side, connects first.
async fn write_frames(
    shared: Arc<Shared>,
    peer: SocketAddr,
    id: u64,
    write: Result<OwnedWriteHalf, SocketAddr>,
    wake: Arc<Notify>,
) {
    let mut write = match write {
        Ok(write) => write,
        Err(server) => {
            let connecting = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(server));
            match connecting.await {
                Ok(Ok(stream)) => {
                    shared.configure(&stream);
                    let (read, write) = stream.into_split();
                    tokio::spawn(read_frames(Arc::clone(&shared), peer, id, read));
                    write
                }
                Ok(Err(error)) => {
                    tracing::debug!(%server, %error, "TCP transport: cannot connect");
                    shared.remove_peer(peer, id);
                    return;
                }
                Err(_) => {
                    tracing::debug!(%server, "TCP transport: connecting timed out");
                    shared.remove_peer(peer, id);
                    return;
                }
            }
        }
    };
    let mut closed = shared.closed.subscribe();
    loop {
        let woken = wake.notified();
        if *closed.borrow_and_update() {
            break;
        }
        let pending = {
            let mut state = shared.state();
            match state.peers.get_mut(&peer) {
                Some(entry) if entry.id == id => entry.outgoing.split().freeze(),
                _ => break,
            }
        };
        if pending.is_empty() {
            tokio::select! {
                () = woken => {}
                _ = closed.changed() => {}
            }
            continue;
        }
        shared.writable.notify_waiters();
        let writing = async {
            let mut rest = &pending[..];
            while !rest.is_empty() {
                match tokio::time::timeout(shared.settings.idle, write.write(rest)).await {
                    Ok(Ok(0) | Err(_)) => return false,
                    Ok(Ok(written)) => {
                        rest = &rest[written..];
                        shared.progressed(peer, id);
                    }
                    // The peer has read nothing for the link's idle timeout: a reset, so
                    // that what it never read is not left queued in the kernel after us.
                    Err(_) => {
                        tracing::debug!(%peer, "TCP transport: peer not reading; resetting");
                        let _ =
                            socket2::SockRef::from(write.as_ref()).set_linger(Some(Duration::ZERO));
                        return false;
                    }
                }
            }
            true
        };
        tokio::select! {
            written = writing => if !written {
                break;
            },
            _ = closed.changed() => break,
        }
    }
    shared.remove_peer(peer, id);
}

impl AsyncUdpSocket for TcpDatagrams {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable {
            shared: Arc::clone(&self.shared),
            waiting: None,
            stall: None,
        })
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let shared = &self.shared;
        let mut state = shared.state();
        if !state.peers.contains_key(&transmit.destination) {
            // The near side (re)connects to its far side; anything else has no connection
            // and is dropped, as UDP drops a datagram to an unreachable host.
            if !shared.connects {
                return Ok(());
            }
            let (id, wake) = state.add_peer(transmit.destination);
            tokio::spawn(write_frames(
                Arc::clone(shared),
                transmit.destination,
                id,
                Err(transmit.destination),
                wake,
            ));
        }
        let Some(peer) = state.peers.get_mut(&transmit.destination) else {
            return Ok(());
        };
        if peer.outgoing.len() >= shared.settings.buffer {
            // A peer that reads nothing loses what is sent to it, as UDP would lose it,
            // rather than make every other connection wait.
            if peer.stalled(shared.settings.buffer, Instant::now()) {
                return Ok(());
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let segment = transmit
            .segment_size
            .unwrap_or(transmit.contents.len())
            .max(1);
        for datagram in transmit.contents.chunks(segment) {
            put_frame(&mut peer.outgoing, datagram);
        }
        peer.wake_writer.notify_one();
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut state = self.shared.state();
        if state.received.is_empty() {
            state.receiver = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let mut count = 0;
        for (buffer, slot) in bufs.iter_mut().zip(meta.iter_mut()) {
            let Some((address, datagram)) = state.received.pop_front() else {
                break;
            };
            // quinn's buffers hold a whole UDP payload; a frame is never longer.
            let length = datagram.len().min(buffer.len());
            buffer[..length].copy_from_slice(&datagram[..length]);
            *slot = RecvMeta {
                addr: address,
                len: length,
                stride: length,
                ecn: None,
                dst_ip: None,
            };
            count += 1;
        }
        drop(state);
        self.shared.space.notify_waiters();
        Poll::Ready(Ok(count))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.shared.local)
    }

    fn may_fragment(&self) -> bool {
        false
    }
}

/// Ready when every peer's outgoing buffer has room again, or its peer stalled.
struct Writable {
    shared: Arc<Shared>,
    waiting: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
    /// Until the first full queue would count as stalled (nothing else wakes us then).
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl fmt::Debug for Writable {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("Writable").finish_non_exhaustive()
    }
}

impl UdpPoller for Writable {
    fn poll_writable(mut self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let shared = Arc::clone(&self.shared);
        let waiting = self
            .waiting
            .get_or_insert_with(|| Box::pin(async move { shared.writable.notified().await }));
        // Polled (and so registered) before the check: a drain after it wakes us.
        let woken = waiting.as_mut().poll(cx).is_ready();
        let room = self.shared.room();
        if woken || room.is_ok() {
            self.waiting = None;
            self.stall = None;
            return Poll::Ready(Ok(()));
        }
        if let Err(stalls_at) = room {
            let deadline = tokio::time::Instant::from_std(stalls_at);
            let sleep = self
                .stall
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if sleep.deadline() != deadline {
                sleep.as_mut().reset(deadline);
            }
            if sleep.as_mut().poll(cx).is_ready() {
                self.waiting = None;
                self.stall = None;
                return Poll::Ready(Ok(()));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    /// One address holds a few connections, all addresses together a bounded number; a
    /// place comes back when its connection ends.
    #[test]
    fn connections_are_bounded_per_address_and_in_all() {
        let peers = Places::new(MAX_PEERS, PEERS_PER_ADDRESS);
        let address = |n: u32| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n));
        let mine: Vec<_> = (0..PEERS_PER_ADDRESS)
            .map(|_| peers.take(address(1)).expect("a place"))
            .collect();
        assert!(peers.take(address(1)).is_none(), "one address, full");
        let others: Vec<_> = (2..).map_while(|n| peers.take(address(n))).collect();
        assert_eq!(mine.len() + others.len(), MAX_PEERS);
        drop(mine);
        assert!(peers.take(address(1)).is_some(), "given back");
        drop(others);
        assert_eq!(peers.held(), 0);
    }
}
