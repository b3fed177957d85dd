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
    /// Not whole within the timeout; `silent` when not a byte came (a client that waits
    /// for the server to speak first).
    Timeout { silent: bool },
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
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buffer = vec![0u8; max.min(4096)];
    let mut seen = 0;
    loop {
        // `timeout_at` looks at the clock only when the readiness is not there at once.
        if tokio::time::Instant::now() >= deadline {
            return Err(PeekError::Timeout { silent: seen == 0 });
        }
        let ready = match tokio::time::timeout_at(deadline, stream.ready(Interest::READABLE)).await
        {
            Ok(ready) => ready.map_err(|_| PeekError::Closed)?,
            Err(_elapsed) => return Err(PeekError::Timeout { silent: seen == 0 }),
        };
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
            // Nothing new. After the client's FIN nothing new can come, and the readiness
            // it left stays set (tokio keeps a closed state), so waiting again would return
            // at once, forever: the bytes will never be whole.
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                if ready.is_read_closed() {
                    return Err(PeekError::Closed);
                }
                // Whatever woke this loop, it yields to the other tasks now and then.
                tokio::task::consume_budget().await;
                continue;
            }
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
}
