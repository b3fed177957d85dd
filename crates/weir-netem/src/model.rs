//! The link model of one direction, sans-IO: each packet offered at `now` is lost, dropped by
//! the full queue, or given the exact time it leaves the far end of the link.

use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::loss::{Loss, LossProcess};

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// A link rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rate(NonZeroU64);

/// How much the bottleneck queue holds before it drops arriving packets (drop-tail). The packet
/// being serialised does not count; the packets waiting behind it do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many packets waiting.
    Packets(usize),
    /// At most this many bytes waiting.
    Bytes(u64),
}

/// What one direction of the link does to packets.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionConfig {
    /// The bottleneck rate; `None` serialises instantly.
    pub rate: Option<Rate>,
    /// One-way propagation delay, added after serialisation.
    pub delay: Duration,
    /// Each packet's delay varies uniformly within `delay ± jitter` (never below zero), but a
    /// packet never leaves before the one ahead of it.
    pub jitter: Duration,
    /// Which packets the direction loses, decided before the queue.
    pub loss: Loss,
    /// The bottleneck queue's capacity; packets arriving when it is full are dropped.
    pub queue: QueueLimit,
}

/// The fate of one packet offered to a direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered at `at` on the link's clock; times never decrease from one packet to the next.
    Deliver {
        /// Delivery time on the link's clock (time since the link started).
        at: Duration,
    },
    /// Lost by the loss model (before the queue, so it takes no capacity).
    Lost,
    /// Dropped because the queue was full.
    QueueFull,
}

/// One direction's state: the loss process, the bottleneck queue on a virtual clock, and the
/// delivery time of the last packet (so jitter cannot reorder).
#[derive(Debug)]
pub struct DirectionModel {
    config: DirectionConfig,
    rng: SmallRng,
    loss: LossProcess,
    /// Packets admitted whose serialisation has not ended, oldest first.
    queue: VecDeque<Serialisation>,
    /// Bytes of the packets in `queue`.
    queue_bytes: u64,
    /// When the last admitted packet finishes serialising, in `ScaledTime`.
    busy_until: u128,
    last_delivery: Duration,
}

/// A packet on the virtual clock. Times are "scaled": nanoseconds × bits per second, so a
/// packet of `b` bytes takes exactly `b × 8 × 10⁹` scaled units at any rate and no rounding
/// error accumulates from packet to packet.
#[derive(Debug, Clone, Copy)]
struct Serialisation {
    start: u128,
    end: u128,
    bytes: usize,
}

impl Rate {
    /// A rate of `bits_per_second`, which is never zero.
    pub const fn new(bits_per_second: NonZeroU64) -> Self {
        Rate(bits_per_second)
    }

    /// The rate in bits per second.
    pub const fn bits_per_second(self) -> u64 {
        self.0.get()
    }

    /// The time to serialise `bytes`, rounded up to the nanosecond.
    pub fn transmission_time(self, bytes: usize) -> Duration {
        let scaled = bytes as u128 * 8 * NANOS_PER_SECOND;
        Duration::from_nanos(
            u64::try_from(scaled.div_ceil(self.0.get() as u128)).unwrap_or(u64::MAX),
        )
    }
}

impl Default for DirectionConfig {
    /// A perfect link with a 1,000-packet queue (the default limit of `tc`'s FIFOs).
    fn default() -> Self {
        DirectionConfig {
            rate: None,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: Loss::None,
            queue: QueueLimit::Packets(1000),
        }
    }
}

impl DirectionModel {
    /// A direction whose random choices (loss, jitter) follow `seed`.
    pub fn new(config: DirectionConfig, seed: u64) -> Self {
        DirectionModel {
            loss: LossProcess::new(config.loss),
            config,
            rng: SmallRng::seed_from_u64(seed),
            queue: VecDeque::new(),
            queue_bytes: 0,
            busy_until: 0,
            last_delivery: Duration::ZERO,
        }
    }

    /// The settings this direction was built with.
    pub fn config(&self) -> &DirectionConfig {
        &self.config
    }

    /// Offers a packet of `bytes` arriving at `now` (on the link's clock, which starts at zero
    /// and never goes back).
    pub fn offer(&mut self, now: Duration, bytes: usize) -> Verdict {
        if self.loss.next_is_lost(&mut self.rng) {
            return Verdict::Lost;
        }
        let serialised = match self.config.rate {
            None => now,
            Some(rate) => match self.serialise(now, bytes, rate) {
                Some(end) => end,
                None => return Verdict::QueueFull,
            },
        };
        let at = (serialised + self.propagation_delay()).max(self.last_delivery);
        self.last_delivery = at;
        Verdict::Deliver { at }
    }

    /// Packets and bytes waiting behind the one being serialised at `now` (after `offer`s up
    /// to `now`).
    pub fn backlog(&mut self, now: Duration) -> (usize, u64) {
        match self.config.rate {
            Some(rate) => {
                self.drain(scaled(now, rate));
                self.waiting(scaled(now, rate))
            }
            None => (0, 0),
        }
    }

    /// Puts the packet on the virtual clock: it starts when the link is free (or now), and
    /// ends `bytes × 8 / rate` later. `None` if the queue is full.
    fn serialise(&mut self, now: Duration, bytes: usize, rate: Rate) -> Option<Duration> {
        let now = scaled(now, rate);
        self.drain(now);
        let (packets, waiting_bytes) = self.waiting(now);
        let full = match self.config.queue {
            QueueLimit::Packets(limit) => packets + 1 > limit,
            QueueLimit::Bytes(limit) => waiting_bytes + bytes as u64 > limit,
        };
        // An idle link takes any packet, however small the limit.
        if full && !self.queue.is_empty() {
            return None;
        }
        let start = now.max(self.busy_until);
        let end = start + bytes as u128 * 8 * NANOS_PER_SECOND;
        self.busy_until = end;
        self.queue.push_back(Serialisation { start, end, bytes });
        self.queue_bytes += bytes as u64;
        let nanos = end.div_ceil(rate.bits_per_second() as u128);
        Some(Duration::from_nanos(
            u64::try_from(nanos).unwrap_or(u64::MAX),
        ))
    }

    /// Forgets packets whose serialisation ended by `now`.
    fn drain(&mut self, now: u128) {
        while let Some(front) = self.queue.front().copied() {
            if front.end > now {
                break;
            }
            self.queue.pop_front();
            self.queue_bytes -= front.bytes as u64;
        }
    }

    /// Packets and bytes in the queue at `now`, less the one on the wire.
    fn waiting(&self, now: u128) -> (usize, u64) {
        match self.queue.front() {
            Some(front) if front.start <= now => {
                (self.queue.len() - 1, self.queue_bytes - front.bytes as u64)
            }
            _ => (self.queue.len(), self.queue_bytes),
        }
    }

    /// `delay` plus a uniform sample from `±jitter`, never below zero.
    fn propagation_delay(&mut self) -> Duration {
        if self.config.jitter.is_zero() {
            return self.config.delay;
        }
        let jitter = self.config.jitter.as_nanos() as i128;
        let offset = self.rng.random_range(-jitter..=jitter);
        let nanos = (self.config.delay.as_nanos() as i128 + offset).max(0);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

fn scaled(time: Duration, rate: Rate) -> u128 {
    time.as_nanos() * rate.bits_per_second() as u128
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = self.0.get() as f64;
        let (value, unit) = if bits >= 1e9 {
            (bits / 1e9, "Gbit/s")
        } else if bits >= 1e6 {
            (bits / 1e6, "Mbit/s")
        } else if bits >= 1e3 {
            (bits / 1e3, "kbit/s")
        } else {
            (bits, "bit/s")
        };
        write!(f, "{value} {unit}")
    }
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Packets(packets) => write!(f, "{packets} packets"),
            QueueLimit::Bytes(bytes) => write!(f, "{bytes} bytes"),
        }
    }
}

impl fmt::Display for DirectionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rate {
            Some(rate) => write!(f, "rate {rate}")?,
            None => f.write_str("rate unlimited")?,
        }
        write!(f, ", delay {:?}", self.delay)?;
        if !self.jitter.is_zero() {
            write!(f, " ± {:?}", self.jitter)?;
        }
        write!(f, ", loss {}, queue {}", self.loss, self.queue)
    }
}

#[cfg(test)]
mod tests;
