//! The memory an idle connection holds: client connections (plain and TLS)
//! kept alive between requests, and idle upstream connections in a node's
//! pool. The proxy runs on its own current-thread runtime (like `threads =
//! 1`) on a thread whose heap allocations are counted; clients and origins
//! run elsewhere and are not. Bytes asked of the allocator do not depend on
//! machine load, so the bounds hold on a busy CI machine; each is well under
//! one of the buffers a connection uses while a request is in progress, so a
//! connection that kept its buffers, or grew its idle state, fails here.
//! The same counting holds small cached objects to what the cache charges them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use tokio::sync::oneshot;
use weir_origin::{OriginOptions, OriginTls};
use weir_testkit::memory::{CountingAllocator, count_this_thread, live_bytes};
use weir_testkit::tls::{self, ClientOptions, Pki};
use weir_testkit::{TestOrigin, TestProxy};
use weir_tls::KeyType;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// The count is process-wide: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A proxy on a counted thread of its own.
struct CountedProxy {
    /// The first listener's address.
    addr: SocketAddr,
    /// Every listener's, by virtual server.
    addrs: Vec<(String, SocketAddr)>,
    /// The running proxy (its caches, say).
    live: std::sync::Arc<weir_proxy::Live>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CountedProxy {
    fn start(toml: String) -> CountedProxy {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            count_this_thread();
            // The runtime's blocking threads too: parked connections wait on one.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .on_thread_start(count_this_thread)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let proxy = TestProxy::start(&toml).await;
                addr_tx
                    .send((proxy.addrs.clone(), std::sync::Arc::clone(&proxy.live)))
                    .expect("test waits for the address");
                let _ = stopped.await;
                proxy.stop().await;
            });
        });
        let (addrs, live) = addr_rx.recv().expect("proxy started");
        CountedProxy {
            addr: addrs[0].1,
            addrs,
            live,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for CountedProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Live counted bytes once the proxy has finished what it was doing: read
/// until two readings 50 ms apart agree (at most 5 s).
async fn settled_live_bytes() -> i64 {
    let mut last = live_bytes();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = live_bytes();
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// One keep-alive request on a blocking socket; the whole response is read.
fn request(stream: &mut TcpStream) {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("send");
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "proxy closed the connection");
        got.extend_from_slice(&chunk[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&got[..end]).expect("ASCII head");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .expect("Content-Length");
        if got.len() >= end + 4 + length {
            return;
        }
    }
}

fn open_idle(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut stream = TcpStream::connect(addr).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            request(&mut stream);
            stream
        })
        .collect()
}

fn toml_path(path: &Path) -> String {
    path.display().to_string().replace('\\', "\\\\")
}

const CONNECTIONS: usize = 1000;

const LIMITS: &str = "[virtual_servers.web.limits]\nmax_connections = 5000\n";

/// What a connection's task holds is measured with parking off: with it on, a
/// connection idle for `park_idle` gives up its task (see the parked test below).
const NEVER_PARKED: &str =
    "[virtual_servers.web.timeouts]\npark_idle = \"0s\"\nrest_idle = \"0s\"\n";

/// 1,000 kept-alive client connections, one request each, then idle: each
/// holds its task and its socket's registration and nothing else. With the
/// request's buffers kept (4 KiB to read the client, 8 KiB to read the node)
/// this was over 15 KiB each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_plain_client_connections_hold_no_buffers() {
    let _serial = SERIAL.lock().await;
    let origin = TestOrigin::start("a").await;
    let proxy = CountedProxy::start(weir_testkit::config(
        &[origin.addr],
        "",
        &format!("{LIMITS}{NEVER_PARKED}"),
    ));
    let addr = proxy.addr;
    // Warm up: the upstream connection, the buffer pool, the runtime's tables.
    tokio::task::spawn_blocking(move || drop(open_idle(addr, 20)))
        .await
        .unwrap();
    let before = settled_live_bytes().await;
    let held = tokio::task::spawn_blocking(move || open_idle(addr, CONNECTIONS))
        .await
        .unwrap();
    let after = settled_live_bytes().await;
    let per_connection = (after - before) / CONNECTIONS as i64;
    eprintln!("idle plain client connection: {per_connection} bytes");
    // The connection's task, 512 bytes (tokio rounds task cells up to a multiple
    // of 128, and the future has 8 bytes to spare below that: a larger one costs
    // 128 bytes more per connection), and the socket's registration, 256.
    assert!(
        per_connection <= 800,
        "{per_connection} bytes per idle client connection"
    );
    drop(held);
    // Closed, they give it all back (within what tokio keeps for reuse).
    let closed = settled_live_bytes().await;
    assert!(
        closed - before < (after - before) / 4,
        "closing 1000 connections freed only {} of {} bytes",
        after - closed,
        after - before
    );
    drop(proxy);
    origin.stop().await;
}

/// Waits until silent connections are accepted: listeners defer the accept of a
/// connection that has sent nothing (`TCP_DEFER_ACCEPT`, 1 s), and the kernel
/// hands it over when the client answers the SYN-ACK it sends again after that.
async fn accepted_silent() {
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// Connections that have not sent anything yet hold no more: the socket may be
/// reported readable right after the accept with nothing to read, and a
/// connection that took its buffers then would keep them (8.5 KiB each) until
/// its first request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_connections_hold_no_buffers() {
    let _serial = SERIAL.lock().await;
    let origin = TestOrigin::start("a").await;
    let proxy = CountedProxy::start(weir_testkit::config(
        &[origin.addr],
        "",
        &format!("{LIMITS}{NEVER_PARKED}"),
    ));
    let addr = proxy.addr;
    tokio::task::spawn_blocking(move || drop(open_idle(addr, 20)))
        .await
        .unwrap();
    let before = settled_live_bytes().await;
    let held = tokio::task::spawn_blocking(move || {
        (0..CONNECTIONS)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    accepted_silent().await;
    let after = settled_live_bytes().await;
    let per_connection = (after - before) / CONNECTIONS as i64;
    eprintln!("silent plain client connection: {per_connection} bytes");
    assert!(
        per_connection <= 1024,
        "{per_connection} bytes per connection that has sent nothing"
    );
    drop(held);
    drop(proxy);
    origin.stop().await;
}

/// Parked connections (`crates/weir-proxy/src/park.rs`), kept-alive ones and ones
/// that have sent nothing, give up their task and the runtime's registration of
/// their socket: what is left is their entry in the lot's table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_client_connections_hold_only_their_entry_in_the_lot() {
    let per_connection = held_in_the_lot("park_idle = \"50ms\"", "parked").await;
    // Its entry: the socket, the client's address, its times and counts, its
    // place in the counts (`Admission`) and its drain signal: 112 bytes in a
    // table grown by pages of 256.
    assert!(
        per_connection <= 160,
        "{per_connection} bytes per parked client connection"
    );
}

/// Resting connections give up their task and keep the runtime's registration of
/// their socket: their entry in the lot's resting table, the waker the runtime
/// holds for them, and the registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resting_client_connections_hold_their_entry_and_registration() {
    let per_connection =
        held_in_the_lot("rest_idle = \"50ms\"\npark_idle = \"0s\"", "resting").await;
    // The entry (the connection as `IdleConnection` holds it, its `Admission` and
    // drain signal), the waker the runtime holds, and the runtime's registration
    // (256 bytes of it): under the 768 bytes of one waiting in its task.
    assert!(
        per_connection <= 480,
        "{per_connection} bytes per resting client connection"
    );
}

/// Bytes held per connection, half kept alive and half silent, once each has left
/// its task to wait in the lot as `timeouts` says; each is served again after.
async fn held_in_the_lot(timeouts: &str, what: &str) -> i64 {
    let _serial = SERIAL.lock().await;
    let origin = TestOrigin::start("a").await;
    let proxy = CountedProxy::start(weir_testkit::config(
        &[origin.addr],
        "",
        &format!("{LIMITS}[virtual_servers.web.timeouts]\n{timeouts}\n"),
    ));
    let addr = proxy.addr;
    // Warm up: the upstream connection, the buffer pool, the runtime's tables. The
    // lot's table is left small: its growth is what parked connections cost.
    let warm = tokio::task::spawn_blocking(move || open_idle(addr, 20))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(warm);
    let before = settled_live_bytes().await;
    let held = tokio::task::spawn_blocking(move || {
        let mut held = open_idle(addr, CONNECTIONS / 2);
        held.extend((0..CONNECTIONS / 2).map(|_| TcpStream::connect(addr).expect("connect")));
        held
    })
    .await
    .unwrap();
    accepted_silent().await;
    let after = settled_live_bytes().await;
    let per_connection = (after - before) / CONNECTIONS as i64;
    eprintln!("{what} client connection: {per_connection} bytes");
    // Woken, each is served again.
    let held = tokio::task::spawn_blocking(move || {
        let mut held = held;
        for stream in &mut held {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            request(stream);
        }
        held
    })
    .await
    .unwrap();
    drop(held);
    drop(proxy);
    origin.stop().await;
    per_connection
}

/// Kept-alive TLS connections hold rustls' session state (keys, its 4 KiB
/// record buffer) but none of the request buffers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tls_client_connections_hold_no_request_buffers() {
    let _serial = SERIAL.lock().await;
    const TLS_CONNECTIONS: usize = 200;
    let pki = Pki::new();
    let (cert, key) = pki.server("site", &["site.test"], KeyType::EcdsaP256);
    let origin = TestOrigin::start("a").await;
    let proxy = CountedProxy::start(weir_testkit::config(
        &[origin.addr],
        "",
        &format!(
            "protocol = \"https\"\n[virtual_servers.web.tls]\n\
             certificates = [{{ cert = \"{}\", key = \"{}\" }}]",
            toml_path(&cert),
            toml_path(&key)
        ),
    ));
    let client = tls::client_config(&ClientOptions::default());
    for _ in 0..5 {
        let mut stream = tls::connect(proxy.addr, "site.test", &client)
            .await
            .unwrap();
        assert_eq!(tls::get(&mut stream, "/").await.unwrap().status, 200);
    }
    let before = settled_live_bytes().await;
    let mut held = Vec::new();
    for _ in 0..TLS_CONNECTIONS {
        let mut stream = tls::connect(proxy.addr, "site.test", &client)
            .await
            .unwrap();
        assert_eq!(tls::get(&mut stream, "/").await.unwrap().status, 200);
        held.push(stream);
    }
    let after = settled_live_bytes().await;
    let per_connection = (after - before) / TLS_CONNECTIONS as i64;
    eprintln!("idle TLS client connection: {per_connection} bytes");
    assert!(
        per_connection <= 12 * 1024,
        "{per_connection} bytes per idle TLS client connection"
    );
    drop(held);
    drop(proxy);
    origin.stop().await;
}

/// `count` clients at once, each with one slow request on its own connection
/// (closed after the response), so the pool behind `addr` opens `count` connections.
async fn concurrent_slow_requests(addr: SocketAddr, count: usize) {
    let clients: Vec<_> = (0..count)
        .map(|_| {
            tokio::task::spawn_blocking(move || {
                let mut stream = TcpStream::connect(addr).expect("connect");
                stream
                    .write_all(b"GET /delay/300 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    .expect("send");
                let mut all = Vec::new();
                stream.read_to_end(&mut all).expect("read");
                assert!(all.starts_with(b"HTTP/1.1 200"), "{all:?}");
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
}

/// Idle connections in a node's pool: plain ones are a socket; TLS ones add
/// rustls' session state, but no buffer of weir's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstream_connections_are_small() {
    const UPSTREAM: usize = 40;
    let _serial = SERIAL.lock().await;
    for tls_to_node in [false, true] {
        let pki = Pki::new();
        let (cert, key) = pki.server("node", &["node.test"], KeyType::EcdsaP256);
        let mut options = OriginOptions::new("a", "127.0.0.1:0".parse().unwrap());
        let mut pool_tls = String::new();
        if tls_to_node {
            options.tls = Some(OriginTls::from_pem_files(&cert, &key, true).unwrap());
            pool_tls = format!(
                "[pools.web.tls]\nca = \"{}\"\nserver_name = \"node.test\"",
                toml_path(&pki.ca_path())
            );
        }
        let origin = TestOrigin::with_options(options).await;
        let plain = TestOrigin::start("warm").await;
        // `warm` fills the per-thread buffer pool first, so that what is
        // measured through `web` is its idle upstream connections alone.
        let proxy = CountedProxy::start(format!(
            "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
             [pools.warm]\nnodes = [{{ address = \"{}\" }}]\n\n\
             [pools.web]\nnodes = [{{ address = \"{}\" }}]\n{pool_tls}\n\n\
             [virtual_servers.warm]\nlisten = [\"127.0.0.1:0\"]\npool = \"warm\"\n\n\
             [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n",
            plain.addr, origin.addr
        ));
        let address = |name: &str| {
            proxy
                .addrs
                .iter()
                .find(|(vs, _)| vs == name)
                .map(|(_, addr)| *addr)
                .expect("listener")
        };
        concurrent_slow_requests(address("warm"), UPSTREAM).await;
        let before = settled_live_bytes().await;
        concurrent_slow_requests(address("web"), UPSTREAM).await;
        let after = settled_live_bytes().await;
        assert!(
            origin.stats.connections_accepted() >= UPSTREAM as u64,
            "{} upstream connections",
            origin.stats.connections_accepted()
        );
        let per_connection = (after - before) / UPSTREAM as i64;
        eprintln!("idle upstream connection (TLS: {tls_to_node}): {per_connection} bytes");
        let bound = if tls_to_node { 12 * 1024 } else { 512 };
        assert!(
            per_connection <= bound,
            "{per_connection} bytes per idle upstream connection (TLS: {tls_to_node})"
        );
        drop(proxy);
        origin.stop().await;
        plain.stop().await;
    }
}

/// An h2c connection (prior knowledge) after one request, on a blocking socket: the
/// preface, an empty SETTINGS, a GET of `/` (HPACK literals), then frames read until the
/// stream ends (a SETTINGS from weir acknowledged).
fn open_h2c(addr: SocketAddr) -> TcpStream {
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }
    let mut block = Vec::new();
    for (name, value) in [
        (&b":method"[..], &b"GET"[..]),
        (b":scheme", b"http"),
        (b":authority", b"t"),
        (b":path", b"/"),
    ] {
        block.extend_from_slice(&[0, name.len() as u8]);
        block.extend_from_slice(name);
        block.push(value.len() as u8);
        block.extend_from_slice(value);
    }
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(4, 0, 0, &[]));
    hello.extend(frame(1, 0x5, 1, &block));
    stream.write_all(&hello).expect("send");
    let mut got: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        while got.len() >= 9 {
            let length = u32::from_be_bytes([0, got[0], got[1], got[2]]) as usize;
            if got.len() < 9 + length {
                break;
            }
            let (kind, flags) = (got[3], got[4]);
            let id = u32::from_be_bytes([got[5], got[6], got[7], got[8]]) & 0x7fff_ffff;
            got.drain(..9 + length);
            if kind == 4 && flags & 1 == 0 {
                stream.write_all(&frame(4, 1, 0, &[])).expect("ack");
            }
            if (kind == 0 || kind == 1) && id == 1 && flags & 1 == 1 {
                return stream;
            }
        }
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "proxy closed the connection");
        got.extend_from_slice(&chunk[..n]);
    }
}

/// Idle h2c connections on weir's own codec (the default) keep 1 KiB to read into and no
/// write buffer while no stream is open (`http2/own/driver.rs`): about 13 KB. On the `h2`
/// crate (`scripts/test` runs this again on it) they hold its state and buffers (about
/// 39.5 KB, most of it the codec's 16 KiB write and 8 KiB read buffers, which it keeps for
/// the connection's life). Neither holds an HTTP/1.1 connection future besides: the one that
/// read the preface is dropped before HTTP/2 is served (it was 5.8 KB more). The bounds also
/// catch the connection's HTTP/2 future growing back by what its rare awaits once added to
/// it (a lingering close's 4 KiB scratch array and the handshake inline: 3.9 KB more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_h2c_client_connections_hold_no_http1_state() {
    let _serial = SERIAL.lock().await;
    const H2C_CONNECTIONS: usize = 200;
    let origin = TestOrigin::start("a").await;
    let proxy = CountedProxy::start(weir_testkit::config(
        &[origin.addr],
        "",
        "[virtual_servers.web.http2]\ncleartext = true",
    ));
    let addr = proxy.addr;
    tokio::task::spawn_blocking(move || drop((0..20).map(|_| open_h2c(addr)).collect::<Vec<_>>()))
        .await
        .unwrap();
    let before = settled_live_bytes().await;
    let held = tokio::task::spawn_blocking(move || {
        (0..H2C_CONNECTIONS)
            .map(|_| open_h2c(addr))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let after = settled_live_bytes().await;
    let per_connection = (after - before) / H2C_CONNECTIONS as i64;
    eprintln!("idle h2c client connection: {per_connection} bytes");
    let bound = match std::env::var("WEIR_TEST_HTTP2_CODEC").as_deref() {
        Ok("h2") => 42_000,
        _ => 16_000,
    };
    assert!(
        per_connection <= bound,
        "{per_connection} bytes per idle h2c client connection"
    );
    drop(held);
    drop(proxy);
    origin.stop().await;
}

/// One response of `length` body bytes to `GET target` on a blocking keep-alive socket,
/// read whole.
fn fetch(stream: &mut TcpStream, target: &str, length: usize) {
    let request = format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .is_none_or(|end| got.len() < end + 4 + length)
    {
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "proxy closed the connection");
        got.extend_from_slice(&chunk[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

/// Small cached objects hold no more than the store charges them against `size`, so the
/// bound is one on memory: 5,000 objects of 10 bytes. Each held twice its charge (about
/// 1,010 bytes against 522) while it kept its fill's channel and chunk list once complete
/// and its head in the buffer it grew in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_cached_objects_hold_no_more_than_they_are_charged() {
    const OBJECTS: usize = 5000;
    let _serial = SERIAL.lock().await;
    let origin = TestOrigin::start("a").await;
    let proxy = CountedProxy::start(weir_testkit::config(
        &[origin.addr],
        "",
        "[virtual_servers.web.cache]\nsize = \"256MiB\"\n",
    ));
    let addr = proxy.addr;
    let fill = move |from: usize, count: usize| {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        for n in from..from + count {
            fetch(&mut stream, &format!("/bytes/10?max_age=600&n={n}"), 10);
        }
    };
    // Warm up: the upstream connection, the buffer pool, the store's first tables.
    tokio::task::spawn_blocking(move || fill(0, 200))
        .await
        .unwrap();
    let cache = |live: &weir_proxy::Live| {
        let model = live.current();
        let vs = model.virtual_server("web").expect("web");
        vs.cache().expect("a cache").stats()
    };
    let (before, charged_before) = (settled_live_bytes().await, cache(&proxy.live));
    tokio::task::spawn_blocking(move || fill(1000, OBJECTS))
        .await
        .unwrap();
    let (after, charged) = (settled_live_bytes().await, cache(&proxy.live));
    assert_eq!(charged.objects - charged_before.objects, OBJECTS);
    let held = (after - before) / OBJECTS as i64;
    let charge = ((charged.bytes - charged_before.bytes) / OBJECTS) as i64;
    eprintln!("small cached object: {held} bytes held, {charge} charged");
    assert!(
        held <= charge,
        "{held} bytes held per object, {charge} charged"
    );
    drop(proxy);
    origin.stop().await;
}
