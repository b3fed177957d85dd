//! Minimal raw HTTP/1.1 clients: exact bytes in, parsed responses out.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response as the client saw it.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names as received (original case).
    pub headers: Vec<(String, String)>,
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

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A client connection that sends raw bytes and reads responses one by one.
pub struct Connection {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> std::io::Result<Connection> {
        Ok(Connection {
            stream: TcpStream::connect(addr).await?,
            buf: Vec::new(),
        })
    }

    pub async fn send(&mut self, raw: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(raw).await
    }

    /// Reads one response (to a request that was not HEAD).
    pub async fn response(&mut self) -> anyhow::Result<Response> {
        self.response_to(false).await
    }

    /// Reads one response; `head` says the request was HEAD (no body follows).
    pub async fn response_to(&mut self, head: bool) -> anyhow::Result<Response> {
        tokio::time::timeout(Duration::from_secs(10), self.read_response(head))
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

    async fn fill(&mut self) -> anyhow::Result<()> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk).await?;
        anyhow::ensure!(n > 0, "connection closed");
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    async fn read_response(&mut self, head_request: bool) -> anyhow::Result<Response> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 128];
            let mut parsed = httparse::Response::new(&mut headers);
            let status = parsed.parse(&self.buf)?;
            if let httparse::Status::Complete(used) = status {
                let code = parsed.code.unwrap_or(0);
                let headers: Vec<(String, String)> = parsed
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                self.buf.drain(..used);
                if (100..200).contains(&code) && code != 101 {
                    continue;
                }
                let response = Response {
                    status: code,
                    headers,
                    body: Vec::new(),
                };
                return self.read_body(response, head_request).await;
            }
            self.fill().await?;
        }
    }

    async fn read_body(
        &mut self,
        mut response: Response,
        head_request: bool,
    ) -> anyhow::Result<Response> {
        if head_request
            || response.status == 204
            || response.status == 304
            || response.status == 101
        {
            return Ok(response);
        }
        let chunked = response
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        if chunked {
            loop {
                let Some(line_end) = find_crlf(&self.buf) else {
                    self.fill().await?;
                    continue;
                };
                let size_text = std::str::from_utf8(&self.buf[..line_end])?;
                let size =
                    usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)?;
                if size == 0 {
                    // trailers until an empty line
                    loop {
                        if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                            self.buf.drain(..end + 4);
                            return Ok(response);
                        }
                        if self.buf.len() >= line_end + 4
                            && &self.buf[line_end..line_end + 4] == b"\r\n\r\n"
                        {
                            self.buf.drain(..line_end + 4);
                            return Ok(response);
                        }
                        self.fill().await?;
                    }
                }
                while self.buf.len() < line_end + 2 + size + 2 {
                    self.fill().await?;
                }
                response
                    .body
                    .extend_from_slice(&self.buf[line_end + 2..line_end + 2 + size]);
                self.buf.drain(..line_end + 2 + size + 2);
            }
        }
        if let Some(length) = response.header("content-length") {
            let length: usize = length.trim().parse()?;
            while self.buf.len() < length {
                self.fill().await?;
            }
            response.body = self.buf.drain(..length).collect();
            return Ok(response);
        }
        // Close-delimited.
        loop {
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        response.body = std::mem::take(&mut self.buf);
        Ok(response)
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    find(buf, b"\r\n")
}

fn find(buf: &[u8], needle: &[u8]) -> Option<usize> {
    buf.windows(needle.len()).position(|w| w == needle)
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
