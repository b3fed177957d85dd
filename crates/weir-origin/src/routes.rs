//! Sans-IO routing: a request target becomes a [`Plan`] (status, content, framing, delay).
//!
//! Paths: `/`, `/healthz`, `/stats`, `/echo[/...]`, `/bytes/N`, `/delay/MS`, `/status/CODE`;
//! anything else is 404. Query parameters combine on any path: `delay=MS`, `status=CODE`,
//! `bytes=N`, `chunked=1|0|true|false`, `max_age=S` (the answer says
//! `Cache-Control: public, max-age=S`, so that caches in front may store it); unknown
//! parameters are ignored.

/// `/bytes/N` and `?bytes=N` are capped at this many bytes.
pub const MAX_BODY_BYTES: u64 = 1 << 30;
/// `/delay/MS` and `?delay=MS` are capped at ten minutes.
pub const MAX_DELAY_MS: u64 = 600_000;

/// What to answer one request with, before the body is produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub status: u16,
    pub content: Content,
    /// `?chunked=1`: send the body chunked (HTTP/1.1 clients only).
    pub chunked: bool,
    pub delay_ms: u64,
    /// `?max_age=S`: the answer may be cached for S seconds.
    pub max_age: Option<u64>,
}

/// Which body a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Content {
    /// `hello from weir origin <name>\n`
    Hello,
    /// `ok`
    Health,
    /// `delayed <MS> ms\n`
    Delay,
    /// `<code> <reason>\n`
    Status,
    /// `not found\n`
    NotFound,
    /// N bytes of the body pattern.
    Bytes(u64),
    /// JSON description of the request.
    Echo,
    /// JSON counters.
    Stats,
}

/// Why a target could not be routed; answered with 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RouteError {
    #[error("not a number in the path or query")]
    Number,
    #[error("status code outside 100..=599")]
    Status,
    #[error("`chunked` is not one of 1, 0, true, false")]
    Flag,
}

/// Routes a request target (origin-form, or absolute-form whose authority is ignored).
pub(crate) fn plan(target: &[u8]) -> Result<Plan, RouteError> {
    let target = strip_authority(target);
    let (path, query) = match target.iter().position(|&byte| byte == b'?') {
        Some(at) => (&target[..at], &target[at + 1..]),
        None => (target, &[][..]),
    };
    let mut plan = route_path(path)?;
    for pair in query.split(|&byte| byte == b'&') {
        let (key, value) = match pair.iter().position(|&byte| byte == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        match key {
            b"delay" => plan.delay_ms = parse_number(value)?.min(MAX_DELAY_MS),
            b"status" => plan.status = parse_status(value)?,
            b"bytes" => plan.content = Content::Bytes(parse_number(value)?.min(MAX_BODY_BYTES)),
            b"chunked" => plan.chunked = parse_flag(value)?,
            b"max_age" => plan.max_age = Some(parse_number(value)?),
            _ => {}
        }
    }
    Ok(plan)
}

fn route_path(path: &[u8]) -> Result<Plan, RouteError> {
    let mut plan = Plan {
        status: 200,
        content: Content::Hello,
        chunked: false,
        delay_ms: 0,
        max_age: None,
    };
    match path {
        b"/" | b"" => {}
        b"/healthz" => plan.content = Content::Health,
        b"/stats" => plan.content = Content::Stats,
        b"/echo" => plan.content = Content::Echo,
        _ if path.starts_with(b"/echo/") => plan.content = Content::Echo,
        _ => {
            if let Some(count) = path.strip_prefix(b"/bytes/") {
                plan.content = Content::Bytes(parse_number(count)?.min(MAX_BODY_BYTES));
            } else if let Some(delay) = path.strip_prefix(b"/delay/") {
                plan.content = Content::Delay;
                plan.delay_ms = parse_number(delay)?.min(MAX_DELAY_MS);
            } else if let Some(code) = path.strip_prefix(b"/status/") {
                plan.content = Content::Status;
                plan.status = parse_status(code)?;
            } else {
                plan.content = Content::NotFound;
                plan.status = 404;
            }
        }
    }
    Ok(plan)
}

/// `http://host:port/path?query` → `/path?query`; other forms are returned as they are.
fn strip_authority(target: &[u8]) -> &[u8] {
    let Some(after_scheme) = target
        .strip_prefix(b"http://")
        .or_else(|| target.strip_prefix(b"https://"))
    else {
        return target;
    };
    // An empty path (`http://host` or `http://host?query`) routes as `/`.
    match after_scheme
        .iter()
        .position(|&byte| byte == b'/' || byte == b'?')
    {
        Some(at) => &after_scheme[at..],
        None => b"",
    }
}

/// Decimal digits that fit comfortably in a u64 (values past the caps are clamped by callers).
fn parse_number(digits: &[u8]) -> Result<u64, RouteError> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(RouteError::Number);
    }
    Ok(digits.iter().fold(0u64, |value, digit| {
        value
            .saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'))
    }))
}

fn parse_status(digits: &[u8]) -> Result<u16, RouteError> {
    match parse_number(digits)? {
        code @ 100..=599 => Ok(code as u16),
        _ => Err(RouteError::Status),
    }
}

fn parse_flag(value: &[u8]) -> Result<bool, RouteError> {
    match value {
        b"1" | b"true" | b"" => Ok(true),
        b"0" | b"false" => Ok(false),
        _ => Err(RouteError::Flag),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(target: &str) -> Plan {
        plan(target.as_bytes()).expect("routable target")
    }

    #[test]
    fn paths() {
        assert_eq!(routed("/").content, Content::Hello);
        assert_eq!(routed("/healthz").content, Content::Health);
        assert_eq!(routed("/stats").content, Content::Stats);
        assert_eq!(routed("/echo").content, Content::Echo);
        assert_eq!(routed("/echo/a/b?x=1").content, Content::Echo);
        assert_eq!(routed("/bytes/100").content, Content::Bytes(100));
        assert_eq!(
            routed("/bytes/99999999999999999999").content,
            Content::Bytes(MAX_BODY_BYTES)
        );
        let delay = routed("/delay/250");
        assert_eq!((delay.content, delay.delay_ms), (Content::Delay, 250));
        let status = routed("/status/503");
        assert_eq!((status.content, status.status), (Content::Status, 503));
        let missing = routed("/nothing");
        assert_eq!((missing.content, missing.status), (Content::NotFound, 404));
    }

    #[test]
    fn query_parameters_combine() {
        let plan = routed("/bytes/100?delay=50&chunked=1&other");
        assert_eq!(
            plan,
            Plan {
                status: 200,
                content: Content::Bytes(100),
                chunked: true,
                delay_ms: 50,
                max_age: None,
            }
        );
        assert_eq!(routed("/bytes/1?max_age=3600").max_age, Some(3600));
        let plan = routed("/?status=201&bytes=7");
        assert_eq!((plan.status, plan.content), (201, Content::Bytes(7)));
    }

    #[test]
    fn absolute_form() {
        assert_eq!(
            routed("http://example.com:8080/bytes/3").content,
            Content::Bytes(3)
        );
        assert_eq!(routed("http://example.com").content, Content::Hello);
        assert_eq!(routed("http://example.com?status=202").status, 202);
    }

    #[test]
    fn refuses_bad_values() {
        assert_eq!(plan(b"/bytes/abc"), Err(RouteError::Number));
        assert_eq!(plan(b"/bytes/"), Err(RouteError::Number));
        assert_eq!(plan(b"/status/600"), Err(RouteError::Status));
        assert_eq!(plan(b"/status/42"), Err(RouteError::Status));
        assert_eq!(plan(b"/?delay=-1"), Err(RouteError::Number));
        assert_eq!(plan(b"/?chunked=yes"), Err(RouteError::Flag));
    }
}
