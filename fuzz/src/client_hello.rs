//! The properties the `client_hello` fuzz target checks. The same file is compiled into
//! `crates/weir/tests/fuzz.rs` (through `#[path]`), so `cargo test` replays the
//! corpus through exactly these checks. Each function panics when a property fails.

use weir_tls::client_hello::{Peek, read_client_hello};

/// A small bound, so that short inputs reach the too-large path.
const MAX_LENGTH: usize = 4096;

/// `read_client_hello` never panics, decides from a prefix once and for all (every shorter
/// prefix is `Partial` or gets the same answer), and a name it returns is a lower-case
/// host name.
pub fn check_client_hello(data: &[u8]) {
    let outcome = read_client_hello(data, MAX_LENGTH);
    for end in 0..data.len() {
        let prefix = read_client_hello(&data[..end], MAX_LENGTH);
        assert!(
            prefix == Ok(Peek::Partial) || prefix == outcome,
            "prefix of {end} bytes gave {prefix:?}, the whole input {outcome:?}"
        );
    }
    if let Ok(Peek::Complete(hello)) = outcome {
        if let Some(name) = hello.server_name {
            assert!(!name.is_empty() && name.len() <= 253);
            assert!(name.bytes().all(|b| b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(b, b'-' | b'_' | b'.')));
        }
        assert!(
            hello
                .alpn
                .iter()
                .all(|name| !name.is_empty() && name.len() < 256)
        );
    }
}
