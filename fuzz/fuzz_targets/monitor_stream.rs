//! Arbitrary bytes on a rank monitor's socket: answers are frames, the
//! connection ends, the server keeps serving.
#![no_main]

use std::sync::OnceLock;

use nodeipc_integration_tests::fuzz_drivers::{MonitorFixture, monitor_stream};

static MONITOR: OnceLock<MonitorFixture> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    monitor_stream(MONITOR.get_or_init(MonitorFixture::start), data);
});
