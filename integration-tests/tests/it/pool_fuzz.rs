//! The pool's fuzz driver (`src/fuzz_drivers/pool.rs`, also the
//! cargo-fuzz target `pool_region`) under proptest: arbitrary inputs, and inputs that leave
//! the metadata intact so the driver's model (bytes kept, double frees and
//! forged references refused, occupancy exact) is checked on every step.

use nodeipc_integration_tests::fuzz_drivers;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Any bytes: pre-filled metadata, any operations, any writes between.
    #[test]
    fn any_input_returns_from_every_call(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
        fuzz_drivers::pool_region(&data);
    }

    /// No pre-fill: the model checked until a poke garbles the metadata.
    #[test]
    fn intact_pools_keep_their_promises(flags in any::<u8>(), ops in proptest::collection::vec(any::<u8>(), 0..1500)) {
        let mut data = vec![flags, 0, 0];
        data.extend(ops);
        fuzz_drivers::pool_region(&data);
    }
}

/// A long input that never writes into the region (pokes turned off): every
/// step is checked against the model, so the driver is not vacuous.
#[test]
fn a_long_intact_run_is_checked_at_every_step() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    // Bit 7 of the flags: no pokes; no pre-fill.
    let mut data = vec![0x80 | 0b1110, 0, 0];
    while data.len() < 4000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.push(x as u8);
    }
    let checked = fuzz_drivers::pool_region(&data);
    assert!(checked >= 200, "only {checked} steps checked");
}
