//! A rank joining a barrier vault whose bytes another process wrote, then
//! running collectives over its slots and handles.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodeipc_fuzz::drivers::vault(data));
