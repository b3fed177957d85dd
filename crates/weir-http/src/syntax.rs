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

/// Host and authority characters: unreserved, sub-delims, `:`, `%`, and the
/// brackets of an IP literal (RFC 3986 §3.2.2). Rejects userinfo (`@`),
/// whitespace and anything that could end or split the authority.
pub(crate) fn is_valid_host(value: &[u8]) -> bool {
    value.iter().all(|&b| HOST_CHARS[b as usize])
}

static HOST_CHARS: [bool; 256] = {
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
                    | b':'
                    | b'%'
                    | b'['
                    | b']'
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
