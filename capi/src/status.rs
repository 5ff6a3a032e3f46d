//! Status codes, the thread's last error, and the guard every entry point
//! runs its body under: no panic and no Rust error crosses into C.

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What a call of the C API returns: `NODEIPC_OK` (0) or a negative code.
/// `nodeipc_last_error()` gives the words; `nodeipc_last_errno()` the errno
/// behind a system error, when there is one.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum nodeipc_status {
    /// Success.
    NODEIPC_OK = 0,
    /// A null pointer, a bad length, a name or value the call cannot take.
    NODEIPC_ERR_INVALID_ARGUMENT = -1,
    /// A bounded wait ran out.
    NODEIPC_ERR_TIMEOUT = -2,
    /// A peer process died (or exited) while others needed it.
    NODEIPC_ERR_PEER_DIED = -3,
    /// A peer left (closed its handle) while others needed it.
    NODEIPC_ERR_PEER_LEFT = -4,
    /// An earlier failure made the object unusable (a poisoned group).
    NODEIPC_ERR_POISONED = -5,
    /// The kernel or a check of ours refused: another owner, a wrong mode,
    /// `pidfd_getfd` without ptrace rights, a peer of another uid.
    NODEIPC_ERR_NOT_PERMITTED = -6,
    /// A peer (the monitor, a rank) refused the request.
    NODEIPC_ERR_REFUSED = -7,
    /// No object of this name, no such process or descriptor.
    NODEIPC_ERR_NOT_FOUND = -8,
    /// An object of this name exists already.
    NODEIPC_ERR_ALREADY_EXISTS = -9,
    /// Data larger than its limit, or a caller's buffer too small for the result.
    NODEIPC_ERR_TOO_LARGE = -10,
    /// Something another process wrote breaks the protocol or the layout.
    NODEIPC_ERR_CORRUPT = -11,
    /// The kernel lacks what the call needs (`ENOSYS`, no huge pages, no sealing).
    NODEIPC_ERR_UNSUPPORTED = -12,
    /// Out of memory in `/dev/shm`.
    NODEIPC_ERR_NO_SPACE = -13,
    /// A system call failed: `nodeipc_last_errno()` has its errno.
    NODEIPC_ERR_IO = -14,
    /// The handle's magic is wrong: not a handle of this type, or freed.
    NODEIPC_ERR_BAD_HANDLE = -15,
    /// A bug of ours was caught at the boundary (a Rust panic).
    NODEIPC_ERR_PANIC = -16,
    /// The handle was made by the process this one was forked from: a
    /// forked child may only free it (which closes its descriptors, unmaps
    /// its memory and leaves everything else to the parent).
    NODEIPC_ERR_FORKED = -17,
}

pub(crate) use nodeipc_status::*;

/// A failure on its way to C: the code, the words, the errno (0: none).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: nodeipc_status,
    pub(crate) message: String,
    pub(crate) errno: i32,
}

pub(crate) type Outcome<T = ()> = Result<T, Failure>;

impl Failure {
    pub(crate) fn new(status: nodeipc_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
            errno: 0,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(NODEIPC_ERR_INVALID_ARGUMENT, message)
    }

    /// The same failure, its message saying which argument it is about.
    pub(crate) fn context(mut self, what: &str) -> Failure {
        self.message = format!("{what}: {}", self.message);
        self
    }

    pub(crate) fn from_error(
        status: nodeipc_status,
        error: &(dyn std::error::Error + 'static),
    ) -> Failure {
        Failure {
            status,
            message: error.to_string(),
            errno: errno_in(error),
        }
    }
}

/// The first errno in an error's chain of sources: a failed system call's
/// own, or the one a layer's error stands for (`EPERM` for a refused
/// `pidfd_getfd`, `ESRCH` for a process gone, `EBADF` for a descriptor it
/// does not have, `ENOENT`/`EEXIST` for a name: see each layer's
/// `raw_os_error`).
fn errno_in(error: &(dyn std::error::Error + 'static)) -> i32 {
    let mut next = Some(error);
    while let Some(e) = next {
        let code = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .or_else(|| {
                e.downcast_ref::<nodeipc_fdpass::Error>()
                    .and_then(nodeipc_fdpass::Error::raw_os_error)
            })
            .or_else(|| {
                e.downcast_ref::<nodeipc_shm::Error>()
                    .and_then(nodeipc_shm::Error::raw_os_error)
            })
            .or_else(|| {
                e.downcast_ref::<nodeipc_sem::Error>()
                    .and_then(nodeipc_sem::Error::raw_os_error)
            });
        if let Some(code) = code {
            return code;
        }
        next = e.source();
    }
    0
}

macro_rules! failure_from {
    ($($error:ty => $classify:ident),* $(,)?) => {$(
        impl From<$error> for Failure {
            fn from(e: $error) -> Failure {
                Failure::from_error($classify(&e), &e)
            }
        }
    )*};
}

failure_from! {
    nodeipc_shm::Error => shm_status,
    nodeipc_sem::Error => sem_status,
    nodeipc_fdpass::Error => fdpass_status,
    nodeipc_barrier::Error => barrier_status,
    nodeipc_monitor::Error => monitor_status,
}

fn shm_status(e: &nodeipc_shm::Error) -> nodeipc_status {
    use nodeipc_shm::Error as E;
    match e {
        E::InvalidName { .. }
        | E::InvalidSize { .. }
        | E::OutOfBounds { .. }
        | E::Misaligned { .. } => NODEIPC_ERR_INVALID_ARGUMENT,
        E::AlreadyExists { .. } => NODEIPC_ERR_ALREADY_EXISTS,
        E::NotFound { .. } => NODEIPC_ERR_NOT_FOUND,
        E::Untrusted { .. } | E::NotRegular { .. } => NODEIPC_ERR_NOT_PERMITTED,
        E::NoSpace { .. } => NODEIPC_ERR_NO_SPACE,
        E::TooSmall { .. } => NODEIPC_ERR_TOO_LARGE,
        E::Timeout { .. } => NODEIPC_ERR_TIMEOUT,
        E::HugePagesUnavailable { .. } | E::NotSealable { .. } => NODEIPC_ERR_UNSUPPORTED,
        _ => NODEIPC_ERR_IO,
    }
}

fn sem_status(e: &nodeipc_sem::Error) -> nodeipc_status {
    use nodeipc_sem::Error as E;
    match e {
        E::InvalidName { .. } | E::InvalidValue { .. } => NODEIPC_ERR_INVALID_ARGUMENT,
        E::AlreadyExists { .. } => NODEIPC_ERR_ALREADY_EXISTS,
        E::NotFound { .. } => NODEIPC_ERR_NOT_FOUND,
        E::Untrusted { .. } | E::NotRegular { .. } => NODEIPC_ERR_NOT_PERMITTED,
        E::Corrupt { .. } => NODEIPC_ERR_CORRUPT,
        E::Timeout { .. } => NODEIPC_ERR_TIMEOUT,
        E::Overflow { .. } => NODEIPC_ERR_TOO_LARGE,
        _ => NODEIPC_ERR_IO,
    }
}

fn fdpass_status(e: &nodeipc_fdpass::Error) -> nodeipc_status {
    use nodeipc_fdpass::Error as E;
    match e {
        E::TooManyFds { .. } | E::PayloadTruncated { .. } => NODEIPC_ERR_TOO_LARGE,
        E::EmptyPayload | E::BadHandle { .. } | E::PathTooLong { .. } => {
            NODEIPC_ERR_INVALID_ARGUMENT
        }
        E::ControlTruncated { .. } | E::UnexpectedControl { .. } => NODEIPC_ERR_CORRUPT,
        E::Closed { .. } | E::ProcessGone { .. } => NODEIPC_ERR_PEER_DIED,
        E::PeerRefused { .. }
        | E::NotPermitted { .. }
        | E::UnsafeDirectory { .. }
        | E::SymlinkRefused { .. } => NODEIPC_ERR_NOT_PERMITTED,
        E::NoSuchFd { .. } | E::NotADirectory { .. } | E::NotASocket { .. } => {
            NODEIPC_ERR_NOT_FOUND
        }
        E::Unsupported { .. } => NODEIPC_ERR_UNSUPPORTED,
        E::AlreadyServing { .. } => NODEIPC_ERR_ALREADY_EXISTS,
        E::ConnectTimeout { .. } => NODEIPC_ERR_TIMEOUT,
        _ => NODEIPC_ERR_IO,
    }
}

fn barrier_status(e: &nodeipc_barrier::Error) -> nodeipc_status {
    use nodeipc_barrier::Error as E;
    match e {
        // Busy: a second thread's call on a handle taken one thread at a time.
        E::InvalidOptions { .. }
        | E::RankOutOfRange { .. }
        | E::SubsetOutOfRange { .. }
        | E::Busy { .. } => NODEIPC_ERR_INVALID_ARGUMENT,
        E::Mismatch { .. } | E::NotAVault { .. } | E::Corrupt { .. } | E::Protocol { .. } => {
            NODEIPC_ERR_CORRUPT
        }
        E::NameTaken { .. } => NODEIPC_ERR_ALREADY_EXISTS,
        E::PeerDied { .. } => NODEIPC_ERR_PEER_DIED,
        E::PeerLeft { .. } => NODEIPC_ERR_PEER_LEFT,
        E::Timeout { .. } => NODEIPC_ERR_TIMEOUT,
        E::Poisoned { .. } => NODEIPC_ERR_POISONED,
        E::TooLarge { .. } => NODEIPC_ERR_TOO_LARGE,
        E::Transport { .. } => NODEIPC_ERR_UNSUPPORTED,
        E::Shm { source, .. } => shm_status(source),
        E::FdPass { source, .. } => fdpass_status(source),
        _ => NODEIPC_ERR_IO,
    }
}

fn monitor_status(e: &nodeipc_monitor::Error) -> nodeipc_status {
    use nodeipc_monitor::Error as E;
    match e {
        E::Config { .. } | E::PathTooLong { .. } | E::NoHeartbeatRegion => {
            NODEIPC_ERR_INVALID_ARGUMENT
        }
        E::Refused { .. } => NODEIPC_ERR_REFUSED,
        E::Timeout { .. } | E::ConnectTimeout { .. } => NODEIPC_ERR_TIMEOUT,
        E::Protocol { .. } | E::Frame { .. } | E::BadHeartbeatRegion { .. } => NODEIPC_ERR_CORRUPT,
        E::UnsafeDirectory { .. } | E::SymlinkRefused { .. } => NODEIPC_ERR_NOT_PERMITTED,
        E::NotADirectory { .. } | E::NotASocket { .. } => NODEIPC_ERR_NOT_FOUND,
        E::Fdpass(inner) => fdpass_status(inner),
        E::Shm(inner) => shm_status(inner),
        _ => NODEIPC_ERR_IO,
    }
}

thread_local! {
    /// The calling thread's last failure: its words (NUL-free) and errno.
    static LAST: RefCell<(CString, c_int)> = RefCell::new((CString::default(), 0));
}

fn remember(message: String, errno: i32) {
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST.with(|last| *last.borrow_mut() = (text, errno));
}

/// Runs one entry point's body: its failure becomes a code and the thread's
/// last error, and so does a panic (which never unwinds into C).
pub(crate) fn guard(op: &'static str, body: impl FnOnce() -> Outcome) -> nodeipc_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => NODEIPC_OK,
        Ok(Err(failure)) => {
            remember(format!("{op}: {}", failure.message), failure.errno);
            failure.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            remember(
                format!("{op}: internal error (a bug in nodeipc): {what}"),
                0,
            );
            NODEIPC_ERR_PANIC
        }
    }
}

/// The calling thread's last error message, in words (`""` before any).
///
/// Set by every call that fails; a successful call leaves it as it was. The
/// pointer stays valid until the next failing call on this thread: copy the
/// text to keep it.
#[unsafe(no_mangle)]
pub extern "C" fn nodeipc_last_error() -> *const c_char {
    // A thread-local in teardown cannot be reached: an empty static string then.
    LAST.try_with(|last| last.borrow().0.as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// The errno behind the calling thread's last error (0: none, or not a
/// system error).
#[unsafe(no_mangle)]
pub extern "C" fn nodeipc_last_errno() -> c_int {
    LAST.try_with(|last| last.borrow().1).unwrap_or(0)
}

/// The name of a status code (`"NODEIPC_ERR_TIMEOUT"`), or `"unknown"`: a
/// static string, never freed.
#[unsafe(no_mangle)]
pub extern "C" fn nodeipc_status_name(status: i32) -> *const c_char {
    let name: &'static std::ffi::CStr = match status {
        0 => c"NODEIPC_OK",
        -1 => c"NODEIPC_ERR_INVALID_ARGUMENT",
        -2 => c"NODEIPC_ERR_TIMEOUT",
        -3 => c"NODEIPC_ERR_PEER_DIED",
        -4 => c"NODEIPC_ERR_PEER_LEFT",
        -5 => c"NODEIPC_ERR_POISONED",
        -6 => c"NODEIPC_ERR_NOT_PERMITTED",
        -7 => c"NODEIPC_ERR_REFUSED",
        -8 => c"NODEIPC_ERR_NOT_FOUND",
        -9 => c"NODEIPC_ERR_ALREADY_EXISTS",
        -10 => c"NODEIPC_ERR_TOO_LARGE",
        -11 => c"NODEIPC_ERR_CORRUPT",
        -12 => c"NODEIPC_ERR_UNSUPPORTED",
        -13 => c"NODEIPC_ERR_NO_SPACE",
        -14 => c"NODEIPC_ERR_IO",
        -15 => c"NODEIPC_ERR_BAD_HANDLE",
        -16 => c"NODEIPC_ERR_PANIC",
        -17 => c"NODEIPC_ERR_FORKED",
        _ => c"unknown",
    };
    name.as_ptr()
}
