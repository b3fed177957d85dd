#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/client_hello.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::check_client_hello(data));
