//! The admin listener's side of HTTP/1.1 over weir-http's codec: the request as the
//! endpoints see it (head parsed by `weir_http::RequestHead`, body read whole), and the
//! encoding of one response.

use std::time::SystemTime;

use weir_http::{RequestHead, Version};

/// The request methods the admin endpoints distinguish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
    Post,
    Put,
    Other,
}

/// A request as the endpoints see it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub method: Method,
    /// The path without query (absolute-form targets reduced to their path).
    pub path: String,
    /// Whether the client allows another request on this connection.
    pub keep_alive: bool,
    /// HTTP/1.0 needs `Connection: keep-alive` echoed to keep the connection.
    pub http10: bool,
    /// `Authorization` header value, if any.
    pub authorization: Option<Vec<u8>>,
    /// `Host`, `Origin` and `Sec-Fetch-Site` values, for the browser checks
    /// (`crate::guard`).
    pub host: Option<Vec<u8>>,
    pub origin: Option<Vec<u8>>,
    pub fetch_site: Option<Vec<u8>>,
    /// Whether `Accept` names OpenMetrics (what `/metrics` sends then; else Prometheus text).
    pub accepts_openmetrics: bool,
    /// The `If-Match` lines, joined with commas; `None` when there is none.
    pub if_match: Option<String>,
    /// The client's address, for the log.
    pub peer: Option<std::net::SocketAddr>,
    /// The whole body (empty when none was sent).
    pub body: Vec<u8>,
}

/// A response ready to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Value of an `Allow` header, for 405.
    pub allow: Option<&'static str>,
    /// Other headers (name, value), sent as given.
    pub headers: Vec<(&'static str, String)>,
}

impl Request {
    /// The request of a parsed head and its body, from `peer`.
    pub(crate) fn new(
        head: &RequestHead,
        body: Vec<u8>,
        peer: Option<std::net::SocketAddr>,
    ) -> Request {
        Request {
            method: match head.method_bytes() {
                b"GET" => Method::Get,
                b"HEAD" => Method::Head,
                b"POST" => Method::Post,
                b"PUT" => Method::Put,
                _ => Method::Other,
            },
            path: String::from_utf8_lossy(head.path()).into_owned(),
            keep_alive: head.keep_alive(),
            http10: head.version() == Version::Http10,
            authorization: head.header("authorization").map(<[u8]>::to_vec),
            host: head.header("host").map(<[u8]>::to_vec),
            origin: head.header("origin").map(<[u8]>::to_vec),
            fetch_site: head.header("sec-fetch-site").map(<[u8]>::to_vec),
            accepts_openmetrics: prefers_openmetrics(
                head.headers()
                    .filter(|(name, _)| name.eq_ignore_ascii_case(b"accept"))
                    .map(|(_, value)| value),
            ),
            if_match: {
                let lines: Vec<String> = head
                    .headers()
                    .filter(|(name, _)| name.eq_ignore_ascii_case(b"if-match"))
                    .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
                    .collect();
                (!lines.is_empty()).then(|| lines.join(", "))
            },
            peer,
            body,
        }
    }
}

/// Whether the `Accept` fields (`values`) prefer OpenMetrics 1.0.0 to Prometheus's classic
/// text format 0.0.4. Each format's quality is that of the most specific range that matches
/// it (RFC 9110 §12.5.1: the type with its `version`, the type, `type/*`, `*/*`; a range
/// naming another version does not match), `q=0` or a value that is not a q-value meaning
/// not acceptable (§12.4.2, read by `weir_http::qvalue`).
/// OpenMetrics is sent when the client named it, with a quality above 0 and at least the
/// text format's, or when only it is acceptable.
pub(crate) fn prefers_openmetrics<'a>(values: impl Iterator<Item = &'a [u8]>) -> bool {
    // (specificity, quality) of the best match so far, for each format.
    let (mut openmetrics, mut text) = (None::<(u8, u16)>, None::<(u8, u16)>);
    for range in values.flat_map(weir_http::split_list) {
        let mut parts = range.split(|&b| b == b';').map(<[u8]>::trim_ascii);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let (mut quality, mut version) = (1000, None);
        for parameter in parts {
            let Some(at) = parameter.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (name, value) = (
                parameter[..at].trim_ascii(),
                parameter[at + 1..].trim_ascii(),
            );
            let value = value
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(value);
            if name.eq_ignore_ascii_case(b"q") {
                // Not a q-value: not acceptable, as for content codings.
                quality = weir_http::qvalue(value).unwrap_or(0);
            } else if name.eq_ignore_ascii_case(b"version") {
                version = Some(value.to_vec());
            }
        }
        let exact = |wanted: &[u8]| match &version {
            None => Some(2),
            Some(v) if v == wanted => Some(3),
            Some(_) => None,
        };
        let (om, txt) = match media.as_slice() {
            b"application/openmetrics-text" => (exact(b"1.0.0"), None),
            b"text/plain" => (None, exact(b"0.0.4")),
            b"application/*" => (Some(1), None),
            b"text/*" => (None, Some(1)),
            b"*/*" => (Some(0), Some(0)),
            _ => (None, None),
        };
        for (slot, specificity) in [(&mut openmetrics, om), (&mut text, txt)] {
            let Some(specificity) = specificity else {
                continue;
            };
            *slot = match *slot {
                Some((known, q)) if known > specificity => Some((known, q)),
                Some((known, q)) if known == specificity => Some((known, q.max(quality))),
                _ => Some((specificity, quality)),
            };
        }
    }
    let quality = |format: Option<(u8, u16)>| format.map_or(0, |(_, q)| q);
    let named = openmetrics.is_some_and(|(specificity, _)| specificity >= 2);
    let (om, txt) = (quality(openmetrics), quality(text));
    om > 0 && ((named && om >= txt) || txt == 0)
}

/// Encodes `response` for `request` (or for an unparsed request when `None`), with a body
/// unless the request was HEAD. `close` adds `Connection: close`.
pub(crate) fn encode_response(
    response: &Response,
    request: Option<&Request>,
    close: bool,
    now: SystemTime,
) -> Vec<u8> {
    use std::fmt::Write as _;

    let mut head = String::with_capacity(256);
    // Writing into a String cannot fail; the results below are ignored for that reason.
    let _ = write!(
        head,
        "HTTP/1.1 {} {}\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n",
        response.status,
        weir_http::reason_phrase(response.status),
        weir_http::date::http_date_string(now),
        response.content_type,
        response.body.len(),
    );
    if let Some(allow) = response.allow {
        let _ = write!(head, "Allow: {allow}\r\n");
    }
    for (name, value) in &response.headers {
        if !value.bytes().any(|b| b == b'\r' || b == b'\n') {
            let _ = write!(head, "{name}: {value}\r\n");
        }
    }
    if close {
        head.push_str("Connection: close\r\n");
    } else if request.is_some_and(|r| r.http10) {
        head.push_str("Connection: keep-alive\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    if !request.is_some_and(|r| r.method == Method::Head) {
        bytes.extend_from_slice(&response.body);
    }
    bytes
}

impl Response {
    pub(crate) fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            allow: None,
            headers: Vec::new(),
        }
    }

    /// A JSON body (`value` serialised, pretty when small enough to be read by people).
    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Response {
        let mut body = serde_json::to_vec_pretty(value).unwrap_or_default();
        if body.len() > 64 * 1024 {
            body = serde_json::to_vec(value).unwrap_or_default();
        }
        body.push(b'\n');
        Response {
            status,
            content_type: "application/json",
            body,
            allow: None,
            headers: Vec::new(),
        }
    }

    /// 405 with the methods the resource takes, in `Allow` (RFC 9110 §15.5.6).
    pub(crate) fn method_not_allowed(allow: &'static str) -> Response {
        Response {
            allow: Some(allow),
            ..Response::error(405, "method not allowed on this resource")
        }
    }

    /// `{"error": message}` with `status`.
    pub(crate) fn error(status: u16, message: impl Into<String>) -> Response {
        Response::json(status, &serde_json::json!({ "error": message.into() }))
    }
}

#[cfg(test)]
mod tests;
