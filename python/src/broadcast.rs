//! The native half of `nodeipc.broadcast`: the broadcast ring's writer and
//! reader (`nodeipc_channel::broadcast`), a loan's buffer and a received
//! message's buffer. `nodeipc/broadcast.py` builds vLLM's `MessageQueue` on
//! them; this module only converts arguments and errors and releases the
//! interpreter lock around every wait.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use nodeipc_channel::broadcast::{Broadcast, Error, Reader, StopHandle, Writer};
use nodeipc_fdpass::ForkGeneration;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::blocking::{blocking, seconds};
use crate::errors::{self, Kind, invalid, raise};

/// The ring's errors as the package's exceptions.
fn ring_error(py: Python<'_>, e: Error) -> PyErr {
    let kind = match &e {
        Error::Timeout { .. } | Error::Full { .. } => Kind::Timeout,
        Error::ReaderDied { .. }
        | Error::ReaderLeft { .. }
        | Error::WriterDied { .. }
        | Error::WriterClosed { .. } => Kind::PeerDied,
        Error::RankTaken { .. } => Kind::AlreadyExists,
        Error::InvalidConfig { .. } | Error::Mismatch { .. } | Error::NoSuchRank { .. } => {
            Kind::InvalidArgument
        }
        Error::Shm { source, .. } => errors::shm_kind(source),
        _ => Kind::Base,
    };
    raise(py, kind, e.to_string(), errors::errno_of(&e))
}

fn count(what: &str, value: i128) -> PyResult<u32> {
    u32::try_from(value).map_err(|_| invalid(format!("{what} must be in 0..2^32, not {value}")))
}

fn size(what: &str, value: i128) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| invalid(format!("{what} must be a size in bytes, not {value}")))
}

fn closed(py: Python<'_>, what: &str, name: &str) -> PyErr {
    raise(
        py,
        Kind::Base,
        format!("broadcast ring {name}: this {what} is closed"),
        None,
    )
}

/// A lock taken without waiting, or `ConcurrentUseError`: one call at a time.
/// Runs `f` on a writer or reader (`what`) of ring `name`, off the GIL:
/// refused in a forked child, while another thread is in a call on it, or
/// once it is closed.
fn with_end<E: Send, T: Send>(
    py: Python<'_>,
    inner: &Mutex<Option<E>>,
    born: &ForkGeneration,
    what: &str,
    name: &str,
    f: impl FnOnce(&mut E) -> Result<T, Error> + Send,
) -> PyResult<T> {
    errors::usable(py, born, || format!("broadcast {what} {name}"))?;
    let mut guard = take(py, inner, what, name)?;
    let end = guard.as_mut().ok_or_else(|| closed(py, what, name))?;
    blocking(py, || f(end), ring_error)
}

fn take<'a, T>(
    py: Python<'_>,
    lock: &'a Mutex<T>,
    what: &str,
    name: &str,
) -> PyResult<MutexGuard<'a, T>> {
    match lock.try_lock() {
        Ok(guard) => Ok(guard),
        Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => Err(raise(
            py,
            Kind::ConcurrentUse,
            format!(
                "broadcast ring {name}: another thread is in a call on this {what}; it takes one at a time"
            ),
            None,
        )),
    }
}

fn timeout(value: Option<f64>) -> PyResult<Option<Duration>> {
    Ok(match seconds("timeout", value)? {
        Duration::MAX => None,
        d => Some(d),
    })
}

/// The ring's writer (see `nodeipc/broadcast.py`).
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct BroadcastWriter {
    inner: Mutex<Option<Writer>>,
    name: String,
    /// Buffers of open loans still exported: the writer is not closed
    /// under them.
    exports: Arc<AtomicUsize>,
    born: ForkGeneration,
}

impl BroadcastWriter {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Writer) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        with_end(py, &self.inner, &self.born, "writer", &self.name, f)
    }
}

#[pymethods]
impl BroadcastWriter {
    /// Creates the ring `name` (0600) for `readers` readers.
    #[new]
    fn new(name: &str, readers: i128, chunk_bytes: i128, chunks: i128) -> PyResult<Self> {
        let config = Broadcast::builder(name)
            .readers(count("readers", readers)?)
            .chunk_bytes(size("chunk_bytes", chunk_bytes)?)
            .chunks(count("chunks", chunks)?)
            // Python logs its own warnings (vLLM's message, its interval).
            .warn_every(None);
        let writer = Python::attach(|py| config.create().map_err(|e| ring_error(py, e)))?;
        Ok(BroadcastWriter {
            inner: Mutex::new(Some(writer)),
            name: name.to_owned(),
            exports: Arc::new(AtomicUsize::new(0)),
            born: ForkGeneration::current(),
        })
    }

    /// Waits until every reader joined, then removes the name.
    #[pyo3(signature = (timeout))]
    fn wait_until_ready(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let limit = seconds("timeout", Some(timeout))?;
        self.with(py, |w| w.wait_until_ready(limit))
    }

    /// Sends the concatenation of `parts` (objects with the buffer
    /// protocol, C-contiguous) as one message; its index.
    #[pyo3(signature = (parts, timeout=None))]
    fn send_parts(
        &self,
        py: Python<'_>,
        parts: Vec<Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let limit = self::timeout(timeout)?;
        let buffers = parts
            .iter()
            .map(|p| {
                let b = PyBuffer::<u8>::get(p)?;
                if !b.is_c_contiguous() {
                    return Err(invalid(
                        "a part of a message must be C-contiguous".to_owned(),
                    ));
                }
                Ok(b)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let spans: Vec<(usize, usize)> = buffers
            .iter()
            .map(|b| (b.buf_ptr() as usize, b.len_bytes()))
            .collect();
        self.with(py, move |w| {
            // SAFETY: each span is a C-contiguous buffer of this process that
            // `buffers` keeps exported (so allocated and unmoved) until this
            // closure returns; the ring only reads it.
            let slices: Vec<&[u8]> = spans
                .iter()
                .map(|&(ptr, len)| unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
                .collect();
            w.send_parts(&slices, limit)
        })
        .inspect(|_| drop(buffers))
    }

    /// Lends the next chunk's first `len` bytes: a `BroadcastLoan`.
    #[pyo3(signature = (len, timeout=None))]
    fn begin_loan(
        slf: Bound<'_, Self>,
        len: i128,
        timeout: Option<f64>,
    ) -> PyResult<BroadcastLoan> {
        let py = slf.py();
        let len = size("len", len)?;
        let limit = self::timeout(timeout)?;
        let this = slf.get();
        let (at, base) = this.with(py, move |w| {
            let at = w.begin_loan(len, limit)?;
            Ok((at, w.region_ptr() as usize))
        })?;
        Ok(BroadcastLoan {
            writer: slf.clone().unbind(),
            ptr: base + at,
            len,
            exports: Arc::clone(&this.exports),
            mine: AtomicUsize::new(0),
            done: AtomicBool::new(false),
        })
    }

    /// Goes on without reader `rank`.
    fn drop_reader(&self, py: Python<'_>, rank: i128) -> PyResult<()> {
        let rank = count("rank", rank)?;
        self.with(py, move |w| w.drop_reader(rank))
    }

    /// The readers behind: `(rank, pid, messages, chunks)` each.
    fn behind(&self, py: Python<'_>) -> PyResult<Vec<(u32, u32, u64, u64)>> {
        self.with(py, |w| {
            Ok(w.behind()?
                .into_iter()
                .map(|b| (b.rank, b.pid, b.messages, b.chunks))
                .collect())
        })
    }

    /// Messages sent.
    #[getter]
    fn sent(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |w| Ok(w.sent()))
    }

    /// The ring's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Closes the writer: readers read what was sent, then hear it closed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.exports.load(Ordering::SeqCst) != 0 {
            return Err(PyBufferError::new_err(format!(
                "broadcast ring {}: a loan's buffer is still exported; release it first",
                self.name
            )));
        }
        let mut guard = take(py, &self.inner, "writer", &self.name)?;
        *guard = None;
        Ok(())
    }
}

/// A chunk lent to write a message in place: a writable buffer until
/// `commit()` or `abort()`, each refused while a view of it is alive.
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct BroadcastLoan {
    writer: Py<BroadcastWriter>,
    ptr: usize,
    len: usize,
    /// The writer's count of exported loan buffers.
    exports: Arc<AtomicUsize>,
    /// This loan's.
    mine: AtomicUsize,
    done: AtomicBool,
}

impl BroadcastLoan {
    fn finish(&self, py: Python<'_>, commit: bool) -> PyResult<Option<u64>> {
        if self.mine.load(Ordering::SeqCst) != 0 {
            return Err(PyBufferError::new_err(
                "the loan's memoryview is still alive (or a slice of it): release it before \
                 committing or aborting",
            ));
        }
        if self.done.swap(true, Ordering::SeqCst) {
            return Err(PyBufferError::new_err(
                "the loan was already committed or aborted",
            ));
        }
        let writer = self.writer.get();
        if commit {
            writer.with(py, |w| w.commit_loan()).map(Some)
        } else {
            writer.with(py, |w| {
                w.abort_loan();
                Ok(None)
            })
        }
    }
}

#[pymethods]
impl BroadcastLoan {
    /// Sends the message; its index.
    fn commit(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.finish(py, true)
    }

    /// Sends nothing.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, false).map(|_| ())
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// The buffer protocol: the lent bytes, writable, while the loan is open.
    unsafe fn __getbuffer__(
        slf: PyRef<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        if slf.done.load(Ordering::SeqCst) {
            return Err(PyBufferError::new_err(
                "the loan was committed or aborted: its bytes are no longer yours",
            ));
        }
        let len = ffi::Py_ssize_t::try_from(slf.len)
            .map_err(|_| PyBufferError::new_err("loan too large"))?;
        // SAFETY: `view` is the interpreter's non-null Py_buffer; the bytes
        // are the lent chunk's, in the writer's mapping, which stays mapped
        // while any view is exported (`close` refuses then) and which no
        // reader reads or writes before the commit (refused while a view
        // is exported). No Rust reference is formed over them.
        let rc =
            unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), slf.ptr as *mut _, len, 0, flags) };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        slf.mine.fetch_add(1, Ordering::SeqCst);
        slf.exports.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.mine.fetch_sub(1, Ordering::SeqCst);
        self.exports.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A reader of the ring (see `nodeipc/broadcast.py`).
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct BroadcastReader {
    inner: Mutex<Option<Reader>>,
    /// The buffer of the last message Python let go of, for the next.
    spare: Spare,
    /// Outside the lock: `stop()` comes from another thread than the wait.
    stop: StopHandle,
    name: String,
    born: ForkGeneration,
}

impl BroadcastReader {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Reader) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        with_end(py, &self.inner, &self.born, "reader", &self.name, f)
    }
}

#[pymethods]
impl BroadcastReader {
    /// Joins ring `name` as reader `rank`, waiting up to `join_wait` seconds
    /// for its region.
    #[new]
    #[pyo3(signature = (name, readers, chunk_bytes, chunks, rank, join_wait=30.0))]
    fn new(
        py: Python<'_>,
        name: &str,
        readers: i128,
        chunk_bytes: i128,
        chunks: i128,
        rank: i128,
        join_wait: f64,
    ) -> PyResult<Self> {
        let config = Broadcast::builder(name)
            .readers(count("readers", readers)?)
            .chunk_bytes(size("chunk_bytes", chunk_bytes)?)
            .chunks(count("chunks", chunks)?)
            .warn_every(None)
            .join_wait(seconds("join_wait", Some(join_wait))?);
        let rank = count("rank", rank)?;
        let reader = blocking(py, || config.join(rank), ring_error)?;
        Ok(BroadcastReader {
            spare: Spare::default(),
            stop: reader.stop_handle(),
            inner: Mutex::new(Some(reader)),
            name: name.to_owned(),
            born: ForkGeneration::current(),
        })
    }

    /// Waits until the writer saw every reader join.
    fn wait_until_ready(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let limit = seconds("timeout", Some(timeout))?;
        self.with(py, |r| r.wait_until_ready(limit))
    }

    /// The next message as a `BroadcastMessage`, or `None` when `timeout`
    /// seconds passed first (the next call resumes a message begun).
    #[pyo3(signature = (timeout=None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<BroadcastMessage>> {
        let limit = self::timeout(timeout)?;
        let spare = self.spare.lock().ok().and_then(|mut spare| spare.take());
        let got = self.with(py, |r| {
            if let Some(buf) = spare {
                r.recycle(buf);
            }
            let got = match limit {
                None => r.recv(),
                Some(limit) => r.recv_timeout(limit),
            };
            match got {
                Ok(bytes) => Ok(Some(bytes)),
                Err(Error::Timeout { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        Ok(got.map(|bytes| BroadcastMessage {
            bytes,
            home: Arc::clone(&self.spare),
        }))
    }

    /// The ring's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Ends the current wait (within 50 ms) and every later one; messages
    /// already published are still handed out.
    fn stop(&self) {
        self.stop.stop();
    }

    /// Leaves the ring.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = take(py, &self.inner, "reader", &self.name)?;
        *guard = None;
        Ok(())
    }
}

/// A message received: the reader's own copy of its bytes, a read-only
/// buffer (out-of-band pickle buffers are views of it, never of the ring).
#[pyclass(module = "nodeipc._native", frozen)]
pub(crate) struct BroadcastMessage {
    bytes: Vec<u8>,
    /// Its reader's spare slot: the bytes go back there once Python lets
    /// go of the message (no view of it is left then), so the next message
    /// reuses the memory (`Reader::recycle`).
    home: Spare,
}

/// Where a reader's spent message buffer waits to be reused.
type Spare = Arc<Mutex<Option<Vec<u8>>>>;

impl Drop for BroadcastMessage {
    fn drop(&mut self) {
        // Never waits: with the slot busy, the buffer is simply freed.
        if let Ok(mut spare) = self.home.try_lock() {
            *spare = Some(std::mem::take(&mut self.bytes));
        }
    }
}

#[pymethods]
impl BroadcastMessage {
    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    /// The buffer protocol: the message's bytes, read-only.
    unsafe fn __getbuffer__(
        slf: PyRef<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        let len = ffi::Py_ssize_t::try_from(slf.bytes.len())
            .map_err(|_| PyBufferError::new_err("message too large"))?;
        // SAFETY: `view` is the interpreter's non-null Py_buffer; the bytes
        // are this object's own Vec, never changed after construction
        // (the class is frozen), alive while the view holds its reference
        // to `slf`; exported read-only (PyBuffer_FillInfo refuses a
        // writable request).
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                slf.bytes.as_ptr() as *mut _,
                len,
                1,
                flags,
            )
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
