//! Consistent hashing with bounded loads: a ring of points per node (more
//! for heavier nodes), placed by hashing the node's address, so adding or
//! removing one node of N moves about 1/N of the keys and several weir
//! instances place every key alike. A key goes to the first node clockwise
//! from its hash that is eligible and not over its share of the load: at most
//! `max_load` × its weighted share of the requests in flight (+1), so one hot
//! key cannot bury a node (Mirrokni, Thorup and Zadimoghaddam, "Consistent
//! Hashing with Bounded Loads", 2016).

use std::sync::Arc;

use weir_rules::stable_hash;

use crate::node::NodeState;

/// Ring points per unit of weight: enough that each node's share of the ring
/// is within a few percent of its weight's share.
const POINTS_PER_WEIGHT: u32 = 160;
/// Ring points in all, at most; heavy weights are scaled down to fit.
const MAX_POINTS: u32 = 160_000;
/// Seed that separates ring placement from other uses of the stable hash.
const RING_SEED: u64 = 0x7765_6972_2d72_696e; // "weir-rin"

/// The ring of one pool.
#[derive(Debug)]
pub struct ConsistentHash {
    /// (point, node index), sorted by point.
    ring: Box<[(u64, u32)]>,
    max_load: f64,
}

impl ConsistentHash {
    /// Builds the ring for `nodes` (their addresses place them, their weights
    /// size them). `max_load` ≥ 1.0 bounds a node's load relative to its share.
    pub fn new(nodes: &[Arc<NodeState>], max_load: f64) -> ConsistentHash {
        let total_weight: u64 = nodes
            .iter()
            .map(|node| u64::from(node.weight().max(1)))
            .sum();
        let scale = if total_weight * u64::from(POINTS_PER_WEIGHT) > u64::from(MAX_POINTS) {
            f64::from(MAX_POINTS) / (total_weight as f64 * f64::from(POINTS_PER_WEIGHT))
        } else {
            1.0
        };
        let mut ring = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            let points = ((f64::from(node.weight().max(1) * POINTS_PER_WEIGHT) * scale).round()
                as u32)
                .max(1);
            let name = node.address.to_string();
            for replica in 0..points {
                let label = format!("{name}#{replica}");
                ring.push((stable_hash(label.as_bytes(), RING_SEED), index as u32));
            }
        }
        ring.sort_unstable();
        ConsistentHash {
            ring: ring.into_boxed_slice(),
            max_load: max_load.max(1.0),
        }
    }

    /// The node for a key's hash: the first eligible node clockwise whose
    /// load stays within its bound; `None` when no node is eligible.
    pub fn pick_keyed(
        &self,
        nodes: &[Arc<NodeState>],
        eligible: &dyn Fn(usize) -> bool,
        key: u64,
    ) -> Option<usize> {
        if self.ring.is_empty() {
            return None;
        }
        let bound = LoadBound::new(nodes, eligible, self.max_load)?;
        let start = self.ring.partition_point(|&(point, _)| point < key);
        let mut first_eligible = None;
        for step in 0..self.ring.len() {
            let (_, index) = self.ring[(start + step) % self.ring.len()];
            let index = index as usize;
            if index >= nodes.len() || !eligible(index) {
                continue;
            }
            if bound.admits(&nodes[index]) {
                return Some(index);
            }
            first_eligible.get_or_insert(index);
        }
        // Every eligible node is at its bound (loads moved meanwhile): the
        // key's own node rather than none.
        first_eligible
    }

    /// The node for a key with every node eligible and no load: where keys
    /// live when nothing is wrong (for measuring how keys move).
    pub fn owner(&self, key: u64) -> Option<usize> {
        if self.ring.is_empty() {
            return None;
        }
        let start = self.ring.partition_point(|&(point, _)| point < key);
        Some(self.ring[start % self.ring.len()].1 as usize)
    }
}

/// The most requests in flight a node may have to take one more.
struct LoadBound {
    /// `max_load × (in flight + 1) ÷ total weight`, per unit of weight.
    per_weight: f64,
}

impl LoadBound {
    fn new(
        nodes: &[Arc<NodeState>],
        eligible: &dyn Fn(usize) -> bool,
        max_load: f64,
    ) -> Option<LoadBound> {
        let mut in_flight = 0u64;
        let mut weight = 0u64;
        for (index, node) in nodes.iter().enumerate() {
            if eligible(index) {
                in_flight += u64::from(node.in_flight());
                weight += u64::from(node.weight().max(1));
            }
        }
        (weight > 0).then(|| LoadBound {
            per_weight: max_load * (in_flight + 1) as f64 / weight as f64,
        })
    }

    fn admits(&self, node: &NodeState) -> bool {
        let capacity = (self.per_weight * f64::from(node.weight().max(1))).ceil();
        f64::from(node.in_flight()) + 1.0 <= capacity
    }
}

#[cfg(test)]
mod tests;
