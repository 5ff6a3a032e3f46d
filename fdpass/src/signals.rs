//! Stopping in order on a signal: the signals whose default action ends a
//! process, blocked with `pthread_sigmask` and read from a `signalfd`, so
//! an event loop polls them beside its sockets and pidfds and cleans up
//! before it exits.
//!
//! The tree's one home of this mechanism (processes and their signals are
//! this crate's): the monitor server, the launcher (`nodeipc launch`) and
//! the CLI's demo take their set and their descriptor from here, and a
//! launcher's child starts with the mask cleared by [`clear_signal_mask`].
//! rustix offers none of these calls; this file is the crate's use of
//! `libc` for them.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The signals that end a process by default and that a process with
/// something to clean up takes instead: `SIGHUP`, `SIGINT`, `SIGQUIT`,
/// `SIGTERM`, `SIGUSR1`, `SIGUSR2`, `SIGALRM`, `SIGVTALRM`, `SIGPROF`,
/// `SIGIO`, `SIGPWR`, `SIGSTKFLT`, `SIGXCPU`, `SIGXFSZ`, and every
/// real-time signal from `SIGRTMIN` to `SIGRTMAX` (as glibc numbers them:
/// the two below `SIGRTMIN` are its own).
///
/// Not in it: `SIGPIPE` (ignored by Rust programs: a closed pipe is an
/// error, not a death), the faults (`SIGSEGV`, `SIGBUS`, `SIGILL`,
/// `SIGFPE`, `SIGABRT`, `SIGTRAP`, `SIGSYS`: the process is broken, and
/// blocking a fault the kernel raises kills it anyway), `SIGKILL` and
/// `SIGSTOP` (which nothing can take).
///
/// # References
/// - [Linux `signal(7)`, "Standard signals"](https://man7.org/linux/man-pages/man7/signal.7.html)
#[doc(alias = "SIGRTMIN")]
pub fn terminating_signals() -> Vec<i32> {
    let named = [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGIO,
        libc::SIGPWR,
        libc::SIGSTKFLT,
        libc::SIGXCPU,
        libc::SIGXFSZ,
    ];
    named
        .into_iter()
        .chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
        .collect()
}

/// `signals` as a `sigset_t` (`sigemptyset`, then `sigaddset` each).
fn signal_set(signals: &[i32]) -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set, ours on this stack; sigaddset
    // then adds signal numbers to that initialised set (an invalid one is
    // refused with EINVAL, leaving the set as it was).
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for &signal in signals {
            libc::sigaddset(set.as_mut_ptr(), signal);
        }
        set.assume_init()
    }
}

/// The [`terminating_signals`], blocked for the calling thread and readable
/// from a descriptor; the previous signal mask comes back on drop.
#[derive(Debug)]
pub struct StopSignals {
    fd: OwnedFd,
    previous: libc::sigset_t,
}

impl StopSignals {
    /// Blocks the [`terminating_signals`] in the calling thread (so they
    /// stay pending instead of killing the process) and opens a descriptor
    /// that reads them.
    ///
    /// Performs `pthread_sigmask(SIG_BLOCK, set, &previous)`, then
    /// `signalfd(-1, set, SFD_CLOEXEC | SFD_NONBLOCK)`; if the second call
    /// fails, the mask is restored.
    ///
    /// In a single-threaded process this catches every such signal sent to
    /// the process. In a multi-threaded one, other threads must block them
    /// too ([`StopSignals::block_in_this_thread`]), or the kernel may deliver
    /// them there: call it from the main thread before any other starts
    /// (threads inherit the mask). Children started with
    /// `std::process::Command` begin with an empty mask (the standard
    /// library resets it between `fork` and `exec`).
    ///
    /// # Errors
    /// The errno of `pthread_sigmask` or `signalfd` (`EMFILE`, say).
    ///
    /// # References
    /// - [Linux `signalfd(2)`](https://man7.org/linux/man-pages/man2/signalfd.2.html)
    /// - [Linux `pthread_sigmask(3)`](https://man7.org/linux/man-pages/man3/pthread_sigmask.3.html)
    #[doc(alias = "signalfd")]
    #[doc(alias = "pthread_sigmask")]
    pub fn install() -> std::io::Result<StopSignals> {
        let set = signal_set(&terminating_signals());
        let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: both pointers are valid for the call; the kernel fills
        // `previous` on success, and only then is it read.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, previous.as_mut_ptr()) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        // SAFETY: pthread_sigmask succeeded, so it wrote `previous`.
        let previous = unsafe { previous.assume_init() };
        // SAFETY: -1 asks for a new descriptor; `set` is initialised.
        let raw = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if raw < 0 {
            let error = std::io::Error::last_os_error();
            restore(&previous);
            return Err(error);
        }
        // SAFETY: signalfd(2) returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(StopSignals { fd, previous })
    }

    /// The next pending stop signal's number, if any (never blocks).
    ///
    /// Performs `read(fd, &siginfo, sizeof(struct signalfd_siginfo))`,
    /// again on `EINTR`; `None` when nothing is pending (`EAGAIN`) or the
    /// read fails otherwise.
    ///
    /// # References
    /// - [Linux `signalfd(2)`, "read(2)"](https://man7.org/linux/man-pages/man2/signalfd.2.html)
    #[doc(alias = "signalfd_siginfo")]
    pub fn read(&self) -> Option<i32> {
        let mut info = MaybeUninit::<libc::signalfd_siginfo>::uninit();
        let size = size_of::<libc::signalfd_siginfo>();
        loop {
            // SAFETY: the buffer is ours and valid for `size` bytes; the
            // descriptor is our signalfd, which writes whole records.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), info.as_mut_ptr().cast(), size) };
            if usize::try_from(n) == Ok(size) {
                // SAFETY: the kernel wrote a whole record.
                let info = unsafe { info.assume_init() };
                return i32::try_from(info.ssi_signo).ok();
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
    }

    /// Blocks the [`terminating_signals`] in the calling thread (a helper
    /// thread's), so that they reach the process's `StopSignals` and
    /// nothing else.
    ///
    /// Performs `pthread_sigmask(SIG_BLOCK, set, NULL)`; it cannot fail
    /// with a valid set.
    ///
    /// # References
    /// - [Linux `pthread_sigmask(3)`](https://man7.org/linux/man-pages/man3/pthread_sigmask.3.html)
    #[doc(alias = "pthread_sigmask")]
    pub fn block_in_this_thread() {
        let set = signal_set(&terminating_signals());
        // SAFETY: `set` is initialised and only read; the old mask is not
        // asked for.
        unsafe {
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
    }

    /// Whether a stop signal is pending (blocked, not read yet): a wait
    /// that cannot poll the descriptor itself gives up on it, and the
    /// owner of the `StopSignals` reads the signal next.
    ///
    /// Performs `sigpending(&set)` and looks for the [`terminating_signals`]
    /// in it; `false` if the call fails.
    ///
    /// # References
    /// - [Linux `sigpending(2)`](https://man7.org/linux/man-pages/man2/sigpending.2.html)
    #[doc(alias = "sigpending")]
    pub fn pending() -> bool {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigpending fills the set, ours on this stack; it is read
        // only when the call succeeded.
        unsafe {
            if libc::sigpending(set.as_mut_ptr()) != 0 {
                return false;
            }
            let set = set.assume_init();
            terminating_signals()
                .into_iter()
                .any(|signal| libc::sigismember(&set, signal) == 1)
        }
    }
}

/// Blocks the [`terminating_signals`] in the calling thread without a
/// descriptor, for a thread that takes them with `sigwait(3)` instead;
/// returns the set for that call.
///
/// Performs `pthread_sigmask(SIG_BLOCK, set, NULL)`.
///
/// # Errors
/// The errno `pthread_sigmask` returned.
///
/// # References
/// - [Linux `pthread_sigmask(3)`](https://man7.org/linux/man-pages/man3/pthread_sigmask.3.html)
/// - [Linux `sigwait(3)`](https://man7.org/linux/man-pages/man3/sigwait.3.html)
#[doc(alias = "sigwait")]
pub fn block_terminating_signals() -> std::io::Result<libc::sigset_t> {
    let set = signal_set(&terminating_signals());
    // SAFETY: `set` is initialised and only read; the old mask is not
    // asked for.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    match rc {
        0 => Ok(set),
        rc => Err(std::io::Error::from_raw_os_error(rc)),
    }
}

/// Unblocks every signal in the calling process: for a child between
/// `fork` and `exec` (`CommandExt::pre_exec`), which starts with the mask
/// of the thread that forked it — the [`StopSignals`] blocked, say — and
/// whose program must start with none blocked.
///
/// Performs `sigemptyset(&set)`, then `sigprocmask(SIG_SETMASK, &set,
/// NULL)`: both async-signal-safe, and nothing is allocated, so it may run
/// between `fork` and `exec`.
///
/// # Errors
/// The errno of `sigprocmask`.
///
/// # References
/// - [Linux `sigprocmask(2)`](https://man7.org/linux/man-pages/man2/sigprocmask.2.html)
/// - [Linux `signal-safety(7)`](https://man7.org/linux/man-pages/man7/signal-safety.7.html)
#[doc(alias = "sigprocmask")]
pub fn clear_signal_mask() -> std::io::Result<()> {
    let empty = signal_set(&[]);
    // SAFETY: `empty` is an initialised set of this stack, only read; the
    // old mask is not asked for.
    if unsafe { libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn restore(previous: &libc::sigset_t) {
    // SAFETY: `previous` is the mask pthread_sigmask gave back.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, previous, std::ptr::null_mut());
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        // Consume what is pending, so unblocking does not deliver it.
        while self.read().is_some() {}
        restore(&self.previous);
    }
}

impl AsFd for StopSignals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::terminating_signals;

    #[test]
    fn the_set_is_the_terminating_signals_and_no_fault() {
        let set = terminating_signals();
        for signal in [libc::SIGHUP, libc::SIGUSR1, libc::SIGPWR, libc::SIGXFSZ] {
            assert!(set.contains(&signal), "{signal}");
        }
        assert!(set.contains(&libc::SIGRTMIN()) && set.contains(&libc::SIGRTMAX()));
        for signal in [
            libc::SIGPIPE,
            libc::SIGSEGV,
            libc::SIGABRT,
            libc::SIGKILL,
            libc::SIGSTOP,
            libc::SIGCHLD,
            32,
            33,
        ] {
            assert!(!set.contains(&signal), "{signal}");
        }
    }
}
