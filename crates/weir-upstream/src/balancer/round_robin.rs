//! Round robin: every eligible node in turn, equal shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Balancer, nth_eligible};
use crate::node::NodeState;

/// Hands out turns from one atomic counter shared by every thread.
///
/// A turn that lands on an ineligible node is handed on through a second
/// counter that rotates over the eligible nodes only, so with one node of
/// four out the other three keep a third each (a plain "try the next one"
/// would give the down node's neighbour half of all requests).
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicU64,
    handed_on: AtomicU64,
}

impl RoundRobin {
    /// A balancer that starts at the first node.
    pub fn new() -> RoundRobin {
        RoundRobin::default()
    }
}

impl Balancer for RoundRobin {
    fn pick(&self, nodes: &[Arc<NodeState>], eligible: &dyn Fn(usize) -> bool) -> Option<usize> {
        self.pick_tiered(nodes, &[eligible])
    }

    fn pick_tiered(
        &self,
        nodes: &[Arc<NodeState>],
        tiers: &[&dyn Fn(usize) -> bool],
    ) -> Option<usize> {
        let len = nodes.len();
        if len == 0 {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let index = (turn % len as u64) as usize;
        for eligible in tiers {
            if eligible(index) {
                return Some(index);
            }
            // Handed on within the first tier that has a node; a tier without one
            // takes no turn of the second counter either.
            let rank = self.handed_on.load(Ordering::Relaxed);
            if let Some(handed) = nth_eligible(len, eligible, rank) {
                self.handed_on.fetch_add(1, Ordering::Relaxed);
                return Some(handed);
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
