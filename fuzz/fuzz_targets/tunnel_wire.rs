#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/tunnel_check.rs"]
mod tunnel_check;

fuzz_target!(|data: &[u8]| tunnel_check::check_tunnel_wire(data));
