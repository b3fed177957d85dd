//! One tunnel connection's shared state and its control stream driver: the mirror of the
//! peer's chunk store, this end's store, the pinned chunks of references in flight, and the
//! waiters for chunks asked of the peer. The message rules are in [`crate::sans_io::control`];
//! a session's states, and the code that moves it between them: `LIFECYCLE.md`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, mpsc, oneshot};
use weir_observe::TunnelMetrics;

use crate::config::{LinkParams, TunnelConfig};
use crate::sans_io::codec::{EncoderSettings, MAX_CHUNK, Piece};
use crate::sans_io::control::{Control, MAX_INSERTED};
use crate::sans_io::dedup::{ChunkId, ChunkStore};
use crate::sans_io::wire::{MAX_BLOCK_PAYLOAD, take_record};

/// Pinned bytes a flow may hold before its encoder waits for the peer to resolve them.
pub const PIN_LIMIT: u64 = 32 << 20;

/// Pinned bytes all the flows of a connection may hold: past it, encoders send chunks as
/// literals (which pin nothing) instead of references. A flow whose far end does not read
/// holds its pins until it ends; without this bound every such flow would keep
/// [`PIN_LIMIT`] of memory, and with it the others would wait, so past it they send more
/// bytes instead.
pub const SESSION_PIN_LIMIT: u64 = 4 * PIN_LIMIT;

/// Application error codes on streams and the connection.
pub mod code {
    /// The far side has no such service.
    pub const UNKNOWN_SERVICE: u32 = 1;
    /// The far side could not connect to the real server.
    pub const CONNECT_FAILED: u32 = 2;
    /// The local TCP connection was reset or failed.
    pub const TCP_ERROR: u32 = 3;
    /// The peer broke the protocol.
    pub const PROTOCOL: u32 = 4;
    /// The process is stopping.
    pub const SHUTDOWN: u32 = 5;
    /// The far side serves its `max_connections` already.
    pub const BUSY: u32 = 6;
}

/// Per-connection state shared by its flows and its control stream.
#[derive(Debug)]
pub struct Session {
    pub connection: quinn::Connection,
    pub settings: EncoderSettings,
    /// The most literal bytes per block the encoders send (see [`block_limit`]).
    pub block_limit: usize,
    pub max_chunk: u32,
    pub metrics: TunnelMetrics,
    /// What the peer holds, as far as its reports go (lengths only).
    mirror: Mutex<ChunkStore<u32>>,
    /// What this end holds of what it received.
    store: Mutex<ChunkStore<Bytes>>,
    pins: Mutex<HashMap<u64, Pins>>,
    /// The bytes every flow's pins hold, kept with them under the lock of `pins`.
    pinned: AtomicU64,
    /// This session's part of `weir_tunnel_dedup_store_bytes`: its store's size when last
    /// counted. The gauges are the sums over every connection, each taking its part back
    /// when it ends (`Drop`).
    store_counted: AtomicU64,
    pins_released: Notify,
    waiting: Mutex<HashMap<(u64, u64), Answer>>,
    control: mpsc::UnboundedSender<Control>,
    /// The peer's hello arrived: it accepted this end (see [`Session::greeted`]).
    greeted: tokio::sync::watch::Sender<bool>,
}

/// A count of bytes as a gauge's step.
fn gauge_bytes(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

impl Drop for Session {
    /// The connection is gone, and with it its store and its pins: its parts of the
    /// gauges go too.
    fn drop(&mut self) {
        let pinned = *self.pinned.get_mut();
        let stored = *self.store_counted.get_mut();
        self.metrics.dedup_pinned_bytes.dec_by(gauge_bytes(pinned));
        self.metrics.dedup_store_bytes.dec_by(gauge_bytes(stored));
    }
}

/// Where the answer to a `Need` goes: the chunk, or `None` when the peer has none.
type Answer = oneshot::Sender<Option<Bytes>>;

/// Chunks a flow referenced that the peer has not yet said it resolved.
#[derive(Debug, Default)]
struct Pins {
    chunks: VecDeque<(u64, Bytes)>,
    bytes: u64,
    encoder_done: bool,
    decoder_done: bool,
}

/// A decoded piece after the store was consulted.
#[derive(Debug)]
pub enum Resolved {
    Bytes(Bytes),
    Missing { index: u64, id: ChunkId, len: u32 },
}

impl Session {
    /// Starts the session on a connection whose control stream is open: sends this end's
    /// hello and runs the control stream until the connection ends.
    pub fn start(
        connection: quinn::Connection,
        control: (quinn::SendStream, quinn::RecvStream),
        config: &TunnelConfig,
        metrics: TunnelMetrics,
    ) -> Arc<Session> {
        let store_budget = config.dedup.store;
        let (sender, receiver) = mpsc::unbounded_channel();
        let session = Arc::new(Session {
            connection,
            settings: EncoderSettings {
                dedup: config.dedup.enabled.then_some(config.dedup.chunks),
                compression: config.compression,
            },
            block_limit: block_limit(&config.link),
            max_chunk: MAX_CHUNK,
            metrics,
            mirror: Mutex::new(ChunkStore::new(0)),
            store: Mutex::new(ChunkStore::new(store_budget)),
            pins: Mutex::new(HashMap::new()),
            pinned: AtomicU64::new(0),
            store_counted: AtomicU64::new(0),
            pins_released: Notify::new(),
            waiting: Mutex::new(HashMap::new()),
            control: sender,
            greeted: tokio::sync::watch::Sender::new(false),
        });
        session.send(Control::Hello { store_budget });
        let (send, recv) = control;
        tokio::spawn(write_control(send, receiver));
        tokio::spawn(read_control(Arc::clone(&session), recv));
        session
    }

    /// Completes when the peer's hello has arrived, that is when the peer accepted this
    /// end; never if the connection ends first. Under TLS 1.3 a client's handshake is over
    /// before the server has checked the client's certificate, so only the hello tells the
    /// near side that its certificate was accepted.
    pub async fn greeted(&self) {
        let mut greeted = self.greeted.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail while borrowed.
        let _ = greeted.wait_for(|greeted| *greeted).await;
    }

    pub fn send(&self, message: Control) {
        // Fails only when the writer has stopped, that is when the connection is gone.
        let _ = self.control.send(message);
    }

    /// For each id, whether the peer holds it (as far as this end knows).
    pub fn known(&self, ids: impl Iterator<Item = ChunkId>) -> Vec<bool> {
        let mirror = lock(&self.mirror);
        ids.map(|id| mirror.contains(&id)).collect()
    }

    /// Starts tracking pins of a flow this end sends on.
    pub fn open_pins(&self, stream: u64) {
        lock(&self.pins).entry(stream).or_default();
    }

    /// Keeps referenced chunks until the peer resolves them, waiting first while the flow
    /// holds more than [`PIN_LIMIT`].
    pub async fn pin(&self, stream: u64, refs: Vec<(u64, Bytes)>) {
        if refs.is_empty() {
            return;
        }
        loop {
            let released = self.pins_released.notified();
            {
                let mut pins = lock(&self.pins);
                let entry = pins.entry(stream).or_default();
                if entry.decoder_done {
                    return;
                }
                if entry.bytes < PIN_LIMIT {
                    for (index, bytes) in refs {
                        entry.bytes += bytes.len() as u64;
                        self.add_pinned(bytes.len() as u64);
                        entry.chunks.push_back((index, bytes));
                    }
                    return;
                }
            }
            tokio::select! {
                () = released => {}
                _ = self.connection.closed() => return,
            }
        }
    }

    /// Whether the connection's flows hold [`SESSION_PIN_LIMIT`] of pins: encoders then
    /// send literals rather than references.
    pub fn pins_full(&self) -> bool {
        self.pinned.load(Ordering::Relaxed) >= SESSION_PIN_LIMIT
    }

    /// The flow's encoder finished: drop its pins once the peer's decoder is done too.
    pub fn encoder_done(&self, stream: u64) {
        let mut pins = lock(&self.pins);
        if let Some(entry) = pins.get_mut(&stream) {
            entry.encoder_done = true;
            if entry.decoder_done {
                self.unpin_flow(&mut pins, stream);
            }
        }
    }

    /// Forgets a flow's pins (both its ends are done), and their bytes.
    fn unpin_flow(&self, pins: &mut HashMap<u64, Pins>, stream: u64) {
        if let Some(entry) = pins.remove(&stream) {
            self.remove_pinned(entry.bytes);
        }
    }

    fn add_pinned(&self, bytes: u64) {
        self.pinned.fetch_add(bytes, Ordering::Relaxed);
        self.metrics.dedup_pinned_bytes.inc_by(gauge_bytes(bytes));
    }

    fn remove_pinned(&self, bytes: u64) {
        self.pinned.fetch_sub(bytes, Ordering::Relaxed);
        self.metrics.dedup_pinned_bytes.dec_by(gauge_bytes(bytes));
    }

    /// Stores the block's new chunks and looks its references up, in item order, under one
    /// lock of the store; the new chunks are reported to the peer before the lock is let go,
    /// so reports leave in exactly the order of insertion (the mirror depends on it).
    pub fn resolve(&self, pieces: Vec<Piece>) -> Vec<Resolved> {
        let mut inserted = Vec::new();
        let mut resolved = Vec::with_capacity(pieces.len());
        let mut store = lock(&self.store);
        for piece in pieces {
            resolved.push(match piece {
                Piece::Literal { bytes, stored } => {
                    if let Some(id) = stored
                        && store.insert(id, bytes.clone())
                    {
                        inserted.push((id, bytes.len() as u32));
                    }
                    Resolved::Bytes(bytes)
                }
                Piece::Ref { index, id, len } => match store.get(&id) {
                    Some(bytes) => Resolved::Bytes(bytes.clone()),
                    None => Resolved::Missing { index, id, len },
                },
            });
        }
        while !inserted.is_empty() {
            let rest = inserted.split_off(inserted.len().min(MAX_INSERTED));
            self.send(Control::Inserted { chunks: inserted });
            inserted = rest;
        }
        // Under the store's lock: parts are counted in the order the store changed.
        let total = store.total();
        let before = self.store_counted.swap(total, Ordering::Relaxed);
        let gauge = &self.metrics.dedup_store_bytes;
        match total >= before {
            true => gauge.inc_by(gauge_bytes(total - before)),
            false => gauge.dec_by(gauge_bytes(before - total)),
        };
        resolved
    }

    /// Asks the peer for a chunk a reference missed; `None` when it has none or the
    /// connection ends.
    pub async fn fetch(&self, stream: u64, index: u64) -> Option<Bytes> {
        let (sender, receiver) = oneshot::channel();
        lock(&self.waiting).insert((stream, index), sender);
        self.metrics.dedup_misses.inc();
        self.send(Control::Need { stream, index });
        tokio::select! {
            answer = receiver => answer.ok().flatten(),
            _ = self.connection.closed() => None,
        }
    }

    fn handle(&self, message: Control) -> Result<(), String> {
        match message {
            Control::Hello { store_budget } => {
                lock(&self.mirror).set_budget(store_budget);
                self.greeted.send_replace(true);
            }
            Control::Inserted { chunks } => {
                let mut mirror = lock(&self.mirror);
                for (id, len) in chunks {
                    mirror.insert(id, len);
                }
            }
            Control::Resolved { stream, refs } => {
                if let Some(entry) = lock(&self.pins).get_mut(&stream) {
                    while entry.chunks.front().is_some_and(|(index, _)| *index < refs) {
                        if let Some((_, bytes)) = entry.chunks.pop_front() {
                            entry.bytes -= bytes.len() as u64;
                            self.remove_pinned(bytes.len() as u64);
                        }
                    }
                }
                self.pins_released.notify_waiters();
            }
            Control::Need { stream, index } => {
                let found = lock(&self.pins).get(&stream).and_then(|entry| {
                    entry
                        .chunks
                        .iter()
                        .find(|(pinned, _)| *pinned == index)
                        .map(|(_, bytes)| bytes.clone())
                });
                self.send(match found {
                    Some(bytes) => Control::Chunk {
                        stream,
                        index,
                        bytes,
                    },
                    None => Control::Missing { stream, index },
                });
            }
            Control::Chunk {
                stream,
                index,
                bytes,
            } => {
                if let Some(waiter) = lock(&self.waiting).remove(&(stream, index)) {
                    let _ = waiter.send(Some(bytes));
                }
            }
            Control::Missing { stream, index } => {
                if let Some(waiter) = lock(&self.waiting).remove(&(stream, index)) {
                    let _ = waiter.send(None);
                }
            }
            Control::Done { stream } => {
                let mut pins = lock(&self.pins);
                let entry = pins.entry(stream).or_default();
                entry.decoder_done = true;
                entry.chunks.clear();
                self.remove_pinned(entry.bytes);
                entry.bytes = 0;
                if entry.encoder_done {
                    self.unpin_flow(&mut pins, stream);
                }
                drop(pins);
                self.pins_released.notify_waiters();
            }
        }
        Ok(())
    }
}

/// Writes queued control messages, several per write.
async fn write_control(
    mut send: quinn::SendStream,
    mut receiver: mpsc::UnboundedReceiver<Control>,
) {
    // Control messages (a chunk a flow waits for, pins released) go before flow data.
    let _ = send.set_priority(1);
    let mut buffer = BytesMut::new();
    while let Some(message) = receiver.recv().await {
        message.encode(&mut buffer);
        while buffer.len() < 256 << 10 {
            match receiver.try_recv() {
                Ok(message) => message.encode(&mut buffer),
                Err(_) => break,
            }
        }
        if send.write_all(&buffer).await.is_err() {
            return;
        }
        buffer.clear();
    }
}

/// Reads and handles control messages until the stream or connection ends; a protocol
/// error closes the connection.
async fn read_control(session: Arc<Session>, mut recv: quinn::RecvStream) {
    let mut buffer = BytesMut::new();
    loop {
        loop {
            match take_record(&mut buffer) {
                Ok(Some(record)) => {
                    let handled = crate::sans_io::control::Control::decode(record)
                        .map_err(|error| error.to_string())
                        .and_then(|message| session.handle(message));
                    if let Err(error) = handled {
                        tracing::warn!(%error, "tunnel control stream: protocol error");
                        session
                            .connection
                            .close(code::PROTOCOL.into(), b"control protocol error");
                        return;
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%error, "tunnel control stream: protocol error");
                    session
                        .connection
                        .close(code::PROTOCOL.into(), b"control protocol error");
                    return;
                }
            }
        }
        match recv.read_chunk(1 << 20, true).await {
            Ok(Some(chunk)) => buffer.extend_from_slice(&chunk.bytes),
            Ok(None) | Err(_) => return,
        }
    }
}

/// The most literal bytes per block for a link: about 25 ms of it, 16 KiB to 256 KiB (a
/// 256 KiB block would hold its first byte back for 1.4 s on a T1).
fn block_limit(link: &LinkParams) -> usize {
    let bytes = link.bandwidth as f64 / 8.0 * 0.025;
    (bytes as usize).clamp(16 << 10, MAX_BLOCK_PAYLOAD)
}

/// A poisoned lock only means a task panicked mid-update; the maps stay usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
