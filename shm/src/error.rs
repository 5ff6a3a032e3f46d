//! The one error type of this crate.

use std::io;
use std::time::Duration;

use nodeipc_text::InWords;

/// What can go wrong with a shared-memory region.
///
/// Every variant names the object it is about, so a message read in a log
/// says which region failed and why; errors from the kernel keep their errno
/// (`source.raw_os_error()`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The name breaks the POSIX shared-memory naming rules.
    #[error("invalid shared-memory name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// A size of zero, or one too large for this machine's address space.
    #[error("invalid size {size} for {object}: {reason}")]
    InvalidSize {
        /// The object the size was meant for.
        object: String,
        /// The size asked for.
        size: u64,
        /// Why it is refused.
        reason: &'static str,
    },

    /// `create` found the name taken: creation is exclusive.
    #[error(
        "shared-memory object {name} already exists (creation is exclusive; remove stale objects with `nodeipc clean`)"
    )]
    AlreadyExists {
        /// The name.
        name: String,
    },

    /// `open` without waiting found no object of that name.
    #[error("shared-memory object {name} does not exist")]
    NotFound {
        /// The name.
        name: String,
    },

    /// The object is owned by another user or has a mode other than 0600: a
    /// name squatted by someone else is never trusted.
    #[error(
        "refusing shared-memory object {name}: owner uid {owner}, mode {mode:04o}; \
         expected owner uid {expected_owner} and mode 0600"
    )]
    Untrusted {
        /// The name.
        name: String,
        /// The uid that owns the object.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// Our effective uid.
        expected_owner: u32,
    },

    /// The object is not a regular file: a FIFO, socket, directory, device
    /// or symlink sits at the name, or a received descriptor is no file.
    #[error("{object} is {found}, not a shared-memory object (a regular file)")]
    NotRegular {
        /// The object.
        object: String,
        /// What was found, in words ("a FIFO", "a directory", ...).
        found: &'static str,
    },

    /// The memory for the region could not be reserved when it was made:
    /// its tmpfs (`/dev/shm` for named regions) is full, or the system is
    /// out of memory. Refused then, rather than a `SIGBUS` in whichever
    /// process first writes past the room; nothing is left under the name.
    #[error(
        "no space for shared-memory object {name} of {size} bytes: {available} bytes {what} ({source}); \
         remove stale objects with `nodeipc clean` or make the region smaller"
    )]
    NoSpace {
        /// The object (its name, or what it came from).
        name: String,
        /// The size asked for.
        size: u64,
        /// What the system reported as available when refusing.
        available: u64,
        /// Where that room is ("free in its tmpfs", "of memory and swap available").
        what: &'static str,
        /// The error, errno kept (`ENOSPC`, or `ENOMEM` from a memory cgroup).
        #[source]
        source: io::Error,
    },

    /// The object is smaller than the caller needs.
    #[error("shared-memory object {name} has {size} bytes, fewer than the {min_size} required")]
    TooSmall {
        /// The name.
        name: String,
        /// Its size now.
        size: u64,
        /// The size asked for.
        min_size: u64,
    },

    /// A bounded wait ran out.
    #[error("timed out after {} waiting for shared-memory object {name} to {what}", InWords(*waited))]
    Timeout {
        /// The name.
        name: String,
        /// How long we waited.
        waited: Duration,
        /// What we were waiting for.
        what: &'static str,
    },

    /// A wait ended by this thread's cancellation hook
    /// ([`with_cancel_hook`](crate::wait::with_cancel_hook)): Ctrl-C in a binding.
    #[error("interrupted after {} waiting for shared-memory object {name} to {what}", InWords(*waited))]
    Interrupted {
        /// The name.
        name: String,
        /// How long we waited.
        waited: Duration,
        /// What we were waiting for.
        what: &'static str,
    },

    /// An access outside the mapping.
    #[error("range {offset}..{offset}+{len} is outside {object} ({size} bytes)")]
    OutOfBounds {
        /// The region.
        object: String,
        /// Start of the access.
        offset: usize,
        /// Its length in bytes.
        len: usize,
        /// Size of the region.
        size: usize,
    },

    /// A typed view at an offset that breaks the type's alignment.
    #[error("offset {offset} in {object} is not aligned to {align} bytes as {type_name} needs")]
    Misaligned {
        /// The region.
        object: String,
        /// The offset asked for.
        offset: usize,
        /// Alignment of the type.
        align: usize,
        /// The type.
        type_name: &'static str,
    },

    /// Huge pages were asked for and the system has none to give.
    #[error("huge pages unavailable for {object}: {reason}")]
    HugePagesUnavailable {
        /// The object.
        object: String,
        /// What the system said (free pages, page size).
        reason: String,
    },

    /// The object cannot be sealed (it is not a memfd created with sealing allowed).
    #[error("{object} cannot be sealed: only memfds created with MFD_ALLOW_SEALING can")]
    NotSealable {
        /// The object.
        object: String,
    },

    /// A write through a region mapped read-only ([`Region::from_fd_read_only`](crate::Region::from_fd_read_only),
    /// [`OpenOptions::read_only`](crate::OpenOptions::read_only)).
    #[error("{object}: mapped read-only, so it cannot be written")]
    ReadOnly {
        /// The region's label.
        object: String,
    },

    /// A system call failed; the errno is kept in `source`.
    #[error("{op} failed for {object}: {source}")]
    Io {
        /// The call, e.g. `shm_open`.
        op: &'static str,
        /// What it was applied to.
        object: String,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, object: &str, errno: impl Into<io::Error>) -> Self {
        Error::Io {
            op,
            object: object.to_owned(),
            source: errno.into(),
        }
    }

    /// The errno behind this error, when a system call produced it: the
    /// one kept in `source`, or the one a variant stands for (`ENOENT` for
    /// [`Error::NotFound`], `EEXIST` for [`Error::AlreadyExists`]).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } | Error::NoSpace { source, .. } => source.raw_os_error(),
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
            Error::Io { source, .. } | Error::NoSpace { source, .. } => source.kind(),
            Error::NotFound { .. } => io::ErrorKind::NotFound,
            Error::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
            Error::Timeout { .. } => io::ErrorKind::TimedOut,
            Error::Interrupted { .. } => io::ErrorKind::Interrupted,
            Error::Untrusted { .. } => io::ErrorKind::PermissionDenied,
            Error::InvalidName { .. } => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, error)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
