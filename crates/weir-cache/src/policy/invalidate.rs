//! Invalidation after unsafe methods (RFC 9111 §4.4): a non-error response to
//! a request whose method is not safe invalidates the target URI, and the
//! `Location` and `Content-Location` URIs when they share its origin.

use crate::key::{primary_key, primary_key_of_url};
use crate::view::{RequestView, ResponseView, trim};

/// RFC 9110 §9.2.1.
pub fn is_safe(method: &[u8]) -> bool {
    matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE")
}

/// The primary keys a response to `request` invalidates: none for safe
/// methods or error responses.
pub fn invalidated_keys(request: &impl RequestView, response: &impl ResponseView) -> Vec<Vec<u8>> {
    let status = response.status();
    if is_safe(request.method()) || !(200..400).contains(&status) {
        return Vec::new();
    }
    let mut target = Vec::new();
    if !primary_key(request, &mut target) {
        return Vec::new();
    }
    let origin_end = origin_length(&target);
    let mut keys = vec![target.clone()];
    for field in ["location", "content-location"] {
        let Some(value) = response.header(field) else {
            continue;
        };
        let value = trim(value);
        let key = if value.starts_with(b"/") && !value.starts_with(b"//") {
            let mut key = target[..origin_end].to_vec();
            key.extend_from_slice(value);
            Some(key)
        } else {
            std::str::from_utf8(value).ok().and_then(primary_key_of_url)
        };
        if let Some(key) = key
            && key.len() >= origin_end
            && key[..origin_end] == target[..origin_end]
            && !keys.contains(&key)
        {
            keys.push(key);
        }
    }
    keys
}

/// The length of `scheme://authority` at the start of a primary key.
fn origin_length(key: &[u8]) -> usize {
    let after_scheme = memchr::memmem::find(key, b"://").map_or(0, |at| at + 3);
    memchr::memchr(b'/', &key[after_scheme..]).map_or(key.len(), |at| after_scheme + at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Req, Resp};

    fn keys(method: &str, response: Resp) -> Vec<String> {
        invalidated_keys(&Req::new(method, "/a"), &response)
            .into_iter()
            .map(|key| String::from_utf8(key).unwrap())
            .collect()
    }

    #[test]
    fn invalidation_table() {
        assert!(keys("GET", Resp::new(200)).is_empty());
        assert!(keys("HEAD", Resp::new(200)).is_empty());
        assert!(keys("POST", Resp::new(500)).is_empty());
        assert!(keys("POST", Resp::new(404)).is_empty());
        assert_eq!(keys("POST", Resp::new(200)), ["http://example.com/a"]);
        assert_eq!(keys("DELETE", Resp::new(204)), ["http://example.com/a"]);
        assert_eq!(
            keys(
                "PUT",
                Resp::new(201)
                    .header("Location", "/b")
                    .header("Content-Location", "http://example.com/c")
            ),
            [
                "http://example.com/a",
                "http://example.com/b",
                "http://example.com/c"
            ]
        );
        // Another origin is left alone (§4.4).
        assert_eq!(
            keys(
                "POST",
                Resp::new(303).header("Location", "http://other.example/b")
            ),
            ["http://example.com/a"]
        );
        assert_eq!(
            keys(
                "PATCH",
                Resp::new(200).header("Location", "//other.example/b")
            ),
            ["http://example.com/a"]
        );
    }
}
