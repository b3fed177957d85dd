//! One small HTTP/1.1 GET for the lab's own probes: readiness, the origin's `/stats`, weir's
//! `/metrics`. Not for load (the load has its own clients).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bodies larger than this are refused (metrics pages are a few KiB).
const MAX_RESPONSE: usize = 4 << 20;

/// A response: its status and its body (de-chunked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// `GET path` on a new connection with `Connection: close`, within `timeout` in all.
pub async fn get(address: SocketAddr, path: &str, timeout: Duration) -> io::Result<Response> {
    tokio::time::timeout(timeout, exchange(address, path))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer in time"))?
}

async fn exchange(address: SocketAddr, path: &str) -> io::Result<Response> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: weir-lab\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..read]);
        if bytes.len() > MAX_RESPONSE {
            return Err(invalid("response too large"));
        }
    }
    parse_response(&bytes)
}

fn invalid(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// A whole response read until close: the status and the body, framed by Content-Length,
/// chunked coding or the close.
pub fn parse_response(bytes: &[u8]) -> io::Result<Response> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Err(invalid("incomplete response head")),
        Err(_) => return Err(invalid("malformed response head")),
    };
    let status = response.code.ok_or_else(|| invalid("no status"))?;
    let mut length = None;
    let mut chunked = false;
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(header.value)
                .ok()
                .and_then(|value| value.trim().parse::<usize>().ok());
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = header.value.eq_ignore_ascii_case(b"chunked");
        }
    }
    let rest = &bytes[head..];
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(length) = length {
        rest.get(..length)
            .ok_or_else(|| invalid("body shorter than Content-Length"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

fn dechunk(mut rest: &[u8]) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|pair| pair == b"\r\n")
            .ok_or_else(|| invalid("bad chunk"))?;
        let size_text = std::str::from_utf8(&rest[..line_end]).map_err(|_| invalid("bad chunk"))?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let data = rest.get(..size).ok_or_else(|| invalid("short chunk"))?;
        body.extend_from_slice(data);
        rest = rest.get(size + 2..).ok_or_else(|| invalid("short chunk"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_framed_every_way() {
        let by_length =
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA").expect("parses");
        assert_eq!(
            by_length,
            Response {
                status: 200,
                body: b"ok".to_vec()
            }
        );
        let chunked = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .expect("parses");
        assert_eq!(chunked.body, b"abcde");
        let by_close = parse_response(b"HTTP/1.0 503 Busy\r\n\r\nlater").expect("parses");
        assert_eq!(
            by_close,
            Response {
                status: 503,
                body: b"later".to_vec()
            }
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort").is_err());
        assert!(parse_response(b"garbage\r\n\r\n").is_err());
    }
}
