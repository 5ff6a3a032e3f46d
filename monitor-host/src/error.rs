//! This crate's error: the monitor's own, and what only reading
//! configuration files and running a monitor process can give.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// What can go wrong reading a configuration, building health checks or
/// spawning a monitor. Every variant names the file, process or field it is
/// about; system call failures keep their errno.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is not acceptable (this crate's fields, and the
    /// monitor's [`nodeipc_monitor::Error::Config`], which becomes this).
    #[error("invalid monitor configuration: {reason}")]
    Config {
        /// Which value and why.
        reason: String,
    },

    /// A configuration file could not be parsed.
    #[error("configuration file {path}: {reason}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// What went wrong (with line and column for a parse error).
        reason: String,
    },

    /// A file read or created was refused or could not be opened: a
    /// configuration file (not a regular file, not ours, writable by group
    /// or others, too large) or a log file (a symlink or someone else's file
    /// in its place). The error names the path and what was found there
    /// (type, owner, mode, size); the errno is kept.
    #[error("{what}: {source}")]
    File {
        /// Which file ("configuration file", "log file").
        what: &'static str,
        /// What was wrong with it.
        #[source]
        source: nodeipc_fs::Error,
    },

    /// The monitor process could not be started.
    #[error("starting the monitor process {program} failed: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },

    /// The spawned monitor process exited before it accepted connections.
    #[error("the monitor process exited before accepting connections ({status}){stderr_hint}")]
    ServerExited {
        /// How it ended.
        status: ExitStatus,
        /// A hint on where its message went.
        stderr_hint: &'static str,
    },

    /// The spawned monitor did not accept connections in time.
    #[error(
        "the monitor process {pid} did not accept connections on {path} within {}",
        nodeipc_text::duration(*waited)
    )]
    NotReady {
        /// Its pid.
        pid: u32,
        /// Its control socket.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },

    /// The monitor's own error (binding, serving, a control connection, a
    /// system call).
    #[error(transparent)]
    Monitor(nodeipc_monitor::Error),
}

impl From<nodeipc_monitor::Error> for Error {
    fn from(error: nodeipc_monitor::Error) -> Error {
        match error {
            nodeipc_monitor::Error::Config { reason } => Error::Config { reason },
            other => Error::Monitor(other),
        }
    }
}

impl Error {
    /// Whether a bounded wait ran out: [`Error::NotReady`], or the
    /// monitor's ([`nodeipc_monitor::Error::is_timeout`]).
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::NotReady { .. } => true,
            Error::Monitor(e) => e.is_timeout(),
            _ => false,
        }
    }
}

impl From<Error> for io::Error {
    /// An `io::Error` of the closest kind that wraps this error whole
    /// (`get_ref()` and a downcast give it back); the monitor's own keeps
    /// its conversion.
    fn from(error: Error) -> io::Error {
        let kind = match &error {
            Error::Monitor(_) => {
                let Error::Monitor(inner) = error else {
                    unreachable!()
                };
                return inner.into();
            }
            Error::File {
                source: nodeipc_fs::Error::Io { source, .. },
                ..
            }
            | Error::Spawn { source, .. } => source.kind(),
            Error::File {
                source: nodeipc_fs::Error::TooLarge { .. },
                ..
            } => io::ErrorKind::InvalidData,
            Error::File { .. } => io::ErrorKind::PermissionDenied,
            Error::NotReady { .. } => io::ErrorKind::TimedOut,
            Error::Config { .. } | Error::ConfigFile { .. } => io::ErrorKind::InvalidInput,
            Error::ServerExited { .. } => io::ErrorKind::Other,
        };
        io::Error::new(kind, error)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::Error;

    /// Times in the messages are in words (regression: "within 10.093828ms").
    #[test]
    fn regression_times_in_messages_are_in_words() {
        let not_ready = Error::NotReady {
            pid: 7,
            path: PathBuf::from("/run/x.sock"),
            waited: Duration::from_nanos(10_093_828),
        };
        assert_eq!(
            not_ready.to_string(),
            "the monitor process 7 did not accept connections on /run/x.sock within 10 ms"
        );
        assert!(not_ready.is_timeout());
    }

    #[test]
    fn the_monitors_config_error_is_ours_and_the_rest_wrapped() {
        let config = Error::from(nodeipc_monitor::Error::Config { reason: "x".into() });
        assert!(matches!(config, Error::Config { ref reason } if reason == "x"));
        let other = Error::from(nodeipc_monitor::Error::NoHeartbeatRegion);
        assert!(matches!(other, Error::Monitor(_)), "{other:?}");
        assert_eq!(
            std::io::Error::from(other).kind(),
            std::io::ErrorKind::InvalidInput
        );
    }
}
