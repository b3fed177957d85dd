//! Helpers for the origin's wire tests: start an origin on port 0 and talk raw HTTP/1 to it.

#![allow(dead_code)] // Each test file uses a different part of these helpers.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use weir_core::Shutdown;
use weir_origin::{Origin, OriginOptions, OriginStats};

/// Bounds every wait in the tests so a bug fails a test instead of hanging it.
pub const PATIENCE: Duration = Duration::from_secs(10);

pub struct Running {
    pub address: SocketAddr,
    pub stats: Arc<OriginStats>,
    pub shutdown: Shutdown,
    pub server: JoinHandle<io::Result<()>>,
}

/// Binds and runs an origin named `name` with `options` (listen and name are overridden).
pub async fn start(name: &str, options: OriginOptions) -> Running {
    let options = OriginOptions {
        name: name.to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ..options
    };
    let origin = Origin::bind(options).await.expect("bind on port 0");
    let address = origin.local_addr();
    let stats = origin.stats();
    let (shutdown, signal) = Shutdown::new();
    let server = tokio::spawn(origin.run(signal));
    Running {
        address,
        stats,
        shutdown,
        server,
    }
}

impl Running {
    pub async fn client(&self) -> Client {
        Client::connect(self.address).await
    }

    /// Triggers shutdown and waits for `run` to return.
    pub async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(PATIENCE, self.server)
            .await
            .expect("origin stops in time")
            .expect("origin task")
            .expect("origin run");
    }
}

/// Polls `condition` until it holds (counters update after the client sees the answer).
pub async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Sizes of the chunks, when the body was chunked.
    pub chunks: Vec<usize>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("UTF-8 body")
    }
}

/// A raw HTTP/1 client over one TCP connection.
pub struct Client {
    pub stream: TcpStream,
    buffer: Vec<u8>,
}

impl Client {
    pub async fn connect(address: SocketAddr) -> Client {
        Client {
            stream: TcpStream::connect(address).await.expect("connect"),
            buffer: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send");
    }

    /// Sends `GET target` (HTTP/1.1, with Host) and reads the answer.
    pub async fn get(&mut self, target: &str) -> Response {
        self.send(format!("GET {target} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .await;
        self.response().await
    }

    /// Reads one response to a non-HEAD request.
    pub async fn response(&mut self) -> Response {
        self.read_response(false).await
    }

    /// Reads one response; `to_head` says it answers a HEAD request (so has no body).
    pub async fn read_response(&mut self, to_head: bool) -> Response {
        tokio::time::timeout(PATIENCE, self.read_response_inner(to_head))
            .await
            .expect("response in time")
    }

    async fn read_response_inner(&mut self, to_head: bool) -> Response {
        let (status, headers, head_len) = loop {
            let mut fields = [httparse::EMPTY_HEADER; 64];
            let mut response = httparse::Response::new(&mut fields);
            match response.parse(&self.buffer).expect("valid response head") {
                httparse::Status::Complete(head_len) => {
                    let headers = response
                        .headers
                        .iter()
                        .map(|h| {
                            let value = String::from_utf8(h.value.to_vec()).expect("UTF-8 value");
                            (h.name.to_owned(), value)
                        })
                        .collect::<Vec<_>>();
                    break (response.code.expect("status"), headers, head_len);
                }
                httparse::Status::Partial => assert!(self.fill().await > 0, "EOF inside a head"),
            }
        };
        self.buffer.drain(..head_len);
        let mut response = Response {
            status,
            headers,
            body: Vec::new(),
            chunks: Vec::new(),
        };
        let bodiless = to_head || status < 200 || status == 204 || status == 304;
        if bodiless {
            return response;
        }
        if response
            .header("transfer-encoding")
            .is_some_and(|value| value.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let line = self.read_line().await;
                let size_text = line.split(';').next().unwrap_or_default();
                let size = usize::from_str_radix(size_text, 16).expect("hex chunk size");
                if size == 0 {
                    while !self.read_line().await.is_empty() {}
                    break;
                }
                response.chunks.push(size);
                let data = self.read_exact(size).await;
                response.body.extend_from_slice(&data);
                assert_eq!(self.read_exact(2).await, b"\r\n", "CRLF after chunk data");
            }
        } else if let Some(length) = response.header("content-length") {
            let length: usize = length.parse().expect("numeric Content-Length");
            response.body = self.read_exact(length).await;
        } else {
            response.body = self.read_to_end().await;
        }
        response
    }

    /// Reads until EOF; returns what came (after anything already buffered).
    pub async fn read_to_end(&mut self) -> Vec<u8> {
        let result = tokio::time::timeout(PATIENCE, async { while self.fill().await > 0 {} }).await;
        result.expect("EOF in time");
        std::mem::take(&mut self.buffer)
    }

    /// Asserts the server closes the connection without sending anything more.
    pub async fn expect_closed(&mut self) {
        let rest = self.read_to_end().await;
        assert!(
            rest.is_empty(),
            "unexpected bytes before close: {:?}",
            String::from_utf8_lossy(&rest)
        );
    }

    async fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk).await {
            Ok(read) => {
                self.buffer.extend_from_slice(&chunk[..read]);
                read
            }
            // A reset after the server's last bytes reads as EOF here.
            Err(error) if error.kind() == io::ErrorKind::ConnectionReset => 0,
            Err(error) => panic!("read failed: {error}"),
        }
    }

    async fn read_line(&mut self) -> String {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|pair| pair == b"\r\n") {
                let line = String::from_utf8(self.buffer[..end].to_vec()).expect("UTF-8 line");
                self.buffer.drain(..end + 2);
                return line;
            }
            assert!(self.fill().await > 0, "EOF inside a line");
        }
    }

    async fn read_exact(&mut self, length: usize) -> Vec<u8> {
        while self.buffer.len() < length {
            assert!(self.fill().await > 0, "EOF inside a body");
        }
        self.buffer.drain(..length).collect()
    }
}

/// The `/bytes/N` body the origin promises: the pattern repeated.
pub fn pattern(length: usize) -> Vec<u8> {
    weir_origin::BODY_PATTERN
        .iter()
        .copied()
        .cycle()
        .take(length)
        .collect()
}
