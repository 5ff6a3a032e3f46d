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

/// Accepts one pending connection as a non-blocking stream (the server
/// polls every connection); `None` when none is pending.
pub(crate) fn accept(listener: &Listener) -> Result<Option<UnixStream>> {
    let accepted = listener
        .accept()
        .map_err(|e| Error::io("accept", listener.path().display(), std::io::Error::from(e)))?;
    let Some((stream, _credentials)) = accepted else {
        return Ok(None);
    };
    stream
        .set_nonblocking(true)
        .map_err(|e| Error::io("set_nonblocking", listener.path().display(), e))?;
    Ok(Some(stream))
}
