//! The queue's fuzz driver (`src/fuzz_drivers/queue.rs`, also the
//! cargo-fuzz target `queue_region`) under proptest: arbitrary inputs, and inputs that leave
//! the region intact so the driver's FIFO model is checked on every step.

use nodeipc_integration_tests::fuzz_drivers;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any bytes: a pre-filled region, any operations, any writes between.
    #[test]
    fn any_input_returns_from_every_call(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
        fuzz_drivers::queue_region(&data);
    }

    /// No pre-fill: the operations (and any pokes among them) on a queue
    /// that starts intact, the model checked until a poke garbles it.
    #[test]
    fn intact_queues_behave_as_a_fifo(flags in any::<u8>(), ops in proptest::collection::vec(any::<u8>(), 0..1500)) {
        let mut data = vec![flags, 0, 0];
        data.extend(ops);
        fuzz_drivers::queue_region(&data);
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
    let checked = fuzz_drivers::queue_region(&data);
    assert!(checked >= 400, "only {checked} steps checked");
}
