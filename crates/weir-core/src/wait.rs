//! Small pieces the HTTP/2 connection tasks on both sides share (the proxy's
//! client connections, `weir-proxy/src/http2/own.rs`, and weir-upstream's node
//! connections, `weir-upstream/src/http2/own.rs`): the tasks waiting on one
//! stream's slot, and a socket write that is safe to drop half-way.

use std::task::{Context, Waker};

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The tasks waiting for something to happen to one stream.
#[derive(Debug, Default)]
pub struct Wakers(Vec<Waker>);

impl Wakers {
    /// Wakes them all; they look again.
    pub fn wake(&mut self) {
        for waker in self.0.drain(..) {
            waker.wake();
        }
    }

    /// Adds the task polling with `cx`, once.
    pub fn join(&mut self, cx: &Context<'_>) {
        if !self.0.iter().any(|w| w.will_wake(cx.waker())) {
            self.0.push(cx.waker().clone());
        }
    }
}

/// Writes some of `rest`, or flushes once all is written (TLS keeps records
/// until then): `None` for a flush. Both are safe to drop half-way.
pub async fn write_or_flush<W: AsyncWrite + Unpin>(
    writer: &mut W,
    rest: &[u8],
) -> std::io::Result<Option<usize>> {
    if rest.is_empty() {
        writer.flush().await.map(|()| None)
    } else {
        writer.write(rest).await.map(Some)
    }
}
