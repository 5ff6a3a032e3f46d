//! Frames of every protobuf message type, under every kind of limit.
#![no_main]

use nodeipc_integration_tests::fuzz_drivers::frame;

libfuzzer_sys::fuzz_target!(|data: &[u8]| frame(data));
