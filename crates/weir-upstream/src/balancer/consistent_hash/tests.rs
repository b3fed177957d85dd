//! Keys moved when nodes come and go (measured and printed), weights, down
//! nodes, and the load bound.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use weir_config::PassiveHealth;
use weir_observe::Metrics;
use weir_rules::stable_hash;

use super::*;

fn node(_position: usize, address: SocketAddr, weight: u32) -> Arc<NodeState> {
    let passive = PassiveHealth {
        consecutive_failures: 0,
        base_ejection: Duration::from_secs(1),
        max_ejection: Duration::from_secs(10),
        max_ejected_percent: 100,
    };
    let metrics = Metrics::new().node("hash", &address.to_string());
    Arc::new(NodeState::new(address, weight, passive, metrics))
}

fn address(number: usize) -> SocketAddr {
    SocketAddr::from((
        [10, 0, (number / 250) as u8, (number % 250) as u8 + 1],
        8080,
    ))
}

/// Nodes with these address numbers, weight 1.
fn pool(numbers: &[usize]) -> Vec<Arc<NodeState>> {
    numbers
        .iter()
        .enumerate()
        .map(|(index, &number)| node(index, address(number), 1))
        .collect()
}

const KEYS: u64 = 100_000;

fn key(index: u64) -> u64 {
    stable_hash(format!("/object/{index}").as_bytes(), 1)
}

/// The address each key lives on.
fn owners(nodes: &[Arc<NodeState>]) -> Vec<SocketAddr> {
    let ring = ConsistentHash::new(nodes, 1.25);
    (0..KEYS)
        .map(|index| nodes[ring.owner(key(index)).unwrap()].address)
        .collect()
}

fn moved(before: &[SocketAddr], after: &[SocketAddr]) -> f64 {
    let moved = before.iter().zip(after).filter(|(a, b)| a != b).count();
    moved as f64 / before.len() as f64
}

#[test]
fn adding_or_removing_one_node_of_n_moves_about_one_nth_of_the_keys() {
    for n in [3usize, 5, 10, 20, 50] {
        let numbers: Vec<usize> = (0..n).collect();
        let before = owners(&pool(&numbers));
        let removed = numbers[n / 2];
        let fewer: Vec<usize> = numbers.iter().copied().filter(|&x| x != removed).collect();
        let after_remove = owners(&pool(&fewer));
        let more: Vec<usize> = numbers.iter().copied().chain([n + 1000]).collect();
        let after_add = owners(&pool(&more));
        let remove_share = moved(&before, &after_remove);
        let add_share = moved(&before, &after_add);
        println!(
            "consistent hash, {KEYS} keys, N = {n}: removing one node moved {:.2} % \
             (1/N = {:.2} %), adding one moved {:.2} % (1/(N+1) = {:.2} %)",
            remove_share * 100.0,
            100.0 / n as f64,
            add_share * 100.0,
            100.0 / (n + 1) as f64,
        );
        assert!(
            remove_share <= 1.0 / n as f64 + 0.02,
            "N = {n}: {remove_share}"
        );
        assert!(add_share <= 1.0 / n as f64 + 0.02, "N = {n}: {add_share}");
        // Only the removed node's keys move; only keys for the new node move.
        let gone = address(removed);
        for (old, new) in before.iter().zip(&after_remove) {
            assert!(old == new || *old == gone);
        }
        for (old, new) in before.iter().zip(&after_add) {
            assert!(old == new || *new == address(n + 1000));
        }
    }
}

#[test]
fn shares_follow_weights() {
    let nodes: Vec<Arc<NodeState>> = [1, 2, 1, 4]
        .iter()
        .enumerate()
        .map(|(index, &weight)| node(index, address(index), weight))
        .collect();
    let ring = ConsistentHash::new(&nodes, 1.25);
    let mut counts = [0u64; 4];
    for index in 0..KEYS {
        counts[ring.owner(key(index)).unwrap()] += 1;
    }
    for (count, weight) in counts.iter().zip([1.0, 2.0, 1.0, 4.0]) {
        let share = *count as f64 / KEYS as f64;
        let expected = weight / 8.0;
        assert!((share - expected).abs() < 0.25 * expected, "{counts:?}");
    }
}

#[test]
fn a_down_node_moves_only_its_own_keys_and_they_come_back() {
    let nodes = pool(&(0..8).collect::<Vec<_>>());
    let ring = ConsistentHash::new(&nodes, 100.0);
    let all = |_: usize| true;
    let without_3 = |index: usize| index != 3;
    for index in 0..10_000 {
        let home = ring.pick_keyed(&nodes, &all, key(index)).unwrap();
        let during = ring.pick_keyed(&nodes, &without_3, key(index)).unwrap();
        assert_ne!(during, 3);
        if home != 3 {
            assert_eq!(during, home, "a key of a healthy node moved");
        }
        assert_eq!(ring.pick_keyed(&nodes, &all, key(index)).unwrap(), home);
    }
    assert_eq!(ring.pick_keyed(&nodes, &|_| false, key(1)), None);
}

#[test]
fn a_loaded_node_hands_keys_on_within_the_bound() {
    let nodes = pool(&[0, 1, 2, 3]);
    let ring = ConsistentHash::new(&nodes, 1.25);
    let all = |_: usize| true;
    // A key whose node already holds every request in flight.
    let hot_key = key(42);
    let home = ring.pick_keyed(&nodes, &all, hot_key).unwrap();
    let held: Vec<_> = (0..8).map(|_| nodes[home].start_request()).collect();
    // Bound: ceil(1.25 × (8 + 1) / 4) = 3 < 9, so the key goes elsewhere.
    let elsewhere = ring.pick_keyed(&nodes, &all, hot_key).unwrap();
    assert_ne!(elsewhere, home);
    drop(held);
    assert_eq!(ring.pick_keyed(&nodes, &all, hot_key).unwrap(), home);
    // Under a steady stream of one hot key, no node exceeds its bound.
    let mut open = Vec::new();
    for _ in 0..100 {
        let index = ring.pick_keyed(&nodes, &all, hot_key).unwrap();
        open.push(nodes[index].start_request());
    }
    let max = nodes.iter().map(|node| node.in_flight()).max().unwrap();
    assert!(
        max <= (1.25f64 * 100.0 / 4.0).ceil() as u32,
        "max in flight {max}"
    );
}
