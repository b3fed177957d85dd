//! The link at run time: per direction, one thread reads packets from the sending side's TUN
//! device and asks the direction model for their fate, and one thread writes each surviving
//! packet into the other side's TUN device at the model's deadline.
//!
//! Dedicated threads rather than tokio tasks: tokio's timer has a 1 ms granularity, and the link
//! must deliver within tens of microseconds of its virtual clock. A thread sleeping to an
//! absolute deadline (`nanosleep`, 50 µs default timer slack) does, with no spinning.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tun_rs::{InterruptEvent, SyncDevice};

use crate::model::{DirectionConfig, DirectionModel, Verdict};

/// The longest single sleep of a delivering thread, so that `stop` is seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// Room for the largest packet a TUN device can hand over.
const READ_BUFFER: usize = 65_536;

/// Both directions of a link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// What happens to packets from side a to side b.
    pub a_to_b: DirectionConfig,
    /// What happens to packets from side b to side a.
    pub b_to_a: DirectionConfig,
    /// Seeds the random choices (loss, jitter) of both directions.
    pub seed: u64,
}

/// Counters of one direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DirectionStats {
    /// Packets and bytes read from the sending side.
    pub received_packets: u64,
    /// Bytes of the packets read from the sending side.
    pub received_bytes: u64,
    /// Packets and bytes written to the receiving side.
    pub delivered_packets: u64,
    /// Bytes of the packets written to the receiving side.
    pub delivered_bytes: u64,
    /// Packets dropped by the loss model.
    pub lost_packets: u64,
    /// Packets dropped because the queue was full.
    pub queue_drops: u64,
    /// Packets the receiving device refused (it was down or gone).
    pub send_errors: u64,
    /// Packets the sending side's kernel dropped before weir read them (its TUN device's
    /// queue was full: a burst faster than the reading thread). Not part of `received`;
    /// read from the device by whoever owns it, so 0 until set.
    pub device_drops: u64,
}

/// Counters of both directions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkStats {
    /// Counters of the direction from side a to side b.
    pub a_to_b: DirectionStats,
    /// Counters of the direction from side b to side a.
    pub b_to_a: DirectionStats,
}

/// A running link: four threads and their counters.
pub struct Link {
    interrupt: Arc<InterruptEvent>,
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<io::Result<()>>>,
    a_to_b: Arc<Counters>,
    b_to_a: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    received_packets: AtomicU64,
    received_bytes: AtomicU64,
    delivered_packets: AtomicU64,
    delivered_bytes: AtomicU64,
    lost_packets: AtomicU64,
    queue_drops: AtomicU64,
    send_errors: AtomicU64,
}

/// A packet that survived the model, with its delivery deadline.
struct InFlight {
    deadline: Instant,
    packet: Vec<u8>,
}

/// What one direction's pair of threads needs.
struct Direction {
    name: &'static str,
    from: Arc<SyncDevice>,
    to: Arc<SyncDevice>,
    model: DirectionModel,
    counters: Arc<Counters>,
}

impl Link {
    /// Starts moving packets between side `a` and side `b`. The devices should be
    /// non-blocking (reads wait in `poll`, so that `stop` can interrupt them).
    pub fn start(a: SyncDevice, b: SyncDevice, config: &LinkConfig) -> io::Result<Link> {
        let interrupt = Arc::new(InterruptEvent::new()?);
        let stopping = Arc::new(AtomicBool::new(false));
        let (a, b) = (Arc::new(a), Arc::new(b));
        let a_to_b = Arc::new(Counters::default());
        let b_to_a = Arc::new(Counters::default());
        let epoch = Instant::now();
        let directions = [
            Direction {
                name: "a-to-b",
                from: Arc::clone(&a),
                to: Arc::clone(&b),
                model: DirectionModel::new(config.a_to_b.clone(), config.seed),
                counters: Arc::clone(&a_to_b),
            },
            Direction {
                name: "b-to-a",
                from: b,
                to: a,
                // A different stream for the other direction, from the same seed.
                model: DirectionModel::new(
                    config.b_to_a.clone(),
                    config.seed ^ 0x9e37_79b9_7f4a_7c15,
                ),
                counters: Arc::clone(&b_to_a),
            },
        ];
        let mut threads = Vec::with_capacity(4);
        for direction in directions {
            let (sender, receiver) = mpsc::channel();
            let Direction {
                name,
                from,
                to,
                model,
                counters,
            } = direction;
            let ingress_counters = Arc::clone(&counters);
            let ingress_interrupt = Arc::clone(&interrupt);
            threads.push(
                thread::Builder::new()
                    .name(format!("netem {name} in"))
                    .spawn(move || {
                        receive(
                            &from,
                            model,
                            epoch,
                            &ingress_counters,
                            &ingress_interrupt,
                            &sender,
                        )
                    })?,
            );
            let egress_stopping = Arc::clone(&stopping);
            threads.push(
                thread::Builder::new()
                    .name(format!("netem {name} out"))
                    .spawn(move || {
                        deliver(&to, &receiver, &counters, &egress_stopping);
                        Ok(())
                    })?,
            );
        }
        Ok(Link {
            interrupt,
            stopping,
            threads,
            a_to_b,
            b_to_a,
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> LinkStats {
        LinkStats {
            a_to_b: self.a_to_b.snapshot(),
            b_to_a: self.b_to_a.snapshot(),
        }
    }

    /// Whether a thread has ended on its own (a device failed or went away).
    pub fn has_failed(&self) -> bool {
        self.threads.iter().any(JoinHandle::is_finished)
    }

    /// Stops every thread (packets still in flight are dropped) and returns the final counters,
    /// or the first error a thread ended with. The devices are closed when this returns.
    pub fn stop(self) -> io::Result<LinkStats> {
        self.stopping.store(true, Ordering::SeqCst);
        let triggered = self.interrupt.trigger();
        let mut result = Ok(());
        for thread in self.threads {
            let outcome = thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a link thread panicked")));
            if result.is_ok() {
                result = outcome;
            }
        }
        triggered?;
        result?;
        Ok(LinkStats {
            a_to_b: self.a_to_b.snapshot(),
            b_to_a: self.b_to_a.snapshot(),
        })
    }
}

impl Counters {
    fn snapshot(&self) -> DirectionStats {
        DirectionStats {
            received_packets: self.received_packets.load(Ordering::Relaxed),
            received_bytes: self.received_bytes.load(Ordering::Relaxed),
            delivered_packets: self.delivered_packets.load(Ordering::Relaxed),
            delivered_bytes: self.delivered_bytes.load(Ordering::Relaxed),
            lost_packets: self.lost_packets.load(Ordering::Relaxed),
            queue_drops: self.queue_drops.load(Ordering::Relaxed),
            send_errors: self.send_errors.load(Ordering::Relaxed),
            device_drops: 0,
        }
    }
}

/// Reads packets from `device` until interrupted, and hands the survivors to the delivering
/// thread with their deadlines.
fn receive(
    device: &SyncDevice,
    mut model: DirectionModel,
    epoch: Instant,
    counters: &Counters,
    interrupt: &InterruptEvent,
    deliver: &mpsc::Sender<InFlight>,
) -> io::Result<()> {
    let mut buffer = vec![0u8; READ_BUFFER];
    loop {
        let length = match device.recv_intr(&mut buffer, interrupt) {
            Ok(length) => length,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {
                if interrupt.is_trigger() {
                    return Ok(());
                }
                continue;
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        };
        counters.received_packets.fetch_add(1, Ordering::Relaxed);
        counters
            .received_bytes
            .fetch_add(length as u64, Ordering::Relaxed);
        match model.offer(epoch.elapsed(), length) {
            Verdict::Deliver { at } => {
                let packet = InFlight {
                    deadline: epoch + at,
                    packet: buffer[..length].to_vec(),
                };
                if deliver.send(packet).is_err() {
                    // The delivering thread has stopped: so are we.
                    return Ok(());
                }
            }
            Verdict::Lost => {
                counters.lost_packets.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::QueueFull => {
                counters.queue_drops.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Writes each packet to `device` at its deadline, in order (the model never reorders, so the
/// head of the channel is always the next to go).
fn deliver(
    device: &SyncDevice,
    packets: &mpsc::Receiver<InFlight>,
    counters: &Counters,
    stopping: &AtomicBool,
) {
    while let Ok(in_flight) = packets.recv() {
        if !sleep_until(in_flight.deadline, stopping) {
            return;
        }
        match device.send(&in_flight.packet) {
            Ok(_) => {
                counters.delivered_packets.fetch_add(1, Ordering::Relaxed);
                counters
                    .delivered_bytes
                    .fetch_add(in_flight.packet.len() as u64, Ordering::Relaxed);
            }
            Err(error) => {
                let errors = counters.send_errors.fetch_add(1, Ordering::Relaxed);
                if errors == 0 {
                    tracing::debug!(%error, "a TUN device refused a packet");
                }
            }
        }
    }
}

/// Sleeps until `deadline`; `false` if the link stops first.
fn sleep_until(deadline: Instant, stopping: &AtomicBool) -> bool {
    loop {
        if stopping.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        thread::sleep((deadline - now).min(MAX_SLEEP));
    }
}

impl fmt::Display for DirectionStats {
    /// `key=value` pairs, easy to read and to parse.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "received={} received_bytes={} delivered={} delivered_bytes={} lost={} \
             queue_drops={} send_errors={} device_drops={}",
            self.received_packets,
            self.received_bytes,
            self.delivered_packets,
            self.delivered_bytes,
            self.lost_packets,
            self.queue_drops,
            self.send_errors,
            self.device_drops
        )
    }
}
