//! [`NamedSemaphore`]: glibc's named semaphores, opened and driven by our
//! own code, with the type, owner, mode, size and word checks glibc lacks.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nodeipc_fs::ModeRule;
use nodeipc_shm::ForkGeneration;
use rustix::fs::{self, AtFlags, CWD, Mode, OFlags};
use rustix::io::Errno;

use crate::glibc::{SEM_SIZE, SemWords, initial_bytes};
use crate::{Error, Result, Semaphore};
use nodeipc_shm::wait::{Pacer, WaitError, deadline_after};

/// The largest count a glibc semaphore holds (`SEM_VALUE_MAX`).
pub const SEM_VALUE_MAX: u32 = crate::glibc::SEM_VALUE_MAX;

/// The only permission bits a semaphore of ours may carry.
const SEM_MODE: u32 = 0o600;

/// A POSIX named semaphore that a C, C++ or Python (`posix_ipc`) process
/// using glibc's `sem_open` on the same name shares.
///
/// The semaphore is the file `/dev/shm/sem.<name>`, laid out as glibc lays
/// out a `sem_t`, and driven with glibc's algorithm through our own atomics
/// and futex calls — not through glibc, whose `sem_post` and `sem_wait` abort
/// the process when another process wrote garbage into the semaphore.
///
/// - Creation is exclusive and the name appears complete: the file is made
///   unnamed (`O_TMPFILE`, mode 0600), filled, then linked into place.
///   Anything already at the name, a symlink or FIFO included, makes it fail
///   with [`Error::AlreadyExists`]; nothing is followed.
/// - Opening never blocks and never follows a link: anything but a regular
///   file is refused at once, naming what it is ([`Error::NotRegular`]), as
///   is a file of another owner or mode ([`Error::Untrusted`]) and one
///   shorter than a `sem_t` ([`Error::Corrupt`]).
/// - Every operation checks the words it relies on first: a `private` word
///   other than glibc's process-shared marker, a count above
///   [`SEM_VALUE_MAX`] or an impossible waiter count is [`Error::Corrupt`],
///   and an unexpected futex errno is [`Error::Io`]; the process goes on.
///
/// The creator removes the name when it drops unless
/// [`persist`](NamedSemaphore::persist) is called, and only while the name
/// still refers to its own semaphore.
///
/// # Limits
/// A process of the same uid can still truncate the file after we checked
/// its size and mapped it: the next access of the mapping then raises
/// `SIGBUS`, which kills the process. No check can close that window for a
/// named file (it cannot be sealed, unlike a memfd): whoever shares our uid
/// can kill our processes anyway. Other users cannot open the file (mode
/// 0600), so they cannot truncate it.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_sem::{NamedSemaphore, Semaphore};
///
/// let name = format!("/nodeipc-doc-sem-{}", std::process::id());
/// let sem = NamedSemaphore::create(&name, 0)?;
/// let peer = NamedSemaphore::open(&name)?; // another process, usually
/// peer.post()?;
/// sem.wait_timeout(Duration::from_secs(1))?;
/// assert!(sem.wait_timeout(Duration::from_millis(10)).unwrap_err().is_timeout());
/// # Ok::<(), nodeipc_sem::Error>(())
/// ```
#[derive(Debug)]
pub struct NamedSemaphore {
    words: SemWords,
    name: String,
    identity: (u64, u64),
    unlink_on_drop: AtomicBool,
    /// The process that made it: a child forked since leaves the name alone.
    born: ForkGeneration,
}

impl NamedSemaphore {
    /// Creates a semaphore with an initial count.
    ///
    /// Opens an unnamed file in `/dev/shm` (`O_TMPFILE`, mode 0600, forced
    /// with `fchmod` if the umask took bits away), writes an initialised
    /// `sem_t` into it, maps it, then links it to `/dev/shm/sem.<name>`
    /// (`linkat` of `/proc/self/fd/N` with `AT_SYMLINK_FOLLOW`, which needs
    /// no privilege). A peer that sees the name sees a whole semaphore with
    /// its final mode.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::InvalidValue`] (above
    /// [`SEM_VALUE_MAX`]), [`Error::AlreadyExists`] (whatever sits at the
    /// name), [`Error::Io`]. On error nothing is left under the name.
    ///
    /// # References
    /// - [POSIX `sem_open`](https://pubs.opengroup.org/onlinepubs/9799919799/functions/sem_open.html)
    /// - [Linux `open(2)`, `O_TMPFILE`](https://man7.org/linux/man-pages/man2/open.2.html)
    /// - [Linux `linkat(2)`](https://man7.org/linux/man-pages/man2/link.2.html)
    #[doc(alias = "sem_open")]
    pub fn create(name: &str, value: u32) -> Result<NamedSemaphore> {
        check_name(name)?;
        if value > SEM_VALUE_MAX {
            return Err(Error::InvalidValue {
                name: name.to_owned(),
                value,
                max: SEM_VALUE_MAX,
            });
        }
        let io = |op| move |e: Errno| Error::io(op, name, e);
        let file = fs::open(
            nodeipc_shm::SHM_DIR,
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(SEM_MODE),
        )
        .map_err(io("open(O_TMPFILE)"))?;
        let stat = fs::fstat(&file).map_err(io("fstat"))?;
        if stat.st_mode & 0o7777 != SEM_MODE {
            fs::fchmod(&file, Mode::from_raw_mode(SEM_MODE)).map_err(io("fchmod"))?;
        }
        let mut file = std::fs::File::from(file);
        file.write_all(&initial_bytes(value))
            .map_err(|source| Error::Io {
                op: "write",
                name: name.to_owned(),
                source,
            })?;
        let words = SemWords::map(&file, name)?;
        let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
        fs::linkat(CWD, &fd_path, CWD, file_path(name), AtFlags::SYMLINK_FOLLOW).map_err(|e| {
            match e {
                Errno::EXIST => Error::AlreadyExists {
                    name: name.to_owned(),
                },
                e => Error::io("linkat", name, e),
            }
        })?;
        Ok(NamedSemaphore {
            words,
            name: name.to_owned(),
            identity: (stat.st_dev, stat.st_ino),
            unlink_on_drop: AtomicBool::new(true),
            born: ForkGeneration::current(),
        })
    }

    /// Opens a semaphore another process created, after checking that its
    /// file is a regular file of ours (owned by our effective uid, mode
    /// 0600) holding at least a `sem_t` (32 bytes).
    ///
    /// The file is opened with `O_NONBLOCK | O_NOFOLLOW` and checked on the
    /// descriptor (`fstat`), then mapped from that same descriptor: a FIFO
    /// planted at the name cannot make the open wait, and nothing can swap
    /// the file between the check and the mapping.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::NotFound`], [`Error::NotRegular`]
    /// (naming what was found), [`Error::Untrusted`] (also when the kernel
    /// denies access to another user's semaphore: the error names its owner
    /// and mode), [`Error::Corrupt`] (a file shorter than a `sem_t`),
    /// [`Error::Io`].
    #[doc(alias = "sem_open")]
    pub fn open(name: &str) -> Result<NamedSemaphore> {
        check_name(name)?;
        let path = file_path(name);
        let (file, stat) = nodeipc_fs::open_regular(&path, true, ModeRule::Exactly(SEM_MODE))
            .map_err(|e| from_fs(name, e))?;
        if stat.st_size < SEM_SIZE as i64 {
            return Err(Error::Corrupt {
                name: name.to_owned(),
                what: format!(
                    "{} holds {} bytes, less than the {SEM_SIZE} of a semaphore (sizeof(sem_t))",
                    path.display(),
                    stat.st_size
                ),
            });
        }
        Ok(NamedSemaphore {
            words: SemWords::map(&file, name)?,
            name: name.to_owned(),
            identity: (stat.st_dev, stat.st_ino),
            unlink_on_drop: AtomicBool::new(false),
            born: ForkGeneration::current(),
        })
    }

    /// Like [`open`](NamedSemaphore::open), waiting up to `wait` for the
    /// semaphore to appear. Only a missing name is waited for (and a file of
    /// ours whose mode is still tighter than 0600, as a creator that sets
    /// its mode after creating leaves it for a moment): anything `open`
    /// refuses is refused at once.
    ///
    /// # Errors
    /// [`Error::Timeout`] when it does not appear in time; otherwise as `open`.
    pub fn open_wait(name: &str, wait: Duration) -> Result<NamedSemaphore> {
        let mut pacer = Pacer::new(
            Duration::from_micros(20),
            Duration::from_millis(2),
            Some(wait),
        );
        loop {
            let error = match NamedSemaphore::open(name) {
                Ok(semaphore) => return Ok(semaphore),
                Err(error) => error,
            };
            let transient = match &error {
                Error::NotFound { .. } => true,
                Error::Untrusted {
                    owner,
                    mode,
                    expected_owner,
                    ..
                } => owner == expected_owner && mode & !SEM_MODE == 0,
                _ => false,
            };
            if !transient {
                return Err(error);
            }
            pacer.pause_interruptible().map_err(|stop| match stop {
                WaitError::Interrupted(waited) => Error::Interrupted {
                    name: name.to_owned(),
                    waited,
                },
                WaitError::TimedOut(waited) => Error::Timeout {
                    name: name.to_owned(),
                    waited,
                },
                WaitError::Futex(errno) => Error::io("futex", name, errno),
                WaitError::Stopped(never) => match never {},
            })?;
        }
    }

    /// Removes a semaphore's name (`sem_unlink`), whoever created it; open
    /// handles keep working. For the creator's own handle prefer
    /// [`unlink_now`](NamedSemaphore::unlink_now).
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::NotFound`], [`Error::Io`].
    #[doc(alias = "sem_unlink")]
    pub fn unlink(name: &str) -> Result<()> {
        check_name(name)?;
        fs::unlink(file_path(name)).map_err(|e| match e {
            Errno::NOENT => Error::NotFound {
                name: name.to_owned(),
            },
            e => Error::io("sem_unlink", name, e),
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keeps the name after this handle drops (the creator removes it otherwise).
    pub fn persist(&self) {
        self.unlink_on_drop.store(false, Ordering::Relaxed);
    }

    /// Removes the name now (`sem_unlink`); open handles keep working. Does
    /// nothing if the name is gone or now refers to another semaphore.
    ///
    /// # Errors
    /// [`Error::Io`] if the unlink fails for another reason.
    #[doc(alias = "sem_unlink")]
    pub fn unlink_now(&self) -> Result<()> {
        self.unlink_on_drop.store(false, Ordering::Relaxed);
        let path = file_path(&self.name);
        match fs::lstat(&path) {
            Ok(stat) if (stat.st_dev, stat.st_ino) == self.identity => {}
            Ok(_) | Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(Error::io("stat", &self.name, e)),
        }
        match fs::unlink(&path) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::io("sem_unlink", &self.name, e)),
        }
    }

    /// Waits up to `timeout` (`None`: no limit) against one deadline on the
    /// monotonic clock; an interrupted wait resumes with the same deadline.
    fn wait_for(&self, timeout: Option<Duration>) -> Result<()> {
        let start = Instant::now();
        let deadline = timeout.map(deadline_after);
        match self.words.take_until(&self.name, deadline.as_ref()) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(Error::Interrupted { name, .. }) => {
                return Err(Error::Interrupted {
                    name,
                    waited: start.elapsed(),
                });
            }
            Err(e) => return Err(e),
        }
        Err(Error::Timeout {
            name: self.name.clone(),
            waited: start.elapsed(),
        })
    }
}

impl Semaphore for NamedSemaphore {
    #[doc(alias = "sem_post")]
    fn post(&self) -> Result<()> {
        self.words.post(&self.name)
    }

    #[doc(alias = "sem_trywait")]
    fn try_wait(&self) -> Result<bool> {
        self.words.try_take(&self.name)
    }

    #[doc(alias = "sem_clockwait")]
    #[doc(alias = "sem_timedwait")]
    fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        self.wait_for(Some(timeout))
    }

    #[doc(alias = "sem_wait")]
    fn wait(&self) -> Result<()> {
        self.wait_for(None)
    }

    #[doc(alias = "sem_getvalue")]
    fn value(&self) -> Result<u32> {
        self.words.value(&self.name)
    }
}

impl Drop for NamedSemaphore {
    fn drop(&mut self) {
        // In a child forked since, the name is the parent's: unmap only.
        if self.unlink_on_drop.load(Ordering::Relaxed) && !self.born.is_forked() {
            let _ = self.unlink_now();
        }
    }
}

/// Checks a semaphore name: the rules of shared-memory names, and short
/// enough that its file, `sem.<name without '/'>`, fits in 255 bytes.
fn check_name(name: &str) -> Result<()> {
    if let Err(error) = nodeipc_shm::validate_name(name) {
        let reason = match error {
            nodeipc_shm::Error::InvalidName { reason, .. } => reason,
            _ => "not a valid POSIX name",
        };
        return Err(Error::InvalidName {
            name: name.to_owned(),
            reason,
        });
    }
    if name.len() - 1 + "sem.".len() > nodeipc_shm::MAX_NAME_LEN {
        return Err(Error::InvalidName {
            name: name.to_owned(),
            reason: "it is longer than 252 bytes (its file is sem.<name>)",
        });
    }
    Ok(())
}

/// `/dev/shm/sem.<name>` for a valid name, where glibc keeps it.
pub(crate) fn file_path(name: &str) -> PathBuf {
    PathBuf::from(format!("{}/sem.{}", nodeipc_shm::SHM_DIR, &name[1..]))
}

/// A refusal of [`nodeipc_fs::open_regular`], in this crate's terms.
fn from_fs(name: &str, error: nodeipc_fs::Error) -> Error {
    match error {
        nodeipc_fs::Error::NotRegular { path, found, .. } => Error::NotRegular {
            name: name.to_owned(),
            path,
            found,
        },
        nodeipc_fs::Error::Untrusted {
            owner,
            mode,
            expected_owner,
            ..
        } => Error::Untrusted {
            name: name.to_owned(),
            owner,
            mode,
            expected_owner,
        },
        nodeipc_fs::Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOENT) => {
            Error::NotFound {
                name: name.to_owned(),
            }
        }
        nodeipc_fs::Error::Io { op, source, .. } => Error::Io {
            op,
            name: name.to_owned(),
            source,
        },
        // `open_regular` reports nothing else; keep the whole message if it ever does.
        other => Error::Io {
            op: "open",
            name: name.to_owned(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}
