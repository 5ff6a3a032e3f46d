//! [`Unheld`]: the kernel's word that nobody holds a file — a write lease.
//!
//! `fcntl(F_SETLEASE, F_WRLCK)` is granted only when the file has no open
//! file description but the caller's: none in any process's descriptor
//! table, none behind a mapping (a mapping keeps the file it was made from
//! open, even after its descriptor is closed), none in flight in an
//! `SCM_RIGHTS` message — in any pid, mount or network namespace, whether or
//! not `/proc` would show it to us. (`O_PATH` descriptors do not count; they
//! can neither read nor map the file.) While the lease is held, another open
//! of the file waits for us to let go: what is proved stays true until the
//! lease is released.
//!
//! A lease break is announced by a signal. `SIGIO`, the default, would
//! kill a process that does not handle it, so the descriptor is set to
//! announce with `SIGURG`, which is ignored unless handled.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// `F_SETSIG` from `<fcntl.h>` (Linux, every architecture); the libc crate
/// does not export it.
const F_SETSIG: libc::c_int = 10;

/// Proof that nobody else holds a regular file open or mapped: a write
/// lease on it, held until this is dropped.
#[derive(Debug)]
pub struct Unheld {
    /// Holds the lease; closing it lets go.
    _lease: OwnedFd,
    dev: u64,
    ino: u64,
}

/// Why [`Unheld::prove`] proved nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotProved {
    /// There is no such file any more.
    Gone,
    /// The path names another file than the one expected.
    Replaced,
    /// Someone holds it: the kernel refused the lease (`EAGAIN`), or it is
    /// already leased to someone else (an `O_NONBLOCK` open gave `EAGAIN`).
    Held,
    /// A step of the proof failed; nothing is known.
    Failed {
        /// The call (`open`, `fcntl(F_SETLEASE)`).
        step: &'static str,
        /// The errno.
        errno: i32,
    },
}

impl Unheld {
    /// Proves that nobody holds `path` open or mapped, for as long as the
    /// returned value lives. With `expect`, the path must still name that
    /// `(dev, ino)`.
    ///
    /// Opens the file `O_RDONLY | O_NOFOLLOW | O_NONBLOCK` (a file already
    /// leased answers `EAGAIN` instead of making us wait), then takes a
    /// write lease. Only the owner of the file (or a holder of
    /// `CAP_LEASE`) may.
    ///
    /// # Errors
    /// [`NotProved`], saying why.
    ///
    /// # References
    /// - [Linux `fcntl(2)`, "Leases"](https://man7.org/linux/man-pages/man2/fcntl.2.html)
    #[doc(alias = "F_SETLEASE")]
    pub fn prove(path: &Path, expect: Option<(u64, u64)>) -> Result<Unheld, NotProved> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOENT => NotProved::Gone,
            Errno::AGAIN => NotProved::Held,
            e => NotProved::Failed {
                step: "open",
                errno: e.raw_os_error(),
            },
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| NotProved::Failed {
            step: "fstat",
            errno: e.raw_os_error(),
        })?;
        let (dev, ino) = (stat.st_dev, stat.st_ino);
        if expect.is_some_and(|id| id != (dev, ino)) {
            return Err(NotProved::Replaced);
        }
        let raw = fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own, with integer arguments only.
        let signal = unsafe { libc::fcntl(raw, F_SETSIG, libc::SIGURG) };
        if signal == -1 {
            return Err(NotProved::Failed {
                step: "fcntl(F_SETSIG)",
                errno: last_errno(),
            });
        }
        // SAFETY: as above.
        let lease = unsafe { libc::fcntl(raw, libc::F_SETLEASE, libc::F_WRLCK) };
        if lease == -1 {
            let errno = last_errno();
            return Err(if errno == libc::EAGAIN {
                NotProved::Held
            } else {
                NotProved::Failed {
                    step: "fcntl(F_SETLEASE, F_WRLCK)",
                    errno,
                }
            });
        }
        Ok(Unheld {
            _lease: fd,
            dev,
            ino,
        })
    }

    /// Removes the name `path` while the lease still holds, if it still
    /// names the proved file.
    ///
    /// # Errors
    /// [`NotProved::Replaced`] when the name now refers to another file
    /// (nothing is removed); [`NotProved::Gone`] when it is gone already;
    /// [`NotProved::Failed`] naming `unlink` and the errno.
    pub fn unlink(self, path: &Path) -> Result<(), NotProved> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if (meta.dev(), meta.ino()) == (self.dev, self.ino) => {}
            Ok(_) => return Err(NotProved::Replaced),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(NotProved::Gone),
            Err(e) => {
                return Err(NotProved::Failed {
                    step: "lstat",
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                });
            }
        }
        std::fs::remove_file(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => NotProved::Gone,
            _ => NotProved::Failed {
                step: "unlink",
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            },
        })
        // The lease goes with the descriptor, here.
    }

    /// The proved file's `(dev, ino)`.
    pub fn id(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

impl std::fmt::Display for NotProved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotProved::Gone => write!(f, "it is gone"),
            NotProved::Replaced => write!(f, "its name now refers to another file"),
            NotProved::Held => write!(
                f,
                "the kernel refused a write lease: a process holds it open or mapped"
            ),
            NotProved::Failed { step, errno } => write!(
                f,
                "cannot prove it unused: {step} failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}
