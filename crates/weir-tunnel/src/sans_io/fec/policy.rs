//! When to protect and with how many repairs: the loss estimate built from the peer's
//! reports, and the redundancy a block of a given size needs at that loss.
//!
//! Policy (`[fec] mode`): `off` sends bare QUIC datagrams; `on` protects every block;
//! `auto` frames every datagram (so the peer can count losses) and protects once the
//! estimated loss reaches `min_loss`, until it falls below half of it (hysteresis, so a
//! link near the threshold does not flap). A block of `n` sources gets the fewest repairs
//! `m` for which more than `m` losses among its `n + m` datagrams is at most
//! [`RESIDUAL`] likely at the estimated loss, and never more than `max_overhead` × `n`
//! (at least one).

use std::time::Duration;

use super::wire::{MAX_REPAIRS, MAX_SOURCES};

/// The chance, per block, that the block loses more than it can recover, that the repair
/// count aims for. Anything left over is retransmitted by QUIC as without FEC.
pub const RESIDUAL: f64 = 0.01;

/// Datagrams the estimate must rest on before `auto` trusts it.
pub const MIN_SAMPLE: f64 = 200.0;

/// The estimate forgets half its weight every this many datagrams counted.
const HALF_LIFE: f64 = 2000.0;

/// A report's counts are believed only if they advance by less than this (else the peer
/// restarted its counters, or the report is stale or forged): a new baseline is taken.
const MAX_REPORT_STEP: u32 = 1 << 20;

/// `[fec] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    Auto,
    On,
}

/// The validated `[fec]` table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FecSettings {
    pub mode: Mode,
    /// Most source datagrams per block.
    pub block: usize,
    /// Most repairs per source datagram (a fraction).
    pub max_overhead: f64,
    /// The loss rate (a fraction) at which `auto` starts protecting.
    pub min_loss: f64,
}

/// How long a block may stay open, and the link's rate and round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The configured link rate (bits per second) and round trip: `auto` repairs go out
    /// only into the spare capacity of this rate, and are dropped after a round trip.
    pub bandwidth: u64,
    pub rtt: Duration,
    /// A block closes (and its repairs go out) this long after its first datagram at most.
    pub max_delay: Duration,
    /// A block also closes when no datagram joined it for this long (the sender went quiet:
    /// the tail of a transfer, or an interactive exchange).
    pub idle: Duration,
    /// The link's MTU: no frame this layer sends is larger, so a larger one received is not
    /// one of the peer's (and is not kept).
    pub mtu: u16,
}

/// The loss rate of one direction, from the peer's cumulative reports, decayed per
/// datagram so that it follows a change within a few thousand datagrams.
#[derive(Debug, Clone, Default)]
pub struct LossEstimator {
    last: (u32, u32),
    received: f64,
    lost: f64,
}

impl Default for FecSettings {
    fn default() -> Self {
        FecSettings {
            mode: Mode::Auto,
            block: 32,
            max_overhead: 0.25,
            min_loss: 0.005,
        }
    }
}

impl Timing {
    /// A quarter of the round trip (5 ms to 200 ms) for the age, and four packet times at
    /// the link rate (at least 2 ms) for the quiet gap.
    pub fn for_link(bandwidth: u64, rtt: Duration, mtu: u16) -> Timing {
        let max_delay = (rtt / 4).clamp(Duration::from_millis(5), Duration::from_millis(200));
        let packet = Duration::from_secs_f64(f64::from(mtu) * 8.0 / bandwidth.max(1) as f64);
        let idle = (packet * 4).clamp(Duration::from_millis(2), max_delay);
        Timing {
            bandwidth,
            rtt,
            max_delay,
            idle,
            mtu,
        }
    }
}

impl LossEstimator {
    /// Takes a report's cumulative counts.
    pub fn report(&mut self, received: u32, lost: u32) {
        let step_received = received.wrapping_sub(self.last.0);
        let step_lost = lost.wrapping_sub(self.last.1);
        self.last = (received, lost);
        if step_received >= MAX_REPORT_STEP || step_lost >= MAX_REPORT_STEP {
            return;
        }
        let (step_received, step_lost) = (f64::from(step_received), f64::from(step_lost));
        let decay = 0.5f64.powf((step_received + step_lost) / HALF_LIFE);
        self.received = self.received * decay + step_received;
        self.lost = self.lost * decay + step_lost;
    }

    /// The loss rate, once enough datagrams were counted.
    pub fn estimate(&self) -> Option<f64> {
        let total = self.received + self.lost;
        (total >= MIN_SAMPLE).then(|| self.lost / total)
    }
}

impl FecSettings {
    /// Whether datagrams carry this layer's header at all.
    pub fn frames(&self) -> bool {
        self.mode != Mode::Off
    }

    /// Whether to protect blocks now, given whether we did until now and the estimate.
    pub fn protect(&self, protecting: bool, loss: Option<f64>) -> bool {
        match self.mode {
            Mode::Off => false,
            Mode::On => true,
            Mode::Auto => match loss {
                None => false,
                Some(loss) if protecting => loss >= self.min_loss / 2.0,
                Some(loss) => loss >= self.min_loss,
            },
        }
    }

    /// Repairs for a block of `sources` datagrams at the estimated loss (at least one).
    pub fn repairs(&self, sources: usize, loss: Option<f64>) -> usize {
        let cap = ((sources as f64 * self.max_overhead).round() as usize).clamp(1, MAX_REPAIRS);
        let loss = loss.unwrap_or(self.min_loss).clamp(0.0, 0.5);
        (1..=cap)
            .find(|&repairs| unrecoverable(sources + repairs, repairs, loss) <= RESIDUAL)
            .unwrap_or(cap)
    }

    /// The block size clamped to what the wire can describe.
    pub fn block_size(&self) -> usize {
        self.block.clamp(1, MAX_SOURCES)
    }
}

/// P(more than `repairs` of `total` datagrams lost), each lost with probability `loss`.
pub fn unrecoverable(total: usize, repairs: usize, loss: f64) -> f64 {
    if loss <= 0.0 {
        return 0.0;
    }
    let ratio = loss / (1.0 - loss);
    let mut term = (1.0 - loss).powi(total as i32);
    let mut recoverable = term;
    for lost in 0..repairs.min(total) {
        term *= (total - lost) as f64 / (lost + 1) as f64 * ratio;
        recoverable += term;
    }
    (1.0 - recoverable).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_needs_a_sample_and_follows_reports() {
        let mut estimator = LossEstimator::default();
        estimator.report(99, 1);
        assert_eq!(estimator.estimate(), None);
        estimator.report(990, 10);
        let estimate = estimator.estimate().unwrap();
        assert!((estimate - 0.01).abs() < 0.001, "{estimate}");
        // The loss goes away: the estimate follows within a few half-lives.
        for step in 1..=10u32 {
            estimator.report(990 + step * 1000, 10);
        }
        assert!(estimator.estimate().unwrap() < 0.0005);
    }

    #[test]
    fn a_report_that_jumps_or_goes_back_is_a_new_baseline() {
        let mut estimator = LossEstimator::default();
        estimator.report(1000, 0);
        estimator.report(5, 4_000_000_000);
        estimator.report(1005, 4_000_000_010);
        let estimate = estimator.estimate().unwrap();
        assert!(estimate < 0.01 && estimate > 0.0, "{estimate}");
    }

    #[test]
    fn auto_protects_with_hysteresis() {
        let settings = FecSettings::default();
        assert!(!settings.protect(false, None));
        assert!(!settings.protect(false, Some(0.004)));
        assert!(settings.protect(false, Some(0.005)));
        assert!(settings.protect(true, Some(0.003)));
        assert!(!settings.protect(true, Some(0.002)));
        let on = FecSettings {
            mode: Mode::On,
            ..settings
        };
        assert!(on.protect(false, None));
        let off = FecSettings {
            mode: Mode::Off,
            ..settings
        };
        assert!(!off.protect(true, Some(0.5)));
        assert!(!off.frames());
    }

    #[test]
    fn repairs_grow_with_loss_within_the_overhead_cap() {
        let settings = FecSettings::default();
        assert_eq!(settings.repairs(32, Some(0.0)), 1);
        let at_1 = settings.repairs(32, Some(0.01));
        let at_5 = settings.repairs(32, Some(0.05));
        assert!(at_1 >= 2 && at_1 < at_5, "{at_1} {at_5}");
        assert!(unrecoverable(32 + at_5, at_5, 0.05) <= RESIDUAL);
        assert_eq!(settings.repairs(32, Some(0.5)), 8);
        assert_eq!(settings.repairs(1, Some(0.05)), 1);
    }

    #[test]
    fn the_binomial_tail_is_right() {
        // One loss among two at 50 %: P(both lost) = 0.25.
        assert!((unrecoverable(2, 1, 0.5) - 0.25).abs() < 1e-12);
        assert!((unrecoverable(10, 0, 0.1) - (1.0 - 0.9f64.powi(10))).abs() < 1e-12);
        assert!(unrecoverable(5, 5, 0.3) < 1e-12);
    }

    #[test]
    fn timing_follows_the_link() {
        let oc1 = Timing::for_link(51_840_000, Duration::from_millis(500), 1500);
        assert_eq!(oc1.max_delay, Duration::from_millis(125));
        assert_eq!(oc1.idle, Duration::from_millis(2));
        let t1 = Timing::for_link(1_544_000, Duration::from_millis(500), 1500);
        assert!(t1.idle > Duration::from_millis(30), "{:?}", t1.idle);
        let lan = Timing::for_link(1_000_000_000, Duration::from_millis(1), 1500);
        assert_eq!(lan.max_delay, Duration::from_millis(5));
    }
}
