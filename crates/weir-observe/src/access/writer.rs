//! The access log's writer: one thread per [`super::AccessLog`] that owns the output and
//! does every write to it, so no request's thread (and no tokio worker) ever waits on the
//! disk or on a reader. A log shipper that stops reading a pipe, a FIFO or standard
//! output would otherwise block the first thread to write once the pipe is full, then
//! every other one at the buffer's lock, signals included: the whole process.
//!
//! What the writer has not written yet is bounded ([`MAX_QUEUED`]): past it a batch is
//! dropped and its records counted lost ([`records_lost`], the metric
//! `weir_access_log_records_lost_total`), as records that fail to write (a full disk) are.
//! Both are reported in weir's own log at most once a minute.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bytes handed to the writer and not yet written past which a new batch is dropped.
pub(super) const MAX_QUEUED: usize = 16 * super::FLUSH_AT;

/// How long [`Writer::wait`] waits for the writer to catch up (a flush at exit, a test).
const WAIT: Duration = Duration::from_secs(2);

/// One report of lost records a minute at most.
const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Records of every access log written nowhere, since the process started.
static RECORDS_LOST: AtomicU64 = AtomicU64::new(0);

/// Records of every access log written nowhere since the process started: dropped while
/// the writer was behind (a reader that stopped reading) or failed to write (a full disk).
pub fn records_lost() -> u64 {
    RECORDS_LOST.load(Ordering::Relaxed)
}

/// Where the lines go.
#[derive(Debug)]
pub(super) enum Output {
    Stdout,
    File(File),
}

impl Output {
    /// Writes as much of `bytes` as it can: `Err` with how many bytes went out first.
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), (usize, io::Error)> {
        let mut written = 0;
        while written < bytes.len() {
            let result = match self {
                Output::Stdout => io::stdout().lock().write(&bytes[written..]),
                Output::File(file) => file.write(&bytes[written..]),
            };
            match result {
                Ok(0) => return Err((written, io::ErrorKind::WriteZero.into())),
                Ok(n) => written += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err((written, error)),
            }
        }
        if let Output::Stdout = self {
            let _ = io::stdout().lock().flush();
        }
        Ok(())
    }
}

/// Lines formatted but not yet handed to the writer, and how many records they hold.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub(super) bytes: Vec<u8>,
    pub(super) records: u64,
}

enum Job {
    Write(Batch),
    /// Write to this file from now on (what came before goes to the old one).
    Reopen(File),
    /// Answered once everything handed over before it is written (or lost).
    Done(mpsc::SyncSender<()>),
}

/// The sending side: cheap to call from any thread, never blocks.
#[derive(Debug)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
    queued: Arc<AtomicUsize>,
    reports: Arc<Reports>,
}

impl Writer {
    /// Starts the writer thread for `out`.
    pub(super) fn start(out: Output) -> io::Result<Writer> {
        let (jobs, received) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let reports = Arc::new(Reports::default());
        let thread = Thread {
            out,
            torn: false,
            queued: Arc::clone(&queued),
            reports: Arc::clone(&reports),
        };
        std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || thread.run(&received))?;
        Ok(Writer {
            jobs,
            queued,
            reports,
        })
    }

    /// Hands `batch` to the writer, or drops it (counted) when the writer is too far behind.
    pub(super) fn submit(&self, batch: Batch) {
        if batch.bytes.is_empty() {
            return;
        }
        let size = batch.bytes.len();
        if self.queued.fetch_add(size, Ordering::Relaxed) + size > MAX_QUEUED {
            self.queued.fetch_sub(size, Ordering::Relaxed);
            self.reports.lost(
                batch.records,
                "the writer is behind: its reader stopped reading",
            );
            return;
        }
        let records = batch.records;
        if self.jobs.send(Job::Write(batch)).is_err() {
            self.queued.fetch_sub(size, Ordering::Relaxed);
            self.reports.lost(records, "the writer has stopped");
        }
    }

    /// Writes to `file` from now on, after what was handed over before.
    pub(super) fn reopen(&self, file: File) {
        let _ = self.jobs.send(Job::Reopen(file));
    }

    /// Waits (at most [`WAIT`]) until what was handed over before is written: false when
    /// the writer did not get there in time (a reader that stopped reading).
    pub(super) fn wait(&self) -> bool {
        let (done, finished) = mpsc::sync_channel(1);
        if self.jobs.send(Job::Done(done)).is_err() {
            return false;
        }
        finished.recv_timeout(WAIT).is_ok()
    }
}

/// The writer thread's state.
struct Thread {
    out: Output,
    /// The last write stopped inside a line: the next one starts on a new line, so the
    /// records after it are whole lines (the cut one stays cut, alone on its line).
    torn: bool,
    queued: Arc<AtomicUsize>,
    reports: Arc<Reports>,
}

impl Thread {
    fn run(mut self, jobs: &mpsc::Receiver<Job>) {
        // Ends when every `Writer` is gone and the queue is empty.
        for job in jobs {
            match job {
                Job::Write(batch) => {
                    self.queued.fetch_sub(batch.bytes.len(), Ordering::Relaxed);
                    self.write(&batch);
                }
                Job::Reopen(file) => {
                    self.out = Output::File(file);
                    self.torn = false;
                }
                Job::Done(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    fn write(&mut self, batch: &Batch) {
        if self.torn {
            if let Err((_, error)) = self.out.write_all(b"\n") {
                self.reports.failed(batch.records, &error);
                return;
            }
            self.torn = false;
        }
        if let Err((written, error)) = self.out.write_all(&batch.bytes) {
            let whole = batch.bytes[..written]
                .iter()
                .filter(|&&byte| byte == b'\n')
                .count() as u64;
            self.torn = written > 0 && batch.bytes[written - 1] != b'\n';
            self.reports
                .failed(batch.records.saturating_sub(whole), &error);
        }
    }
}

/// Lost records, counted, and said in weir's own log once a minute at most.
#[derive(Debug, Default)]
struct Reports {
    /// Lost since the last report.
    unreported: AtomicU64,
    /// When a report may be written next; `None` at first.
    next: std::sync::Mutex<Option<Instant>>,
}

impl Reports {
    fn lost(&self, records: u64, why: &str) {
        self.count(records);
        if let Some(lost) = self.due() {
            tracing::warn!(lost_records = lost, why, "access log records dropped");
        }
    }

    fn failed(&self, records: u64, error: &io::Error) {
        self.count(records);
        if let Some(lost) = self.due() {
            tracing::warn!(%error, lost_records = lost, "cannot write the access log; records lost");
        }
    }

    fn count(&self, records: u64) {
        RECORDS_LOST.fetch_add(records, Ordering::Relaxed);
        self.unreported.fetch_add(records, Ordering::Relaxed);
    }

    /// The records lost since the last report, when a report is due now.
    fn due(&self) -> Option<u64> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if next.is_some_and(|next| now < next) {
            return None;
        }
        *next = Some(now + REPORT_EVERY);
        Some(self.unreported.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe whose reader never reads: the writer thread blocks on it, and nothing else
    /// does. Batches past the bound are dropped and counted, at once.
    #[test]
    fn a_reader_that_stops_reading_blocks_only_the_writer() {
        let (reader, writer) = std::io::pipe().unwrap();
        let log =
            Writer::start(Output::File(File::from(std::os::fd::OwnedFd::from(writer)))).unwrap();
        let before = records_lost();
        let started = Instant::now();
        // Far more than a pipe holds (64 KiB) and than the queue takes.
        for _ in 0..64 {
            log.submit(Batch {
                bytes: vec![b'x'; super::super::FLUSH_AT],
                records: 100,
            });
        }
        assert!(started.elapsed() < Duration::from_secs(1), "submit waited");
        assert!(
            records_lost() - before >= 100 * (64 - 20),
            "dropped batches counted"
        );
        assert!(
            !log.wait(),
            "a stuck writer does not hold the waiter past WAIT"
        );
        drop(reader);
    }

    /// A write cut inside a line: the records that did not go out whole are counted, and
    /// the next batch starts on a new line.
    #[test]
    fn a_torn_write_ends_its_line_before_the_next_batch() {
        let path = std::env::temp_dir().join(format!("weir-torn-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        let mut thread = Thread {
            out: Output::File(file),
            torn: true,
            queued: Arc::default(),
            reports: Arc::default(),
        };
        thread.write(&Batch {
            bytes: b"a=1\n".to_vec(),
            records: 1,
        });
        assert!(!thread.torn);
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(text, "\na=1\n");
    }
}
