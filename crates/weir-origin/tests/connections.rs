//! Wire tests of connection handling: keep-alive, pipelining, HTTP/1.0, the connection cap,
//! idle timeout, counters and shutdown.

mod common;

use std::time::Duration;

use common::{Client, eventually, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_origin::OriginOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    for round in 0..5 {
        let response = client.get(&format!("/bytes/{round}")).await;
        assert_eq!(response.status, 200);
        assert_eq!(response.body.len(), round);
        assert_eq!(response.header("connection"), None);
    }
    assert_eq!(origin.stats.connections_accepted(), 1);
    assert_eq!(origin.stats.requests(), 5);
    client
        .send(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await;
    let last = client.response().await;
    assert_eq!(last.header("connection"), Some("close"));
    client.expect_closed().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    let mut batch = Vec::new();
    let targets = [
        "/status/201",
        "/delay/20",
        "/bytes/40000",
        "/status/202",
        "/echo",
        "/status/203",
    ];
    for target in targets {
        batch.extend_from_slice(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    }
    client.send(&batch).await;
    let statuses = [201, 200, 200, 202, 200, 203];
    for (target, status) in targets.iter().zip(statuses) {
        let response = client.response().await;
        assert_eq!(response.status, status, "answer to {target}");
    }
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_closes_unless_keep_alive_and_never_chunks() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut client = origin.client().await;
    client
        .send(b"GET /bytes/10?chunked=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await;
    let kept = client.response().await;
    assert_eq!(kept.header("connection"), Some("keep-alive"));
    assert_eq!(kept.header("content-length"), Some("10"));
    assert_eq!(kept.header("transfer-encoding"), None);
    client.send(b"GET / HTTP/1.0\r\n\r\n").await;
    let closing = client.response().await;
    assert_eq!(closing.header("connection"), Some("close"));
    client.expect_closed().await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_off_closes_after_each_response() {
    let options = OriginOptions {
        keep_alive: false,
        ..OriginOptions::default()
    };
    let origin = start("alpha", options).await;
    for _ in 0..3 {
        let mut client = origin.client().await;
        // The second, pipelined request is never answered.
        client
            .send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .await;
        let response = client.response().await;
        assert_eq!(response.status, 200);
        assert_eq!(response.header("connection"), Some("close"));
        client.expect_closed().await;
    }
    eventually("connections to close", || {
        origin.stats.connections_open() == 0
    })
    .await;
    assert_eq!(origin.stats.connections_accepted(), 3);
    assert_eq!(origin.stats.requests(), 3);
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_resets_the_connection_past_it() {
    let options = OriginOptions {
        max_connections: Some(2),
        ..OriginOptions::default()
    };
    let origin = start("capped", options).await;
    let mut first = origin.client().await;
    let mut second = origin.client().await;
    assert_eq!(first.get("/").await.status, 200);
    assert_eq!(second.get("/").await.status, 200);

    // The reset may come before the connect completes on our side, or after.
    if let Ok(mut third) = tokio::net::TcpStream::connect(origin.address).await {
        // Written before or after the reset, the request gets no answer: EOF or a reset.
        let _ = third.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
        let mut answer = [0u8; 64];
        let read = tokio::time::timeout(common::PATIENCE, third.read(&mut answer))
            .await
            .expect("refusal in time");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "refused connection answered: {read:?}"
        );
    }
    eventually("the refusal to be counted", || {
        origin.stats.connections_refused() == 1
    })
    .await;
    assert_eq!(origin.stats.connections_accepted(), 2);
    assert_eq!(origin.stats.connections_peak(), 2);

    // Once one closes, a new connection is served again.
    drop(first);
    eventually("a slot to free", || origin.stats.connections_open() == 1).await;
    let mut fourth = origin.client().await;
    assert_eq!(fourth.get("/healthz").await.status, 200);
    assert_eq!(second.get("/healthz").await.status, 200);
    assert_eq!(origin.stats.connections_refused(), 1);
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_agree_with_what_the_clients_did() {
    let origin = start("alpha", OriginOptions::default()).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(origin.client().await);
    }
    for (index, client) in clients.iter_mut().enumerate() {
        for _ in 0..=index {
            client.get("/").await;
        }
    }
    let snapshot = origin.stats.snapshot();
    assert_eq!(snapshot.connections_accepted, 3);
    assert_eq!(snapshot.connections_open, 3);
    assert_eq!(snapshot.connections_peak, 3);
    assert_eq!(snapshot.requests, 6);
    clients.clear();
    eventually("connections to close", || {
        origin.stats.connections_open() == 0
    })
    .await;
    let mut late = origin.client().await;
    late.get("/").await;
    let snapshot = origin.stats.snapshot();
    assert_eq!(snapshot.connections_accepted, 4);
    assert_eq!(snapshot.connections_open, 1);
    assert_eq!(snapshot.connections_peak, 3);
    assert_eq!(snapshot.requests, 7);
    assert_eq!(snapshot.connections_refused, 0);
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_after_the_timeout() {
    let options = OriginOptions {
        idle_timeout: Duration::from_millis(100),
        ..OriginOptions::default()
    };
    let origin = start("alpha", options).await;
    let mut client = origin.client().await;
    assert_eq!(client.get("/").await.status, 200);
    client.expect_closed().await;
    eventually("the connection to close", || {
        origin.stats.connections_open() == 0
    })
    .await;
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_closes_idle_connections() {
    let origin = start("alpha", OriginOptions::default()).await;
    let address = origin.address;
    let stats = origin.stats.clone();
    let mut idle = origin.client().await;
    assert_eq!(idle.get("/").await.status, 200);
    // A request in flight when shutdown begins is still answered, with Connection: close.
    let mut busy = origin.client().await;
    busy.send(b"GET /delay/300 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    eventually("the delayed request to arrive", || stats.requests() == 2).await;
    origin.stop().await;
    let answered = busy.response().await;
    assert_eq!(answered.status, 200);
    assert_eq!(answered.header("connection"), Some("close"));
    idle.expect_closed().await;
    assert_eq!(stats.connections_open(), 0);
    let refused = tokio::net::TcpStream::connect(address).await;
    assert!(refused.is_err(), "listener still open after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_connection_memory_is_held_while_open() {
    let options = OriginOptions {
        per_connection_memory: 1 << 20,
        ..OriginOptions::default()
    };
    let origin = start("alpha", options).await;
    let mut client = Client::connect(origin.address).await;
    assert_eq!(client.get("/").await.status, 200);
    origin.stop().await;
}
