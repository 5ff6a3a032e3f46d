//! A client logging on to a handshake server that answers with arbitrary
//! bytes and regions full of arbitrary bytes.
#![no_main]

use std::sync::OnceLock;

use nodeipc_integration_tests::fuzz_drivers::{FakeServer, logon_reply};

static SERVER: OnceLock<FakeServer> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    logon_reply(SERVER.get_or_init(FakeServer::start), data);
});
