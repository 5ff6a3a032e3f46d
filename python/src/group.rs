//! `nodeipc.Group`: one rank's membership of a group of processes.

use std::os::fd::IntoRawFd;

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
#[pyclass(module = "nodeipc._native")]
pub(crate) struct Group {
    inner: Option<nodeipc_barrier::Group>,
    name: String,
    /// The process that joined: in a child forked since, the membership is
    /// the parent's, and only `leave()` (which then tells no peer) is allowed.
    born: ForkGeneration,
}

fn rank_arg(what: &str, value: i128) -> PyResult<u32> {
    u32::try_from(value).map_err(|_| invalid(format!("{what} must be in 0..2^32, not {value}")))
}

impl Group {
    fn joined(&mut self, py: Python<'_>) -> PyResult<&mut nodeipc_barrier::Group> {
        let name = &self.name;
        errors::usable(py, &self.born, || format!("group {name}"))?;
        self.inner.as_mut().ok_or_else(|| {
            raise(
                py,
                Kind::Base,
                format!("group {name}: this rank has left the group"),
                None,
            )
        })
    }
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
            inner: Some(inner),
            name: name.to_owned(),
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
    fn rank(&mut self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.joined(py)?.rank())
    }

    /// The number of ranks.
    #[getter]
    fn size(&mut self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.joined(py)?.world_size())
    }

    /// The largest `all_gather`/`broadcast` payload.
    #[getter]
    fn slot_size(&mut self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.joined(py)?.slot_size())
    }

    /// How descriptors travel: "pidfd" or "scm_rights".
    #[getter]
    fn transport(&mut self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(match self.joined(py)?.transport() {
            nodeipc_barrier::Transport::Pidfd => "pidfd",
            _ => "scm_rights",
        })
    }

    /// The pids of every rank.
    fn pids(&mut self, py: Python<'_>) -> PyResult<Vec<u32>> {
        Ok(self.joined(py)?.pids())
    }

    /// Waits until every rank has called it.
    #[pyo3(signature = (**kwargs))]
    fn barrier(&mut self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let group = self.joined(py)?;
        let limit = limit(group, kwargs)?;
        let group = &*group;
        blocking(py, move || group.barrier_timeout(limit), errors::group)
    }

    /// Every rank's `data`, in rank order.
    #[pyo3(signature = (data, **kwargs))]
    fn all_gather(
        &mut self,
        py: Python<'_>,
        data: &[u8],
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<Py<PyBytes>>> {
        let group = self.joined(py)?;
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
        &mut self,
        py: Python<'_>,
        data: &[u8],
        root: i128,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyBytes>> {
        let root = rank_arg("root", root)?;
        let group = self.joined(py)?;
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
        &mut self,
        py: Python<'_>,
        fd: i64,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<Option<i32>>> {
        let fd = caller_fd("fd", fd)?;
        let group = self.joined(py)?;
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
        &mut self,
        py: Python<'_>,
        fd: Option<i64>,
        root: i128,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<i32> {
        let root = rank_arg("root", root)?;
        let fd = fd.map(|fd| caller_fd("fd", fd)).transpose()?;
        let group = self.joined(py)?;
        let limit = limit(group, kwargs)?;
        let fd = blocking(
            py,
            move || group.broadcast_fd_timeout(root, fd, limit),
            errors::group,
        )?;
        Ok(fd.into_raw_fd())
    }

    /// Leaves the group: peers still waiting on this rank learn it left.
    fn leave(&mut self) {
        self.inner = None;
    }

    /// Whether this rank has left.
    #[getter]
    fn left(&self) -> bool {
        self.inner.is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&mut self, _kind: Py<PyAny>, _value: Py<PyAny>, _traceback: Py<PyAny>) -> bool {
        self.leave();
        false
    }

    fn __repr__(&self) -> String {
        match &self.inner {
            Some(g) => format!(
                "Group(name={:?}, rank={}, size={})",
                self.name,
                g.rank(),
                g.world_size()
            ),
            None => format!("Group(name={:?}, left)", self.name),
        }
    }
}
