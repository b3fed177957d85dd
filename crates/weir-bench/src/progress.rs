//! The live progress line: once a second on stderr (rate, errors, p99 of the last second), only
//! when asked for and stderr is a terminal.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Counters every thread adds to while the run goes on.
#[derive(Debug)]
pub struct Live {
    pub responses: AtomicU64,
    pub errors: AtomicU64,
    /// One per thread, so threads never contend; `None` when no progress line is shown.
    recent: Option<Vec<Mutex<Histogram<u32>>>>,
    done: AtomicBool,
}

impl Live {
    pub fn new(threads: usize, enabled: bool) -> Live {
        Live {
            responses: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            recent: enabled.then(|| {
                (0..threads)
                    .map(|_| {
                        Mutex::new(
                            Histogram::new_with_bounds(1, 60_000_000, 2)
                                .expect("constant, valid bounds"),
                        )
                    })
                    .collect()
            }),
            done: AtomicBool::new(false),
        }
    }

    pub fn enabled(&self) -> bool {
        self.recent.is_some()
    }

    /// Counts a response of thread `thread` with this corrected latency (µs).
    pub fn response(&self, thread: usize, latency_us: u64) {
        if let Some(recent) = &self.recent {
            self.responses.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut histogram) = recent[thread].lock() {
                histogram.saturating_record(latency_us);
            }
        }
    }

    pub fn error(&self) {
        if self.enabled() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// p99 (µs) of what was recorded since the last call, and clears it.
    fn take_p99(&self) -> u64 {
        let Some(recent) = &self.recent else { return 0 };
        let mut merged =
            Histogram::<u32>::new_with_bounds(1, 60_000_000, 2).expect("constant, valid bounds");
        for slot in recent {
            if let Ok(mut histogram) = slot.lock() {
                let _ = merged.add(&*histogram);
                histogram.reset();
            }
        }
        merged.value_at_quantile(0.99)
    }
}

/// Starts the progress thread if `live` is enabled; [`finish`] stops it.
pub fn spawn(live: Arc<Live>, start: Instant) -> Option<JoinHandle<()>> {
    if !live.enabled() {
        return None;
    }
    Some(std::thread::spawn(move || {
        let mut last = 0;
        let mut tick = 1;
        while !live.done.load(Ordering::Relaxed) {
            let due = start + Duration::from_secs(tick);
            std::thread::park_timeout(due.saturating_duration_since(Instant::now()));
            if Instant::now() < due {
                continue;
            }
            let responses = live.responses.load(Ordering::Relaxed);
            let p99 = live.take_p99() as f64 / 1000.0;
            let errors = live.errors.load(Ordering::Relaxed);
            eprint!(
                "\r[{tick:>4}s] {:>9} req/s  {responses:>10} done  {errors:>6} errors  p99 {p99:>9.2} ms ",
                responses - last
            );
            let _ = std::io::stderr().flush();
            last = responses;
            tick += 1;
        }
        eprintln!();
    }))
}

/// Stops the progress thread.
pub fn finish(live: &Live, handle: Option<JoinHandle<()>>) {
    live.done.store(true, Ordering::Relaxed);
    if let Some(handle) = handle {
        handle.thread().unpark();
        let _ = handle.join();
    }
}
