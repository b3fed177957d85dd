//! The properties the `proxy_protocol` fuzz target checks. The same file is compiled into
//! `crates/weir/tests/fuzz.rs` (through `#[path]`), so `cargo test`
//! replays the corpus through exactly these checks. Each function panics when a property fails.

use weir_proxy_protocol::{
    MAX_V1_LENGTH, MAX_V2_LENGTH, Parsed, Version, parse, write_v1, write_v2,
};

/// `parse` never panics, decides from a prefix once and for all (every shorter prefix is
/// `Partial` or gets the same answer), stays within its limits, and a header it accepts
/// is emitted again by both writers as one that parses to the same addresses.
pub fn check_proxy_protocol(data: &[u8]) {
    let outcome = parse(data);
    for end in 0..data.len().min(MAX_V2_LENGTH + 1) {
        let prefix = parse(&data[..end]);
        assert!(
            prefix == Ok(Parsed::Partial) || prefix == outcome,
            "prefix of {end} bytes gave {prefix:?}, the whole input {outcome:?}"
        );
    }
    match outcome {
        Ok(Parsed::Partial) => {
            assert!(data.len() < MAX_V2_LENGTH, "partial past the v2 limit");
        }
        Ok(Parsed::Complete { header, consumed }) => {
            assert!(consumed <= data.len() && consumed > 0);
            let limit = match header.version {
                Version::V1 => MAX_V1_LENGTH,
                Version::V2 => MAX_V2_LENGTH,
            };
            assert!(consumed <= limit, "{consumed} bytes past the limit");
            assert_eq!(
                parse(&data[..consumed]),
                outcome,
                "the header alone parses the same"
            );
            if let Some(addresses) = header.addresses {
                for write in [write_v1, write_v2] {
                    let mut out = Vec::new();
                    write(addresses.source, addresses.destination, &mut out);
                    match parse(&out) {
                        Ok(Parsed::Complete {
                            header: again,
                            consumed,
                        }) => {
                            assert_eq!(consumed, out.len());
                            assert_eq!(again.addresses, Some(addresses));
                        }
                        other => panic!("emitted {out:?} parses as {other:?}"),
                    }
                }
            }
        }
        Err(_) => {}
    }
}
