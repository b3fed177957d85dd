//! The link's spare capacity, as this side sees it: a token bucket filled at the configured
//! link rate and emptied by every datagram sent (IP bytes). While QUIC keeps the link busy
//! the bucket stays empty (in debt: what waits in the bottleneck's queue), so `auto` repairs
//! wait; when the sender slows or stops — the tail of a transfer, an interactive exchange —
//! they go out without taking the link from data.
//!
//! Repairs that waited longer than two round trips are dropped: the debt (the queue) is at
//! most a round trip's worth of the link, and a round trip after the data left the queue
//! QUIC has found the loss and retransmitted.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::Outgoing;

/// IPv4 and UDP headers, counted with each datagram.
pub const IP_UDP: usize = 28;

/// The bucket and the repairs waiting for it.
#[derive(Debug)]
pub struct Spare {
    /// Bytes per second of the link.
    rate: f64,
    /// The most the bucket holds (a burst) and the deepest debt it tracks (a queue).
    depth: f64,
    debt_limit: f64,
    lifetime: Duration,
    tokens: f64,
    last: Option<Instant>,
    waiting: VecDeque<(Instant, Outgoing)>,
}

impl Spare {
    /// For a link of `bits_per_second` and round trip `rtt`.
    pub fn new(bits_per_second: u64, rtt: Duration) -> Spare {
        let rate = bits_per_second.max(8) as f64 / 8.0;
        Spare {
            rate,
            depth: (rate * 0.002).max(3000.0),
            debt_limit: (rate * rtt.as_secs_f64()).max(3000.0),
            lifetime: rtt * 2,
            tokens: 0.0,
            last: None,
            waiting: VecDeque::new(),
        }
    }

    /// Counts a datagram of `bytes` (UDP payload) sent now.
    pub fn spend(&mut self, now: Instant, bytes: usize) {
        self.refill(now);
        self.tokens = (self.tokens - (bytes + IP_UDP) as f64).max(-self.debt_limit);
    }

    /// Queues a repair to go out when there is room.
    pub fn defer(&mut self, now: Instant, outgoing: Outgoing) {
        self.waiting.push_back((now, outgoing));
    }

    /// The repairs that fit now, oldest first; repairs past their lifetime are dropped.
    pub fn release(&mut self, now: Instant) -> Vec<Outgoing> {
        self.refill(now);
        while self
            .waiting
            .front()
            .is_some_and(|(queued, _)| now.saturating_duration_since(*queued) > self.lifetime)
        {
            self.waiting.pop_front();
        }
        let mut released = Vec::new();
        while let Some((_, outgoing)) = self.waiting.front() {
            let cost = (outgoing.bytes.len() + IP_UDP) as f64;
            if self.tokens < cost {
                break;
            }
            self.tokens -= cost;
            if let Some((_, outgoing)) = self.waiting.pop_front() {
                released.push(outgoing);
            }
        }
        released
    }

    /// When the oldest waiting repair will fit (or expire).
    pub fn deadline(&self) -> Option<Instant> {
        let (queued, outgoing) = self.waiting.front()?;
        let last = self.last?;
        let missing = (outgoing.bytes.len() + IP_UDP) as f64 - self.tokens;
        let fits = last + Duration::from_secs_f64((missing / self.rate).max(0.0));
        Some(
            fits.min(*queued + self.lifetime)
                .max(last + Duration::from_millis(1)),
        )
    }

    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = self
            .last
            .map_or(Duration::ZERO, |last| now.saturating_duration_since(last));
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.depth);
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    fn repair(bytes: usize) -> Outgoing {
        Outgoing {
            destination: SocketAddr::from(([127, 0, 0, 1], 1)),
            bytes: vec![3; bytes],
            repair: true,
        }
    }

    #[test]
    fn a_busy_link_holds_repairs_back_and_a_quiet_one_lets_them_out() {
        // 12 Mbit/s: 1.5 MB/s, a 1472-byte datagram every ms.
        let mut spare = Spare::new(12_000_000, Duration::from_millis(100));
        let start = Instant::now();
        let mut now = start;
        for _ in 0..50 {
            now += Duration::from_micros(900);
            spare.spend(now, 1472);
            spare.defer(now, repair(1470));
            assert!(spare.release(now).is_empty(), "sent into a busy link");
        }
        // The sender stops: the debt (about 5 ms of queue) is paid, then repairs flow at the
        // link rate, oldest first.
        now += Duration::from_millis(4);
        assert!(spare.release(now).is_empty());
        let deadline = spare.deadline().unwrap();
        assert!(deadline > now);
        let mut released = 0;
        for _ in 0..10 {
            now += Duration::from_millis(1);
            released += spare.release(now).len();
        }
        assert!((7..=9).contains(&released), "{released}");
        // Two round trips later the rest has expired.
        now += Duration::from_millis(200);
        spare.release(now);
        assert_eq!(spare.waiting(), 0);
    }

    #[test]
    fn an_idle_link_sends_at_once() {
        let mut spare = Spare::new(1_544_000, Duration::from_millis(500));
        let now = Instant::now();
        spare.release(now);
        let later = now + Duration::from_millis(50);
        spare.defer(later, repair(100));
        assert_eq!(spare.release(later).len(), 1);
    }
}
