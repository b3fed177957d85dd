//! Least connections: the node with the fewest requests in flight and tunnels open.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Balancer, weight_of};
use crate::node::NodeState;

/// Scans the eligible nodes for the fewest requests in flight plus tunnels open (a node
/// holding long WebSockets is as busy as its connections say, as HAProxy's leastconn
/// counts them).
///
/// Ties go to the node with the lower load for its weight
/// (`in_flight / weight`, so the heavier node when both are busy), then to
/// the first in a scan that starts after the last node picked, so idle nodes
/// share requests in turn instead of node 0 taking them all — and an
/// ineligible node's turn is not handed to the node after it (a scan starting
/// from a rotating index would give that node two turns).
#[derive(Debug, Default)]
pub struct LeastConnections {
    /// The index of the last node picked, plus one (0: none yet).
    after: AtomicU64,
}

/// A candidate's load, compared without division.
#[derive(Debug, Clone, Copy)]
struct Load {
    index: usize,
    in_flight: u32,
    weight: u32,
}

impl LeastConnections {
    /// A balancer whose scan starts at the first node.
    pub fn new() -> LeastConnections {
        LeastConnections::default()
    }
}

impl Load {
    fn is_lighter_than(self, other: Load) -> bool {
        if self.in_flight != other.in_flight {
            return self.in_flight < other.in_flight;
        }
        // in_flight / weight < other.in_flight / other.weight, multiplied out.
        u64::from(self.in_flight) * u64::from(other.weight)
            < u64::from(other.in_flight) * u64::from(self.weight)
    }
}

impl Balancer for LeastConnections {
    fn pick(&self, nodes: &[Arc<NodeState>], eligible: &dyn Fn(usize) -> bool) -> Option<usize> {
        let len = nodes.len();
        if len == 0 {
            return None;
        }
        let start = (self.after.load(Ordering::Relaxed) % len as u64) as usize;
        let mut best: Option<Load> = None;
        for index in (start..len).chain(0..start) {
            if !eligible(index) {
                continue;
            }
            let node = &nodes[index];
            let load = Load {
                index,
                in_flight: node.in_flight() + node.tunnels(),
                weight: weight_of(node),
            };
            if load.in_flight == 0 {
                // Nothing can be lighter, and an idle tie goes to the first in the scan.
                self.after.store(index as u64 + 1, Ordering::Relaxed);
                return Some(index);
            }
            if best.is_none_or(|best| load.is_lighter_than(best)) {
                best = Some(load);
            }
        }
        let picked = best?.index;
        self.after.store(picked as u64 + 1, Ordering::Relaxed);
        Some(picked)
    }
}
