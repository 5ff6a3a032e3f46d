//! A coordinator and a worker whose request frames, response and init slots,
//! worker entry, header counters and semaphore words another process rewrites
//! between their steps.
#![no_main]

use nodeipc_integration_tests::fuzz_drivers::channel_slots;

libfuzzer_sys::fuzz_target!(|data: &[u8]| channel_slots(data));
