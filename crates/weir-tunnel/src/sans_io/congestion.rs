//! The loss-tolerant congestion controller (`congestion = "wan"`).
//!
//! A WAN accelerator knows its link: the operator configures the bottleneck rate and the
//! round-trip time, as on Juniper's WX appliances. The window is therefore set from the
//! bandwidth-delay product straight away (no slow start over a 500 ms path) with 25 %
//! headroom for acknowledgement delay and packets lost but not yet declared lost. A loss is
//! treated as congestion only when the path shows a queue: the smoothed RTT is above the
//! minimum by more than the headroom can explain. Random loss on a lossy link then costs
//! only its retransmissions, not half the window as in Reno or CUBIC. When the configured
//! rate is too high, the queue grows, losses count, and the window shrinks by 15 % per
//! round trip until the queue drains; it grows back towards the target after.
//!
//! [`WanWindow`] is the sans-IO core (tested without quinn); `crate::driver::quic` adapts
//! it to quinn's controller trait.

use std::time::{Duration, Instant};

/// Window headroom over the bandwidth-delay product.
pub const GAIN: f64 = 1.25;

/// The share of the window kept after a congestive loss.
pub const BACKOFF: f64 = 0.85;

/// The least window, in packets.
pub const MIN_PACKETS: u64 = 16;

/// Queueing delay always tolerated (timer and scheduling noise on short paths).
pub const QUEUE_SLACK: Duration = Duration::from_millis(10);

/// The controller's state, free of quinn types.
#[derive(Debug, Clone)]
pub struct WanWindow {
    /// Configured bottleneck rate, bytes per second.
    rate: f64,
    /// Configured round-trip time.
    rtt: Duration,
    mtu: u64,
    window: u64,
    min_rtt: Option<Duration>,
    smoothed_rtt: Option<Duration>,
    /// Losses of packets sent before this are part of an episode already answered.
    recovery_start: Option<Instant>,
    /// Congestive losses answered, and losses ignored as random (for tests and metrics).
    pub congestive: u64,
    pub ignored: u64,
}

impl WanWindow {
    pub fn new(bits_per_second: u64, rtt: Duration, mtu: u16) -> WanWindow {
        let mut state = WanWindow {
            rate: bits_per_second as f64 / 8.0,
            rtt,
            mtu: u64::from(mtu),
            window: 0,
            min_rtt: None,
            smoothed_rtt: None,
            recovery_start: None,
            congestive: 0,
            ignored: 0,
        };
        state.window = state.target();
        state
    }

    pub fn window(&self) -> u64 {
        self.window
    }

    /// The window the controller aims for: gain × rate × max(configured, measured RTT).
    pub fn target(&self) -> u64 {
        let rtt = self.min_rtt.map_or(self.rtt, |min| min.max(self.rtt));
        let bdp = self.rate * rtt.as_secs_f64();
        ((bdp * GAIN) as u64).max(self.min_window())
    }

    fn min_window(&self) -> u64 {
        MIN_PACKETS * self.mtu
    }

    /// An RTT sample (smoothed and minimum, as quinn's estimator keeps them) and acknowledged
    /// bytes: the window grows back towards the target by the bytes acknowledged.
    pub fn on_ack(&mut self, bytes: u64, smoothed: Duration, min: Duration) {
        self.smoothed_rtt = Some(smoothed);
        self.min_rtt = Some(self.min_rtt.map_or(min, |known| known.min(min)));
        let target = self.target();
        if self.window < target {
            self.window = (self.window + bytes).min(target);
        } else if self.window > target {
            // The target fell (the path got shorter): follow it.
            self.window = target;
        }
    }

    /// Whether the path holds a queue beyond what the headroom explains.
    pub fn queue_building(&self) -> bool {
        let (Some(smoothed), Some(min)) = (self.smoothed_rtt, self.min_rtt) else {
            return false;
        };
        let allowed = min.mul_f64(GAIN - 1.0 + 0.25) + QUEUE_SLACK;
        smoothed > min + allowed
    }

    /// Packets sent at `sent` were declared lost at `now`.
    pub fn on_loss(&mut self, now: Instant, sent: Instant, persistent: bool) {
        if persistent {
            self.window = self.min_window();
            self.recovery_start = Some(now);
            self.congestive += 1;
            return;
        }
        if self.recovery_start.is_some_and(|start| sent <= start) {
            return;
        }
        if self.queue_building() {
            self.window = ((self.window as f64 * BACKOFF) as u64).max(self.min_window());
            self.recovery_start = Some(now);
            self.congestive += 1;
        } else {
            self.ignored += 1;
        }
    }

    pub fn on_mtu_update(&mut self, mtu: u16) {
        self.mtu = u64::from(mtu);
        self.window = self.window.max(self.min_window());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OC1: u64 = 51_840_000;

    #[test]
    fn starts_at_the_bandwidth_delay_product_with_headroom() {
        let window = WanWindow::new(OC1, Duration::from_millis(500), 1452);
        assert_eq!(window.window(), (51_840_000.0 / 8.0 * 0.5 * GAIN) as u64);
        let short = WanWindow::new(1_544_000, Duration::from_millis(1), 1452);
        assert_eq!(short.window(), MIN_PACKETS * 1452, "never below the floor");
    }

    #[test]
    fn random_loss_without_a_queue_is_ignored() {
        let mut window = WanWindow::new(OC1, Duration::from_millis(500), 1452);
        let start = window.window();
        let now = Instant::now();
        for step in 0..100u64 {
            window.on_ack(1452, Duration::from_millis(560), Duration::from_millis(500));
            let at = now + Duration::from_millis(step * 10);
            window.on_loss(at, at - Duration::from_millis(5), false);
        }
        assert_eq!(window.window(), start);
        assert_eq!((window.congestive, window.ignored), (0, 100));
    }

    #[test]
    fn loss_with_a_queue_backs_off_once_per_episode_then_recovers() {
        let mut window = WanWindow::new(OC1, Duration::from_millis(100), 1452);
        let target = window.window();
        let now = Instant::now();
        // 300 ms of queue on a 100 ms path.
        window.on_ack(1000, Duration::from_millis(400), Duration::from_millis(100));
        assert!(window.queue_building());
        window.on_loss(now, now - Duration::from_millis(1), false);
        let after = window.window();
        assert_eq!(after, (target as f64 * BACKOFF) as u64);
        // Another loss of a packet sent before the reaction: the same episode.
        window.on_loss(
            now + Duration::from_millis(5),
            now - Duration::from_millis(2),
            false,
        );
        assert_eq!(window.window(), after);
        // A later one still with a queue: backs off again.
        window.on_loss(
            now + Duration::from_millis(500),
            now + Duration::from_millis(200),
            false,
        );
        assert!(window.window() < after);
        assert_eq!(window.congestive, 2);
        // The queue drains; acknowledgements grow the window back to the target.
        for _ in 0..2000 {
            window.on_ack(1452, Duration::from_millis(110), Duration::from_millis(100));
        }
        assert_eq!(window.window(), target);
    }

    #[test]
    fn persistent_congestion_drops_to_the_floor() {
        let mut window = WanWindow::new(OC1, Duration::from_millis(100), 1452);
        let now = Instant::now();
        window.on_loss(now, now, true);
        assert_eq!(window.window(), MIN_PACKETS * 1452);
    }

    #[test]
    fn a_longer_measured_path_raises_the_target() {
        let mut window = WanWindow::new(OC1, Duration::from_millis(100), 1452);
        let configured = window.target();
        window.on_ack(1452, Duration::from_millis(210), Duration::from_millis(200));
        assert_eq!(window.target(), (51_840_000.0 / 8.0 * 0.2 * GAIN) as u64);
        assert!(window.target() > configured);
    }
}
