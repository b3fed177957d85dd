//! A small, quick version of `bench/exhaustion`: hundreds of attacking
//! connections of every kind (slowloris, slow POST, slow read, idle
//! upgrades, uploads to a node that stops reading, HEADs to a node that sends
//! late bodies) against a pool of four connections, while legitimate clients
//! send requests. Asserts counts, not speed: no legitimate request fails, and
//! the attack really held its connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use weir_testkit::attack::{self, Attack, AttackPlan};
use weir_testkit::{TestOrigin, TestProxy, client};

async fn node(
    serve: fn(TcpListener) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legitimate_requests_survive_every_attack_at_once() {
    let origin = TestOrigin::start("good").await;
    let stalled = node(|l| Box::pin(attack::stalled_node(l))).await;
    let late = node(|l| Box::pin(attack::late_body_node(l))).await;
    let websocket = node(|l| Box::pin(attack::websocket_node(l))).await;
    let text = format!(
        "[log]\naccess_log = false\nlevel = \"off\"\n\
         [pools.good]\nnodes = [{{ address = \"{}\" }}]\n\
         [pools.good.connections]\nmax_connections = 4\nqueue_timeout = \"2s\"\n\
         [pools.ws]\nnodes = [{{ address = \"{websocket}\" }}]\n\
         [pools.ws.connections]\nmax_connections = 4\nmax_tunnels = 50\n\
         [pools.stalled]\nnodes = [{{ address = \"{stalled}\" }}]\n\
         [pools.stalled.connections]\nmax_connections = 4\nqueue_timeout = \"500ms\"\n\
         [pools.stalled.timeouts]\nwrite = \"1s\"\n\
         [pools.late]\nnodes = [{{ address = \"{late}\" }}]\n\
         [pools.late.connections]\nmax_connections = 4\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"good\"\n\
         [[virtual_servers.web.routes]]\npath_prefix = \"/ws\"\npool = \"ws\"\n\
         [[virtual_servers.web.routes]]\npath_prefix = \"/sink\"\npool = \"stalled\"\n\
         [[virtual_servers.web.routes]]\npath_prefix = \"/late\"\npool = \"late\"\n\
         [virtual_servers.web.limits]\nrequest_buffer = \"1MiB\"\nmax_body_bytes = \"1MiB\"\n\
         response_buffer = \"8MiB\"\nmin_body_rate = \"1KiB\"\n\
         [virtual_servers.web.timeouts]\nheader_read = \"2s\"\nbody_read = \"1s\"\n\
         tunnel_idle = \"2s\"\nwrite = \"2s\"\n",
        origin.addr
    );
    let proxy = TestProxy::start(&text).await;
    let plan = AttackPlan {
        target: proxy.addr,
        per_attack: Attack::ALL.iter().map(|&attack| (attack, 40)).collect(),
        sources: 1,
        ramp: Duration::from_millis(500),
        duration: Duration::from_secs(4),
    };
    let attack = tokio::spawn(attack::run(plan));
    tokio::time::sleep(Duration::from_millis(800)).await;

    // Legitimate clients: 4 at a time, back to back, for 2.5 s.
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (ok, failed, addr) = (Arc::clone(&ok), Arc::clone(&failed), proxy.addr);
        clients.push(tokio::spawn(async move {
            let until = tokio::time::Instant::now() + Duration::from_millis(2500);
            while tokio::time::Instant::now() < until {
                match client::get(addr, "/").await {
                    Ok(response) if response.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let stats = attack.await.unwrap();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let peak = stats.peak.load(Ordering::Relaxed);
    assert_eq!(failed, 0, "legitimate requests failed ({ok} succeeded)");
    assert!(ok >= 20, "only {ok} legitimate requests");
    assert!(
        peak >= 200,
        "the attack held only {peak} connections at once"
    );
    // The attackers' connections were cut by weir's limits, not by the test's end.
    assert!(stats.closed_by_target.load(Ordering::Relaxed) > 0);
    proxy.stop().await;
    origin.stop().await;
}
