//! A coordinator and a worker whose request frames, response and init slots,
//! worker entry, header counters and semaphore words another process rewrites
//! between their steps.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodeipc_fuzz::drivers::channel_slots(data));
