//! `nodeipc.NamedSemaphore` (glibc's layout, C peers can share it) and
//! `nodeipc.ShmSemaphore` (a futex semaphore inside a region).

use nodeipc_fdpass::ForkGeneration;
use nodeipc_sem::Semaphore;
use pyo3::prelude::*;

use crate::blocking::{blocking, seconds};
use crate::errors::{self, invalid};
use crate::region::{Region, offset};

/// A semaphore's initial or maximum count from Python.
fn count(value: i128) -> PyResult<u32> {
    u32::try_from(value)
        .ok()
        .filter(|&v| v <= nodeipc_sem::ShmSemaphore::MAX)
        .ok_or_else(|| {
            invalid(format!(
                "value must be in 0..={}, not {value}",
                nodeipc_sem::ShmSemaphore::MAX
            ))
        })
}

/// Waits on `semaphore` for `timeout` seconds (None: no limit), Ctrl-C
/// ending the wait.
fn wait_on(
    py: Python<'_>,
    semaphore: &(impl Semaphore + Sync),
    timeout: Option<f64>,
) -> PyResult<()> {
    let limit = seconds("timeout", timeout)?;
    blocking(
        py,
        move || {
            if timeout.is_none() {
                semaphore.wait()
            } else {
                semaphore.wait_timeout(limit)
            }
        },
        errors::sem,
    )
}

/// A POSIX named semaphore in glibc's layout.
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct NamedSemaphore {
    inner: nodeipc_sem::NamedSemaphore,
    /// The process that made this object: a child forked since may only
    /// drop it.
    born: ForkGeneration,
}

impl NamedSemaphore {
    fn new(inner: nodeipc_sem::NamedSemaphore) -> NamedSemaphore {
        NamedSemaphore {
            inner,
            born: ForkGeneration::current(),
        }
    }

    /// The semaphore, or `ForkedError` in a child forked since.
    fn get(&self, py: Python<'_>) -> PyResult<&nodeipc_sem::NamedSemaphore> {
        errors::usable(py, &self.born, || {
            format!("named semaphore {}", self.inner.name())
        })?;
        Ok(&self.inner)
    }
}

#[pymethods]
impl NamedSemaphore {
    /// Creates it with count `value` (exclusive, mode 0600).
    #[staticmethod]
    #[pyo3(signature = (name, value = 0))]
    fn create(py: Python<'_>, name: &str, value: i128) -> PyResult<NamedSemaphore> {
        let value = count(value)?;
        nodeipc_sem::NamedSemaphore::create(name, value)
            .map(NamedSemaphore::new)
            .map_err(|e| errors::sem(py, e))
    }

    /// Opens an existing one, waiting up to `timeout` seconds for it to
    /// appear (0: look once; None: no limit).
    #[staticmethod]
    #[pyo3(signature = (name, timeout = 0.0))]
    fn open(py: Python<'_>, name: &str, timeout: Option<f64>) -> PyResult<NamedSemaphore> {
        let wait = seconds("timeout", timeout)?;
        let name = name.to_owned();
        blocking(
            py,
            move || {
                if wait.is_zero() {
                    nodeipc_sem::NamedSemaphore::open(&name)
                } else {
                    nodeipc_sem::NamedSemaphore::open_wait(&name, wait)
                }
            },
            errors::sem,
        )
        .map(NamedSemaphore::new)
    }

    /// Its name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// Increments the count, waking one waiter.
    fn post(&self, py: Python<'_>) -> PyResult<()> {
        self.get(py)?.post().map_err(|e| errors::sem(py, e))
    }

    /// Decrements a positive count; False when it is zero.
    fn try_wait(&self, py: Python<'_>) -> PyResult<bool> {
        self.get(py)?.try_wait().map_err(|e| errors::sem(py, e))
    }

    /// Waits up to `timeout` seconds (None: no limit) and decrements.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        wait_on(py, self.get(py)?, timeout)
    }

    /// The current count (a snapshot).
    #[getter]
    fn value(&self, py: Python<'_>) -> PyResult<u32> {
        self.get(py)?.value().map_err(|e| errors::sem(py, e))
    }

    /// Removes the name now (handles keep working).
    fn unlink(&self, py: Python<'_>) -> PyResult<()> {
        self.get(py)?.unlink_now().map_err(|e| errors::sem(py, e))
    }

    /// Keeps the name after this object goes (the creator removes it otherwise).
    fn persist(&self, py: Python<'_>) -> PyResult<()> {
        self.get(py)?.persist();
        Ok(())
    }
}

/// A futex semaphore at an offset of a region: the fast path between
/// processes that map the same region.
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct ShmSemaphore {
    region: Py<Region>,
    offset: usize,
}

impl ShmSemaphore {
    /// The semaphore in the region (bounds and alignment were checked at
    /// construction, and a region's size never changes, so this only fails
    /// if that ever stopped being true).
    fn get(&self, py: Python<'_>) -> PyResult<&nodeipc_sem::ShmSemaphore> {
        let region = self.region.get();
        region.usable(py)?;
        region
            .inner
            .view(self.offset)
            .map_err(|e| errors::shm(py, e))
    }
}

#[pymethods]
impl ShmSemaphore {
    /// The semaphore at `offset` of `region` (8 bytes, 4-aligned); with
    /// `initial`, sets its count first (once, before peers use it).
    #[new]
    #[pyo3(signature = (region, offset = 0, initial = None))]
    fn new(
        py: Python<'_>,
        region: Py<Region>,
        offset: i128,
        initial: Option<i128>,
    ) -> PyResult<ShmSemaphore> {
        let at = self::offset("offset", offset)?;
        let initial = initial.map(count).transpose()?;
        {
            let r = region.get();
            r.usable(py)?;
            let semaphore: &nodeipc_sem::ShmSemaphore =
                r.inner.view(at).map_err(|e| errors::shm(py, e))?;
            if let Some(value) = initial {
                semaphore.init(value);
            }
        }
        Ok(ShmSemaphore { region, offset: at })
    }

    /// Bytes a semaphore takes in a region.
    #[classattr]
    const SIZE: usize = nodeipc_sem::ShmSemaphore::SIZE;

    /// Increments the count, waking one waiter.
    fn post(&self, py: Python<'_>) -> PyResult<()> {
        self.get(py)?.post().map_err(|e| errors::sem(py, e))
    }

    /// Decrements a positive count; False when it is zero.
    fn try_wait(&self, py: Python<'_>) -> PyResult<bool> {
        self.get(py)?.try_wait().map_err(|e| errors::sem(py, e))
    }

    /// Waits up to `timeout` seconds (None: no limit) and decrements.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        wait_on(py, self.get(py)?, timeout)
    }

    /// The current count (a snapshot).
    #[getter]
    fn value(&self, py: Python<'_>) -> PyResult<u32> {
        self.get(py)?.value().map_err(|e| errors::sem(py, e))
    }
}
