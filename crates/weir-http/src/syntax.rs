//! Character classes and list syntax from RFC 9110 §5.6 and RFC 3986, used by
//! every parser in the crate. A leaf module.

/// The non-empty elements of a comma-separated list, without optional whitespace.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|element| !element.is_empty())
}

/// A set of field names, compared ASCII case-insensitively: those a `Connection` field
/// lists, asked once for each field of the message. A lookup costs the name's length
/// however many names there are, so a head whose many fields are all listed costs its
/// size, not its square.
#[derive(Debug, Default)]
pub struct FieldNames(std::collections::HashSet<Box<[u8]>>);

impl FieldNames {
    /// The names of the lists in `values` (each a comma-separated list).
    pub fn listed<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> FieldNames {
        let names = values
            .into_iter()
            .flat_map(list_elements)
            .map(|name| name.to_ascii_lowercase().into_boxed_slice())
            .collect();
        FieldNames(names)
    }

    /// Whether `name` is one of them.
    pub fn contains(&self, name: &[u8]) -> bool {
        if self.0.is_empty() {
            return false;
        }
        match name.iter().any(u8::is_ascii_uppercase) {
            true => self.0.contains(name.to_ascii_lowercase().as_slice()),
            false => self.0.contains(name),
        }
    }
}

/// A quality value (RFC 9110 §12.4.2), in thousandths:
/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, ×1000.
pub fn qvalue(text: &[u8]) -> Option<u16> {
    let (whole, fraction) = match text.iter().position(|&b| b == b'.') {
        Some(at) => (&text[..at], &text[at + 1..]),
        None => (text, &b""[..]),
    };
    if whole.len() != 1 || fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value = match whole[0] {
        b'0' => 0u16,
        b'1' if fraction.iter().all(|digit| *digit == b'0') => 1000,
        _ => return None,
    };
    for (index, digit) in fraction.iter().enumerate() {
        value += u16::from(digit - b'0') * [100, 10, 1][index];
    }
    Some(value.min(1000))
}

/// The protocols an `Upgrade` field value lists (RFC 9110 §7.8), each with its name, the
/// part before any `/version`: `websocket/13` gives (`websocket/13`, `websocket`).
pub fn upgrade_protocols(value: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    split_list(value)
        .filter(|protocol| !protocol.is_empty())
        .map(|protocol| {
            let name = protocol.split(|&b| b == b'/').next().unwrap_or(protocol);
            (protocol, name)
        })
}

/// Splits one field value at commas outside quoted strings (a `\"` inside one escapes the
/// quote), trimming each part; empty parts are kept. For lists whose elements may hold
/// quoted strings: `Cache-Control`, `Forwarded` (RFC 9110 section 5.6.1).
pub fn split_list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(value);
    std::iter::from_fn(move || {
        let text = rest?;
        match find_outside_quotes(text, b',') {
            Outside::At(at) => {
                rest = Some(&text[at + 1..]);
                Some(trim_ows(&text[..at]))
            }
            Outside::End { .. } => {
                rest = None;
                Some(trim_ows(text))
            }
        }
    })
}

/// Where [`find_outside_quotes`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outside {
    /// At this position, the separator outside any quoted string.
    At(usize),
    /// At the end, with no separator outside one.
    End {
        /// A quoted string (or an escape in one) is still open there.
        open: bool,
    },
}

/// The first `separator` in `value` outside quoted strings (RFC 9110 §5.6.4: a `\` inside
/// one escapes the next byte).
pub fn find_outside_quotes(value: &[u8], separator: u8) -> Outside {
    let mut quoted = false;
    let mut escaped = false;
    for (at, &byte) in value.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && byte == b'\\' {
            escaped = true;
        } else if byte == b'"' {
            quoted = !quoted;
        } else if byte == separator && !quoted {
            return Outside::At(at);
        }
    }
    Outside::End {
        open: quoted || escaped,
    }
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
    // Every request's Host passes here: one pass over the name, no call for the colon.
    if let [b'[', rest @ ..] = value {
        return is_ip_literal_host(rest);
    }
    let mut rest = value;
    loop {
        let Some(stop) = rest
            .iter()
            .position(|&byte| HOST_CLASS[byte as usize] != PLAIN)
        else {
            return true;
        };
        let (special, tail) = (rest[stop], &rest[stop + 1..]);
        match HOST_CLASS[special as usize] {
            PERCENT => match tail {
                [high, low, after @ ..] if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() => {
                    rest = after
                }
                _ => return false,
            },
            // A port after an empty host (`:80`) is no authority: an `http` URI with an
            // empty host is invalid (RFC 9110 §4.2.1). An empty value is a missing host.
            COLON => return (stop > 0 || rest.len() < value.len()) && is_port(tail),
            _ => return false,
        }
    }
}

/// After `[`: the literal, `]`, then nothing or `:` and a port.
fn is_ip_literal_host(rest: &[u8]) -> bool {
    let Some(close) = memchr::memchr(b']', rest) else {
        return false;
    };
    let port_ok = match &rest[close + 1..] {
        [] => true,
        [b':', port @ ..] => is_port(port),
        _ => false,
    };
    port_ok && is_ip_literal(&rest[..close])
}

/// A port: up to five digits (none at all is allowed, RFC 3986 §3.2.3), at most 65535.
fn is_port(port: &[u8]) -> bool {
    if port.len() > 5 {
        return false;
    }
    let mut number = 0_u32;
    for &digit in port {
        if !digit.is_ascii_digit() {
            return false;
        }
        number = number * 10 + u32::from(digit - b'0');
    }
    number <= 65535
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
                    .all(|&b| matches!(HOST_CLASS[b as usize], PLAIN | COLON))
        }
        _ => {
            std::str::from_utf8(inner).is_ok_and(|text| text.parse::<std::net::Ipv6Addr>().is_ok())
        }
    }
}

/// What a byte of a `Host` value is outside brackets: a reg-name character
/// (unreserved or sub-delims, RFC 3986 §3.2.2), the `%` of an escape, the colon
/// before the port, or nothing a host may hold.
const INVALID: u8 = 0;
const PLAIN: u8 = 1;
const PERCENT: u8 = 2;
const COLON: u8 = 3;

static HOST_CLASS: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = if b.is_ascii_alphanumeric()
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
            ) {
            PLAIN
        } else if b == b'%' {
            PERCENT
        } else if b == b':' {
            COLON
        } else {
            INVALID
        };
        byte += 1;
    }
    table
};

/// tchar (RFC 9110 §5.6.2).
#[inline]
pub const fn is_token_char(b: u8) -> bool {
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

#[cfg(test)]
mod tests {
    use super::upgrade_protocols;

    #[test]
    fn upgrade_lists_protocols_with_their_names() {
        let listed: Vec<_> = upgrade_protocols(b"websocket/13, , h2c,Foo/2 ").collect();
        assert_eq!(
            listed,
            [
                (&b"websocket/13"[..], &b"websocket"[..]),
                (b"h2c", b"h2c"),
                (b"Foo/2", b"Foo"),
            ]
        );
        assert_eq!(upgrade_protocols(b" ,").count(), 0);
    }
}
