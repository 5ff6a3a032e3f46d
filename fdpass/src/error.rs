//! The one error type of this crate.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use nodeipc_text::InWords;

use crate::connect_failure_reason;

/// What can go wrong moving descriptors between processes. Every variant
/// says which process, descriptor or limit it is about; system call failures
/// keep their errno.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// More descriptors than one message can carry, or than the caller
    /// accepts. Nothing was sent; on receive, every descriptor that arrived
    /// was closed.
    #[error("{count} descriptors in one message; at most {max} allowed")]
    TooManyFds {
        /// How many were given or arrived.
        count: usize,
        /// The limit.
        max: usize,
    },

    /// Descriptors must travel with at least one byte of payload.
    #[error("descriptors must travel with at least one byte of payload")]
    EmptyPayload,

    /// The kernel had more descriptors for us than the control buffer held
    /// (`MSG_CTRUNC`): the excess was discarded by the kernel and those that
    /// did arrive have been closed.
    #[error(
        "control data truncated (MSG_CTRUNC): the sender passed more than the {max_fds} descriptors we accept; {closed} that arrived were closed"
    )]
    ControlTruncated {
        /// How many descriptors this receive accepts.
        max_fds: usize,
        /// How many arrived and were closed.
        closed: usize,
    },

    /// A control message other than `SCM_RIGHTS` arrived (credentials, say);
    /// any descriptors that arrived with it were closed.
    #[error(
        "unexpected control message {kind}; {closed} descriptors that arrived with it were closed"
    )]
    UnexpectedControl {
        /// What it was.
        kind: &'static str,
        /// Descriptors closed.
        closed: usize,
    },

    /// The datagram was longer than the buffer (`MSG_TRUNC`); any descriptors
    /// that arrived with it were closed.
    #[error(
        "payload truncated (MSG_TRUNC): the message is longer than the {capacity}-byte buffer; {closed} descriptors that arrived were closed"
    )]
    PayloadTruncated {
        /// The buffer's size.
        capacity: usize,
        /// Descriptors closed.
        closed: usize,
    },

    /// The peer closed the connection before the whole message arrived;
    /// descriptors that arrived with its start were closed.
    #[error("peer closed the connection after {received} of {expected} bytes")]
    Closed {
        /// Bytes received.
        received: usize,
        /// Bytes expected.
        expected: usize,
    },

    /// The connected peer runs as a user we do not accept.
    #[error(
        "refusing peer pid {pid}: it runs as uid {uid}, and only uid {expected_uid} is accepted"
    )]
    PeerRefused {
        /// The peer's pid.
        pid: u32,
        /// The peer's uid.
        uid: u32,
        /// Our uid.
        expected_uid: u32,
    },

    /// The process is gone: it exited, or its pid now belongs to a process
    /// started later (a recycled pid is never trusted).
    #[error("process {pid} is gone: {reason}")]
    ProcessGone {
        /// The pid.
        pid: u32,
        /// Exited, or pid reused.
        reason: &'static str,
    },

    /// The process has no such descriptor (it closed it, or never had it).
    #[error(
        "process {pid} has no descriptor {fd} (it must keep the descriptor open until importers are done)"
    )]
    NoSuchFd {
        /// The pid.
        pid: u32,
        /// The descriptor number in that process.
        fd: i32,
    },

    /// The kernel refused `pidfd_getfd` (`EPERM`): another user, Yama's
    /// `ptrace_scope`, or a container's seccomp profile.
    ///
    /// The message reaches C and Python callers too, so it names the ways
    /// out in the system's terms; in Rust they are
    /// [`allow_ptracer`](crate::allow_ptracer) on the exporting side and
    /// [`Transport::ScmRights`](crate::Transport::ScmRights) (or
    /// [`send_fds`](crate::send_fds)).
    #[error(
        "pidfd_getfd of descriptor {fd} in process {pid} is not permitted (EPERM); ways out: run both \
         processes as the same user, have process {pid} allow this one to trace it \
         (prctl(PR_SET_PTRACER, <this pid>), for Yama's ptrace_scope), or pass the descriptor \
         over a Unix socket with SCM_RIGHTS instead"
    )]
    NotPermitted {
        /// The exporting process.
        pid: u32,
        /// The descriptor in it.
        fd: i32,
    },

    /// The kernel lacks the call (`ENOSYS`): pidfds need Linux 5.3,
    /// `pidfd_getfd` 5.6.
    #[error("{call} is not supported by this kernel (ENOSYS; it needs Linux {needs} or later)")]
    Unsupported {
        /// The system call.
        call: &'static str,
        /// The kernel version that introduced it.
        needs: &'static str,
    },

    /// A socket path longer than `sockaddr_un` holds.
    #[error("socket path {path:?} is {len} bytes; at most {max} fit in a socket address")]
    PathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// The socket's directory is not a directory.
    #[error("{path:?} is not a directory")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },

    /// The socket's directory belongs to someone else or others may write to
    /// it: they could swap the socket.
    #[error(
        "refusing socket directory {dir:?}: owner uid {owner}, mode {mode:04o}; it must be owned by uid {expected_owner} and not writable by group or others"
    )]
    UnsafeDirectory {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// Our uid.
        expected_owner: u32,
    },

    /// A symlink where the socket should be.
    #[error("refusing {path:?}: a symlink is in the socket's place")]
    SymlinkRefused {
        /// The path.
        path: PathBuf,
    },

    /// Another kind of file where the socket should be.
    #[error("refusing {path:?}: it exists and is not a socket")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },

    /// A live server already listens there.
    #[error("a server already listens on {path:?}")]
    AlreadyServing {
        /// The path.
        path: PathBuf,
    },

    /// Binding, listening or accepting at a path failed.
    #[error("{op} failed for socket {path:?}: {source}")]
    Listen {
        /// The call.
        op: &'static str,
        /// The socket path.
        path: PathBuf,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },

    /// A client's connect failed for a reason waiting would not cure
    /// (`ENOENT`, `ECONNREFUSED`, `EACCES`, …); the errno is kept in `source`.
    #[error(
        "cannot connect to socket {path:?}: {}",
        connect_failure_reason(source)
    )]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },

    /// No connection within the time allowed: the server's backlog stayed
    /// full (`EAGAIN`: it is not accepting), or, when waiting for it to come
    /// up, it never did (`ENOENT`, `ECONNREFUSED`).
    #[error(
        "no connection to socket {path:?} within {}: {}",
        InWords(*waited),
        connect_failure_reason(last)
    )]
    ConnectTimeout {
        /// The socket path.
        path: PathBuf,
        /// How long we tried.
        waited: Duration,
        /// The last attempt's error, with its raw errno.
        #[source]
        last: io::Error,
    },

    /// Bytes that are not an `FdHandle`.
    #[error("not an fd handle: {reason}")]
    BadHandle {
        /// What is wrong with the bytes.
        reason: String,
    },

    /// A system call on a process (`pidfd_open`, `pidfd_send_signal`,
    /// `pidfd_getfd`, a poll of its pidfd) failed for a reason no other
    /// variant covers; names the process and, for `pidfd_getfd`, the
    /// descriptor. The errno is kept in `source`.
    #[error("{op} failed for process {pid}{}: {source}", descriptor_suffix(*.fd))]
    ProcessIo {
        /// The call.
        op: &'static str,
        /// The process it was about.
        pid: u32,
        /// The descriptor in that process, for `pidfd_getfd`.
        fd: Option<i32>,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },

    /// A system call failed; the errno is kept in `source`.
    #[error("{op} failed: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, source: impl Into<io::Error>) -> Self {
        Error::Io {
            op,
            source: source.into(),
        }
    }

    pub(crate) fn process_io(
        op: &'static str,
        pid: u32,
        fd: Option<i32>,
        source: impl Into<io::Error>,
    ) -> Self {
        Error::ProcessIo {
            op,
            pid,
            fd,
            source: source.into(),
        }
    }
}

impl Error {
    /// The errno behind this error, when the kernel refused: the one kept
    /// in `source`, or the one a variant stands for — `EPERM` for
    /// [`Error::NotPermitted`], `EBADF` for [`Error::NoSuchFd`], `ESRCH`
    /// for [`Error::ProcessGone`], `ENOSYS` for [`Error::Unsupported`],
    /// `EADDRINUSE` for [`Error::AlreadyServing`].
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. }
            | Error::ProcessIo { source, .. }
            | Error::Listen { source, .. }
            | Error::Connect { source, .. }
            | Error::ConnectTimeout { last: source, .. } => source.raw_os_error(),
            Error::NotPermitted { .. } => Some(libc::EPERM),
            Error::NoSuchFd { .. } => Some(libc::EBADF),
            Error::ProcessGone { .. } => Some(libc::ESRCH),
            Error::Unsupported { .. } => Some(libc::ENOSYS),
            Error::AlreadyServing { .. } => Some(libc::EADDRINUSE),
            _ => None,
        }
    }
}

/// `", descriptor <fd>"` when there is one, for [`Error::ProcessIo`].
fn descriptor_suffix(fd: Option<i32>) -> String {
    fd.map(|fd| format!(", descriptor {fd}"))
        .unwrap_or_default()
}

impl From<Error> for io::Error {
    /// An `io::Error` of the closest kind (a failed system call's own kind)
    /// that wraps this error whole: `get_ref()` and a downcast give it back,
    /// and `source()` is its source — for a failed system call, the kernel's
    /// error with its errno (`raw_os_error()`).
    fn from(error: Error) -> io::Error {
        let kind = match &error {
            Error::Io { source, .. }
            | Error::ProcessIo { source, .. }
            | Error::Listen { source, .. }
            | Error::Connect { source, .. } => source.kind(),
            Error::ConnectTimeout { .. } => io::ErrorKind::TimedOut,
            Error::AlreadyServing { .. } => io::ErrorKind::AddrInUse,
            Error::UnsafeDirectory { .. } | Error::SymlinkRefused { .. } => {
                io::ErrorKind::PermissionDenied
            }
            Error::NotPermitted { .. } | Error::PeerRefused { .. } => {
                io::ErrorKind::PermissionDenied
            }
            Error::ProcessGone { .. } | Error::NoSuchFd { .. } => io::ErrorKind::NotFound,
            Error::Closed { .. } => io::ErrorKind::UnexpectedEof,
            Error::Unsupported { .. } => io::ErrorKind::Unsupported,
            Error::TooManyFds { .. } | Error::EmptyPayload | Error::BadHandle { .. } => {
                io::ErrorKind::InvalidInput
            }
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, error)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
