//! The sans-IO client of `weir_http::h2client` against another
//! implementation: the `h2` crate's server (the one weir-upstream's nodes
//! are tested with), behind the smallest driver that can run the client:
//! open streams as the node allows, send bodies as its windows allow, read,
//! feed, give consumed bytes back. Many streams at once past the node's
//! stream limit, bodies far larger than the windows both ways, trailers
//! both ways, and a graceful GOAWAY while streams are open.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_http::frame::ErrorCode;
use weir_http::h2client::{ClientConnection, Config, Event, Refused};
use weir_http::http2::NodeRequest;

/// The node: the `h2` crate's server, 10 streams at once.
async fn start_node(goaway_after: Option<usize>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut connection = h2::server::Builder::new()
            .max_concurrent_streams(10)
            .handshake::<_, Bytes>(tcp)
            .await
            .unwrap();
        let mut accepted = 0;
        while let Some(Ok((request, respond))) = connection.accept().await {
            tokio::spawn(answer(request, respond));
            accepted += 1;
            if goaway_after == Some(accepted) {
                connection.graceful_shutdown();
            }
        }
    });
    address
}

/// `/echo`: the body back, without a length, and trailers; `/big/N`: N
/// bytes with a length; else a line naming what the node saw.
async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let (parts, mut body) = request.into_parts();
    let mut received = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        received.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap();
    let path = parts.uri.path().to_owned();
    if path == "/echo" {
        let response = http::Response::builder().status(200).body(()).unwrap();
        let mut send = respond.send_response(response, false).unwrap();
        for piece in received.chunks(100_000) {
            send.send_data(Bytes::copy_from_slice(piece), false)
                .unwrap();
        }
        let mut map = http::HeaderMap::new();
        map.insert("x-echo-length", received.len().to_string().parse().unwrap());
        if let Some(value) = trailers.as_ref().and_then(|t| t.get("x-checksum")) {
            map.insert("x-checksum", value.clone());
        }
        send.send_trailers(map).unwrap();
        return;
    }
    let body = match path.strip_prefix("/big/") {
        Some(size) => vec![b'b'; size.parse().unwrap()],
        None => format!(
            "{} {} {} te={:?}",
            parts.method,
            parts.uri,
            received.len(),
            parts.headers.get("te")
        )
        .into_bytes(),
    };
    let response = http::Response::builder()
        .status(200)
        .header("content-length", body.len())
        .body(())
        .unwrap();
    let mut send = respond.send_response(response, false).unwrap();
    send.send_data(Bytes::from(body), true).unwrap();
}

/// One request and what came back for it.
#[derive(Default)]
struct Exchange {
    written: Vec<u8>,
    body: Vec<u8>,
    trailers: Vec<u8>,
    sent: usize,
    status: Option<u16>,
    received: Vec<u8>,
    received_trailers: Vec<u8>,
    done: bool,
    reset: Option<(ErrorCode, bool)>,
}

/// Runs `exchanges` over one connection to `address`: as many streams as
/// the node takes, bodies as its windows allow, until each is answered.
async fn run(address: std::net::SocketAddr, mut exchanges: Vec<Exchange>) -> Vec<Exchange> {
    let mut tcp = TcpStream::connect(address).await.unwrap();
    let mut connection = ClientConnection::new(Config::default());
    let mut by_stream: HashMap<u32, usize> = HashMap::new();
    let mut next = 0;
    let mut input = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        // Until the node's SETTINGS say how many streams it takes, one goes
        // (weir-upstream's rule too: a node that takes fewer would refuse the
        // rest).
        while next < exchanges.len()
            && connection.can_open().is_ok()
            && (connection.is_open() || by_stream.is_empty())
        {
            let exchange = &exchanges[next];
            let request = NodeRequest {
                written: &exchange.written,
                scheme: b"http",
                te_trailers: !exchange.trailers.is_empty(),
                protocol: None,
            };
            let ends = exchange.body.is_empty() && exchange.trailers.is_empty();
            let stream = connection.send_request(&request, ends).unwrap().unwrap();
            by_stream.insert(stream, next);
            next += 1;
        }
        if next < exchanges.len() && connection.can_open() == Err(Refused::GoingAway) {
            // Those not yet sent would go on a new connection.
            exchanges.truncate(next);
        }
        for (&stream, &index) in &by_stream {
            let exchange = &mut exchanges[index];
            if !connection.is_sendable(stream)
                || exchange.sent == exchange.body.len() && exchange.trailers.is_empty()
            {
                continue;
            }
            let rest = &exchange.body[exchange.sent..];
            let ends = exchange.trailers.is_empty();
            exchange.sent += connection.send_data(stream, rest, ends).unwrap();
            if exchange.sent == exchange.body.len() && !exchange.trailers.is_empty() {
                connection
                    .send_trailers(stream, &exchange.trailers)
                    .unwrap();
                exchange.trailers.clear();
            }
        }
        if !connection.output().is_empty() {
            tcp.write_all(connection.output()).await.unwrap();
            connection.output().clear();
        }
        if exchanges.iter().all(|e| e.done) {
            return exchanges;
        }
        let read = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buffer))
            .await
            .expect("the node answers within 10 s")
            .unwrap();
        assert!(read > 0, "the node closed the connection early");
        input.extend_from_slice(&buffer[..read]);
        let mut released = Vec::new();
        let used = connection
            .receive(&input, |event| {
                note(event, &mut exchanges, &by_stream, &mut released)
            })
            .expect("no connection error");
        input.drain(..used);
        for (stream, len) in released {
            connection.release(stream, len);
        }
    }
}

/// What an event tells of its stream's exchange; consumed bytes are noted
/// in `released`, to be given back.
fn note(
    event: Event<'_>,
    exchanges: &mut [Exchange],
    by_stream: &HashMap<u32, usize>,
    released: &mut Vec<(u32, u32)>,
) {
    let exchange = |stream: u32| {
        by_stream
            .get(&stream)
            .copied()
            .expect("a stream weir opened")
    };
    match event {
        Event::Response {
            stream,
            head,
            end_stream,
        } => {
            let e = &mut exchanges[exchange(stream)];
            e.status = Some(head.status());
            e.done = end_stream;
        }
        Event::Data {
            stream,
            data,
            end_stream,
        } => {
            let e = &mut exchanges[exchange(stream)];
            e.received.extend_from_slice(data);
            e.done = end_stream;
            released.push((stream, data.len() as u32));
        }
        Event::Trailers { stream, lines } => {
            let e = &mut exchanges[exchange(stream)];
            e.received_trailers = lines;
            e.done = true;
        }
        Event::Reset {
            stream,
            error,
            unprocessed,
            ..
        } => {
            let e = &mut exchanges[exchange(stream)];
            e.reset = Some((error, unprocessed));
            e.done = true;
        }
        Event::Malformed { error, .. } => panic!("malformed: {error:?}"),
        _ => {}
    }
}

fn get(path: &str) -> Exchange {
    Exchange {
        written: format!("GET {path} HTTP/1.1\r\nHost: node.test\r\nAccept: */*\r\n\r\n")
            .into_bytes(),
        ..Exchange::default()
    }
}

#[tokio::test]
async fn many_streams_past_the_nodes_limit_all_get_their_answers() {
    let address = start_node(None).await;
    let exchanges = run(
        address,
        (0..50).map(|i| get(&format!("/item/{i}"))).collect(),
    )
    .await;
    for (i, exchange) in exchanges.iter().enumerate() {
        assert_eq!(exchange.status, Some(200), "request {i}");
        let seen = String::from_utf8_lossy(&exchange.received);
        assert_eq!(seen, format!("GET http://node.test/item/{i} 0 te=None"));
    }
}

#[tokio::test]
async fn bodies_larger_than_the_windows_go_both_ways_with_trailers() {
    let address = start_node(None).await;
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let echo = Exchange {
        written:
            b"POST /echo HTTP/1.1\r\nHost: node.test\r\nContent-Type: application/grpc\r\n\r\n"
                .to_vec(),
        body: body.clone(),
        trailers: b"x-checksum: 42\r\n".to_vec(),
        ..Exchange::default()
    };
    let exchanges = run(address, vec![echo, get("/big/5000000"), get("/small")]).await;
    assert_eq!(exchanges[0].status, Some(200));
    assert!(exchanges[0].received == body, "the echo came back whole");
    assert_eq!(
        String::from_utf8_lossy(&exchanges[0].received_trailers),
        "x-echo-length: 3000000\r\nx-checksum: 42\r\n"
    );
    assert_eq!(exchanges[1].received.len(), 5_000_000);
    assert_eq!(exchanges[2].status, Some(200));
}

#[tokio::test]
async fn a_graceful_goaway_lets_the_open_streams_finish_and_stops_new_ones() {
    let address = start_node(Some(3)).await;
    let exchanges = run(
        address,
        (0..40)
            .map(|i| get(&format!("/big/{}", 100_000 + i)))
            .collect(),
    )
    .await;
    // `run` keeps only the requests it sent before the GOAWAY came.
    assert!(exchanges.len() < 40, "no stream opens after the GOAWAY");
    let answered = exchanges.iter().filter(|e| e.status == Some(200)).count();
    assert!(answered >= 3, "the streams the node took are answered");
    for (i, exchange) in exchanges.iter().enumerate() {
        match exchange.reset {
            None => assert_eq!(exchange.received.len(), 100_000 + i, "request {i} whole"),
            Some((error, unprocessed)) => {
                assert!(unprocessed, "refused as unprocessed: {error:?}");
                assert!(exchange.status.is_none());
            }
        }
    }
}
