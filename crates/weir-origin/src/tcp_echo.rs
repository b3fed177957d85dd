//! Echo mode: one raw TCP connection, every byte read written back, counted in `bytes_echoed`.
//!
//! It ends when the client closes (answered with FIN once everything read was written back),
//! when nothing arrives for `idle_timeout` (or a write stalls that long), on a socket error, or
//! at shutdown (FIN after the write in progress, if any, finishes).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tracing::debug;
use weir_core::ShutdownSignal;

use crate::shared::Shared;
use crate::stats::OpenConnection;

/// Bytes read (and then written back) at a time.
const CHUNK: usize = 16 * 1024;

/// Echoes one accepted connection until it closes; errors end it with one debug line.
pub(crate) async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut shutdown: ShutdownSignal,
    open: OpenConnection,
) {
    let _open = open;
    let _ballast = shared.ballast();
    let result = echo(&mut stream, &shared, &mut shutdown).await;
    if let Err(error) = result {
        debug!(%peer, %error, "origin echo connection ended by an error");
        return;
    }
    // The client closed, went idle, or shutdown began: send FIN.
    let _ = stream.shutdown().await;
}

async fn echo(
    stream: &mut TcpStream,
    shared: &Shared,
    shutdown: &mut ShutdownSignal,
) -> io::Result<()> {
    let idle = shared.options.idle_timeout;
    let mut buffer = vec![0u8; CHUNK];
    loop {
        if shutdown.is_triggered() {
            return Ok(());
        }
        let read = tokio::select! {
            () = shutdown.triggered() => return Ok(()),
            read = timeout(idle, stream.read(&mut buffer)) => match read {
                Ok(read) => read?,
                Err(_elapsed) => return Ok(()),
            },
        };
        if read == 0 {
            return Ok(());
        }
        timeout(idle, stream.write_all(&buffer[..read]))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "echo write timed out"))??;
        shared.stats.count_echoed(read as u64);
    }
}
