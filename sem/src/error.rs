//! The one error type of this crate.

use std::io;
use std::time::Duration;

use nodeipc_text::InWords;

/// What can go wrong with a semaphore. Variants name the semaphore; kernel
/// and libc failures keep their errno.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The name breaks the naming rules (those of shared-memory names, and
    /// short enough that `sem.<name>` fits in 255 bytes).
    #[error("invalid semaphore name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// An initial value above what the semaphore can count.
    #[error("initial value {value} for semaphore {name} is above the maximum {max}")]
    InvalidValue {
        /// The semaphore.
        name: String,
        /// The value asked for.
        value: u32,
        /// The largest allowed.
        max: u32,
    },

    /// `create` found the name taken: creation is exclusive.
    #[error(
        "semaphore {name} already exists (creation is exclusive; remove stale objects with `nodeipc clean`)"
    )]
    AlreadyExists {
        /// The name.
        name: String,
    },

    /// `open` found no semaphore of that name.
    #[error("semaphore {name} does not exist")]
    NotFound {
        /// The name.
        name: String,
    },

    /// The semaphore's file is owned by another user or has a mode other than
    /// 0600 (or was replaced while we opened it): never trusted.
    #[error(
        "refusing semaphore {name}: owner uid {owner}, mode {mode:04o}; \
         expected owner uid {expected_owner} and mode 0600"
    )]
    Untrusted {
        /// The name.
        name: String,
        /// The uid owning `/dev/shm/sem.<name>`.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// Our effective uid.
        expected_owner: u32,
    },

    /// Something other than a regular file sits at the semaphore's name (a
    /// FIFO, a directory, a socket, a symlink, ...): refused at once,
    /// without opening it in a way that could block.
    #[error("refusing semaphore {name}: {path} is {found}, not a regular file", path = path.display())]
    NotRegular {
        /// The name.
        name: String,
        /// Its file, `/dev/shm/sem.<name>`.
        path: std::path::PathBuf,
        /// What is there: "a FIFO", "a directory", ...
        found: &'static str,
    },

    /// The semaphore's file is too short to hold a semaphore, or one of its
    /// words holds what no semaphore can: another process wrote garbage.
    #[error("semaphore {name} is corrupt: {what}")]
    Corrupt {
        /// The name.
        name: String,
        /// Which word, and what it holds.
        what: String,
    },

    /// A bounded wait ran out before the semaphore could be taken.
    #[error("timed out after {} waiting for semaphore {name}", InWords(*waited))]
    Timeout {
        /// The semaphore.
        name: String,
        /// How long we waited.
        waited: Duration,
    },

    /// A wait ended by this thread's cancellation hook
    /// ([`nodeipc_shm::wait::with_cancel_hook`]): Ctrl-C in a binding.
    #[error("interrupted after {} waiting for semaphore {name}", InWords(*waited))]
    Interrupted {
        /// The semaphore.
        name: String,
        /// How long we waited.
        waited: Duration,
    },

    /// A post would take the count past its maximum.
    #[error("semaphore {name} is at its maximum count {max}; post refused")]
    Overflow {
        /// The semaphore.
        name: String,
        /// The maximum count.
        max: u32,
    },

    /// A system or libc call failed; the errno is kept in `source`.
    #[error("{op} failed for semaphore {name}: {source}")]
    Io {
        /// The call, e.g. `sem_open`.
        op: &'static str,
        /// The semaphore.
        name: String,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, name: &str, source: impl Into<io::Error>) -> Self {
        Error::Io {
            op,
            name: name.to_owned(),
            source: source.into(),
        }
    }

    /// Whether this is a [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// The errno behind this error, when a system call produced it: the
    /// one kept in `source`, or the one a variant stands for (`ENOENT` for
    /// [`Error::NotFound`], `EEXIST` for [`Error::AlreadyExists`]).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::NotFound { .. } => Some(libc::ENOENT),
            Error::AlreadyExists { .. } => Some(libc::EEXIST),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    /// An `io::Error` of the closest kind (a failed system call's own kind)
    /// that wraps this error whole: `get_ref()` and a downcast give it back,
    /// and `source()` is its source — for a failed system call, the kernel's
    /// error with its errno (`raw_os_error()`).
    fn from(error: Error) -> io::Error {
        let kind = match &error {
            Error::Io { source, .. } => source.kind(),
            Error::NotFound { .. } => io::ErrorKind::NotFound,
            Error::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
            Error::Timeout { .. } => io::ErrorKind::TimedOut,
            Error::Interrupted { .. } => io::ErrorKind::Interrupted,
            Error::Untrusted { .. } | Error::NotRegular { .. } => io::ErrorKind::PermissionDenied,
            Error::Corrupt { .. } => io::ErrorKind::InvalidData,
            Error::InvalidName { .. } => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, error)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
