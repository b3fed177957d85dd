//! `GET /metrics` for a tunnel side (`[metrics] listen`): the Prometheus text format, one
//! request per connection, everything else 404. Kept this small on purpose: the tunnel has no
//! admin API beyond its counters.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;

/// The longest request head read.
const MAX_HEAD: usize = 8192;

/// How long a client has to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds the metrics listener.
pub async fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address).await
}

/// Serves `/metrics` on `listener` forever.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tokio::spawn(answer(stream, Arc::clone(&metrics)));
    }
}

async fn answer(mut stream: TcpStream, metrics: Arc<Metrics>) {
    let mut head = Vec::with_capacity(512);
    let mut buffer = [0u8; 1024];
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < MAX_HEAD {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return false,
                Ok(count) => head.extend_from_slice(&buffer[..count]),
            }
        }
        true
    })
    .await;
    if read != Ok(true) {
        return;
    }
    let response = match route(&head) {
        Some(()) => {
            let body = metrics.render();
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        None => {
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
        }
    };
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// `Some` for `GET /metrics` (with or without a query).
fn route(head: &[u8]) -> Option<()> {
    let line = head.split(|&byte| byte == b'\r').next()?;
    let mut parts = line.split(|&byte| byte == b' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let path = target.split(|&byte| byte == b'?').next()?;
    (method == b"GET" && path == b"/metrics").then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_routed() {
        assert!(route(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n").is_some());
        assert!(route(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n").is_some());
        assert!(route(b"POST /metrics HTTP/1.1\r\n\r\n").is_none());
        assert!(route(b"GET / HTTP/1.1\r\n\r\n").is_none());
        assert!(route(b"").is_none());
    }
}
