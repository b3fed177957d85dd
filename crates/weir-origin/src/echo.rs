//! The `/echo` report: what the origin received, as JSON that tests read back with
//! [`parse_echo_json`].

use std::mem::MaybeUninit;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::request::MAX_HEADERS;

/// The body of an `/echo` response: the request as the origin saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EchoReport {
    /// The answering origin's name.
    pub origin: String,
    /// The client's address as the origin's socket saw it.
    pub peer: SocketAddr,
    /// The request method, as sent.
    pub method: String,
    /// The request target, exactly as sent.
    pub target: String,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: String,
    /// Header fields in order, names in their original case, values UTF-8-lossy.
    pub headers: Vec<(String, String)>,
    /// The decoded request body, UTF-8-lossy.
    pub body: String,
    /// The decoded request body's length in bytes.
    pub body_length: u64,
}

/// Reads an `/echo` JSON body; `None` if it is not one.
pub fn parse_echo_json(body: &[u8]) -> Option<EchoReport> {
    serde_json::from_slice(body).ok()
}

impl EchoReport {
    /// Builds the report from a complete request head and its decoded body; `None` if `head`
    /// does not parse (it already parsed once, so this does not happen).
    pub(crate) fn new(
        origin: &str,
        peer: SocketAddr,
        head: &[u8],
        body: &[u8],
    ) -> Option<EchoReport> {
        let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut []);
        httparse::ParserConfig::default()
            .parse_request_with_uninit_headers(&mut request, head, &mut headers)
            .ok()?;
        Some(EchoReport {
            origin: origin.to_owned(),
            peer,
            method: request.method?.to_owned(),
            target: request.path?.to_owned(),
            version: format!("HTTP/1.{}", request.version?),
            headers: request
                .headers
                .iter()
                .map(|header| {
                    let value = String::from_utf8_lossy(header.value).into_owned();
                    (header.name.to_owned(), value)
                })
                .collect(),
            body: String::from_utf8_lossy(body).into_owned(),
            body_length: body.len() as u64,
        })
    }

    /// The value of the first header field named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The values of every header field named `name` (ASCII case-insensitive), in order.
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_keeps_order_and_case() {
        let head = b"POST /echo?a=1 HTTP/1.1\r\nHost: h\r\nX-Mixed-Case: 1\r\nx-lower: 2\r\nX-MIXED-CASE: 3\r\n\r\n";
        let peer: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let report = EchoReport::new("node", peer, head, b"hi\xff").expect("valid head");
        assert_eq!(report.method, "POST");
        assert_eq!(report.target, "/echo?a=1");
        assert_eq!(report.version, "HTTP/1.1");
        let names: Vec<&str> = report
            .headers
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(names, ["Host", "X-Mixed-Case", "x-lower", "X-MIXED-CASE"]);
        assert_eq!(report.header("x-mixed-case"), Some("1"));
        assert_eq!(
            report.header_values("X-Mixed-Case").collect::<Vec<_>>(),
            ["1", "3"]
        );
        assert_eq!(report.body, "hi\u{fffd}");
        assert_eq!(report.body_length, 3);
        let json = serde_json::to_vec(&report).unwrap();
        assert_eq!(parse_echo_json(&json), Some(report));
    }
}
