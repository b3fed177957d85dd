#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/config_check.rs"]
mod config_check;

fuzz_target!(|data: &[u8]| config_check::check_config(data));
