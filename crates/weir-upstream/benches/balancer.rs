//! `Balancer::pick` for each algorithm over 8 nodes: all eligible, and with
//! two nodes out (the slow paths that hand a turn on).

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use weir_config::{Algorithm, PassiveHealth};
use weir_observe::Metrics;
use weir_upstream::NodeState;
use weir_upstream::balancer::for_algorithm;

const ALGORITHMS: [(&str, Algorithm); 4] = [
    ("round_robin", Algorithm::RoundRobin),
    ("weighted_round_robin", Algorithm::WeightedRoundRobin),
    ("least_connections", Algorithm::LeastConnections),
    ("perceptive", Algorithm::Perceptive),
];

/// Eight nodes with mixed weights, response times and a little load.
fn nodes() -> Vec<Arc<NodeState>> {
    let metrics = Metrics::new();
    (0..8)
        .map(|index| {
            let address = SocketAddr::from(([10, 0, 0, index as u8 + 1], 8080));
            let passive = PassiveHealth {
                consecutive_failures: 5,
                base_ejection: Duration::from_secs(10),
                max_ejection: Duration::from_secs(300),
                max_ejected_percent: 100,
            };
            let node = NodeState::new(
                address,
                1 + index as u32 % 3,
                passive,
                metrics.node("bench", &address.to_string()),
            );
            node.record_response_time(Duration::from_micros(500 + 100 * index as u64));
            Arc::new(node)
        })
        .collect()
}

fn pick(criterion: &mut Criterion) {
    let nodes = nodes();
    // Requests in flight for the whole run, so least connections and
    // perceptive compare real loads.
    let _in_flight: Vec<_> = nodes
        .iter()
        .enumerate()
        .flat_map(|(index, node)| (0..index % 4).map(|_| node.start_request()))
        .collect();
    let now = Instant::now();
    let available = |index: usize| nodes[index].is_available(now);
    let two_out = |index: usize| index != 2 && index != 5 && nodes[index].is_available(now);

    let mut group = criterion.benchmark_group("pick_8_nodes");
    for (name, algorithm) in ALGORITHMS {
        let balancer = for_algorithm(algorithm, &nodes);
        group.bench_function(format!("{name}/all_available"), |bencher| {
            bencher.iter(|| black_box(balancer.pick(black_box(&nodes), &available)))
        });
        group.bench_function(format!("{name}/two_out"), |bencher| {
            bencher.iter(|| black_box(balancer.pick(black_box(&nodes), &two_out)))
        });
    }
    group.finish();
}

criterion_group!(benches, pick);
criterion_main!(benches);
