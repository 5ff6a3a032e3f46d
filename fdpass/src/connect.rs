//! [`connect_unix`] and [`connect_unix_when_up`]: every client connect to a
//! Unix stream socket in the tree, with a bound.
//!
//! A blocking `connect(2)` to a listener whose backlog is full sleeps until
//! the server accepts: forever when the server is stopped (`SIGSTOP`, a
//! debugger) or wedged. Non-blocking, the kernel answers `EAGAIN` at once
//! instead (an `AF_UNIX` stream connect never returns `EINPROGRESS`, but it
//! is handled too), so the wait becomes ours to bound.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::{Error, Result};
use nodeipc_shm::wait::timespec;

/// Room in `sockaddr_un.sun_path`, the terminating NUL excluded.
const SUN_PATH_MAX: usize = 107;

/// Refuses a socket path longer than `sockaddr_un` holds, before any system
/// call (the kernel would otherwise cut it short or refuse it less clearly).
pub(crate) fn check_sun_path(path: &Path) -> Result<()> {
    let len = path.as_os_str().len();
    if len > SUN_PATH_MAX {
        return Err(Error::PathTooLong {
            path: path.to_owned(),
            len,
            max: SUN_PATH_MAX,
        });
    }
    Ok(())
}

/// First pause between attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// Longest pause between attempts: short enough that a server that starts
/// accepting again is seen promptly, long enough not to spin.
const MAX_PAUSE: Duration = Duration::from_millis(20);

/// Connects to the Unix stream socket at `path`, waiting at most `timeout`
/// for room in its listen backlog. The stream comes back blocking and
/// close-on-exec.
///
/// `socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC)`, then
/// `connect(2)`. A full backlog (`EAGAIN`) is retried with pauses growing
/// from 1 to 20 ms, `EINTR` at once, until `timeout` has passed.
/// `Duration::ZERO` tries once; a timeout too large to add to the clock
/// means no deadline.
///
/// # Errors
/// [`Error::ConnectTimeout`] naming the path, the time waited and the last
/// errno (`EAGAIN`: the server is not accepting); [`Error::Connect`] naming
/// the path for every other failure (`ENOENT`: no socket there,
/// `ECONNREFUSED`: nobody listens, `EACCES`, …); [`Error::PathTooLong`].
///
/// # References
/// - [Linux `connect(2)`](https://man7.org/linux/man-pages/man2/connect.2.html)
/// - [Linux `unix(7)`](https://man7.org/linux/man-pages/man7/unix.7.html) (`EAGAIN`)
///
/// # Examples
/// ```
/// use std::time::Duration;
/// let path = std::env::temp_dir().join(format!("nodeipc-doc-connect-{}", std::process::id()));
/// let error = nodeipc_fdpass::connect_unix(&path, Duration::ZERO).unwrap_err();
/// assert!(error.to_string().contains("no such socket"), "{error}");
/// ```
#[doc(alias = "connect")]
pub fn connect_unix(path: &Path, timeout: Duration) -> Result<UnixStream> {
    connect_until(path, timeout, false)
}

/// Like [`connect_unix`], and waits (within the same `timeout`) while there
/// is no socket at `path` yet (`ENOENT`) or nobody listens on it yet
/// (`ECONNREFUSED`): for a client started beside its server.
///
/// # Errors
/// [`Error::ConnectTimeout`] with the last errno (`ENOENT`, `ECONNREFUSED`
/// or `EAGAIN`); [`Error::Connect`] for any other failure;
/// [`Error::PathTooLong`].
pub fn connect_unix_when_up(path: &Path, timeout: Duration) -> Result<UnixStream> {
    connect_until(path, timeout, true)
}

/// Why a connect failed, in words a person can act on, with the errno's
/// name; [`Error::Connect`] and [`Error::ConnectTimeout`] read this way, and
/// crates that keep the errno in their own error say it the same way.
pub fn connect_failure_reason(error: &io::Error) -> String {
    let words = match error.raw_os_error().map(Errno::from_raw_os_error) {
        Some(Errno::AGAIN) => {
            "its listen backlog is full: the server is not accepting connections (stopped or overloaded) (EAGAIN)"
        }
        Some(Errno::CONNREFUSED) => {
            "nobody listens on it: a stale socket file, or a server not listening yet (ECONNREFUSED)"
        }
        Some(Errno::NOENT) => "no such socket (ENOENT)",
        Some(Errno::INPROGRESS) => "the connection did not complete (EINPROGRESS)",
        _ => return error.to_string(),
    };
    words.to_owned()
}

fn connect_until(path: &Path, timeout: Duration, wait_for_server: bool) -> Result<UnixStream> {
    check_sun_path(path)?;
    let address = SocketAddrUnix::new(path).map_err(|e| connect_error(path, e))?;
    let start = Instant::now();
    // None: a timeout past the clock's range, i.e. no deadline.
    let deadline = start.checked_add(timeout);
    let left = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let mut pause = FIRST_PAUSE;
    loop {
        let last = match attempt(&address, left())? {
            Ok(stream) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| Error::io("fcntl(O_NONBLOCK off)", e))?;
                return Ok(stream);
            }
            Err(Errno::INTR) => continue,
            Err(e @ Errno::AGAIN) => e,
            Err(e @ Errno::INPROGRESS) => e,
            Err(e @ (Errno::NOENT | Errno::CONNREFUSED)) if wait_for_server => e,
            Err(e) => return Err(connect_error(path, e)),
        };
        let remaining = left();
        if remaining.is_some_and(|r| r.is_zero()) {
            return Err(Error::ConnectTimeout {
                path: path.to_owned(),
                waited: start.elapsed(),
                last: last.into(),
            });
        }
        std::thread::sleep(remaining.map_or(pause, |r| r.min(pause)));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// One connect on a new socket (a failed one is not reused). The outer
/// `Result` is a failure to make the socket; the inner one the connect's.
fn attempt(address: &SocketAddrUnix, left: Option<Duration>) -> Result<Result<UnixStream, Errno>> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| Error::io("socket(AF_UNIX, SOCK_STREAM)", e))?;
    match rustix::net::connect(&fd, address) {
        Ok(()) => Ok(Ok(UnixStream::from(fd))),
        // Not what AF_UNIX does today; should it start, wait for the
        // outcome within what is left rather than spin.
        Err(Errno::INPROGRESS) => Ok(finish_in_progress(fd, left)),
        Err(e) => Ok(Err(e)),
    }
}

fn finish_in_progress(
    fd: std::os::fd::OwnedFd,
    left: Option<Duration>,
) -> Result<UnixStream, Errno> {
    let timespec = left.map(timespec);
    let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
    match rustix::event::poll(&mut fds, timespec.as_ref()) {
        Ok(0) => Err(Errno::INPROGRESS),
        Ok(_) => match rustix::net::sockopt::socket_error(&fd) {
            Ok(Ok(())) => Ok(UnixStream::from(fd)),
            Ok(Err(e)) | Err(e) => Err(e),
        },
        // A signal cut the wait short: the caller starts again.
        Err(Errno::INTR) => Err(Errno::INTR),
        Err(e) => Err(e),
    }
}

fn connect_error(path: &Path, source: impl Into<io::Error>) -> Error {
    Error::Connect {
        path: path.to_owned(),
        source: source.into(),
    }
}
