//! `nodeipc._native.MonitorConnection`: a rank's connection to its monitor,
//! with the Rust timeout estimator attached. `nodeipc.monitor.RankMonitorClient`
//! gives it nvidia-resiliency-ext's names.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use nodeipc_fdpass::ForkGeneration;
use nodeipc_monitor::{MonitorClient, RankInfo, TimeoutEstimator, TimeoutUpdate, Timeouts};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::blocking::blocking;
use crate::errors::{self, invalid};

/// Seconds as a float, for Python.
fn secs(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64())
}

/// A timeout given in seconds: positive and finite, or None.
fn timeout_arg(what: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Duration::try_from_secs_f64(s)
            .map(Some)
            .map_err(|_| invalid(format!("{what} of {s} s is too long"))),
        Some(s) => Err(invalid(format!(
            "{what} must be a positive number of seconds or None, not {s}"
        ))),
    }
}

fn timeouts_dict<'py>(
    py: Python<'py>,
    initial: Option<Duration>,
    heartbeat: Option<Duration>,
    out_of_section: Option<Duration>,
    sections: &BTreeMap<String, Duration>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("initial_heartbeat", secs(initial))?;
    dict.set_item("heartbeat", secs(heartbeat))?;
    dict.set_item("out_of_section", secs(out_of_section))?;
    let by_section = PyDict::new(py);
    for (name, limit) in sections {
        by_section.set_item(name, limit.as_secs_f64())?;
    }
    dict.set_item("sections", by_section)?;
    Ok(dict)
}

fn in_force<'py>(py: Python<'py>, t: &Timeouts) -> PyResult<Bound<'py, PyDict>> {
    timeouts_dict(
        py,
        t.initial_heartbeat,
        t.heartbeat,
        t.out_of_section,
        &t.sections,
    )
}

/// A rank's connection to its monitor. One thread at a time: a call while
/// another thread is in one raises `ConcurrentUseError`.
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct MonitorConnection {
    /// Taken (`try_lock`, never waited for) by each call.
    state: Mutex<Connection>,
    /// The process that connected: a child forked since may only close it
    /// (which then leaves the parent's connection open).
    born: ForkGeneration,
}

struct Connection {
    client: Option<MonitorClient>,
    /// The coarse clock at the last fast heartbeat the estimator was told
    /// of (see `heartbeat`).
    last_tick: Option<(i64, i64)>,
}

type Turn<'a> = MutexGuard<'a, Connection>;

impl MonitorConnection {
    /// This thread's turn for `op`: `ForkedError` in a forked child,
    /// `ConcurrentUseError` while another thread is in a call.
    fn turn(&self, py: Python<'_>, op: &str) -> PyResult<Turn<'_>> {
        errors::usable(py, &self.born, || "the monitor connection".to_owned())?;
        match self.state.try_lock() {
            Ok(turn) => Ok(turn),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => Err(errors::raise(
                py,
                errors::Kind::ConcurrentUse,
                format!(
                    "the monitor connection: {op} refused: another thread is in a call on it; \
                     a monitor connection is used by one thread at a time"
                ),
                None,
            )),
        }
    }
}

impl Connection {
    fn client(&mut self, py: Python<'_>) -> PyResult<&mut MonitorClient> {
        self.client.as_mut().ok_or_else(|| closed(py))
    }
}

fn closed(py: Python<'_>) -> PyErr {
    errors::raise(
        py,
        errors::Kind::RankMonitorClient,
        "the connection to the monitor is closed".to_owned(),
        None,
    )
}

#[pymethods]
impl MonitorConnection {
    /// Connects to the monitor's socket at `path`, retrying up to `timeout`
    /// seconds while nobody listens yet; `timeout` also bounds every reply.
    #[new]
    #[pyo3(signature = (path, timeout = 10.0))]
    fn new(py: Python<'_>, path: &str, timeout: f64) -> PyResult<MonitorConnection> {
        let limit = timeout_arg("timeout", Some(timeout))?.unwrap_or(Duration::MAX);
        let path = path.to_owned();
        let client = blocking(
            py,
            move || MonitorClient::connect(&path, limit),
            errors::monitor,
        )?;
        Ok(MonitorConnection {
            state: Mutex::new(Connection {
                client: Some(client),
                last_tick: None,
            }),
            born: ForkGeneration::current(),
        })
    }

    /// Attaches the estimator: `safety_factor` times the longest interval
    /// seen, once `min_samples` were seen, averaged with the previous
    /// proposal by `smoothing`.
    #[pyo3(signature = (safety_factor, min_samples, smoothing = 0.5))]
    fn attach_estimator(
        &self,
        py: Python<'_>,
        safety_factor: f64,
        min_samples: usize,
        smoothing: f64,
    ) -> PyResult<()> {
        let estimator = TimeoutEstimator::new(safety_factor, min_samples)
            .and_then(|e| e.with_smoothing(smoothing))
            .map_err(|e| errors::monitor(py, e))?;
        self.turn(py, "attach_estimator")?
            .client(py)?
            .attach_estimator(estimator);
        Ok(())
    }

    /// Registers the rank (`Init`), asking for the shared-memory heartbeat
    /// region when `want_region`; returns the timeouts in force.
    #[pyo3(signature = (global_rank, local_rank, want_region = true))]
    fn init<'py>(
        &self,
        py: Python<'py>,
        global_rank: u32,
        local_rank: u32,
        want_region: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut turn = self.turn(py, "init")?;
        let client = turn.client(py)?;
        let rank = RankInfo::this_process(global_rank, local_rank);
        let config = blocking(
            py,
            move || {
                if want_region {
                    client.init_with_heartbeat_region(&rank)
                } else {
                    client.init(&rank)
                }
            },
            errors::monitor,
        )?;
        let dict = in_force(py, &config.timeouts)?;
        dict.set_item("termination_signal", config.termination_signal)?;
        dict.set_item("skip_section_replies", config.skip_section_replies)?;
        dict.set_item("check_interval", secs(config.check_interval))?;
        Ok(dict)
    }

    /// Whether heartbeats take the shared-memory fast path.
    #[getter]
    fn has_heartbeat_region(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self
            .turn(py, "has_heartbeat_region")?
            .client(py)?
            .has_heartbeat_region())
    }

    /// One heartbeat: an atomic increment in the shared region when the
    /// monitor granted it, a message over the socket otherwise.
    fn heartbeat(&self, py: Python<'_>) -> PyResult<()> {
        let mut turn = self.turn(py, "heartbeat")?;
        let Connection { client, last_tick } = &mut *turn;
        let client = client.as_mut().ok_or_else(|| closed(py))?;
        if client.has_heartbeat_region() {
            client
                .heartbeat_fast()
                .map_err(|e| errors::monitor(py, e))?;
            // A precise clock read costs more than the heartbeat on a
            // virtual machine (~50 ns): the estimator hears of a beat only
            // once the coarse clock (one vDSO load, a few-ms tick) has moved
            // since the last one it heard of. Long intervals, the ones its
            // proposal comes from, are all seen; a short one is merged into
            // the next, overstating it by at most a tick.
            let now = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
            let tick = Some((now.tv_sec, now.tv_nsec));
            if tick != *last_tick
                && let Some(estimator) = client.estimator_mut()
            {
                estimator.record_heartbeat(Instant::now());
                *last_tick = tick;
            }
            return Ok(());
        }
        blocking(py, move || client.heartbeat(), errors::monitor)
    }

    /// One heartbeat over the socket, answered by the monitor.
    fn heartbeat_socket(&self, py: Python<'_>) -> PyResult<()> {
        let mut turn = self.turn(py, "heartbeat_socket")?;
        let client = turn.client(py)?;
        blocking(py, move || client.heartbeat(), errors::monitor)
    }

    /// Opens section `name`.
    fn start_section(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let mut turn = self.turn(py, "start_section")?;
        let client = turn.client(py)?;
        blocking(py, move || client.start_section(name), errors::monitor)
    }

    /// Closes section `name`.
    fn end_section(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let mut turn = self.turn(py, "end_section")?;
        let client = turn.client(py)?;
        blocking(py, move || client.end_section(name), errors::monitor)
    }

    /// Closes every open section.
    fn end_all_sections(&self, py: Python<'_>) -> PyResult<()> {
        let mut turn = self.turn(py, "end_all_sections")?;
        let client = turn.client(py)?;
        blocking(py, move || client.end_all_sections(), errors::monitor)
    }

    /// Sends new timeouts (seconds; None keeps the current one) and returns
    /// those in force.
    #[pyo3(signature = (initial_heartbeat = None, heartbeat = None, out_of_section = None, sections = None))]
    fn send_timeouts<'py>(
        &self,
        py: Python<'py>,
        initial_heartbeat: Option<f64>,
        heartbeat: Option<f64>,
        out_of_section: Option<f64>,
        sections: Option<BTreeMap<String, f64>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut update = TimeoutUpdate {
            initial_heartbeat: timeout_arg("initial_heartbeat", initial_heartbeat)?,
            heartbeat: timeout_arg("heartbeat", heartbeat)?,
            out_of_section: timeout_arg("out_of_section", out_of_section)?,
            sections: BTreeMap::new(),
        };
        for (name, limit) in sections.unwrap_or_default() {
            let limit = timeout_arg(&format!("section {name:?}"), Some(limit))?;
            update
                .sections
                .insert(name, limit.unwrap_or(Duration::ZERO));
        }
        let mut turn = self.turn(py, "send_timeouts")?;
        let client = turn.client(py)?;
        let config = blocking(py, move || client.send_timeouts(&update), errors::monitor)?;
        in_force(py, &config.timeouts)
    }

    /// The estimator's proposal (seconds), or None while it has seen fewer
    /// heartbeat intervals than it needs.
    fn propose<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut turn = self.turn(py, "propose")?;
        let client = turn.client(py)?;
        let Some(estimator) = client.estimator_mut() else {
            return Err(invalid("no estimator attached".to_owned()));
        };
        match estimator.propose() {
            Ok(p) => Ok(Some(timeouts_dict(
                py,
                p.initial_heartbeat,
                p.heartbeat,
                p.out_of_section,
                &p.sections,
            )?)),
            Err(nodeipc_monitor::Error::NotEnoughSamples { .. }) => Ok(None),
            Err(e) => Err(errors::monitor(py, e)),
        }
    }

    /// The estimator's section and out-of-section proposal (seconds), which
    /// needs no heartbeats: sections with too few observations are left out.
    fn propose_sections<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut turn = self.turn(py, "propose_sections")?;
        let client = turn.client(py)?;
        let Some(estimator) = client.estimator_mut() else {
            return Err(invalid("no estimator attached".to_owned()));
        };
        let p = estimator.propose_sections();
        timeouts_dict(py, None, None, p.out_of_section, &p.sections)
    }

    /// Heartbeat intervals the estimator has seen.
    fn heartbeat_samples(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self
            .turn(py, "heartbeat_samples")?
            .client(py)?
            .estimator()
            .map_or(0, TimeoutEstimator::heartbeat_samples))
    }

    /// Durations of `section` the estimator has seen.
    fn section_samples(&self, py: Python<'_>, section: &str) -> PyResult<usize> {
        Ok(self
            .turn(py, "section_samples")?
            .client(py)?
            .estimator()
            .map_or(0, |e| e.section_samples(section)))
    }

    /// Asks the launcher, through the monitor, for `action` (0 continue, 1
    /// exclude this node, 2 shut the workload down).
    fn workload_control(&self, py: Python<'_>, action: i32, description: &str) -> PyResult<()> {
        let mut turn = self.turn(py, "workload_control")?;
        let client = turn.client(py)?;
        blocking(
            py,
            move || client.workload_control(action, description),
            errors::monitor,
        )
    }

    /// The monitor's view of this rank: state, heartbeats, timeouts in force.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut turn = self.turn(py, "status")?;
        let client = turn.client(py)?;
        let status = blocking(py, move || client.status(), errors::monitor)?;
        let ms = |v: Option<u64>| v.map(Duration::from_millis);
        let t = &status.timeouts;
        let sections = t
            .sections_ms
            .iter()
            .map(|(k, v)| (k.clone(), Duration::from_millis(*v)))
            .collect();
        let dict = timeouts_dict(
            py,
            ms(t.initial_heartbeat_ms),
            ms(t.heartbeat_ms),
            ms(t.out_of_section_ms),
            &sections,
        )?;
        dict.set_item("state", format!("{:?}", status.state).to_lowercase())?;
        dict.set_item("heartbeats", status.heartbeats)?;
        dict.set_item("global_rank", status.rank.as_ref().map(|r| r.global_rank))?;
        dict.set_item("local_rank", status.rank.as_ref().map(|r| r.local_rank))?;
        dict.set_item(
            "open_sections",
            status
                .open_sections
                .iter()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>(),
        )?;
        Ok(dict)
    }

    /// Closes the connection (the monitor sees the rank leave); refused
    /// while another thread is in a call on it. In a child forked since,
    /// drops the child's copy only: the parent stays connected.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.born.is_forked() {
            // Never waited for: a parent thread may have held it at the fork.
            if let Ok(mut state) = self.state.try_lock() {
                state.client = None;
            }
            return Ok(());
        }
        self.turn(py, "close")?.client = None;
        Ok(())
    }

    /// Whether it is closed.
    #[getter]
    fn closed(&self) -> bool {
        // A call in progress means it is not.
        self.state
            .try_lock()
            .is_ok_and(|state| state.client.is_none())
    }
}
