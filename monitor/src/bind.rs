//! The monitor's sockets, bound through [`nodeipc_fdpass::Listener`] (the
//! directory checked, a stale socket replaced, the new one 0600, removed on
//! drop), with its refusals told in this crate's own error variants.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use nodeipc_fdpass::Listener;

use crate::{Error, Result};

/// The control socket beside a rank socket: `PATH.control`.
pub fn control_socket_path(socket: impl AsRef<Path>) -> PathBuf {
    let mut path = socket.as_ref().as_os_str().to_owned();
    path.push(".control");
    PathBuf::from(path)
}

/// Binds a listening socket at `path`.
pub(crate) fn bind(path: &Path) -> Result<Listener> {
    Listener::bind(path).map_err(|error| match error {
        nodeipc_fdpass::Error::PathTooLong { path, len, max } => {
            Error::PathTooLong { path, len, max }
        }
        nodeipc_fdpass::Error::NotADirectory { path } => Error::NotADirectory { path },
        nodeipc_fdpass::Error::UnsafeDirectory {
            dir,
            owner,
            mode,
            expected_owner,
        } => Error::UnsafeDirectory {
            dir,
            owner,
            mode,
            expected_owner,
        },
        nodeipc_fdpass::Error::SymlinkRefused { path } => Error::SymlinkRefused { path },
        nodeipc_fdpass::Error::NotASocket { path } => Error::NotASocket { path },
        nodeipc_fdpass::Error::AlreadyServing { path } => Error::AlreadyServing { path },
        nodeipc_fdpass::Error::Listen { op, path, source } => Error::io(op, path.display(), source),
        other => Error::io("bind", path.display(), std::io::Error::from(other)),
    })
}

/// What one `accept` gave.
pub(crate) enum Accepted {
    /// A connection, made non-blocking (the server polls every connection).
    Stream(UnixStream),
    /// None is pending.
    Empty,
    /// The process or the system is out of descriptors or memory
    /// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`): the connection stays
    /// queued in the kernel, to be taken once something is freed.
    Exhausted(std::io::Error),
    /// This one connection was lost (an error the kernel passes on from
    /// the new socket, or setting it up failed): the next may do.
    Lost(String),
}

/// Accepts one pending connection.
///
/// # Errors
/// [`Error::Io`] only for errors that say the listening socket itself is
/// broken (`EBADF`, `EINVAL`, `ENOTSOCK`, `EOPNOTSUPP`, `EFAULT`): a bug,
/// not something a client can cause.
pub(crate) fn accept(listener: &Listener) -> Result<Accepted> {
    let stream = match listener.accept() {
        Ok(Some((stream, _credentials))) => stream,
        Ok(None) => return Ok(Accepted::Empty),
        Err(nodeipc_fdpass::Error::Listen { source, .. }) => {
            let errno = source
                .raw_os_error()
                .map(rustix::io::Errno::from_raw_os_error);
            use rustix::io::Errno;
            return match errno {
                Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM) => {
                    Ok(Accepted::Exhausted(source))
                }
                Some(
                    Errno::BADF | Errno::INVAL | Errno::NOTSOCK | Errno::OPNOTSUPP | Errno::FAULT,
                ) => Err(Error::io("accept", listener.path().display(), source)),
                _ => Ok(Accepted::Lost(format!("accept: {source}"))),
            };
        }
        // Accepted, then reading its credentials failed: it is closed.
        Err(other) => return Ok(Accepted::Lost(other.to_string())),
    };
    match stream.set_nonblocking(true) {
        Ok(()) => Ok(Accepted::Stream(stream)),
        Err(e) => Ok(Accepted::Lost(format!("set_nonblocking: {e}"))),
    }
}
