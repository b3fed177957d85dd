//! Adaptive forward error correction below QUIC: a UDP socket wrapper (the driver,
//! `crate::driver::fec_socket`) numbers outgoing datagrams, adds Reed-Solomon repair
//! datagrams to blocks of them while the link loses packets, and on the other side rebuilds
//! lost datagrams and passes them up, so that QUIC sees fewer losses and waits for fewer
//! retransmissions.
//!
//! The sans-IO core is [`FecCore`]: per peer address a [`sender::Sender`] (numbering,
//! blocks, repairs) and a [`receiver::Receiver`] (loss counting, recovery), and the
//! [`policy`] (loss estimate, when to protect, how many repairs). Loss is measured by the
//! receiver from this layer's own sequence numbers and reported back (`report` frames), so
//! it is the link's loss before repair, whatever FEC already fixed. Frames: [`wire`].
//!
//! Why and what it costs: `docs/design/tunnel.md`, "Forward error correction".

pub mod policy;
pub mod receiver;
pub mod sender;
pub mod spare;
pub mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub use policy::{FecSettings, Mode, Timing};

use receiver::Receiver;
use sender::{Repairs, Sender};
use spare::Spare;
use wire::Frame;

/// Peers tracked at once; past it the one heard from longest ago is forgotten.
const MAX_PEERS: usize = 64;
/// A peer heard nothing from for this long is forgotten: far longer than any tunnel's
/// keep-alive (a live QUIC connection is never that quiet), so only what strangers sent,
/// or a connection that is gone, is dropped.
const PEER_IDLE: Duration = Duration::from_secs(120);
/// Repairs and reports waiting for the socket; past it new ones are dropped.
const MAX_OUTBOX: usize = 4096;

/// The FEC state of one socket.
#[derive(Debug)]
pub struct FecCore {
    settings: FecSettings,
    timing: Timing,
    peers: HashMap<SocketAddr, Peer>,
    outbox: Vec<Outgoing>,
    spare: Spare,
    counters: Counters,
}

/// A datagram this layer sends on its own: a repair or a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub destination: SocketAddr,
    pub bytes: Vec<u8>,
    pub repair: bool,
}

/// What happened since the counters were last taken.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Lost datagrams rebuilt from repairs and passed up.
    pub recovered: u64,
    /// Datagrams that were not valid frames (dropped).
    pub malformed: u64,
    /// The latest loss estimate from a peer's reports, in parts per million.
    pub loss_ppm: Option<u64>,
}

#[derive(Debug)]
struct Peer {
    sender: Sender,
    receiver: Receiver,
    last_seen: Instant,
}

impl FecCore {
    pub fn new(settings: FecSettings, timing: Timing) -> FecCore {
        FecCore {
            settings,
            timing,
            peers: HashMap::new(),
            outbox: Vec::new(),
            spare: Spare::new(timing.bandwidth, timing.rtt),
            counters: Counters::default(),
        }
    }

    /// Frames the datagrams of one transmit to `destination` into `out` and returns the
    /// framed segment size, or `None` when they go out bare (`mode = "off"`). Changes
    /// nothing: call [`FecCore::commit`] once they were sent.
    pub fn frame(
        &mut self,
        now: Instant,
        destination: SocketAddr,
        contents: &[u8],
        segment: usize,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        if !self.settings.frames() {
            return None;
        }
        Some(
            self.peer(now, destination)
                .sender
                .frame(contents, segment, out),
        )
    }

    /// Records a framed transmit as sent; a block it fills queues its repairs.
    pub fn commit(
        &mut self,
        now: Instant,
        destination: SocketAddr,
        contents: &[u8],
        segment: usize,
    ) {
        let settings = self.settings;
        let repairs = self
            .peer(now, destination)
            .sender
            .commit(now, contents, segment, &settings);
        for datagram in contents.chunks(segment.max(1)) {
            self.spare.spend(now, datagram.len() + wire::DATA_HEADER);
        }
        self.queue(now, destination, repairs);
    }

    /// Counts a bare datagram sent (`mode = "off"`), for the spare capacity.
    pub fn sent_bare(&mut self, now: Instant, bytes: usize) {
        self.spare.spend(now, bytes);
    }

    /// Takes one received datagram: `deliver` gets every QUIC datagram it yields (itself,
    /// unframed, and any it completed the recovery of).
    pub fn receive(
        &mut self,
        now: Instant,
        source: SocketAddr,
        datagram: &[u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) {
        let frame = match wire::parse(datagram) {
            Ok(Frame::Bare(bare)) => return deliver(bare),
            // Larger than the link carries: not a frame the peer sent (QUIC's packets are
            // sized for the link, `quic.rs`), and never kept.
            Ok(_) if datagram.len() > usize::from(self.timing.mtu) => {
                self.counters.malformed += 1;
                return;
            }
            Ok(frame) => frame,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        let settings = self.settings;
        let mut recovered = Vec::new();
        let peer = self.peer(now, source);
        peer.last_seen = now;
        let mut repairs = Repairs::default();
        match frame {
            Frame::Data {
                seq,
                protected,
                payload,
            } => {
                peer.receiver.data(seq, protected, payload, &mut recovered);
                deliver(payload);
            }
            Frame::Repair {
                block,
                index,
                shard,
            } => peer.receiver.repair(block, index, shard, &mut recovered),
            // A report about frames this side never sent to that address is not the
            // peer's (anyone can send one): it changes neither repairs nor the gauge.
            Frame::Report { received, lost } if peer.sender.has_sent() => {
                repairs = peer.sender.report(received, lost, &settings);
                let estimate = peer.sender.estimator.estimate();
                self.counters.loss_ppm = estimate.map(|loss| (loss * 1e6) as u64);
            }
            Frame::Report { .. } => {}
            Frame::Bare(_) => {}
        }
        let report = self
            .peers
            .get_mut(&source)
            .and_then(|peer| peer.receiver.report(now));
        if let Some(bytes) = report {
            self.push(now, destination_report(source, bytes));
        }
        self.queue(now, source, repairs);
        self.counters.recovered += recovered.len() as u64;
        for datagram in &recovered {
            deliver(datagram);
        }
    }

    /// Closes blocks that are old or quiet, sends reports that are due, and lets out the
    /// repairs that now fit the link's spare capacity.
    pub fn poll(&mut self, now: Instant) {
        self.peers
            .retain(|_, peer| now.saturating_duration_since(peer.last_seen) < PEER_IDLE);
        let (settings, timing) = (self.settings, self.timing);
        let mut reports = Vec::new();
        let mut closed = Vec::new();
        for (&address, peer) in &mut self.peers {
            closed.push((address, peer.sender.poll(now, &settings, &timing)));
            if let Some(bytes) = peer.receiver.report(now) {
                reports.push(destination_report(address, bytes));
            }
        }
        for outgoing in reports {
            self.push(now, outgoing);
        }
        for (address, repairs) in closed {
            self.queue(now, address, repairs);
        }
        for outgoing in self.spare.release(now) {
            self.push(now, outgoing);
        }
    }

    /// When [`FecCore::poll`] next has something to do.
    pub fn deadline(&self) -> Option<Instant> {
        self.peers
            .values()
            .flat_map(|peer| {
                [
                    peer.sender.deadline(&self.timing),
                    peer.receiver.report_deadline(),
                    Some(peer.last_seen + PEER_IDLE),
                ]
            })
            .chain([self.spare.deadline()])
            .flatten()
            .min()
    }

    /// The repairs and reports to send now.
    pub fn take_outgoing(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.outbox)
    }

    /// The counters since the last call (the loss estimate is the latest).
    pub fn take_counters(&mut self) -> Counters {
        let loss_ppm = self.counters.loss_ppm;
        let counters = std::mem::take(&mut self.counters);
        self.counters.loss_ppm = loss_ppm;
        counters
    }

    fn peer(&mut self, now: Instant, address: SocketAddr) -> &mut Peer {
        if !self.peers.contains_key(&address) && self.peers.len() >= MAX_PEERS {
            let oldest = self
                .peers
                .iter()
                .min_by_key(|(_, peer)| peer.last_seen)
                .map(|(address, _)| *address);
            if let Some(oldest) = oldest {
                self.peers.remove(&oldest);
            }
        }
        let settings = self.settings;
        self.peers.entry(address).or_insert_with(|| {
            let mut sender = Sender::default();
            // Decides "on" mode's protection before the first datagram (nothing to close).
            let _ = sender.update(&settings);
            Peer {
                sender,
                receiver: Receiver::default(),
                last_seen: now,
            }
        })
    }

    /// Repairs go out at once with `mode = "on"`; with `auto` they wait for spare capacity.
    fn queue(&mut self, now: Instant, destination: SocketAddr, repairs: Repairs) {
        for bytes in repairs.frames {
            let outgoing = Outgoing {
                destination,
                bytes,
                repair: true,
            };
            if self.settings.mode == Mode::On {
                self.push(now, outgoing);
            } else {
                self.spare.defer(now, outgoing);
            }
        }
        if self.settings.mode != Mode::On {
            for outgoing in self.spare.release(now) {
                self.push(now, outgoing);
            }
        }
    }

    fn push(&mut self, now: Instant, outgoing: Outgoing) {
        if self.outbox.len() < MAX_OUTBOX {
            self.spare.spend(now, outgoing.bytes.len());
            self.outbox.push(outgoing);
        }
    }
}

/// An encoder or decoder kept between blocks to reuse its memory (the library's types do
/// not implement `Debug`).
pub struct Reused<T>(pub Option<T>);

impl<T> Default for Reused<T> {
    fn default() -> Self {
        Reused(None)
    }
}

impl<T> std::fmt::Debug for Reused<T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(if self.0.is_some() {
            "Reused(..)"
        } else {
            "Reused(None)"
        })
    }
}

fn destination_report(destination: SocketAddr, bytes: Vec<u8>) -> Outgoing {
    Outgoing {
        destination,
        bytes,
        repair: false,
    }
}

#[cfg(test)]
mod tests;
