//! Keys taken from a request for rate limits and consistent hashing: the
//! client address, the URI or path, a header, a cookie or a query parameter.
//! A request without the named field is keyed by its client address.

use std::borrow::Cow;
use std::hash::Hasher;
use std::net::IpAddr;

use weir_config::KeySource;
use weir_http::RequestHead;

use crate::request;

/// A request's key, borrowed from its head (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    /// Bytes taken from the request (a header, cookie, parameter, path or URI).
    Bytes(&'a [u8]),
    /// The client address (also the fallback when the request lacks the field).
    Address(IpAddr),
    /// `route`: one key for every request.
    Constant,
}

/// The key `source` names in this request from `client`. The path and the URI
/// are the normalised ones rules match (`/%6cogin` and `//login` are `/login`,
/// so one bucket holds them all); a cookie's or a query parameter's value is
/// percent-decoded as applications read it (`?user=%61lice` is `alice`), its first
/// value when the request repeats it. When normalising or decoding changed the
/// bytes, they are written to `scratch`, which the key then borrows.
///
/// A limit counts under [`each_request_key`] instead, which gives every value of a
/// repeated cookie or parameter.
pub fn request_key<'h>(
    source: &KeySource,
    head: &'h RequestHead,
    client: IpAddr,
    scratch: &'h mut Vec<u8>,
) -> Key<'h> {
    let normal = |form: Cow<'h, [u8]>, scratch: &'h mut Vec<u8>| -> &'h [u8] {
        match form {
            Cow::Borrowed(bytes) => bytes,
            Cow::Owned(bytes) => {
                *scratch = bytes;
                scratch
            }
        }
    };
    let field = match source {
        KeySource::ClientAddress => None,
        KeySource::Route => return Key::Constant,
        KeySource::Uri => Some(normal(request::normalized_uri(head), scratch)),
        KeySource::Path => Some(normal(request::normalized_path(head.path()), scratch)),
        KeySource::Header(name) => head.header(name),
        KeySource::Cookie(name) => request::cookie_values(head, name)
            .next()
            .map(|value| normal(value, scratch)),
        KeySource::QueryParam(name) => request::query_values(head, name)
            .next()
            .map(|value| normal(value, scratch)),
    };
    match field {
        Some(bytes) => Key::Bytes(bytes),
        None => Key::Address(weir_config::canonical(client)),
    }
}

/// What limits count a client address under: an IPv4 address, or the /64 network of an
/// IPv6 one (an IPv4-mapped address is its IPv4 one). One host usually holds a whole
/// /64, so counting each address apart would let it step around any per-client limit
/// with addresses it owns. The fair queue's flows (`weir_upstream::Flow::client`) are
/// these clients too.
pub fn limited_client(address: IpAddr) -> IpAddr {
    match weir_config::canonical(address) {
        IpAddr::V6(v6) => IpAddr::V6((v6.to_bits() & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

/// Every key `source` names in this request from `client`, given to `each` until it
/// fails (its error is the answer); an address key is the client's [`limited_client`].
/// That is [`request_key`]'s one key, except for a cookie or a query parameter
/// the request gives more than once with different values: an application reads one of
/// them (most the first, PHP the last), so each distinct value is a key, and a limit
/// counting under all of them lets no value escape it (`?user=x&user=alice` counts
/// against `alice` too).
pub fn each_request_key<E>(
    source: &KeySource,
    head: &RequestHead,
    client: IpAddr,
    mut each: impl FnMut(Key<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let mut values: Vec<Cow<'_, [u8]>> = match source {
        KeySource::Cookie(name) => request::cookie_values(head, name).collect(),
        KeySource::QueryParam(name) => request::query_values(head, name).collect(),
        _ => {
            let mut scratch = Vec::new();
            return each(match request_key(source, head, client, &mut scratch) {
                Key::Address(address) => Key::Address(limited_client(address)),
                key => key,
            });
        }
    };
    if values.is_empty() {
        return each(Key::Address(limited_client(client)));
    }
    if values.len() > 1 {
        values.sort_unstable();
        values.dedup();
    }
    values.iter().try_for_each(|value| each(Key::Bytes(value)))
}

impl Key<'_> {
    /// Feeds the key to `hasher`; the kinds are told apart so an address and
    /// a header that spells the same bytes do not collide.
    pub fn hash_into<H: Hasher>(&self, hasher: &mut H) {
        match self {
            Key::Bytes(bytes) => {
                hasher.write_u8(1);
                hasher.write(bytes);
            }
            Key::Address(IpAddr::V4(v4)) => {
                hasher.write_u8(2);
                hasher.write(&v4.octets());
            }
            Key::Address(IpAddr::V6(v6)) => {
                hasher.write_u8(3);
                hasher.write(&v6.octets());
            }
            Key::Constant => hasher.write_u8(4),
        }
    }

    /// A hash that is the same in every process and build (MurmurHash64A),
    /// so several weir instances hash a key to the same node.
    pub fn stable_hash(&self) -> u64 {
        match self {
            Key::Bytes(bytes) => stable_hash(bytes, 1),
            Key::Address(IpAddr::V4(v4)) => stable_hash(&v4.octets(), 2),
            Key::Address(IpAddr::V6(v6)) => stable_hash(&v6.octets(), 3),
            Key::Constant => stable_hash(b"", 4),
        }
    }
}

/// MurmurHash64A of `bytes` with `seed`: fast on short keys, well mixed, and
/// fixed (unlike std's hasher, whose algorithm may change between releases).
pub fn stable_hash(bytes: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut hash = seed ^ (bytes.len() as u64).wrapping_mul(M);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        word = word.wrapping_mul(M);
        word ^= word >> R;
        word = word.wrapping_mul(M);
        hash ^= word;
        hash = hash.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = 0u64;
        for (index, &byte) in tail.iter().enumerate() {
            word |= u64::from(byte) << (8 * index);
        }
        hash ^= word;
        hash = hash.wrapping_mul(M);
    }
    hash ^= hash >> R;
    hash = hash.wrapping_mul(M);
    hash ^= hash >> R;
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::head;

    #[test]
    fn keys_from_each_source_and_the_fallback() {
        let request =
            head("GET /p?id=7 HTTP/1.1\r\nHost: a\r\nX-Api-Key: k1\r\nCookie: sid=s1\r\n\r\n");
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        let key = |source: KeySource| {
            let mut scratch = Vec::new();
            let key = request_key(&source, &request, client, &mut scratch);
            format!("{key:?}")
        };
        let expect = |key: Key<'_>| format!("{key:?}");
        assert_eq!(key(KeySource::ClientAddress), expect(Key::Address(client)));
        assert_eq!(key(KeySource::Uri), expect(Key::Bytes(b"/p?id=7")));
        assert_eq!(key(KeySource::Path), expect(Key::Bytes(b"/p")));
        assert_eq!(
            key(KeySource::Header("x-api-key".into())),
            expect(Key::Bytes(b"k1"))
        );
        assert_eq!(
            key(KeySource::Cookie("sid".into())),
            expect(Key::Bytes(b"s1"))
        );
        assert_eq!(
            key(KeySource::QueryParam("id".into())),
            expect(Key::Bytes(b"7"))
        );
        assert_eq!(key(KeySource::Route), expect(Key::Constant));
        assert_eq!(
            key(KeySource::Header("x-missing".into())),
            expect(Key::Address(client))
        );
    }

    #[test]
    fn paths_and_uris_are_keyed_as_rules_see_them() {
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        for target in [
            "/login",
            "/%6cogin",
            "/%6Cogin",
            "//login",
            "/./login",
            "/x/../login",
        ] {
            let request = head(&format!("GET {target}?a=1 HTTP/1.1\r\nHost: a\r\n\r\n"));
            let mut scratch = Vec::new();
            let path = request_key(&KeySource::Path, &request, client, &mut scratch);
            assert_eq!(path, Key::Bytes(b"/login"), "{target}");
            let mut scratch = Vec::new();
            let uri = request_key(&KeySource::Uri, &request, client, &mut scratch);
            assert_eq!(uri, Key::Bytes(b"/login?a=1"), "{target}");
        }
    }

    #[test]
    fn the_stable_hash_is_fixed_and_spreads() {
        // Pinned values: a change here would move every hashed key to another node.
        // (Values from an independent MurmurHash64A implementation.)
        assert_eq!(stable_hash(b"", 0), 0);
        assert_eq!(stable_hash(b"hello", 0), 0x1e68_d17c_457b_f117);
        assert_eq!(stable_hash(b"/object/1", 1), 0xe98e_bb24_d17d_de5f);
        assert_ne!(stable_hash(b"hello", 0), stable_hash(b"hello", 1));
        assert_ne!(
            Key::Bytes(b"a").stable_hash(),
            Key::Bytes(b"b").stable_hash()
        );
        // Sequential keys fill 16 buckets evenly (each within 10 % of its share).
        let mut buckets = [0u32; 16];
        for index in 0..16_000u32 {
            let key = format!("/item/{index}");
            buckets[(stable_hash(key.as_bytes(), 1) >> 60) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&count| (900..=1100).contains(&count)),
            "{buckets:?}"
        );
    }
}
