//! The access log: one typed [`AccessRecord`] per request, written by an [`AccessLog`] as one
//! line, logfmt text or a JSON object, to standard output or to a file reopened on request
//! (SIGUSR1, after logrotate moved it). The fields are listed in `docs/logging.md`.
//!
//! Lines are formatted on the request's own thread and appended to a shared buffer, handed
//! to the log's own writer thread when it fills and by [`AccessLog::hand_over`], so a
//! request costs no system call and never waits on the disk or on a reader. The binary
//! hands over 200 ms after [`appended`] reports a line in an empty buffer, and flushes at
//! exit: a process with nothing to log has no timer to wake for.
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use weir_config::AccessLogFormat;
//! use weir_observe::AccessRecord;
//!
//! let record = AccessRecord {
//!     virtual_server: "web",
//!     client: "192.0.2.7:50123".parse().unwrap(),
//!     client_address: None,
//!     method: "GET",
//!     target: "/a \"b\"",
//!     version: "HTTP/1.1",
//!     status: 200,
//!     bytes_sent: 1234,
//!     pool: Some("app"),
//!     node: Some("10.0.0.1:8080".parse().unwrap()),
//!     duration: Duration::from_micros(1500),
//!     upstream_duration: Some(Duration::from_micros(1200)),
//!     grpc_status: None,
//!     error: None,
//!     cache: None,
//!     request_id: Some("4bf92f3577b34da6"),
//!     rule: None,
//!     tls: None,
//! };
//! let mut line = Vec::new();
//! record.format(AccessLogFormat::Json, UNIX_EPOCH, &mut line);
//! assert_eq!(
//!     String::from_utf8(line).unwrap(),
//!     "{\"time\":\"1970-01-01T00:00:00.000Z\",\"virtual_server\":\"web\",\
//!      \"client\":\"192.0.2.7:50123\",\"method\":\"GET\",\"uri\":\"/a \\\"b\\\"\",\
//!      \"version\":\"HTTP/1.1\",\"status\":200,\"bytes_sent\":1234,\"pool\":\"app\",\
//!      \"node\":\"10.0.0.1:8080\",\"duration_us\":1500,\"upstream_duration_us\":1200,\
//!      \"request_id\":\"4bf92f3577b34da6\"}\n"
//! );
//! ```

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weir_config::AccessLogFormat;

mod writer;

pub use writer::records_lost;
use writer::{Batch, Output, Writer};

/// Buffered bytes past which a write goes out at once.
const FLUSH_AT: usize = 64 * 1024;

/// Told when a line lands in an empty buffer. One for the process: the access log is the
/// process's output, and whichever log a reload made current is the one to flush.
static APPENDED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Completes once a line has landed in an empty buffer since the last call completed (or
/// lands now): there is something to write out.
pub async fn appended() {
    APPENDED.notified().await;
}

/// What happened to one request, as written to the access log.
///
/// The log field names are these field names except `target` (logged as `uri`) and the
/// durations (logged as whole microseconds, `duration_us` and `upstream_duration_us`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessRecord<'a> {
    /// The virtual server that took the request.
    pub virtual_server: &'a str,
    /// The client's address as the socket saw it (or as a trusted PROXY header gave it).
    pub client: SocketAddr,
    /// The client's address as a trusted proxy's forwarding header gave it
    /// (`[virtual_servers.NAME.client_address]`), which rules, limits, hashing and the fair
    /// queue key on; `None` when that is `client`'s own address.
    pub client_address: Option<IpAddr>,
    /// The request method, as received.
    pub method: &'a str,
    /// The request target as received (origin-form path and query, usually).
    pub target: &'a str,
    /// The request's protocol version, e.g. `"HTTP/1.1"`.
    pub version: &'a str,
    /// The status sent to the client.
    pub status: u16,
    /// Bytes of response sent to the client, head included.
    pub bytes_sent: u64,
    /// The pool the request was routed to, if any.
    pub pool: Option<&'a str>,
    /// The node that served the request, if one was reached.
    pub node: Option<SocketAddr>,
    /// From the first byte of the request to the last byte of the response.
    pub duration: Duration,
    /// From forwarding the request to the end of the node's response, if forwarded.
    pub upstream_duration: Option<Duration>,
    /// Why the request failed or was answered by weir itself, if it was.
    pub error: Option<&'a str>,
    /// What the cache did (`HIT`, `MISS`, `STALE`, `PASS`, ...), when the request's
    /// route caches.
    pub cache: Option<&'a str>,
    /// The request id (`[virtual_servers.NAME.request_id]`), when ids are on.
    pub request_id: Option<&'a str>,
    /// The traffic rule that decided where the request went, if one did.
    pub rule: Option<&'a str>,
    /// A gRPC call's status (`grpc-status` from the response's trailers, or its
    /// head for a trailers-only response), if the response carried one.
    pub grpc_status: Option<u32>,
    /// What the client's TLS handshake settled, on a TLS connection.
    pub tls: Option<TlsRecord<'a>>,
}

/// `addr` with an IPv4-mapped IPv6 address (`[::ffff:192.0.2.9]`, from a PROXY header of the
/// IPv6 family) written as the IPv4 address it maps, as `X-Forwarded-For`, rules and limits
/// take it: the record names the client as everything else does.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// What a client's TLS handshake settled, as logged (`tls_version`, `tls_cipher`,
/// `server_name`, `client_subject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsRecord<'a> {
    /// `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// The cipher suite's IANA name (`TLS_AES_128_GCM_SHA256`).
    pub cipher: &'static str,
    /// The server name (SNI) the client sent, if it sent one.
    pub server_name: Option<&'a str>,
    /// The subject of the client certificate weir verified, if the client sent one.
    pub client_subject: Option<&'a str>,
}

impl TlsRecord<'_> {
    fn add_to(&self, fields: &mut Fields<'_>) {
        fields.text("tls_version", self.version);
        fields.text("tls_cipher", self.cipher);
        if let Some(name) = self.server_name {
            fields.text("server_name", name);
        }
        if let Some(subject) = self.client_subject {
            fields.text("client_subject", subject);
        }
    }
}

/// Where access records go: one per configuration of `log.access_log_format` and
/// `log.access_log_file`, kept across reloads that do not change them. Its own thread
/// writes them (`writer`).
#[derive(Debug)]
pub struct AccessLog {
    format: AccessLogFormat,
    path: Option<PathBuf>,
    pending: Mutex<Batch>,
    writer: Writer,
}

impl AccessLog {
    /// Writes to standard output.
    pub fn stdout(format: AccessLogFormat) -> io::Result<AccessLog> {
        AccessLog::with(format, None, Output::Stdout)
    }

    /// Appends to `path` (created if missing).
    pub fn file(format: AccessLogFormat, path: &Path) -> io::Result<AccessLog> {
        let file = open(path)?;
        AccessLog::with(format, Some(path.to_path_buf()), Output::File(file))
    }

    /// Checks that `path` can be opened for appending, as [`AccessLog::file`] would, without
    /// leaving a new file behind: the check of a dry run (`weir check`, a validated but not
    /// applied candidate).
    pub fn probe(path: &Path) -> io::Result<()> {
        match open_with(OpenOptions::new().append(true), path) {
            Ok(_) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                match open_with(OpenOptions::new().append(true).create_new(true), path) {
                    Ok(_) => std::fs::remove_file(path),
                    // Someone else made it meanwhile: it exists, which is what was asked.
                    Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                    Err(error) => Err(error),
                }
            }
            Err(error) => Err(error),
        }
    }

    fn with(format: AccessLogFormat, path: Option<PathBuf>, out: Output) -> io::Result<AccessLog> {
        Ok(AccessLog {
            format,
            path,
            pending: Mutex::new(Batch {
                bytes: Vec::with_capacity(FLUSH_AT),
                records: 0,
            }),
            writer: Writer::start(out)?,
        })
    }

    /// Whether this log writes `format` to `path` (`None`: standard output).
    pub fn is(&self, format: AccessLogFormat, path: Option<&Path>) -> bool {
        self.format == format && self.path.as_deref() == path
    }

    /// Appends one request's record.
    pub fn write(&self, record: &AccessRecord<'_>) {
        let mut line = Vec::with_capacity(256);
        record.format(self.format, SystemTime::now(), &mut line);
        self.append(&line);
    }

    /// Appends one TCP session's record.
    pub fn write_session(&self, record: &SessionRecord<'_>) {
        let mut line = Vec::with_capacity(256);
        record.format(self.format, SystemTime::now(), &mut line);
        self.append(&line);
    }

    fn append(&self, line: &[u8]) {
        let mut pending = self.lock();
        let was_empty = pending.bytes.is_empty();
        pending.bytes.extend_from_slice(line);
        pending.records += 1;
        if pending.bytes.len() >= FLUSH_AT {
            // Handed over under the lock (a send on a channel, no wait), so that batches
            // reach the writer in the order their records were appended.
            self.writer.submit(take(&mut pending));
        } else if was_empty {
            APPENDED.notify_one();
        }
    }

    /// Hands what is buffered to the writer, without waiting for it to be written: what
    /// the 200 ms timer does, on a tokio worker that must not wait on a reader.
    pub fn hand_over(&self) {
        let mut pending = self.lock();
        self.writer.submit(take(&mut pending));
    }

    /// Writes out what is buffered, waiting (2 s at most: a reader may have stopped
    /// reading) until it is written: at exit, and where a test reads the file next.
    pub fn flush(&self) {
        self.hand_over();
        self.writer.wait();
    }

    /// Closes the file and opens it again at the same path (logrotate's convention:
    /// it renamed the file, then sends SIGUSR1). Standard output is left alone. On error
    /// the old file is kept. The records still buffered go to the new file: nothing is
    /// written to the old one once the signal is seen, so logrotate may compress it at
    /// once (`compress` without `delaycompress`) without losing the lines of the last
    /// moments before the signal, which the old file got before (an outside audit lost 68
    /// of 1,600 records over six rotations that way).
    pub fn reopen(&self) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let file = open(path)?;
        // Under the lock: the buffered records and every one after go to the new file.
        let mut pending = self.lock();
        self.writer.reopen(file);
        self.writer.submit(take(&mut pending));
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Batch> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The buffered lines, leaving an empty buffer of the same capacity in their place.
fn take(pending: &mut Batch) -> Batch {
    std::mem::replace(
        pending,
        Batch {
            bytes: Vec::with_capacity(FLUSH_AT),
            records: 0,
        },
    )
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        // What is left goes out; the writer thread ends once it has written it. Not waited
        // for: the last holder may be a request's task on a tokio worker (the process's
        // exit flushes and waits, `AccessLog::flush`).
        self.hand_over();
    }
}

fn open(path: &Path) -> io::Result<File> {
    open_with(OpenOptions::new().create(true).append(true), path)
}

/// Opens `path` as `options` say without waiting: a FIFO no process reads from would
/// block the open for ever (a reload, `weir check`); it fails instead. Writes to the file
/// then block as usual.
fn open_with(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::unix::fs::OpenOptionsExt;
    let file = options
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(code) if code == nix::errno::Errno::ENXIO as i32 => {
                io::Error::other("it is a FIFO that no process reads from")
            }
            _ => error,
        })?;
    let flags = OFlag::from_bits_truncate(fcntl(&file, FcntlArg::F_GETFL)?);
    fcntl(&file, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    Ok(file)
}

impl AccessRecord<'_> {
    /// Appends the record as one line in `format`, stamped `now`.
    pub fn format(&self, format: AccessLogFormat, now: SystemTime, out: &mut Vec<u8>) {
        let mut line = String::with_capacity(256);
        let json = format == AccessLogFormat::Json;
        let mut fields = Fields {
            line: &mut line,
            json,
            first: true,
        };
        fields.text("time", &rfc3339(now));
        fields.text("virtual_server", self.virtual_server);
        fields.text("client", &canonical(self.client).to_string());
        if let Some(address) = self.client_address {
            fields.text("client_address", &address.to_canonical().to_string());
        }
        fields.text("method", &cut(self.method, MAX_LOGGED_METHOD));
        fields.text("uri", &cut(self.target, MAX_LOGGED_URI));
        fields.text("version", self.version);
        fields.number("status", u64::from(self.status));
        fields.number("bytes_sent", self.bytes_sent);
        if let Some(pool) = self.pool {
            fields.text("pool", pool);
        }
        if let Some(node) = self.node {
            fields.text("node", &node.to_string());
        }
        fields.number("duration_us", micros(self.duration));
        if let Some(upstream) = self.upstream_duration {
            fields.number("upstream_duration_us", micros(upstream));
        }
        if let Some(error) = self.error {
            fields.text("error", error);
        }
        if let Some(cache) = self.cache {
            fields.text("cache", cache);
        }
        if let Some(id) = self.request_id {
            fields.text("request_id", id);
        }
        if let Some(rule) = self.rule {
            fields.text("rule", rule);
        }
        if let Some(status) = self.grpc_status {
            fields.number("grpc_status", u64::from(status));
        }
        if let Some(tls) = &self.tls {
            tls.add_to(&mut fields);
        }
        if json {
            line.push('}');
        }
        line.push('\n');
        out.extend_from_slice(line.as_bytes());
    }
}

/// Writes `key=value` pairs or JSON members.
struct Fields<'a> {
    line: &'a mut String,
    json: bool,
    first: bool,
}

impl Fields<'_> {
    fn separator(&mut self) {
        match (self.first, self.json) {
            (true, true) => self.line.push('{'),
            (true, false) => {}
            (false, true) => self.line.push(','),
            (false, false) => self.line.push(' '),
        }
        self.first = false;
    }

    fn text(&mut self, key: &str, value: &str) {
        self.separator();
        if self.json {
            let _ = write!(self.line, "\"{key}\":");
            quote(self.line, value);
        } else {
            let _ = write!(self.line, "{key}=");
            let plain = !value.is_empty()
                && value
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'=' && b != b'\\');
            if plain {
                self.line.push_str(value);
            } else {
                quote(self.line, value);
            }
        }
    }

    fn number(&mut self, key: &str, value: u64) {
        self.separator();
        if self.json {
            let _ = write!(self.line, "\"{key}\":{value}");
        } else {
            let _ = write!(self.line, "{key}={value}");
        }
    }
}

/// `value` in double quotes, with `"`, `\` and control characters escaped (valid JSON and
/// logfmt both).
fn quote(line: &mut String, value: &str) {
    line.push('"');
    for c in value.chars() {
        match c {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            '\t' => line.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(line, "\\u{:04x}", c as u32);
            }
            c => line.push(c),
        }
    }
    line.push('"');
}

/// What happened to one TCP session (a tcp or tls virtual server, or TLS passed through), as
/// written to the access log beside [`AccessRecord`]s, with `protocol=tcp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRecord<'a> {
    /// The virtual server that accepted the connection.
    pub virtual_server: &'a str,
    /// The client: the address a trusted PROXY header carried, else the peer's.
    pub client: SocketAddr,
    /// The server name a passed-through ClientHello asked for, if one was read.
    pub server_name: Option<&'a str>,
    /// What the client's TLS handshake settled, on a `tls` virtual server (which
    /// terminates TLS, so nothing is passed through and `server_name` above is absent).
    pub tls: Option<TlsRecord<'a>>,
    /// The pool the session was sent to, if one was chosen.
    pub pool: Option<&'a str>,
    /// The node the bytes were relayed to, if one was reached.
    pub node: Option<SocketAddr>,
    /// Bytes read from the client (and written to the node).
    pub bytes_received: u64,
    /// Bytes written to the client (read from the node).
    pub bytes_sent: u64,
    /// From the accept to the end of the session.
    pub duration: Duration,
    /// How the session ended (`weir_tcp_sessions_total`'s `result`).
    pub result: &'a str,
}

impl SessionRecord<'_> {
    /// Appends the record as one line in `format`, stamped `now`.
    pub fn format(&self, format: AccessLogFormat, now: SystemTime, out: &mut Vec<u8>) {
        let mut line = String::with_capacity(256);
        let json = format == AccessLogFormat::Json;
        let mut fields = Fields {
            line: &mut line,
            json,
            first: true,
        };
        fields.text("time", &rfc3339(now));
        fields.text("protocol", "tcp");
        fields.text("virtual_server", self.virtual_server);
        fields.text("client", &canonical(self.client).to_string());
        if let Some(name) = self.server_name {
            fields.text("server_name", name);
        }
        if let Some(pool) = self.pool {
            fields.text("pool", pool);
        }
        if let Some(node) = self.node {
            fields.text("node", &node.to_string());
        }
        fields.number("bytes_received", self.bytes_received);
        fields.number("bytes_sent", self.bytes_sent);
        fields.number("duration_us", micros(self.duration));
        fields.text("result", self.result);
        if let Some(tls) = &self.tls {
            tls.add_to(&mut fields);
        }
        if json {
            line.push('}');
        }
        line.push('\n');
        out.extend_from_slice(line.as_bytes());
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The most of a request target an access record holds: a record stays within the line
/// limits of log shippers (8 KiB for syslog, 16 KiB for Docker) whatever the head limit.
pub const MAX_LOGGED_URI: usize = 4096;

/// The most of a method an access record holds. A method is any token, as long as the
/// head limit allows; the registered ones are at most 17 bytes.
pub const MAX_LOGGED_METHOD: usize = 64;

/// `text`, cut to `max` bytes (at a character boundary) with `...` after.
fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}...", &text[..end]))
}

/// `time` as RFC 3339 in UTC with milliseconds: `2026-11-25T13:40:41.841Z` (by
/// `humantime`, which panics outside 1970–9999: the time is clamped into that range).
pub fn rfc3339(time: SystemTime) -> String {
    /// 9999-12-31T23:59:59.999Z, the last time the format can carry.
    const LAST: Duration = Duration::from_millis(253_402_300_799_999);
    let time = time.clamp(UNIX_EPOCH, UNIX_EPOCH + LAST);
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> AccessRecord<'static> {
        AccessRecord {
            virtual_server: "web",
            client: "192.0.2.7:50123".parse().unwrap(),
            client_address: None,
            method: "GET",
            target: "/index.html?q=1",
            version: "HTTP/1.1",
            status: 502,
            bytes_sent: 1234,
            pool: Some("app"),
            node: None,
            duration: Duration::from_micros(1500),
            upstream_duration: None,
            grpc_status: None,
            error: Some("connect refused"),
            cache: None,
            request_id: None,
            rule: None,
            tls: None,
        }
    }

    fn line(record: &AccessRecord<'_>, format: AccessLogFormat) -> String {
        let mut out = Vec::new();
        let at = UNIX_EPOCH + Duration::from_millis(1_764_078_041_841);
        record.format(format, at, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn an_ipv4_mapped_client_is_logged_as_ipv4() {
        let mapped = AccessRecord {
            client: "[::ffff:192.0.2.9]:4711".parse().unwrap(),
            ..record()
        };
        assert!(line(&mapped, AccessLogFormat::Text).contains(" client=192.0.2.9:4711 "));
        assert!(line(&mapped, AccessLogFormat::Json).contains("\"client\":\"192.0.2.9:4711\""));
        let v6 = AccessRecord {
            client: "[2001:db8::9]:4711".parse().unwrap(),
            ..record()
        };
        assert!(line(&v6, AccessLogFormat::Text).contains(" client=[2001:db8::9]:4711 "));
    }

    #[test]
    fn the_address_a_trusted_proxy_gave_follows_the_peer() {
        let behind = AccessRecord {
            client_address: Some("::ffff:203.0.113.9".parse().unwrap()),
            ..record()
        };
        assert!(
            line(&behind, AccessLogFormat::Text)
                .contains(" client=192.0.2.7:50123 client_address=203.0.113.9 method=GET ")
        );
        assert!(line(&behind, AccessLogFormat::Json).contains(
            "\"client\":\"192.0.2.7:50123\",\"client_address\":\"203.0.113.9\",\"method\""
        ));
        assert!(!line(&record(), AccessLogFormat::Json).contains("client_address"));
    }

    #[test]
    fn logfmt_lines() {
        assert_eq!(
            line(&record(), AccessLogFormat::Text),
            "time=2025-11-25T13:40:41.841Z virtual_server=web client=192.0.2.7:50123 \
             method=GET uri=\"/index.html?q=1\" version=HTTP/1.1 status=502 bytes_sent=1234 \
             pool=app duration_us=1500 error=\"connect refused\"\n"
        );
    }

    #[test]
    fn json_lines_escape_what_a_client_sent() {
        let hostile = AccessRecord {
            target: "/\"\\\n\u{1}é",
            ..record()
        };
        let text = line(&hostile, AccessLogFormat::Json);
        assert!(text.contains(r#""uri":"/\"\\\n\u0001é""#), "{text}");
        assert!(text.contains(r#""error":"connect refused"}"#), "{text}");
        assert!(!text.contains("\"node\""), "{text}");
        assert_eq!(text.lines().count(), 1);
        let ruled = AccessRecord {
            request_id: Some("abc-1"),
            rule: Some("old \"blog\""),
            ..record()
        };
        let text = line(&ruled, AccessLogFormat::Text);
        assert!(
            text.ends_with(" request_id=abc-1 rule=\"old \\\"blog\\\"\"\n"),
            "{text}"
        );
    }

    #[test]
    fn tls_fields_come_last() {
        let tls = TlsRecord {
            version: "TLSv1.3",
            cipher: "TLS_AES_128_GCM_SHA256",
            server_name: Some("a.example"),
            client_subject: Some("CN=client, O=weir"),
        };
        let secured = AccessRecord {
            tls: Some(tls),
            ..record()
        };
        assert!(
            line(&secured, AccessLogFormat::Text).ends_with(
                " error=\"connect refused\" tls_version=TLSv1.3 \
                 tls_cipher=TLS_AES_128_GCM_SHA256 server_name=a.example \
                 client_subject=\"CN=client, O=weir\"\n"
            ),
            "{}",
            line(&secured, AccessLogFormat::Text)
        );
        let nameless = AccessRecord {
            tls: Some(TlsRecord {
                server_name: None,
                client_subject: None,
                ..tls
            }),
            ..record()
        };
        let text = line(&nameless, AccessLogFormat::Json);
        assert!(
            text.ends_with(
                "\"tls_version\":\"TLSv1.3\",\"tls_cipher\":\"TLS_AES_128_GCM_SHA256\"}\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn long_targets_are_cut() {
        let long = format!("/{}", "é".repeat(MAX_LOGGED_URI));
        let cut = AccessRecord {
            target: &long,
            ..record()
        };
        let text = line(&cut, AccessLogFormat::Json);
        let uri = text
            .split("\"uri\":\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert!(uri.ends_with("é..."), "{uri}");
        assert_eq!(uri.len(), MAX_LOGGED_URI - 1 + 3, "{uri}");
        let short = AccessRecord {
            target: "/short",
            ..record()
        };
        assert!(line(&short, AccessLogFormat::Json).contains("\"uri\":\"/short\""));
        let method = "M".repeat(16 * 1024);
        let long_method = AccessRecord {
            method: &method,
            ..record()
        };
        let text = line(&long_method, AccessLogFormat::Json);
        let logged = format!("\"method\":\"{}...\"", "M".repeat(MAX_LOGGED_METHOD));
        assert!(text.contains(&logged), "{text}");
        assert!(text.len() < 1024, "{}", text.len());
    }

    #[test]
    fn times_outside_the_format_are_clamped() {
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00.000Z");
        let after = UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        assert_eq!(rfc3339(after), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn session_lines() {
        let session = SessionRecord {
            virtual_server: "db",
            client: "192.0.2.7:50123".parse().unwrap(),
            server_name: Some("a.example"),
            tls: None,
            pool: Some("pg"),
            node: Some("10.0.0.1:5432".parse().unwrap()),
            bytes_received: 10,
            bytes_sent: 20,
            duration: Duration::from_micros(1500),
            result: "closed",
        };
        let mut out = Vec::new();
        let at = UNIX_EPOCH + Duration::from_millis(1_764_078_041_841);
        session.format(AccessLogFormat::Text, at, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "time=2025-11-25T13:40:41.841Z protocol=tcp virtual_server=db \
             client=192.0.2.7:50123 server_name=a.example pool=pg node=10.0.0.1:5432 \
             bytes_received=10 bytes_sent=20 duration_us=1500 result=closed\n"
        );
        let mut out = Vec::new();
        let unnamed = SessionRecord {
            server_name: None,
            node: None,
            ..session
        };
        unnamed.format(AccessLogFormat::Json, at, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(r#"{"time":"#), "{text}");
        assert!(text.contains(r#""protocol":"tcp","#), "{text}");
        assert!(text.ends_with("\"result\":\"closed\"}\n"), "{text}");
        assert!(
            !text.contains("server_name") && !text.contains("\"node\""),
            "{text}"
        );
    }

    #[test]
    fn a_fifo_nobody_reads_is_refused_without_waiting() {
        let path = std::env::temp_dir().join(format!("weir-access-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let opened = path.clone();
        // On a thread: an open that blocks fails the test instead of hanging it.
        std::thread::spawn(move || {
            let file = AccessLog::file(AccessLogFormat::Text, &opened).map(drop);
            let probe = AccessLog::probe(&opened);
            let _ = tx.send((file, probe));
        });
        let (file, probe) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("opening a FIFO with no reader blocked");
        let _ = std::fs::remove_file(&path);
        for result in [file, probe] {
            let error = result.unwrap_err();
            assert!(error.to_string().contains("FIFO"), "{error}");
        }
    }

    #[test]
    fn files_are_appended_to_and_reopened() {
        let dir = std::env::temp_dir().join(format!("weir-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let log = AccessLog::file(AccessLogFormat::Json, &path).unwrap();
        log.write(&record());
        log.flush();
        // logrotate: move the file, then ask for a reopen. The record still buffered at
        // the reopen goes to the new file with the ones after: the old file, which
        // logrotate may compress at once, is not written to again.
        std::fs::rename(&path, dir.join("access.log.1")).unwrap();
        log.write(&record());
        log.reopen().unwrap();
        log.write(&record());
        log.flush();
        drop(log);
        let rotated = std::fs::read_to_string(dir.join("access.log.1")).unwrap();
        let current = std::fs::read_to_string(&path).unwrap();
        assert_eq!((rotated.lines().count(), current.lines().count()), (1, 2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
