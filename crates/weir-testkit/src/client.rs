//! Minimal raw HTTP/1.1 clients: exact bytes in, responses parsed by `weir-http` out.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_http::{BodyFraming, ChunkedDecoder, Decoded, Limits, Method, ResponseHead};

/// A response as the client saw it.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names as received (original case).
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked when it was chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A client connection that sends raw bytes and reads responses one by one.
pub struct Connection {
    /// The socket, for tests that write or shut down directly.
    pub stream: TcpStream,
    buf: BytesMut,
}

impl Connection {
    /// Connects to `addr`.
    pub async fn open(addr: SocketAddr) -> std::io::Result<Connection> {
        Ok(Connection {
            stream: TcpStream::connect(addr).await?,
            buf: BytesMut::new(),
        })
    }

    /// Writes `raw` as is (a request, part of one, or garbage).
    pub async fn send(&mut self, raw: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(raw).await
    }

    /// Reads one response (to a request that was not HEAD).
    pub async fn response(&mut self) -> anyhow::Result<Response> {
        self.response_to(false).await
    }

    /// Reads one response; `head` says the request was HEAD (no body follows).
    pub async fn response_to(&mut self, head: bool) -> anyhow::Result<Response> {
        tokio::time::timeout(
            Duration::from_secs(10),
            read_response(&mut self.stream, &mut self.buf, head),
        )
        .await
        .map_err(|_| anyhow::anyhow!("no response within 10 s"))?
    }

    /// True if the server closed the connection (reads EOF within `wait`).
    pub async fn is_closed(&mut self, wait: Duration) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(wait, self.stream.read(&mut byte)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

/// Reads one final response from `stream` (skipping interim ones other than 101), parsed by
/// weir's own codec, so a response the proxy could not have produced fails the test;
/// `buffer` keeps what arrived after it.
pub(crate) async fn read_response<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut BytesMut,
    head_request: bool,
) -> anyhow::Result<Response> {
    let method = if head_request {
        Method::Head
    } else {
        Method::Get
    };
    let limits = Limits {
        max_head_bytes: 64 * 1024,
        max_headers: 256,
    };
    let head = loop {
        match ResponseHead::split_from(buffer, &limits, method)? {
            Some(head) if head.is_interim() && head.status() != 101 => continue,
            Some(head) => break head,
            None => fill(stream, buffer).await?,
        }
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut response = Response {
        status: head.status(),
        headers: head
            .headers()
            .map(|(name, value)| (text(name), text(value)))
            .collect(),
        body: Vec::new(),
    };
    match head.framing() {
        BodyFraming::None => {}
        BodyFraming::Length(length) => {
            let length = usize::try_from(length)?;
            while buffer.len() < length {
                fill(stream, buffer).await?;
            }
            response.body = buffer.split_to(length).to_vec();
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new(64 * 1024);
            loop {
                match decoder.decode(buffer)? {
                    Decoded::Data(data) => response.body.extend_from_slice(&data),
                    Decoded::NeedMore => fill(stream, buffer).await?,
                    Decoded::Done { .. } => break,
                }
            }
        }
        BodyFraming::CloseDelimited => {
            while stream.read_buf(buffer).await? > 0 {}
            response.body = buffer.split().to_vec();
        }
    }
    Ok(response)
}

async fn fill<S: AsyncRead + Unpin>(stream: &mut S, buffer: &mut BytesMut) -> anyhow::Result<()> {
    let n = stream.read_buf(buffer).await?;
    anyhow::ensure!(n > 0, "connection closed");
    Ok(())
}

/// `GET path` on a new connection.
pub async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<Response> {
    let mut connection = Connection::open(addr).await?;
    connection
        .send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
        .await?;
    connection.response().await
}

/// Sends raw bytes on a new connection and returns everything the server
/// sends until it closes (or 5 s pass).
pub async fn raw_exchange(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(raw).await?;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    Ok(out)
}

/// The status code of the first response in raw bytes (0 when none).
pub fn first_status(raw: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(raw);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}
