//! Command-line arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod tunnel;

pub use tunnel::{LabWanArgs, ProbeCommand, SideArgs, TunnelArgs, TunnelCommand};

/// weir: an application delivery controller — traffic management, TCP
/// connection offload, and the tools to measure them.
#[derive(Debug, Parser)]
#[command(name = "weir", version = weir_core::VERSION, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy (with no --config: the embedded default, a demo on 127.0.0.1:8080).
    Serve(ServeArgs),
    /// Validate a config file and print every error with file, line and key.
    Check(CheckArgs),
    /// Reload the running weir's configuration in place, through its admin API (the same
    /// as SIGHUP, but the outcome is printed: the diff applied, or why it was refused).
    Reload(ReloadArgs),
    /// Run the built-in origin server (for tests, benchmarks and labs).
    Origin(OriginArgs),
    /// Load generator: closed loop (service time) or open loop at a rate (latency corrected
    /// for coordinated omission).
    Bench(BenchArgs),
    /// User-space link emulator between two network namespaces: rate, delay, jitter, loss
    /// (needs root).
    Netem(NetemArgs),
    /// Generate a test CA and server or client certificates (ECDSA P-256 or RSA-2048) as PEM files.
    Cert(CertArgs),
    /// Reproduce the source documents' offload experiments on this machine and print their
    /// tables (no subcommand: a quick run of offload, tls and suite).
    Lab(LabArgs),
    /// WAN tunnel: the near side (client) and far side (server) of a QUIC tunnel with
    /// compression and deduplication.
    Tunnel(TunnelArgs),
}

/// `weir lab [offload|tls|suite|wan]`: the options before or after the subcommand.
#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: Option<LabCommand>,
    /// Write the results here: `lab.json` and a self-contained `report.html` with charts
    /// (offload, tls, suite and the quick run); `l4.json` (l4); `wan.json` (wan).
    #[arg(long, global = true)]
    pub out: Option<PathBuf>,
    /// No progress lines on stderr (the tables still go to stdout).
    #[arg(long, global = true)]
    pub quiet: bool,
    /// Install missing Debian packages the run asks for (nginx, HAProxy) with apt-get.
    #[arg(long, global = true)]
    pub install: bool,
}

/// One experiment of `weir lab`.
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// The Cisco ACE TCP-offload experiment: many slow keep-alive clients against a
    /// connection-capped origin, direct and through weir (default: 16,000 clients, cap 500).
    Offload(Box<LabOffloadArgs>),
    /// The Cisco ACE SSL-offload experiment: the origin's CPU and memory serving HTTPS itself
    /// vs plain HTTP behind weir terminating TLS (default: 1,000 clients, 1 request/s each).
    Tls(LabTlsArgs),
    /// The Zeus table (`weir bench suite`) direct, through weir and through installed peers.
    Suite(LabSuiteArgs),
    /// Connection offload at layer 4: many clients at once against a connection-capped TCP
    /// service, direct and through a weir TCP virtual server with its queue (default: 5,000
    /// clients, cap 100).
    L4(LabL4Args),
    /// The WX WAN-acceleration report's matrix: T1 and OC-1 × one-way delay × loss, direct
    /// TCP vs weir tunnel, through weir netem (needs root).
    Wan(LabWanArgs),
}

/// `weir lab l4`.
#[derive(Debug, Args)]
pub struct LabL4Args {
    /// Clients, all started at once.
    #[arg(long, default_value_t = 5_000)]
    pub clients: u32,
    /// The service resets connections past this many open; weir's pool cap to it.
    #[arg(long, default_value_t = 100)]
    pub cap: u32,
    /// Bytes each client sends and reads back.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// A client gives up after this long; also weir's queue timeout.
    #[arg(long, value_parser = weir_bench::parse_duration, default_value = "60s")]
    pub timeout: Duration,
    /// weir's worker threads.
    #[arg(long, default_value_t = 1)]
    pub proxy_threads: usize,
    /// Only through weir (skip the direct phase).
    #[arg(long)]
    pub no_direct: bool,
    /// Also write the results as JSON here (`--out DIR` writes DIR/l4.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `weir lab offload`: every option overrides the full size (or `--quick`'s).
#[derive(Debug, Args)]
pub struct LabOffloadArgs {
    /// The quick size: 2,000 clients, origin cap 62, 15 s a phase.
    #[arg(long)]
    pub quick: bool,
    /// Slow keep-alive clients [full: 16000].
    #[arg(long)]
    pub clients: Option<u32>,
    /// The origin refuses connections past this many open [full: 500].
    #[arg(long)]
    pub origin_cap: Option<u32>,
    /// weir's pool cap to the origin [default: the origin's cap].
    #[arg(long)]
    pub pool_cap: Option<u32>,
    /// The origin: the built-in one, or nginx from Debian.
    #[arg(long, value_enum, default_value_t = LabOrigin::Builtin)]
    pub origin: LabOrigin,
    /// Memory the built-in origin allocates and touches per open connection: 256k, 1m, 0.
    #[arg(long, value_parser = parse_memory)]
    pub connection_memory: Option<u64>,
    /// Time between two requests of one client [full: 5s].
    #[arg(long, value_parser = weir_bench::parse_duration)]
    pub interval: Option<Duration>,
    /// Clients start evenly spread over this time [full: 30s].
    #[arg(long, value_parser = weir_bench::parse_duration)]
    pub ramp: Option<Duration>,
    /// Length of each phase, ramp included [full: 60s].
    #[arg(long, value_parser = weir_bench::parse_duration)]
    pub duration: Option<Duration>,
    /// Connect and response timeout of the clients.
    #[arg(long, value_parser = weir_bench::parse_duration)]
    pub timeout: Option<Duration>,
    /// 127.0.0.x source addresses for the clients [default: one per 2,000 clients].
    #[arg(long)]
    pub sources: Option<u8>,
    /// weir's worker threads.
    #[arg(long)]
    pub proxy_threads: Option<usize>,
    /// Request path.
    #[arg(long)]
    pub path: Option<String>,
    /// Only through weir (skip the direct phase).
    #[arg(long)]
    pub no_direct: bool,
    /// Run the same clients through these peers too, with the same cap: haproxy, nginx.
    #[arg(long, value_delimiter = ',', value_parser = parse_peer)]
    pub peers: Vec<weir_lab::peers::Peer>,
    /// Sampling period of the gauges and charts.
    #[arg(long, value_parser = weir_bench::parse_duration)]
    pub sample_every: Option<Duration>,
}

/// `--origin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LabOrigin {
    /// `weir origin --max-connections CAP --per-connection-memory BYTES`.
    Builtin,
    /// nginx with worker_connections = cap + 1.
    Nginx,
}

/// `weir lab tls`.
#[derive(Debug, Args)]
pub struct LabTlsArgs {
    /// The quick size: 300 clients, 10 s a side.
    #[arg(long)]
    pub quick: bool,
    /// Simulated users, each one request a second on a new connection [full: 1000].
    #[arg(long)]
    pub clients: Option<u32>,
    /// Load time per side [full: 30s].
    #[arg(long, value_parser = weir_bench::parse_duration)]
    pub duration: Option<Duration>,
    /// Request path.
    #[arg(long)]
    pub path: Option<String>,
    /// Offer TLS session resumption (default off: every handshake is full).
    #[arg(long)]
    pub resumption: bool,
    /// weir's worker threads.
    #[arg(long)]
    pub proxy_threads: Option<usize>,
    /// Load generator threads.
    #[arg(long)]
    pub bench_threads: Option<usize>,
}

/// `weir lab suite`.
#[derive(Debug, Args)]
pub struct LabSuiteArgs {
    /// Rows of 1 s.
    #[arg(long)]
    pub quick: bool,
    /// Peers to compare, when installed: haproxy, nginx.
    #[arg(long, value_delimiter = ',', value_parser = parse_peer)]
    pub peers: Vec<weir_lab::peers::Peer>,
    /// Time per row per target [full: 5s].
    #[arg(long, value_parser = weir_bench::parse_duration)]
    pub row_duration: Option<Duration>,
    /// Connections per row.
    #[arg(short, long)]
    pub connections: Option<usize>,
    /// Threads (workers) of weir and each peer.
    #[arg(long)]
    pub proxy_threads: Option<usize>,
    /// Load generator threads [default: one per core].
    #[arg(long)]
    pub bench_threads: Option<usize>,
}

fn parse_peer(text: &str) -> Result<weir_lab::peers::Peer, String> {
    weir_lab::peers::Peer::parse(text)
}

/// A memory size: `0`, `262144`, `256k`, `1m`.
fn parse_memory(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    weir_netem::parse_bytes(text).map_err(|error| error.to_string())
}

/// `weir cert`: test certificates for labs, tests and trying HTTPS out.
#[derive(Debug, Args)]
pub struct CertArgs {
    /// Directory to write into (created if missing).
    #[arg(long, default_value = "certs")]
    pub out: PathBuf,
    /// Names (DNS names or IP addresses) for the server certificate.
    #[arg(long = "name", default_values_t = ["localhost".to_owned(), "127.0.0.1".to_owned()])]
    pub names: Vec<String>,
    /// Key types to issue server certificates for.
    #[arg(long = "key-type", value_enum, default_values_t = [CertKeyType::Ecdsa, CertKeyType::Rsa])]
    pub key_types: Vec<CertKeyType>,
    /// Also issue a client certificate with this common name (for client certificate tests).
    #[arg(long)]
    pub client: Option<String>,
    /// Days the server and client certificates are valid (1 to 3650, the life of the CA
    /// `weir cert` makes: a certificate past its CA's life would not verify).
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
    /// Reuse `ca.pem`/`ca.key` in the directory instead of making a new CA.
    #[arg(long)]
    pub reuse_ca: bool,
    /// Replace existing files.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CertKeyType {
    /// ECDSA P-256 (fast handshakes; every current client).
    Ecdsa,
    /// RSA-2048 (for old clients).
    Rsa,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The config file (TOML). Without it, the embedded default is used.
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Worker threads, 1 to 1024 (overrides `runtime.threads`).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Print the embedded default config and exit.
    #[arg(long)]
    pub print_default: bool,
    /// Binary upgrade: take the listening sockets over from the weir running this config
    /// (through its upgrade socket), start serving, then let the old process drain and
    /// exit. If this process fails to start, the old one keeps serving.
    #[arg(long)]
    pub upgrade: bool,
    /// Write this process's id to FILE once every listener is bound, for a supervisor or
    /// logrotate to signal it; removed at exit unless a binary upgrade's process wrote
    /// its own id there since (give the new process the same --pid-file).
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// The running weir's config file: its `[admin]` table says where the API listens and
    /// which token it needs.
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// The admin listener's address (instead of the config's `admin.listen`).
    #[arg(long)]
    pub admin: Option<SocketAddr>,
    /// A file holding the bearer token (instead of the config's `admin.token_file`).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The config file to validate.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct OriginArgs {
    /// Address to listen on.
    #[arg(short, long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// Name sent in `X-Origin` and on `/`.
    #[arg(long, default_value = "origin")]
    pub name: String,
    /// Refuse connections past this many open at once (like an overloaded Apache).
    #[arg(long)]
    pub max_connections: Option<u32>,
    /// Close the connection after every response.
    #[arg(long)]
    pub no_keep_alive: bool,
    /// Bytes of memory each open connection holds.
    #[arg(long, default_value_t = 0)]
    pub per_connection_memory: usize,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Raw TCP echo server instead of HTTP (for `weir bench tcp://...`): every byte read is
    /// written back.
    #[arg(long, conflicts_with = "tls_cert")]
    pub echo: bool,
    /// Serve HTTPS with this certificate chain (PEM, leaf first): TLS 1.2 and 1.3, ALPN
    /// http/1.1, session resumption on.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS #8, PKCS #1 or SEC1).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// With --tls-cert: send no session tickets and keep no sessions, so every handshake is full.
    #[arg(long, requires = "tls_cert")]
    pub tls_no_resumption: bool,
}

/// `weir bench URL...` (or `weir bench selftest`).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    /// URLs to load, taken in turn by each connection: http://..., or tcp://HOST:PORT for L4
    /// against an echo server (`weir origin --echo`).
    #[arg(required_unless_present_any = ["url_file"])]
    pub urls: Vec<String>,
    /// Connections, split across the threads.
    #[arg(short, long, default_value_t = 50)]
    pub connections: usize,
    /// Run this long (default 10s unless --requests).
    #[arg(short, long, value_parser = weir_bench::parse_duration, conflicts_with = "requests")]
    pub duration: Option<Duration>,
    /// Send this many requests in all.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Open loop: requests per second in all (latency from the intended send time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Worker threads, each with its own runtime (default: one per core).
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// A new connection per request, sent with `Connection: close`.
    #[arg(long)]
    pub close: bool,
    /// Request method.
    #[arg(short, long, default_value = "GET")]
    pub method: String,
    /// Extra request header `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    pub body: Option<String>,
    /// Request body read from a file.
    #[arg(long)]
    pub body_file: Option<PathBuf>,
    /// Read URLs from a file, one a line (like `siege -f`).
    #[arg(short = 'f', long)]
    pub url_file: Option<PathBuf>,
    /// Take URLs at random instead of in sequence.
    #[arg(long)]
    pub random: bool,
    /// Give up on a request (connect, send and response) after this long.
    #[arg(long, value_parser = weir_bench::parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// Print the `weir-bench/1` JSON document instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// No live progress line (it is shown only when stderr is a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
    /// tcp:// URLs: connections per second (`connect`) or request/response on persistent
    /// connections (`rr`).
    #[arg(long, value_enum, default_value_t = L4ModeArg::Rr)]
    pub l4_mode: L4ModeArg,
    /// tcp:// URLs: bytes sent and read back per transaction (default: 64 for rr, 0 for connect).
    #[arg(long)]
    pub l4_size: Option<usize>,
    /// https:// URLs: offer TLS session resumption. `off`: every handshake must be full, and a
    /// resumed one fails the run.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub tls_resumption: OnOff,
    /// https:// URLs: offer only this TLS version (default: 1.2 and 1.3).
    #[arg(long, value_enum)]
    pub tls_version: Option<TlsVersionArg>,
    /// https:// URLs: verify the server's certificate against this CA (PEM). Without it the
    /// certificate is not verified (the report says so).
    #[arg(long)]
    pub cacert: Option<PathBuf>,
    /// https:// URLs: the server name to send (and verify) instead of the URL's host.
    #[arg(long)]
    pub sni: Option<String>,
    /// HTTP/2: h2c with prior knowledge for http:// URLs, TLS with ALPN h2 for https://.
    #[arg(long)]
    pub h2: bool,
    /// HTTP/2: requests in flight on each connection (h2load's -m).
    #[arg(
        long,
        alias = "max-concurrent-streams",
        default_value_t = 1,
        requires = "h2"
    )]
    pub streams: usize,
}

/// `--tls-resumption`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// `--tls-version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TlsVersionArg {
    #[value(name = "1.2")]
    Tls12,
    #[value(name = "1.3")]
    Tls13,
}

/// `--l4-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum L4ModeArg {
    /// Connect, send/receive --l4-size bytes (if any), close: one transaction per connection.
    Connect,
    /// Send --l4-size bytes and read them back, repeatedly, on persistent connections.
    Rr,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Prove the coordinated-omission correction against a server that stalls on a schedule.
    Selftest,
    /// The Zeus matrix against a target serving `weir origin`'s paths, in one table.
    Suite(Box<SuiteArgs>),
    /// TLS cryptography per core (aws-lc-rs), like `openssl speed`, and the full-handshake
    /// ceiling it implies per certificate type.
    Crypto(CryptoArgs),
}

/// `weir bench crypto`.
#[derive(Debug, Args)]
pub struct CryptoArgs {
    /// Time per item (about 32 items).
    #[arg(short, long, value_parser = weir_bench::parse_duration, default_value = "1s")]
    pub duration: Duration,
    /// 20 ms per item (overrides --duration): a smoke test, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Print the `weir-bench-crypto/1` JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `weir bench suite TARGET [--compare TARGET2]`.
#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// HTTP base URL serving `weir origin`'s paths (directly or through a proxy), e.g.
    /// http://127.0.0.1:8080.
    pub target: String,
    /// Run the same suite against this second target too, in interleaved slices, and print
    /// both with the ratio B/A.
    #[arg(long)]
    pub compare: Option<String>,
    /// Echo server (`weir origin --echo`) HOST:PORT for the L4 rows of TARGET (default: the
    /// L4 rows are n/a).
    #[arg(long)]
    pub l4: Option<String>,
    /// Echo server HOST:PORT for the L4 rows of the --compare target (default: --l4).
    #[arg(long, requires = "compare")]
    pub compare_l4: Option<String>,
    /// HTTPS base URL of TARGET for the TLS rows, e.g. https://127.0.0.1:8443 (default: the
    /// TLS rows are n/a). The certificate is not verified.
    #[arg(long)]
    pub tls: Option<String>,
    /// HTTPS base URL of the --compare target for the TLS rows (with --compare, the TLS rows
    /// are n/a without it).
    #[arg(long, requires = "compare")]
    pub compare_tls: Option<String>,
    /// TARGET speaks HTTP/2: h2c with prior knowledge on TARGET and ALPN h2 on --tls (default:
    /// the HTTP/2 rows are n/a).
    #[arg(long)]
    pub h2: bool,
    /// The --compare target speaks HTTP/2 (with --compare, the HTTP/2 rows are n/a without it).
    #[arg(long, requires = "compare")]
    pub compare_h2: bool,
    /// With --h2: the h2c row goes to this base URL instead of TARGET, for a target that
    /// serves h2c on another port than HTTP/1.1 (nginx, HAProxy's `proto h2`).
    #[arg(long, requires = "h2")]
    pub h2c: Option<String>,
    /// With --compare-h2: the --compare target's h2c base URL, as --h2c.
    #[arg(long, requires = "compare_h2")]
    pub compare_h2c: Option<String>,
    /// HTTP base URL through which TARGET caches (e.g. a virtual server of weir with
    /// `[cache]` in front of `weir origin`), for the cache rows: they ask for
    /// `/bytes/100?max_age=3600` and `/bytes/1048576?max_age=3600`, which the origin marks
    /// cacheable (default: the cache rows are n/a).
    #[arg(long)]
    pub cache: Option<String>,
    /// The caching base URL of the --compare target (with --compare, the cache rows are n/a
    /// without it).
    #[arg(long, requires = "compare")]
    pub compare_cache: Option<String>,
    /// Time per row per target.
    #[arg(long, value_parser = weir_bench::parse_duration, default_value = "5s")]
    pub row_duration: Duration,
    /// Rows of 1 s (overrides --row-duration).
    #[arg(long)]
    pub quick: bool,
    /// Each row runs in this many slices per target, interleaved A, B, A, B …, summed.
    #[arg(long, default_value_t = 2)]
    pub slices: u32,
    /// Connections per row.
    #[arg(short, long, default_value_t = 50)]
    pub connections: usize,
    /// Worker threads (default: one per core).
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// Give up on a request after this long.
    #[arg(long, value_parser = weir_bench::parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// Print the `weir-bench-suite/2` JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `weir netem up|exec|down`.
#[derive(Debug, Args)]
pub struct NetemArgs {
    #[command(subcommand)]
    pub command: NetemCommand,
}

#[derive(Debug, Subcommand)]
pub enum NetemCommand {
    /// Create network namespaces NAME-a and NAME-b joined by the emulated link and run it until
    /// SIGINT or SIGTERM, then remove them and print the counters.
    Up(Box<NetemUpArgs>),
    /// Run a command inside side a or b: `weir netem exec a -- ping 10.200.0.2`.
    Exec(NetemExecArgs),
    /// Remove what a link left behind (its namespaces and devices).
    Down(NetemDownArgs),
    /// Measuring helpers for the link's tests.
    #[command(hide = true)]
    Probe(NetemProbeArgs),
}

/// `weir netem up`: each option applies to both directions unless a per-direction one
/// overrides it.
#[derive(Debug, Args)]
pub struct NetemUpArgs {
    /// Name of the link: its namespaces and devices are NAME-a and NAME-b (13 characters at most).
    #[arg(long, default_value = "weir")]
    pub name: String,
    /// Rate, as tc writes it: 1544kbit, 51.84mbit, 10mbit, 1gbit (default: unlimited).
    #[arg(long, value_parser = weir_netem::parse_rate)]
    pub rate: Option<weir_netem::Rate>,
    /// One-way delay: 250ms.
    #[arg(long, value_parser = weir_netem::parse_duration, default_value = "0")]
    pub delay: Duration,
    /// Each packet's delay varies uniformly within delay ± jitter; packets are never reordered.
    #[arg(long, value_parser = weir_netem::parse_duration, default_value = "0")]
    pub jitter: Duration,
    /// Independent (Bernoulli) loss: 1% or 0.01.
    #[arg(long, value_parser = weir_netem::parse_probability, conflicts_with = "gilbert")]
    pub loss: Option<weir_netem::Probability>,
    /// Gilbert-Elliott loss `p,r[,h[,k]]`: p good→bad, r bad→good, h and k the chances a packet
    /// gets through in the bad and good states (default 0% and 100%): --gilbert 1%,25%.
    #[arg(long, value_parser = weir_netem::parse_gilbert_elliott)]
    pub gilbert: Option<weir_netem::GilbertElliott>,
    /// Drop-tail queue limit in packets waiting behind the one on the wire (default 1000).
    #[arg(long, conflicts_with = "queue_bytes")]
    pub queue: Option<usize>,
    /// Drop-tail queue limit in bytes instead: 64kb.
    #[arg(long, value_parser = weir_netem::parse_bytes)]
    pub queue_bytes: Option<u64>,
    /// Rate from a to b (overrides --rate).
    #[arg(long, value_parser = weir_netem::parse_rate, help_heading = "Per direction")]
    pub a_to_b_rate: Option<weir_netem::Rate>,
    /// Rate from b to a (overrides --rate).
    #[arg(long, value_parser = weir_netem::parse_rate, help_heading = "Per direction")]
    pub b_to_a_rate: Option<weir_netem::Rate>,
    /// Delay from a to b (overrides --delay).
    #[arg(long, value_parser = weir_netem::parse_duration, help_heading = "Per direction")]
    pub a_to_b_delay: Option<Duration>,
    /// Delay from b to a (overrides --delay).
    #[arg(long, value_parser = weir_netem::parse_duration, help_heading = "Per direction")]
    pub b_to_a_delay: Option<Duration>,
    /// Jitter from a to b (overrides --jitter).
    #[arg(long, value_parser = weir_netem::parse_duration, help_heading = "Per direction")]
    pub a_to_b_jitter: Option<Duration>,
    /// Jitter from b to a (overrides --jitter).
    #[arg(long, value_parser = weir_netem::parse_duration, help_heading = "Per direction")]
    pub b_to_a_jitter: Option<Duration>,
    /// Bernoulli loss from a to b (overrides --loss and --gilbert).
    #[arg(long, value_parser = weir_netem::parse_probability, help_heading = "Per direction",
          conflicts_with = "a_to_b_gilbert")]
    pub a_to_b_loss: Option<weir_netem::Probability>,
    /// Bernoulli loss from b to a (overrides --loss and --gilbert).
    #[arg(long, value_parser = weir_netem::parse_probability, help_heading = "Per direction",
          conflicts_with = "b_to_a_gilbert")]
    pub b_to_a_loss: Option<weir_netem::Probability>,
    /// Gilbert-Elliott loss from a to b (overrides --loss and --gilbert).
    #[arg(long, value_parser = weir_netem::parse_gilbert_elliott, help_heading = "Per direction")]
    pub a_to_b_gilbert: Option<weir_netem::GilbertElliott>,
    /// Gilbert-Elliott loss from b to a (overrides --loss and --gilbert).
    #[arg(long, value_parser = weir_netem::parse_gilbert_elliott, help_heading = "Per direction")]
    pub b_to_a_gilbert: Option<weir_netem::GilbertElliott>,
    /// Address of side a (its peer is side b's).
    #[arg(long, default_value = "10.200.0.1")]
    pub a_address: std::net::Ipv4Addr,
    /// Address of side b.
    #[arg(long, default_value = "10.200.0.2")]
    pub b_address: std::net::Ipv4Addr,
    /// MTU of both devices (576, the least every IPv4 host takes, to 65535).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(576..))]
    pub mtu: u16,
    /// Seed of the loss and jitter choices, to repeat a run (default: from the clock, printed).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// `weir netem exec a|b -- COMMAND...`.
#[derive(Debug, Args)]
pub struct NetemExecArgs {
    /// The side to run in.
    #[arg(value_enum)]
    pub side: NetemSide,
    /// Name of the link.
    #[arg(long, default_value = "weir")]
    pub name: String,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// A side of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NetemSide {
    A,
    B,
}

/// `weir netem down`.
#[derive(Debug, Args)]
pub struct NetemDownArgs {
    /// Name of the link.
    #[arg(long, default_value = "weir")]
    pub name: String,
}

/// `weir netem probe ...` (hidden).
#[derive(Debug, Args)]
pub struct NetemProbeArgs {
    #[command(subcommand)]
    pub command: NetemProbeCommand,
}

#[derive(Debug, Subcommand)]
pub enum NetemProbeCommand {
    /// Accept one TCP connection and print the goodput over a window after a warm-up.
    TcpSink {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, value_parser = weir_netem::parse_duration, default_value = "1s")]
        warmup: Duration,
        #[arg(long, value_parser = weir_netem::parse_duration, default_value = "4s")]
        window: Duration,
        /// Give up without a connection after this long.
        #[arg(long, value_parser = weir_netem::parse_duration, default_value = "10s")]
        timeout: Duration,
    },
    /// Send bulk data over TCP until the sink closes or the duration passes.
    TcpSend {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, value_parser = weir_netem::parse_duration, default_value = "20s")]
        duration: Duration,
    },
}
