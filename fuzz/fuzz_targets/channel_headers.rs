//! A worker handed channel regions whose headers and worker table another
//! process rewrote (`Worker::from_fds`: `published_config`, `Layout::validate`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodeipc_fuzz::drivers::channel_headers(data));
