#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/proxy_protocol.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::check_proxy_protocol(data));
