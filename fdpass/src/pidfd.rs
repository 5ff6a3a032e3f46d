//! [`Pidfd`]: a process named by a descriptor, not by a pid that can be reused.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags};

pub use rustix::process::Signal;

use crate::{Error, ForeignFd, Result};
use nodeipc_shm::wait::timespec;

/// A descriptor referring to one process (`pidfd_open`). Unlike its pid it
/// can never come to mean another process: signals sent through it reach
/// the process it was opened for, or fail with [`Error::ProcessGone`].
///
/// # Examples
/// ```
/// let me = nodeipc_fdpass::Pidfd::open(std::process::id())?;
/// assert!(me.is_alive());
/// # Ok::<(), nodeipc_fdpass::Error>(())
/// ```
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
    pid: u32,
}

impl Pidfd {
    /// Opens a pidfd for `pid`.
    ///
    /// # Errors
    /// [`Error::ProcessGone`] if there is no such process;
    /// [`Error::Unsupported`] on kernels before 5.3; [`Error::ProcessIo`]
    /// naming the pid (`EMFILE`, say).
    ///
    /// # References
    /// - [Linux `pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
    #[doc(alias = "pidfd_open")]
    pub fn open(pid: u32) -> Result<Pidfd> {
        let raw = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or(Error::ProcessGone {
                pid,
                reason: "not a valid pid",
            })?;
        let fd = rustix::process::pidfd_open(raw, PidfdFlags::empty())
            .map_err(|e| pidfd_error(e, "pidfd_open", "5.3", pid, None))?;
        Ok(Pidfd { fd, pid })
    }

    /// A pidfd the kernel handed us another way (`SO_PEERPIDFD`), for `pid`.
    pub(crate) fn from_owned(fd: OwnedFd, pid: u32) -> Pidfd {
        Pidfd { fd, pid }
    }

    /// The pid this pidfd was opened for.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal` to the process (`pidfd_send_signal`).
    ///
    /// # Errors
    /// [`Error::ProcessGone`] if it has exited; [`Error::ProcessIo`] naming
    /// the pid (`EPERM` for a process of another user).
    #[doc(alias = "pidfd_send_signal")]
    pub fn send_signal(&self, signal: Signal) -> Result<()> {
        rustix::process::pidfd_send_signal(&self.fd, signal).map_err(|e| match e {
            Errno::SRCH => Error::ProcessGone {
                pid: self.pid,
                reason: "it has exited",
            },
            e => Error::process_io("pidfd_send_signal", self.pid, None, e),
        })
    }

    /// Whether the process is still running (its pidfd is not yet readable).
    /// A zombie counts as exited. A failed `poll` counts as alive: this never
    /// reports an exit it has not seen; [`has_exited`](Pidfd::has_exited)
    /// returns the failure instead.
    pub fn is_alive(&self) -> bool {
        !matches!(self.has_exited(), Ok(true))
    }

    /// Whether the process has exited, without waiting (a zombie has).
    ///
    /// # Errors
    /// [`Error::ProcessIo`] naming the pid, from `poll`: not a sign of exit.
    pub fn has_exited(&self) -> Result<bool> {
        self.poll_exit(Some(Duration::ZERO))
    }

    /// Waits up to `timeout` for the process to exit; `Ok(true)` if it did.
    ///
    /// # Errors
    /// [`Error::ProcessIo`] naming the pid, from `poll`.
    pub fn wait_exit(&self, timeout: Duration) -> Result<bool> {
        self.poll_exit(Some(timeout))
    }

    fn poll_exit(&self, timeout: Option<Duration>) -> Result<bool> {
        // A timeout past the clock's range waits without a deadline rather
        // than panic on the addition.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let timespec = left.map(timespec);
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, timespec.as_ref()) {
                Ok(0) => return Ok(false),
                Ok(_) if crate::liveness::exited(fds[0].revents()) => {
                    return Ok(true);
                }
                Ok(_) => {
                    return Err(Error::process_io(
                        "poll(pidfd)",
                        self.pid,
                        None,
                        std::io::Error::other(format!(
                            "unexpected poll events {:?}",
                            fds[0].revents()
                        )),
                    ));
                }
                Err(Errno::INTR) => continue,
                Err(e) => return Err(Error::process_io("poll(pidfd)", self.pid, None, e)),
            }
        }
    }

    /// Duplicates descriptor `target` of the process into ours (`pidfd_getfd`).
    /// The copy refers to the same open file and is close-on-exec.
    ///
    /// # Errors
    /// [`Error::NotPermitted`] when the kernel refuses (another user, Yama,
    /// seccomp) with the ways out in its message; [`Error::NoSuchFd`];
    /// [`Error::ProcessGone`]; [`Error::Unsupported`] before Linux 5.6;
    /// [`Error::ProcessIo`] naming the pid and `target` (`EMFILE`, say).
    ///
    /// # References
    /// - [Linux `pidfd_getfd(2)`](https://man7.org/linux/man-pages/man2/pidfd_getfd.2.html)
    #[doc(alias = "pidfd_getfd")]
    pub fn get_fd(&self, target: ForeignFd) -> Result<OwnedFd> {
        let (pid, fd) = (self.pid, target.raw());
        rustix::process::pidfd_getfd(&self.fd, fd, PidfdGetfdFlags::empty()).map_err(|e| match e {
            Errno::PERM => Error::NotPermitted { pid, fd },
            Errno::BADF => Error::NoSuchFd { pid, fd },
            e => pidfd_error(e, "pidfd_getfd", "5.6", pid, Some(fd)),
        })
    }
}

/// What a failed pidfd call means: the process gone, a kernel older than
/// `needs`, or the errno itself, naming the process (and descriptor).
fn pidfd_error(
    errno: Errno,
    call: &'static str,
    needs: &'static str,
    pid: u32,
    fd: Option<i32>,
) -> Error {
    match errno {
        Errno::SRCH => Error::ProcessGone {
            pid,
            reason: "it has exited",
        },
        Errno::NOSYS => Error::Unsupported { call, needs },
        e => Error::process_io(call, pid, fd, e),
    }
}

impl AsFd for Pidfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
