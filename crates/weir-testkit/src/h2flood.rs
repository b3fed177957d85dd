//! HTTP/2 flood clients, for the flood defences' end-to-end check
//! (`bench/h2-flood`, through `examples/h2flood.rs`). Each connection (h2c,
//! or TLS with ALPN `h2`) sends the preface and SETTINGS, then one kind of
//! abusive frame as fast as the server takes them, and reconnects when the
//! server closes it, until the deadline. A reader on each connection counts
//! the GOAWAYs the server sends and their error codes. Loopback targets only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// `GET https://a/` in HPACK: static-table method, scheme and path, literal authority.
pub const GET_BLOCK: &[u8] = &[0x82, 0x87, 0x84, 0x01, 0x01, b'a'];
/// The same as a POST, so a body may follow.
pub const POST_BLOCK: &[u8] = &[0x83, 0x87, 0x84, 0x01, 0x01, b'a'];
/// GOAWAY's ENHANCE_YOUR_CALM error code.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;
/// Frames written per write call.
const BATCH: usize = 64;
/// Pause before reconnecting after the server closed a connection.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// One kind of flood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloodKind {
    /// Streams opened and reset at once (CVE-2023-44487).
    RapidReset,
    /// A header block continued forever (CVE-2024-27316).
    Continuation,
    /// SETTINGS frames, back to back.
    Settings,
    /// PING frames, back to back.
    Ping,
    /// Empty DATA frames on an open stream.
    EmptyFrames,
    /// WINDOW_UPDATE frames, back to back.
    WindowUpdate,
    /// PRIORITY frames, back to back (frames the server acts on not at all).
    IgnoredFrames,
}

impl FloodKind {
    /// Every kind.
    pub const ALL: [FloodKind; 7] = [
        FloodKind::RapidReset,
        FloodKind::Continuation,
        FloodKind::Settings,
        FloodKind::Ping,
        FloodKind::EmptyFrames,
        FloodKind::WindowUpdate,
        FloodKind::IgnoredFrames,
    ];

    /// The name, as weir's `weir_http2_floods_total{kind}` label has it.
    pub fn name(self) -> &'static str {
        match self {
            FloodKind::RapidReset => "rapid_reset",
            FloodKind::Continuation => "continuation",
            FloodKind::Settings => "settings",
            FloodKind::Ping => "ping",
            FloodKind::EmptyFrames => "empty_frames",
            FloodKind::WindowUpdate => "window_update",
            FloodKind::IgnoredFrames => "ignored_frames",
        }
    }

    /// The kind [`FloodKind::name`] gives `name`, if any.
    pub fn from_name(name: &str) -> Option<FloodKind> {
        FloodKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// What follows the preface and SETTINGS once per connection.
    fn opening(self) -> Vec<u8> {
        match self {
            FloodKind::EmptyFrames => frame(0x1, 0x4, 1, POST_BLOCK),
            FloodKind::Continuation => frame(0x1, 0x0, 1, GET_BLOCK),
            _ => Vec::new(),
        }
    }

    /// The `n`th abusive frame (or frames) of a connection.
    fn next(self, n: u32) -> Vec<u8> {
        match self {
            FloodKind::RapidReset => {
                let stream = (2 * n + 1) & 0x7fff_ffff;
                let mut bytes = frame(0x1, 0x5, stream, GET_BLOCK);
                bytes.extend(frame(0x3, 0, stream, &8u32.to_be_bytes()));
                bytes
            }
            FloodKind::Continuation => frame(0x9, 0, 1, &[0x84]),
            FloodKind::Settings => frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]),
            FloodKind::Ping => frame(0x6, 0, 0, &u64::from(n).to_be_bytes()),
            FloodKind::EmptyFrames => frame(0x0, 0, 1, &[]),
            FloodKind::WindowUpdate => frame(0x8, 0, 0, &1u32.to_be_bytes()),
            FloodKind::IgnoredFrames => {
                let stream = (2 * n + 1) & 0x7fff_ffff;
                frame(0x2, 0, stream, &[0, 0, 0, 0, 16])
            }
        }
    }
}

/// A frame: 9-byte header and payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = payload.len();
    let mut out = Vec::with_capacity(9 + length);
    out.extend_from_slice(&[
        (length >> 16) as u8,
        (length >> 8) as u8,
        length as u8,
        kind,
        flags,
    ]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// What to flood, where, how hard and for how long.
#[derive(Debug, Clone)]
pub struct FloodPlan {
    /// Where to send the flood (loopback or a test namespace only).
    pub target: SocketAddr,
    /// TLS with ALPN `h2` (certificate not verified); else h2c prior knowledge.
    pub tls: bool,
    /// What to send.
    pub kind: FloodKind,
    /// Connections flooding at once (each reopened when closed).
    pub connections: usize,
    /// How long the flood lasts; it stops by itself.
    pub duration: Duration,
}

/// Counts over a flood.
#[derive(Debug, Default)]
pub struct FloodStats {
    /// Connections opened.
    pub connections: AtomicU64,
    /// Flood frames written.
    pub frames_sent: AtomicU64,
    /// GOAWAYs with ENHANCE_YOUR_CALM.
    pub goaway_calm: AtomicU64,
    /// GOAWAYs with another error code.
    pub goaway_other: AtomicU64,
    /// Connections the server closed without a GOAWAY.
    pub closed_silently: AtomicU64,
}

impl FloodStats {
    /// One line of JSON.
    pub fn to_json(&self) -> String {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        format!(
            "{{\"connections\":{},\"frames_sent\":{},\"goaway_enhance_your_calm\":{},\"goaway_other\":{},\"closed_without_goaway\":{}}}",
            get(&self.connections),
            get(&self.frames_sent),
            get(&self.goaway_calm),
            get(&self.goaway_other),
            get(&self.closed_silently)
        )
    }
}

/// Runs the flood to its deadline.
pub async fn run(plan: &FloodPlan) -> anyhow::Result<Arc<FloodStats>> {
    anyhow::ensure!(
        plan.target.ip().is_loopback(),
        "flood targets must be loopback addresses, not {}",
        plan.target
    );
    let stats = Arc::new(FloodStats::default());
    let deadline = Instant::now() + plan.duration;
    let tls = plan.tls.then(|| {
        let options = crate::tls::ClientOptions {
            resumption: false,
            ..crate::tls::ClientOptions::default()
        };
        let mut config = (*crate::tls::client_config(&options)).clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(config))
    });
    let mut tasks = Vec::new();
    for _ in 0..plan.connections {
        let (plan, stats, tls) = (plan.clone(), Arc::clone(&stats), tls.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let _ = connection(&plan, tls.as_ref(), &stats, deadline).await;
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    Ok(stats)
}

/// One connection, until the server closes it or the deadline.
async fn connection(
    plan: &FloodPlan,
    tls: Option<&tokio_rustls::TlsConnector>,
    stats: &FloodStats,
    deadline: Instant,
) -> anyhow::Result<()> {
    let tcp = TcpStream::connect(plan.target).await?;
    let _ = tcp.set_nodelay(true);
    stats.connections.fetch_add(1, Ordering::Relaxed);
    match tls {
        None => flood(tcp, plan.kind, stats, deadline).await,
        Some(connector) => {
            let name =
                tokio_rustls::rustls::pki_types::ServerName::IpAddress(plan.target.ip().into());
            let stream = connector.connect(name, tcp).await?;
            flood(stream, plan.kind, stats, deadline).await
        }
    }
}

async fn flood<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    kind: FloodKind,
    stats: &FloodStats,
    deadline: Instant,
) -> anyhow::Result<()> {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut opening = Vec::from(PREFACE);
    opening.extend(frame(0x4, 0, 0, &[]));
    opening.extend(kind.opening());
    writer.write_all(&opening).await?;
    let write = async {
        let mut n = 0u32;
        loop {
            let mut batch = Vec::new();
            for _ in 0..BATCH {
                batch.extend(kind.next(n));
                n = n.wrapping_add(1);
            }
            if writer.write_all(&batch).await.is_err() {
                return;
            }
            stats.frames_sent.fetch_add(BATCH as u64, Ordering::Relaxed);
        }
    };
    let read = read_until_goaway(&mut reader);
    tokio::select! {
        code = read => match code {
            Some(ENHANCE_YOUR_CALM) => stats.goaway_calm.fetch_add(1, Ordering::Relaxed),
            Some(_) => stats.goaway_other.fetch_add(1, Ordering::Relaxed),
            None => stats.closed_silently.fetch_add(1, Ordering::Relaxed),
        },
        _ = write => stats.closed_silently.fetch_add(1, Ordering::Relaxed),
        _ = tokio::time::sleep_until(deadline) => 0,
    };
    Ok(())
}

/// Reads frames until a GOAWAY (its error code) or the end of the connection (`None`).
pub async fn read_until_goaway<R: AsyncRead + Unpin>(reader: &mut R) -> Option<u32> {
    let mut buffer: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        while buffer.len() >= 9 {
            let length =
                usize::from(buffer[0]) << 16 | usize::from(buffer[1]) << 8 | usize::from(buffer[2]);
            if buffer.len() < 9 + length {
                break;
            }
            if buffer[3] == 0x7 && length >= 8 {
                return Some(u32::from_be_bytes([
                    buffer[13], buffer[14], buffer[15], buffer[16],
                ]));
            }
            buffer.drain(..9 + length);
        }
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}
