//! What rules read from a request head: the host without its port, the query,
//! one query parameter or cookie, and the path normalised for matching.

use std::borrow::Cow;

use weir_http::RequestHead;

/// The `Host` (or absolute-form authority) without port or trailing dot.
pub fn host(head: &RequestHead) -> &[u8] {
    let host = head.host().unwrap_or_default();
    let host = if host.first() == Some(&b'[') {
        match memchr::memchr(b']', host) {
            Some(end) => &host[..=end],
            None => host,
        }
    } else {
        match memchr::memrchr(b':', host) {
            Some(colon) => &host[..colon],
            None => host,
        }
    };
    host.strip_suffix(b".").unwrap_or(host)
}

/// The host as rules and routes match it: [`host`], with an IPv6 literal in its
/// canonical form (RFC 5952: `[0:0::1]` is `[::1]`), as the config's are.
/// Borrowed unless the request spelled a literal otherwise.
pub fn match_host(head: &RequestHead) -> Cow<'_, [u8]> {
    canonical_host(host(head))
}

/// `host` with a bracketed IPv6 literal in canonical form; anything else as is.
pub fn canonical_host(host: &[u8]) -> Cow<'_, [u8]> {
    let Some(inner) = host.strip_prefix(b"[").and_then(|h| h.strip_suffix(b"]")) else {
        return Cow::Borrowed(host);
    };
    let Some(address) = std::str::from_utf8(inner)
        .ok()
        .and_then(|text| text.parse::<std::net::Ipv6Addr>().ok())
    else {
        return Cow::Borrowed(host);
    };
    let canonical = format!("[{address}]");
    match canonical.as_bytes() == host {
        true => Cow::Borrowed(host),
        false => Cow::Owned(canonical.into_bytes()),
    }
}

/// The query string without `?` (empty when there is none).
pub fn query(head: &RequestHead) -> &[u8] {
    let target = head.target();
    match memchr::memchr(b'?', target) {
        Some(mark) => &target[mark + 1..],
        None => b"",
    }
}

/// The path and query as a node would get them (origin form): an absolute-form target
/// without its scheme and authority, `/` before a query that follows the authority.
pub fn uri(head: &RequestHead) -> Cow<'_, [u8]> {
    let rest = head.path_and_query();
    match rest.first() {
        Some(b'?') => {
            let mut uri = Vec::with_capacity(rest.len() + 1);
            uri.push(b'/');
            uri.extend_from_slice(rest);
            Cow::Owned(uri)
        }
        // `http://host`: its path is `/`.
        None => Cow::Borrowed(head.path()),
        _ => Cow::Borrowed(rest),
    }
}

/// The path and query as rules see them: [`normalized_path`], then the query
/// as sent. Borrowed when the path is already normal.
pub fn normalized_uri(head: &RequestHead) -> Cow<'_, [u8]> {
    match normalized_path(head.path()) {
        Cow::Borrowed(_) => uri(head),
        Cow::Owned(mut path) => {
            let query = query(head);
            if !query.is_empty() || head.target().ends_with(b"?") {
                path.push(b'?');
                path.extend_from_slice(query);
            }
            Cow::Owned(path)
        }
    }
}

/// The first value of query parameter `name` (not percent-decoded).
pub fn query_param<'h>(head: &'h RequestHead, name: &str) -> Option<&'h [u8]> {
    query(head).split(|&b| b == b'&').find_map(|pair| {
        let (key, value) = match memchr::memchr(b'=', pair) {
            Some(eq) => (&pair[..eq], &pair[eq + 1..]),
            None => (pair, &b""[..]),
        };
        (key == name.as_bytes()).then_some(value)
    })
}

/// Every value of query parameter `name`, as an application reads it: names and values
/// percent-decoded, `+` as a space (`application/x-www-form-urlencoded`). A condition
/// tests all of them, so neither `?debug=%31` nor `?debug=0&debug=1` slips past a rule
/// about `debug=1`.
pub fn query_values<'h, 'n>(
    head: &'h RequestHead,
    name: &'n str,
) -> impl Iterator<Item = Cow<'h, [u8]>> + use<'h, 'n> {
    query(head).split(|&b| b == b'&').filter_map(move |pair| {
        let (key, value) = match memchr::memchr(b'=', pair) {
            Some(eq) => (&pair[..eq], &pair[eq + 1..]),
            None => (pair, &b""[..]),
        };
        (form_decoded(key).as_ref() == name.as_bytes()).then(|| form_decoded(value))
    })
}

/// `value` with `%XX` decoded and `+` read as a space; borrowed when it has neither.
fn form_decoded(value: &[u8]) -> Cow<'_, [u8]> {
    decoded(value, true)
}

/// `value` with `%XX` decoded (a `+` stays); borrowed when it has no escape.
pub(crate) fn percent_decoded(value: &[u8]) -> Cow<'_, [u8]> {
    decoded(value, false)
}

/// `value` with `%XX` decoded, and `+` read as a space when `plus_is_space`;
/// borrowed when there is nothing to decode.
fn decoded(value: &[u8], plus_is_space: bool) -> Cow<'_, [u8]> {
    if !value
        .iter()
        .any(|&b| b == b'%' || (plus_is_space && b == b'+'))
    {
        return Cow::Borrowed(value);
    }
    let mut out = Vec::with_capacity(value.len());
    let mut index = 0;
    while index < value.len() {
        match value[index] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' if let Some(decoded) = value.get(index + 1..index + 3).and_then(hex_pair) => {
                out.push(decoded);
                index += 3;
                continue;
            }
            byte => out.push(byte),
        }
        index += 1;
    }
    Cow::Owned(out)
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'h>(head: &'h RequestHead, name: &str) -> Option<&'h [u8]> {
    head.headers()
        .filter(|(field, _)| field.eq_ignore_ascii_case(b"cookie"))
        .find_map(|(_, value)| cookie_in(value, name))
}

/// Every value of cookie `name`, over every `Cookie` line, as applications read them:
/// `role=user; role=admin` holds two, and a rule on either sees it. See [`as_read`].
pub fn cookie_values<'h, 'n>(
    head: &'h RequestHead,
    name: &'n str,
) -> impl Iterator<Item = Cow<'h, [u8]>> + use<'h, 'n> {
    head.headers()
        .filter(|(field, _)| field.eq_ignore_ascii_case(b"cookie"))
        .flat_map(|(_, value)| value.split(|&b| b == b';'))
        .filter_map(move |pair| {
            cookie_named(pair, name).map(|(value, quoted)| as_read(value, quoted))
        })
}

/// The value of cookie `name` in one `Cookie` header value (`a=1; b=2`).
pub fn cookie_in<'v>(value: &'v [u8], name: &str) -> Option<&'v [u8]> {
    value
        .split(|&b| b == b';')
        .find_map(|pair| cookie_named(pair, name).map(|(value, _)| value))
}

/// The value of one `name=value` pair of a `Cookie` line (quotes taken off, and whether
/// there were any) when its name is `name`.
fn cookie_named<'v>(pair: &'v [u8], name: &str) -> Option<(&'v [u8], bool)> {
    let pair = trim_cookie(pair);
    let eq = memchr::memchr(b'=', pair)?;
    // Applications read `role= admin` as `admin` (Python's http.cookies, Werkzeug): so do
    // rules, or a space would step around one.
    let value = trim_cookie(&pair[eq + 1..]);
    let unquoted = value
        .strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""));
    (trim_cookie(&pair[..eq]) == name.as_bytes())
        .then_some((unquoted.unwrap_or(value), unquoted.is_some()))
}

/// A cookie's value as applications read it, so that no other spelling of a value steps
/// around a rule on it or takes a bucket of its own: in a quoted value, `\NNN` (octal) and
/// `\c` unescaped as Python's `http.cookies` and Werkzeug do; `%XX` decoded; then the
/// whitespace around it taken off as `str.strip` takes it off (the Unicode spaces of a value
/// in UTF-8, as Django and Werkzeug decode it, or those of Latin-1 where it is not UTF-8).
fn as_read(value: &[u8], quoted: bool) -> Cow<'_, [u8]> {
    if quoted && value.contains(&b'\\') {
        let unescaped = unescaped(value);
        return Cow::Owned(trim_cookie(&percent_decoded(&unescaped)).to_vec());
    }
    match percent_decoded(value) {
        Cow::Borrowed(value) => Cow::Borrowed(trim_cookie(value)),
        Cow::Owned(value) => Cow::Owned(trim_cookie(&value).to_vec()),
    }
}

/// A quoted cookie value's backslash escapes undone: `\` and three octal digits (up to
/// `\377`) is that byte, `\` and any other byte is that byte.
fn unescaped(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut index = 0;
    while index < value.len() {
        if value[index] != b'\\' || index + 1 == value.len() {
            out.push(value[index]);
            index += 1;
            continue;
        }
        let octal = value
            .get(index + 1..index + 4)
            .filter(|digits| matches!(digits[0], b'0'..=b'3'))
            .filter(|digits| digits.iter().all(|digit| matches!(digit, b'0'..=b'7')));
        match octal {
            Some(digits) => {
                out.push(
                    digits
                        .iter()
                        .fold(0u8, |byte, digit| byte * 8 + (digit - b'0')),
                );
                index += 4;
            }
            None => {
                out.push(value[index + 1]);
                index += 2;
            }
        }
    }
    out
}

/// `bytes` without the whitespace around it that applications strip from a cookie's
/// name and value, as Python's `str.strip` does whichever way they decode it: each end loses
/// characters that are spaces in UTF-8 (as Django and Werkzeug decode a cookie: U+00A0,
/// U+3000 and the like) and, where the bytes there are no UTF-8, single bytes that are
/// spaces in Latin-1 (as WSGI decodes a header: 0x1C–0x1F, 0x85, 0xA0). Invalid bytes
/// elsewhere in the value change neither end; a character whose last byte is 0xA0 (`à`)
/// stays whole.
fn trim_cookie(mut bytes: &[u8]) -> &[u8] {
    while let Some(len) = space_at(bytes, End::Start) {
        bytes = &bytes[len..];
    }
    while let Some(len) = space_at(bytes, End::End) {
        bytes = &bytes[..bytes.len() - len];
    }
    bytes
}

#[derive(Clone, Copy)]
enum End {
    Start,
    End,
}

/// The length of the space at `end` of `bytes`: the UTF-8 character there when it is
/// one, else its one byte read as Latin-1; `None` when that is no space.
fn space_at(bytes: &[u8], end: End) -> Option<usize> {
    let python_space = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
    let edge = match end {
        End::Start => *bytes.first()?,
        End::End => *bytes.last()?,
    };
    if edge.is_ascii() {
        return python_space(char::from(edge)).then_some(1);
    }
    for len in 2..=bytes.len().min(4) {
        let candidate = match end {
            End::Start => &bytes[..len],
            End::End => &bytes[bytes.len() - len..],
        };
        if let Ok(text) = std::str::from_utf8(candidate) {
            return text
                .chars()
                .next()
                .filter(|&c| python_space(c))
                .map(|_| len);
        }
    }
    python_space(char::from(edge)).then_some(1)
}

/// The path as rules match it: percent-encoded unreserved characters decoded,
/// `.` and `..` segments resolved and repeated slashes merged, so `/%61dmin`,
/// `/./admin` and `//admin` all match rules for `/admin`. Borrowed (no
/// allocation) when the path is already in that form, which is the usual case.
pub fn normalized_path(path: &[u8]) -> Cow<'_, [u8]> {
    let needs_work = memchr::memchr(b'%', path).is_some()
        || memchr::memmem::find(path, b"//").is_some()
        || memchr::memmem::find(path, b"/.").is_some();
    if !needs_work {
        return Cow::Borrowed(path);
    }
    let decoded = decode_unreserved(path);
    let mut out: Vec<u8> = Vec::with_capacity(decoded.len());
    for segment in decoded.split(|&b| b == b'/').skip(1) {
        match segment {
            b"" | b"." => {}
            b".." => {
                let cut = memchr::memrchr(b'/', &out).unwrap_or(0);
                out.truncate(cut);
            }
            _ => {
                out.push(b'/');
                out.extend_from_slice(segment);
            }
        }
    }
    // Keep a trailing slash (or a final dot segment, which names a directory).
    let ends_as_directory =
        decoded.ends_with(b"/") || decoded.ends_with(b"/.") || decoded.ends_with(b"/..");
    if out.is_empty() || ends_as_directory {
        out.push(b'/');
    }
    Cow::Owned(out)
}

/// Decodes `%XX` only where it stands for an unreserved character (RFC 3986
/// §2.3), which means the same decoded or not; `%2F` and the like stay, with
/// their hex digits in upper case (§6.2.2.1: `%c3%a9` is `%C3%A9`).
fn decode_unreserved(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    let mut index = 0;
    while index < path.len() {
        let byte = path[index];
        if byte == b'%'
            && let Some(decoded) = path.get(index + 1..index + 3).and_then(hex_pair)
        {
            if decoded.is_ascii_alphanumeric() || b"-._~".contains(&decoded) {
                out.push(decoded);
            } else {
                out.push(b'%');
                out.push(path[index + 1].to_ascii_uppercase());
                out.push(path[index + 2].to_ascii_uppercase());
            }
            index += 3;
            continue;
        }
        out.push(byte);
        index += 1;
    }
    out
}

fn hex_pair(pair: &[u8]) -> Option<u8> {
    let digit = |b: u8| (b as char).to_digit(16);
    Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::head;

    #[test]
    fn escapes_that_stay_are_upper_case() {
        assert_eq!(&normalized_path(b"/caf%c3%a9")[..], b"/caf%C3%A9");
        assert_eq!(&normalized_path(b"/caf%C3%a9/%61")[..], b"/caf%C3%A9/a");
        assert_eq!(&normalized_path(b"/a%2fb")[..], b"/a%2Fb");
    }

    #[test]
    fn host_query_cookie() {
        let request = head(
            "GET /a/b?x=1&lang=fr&e HTTP/1.1\r\nHost: Example.com:8080\r\nCookie: a=1; sid=\"abc\"\r\nCookie: c=3\r\n\r\n",
        );
        assert_eq!(host(&request), b"Example.com");
        assert_eq!(query(&request), b"x=1&lang=fr&e");
        assert_eq!(&uri(&request)[..], b"/a/b?x=1&lang=fr&e");
        assert_eq!(query_param(&request, "lang"), Some(&b"fr"[..]));
        assert_eq!(query_param(&request, "e"), Some(&b""[..]));
        assert_eq!(query_param(&request, "l"), None);
        assert_eq!(cookie(&request, "sid"), Some(&b"abc"[..]));
        assert_eq!(cookie(&request, "c"), Some(&b"3"[..]));
        assert_eq!(cookie(&request, "s"), None);
        // Whitespace around the value is not part of it.
        for line in [
            "role= admin",
            "role=\tadmin",
            "role =admin ",
            "role= \"admin\"",
        ] {
            let request = head(&format!(
                "GET / HTTP/1.1\r\nHost: a\r\nCookie: {line}\r\n\r\n"
            ));
            assert_eq!(cookie(&request, "role"), Some(&b"admin"[..]), "{line}");
        }
        // NO-BREAK SPACE and NEL, which Werkzeug strips from the Latin-1 header WSGI gives.
        for line in [
            &b"role=\xa0admin"[..],
            b"role=\x85admin",
            b"role=admin\xa0",
            b"role\xa0=admin",
        ] {
            let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\nCookie: ".to_vec();
            raw.extend_from_slice(line);
            raw.extend_from_slice(b"\r\n\r\n");
            let request = crate::test_support::head_bytes(&raw);
            assert_eq!(
                cookie(&request, "role"),
                Some(&b"admin"[..]),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // As applications read the value (Werkzeug, Django): Unicode spaces of a value in
        // UTF-8, and a quoted value's backslash escapes, are no other spelling.
        let values = |line: &[u8]| -> Vec<Vec<u8>> {
            let mut raw = b"GET / HTTP/1.1\r\nHost: a\r\nCookie: ".to_vec();
            raw.extend_from_slice(line);
            raw.extend_from_slice(b"\r\n\r\n");
            let request = crate::test_support::head_bytes(&raw);
            cookie_values(&request, "role")
                .map(|value| value.into_owned())
                .collect()
        };
        for line in [
            &b"role=admin\xc2\xa0"[..],
            b"role=\xc2\xa0admin",
            b"role=admin\xe2\x80\x83",
            b"role=\xe3\x80\x80admin",
            b"role=admin\xc2\x85",
            b"role=\"\\141dmin\"",
            b"role=\"ad\\min\"",
            b"role=\"\\a\\d\\m\\i\\n\"",
            b"role=%61dmin",
        ] {
            assert_eq!(
                values(line),
                [b"admin".to_vec()],
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // A character whose last byte is 0xA0 or 0x85 keeps it; unquoted, a backslash is
        // the value's own.
        assert_eq!(
            values("role=voilà".as_bytes()),
            ["voilà".as_bytes().to_vec()]
        );
        assert_eq!(values(b"role=ad\\min"), [b"ad\\min".to_vec()]);
        // An invalid byte elsewhere leaves the ends to be read as they are.
        assert_eq!(
            values(b"role=\xe3\x80\x80admin\xff"),
            [b"admin\xff".to_vec()]
        );
        assert_eq!(
            values(b"role=\xc2\xa0admin\xff\xe2\x80\x83"),
            [b"admin\xff".to_vec()]
        );
        assert_eq!(values(b"role=\xa0admin\x85"), [b"admin".to_vec()]);
        let v6 = head("GET http://[::1]:80/p?q HTTP/1.1\r\nHost: [::1]:80\r\n\r\n");
        assert_eq!(host(&v6), b"[::1]");
        assert_eq!(&uri(&v6)[..], b"/p?q");
    }

    /// The path is found after the authority, not wherever its bytes first appear in the
    /// target (`/r2/` is also in `http://r2/r2/`).
    #[test]
    fn uri_of_absolute_form_targets() {
        let uri_of = |target: &str, host: &str| -> Vec<u8> {
            let request = head(&format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
            uri(&request).into_owned()
        };
        assert_eq!(uri_of("http://r2/r2/?q=1", "r2"), b"/r2/?q=1");
        assert_eq!(uri_of("http://example.com/e", "example.com"), b"/e");
        assert_eq!(uri_of("http://a/", "a"), b"/");
        assert_eq!(uri_of("http://a", "a"), b"/");
        assert_eq!(uri_of("http://a?x=/a", "a"), b"/?x=/a");
        assert_eq!(uri_of("http://a/?x", "a"), b"/?x");
        assert_eq!(uri_of("/o?p", "a"), b"/o?p");
        let star = head("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(&uri(&star)[..], b"*");
    }

    #[test]
    fn query_values_are_every_value_decoded() {
        let values = |target: &str, name: &'static str| -> Vec<String> {
            let request = head(&format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"));
            query_values(&request, name)
                .map(|value| String::from_utf8_lossy(&value).into_owned())
                .collect()
        };
        assert_eq!(values("/e?debug=1", "debug"), ["1"]);
        assert_eq!(values("/e?debug=%31", "debug"), ["1"]);
        assert_eq!(values("/e?debug=0&debug=1", "debug"), ["0", "1"]);
        assert_eq!(values("/e?%64ebug=1", "debug"), ["1"]);
        assert_eq!(values("/e?q=a+b%20c&q", "q"), ["a b c", ""]);
        assert_eq!(values("/e?q=%zz%4", "q"), ["%zz%4"]);
        assert!(values("/e?debugx=1", "debug").is_empty());
    }

    #[test]
    fn paths_are_normalised_for_matching() {
        let cases: &[(&str, &str)] = &[
            ("/plain/path", "/plain/path"),
            ("/%61dmin", "/admin"),
            ("/a/./b/../c", "/a/c"),
            ("//admin//x", "/admin/x"),
            ("/a/%2F/b", "/a/%2F/b"),
            ("/../../etc", "/etc"),
            ("/a/b/", "/a/b/"),
            ("/a/..", "/"),
            ("/%7euser/%", "/~user/%"),
        ];
        for (raw, want) in cases {
            assert_eq!(
                normalized_path(raw.as_bytes()).as_ref(),
                want.as_bytes(),
                "normalising {raw}"
            );
        }
        assert!(matches!(normalized_path(b"/plain"), Cow::Borrowed(_)));
    }
}
