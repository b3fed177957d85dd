//! The zero-copy relay (Linux): per direction, `splice(2)` moves bytes from the reading
//! socket into a pipe and from the pipe into the writing socket, so they never pass through
//! user space. Pipes are reused from a small per-thread pool (one that still holds bytes is
//! never put back), so a short session does not pay for creating and closing two pipes.
//!
//! Each pipe is sized to the virtual server's `tcp.pipe` (32 KiB by default), and one
//! `splice(2)` moves up to that much. Through the kernel's default pipe (64 KiB) the relay
//! cost more CPU per MiB than copying through a 16 KiB buffer. The best size depends on the
//! traffic: for a one-way download, 32 KiB cost a fifth less than the copy, while 256 KiB cost
//! more, because each read drained the node's socket and the relay slept and woke more
//! often; for 1 MiB echoed both ways at once, 256 KiB was the cheapest (BENCHMARKING.md,
//! "Layer 4", 2026-12-04). The kernel counts a pipe's capacity against its
//! user even while the pipe is empty, and past `fs.pipe-user-pages-soft` gives an
//! unprivileged process pipes of two pages and refuses to grow them: a pipe that did not get
//! its size says so once in the log, and the adaptive relay then keeps copying
//! (`tcp_copy.rs`).

use std::cell::RefCell;
use std::io;
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use nix::fcntl::{OFlag, SpliceFFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{End, Ended, Moved, RelaySettings, Relayed, Tally};

/// Pipe capacity kept per thread between sessions, bytes: 128 pipes of the default 32 KiB
/// (or 64 of the kernel's 64 KiB). It counts against the user's pipe limit while it waits.
const POOLED_PIPE_BYTES: usize = 4 * 1024 * 1024;

/// Whether a pipe that did not get the capacity asked of it was logged (once per process).
static SHORT_PIPE_LOGGED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static PIPES: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

/// A kernel pipe, both ends non-blocking.
pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// The capacity asked of it, bytes (`tcp.pipe`).
    asked: usize,
    /// The capacity the kernel gave it, bytes: what one `splice(2)` into it moves at most.
    capacity: usize,
}

impl Pipe {
    /// One of `capacity` bytes from the thread's pool, else a new one (or a pooled one of
    /// another size, resized): fails when weir is out of descriptors (a pipe needs two),
    /// and the caller then copies instead. The kernel may give less than asked (see the
    /// module's notes): [`Pipe::capacity`] says what it has.
    pub(super) fn take(capacity: usize) -> io::Result<Pipe> {
        let pooled = PIPES.with(|pipes| {
            let mut pipes = pipes.borrow_mut();
            let same = pipes.iter().rposition(|pipe| pipe.asked == capacity);
            same.map(|at| pipes.swap_remove(at)).or_else(|| pipes.pop())
        });
        let mut pipe = match pooled {
            Some(pipe) if pipe.asked == capacity => return Ok(pipe),
            Some(pipe) => pipe,
            None => {
                let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
                Pipe {
                    read,
                    write,
                    asked: 0,
                    capacity: 0,
                }
            }
        };
        pipe.ask(capacity);
        Ok(pipe)
    }

    /// Asks the kernel for `capacity` bytes (it rounds up to a power of two pages) and
    /// learns what it got. An empty pipe can always shrink; growing fails past
    /// `fs.pipe-max-size`, or past the user's pipe limit for an unprivileged process.
    fn ask(&mut self, capacity: usize) {
        use nix::fcntl::{FcntlArg, fcntl};
        self.asked = capacity;
        let wanted = i32::try_from(capacity).unwrap_or(i32::MAX);
        let given = match fcntl(&self.write, FcntlArg::F_SETPIPE_SZ(wanted)) {
            Ok(given) => given,
            Err(error) => {
                let given = fcntl(&self.write, FcntlArg::F_GETPIPE_SZ).unwrap_or(0);
                if !SHORT_PIPE_LOGGED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %error, asked = capacity, given,
                        "a splice pipe did not get the capacity asked (tcp.pipe): over \
                         fs.pipe-max-size, or the user's pipe limit (fs.pipe-user-pages-soft) \
                         for a process without CAP_SYS_RESOURCE; logged once"
                    );
                }
                given
            }
        };
        self.capacity = usize::try_from(given).unwrap_or(0);
    }

    /// The capacity the kernel gave it, bytes.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(test)]
    pub(super) fn read_fd(&self) -> &OwnedFd {
        &self.read
    }

    /// Back to the pool, while the pool holds less than [`POOLED_PIPE_BYTES`]; only called
    /// on an empty pipe.
    pub(super) fn put_back(self) {
        PIPES.with(|pipes| {
            let mut pipes = pipes.borrow_mut();
            let held: usize = pipes.iter().map(|pipe| pipe.capacity).sum();
            if held + self.capacity <= POOLED_PIPE_BYTES {
                pipes.push(self);
            }
        });
    }
}

/// Completes once `socket` is readable (bytes, the end, or an error), as
/// `TcpStream::readable` does, but through the socket's one reader waker
/// (`poll_read_ready`) instead of a waiter in its list: that list is locked to join it and
/// to leave it, for every wait. A session has one reader and one writer per socket (its two
/// directions), so the one waker each is enough. `bench/insns --modes l4rr`: about 650
/// user-space instructions fewer per exchange.
pub(super) async fn read_ready(socket: &TcpStream) -> io::Result<()> {
    std::future::poll_fn(|cx| socket.poll_read_ready(cx)).await
}

/// As [`read_ready`], for writing (`poll_write_ready`).
pub(super) async fn write_ready(socket: &TcpStream) -> io::Result<()> {
    std::future::poll_fn(|cx| socket.poll_write_ready(cx)).await
}

/// What the two directions of a session share: when bytes last moved either way (as
/// nanoseconds since `start`) and how many directions have seen their EOF.
pub(super) struct Activity {
    start: Instant,
    last: AtomicU64,
    ended: AtomicU8,
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
            ended: AtomicU8::new(0),
        }
    }

    /// Passes a direction's EOF on to `to`. The first direction to end shuts `to`'s write side
    /// down (the half-close); the second does not, because the session closes both sockets
    /// right after (`session.rs`) and the close sends that FIN: one system call fewer per
    /// session. Either way every byte read was written before this is called.
    pub(super) fn pass_on_eof(&self, to: &TcpStream, to_end: End) -> Result<(), (End, io::Error)> {
        if self.ended.fetch_add(1, Ordering::Relaxed) > 0 {
            return Ok(());
        }
        match socket2::SockRef::from(to).shutdown(Shutdown::Write) {
            Err(error) if error.kind() != io::ErrorKind::NotConnected => Err((to_end, error)),
            _ => Ok(()),
        }
    }

    pub(super) fn touch(&self) {
        let nanos = self.start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        self.last.store(nanos, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + std::time::Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }
}

/// Relays bytes between two plain TCP sockets with `splice(2)`; the same contract as
/// [`relay`](super::relay): half-close passed on, idle timeout across both directions.
/// `None`, having moved nothing, when there are no descriptors for its two pipes: the
/// caller then copies the session instead, so it is served, only not zero-copy.
pub async fn splice(
    client: &TcpStream,
    node: &TcpStream,
    settings: RelaySettings,
    tally: &Tally,
) -> Option<Relayed> {
    let pipes = Pipe::take(settings.pipe).and_then(|up| Ok((up, Pipe::take(settings.pipe)?)));
    let Ok((up_pipe, down_pipe)) = pipes else {
        tracing::debug!("no descriptors for splice pipes: copying this session");
        return None;
    };
    let up_bytes = tally.from(End::Client);
    let down_bytes = tally.from(End::Node);
    let activity = Activity::new();
    // Each future pinned where it is made: moved into `try_join!`'s state and down the
    // idle race's arguments instead, each move copied the directions' states whole, about
    // 600 instructions per session (`bench/insns --modes l4`).
    let both = std::pin::pin!(async {
        let up = std::pin::pin!(one_way(
            up_pipe,
            client,
            node,
            (End::Client, End::Node),
            up_bytes,
            &activity,
        ));
        let down = std::pin::pin!(one_way(
            down_pipe,
            node,
            client,
            (End::Node, End::Client),
            down_bytes,
            &activity,
        ));
        tokio::try_join!(up, down)
    });
    let ended = race_idle(both, &activity, settings.idle_timeout).await;
    Some(tally.relayed(ended))
}

/// How a relay ended: both directions done (`both`), one failed, or nothing
/// moved for `idle`. The idle timeout is final only once the runtime has polled its I/O
/// driver after it fired and the directions found nothing more to move (see
/// `weir_core::timeout::timeout_at_settled`: a process stopped past it reads its timers
/// before its sockets).
pub(super) async fn race_idle<T>(
    both: impl Future<Output = Result<T, (End, io::Error)>>,
    activity: &Activity,
    idle: std::time::Duration,
) -> Ended {
    let done = weir_core::timeout::until_idle_settled(
        both,
        || until_idle(activity, idle),
        || activity.last(),
    )
    .await;
    match done {
        Some(Ok(_)) => Ended::Closed,
        Some(Err((end, error))) => end.ended(error),
        None => Ended::IdleTimeout,
    }
}

/// Returns once nothing moved for `idle` (the timer is re-armed only when it fires).
async fn until_idle(activity: &Activity, idle: std::time::Duration) {
    loop {
        let deadline = activity.last() + idle;
        if deadline <= Instant::now() {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// One direction until EOF (then the writer's write side is shut down) or an error; each
/// `splice(2)` from the socket moves up to the pipe's capacity.
pub(super) async fn one_way(
    pipe: Pipe,
    from: &TcpStream,
    to: &TcpStream,
    (from_end, to_end): (End, End),
    bytes: &Moved,
    activity: &Activity,
) -> Result<(), (End, io::Error)> {
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    // A pipe the kernel would not size at all still takes a page.
    let chunk = pipe.capacity().max(4096);
    loop {
        // The pipe is empty here, so "would block" can only mean the socket has nothing.
        let filled = loop {
            read_ready(from).await.map_err(|error| (from_end, error))?;
            let attempt = from.try_io(Interest::READABLE, || {
                Ok(nix::fcntl::splice(
                    from,
                    None,
                    &pipe.write,
                    None,
                    chunk,
                    flags,
                )?)
            });
            match attempt {
                Ok(filled) => break filled,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Err((from_end, error)),
            }
        };
        if filled == 0 {
            pipe.put_back();
            return activity.pass_on_eof(to, to_end);
        }
        activity.touch();
        let mut pending = filled;
        while pending > 0 {
            write_ready(to).await.map_err(|error| (to_end, error))?;
            let attempt = to.try_io(Interest::WRITABLE, || {
                Ok(nix::fcntl::splice(
                    &pipe.read, None, to, None, pending, flags,
                )?)
            });
            match attempt {
                Ok(moved) => {
                    pending -= moved;
                    bytes.add(moved as u64);
                    activity.touch();
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Err((to_end, error)),
            }
        }
    }
}
