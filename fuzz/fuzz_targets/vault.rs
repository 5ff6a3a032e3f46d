//! A rank joining a barrier vault whose bytes another process wrote, then
//! running collectives over its slots and handles.
#![no_main]

use nodeipc_integration_tests::fuzz_drivers::vault;

libfuzzer_sys::fuzz_target!(|data: &[u8]| vault(data));
