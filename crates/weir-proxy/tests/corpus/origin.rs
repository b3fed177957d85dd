//! The recording origin: it reads requests as a lenient server would (any
//! head `httparse` takes) but frames them strictly (both framings, several
//! lengths, or a final coding other than chunked are not a request), keeps
//! the exact bytes of each, and answers each with the case's scripted reply.
//! After a `101` or a 2xx to CONNECT it echoes bytes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use weir_http::{BodyFraming, ChunkedDecoder, Decoded};

/// One request as the origin saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Head and body bytes exactly as they arrived.
    pub raw: Vec<u8>,
    /// The request line, without CRLF.
    pub line: Vec<u8>,
    pub body: Vec<u8>,
    /// False when the bytes did not parse as a request at all.
    pub valid: bool,
}

/// What the origin answers, changed between cases.
#[derive(Debug, Default)]
pub struct Script {
    /// The reply to the n-th request; the last one repeats.
    pub replies: Vec<Vec<u8>>,
    pub recorded: Vec<Recorded>,
    pub connections: usize,
}

pub struct Origin {
    pub addr: SocketAddr,
    pub script: Arc<Mutex<Script>>,
    accept: JoinHandle<()>,
    served: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Origin {
    pub async fn start(bind: SocketAddr) -> Origin {
        let listener = TcpListener::bind(bind).await.expect("origin binds");
        let addr = listener.local_addr().expect("bound");
        let script = Arc::new(Mutex::new(Script::default()));
        let served = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn({
            let script = Arc::clone(&script);
            let served = Arc::clone(&served);
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let connection = {
                        let mut script = script.lock().unwrap();
                        script.connections += 1;
                        script.connections - 1
                    };
                    let task = tokio::spawn(serve(stream, connection, Arc::clone(&script)));
                    served.lock().unwrap().push(task);
                }
            }
        });
        Origin {
            addr,
            script,
            accept,
            served,
        }
    }

    /// Forgets the last case: closes every connection (so no pooled
    /// connection carries over) and sets the next replies.
    pub fn reset(&self, replies: Vec<Vec<u8>>) {
        for task in self.served.lock().unwrap().drain(..) {
            task.abort();
        }
        *self.script.lock().unwrap() = Script {
            replies,
            ..Script::default()
        };
    }

    pub fn recorded(&self) -> Vec<Recorded> {
        self.script.lock().unwrap().recorded.clone()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.accept.abort();
        for task in self.served.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

async fn serve(mut stream: TcpStream, connection: usize, script: Arc<Mutex<Script>>) {
    let mut buf = BytesMut::new();
    loop {
        let request = loop {
            match parse_head(&buf) {
                Head::Complete(request) => break request,
                Head::Partial => {}
                Head::Invalid => {
                    // Not a request: record what came, as it came, and stop.
                    let mut rest = buf.to_vec();
                    let mut more = [0u8; 4096];
                    while let Ok(Ok(n @ 1..)) = tokio::time::timeout(
                        std::time::Duration::from_millis(50),
                        stream.read(&mut more),
                    )
                    .await
                    {
                        rest.extend_from_slice(&more[..n]);
                    }
                    record(&script, rest, Vec::new(), Vec::new(), connection, false);
                    return;
                }
            }
            if read_more(&mut stream, &mut buf).await == 0 {
                if !buf.is_empty() {
                    record(
                        &script,
                        buf.to_vec(),
                        Vec::new(),
                        Vec::new(),
                        connection,
                        false,
                    );
                }
                return;
            }
        };
        let mut raw = buf.split_to(request.head_len).to_vec();
        // A body cut short by a close is a request that never arrived: not recorded.
        let Some(body) = read_body(&mut stream, &mut buf, request.framing, &mut raw).await else {
            return;
        };
        let reply = record(&script, raw, request.line, body, connection, true);
        if stream.write_all(&reply).await.is_err() {
            return;
        }
        let switched = reply.starts_with(b"HTTP/1.1 101")
            || (request.connect && reply.starts_with(b"HTTP/1.1 2"));
        if switched {
            let _ = stream.write_all(&buf).await;
            let (mut reader, mut writer) = stream.split();
            let _ = tokio::io::copy(&mut reader, &mut writer).await;
            return;
        }
        if closes(&reply) {
            return;
        }
    }
}

/// A request head as a lenient origin reads it: any head `httparse` takes,
/// framed strictly (a request whose framing is ambiguous is not a request).
struct Request {
    head_len: usize,
    line: Vec<u8>,
    framing: BodyFraming,
    connect: bool,
}

enum Head {
    Complete(Request),
    Partial,
    Invalid,
}

fn parse_head(buf: &[u8]) -> Head {
    let mut headers = vec![httparse::EMPTY_HEADER; 1000];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < 256 * 1024 => return Head::Partial,
        _ => return Head::Invalid,
    };
    let start = buf
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    let line_end = buf[start..]
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .map_or(head_len, |at| start + at);
    let mut lengths = Vec::new();
    let mut codings = Vec::new();
    for header in request.headers.iter() {
        let value = String::from_utf8_lossy(header.value)
            .trim()
            .to_ascii_lowercase();
        if header.name.eq_ignore_ascii_case("content-length") {
            lengths.push(value);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            codings.extend(
                value
                    .split(',')
                    .map(|c| c.trim().to_owned())
                    .filter(|c| !c.is_empty()),
            );
        }
    }
    let framing = match (lengths.as_slice(), codings.last()) {
        ([], None) => BodyFraming::None,
        ([], Some(last)) if last == "chunked" => BodyFraming::Chunked,
        ([length], None) if !length.is_empty() && length.bytes().all(|b| b.is_ascii_digit()) => {
            match length.parse() {
                Ok(length) => BodyFraming::Length(length),
                Err(_) => return Head::Invalid,
            }
        }
        _ => return Head::Invalid,
    };
    Head::Complete(Request {
        head_len,
        line: buf[start..line_end].to_vec(),
        framing,
        connect: request.method == Some("CONNECT"),
    })
}

/// A reply after which the origin closes: `Connection: close`, or HTTP/1.0.
fn closes(reply: &[u8]) -> bool {
    let head_end = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(reply.len());
    let head = String::from_utf8_lossy(&reply[..head_end]).to_ascii_lowercase();
    head.starts_with("http/1.0") || head.contains("\r\nconnection: close")
}

async fn read_more(stream: &mut TcpStream, buf: &mut BytesMut) -> usize {
    buf.reserve(16 * 1024);
    stream.read_buf(buf).await.unwrap_or(0)
}

/// Reads the body as the head frames it, appending its raw bytes to `raw`.
async fn read_body(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    framing: BodyFraming,
    raw: &mut Vec<u8>,
) -> Option<Vec<u8>> {
    match framing {
        BodyFraming::Length(length) => {
            let length = usize::try_from(length).ok()?;
            while buf.len() < length {
                if read_more(stream, buf).await == 0 {
                    raw.extend_from_slice(buf);
                    return None;
                }
            }
            let body = buf.split_to(length).to_vec();
            raw.extend_from_slice(&body);
            Some(body)
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new(64 * 1024);
            let mut body = Vec::new();
            loop {
                let before = buf.clone();
                let decoded = decoder.decode(buf).ok()?;
                raw.extend_from_slice(&before[..before.len() - buf.len()]);
                match decoded {
                    Decoded::Data(data) => body.extend_from_slice(&data),
                    Decoded::NeedMore => {
                        if read_more(stream, buf).await == 0 {
                            return None;
                        }
                    }
                    Decoded::Done { .. } => return Some(body),
                }
            }
        }
        BodyFraming::None | BodyFraming::CloseDelimited => Some(Vec::new()),
    }
}

/// Records a request; returns the scripted reply to it.
fn record(
    script: &Mutex<Script>,
    raw: Vec<u8>,
    line: Vec<u8>,
    body: Vec<u8>,
    connection: usize,
    valid: bool,
) -> Vec<u8> {
    let mut script = script.lock().unwrap();
    let index = script.recorded.len();
    let _ = connection;
    script.recorded.push(Recorded {
        raw,
        line,
        body,
        valid,
    });
    let last = script.replies.len().saturating_sub(1);
    script
        .replies
        .get(index.min(last))
        .cloned()
        .unwrap_or_else(|| b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec())
}
