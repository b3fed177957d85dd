//! Load balancing end to end: which node answers, per algorithm.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weir_testkit::client;
use weir_testkit::{TestOrigin, TestProxy};

/// A pool config over `nodes` (address, weight) with `algorithm`.
fn config(nodes: &[(SocketAddr, u32)], algorithm: &str) -> String {
    let nodes: Vec<String> = nodes
        .iter()
        .map(|(address, weight)| format!("{{ address = \"{address}\", weight = {weight} }}"))
        .collect();
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\
         [pools.web]\nalgorithm = \"{algorithm}\"\nnodes = [{}]\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n",
        nodes.join(", ")
    )
}

/// Sends `count` sequential requests to `path` and counts answers by `X-Origin`.
async fn spread(proxy: &TestProxy, count: usize, path: &str) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for _ in 0..count {
        let response = client::get(proxy.addr, path).await.unwrap();
        assert_eq!(response.status, 200);
        let origin = response.header("x-origin").unwrap_or("?").to_string();
        *seen.entry(origin).or_insert(0) += 1;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_alternates() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let proxy = TestProxy::start(&config(&[(a.addr, 1), (b.addr, 1)], "round_robin")).await;
    let seen = spread(&proxy, 10, "/").await;
    assert_eq!((seen["a"], seen["b"]), (5, 5));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_round_robin_follows_weights() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let proxy =
        TestProxy::start(&config(&[(a.addr, 3), (b.addr, 1)], "weighted_round_robin")).await;
    let seen = spread(&proxy, 40, "/").await;
    assert_eq!((seen["a"], seen["b"]), (30, 10));
    proxy.stop().await;
}

/// Least connections: while node a holds a slow request, new ones go to b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_connections_avoids_the_busy_node() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let proxy = TestProxy::start(&config(&[(a.addr, 1), (b.addr, 1)], "least_connections")).await;
    let addr = proxy.addr;
    // Two slow requests: one lands on each node.
    let slow: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { client::get(addr, "/delay/600").await.unwrap() }))
        .collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    // A third slow one: both nodes have one in flight; it lands on either.
    let third = tokio::spawn(async move { client::get(addr, "/delay/600").await.unwrap() });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let busier = proxy.pools[0]
        .nodes
        .iter()
        .enumerate()
        .max_by_key(|(_, node)| node.in_flight())
        .map(|(index, _)| index)
        .unwrap();
    assert_eq!(proxy.pools[0].nodes[busier].in_flight(), 2);
    // Quick requests now all go to the less busy node.
    let seen = spread(&proxy, 6, "/").await;
    let quieter = if busier == 0 { "b" } else { "a" };
    assert_eq!(seen.get(quieter), Some(&6), "{seen:?}");
    for task in slow {
        assert_eq!(task.await.unwrap().status, 200);
    }
    assert_eq!(third.await.unwrap().status, 200);
    assert!(
        proxy.pools[0]
            .nodes
            .iter()
            .all(|node| node.in_flight() == 0)
    );
    proxy.stop().await;
}

/// A node that answers every request after `delay` (keep-alive, `X-Origin: slow`).
async fn slow_node(delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        tokio::time::sleep(delay).await;
                        let answer =
                            b"HTTP/1.1 200 OK\r\nX-Origin: slow\r\nContent-Length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    address
}

/// Perceptive: a node that answers slowly gets little of the traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perceptive_moves_load_away_from_a_slow_node() {
    let fast = TestOrigin::start("fast").await;
    let slow = slow_node(Duration::from_millis(30)).await;
    let proxy = TestProxy::start(&config(&[(fast.addr, 1), (slow, 1)], "perceptive")).await;
    let seen = spread(&proxy, 60, "/").await;
    let slow_share = seen.get("slow").copied().unwrap_or(0);
    assert!(
        slow_share >= 1,
        "the slow node is measured at least once: {seen:?}"
    );
    assert!(
        slow_share <= 10,
        "the slow node gets little traffic: {seen:?}"
    );
    proxy.stop().await;
}

/// Round robin over two nodes capped at one connection each, with no queue: while one
/// node is busy with a long request, every other request goes to the node with room
/// instead of the busy one's (full) queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_passes_over_a_node_at_its_cap() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let toml = config(&[(a.addr, 1), (b.addr, 1)], "round_robin").replace(
        "[virtual_servers.web]",
        "[pools.web.connections]\nmax_connections = 1\nqueue_length = 0\n[virtual_servers.web]",
    );
    let proxy = TestProxy::start(&toml).await;
    let addr = proxy.addr;
    let long = tokio::spawn(async move { client::get(addr, "/delay/1500").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = spread(&proxy, 6, "/").await;
    let busy = long.await.unwrap().unwrap();
    assert_eq!(busy.status, 200);
    let busy = busy.header("x-origin").unwrap().to_owned();
    assert_eq!(
        seen.get(&busy),
        None,
        "requests went to the busy node: {seen:?}"
    );
    assert_eq!(seen.values().sum::<usize>(), 6);
    proxy.stop().await;
}

/// With every node at its cap, a request waits in a queue that has room rather than being
/// refused by a node whose queue is full: here a node of weight 3 would take three of every
/// four requests past its queue of 2 while the other node's queue stood empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_node_at_its_cap_a_queue_with_room_takes_the_request() {
    let (a, b) = (TestOrigin::start("a").await, TestOrigin::start("b").await);
    let toml = config(&[(a.addr, 3), (b.addr, 1)], "round_robin").replace(
        "[virtual_servers.web]",
        "[pools.web.connections]\nmax_connections = 1\nqueue_length = 2\n\
         queue_timeout = \"10s\"\n[virtual_servers.web]",
    );
    let proxy = TestProxy::start(&toml).await;
    let addr = proxy.addr;
    // Six places in all (a connection and two in the queue at each node): six requests.
    let mut requests = Vec::new();
    for _ in 0..6 {
        requests.push(tokio::spawn(async move {
            client::get(addr, "/delay/1000").await
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut seen = HashMap::new();
    for request in requests {
        let response = request.await.unwrap().unwrap();
        assert_eq!(response.status, 200, "{}", response.text());
        let origin = response.header("x-origin").unwrap_or("?").to_string();
        *seen.entry(origin).or_insert(0) += 1;
    }
    assert_eq!(
        seen.values().copied().collect::<Vec<_>>(),
        [3, 3],
        "{seen:?}"
    );
    proxy.stop().await;
}

/// A node that serves one connection at a time (keep-alive) and closes any other while one
/// is open, as a server enforcing its own connection cap does. A connection that comes
/// while the last one is closing (weir closed it, and this node has not read the close
/// yet) gets 100 ms for that close to arrive: weir never held two at once then. Returns
/// its address, the connections it refused and the health checks it answered.
async fn one_connection_node() -> (
    SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (reset, checks) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let busy = Arc::new(AtomicBool::new(false));
    let (reset_count, check_count) = (Arc::clone(&reset), Arc::clone(&checks));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut taken = busy.swap(true, Ordering::AcqRel);
            for _ in 0..20 {
                if !taken {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                taken = busy.swap(true, Ordering::AcqRel);
            }
            if taken {
                reset_count.fetch_add(1, Ordering::SeqCst);
                drop(stream);
                continue;
            }
            let (busy, checks) = (Arc::clone(&busy), Arc::clone(&check_count));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                'serve: loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        if buf[..end].windows(11).any(|w| w == b"weir-health") {
                            checks.fetch_add(1, Ordering::SeqCst);
                        }
                        buf.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if stream.write_all(answer).await.is_err() {
                            break 'serve;
                        }
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                busy.store(false, Ordering::Release);
            });
        }
    });
    (address, reset, checks)
}

/// Health checks count against `max_connections`: at the cap, with the pool's connection
/// idle, a check goes on that connection rather than one past the cap, which a node
/// enforcing its own cap would reset (and the node would be marked down while it served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_stay_within_the_connection_cap() {
    use std::sync::atomic::Ordering;
    let (node, reset, checks) = one_connection_node().await;
    let toml = config(&[(node, 1)], "round_robin").replace(
        "[virtual_servers.web]",
        "[pools.web.connections]\nmax_connections = 1\n\
         [pools.web.health]\ntype = \"http\"\ninterval = \"100ms\"\ntimeout = \"80ms\"\nfall = 2\n\
         [virtual_servers.web]",
    );
    let proxy = TestProxy::start(&toml).await;
    for _ in 0..5 {
        // Each request leaves its connection idle in the pool, at the cap.
        let response = client::get(proxy.addr, "/").await.unwrap();
        assert_eq!(response.status, 200);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(checks.load(Ordering::SeqCst) >= 3, "the monitor checked");
    assert_eq!(
        reset.load(Ordering::SeqCst),
        0,
        "a connection went past the cap"
    );
    proxy.stop().await;
}
