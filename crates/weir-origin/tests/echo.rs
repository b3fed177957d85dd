//! Echo mode (`weir origin --echo`): raw TCP echo with the same cap, counters and shutdown as
//! the HTTP origin.

mod common;

use std::time::Duration;

use common::{PATIENCE, eventually, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_origin::{OriginMode, OriginOptions};

fn echo(options: OriginOptions) -> OriginOptions {
    OriginOptions {
        mode: OriginMode::Echo,
        ..options
    }
}

async fn read_exactly(stream: &mut TcpStream, length: usize) -> Vec<u8> {
    let mut data = vec![0u8; length];
    tokio::time::timeout(PATIENCE, stream.read_exact(&mut data))
        .await
        .expect("echo in time")
        .expect("echo read");
    data
}

async fn read_eof(stream: &mut TcpStream) -> Vec<u8> {
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut rest))
        .await
        .expect("EOF in time")
        .expect("read to EOF");
    rest
}

#[test]
fn echo_is_off_by_default() {
    assert_eq!(OriginOptions::default().mode, OriginMode::Http);
    let named = OriginOptions::new("n", "127.0.0.1:0".parse().unwrap());
    assert_eq!(named.mode, OriginMode::Http);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_comes_back_and_is_counted() {
    let origin = start("echo", echo(OriginOptions::default())).await;
    let mut client = TcpStream::connect(origin.address).await.expect("connect");
    // Small exchanges on one connection, then one larger than any socket buffer, written
    // while it is read back.
    for round in 1..=5usize {
        let message = vec![round as u8; round * 10];
        client.write_all(&message).await.expect("send");
        assert_eq!(read_exactly(&mut client, message.len()).await, message);
    }
    let large: Vec<u8> = (0..3_000_000u32).map(|index| (index % 251) as u8).collect();
    let (mut reader, mut writer) = client.split();
    let (written, echoed) = tokio::join!(writer.write_all(&large), async {
        let mut data = vec![0u8; large.len()];
        reader.read_exact(&mut data).await.map(|_| data)
    });
    written.expect("send large");
    assert!(echoed.expect("large echo") == large, "large echo differs");
    // HTTP is not spoken: a request comes back as it was sent.
    client
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .await
        .expect("send");
    assert_eq!(
        read_exactly(&mut client, 18).await,
        b"GET / HTTP/1.1\r\n\r\n"
    );
    // Closing our side is answered with FIN.
    client.shutdown().await.expect("FIN");
    assert!(read_eof(&mut client).await.is_empty());

    let expected = 150 + large.len() as u64 + 18;
    eventually("the echoed bytes to be counted", || {
        origin.stats.bytes_echoed() == expected && origin.stats.connections_open() == 0
    })
    .await;
    let stats = origin.stats.snapshot();
    assert_eq!(stats.connections_accepted, 1);
    assert_eq!(stats.connections_peak, 1);
    assert_eq!(stats.requests, 0);
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_refuses_past_it_and_counters_track_connections() {
    let origin = start(
        "echo",
        echo(OriginOptions {
            max_connections: Some(2),
            ..OriginOptions::default()
        }),
    )
    .await;
    let mut first = TcpStream::connect(origin.address).await.expect("connect");
    let mut second = TcpStream::connect(origin.address).await.expect("connect");
    for client in [&mut first, &mut second] {
        client.write_all(b"hi").await.expect("send");
        assert_eq!(read_exactly(client, 2).await, b"hi");
    }
    if let Ok(mut third) = TcpStream::connect(origin.address).await {
        let _ = third.write_all(b"hello").await;
        let mut answer = [0u8; 8];
        let read = tokio::time::timeout(PATIENCE, third.read(&mut answer))
            .await
            .expect("refusal in time");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "refused but echoed: {read:?}"
        );
    }
    eventually("the refusal to be counted", || {
        origin.stats.connections_refused() == 1
    })
    .await;
    let stats = origin.stats.snapshot();
    assert_eq!(
        (
            stats.connections_accepted,
            stats.connections_open,
            stats.connections_peak
        ),
        (2, 2, 2)
    );
    drop(first);
    drop(second);
    eventually("connections to close", || {
        origin.stats.connections_open() == 0
    })
    .await;
    assert_eq!(origin.stats.bytes_echoed(), 4);
    origin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_close_and_shutdown_closes_the_rest() {
    let origin = start(
        "echo",
        echo(OriginOptions {
            idle_timeout: Duration::from_millis(200),
            ..OriginOptions::default()
        }),
    )
    .await;
    let mut idle = TcpStream::connect(origin.address).await.expect("connect");
    assert!(
        read_eof(&mut idle).await.is_empty(),
        "idle connection closed"
    );

    let origin = {
        let options = echo(OriginOptions::default());
        origin.stop().await;
        start("echo", options).await
    };
    let mut busy = TcpStream::connect(origin.address).await.expect("connect");
    busy.write_all(b"x").await.expect("send");
    assert_eq!(read_exactly(&mut busy, 1).await, b"x");
    origin.shutdown.trigger();
    // Shutdown closes the connection (FIN) and `run` returns well within the drain grace.
    assert!(read_eof(&mut busy).await.is_empty());
    tokio::time::timeout(Duration::from_secs(2), origin.server)
        .await
        .expect("origin stops promptly")
        .expect("origin task")
        .expect("origin run");
}
