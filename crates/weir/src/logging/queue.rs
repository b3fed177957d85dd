//! weir's own log lines on their way out: formatted by the thread that logs, queued, and
//! written by a thread of its own, so a reader that stops reading (a full pipe) costs
//! dropped lines, counted, instead of a stalled worker.
//!
//! The queue holds at most a set number of lines but takes memory only for the lines in
//! it: the channel grows by blocks of a few dozen lines and gives each block back once
//! written. A queue made in advance for its whole bound (as a bounded channel's ring is)
//! would hold half a MiB for 16,384 lines from the start, written or not.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long [`Queue::flush`] waits for the writer thread: past it a stuck reader loses
/// what is still queued.
pub const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// What the writer thread is sent.
enum Message {
    Line(Vec<u8>),
    /// Answered once every line sent before it has been written.
    Flush(mpsc::SyncSender<()>),
}

/// The sending side, shared by every thread that logs (as the subscriber's writer).
pub struct Queue {
    sender: mpsc::Sender<Message>,
    limit: usize,
    /// Lines sent and not yet taken by the writer thread.
    queued: Arc<AtomicUsize>,
    dropped: AtomicU64,
}

impl Queue {
    /// Starts the writer thread, `name`, writing to `out`; at most `limit` lines wait.
    pub fn start(
        out: impl Write + Send + 'static,
        limit: usize,
        name: &str,
    ) -> io::Result<Arc<Queue>> {
        let (sender, receiver) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let taken = Arc::clone(&queued);
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || write_lines(&receiver, &taken, out))?;
        Ok(Arc::new(Queue {
            sender,
            limit,
            queued,
            dropped: AtomicU64::new(0),
        }))
    }

    /// Lines dropped because the queue was full (or its thread gone).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits, [`FLUSH_WAIT`] at most, until every line queued so far is written.
    pub fn flush(&self) {
        let (done, wait) = mpsc::sync_channel(1);
        if self.sender.send(Message::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(FLUSH_WAIT);
        }
    }

    fn push(&self, line: &[u8]) {
        // Counted before it is sent, so the writer's decrement never comes first.
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.limit {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.sender.send(Message::Line(line.to_vec())).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The writer thread: takes what waits, writes it in one call, until every sender is gone.
fn write_lines(receiver: &mpsc::Receiver<Message>, queued: &AtomicUsize, mut out: impl Write) {
    /// Lines gathered into one write, at most.
    const BATCH: usize = 64;
    let mut batch = Vec::new();
    let mut flushes = Vec::new();
    while let Ok(first) = receiver.recv() {
        let mut next = Some(first);
        let mut lines = 0;
        while let Some(message) = next {
            match message {
                Message::Line(line) => {
                    queued.fetch_sub(1, Ordering::Relaxed);
                    batch.extend_from_slice(&line);
                    lines += 1;
                }
                Message::Flush(done) => flushes.push(done),
            }
            next = match lines < BATCH {
                true => receiver.try_recv().ok(),
                false => None,
            };
        }
        // Nothing to do about a standard error that cannot be written: the line is lost.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
        batch.clear();
        // A batch that grew large (a burst) is not kept for the quiet that follows.
        batch.shrink_to(64 * 1024);
        for done in flushes.drain(..) {
            let _ = done.try_send(());
        }
    }
}

/// The queue as tracing's writer: each formatted line is one `write_all`, so one line.
impl<'a> MakeWriter<'a> for Writer {
    type Writer = &'a Queue;

    fn make_writer(&'a self) -> &'a Queue {
        &self.0
    }
}

/// [`Queue`]'s handle for tracing-subscriber.
pub struct Writer(pub Arc<Queue>);

impl Write for &Queue {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Instant;

    use super::*;

    /// What [`Held`] was written, and whether writes wait.
    #[derive(Default)]
    struct Written {
        bytes: Vec<u8>,
        blocked: bool,
    }

    /// An output that holds what is written, and can be made to block.
    #[derive(Clone, Default)]
    struct Held {
        state: Arc<(Mutex<Written>, Condvar)>,
    }

    impl Held {
        fn blocked() -> Held {
            let held = Held::default();
            held.state.0.lock().unwrap().blocked = true;
            held
        }

        fn release(&self) {
            self.state.0.lock().unwrap().blocked = false;
            self.state.1.notify_all();
        }

        fn text(&self) -> String {
            String::from_utf8(self.state.0.lock().unwrap().bytes.clone()).unwrap()
        }
    }

    impl Write for Held {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let (lock, wake) = &*self.state;
            let mut state = wake
                .wait_while(lock.lock().unwrap(), |s| s.blocked)
                .unwrap();
            state.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn line(n: usize) -> String {
        format!("line {n}\n")
    }

    #[test]
    fn lines_come_out_in_order_once_flushed() {
        let out = Held::default();
        let queue = Queue::start(out.clone(), 2000, "test-log").unwrap();
        for n in 0..1000 {
            (&*queue).write_all(line(n).as_bytes()).unwrap();
        }
        queue.flush();
        assert_eq!(out.text(), (0..1000).map(line).collect::<String>());
        assert_eq!(queue.dropped(), 0);
    }

    #[test]
    fn a_stuck_reader_costs_dropped_lines_not_a_stalled_logger() {
        let out = Held::blocked();
        let queue = Queue::start(out.clone(), 100, "test-log").unwrap();
        let started = Instant::now();
        for n in 0..1000 {
            (&*queue).write_all(line(n).as_bytes()).unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        // The writer thread holds at most one batch while it is blocked; 100 wait behind it.
        let dropped = queue.dropped();
        assert!(
            (1000 - 100 - 64..=1000 - 100).contains(&dropped),
            "{dropped}"
        );
        // A flush gives up after FLUSH_WAIT.
        let flushing = Instant::now();
        queue.flush();
        let waited = flushing.elapsed();
        assert!(
            waited >= FLUSH_WAIT - Duration::from_millis(50),
            "{waited:?}"
        );
        assert!(waited < FLUSH_WAIT * 3, "{waited:?}");
        // Once the reader reads again, what was queued comes out, and the queue takes
        // lines again (once the writer has taken what filled it).
        out.release();
        queue.flush();
        assert_eq!(out.text().lines().count() as u64 + dropped, 1000);
        (&*queue).write_all(b"after\n").unwrap();
        queue.flush();
        let text = out.text();
        assert_eq!(queue.dropped(), dropped);
        assert!(text.ends_with("after\n"), "{text}");
    }

    #[test]
    fn an_empty_queue_flushes_at_once() {
        let queue = Queue::start(Held::default(), 16, "test-log").unwrap();
        let started = Instant::now();
        queue.flush();
        assert!(started.elapsed() < FLUSH_WAIT / 2);
        assert_eq!(queue.dropped(), 0);
    }
}
