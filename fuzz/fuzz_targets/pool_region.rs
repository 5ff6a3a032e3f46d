//! A pool whose region is pre-filled with arbitrary bytes, driven through
//! every operation with arbitrary writes into it between the steps: the
//! driver of integration-tests/tests/it/pool_fuzz.rs (proptest, in CI), from
//! nodeipc-integration-tests' `fuzz_drivers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nodeipc_integration_tests::fuzz_drivers::pool_region(data);
});
