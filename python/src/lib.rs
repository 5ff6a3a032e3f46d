//! The native half of the Python package `nodeipc` (module
//! `nodeipc._native`): thin classes over the Rust crates. Behaviour lives in
//! the crates and is tested there; this module converts arguments and
//! errors, releases the interpreter lock around every blocking call, and
//! lets Ctrl-C end a wait (see [`blocking`]).

mod blocking;
mod broadcast;
mod channel;
mod errors;
mod ft;
mod group;
mod monitor;
mod region;
mod sem;

use pyo3::prelude::*;

/// The serialized `FileDescriptorProto` of each `.proto` file, by name.
const FILE_DESCRIPTORS: &[(&str, &[u8])] = nodeipc_proto::FILE_DESCRIPTORS;

/// The module `nodeipc._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<region::Region>()?;
    m.add_class::<sem::NamedSemaphore>()?;
    m.add_class::<sem::ShmSemaphore>()?;
    m.add_class::<group::Group>()?;
    m.add_class::<monitor::MonitorConnection>()?;
    m.add_class::<ft::TimeoutsCalc>()?;
    m.add_function(wrap_pyfunction!(ft::nvrx_state_load, m)?)?;
    m.add_function(wrap_pyfunction!(ft::nvrx_state_dict, m)?)?;
    m.add_function(wrap_pyfunction!(ft::nvrx_yaml, m)?)?;
    m.add_class::<channel::Coordinator>()?;
    m.add_class::<channel::Worker>()?;
    m.add_class::<broadcast::BroadcastWriter>()?;
    m.add_class::<broadcast::BroadcastLoan>()?;
    m.add_class::<broadcast::BroadcastReader>()?;
    m.add_class::<broadcast::BroadcastMessage>()?;
    m.add("SLICE_SECONDS", nodeipc_shm::wait::SLICE.as_secs_f64())?;
    let descriptors = pyo3::types::PyDict::new(m.py());
    for (name, bytes) in FILE_DESCRIPTORS {
        descriptors.set_item(name, pyo3::types::PyBytes::new(m.py(), bytes))?;
    }
    m.add("FILE_DESCRIPTORS", descriptors)?;
    Ok(())
}
