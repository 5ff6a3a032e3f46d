//! The logon a handshake server reads, and the coordinator's decision on it.
#![no_main]

use nodeipc_integration_tests::fuzz_drivers::logon;

libfuzzer_sys::fuzz_target!(|data: &[u8]| logon(data));
