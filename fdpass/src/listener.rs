//! [`Listener`]: a Unix stream socket listening at a caller-given path, bound
//! safely: the directory checked, a stale socket replaced, the new one 0600,
//! removed on drop while the path still names it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::Mode;
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::connect::check_sun_path;
use crate::{Credentials, Error, ForkGeneration, Result, connect_unix, peer_credentials};

/// A listening, non-blocking Unix stream socket bound at a path it removes on
/// drop (only while the path still names this very socket, and only in the
/// process that bound it: a child forked since closes its copy alone).
///
/// Servers that other processes log on to (the channel's handshake, the rank
/// monitor) bind through this, so every one of them refuses the same traps:
/// a directory someone else can write to, a symlink or another file in the
/// socket's place, a live server already there.
///
/// # Examples
/// ```
/// let dir = std::env::temp_dir().join(format!("nodeipc-doc-listener-{}", std::process::id()));
/// // Private from the creating call on: no window with the umask's mode.
/// std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&dir)?;
/// let listener = nodeipc_fdpass::Listener::bind(&dir.join("sock"))?;
/// let _client = std::os::unix::net::UnixStream::connect(listener.path())?;
/// let (_server_side, peer) = listener.accept()?.expect("a pending connection");
/// assert_eq!(peer.pid, std::process::id());
/// drop(listener); // removes the socket file
/// std::fs::remove_dir(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    path: PathBuf,
    identity: (u64, u64),
    /// The process that bound it: a child forked since leaves the path to it.
    born: ForkGeneration,
}

impl Listener {
    /// Binds `path`: checks its directory (ours, not group/world writable),
    /// refuses a symlink, a non-socket or a live socket there, removes a
    /// stale socket (connect refused), then `bind` with the socket made 0600
    /// beforehand (`chmod` after only if the umask took owner bits), `listen`
    /// (nobody can connect between `bind` and `listen`).
    ///
    /// # Errors
    /// [`Error::PathTooLong`], [`Error::UnsafeDirectory`],
    /// [`Error::NotADirectory`], [`Error::SymlinkRefused`],
    /// [`Error::NotASocket`], [`Error::AlreadyServing`], [`Error::Io`].
    pub fn bind(path: &Path) -> Result<Listener> {
        check_sun_path(path)?;
        check_directory(path)?;
        clear_stale(path)?;
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| listen_error("socket", path, e))?;
        let address =
            SocketAddrUnix::new(path).map_err(|e| listen_error("sockaddr_un", path, e))?;
        // Linux gives the socket file the mode of the socket's own inode less
        // the umask: made 0600 before `bind`, the file is never anything
        // looser, not even for a moment. Refused, it only costs the head
        // start: the check after `bind` still tightens what it made.
        let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600));
        rustix::net::bind(&fd, &address).map_err(|e| match e {
            Errno::ADDRINUSE => Error::AlreadyServing {
                path: path.to_owned(),
            },
            e => listen_error("bind", path, e),
        })?;
        let stat = rustix::fs::lstat(path).map_err(|e| listen_error("lstat", path, e))?;
        let identity = (stat.st_dev, stat.st_ino);
        // From here on the file is ours: the guard removes it on any error.
        let socket = Listener {
            fd,
            path: path.to_owned(),
            identity,
            born: ForkGeneration::current(),
        };
        if stat.st_mode & 0o7777 != 0o600 {
            // A umask that took owner bits away, or an fchmod refused above.
            rustix::fs::chmod(path, Mode::from_raw_mode(0o600))
                .map_err(|e| listen_error("chmod 0600", path, e))?;
        }
        rustix::net::listen(&socket.fd, 64).map_err(|e| listen_error("listen", path, e))?;
        Ok(socket)
    }

    /// The path it is bound at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts one pending connection (close-on-exec, blocking) with its
    /// peer's credentials; `None` when none is pending. Poll the listener
    /// ([`AsFd`]) for readability to wait for one.
    ///
    /// # Errors
    /// [`Error::Io`] from `accept` or `getsockopt(SO_PEERCRED)`.
    pub fn accept(&self) -> Result<Option<(UnixStream, Credentials)>> {
        loop {
            match rustix::net::accept_with(&self.fd, SocketFlags::CLOEXEC) {
                Ok(fd) => {
                    let credentials = peer_credentials(&fd)?;
                    return Ok(Some((UnixStream::from(fd), credentials)));
                }
                Err(Errno::INTR) => continue,
                // The client went before we took it, or nothing pending.
                Err(Errno::AGAIN | Errno::CONNABORTED) => return Ok(None),
                Err(e) => return Err(listen_error("accept", &self.path, e)),
            }
        }
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // In a child forked since bind, the socket file is the parent's:
        // only our copy of the descriptor goes.
        if !self.born.is_forked()
            && let Ok(stat) = rustix::fs::lstat(&self.path)
            && (stat.st_dev, stat.st_ino) == self.identity
        {
            let _ = rustix::fs::unlink(&self.path);
        }
    }
}

/// The socket's directory must be a directory owned by us and not writable
/// by group or others: otherwise someone else could swap the socket.
fn check_directory(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let ours = rustix::process::geteuid().as_raw();
    // The entry itself first: the checks below follow a symlink, and one that
    // another user owns can be pointed elsewhere once they have passed.
    let entry = std::fs::symlink_metadata(&dir).map_err(|e| listen_error("lstat", &dir, e))?;
    if entry.file_type().is_symlink() && entry.uid() != ours && entry.uid() != 0 {
        return Err(Error::UnsafeDirectory {
            dir,
            owner: entry.uid(),
            mode: entry.mode() & 0o7777,
            expected_owner: ours,
        });
    }
    let meta = std::fs::metadata(&dir).map_err(|e| listen_error("stat", &dir, e))?;
    if !meta.is_dir() {
        return Err(Error::NotADirectory { path: dir });
    }
    let mode = meta.mode() & 0o7777;
    if meta.uid() != ours || mode & 0o022 != 0 {
        return Err(Error::UnsafeDirectory {
            dir,
            owner: meta.uid(),
            mode,
            expected_owner: ours,
        });
    }
    Ok(())
}

/// Removes a socket nobody listens on; refuses a live one, a symlink or any
/// other file.
fn clear_stale(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(listen_error("lstat", path, e)),
    };
    if meta.file_type().is_symlink() {
        return Err(Error::SymlinkRefused {
            path: path.to_owned(),
        });
    }
    if !meta.file_type().is_socket() {
        return Err(Error::NotASocket {
            path: path.to_owned(),
        });
    }
    // Tried once, never waited on: a blocking connect to a live server whose
    // backlog is full sleeps until it accepts, forever if it is stopped.
    match connect_unix(path, Duration::ZERO) {
        Ok(_) => Err(Error::AlreadyServing {
            path: path.to_owned(),
        }),
        // A full backlog means someone listens (stopped or busy): live.
        Err(Error::ConnectTimeout { .. }) => Err(Error::AlreadyServing {
            path: path.to_owned(),
        }),
        Err(Error::Connect { source, .. })
            if source.raw_os_error() == Some(Errno::CONNREFUSED.raw_os_error()) =>
        {
            match std::fs::remove_file(path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(listen_error("unlink stale socket", path, e)),
            }
        }
        Err(Error::Connect { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(())
        }
        Err(Error::Connect { source, .. }) => Err(listen_error(
            "connect (probing for a live server)",
            path,
            source,
        )),
        Err(e) => Err(e),
    }
}

fn listen_error(op: &'static str, path: &Path, source: impl Into<std::io::Error>) -> Error {
    Error::Listen {
        op,
        path: path.to_owned(),
        source: source.into(),
    }
}
