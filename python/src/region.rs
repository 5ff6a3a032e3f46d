//! `nodeipc.Region`: a shared-memory region exposing the buffer protocol.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::raw::c_int;

use nodeipc_fdpass::ForkGeneration;
use nodeipc_shm::OpenOptions;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::blocking::{blocking, seconds};
use crate::errors::{self, invalid};

/// A mapped shared-memory region (see `nodeipc.Region` in the stubs).
///
/// Its buffer is writable: `memoryview(region)`, `numpy.frombuffer(region,
/// dtype)` and `torch.frombuffer(region, dtype=...)` see the shared memory
/// without a copy. A view keeps the region object, and so the mapping,
/// alive; the creator's name is removed when the object goes, unless
/// `persist()` was called.
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct Region {
    pub(crate) inner: nodeipc_shm::Region,
    /// Made by `create` here: the name is ours to remove at the end of a
    /// `with` block (an opener's block leaves it to its creator).
    created: bool,
    /// The process that made this object: in a child forked since, it is
    /// the parent's and may only be dropped.
    pub(crate) born: ForkGeneration,
}

impl Region {
    fn new(inner: nodeipc_shm::Region, created: bool) -> Region {
        Region {
            inner,
            created,
            born: ForkGeneration::current(),
        }
    }

    /// `ForkedError` in a child forked since this object was made.
    pub(crate) fn usable(&self, py: Python<'_>) -> PyResult<()> {
        errors::usable(py, &self.born, || {
            format!("region {}", self.inner.name().unwrap_or("<anonymous>"))
        })
    }
}

/// `value` as a size, or an exception naming `what` and the value.
pub(crate) fn size(what: &str, value: i128) -> PyResult<usize> {
    usize::try_from(value)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| {
            invalid(format!(
                "{what} must be a positive number of bytes, not {value}"
            ))
        })
}

/// `value` as an offset or length (0 allowed).
pub(crate) fn offset(what: &str, value: i128) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| {
        invalid(format!(
            "{what} must be a non-negative integer, not {value}"
        ))
    })
}

/// A descriptor number given by the caller, checked open; the caller keeps it.
pub(crate) fn caller_fd(what: &str, fd: i64) -> PyResult<BorrowedFd<'static>> {
    let raw = c_int::try_from(fd)
        .ok()
        .filter(|&raw| raw >= 0)
        .ok_or_else(|| invalid(format!("{what} must be an open file descriptor, not {fd}")))?;
    // SAFETY: the caller, who owns the number, keeps it open for the call
    // it passed it to; a call reads or duplicates it and never closes it.
    // Were another thread of the caller to close it meanwhile (its own
    // race, as with `os.read`), a system call would fail with EBADF or act
    // on whatever file took the number: no memory is at stake.
    unsafe { nodeipc_fdpass::borrow_open(raw) }.map_err(|e| {
        crate::errors::invalid_errno(
            format!("{what} {fd} is not an open file descriptor ({})", e.source),
            e.source.raw_os_error(),
        )
    })
}

#[pymethods]
impl Region {
    /// Creates a named region of `size` bytes (mode 0600, exclusive).
    #[staticmethod]
    fn create(py: Python<'_>, name: &str, size: i128) -> PyResult<Region> {
        let size = self::size("size", size)?;
        let name = name.to_owned();
        blocking(
            py,
            move || nodeipc_shm::Region::create(&name, size),
            errors::shm,
        )
        .map(|inner| Region::new(inner, true))
    }

    /// Opens a named region of at least `min_size` bytes, waiting up to
    /// `timeout` seconds for it to appear (0: look once; None: no limit).
    #[staticmethod]
    #[pyo3(signature = (name, min_size = 0, timeout = 0.0))]
    fn open(py: Python<'_>, name: &str, min_size: i128, timeout: Option<f64>) -> PyResult<Region> {
        let min_size = offset("min_size", min_size)?;
        let wait = seconds("timeout", timeout)?;
        let options = if wait.is_zero() {
            OpenOptions {
                min_size,
                wait: None,
                ..OpenOptions::default()
            }
        } else {
            OpenOptions::wait(min_size, wait)
        };
        let name = name.to_owned();
        blocking(
            py,
            move || nodeipc_shm::Region::open(&name, options),
            errors::shm,
        )
        .map(|inner| Region::new(inner, false))
    }

    /// An unnamed region (a memfd) to pass to other processes by descriptor.
    #[staticmethod]
    fn anonymous(py: Python<'_>, size: i128) -> PyResult<Region> {
        let size = self::size("size", size)?;
        blocking(
            py,
            move || nodeipc_shm::Region::anonymous(size),
            errors::shm,
        )
        .map(|inner| Region::new(inner, false))
    }

    /// Maps the region behind descriptor `fd` (a memfd or shared-memory
    /// object); the descriptor is duplicated, the caller keeps its own.
    #[staticmethod]
    fn from_fd(py: Python<'_>, fd: i64) -> PyResult<Region> {
        let fd = caller_fd("fd", fd)?;
        let owned = fd.try_clone_to_owned().map_err(|e| {
            invalid(format!(
                "cannot duplicate descriptor {}: {e}",
                fd.as_raw_fd()
            ))
        })?;
        blocking(py, move || nodeipc_shm::Region::from_fd(owned), errors::shm)
            .map(|inner| Region::new(inner, false))
    }

    /// The name, or None for an anonymous region.
    #[getter]
    fn name(&self) -> Option<&str> {
        self.inner.name()
    }

    /// The size in bytes.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<usize> {
        self.usable(py)?;
        Ok(self.inner.len())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.usable(py)?;
        Ok(self.inner.len())
    }

    /// The descriptor behind the mapping (owned by the region: do not close it).
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        self.usable(py)?;
        Ok(self.inner.as_fd().as_raw_fd())
    }

    /// Forbids growing or shrinking it from now on (memfd only).
    fn seal(&self, py: Python<'_>) -> PyResult<()> {
        self.usable(py)?;
        self.inner
            .seal_grow_shrink()
            .map_err(|e| errors::shm(py, e))
    }

    /// Whether its size is sealed.
    #[getter]
    fn sealed(&self, py: Python<'_>) -> PyResult<bool> {
        self.usable(py)?;
        Ok(self.inner.is_size_sealed())
    }

    /// Removes the name now; every mapping lives on.
    fn unlink(&self, py: Python<'_>) -> PyResult<()> {
        self.usable(py)?;
        self.inner.unlink_now().map_err(|e| errors::shm(py, e))
    }

    /// Keeps the name after this object goes (the creator removes it otherwise).
    fn persist(&self, py: Python<'_>) -> PyResult<()> {
        self.usable(py)?;
        self.inner.persist();
        Ok(())
    }

    /// A copy of `length` bytes at `offset`.
    fn read(&self, py: Python<'_>, offset: i128, length: i128) -> PyResult<Py<PyBytes>> {
        self.usable(py)?;
        let at = self::offset("offset", offset)?;
        let len = self::offset("length", length)?;
        self.inner
            .check_range(at, len)
            .map_err(|e| errors::shm(py, e))?;
        let mut buf = vec![0u8; len];
        self.inner
            .read_at(at, &mut buf)
            .map_err(|e| errors::shm(py, e))?;
        Ok(PyBytes::new(py, &buf).unbind())
    }

    /// Copies `data` to `offset`.
    fn write(&self, py: Python<'_>, offset: i128, data: &[u8]) -> PyResult<()> {
        self.usable(py)?;
        let at = self::offset("offset", offset)?;
        self.inner
            .write_at(at, data)
            .map_err(|e| errors::shm(py, e))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block removes the name of a region `create` made
    /// (as `unlink()`); an opened region's name is its creator's, and so is
    /// the name in a child forked since (which removes nothing).
    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Py<PyAny>,
        _value: Py<PyAny>,
        _traceback: Py<PyAny>,
    ) -> PyResult<bool> {
        if self.created && !self.born.is_forked() {
            self.unlink(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "Region(name={:?}, size={})",
            self.inner.name().unwrap_or("<anonymous>"),
            self.inner.len()
        )
    }

    /// The buffer protocol: the whole mapping, writable, one dimension of bytes.
    unsafe fn __getbuffer__(
        slf: PyRef<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        slf.usable(slf.py())?;
        let len = ffi::Py_ssize_t::try_from(slf.inner.len())
            .map_err(|_| PyBufferError::new_err("region larger than a buffer can describe"))?;
        // SAFETY: `view` is the interpreter's non-null Py_buffer; the pointer
        // and length are the region's whole mapping, which stays mapped while
        // the view holds its reference to `slf` (PyBuffer_FillInfo takes
        // one). Other processes may write the memory at any time: Python code
        // sees bytes as they are, as with any shared mapping; no Rust
        // reference is ever formed over it.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), slf.inner.as_ptr().cast(), len, 0, flags)
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
