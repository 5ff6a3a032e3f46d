//! Private directories: 0700 from the first moment, checked before use.

use std::path::{Path, PathBuf};

use rustix::fs::{self, FileType, Mode};
use rustix::io::Errno;

use crate::open::check_kind_owner_mode;
use crate::{Error, ModeRule, Result};

/// Creates `path` as a directory only we can enter, in one step.
///
/// Performs `mkdir(path, 0700)`: the umask can only take bits away, so the
/// directory is never open to anyone else, not even for a moment (a
/// `mkdir` then `chmod` leaves a window another user can plant a link or a
/// FIFO in). If a strict umask took owner bits away too, `chmod 0700` puts
/// them back; that widens nothing. Then the directory is checked as
/// [`check_private_dir`] does. Whatever already sits at the path makes it
/// fail (`EEXIST`): an existing directory is never adopted.
///
/// # Errors
/// [`Error::Io`] (`EEXIST` when the path is taken), or the refusals of
/// [`check_private_dir`].
#[doc(alias = "mkdir")]
pub fn create_private_dir(path: &Path) -> Result<()> {
    fs::mkdir(path, Mode::from_raw_mode(0o700)).map_err(|e| Error::io("mkdir", path, e))?;
    let fixed = (|| {
        let stat = fs::lstat(path).map_err(|e| Error::io("lstat", path, e))?;
        if stat.st_mode & 0o7777 != 0o700 {
            fs::chmod(path, Mode::from_raw_mode(0o700)).map_err(|e| Error::io("chmod", path, e))?;
        }
        check_private_dir(path)
    })();
    if fixed.is_err() {
        // It is our own, empty, a moment old.
        let _ = fs::rmdir(path);
    }
    fixed
}

/// Creates a private directory under `parent` with an unpredictable name,
/// `<prefix><16 random hex digits>`, as `mkdtemp(3)` does, and returns it.
/// An unpredictable name means nobody can prepare anything at it in advance;
/// a taken name (a collision, or a guess) is retried with another.
///
/// # Errors
/// As [`create_private_dir`]; the error names the full path tried.
pub fn create_unique_private_dir(parent: &Path, prefix: &str) -> Result<PathBuf> {
    let mut last = None;
    for _ in 0..16 {
        let mut random = [0u8; 8];
        if let Err(e) = rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())
        {
            return Err(Error::io("getrandom", parent, e));
        }
        let path = parent.join(format!("{prefix}{:016x}", u64::from_ne_bytes(random)));
        match create_private_dir(&path) {
            Err(e) if e.raw_os_error() == Some(Errno::EXIST.raw_os_error()) => last = Some(e),
            other => return other.map(|()| path),
        }
    }
    Err(last.expect("the loop ran"))
}

/// A private directory with an unpredictable name
/// ([`create_unique_private_dir`]), removed with everything in it when
/// dropped: a run's scratch space for sockets, logs and config files (the
/// demo's, a launch's run directory, a benchmark's monitor).
///
/// Removal is `remove_dir_all`, which never follows a link out of the
/// directory; what cannot be removed is left, silently (drop cannot fail).
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// Creates `<parent>/<prefix><16 random hex digits>`, mode 0700 from
    /// the first moment.
    ///
    /// Performs `getrandom`, then `mkdir(path, 0700)` (see
    /// [`create_unique_private_dir`]).
    ///
    /// # Errors
    /// As [`create_unique_private_dir`].
    ///
    /// # References
    /// - [Linux `mkdir(2)`](https://man7.org/linux/man-pages/man2/mkdir.2.html)
    /// - [`mkdtemp(3)`](https://man7.org/linux/man-pages/man3/mkdtemp.3.html), which it resembles
    #[doc(alias = "mkdtemp")]
    pub fn create(parent: &Path, prefix: &str) -> Result<PrivateDir> {
        create_unique_private_dir(parent, prefix).map(|path| PrivateDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Checks that `path` is a directory (not a link to one) of our effective
/// uid with mode exactly 0700.
///
/// # Errors
/// [`Error::NotRegular`] when it is not a directory (a symlink included),
/// [`Error::Untrusted`] naming owner and mode, [`Error::Io`].
pub fn check_private_dir(path: &Path) -> Result<()> {
    check_dir(path, ModeRule::Exactly(0o700))
}

/// Checks that `path` is a directory (not a link to one: `lstat`) of our
/// effective uid whose mode `rule` allows: what a directory the user names
/// for us to work in (`nodeipc launch --run-dir`) must be, with
/// [`ModeRule::NotWritableByOthers`], so nobody else can put anything in
/// it or move what we make there.
///
/// # Errors
/// [`Error::NotRegular`] when it is not a directory (a symlink included,
/// named with its owner), [`Error::Untrusted`] naming owner and mode,
/// [`Error::Io`].
pub fn check_dir(path: &Path, rule: ModeRule) -> Result<()> {
    let stat = fs::lstat(path).map_err(|e| Error::io("lstat", path, e))?;
    check_kind_owner_mode(path, &stat, FileType::Directory, rule)
}
