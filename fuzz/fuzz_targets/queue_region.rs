//! A queue whose region is pre-filled with arbitrary bytes, driven through
//! every operation with arbitrary writes into it between the steps: the
//! driver of queue/tests/fuzz.rs (proptest, in CI), shared by path.
#![no_main]

#[path = "../../queue/tests/drivers/mod.rs"]
mod drivers;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    drivers::queue_region(data);
});
