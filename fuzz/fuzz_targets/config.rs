#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| interlingua_fuzz::config::run(data));
