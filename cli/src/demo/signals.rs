//! SIGINT, SIGTERM, SIGHUP and every other terminating signal
//! (`nodeipc_fdpass::terminating_signals`) during the demo: noted by a
//! thread of their own, so the demo ends in order (workers killed, monitors
//! stopped, every name and its directory removed) and exits 128 + the
//! signal, instead of dying with its directory left in the temporary
//! directory.
//!
//! The signals are blocked in the main thread before any other thread
//! exists (threads inherit the mask), and one thread takes them with
//! `sigwait`: no handler runs in the middle of other code, and no wait
//! elsewhere sees `EINTR`. Children started through `std::process::Command`
//! begin with an empty mask (the standard library resets it), so workers and
//! monitors keep the default behaviour.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use nodeipc_text::signal_name;

use crate::Failure;

/// The signals noted so far.
pub(crate) struct Signals {
    received: Arc<AtomicI32>,
}

impl Signals {
    /// Blocks the terminating signals in the calling thread and starts the
    /// thread that takes them. Call it from the main thread before any other thread
    /// starts: a thread started earlier keeps the default action and a
    /// signal delivered to it kills the process.
    ///
    /// # Errors
    /// `pthread_sigmask` failing, or the thread not starting.
    pub(crate) fn install() -> Result<Signals, Failure> {
        let set = nodeipc_fdpass::block_terminating_signals().map_err(|e| {
            Failure::Error(format!(
                "blocking the terminating signals (pthread_sigmask): {e}"
            ))
        })?;
        let received = Arc::new(AtomicI32::new(0));
        let noted = Arc::clone(&received);
        std::thread::Builder::new()
            .name("demo-signals".into())
            .spawn(move || take_signals(&set, &noted))
            .map_err(|e| Failure::Error(format!("starting the signal thread: {e}")))?;
        Ok(Signals { received })
    }

    /// The first signal received, if any.
    pub(crate) fn received(&self) -> Option<i32> {
        match self.received.load(Ordering::Acquire) {
            0 => None,
            signal => Some(signal),
        }
    }

    /// `Err(Failure::Signal)` once a signal has arrived: the caller stops
    /// what it is doing and lets its guards undo the rest.
    pub(crate) fn check(&self) -> Result<(), Failure> {
        match self.received() {
            None => Ok(()),
            Some(signal) => Err(Failure::Signal(
                signal,
                format!(
                    "demo stopped by {}: workers and monitors stopped, what it made removed",
                    signal_name(signal)
                ),
            )),
        }
    }
}

/// Notes the first signal; a second one ends the process at once, for the
/// person whose first Ctrl-C waits on a step that is slow to give up.
fn take_signals(set: &libc::sigset_t, received: &AtomicI32) {
    loop {
        let mut signal = 0;
        // SAFETY: `set` and `signal` are valid for the call; every thread
        // has the signals blocked, as sigwait requires.
        if unsafe { libc::sigwait(set, &mut signal) } != 0 {
            continue;
        }
        if received
            .compare_exchange(0, signal, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            let line = format!(
                "nodeipc: second {}: exiting at once; `nodeipc clean` removes what the demo left\n",
                signal_name(signal)
            );
            // SAFETY: writes a buffer we own to fd 2, then ends the process
            // without running anything else (the main thread may be anywhere).
            unsafe {
                libc::write(2, line.as_ptr().cast(), line.len());
                libc::_exit(128 + signal);
            }
        }
    }
}
