//! The client address rules and limits see. By default the connection's peer
//! (or its PROXY-protocol address, which the pipeline passes as the peer);
//! behind trusted proxies, the address they report in a forwarding header.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_config::{ClientAddressSource, canonical};
use weir_http::{Outside, RequestHead};

/// The client address for a request from `peer`.
///
/// When `peer` is a trusted proxy, the header's addresses are read from the
/// right (the hop nearest to weir) and the first one that is not itself a
/// trusted proxy is the client. An entry that does not parse ends the walk at
/// the last address that did; when every entry is trusted, the leftmost is
/// the client. A peer that is not trusted is the client whatever it sends.
pub fn client_address(source: &ClientAddressSource, peer: IpAddr, head: &RequestHead) -> IpAddr {
    let peer = canonical(peer);
    let Some(header) = source.header.as_deref() else {
        return peer;
    };
    let trusted = |address: IpAddr| source.trusted_proxies.iter().any(|n| n.contains(address));
    if !trusted(peer) {
        return peer;
    }
    let fields: Vec<&[u8]> = head
        .headers()
        .filter(|(name, _)| name.eq_ignore_ascii_case(header.as_bytes()))
        .map(|(_, value)| value)
        .collect();
    // RFC 7239 `Forwarded`: each element names its client in `for=`.
    let forwarded = header.eq_ignore_ascii_case("forwarded");
    let mut client = peer;
    for entry in fields
        .iter()
        .rev()
        .flat_map(|value| elements(value, forwarded).into_iter().rev())
    {
        let entry = entry.trim_ascii();
        let entry = match forwarded {
            // A quoted string left open (`host="`) swallowed the elements after it, which
            // a trusted proxy added: the element is malformed, and ends the walk.
            true => pairs(entry).and_then(forwarded_for),
            false => Some(entry),
        };
        let Some(address) = entry.and_then(parse_entry) else {
            return client;
        };
        client = canonical(address);
        if !trusted(client) {
            return client;
        }
    }
    client
}

/// The comma-separated elements of one field value; in `Forwarded`, a comma inside a quoted
/// string (`host="a,b"`) is part of its value, not a separator (RFC 7239 section 4).
///
/// Unless a quoted string is still open at the end of the line: then an element a client
/// left open (`host="`, `host="a\"`) would take in every element a trusted proxy appended
/// to the same line, its own included. The line is then read from the comma after which
/// the rest is whole again: that rest is the proxy's elements (which close every quote
/// they open, and may hold commas inside one: `host="a,b"`), and the part before it is one
/// malformed element, which ends the walk if it is reached. The rest is looked for among
/// the last [`RECOVERED_COMMAS`] commas only, so a long line costs a bounded walk.
fn elements(value: &[u8], quoted: bool) -> Vec<&[u8]> {
    if !quoted {
        return value.split(|&b| b == b',').collect();
    }
    if !ends_in_quote(value) {
        return weir_http::split_list(value).collect();
    }
    let whole_after = memchr::memrchr_iter(b',', value)
        .take(RECOVERED_COMMAS)
        .filter(|&comma| !ends_in_quote(&value[comma + 1..]))
        .last();
    match whole_after {
        Some(comma) => std::iter::once(&value[..comma])
            .chain(weir_http::split_list(&value[comma + 1..]))
            .collect(),
        None => vec![value],
    }
}

/// How many of a line's last commas [`elements`] tries as the start of what a trusted
/// proxy appended (a few elements of a few pairs each).
const RECOVERED_COMMAS: usize = 32;

/// Whether a quoted string is open at the end of `value`.
fn ends_in_quote(mut value: &[u8]) -> bool {
    loop {
        match weir_http::find_outside_quotes(value, b',') {
            Outside::At(at) => value = &value[at + 1..],
            Outside::End { open } => return open,
        }
    }
}

/// The `name=value` pairs of one `Forwarded` element, split at semicolons outside quoted
/// strings; `None` when a quoted string is not closed (RFC 7239 section 4), so nothing in
/// a malformed element is read.
fn pairs(mut element: &[u8]) -> Option<Vec<&[u8]>> {
    let mut pairs = Vec::new();
    loop {
        match weir_http::find_outside_quotes(element, b';') {
            Outside::At(at) => {
                pairs.push(&element[..at]);
                element = &element[at + 1..];
            }
            Outside::End { open: true } => return None,
            Outside::End { open: false } => {
                pairs.push(element);
                return Some(pairs);
            }
        }
    }
}

/// The `for=` value of one `Forwarded` element's pairs (`for=192.0.2.60;proto=http`),
/// unquoted (`for="[2001:db8::1]:443"`). An obfuscated or `unknown` node does not parse
/// as an address, which ends the walk like any other entry that does not.
fn forwarded_for(pairs: Vec<&[u8]>) -> Option<&[u8]> {
    pairs.into_iter().find_map(|pair| {
        let pair = pair.trim_ascii();
        let (name, value) = pair.split_at_checked(4)?;
        if !name.eq_ignore_ascii_case(b"for=") {
            return None;
        }
        Some(
            value
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(value),
        )
    })
}

/// `192.0.2.1`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:443` or `192.0.2.1:443`;
/// the port may be obfuscated (`192.0.2.1:_a1`, RFC 7239 section 6.3), for either family.
fn parse_entry(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(entry).ok()?;
    if let Ok(address) = text.parse() {
        return Some(address);
    }
    // Brackets hold an IPv6 address only.
    let (address, port) = match text.strip_prefix('[') {
        Some(rest) => {
            let (address, after) = rest.split_once(']')?;
            let address = IpAddr::V6(address.parse::<Ipv6Addr>().ok()?);
            if after.is_empty() {
                return Some(address);
            }
            (Ok(address), after.strip_prefix(':')?)
        }
        // Without brackets only an IPv4 address takes a port.
        None => {
            let (address, port) = text.rsplit_once(':')?;
            (address.parse::<Ipv4Addr>().map(IpAddr::V4), port)
        }
    };
    let obfuscated = port.strip_prefix('_').is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    });
    // `node-port = port / obfport`, a port being 1 to 5 digits (RFC 7239 section 6).
    let numeric = (1..=5).contains(&port.len())
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok();
    if !(obfuscated || numeric) {
        return None;
    }
    address.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::head;
    use weir_config::Cidr;

    fn source() -> ClientAddressSource {
        ClientAddressSource {
            header: Some("x-forwarded-for".into()),
            trusted_proxies: vec![
                "10.0.0.0/8".parse::<Cidr>().unwrap(),
                "192.168.1.1".parse::<Cidr>().unwrap(),
            ],
        }
    }

    fn from(peer: &str, headers: &str) -> IpAddr {
        let request = head(&format!("GET / HTTP/1.1\r\nHost: a\r\n{headers}\r\n"));
        client_address(&source(), peer.parse().unwrap(), &request)
    }

    /// The client address of a request from the trusted proxy 10.0.0.2 with `headers`,
    /// read from `Forwarded`.
    fn forwarded_from(headers: &str) -> IpAddr {
        let source = ClientAddressSource {
            header: Some("Forwarded".into()),
            ..source()
        };
        let request = head(&format!("GET / HTTP/1.1\r\nHost: a\r\n{headers}\r\n"));
        client_address(&source, "10.0.0.2".parse().unwrap(), &request)
    }

    #[test]
    fn a_quoted_string_left_open_does_not_hide_the_proxys_element() {
        let from = forwarded_from;
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        // A quoted string a client left open must not swallow what a trusted proxy
        // appended on the same line: one line or two, the proxy's element names the
        // client, and the malformed element gives no address when reached.
        for spoof in [
            "for=192.168.7.7;host=\"",
            "for=192.168.7.7;host=\"a\\\"",
            "for=192.168.7.7;host=a\"b",
            "for=192.168.7.7;host=\"a, b",
        ] {
            // The proxy's element holds a comma in a quoted string of its own.
            assert_eq!(
                from(&format!(
                    "Forwarded: {spoof}, for=203.0.113.5;host=\"a,b\";x=\"c, d\"\r\n"
                )),
                ip("203.0.113.5"),
                "{spoof}"
            );
            assert_eq!(
                from(&format!("Forwarded: {spoof}, for=203.0.113.5\r\n")),
                ip("203.0.113.5"),
                "{spoof}"
            );
            assert_eq!(
                from(&format!("Forwarded: {spoof}, for=\"[2001:db8::5]:80\"\r\n")),
                ip("2001:db8::5"),
                "{spoof}"
            );
            assert_eq!(
                from(&format!(
                    "Forwarded: {spoof}\r\nForwarded: for=203.0.113.5\r\n"
                )),
                ip("203.0.113.5"),
                "{spoof}"
            );
            // Behind a second trusted hop the malformed element is reached: the walk
            // ends at the last address that parsed.
            assert_eq!(
                from(&format!("Forwarded: {spoof}, for=10.1.1.1\r\n")),
                ip("10.1.1.1"),
                "{spoof}"
            );
        }
    }

    #[test]
    fn forwarded_names_the_client_in_for() {
        let from = forwarded_from;
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert_eq!(
            from("Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43\r\n"),
            ip("192.0.2.60")
        );
        assert_eq!(
            from(
                "Forwarded: for=198.51.100.17, For=\"[2001:db8:cafe::17]:4711\", for=10.1.1.1\r\n"
            ),
            ip("2001:db8:cafe::17")
        );
        // An obfuscated hop ends the walk at the last address that parsed.
        assert_eq!(
            from("Forwarded: for=203.0.113.9, for=_hidden, for=10.1.1.1\r\n"),
            ip("10.1.1.1")
        );
        assert_eq!(from("Forwarded: proto=https\r\n"), ip("10.0.0.2"));
        // A comma inside a quoted value separates nothing.
        assert_eq!(
            from("Forwarded: for=192.0.2.9;host=\"a,b\"\r\n"),
            ip("192.0.2.9")
        );
        assert_eq!(
            from("Forwarded: for=203.0.113.9;ext=\"x, \\\"y, z\", for=10.1.1.1\r\n"),
            ip("203.0.113.9")
        );
        // A semicolon inside a quoted value separates no pairs.
        assert_eq!(
            from("Forwarded: host=\"x;for=192.168.7.7\";for=203.0.113.5\r\n"),
            ip("203.0.113.5")
        );
        // An obfuscated port hides the port, not the address, for either family.
        assert_eq!(
            from("Forwarded: for=\"198.51.100.7:_abc\"\r\n"),
            ip("198.51.100.7")
        );
        assert_eq!(
            from("Forwarded: for=\"[2001:db8::1]:_x.y-z\"\r\n"),
            ip("2001:db8::1")
        );
        // Up to five digits of port, leading zeros allowed.
        assert_eq!(
            from("Forwarded: for=\"192.0.2.1:00080\"\r\n"),
            ip("192.0.2.1")
        );
        // What follows the brackets is a port or nothing.
        for broken in [
            "for=\"[2001:db8::1]x\"",
            "for=\"[2001:db8::1]:\"",
            "for=\"[2001:db8::1]:_\"",
            "for=\"198.51.100.7:_a/b\"",
            "for=\"[198.51.100.7]\"",
            "for=\"192.0.2.1:+80\"",
            "for=\"192.0.2.1:0000000080\"",
            "for=\"192.0.2.1:65536\"",
            "for=\"2001:db8::1:_a\"",
        ] {
            assert_eq!(
                from(&format!("Forwarded: {broken}\r\n")),
                ip("10.0.0.2"),
                "{broken}"
            );
        }
    }

    #[test]
    fn the_first_untrusted_hop_from_the_right() {
        let xff = "X-Forwarded-For: 1.1.1.1, 203.0.113.9, 10.1.1.1\r\n";
        assert_eq!(
            from("10.0.0.2", xff),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        // Fields are read in order, as if joined with commas.
        let split = "X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 203.0.113.9, 192.168.1.1\r\n";
        assert_eq!(
            from("10.0.0.2", split),
            "203.0.113.9".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            from("::ffff:10.0.0.2", "X-Forwarded-For: [2001:db8::7]:443\r\n"),
            "2001:db8::7".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn untrusted_peers_and_broken_headers() {
        let xff = "X-Forwarded-For: 203.0.113.9\r\n";
        assert_eq!(
            from("198.51.100.1", xff),
            "198.51.100.1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(from("10.0.0.2", ""), "10.0.0.2".parse::<IpAddr>().unwrap());
        let garbage = "X-Forwarded-For: 203.0.113.9, nonsense, 10.0.0.3\r\n";
        assert_eq!(
            from("10.0.0.2", garbage),
            "10.0.0.3".parse::<IpAddr>().unwrap()
        );
        let all_trusted = "X-Forwarded-For: 10.0.0.5, 10.0.0.3\r\n";
        assert_eq!(
            from("10.0.0.2", all_trusted),
            "10.0.0.5".parse::<IpAddr>().unwrap()
        );
        let plain = ClientAddressSource::default();
        let request = head(&format!("GET / HTTP/1.1\r\nHost: a\r\n{xff}\r\n"));
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(client_address(&plain, peer, &request), peer);
    }
}
