//! The recording origin: it reads requests with a strict parser of its own
//! framing, keeps the exact bytes of each, and answers each with the case's
//! scripted reply. After a `101` or a 2xx to CONNECT it echoes bytes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use weir_http::{BodyFraming, ChunkedDecoder, Decoded, Limits, Method, RequestHead};

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
    let limits = Limits {
        max_head_bytes: 256 * 1024,
        max_headers: 1000,
    };
    let mut buf = BytesMut::new();
    loop {
        let head = loop {
            match RequestHead::split_from(&mut buf, &limits) {
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(_) => {
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
        let mut raw = head.raw().to_vec();
        let Some(body) = read_body(&mut stream, &mut buf, &head, &mut raw).await else {
            record(&script, raw, Vec::new(), Vec::new(), connection, false);
            return;
        };
        let line = head
            .raw()
            .split(|&b| b == b'\r')
            .next()
            .unwrap_or_default()
            .to_vec();
        let reply = record(&script, raw, line, body, connection, true);
        if stream.write_all(&reply).await.is_err() {
            return;
        }
        let switched = reply.starts_with(b"HTTP/1.1 101")
            || (head.method() == Method::Connect && reply.starts_with(b"HTTP/1.1 2"));
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
    head: &RequestHead,
    raw: &mut Vec<u8>,
) -> Option<Vec<u8>> {
    match head.framing() {
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
