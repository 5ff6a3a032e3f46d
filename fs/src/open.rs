//! Opening and creating files at paths others may have planted something at.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{self, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::{Error, Result, file_type_name};

/// Which permission bits a file we open may carry (it must be ours in any case).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeRule {
    /// Exactly these bits (0600 for the objects we create).
    Exactly(u32),
    /// No write permission for group or others, as `ssh` asks of its config:
    /// the file may be readable by others, but only its owner can change it.
    NotWritableByOthers,
    /// Writable by its owner, and by nobody else: what a file we write
    /// into must be. A file whose owner may not write it (`/proc/self/status`,
    /// 0444) is not one to write into, even for root, who could.
    WritableByOwnerOnly,
}

impl ModeRule {
    fn allows(self, mode: u32) -> bool {
        match self {
            ModeRule::Exactly(bits) => mode == bits,
            ModeRule::NotWritableByOthers => mode & 0o022 == 0,
            ModeRule::WritableByOwnerOnly => mode & 0o022 == 0 && mode & 0o200 != 0,
        }
    }

    fn describe(self) -> String {
        match self {
            ModeRule::Exactly(bits) => format!("mode {bits:04o}"),
            ModeRule::NotWritableByOthers => "no write permission for group or others".into(),
            ModeRule::WritableByOwnerOnly => {
                "write permission for the owner and for nobody else".into()
            }
        }
    }
}

/// Opens an existing regular file of ours without blocking and without
/// following a link, and checks it before anyone reads from it.
///
/// Performs `open(path, O_RDONLY or O_RDWR | O_NONBLOCK | O_NOFOLLOW |
/// O_NOCTTY | O_CLOEXEC)`, then `fstat` on the descriptor: the file must be a
/// regular file owned by our effective uid whose mode `rule` allows. A FIFO
/// planted at the path opens at once (`O_NONBLOCK`) and is refused here, so
/// no wait on a path can be stretched by whoever planted it.
///
/// # Errors
/// [`Error::NotRegular`] (naming what was found, a symlink included),
/// [`Error::Untrusted`] (naming owner and mode), [`Error::Io`] (`ENOENT`
/// when nothing is there, with the errno kept).
///
/// # References
/// - [Linux `open(2)`](https://man7.org/linux/man-pages/man2/open.2.html), `O_NONBLOCK` on FIFOs
/// - [Linux `fifo(7)`](https://man7.org/linux/man-pages/man7/fifo.7.html)
#[doc(alias = "open")]
pub fn open_regular(path: &Path, write: bool, rule: ModeRule) -> Result<(OwnedFd, Stat)> {
    let access = if write { OFlags::RDWR } else { OFlags::RDONLY };
    let flags = access | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = fs::open(path, flags, Mode::empty()).map_err(|e| opening(path, e))?;
    let stat = fs::fstat(&fd).map_err(|e| Error::io("fstat", path, e))?;
    check(path, &stat, rule)?;
    Ok((fd, stat))
}

/// Reads a whole regular file of ours, refusing it before reading when it is
/// larger than `max` bytes (and refusing anything [`open_regular`] refuses).
///
/// # Errors
/// As [`open_regular`], and [`Error::TooLarge`] (also when the file grows
/// past `max` while it is read).
pub fn read_capped(path: &Path, rule: ModeRule, max: u64) -> Result<Vec<u8>> {
    let (fd, stat) = open_regular(path, false, rule)?;
    let size = stat.st_size as u64;
    if size > max {
        return Err(Error::TooLarge {
            path: path.to_owned(),
            size,
            max,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // One byte past the cap tells a file that grew from one that did not.
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| Error::Io {
            op: "read",
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > max {
        return Err(Error::TooLarge {
            path: path.to_owned(),
            size: bytes.len() as u64,
            max,
        });
    }
    Ok(bytes)
}

/// Creates a new file that nobody else has touched: `open(path, O_CREAT |
/// O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC, mode & 0700)`, then `fchmod(mode)` where
/// the umask or a wider `mode` calls for it. Whatever already sits at the path
/// (a file, a symlink, a FIFO) makes it fail with `EEXIST`; nothing is
/// followed or truncated.
///
/// # Errors
/// [`Error::Io`] (`EEXIST` when the path is taken).
///
/// # References
/// - [Linux `open(2)`](https://man7.org/linux/man-pages/man2/open.2.html), `O_EXCL`, `O_NOFOLLOW`
/// - [Linux `fchmod(2)`](https://man7.org/linux/man-pages/man2/fchmod.2.html)
#[doc(alias = "O_EXCL")]
pub fn create_exclusive(path: &Path, mode: u32) -> Result<OwnedFd> {
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::RDWR | OFlags::CLOEXEC;
    let fd = fs::open(path, flags, Mode::from_raw_mode(mode & 0o700))
        .map_err(|e| Error::io("create", path, e))?;
    let made = fs::fstat(&fd)
        .map_err(|e| Error::io("fstat", path, e))?
        .st_mode as u32
        & 0o7777;
    if made == mode {
        return Ok(fd);
    }
    if let Err(e) = fs::fchmod(&fd, Mode::from_raw_mode(mode)) {
        // We made it a moment ago with O_EXCL: it is ours to remove.
        let _ = fs::unlink(path);
        return Err(Error::io("fchmod", path, e));
    }
    Ok(fd)
}

/// What [`create_output`] does with a file of ours already at the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Write after what it holds (`O_APPEND`): a log, an events file.
    Append,
    /// Empty it first: a file written whole each time (a manual page).
    Truncate,
}

/// Opens a file to write output into, at a path someone else may have
/// planted something at: the one way nodeipc's commands create their
/// output files (the launcher's events, the monitor's log, manual pages).
///
/// Performs `open(path, O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR |
/// O_CLOEXEC, mode)`; when the path is taken, `open(path, O_RDWR |
/// O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)`, `fstat`, `fstatfs`,
/// then `fcntl(F_SETFL, O_APPEND)` or `ftruncate(0)`.
///
/// A new file is made with [`create_exclusive`] (`O_CREAT | O_EXCL |
/// O_NOFOLLOW`, `mode`). When the path is taken, what is there is opened
/// with [`open_regular`] (`O_NONBLOCK | O_NOFOLLOW`, so a FIFO cannot hang
/// the writer and a symlink is never followed) and kept only if it is a
/// regular file of ours that its owner may write and nobody else may
/// ([`ModeRule::WritableByOwnerOnly`]), on a filesystem that holds files
/// (not `/proc`, `/sys` or another kernel interface that looks like one);
/// it is then appended to or emptied as `existing` says. The descriptor is
/// blocking, for writing.
///
/// # Errors
/// [`Error::NotRegular`] naming what is there and its owner (a symlink, a
/// FIFO, a directory, a kernel interface file), [`Error::Untrusted`]
/// naming owner and mode, [`Error::Io`].
///
/// # References
/// - [Linux `open(2)`](https://man7.org/linux/man-pages/man2/open.2.html), `O_APPEND`, `O_NOFOLLOW`, `O_NONBLOCK`
/// - [Linux `statfs(2)`](https://man7.org/linux/man-pages/man2/statfs.2.html)
#[doc(alias = "O_APPEND")]
#[doc(alias = "log file")]
pub fn create_output(path: &Path, mode: u32, existing: Existing) -> Result<OwnedFd> {
    let fd = match create_exclusive(path, mode) {
        Ok(fd) => return Ok(fd),
        Err(e) if e.raw_os_error() == Some(Errno::EXIST.raw_os_error()) => {
            open_regular(path, true, ModeRule::WritableByOwnerOnly)?.0
        }
        Err(e) => return Err(e),
    };
    let statfs = fs::fstatfs(&fd).map_err(|e| Error::io("fstatfs", path, e))?;
    if let Some(kind) = kernel_interface(statfs_type(&statfs)) {
        let owner = fs::fstat(&fd).ok().map(|s| s.st_uid);
        return Err(Error::NotRegular {
            path: path.to_owned(),
            found: kind,
            expected: "a regular file",
            owner,
        });
    }
    // Blocking again (`open_regular` opened it non-blocking), appending
    // when asked: several writers' lines never overwrite each other.
    let flags = match existing {
        Existing::Append => OFlags::APPEND,
        Existing::Truncate => OFlags::empty(),
    };
    fs::fcntl_setfl(&fd, flags).map_err(|e| Error::io("fcntl(F_SETFL)", path, e))?;
    if existing == Existing::Truncate {
        fs::ftruncate(&fd, 0).map_err(|e| Error::io("ftruncate", path, e))?;
    }
    Ok(fd)
}

/// The filesystem type `fstatfs` reports, as the kernel's magic number.
#[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between targets
fn statfs_type(statfs: &fs::StatFs) -> u64 {
    statfs.f_type as u64 & 0xffff_ffff
}

/// Filesystems whose "regular files" are kernel interfaces: writing one
/// changes the system (`/proc/sys/...`, `/sys/...`), whatever its mode says.
fn kernel_interface(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0x9fa0 => "a procfs file",
        0x6265_6572 => "a sysfs file",
        0x0027_e0eb | 0x6367_7270 => "a cgroup file",
        0x6462_6720 => "a debugfs file",
        0x7472_6163 => "a tracefs file",
        0x7363_6673 => "a securityfs file",
        0x6265_6570 => "a configfs file",
        0xcafe_4a11 => "a bpf filesystem file",
        0xde5e_81e4 => "an efivarfs file",
        0x6165_676c => "a pstore file",
        0xf97c_ff8c => "a selinuxfs file",
        _ => return None,
    })
}

/// Checks a `stat` against the rules: a regular file, ours, mode allowed.
fn check(path: &Path, stat: &Stat, rule: ModeRule) -> Result<()> {
    check_kind_owner_mode(path, stat, FileType::RegularFile, rule)
}

/// Checks that `stat` is of `kind`, owned by our effective uid, and of a
/// mode `rule` allows; the refusal names what was found.
pub(crate) fn check_kind_owner_mode(
    path: &Path,
    stat: &Stat,
    kind: FileType,
    rule: ModeRule,
) -> Result<()> {
    let file_type = FileType::from_raw_mode(stat.st_mode as _);
    if file_type != kind {
        return Err(Error::NotRegular {
            path: path.to_owned(),
            found: file_type_name(file_type),
            expected: file_type_name(kind),
            owner: Some(stat.st_uid),
        });
    }
    let owner = stat.st_uid;
    let mode = stat.st_mode & 0o7777;
    let expected_owner = rustix::process::geteuid().as_raw();
    if owner != expected_owner || !rule.allows(mode) {
        return Err(Error::Untrusted {
            path: path.to_owned(),
            owner,
            mode,
            expected_owner,
            rule: rule.describe(),
        });
    }
    Ok(())
}

/// The error for a failed open: `ELOOP` under `O_NOFOLLOW` is a symlink in
/// the path's place (named with its owner, who planted it); `EISDIR` (a
/// directory opened for writing) and `ENXIO` (a socket) name what sits
/// there; `EACCES` on a file we cannot even open names its owner and mode
/// when `lstat` can see them.
fn opening(path: &Path, errno: Errno) -> Error {
    match errno {
        Errno::LOOP => Error::NotRegular {
            path: path.to_owned(),
            found: "a symlink",
            expected: "a regular file",
            owner: fs::lstat(path).ok().map(|s| s.st_uid),
        },
        Errno::ACCESS | Errno::PERM | Errno::ISDIR | Errno::NXIO => match fs::lstat(path) {
            Ok(stat) => {
                let file_type = FileType::from_raw_mode(stat.st_mode as _);
                if file_type != FileType::RegularFile {
                    return Error::NotRegular {
                        path: path.to_owned(),
                        found: file_type_name(file_type),
                        expected: "a regular file",
                        owner: Some(stat.st_uid),
                    };
                }
                if !matches!(errno, Errno::ACCESS | Errno::PERM) {
                    return Error::io("open", path, errno);
                }
                Error::Untrusted {
                    path: path.to_owned(),
                    owner: stat.st_uid,
                    mode: stat.st_mode & 0o7777,
                    expected_owner: rustix::process::geteuid().as_raw(),
                    rule: "a file we may open".into(),
                }
            }
            Err(_) => Error::io("open", path, errno),
        },
        errno => Error::io("open", path, errno),
    }
}
