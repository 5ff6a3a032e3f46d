//! `FdHandle::from_bytes`: the 24-byte `{pid, fd, start time}` value.
#![no_main]

use nodeipc_integration_tests::fuzz_drivers::fd_handle;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fd_handle(data));
