//! The one error type of this crate.

use std::path::PathBuf;

use rustix::fs::FileType;

/// What can go wrong opening or creating a path others can reach.
///
/// Every variant names the path, so a message read in a log says which file
/// was refused and why; kernel errors keep their errno.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Something other than what was expected sits at the path: a FIFO,
    /// socket, device, directory or symlink where a regular file belongs, or
    /// a file where a directory belongs.
    #[error("{path}: found {found}, expected {expected}{}", owned_by(*owner), path = path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What is there ("a FIFO", "a symlink", ...).
        found: &'static str,
        /// What was expected ("a regular file", "a directory").
        expected: &'static str,
        /// Who owns what is there (whoever planted it), when known.
        owner: Option<u32>,
    },

    /// The file belongs to another user, or its mode lets others in.
    #[error(
        "refusing {path}: owner uid {owner}, mode {mode:04o}; expected owner uid {expected_owner} and {rule}",
        path = path.display()
    )]
    Untrusted {
        /// The path.
        path: PathBuf,
        /// The uid that owns it.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// Our effective uid.
        expected_owner: u32,
        /// The rule it breaks ("mode 0600", "no write permission for group or others").
        rule: String,
    },

    /// The file is larger than the caller accepts.
    #[error("{path} holds {size} bytes, more than the {max} accepted", path = path.display())]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The cap.
        max: u64,
    },

    /// A system call failed.
    #[error("{op} {path}: {source}", path = path.display())]
    Io {
        /// The operation ("open", "fstat", "mkdir", ...).
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The kernel's error, errno kept.
        #[source]
        source: std::io::Error,
    },
}

/// "; owner uid N" when the owner is known.
fn owned_by(owner: Option<u32>) -> String {
    owner.map_or_else(String::new, |uid| format!("; owner uid {uid}"))
}

/// This crate's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(op: &'static str, path: &std::path::Path, errno: rustix::io::Errno) -> Error {
        Error::Io {
            op,
            path: path.to_owned(),
            source: errno.into(),
        }
    }

    /// The errno behind an [`Error::Io`], if that is what this is.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// A file type in words, for messages: "a FIFO", "a directory", ...
pub fn file_type_name(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "a file of unknown type",
    }
}
