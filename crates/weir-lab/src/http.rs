//! One small HTTP/1.1 GET for the lab's own probes: readiness, the origin's `/stats`, weir's
//! `/metrics`, parsed with weir's codec. Not for load (the load has its own clients).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bodies larger than this are refused (metrics pages are a few KiB).
const MAX_RESPONSE: usize = 4 << 20;

/// The most trailer bytes a chunked body may end with.
const MAX_TRAILERS: usize = 4096;

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
/// chunked coding or the close, as weir's own codec (`weir-http`) reads them.
pub fn parse_response(bytes: &[u8]) -> io::Result<Response> {
    let limits = weir_http::Limits::default();
    let (head, used) = match weir_http::parse_response(bytes, &limits, weir_http::Method::Get) {
        Ok(weir_http::Parsed::Complete(head, used)) => (head, used),
        Ok(weir_http::Parsed::Partial) => return Err(invalid("incomplete response head")),
        Err(_) => return Err(invalid("malformed response head")),
    };
    let rest = &bytes[used..];
    let body = match head.framing() {
        weir_http::BodyFraming::None => Vec::new(),
        weir_http::BodyFraming::Length(length) => usize::try_from(length)
            .ok()
            .and_then(|length| rest.get(..length))
            .ok_or_else(|| invalid("body shorter than Content-Length"))?
            .to_vec(),
        weir_http::BodyFraming::Chunked => dechunk(rest)?,
        weir_http::BodyFraming::CloseDelimited => rest.to_vec(),
    };
    Ok(Response {
        status: head.status(),
        body,
    })
}

fn dechunk(rest: &[u8]) -> io::Result<Vec<u8>> {
    let mut decoder = weir_http::ChunkedDecoder::new(MAX_TRAILERS);
    let mut buffer = bytes::BytesMut::from(rest);
    let mut body = Vec::new();
    loop {
        match decoder.decode(&mut buffer) {
            Ok(weir_http::Decoded::Data(data)) => body.extend_from_slice(&data),
            Ok(weir_http::Decoded::Done { .. }) => return Ok(body),
            Ok(weir_http::Decoded::NeedMore) => return Err(invalid("short chunked body")),
            Err(_) => return Err(invalid("bad chunked body")),
        }
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
