//! The shutdown signals (SIGTERM, SIGINT, SIGUSR1, SIGUSR2) as a readable
//! descriptor: blocked with `pthread_sigmask` and read from a `signalfd`, so
//! the event loop polls them beside its sockets. rustix offers neither call;
//! this file is the crate's only use of `libc` for them.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

use nodeipc_fdpass::Signal;

use crate::{Error, Result};

/// The signals that shut a server down in order.
pub(crate) const SHUTDOWN_SIGNALS: [Signal; 4] =
    [Signal::TERM, Signal::INT, Signal::USR1, Signal::USR2];

/// The shutdown signals, blocked for the calling thread and readable from a
/// descriptor. The previous signal mask comes back on drop.
#[derive(Debug)]
pub(crate) struct ShutdownSignals {
    fd: OwnedFd,
    previous: libc::sigset_t,
}

fn shutdown_set() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given; sigaddset then
    // adds valid signal numbers to that initialised set.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for signal in SHUTDOWN_SIGNALS {
            libc::sigaddset(set.as_mut_ptr(), signal.as_raw());
        }
        set.assume_init()
    }
}

impl ShutdownSignals {
    /// Blocks the shutdown signals in the calling thread (so they stay
    /// pending instead of killing the process) and opens a `signalfd` for them.
    ///
    /// In a single-threaded process (the spawned monitor) this catches every
    /// such signal sent to the process. In a multi-threaded one, other threads
    /// must block them too or the kernel may deliver them there.
    pub(crate) fn install() -> Result<ShutdownSignals> {
        let set = shutdown_set();
        let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: both pointers are valid for the call; `previous` is written
        // by the kernel before we read it (only on success).
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, previous.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::io(
                "pthread_sigmask",
                "",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        // SAFETY: pthread_sigmask succeeded, so it filled `previous`.
        let previous = unsafe { previous.assume_init() };
        // SAFETY: -1 asks for a new descriptor; `set` is an initialised set.
        let raw = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if raw < 0 {
            let error = std::io::Error::last_os_error();
            restore(&previous);
            return Err(Error::io("signalfd", "", error));
        }
        // SAFETY: signalfd(2) returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(ShutdownSignals { fd, previous })
    }

    /// The next pending shutdown signal, if any (never blocks).
    pub(crate) fn read(&self) -> Option<Signal> {
        let mut info = MaybeUninit::<libc::signalfd_siginfo>::uninit();
        let size = size_of::<libc::signalfd_siginfo>();
        loop {
            // SAFETY: the buffer is valid for `size` bytes and the descriptor
            // is a signalfd we own; the kernel writes whole records.
            let n = unsafe { libc::read(fd_raw(&self.fd), info.as_mut_ptr().cast(), size) };
            if n == size as isize {
                // SAFETY: the kernel wrote a whole record.
                let info = unsafe { info.assume_init() };
                return Signal::from_named_raw(info.ssi_signo as i32);
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
    }
}

fn fd_raw(fd: &OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

fn restore(previous: &libc::sigset_t) {
    // SAFETY: `previous` is the mask pthread_sigmask returned.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, previous, std::ptr::null_mut());
    }
}

impl Drop for ShutdownSignals {
    fn drop(&mut self) {
        // Consume what is pending, so unblocking does not deliver it.
        while self.read().is_some() {}
        restore(&self.previous);
    }
}

impl AsFd for ShutdownSignals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
