//! The buffered relay: one buffer per direction, both directions driven by one future (no
//! split of either stream, so TLS streams work as they are).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::splice::{Activity, race_idle};
use super::{End, RelaySettings, Relayed, Tally};

/// One direction: read from one end into `buffer`, write it to the other, pass EOF on as a
/// shutdown of the writing side.
struct Direction {
    buffer: Box<[u8]>,
    /// Bytes of `buffer` not yet written: `start..end`.
    start: usize,
    end: usize,
    state: State,
    /// Written since the last flush (TLS keeps records until flushed).
    unflushed: bool,
    bytes: u64,
    /// Of `bytes`, those already added to the tally.
    reported: u64,
    from: End,
    to: End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Relaying,
    /// EOF read; shutting down the other end's write side.
    ShuttingDown,
    Done,
}

/// Relays bytes between `client` and `node` until both directions have ended (each FIN
/// passed on as a shutdown of the other side's write half), nothing moved for the idle
/// timeout, or an I/O error.
pub async fn relay<C, N>(
    client: &mut C,
    node: &mut N,
    settings: RelaySettings,
    tally: &Tally,
) -> Relayed
where
    C: AsyncRead + AsyncWrite + Unpin + ?Sized,
    N: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut up = Direction::new(settings.buffer, End::Client, End::Node);
    let mut down = Direction::new(settings.buffer, End::Node, End::Client);
    let activity = Activity::new();
    let both = poll_fn(|cx| {
        let mut moved = false;
        let up_done = match up.poll(cx, &mut *client, &mut *node, &mut moved) {
            Poll::Ready(Err(failure)) => return Poll::Ready(Err(failure)),
            other => other.is_ready(),
        };
        let down_done = match down.poll(cx, &mut *node, &mut *client, &mut moved) {
            Poll::Ready(Err(failure)) => return Poll::Ready(Err(failure)),
            other => other.is_ready(),
        };
        if up_done && down_done {
            return Poll::Ready(Ok(()));
        }
        if moved {
            up.report(tally);
            down.report(tally);
            activity.touch();
        }
        Poll::Pending
    });
    // The idle timeout as the other TCP relays keep it (settled: bytes that came while the
    // process was stopped past it are relayed, not cut by a reset).
    let ended = race_idle(both, &activity, settings.idle_timeout).await;
    up.report(tally);
    down.report(tally);
    tally.relayed(ended)
}

type Failure = (End, io::Error);

impl Direction {
    fn new(size: usize, from: End, to: End) -> Direction {
        Direction {
            buffer: vec![0; size.max(1)].into_boxed_slice(),
            start: 0,
            end: 0,
            state: State::Relaying,
            unflushed: false,
            bytes: 0,
            reported: 0,
            from,
            to,
        }
    }

    /// Adds what moved since the last report to `tally`.
    fn report(&mut self, tally: &Tally) {
        tally.from(self.from).add(self.bytes - self.reported);
        self.reported = self.bytes;
    }

    /// Moves what it can; `Ready(Ok)` once this direction is finished.
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        moved: &mut bool,
    ) -> Poll<Result<(), Failure>>
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        loop {
            match self.state {
                State::Done => return Poll::Ready(Ok(())),
                State::ShuttingDown => {
                    let shut = ready!(Pin::new(&mut *writer).poll_shutdown(cx));
                    self.state = State::Done;
                    // A peer that already closed both ways makes shutdown fail: nothing lost.
                    if let Err(error) = shut
                        && error.kind() != io::ErrorKind::NotConnected
                    {
                        return Poll::Ready(Err((self.to, error)));
                    }
                }
                State::Relaying if self.start < self.end => {
                    let written = ready!(
                        Pin::new(&mut *writer).poll_write(cx, &self.buffer[self.start..self.end])
                    )
                    .map_err(|error| (self.to, error))?;
                    if written == 0 {
                        return Poll::Ready(Err((self.to, io::ErrorKind::WriteZero.into())));
                    }
                    self.start += written;
                    self.bytes += written as u64;
                    self.unflushed = true;
                    *moved = true;
                }
                State::Relaying => {
                    let mut buffer = ReadBuf::new(&mut self.buffer);
                    match Pin::new(&mut *reader).poll_read(cx, &mut buffer) {
                        Poll::Ready(Ok(())) => {}
                        // A TLS peer's FIN without its close_notify: rustls reports the
                        // possible truncation, but the other side cannot be told of it (a
                        // plain node sees a FIN either way), so it is the end of this
                        // direction, as HAProxy and nginx take it; the other goes on.
                        Poll::Ready(Err(error)) if error.kind() == io::ErrorKind::UnexpectedEof => {
                            self.state = State::ShuttingDown;
                            continue;
                        }
                        Poll::Ready(Err(error)) => return Poll::Ready(Err((self.from, error))),
                        Poll::Pending => {
                            if self.unflushed {
                                ready!(Pin::new(&mut *writer).poll_flush(cx))
                                    .map_err(|error| (self.to, error))?;
                                self.unflushed = false;
                            }
                            return Poll::Pending;
                        }
                    }
                    let read = buffer.filled().len();
                    if read == 0 {
                        self.state = State::ShuttingDown;
                    } else {
                        (self.start, self.end) = (0, read);
                        *moved = true;
                    }
                }
            }
        }
    }
}
