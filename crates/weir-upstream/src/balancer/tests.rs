use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use weir_config::{Algorithm, PassiveHealth};
use weir_observe::Metrics;

use super::*;
use crate::node::{InFlight, NodeState};

const ALL_ALGORITHMS: [Algorithm; 4] = [
    Algorithm::RoundRobin,
    Algorithm::WeightedRoundRobin,
    Algorithm::LeastConnections,
    Algorithm::Perceptive,
];

fn nodes(weights: &[u32]) -> Vec<Arc<NodeState>> {
    let metrics = Metrics::new();
    weights
        .iter()
        .enumerate()
        .map(|(index, &weight)| {
            let address = SocketAddr::from(([127, 0, 0, 1], 8000 + index as u16));
            let passive = PassiveHealth {
                consecutive_failures: 0,
                base_ejection: Duration::from_secs(1),
                max_ejection: Duration::from_secs(10),
                max_ejected_percent: 100,
            };
            let node_metrics = metrics.node("test", &address.to_string());
            Arc::new(NodeState::new(address, weight, passive, node_metrics))
        })
        .collect()
}

fn all(_: usize) -> bool {
    true
}

/// How many of `picks` picks went to each node.
fn counts(
    balancer: &dyn Balancer,
    nodes: &[Arc<NodeState>],
    eligible: &dyn Fn(usize) -> bool,
    picks: usize,
) -> Vec<usize> {
    let mut counts = vec![0; nodes.len()];
    for _ in 0..picks {
        let index = balancer.pick(nodes, eligible).expect("an eligible node");
        assert!(eligible(index), "picked ineligible node {index}");
        counts[index] += 1;
    }
    counts
}

fn share(counts: &[usize], index: usize) -> f64 {
    counts[index] as f64 / counts.iter().sum::<usize>() as f64
}

#[test]
fn every_algorithm_answers_none_without_eligible_nodes() {
    let nodes = nodes(&[1, 2, 3]);
    for algorithm in ALL_ALGORITHMS {
        let balancer = for_algorithm(algorithm, &nodes);
        for _ in 0..10 {
            assert_eq!(balancer.pick(&nodes, &|_| false), None, "{algorithm:?}");
            assert_eq!(balancer.pick(&[], &all), None, "{algorithm:?}");
        }
    }
}

#[test]
fn every_algorithm_picks_only_eligible_nodes() {
    let nodes = nodes(&[3, 1, 2, 5, 1]);
    let eligible = |index: usize| index == 1 || index == 3;
    for algorithm in ALL_ALGORITHMS {
        let balancer = for_algorithm(algorithm, &nodes);
        let counts = counts(&*balancer, &nodes, &eligible, 1000);
        assert!(counts[1] > 0 && counts[3] > 0, "{algorithm:?}: {counts:?}");
    }
}

#[test]
fn every_algorithm_uses_a_lone_eligible_node() {
    let nodes = nodes(&[1, 1, 1, 1]);
    for algorithm in ALL_ALGORITHMS {
        let balancer = for_algorithm(algorithm, &nodes);
        let counts = counts(&*balancer, &nodes, &|index| index == 2, 100);
        assert_eq!(counts, [0, 0, 100, 0], "{algorithm:?}");
    }
}

#[test]
fn round_robin_gives_equal_shares_in_turn() {
    let nodes = nodes(&[1, 5, 1]);
    let balancer = RoundRobin::new();
    let order: Vec<usize> = (0..6)
        .map(|_| balancer.pick(&nodes, &all).unwrap())
        .collect();
    assert_eq!(order, [0, 1, 2, 0, 1, 2]);
    assert_eq!(counts(&balancer, &nodes, &all, 3000), [1000, 1000, 1000]);
}

#[test]
fn round_robin_shares_a_down_nodes_turns_equally() {
    let nodes = nodes(&[1, 1, 1, 1]);
    let balancer = RoundRobin::new();
    let counts = counts(&balancer, &nodes, &|index| index != 1, 3000);
    assert_eq!(counts, [1000, 0, 1000, 1000]);
}

#[test]
fn round_robin_is_exact_across_threads() {
    let nodes = nodes(&[1, 1, 1, 1]);
    let balancer = RoundRobin::new();
    let totals = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| counts(&balancer, &nodes, &all, 10_000)))
            .collect();
        let mut totals = vec![0; 4];
        for worker in workers {
            for (total, count) in totals.iter_mut().zip(worker.join().unwrap()) {
                *total += count;
            }
        }
        totals
    });
    assert_eq!(totals, [10_000; 4]);
}

#[test]
fn weighted_round_robin_is_exact_over_a_cycle() {
    for (weights, cycle) in [
        (&[5, 1, 1][..], 7),
        (&[2, 4, 6][..], 6),
        (&[1, 1, 1, 1][..], 4),
        (&[3, 7][..], 10),
        (&[100, 1][..], 101),
    ] {
        let nodes = nodes(weights);
        let balancer = WeightedRoundRobin::new(weights);
        assert_eq!(balancer.schedule().len(), cycle, "{weights:?}");
        let divisor = weights.iter().copied().fold(0, |a, b| {
            let (mut a, mut b) = (a, b);
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        });
        let expected: Vec<usize> = weights.iter().map(|&w| (w / divisor) as usize).collect();
        // Exact over every cycle, wherever the counter is.
        for _ in 0..3 {
            assert_eq!(
                counts(&balancer, &nodes, &all, cycle),
                expected,
                "{weights:?}"
            );
        }
    }
}

#[test]
fn weighted_round_robin_interleaves_the_heavy_node() {
    let balancer = WeightedRoundRobin::new(&[5, 1, 1]);
    assert_eq!(balancer.schedule(), [0, 0, 1, 0, 2, 0, 0]);
    let balancer = WeightedRoundRobin::new(&[8, 1, 1]);
    assert_eq!(balancer.schedule(), [0, 0, 0, 1, 0, 0, 2, 0, 0, 0]);
    let balancer = WeightedRoundRobin::new(&[1, 1, 20, 1, 1]);
    // Within a cycle the heavy node's 20 turns come in runs of at most 5,
    // where a block schedule would give it 20 in a row.
    let longest_run = balancer
        .schedule()
        .chunk_by(|a, b| a == b)
        .map(|run| run.len())
        .max()
        .unwrap();
    assert!(longest_run <= 5, "{:?}", balancer.schedule());
}

#[test]
fn weighted_round_robin_keeps_proportions_when_nodes_drop_out() {
    let nodes = nodes(&[5, 1, 1]);
    let balancer = WeightedRoundRobin::new(&[5, 1, 1]);
    // The heavy node out: the two light ones split evenly.
    let counts = counts(&balancer, &nodes, &|index| index != 0, 7000);
    assert!((share(&counts, 1) - 0.5).abs() < 0.01, "{counts:?}");

    let nodes = self::nodes(&[4, 2, 1]);
    let balancer = WeightedRoundRobin::new(&[4, 2, 1]);
    // The light one out: 4:2 between the others.
    let counts = self::counts(&balancer, &nodes, &|index| index != 2, 7000);
    assert_eq!(counts[2], 0);
    assert!((share(&counts, 0) - 4.0 / 6.0).abs() < 0.01, "{counts:?}");
}

#[test]
fn weighted_round_robin_scales_huge_weights_to_a_bounded_cycle() {
    let weights = [1_000_003, 999_983, 10_000];
    let nodes = nodes(&weights);
    let balancer = WeightedRoundRobin::new(&weights);
    assert!(balancer.schedule().len() as u64 <= weighted_round_robin::MAX_CYCLE + 3);
    let picks = balancer.schedule().len() * 10;
    let counts = counts(&balancer, &nodes, &all, picks);
    let total: u32 = weights.iter().sum();
    for (index, &weight) in weights.iter().enumerate() {
        let expected = f64::from(weight) / f64::from(total);
        assert!(
            (share(&counts, index) - expected).abs() < 0.001,
            "{counts:?}"
        );
    }
}

#[test]
fn least_connections_prefers_the_least_loaded_node() {
    let nodes = nodes(&[1, 1, 1]);
    let balancer = LeastConnections::new();
    let _busy: Vec<InFlight> = [0, 0, 2]
        .iter()
        .map(|&i| nodes[i].start_request())
        .collect();
    for _ in 0..10 {
        assert_eq!(balancer.pick(&nodes, &all), Some(1));
    }
    // Held requests even the load out: the next picks fill node 1, then all in turn.
    let mut held = Vec::new();
    for _ in 0..30 {
        let index = balancer.pick(&nodes, &all).unwrap();
        held.push(nodes[index].start_request());
    }
    let in_flight: Vec<u32> = nodes.iter().map(|node| node.in_flight()).collect();
    assert_eq!(in_flight, [11, 11, 11]);
    drop(held);
    assert_eq!(balancer.pick(&nodes, &all), Some(1));
}

/// Open tunnels (WebSockets) are load: a node holding them is passed over for one
/// holding none, though neither has a request in flight.
#[test]
fn least_connections_counts_open_tunnels() {
    let nodes = nodes(&[1, 1]);
    let balancer = LeastConnections::new();
    let tunnels: Vec<_> = (0..3)
        .map(|_| nodes[0].start_request().into_tunnel())
        .collect();
    assert_eq!((nodes[0].in_flight(), nodes[0].tunnels()), (0, 3));
    for _ in 0..3 {
        assert_eq!(balancer.pick(&nodes, &all), Some(1));
    }
    drop(tunnels);
    assert_eq!(nodes[0].tunnels(), 0);
}

#[test]
fn least_connections_breaks_ties_by_load_per_weight_then_in_turn() {
    let nodes = nodes(&[1, 3, 1]);
    let balancer = LeastConnections::new();
    let _busy: Vec<InFlight> = nodes.iter().map(|node| node.start_request()).collect();
    for _ in 0..10 {
        assert_eq!(balancer.pick(&nodes, &all), Some(1));
    }
    drop(_busy);
    // Idle: every node in turn, not always node 0.
    assert_eq!(counts(&balancer, &nodes, &all, 300), [100, 100, 100]);
}

/// An ineligible node's share is spread over the others, not handed to the node after it.
#[test]
fn least_connections_spreads_an_ineligible_nodes_share_evenly() {
    let nodes = nodes(&[1, 1, 1, 1]);
    let balancer = LeastConnections::new();
    assert_eq!(
        counts(&balancer, &nodes, &|index| index != 1, 600),
        [200, 0, 200, 200]
    );
}

#[test]
fn least_connections_skips_an_ineligible_idle_node() {
    let nodes = nodes(&[1, 1, 1]);
    let balancer = LeastConnections::new();
    let _busy = [
        nodes[0].start_request(),
        nodes[0].start_request(),
        nodes[2].start_request(),
    ];
    for _ in 0..10 {
        assert_eq!(balancer.pick(&nodes, &|index| index != 1), Some(2));
    }
}

#[test]
fn perceptive_prefers_the_faster_node() {
    let nodes = nodes(&[1, 1]);
    nodes[0].record_response_time(Duration::from_millis(1));
    nodes[1].record_response_time(Duration::from_millis(10));
    let balancer = Perceptive::new();
    let counts = counts(&balancer, &nodes, &all, 10_000);
    // Only exploration reaches the slow node: about 1 pick in 2 × EXPLORE_ONE_IN.
    assert!(share(&counts, 1) < 0.03, "{counts:?}");
    assert!(counts[1] > 0, "the slow node is still probed: {counts:?}");
}

#[test]
fn perceptive_weighs_in_flight_requests_and_weight() {
    let nodes = nodes(&[1, 1, 4]);
    for node in &nodes {
        node.record_response_time(Duration::from_millis(1));
    }
    let balancer = Perceptive::new();
    let _busy: Vec<InFlight> = (0..3).map(|_| nodes[0].start_request()).collect();
    let counts = counts(&balancer, &nodes, &all, 30_000);
    // Scores 4 : 1 : 0.25, so node 2 wins both of its pairings and node 0
    // is reached only by exploration.
    assert!(share(&counts, 2) > 0.6, "{counts:?}");
    assert!(counts[0] < counts[1], "{counts:?}");
}

#[test]
fn perceptive_spreads_over_equal_nodes() {
    let nodes = nodes(&[1, 1, 1, 1]);
    let balancer = Perceptive::new();
    let counts = counts(&balancer, &nodes, &all, 40_000);
    for index in 0..4 {
        assert!((share(&counts, index) - 0.25).abs() < 0.02, "{counts:?}");
    }
}

/// A pool under steady load, in simulated time: the requests in flight, each
/// with when it completes, its latency and its node.
struct Simulation<'a> {
    nodes: &'a [Arc<NodeState>],
    balancer: &'a dyn Balancer,
    now: Duration,
    running: Vec<(Duration, Duration, usize, InFlight)>,
}

impl<'a> Simulation<'a> {
    fn new(nodes: &'a [Arc<NodeState>], balancer: &'a dyn Balancer) -> Simulation<'a> {
        Simulation {
            nodes,
            balancer,
            now: Duration::ZERO,
            running: Vec::new(),
        }
    }

    /// Sends `requests` requests, one every 100 µs, to eligible nodes; each
    /// completes `latency(node)` later, feeding the node's EWMA then.
    /// Returns the picks per node.
    fn run(
        &mut self,
        requests: usize,
        eligible: &dyn Fn(usize) -> bool,
        latency: impl Fn(usize) -> Duration,
    ) -> Vec<usize> {
        let mut counts = vec![0; self.nodes.len()];
        for _ in 0..requests {
            self.now += Duration::from_micros(100);
            let (now, nodes) = (self.now, self.nodes);
            // Dropping a completed request's guard ends it.
            self.running.retain(|&(done_at, took, index, _)| {
                let running = done_at > now;
                if !running {
                    nodes[index].record_response_time(took);
                }
                running
            });
            let index = self.balancer.pick(nodes, eligible).unwrap();
            counts[index] += 1;
            let took = latency(index);
            let guard = nodes[index].start_request();
            self.running.push((now + took, took, index, guard));
        }
        counts
    }
}

#[test]
fn perceptive_moves_load_away_from_a_node_that_turns_slow() {
    let nodes = nodes(&[1, 1, 1]);
    let balancer = Perceptive::new();
    let mut simulation = Simulation::new(&nodes, &balancer);
    let fast = Duration::from_millis(1);
    let before = simulation.run(20_000, &all, |_| fast);
    for index in 0..3 {
        assert!(
            (share(&before, index) - 1.0 / 3.0).abs() < 0.05,
            "{before:?}"
        );
    }
    let after = simulation.run(
        20_000,
        &all,
        |index| if index == 2 { fast * 10 } else { fast },
    );
    assert!(
        share(&after, 2) < 0.10,
        "before {before:?}, after {after:?}"
    );
    // And back once it is fast again: exploration finds out.
    let recovered = simulation.run(20_000, &all, |_| fast);
    assert!(share(&recovered, 2) > 0.25, "{recovered:?}");
}

#[test]
fn perceptive_probes_a_new_node_without_flooding_it() {
    let nodes = nodes(&[1, 1, 1]);
    let balancer = Perceptive::new();
    let fast = Duration::from_millis(1);
    nodes[0].record_response_time(fast);
    nodes[1].record_response_time(fast);
    let mut simulation = Simulation::new(&nodes, &balancer);
    // Load on the old nodes with node 2 out, as if it had just been added.
    simulation.run(1000, &|index| index != 2, |_| fast);
    assert_eq!(nodes[2].response_time(), None);
    let early = simulation.run(30, &all, |_| fast);
    assert!(early[2] > 0, "the new node is probed at once: {early:?}");
    assert!(share(&early, 2) < 0.7, "but not flooded: {early:?}");
}

/// When no node is in the first tier (every node at its cap), the balancers that take
/// turns still spread the choice over all nodes of the next tier: one turn per choice,
/// not one per tier tried (which sent every queued request of an even count of nodes to
/// the same half of them).
#[test]
fn a_choice_over_tiers_takes_one_turn() {
    let nodes = nodes(&[1, 1, 1, 1]);
    let none = |_: usize| false;
    for algorithm in [Algorithm::RoundRobin, Algorithm::WeightedRoundRobin] {
        let balancer = for_algorithm(algorithm, &nodes);
        let mut counts = vec![0; nodes.len()];
        for _ in 0..400 {
            let index = balancer
                .pick_tiered(&nodes, &[&none, &all])
                .expect("a node of the second tier");
            counts[index] += 1;
        }
        assert_eq!(counts, [100; 4], "{algorithm:?}");
        // The first tier still wins when it has a node.
        let only_two = |index: usize| index == 2;
        assert_eq!(balancer.pick_tiered(&nodes, &[&only_two, &all]), Some(2));
    }
}

/// A response time long past weighs less and less: a node that answered slowly once, and
/// so is rarely picked, is not kept out for as long as traffic stays light.
#[test]
fn perceptive_scores_decay_while_a_node_gets_no_samples() {
    let nodes = nodes(&[1, 1]);
    nodes[0].record_response_time(Duration::from_millis(200));
    nodes[1].record_response_time(Duration::from_millis(1));
    let now = std::time::Instant::now();
    let slow = nodes[0].scored_response_time(now).unwrap();
    assert!(slow > 190e6, "{slow}");
    let later = now + crate::node::EWMA_DECAY * 6;
    let decayed = nodes[0].scored_response_time(later).unwrap();
    assert!(decayed < slow / 300.0, "{decayed}");
    // A sample just folded in is not decayed.
    nodes[1].record_response_time(Duration::from_millis(1));
    assert!(
        nodes[1]
            .scored_response_time(std::time::Instant::now())
            .unwrap()
            > 0.9e6
    );
}
