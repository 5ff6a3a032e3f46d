//! Blocking calls: the interpreter lock released, Python's signal handlers
//! run from the Rust waits' cancellation hook, timeouts in seconds.

use std::cell::RefCell;
use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::invalid;

thread_local! {
    /// The exception a signal handler raised during this thread's wait.
    static PENDING: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// The cancellation hook: runs Python's signal handlers (a Ctrl-C raises
/// `KeyboardInterrupt` in the main thread) and says stop when one raised.
/// The waits ask it at most every 50 ms, once they have parked.
fn run_signal_handlers() -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(raised) => {
            PENDING.with(|p| *p.borrow_mut() = Some(raised));
            true
        }
    })
}

/// Runs `f` with the interpreter lock released and Python's signal handlers
/// as the cancellation hook. When a handler raised (Ctrl-C), its exception
/// is what the call raises, whatever error the interrupted wait returned;
/// otherwise `f`'s error goes through `map`.
pub(crate) fn blocking<T, E>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, E> + Send,
    map: impl FnOnce(Python<'_>, E) -> PyErr,
) -> PyResult<T>
where
    T: Send,
    E: Send,
{
    PENDING.with(|p| p.borrow_mut().take());
    let result = py.detach(|| nodeipc_shm::wait::with_cancel_hook(run_signal_handlers, f));
    match result {
        Ok(value) => Ok(value),
        Err(error) => match PENDING.with(|p| p.borrow_mut().take()) {
            Some(raised) => Err(raised),
            None => Err(map(py, error)),
        },
    }
}

/// A timeout in seconds (`int` or `float`) as a `Duration`; `None` is no
/// limit (a wait that only Ctrl-C or its peers' fate end).
pub(crate) fn seconds(what: &str, value: Option<f64>) -> PyResult<Duration> {
    match value {
        None => Ok(Duration::MAX),
        Some(s) if s.is_finite() && s >= 0.0 => {
            Duration::try_from_secs_f64(s).or(Ok(Duration::MAX))
        }
        Some(s) => Err(invalid(format!(
            "{what} must be a non-negative number of seconds or None, not {s}"
        ))),
    }
}
