//! `nodeipc._native.TimeoutsCalc` and the state-dict functions:
//! nvidia-resiliency-ext's timeout calculation and checkpoint form
//! (`nodeipc_monitor_host::{NvrxCalc, NvrxState}`), which
//! `nodeipc.fault_tolerance` uses. Timeouts cross as the state dict's JSON.

use std::sync::Mutex;
use std::time::Instant;

use nodeipc_monitor_host::{NvrxCalc, NvrxState};
use pyo3::prelude::*;

use crate::errors::{self, Kind};

fn client_error(py: Python<'_>, message: String) -> PyErr {
    errors::raise(py, Kind::RankMonitorClient, message, None)
}

fn host(py: Python<'_>, e: nodeipc_monitor_host::Error) -> PyErr {
    client_error(py, e.to_string())
}

/// A state's JSON (any form [`NvrxState::from_json`] reads).
fn state(py: Python<'_>, json: &str) -> PyResult<NvrxState> {
    NvrxState::from_json(json).map_err(|e| host(py, e))
}

/// Reads a state dict's JSON in any form written before; returns it in
/// NVRx 0.3 onward's form with both parts present when given.
#[pyfunction]
pub(crate) fn nvrx_state_load(py: Python<'_>, json: &str) -> PyResult<String> {
    Ok(state(py, json)?.to_json())
}

/// What `state_dict()` keeps of the timeouts in force (`current`, both
/// parts given): NVRx 0.3 onward's form.
#[pyfunction]
pub(crate) fn nvrx_state_dict(py: Python<'_>, current: &str) -> PyResult<String> {
    let current = state(py, current)?;
    let NvrxState { heartbeat, section } = current;
    Ok(NvrxState::of(&heartbeat.unwrap_or_default(), &section.unwrap_or_default()).to_json())
}

/// A nvidia-resiliency-ext configuration file's text (YAML, or JSON) as
/// JSON text, for `FaultToleranceConfig.from_yaml_file`.
#[pyfunction]
pub(crate) fn nvrx_yaml(text: &str) -> PyResult<String> {
    nodeipc_monitor_host::nvrx_document(text)
        .map(|v| v.to_string())
        .map_err(|e| errors::invalid(e.to_string()))
}

/// What one rank saw, and the timeouts it comes to (NVRx's `TimeoutsCalc`).
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct TimeoutsCalc {
    calc: Mutex<NvrxCalc>,
}

impl TimeoutsCalc {
    fn calc(&self) -> std::sync::MutexGuard<'_, NvrxCalc> {
        // Every call is short and never panics with the lock held.
        self.calc.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl TimeoutsCalc {
    /// Observes from now, for the configured `sections`.
    #[new]
    fn new(py: Python<'_>, sections: Vec<String>, safety_factor: f64) -> PyResult<TimeoutsCalc> {
        let calc =
            NvrxCalc::new(sections, safety_factor, Instant::now()).map_err(|e| host(py, e))?;
        Ok(TimeoutsCalc {
            calc: Mutex::new(calc),
        })
    }

    /// Whether `name` is a configured section.
    fn knows(&self, name: &str) -> bool {
        self.calc().knows(name)
    }

    /// A heartbeat now.
    fn heartbeat(&self) {
        self.calc().heartbeat(Instant::now());
    }

    /// Section `name` opens now.
    fn open(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.calc()
            .open(name, Instant::now())
            .map_err(|e| client_error(py, e))
    }

    /// Section `name` closes now.
    fn close(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.calc()
            .close(name, Instant::now())
            .map_err(|e| client_error(py, e))
    }

    /// Every open section closes now.
    fn close_all(&self) {
        self.calc().close_all(Instant::now());
    }

    /// With no section open, the stretch since the last close counts now.
    fn bump_out_of_section(&self) {
        self.calc().bump_out_of_section(Instant::now());
    }

    /// The longest intervals seen (-1: none): initial, between heartbeats,
    /// out of section, each section in order.
    fn maxima(&self) -> Vec<f64> {
        self.calc().maxima()
    }

    /// Takes the larger of ours and another rank's `maxima()`, value by value.
    fn merge_maxima(&self, py: Python<'_>, other: Vec<f64>) -> PyResult<()> {
        self.calc().merge_maxima(&other).map_err(|e| host(py, e))
    }

    /// The heartbeat timeouts calculated (a state's JSON), merged with
    /// `current`'s; None while too few heartbeats were seen.
    fn heartbeat_timeouts(&self, py: Python<'_>, current: &str) -> PyResult<Option<String>> {
        let current = state(py, current)?.heartbeat.unwrap_or_default();
        Ok(self.calc().heartbeat_timeouts(&current).map(|hb| {
            NvrxState {
                heartbeat: Some(hb),
                section: None,
            }
            .to_json()
        }))
    }

    /// The section timeouts calculated for `selected` (None: every
    /// configured section) and, with `out_of_section`, the out-of-section
    /// one (a state's JSON), merged with `current`'s; None while some were
    /// never seen.
    #[pyo3(signature = (current, selected, out_of_section))]
    fn section_timeouts(
        &self,
        py: Python<'_>,
        current: &str,
        selected: Option<Vec<String>>,
        out_of_section: bool,
    ) -> PyResult<Option<String>> {
        let current = state(py, current)?.section.unwrap_or_default();
        let calculated = self
            .calc()
            .section_timeouts(&current, selected.as_deref(), out_of_section)
            .map_err(|e| host(py, e))?;
        Ok(calculated.map(|st| {
            NvrxState {
                heartbeat: None,
                section: Some(st),
            }
            .to_json()
        }))
    }
}
