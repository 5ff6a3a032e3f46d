//! The logon a handshake server reads, and the coordinator's decision on it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodeipc_fuzz::drivers::logon(data));
