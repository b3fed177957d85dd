//! Reading the first bytes of a connection without taking them: `recv(MSG_PEEK)` leaves them
//! in the kernel, so a ClientHello peeked for routing still reaches the TLS handshake (or the
//! node) untouched, and a PROXY header is taken only once it is known to be whole.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use nix::sys::socket::{MsgFlags, recv};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Why a peek gave no answer.
#[derive(Debug)]
pub(crate) enum PeekError {
    /// The client closed (or reset) before the bytes were whole.
    Closed,
    /// Not whole within the timeout.
    Timeout,
    /// More than `max` bytes without an answer.
    TooLong,
}

/// Peeks at the bytes `stream` received so far, as they grow, until `decide` answers
/// (`Some`), within `timeout`, looking at no more than `max` bytes.
pub(crate) async fn peek_until<T>(
    stream: &TcpStream,
    max: usize,
    timeout: Duration,
    mut decide: impl FnMut(&[u8]) -> Option<T>,
) -> Result<T, PeekError> {
    let work = async {
        let mut buffer = vec![0u8; max.min(4096)];
        let mut seen = 0;
        loop {
            stream.readable().await.map_err(|_| PeekError::Closed)?;
            let peeked = stream.try_io(Interest::READABLE, || {
                let n = recv(stream.as_raw_fd(), &mut buffer, MsgFlags::MSG_PEEK)
                    .map_err(io::Error::from)?;
                if n == seen && n != 0 && n < buffer.len() {
                    // Nothing new since the last look: wait for the next arrival.
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            let n = match peeked {
                Ok(0) => return Err(PeekError::Closed),
                Ok(n) => n,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => return Err(PeekError::Closed),
            };
            if let Some(answer) = decide(&buffer[..n]) {
                return Ok(answer);
            }
            seen = n;
            if n == buffer.len() {
                if buffer.len() >= max {
                    return Err(PeekError::TooLong);
                }
                buffer.resize((buffer.len() * 2).min(max), 0);
            }
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(PeekError::Timeout))
}
