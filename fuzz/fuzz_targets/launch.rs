#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rund_fuzz::launch::run(data));
