//! Resource-exhaustion attackers and misbehaving nodes, for the exhaustion
//! test (`weir-proxy/tests/exhaustion.rs`) and the `bench/exhaustion` suite
//! (through `examples/attackers.rs`).
//!
//! Attackers hold connections the cheap ways: a head that never ends
//! (slowloris), a body trickled a byte at a time (slow POST), a large
//! response never read (slow read), an upgraded connection left idle, an
//! upload to a node that stops reading, and HEAD requests to a node that
//! sends late bodies. Each attacker reconnects when its connection is closed,
//! until the deadline. Load goes only to loopback addresses.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::Instant;

/// How long an attacker waits before reconnecting after the target closed it.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// One way of holding a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// A request head sent a field line at a time, never finished.
    Slowloris,
    /// A body announced large and trickled a byte a second.
    SlowPost,
    /// A large response requested and never read.
    SlowRead,
    /// An upgraded (WebSocket) connection left idle.
    IdleUpgrade,
    /// An upload to a node that stops reading.
    Upload,
    /// HEAD requests to a node that sends a body after each answer.
    LateBody,
}

impl Attack {
    /// Every attack, in the order reports list them.
    pub const ALL: [Attack; 6] = [
        Attack::Slowloris,
        Attack::SlowPost,
        Attack::SlowRead,
        Attack::IdleUpgrade,
        Attack::Upload,
        Attack::LateBody,
    ];

    /// The attack's name, as on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Attack::Slowloris => "slowloris",
            Attack::SlowPost => "slow_post",
            Attack::SlowRead => "slow_read",
            Attack::IdleUpgrade => "idle_upgrade",
            Attack::Upload => "upload_to_stalled_node",
            Attack::LateBody => "late_body",
        }
    }

    /// The request that starts the attack (paths as the suite's routes expect).
    fn request(self) -> &'static [u8] {
        match self {
            Attack::Slowloris => b"GET / HTTP/1.1\r\nHost: attack\r\n",
            Attack::SlowPost => {
                b"POST /echo HTTP/1.1\r\nHost: attack\r\nContent-Length: 1000000\r\n\r\n"
            }
            Attack::SlowRead => b"GET /bytes/65536 HTTP/1.1\r\nHost: attack\r\n\r\n",
            Attack::IdleUpgrade => {
                b"GET /ws HTTP/1.1\r\nHost: attack\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
            }
            Attack::Upload => {
                b"PUT /sink HTTP/1.1\r\nHost: attack\r\nContent-Length: 524288\r\n\r\n"
            }
            Attack::LateBody => b"HEAD /late HTTP/1.1\r\nHost: attack\r\n\r\n",
        }
    }
}

/// What the attackers did.
#[derive(Debug, Default)]
pub struct AttackStats {
    /// Attacking connections open now, and the most at once.
    pub open: AtomicI64,
    /// The most attacking connections open at once.
    pub peak: AtomicI64,
    /// Connections opened in all, and how many the target closed.
    pub opened: AtomicU64,
    /// Connections the target closed (or reset) before the attacker ended them.
    pub closed_by_target: AtomicU64,
    /// Connects that failed or were refused.
    pub connect_failures: AtomicU64,
}

/// A run of attackers.
#[derive(Debug, Clone)]
pub struct AttackPlan {
    /// The address under attack.
    pub target: SocketAddr,
    /// Connections per attack kind.
    pub per_attack: Vec<(Attack, u32)>,
    /// 1: the kernel picks the source; N > 1: attacker i binds 127.0.0.(10 + i mod N).
    pub sources: u8,
    /// Attackers connect spread over this time.
    pub ramp: Duration,
    /// Every attacker stops at this time after the start.
    pub duration: Duration,
}

/// Runs every attacker until the plan's duration is over.
pub async fn run(plan: AttackPlan) -> Arc<AttackStats> {
    let stats = Arc::new(AttackStats::default());
    let started = Instant::now();
    let deadline = started + plan.duration;
    let total: u32 = plan.per_attack.iter().map(|(_, n)| n).sum();
    let mut tasks = tokio::task::JoinSet::new();
    let mut index = 0u32;
    for &(attack, count) in &plan.per_attack {
        for _ in 0..count {
            let offset = plan
                .ramp
                .mul_f64(f64::from(index) / f64::from(total.max(1)));
            let source = source(plan.sources, index);
            let stats = Arc::clone(&stats);
            let target = plan.target;
            tasks.spawn(async move {
                tokio::time::sleep_until(started + offset).await;
                attacker(attack, target, source, deadline, &stats).await;
            });
            index += 1;
        }
    }
    while tasks.join_next().await.is_some() {}
    stats
}

fn source(sources: u8, index: u32) -> Option<IpAddr> {
    (sources > 1).then(|| {
        IpAddr::V4(Ipv4Addr::new(
            127,
            0,
            0,
            10 + (index % u32::from(sources)) as u8,
        ))
    })
}

/// Counts a connection open while it lives.
struct Open<'a>(&'a AttackStats);

impl<'a> Open<'a> {
    fn new(stats: &'a AttackStats) -> Open<'a> {
        let open = stats.open.fetch_add(1, Ordering::Relaxed) + 1;
        stats.peak.fetch_max(open, Ordering::Relaxed);
        stats.opened.fetch_add(1, Ordering::Relaxed);
        Open(stats)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn connect(target: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(source) = source {
        socket.bind(SocketAddr::new(source, 0))?;
    }
    // Small buffers: a slow reader should stall the sender early.
    let _ = socket.set_recv_buffer_size(4096);
    socket.connect(target).await
}

/// One attacker: holds a connection its way, reconnecting when the target
/// closes it, until `deadline`.
async fn attacker(
    attack: Attack,
    target: SocketAddr,
    source: Option<IpAddr>,
    deadline: Instant,
    stats: &AttackStats,
) {
    while Instant::now() < deadline {
        let Ok(Ok(mut stream)) = tokio::time::timeout_at(deadline, connect(target, source)).await
        else {
            stats.connect_failures.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(RECONNECT_PAUSE).await;
            continue;
        };
        let open = Open::new(stats);
        let closed = tokio::time::timeout_at(deadline, hold(attack, &mut stream))
            .await
            .is_ok();
        drop(open);
        if closed {
            stats.closed_by_target.fetch_add(1, Ordering::Relaxed);
            // An attacker that holds connections, not one that floods connects.
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }
}

/// Holds the connection; returns when the target closed it.
async fn hold(attack: Attack, stream: &mut TcpStream) {
    if stream.write_all(attack.request()).await.is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    match attack {
        Attack::Slowloris | Attack::SlowPost => {
            let drip: &[u8] = if attack == Attack::Slowloris {
                b"X-a: b\r\n"
            } else {
                b"x"
            };
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if stream.write_all(drip).await.is_err() {
                    return;
                }
                // An answer (408) or a close ends the attack.
                if let Ok(Ok(0) | Err(_)) =
                    tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buf)).await
                {
                    return;
                }
            }
        }
        // Never read; held until the deadline.
        Attack::SlowRead => std::future::pending::<()>().await,
        Attack::IdleUpgrade => while !matches!(stream.read(&mut buf).await, Ok(0) | Err(_)) {},
        Attack::Upload => {
            // The whole body (within weir's request buffer), then wait for the end.
            let chunk = vec![b'u'; 64 * 1024];
            for _ in 0..8 {
                if stream.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            while !matches!(stream.read(&mut buf).await, Ok(0) | Err(_)) {}
        }
        Attack::LateBody => loop {
            // Read an answer, then ask again on the same connection.
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            if stream.write_all(attack.request()).await.is_err() {
                return;
            }
        },
    }
}

/// A node that accepts connections and never reads from them.
pub async fn stalled_node(listener: TcpListener) {
    let mut held = Vec::new();
    while let Ok((stream, _)) = listener.accept().await {
        held.push(stream);
    }
}

/// A node that answers each request with a head announcing a body, and 20 ms
/// later sends a forged response as that body: the late body of a confused
/// server after HEAD.
pub async fn late_body_node(listener: TcpListener) {
    while let Ok((mut stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            while read_head(&mut stream).await {
                let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 44\r\n\r\n";
                if stream.write_all(answer).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                let late = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged";
                if stream.write_all(late).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// A node that switches every request to WebSocket and then only echoes.
pub async fn websocket_node(listener: TcpListener) {
    while let Ok((mut stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            if !read_head(&mut stream).await {
                return;
            }
            let switch = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
            if stream.write_all(switch).await.is_ok() {
                let (mut reader, mut writer) = stream.split();
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
            }
        });
    }
}

/// Reads up to the end of a request head; false on close.
async fn read_head(stream: &mut TcpStream) -> bool {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return false,
        }
        if head.len() > 64 * 1024 {
            return false;
        }
    }
    true
}
