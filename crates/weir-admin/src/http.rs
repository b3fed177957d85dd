//! A small sans-IO HTTP/1.1 server codec for the admin endpoints: parse one request head,
//! encode one response. Requests with a body are answered and the connection closed, so
//! body bytes are never read as a request.

use std::time::{SystemTime, UNIX_EPOCH};

/// Most headers accepted in one request head.
const MAX_HEADERS: usize = 32;

/// The request methods the admin endpoints distinguish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
    Other,
}

/// The parts of a request head the admin endpoints need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub method: Method,
    /// The path without query, from origin-form or absolute-form targets; empty otherwise.
    pub path: String,
    /// Whether the client allows another request on this connection.
    pub keep_alive: bool,
    /// HTTP/1.0 needs `Connection: keep-alive` echoed to keep the connection.
    pub http10: bool,
    /// Whether a body follows the head (which is then never read).
    pub has_body: bool,
}

/// Why a request head was rejected; each maps to a status and a closed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestError {
    /// Not valid HTTP/1.x, or missing or conflicting framing or Host headers.
    Malformed,
    /// The head exceeds the byte or header-count limit.
    HeadTooLarge,
}

/// A response ready to encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Value of an `Allow` header, for 405.
    pub allow: Option<&'static str>,
}

/// Parses one request head from the start of `buf`. Returns the request and the length of
/// its head, `Ok(None)` when more bytes are needed, or an error.
pub(crate) fn parse_request(
    buf: &[u8],
    max_head_bytes: usize,
) -> Result<Option<(Request, usize)>, RequestError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= max_head_bytes => {
            return Err(RequestError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::HeadTooLarge),
        Err(_) => return Err(RequestError::Malformed),
    };
    if head_len > max_head_bytes {
        return Err(RequestError::HeadTooLarge);
    }
    // A complete parse always fills method, path and version.
    let (Some(method), Some(target), Some(version)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(RequestError::Malformed);
    };
    let http10 = version == 0;
    let framing = Framing::read(parsed.headers)?;
    if !http10 && framing.hosts != 1 {
        // RFC 9112 §3.2: a server must reject an HTTP/1.1 request without exactly one Host.
        return Err(RequestError::Malformed);
    }
    let keep_alive = if http10 {
        framing.connection_keep_alive && !framing.connection_close
    } else {
        !framing.connection_close
    };
    let request = Request {
        method: match method {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            _ => Method::Other,
        },
        path: request_path(target).to_owned(),
        keep_alive,
        http10,
        has_body: framing.has_body,
    };
    Ok(Some((request, head_len)))
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
        reason(response.status),
        http_date(now),
        response.content_type,
        response.body.len(),
    );
    if let Some(allow) = response.allow {
        let _ = write!(head, "Allow: {allow}\r\n");
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

/// The plain-text response weir sends for `error`.
pub(crate) fn error_response(error: RequestError) -> Response {
    match error {
        RequestError::Malformed => Response::text(400, "bad request\n"),
        RequestError::HeadTooLarge => Response::text(431, "request header fields too large\n"),
    }
}

/// Formats `time` as an HTTP date (IMF-fixdate), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub(crate) fn http_date(time: SystemTime) -> String {
    const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // A clock before 1970 is reported as the epoch.
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let days = seconds / 86_400;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[((days + 4) % 7) as usize], // 1970-01-01 was a Thursday.
        day,
        MONTHS[(month - 1) as usize],
        year,
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60,
    )
}

impl Response {
    pub(crate) fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            allow: None,
        }
    }
}

/// What the headers say about framing and the connection.
#[derive(Debug, Default)]
struct Framing {
    hosts: usize,
    has_body: bool,
    connection_close: bool,
    connection_keep_alive: bool,
}

impl Framing {
    fn read(headers: &[httparse::Header<'_>]) -> Result<Framing, RequestError> {
        let mut framing = Framing::default();
        let mut content_length: Option<u64> = None;
        let mut chunked = false;
        for header in headers {
            let name = header.name;
            if name.eq_ignore_ascii_case("host") {
                framing.hosts += 1;
            } else if name.eq_ignore_ascii_case("content-length") {
                let length = parse_content_length(header.value)?;
                if content_length.is_some_and(|previous| previous != length) {
                    return Err(RequestError::Malformed);
                }
                content_length = Some(length);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = true;
            } else if name.eq_ignore_ascii_case("connection") {
                for token in header.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    framing.connection_close |= token.eq_ignore_ascii_case(b"close");
                    framing.connection_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        if chunked && content_length.is_some() {
            // Ambiguous framing (RFC 9112 §6.3): refuse rather than guess.
            return Err(RequestError::Malformed);
        }
        framing.has_body = chunked || content_length.is_some_and(|length| length > 0);
        Ok(framing)
    }
}

fn parse_content_length(value: &[u8]) -> Result<u64, RequestError> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return Err(RequestError::Malformed);
    }
    // At most 19 digits always fits in a u64.
    Ok(value
        .iter()
        .fold(0u64, |length, &digit| length * 10 + u64::from(digit - b'0')))
}

/// The path of an origin-form (`/a?b`) or absolute-form (`http://host/a?b`) target, without
/// the query; empty for other forms (`*`, authority-form).
fn request_path(target: &str) -> &str {
    let without_query = target.split(['?', '#']).next().unwrap_or_default();
    if without_query.starts_with('/') {
        return without_query;
    }
    let Some(scheme) = ["http://", "https://"].into_iter().find(|scheme| {
        without_query
            .get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    }) else {
        return "";
    };
    let after_scheme = &without_query[scheme.len()..];
    match after_scheme.find('/') {
        Some(slash) => &after_scheme[slash..],
        None => "/",
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Converts days since 1970-01-01 to (year, month 1–12, day 1–31) in the proleptic
/// Gregorian calendar, counting in 400-year eras that start on 1 March.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    const DAYS_PER_ERA: u64 = 146_097;
    // Days from 0000-03-01 to 1970-01-01.
    let days = days + 719_468;
    let era = days / DAYS_PER_ERA;
    let day_of_era = days % DAYS_PER_ERA;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
