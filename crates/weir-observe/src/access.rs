//! The access log: one typed [`AccessRecord`] per request, emitted as a `tracing` event.
//!
//! Events go to target [`ACCESS_TARGET`] at `INFO`, so a subscriber can route them to their
//! own sink (for example JSON lines) or filter them out with `weir::access=off`.

use std::net::SocketAddr;
use std::time::Duration;

/// The `tracing` target of access records.
pub const ACCESS_TARGET: &str = "weir::access";

/// What happened to one request, as written to the access log.
///
/// The log field names are listed in `docs/metrics.md`; they match these field names except
/// `target` (logged as `uri`, since `target` names the event's own target in most
/// subscribers) and the durations (logged as whole microseconds, `duration_us` and
/// `upstream_duration_us`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessRecord<'a> {
    pub virtual_server: &'a str,
    pub client: SocketAddr,
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
}

impl AccessRecord<'_> {
    /// Emits the record as one `INFO` event on target [`ACCESS_TARGET`]. Absent optional
    /// fields are left out of the event.
    pub fn emit(&self) {
        tracing::info!(
            target: ACCESS_TARGET,
            virtual_server = self.virtual_server,
            client = %self.client,
            method = self.method,
            uri = self.target,
            version = self.version,
            status = self.status,
            bytes_sent = self.bytes_sent,
            pool = self.pool,
            node = self.node.map(tracing::field::display),
            duration_us = micros(self.duration),
            upstream_duration_us = self.upstream_duration.map(micros),
            error = self.error,
        );
    }
}

/// What happened to one TCP session (a tcp or tls virtual server, or TLS passed through), as
/// written to the access log on the same target as [`AccessRecord`], with `protocol = "tcp"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRecord<'a> {
    pub virtual_server: &'a str,
    /// The client: the address a trusted PROXY header carried, else the peer's.
    pub client: SocketAddr,
    /// The server name a passed-through ClientHello asked for, if one was read.
    pub server_name: Option<&'a str>,
    pub pool: Option<&'a str>,
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
    /// Emits the record as one `INFO` event on target [`ACCESS_TARGET`].
    pub fn emit(&self) {
        tracing::info!(
            target: ACCESS_TARGET,
            protocol = "tcp",
            virtual_server = self.virtual_server,
            client = %self.client,
            server_name = self.server_name,
            pool = self.pool,
            node = self.node.map(tracing::field::display),
            bytes_received = self.bytes_received,
            bytes_sent = self.bytes_sent,
            duration_us = micros(self.duration),
            result = self.result,
        );
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Capture {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn capture(records: &[AccessRecord<'_>]) -> String {
        let sink = Capture::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            for record in records {
                record.emit();
            }
        });
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    fn record() -> AccessRecord<'static> {
        AccessRecord {
            virtual_server: "web",
            client: "192.0.2.7:50123".parse().unwrap(),
            method: "GET",
            target: "/index.html?q=1",
            version: "HTTP/1.1",
            status: 200,
            bytes_sent: 1234,
            pool: Some("app"),
            node: Some("10.0.0.1:8080".parse().unwrap()),
            duration: Duration::from_micros(1500),
            upstream_duration: Some(Duration::from_micros(1200)),
            error: None,
        }
    }

    #[test]
    fn emits_one_structured_event() {
        let out = capture(&[record()]);
        assert_eq!(out.lines().count(), 1, "{out}");
        for field in [
            r#""target":"weir::access""#,
            r#""level":"INFO""#,
            r#""virtual_server":"web""#,
            r#""client":"192.0.2.7:50123""#,
            r#""method":"GET""#,
            r#""uri":"/index.html?q=1""#,
            r#""version":"HTTP/1.1""#,
            r#""status":200"#,
            r#""bytes_sent":1234"#,
            r#""pool":"app""#,
            r#""node":"10.0.0.1:8080""#,
            r#""duration_us":1500"#,
            r#""upstream_duration_us":1200"#,
        ] {
            assert!(out.contains(field), "missing {field} in {out}");
        }
        assert!(!out.contains(r#""error""#), "{out}");
    }

    #[test]
    fn absent_fields_are_left_out() {
        let out = capture(&[AccessRecord {
            status: 502,
            pool: None,
            node: None,
            upstream_duration: None,
            error: Some("connect refused"),
            ..record()
        }]);
        assert!(out.contains(r#""status":502"#), "{out}");
        assert!(out.contains(r#""error":"connect refused""#), "{out}");
        for absent in ["\"pool\"", "\"node\"", "\"upstream_duration_us\""] {
            assert!(!out.contains(absent), "{absent} present in {out}");
        }
    }
}
