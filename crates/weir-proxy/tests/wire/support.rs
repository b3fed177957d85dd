//! Helpers shared by the raw-bytes wire tests: exact bytes in, exact bytes out.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_testkit::TestProxy;

/// Longest any single wait in these tests may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// What came back on a connection after sending some bytes.
#[derive(Debug)]
pub struct Reply {
    pub bytes: Vec<u8>,
    /// The proxy closed the connection (EOF or reset) within [`PATIENCE`].
    pub closed: bool,
    /// The close was a reset (`ECONNRESET`), not an end of stream.
    pub reset: bool,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Opens a connection, sends `raw`, and reads until the proxy closes.
pub async fn send_until_close(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("proxy accepts");
    stream.write_all(raw).await.expect("request written");
    read_until_close(&mut stream).await
}

/// Reads until EOF (or a reset), for at most [`PATIENCE`].
pub async fn read_until_close<R: tokio::io::AsyncRead + Unpin>(stream: &mut R) -> Reply {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0)) => {
                return Reply {
                    bytes,
                    closed: true,
                    reset: false,
                };
            }
            Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
            Ok(Err(error)) => {
                return Reply {
                    bytes,
                    closed: true,
                    reset: error.kind() == std::io::ErrorKind::ConnectionReset,
                };
            }
            Err(_) => {
                return Reply {
                    bytes,
                    closed: false,
                    reset: false,
                };
            }
        }
    }
}

/// Reads exactly one response head (through the empty line) and returns it as text.
pub async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut byte))
            .await
            .expect("head arrives in time")
            .expect("read succeeds");
        assert_eq!(n, 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    String::from_utf8(head).expect("ASCII head")
}

/// A parsed response out of raw bytes.
#[derive(Debug)]
pub struct Parsed {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Everything after the head.
    pub rest: Vec<u8>,
}

impl Parsed {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the response head at the start of `bytes`.
pub fn parse_response(bytes: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let used = match response.parse(bytes) {
        Ok(httparse::Status::Complete(used)) => used,
        other => panic!(
            "no complete response head ({other:?}) in {:?}",
            String::from_utf8_lossy(bytes)
        ),
    };
    Parsed {
        status: response.code.unwrap_or(0),
        headers: response
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect(),
        rest: bytes[used..].to_vec(),
    }
}

/// `weir_bad_requests_total`, summed over its label sets.
pub fn bad_requests(proxy: &TestProxy) -> u64 {
    metric(proxy, "weir_bad_requests_total")
}

/// A counter from the proxy's Prometheus text, summed over its label sets.
pub fn metric(proxy: &TestProxy, name: &str) -> u64 {
    proxy
        .metrics
        .encode()
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The first `n` bytes of a `/bytes/N` body.
pub fn pattern(n: usize) -> Vec<u8> {
    weir_origin::BODY_PATTERN
        .iter()
        .copied()
        .cycle()
        .take(n)
        .collect()
}

/// `data` in chunked coding, cut into pieces of `piece` bytes, with an empty trailer section.
pub fn chunked(data: &[u8], piece: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in data.chunks(piece) {
        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// One request as a [`RecordingNode`] received it.
#[derive(Debug)]
pub struct Recorded {
    /// The head and body bytes exactly as they arrived.
    pub raw: Vec<u8>,
    /// The decoded body.
    pub body: Vec<u8>,
    /// The raw trailer lines of a chunked body.
    pub trailers: Vec<u8>,
}

impl Recorded {
    /// The head as text (through the empty line).
    pub fn head(&self) -> String {
        let end = self
            .raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(self.raw.len(), |at| at + 4);
        String::from_utf8_lossy(&self.raw[..end]).into_owned()
    }
}

/// A node that records every request byte for byte and answers each with a
/// fixed response, so tests can see exactly what the proxy forwarded.
pub struct RecordingNode {
    pub addr: SocketAddr,
    pub requests: tokio::sync::mpsc::UnboundedReceiver<Recorded>,
}

impl RecordingNode {
    pub async fn start(response: &'static [u8]) -> RecordingNode {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind on loopback");
        let addr = listener.local_addr().expect("bound");
        let (sender, requests) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(record(stream, response, sender.clone()));
            }
        });
        RecordingNode { addr, requests }
    }

    /// The next request the node received.
    pub async fn next(&mut self) -> Recorded {
        tokio::time::timeout(PATIENCE, self.requests.recv())
            .await
            .expect("a request reaches the node")
            .expect("node running")
    }
}

async fn record(
    mut stream: TcpStream,
    response: &'static [u8],
    sender: tokio::sync::mpsc::UnboundedSender<Recorded>,
) {
    use weir_http::{BodyFraming, ChunkedDecoder, Decoded, Limits, RequestHead};
    let mut buf = bytes::BytesMut::new();
    loop {
        let mut raw = Vec::new();
        let head = loop {
            match RequestHead::split_from(&mut buf, &Limits::default()) {
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(error) => panic!("the proxy forwarded an invalid head: {error}"),
            }
            if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        };
        raw.extend_from_slice(head.raw());
        let mut body = Vec::new();
        let mut trailers = Vec::new();
        match head.framing() {
            BodyFraming::Length(length) => {
                let length = length as usize;
                while buf.len() < length {
                    if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
                body = buf.split_to(length).to_vec();
                raw.extend_from_slice(&body);
            }
            BodyFraming::Chunked => {
                let mut decoder = ChunkedDecoder::new(8 * 1024);
                loop {
                    let before = buf.clone();
                    let decoded = decoder.decode(&mut buf).expect("valid chunked body");
                    raw.extend_from_slice(&before[..before.len() - buf.len()]);
                    match decoded {
                        Decoded::Data(data) => body.extend_from_slice(&data),
                        Decoded::NeedMore => {
                            if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                                return;
                            }
                        }
                        Decoded::Done { trailers: found } => {
                            trailers = found.to_vec();
                            break;
                        }
                    }
                }
            }
            BodyFraming::None | BodyFraming::CloseDelimited => {}
        }
        let _ = sender.send(Recorded {
            raw,
            body,
            trailers,
        });
        if stream.write_all(response).await.is_err() {
            return;
        }
    }
}

/// [`read_until_close`] for the read half of a split stream.
pub async fn read_half_until_close(reader: &mut tokio::net::tcp::OwnedReadHalf) -> Reply {
    read_until_close(reader).await
}
