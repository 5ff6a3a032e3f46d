//! A worker handed channel regions whose headers and worker table another
//! process rewrote (`Worker::from_fds`: `published_config`, `Layout::validate`).
#![no_main]

use nodeipc_integration_tests::fuzz_drivers::channel_headers;

libfuzzer_sys::fuzz_target!(|data: &[u8]| channel_headers(data));
