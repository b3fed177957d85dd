//! The client side of a connection: buffers, timed reads and writes, and the
//! `read_head` stage.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use weir_core::{Error, ErrorKind, ShutdownSignal, Side};
use weir_http::{HeadScan, RequestHead, Version};
use weir_tls::ServerStream;

use crate::answer::{Failure, body_for, headers_for};
use crate::route::VirtualServerRuntime;

/// Smallest free space worth a read call.
const READ_RESERVE: usize = 4096;
/// After an error answer: how long, and how many bytes, to keep reading what
/// the client still sends before closing.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// ... and stop as soon as the client pauses this long.
const LINGER_PAUSE: Duration = Duration::from_millis(500);
const LINGER_BYTES: usize = 1024 * 1024;
/// How long a close_notify and FIN may take to leave when weir closes.
const CLOSE_TIME: Duration = Duration::from_secs(1);

/// One client connection and its reusable buffers.
#[derive(Debug)]
pub(crate) struct Client {
    pub stream: ServerStream,
    pub peer: SocketAddr,
    /// Bytes read from the client and not yet used (pipelined requests stay here).
    pub read_buf: BytesMut,
    /// Scratch for what goes to the client.
    pub write_buf: BytesMut,
    /// Scratch for what goes to the node (kept here to reuse its allocation).
    pub upstream_out: BytesMut,
    /// Scratch for what comes from the node.
    pub upstream_in: BytesMut,
    pub accepted_at: Instant,
    /// Requests read on this connection so far.
    pub requests: u32,
    /// Subject of the verified client certificate (HTTPS with client certificates).
    pub client_subject: Option<String>,
}

impl Client {
    pub(crate) fn new(stream: ServerStream, peer: SocketAddr, accepted_at: Instant) -> Client {
        Client {
            stream,
            peer,
            read_buf: BytesMut::new(),
            write_buf: BytesMut::new(),
            upstream_out: BytesMut::new(),
            upstream_in: BytesMut::new(),
            accepted_at,
            requests: 0,
            client_subject: None,
        }
    }

    /// The read_head stage: waits for the next request head. `Ok(None)` means
    /// the connection should close quietly (client closed, idle timeout, or
    /// shutdown while idle).
    pub(crate) async fn read_head(
        &mut self,
        vs: &VirtualServerRuntime,
        shutdown: &mut ShutdownSignal,
    ) -> Result<Option<RequestHead>, Failure> {
        let timeouts = &vs.config.timeouts;
        // The first head must arrive within header_read of the accept; later
        // ones may idle first, then have header_read from their first byte.
        let mut head_deadline =
            (self.requests == 0).then(|| self.accepted_at + timeouts.header_read);
        // Parse only when it can tell something new, not on every read: a
        // head sent one byte at a time must not cost a parse per byte.
        let mut scan = HeadScan::new();
        loop {
            if !self.read_buf.is_empty()
                && scan.ready(&self.read_buf, vs.head_limits.max_head_bytes)
            {
                match RequestHead::split_from(&mut self.read_buf, &vs.head_limits) {
                    Ok(Some(head)) => {
                        self.requests += 1;
                        return Ok(Some(head));
                    }
                    Ok(None) => {}
                    Err(error) => return Err(Failure::parse(error)),
                }
            }
            if !self.read_buf.is_empty() {
                head_deadline.get_or_insert_with(|| Instant::now() + timeouts.header_read);
            }
            let idle = self.read_buf.is_empty();
            let deadline = match head_deadline {
                Some(deadline) => deadline,
                None => Instant::now() + timeouts.idle,
            };
            self.read_buf.reserve(READ_RESERVE);
            let read = tokio::select! {
                biased;
                read = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.read_buf)) => read,
                _ = shutdown.triggered(), if idle => return Ok(None),
            };
            match read {
                Ok(Ok(0)) if idle => return Ok(None),
                Ok(Ok(0)) => {
                    return Err(Failure::silent(
                        Error::new(ErrorKind::ClientClosed, Side::Downstream)
                            .context("closed in the middle of a request head"),
                    ));
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    return Err(Failure::silent(Error::downstream(
                        ErrorKind::ClientClosed,
                        error,
                    )));
                }
                // Nothing sent at all (a browser's spare connection, or a
                // keep-alive client gone quiet): close without an answer.
                Err(_) if idle => return Ok(None),
                Err(_) => {
                    return Err(Failure::from_error(
                        Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                            .context("request head not received in time"),
                    ));
                }
            }
        }
    }

    /// Reads more bytes into `read_buf`, waiting until `deadline` at most
    /// (then 408, with `late` as the reason). Errors if the client closed.
    pub(crate) async fn read_more(
        &mut self,
        deadline: Instant,
        late: &'static str,
    ) -> Result<usize, Failure> {
        self.read_buf.reserve(READ_RESERVE);
        match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.read_buf)).await {
            Ok(Ok(0)) => Err(Failure::silent(
                Error::new(ErrorKind::ClientClosed, Side::Downstream)
                    .context("closed in the middle of a request body"),
            )),
            Ok(Ok(n)) => Ok(n),
            Ok(Err(error)) => Err(Failure::silent(Error::downstream(
                ErrorKind::ClientClosed,
                error,
            ))),
            Err(_) => Err(Failure::from_error(
                Error::new(ErrorKind::ClientTimeout, Side::Downstream).context(late),
            )),
        }
    }

    /// Writes `write_buf` to the client and clears it.
    pub(crate) async fn flush(&mut self, timeout: Duration) -> Result<(), Failure> {
        let result = tokio::time::timeout(timeout, async {
            self.stream.write_all(&self.write_buf).await?;
            self.stream.flush().await
        })
        .await;
        self.write_buf.clear();
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(Failure::silent(Error::downstream(
                ErrorKind::ClientClosed,
                error,
            ))),
            Err(_) => Err(Failure::silent(
                Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                    .context("client did not read the response in time"),
            )),
        }
    }

    /// Writes `bytes` (after anything in `write_buf`) to the client.
    pub(crate) async fn send(&mut self, bytes: &[u8], timeout: Duration) -> Result<(), Failure> {
        if !self.write_buf.is_empty() {
            if bytes.len() <= 64 * 1024 {
                self.write_buf.extend_from_slice(bytes);
                return self.flush(timeout).await;
            }
            self.flush(timeout).await?;
        }
        let write = async {
            self.stream.write_all(bytes).await?;
            self.stream.flush().await
        };
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(Failure::silent(Error::downstream(
                ErrorKind::ClientClosed,
                error,
            ))),
            Err(_) => Err(Failure::silent(
                Error::new(ErrorKind::ClientTimeout, Side::Downstream)
                    .context("client did not read the response in time"),
            )),
        }
    }

    /// Closes after an error answer without losing it: our side is shut
    /// down first, then whatever the client is still sending (the rest of a
    /// rejected body) is read and discarded for a bounded time. Closing with
    /// unread bytes would make the kernel reset the connection, which can
    /// destroy the answer before the client reads it.
    pub(crate) async fn linger_close(&mut self) {
        if self.stream.shutdown().await.is_err() {
            return;
        }
        let end = Instant::now() + LINGER_TIME;
        let mut discarded = 0;
        while discarded < LINGER_BYTES {
            self.read_buf.clear();
            self.read_buf.reserve(READ_RESERVE);
            let deadline = end.min(Instant::now() + LINGER_PAUSE);
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.read_buf)).await
            {
                Ok(Ok(n)) if n > 0 => discarded += n,
                _ => break,
            }
        }
    }

    /// Closes a connection weir chose to end (after `Connection: close`, an
    /// HTTP/1.0 response, an idle timeout, a drain): on TLS a close_notify
    /// goes out first, so clients can tell the end from a truncation
    /// (OpenSSL 3 reports "unexpected eof" without it). Bounded in time.
    pub(crate) async fn close(&mut self) {
        let _ = tokio::time::timeout(CLOSE_TIME, self.stream.shutdown()).await;
    }

    /// Sends one of weir's own answers (an error status) and returns its size.
    pub(crate) async fn answer(
        &mut self,
        status: u16,
        version: Version,
        keep_alive: bool,
        timeout: Duration,
    ) -> Result<u64, Failure> {
        self.write_buf.clear();
        weir_http::write_simple_response(
            status,
            version,
            keep_alive,
            headers_for(status),
            body_for(status),
            &mut self.write_buf,
        );
        let size = self.write_buf.len() as u64;
        self.flush(timeout).await?;
        Ok(size)
    }
}
