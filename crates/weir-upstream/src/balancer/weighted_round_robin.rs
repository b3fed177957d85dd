//! Weighted round robin: shares in proportion to weight, interleaved.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Balancer, weight_of};
use crate::node::NodeState;

/// Longest schedule built. Weights whose reduced sum is longer are scaled
/// down to fit, which rounds each share to within about 1/4096.
pub const MAX_CYCLE: u64 = 4096;

/// 2^64 divided by the golden ratio: the step of a Weyl sequence, whose
/// successive points spread as evenly as any over an interval.
const GOLDEN_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// Walks a schedule fixed at construction with one atomic counter.
///
/// The schedule is the sequence nginx's smooth weighted round robin produces
/// over one cycle of `sum(weights) / gcd(weights)` turns, computed once, so a
/// pick is a counter increment and an array read. Over every cycle each node
/// gets exactly its weight's share, and a heavy node's turns are spread
/// through the cycle rather than taken in one burst (5:1:1 gives
/// `a a b a c a a`).
///
/// A turn that lands on an ineligible node is handed on to an eligible node
/// chosen in proportion to weight, along a golden-ratio sequence over the
/// eligible nodes' summed weights, so the remaining nodes keep their
/// proportions among themselves.
#[derive(Debug)]
pub struct WeightedRoundRobin {
    /// Node indices, one per turn of a cycle.
    schedule: Box<[u32]>,
    next: AtomicU64,
    handed_on: AtomicU64,
}

impl WeightedRoundRobin {
    /// A balancer for nodes with these weights, by index.
    pub fn new(weights: &[u32]) -> WeightedRoundRobin {
        WeightedRoundRobin {
            schedule: smooth_schedule(&reduced_weights(weights)).into_boxed_slice(),
            next: AtomicU64::new(0),
            handed_on: AtomicU64::new(0),
        }
    }

    /// The node indices of one cycle, in order.
    pub fn schedule(&self) -> &[u32] {
        &self.schedule
    }

    /// Hands a turn to an eligible node with probability proportional to its
    /// weight (deterministically, along the golden-ratio sequence).
    fn hand_on(&self, nodes: &[Arc<NodeState>], eligible: &dyn Fn(usize) -> bool) -> Option<usize> {
        let eligible_weights = || {
            (0..nodes.len())
                .filter(|&index| eligible(index))
                .map(|index| (index, u64::from(weight_of(&nodes[index]))))
        };
        let total: u64 = eligible_weights().map(|(_, weight)| weight).sum();
        if total == 0 {
            return None;
        }
        let turn = self.handed_on.fetch_add(1, Ordering::Relaxed);
        let fraction = turn.wrapping_mul(GOLDEN_STEP);
        let point = ((u128::from(fraction) * u128::from(total)) >> 64) as u64;
        let mut reached = 0;
        let mut last = None;
        for (index, weight) in eligible_weights() {
            reached += weight;
            if point < reached {
                return Some(index);
            }
            last = Some(index);
        }
        // Eligibility changed between the two passes.
        last
    }
}

impl Balancer for WeightedRoundRobin {
    fn pick(&self, nodes: &[Arc<NodeState>], eligible: &dyn Fn(usize) -> bool) -> Option<usize> {
        self.pick_tiered(nodes, &[eligible])
    }

    fn pick_tiered(
        &self,
        nodes: &[Arc<NodeState>],
        tiers: &[&dyn Fn(usize) -> bool],
    ) -> Option<usize> {
        if nodes.is_empty() {
            return None;
        }
        // One turn of the schedule for the whole choice (see `Balancer::pick_tiered`).
        let scheduled = (!self.schedule.is_empty()).then(|| {
            let turn = self.next.fetch_add(1, Ordering::Relaxed);
            self.schedule[(turn % self.schedule.len() as u64) as usize] as usize
        });
        for eligible in tiers {
            if let Some(index) = scheduled.filter(|&index| index < nodes.len() && eligible(index)) {
                return Some(index);
            }
            // `hand_on` takes a turn of its own only when the tier has a node.
            if let Some(index) = self.hand_on(nodes, eligible) {
                return Some(index);
            }
        }
        None
    }

    fn turns(&self) -> Option<u64> {
        Some(self.next.load(Ordering::Relaxed))
    }

    fn carry_on(&self, turns: u64) {
        self.next.store(turns, Ordering::Relaxed);
    }
}

/// Weights divided by their greatest common divisor, after scaling them down
/// to fit [`MAX_CYCLE`] when their sum is longer (each stays at least 1).
fn reduced_weights(weights: &[u32]) -> Vec<u64> {
    let mut weights: Vec<u64> = weights
        .iter()
        .map(|&weight| u64::from(weight.max(1)))
        .collect();
    let total: u64 = weights.iter().sum();
    if total > MAX_CYCLE {
        for weight in &mut weights {
            *weight = ((*weight * MAX_CYCLE + total / 2) / total).max(1);
        }
    }
    let divisor = weights.iter().copied().fold(0, greatest_common_divisor);
    if divisor > 1 {
        for weight in &mut weights {
            *weight /= divisor;
        }
    }
    weights
}

/// One cycle of nginx's smooth weighted round robin: each turn every node's
/// credit grows by its weight, the node with the most credit (the first on a
/// tie) takes the turn and pays the total weight back.
fn smooth_schedule(weights: &[u64]) -> Vec<u32> {
    let total: u64 = weights.iter().sum();
    let mut credit = vec![0i64; weights.len()];
    let mut schedule = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (credit, &weight) in credit.iter_mut().zip(weights) {
            *credit += weight as i64;
        }
        let mut best = 0;
        for index in 1..credit.len() {
            if credit[index] > credit[best] {
                best = index;
            }
        }
        credit[best] -= total as i64;
        schedule.push(best as u32);
    }
    schedule
}

fn greatest_common_divisor(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        greatest_common_divisor(b, a % b)
    }
}
