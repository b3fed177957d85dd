//! Plan: what a run sends, where, how fast and for how long, checked once before any load.
//!
//! URLs are parsed and resolved here, and every request is written out to bytes once; the
//! driver only copies those bytes onto sockets. `http://` URLs make an HTTP/1.1 run,
//! `https://` URLs one over TLS (the client's rustls settings are built here too);
//! `tcp://HOST:PORT` URLs an L4 run against an echo server (the [`Protocol`] of the plan).

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use rustls::pki_types::ServerName;
use weir_http::Method;

use crate::http2::H2Request;
use crate::tls::{TlsClient, TlsSettings, TlsSetupError};

/// When a run stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// Send no request intended after this long from the start.
    Duration(Duration),
    /// Send this many requests in all (across every connection and thread).
    Count(u64),
}

/// How requests are paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// Each connection sends its next request as soon as the previous response ended.
    Closed,
    /// Requests are due at a fixed total rate (per second), spread over the connections.
    Open {
        /// Requests per second, all connections together; positive.
        rate: f64,
    },
}

/// Whether connections are reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionMode {
    /// Keep-alive: one connection carries many requests.
    KeepAlive,
    /// A new connection per request, sent with `Connection: close`.
    Close,
}

/// What one transaction on the wire is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// An HTTP/1.1 request and its whole response.
    Http1,
    /// L4, against an echo server (`tcp://` URLs).
    Tcp {
        /// Which L4 test.
        mode: L4Mode,
        /// Bytes sent and echoed per exchange.
        size: usize,
    },
    /// HTTP/2 (`--h2`): h2c with prior knowledge for `http://`, ALPN `h2` for
    /// `https://`; each connection carries `streams` requests at once.
    Http2 {
        /// Requests in flight on one connection (`--streams`, h2load's `-m`).
        streams: usize,
    },
}

impl Protocol {
    /// Requests in flight on one connection: `--streams` over HTTP/2, else 1.
    pub fn streams(self) -> usize {
        match self {
            Protocol::Http2 { streams } => streams,
            _ => 1,
        }
    }
}

/// The two L4 tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4Mode {
    /// Connections per second: connect, send `size` bytes and read them back (if `size` > 0),
    /// close and wait for the server's close. One connection is one transaction.
    Connect,
    /// Request/response on persistent connections: send `size` bytes, read them back, repeat.
    RequestResponse,
}

impl L4Mode {
    /// Bytes per exchange when `--l4-size` is not given.
    pub fn default_size(self) -> usize {
        match self {
            L4Mode::Connect => 0,
            L4Mode::RequestResponse => DEFAULT_L4_SIZE,
        }
    }

    /// `"connect"` or `"rr"`, as on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            L4Mode::Connect => "connect",
            L4Mode::RequestResponse => "rr",
        }
    }
}

/// `--l4-mode rr` sends this many bytes per exchange unless told otherwise.
pub const DEFAULT_L4_SIZE: usize = 64;
/// An L4 payload is this, repeated.
const L4_PATTERN: &[u8] = b"weir-bench l4 payload\n";

/// In which order a connection walks the URL list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlOrder {
    /// Each connection goes through the list in order, from its own starting point.
    Sequential,
    /// Each request picks a URL at random.
    Random,
}

/// What the command line asked for, before checking.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The URLs to load: all `http://`, all `https://` or all `tcp://`.
    pub urls: Vec<String>,
    /// The request method, as typed (checked to be a token).
    pub method: String,
    /// `Name: value` lines as given.
    pub headers: Vec<String>,
    /// The request body, sent with every request (`Content-Length` added).
    pub body: Vec<u8>,
    /// How connections walk the URL list.
    pub order: UrlOrder,
    /// Connections kept open at once, across all threads.
    pub connections: usize,
    /// `None`: one per core.
    pub threads: Option<usize>,
    /// When the run stops.
    pub stop: Stop,
    /// `None`: closed loop.
    pub rate: Option<f64>,
    /// Keep-alive or a new connection per request.
    pub mode: ConnectionMode,
    /// How long a connect or a response may take before it counts as a timeout.
    pub timeout: Duration,
    /// Print a progress line on stderr once a second.
    pub progress: bool,
    /// `tcp://` URLs: which L4 test (ignored for `http://`).
    pub l4_mode: L4Mode,
    /// `tcp://` URLs: bytes per exchange; `None`: the mode's default (64 for rr, 0 for connect).
    pub l4_size: Option<usize>,
    /// `https://` URLs: TLS settings (anything but the default is refused for other URLs).
    pub tls: TlsSettings,
    /// HTTP/2 with this many streams per connection (`--h2 --streams N`);
    /// `None`: HTTP/1.1.
    pub http2_streams: Option<usize>,
}

/// One URL, resolved, with its request prebuilt.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL as given, for the report.
    pub url: String,
    /// The resolved address connections go to.
    pub address: SocketAddr,
    /// The request's method.
    pub method: Method,
    /// The whole request (head and body), written once; for `tcp://`, the bytes echoed.
    pub request: Bytes,
    /// `https://`: the server name sent in the handshake (`--sni`, else the URL's host).
    pub server_name: Option<ServerName<'static>>,
    /// HTTP/2 runs: the request as HTTP/2 parts.
    pub h2: Option<H2Request>,
}

/// A checked run description; [`crate::run`] executes it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What one transaction is: an HTTP/1.1 exchange or an L4 echo.
    pub protocol: Protocol,
    /// The URLs, resolved and with their requests prebuilt; never empty.
    pub targets: Vec<Target>,
    /// The request method, for the report.
    pub method: String,
    /// How connections walk `targets`.
    pub order: UrlOrder,
    /// Connections kept open at once, across all threads; at least 1.
    pub connections: usize,
    /// Load generator threads; at least 1, at most `connections`.
    pub threads: usize,
    /// When the run stops.
    pub stop: Stop,
    /// Closed loop, or an open-loop rate.
    pub pacing: Pacing,
    /// Keep-alive or a new connection per request.
    pub mode: ConnectionMode,
    /// How long a connect or a response may take before it counts as a timeout.
    pub timeout: Duration,
    /// Print a progress line on stderr once a second.
    pub progress: bool,
    /// `https://` URLs: the TLS client every connection uses; `None`: plain TCP.
    pub tls: Option<TlsClient>,
}

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The settings name no URL.
    #[error("no URL given")]
    NoUrls,
    /// A URL cannot be parsed.
    #[error("URL {url:?}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A URL's host does not resolve.
    #[error("cannot resolve {host:?}: {error}")]
    Resolve {
        /// The host as written in the URL.
        host: String,
        /// The resolver's error (shown in the message, so not a `source`).
        error: io::Error,
    },
    /// A `--header` is not `Name: value`.
    #[error("header {0:?} is not `Name: value`")]
    Header(String),
    /// The method is not an HTTP token.
    #[error("method {0:?} is not a token")]
    Method(String),
    /// A count that must be positive is zero; names the option.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// A duration that must be positive is zero; names the option.
    #[error("{0} must be longer than zero")]
    ZeroDuration(&'static str),
    /// A count past what one run can use; names the option and the bound.
    #[error("{0} must be at most {1}")]
    TooLarge(&'static str, usize),
    /// An L4 option given for a run without `tcp://` URLs; names the option.
    #[error("{0} applies to tcp:// URLs only")]
    TcpOnly(&'static str),
    /// A `--header` that weir bench writes itself (the body's framing, or `Connection`
    /// with `--close`); names it and what writes it.
    #[error("header {0:?} is written by weir bench ({1}); it cannot be set with -H")]
    HeaderConflict(String, &'static str),
    /// `--rate` is zero, negative or not finite.
    #[error("--rate must be a positive number of requests per second")]
    Rate,
    /// URLs of different schemes in one run.
    #[error("http://, https:// and tcp:// URLs cannot be mixed in one run")]
    MixedSchemes,
    /// A TLS option given for a run without `https://` URLs; names the option.
    #[error("{0} applies to https:// URLs only")]
    HttpsOnly(&'static str),
    /// The TLS client could not be set up.
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// An HTTP option given for a `tcp://` run; names the option.
    #[error("{0} applies to http:// URLs only")]
    HttpOnly(&'static str),
    /// `--close` with the request/response L4 test.
    #[error("--close does not apply to --l4-mode rr (use --l4-mode connect)")]
    CloseWithRr,
    /// A zero `--l4-size` with the request/response L4 test.
    #[error("--l4-size must be at least 1 for --l4-mode rr")]
    RrSize,
    /// `--close` with `--h2`: HTTP/2 streams share their connection.
    #[error("--close does not apply to --h2: HTTP/2 streams share their connection")]
    CloseWithH2,
    /// A `--header` that HTTP/2 forbids (connection-specific); names it.
    #[error("header {0:?} is connection-specific and not allowed in HTTP/2")]
    H2Header(String),
    /// A file named on the command line cannot be read.
    #[error("cannot read {path}: {error}")]
    File {
        /// The path as given.
        path: String,
        /// The error from the system (shown in the message, so not a `source`).
        error: io::Error,
    },
}

/// The parts of an `http://` or `https://` URL a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// `host[:port]` as written, for the `Host` header.
    pub authority: String,
    /// Origin-form target: path and query, `/` when empty.
    pub target: String,
    /// `https://`.
    pub tls: bool,
}

/// The most connections one run opens: each takes a file descriptor and a few KiB, and a
/// process holds about a million descriptors at most on Linux (`fs.nr_open`).
pub const MAX_CONNECTIONS: usize = 1_000_000;

/// The most HTTP/2 streams in flight on one connection (`--streams`): past a server's
/// `SETTINGS_MAX_CONCURRENT_STREAMS` (100 to 1,000 in practice) they only wait, and each
/// holds its request and state in memory.
pub const MAX_STREAMS: usize = 10_000;

/// The largest L4 exchange (`--l4-size`): each connection holds one in memory.
pub const MAX_L4_SIZE: usize = 64 * 1024 * 1024;

/// The counts and durations of `settings` that must be positive, and those with a bound.
fn check_bounds(settings: &Settings) -> Result<(), PlanError> {
    if settings.connections == 0 {
        return Err(PlanError::Zero("--connections"));
    }
    if settings.connections > MAX_CONNECTIONS {
        return Err(PlanError::TooLarge("--connections", MAX_CONNECTIONS));
    }
    if settings.l4_size.is_some_and(|size| size > MAX_L4_SIZE) {
        return Err(PlanError::TooLarge("--l4-size", MAX_L4_SIZE));
    }
    if settings.stop == Stop::Count(0) {
        return Err(PlanError::Zero("--requests"));
    }
    if settings.stop == Stop::Duration(Duration::ZERO) {
        return Err(PlanError::ZeroDuration("--duration"));
    }
    if settings.timeout.is_zero() {
        return Err(PlanError::ZeroDuration("--timeout"));
    }
    Ok(())
}

/// HTTP/1.1, or HTTP/2 with `--h2` (`--streams` per connection; not with `--close`).
fn http_protocol(settings: &Settings) -> Result<Protocol, PlanError> {
    match settings.http2_streams {
        None => Ok(Protocol::Http1),
        Some(0) => Err(PlanError::Zero("--streams")),
        Some(streams) if streams > MAX_STREAMS => {
            Err(PlanError::TooLarge("--streams", MAX_STREAMS))
        }
        Some(_) if settings.mode == ConnectionMode::Close => Err(PlanError::CloseWithH2),
        Some(streams) => Ok(Protocol::Http2 { streams }),
    }
}

/// The HTTP/2 form of a target's request.
fn h2_request(
    method: &str,
    url: &Url,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<H2Request, PlanError> {
    let scheme = if url.tls { "https" } else { "http" };
    H2Request::new(method, scheme, &url.authority, &url.target, headers, body)
        .map_err(PlanError::H2Header)
}

impl Plan {
    /// Checks `settings`, resolves every URL and prebuilds every request.
    pub fn new(settings: Settings) -> Result<Plan, PlanError> {
        if settings.urls.is_empty() {
            return Err(PlanError::NoUrls);
        }
        check_bounds(&settings)?;
        let pacing = match settings.rate {
            None => Pacing::Closed,
            Some(rate) if rate.is_finite() && rate > 0.0 => Pacing::Open { rate },
            Some(_) => return Err(PlanError::Rate),
        };
        let method = settings.method.to_ascii_uppercase();
        if method.is_empty() || !method.bytes().all(|byte| byte.is_ascii_alphanumeric()) {
            return Err(PlanError::Method(settings.method));
        }
        let tcp = settings.urls.iter().filter(|url| is_tcp_url(url)).count();
        let protocol = match tcp {
            0 => Protocol::Http1,
            all if all == settings.urls.len() => Protocol::Tcp {
                mode: settings.l4_mode,
                size: settings
                    .l4_size
                    .unwrap_or_else(|| settings.l4_mode.default_size()),
            },
            _ => return Err(PlanError::MixedSchemes),
        };
        if let Protocol::Tcp { mode, size } = protocol {
            if settings.http2_streams.is_some() {
                return Err(PlanError::HttpOnly("--h2"));
            }
            refuse_tls_settings(&settings.tls)?;
            return tcp_plan(settings, mode, size, pacing);
        }
        if settings.l4_size.is_some() {
            return Err(PlanError::TcpOnly("--l4-size"));
        }
        let protocol = http_protocol(&settings)?;
        let alpn: &[u8] = match protocol {
            Protocol::Http2 { .. } => b"h2",
            _ => b"http/1.1",
        };
        let https = settings
            .urls
            .iter()
            .filter(|url| url.starts_with("https://"))
            .count();
        let tls = match https {
            0 => {
                refuse_tls_settings(&settings.tls)?;
                None
            }
            all if all == settings.urls.len() => Some(TlsClient::with_alpn(
                settings.tls.clone(),
                settings.connections,
                alpn,
            )?),
            _ => return Err(PlanError::MixedSchemes),
        };
        let headers = parse_headers(&settings.headers)?;
        refuse_written_headers(&headers, settings.mode)?;
        let mut targets = Vec::with_capacity(settings.urls.len());
        for url in &settings.urls {
            let parsed = parse_url(url).map_err(|reason| PlanError::Url {
                url: url.clone(),
                reason,
            })?;
            let address = resolve(&parsed.host, parsed.port)?;
            let request = build_request(&method, &parsed, &headers, &settings.body, settings.mode);
            let server_name = match &tls {
                Some(client) => Some(client.server_name(&parsed.host)?),
                None => None,
            };
            let h2 = match protocol {
                Protocol::Http2 { .. } => {
                    Some(h2_request(&method, &parsed, &headers, &settings.body)?)
                }
                _ => None,
            };
            targets.push(Target {
                url: url.clone(),
                address,
                method: Method::from_bytes(method.as_bytes()),
                request: Bytes::from(request),
                server_name,
                h2,
            });
        }
        let mut plan = finish(settings, protocol, targets, method, pacing, None)?;
        plan.tls = tls;
        Ok(plan)
    }
}

/// The rest of [`Plan::new`] for `tcp://` URLs: the payload is `size` bytes of a pattern, and
/// the connection mode follows from the L4 mode.
fn tcp_plan(
    settings: Settings,
    mode: L4Mode,
    size: usize,
    pacing: Pacing,
) -> Result<Plan, PlanError> {
    if !settings.headers.is_empty() {
        return Err(PlanError::HttpOnly("-H/--header"));
    }
    if !settings.body.is_empty() {
        return Err(PlanError::HttpOnly("--body"));
    }
    let connection_mode = match mode {
        L4Mode::Connect => ConnectionMode::Close,
        L4Mode::RequestResponse if settings.mode == ConnectionMode::Close => {
            return Err(PlanError::CloseWithRr);
        }
        L4Mode::RequestResponse if size == 0 => return Err(PlanError::RrSize),
        L4Mode::RequestResponse => ConnectionMode::KeepAlive,
    };
    let payload = Bytes::from(
        L4_PATTERN
            .iter()
            .copied()
            .cycle()
            .take(size)
            .collect::<Vec<u8>>(),
    );
    let mut targets = Vec::with_capacity(settings.urls.len());
    for url in &settings.urls {
        let (host, port) = parse_tcp_url(url).map_err(|reason| PlanError::Url {
            url: url.clone(),
            reason,
        })?;
        targets.push(Target {
            url: url.clone(),
            address: resolve(&host, port)?,
            method: Method::from_bytes(b"GET"),
            request: payload.clone(),
            server_name: None,
            h2: None,
        });
    }
    let method = "TCP".to_owned();
    finish(
        settings,
        Protocol::Tcp { mode, size },
        targets,
        method,
        pacing,
        Some(connection_mode),
    )
}

/// The checks and fields common to both protocols.
fn finish(
    settings: Settings,
    protocol: Protocol,
    targets: Vec<Target>,
    method: String,
    pacing: Pacing,
    mode: Option<ConnectionMode>,
) -> Result<Plan, PlanError> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = settings.threads.unwrap_or(cores);
    if threads == 0 {
        return Err(PlanError::Zero("--threads"));
    }
    Ok(Plan {
        protocol,
        targets,
        method,
        order: settings.order,
        connections: settings.connections,
        // Never more threads than connections: a thread without one would idle.
        threads: threads.min(settings.connections),
        stop: settings.stop,
        pacing,
        mode: mode.unwrap_or(settings.mode),
        timeout: settings.timeout,
        progress: settings.progress,
        tls: None,
    })
}

/// TLS options given for a run without `https://` URLs are a mistake, not silently ignored.
fn refuse_tls_settings(tls: &TlsSettings) -> Result<(), PlanError> {
    let default = TlsSettings::default();
    if tls.cacert.is_some() {
        return Err(PlanError::HttpsOnly("--cacert"));
    }
    if tls.sni.is_some() {
        return Err(PlanError::HttpsOnly("--sni"));
    }
    if tls.versions != default.versions {
        return Err(PlanError::HttpsOnly("--tls-version"));
    }
    if tls.resumption != default.resumption {
        return Err(PlanError::HttpsOnly("--tls-resumption"));
    }
    Ok(())
}

fn is_tcp_url(url: &str) -> bool {
    url.starts_with("tcp://")
}

/// Parses `tcp://host:port` (the port is required; a trailing `/` is allowed, nothing more).
pub fn parse_tcp_url(url: &str) -> Result<(String, u16), &'static str> {
    let rest = url.strip_prefix("tcp://").ok_or("must start with tcp://")?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['@', '/', '?', '#']) {
        return Err("must be tcp://HOST:PORT");
    }
    let has_port = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.contains("]:"),
        None => authority.contains(':'),
    };
    if !has_port {
        return Err("needs a port");
    }
    let (host, port) = split_host_port(authority)?;
    Ok((host, port.unwrap_or_default()))
}

/// Reads a URL file (like `siege -f`): one URL a line; blank lines and `#` comments skipped.
pub fn read_url_file(path: &Path) -> Result<Vec<String>, PlanError> {
    let text = std::fs::read_to_string(path).map_err(|source| PlanError::File {
        path: path.display().to_string(),
        error: source,
    })?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

/// Parses a duration like `10s`, `500ms` or `2m`; a bare number counts seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<f64>()
        && seconds.is_finite()
        && seconds >= 0.0
    {
        return Ok(Duration::from_secs_f64(seconds));
    }
    humantime::parse_duration(text).map_err(|error| format!("{text:?}: {error}"))
}

/// Parses `http[s]://host[:port][/path][?query]` (no user info, no fragment).
pub fn parse_url(url: &str) -> Result<Url, &'static str> {
    let (rest, tls) = if let Some(rest) = url.strip_prefix("http://") {
        (rest, false)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest, true)
    } else {
        return Err("must start with http:// or https:// (or tcp:// for L4)");
    };
    let (authority, target) = match rest.find(['/', '?']) {
        Some(at) if rest.as_bytes()[at] == b'?' => (&rest[..at], format!("/{}", &rest[at..])),
        Some(at) => (&rest[..at], rest[at..].to_owned()),
        None => (rest, "/".to_owned()),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err("needs a host (and no user info)");
    }
    if target.contains('#') || target.bytes().any(|byte| byte <= b' ' || byte == 0x7f) {
        return Err("path has a fragment, a space or a control character");
    }
    let (host, port) = split_host_port(authority)?;
    let port = match (tls, port) {
        (true, None) => 443,
        (false, None) => 80,
        (_, Some(port)) => port,
    };
    Ok(Url {
        host,
        port,
        authority: authority.to_owned(),
        target,
        tls,
    })
}

/// Host and port (`None` when not written) of an authority.
fn split_host_port(authority: &str) -> Result<(String, Option<u16>), &'static str> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let end = bracketed.find(']').ok_or("unclosed [ in host")?;
        let after = &bracketed[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(port) => Some(port),
            None if after.is_empty() => None,
            None => return Err("junk after ]"),
        };
        (&bracketed[..end], port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(port) => Some(port.parse().map_err(|_| "bad port")?),
    };
    if host.is_empty() {
        return Err("needs a host");
    }
    Ok((host.to_owned(), port))
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, PlanError> {
    let mut addresses = (host, port)
        .to_socket_addrs()
        .map_err(|source| PlanError::Resolve {
            host: host.to_owned(),
            error: source,
        })?;
    addresses.next().ok_or_else(|| PlanError::Resolve {
        host: host.to_owned(),
        error: io::Error::new(io::ErrorKind::NotFound, "no address"),
    })
}

/// Refuses a `--header` that weir bench writes itself: the body's framing, and
/// `Connection` with `--close`.
fn refuse_written_headers(
    headers: &[(String, String)],
    mode: ConnectionMode,
) -> Result<(), PlanError> {
    for (name, _) in headers {
        let writer = if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            "the body's framing, from --body"
        } else if name.eq_ignore_ascii_case("connection") && mode == ConnectionMode::Close {
            "Connection: close, from --close"
        } else {
            continue;
        };
        return Err(PlanError::HeaderConflict(name.clone(), writer));
    }
    Ok(())
}

fn parse_headers(lines: &[String]) -> Result<Vec<(String, String)>, PlanError> {
    lines
        .iter()
        .map(|line| {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| PlanError::Header(line.clone()))?;
            let name = name.trim();
            let value = value.trim();
            let name_ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte));
            let value_ok = value
                .bytes()
                .all(|byte| byte == b'\t' || (b' '..0x7f).contains(&byte));
            if !name_ok || !value_ok {
                return Err(PlanError::Header(line.clone()));
            }
            Ok((name.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Writes one request. A `Host` or `Content-Length` given with `-H` replaces weir's own.
pub fn build_request(
    method: &str,
    url: &Url,
    headers: &[(String, String)],
    body: &[u8],
    mode: ConnectionMode,
) -> Vec<u8> {
    let has = |wanted: &str| {
        headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(wanted))
    };
    let mut head = format!("{method} {} HTTP/1.1\r\n", url.target);
    if !has("host") {
        head.push_str(&format!("Host: {}\r\n", url.authority));
    }
    if !has("user-agent") {
        head.push_str("User-Agent: weir-bench\r\n");
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let expects_body = matches!(method, "POST" | "PUT" | "PATCH");
    if !has("content-length") && (!body.is_empty() || expects_body) {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    if mode == ConnectionMode::Close && !has("connection") {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let url = parse_url("http://127.0.0.1:8081/delay/20?x=1").expect("valid");
        assert_eq!(
            url,
            Url {
                host: "127.0.0.1".into(),
                port: 8081,
                authority: "127.0.0.1:8081".into(),
                target: "/delay/20?x=1".into(),
                tls: false,
            }
        );
        let https = parse_url("https://example.test/x").expect("valid");
        assert_eq!((https.port, https.tls), (443, true));
        assert_eq!(parse_url("https://a:8443").expect("valid").port, 8443);
        assert_eq!(parse_url("http://a").expect("valid").target, "/");
        assert_eq!(parse_url("http://a?q").expect("valid").target, "/?q");
        assert_eq!(parse_url("http://a").expect("valid").port, 80);
        let v6 = parse_url("http://[::1]:9/").expect("valid");
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9));
        assert!(parse_url("ftp://a/").is_err());
        assert!(parse_url("http://a:x/").is_err());
        assert!(parse_url("http:///").is_err());
        assert!(parse_url("http://a/b c").is_err());
        assert_eq!(
            parse_tcp_url("tcp://127.0.0.1:7/"),
            Ok(("127.0.0.1".to_owned(), 7))
        );
        assert_eq!(parse_tcp_url("tcp://[::1]:9"), Ok(("::1".to_owned(), 9)));
        assert!(parse_tcp_url("tcp://a").is_err());
        assert!(parse_tcp_url("tcp://[::1]").is_err());
        assert!(parse_tcp_url("tcp://a:1/path").is_err());
        assert!(parse_tcp_url("http://a:1").is_err());
    }

    fn tcp_settings(urls: &[&str]) -> Settings {
        Settings {
            urls: urls.iter().map(|url| (*url).to_owned()).collect(),
            method: "GET".into(),
            headers: vec![],
            body: vec![],
            order: UrlOrder::Sequential,
            connections: 2,
            threads: Some(1),
            stop: Stop::Count(1),
            rate: None,
            mode: ConnectionMode::KeepAlive,
            timeout: Duration::from_secs(1),
            progress: false,
            l4_mode: L4Mode::RequestResponse,
            l4_size: None,
            tls: TlsSettings::default(),
            http2_streams: None,
        }
    }

    /// Settings that cannot mean anything, or that would break the request weir bench
    /// writes, are refused with the option's name rather than run.
    #[test]
    fn meaningless_or_conflicting_settings_are_refused() {
        let http = || {
            let mut settings = tcp_settings(&["http://127.0.0.1:9/"]);
            settings.l4_size = None;
            settings
        };
        let refused = |settings: Settings| Plan::new(settings).expect_err("refused").to_string();
        let mut zero = http();
        zero.stop = Stop::Duration(Duration::ZERO);
        assert_eq!(refused(zero), "--duration must be longer than zero");
        let mut zero = http();
        zero.timeout = Duration::ZERO;
        assert_eq!(refused(zero), "--timeout must be longer than zero");
        let mut sized = http();
        sized.l4_size = Some(10);
        assert_eq!(refused(sized), "--l4-size applies to tcp:// URLs only");
        let mut framed = http();
        framed.headers = vec!["Content-Length: 99".into()];
        framed.body = b"hello".to_vec();
        assert!(refused(framed).contains("\"Content-Length\" is written by weir bench"));
        let mut closing = http();
        closing.mode = ConnectionMode::Close;
        closing.headers = vec!["connection: keep-alive".into()];
        assert!(refused(closing).contains("from --close"));
        // Connection without --close is the user's to set.
        let mut kept = http();
        kept.headers = vec!["Connection: keep-alive".into()];
        assert!(Plan::new(kept).is_ok());
    }

    #[test]
    fn tcp_plans() {
        let rr = Plan::new(tcp_settings(&["tcp://127.0.0.1:9"])).expect("valid");
        assert_eq!(
            rr.protocol,
            Protocol::Tcp {
                mode: L4Mode::RequestResponse,
                size: 64
            }
        );
        assert_eq!(rr.mode, ConnectionMode::KeepAlive);
        assert_eq!(rr.targets[0].request.len(), 64);
        let mut connect = tcp_settings(&["tcp://127.0.0.1:9"]);
        connect.l4_mode = L4Mode::Connect;
        let connect = Plan::new(connect).expect("valid");
        assert_eq!(connect.mode, ConnectionMode::Close);
        assert!(connect.targets[0].request.is_empty());
        let http = Plan::new(tcp_settings(&["http://127.0.0.1:9/"])).expect("valid");
        assert_eq!(http.protocol, Protocol::Http1);

        let mixed = Plan::new(tcp_settings(&["tcp://127.0.0.1:9", "http://127.0.0.1:9/"]));
        assert!(matches!(mixed, Err(PlanError::MixedSchemes)));
        let mut zero = tcp_settings(&["tcp://127.0.0.1:9"]);
        zero.l4_size = Some(0);
        assert!(matches!(Plan::new(zero), Err(PlanError::RrSize)));
        let mut huge = tcp_settings(&["tcp://127.0.0.1:9"]);
        huge.l4_size = Some(MAX_L4_SIZE + 1);
        assert!(matches!(
            Plan::new(huge),
            Err(PlanError::TooLarge("--l4-size", MAX_L4_SIZE))
        ));
        let mut many = tcp_settings(&["tcp://127.0.0.1:9"]);
        many.connections = MAX_CONNECTIONS + 1;
        assert!(matches!(
            Plan::new(many),
            Err(PlanError::TooLarge("--connections", MAX_CONNECTIONS))
        ));
        let mut close = tcp_settings(&["tcp://127.0.0.1:9"]);
        close.mode = ConnectionMode::Close;
        assert!(matches!(Plan::new(close), Err(PlanError::CloseWithRr)));
        let mut header = tcp_settings(&["tcp://127.0.0.1:9"]);
        header.headers = vec!["A: b".into()];
        assert!(matches!(Plan::new(header), Err(PlanError::HttpOnly(_))));
    }

    #[test]
    fn https_plans() {
        let https = Plan::new(tcp_settings(&["https://127.0.0.1:9/"])).expect("valid");
        assert!(https.tls.is_some());
        let name = https.targets[0].server_name.clone().expect("a server name");
        assert_eq!(name, ServerName::try_from("127.0.0.1").expect("name"));
        let mixed = Plan::new(tcp_settings(&[
            "https://127.0.0.1:9/",
            "http://127.0.0.1:9/",
        ]));
        assert!(matches!(mixed, Err(PlanError::MixedSchemes)));
        let mut sni = tcp_settings(&["https://127.0.0.1:9/"]);
        sni.tls.sni = Some("origin.test".into());
        let plan = Plan::new(sni).expect("valid");
        assert_eq!(
            plan.targets[0].server_name,
            Some(ServerName::try_from("origin.test").expect("name"))
        );
        // TLS options without https:// URLs are refused, not ignored.
        let mut plain = tcp_settings(&["http://127.0.0.1:9/"]);
        plain.tls.resumption = false;
        assert!(matches!(Plan::new(plain), Err(PlanError::HttpsOnly(_))));
        let mut tcp = tcp_settings(&["tcp://127.0.0.1:9"]);
        tcp.tls.cacert = Some("ca.pem".into());
        assert!(matches!(Plan::new(tcp), Err(PlanError::HttpsOnly(_))));
    }

    #[test]
    fn requests_are_prebuilt() {
        let url = parse_url("http://h:1/p").expect("valid");
        let headers = vec![("X-A".to_owned(), "b".to_owned())];
        let request = build_request("POST", &url, &headers, b"hi", ConnectionMode::Close);
        assert_eq!(
            String::from_utf8(request).expect("ascii"),
            "POST /p HTTP/1.1\r\nHost: h:1\r\nUser-Agent: weir-bench\r\nX-A: b\r\n\
             Content-Length: 2\r\nConnection: close\r\n\r\nhi"
        );
        let get = build_request("GET", &url, &[], b"", ConnectionMode::KeepAlive);
        assert_eq!(
            get,
            b"GET /p HTTP/1.1\r\nHost: h:1\r\nUser-Agent: weir-bench\r\n\r\n"
        );
    }

    #[test]
    fn headers_and_durations() {
        assert!(parse_headers(&["A: b".into()]).is_ok());
        assert!(parse_headers(&["no colon".into()]).is_err());
        assert!(parse_headers(&["bad name: x".into()]).is_err());
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
    }
}
