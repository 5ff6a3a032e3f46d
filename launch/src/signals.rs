//! SIGINT, SIGTERM and SIGHUP to the launcher, blocked and read from a
//! `signalfd` its loop polls beside the ranks' pidfds. Threads started
//! after (the monitors) inherit the mask; ranks get an empty mask back
//! (the standard library resets it between fork and exec).

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::{Error, Result};

const STOP_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The stop signals, blocked in the calling thread and readable from a
/// descriptor; the previous mask comes back on drop.
pub(crate) struct StopSignals {
    fd: OwnedFd,
    previous: libc::sigset_t,
}

impl StopSignals {
    pub(crate) fn install() -> Result<StopSignals> {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the set; sigaddset adds valid
        // signal numbers to it. The set is ours, on this stack.
        let set = unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            for signal in STOP_SIGNALS {
                libc::sigaddset(set.as_mut_ptr(), signal);
            }
            set.assume_init()
        };
        let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: both pointers are valid for the call; the kernel fills
        // `previous` on success, and only then is it read.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, previous.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::io(
                "pthread_sigmask",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        // SAFETY: pthread_sigmask succeeded, so it wrote `previous`.
        let previous = unsafe { previous.assume_init() };
        // SAFETY: -1 asks for a new descriptor; `set` is initialised.
        let raw = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if raw < 0 {
            let error = std::io::Error::last_os_error();
            restore(&previous);
            return Err(Error::io("signalfd", error));
        }
        // SAFETY: signalfd(2) returned a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(StopSignals { fd, previous })
    }

    /// The next pending stop signal's number, if any (never blocks).
    pub(crate) fn read(&self) -> Option<i32> {
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
}

/// Blocks the stop signals in the calling thread (a helper thread's), so
/// that they reach the launcher's signalfd and nothing else.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) fn block_stop_signals_here() {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: the set is ours, on this stack: sigemptyset initialises it,
    // sigaddset adds valid signal numbers, pthread_sigmask only reads it.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for signal in STOP_SIGNALS {
            libc::sigaddset(set.as_mut_ptr(), signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
    }
}

/// Whether a stop signal is pending (blocked, not read yet): a wait that
/// cannot read the signalfd itself gives up on it, and the launcher reads
/// the signal next.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) fn stop_signal_pending() -> bool {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending fills the set, ours on this stack; it is read only
    // when the call succeeded.
    unsafe {
        if libc::sigpending(set.as_mut_ptr()) != 0 {
            return false;
        }
        let set = set.assume_init();
        STOP_SIGNALS
            .iter()
            .any(|&signal| libc::sigismember(&set, signal) == 1)
    }
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
