//! `nodeipc.channel`: the execute channel over bytes — a coordinator that
//! broadcasts requests to its workers and gathers their answers, and workers
//! that log on through its handshake. Requests and responses are bytes of any
//! encoding (`execute_pb2` messages serialized, say).

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use nodeipc_channel::{ChannelConfig, HandshakeOptions, HandshakeServer, connect, worker_logon};
use nodeipc_fdpass::ForkGeneration;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::blocking::{blocking, seconds};
use crate::errors::{self, Kind, invalid, raise};

/// The channel's errors as the package's exceptions.
pub(crate) fn channel_error(py: Python<'_>, e: nodeipc_channel::Error) -> PyErr {
    use nodeipc_channel::Error as E;
    let kind = match &e {
        E::InvalidConfig { .. }
        | E::TooLarge { .. }
        | E::RankOutOfRange { .. }
        | E::NothingOutstanding { .. } => Kind::InvalidArgument,
        E::Timeout { .. } => Kind::Timeout,
        E::WorkerDied { .. }
        | E::WorkerLeft { .. }
        | E::CoordinatorDied { .. }
        | E::Closed { .. } => Kind::PeerDied,
        E::RankTaken { .. } => Kind::AlreadyExists,
        E::Rejected { .. } | E::Handshake { .. } => Kind::Refused,
        _ => Kind::Base,
    };
    raise(py, kind, e.to_string(), None)
}

fn count(what: &str, value: i128) -> PyResult<u32> {
    u32::try_from(value).map_err(|_| invalid(format!("{what} must be in 0..2^32, not {value}")))
}

fn size(what: &str, value: i128) -> PyResult<usize> {
    usize::try_from(value)
        .ok()
        .and_then(|v| v.checked_add(nodeipc_proto::LEN_PREFIX))
        .ok_or_else(|| invalid(format!("{what} must be a size in bytes, not {value}")))
}

fn closed(py: Python<'_>, what: &str, name: &str) -> PyErr {
    raise(
        py,
        Kind::Base,
        format!("channel {name}: this {what} is closed"),
        None,
    )
}

/// A timeout argument: `None` given means no limit; not given, the
/// channel's own.
fn timeout_or(default: Duration, value: Option<Option<f64>>) -> PyResult<Duration> {
    match value {
        None => Ok(default),
        Some(t) => seconds("timeout", t),
    }
}

/// The coordinator's end of a channel over anonymous regions (see
/// `nodeipc.channel.Coordinator` in the stubs).
#[pyclass(module = "nodeipc._native")]
pub(crate) struct Coordinator {
    /// In a mutex because a Python object may be shared between threads:
    /// the coordinator's calls take it one at a time.
    inner: Mutex<Option<nodeipc_channel::Coordinator>>,
    server: Option<HandshakeServer>,
    name: String,
    /// The process that made it: in a child forked since, only `close()`
    /// and `stop_serving()` (which then join, lock and remove nothing) are
    /// allowed.
    born: ForkGeneration,
}

type Guard<'a> = MutexGuard<'a, Option<nodeipc_channel::Coordinator>>;

impl Coordinator {
    /// The coordinator, locked; `ForkedError` in a child forked since (before
    /// any lock: a parent thread may have held this one at the fork).
    fn lock(&self, py: Python<'_>) -> PyResult<Guard<'_>> {
        errors::usable(py, &self.born, || format!("coordinator {}", self.name))?;
        Ok(self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The open coordinator behind `guard`.
fn open<'g>(
    py: Python<'_>,
    guard: &'g mut Guard<'_>,
    name: &str,
) -> PyResult<&'g mut nodeipc_channel::Coordinator> {
    guard
        .as_mut()
        .ok_or_else(|| closed(py, "coordinator", name))
}

#[pymethods]
impl Coordinator {
    /// A channel of `workers` workers: requests up to `request_capacity`
    /// bytes, answers up to `response_size`, `depth` requests in flight;
    /// `timeout` bounds every call not given one of its own.
    #[new]
    #[pyo3(signature = (name, workers, request_capacity = 65536, response_size = 16384, depth = 1, timeout = 30.0))]
    fn new(
        py: Python<'_>,
        name: &str,
        workers: i128,
        request_capacity: i128,
        response_size: i128,
        depth: i128,
        timeout: Option<f64>,
    ) -> PyResult<Coordinator> {
        let config = ChannelConfig::new(name, count("workers", workers)?)
            .request_capacity(size("request_capacity", request_capacity)?)
            .response_slot_size(size("response_size", response_size)?)
            .depth(count("depth", depth)?)
            .timeout(seconds("timeout", timeout)?);
        let coordinator = nodeipc_channel::Coordinator::create_anonymous(config)
            .map_err(|e| channel_error(py, e))?;
        Ok(Coordinator {
            inner: Mutex::new(Some(coordinator)),
            server: None,
            name: name.to_owned(),
            born: ForkGeneration::current(),
        })
    }

    /// The channel's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Serves the logon handshake at `socket_path` (its directory ours,
    /// 0700): workers connect with `Worker.connect(socket_path, rank)`.
    fn serve(&mut self, py: Python<'_>, socket_path: &str) -> PyResult<()> {
        let offer = open(py, &mut self.lock(py)?, &self.name)?
            .offer()
            .map_err(|e| channel_error(py, e))?;
        let server = HandshakeServer::bind(
            socket_path,
            HandshakeOptions::default(),
            move |logon, peer| offer.decide(logon, peer),
        )
        .map_err(|e| channel_error(py, e))?;
        self.server = Some(server);
        Ok(())
    }

    /// Waits until every worker has joined (then the handshake's socket
    /// can go: `stop_serving()`).
    #[pyo3(signature = (timeout = 30.0))]
    fn wait_for_workers(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let limit = seconds("timeout", timeout)?;
        let mut guard = self.lock(py)?;
        let coordinator = open(py, &mut guard, &self.name)?;
        blocking(
            py,
            move || coordinator.wait_for_workers(limit),
            channel_error,
        )
    }

    /// Stops the handshake server and removes its socket.
    fn stop_serving(&mut self) {
        self.server = None;
    }

    /// Broadcasts `data` to every worker; returns the request's index.
    #[pyo3(signature = (data, *, timeout = Option::<Option<f64>>::None))]
    fn send(&mut self, py: Python<'_>, data: &[u8], timeout: Option<Option<f64>>) -> PyResult<u64> {
        let mut guard = self.lock(py)?;
        let coordinator = open(py, &mut guard, &self.name)?;
        let limit = timeout_or(coordinator.config().timeout, timeout)?;
        blocking(
            py,
            move || coordinator.send_bytes_timeout(data, limit),
            channel_error,
        )
    }

    /// Every worker's answer to the oldest request not yet gathered, in
    /// rank order. A timeout keeps what was gathered; the next call resumes.
    #[pyo3(signature = (*, timeout = Option::<Option<f64>>::None))]
    fn recv_all(
        &mut self,
        py: Python<'_>,
        timeout: Option<Option<f64>>,
    ) -> PyResult<Vec<Py<PyBytes>>> {
        let mut guard = self.lock(py)?;
        let coordinator = open(py, &mut guard, &self.name)?;
        let limit = timeout_or(coordinator.config().timeout, timeout)?;
        let answers = blocking(
            py,
            move || {
                coordinator
                    .recv_all_bytes_timeout(limit)
                    .map(|gathered| gathered.iter().map(|(_, a)| a.to_vec()).collect::<Vec<_>>())
            },
            channel_error,
        )?;
        Ok(answers
            .iter()
            .map(|a| PyBytes::new(py, a).unbind())
            .collect())
    }

    /// The first answer to arrive for the oldest request not yet gathered,
    /// with its rank; the others are taken by the next gather.
    fn recv_first(&mut self, py: Python<'_>) -> PyResult<(u32, Py<PyBytes>)> {
        let mut guard = self.lock(py)?;
        let coordinator = open(py, &mut guard, &self.name)?;
        let (rank, answer) = blocking(
            py,
            move || {
                coordinator
                    .recv_first_bytes()
                    .map(|first| (first.rank(), first.bytes().to_vec()))
            },
            channel_error,
        )?;
        Ok((rank, PyBytes::new(py, &answer).unbind()))
    }

    /// Takes (and drops) the answers `recv_first` left; returns how many.
    fn drain(&mut self, py: Python<'_>) -> PyResult<u64> {
        let mut guard = self.lock(py)?;
        let coordinator = open(py, &mut guard, &self.name)?;
        blocking(py, move || coordinator.drain(), channel_error)
    }

    /// Closes the channel (workers see it closed once they have every
    /// request sent before) and stops serving. In a child forked since, it
    /// drops the child's copy only: the channel and its server stay the
    /// parent's.
    fn close(&mut self) {
        self.server = None;
        // `&mut self`: no other call runs, so no lock is taken (in a forked
        // child, a parent thread may have held it at the fork).
        *self.inner.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&mut self, _kind: Py<PyAny>, _value: Py<PyAny>, _traceback: Py<PyAny>) -> bool {
        self.close();
        false
    }
}

/// A worker's end of a channel (see `nodeipc.channel.Worker` in the stubs).
#[pyclass(module = "nodeipc._native")]
pub(crate) struct Worker {
    inner: Option<nodeipc_channel::Worker>,
    name: String,
    /// The process that logged on: a child forked since may only close it
    /// (which then leaves the rank to the parent).
    born: ForkGeneration,
    /// Where each request is copied before it becomes a `bytes`, reused.
    buffer: Vec<u8>,
}

impl Worker {
    fn open(&mut self, py: Python<'_>) -> PyResult<&mut nodeipc_channel::Worker> {
        let name = &self.name;
        errors::usable(py, &self.born, || format!("worker of channel {name}"))?;
        self.inner
            .as_mut()
            .ok_or_else(|| closed(py, "worker", name))
    }
}

#[pymethods]
impl Worker {
    /// Logs on to the handshake at `socket_path` as worker `rank`; `timeout`
    /// bounds the logon and every later call not given one of its own.
    #[staticmethod]
    #[pyo3(signature = (socket_path, rank, timeout = 30.0))]
    fn connect(
        py: Python<'_>,
        socket_path: &str,
        rank: i128,
        timeout: Option<f64>,
    ) -> PyResult<Worker> {
        let rank = count("rank", rank)?;
        let limit = seconds("timeout", timeout)?;
        let path = socket_path.to_owned();
        let worker = blocking(
            py,
            || connect(&path, &worker_logon(rank), limit)?.into_worker(rank, limit),
            channel_error,
        )?;
        Ok(Worker {
            name: worker.config().name.clone(),
            inner: Some(worker),
            born: ForkGeneration::current(),
            buffer: Vec::new(),
        })
    }

    /// This worker's rank.
    #[getter]
    fn rank(&mut self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.open(py)?.rank())
    }

    /// The channel's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The next request's bytes (read in place, copied once into the
    /// returned `bytes`). Raises `PeerDiedError` once the coordinator closed
    /// the channel (after every request sent before) or died.
    #[pyo3(signature = (*, timeout = Option::<Option<f64>>::None))]
    fn recv(&mut self, py: Python<'_>, timeout: Option<Option<f64>>) -> PyResult<Py<PyBytes>> {
        self.open(py)?;
        let Worker {
            inner,
            name,
            buffer,
            ..
        } = self;
        let worker = inner.as_mut().ok_or_else(|| closed(py, "worker", name))?;
        let limit = timeout_or(worker.config().timeout, timeout)?;
        blocking(
            py,
            || {
                let request = worker.recv_in_place_timeout(limit)?;
                buffer.clear();
                buffer.extend_from_slice(request.bytes());
                request.release()
            },
            channel_error,
        )?;
        Ok(PyBytes::new(py, buffer).unbind())
    }

    /// Answers the oldest request not yet answered with `data`.
    fn respond(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        let worker = self.open(py)?;
        blocking(py, || worker.respond_bytes(data), channel_error)
    }

    /// Leaves the channel (the rank may be taken again).
    fn close(&mut self) {
        self.inner = None;
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&mut self, _kind: Py<PyAny>, _value: Py<PyAny>, _traceback: Py<PyAny>) -> bool {
        self.close();
        false
    }
}
