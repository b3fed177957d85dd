//! Load balancing behind one small trait: each algorithm chooses a node from
//! atomics and per-thread state only, so a pick never blocks or takes a lock.
//!
//! Every balancer treats the `eligible` predicate as the truth about which
//! nodes may take the request (health, ejection, nodes already tried), and
//! keeps its proportions among the eligible nodes when some drop out: the
//! turns of an ineligible node are handed to the others in proportion to
//! their share, not to whichever node happens to sit next to it.

use std::sync::Arc;

use weir_config::Algorithm;

use crate::node::NodeState;

mod consistent_hash;
mod least_connections;
mod perceptive;
mod random;
mod round_robin;
mod weighted_round_robin;

pub use consistent_hash::ConsistentHash;
pub use least_connections::LeastConnections;
pub use perceptive::Perceptive;
pub use round_robin::RoundRobin;
pub use weighted_round_robin::WeightedRoundRobin;

/// Chooses a node for the next request.
pub trait Balancer: Send + Sync + std::fmt::Debug {
    /// Picks the index of one node among those for which `eligible(index)` is
    /// true, or `None` if there is none. Must not block.
    fn pick(&self, nodes: &[Arc<NodeState>], eligible: &dyn Fn(usize) -> bool) -> Option<usize>;

    /// Picks a node of the first of `tiers` that has one (a pool's nodes with room under
    /// their cap, then those with room in their queue, then any available one). The
    /// balancers that take turns take one for the whole choice: a turn taken per tier
    /// that had no node would make every request that finds the nodes full take two,
    /// and send all of them, with an even count of nodes, to the same half of them.
    fn pick_tiered(
        &self,
        nodes: &[Arc<NodeState>],
        tiers: &[&dyn Fn(usize) -> bool],
    ) -> Option<usize> {
        tiers.iter().find_map(|eligible| self.pick(nodes, eligible))
    }

    /// How far the balancer's turns have gone, for the balancer of the same pool rebuilt by a
    /// reload to carry on from ([`Balancer::carry_on`]). `None` for those that take no turns.
    fn turns(&self) -> Option<u64> {
        None
    }

    /// Carries on from `turns` of the balancer this one replaces, so that a reload (or a
    /// changed DNS answer) does not send the next request to the first node again: with
    /// frequent rebuilds, starting over would give the first nodes more than their share.
    fn carry_on(&self, turns: u64) {
        let _ = turns;
    }
}

/// The balancer for a configured algorithm over these nodes.
pub fn for_algorithm(algorithm: Algorithm, nodes: &[Arc<NodeState>]) -> Box<dyn Balancer> {
    match algorithm {
        Algorithm::RoundRobin => Box::new(RoundRobin::new()),
        Algorithm::WeightedRoundRobin => {
            let weights: Vec<u32> = nodes.iter().map(|node| node.weight()).collect();
            Box::new(WeightedRoundRobin::new(&weights))
        }
        Algorithm::LeastConnections => Box::new(LeastConnections::new()),
        Algorithm::Perceptive => Box::new(Perceptive::new()),
        // Keyed requests go through `Pool::select_by_key` and the pool's
        // `ConsistentHash`; a request without a key is spread in turn.
        Algorithm::ConsistentHash => Box::new(RoundRobin::new()),
    }
}

/// The `rank`-th eligible index of `0..len` (counting from 0), with `rank`
/// taken modulo the number of eligible indices; `None` when none is eligible.
///
/// The slow path shared by the balancers, used only when their first choice
/// is out. Eligibility may change between the counting pass and the choosing
/// pass; the last eligible index seen is the answer then.
fn nth_eligible(len: usize, eligible: &dyn Fn(usize) -> bool, rank: u64) -> Option<usize> {
    let count = (0..len).filter(|&index| eligible(index)).count();
    if count == 0 {
        return None;
    }
    let wanted = (rank % count as u64) as usize;
    let mut last = None;
    for (seen, index) in (0..len).filter(|&index| eligible(index)).enumerate() {
        if seen == wanted {
            return Some(index);
        }
        last = Some(index);
    }
    last
}

/// A node's weight for proportions: the config guarantees it is non-zero, and
/// a zero is read as 1 rather than dividing by it.
fn weight_of(node: &NodeState) -> u32 {
    node.weight().max(1)
}

#[cfg(test)]
mod tests;
