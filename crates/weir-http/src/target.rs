//! The four request-target forms (RFC 9112 §3.2) and which method may use
//! each: origin-form for everything but CONNECT, absolute-form (`http`/`https`
//! only), asterisk-form with OPTIONS, authority-form with CONNECT.

use crate::error::ParseError;
use crate::message::Method;
use crate::syntax::is_valid_host;

/// The form of a validated request target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TargetForm {
    /// `/path?query`
    Origin,
    /// `http://authority/path?query`; the span is the authority, relative to the head.
    Absolute { authority: (u32, u32) },
    /// `*`
    Asterisk,
    /// `host:port` (CONNECT); the span is the whole target, relative to the head.
    Authority { authority: (u32, u32) },
}

/// A validated target: its form and the span of its path (without query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) form: TargetForm,
    pub(crate) path: (u32, u32),
}

/// Validates `target`, found at `offset` in the head, for `method`.
pub(crate) fn parse_target(
    target: &[u8],
    offset: u32,
    method: Method,
) -> Result<Target, ParseError> {
    // httparse allows obs-text in the target; the grammar does not.
    if !target.is_ascii() {
        return Err(ParseError::invalid("non-ASCII byte in request target"));
    }
    if memchr::memchr(b'#', target).is_some() {
        return Err(ParseError::invalid("fragment in request target"));
    }
    let at = |position: usize| offset + position as u32;
    let path_end = memchr::memchr(b'?', target).unwrap_or(target.len());
    match target {
        [b'/', ..] => {
            if method == Method::Connect {
                return Err(ParseError::invalid(
                    "CONNECT needs an authority-form target",
                ));
            }
            Ok(Target {
                form: TargetForm::Origin,
                path: (offset, at(path_end)),
            })
        }
        b"*" => {
            if method != Method::Options {
                return Err(ParseError::invalid("asterisk-form target without OPTIONS"));
            }
            Ok(Target {
                form: TargetForm::Asterisk,
                path: (offset, offset + 1),
            })
        }
        _ if method == Method::Connect => {
            if !is_authority_with_port(target) {
                return Err(ParseError::invalid("malformed CONNECT authority"));
            }
            Ok(Target {
                form: TargetForm::Authority {
                    authority: (offset, at(target.len())),
                },
                path: (offset, offset),
            })
        }
        _ => {
            let Some(scheme_len) = scheme_length(target) else {
                return Err(ParseError::invalid("malformed request target"));
            };
            let rest = &target[scheme_len..];
            let authority_len = memchr::memchr2(b'/', b'?', rest).unwrap_or(rest.len());
            let authority = &rest[..authority_len];
            if authority.is_empty() {
                return Err(ParseError::invalid(
                    "absolute-form target without authority",
                ));
            }
            if memchr::memchr(b'@', authority).is_some() {
                return Err(ParseError::invalid("userinfo in request target"));
            }
            if !is_valid_host(authority) {
                return Err(ParseError::invalid("invalid authority in request target"));
            }
            // The authority stops at the first `/` or `?`, so the path (up to
            // the first `?`) starts there; `http://host?q` has an empty path,
            // which `path()` reports as `/`.
            let path_start = scheme_len + authority_len;
            Ok(Target {
                form: TargetForm::Absolute {
                    authority: (at(scheme_len), at(path_start)),
                },
                path: (at(path_start), at(path_end.max(path_start))),
            })
        }
    }
}

/// Whether two authorities (`host[:port]`, both valid) name the same host and port: the
/// host compared without case, a missing or empty port read as `default_port` (RFC 9110
/// §4.2.3: `example.com:80` and `example.com` are one `http` origin).
pub(crate) fn same_authority(a: &[u8], b: &[u8], default_port: u16) -> bool {
    let split = |authority: &[u8]| -> (usize, Option<u32>) {
        match memchr::memrchr(b':', authority) {
            // A colon inside an IPv6 literal's brackets is no port's.
            Some(colon) if !authority[colon..].contains(&b']') => {
                let digits = &authority[colon + 1..];
                let port = digits
                    .iter()
                    .try_fold(0u32, |port, &d| {
                        d.is_ascii_digit()
                            .then(|| port.saturating_mul(10).saturating_add(u32::from(d - b'0')))
                    })
                    .filter(|_| !digits.is_empty());
                (colon, port)
            }
            _ => (authority.len(), None),
        }
    };
    let ((a_end, a_port), (b_end, b_port)) = (split(a), split(b));
    let default = Some(u32::from(default_port));
    a[..a_end].eq_ignore_ascii_case(&b[..b_end]) && a_port.or(default) == b_port.or(default)
}

/// Length of `http://` or `https://` (any case) at the start, if present.
fn scheme_length(target: &[u8]) -> Option<usize> {
    let starts = |prefix: &[u8]| {
        target.len() >= prefix.len() && target[..prefix.len()].eq_ignore_ascii_case(prefix)
    };
    if starts(b"http://") {
        Some(7)
    } else if starts(b"https://") {
        Some(8)
    } else {
        None
    }
}

/// The port of a CONNECT target (`host:port`, checked by [`is_authority_with_port`]); 0
/// for one past 65535, which no Host without a port can then match.
pub(crate) fn authority_port(authority: &[u8]) -> u16 {
    let digits = memchr::memrchr(b':', authority).map_or(&[][..], |colon| &authority[colon + 1..]);
    std::str::from_utf8(digits)
        .ok()
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(0)
}

/// `host:port` with a non-empty host and a 1–5 digit port.
fn is_authority_with_port(target: &[u8]) -> bool {
    let Some(colon) = memchr::memrchr(b':', target) else {
        return false;
    };
    let (host, port) = (&target[..colon], &target[colon + 1..]);
    !host.is_empty()
        && is_valid_host(host)
        && memchr::memchr(b'@', host).is_none()
        && (1..=5).contains(&port.len())
        && port.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(target: &[u8], span: (u32, u32)) -> &[u8] {
        &target[span.0 as usize..span.1 as usize]
    }

    #[test]
    fn origin_form_path_stops_at_query() {
        let target = parse_target(b"/a/b?c=d", 0, Method::Get).unwrap();
        assert_eq!(target.form, TargetForm::Origin);
        assert_eq!(slice(b"/a/b?c=d", target.path), b"/a/b");
    }

    #[test]
    fn absolute_form() {
        let raw = b"HTTP://Example.com:8080/x?y";
        let target = parse_target(raw, 0, Method::Get).unwrap();
        let TargetForm::Absolute { authority } = target.form else {
            panic!("not absolute: {target:?}");
        };
        assert_eq!(slice(raw, authority), b"Example.com:8080");
        assert_eq!(slice(raw, target.path), b"/x");

        let raw = b"https://h?q";
        let target = parse_target(raw, 0, Method::Get).unwrap();
        assert_eq!(slice(raw, target.path), b"");
        let TargetForm::Absolute { authority } = target.form else {
            panic!("not absolute: {target:?}");
        };
        assert_eq!(slice(raw, authority), b"h");
    }

    #[test]
    fn forms_need_their_method() {
        assert!(parse_target(b"*", 0, Method::Options).is_ok());
        assert!(parse_target(b"*", 0, Method::Get).is_err());
        assert!(parse_target(b"example.com:443", 0, Method::Connect).is_ok());
        assert!(parse_target(b"[::1]:443", 0, Method::Connect).is_ok());
        assert!(parse_target(b"example.com:443", 0, Method::Get).is_err());
        assert!(parse_target(b"/", 0, Method::Connect).is_err());
        assert!(parse_target(b"example.com", 0, Method::Connect).is_err());
        assert!(parse_target(b"http://x/", 0, Method::Connect).is_err());
    }

    #[test]
    fn rejects_odd_targets() {
        for bad in [
            &b"ftp://x/"[..],
            b"http:///x",
            b"http://u@x/",
            b"a/b",
            b"/a#b",
            b"/\xc3\xa9",
            b"http://a b/",
        ] {
            assert!(
                parse_target(bad, 0, Method::Get).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
