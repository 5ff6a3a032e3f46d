//! The launcher's one error type.

use std::path::PathBuf;

/// What went wrong before or around the ranks (a rank's own failure is an
/// [`Outcome`](crate::Outcome), not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option is out of range or missing.
    #[error("{reason}")]
    Options {
        /// Which option, its value and the bound.
        reason: String,
    },
    /// The private run directory could not be made.
    #[error("run directory under {parent}: {source}")]
    RunDir {
        /// Where it was to be made.
        parent: PathBuf,
        /// Why not.
        source: nodeipc_fs::Error,
    },
    /// A rank's monitor could not be started.
    #[error("monitor of local rank {local_rank}: {source}")]
    Monitor {
        /// Whose monitor.
        local_rank: u32,
        /// Why not.
        source: nodeipc_monitor::Error,
    },
    /// A rank's monitor stopped while the launch ran.
    #[error("the monitor of local rank {local_rank} ended: {why}")]
    MonitorEnded {
        /// Whose monitor.
        local_rank: u32,
        /// How it ended.
        why: String,
    },
    /// A rank could not be started.
    #[error("starting local rank {local_rank} ({program}): {source}")]
    Spawn {
        /// Which rank.
        local_rank: u32,
        /// The program.
        program: String,
        /// Why not (errno kept).
        source: std::io::Error,
    },
    /// A system call the launcher needs failed.
    #[error("{op}: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// Its error (errno kept).
        source: std::io::Error,
    },
    /// The events file could not be opened or written.
    #[error("events file {path}: {source}")]
    Events {
        /// Its path.
        path: PathBuf,
        /// Why (errno kept).
        source: std::io::Error,
    },
    /// The round backend failed (multi-node backends: the store).
    #[error("round backend: {reason}")]
    Backend {
        /// What failed.
        reason: String,
    },
}

impl Error {
    pub(crate) fn options(reason: impl Into<String>) -> Error {
        Error::Options {
            reason: reason.into(),
        }
    }

    pub(crate) fn io(op: &'static str, source: impl Into<std::io::Error>) -> Error {
        Error::Io {
            op,
            source: source.into(),
        }
    }
}

/// The launcher's result.
pub type Result<T> = std::result::Result<T, Error>;
