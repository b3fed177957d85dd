//! The buffered relay between two plain TCP sockets, driven by readiness (`try_read`,
//! `try_write`) rather than `AsyncRead`: a read that returns less than the buffer holds
//! means the socket was drained (TCP hands over everything queued, up to the length asked),
//! so its readiness is cleared there and then (the readiness from before the read, not any
//! newer one) instead of by one more `read` that would only say "would block". On a request/response session that is one system call fewer per
//! message and direction. Same contract as [`relay`](super::relay).
//!
//! With `adaptive`, a direction whose read fills the whole buffer is a bulk flow: it moves to
//! `splice(2)` for the rest of the session, where bytes no longer pass through user space.
//!
//! A direction's buffer is allocated when its socket first becomes readable, and never
//! zeroed (reads go into its spare capacity): a session that only connects and closes, or
//! that sits idle, holds no buffer.

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::splice::{Activity, race_idle, read_ready, write_ready};
use super::{End, Moved, RelaySettings, Relayed, Tally};

/// Relays bytes between two plain TCP sockets through a buffer per direction; `adaptive`
/// moves a direction to `splice(2)` once it carries bulk.
pub async fn relay_tcp(
    client: &TcpStream,
    node: &TcpStream,
    settings: RelaySettings,
    adaptive: bool,
    tally: &Tally,
) -> Relayed {
    let up_bytes = tally.from(End::Client);
    let down_bytes = tally.from(End::Node);
    let activity = Activity::new();
    // Each future pinned where it is made: moved into `try_join!`'s state and down the
    // idle race's arguments instead, each move copied the directions' states whole, about
    // 600 instructions per session (`bench/insns --modes l4`).
    let both = std::pin::pin!(async {
        let up = std::pin::pin!(one_way(
            client,
            node,
            (End::Client, End::Node),
            (settings, adaptive),
            up_bytes,
            &activity,
        ));
        let down = std::pin::pin!(one_way(
            node,
            client,
            (End::Node, End::Client),
            (settings, adaptive),
            down_bytes,
            &activity,
        ));
        tokio::try_join!(up, down)
    });
    let ended = race_idle(both, &activity, settings.idle_timeout).await;
    tally.relayed(ended)
}

/// One direction until EOF (then the writer's write side is shut down) or an error.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    (from_end, to_end): (End, End),
    (settings, mut adaptive): (RelaySettings, bool),
    bytes: &Moved,
    activity: &Activity,
) -> Result<(), (End, io::Error)> {
    let size = settings.buffer.max(1);
    let mut buffer: Vec<u8> = Vec::new();
    let mut bulk = false;
    loop {
        let read = loop {
            read_ready(from).await.map_err(|error| (from_end, error))?;
            buffer.clear();
            buffer.reserve_exact(size);
            // A short read drained the socket: its readiness is cleared so the next wait is
            // for the next arrival, without asking the kernel again. It is cleared through
            // this outer `try_io`, whose readiness was taken before the read: bytes that
            // arrived during the read set a newer readiness, which stays. (Cleared after the
            // read instead, it could swallow their only edge-triggered event, and the
            // session would stall with bytes waiting.)
            let mut short = None;
            let attempt = from.try_io(Interest::READABLE, || {
                let read = from.try_read_buf(&mut buffer)?;
                if read > 0 && read < size {
                    short = Some(read);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(read)
            });
            match attempt {
                Ok(read) => break read,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => match short {
                    Some(read) => break read,
                    None => continue,
                },
                Err(error) => return Err((from_end, error)),
            }
        };
        if read == 0 {
            return activity.pass_on_eof(to, to_end);
        }
        if read >= size {
            bulk = adaptive;
        }
        activity.touch();
        let mut written = 0;
        while written < read {
            write_ready(to).await.map_err(|error| (to_end, error))?;
            match to.try_write(&buffer[written..read]) {
                Ok(0) => return Err((to_end, io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    written += n;
                    bytes.add(n as u64);
                    activity.touch();
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Err((to_end, error)),
            }
        }
        if bulk {
            match super::splice::Pipe::take(settings.pipe) {
                // A pipe smaller than the buffer (the kernel's pipe limit for the user was
                // reached: `splice.rs`) would move bulk in smaller steps than the copy does.
                Ok(pipe) if pipe.capacity() >= size => {
                    // The buffer is not needed again: freed now rather than held for as
                    // long as the session splices.
                    drop(std::mem::take(&mut buffer));
                    return super::splice::one_way(
                        pipe,
                        from,
                        to,
                        (from_end, to_end),
                        bytes,
                        activity,
                    )
                    .await;
                }
                // Out of descriptors (or pipe capacity) for a pipe: the copy goes on, and
                // stops trying.
                _ => (bulk, adaptive) = (false, false),
            }
        }
    }
}
