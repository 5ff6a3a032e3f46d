//! [`Region::open`]: a region another process created, checked before it is
//! mapped, waited for (bounded) while its creator is still at work.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use crate::wait::{Pacer, WaitError};

use rustix::fs::{self, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::name::{dev_shm_path, validate_name};
use crate::region::REGION_MODE;
use crate::space::{fully_backed, reserve};
use crate::{Error, Region, Result};

/// How [`Region::open`] waits for a region another process is creating.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// The region must hold at least this many bytes (0: any non-empty size).
    pub min_size: usize,
    /// How long to wait for the name to appear, for its creator to finish
    /// setting mode and size, and for it to reach `min_size`. `None`: look
    /// once and fail at once.
    pub wait: Option<Duration>,
    /// Open `O_RDONLY` and map `PROT_READ`: this process can read the region
    /// and never write it (see [`Region::from_fd_read_only`]). No memory is
    /// reserved for a region not all taken yet: reading a hole gives zeros.
    pub read_only: bool,
}

impl OpenOptions {
    /// Options that wait up to `wait` for a region of at least `min_size` bytes.
    pub fn wait(min_size: usize, wait: Duration) -> Self {
        OpenOptions {
            min_size,
            wait: Some(wait),
            read_only: false,
        }
    }

    /// These options, opening read-only.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }
}

impl Region {
    /// Opens a region another process created, after checking that it is
    /// owned by our effective uid and has mode 0600.
    ///
    /// With `options.wait`, waits (bounded) for the name to appear, for the
    /// creator to finish setting its mode and size, and for the size to reach
    /// `options.min_size`. The owner check never waits: an object of another
    /// uid is refused at once, and so is anything but a regular file at the
    /// name (a FIFO, a socket, a directory: the open never blocks on one).
    ///
    /// A region whose memory is not all taken yet (made by a program that
    /// only `ftruncate`s) is reserved here (`fallocate`), so a full
    /// `/dev/shm` is [`Error::NoSpace`] now rather than a `SIGBUS` later.
    ///
    /// # Errors
    /// [`Error::InvalidName`]; [`Error::NotFound`] or [`Error::TooSmall`] when
    /// not waiting, [`Error::Timeout`] when the wait ran out,
    /// [`Error::Interrupted`] when the thread's cancellation hook ended it;
    /// [`Error::Untrusted`] for another owner or a mode other than 0600;
    /// [`Error::NotRegular`] naming what is there; [`Error::NoSpace`];
    /// [`Error::Io`].
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use nodeipc_shm::{OpenOptions, Region};
    /// let name = format!("/nodeipc-doc-open-{}", std::process::id());
    /// let created = Region::create(&name, 64)?;
    /// created.write_at(0, &[7])?;
    /// let opened = Region::open(&name, OpenOptions::wait(64, Duration::from_secs(1)))?;
    /// let mut byte = [0u8];
    /// opened.read_at(0, &mut byte)?;
    /// assert_eq!(byte, [7]);
    /// # Ok::<(), nodeipc_shm::Error>(())
    /// ```
    #[doc(alias = "shm_open")]
    pub fn open(name: &str, options: OpenOptions) -> Result<Region> {
        validate_name(name)?;
        let mut pacer = options.wait.map(|limit| {
            Pacer::new(
                Duration::from_micros(20),
                Duration::from_millis(2),
                Some(limit),
            )
        });
        loop {
            let attempt = try_open(name, options.min_size, !options.read_only);
            let Err(Attempt::NotYet { what, error }) = attempt else {
                return attempt.map_err(Attempt::into_error);
            };
            let Some(pacer) = pacer.as_mut() else {
                return Err(error);
            };
            pacer.pause_interruptible().map_err(|stop| match stop {
                WaitError::Interrupted(waited) => Error::Interrupted {
                    name: name.to_owned(),
                    waited,
                    what,
                },
                WaitError::TimedOut(waited) => Error::Timeout {
                    name: name.to_owned(),
                    waited,
                    what,
                },
                WaitError::Futex(errno) => Error::io("futex", name, errno),
                WaitError::Stopped(never) => match never {},
            })?;
        }
    }
}

/// Opens a named region's file for `pread`/`pwrite` without mapping it:
/// the same checks as [`Region::open`] (name, type, owner, mode 0600; never
/// blocking, never following a link), no waiting, no reservation. Returns
/// the descriptor and the region's size.
///
/// For tools that stream a region of any size (`nodeipc shm read`) and must
/// not allocate its holes: reading a hole gives zeros, and a write into a
/// hole of a full tmpfs fails with `ENOSPC` instead of a `SIGBUS`, since
/// nothing is mapped.
///
/// # Errors
/// As [`Region::open`] without a wait: [`Error::InvalidName`],
/// [`Error::NotFound`], [`Error::NotRegular`], [`Error::Untrusted`],
/// [`Error::Io`].
#[doc(alias = "shm_open")]
pub fn open_unmapped(name: &str) -> Result<(OwnedFd, u64)> {
    validate_name(name)?;
    checked_fd(name, true)
        .map(|(fd, stat)| (fd, stat.st_size as u64))
        .map_err(Attempt::into_error)
}

fn try_open(name: &str, min_size: usize, writable: bool) -> Result<Region, Attempt> {
    let (fd, stat) = checked_fd(name, writable)?;
    let size = stat.st_size as u64;
    if size == 0 || size < min_size as u64 {
        return Err(Attempt::NotYet {
            what: "reach its size",
            error: Error::TooSmall {
                name: name.to_owned(),
                size,
                min_size: min_size.max(1) as u64,
            },
        });
    }
    let len = usize::try_from(size).map_err(|_| {
        Attempt::Fatal(Error::InvalidSize {
            object: name.to_owned(),
            size,
            reason: "larger than this process can map",
        })
    })?;
    if writable && !fully_backed(&stat) {
        reserve(fd.as_fd(), size, name, false).map_err(Attempt::Fatal)?;
    }
    Region::map(fd, Some(name.to_owned()), name.to_owned(), len, writable).map_err(Attempt::Fatal)
}

/// Opens `/dev/shm/<name>` without blocking or following a link and checks
/// it: a regular file of ours, mode 0600.
fn checked_fd(name: &str, writable: bool) -> Result<(OwnedFd, fs::Stat), Attempt> {
    let path = dev_shm_path(name);
    // O_NONBLOCK: whatever sits at the name, opening it returns at once (a
    // FIFO would otherwise wait for a writer); O_NOCTTY: a terminal planted
    // there never becomes ours.
    let access = if writable {
        OFlags::RDWR
    } else {
        OFlags::RDONLY
    };
    let flags = access | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match fs::open(&path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => {
            return Err(Attempt::NotYet {
                what: "appear",
                error: Error::NotFound {
                    name: name.to_owned(),
                },
            });
        }
        Err(Errno::LOOP) => return Err(not_regular(name, FileType::Symlink)),
        Err(Errno::ACCESS) => {
            let euid = rustix::process::geteuid().as_raw();
            let refused = Error::io("shm_open", name, Errno::ACCESS);
            return Err(match fs::lstat(&path) {
                Ok(stat) if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile => {
                    not_regular(name, FileType::from_raw_mode(stat.st_mode))
                }
                // Another user's object: refused at once, and said whose.
                Ok(stat) if stat.st_uid != euid => Attempt::Fatal(Error::Untrusted {
                    name: name.to_owned(),
                    owner: stat.st_uid,
                    mode: stat.st_mode & 0o7777,
                    expected_owner: euid,
                }),
                // Ours, not yet made 0600 by its creator (a umask left it 0400, say).
                _ => Attempt::NotYet {
                    what: "become accessible",
                    error: refused,
                },
            });
        }
        // A directory (EISDIR), a socket or a device without a driver (ENXIO):
        // say what is there rather than the errno alone.
        Err(e) => {
            return Err(match fs::lstat(&path) {
                Ok(stat) if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile => {
                    not_regular(name, FileType::from_raw_mode(stat.st_mode))
                }
                _ => Attempt::Fatal(Error::io("shm_open", name, e)),
            });
        }
    };
    let stat = fs::fstat(&fd).map_err(|e| Attempt::Fatal(Error::io("fstat", name, e)))?;
    let owner = stat.st_uid;
    let mode = stat.st_mode & 0o7777;
    let euid = rustix::process::geteuid().as_raw();
    let file_type = FileType::from_raw_mode(stat.st_mode);
    if file_type != FileType::RegularFile {
        return Err(not_regular(name, file_type));
    }
    let untrusted = Error::Untrusted {
        name: name.to_owned(),
        owner,
        mode,
        expected_owner: euid,
    };
    if owner != euid || mode & !REGION_MODE != 0 {
        return Err(Attempt::Fatal(untrusted));
    }
    if mode != REGION_MODE {
        // Tighter than 0600 only happens between the creator's open and fchmod.
        return Err(Attempt::NotYet {
            what: "get mode 0600",
            error: untrusted,
        });
    }
    Ok((fd, stat))
}

fn not_regular(name: &str, file_type: FileType) -> Attempt {
    Attempt::Fatal(Error::NotRegular {
        object: name.to_owned(),
        found: nodeipc_fs::file_type_name(file_type),
    })
}

/// What one open attempt found: something worth waiting for, or a refusal.
enum Attempt {
    NotYet { what: &'static str, error: Error },
    Fatal(Error),
}

impl Attempt {
    fn into_error(self) -> Error {
        match self {
            Attempt::NotYet { error, .. } | Attempt::Fatal(error) => error,
        }
    }
}
