//! Frames of every protobuf message type, under every kind of limit.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodeipc_fuzz::drivers::frame(data));
