//! `nodeipc.channel`: the execute channel over bytes — a coordinator that
//! broadcasts requests to its workers and gathers their answers, and workers
//! that log on through its handshake. Requests and responses are bytes of any
//! encoding (`execute_pb2` messages serialized, say).

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, TryLockError};
use std::time::Duration;

use nodeipc_channel::{
    All, Channel, ChannelServer, First, HandshakeOptions, Raw, connect, worker_logon,
};
use nodeipc_fdpass::ForkGeneration;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::blocking::{blocking, seconds};
use crate::errors::{self, Kind, invalid, raise};

/// The channel's errors as the package's exceptions.
pub(crate) fn channel_error(py: Python<'_>, e: nodeipc_channel::Error) -> PyErr {
    use nodeipc_channel::{Error as E, HandshakeError as H};
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
        E::Busy { .. } => Kind::ConcurrentUse,
        // The handshake layer's error, whole: by its own variant.
        E::Handshake(H::InvalidConfig { .. }) => Kind::InvalidArgument,
        E::Handshake(H::Timeout { .. }) => Kind::Timeout,
        E::Handshake(H::Rejected { .. } | H::Handshake { .. }) => Kind::Refused,
        _ => Kind::Base,
    };
    raise(py, kind, e.to_string(), errors::errno_of(&e))
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
///
/// The object may be shared between threads: one thread may send while
/// another gathers (the Rust coordinator takes `&self` for both and refuses
/// a second sender or a second gatherer with its own `Busy` error, raised
/// as `ConcurrentUseError`).
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct Coordinator {
    /// Read-locked by each call (`try_read`: only `close()` write-locks it,
    /// and only with `try_write`, so a call never waits here).
    inner: RwLock<Option<nodeipc_channel::Coordinator<Raw, Raw>>>,
    /// The handshake server, while serving.
    server: Mutex<Option<ChannelServer>>,
    name: String,
    /// The process that made it: in a child forked since, only `close()`
    /// and `stop_serving()` (which then join, lock and remove nothing) are
    /// allowed.
    born: ForkGeneration,
}

type Shared<'a> = RwLockReadGuard<'a, Option<nodeipc_channel::Coordinator<Raw, Raw>>>;

/// The `Busy` error of a call that another thread's call excludes.
fn busy(
    name: &str,
    op: &'static str,
    busy: &'static str,
    rule: &'static str,
) -> nodeipc_channel::Error {
    nodeipc_channel::Error::Busy {
        channel: name.to_owned(),
        op,
        busy,
        rule,
    }
}

impl Coordinator {
    /// The coordinator for a call; `ForkedError` in a child forked since
    /// (before any lock: a parent thread may have held one at the fork).
    fn shared(&self, py: Python<'_>) -> PyResult<Shared<'_>> {
        errors::usable(py, &self.born, || format!("coordinator {}", self.name))?;
        match self.inner.try_read() {
            Ok(shared) => Ok(shared),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            // Only close() write-locks it: it is being closed.
            Err(TryLockError::WouldBlock) => Err(closed(py, "coordinator", &self.name)),
        }
    }
}

/// The open coordinator behind `shared`.
fn open<'g>(
    py: Python<'_>,
    shared: &'g Shared<'_>,
    name: &str,
) -> PyResult<&'g nodeipc_channel::Coordinator<Raw, Raw>> {
    shared
        .as_ref()
        .ok_or_else(|| closed(py, "coordinator", name))
}

/// A lock taken without waiting: `None` while another thread holds it.
fn try_take<T>(lock: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match lock.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
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
        let coordinator = Channel::anonymous(name)
            .workers(count("workers", workers)?)
            .request_capacity(size("request_capacity", request_capacity)?)
            .response_slot_size(size("response_size", response_size)?)
            .depth(count("depth", depth)?)
            .timeout(seconds("timeout", timeout)?)
            .raw()
            .create()
            .map_err(|e| channel_error(py, e))?;
        Ok(Coordinator {
            inner: RwLock::new(Some(coordinator)),
            server: Mutex::new(None),
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
    /// Refused (`AlreadyExistsError`) while it serves already.
    fn serve(&self, py: Python<'_>, socket_path: &str) -> PyResult<()> {
        let shared = self.shared(py)?;
        let offer = open(py, &shared, &self.name)?
            .offer()
            .map_err(|e| channel_error(py, e))?;
        let Some(mut server) = try_take(&self.server) else {
            return Err(channel_error(
                py,
                busy(
                    &self.name,
                    "serve",
                    "starting or stopping the server",
                    "a coordinator's server is started and stopped by one thread at a time",
                ),
            ));
        };
        if let Some(serving) = server.as_ref() {
            // Binding a second server would drop the first, and its socket
            // with it: workers connecting there would wait in vain.
            return Err(raise(
                py,
                Kind::AlreadyExists,
                format!(
                    "channel {}: already serving at {}: call stop_serving() before serving again",
                    self.name,
                    serving.path().display()
                ),
                None,
            ));
        }
        let bound = ChannelServer::bind(socket_path, HandshakeOptions::default(), offer)
            .map_err(|e| channel_error(py, e))?;
        *server = Some(bound);
        Ok(())
    }

    /// Waits until every worker has joined (then the handshake's socket
    /// can go: `stop_serving()`).
    #[pyo3(signature = (timeout = 30.0))]
    fn wait_for_workers(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let limit = seconds("timeout", timeout)?;
        let shared = self.shared(py)?;
        let coordinator = open(py, &shared, &self.name)?;
        blocking(
            py,
            move || coordinator.wait_for_workers(limit),
            channel_error,
        )
    }

    /// Stops the handshake server and removes its socket (in a child forked
    /// since, drops the child's copy only: the parent keeps serving).
    fn stop_serving(&self, py: Python<'_>) -> PyResult<()> {
        match try_take(&self.server) {
            Some(mut server) => {
                *server = None;
                Ok(())
            }
            // Never waited for in a forked child: a parent thread may have
            // held it at the fork (the copy is then left as it is).
            None if self.born.is_forked() => Ok(()),
            None => Err(channel_error(
                py,
                busy(
                    &self.name,
                    "stop_serving",
                    "starting or stopping the server",
                    "a coordinator's server is started and stopped by one thread at a time",
                ),
            )),
        }
    }

    /// Broadcasts `data` to every worker; returns the request's index.
    #[pyo3(signature = (data, *, timeout = Option::<Option<f64>>::None))]
    fn send(&self, py: Python<'_>, data: &[u8], timeout: Option<Option<f64>>) -> PyResult<u64> {
        let shared = self.shared(py)?;
        let coordinator = open(py, &shared, &self.name)?;
        let limit = timeout_or(coordinator.config().timeout, timeout)?;
        blocking(
            py,
            move || coordinator.send_timeout(data, limit),
            channel_error,
        )
    }

    /// Every worker's answer to the oldest request not yet gathered, in
    /// rank order. A timeout keeps what was gathered; the next call resumes.
    #[pyo3(signature = (*, timeout = Option::<Option<f64>>::None))]
    fn recv_all(&self, py: Python<'_>, timeout: Option<Option<f64>>) -> PyResult<Vec<Py<PyBytes>>> {
        let shared = self.shared(py)?;
        let coordinator = open(py, &shared, &self.name)?;
        let limit = timeout_or(coordinator.config().timeout, timeout)?;
        let answers = blocking(
            py,
            move || {
                coordinator
                    .recv_timeout(All, limit)
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
    fn recv_first(&self, py: Python<'_>) -> PyResult<(u32, Py<PyBytes>)> {
        let shared = self.shared(py)?;
        let coordinator = open(py, &shared, &self.name)?;
        let (rank, answer) = blocking(
            py,
            move || {
                coordinator
                    .recv(First)
                    .map(|first| (first.rank(), first.bytes().to_vec()))
            },
            channel_error,
        )?;
        Ok((rank, PyBytes::new(py, &answer).unbind()))
    }

    /// Takes (and drops) the answers `recv_first` left; returns how many.
    fn drain(&self, py: Python<'_>) -> PyResult<u64> {
        let shared = self.shared(py)?;
        let coordinator = open(py, &shared, &self.name)?;
        blocking(py, move || coordinator.drain(), channel_error)
    }

    /// Closes the channel (workers see it closed once they have every
    /// request sent before) and stops serving; refused while another thread
    /// is in a call on it. In a child forked since, it drops the child's
    /// copy only: the channel and its server stay the parent's.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let forked = self.born.is_forked();
        let inner = match self.inner.try_write() {
            Ok(inner) => Some(inner),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        let server = try_take(&self.server);
        match (inner, server) {
            (Some(mut inner), Some(mut server)) => {
                *server = None;
                *inner = None;
                Ok(())
            }
            // Never waited for in a forked child: a parent thread may have
            // held them at the fork (the copies are then left as they are).
            _ if forked => Ok(()),
            _ => Err(channel_error(
                py,
                busy(
                    &self.name,
                    "close",
                    "in a call on this coordinator",
                    "close a coordinator once every other thread's call on it has returned",
                ),
            )),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Py<PyAny>,
        _value: Py<PyAny>,
        _traceback: Py<PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

/// A worker's end of a channel (see `nodeipc.channel.Worker` in the stubs).
/// One thread at a time: a call while another thread is in one raises
/// `ConcurrentUseError`.
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct Worker {
    /// Taken (`try_lock`, never waited for) by each call.
    state: Mutex<WorkerState>,
    name: String,
    rank: u32,
    /// The process that logged on: a child forked since may only close it
    /// (which then leaves the rank to the parent).
    born: ForkGeneration,
}

struct WorkerState {
    inner: Option<nodeipc_channel::Worker<Raw, Raw>>,
    /// Where each request is copied before it becomes a `bytes`, reused.
    buffer: Vec<u8>,
}

impl Worker {
    /// This thread's turn for `op`: `ForkedError` in a forked child,
    /// `ConcurrentUseError` while another thread is in a call.
    fn turn(&self, py: Python<'_>, op: &'static str) -> PyResult<MutexGuard<'_, WorkerState>> {
        errors::usable(py, &self.born, || {
            format!("worker {} of channel {}", self.rank, self.name)
        })?;
        try_take(&self.state).ok_or_else(|| {
            channel_error(
                py,
                busy(
                    &self.name,
                    op,
                    "in a call on this worker",
                    "a worker is used by one thread at a time",
                ),
            )
        })
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
            rank,
            state: Mutex::new(WorkerState {
                inner: Some(worker),
                buffer: Vec::new(),
            }),
            born: ForkGeneration::current(),
        })
    }

    /// This worker's rank.
    #[getter]
    fn rank(&self, py: Python<'_>) -> PyResult<u32> {
        errors::usable(py, &self.born, || {
            format!("worker {} of channel {}", self.rank, self.name)
        })?;
        Ok(self.rank)
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
    fn recv(&self, py: Python<'_>, timeout: Option<Option<f64>>) -> PyResult<Py<PyBytes>> {
        let mut turn = self.turn(py, "recv")?;
        let WorkerState { inner, buffer } = &mut *turn;
        let worker = inner
            .as_mut()
            .ok_or_else(|| closed(py, "worker", &self.name))?;
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
    fn respond(&self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        let mut turn = self.turn(py, "respond")?;
        let worker = turn
            .inner
            .as_mut()
            .ok_or_else(|| closed(py, "worker", &self.name))?;
        blocking(py, || worker.respond(data), channel_error)
    }

    /// Leaves the channel (the rank may be taken again). In a child forked
    /// since, drops the child's copy only: the rank stays the parent's.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.born.is_forked() {
            // Never waited for: a parent thread may have held it at the fork.
            if let Some(mut state) = try_take(&self.state) {
                state.inner = None;
            }
            return Ok(());
        }
        self.turn(py, "close")?.inner = None;
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Py<PyAny>,
        _value: Py<PyAny>,
        _traceback: Py<PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}
