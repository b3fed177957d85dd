//! The attacking client: sends a case's bytes and reads back responses with
//! a small parser of its own (status, length, chunked, until close), so a
//! proxy's answers are judged independently of weir's codec.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a case may wait for its answers.
const PATIENCE: Duration = Duration::from_secs(3);
/// How long a case waits for a close it expects after its last answer.
const CLOSE_PATIENCE: Duration = Duration::from_secs(2);

/// What came back on one connection.
#[derive(Debug, Default)]
pub struct Answers {
    pub statuses: Vec<u16>,
    /// Body of the last response read.
    pub last_body: Vec<u8>,
    /// Everything received.
    pub raw: Vec<u8>,
    /// The proxy closed the connection.
    pub closed: bool,
}

/// Sends `bytes` (one at a time when `drip`) and reads up to `expected`
/// responses, then waits for a close if `wait_close`.
pub async fn exchange(
    target: SocketAddr,
    bytes: &[u8],
    drip: bool,
    expected: usize,
    wait_close: bool,
) -> Answers {
    let mut answers = Answers::default();
    let Ok(mut stream) = TcpStream::connect(target).await else {
        answers.closed = true;
        return answers;
    };
    let _ = stream.set_nodelay(true);
    let head_request = bytes.starts_with(b"HEAD ");
    // A 2xx to CONNECT starts a tunnel: no body follows its head.
    let connect_request = bytes.starts_with(b"CONNECT ");
    let send = async {
        if drip {
            for byte in bytes {
                if stream.write_all(std::slice::from_ref(byte)).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        } else {
            let _ = stream.write_all(bytes).await;
        }
    };
    send.await;
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut first_final = true;
    while answers.statuses.len() < expected {
        match parse(
            &buf,
            head_request && first_final,
            connect_request && first_final,
        ) {
            Parsed::Response { status, body, used } => {
                answers.raw.extend_from_slice(&buf[..used]);
                buf.drain(..used);
                answers.statuses.push(status);
                if status >= 200 {
                    first_final = false;
                    answers.last_body = body;
                }
                continue;
            }
            Parsed::UntilClose { status } if answers.closed => {
                answers.raw.extend_from_slice(&buf);
                answers.statuses.push(status);
                answers.last_body = body_after_head(&buf);
                buf.clear();
                break;
            }
            Parsed::Garbage if !buf.is_empty() => break,
            _ if answers.closed => break,
            _ => {}
        }
        if !read(&mut stream, &mut buf, deadline, &mut answers).await {
            break;
        }
    }
    if wait_close && !answers.closed {
        let deadline = tokio::time::Instant::now() + CLOSE_PATIENCE;
        while read(&mut stream, &mut buf, deadline, &mut answers).await {}
    }
    answers.raw.extend_from_slice(&buf);
    answers
}

/// One read; false on close or deadline.
async fn read(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: tokio::time::Instant,
    answers: &mut Answers,
) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {
            answers.closed = true;
            false
        }
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        Err(_) => false,
    }
}

enum Parsed {
    Response {
        status: u16,
        body: Vec<u8>,
        used: usize,
    },
    /// A response whose body lasts until the connection closes.
    UntilClose {
        status: u16,
    },
    Partial,
    Garbage,
}

fn parse(buf: &[u8], bodiless: bool, connect: bool) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Garbage,
    };
    let status = response.code.unwrap_or(0);
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    let tunnel = connect && (200..300).contains(&status);
    if bodiless || tunnel || status < 200 || status == 204 || status == 304 {
        return Parsed::Response {
            status,
            body: Vec::new(),
            used: head_len,
        };
    }
    if header("transfer-encoding").is_some_and(|te| te.ends_with("chunked")) {
        return match dechunk(&buf[head_len..]) {
            Some((body, used)) => Parsed::Response {
                status,
                body,
                used: head_len + used,
            },
            None => Parsed::Partial,
        };
    }
    match header("content-length").and_then(|length| length.parse::<usize>().ok()) {
        Some(length) if buf.len() >= head_len + length => Parsed::Response {
            status,
            body: buf[head_len..head_len + length].to_vec(),
            used: head_len + length,
        },
        Some(_) => Parsed::Partial,
        None => Parsed::UntilClose { status },
    }
}

fn body_after_head(buf: &[u8]) -> Vec<u8> {
    match buf.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(at) => buf[at + 4..].to_vec(),
        None => Vec::new(),
    }
}

/// Decodes a chunked body; `None` until it is complete.
fn dechunk(mut rest: &[u8]) -> Option<(Vec<u8>, usize)> {
    let total = rest.len();
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            // Trailer lines until the empty one.
            loop {
                let end = rest.windows(2).position(|w| w == b"\r\n")?;
                rest = &rest[end + 2..];
                if end == 0 {
                    return Some((body, total - rest.len()));
                }
            }
        }
        if rest.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}
