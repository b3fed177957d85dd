//! The offload experiment's load: many slow HTTP/1.1 keep-alive clients, ramped up over
//! time, each holding one connection and sending one request per interval on it — the
//! "long-lived connections with a very low rate of requests" of the source document.
//!
//! One tokio task per client. Client `i` of `N` starts at `ramp · i / N`, connects from
//! 127.0.0.(2 + i mod sources) (each source address has its own ephemeral ports), waits a
//! random phase in `[0, interval)` and then sends `GET path` every interval, reading each
//! response whole and requiring 200. A connection that fails in any way is dropped and
//! counted by kind; the client reconnects at its next tick. No request is sent after
//! `duration`; every wait is bounded by `timeout`, so the load stops by itself.
//!
//! A connection counts as *connected* from its TCP connect until it is dropped, and as
//! *held* from its first 200 until it is dropped: held connections are those "held without
//! errors". Between requests each client watches its idle connection, so one the server
//! closes or resets (an nginx out of `worker_connections` closes idle keep-alive ones) is
//! dropped and counted at once, not at the next request.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, sleep_until, timeout};

use crate::model::{ErrorCounts, Latency};

/// What the clients do.
#[derive(Debug, Clone)]
pub struct LoadSettings {
    /// Where to connect (127.0.0.0/8).
    pub target: SocketAddr,
    pub clients: u32,
    /// Time between two requests of one client.
    pub interval: Duration,
    /// Clients start evenly spread over this time.
    pub ramp: Duration,
    /// No request is sent after this long from the start (ramp included).
    pub duration: Duration,
    /// Connect and response timeout.
    pub timeout: Duration,
    /// Source addresses 127.0.0.2 … 127.0.0.(1 + sources).
    pub sources: u8,
    pub path: String,
}

impl LoadSettings {
    /// How many clients have started by `elapsed` (the ramp).
    pub fn started_by(&self, elapsed: Duration) -> u64 {
        let clients = u64::from(self.clients);
        if elapsed >= self.ramp || self.ramp.is_zero() {
            return clients;
        }
        // Client i starts at ramp · i / N: those with i ≤ elapsed · N / ramp have started.
        let fraction = elapsed.as_secs_f64() / self.ramp.as_secs_f64();
        ((fraction * clients as f64).floor() as u64 + 1).min(clients)
    }
}

/// Live counters, shared by the clients and the sampler.
#[derive(Debug)]
pub struct LoadCounters {
    pub ok: AtomicU64,
    pub connects: AtomicU64,
    errors: [AtomicU64; 5],
    connected: AtomicI64,
    held: AtomicI64,
    connected_peak: AtomicI64,
    held_peak: AtomicI64,
    /// Connect latency (µs) since the sampler last took it.
    connect_window: Mutex<Histogram<u64>>,
    connect_all: Mutex<Histogram<u64>>,
    response_all: Mutex<Histogram<u64>>,
}

/// Error kinds, as indices into [`LoadCounters::errors`].
#[derive(Debug, Clone, Copy)]
enum Failure {
    Connect = 0,
    Closed = 1,
    Status = 2,
    Timeout = 3,
    Malformed = 4,
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 10 min at 3 significant figures; the bounds are constants, so this cannot fail.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant, valid bounds")
}

fn lock(histogram: &Mutex<Histogram<u64>>) -> std::sync::MutexGuard<'_, Histogram<u64>> {
    histogram.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Milliseconds percentiles of a µs histogram.
pub fn latency_of(histogram: &Histogram<u64>) -> Latency {
    if histogram.is_empty() {
        return Latency::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Latency {
        count: histogram.len(),
        p50: ms(histogram.value_at_quantile(0.5)),
        p99: ms(histogram.value_at_quantile(0.99)),
        max: ms(histogram.max()),
    }
}

impl Default for LoadCounters {
    fn default() -> Self {
        LoadCounters {
            ok: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            errors: Default::default(),
            connected: AtomicI64::new(0),
            held: AtomicI64::new(0),
            connected_peak: AtomicI64::new(0),
            held_peak: AtomicI64::new(0),
            connect_window: Mutex::new(histogram()),
            connect_all: Mutex::new(histogram()),
            response_all: Mutex::new(histogram()),
        }
    }
}

impl LoadCounters {
    pub fn errors(&self) -> ErrorCounts {
        let load = |failure: Failure| self.errors[failure as usize].load(Ordering::Relaxed);
        ErrorCounts {
            connect: load(Failure::Connect),
            closed: load(Failure::Closed),
            status: load(Failure::Status),
            timeout: load(Failure::Timeout),
            malformed: load(Failure::Malformed),
        }
    }

    pub fn connected(&self) -> u64 {
        self.connected.load(Ordering::Relaxed).max(0) as u64
    }

    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed).max(0) as u64
    }

    pub fn connected_peak(&self) -> u64 {
        self.connected_peak.load(Ordering::Relaxed).max(0) as u64
    }

    pub fn held_peak(&self) -> u64 {
        self.held_peak.load(Ordering::Relaxed).max(0) as u64
    }

    /// p99 of the connects since the last call, ms; `None` if there were none.
    pub fn take_connect_p99(&self) -> Option<f64> {
        let mut window = lock(&self.connect_window);
        let p99 = (!window.is_empty()).then(|| window.value_at_quantile(0.99) as f64 / 1000.0);
        window.reset();
        p99
    }

    pub fn connect_latency(&self) -> Latency {
        latency_of(&lock(&self.connect_all))
    }

    pub fn response_latency(&self) -> Latency {
        latency_of(&lock(&self.response_all))
    }

    fn fail(&self, failure: Failure) {
        self.errors[failure as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn connected_at(&self, micros: u64) {
        self.connects.fetch_add(1, Ordering::Relaxed);
        let _ = lock(&self.connect_window).record(micros.max(1));
        let _ = lock(&self.connect_all).record(micros.max(1));
    }
}

/// Counts one open connection in a gauge and its peak while it lives.
struct Gauge {
    counters: Arc<LoadCounters>,
    held: bool,
}

impl Gauge {
    fn new(counters: &Arc<LoadCounters>, held: bool) -> Gauge {
        let (gauge, peak) = if held {
            (&counters.held, &counters.held_peak)
        } else {
            (&counters.connected, &counters.connected_peak)
        };
        let now = gauge.fetch_add(1, Ordering::Relaxed) + 1;
        peak.fetch_max(now, Ordering::Relaxed);
        Gauge {
            counters: Arc::clone(counters),
            held,
        }
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        let gauge = if self.held {
            &self.counters.held
        } else {
            &self.counters.connected
        };
        gauge.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
    _connected: Gauge,
    held: Option<Gauge>,
}

/// Runs every client until the load ends; `start` is when client 0 starts.
pub async fn run(settings: Arc<LoadSettings>, counters: Arc<LoadCounters>, start: Instant) {
    let request = Arc::<[u8]>::from(
        format!(
            "GET {} HTTP/1.1\r\nHost: weir-lab\r\nUser-Agent: weir-lab\r\n\r\n",
            settings.path
        )
        .into_bytes(),
    );
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x5eed, |d| d.as_nanos() as u64);
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..settings.clients {
        tasks.spawn(client(
            index,
            Arc::clone(&settings),
            Arc::clone(&counters),
            Arc::clone(&request),
            start,
            seed,
        ));
    }
    // Each client ends by itself (no send after the deadline, every wait bounded).
    while tasks.join_next().await.is_some() {}
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

async fn client(
    index: u32,
    settings: Arc<LoadSettings>,
    counters: Arc<LoadCounters>,
    request: Arc<[u8]>,
    start: Instant,
    seed: u64,
) {
    let deadline = start + settings.duration;
    let begin = start
        + settings
            .ramp
            .mul_f64(f64::from(index) / f64::from(settings.clients.max(1)));
    if begin >= deadline {
        return;
    }
    sleep_until(begin).await;
    let mut connection = open(&settings, index, &counters).await;
    let interval_us = settings.interval.as_micros().max(1) as u64;
    let phase = splitmix64(seed ^ u64::from(index)) % interval_us;
    let mut next = Instant::now() + Duration::from_micros(phase);
    while next < deadline {
        if let Some(live) = connection.as_mut() {
            // Wait for the tick watching the idle connection, so a server that closes or
            // resets it is seen at once (a connection "held" is one really open).
            if let Err(failure) = idle_until(live, next).await {
                counters.fail(failure);
                connection = None;
            }
        }
        sleep_until(next).await;
        next += settings.interval;
        let now = Instant::now();
        if next < now {
            // Fell behind by more than an interval (a slow answer): skip the missed ticks.
            let behind = (now - next).as_micros() as u64 / interval_us + 1;
            next += settings.interval * u32::try_from(behind).unwrap_or(u32::MAX);
        }
        if connection.is_none() {
            connection = open(&settings, index, &counters).await;
        }
        let Some(live) = connection.as_mut() else {
            continue;
        };
        let sent = Instant::now();
        let outcome = match timeout(settings.timeout, exchange(live, &request)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::Timeout),
        };
        match outcome {
            Ok(keep) => {
                let micros = sent.elapsed().as_micros() as u64;
                let _ = lock(&counters.response_all).record(micros.max(1));
                counters.ok.fetch_add(1, Ordering::Relaxed);
                if !keep {
                    connection = None;
                } else if live.held.is_none() {
                    live.held = Some(Gauge::new(&counters, true));
                }
            }
            Err(failure) => {
                counters.fail(failure);
                connection = None;
            }
        }
    }
}

/// Waits until `until` on an idle connection; an error if the server closes it meanwhile
/// (or sends bytes nobody asked for).
async fn idle_until(connection: &mut Connection, until: Instant) -> Result<(), Failure> {
    let mut byte = [0u8; 1];
    tokio::select! {
        () = sleep_until(until) => Ok(()),
        // Reading a TcpStream is cancel-safe: at the tick nothing has been consumed.
        read = connection.stream.read(&mut byte) => match read {
            Ok(0) | Err(_) => Err(Failure::Closed),
            Ok(_) => Err(Failure::Malformed),
        },
    }
}

async fn connect(settings: &LoadSettings, index: u32) -> std::io::Result<TcpStream> {
    let octet = 2 + (index % u32::from(settings.sources.max(1))) as u8;
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, octet)),
        0,
    ))?;
    socket.connect(settings.target).await
}

async fn open(
    settings: &LoadSettings,
    index: u32,
    counters: &Arc<LoadCounters>,
) -> Option<Connection> {
    let started = Instant::now();
    match timeout(settings.timeout, connect(settings, index)).await {
        Ok(Ok(stream)) => {
            counters.connected_at(started.elapsed().as_micros() as u64);
            let _ = stream.set_nodelay(true);
            Some(Connection {
                stream,
                buffer: Vec::with_capacity(512),
                _connected: Gauge::new(counters, false),
                held: None,
            })
        }
        Ok(Err(_)) => {
            counters.fail(Failure::Connect);
            None
        }
        Err(_) => {
            counters.fail(Failure::Timeout);
            None
        }
    }
}

/// Sends one request and reads its response whole. `Ok(true)`: a 200 on a connection that
/// stays open; `Ok(false)`: a 200 with `Connection: close`.
async fn exchange(connection: &mut Connection, request: &[u8]) -> Result<bool, Failure> {
    if connection.stream.write_all(request).await.is_err() {
        return Err(Failure::Closed);
    }
    connection.buffer.clear();
    loop {
        match parse_head(&connection.buffer)? {
            Some(head) => {
                let total = head.length + head.body;
                while connection.buffer.len() < total {
                    read_more(connection).await?;
                }
                if connection.buffer.len() > total {
                    return Err(Failure::Malformed);
                }
                if head.status != 200 {
                    return Err(Failure::Status);
                }
                return Ok(!head.close);
            }
            None => {
                if connection.buffer.len() > 64 * 1024 {
                    return Err(Failure::Malformed);
                }
                read_more(connection).await?;
            }
        }
    }
}

/// A parsed response head: its length, the body's, the status, whether the server closes.
struct Head {
    length: usize,
    body: usize,
    status: u16,
    close: bool,
}

/// The response head at the start of `buffer`, as weir's codec (`weir-http`) reads it;
/// `None` while incomplete. These clients read `Content-Length` bodies only.
fn parse_head(buffer: &[u8]) -> Result<Option<Head>, Failure> {
    let limits = weir_http::Limits::default();
    let (head, length) = match weir_http::parse_response(buffer, &limits, weir_http::Method::Get) {
        Ok(weir_http::Parsed::Complete(head, length)) => (head, length),
        Ok(weir_http::Parsed::Partial) => return Ok(None),
        Err(_) => return Err(Failure::Malformed),
    };
    let body = match head.framing() {
        weir_http::BodyFraming::None => 0,
        weir_http::BodyFraming::Length(body) => {
            usize::try_from(body).map_err(|_| Failure::Malformed)?
        }
        weir_http::BodyFraming::Chunked | weir_http::BodyFraming::CloseDelimited => {
            return Err(Failure::Malformed);
        }
    };
    Ok(Some(Head {
        length,
        body,
        status: head.status(),
        close: !head.keep_alive(),
    }))
}

async fn read_more(connection: &mut Connection) -> Result<(), Failure> {
    let mut chunk = [0u8; 4096];
    match connection.stream.read(&mut chunk).await {
        Ok(0) => Err(Failure::Closed),
        Ok(read) => {
            connection.buffer.extend_from_slice(&chunk[..read]);
            Ok(())
        }
        Err(_) => Err(Failure::Closed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(clients: u32, ramp_ms: u64) -> LoadSettings {
        LoadSettings {
            target: SocketAddr::from(([127, 0, 0, 1], 1)),
            clients,
            interval: Duration::from_secs(1),
            ramp: Duration::from_millis(ramp_ms),
            duration: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            sources: 1,
            path: "/".into(),
        }
    }

    #[test]
    fn the_ramp_starts_clients_evenly() {
        let load = settings(100, 10_000);
        assert_eq!(load.started_by(Duration::ZERO), 1);
        assert_eq!(load.started_by(Duration::from_secs(5)), 51);
        assert_eq!(load.started_by(Duration::from_millis(9_999)), 100);
        assert_eq!(load.started_by(Duration::from_secs(11)), 100);
        assert_eq!(settings(10, 0).started_by(Duration::ZERO), 10);
    }

    #[test]
    fn heads_parse_with_their_framing() {
        let head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .ok()
            .flatten()
            .expect("complete");
        assert_eq!((head.status, head.body, head.close), (200, 5, false));
        let closing =
            parse_head(b"HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                .ok()
                .flatten()
                .expect("complete");
        assert_eq!((closing.status, closing.close), (503, true));
        assert!(matches!(parse_head(b"HTTP/1.1 200 OK\r\n"), Ok(None)));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").is_err());
        assert!(parse_head(b"nonsense\r\n\r\n").is_err());
    }

    #[tokio::test]
    async fn clients_count_served_and_failed_connections() {
        use weir_origin::{Origin, OriginOptions};
        // A capped origin: 3 clients fit, 2 are reset at once.
        let options = OriginOptions {
            max_connections: Some(3),
            ..OriginOptions::new("t", "127.0.0.1:0".parse().expect("address"))
        };
        let origin = Origin::bind(options).await.expect("origin binds");
        let target = origin.local_addr();
        let (shutdown, signal) = weir_core_shutdown();
        let server = tokio::spawn(origin.run(signal));
        let load = Arc::new(LoadSettings {
            target,
            clients: 5,
            interval: Duration::from_millis(100),
            ramp: Duration::from_millis(50),
            duration: Duration::from_millis(600),
            timeout: Duration::from_secs(2),
            sources: 2,
            path: "/".into(),
        });
        let counters = Arc::new(LoadCounters::default());
        run(Arc::clone(&load), Arc::clone(&counters), Instant::now()).await;
        assert_eq!(counters.held_peak(), 3, "only the cap is ever served");
        assert!(counters.ok.load(Ordering::Relaxed) >= 3 * 3);
        // Reset at once: seen at connect or at the first request, depending on timing.
        let errors = counters.errors();
        assert!(
            errors.closed + errors.connect > 0,
            "the reset clients count errors"
        );
        assert_eq!(errors.status + errors.timeout + errors.malformed, 0);
        assert_eq!(
            counters.connected(),
            0,
            "every connection closed at the end"
        );
        assert_eq!(counters.held(), 0);
        assert!(counters.connect_latency().count >= 3);
        shutdown();
        let _ = server.await;
    }

    /// A shutdown trigger and signal for the in-process origin.
    fn weir_core_shutdown() -> (impl FnOnce(), weir_core::ShutdownSignal) {
        let (shutdown, signal) = weir_core::Shutdown::new();
        (move || shutdown.trigger(), signal)
    }
}
