//! What the cargo-fuzz targets share: the hostile-input drivers, the very
//! file the property tests in `integration-tests/tests/fuzz_props.rs` run.

#[path = "../../integration-tests/tests/fuzz_props/drivers.rs"]
pub mod drivers;
