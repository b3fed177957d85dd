//! Both relays against the same behaviours, on loopback sockets.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::*;

/// A connected pair: (the far end, the end weir holds).
async fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let far = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (near, _) = listener.accept().await.unwrap();
    (far, near)
}

/// The three relays: the generic buffered one, the plain-TCP buffered one, splice.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Generic,
    Tcp,
    Adaptive,
    Splice,
}

/// A client and a node, with one relay between them running in its own task; small
/// buffers and pipes, so that every transfer takes many steps.
async fn session(kind: Kind, idle: Duration) -> (TcpStream, TcpStream, JoinHandle<Relayed>) {
    let settings = RelaySettings {
        idle_timeout: idle,
        buffer: 4096,
        pipe: 4096,
    };
    session_with(kind, settings).await
}

async fn session_with(
    kind: Kind,
    settings: RelaySettings,
) -> (TcpStream, TcpStream, JoinHandle<Relayed>) {
    let (client, mut client_side) = pair().await;
    let (node, mut node_side) = pair().await;
    let task = tokio::spawn(async move {
        let tally = Tally::default();
        match kind {
            Kind::Generic => relay(&mut client_side, &mut node_side, settings, &tally).await,
            Kind::Tcp => relay_tcp(&client_side, &node_side, settings, false, &tally).await,
            Kind::Adaptive => relay_tcp(&client_side, &node_side, settings, true, &tally).await,
            Kind::Splice => splice(&client_side, &node_side, settings, &tally)
                .await
                .expect("descriptors for the pipes"),
        }
    });
    (client, node, task)
}

async fn read_to_end(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    out
}

const BOTH: [Kind; 4] = [Kind::Generic, Kind::Tcp, Kind::Adaptive, Kind::Splice];
const LONG: Duration = Duration::from_secs(10);

#[tokio::test]
async fn client_half_close_passes_through_and_the_node_still_answers() {
    for kind in BOTH {
        let (mut client, mut node, task) = session(kind, LONG).await;
        client.write_all(b"request").await.unwrap();
        client.shutdown().await.unwrap();
        // The node sees the request, then EOF, and can still answer.
        assert_eq!(read_to_end(&mut node).await, b"request");
        node.write_all(b"answer after the client's FIN")
            .await
            .unwrap();
        node.shutdown().await.unwrap();
        assert_eq!(
            read_to_end(&mut client).await,
            b"answer after the client's FIN"
        );
        let relayed = task.await.unwrap();
        assert!(
            matches!(relayed.ended, Ended::Closed),
            "{kind:?}: {relayed:?}"
        );
        assert_eq!((relayed.client_to_node, relayed.node_to_client), (7, 29));
    }
}

#[tokio::test]
async fn node_half_close_passes_through_and_the_client_still_sends() {
    for kind in BOTH {
        let (mut client, mut node, task) = session(kind, LONG).await;
        node.write_all(b"banner").await.unwrap();
        node.shutdown().await.unwrap();
        assert_eq!(read_to_end(&mut client).await, b"banner");
        client.write_all(b"still talking").await.unwrap();
        client.shutdown().await.unwrap();
        assert_eq!(read_to_end(&mut node).await, b"still talking");
        let relayed = task.await.unwrap();
        assert!(
            matches!(relayed.ended, Ended::Closed),
            "{kind:?}: {relayed:?}"
        );
        assert_eq!((relayed.client_to_node, relayed.node_to_client), (13, 6));
    }
}

#[tokio::test]
async fn idle_timeout_counts_traffic_in_either_direction() {
    for kind in BOTH {
        let idle = Duration::from_millis(300);
        let (mut client, mut node, task) = session(kind, idle).await;
        // Traffic every 100 ms, alternating directions, for 900 ms: never idle that long.
        let mut byte = [0u8; 1];
        for round in 0..9 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if round % 2 == 0 {
                client.write_all(b"x").await.unwrap();
                node.read_exact(&mut byte).await.unwrap();
            } else {
                node.write_all(b"y").await.unwrap();
                client.read_exact(&mut byte).await.unwrap();
            }
        }
        assert!(
            !task.is_finished(),
            "{kind:?} timed out while traffic flowed"
        );
        let relayed = task.await.unwrap();
        assert!(
            matches!(relayed.ended, Ended::IdleTimeout),
            "{kind:?}: {relayed:?}"
        );
        assert_eq!((relayed.client_to_node, relayed.node_to_client), (5, 4));
        // Both ends closed by weir.
        assert_eq!(read_to_end(&mut client).await, b"");
        assert_eq!(read_to_end(&mut node).await, b"");
    }
}

#[tokio::test]
async fn idle_timeout_applies_after_a_half_close() {
    for kind in BOTH {
        let (mut client, mut node, task) = session(kind, Duration::from_millis(200)).await;
        client.shutdown().await.unwrap();
        assert_eq!(read_to_end(&mut node).await, b"");
        // The node never answers nor closes: the session ends at the idle timeout.
        let relayed = tokio::time::timeout(LONG, task).await.unwrap().unwrap();
        assert!(
            matches!(relayed.ended, Ended::IdleTimeout),
            "{kind:?}: {relayed:?}"
        );
    }
}

#[tokio::test]
async fn megabytes_both_ways_at_once_arrive_whole() {
    let defaults = RelaySettings {
        idle_timeout: LONG,
        ..RelaySettings::default()
    };
    // The small steps of `session`, then the defaults (splice through 32 KiB pipes).
    let small = BOTH.map(|kind| (kind, None));
    let large = [Kind::Adaptive, Kind::Splice].map(|kind| (kind, Some(defaults)));
    for (kind, settings) in small.into_iter().chain(large) {
        let (client, node, task) = match settings {
            Some(settings) => session_with(kind, settings).await,
            None => session(kind, LONG).await,
        };
        let data: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
        let echo = |mut stream: TcpStream, data: Vec<u8>| async move {
            let (mut reader, mut writer) = stream.split();
            let write = async {
                writer.write_all(&data).await.unwrap();
                writer.shutdown().await.unwrap();
            };
            let mut received = Vec::new();
            let read = reader.read_to_end(&mut received);
            let ((), read) = tokio::join!(write, read);
            read.unwrap();
            received
        };
        let (at_node, at_client) =
            tokio::join!(echo(client, data.clone()), echo(node, data.clone()));
        assert!(
            at_node == data && at_client == data,
            "{kind:?}: bytes differ"
        );
        let relayed = task.await.unwrap();
        assert!(
            matches!(relayed.ended, Ended::Closed),
            "{kind:?}: {relayed:?}"
        );
        let n = data.len() as u64;
        assert_eq!((relayed.client_to_node, relayed.node_to_client), (n, n));
    }
}

#[tokio::test]
async fn a_node_reset_ends_the_session_as_a_node_error() {
    for kind in BOTH {
        let (mut client, node, task) = session(kind, LONG).await;
        client.write_all(b"hello").await.unwrap();
        // Close with unread data: the kernel answers with a reset.
        socket2::SockRef::from(&node)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(node);
        let relayed = tokio::time::timeout(LONG, task).await.unwrap().unwrap();
        assert!(
            matches!(relayed.ended, Ended::Node(_)),
            "{kind:?}: {relayed:?}"
        );
    }
}

/// A pipe gets the capacity asked of it, a pooled one of another size is resized when taken,
/// and one put back is taken again for the same size.
#[test]
fn pipes_are_sized_as_asked_and_pooled_by_size() {
    use super::splice::Pipe;
    use std::os::fd::AsRawFd;
    let large = Pipe::take(256 * 1024).expect("a pipe");
    assert_eq!(large.capacity(), 256 * 1024);
    // Not a power of two pages: the kernel rounds up.
    let odd = Pipe::take(100 * 1024).expect("a pipe");
    assert_eq!(odd.capacity(), 128 * 1024);
    let fd = large.read_fd().as_raw_fd();
    large.put_back();
    odd.put_back();
    // The pool holds both: each size finds its own pipe, not the one put back last.
    let again = Pipe::take(256 * 1024).expect("a pipe");
    assert_eq!(
        (again.read_fd().as_raw_fd(), again.capacity()),
        (fd, 256 * 1024)
    );
    // Only the 128 KiB pipe is left: resized to what is asked now.
    let small = Pipe::take(4096).expect("a pipe");
    assert_eq!(small.capacity(), 4096);
    drop((again, small));
}
