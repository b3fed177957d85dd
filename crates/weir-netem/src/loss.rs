//! Loss models: none, Bernoulli (independent) and Gilbert-Elliott (bursty, two states).

use std::fmt;

use rand::Rng;

/// A probability in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Probability(f64);

/// Which packets a direction loses.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Loss {
    /// Every packet gets through.
    #[default]
    None,
    /// Each packet is lost independently with this probability.
    Bernoulli(Probability),
    /// Bursty loss from a two-state Markov chain.
    GilbertElliott(GilbertElliott),
}

/// The Gilbert-Elliott channel: a good and a bad state; per packet, a packet is lost with
/// probability `1 - k` in the good state and `1 - h` in the bad state, then the channel moves
/// good → bad with probability `p` and bad → good with probability `r`.
///
/// The names are those of the literature (and of `tc-netem`'s `gemodel`, which takes
/// `p r 1-h 1-k`: there the last two are loss probabilities, here `h` and `k` are the
/// probabilities that a packet gets through).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Good → bad transition probability per packet.
    pub p: f64,
    /// Bad → good transition probability per packet.
    pub r: f64,
    /// Probability that a packet gets through in the bad state.
    pub h: f64,
    /// Probability that a packet gets through in the good state.
    pub k: f64,
}

/// A loss model with its state (the Gilbert-Elliott channel's current state).
#[derive(Debug, Clone)]
pub(crate) struct LossProcess {
    model: Loss,
    bad: bool,
}

impl Probability {
    /// `None` unless `value` is within `0.0..=1.0`.
    pub fn new(value: f64) -> Option<Self> {
        (0.0..=1.0).contains(&value).then_some(Probability(value))
    }

    /// The probability as a fraction in `0.0..=1.0`.
    pub fn value(self) -> f64 {
        self.0
    }
}

impl Loss {
    /// The long-run fraction of packets lost.
    pub fn expected_rate(&self) -> f64 {
        match self {
            Loss::None => 0.0,
            Loss::Bernoulli(probability) => probability.value(),
            Loss::GilbertElliott(model) => model.stationary_loss(),
        }
    }
}

impl GilbertElliott {
    /// The stationary probability of the bad state, `p / (p + r)` (0 when the chain never
    /// leaves the good state it starts in).
    pub fn stationary_bad(&self) -> f64 {
        if self.p + self.r == 0.0 {
            0.0
        } else {
            self.p / (self.p + self.r)
        }
    }

    /// The long-run loss rate, `π_G (1 - k) + π_B (1 - h)`.
    pub fn stationary_loss(&self) -> f64 {
        let bad = self.stationary_bad();
        (1.0 - bad) * (1.0 - self.k) + bad * (1.0 - self.h)
    }
}

impl LossProcess {
    /// Starts in the good state.
    pub(crate) fn new(model: Loss) -> Self {
        LossProcess { model, bad: false }
    }

    /// Whether the next packet is lost.
    pub(crate) fn next_is_lost(&mut self, rng: &mut impl Rng) -> bool {
        match self.model {
            Loss::None => false,
            Loss::Bernoulli(probability) => rng.random_bool(probability.value()),
            Loss::GilbertElliott(model) => {
                let delivery = if self.bad { model.h } else { model.k };
                let lost = !rng.random_bool(delivery);
                let leave = if self.bad { model.r } else { model.p };
                if rng.random_bool(leave) {
                    self.bad = !self.bad;
                }
                lost
            }
        }
    }
}

impl fmt::Display for Probability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.0 * 100.0)
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::None => f.write_str("none"),
            Loss::Bernoulli(probability) => write!(f, "{probability}"),
            Loss::GilbertElliott(model) => write!(
                f,
                "gilbert-elliott p={}% r={}% h={}% k={}% (long-run {:.4}%)",
                model.p * 100.0,
                model.r * 100.0,
                model.h * 100.0,
                model.k * 100.0,
                model.stationary_loss() * 100.0
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    /// Losses in `count` packets.
    fn losses(model: Loss, count: usize, seed: u64) -> usize {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut process = LossProcess::new(model);
        (0..count)
            .filter(|_| process.next_is_lost(&mut rng))
            .count()
    }

    #[test]
    fn bernoulli_rate_is_within_binomial_tolerance() {
        let count = 200_000;
        for (p, seed) in [(0.01, 1), (0.05, 2), (0.5, 3)] {
            let lost = losses(Loss::Bernoulli(Probability::new(p).unwrap()), count, seed);
            let measured = lost as f64 / count as f64;
            let sigma = (p * (1.0 - p) / count as f64).sqrt();
            assert!(
                (measured - p).abs() < 4.0 * sigma,
                "p={p}: measured {measured}, 4σ = {}",
                4.0 * sigma
            );
        }
    }

    #[test]
    fn no_loss_and_certain_loss_are_exact() {
        assert_eq!(losses(Loss::None, 10_000, 1), 0);
        assert_eq!(
            losses(Loss::Bernoulli(Probability::new(1.0).unwrap()), 10_000, 1),
            10_000
        );
        assert_eq!(
            losses(Loss::Bernoulli(Probability::new(0.0).unwrap()), 10_000, 1),
            0
        );
    }

    #[test]
    fn gilbert_elliott_long_run_rate_matches_the_stationary_formula() {
        let count = 2_000_000;
        let cases = [
            GilbertElliott {
                p: 0.01,
                r: 0.1,
                h: 0.2,
                k: 0.99,
            },
            GilbertElliott {
                p: 0.05,
                r: 0.5,
                h: 0.0,
                k: 1.0,
            },
        ];
        for (seed, model) in cases.into_iter().enumerate() {
            let expected = model.stationary_loss();
            let lost = losses(Loss::GilbertElliott(model), count, seed as u64);
            let measured = lost as f64 / count as f64;
            // Losses are correlated, so the tolerance is wider than a binomial one: 3 % of
            // the rate is many standard deviations for two million packets and these bursts.
            assert!(
                (measured - expected).abs() < 0.03 * expected,
                "{model:?}: measured {measured}, expected {expected}"
            );
        }
    }

    #[test]
    fn gilbert_losses_come_in_bursts_of_mean_length_one_over_r() {
        // Gilbert's model (h = 0, k = 1): every packet in the bad state is lost, and a bad
        // spell lasts 1/r packets on average.
        let model = GilbertElliott {
            p: 0.02,
            r: 0.25,
            h: 0.0,
            k: 1.0,
        };
        let mut rng = SmallRng::seed_from_u64(7);
        let mut process = LossProcess::new(Loss::GilbertElliott(model));
        let (mut bursts, mut lost, mut previous) = (0usize, 0usize, false);
        for _ in 0..1_000_000 {
            let now = process.next_is_lost(&mut rng);
            if now && !previous {
                bursts += 1;
            }
            lost += usize::from(now);
            previous = now;
        }
        let mean_burst = lost as f64 / bursts as f64;
        assert!(
            (mean_burst - 1.0 / model.r).abs() < 0.1,
            "mean burst {mean_burst}, expected {}",
            1.0 / model.r
        );
    }
}
