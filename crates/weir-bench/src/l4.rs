//! Issue, L4: one transaction against a TCP echo server on a client connection — write the
//! payload while reading it back (so payloads larger than the socket buffers cannot deadlock),
//! check that what came back is what was sent, and in connect mode close (FIN) and wait for the
//! server's close, so a connection the server accepted and then reset counts as a failure.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::ReadHalf;

use crate::http1::{BUFFER_CAPACITY, Connection, Failure, Response, Stream};
use crate::plan::L4Mode;
use crate::record::ErrorKind;

impl Connection {
    /// Sends `payload` (if any), reads it back and, in connect mode, closes. The response has
    /// no status (0); its bytes are those read back.
    pub async fn echo(
        &mut self,
        buffer: &mut BytesMut,
        payload: &[u8],
        mode: L4Mode,
    ) -> Result<Response, Failure> {
        let mut bytes = 0;
        // L4 runs never plan TLS (tcp:// URLs only).
        let Stream::Plain(stream) = &mut self.stream else {
            return Err(Failure {
                kind: ErrorKind::Tls,
                bytes,
            });
        };
        if !payload.is_empty() {
            let (mut reader, mut writer) = stream.split();
            let write = async {
                writer.write_all(payload).await.map_err(|_| Failure {
                    kind: ErrorKind::Write,
                    bytes: 0,
                })
            };
            let ((), read) = tokio::try_join!(write, read_echo(&mut reader, buffer, payload))?;
            bytes = read;
        }
        if mode == L4Mode::Connect {
            let failure = |kind| Failure { kind, bytes };
            stream
                .shutdown()
                .await
                .map_err(|_| failure(ErrorKind::Write))?;
            buffer.clear();
            buffer.reserve(BUFFER_CAPACITY);
            match stream.read_buf(buffer).await {
                Ok(0) => {}
                // Nothing more was sent, so nothing more may come back.
                Ok(_) => return Err(failure(ErrorKind::Parse)),
                Err(_) => return Err(failure(ErrorKind::Read)),
            }
        }
        Ok(Response {
            status: 0,
            keep_alive: mode == L4Mode::RequestResponse,
            bytes,
            queued: std::time::Duration::ZERO,
            streams_allowed: None,
        })
    }
}

/// Reads until `expected.len()` bytes came back, each equal to what was sent; returns the
/// count. The peer closing early is a read error, different or extra bytes a parse error.
async fn read_echo(
    reader: &mut ReadHalf<'_>,
    buffer: &mut BytesMut,
    expected: &[u8],
) -> Result<u64, Failure> {
    let mut matched = 0;
    while matched < expected.len() {
        buffer.clear();
        buffer.reserve(BUFFER_CAPACITY);
        let failure = |kind| Failure {
            kind,
            bytes: matched as u64,
        };
        let read = match reader.read_buf(buffer).await {
            Ok(0) | Err(_) => return Err(failure(ErrorKind::Read)),
            Ok(read) => read,
        };
        let end = matched + read;
        if end > expected.len() || buffer[..read] != expected[matched..end] {
            return Err(Failure {
                kind: ErrorKind::Parse,
                bytes: end as u64,
            });
        }
        matched = end;
    }
    Ok(matched as u64)
}
