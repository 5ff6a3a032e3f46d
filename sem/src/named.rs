//! [`NamedSemaphore`]: glibc's `sem_open`, with the owner and mode checks it lacks.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rustix::fs::{self, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::{Error, Result, Semaphore};

/// The largest count a glibc semaphore holds (`SEM_VALUE_MAX`).
pub const SEM_VALUE_MAX: u32 = i32::MAX as u32;

/// The only permission bits a semaphore of ours may carry.
const SEM_MODE: u32 = 0o600;

// glibc has had `sem_clockwait` since 2.30; the `libc` crate does not declare it.
// SAFETY: the signature matches glibc's prototype in <semaphore.h>,
// `int sem_clockwait(sem_t *restrict, clockid_t, const struct timespec *restrict)`,
// with the `libc` crate's `sem_t`, `clockid_t`, `timespec` and `c_int` being the
// types glibc uses on this target; the symbol is glibc's own (a glibc older
// than 2.30 fails to link rather than call something else).
unsafe extern "C" {
    fn sem_clockwait(
        sem: *mut libc::sem_t,
        clock: libc::clockid_t,
        abstime: *const libc::timespec,
    ) -> libc::c_int;
}

/// A POSIX named semaphore opened with glibc's `sem_open`, so a C, C++ or
/// Python (`posix_ipc`) process that opens the same name shares it.
///
/// Creation is exclusive and the file behind it (`/dev/shm/sem.<name>`) is
/// forced to mode 0600; opening refuses a semaphore owned by another user or
/// with another mode, and one replaced while it was being opened. The creator
/// removes the name when it drops unless [`persist`](NamedSemaphore::persist)
/// is called, and only while the name still refers to its own semaphore.
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
    sem: NonNull<libc::sem_t>,
    name: String,
    identity: (u64, u64),
    unlink_on_drop: AtomicBool,
}

// SAFETY: glibc's semaphore operations are thread-safe, and the mapping
// behind `sem` stays valid until `sem_close` in drop.
unsafe impl Send for NamedSemaphore {}
// SAFETY: as for `Send`; `&NamedSemaphore` only reaches thread-safe calls.
unsafe impl Sync for NamedSemaphore {}

impl NamedSemaphore {
    /// Creates a semaphore with an initial count.
    ///
    /// Performs `sem_open(name, O_CREAT|O_EXCL, 0600, value)`, then forces the
    /// mode of `/dev/shm/sem.<name>` to 0600 (the umask may have changed it)
    /// and verifies owner and mode.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::InvalidValue`] (above
    /// [`SEM_VALUE_MAX`]), [`Error::AlreadyExists`], [`Error::Untrusted`] (the
    /// file turned out to be another user's, or to have the wrong mode, when
    /// we checked it), [`Error::Io`]. On error nothing is left under the name.
    ///
    /// # References
    /// - [POSIX `sem_open`](https://pubs.opengroup.org/onlinepubs/9799919799/functions/sem_open.html)
    /// - [Linux `sem_overview(7)`](https://man7.org/linux/man-pages/man7/sem_overview.7.html)
    #[doc(alias = "sem_open")]
    pub fn create(name: &str, value: u32) -> Result<NamedSemaphore> {
        let c_name = checked_name(name)?;
        if value > SEM_VALUE_MAX {
            return Err(Error::InvalidValue {
                name: name.to_owned(),
                value,
                max: SEM_VALUE_MAX,
            });
        }
        // SAFETY: `c_name` is a valid C string; with O_CREAT, sem_open reads
        // exactly the two variadic arguments mode_t and unsigned int given here.
        let raw = unsafe {
            libc::sem_open(
                c_name.as_ptr(),
                libc::O_CREAT | libc::O_EXCL,
                SEM_MODE as libc::mode_t,
                value as libc::c_uint,
            )
        };
        let sem = opened(raw).map_err(|e| match e {
            Errno::EXIST => Error::AlreadyExists {
                name: name.to_owned(),
            },
            e => Error::io("sem_open", name, e),
        })?;
        let mut semaphore = NamedSemaphore {
            sem,
            name: name.to_owned(),
            identity: (0, 0),
            unlink_on_drop: AtomicBool::new(false),
        };
        let finish = || {
            let file = open_file(name).map_err(|e| refused("open", name, e))?;
            fs::fchmod(&file, Mode::from_raw_mode(SEM_MODE))
                .map_err(|e| refused("fchmod", name, e))?;
            verify(name, &file)
        };
        match finish() {
            Ok(identity) => {
                semaphore.identity = identity;
                semaphore.unlink_on_drop.store(true, Ordering::Relaxed);
            }
            Err(e) => {
                // We created the name exclusively a moment ago: it is ours to remove.
                let _ = fs::unlink(file_path(name));
                return Err(e);
            }
        }
        Ok(semaphore)
    }

    /// Opens a semaphore another process created, after checking that its
    /// file is ours: owned by our effective uid, mode 0600.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::NotFound`], [`Error::Untrusted`]
    /// (also when the file was replaced while we opened it, and when the
    /// kernel denies access to another user's semaphore: the error names its
    /// owner and mode), [`Error::Io`].
    #[doc(alias = "sem_open")]
    pub fn open(name: &str) -> Result<NamedSemaphore> {
        let c_name = checked_name(name)?;
        let file = open_file(name).map_err(|e| open_refused("open", name, e))?;
        let identity = verify(name, &file)?;
        // SAFETY: `c_name` is a valid C string; without O_CREAT no variadic
        // arguments are read.
        let raw = unsafe { libc::sem_open(c_name.as_ptr(), 0) };
        let sem = opened(raw).map_err(|e| open_refused("sem_open", name, e))?;
        let semaphore = NamedSemaphore {
            sem,
            name: name.to_owned(),
            identity,
            unlink_on_drop: AtomicBool::new(false),
        };
        // glibc opened the path again: make sure it found the file we checked.
        let now = fs::stat(file_path(name)).map_err(|e| Error::io("stat", name, e))?;
        if (now.st_dev, now.st_ino) != identity {
            return Err(Error::Untrusted {
                name: name.to_owned(),
                owner: now.st_uid,
                mode: now.st_mode as u32 & 0o7777,
                expected_owner: rustix::process::geteuid().as_raw(),
            });
        }
        Ok(semaphore)
    }

    /// Like [`open`](NamedSemaphore::open), waiting up to `wait` for the
    /// semaphore to appear and for its creator to set its mode.
    ///
    /// # Errors
    /// [`Error::Timeout`] when it does not appear in time; otherwise as `open`.
    pub fn open_wait(name: &str, wait: Duration) -> Result<NamedSemaphore> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(20);
        loop {
            let error = match NamedSemaphore::open(name) {
                Ok(semaphore) => return Ok(semaphore),
                Err(error) => error,
            };
            let transient = match &error {
                Error::NotFound { .. } => true,
                // Between the creator's sem_open and fchmod, the mode may be tighter.
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
            let waited = start.elapsed();
            if waited >= wait {
                return Err(Error::Timeout {
                    name: name.to_owned(),
                    waited,
                });
            }
            thread::sleep(pause.min(wait - waited));
            pause = (pause * 2).min(Duration::from_millis(2));
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
        checked_name(name)?;
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
        match fs::stat(&path) {
            Ok(stat) if (stat.st_dev, stat.st_ino) == self.identity => {}
            Ok(_) | Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(Error::io("stat", &self.name, e)),
        }
        match fs::unlink(&path) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::io("sem_unlink", &self.name, e)),
        }
    }

    /// Waits until `deadline` (on the monotonic clock) with `sem_clockwait`;
    /// an interrupted wait resumes with the same deadline.
    fn wait_until(&self, start: Instant, timeout: Duration) -> Result<()> {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let total_ns = now.tv_nsec as u128 + timeout.as_nanos();
        let secs = (now.tv_sec as u128).saturating_add(total_ns / 1_000_000_000);
        let deadline = libc::timespec {
            tv_sec: secs.min(libc::time_t::MAX as u128) as libc::time_t,
            tv_nsec: (total_ns % 1_000_000_000) as libc::c_long,
        };
        loop {
            // SAFETY: `self.sem` is open until drop and `deadline` is a valid timespec.
            let rc = unsafe { sem_clockwait(self.sem.as_ptr(), libc::CLOCK_MONOTONIC, &deadline) };
            if rc == 0 {
                return Ok(());
            }
            match Errno::from_raw_os_error(errno()) {
                Errno::INTR => continue,
                Errno::TIMEDOUT => {
                    return Err(Error::Timeout {
                        name: self.name.clone(),
                        waited: start.elapsed(),
                    });
                }
                e => return Err(Error::io("sem_clockwait", &self.name, e)),
            }
        }
    }
}

impl Semaphore for NamedSemaphore {
    #[doc(alias = "sem_post")]
    fn post(&self) -> Result<()> {
        // SAFETY: `self.sem` is open until drop.
        if unsafe { libc::sem_post(self.sem.as_ptr()) } == 0 {
            return Ok(());
        }
        match Errno::from_raw_os_error(errno()) {
            Errno::OVERFLOW => Err(Error::Overflow {
                name: self.name.clone(),
                max: SEM_VALUE_MAX,
            }),
            e => Err(Error::io("sem_post", &self.name, e)),
        }
    }

    #[doc(alias = "sem_trywait")]
    fn try_wait(&self) -> Result<bool> {
        loop {
            // SAFETY: `self.sem` is open until drop.
            if unsafe { libc::sem_trywait(self.sem.as_ptr()) } == 0 {
                return Ok(true);
            }
            match Errno::from_raw_os_error(errno()) {
                Errno::AGAIN => return Ok(false),
                Errno::INTR => continue,
                e => return Err(Error::io("sem_trywait", &self.name, e)),
            }
        }
    }

    #[doc(alias = "sem_clockwait")]
    #[doc(alias = "sem_timedwait")]
    fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        self.wait_until(Instant::now(), timeout)
    }

    #[doc(alias = "sem_wait")]
    fn wait(&self) -> Result<()> {
        loop {
            // SAFETY: `self.sem` is open until drop.
            if unsafe { libc::sem_wait(self.sem.as_ptr()) } == 0 {
                return Ok(());
            }
            match Errno::from_raw_os_error(errno()) {
                Errno::INTR => continue,
                e => return Err(Error::io("sem_wait", &self.name, e)),
            }
        }
    }

    #[doc(alias = "sem_getvalue")]
    fn value(&self) -> Result<u32> {
        let mut value: libc::c_int = 0;
        // SAFETY: `self.sem` is open until drop; `value` is a valid out-pointer.
        if unsafe { libc::sem_getvalue(self.sem.as_ptr(), &mut value) } != 0 {
            return Err(Error::io(
                "sem_getvalue",
                &self.name,
                Errno::from_raw_os_error(errno()),
            ));
        }
        // glibc never reports waiters as a negative count.
        Ok(value.max(0) as u32)
    }
}

impl Drop for NamedSemaphore {
    fn drop(&mut self) {
        if self.unlink_on_drop.load(Ordering::Relaxed) {
            let _ = self.unlink_now();
        }
        // SAFETY: `self.sem` came from a successful sem_open and is closed once.
        unsafe { libc::sem_close(self.sem.as_ptr()) };
    }
}

/// Checks a semaphore name and turns it into the C string `sem_open` takes.
fn checked_name(name: &str) -> Result<CString> {
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
    // glibc stores the semaphore as /dev/shm/sem.<name without '/'>.
    if name.len() - 1 + "sem.".len() > nodeipc_shm::MAX_NAME_LEN {
        return Err(Error::InvalidName {
            name: name.to_owned(),
            reason: "it is longer than 252 bytes (its file is sem.<name>)",
        });
    }
    // No NUL inside: validate_name refused it.
    Ok(CString::new(name).expect("validated names hold no NUL"))
}

/// `/dev/shm/sem.<name>` for a valid name.
pub(crate) fn file_path(name: &str) -> PathBuf {
    PathBuf::from(format!("{}/sem.{}", nodeipc_shm::SHM_DIR, &name[1..]))
}

fn open_file(name: &str) -> rustix::io::Result<OwnedFd> {
    fs::open(
        file_path(name),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The error for a failed `op` on the semaphore's file.
///
/// When the kernel denies access (`EACCES`, or `EPERM` from `fchmod`) to a
/// file our checks would refuse anyway — another user's, or one whose mode
/// is not 0600 — the answer is [`Error::Untrusted`] naming its owner and mode
/// (from `lstat` of `/dev/shm/sem.<name>`, as the shm crate does for regions),
/// not a bare errno. Anything else, and a denial we cannot explain by owner or
/// mode, stays [`Error::Io`].
fn refused(op: &'static str, name: &str, errno: Errno) -> Error {
    if !matches!(errno, Errno::ACCESS | Errno::PERM) {
        return Error::io(op, name, errno);
    }
    let expected_owner = rustix::process::geteuid().as_raw();
    match fs::lstat(file_path(name)) {
        Ok(stat) if stat.st_uid != expected_owner || stat.st_mode & 0o7777 != SEM_MODE => {
            Error::Untrusted {
                name: name.to_owned(),
                owner: stat.st_uid,
                mode: stat.st_mode & 0o7777,
                expected_owner,
            }
        }
        _ => Error::io(op, name, errno),
    }
}

/// As [`refused`], for opening a semaphore someone else created: a missing
/// file is [`Error::NotFound`].
fn open_refused(op: &'static str, name: &str, errno: Errno) -> Error {
    match errno {
        Errno::NOENT => Error::NotFound {
            name: name.to_owned(),
        },
        errno => refused(op, name, errno),
    }
}

/// Checks the semaphore's file: a regular file of our uid with mode 0600.
/// Returns its `(st_dev, st_ino)`.
fn verify(name: &str, file: &OwnedFd) -> Result<(u64, u64)> {
    let stat = fs::fstat(file).map_err(|e| Error::io("fstat", name, e))?;
    let owner = stat.st_uid;
    let mode = stat.st_mode as u32 & 0o7777;
    let expected_owner = rustix::process::geteuid().as_raw();
    let regular = FileType::from_raw_mode(stat.st_mode as _) == FileType::RegularFile;
    if !regular || owner != expected_owner || mode != SEM_MODE {
        return Err(Error::Untrusted {
            name: name.to_owned(),
            owner,
            mode,
            expected_owner,
        });
    }
    Ok((stat.st_dev, stat.st_ino))
}

/// glibc's `SEM_FAILED` is a null pointer (the `libc` crate leaves it out on Linux).
fn opened(raw: *mut libc::sem_t) -> std::result::Result<NonNull<libc::sem_t>, Errno> {
    NonNull::new(raw).ok_or_else(|| Errno::from_raw_os_error(errno()))
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
