//! Checks on single values: addresses, names, hosts, paths, methods, log levels.
//! Each returns the converted value or a message to follow the key path.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Longest name for a virtual server, pool or origin.
const MAX_NAME_LEN: usize = 64;
/// Longest host name (RFC 1035).
const MAX_HOST_LEN: usize = 253;
/// Longest route path prefix and health check path.
const MAX_PATH_LEN: usize = 1024;

/// Parses `IP:port`; the message explains the usual mistakes.
pub(crate) fn socket_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.trim().parse::<SocketAddr>() {
        return Ok(address);
    }
    let mut message = format!("invalid socket address \"{text}\"");
    let bracketed = text.trim().starts_with('[') && text.trim().ends_with(']');
    // An IPv6 zone after `%`: only the interface's index reads as one.
    let zone = text
        .split_once('%')
        .map(|(_, rest)| rest.split(']').next().unwrap_or(rest));
    let hint = match text.rsplit_once(':') {
        _ if zone
            .is_some_and(|zone| zone.is_empty() || !zone.bytes().all(|b| b.is_ascii_digit())) =>
        {
            Some(
                "write an IPv6 zone as the interface's index, like \"[fe80::1%2]:8080\" \
             (`ip link` lists the indexes)",
            )
        }
        _ if bracketed => Some("the port is missing; write it like \"[::1]:8080\""),
        None => Some("the port is missing; write it like \"10.0.0.1:8080\""),
        Some((host, _)) if host.contains(':') && !host.starts_with('[') => {
            Some("put IPv6 addresses in brackets, like \"[::1]:8080\"")
        }
        Some((host, _)) if host.parse::<IpAddr>().is_err() && !host.starts_with('[') => {
            Some("host names are not resolved; write an IP address like \"10.0.0.1:8080\"")
        }
        Some(_) => None,
    };
    if let Some(hint) = hint {
        message.push_str(": ");
        message.push_str(hint);
    }
    Err(message)
}

/// Parses a node's `host:port` where the host is a DNS name (one resolved at run time).
/// `None` when `text` does not read as a name at all (an IP address with a bad port, an
/// IPv6 address without brackets, no port): the caller reports the address error then.
pub(crate) fn host_port(text: &str) -> Option<Result<(String, u16), String>> {
    let (host, port) = text.trim().rsplit_once(':')?;
    if host.contains(':') || host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
        return None;
    }
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    // A last label of digits only is a mistyped IP address, never a name.
    let numeric = |label: &&str| !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit());
    if labels.last().is_some_and(numeric) {
        return Some(Err(format!(
            "invalid address \"{text}\": \"{host}\" is neither an IP address nor a host name"
        )));
    }
    if host.is_empty() || host.len() > MAX_HOST_LEN || !labels.iter().all(|l| host_label(l)) {
        return Some(Err(format!(
            "invalid host name in \"{text}\": write an IP address like \"10.0.0.1:8080\" or a \
             DNS name like \"api.internal:8080\" (letters, digits, '-' and '_' in dot-separated labels)"
        )));
    }
    match port.parse::<u16>() {
        Ok(port) => Some(Ok((host, port))),
        Err(_) => Some(Err(format!(
            "invalid port \"{port}\" in \"{text}\": write a number from 1 to 65535"
        ))),
    }
}

/// A service name for SRV records, `_service._proto.name` (RFC 2782): lower-cased,
/// without a trailing dot.
pub(crate) fn service_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let labels: Vec<&str> = name.split('.').collect();
    let service_form =
        labels.len() >= 3 && labels[0].starts_with('_') && labels[1].starts_with('_');
    if service_form && name.len() <= MAX_HOST_LEN && labels.iter().all(|l| host_label(l)) {
        Ok(name)
    } else {
        Err(format!(
            "invalid service name \"{text}\": write it as SRV records are named, like \
             \"_http._tcp.api.internal\""
        ))
    }
}

/// A name for a virtual server, pool or origin: it shows up in logs, metrics labels
/// and admin URLs, so keep it to a safe alphabet.
pub(crate) fn name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if first_ok && rest_ok && name.len() <= MAX_NAME_LEN {
        Ok(())
    } else {
        Err(format!(
            "invalid name \"{name}\": use 1 to {MAX_NAME_LEN} letters, digits, '-', '_' or '.', \
             starting with a letter or digit"
        ))
    }
}

/// A route's host: lower-cased, without a port, optionally `*.` for subdomains.
pub(crate) fn route_host(text: &str) -> Result<String, String> {
    let host = text.trim().trim_end_matches('.').to_ascii_lowercase();
    if host.starts_with('[') && host.ends_with(']') {
        // Canonical (RFC 5952), as requests' literals are made before they are matched.
        return match host[1..host.len() - 1].parse::<Ipv6Addr>() {
            Ok(address) => Ok(format!("[{address}]")),
            Err(_) => Err(format!("invalid host \"{text}\": not an IPv6 address")),
        };
    }
    if host.parse::<Ipv6Addr>().is_ok() {
        return Err(format!(
            "invalid host \"{text}\": write an IPv6 address in brackets, like \"[{host}]\""
        ));
    }
    if host.contains(':') {
        return Err(format!(
            "invalid host \"{text}\": leave out the port; routes match the host name only"
        ));
    }
    let labels = host.strip_prefix("*.").unwrap_or(&host);
    if host.len() > MAX_HOST_LEN || !labels.split('.').all(host_label) {
        return Err(format!(
            "invalid host \"{text}\": write a host name like \"api.example.com\", or \
             \"*.example.com\" for its subdomains"
        ));
    }
    Ok(host)
}

/// One dot-separated label of a host name as routes and nodes accept it: 1 to 63
/// letters, digits, '-' or '_', not starting or ending with '-'.
fn host_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// An absolute request path (route prefix, health check path).
pub(crate) fn request_path(text: &str) -> Result<(), String> {
    if !text.starts_with('/') {
        return Err(format!("invalid path \"{text}\": must start with \"/\""));
    }
    if text.len() > MAX_PATH_LEN {
        return Err(format!("path is longer than {MAX_PATH_LEN} bytes"));
    }
    if let Some(bad) = text
        .chars()
        .find(|&c| c.is_ascii_control() || c == ' ' || c == '#')
    {
        return Err(format!("invalid path \"{text}\": must not contain {bad:?}"));
    }
    Ok(())
}

/// A rule's `path` (or, with `prefix`, a rule's or a route's `path_prefix`): a request
/// path already in the normalised form rules and routes match against, since one in any other form could
/// never match: no empty, `.` or `..` segment (a prefix's last segment may be
/// the start of a longer one: `/.` covers `/.env`), no escaped unreserved
/// character, escapes in upper case and well formed, no `?` (the query is not
/// the path) and nothing but ASCII (a request carries other bytes escaped).
pub(crate) fn rule_path(text: &str, prefix: bool) -> Result<(), String> {
    request_path(text)?;
    let segments: Vec<&str> = text[1..].split('/').collect();
    let last = segments.len() - 1;
    let odd_segment = segments.iter().enumerate().any(|(index, segment)| {
        let partial = prefix && index == last;
        !partial && (matches!(*segment, "." | "..") || (segment.is_empty() && index < last))
    });
    let bytes = text.as_bytes();
    let mut bad_escape = false;
    for (index, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'%') {
        match bytes.get(index + 1..index + 3) {
            Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => {
                let value =
                    u8::from_str_radix(std::str::from_utf8(hex).unwrap_or("0"), 16).unwrap_or(0);
                let unreserved = value.is_ascii_alphanumeric() || b"-._~".contains(&value);
                bad_escape |= unreserved || hex.iter().any(u8::is_ascii_lowercase);
            }
            // A prefix may end inside an escape; anything else is malformed.
            Some(_) => bad_escape = true,
            None => bad_escape |= !prefix,
        }
    }
    let outside = text.contains('?') || !text.is_ascii();
    if odd_segment || bad_escape || outside {
        return Err(format!(
            "path \"{text}\" can never match: requests are matched on their normalised path (no \"//\", \
             \".\" or \"..\" segment, unreserved characters not percent-encoded, escapes \
             such as %C3%A9 in upper case, no \"?\", only ASCII)"
        ));
    }
    Ok(())
}

/// An HTTP method for a health check: an upper-case token.
pub(crate) fn method(text: &str) -> Result<(), String> {
    if !text.is_empty() && text.len() <= 20 && text.chars().all(|c| c.is_ascii_uppercase()) {
        Ok(())
    } else if text.chars().all(|c| c.is_ascii_alphabetic()) && !text.is_empty() {
        Err(format!(
            "invalid method \"{text}\": methods are case-sensitive; write \"{}\"",
            text.to_ascii_uppercase()
        ))
    } else {
        Err(format!(
            "invalid method \"{text}\": write an HTTP method like \"GET\" or \"HEAD\""
        ))
    }
}

/// A `Host` header value for a health check.
pub(crate) fn host_header(text: &str) -> Result<(), String> {
    if text.is_empty() || text.len() > MAX_HOST_LEN + 6 {
        return Err(format!("invalid host \"{text}\""));
    }
    match text
        .chars()
        .find(|&c| c.is_ascii_control() || c.is_whitespace() || !c.is_ascii())
    {
        Some(bad) => Err(format!("invalid host \"{text}\": must not contain {bad:?}")),
        None => Ok(()),
    }
}

/// A tracing filter: `info`, or directives like `info,weir_proxy=debug`.
pub(crate) fn log_level(text: &str) -> Result<(), String> {
    const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];
    let is_level = |s: &str| LEVELS.iter().any(|level| level.eq_ignore_ascii_case(s));
    let is_target = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':'))
    };
    let directives: Vec<&str> = text.split(',').map(str::trim).collect();
    if directives.iter().all(|d| d.is_empty()) {
        return Err("must not be empty; use \"info\" for the usual level".to_owned());
    }
    for directive in directives.into_iter().filter(|d| !d.is_empty()) {
        let valid = match directive.rsplit_once('=') {
            Some((target, level)) => is_target(target) && is_level(level),
            // A bare target would be a filter of its own (that target at every level,
            // everything else off): a misspelt level ("warning") would silence the log.
            None if is_target(directive) && !is_level(directive) => {
                return Err(format!(
                    "invalid log level \"{text}\": \"{directive}\" is not a level ({}); \
                     a target's level is written target=level, as in \"info,weir_proxy=debug\"",
                    LEVELS.join(", ")
                ));
            }
            None => is_level(directive),
        };
        if !valid {
            return Err(format!(
                "invalid log level \"{text}\": write a level ({}) or directives like \
                 \"info,weir_proxy=debug\"",
                LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

/// Whether two listen addresses cannot both be bound: the same address, or the same
/// port where one side is the wildcard of the same family.
pub fn listeners_clash(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() != b.port() || a.port() == 0 {
        return false;
    }
    a.ip() == b.ip()
        || (a.is_ipv4() == b.is_ipv4() && (a.ip().is_unspecified() || b.ip().is_unspecified()))
}

/// Renders a duration the way the file writes it.
pub(crate) fn show_duration(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// Renders a byte count with the largest binary unit that divides it.
pub(crate) fn show_size(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

/// Fields weir manages itself on responses: setting them would break framing or the
/// connection (`Via`, last, is weir's to write).
pub(crate) const MANAGED_RESPONSE_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "via",
];

/// Fields weir manages itself on requests: those that frame the message or the
/// connection: the response's list without `Via`.
pub(crate) const MANAGED_REQUEST_HEADERS: &[&str] = MANAGED_RESPONSE_HEADERS
    .split_at(MANAGED_RESPONSE_HEADERS.len() - 1)
    .0;

/// Besides those, the request fields weir writes itself (Host, the forwarded fields).
const WRITTEN_REQUEST_HEADERS: &[&str] = &[
    "host",
    "x-forwarded-for",
    "x-forwarded-proto",
    "forwarded",
    "via",
];

/// A header name a setting makes weir write on every request to a node (the request id,
/// the client certificate's subject): a token, and none of the fields that frame the
/// message or that weir writes itself, which a second value would make ambiguous (two
/// `Content-Length`s, a `Transfer-Encoding` beside one: a smuggled request), in either
/// spelling: CGI, WSGI and PHP read `X_Forwarded_For` as `X-Forwarded-For`, and a client's
/// value weir keeps under that name (its request id) would reach them as that field.
pub(crate) fn added_request_header(name: &str) -> Result<(), String> {
    if !is_token(name) {
        return Err(format!("\"{name}\" is not a valid header name"));
    }
    let lower = name.to_ascii_lowercase().replace('_', "-");
    if MANAGED_REQUEST_HEADERS.contains(&lower.as_str())
        || WRITTEN_REQUEST_HEADERS.contains(&lower.as_str())
    {
        return Err(format!(
            "{name} is a field weir frames the request with or writes itself; choose \
             another name"
        ));
    }
    Ok(())
}

/// An HTTP token (a header name).
pub(crate) fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte))
}

/// A TLS server name: a DNS name (letters, digits, `-`, dots; `*.` first for a
/// wildcard) or an IP address.
pub(crate) fn server_name(text: &str) -> Result<(), String> {
    let text = text.trim();
    if text.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let name = text.strip_prefix("*.").unwrap_or(text);
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        });
    if valid {
        Ok(())
    } else {
        Err(format!("\"{text}\" is not a valid DNS name or IP address"))
    }
}

/// An IP network, `10.0.0.0/8` or `2001:db8::/32`, or one address (a /32 or /128).
/// Host bits must be clear, so a mistyped prefix is caught.
pub(crate) fn cidr(text: &str) -> Result<crate::model::Cidr, String> {
    let network: crate::model::Cidr = text.parse()?;
    let prefix = network.prefix();
    let masked = match network.address() {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    };
    if masked != network.address() {
        return Err(format!(
            "\"{}\" has host bits set; did you mean \"{masked}/{prefix}\"?",
            text.trim()
        ));
    }
    Ok(network)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request's list is the response's without `Via`, and `Via` is its last entry.
    #[test]
    fn managed_fields() {
        assert_eq!(MANAGED_RESPONSE_HEADERS.last(), Some(&"via"));
        assert_eq!(
            MANAGED_REQUEST_HEADERS.len(),
            MANAGED_RESPONSE_HEADERS.len() - 1
        );
        assert!(!MANAGED_REQUEST_HEADERS.contains(&"via"));
        assert!(MANAGED_REQUEST_HEADERS.contains(&"content-length"));
    }

    #[test]
    fn networks() {
        let network = cidr("10.0.0.0/8").unwrap();
        assert!(network.contains("10.9.8.7".parse().unwrap()));
        assert!(network.contains("::ffff:10.1.1.1".parse().unwrap()));
        assert!(!network.contains("11.0.0.1".parse().unwrap()));
        assert!(
            cidr("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        let one = cidr("192.0.2.1").unwrap();
        assert_eq!(one.prefix(), 32);
        assert!(!one.contains("192.0.2.2".parse().unwrap()));
        let v6 = cidr("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:1::5".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        assert!(
            cidr("10.1.0.0/8")
                .unwrap_err()
                .contains("did you mean \"10.0.0.0/8\"")
        );
        assert!(cidr("10.0.0.0/33").is_err());
        assert!(cidr("example.com").is_err());
    }

    #[test]
    fn socket_addresses() {
        assert!(socket_addr("127.0.0.1:8080").is_ok());
        assert!(socket_addr("[::1]:8080").is_ok());
        assert_eq!(
            socket_addr("10.0.0.1:99999").unwrap_err(),
            "invalid socket address \"10.0.0.1:99999\""
        );
        assert!(
            socket_addr("10.0.0.1")
                .unwrap_err()
                .contains("port is missing")
        );
        assert!(
            socket_addr("[::1]")
                .unwrap_err()
                .contains("port is missing; write it like \"[::1]:8080\"")
        );
        assert!(
            socket_addr("backend:80")
                .unwrap_err()
                .contains("host names")
        );
        assert!(socket_addr("::1:80").unwrap_err().contains("brackets"));
        // A link-local address with its zone: the index reads, an interface name does not.
        assert!(socket_addr("[fe80::1%2]:8080").is_ok());
        for named in ["[fe80::1%eth0]:8080", "[fe80::1%eth0]", "[fe80::1%]:8080"] {
            assert!(
                socket_addr(named)
                    .unwrap_err()
                    .contains("interface's index"),
                "{named}"
            );
        }
    }

    #[test]
    fn names() {
        assert!(name("web").is_ok());
        assert!(name("web-2.eu_west").is_ok());
        assert!(name("").is_err());
        assert!(name("-web").is_err());
        assert!(name("my pool").is_err());
        assert!(name(&"a".repeat(65)).is_err());
    }

    #[test]
    fn route_hosts() {
        assert_eq!(route_host("API.Example.com").unwrap(), "api.example.com");
        assert_eq!(route_host("example.com.").unwrap(), "example.com");
        assert_eq!(route_host("*.example.com").unwrap(), "*.example.com");
        assert_eq!(route_host("[::1]").unwrap(), "[::1]");
        assert!(route_host("example.com:8080").unwrap_err().contains("port"));
        assert!(route_host("*").is_err());
        assert!(route_host("a.*.com").is_err());
        assert!(route_host("exa mple.com").is_err());
        assert!(route_host("").is_err());
    }

    #[test]
    fn paths_methods_hosts() {
        assert!(request_path("/api/").is_ok());
        assert!(request_path("api").is_err());
        assert!(request_path("/a b").is_err());
        assert!(method("GET").is_ok());
        assert!(method("get").unwrap_err().contains("\"GET\""));
        assert!(method("G T").is_err());
        assert!(host_header("health.local:8080").is_ok());
        assert!(host_header("a b").is_err());
    }

    #[test]
    fn log_levels() {
        assert!(log_level("info").is_ok());
        assert!(log_level("WARN").is_ok());
        assert!(log_level("info,weir_proxy=debug").is_ok());
        assert!(log_level("weir::access=off").is_ok());
        assert!(log_level("").is_err());
        assert!(log_level("weir=loud").is_err());
        assert!(log_level("info debug").is_err());
        // A misspelt level is not taken for a target (which would turn the log off).
        for wrong in ["warning", "zzz", "-1s", "weir_proxy", "info,weir_proxy"] {
            let error = log_level(wrong).unwrap_err();
            assert!(error.contains("is not a level"), "{wrong}: {error}");
        }
    }

    #[test]
    fn clashes() {
        let a: SocketAddr = "127.0.0.1:80".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:80".parse().unwrap();
        let other_port: SocketAddr = "127.0.0.1:81".parse().unwrap();
        let v6: SocketAddr = "[::1]:80".parse().unwrap();
        let ephemeral: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert!(listeners_clash(a, a));
        assert!(listeners_clash(a, any));
        assert!(!listeners_clash(a, other_port));
        assert!(!listeners_clash(any, v6));
        assert!(!listeners_clash(ephemeral, ephemeral));
    }

    #[test]
    fn shown_sizes() {
        assert_eq!(show_size(16 * 1024), "16KiB");
        assert_eq!(show_size(1 << 20), "1MiB");
        assert_eq!(show_size(1500), "1500B");
    }
}
