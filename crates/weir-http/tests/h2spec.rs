//! h2spec (installed by `scripts/test`) in strict mode against the sans-IO
//! HTTP/2 server of `weir_http::h2server`, behind the smallest driver that
//! can run it: read, feed, answer each request with a short body, write.
//! Every one of its 146 cases must pass, none skipped. This is the codec
//! part's own conformance check, before the proxy runs on it
//! (`docs/design/http2.md`, "weir's own HPACK").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Command;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_http::h2server::{Config, Event, ServerConnection};

const BODY: &[u8] = b"served by weir's own HTTP/2 codec\n";
const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 34\r\n\r\n";

/// One connection: requests are answered once their bodies end; a body
/// waits for the client's windows.
async fn serve(mut tcp: TcpStream) {
    let mut connection = ServerConnection::new(Config::default());
    let mut input = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    // Streams whose answer is due, with the body bytes still to send.
    let mut pending: HashMap<u32, usize> = HashMap::new();
    loop {
        let mut due = Vec::new();
        let mut released = Vec::new();
        let result = connection.receive(&input, |event| match event {
            Event::Request {
                stream,
                end_stream: true,
                ..
            } => due.push((stream, 200)),
            Event::Request { .. } | Event::WindowOpened | Event::PingAnswered { .. } => {}
            Event::Malformed { stream, error, .. } => due.push((stream, error.status())),
            Event::Data {
                stream,
                data,
                end_stream,
            } => {
                released.push((stream, data.len() as u32));
                if end_stream {
                    due.push((stream, 200));
                }
            }
            Event::Trailers { stream, .. } => due.push((stream, 200)),
            Event::Reset { stream, .. } => {
                pending.remove(&stream);
            }
            Event::GoAway { .. } => {}
        });
        let failed = match result {
            Ok(used) => {
                input.drain(..used);
                false
            }
            Err(_) => true,
        };
        for (stream, len) in released {
            connection.release(stream, len);
        }
        for (stream, status) in due {
            let head = match status {
                200 => HEAD.to_vec(),
                status => format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").into_bytes(),
            };
            if connection
                .send_head(stream, status, &head, status != 200)
                .is_ok()
                && status == 200
            {
                pending.insert(stream, 0);
            }
        }
        pending.retain(
            |&stream, sent| match connection.send_data(stream, &BODY[*sent..], true) {
                Ok(went) => {
                    *sent += went;
                    *sent < BODY.len()
                }
                Err(_) => false,
            },
        );
        let output = std::mem::take(connection.output());
        if !output.is_empty() && tcp.write_all(&output).await.is_err() {
            return;
        }
        if failed {
            let _ = tcp.shutdown().await;
            return;
        }
        match tcp.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => input.extend_from_slice(&buffer[..read]),
        }
    }
}

/// h2spec's binary: on PATH, or where `go install` puts it.
fn h2spec() -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let installed = format!("{home}/go/bin/h2spec");
    match std::path::Path::new(&installed).exists() {
        true => installed,
        false => "h2spec".to_owned(),
    }
}

fn run_h2spec(address: SocketAddr) -> String {
    let output = Command::new(h2spec())
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &address.port().to_string(),
            "-S",
            "-o",
            "5",
        ])
        .output()
        .unwrap_or_else(|error| panic!("h2spec (installed by scripts/test): {error}"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_strict_passes_every_case() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(serve(tcp));
        }
    });
    let text = tokio::task::spawn_blocking(move || run_h2spec(address))
        .await
        .expect("h2spec ran");
    let summary = text
        .lines()
        .rfind(|line| line.contains("tests,"))
        .unwrap_or_else(|| panic!("no h2spec summary:\n{text}"))
        .trim()
        .to_owned();
    assert!(
        summary.starts_with("146 tests, 146 passed, 0 skipped, 0 failed"),
        "{summary}\n{text}"
    );
}
