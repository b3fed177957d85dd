//! slow_clients — many keep-alive clients, each sending one request every interval.
//!
//! The load of the connection-offload benchmark (`bench/offload`): thousands of mostly idle
//! keep-alive connections, the kind a reverse proxy should take off an origin.
//!
//! ```text
//! cargo run --release -p weir-testkit --example slow_clients -- \
//!     --target 127.0.0.1:18281 --clients 2000 --interval 1s --duration 30s --ramp 10s --path /
//! ```
//!
//! One tokio task per client. Client `i` of `N` starts at `ramp * i / N` (a linear ramp),
//! opens one connection, waits a random phase in `[0, interval)` and then sends
//! `GET path HTTP/1.1` every `interval` on that connection, reading each response whole
//! (status line, headers, a `Content-Length` body) and checking the status. A client whose
//! connection failed in any way drops it and opens a new one at its next tick. Sending
//! stops at `duration` (counted from the start, ramp included); responses still in flight
//! then get up to `timeout` to arrive.
//!
//! Errors are counted by kind: `connect` (connect refused or failed), `closed` (reset, or
//! the peer closed, while writing or reading), `status` (an answer that is not 200),
//! `timeout` (connect or response slower than `timeout`, 5 s), `malformed` (bytes that do
//! not parse as a response). Load goes only where `--target` says; it is bounded by
//! `--duration` and stops by itself.

#![allow(unsafe_code)] // one setrlimit call, in `raise_nofile_limit`

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, sleep_until, timeout};

#[derive(Parser, Debug)]
#[command(about = "Many slow keep-alive HTTP/1.1 clients: one request per client per interval")]
struct Args {
    /// Address to load (127.0.0.0/8 only).
    #[arg(long)]
    target: SocketAddr,
    /// Concurrent clients, each on its own keep-alive connection.
    #[arg(long, default_value_t = 2000)]
    clients: u32,
    /// Time between two requests of one client ("1s", "500ms").
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Total run time, ramp included; no request is sent after it.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Clients start evenly spread over this time.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    ramp: Duration,
    /// Request path.
    #[arg(long, default_value = "/")]
    path: String,
    /// Host header.
    #[arg(long, default_value = "offload.test")]
    host: String,
    /// Connect and response timeout.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
    /// Source addresses: 1 lets the kernel choose (127.0.0.1); N > 1 binds client i to
    /// 127.0.0.(2 + i mod N), for more than ~28k local ports in all.
    #[arg(long, default_value_t = 1)]
    sources: u8,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print one line a second to stderr while running.
    #[arg(long)]
    progress: bool,
    /// Print the summary as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text:?} (use 1s, 500ms, 2m)"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" | "" => value,
        "m" => value * 60.0,
        _ => return Err(format!("unknown unit in {text:?} (use ms, s or m)")),
    };
    if !(0.0..=86_400.0).contains(&seconds) {
        return Err(format!("duration out of range: {text:?}"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Shared counters; every field is one atomic, updated by the client tasks.
#[derive(Default)]
struct Counters {
    ok: AtomicU64,
    connects: AtomicU64,
    err_connect: AtomicU64,
    err_closed: AtomicU64,
    err_status: AtomicU64,
    err_timeout: AtomicU64,
    err_malformed: AtomicU64,
    /// Responses with `Connection: close` (not an error; the client reconnects).
    server_close: AtomicU64,
    open: AtomicI64,
    open_peak: AtomicI64,
}

impl Counters {
    fn errors(&self) -> u64 {
        self.err_connect.load(Ordering::Relaxed)
            + self.err_closed.load(Ordering::Relaxed)
            + self.err_status.load(Ordering::Relaxed)
            + self.err_timeout.load(Ordering::Relaxed)
            + self.err_malformed.load(Ordering::Relaxed)
    }
}

/// Counts a connection as open for as long as it lives.
struct OpenGuard(Arc<Counters>);

impl OpenGuard {
    fn new(counters: &Arc<Counters>) -> OpenGuard {
        let now = counters.open.fetch_add(1, Ordering::Relaxed) + 1;
        counters.open_peak.fetch_max(now, Ordering::Relaxed);
        OpenGuard(Arc::clone(counters))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    _open: OpenGuard,
}

enum Failure {
    Closed,
    Status,
    Timeout,
    Malformed,
}

/// Latencies one client saw, in microseconds.
#[derive(Default)]
struct Samples {
    connect_us: Vec<u32>,
    response_us: Vec<u32>,
}

struct Plan {
    target: SocketAddr,
    request: Vec<u8>,
    interval: Duration,
    timeout: Duration,
    sources: u8,
    start: Instant,
    ramp: Duration,
    deadline: Instant,
    clients: u32,
    seed: u64,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

async fn connect(plan: &Plan, index: u32) -> std::io::Result<TcpStream> {
    if plan.sources <= 1 {
        return TcpStream::connect(plan.target).await;
    }
    let last_octet = 2 + u8::try_from(index % u32::from(plan.sources)).unwrap_or(0);
    let source = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last_octet)), 0);
    let socket = TcpSocket::new_v4()?;
    socket.bind(source)?;
    socket.connect(plan.target).await
}

async fn client(index: u32, plan: Arc<Plan>, counters: Arc<Counters>) -> Samples {
    let mut samples = Samples::default();
    let offset = plan
        .ramp
        .mul_f64(f64::from(index) / f64::from(plan.clients.max(1)));
    let begin = plan.start + offset;
    if begin >= plan.deadline {
        return samples;
    }
    sleep_until(begin).await;

    let mut conn: Option<Conn> = open(&plan, index, &counters, &mut samples).await;
    // First request after a random phase, then one every interval.
    let phase =
        splitmix64(plan.seed ^ u64::from(index)) % (plan.interval.as_micros().max(1) as u64);
    let mut next = Instant::now() + Duration::from_micros(phase);
    loop {
        if next >= plan.deadline {
            break;
        }
        sleep_until(next).await;
        next += plan.interval;
        let now = Instant::now();
        if next < now {
            // Fell behind by more than an interval (a slow response): skip the missed ticks.
            let behind = now - next;
            let skip = behind.as_micros() / plan.interval.as_micros().max(1) + 1;
            next += plan.interval * u32::try_from(skip).unwrap_or(u32::MAX);
        }
        if conn.is_none() {
            conn = open(&plan, index, &counters, &mut samples).await;
            if conn.is_none() {
                continue;
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let sent = Instant::now();
        match timeout(plan.timeout, exchange(c, &plan.request)).await {
            Ok(Ok(keep)) => {
                samples.response_us.push(micros(sent.elapsed()));
                counters.ok.fetch_add(1, Ordering::Relaxed);
                if !keep {
                    counters.server_close.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                }
            }
            Ok(Err(failure)) => {
                let counter = match failure {
                    Failure::Closed => &counters.err_closed,
                    Failure::Status => &counters.err_status,
                    Failure::Timeout => &counters.err_timeout,
                    Failure::Malformed => &counters.err_malformed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                conn = None;
            }
            Err(_) => {
                counters.err_timeout.fetch_add(1, Ordering::Relaxed);
                conn = None;
            }
        }
    }
    samples
}

async fn open(
    plan: &Plan,
    index: u32,
    counters: &Arc<Counters>,
    samples: &mut Samples,
) -> Option<Conn> {
    let started = Instant::now();
    match timeout(plan.timeout, connect(plan, index)).await {
        Ok(Ok(stream)) => {
            samples.connect_us.push(micros(started.elapsed()));
            counters.connects.fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_nodelay(true);
            Some(Conn {
                stream,
                buf: Vec::with_capacity(512),
                _open: OpenGuard::new(counters),
            })
        }
        Ok(Err(_)) => {
            counters.err_connect.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(_) => {
            counters.err_timeout.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// Sends one request and reads its response whole. `Ok(true)`: a 200 on a connection that
/// stays open; `Ok(false)`: a 200 with `Connection: close`.
async fn exchange(conn: &mut Conn, request: &[u8]) -> Result<bool, Failure> {
    if conn.stream.write_all(request).await.is_err() {
        return Err(Failure::Closed);
    }
    conn.buf.clear();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&conn.buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let status = response.code.unwrap_or(0);
                let mut length: Option<usize> = None;
                let mut close = response.version == Some(0);
                for header in response.headers.iter() {
                    if header.name.eq_ignore_ascii_case("content-length") {
                        length = std::str::from_utf8(header.value)
                            .ok()
                            .and_then(|v| v.trim().parse().ok());
                        if length.is_none() {
                            return Err(Failure::Malformed);
                        }
                    } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                        // This client reads Content-Length bodies only.
                        return Err(Failure::Malformed);
                    } else if header.name.eq_ignore_ascii_case("connection") {
                        close = header.value.eq_ignore_ascii_case(b"close");
                    }
                }
                let length = length.unwrap_or(0);
                let total = head_len + length;
                while conn.buf.len() < total {
                    if read_more(conn).await? == 0 {
                        return Err(Failure::Closed);
                    }
                }
                if conn.buf.len() > total {
                    // Bytes nobody asked for.
                    return Err(Failure::Malformed);
                }
                if status != 200 {
                    return Err(Failure::Status);
                }
                return Ok(!close);
            }
            Ok(httparse::Status::Partial) => {
                if conn.buf.len() > 64 * 1024 {
                    return Err(Failure::Malformed);
                }
                if read_more(conn).await? == 0 {
                    return Err(Failure::Closed);
                }
            }
            Err(_) => return Err(Failure::Malformed),
        }
    }
}

async fn read_more(conn: &mut Conn) -> Result<usize, Failure> {
    let mut chunk = [0u8; 4096];
    match conn.stream.read(&mut chunk).await {
        Ok(n) => {
            conn.buf.extend_from_slice(&chunk[..n]);
            Ok(n)
        }
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(Failure::Timeout),
        Err(_) => Err(Failure::Closed),
    }
}

/// Raises the soft open-file limit to the hard one; returns (soft, hard) after.
fn raise_nofile_limit() -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer,
    // which lives on this stack frame for the whole call.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return (0, 0);
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    (limit.rlim_cur, limit.rlim_max)
}

/// Nearest-rank percentile of sorted microseconds, in milliseconds.
fn percentile_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    f64::from(sorted[index]) / 1000.0
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.target.ip().is_loopback() {
        bail!(
            "--target must be a loopback address (127.0.0.0/8), got {}",
            args.target
        );
    }
    if args.interval.is_zero() {
        bail!("--interval must be more than 0");
    }
    if args.sources == 0 || args.sources > 250 {
        bail!("--sources must be 1 to 250");
    }
    let (soft, hard) = raise_nofile_limit();
    if soft != 0 && soft < u64::from(args.clients) + 64 {
        eprintln!(
            "slow_clients: warning: open-file limit {soft} (hard {hard}) is below {} clients + 64",
            args.clients
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: weir-slow-clients\r\n\r\n",
        args.path, args.host
    )
    .into_bytes();
    let start = Instant::now() + Duration::from_millis(20);
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed);
    let plan = Arc::new(Plan {
        target: args.target,
        request,
        interval: args.interval,
        timeout: args.timeout,
        sources: args.sources,
        start,
        ramp: args.ramp.min(args.duration),
        deadline: start + args.duration,
        clients: args.clients,
        seed,
    });
    let counters = Arc::new(Counters::default());

    let progress = if args.progress {
        let counters = Arc::clone(&counters);
        let deadline = plan.deadline;
        Some(tokio::spawn(async move {
            let mut tick = start;
            let mut last_ok = 0;
            while tick < deadline {
                tick += Duration::from_secs(1);
                sleep_until(tick).await;
                let ok = counters.ok.load(Ordering::Relaxed);
                eprintln!(
                    "slow_clients: t={:>3}s open={:>6} ok/s={:>6} ok={:>8} errors={}",
                    (tick - start).as_secs(),
                    counters.open.load(Ordering::Relaxed),
                    ok - last_ok,
                    ok,
                    counters.errors(),
                );
                last_ok = ok;
            }
        }))
    } else {
        None
    };

    let mut tasks = Vec::with_capacity(args.clients as usize);
    for index in 0..args.clients {
        tasks.push(tokio::spawn(client(
            index,
            Arc::clone(&plan),
            Arc::clone(&counters),
        )));
    }

    // Every task ends by itself: no send after the deadline, each exchange bounded by the
    // timeout. The outer bound is a safety net only.
    let mut samples = Samples::default();
    let hard_stop = plan.deadline + plan.timeout * 2 + Duration::from_secs(5);
    let mut unfinished = 0;
    for task in tasks {
        let handle_abort = task.abort_handle();
        match tokio::time::timeout_at(hard_stop, task).await {
            Ok(Ok(mut s)) => {
                samples.connect_us.append(&mut s.connect_us);
                samples.response_us.append(&mut s.response_us);
            }
            Ok(Err(_)) => unfinished += 1,
            Err(_) => {
                handle_abort.abort();
                unfinished += 1;
            }
        }
    }
    if let Some(progress) = progress {
        progress.abort();
    }
    let elapsed = start.elapsed();
    samples.connect_us.sort_unstable();
    samples.response_us.sort_unstable();
    report(&args, &counters, &samples, elapsed, unfinished);
    Ok(())
}

fn report(args: &Args, c: &Counters, s: &Samples, elapsed: Duration, unfinished: u32) {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let ok = load(&c.ok);
    let errors = c.errors();
    let peak = c.open_peak.load(Ordering::Relaxed);
    let connect = [50.0, 99.0, 100.0].map(|p| percentile_ms(&s.connect_us, p));
    let response = [50.0, 99.0, 100.0].map(|p| percentile_ms(&s.response_us, p));
    let rate = ok as f64 / elapsed.as_secs_f64().max(0.001);
    if args.json {
        println!(
            concat!(
                "{{\"target\":\"{}\",\"clients\":{},\"interval_s\":{},\"duration_s\":{},",
                "\"ramp_s\":{},\"elapsed_s\":{:.3},\"requests_ok\":{},\"requests_per_s\":{:.1},",
                "\"errors\":{},\"errors_connect\":{},\"errors_closed\":{},\"errors_status\":{},",
                "\"errors_timeout\":{},\"errors_malformed\":{},\"server_closes\":{},",
                "\"connections_opened\":{},\"connections_open_peak\":{},",
                "\"connect_ms_p50\":{:.3},\"connect_ms_p99\":{:.3},\"connect_ms_max\":{:.3},",
                "\"response_ms_p50\":{:.3},\"response_ms_p99\":{:.3},\"response_ms_max\":{:.3},",
                "\"unfinished_clients\":{}}}"
            ),
            args.target,
            args.clients,
            args.interval.as_secs_f64(),
            args.duration.as_secs_f64(),
            args.ramp.as_secs_f64(),
            elapsed.as_secs_f64(),
            ok,
            rate,
            errors,
            load(&c.err_connect),
            load(&c.err_closed),
            load(&c.err_status),
            load(&c.err_timeout),
            load(&c.err_malformed),
            load(&c.server_close),
            load(&c.connects),
            peak,
            connect[0],
            connect[1],
            connect[2],
            response[0],
            response[1],
            response[2],
            unfinished,
        );
        return;
    }
    println!(
        "slow_clients: {} clients -> {}, GET {} every {:?}, {:?} (ramp {:?})",
        args.clients, args.target, args.path, args.interval, args.duration, args.ramp
    );
    println!(
        "  requests ok        {ok} ({rate:.1}/s over {:.1} s)",
        elapsed.as_secs_f64()
    );
    println!(
        "  errors             {errors} (connect {}, closed/reset {}, bad status {}, timeout {}, malformed {})",
        load(&c.err_connect),
        load(&c.err_closed),
        load(&c.err_status),
        load(&c.err_timeout),
        load(&c.err_malformed)
    );
    println!(
        "  connections        {} opened, peak {} open at once, {} closed by the server after a 200",
        load(&c.connects),
        peak,
        load(&c.server_close)
    );
    println!(
        "  connect ms         p50 {:.3}  p99 {:.3}  max {:.3}",
        connect[0], connect[1], connect[2]
    );
    println!(
        "  response ms        p50 {:.3}  p99 {:.3}  max {:.3}",
        response[0], response[1], response[2]
    );
    if unfinished > 0 {
        println!("  unfinished clients {unfinished} (stopped by the safety timeout)");
    }
}
