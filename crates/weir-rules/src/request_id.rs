//! The request id: a valid one from the client kept, otherwise a fresh
//! 128-bit random id in hex. Pure functions: [`request_id`] gives the id at once;
//! the pipeline takes [`incoming_request_id`] before the rules and generates an id
//! only when something uses one (the rules' `${request_id}` among them).

use weir_config::RequestIdSettings;
use weir_http::RequestHead;

/// Longest incoming id kept; longer ones are replaced.
pub const MAX_INCOMING_LEN: usize = 128;

/// A request id, kept inline (no allocation for generated ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId {
    bytes: [u8; MAX_INCOMING_LEN],
    len: u8,
    /// Taken from the request rather than generated.
    pub propagated: bool,
}

impl RequestId {
    /// The id as text (always ASCII).
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored (see `valid_incoming` and `generate`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }

    /// A fresh id: 32 lower-case hex digits from the thread's CSPRNG.
    pub fn generate() -> RequestId {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let value: u128 = rand::random();
        let mut bytes = [0; MAX_INCOMING_LEN];
        for (index, byte) in bytes[..32].iter_mut().enumerate() {
            *byte = HEX[((value >> (124 - 4 * index)) & 0xf) as usize];
        }
        RequestId {
            bytes,
            len: 32,
            propagated: false,
        }
    }

    fn from_ascii(text: &[u8], propagated: bool) -> RequestId {
        let len = text.len().min(MAX_INCOMING_LEN);
        let mut bytes = [0; MAX_INCOMING_LEN];
        bytes[..len].copy_from_slice(&text[..len]);
        RequestId {
            bytes,
            len: len as u8,
            propagated,
        }
    }
}

/// The request's id: the incoming header's value when trusted and valid,
/// otherwise a generated one. `None` when request ids are turned off.
pub fn request_id(settings: &RequestIdSettings, head: &RequestHead) -> Option<RequestId> {
    if !settings.enabled {
        return None;
    }
    Some(incoming_request_id(settings, head).unwrap_or_else(RequestId::generate))
}

/// The incoming header's value, when ids are on, the header is trusted and the value
/// valid: what [`request_id`] keeps instead of generating one. The pipeline uses it to
/// generate an id only when something asks for one.
pub fn incoming_request_id(settings: &RequestIdSettings, head: &RequestHead) -> Option<RequestId> {
    if !settings.enabled || !settings.trust_incoming {
        return None;
    }
    head.header(&settings.header)
        .filter(|incoming| valid_incoming(incoming))
        .map(|incoming| RequestId::from_ascii(incoming, true))
}

/// 1 to 128 bytes of letters, digits and `-_.:+=/@`: what request ids in the
/// wild use (UUIDs, hex, base64), and nothing that could be an injection in a
/// log line or a header.
pub fn valid_incoming(value: &[u8]) -> bool {
    !value.is_empty()
        && value.len() <= MAX_INCOMING_LEN
        && value
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"-_.:+=/@".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::head;

    #[test]
    fn generated_ids_are_hex_and_distinct() {
        let settings = RequestIdSettings::default();
        let request = head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let id = request_id(&settings, &request).unwrap();
            assert!(!id.propagated);
            assert_eq!(id.as_str().len(), 32);
            assert!(id.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(seen.insert(id.as_str().to_owned()));
        }
    }

    #[test]
    fn valid_incoming_ids_are_kept_when_trusted() {
        let settings = RequestIdSettings::default();
        let uuid = "6f1c2b1e-2d7e-4b8a-9c1f-0e5a7b3c9d21";
        let request = head(&format!(
            "GET / HTTP/1.1\r\nHost: a\r\nx-request-id: {uuid}\r\n\r\n"
        ));
        let id = request_id(&settings, &request).unwrap();
        assert!(id.propagated);
        assert_eq!(id.as_str(), uuid);

        let untrusted = RequestIdSettings {
            trust_incoming: false,
            ..RequestIdSettings::default()
        };
        assert_ne!(request_id(&untrusted, &request).unwrap().as_str(), uuid);

        for bad in ["a b", "<script>", &"x".repeat(129), "caf\u{e9}"] {
            let request = head(&format!(
                "GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: {bad}\r\n\r\n"
            ));
            let id = request_id(&settings, &request).unwrap();
            assert!(!id.propagated, "{bad:?} must be replaced");
        }
        let off = RequestIdSettings {
            enabled: false,
            ..RequestIdSettings::default()
        };
        assert_eq!(request_id(&off, &request), None);
    }

    #[test]
    fn only_a_trusted_valid_incoming_id_is_taken_without_generating() {
        let settings = RequestIdSettings::default();
        let with = head("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: abc-123\r\n\r\n");
        let id = incoming_request_id(&settings, &with).unwrap();
        assert!(id.propagated);
        assert_eq!(id.as_str(), "abc-123");
        let without = head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(incoming_request_id(&settings, &without), None);
        let invalid = head("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: a b\r\n\r\n");
        assert_eq!(incoming_request_id(&settings, &invalid), None);
        for settings in [
            RequestIdSettings {
                trust_incoming: false,
                ..RequestIdSettings::default()
            },
            RequestIdSettings {
                enabled: false,
                ..RequestIdSettings::default()
            },
        ] {
            assert_eq!(incoming_request_id(&settings, &with), None);
        }
    }
}
