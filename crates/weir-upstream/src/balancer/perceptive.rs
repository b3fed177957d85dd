//! Perceptive: the power of two choices, scored by response time and load.

use std::sync::Arc;
use std::time::Instant;

use super::{Balancer, nth_eligible, random, weight_of};
use crate::node::NodeState;

/// One pick in this many skips the comparison and takes the first random
/// candidate, so a node whose response time was once bad keeps getting a
/// trickle of requests that can show it has recovered (its EWMA only moves
/// when it answers).
pub const EXPLORE_ONE_IN: u64 = 64;

/// The response time (in nanoseconds) assumed when no eligible node has a sample
/// yet. Only ratios of scores matter, so its value is immaterial while all
/// nodes share it.
const DEFAULT_PRIOR_NANOS: f64 = 1_000_000.0;

/// Draws two distinct eligible nodes at random and keeps the one with the
/// lower score `ewma_response_time × (in_flight + 1) / weight`.
///
/// Comparing two random nodes instead of scanning for the best avoids the
/// herd that a shared "best" node attracts between metric updates, and costs
/// O(1) per pick. A node without samples yet (new, or never answered) is
/// scored with an optimistic prior: the fastest EWMA among the eligible
/// nodes. It is therefore probed at once, and the `in_flight + 1` factor
/// stops it being flooded before its first answers arrive.
#[derive(Debug, Default)]
pub struct Perceptive {}

impl Perceptive {
    /// The balancer; it keeps no state of its own (scores come from the nodes).
    pub fn new() -> Perceptive {
        Perceptive::default()
    }
}

impl Balancer for Perceptive {
    fn pick(&self, nodes: &[Arc<NodeState>], eligible: &dyn Fn(usize) -> bool) -> Option<usize> {
        let len = nodes.len();
        if len == 0 {
            return None;
        }
        let first = random_eligible(len, eligible)?;
        let Some(second) = random_other_eligible(len, eligible, first) else {
            return Some(first);
        };
        if random::next_u64().is_multiple_of(EXPLORE_ONE_IN) {
            return Some(first);
        }
        let now = Instant::now();
        let (first_ewma, second_ewma) = match (
            nodes[first].scored_response_time(now),
            nodes[second].scored_response_time(now),
        ) {
            (Some(a), Some(b)) => (a, b),
            (a, b) => {
                let prior = optimistic_prior(nodes, eligible, now);
                (a.unwrap_or(prior), b.unwrap_or(prior))
            }
        };
        let first_cost = Cost::of(&nodes[first], first_ewma);
        let second_cost = Cost::of(&nodes[second], second_ewma);
        if second_cost.is_lower_than(first_cost) {
            Some(second)
        } else {
            Some(first)
        }
    }
}

/// A uniformly random eligible index.
fn random_eligible(len: usize, eligible: &dyn Fn(usize) -> bool) -> Option<usize> {
    let index = random::below(len);
    if eligible(index) {
        return Some(index);
    }
    nth_eligible(len, eligible, random::next_u64())
}

/// A uniformly random eligible index other than `taken`.
fn random_other_eligible(
    len: usize,
    eligible: &dyn Fn(usize) -> bool,
    taken: usize,
) -> Option<usize> {
    if len < 2 {
        return None;
    }
    let mut index = random::below(len - 1);
    if index >= taken {
        index += 1;
    }
    if eligible(index) {
        return Some(index);
    }
    nth_eligible(
        len,
        &|index| index != taken && eligible(index),
        random::next_u64(),
    )
}

/// The fastest EWMA among eligible nodes with samples, or a default when none has any.
fn optimistic_prior(
    nodes: &[Arc<NodeState>],
    eligible: &dyn Fn(usize) -> bool,
    now: Instant,
) -> f64 {
    (0..nodes.len())
        .filter(|&index| eligible(index))
        .filter_map(|index| nodes[index].scored_response_time(now))
        .reduce(f64::min)
        .unwrap_or(DEFAULT_PRIOR_NANOS)
}

/// A candidate's score `ewma × (in_flight + 1) / weight`, kept as a fraction
/// so that comparing two costs needs no division.
#[derive(Debug, Clone, Copy)]
struct Cost {
    numerator: f64,
    weight: f64,
}

impl Cost {
    fn of(node: &NodeState, ewma_nanos: f64) -> Cost {
        Cost {
            numerator: ewma_nanos * (f64::from(node.in_flight()) + 1.0),
            weight: f64::from(weight_of(node)),
        }
    }

    fn is_lower_than(self, other: Cost) -> bool {
        self.numerator * other.weight < other.numerator * self.weight
    }
}
