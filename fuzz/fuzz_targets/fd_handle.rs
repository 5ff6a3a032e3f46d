//! `FdHandle::from_bytes`: the 24-byte `{pid, fd, start time}` value.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodeipc_fuzz::drivers::fd_handle(data));
