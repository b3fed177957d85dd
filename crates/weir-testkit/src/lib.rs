//! In-process origins, proxies and raw clients for weir's end-to-end tests.
//! Everything binds port 0 on loopback; nothing outside the test process is
//! needed.
//!
//! ```no_run
//! # async fn demo() {
//! use weir_testkit::{TestOrigin, TestProxy, client};
//! let origin = TestOrigin::start("a").await;
//! let proxy = TestProxy::start(&weir_testkit::config(&[origin.addr], "", "")).await;
//! let response = client::get(proxy.addr, "/").await.unwrap();
//! assert_eq!(response.status, 200);
//! proxy.stop().await;
//! # }
//! ```

pub mod attack;
pub mod client;
pub mod dns;
pub mod h2flood;
pub mod h2spec;
pub mod memory;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use weir_core::Shutdown;
use weir_observe::Metrics;
use weir_origin::{Origin, OriginOptions, OriginStats};
use weir_upstream::Pool;

/// `N` distinct free loopback ports, for configs of a separately started
/// `weir` process. All `N` listeners are held until every port is chosen, so
/// two calls in one config can never return the same port (the kernel may
/// hand a just-released port out again). Another process can still take a
/// port before the caller binds it; tests that can bind port 0 should.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"))
        .collect();
    std::array::from_fn(|i| {
        listeners[i]
            .local_addr()
            .expect("a bound listener has an address")
            .port()
    })
}

/// A loopback port that refuses connections for as long as this value lives: a
/// socket bound to it and not listening. A port from a listener bound and dropped
/// is only free, and any test running beside this one may be given it (by a bind
/// to port 0) and answer on it; a bound port is handed to no one else, and a
/// connect to it is answered with a reset.
pub struct ClosedPort {
    addr: SocketAddr,
    _socket: socket2::Socket,
}

impl ClosedPort {
    /// A fresh port on 127.0.0.1, held closed.
    pub fn new() -> ClosedPort {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a TCP socket");
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("bind a loopback port");
        let addr = socket
            .local_addr()
            .ok()
            .and_then(|addr| addr.as_socket())
            .expect("a bound socket has an address");
        ClosedPort {
            addr,
            _socket: socket,
        }
    }

    /// The address that refuses connections.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Gives the port up, for a server to bind next; another bind to port 0 could
    /// take it in between, but only in that moment.
    pub fn release(self) -> SocketAddr {
        self.addr
    }
}

impl Default for ClosedPort {
    fn default() -> ClosedPort {
        ClosedPort::new()
    }
}

/// A built-in origin running on its own port.
pub struct TestOrigin {
    /// The address the origin is bound to (with `start`, 127.0.0.1 and a port from port 0).
    pub addr: SocketAddr,
    /// The origin's counters.
    pub stats: Arc<OriginStats>,
    shutdown: Shutdown,
    task: JoinHandle<std::io::Result<()>>,
}

impl TestOrigin {
    /// An origin named `name` with default options, on a free loopback port.
    pub async fn start(name: &str) -> TestOrigin {
        TestOrigin::with_options(OriginOptions::new(
            name,
            "127.0.0.1:0".parse().expect("valid"),
        ))
        .await
    }

    /// An origin with `options`; panics if it cannot bind (a test set-up failure).
    pub async fn with_options(options: OriginOptions) -> TestOrigin {
        let origin = Origin::bind(options)
            .await
            .expect("origin binds on loopback");
        let addr = origin.local_addr();
        let stats = origin.stats();
        let (shutdown, signal) = Shutdown::new();
        let task = tokio::spawn(origin.run(signal));
        TestOrigin {
            addr,
            stats,
            shutdown,
            task,
        }
    }

    /// Stops the origin and waits for its task to end.
    pub async fn stop(self) {
        self.shutdown.trigger();
        let _ = self.task.await;
    }
}

/// A proxy running in-process.
pub struct TestProxy {
    /// The first listener's address.
    pub addr: SocketAddr,
    /// Every listener's name and bound address, in config order.
    pub addrs: Vec<(String, SocketAddr)>,
    /// The proxy's metrics.
    pub metrics: Arc<Metrics>,
    /// The proxy's pools, in config order.
    pub pools: Vec<Arc<Pool>>,
    /// TLS termination of each HTTPS virtual server (to reload certificates).
    pub tls: Vec<Arc<weir_proxy::TlsTermination>>,
    /// The running proxy: its current model, reloads.
    pub live: Arc<weir_proxy::Live>,
    shutdown: Shutdown,
    task: JoinHandle<std::io::Result<()>>,
}

/// `WEIR_TEST_HTTP2_CODEC=h2` (or `weir`) sets `[http2] codec` of every virtual server a
/// test starts: `scripts/test` runs the HTTP/2 tests again on the `h2` crate (weir's own
/// codec is the default), so each passes on both while both are kept
/// (`docs/design/http2.md`, "Step 5").
fn http2_codec_from_env(config: &mut weir_config::Config) {
    let codec = match std::env::var("WEIR_TEST_HTTP2_CODEC").as_deref() {
        Ok("weir") => weir_config::Http2Codec::Weir,
        Ok("h2") => weir_config::Http2Codec::H2,
        Ok(other) => panic!("WEIR_TEST_HTTP2_CODEC: \"{other}\" is neither \"weir\" nor \"h2\""),
        Err(_) => return,
    };
    for vs in &mut config.virtual_servers {
        vs.http2.codec = codec;
    }
}

impl TestProxy {
    /// Starts a proxy from TOML text (listen on `127.0.0.1:0`). Panics if the config is invalid.
    pub async fn start(toml: &str) -> TestProxy {
        let config =
            weir_config::parse_str(toml, "test.toml").unwrap_or_else(|error| panic!("{error}"));
        TestProxy::start_config(config).await
    }

    /// Starts a proxy from a config file (so that [`weir_proxy::Live::reload_file`]
    /// re-reads it). Panics if the config is invalid.
    pub async fn start_file(path: &std::path::Path) -> TestProxy {
        let config = weir_config::load_file(path).unwrap_or_else(|error| panic!("{error}"));
        TestProxy::start_config(config).await
    }

    async fn start_config(mut config: weir_config::Config) -> TestProxy {
        http2_codec_from_env(&mut config);
        let metrics = Metrics::new();
        let proxy = weir_proxy::Proxy::bind(&config, &metrics).expect("proxy binds on loopback");
        let addrs = proxy.local_addrs();
        let pools = proxy.pools();
        let tls = proxy.tls_terminations();
        let live = proxy.live();
        let (shutdown, signal) = Shutdown::new();
        let task = tokio::spawn(proxy.run(signal));
        while !live.is_running() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        TestProxy {
            addr: addrs[0].1,
            addrs,
            metrics,
            pools,
            tls,
            live,
            shutdown,
            task,
        }
    }

    /// Begins shutdown without waiting.
    pub fn trigger_shutdown(&self) {
        self.shutdown.trigger();
    }

    /// Shuts down and waits for the drain.
    pub async fn stop(self) {
        self.shutdown.trigger();
        let _ = self.task.await;
    }

    /// The access log file at `path` once it holds at least `records` lines (written out
    /// and read again for up to 5 s: a record follows its answer, and the client may
    /// read the answer first), else what it holds then.
    pub async fn access_log(&self, path: &std::path::Path, records: usize) -> String {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            self.live.flush_access_log();
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.lines().count() >= records || tokio::time::Instant::now() > deadline {
                return text;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Waits for the drain after [`TestProxy::trigger_shutdown`].
    pub async fn join(self) {
        let _ = self.task.await;
    }
}

/// `config` (one written with `access_log = false`, as [`config`] writes it) with its access
/// log on, in `format` (`"json"` or `"text"`), to a fresh file in the temporary directory
/// named for `name` and this process: the config and the file's path.
pub fn with_access_log_file(
    config: &str,
    name: &str,
    format: &str,
) -> (String, std::path::PathBuf) {
    let log = std::env::temp_dir().join(format!("weir-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let config = config.replace(
        "access_log = false",
        &format!(
            "access_log = true\naccess_log_format = \"{format}\"\naccess_log_file = \"{}\"",
            log.display().to_string().replace('\\', "\\\\")
        ),
    );
    (config, log)
}

/// A config with one virtual server `web` on `127.0.0.1:0` and one pool `web`
/// over `nodes`. `pool_extra` and `vs_extra` are TOML lines added to the
/// `[pools.web]` and `[virtual_servers.web]` tables (sub-tables may follow them).
pub fn config(nodes: &[SocketAddr], pool_extra: &str, vs_extra: &str) -> String {
    let nodes: Vec<String> = nodes
        .iter()
        .map(|n| format!("{{ address = \"{n}\" }}"))
        .collect();
    format!(
        "[log]\naccess_log = false\nlevel = \"warn\"\n\n\
         [pools.web]\nnodes = [{}]\n{pool_extra}\n\n\
         [virtual_servers.web]\nlisten = [\"127.0.0.1:0\"]\npool = \"web\"\n{vs_extra}\n",
        nodes.join(", ")
    )
}
