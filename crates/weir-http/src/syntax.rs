//! Character classes and list syntax from RFC 9110 §5.6 and RFC 3986, used by
//! every parser in the crate. A leaf module.

/// The non-empty elements of a comma-separated list, without optional whitespace.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|element| !element.is_empty())
}

pub(crate) fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// A `Host` value or authority: `uri-host [ ":" port ]` (RFC 9110 §7.2,
/// RFC 3986 §3.2.2): an IP literal in brackets (an IPv6 address or an
/// IPvFuture), or a reg-name (which covers IPv4 addresses), then at most a
/// port of up to five digits, no more than 65535. Rejects userinfo (`@`),
/// whitespace, stray brackets or colons and anything that could end or split
/// the authority, so that what weir routes on is what the node reads.
pub(crate) fn is_valid_host(value: &[u8]) -> bool {
    let (host_ok, port) = match value {
        [b'[', rest @ ..] => {
            let Some(close) = memchr::memchr(b']', rest) else {
                return false;
            };
            let after = &rest[close + 1..];
            let port = match after {
                [] => None,
                [b':', port @ ..] => Some(port),
                _ => return false,
            };
            (is_ip_literal(&rest[..close]), port)
        }
        _ => match memchr::memchr(b':', value) {
            Some(colon) => (is_reg_name(&value[..colon]), Some(&value[colon + 1..])),
            None => (is_reg_name(value), None),
        },
    };
    host_ok && port.is_none_or(is_port)
}

/// A port: up to five digits (none at all is allowed, RFC 3986 §3.2.3), at most 65535.
fn is_port(port: &[u8]) -> bool {
    port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
        && port
            .iter()
            .fold(0_u32, |n, &d| n * 10 + u32::from(d - b'0'))
            <= 65535
}

/// The inside of `[...]`: an IPv6 address, or `v` HEXDIG+ `.` then unreserved,
/// sub-delims or `:` (IPvFuture).
fn is_ip_literal(inner: &[u8]) -> bool {
    match inner {
        [b'v' | b'V', rest @ ..] => {
            let Some(dot) = memchr::memchr(b'.', rest) else {
                return false;
            };
            let (version, tail) = (&rest[..dot], &rest[dot + 1..]);
            !version.is_empty()
                && version.iter().all(u8::is_ascii_hexdigit)
                && !tail.is_empty()
                && tail
                    .iter()
                    .all(|&b| b == b':' || (REG_NAME_CHARS[b as usize] && b != b'%'))
        }
        _ => {
            std::str::from_utf8(inner).is_ok_and(|text| text.parse::<std::net::Ipv6Addr>().is_ok())
        }
    }
}

/// reg-name (RFC 3986 §3.2.2): unreserved, sub-delims and `%` with two hex digits.
fn is_reg_name(name: &[u8]) -> bool {
    let mut i = 0;
    while i < name.len() {
        let b = name[i];
        if !REG_NAME_CHARS[b as usize] {
            return false;
        }
        if b == b'%' {
            if !name
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

static REG_NAME_CHARS: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
            );
        byte += 1;
    }
    table
};

/// tchar (RFC 9110 §5.6.2).
pub(crate) fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// field-vchar, SP, HTAB or obs-text: what a field value may hold.
pub(crate) fn is_field_value_char(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

/// Field names compared as back ends that map them to variables do: ASCII
/// case-insensitive, with `_` and `-` the same (`X_Client_Subject` is
/// `X-Client-Subject` to CGI, WSGI and PHP).
pub(crate) fn same_field_name(a: &[u8], b: &[u8]) -> bool {
    let fold = |byte: u8| match byte {
        b'_' => b'-',
        other => other.to_ascii_lowercase(),
    };
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| fold(x) == fold(y))
}
