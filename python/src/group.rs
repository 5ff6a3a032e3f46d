//! `nodeipc.Group`: one rank's membership of a group of processes.

use std::os::fd::IntoRawFd;
use std::sync::{Mutex, MutexGuard, TryLockError};

use nodeipc_barrier::{GroupOptions, TransportChoice};
use nodeipc_fdpass::ForkGeneration;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::blocking::{blocking, seconds};
use crate::errors::{self, Kind, invalid, raise};
use crate::region::caller_fd;

/// A rank of a group (see `nodeipc.Group` in the stubs). The constructor
/// joins; `leave()` (or the end of a `with` block) leaves.
///
/// The object may be shared between threads, but a group is used by one
/// thread at a time: a call while another thread is in one raises
/// `ConcurrentUseError` naming the group, the rank and the rule (the
/// barrier crate's `Error::Busy`) instead of waiting or interleaving.
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct Group {
    /// Taken (`try_lock`, never waited for) by each call; `None` once left.
    inner: Mutex<Option<nodeipc_barrier::Group>>,
    name: String,
    rank: u32,
    size: u32,
    slot_size: usize,
    transport: nodeipc_barrier::Transport,
    /// The process that joined: in a child forked since, the membership is
    /// the parent's, and only `leave()` (which then tells no peer) is allowed.
    born: ForkGeneration,
}

type Turn<'a> = MutexGuard<'a, Option<nodeipc_barrier::Group>>;

fn rank_arg(what: &str, value: i128) -> PyResult<u32> {
    u32::try_from(value).map_err(|_| invalid(format!("{what} must be in 0..2^32, not {value}")))
}

impl Group {
    /// This thread's turn for `op`: `ForkedError` in a forked child,
    /// `ConcurrentUseError` while another thread is in a call.
    fn turn(&self, py: Python<'_>, op: &'static str) -> PyResult<Turn<'_>> {
        errors::usable(py, &self.born, || format!("group {}", self.name))?;
        match self.inner.try_lock() {
            Ok(turn) => Ok(turn),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => Err(errors::group(
                py,
                nodeipc_barrier::Error::Busy {
                    group: self.name.clone(),
                    rank: self.rank,
                    op,
                },
            )),
        }
    }
}

/// The joined group behind a turn, or an error saying this rank left.
fn joined<'t>(
    py: Python<'_>,
    turn: &'t mut Turn<'_>,
    name: &str,
) -> PyResult<&'t mut nodeipc_barrier::Group> {
    turn.as_mut().ok_or_else(|| {
        raise(
            py,
            Kind::Base,
            format!("group {name}: this rank has left the group"),
            None,
        )
    })
}

/// The keyword `timeout` in seconds (None: no limit), or the group's own
/// timeout when it is not given; any other keyword is refused.
fn limit(
    group: &nodeipc_barrier::Group,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<std::time::Duration> {
    let Some(kwargs) = kwargs else {
        return Ok(group.timeout());
    };
    let mut timeout = None;
    for (key, value) in kwargs.iter() {
        match key.extract::<String>()?.as_str() {
            "timeout" => timeout = Some(value.extract::<Option<f64>>()?),
            other => {
                return Err(PyTypeError::new_err(format!(
                    "unexpected keyword argument {other:?} (only timeout is taken)"
                )));
            }
        }
    }
    match timeout {
        None => Ok(group.timeout()),
        Some(t) => seconds("timeout", t),
    }
}

fn bytes_list(py: Python<'_>, items: Vec<Vec<u8>>) -> Vec<Py<PyBytes>> {
    items
        .iter()
        .map(|item| PyBytes::new(py, item).unbind())
        .collect()
}

#[pymethods]
impl Group {
    /// Joins group `name` as `rank` of `size`, waiting up to `timeout`
    /// seconds (None: no limit) for every rank.
    #[new]
    #[pyo3(signature = (name, rank, size, timeout = 60.0, slot_size = 64, transport = "auto"))]
    fn new(
        py: Python<'_>,
        name: &str,
        rank: i128,
        size: i128,
        timeout: Option<f64>,
        slot_size: i128,
        transport: &str,
    ) -> PyResult<Group> {
        let transport = match transport {
            "auto" => TransportChoice::Auto,
            "pidfd" => TransportChoice::Pidfd,
            "scm_rights" => TransportChoice::ScmRights,
            other => {
                return Err(invalid(format!(
                    "transport must be \"auto\", \"pidfd\" or \"scm_rights\", not {other:?}"
                )));
            }
        };
        let options = GroupOptions::new(name, rank_arg("rank", rank)?, rank_arg("size", size)?)
            .timeout(seconds("timeout", timeout)?)
            .slot_size(crate::region::size("slot_size", slot_size)?)
            .transport(transport);
        let inner = blocking(
            py,
            move || nodeipc_barrier::Group::join(options),
            errors::group,
        )?;
        Ok(Group {
            name: name.to_owned(),
            rank: inner.rank(),
            size: inner.world_size(),
            slot_size: inner.slot_size(),
            transport: inner.transport(),
            inner: Mutex::new(Some(inner)),
            born: ForkGeneration::current(),
        })
    }

    /// The group's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// This rank.
    #[getter]
    fn rank(&self, py: Python<'_>) -> PyResult<u32> {
        errors::usable(py, &self.born, || format!("group {}", self.name))?;
        Ok(self.rank)
    }

    /// The number of ranks.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<u32> {
        errors::usable(py, &self.born, || format!("group {}", self.name))?;
        Ok(self.size)
    }

    /// The largest `all_gather`/`broadcast` payload.
    #[getter]
    fn slot_size(&self, py: Python<'_>) -> PyResult<usize> {
        errors::usable(py, &self.born, || format!("group {}", self.name))?;
        Ok(self.slot_size)
    }

    /// How descriptors travel: "pidfd" or "scm_rights".
    #[getter]
    fn transport(&self, py: Python<'_>) -> PyResult<&'static str> {
        errors::usable(py, &self.born, || format!("group {}", self.name))?;
        Ok(match self.transport {
            nodeipc_barrier::Transport::Pidfd => "pidfd",
            _ => "scm_rights",
        })
    }

    /// The pids of every rank.
    fn pids(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        let mut turn = self.turn(py, "pids")?;
        Ok(joined(py, &mut turn, &self.name)?.pids())
    }

    /// Waits until every rank has called it.
    #[pyo3(signature = (**kwargs))]
    fn barrier(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let mut turn = self.turn(py, "barrier")?;
        let group = &*joined(py, &mut turn, &self.name)?;
        let limit = limit(group, kwargs)?;
        blocking(py, move || group.barrier_timeout(limit), errors::group)
    }

    /// Every rank's `data`, in rank order.
    #[pyo3(signature = (data, **kwargs))]
    fn all_gather(
        &self,
        py: Python<'_>,
        data: &[u8],
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<Py<PyBytes>>> {
        let mut turn = self.turn(py, "all_gather")?;
        let group = joined(py, &mut turn, &self.name)?;
        let limit = limit(group, kwargs)?;
        let items = blocking(
            py,
            move || group.all_gather_timeout(data, limit),
            errors::group,
        )?;
        Ok(bytes_list(py, items))
    }

    /// `root`'s `data` on every rank (the others' `data` is ignored).
    #[pyo3(signature = (data, root, **kwargs))]
    fn broadcast(
        &self,
        py: Python<'_>,
        data: &[u8],
        root: i128,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyBytes>> {
        let root = rank_arg("root", root)?;
        let mut turn = self.turn(py, "broadcast")?;
        let group = joined(py, &mut turn, &self.name)?;
        let limit = limit(group, kwargs)?;
        let item = blocking(
            py,
            move || group.broadcast_timeout(root, data, limit),
            errors::group,
        )?;
        Ok(PyBytes::new(py, &item).unbind())
    }

    /// Every rank's descriptor to every rank: entry `r` is a new descriptor
    /// (the caller's to close) for rank `r`'s `fd`; our own entry is None.
    #[pyo3(signature = (fd, **kwargs))]
    fn exchange_fds(
        &self,
        py: Python<'_>,
        fd: i64,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<Option<i32>>> {
        let fd = caller_fd("fd", fd)?;
        let mut turn = self.turn(py, "exchange_fds")?;
        let group = joined(py, &mut turn, &self.name)?;
        let limit = limit(group, kwargs)?;
        let fds = blocking(
            py,
            move || group.exchange_fds_timeout(fd, limit),
            errors::group,
        )?;
        Ok(fds
            .into_iter()
            .map(|fd| fd.map(IntoRawFd::into_raw_fd))
            .collect())
    }

    /// `root`'s descriptor to every rank: a new descriptor (the caller's to
    /// close). The root passes its `fd`; the others pass None.
    #[pyo3(signature = (fd, root, **kwargs))]
    fn broadcast_fd(
        &self,
        py: Python<'_>,
        fd: Option<i64>,
        root: i128,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<i32> {
        let root = rank_arg("root", root)?;
        let fd = fd.map(|fd| caller_fd("fd", fd)).transpose()?;
        let mut turn = self.turn(py, "broadcast_fd")?;
        let group = joined(py, &mut turn, &self.name)?;
        let limit = limit(group, kwargs)?;
        let fd = blocking(
            py,
            move || group.broadcast_fd_timeout(root, fd, limit),
            errors::group,
        )?;
        Ok(fd.into_raw_fd())
    }

    /// Leaves the group: peers still waiting on this rank learn it left.
    /// Refused while another thread is in a call on the group. In a child
    /// forked since the join, only this process's copy goes: the rank stays
    /// the parent's.
    fn leave(&self, py: Python<'_>) -> PyResult<()> {
        if self.born.is_forked() {
            // Never waited for: a parent thread may have held it at the fork.
            if let Ok(mut turn) = self.inner.try_lock() {
                *turn = None;
            }
            return Ok(());
        }
        *self.turn(py, "leave")? = None;
        Ok(())
    }

    /// Whether this rank has left.
    #[getter]
    fn left(&self) -> bool {
        // A call in progress means it has not.
        self.inner.try_lock().is_ok_and(|turn| turn.is_none())
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
        self.leave(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        if self.left() {
            format!("Group(name={:?}, left)", self.name)
        } else {
            format!(
                "Group(name={:?}, rank={}, size={})",
                self.name, self.rank, self.size
            )
        }
    }
}
