//! [`FdHandle`]: a descriptor named as a plain value `{pid, fd, start time}`
//! that another process turns into its own descriptor with `pidfd_getfd`.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::io::Errno;
use rustix::process::{PTracer, Pid};

use crate::procstat::{own_start_time, start_time};
use crate::{Error, Pidfd, Result};

/// A descriptor number in another process's descriptor table.
///
/// # Warning
/// The number means nothing in this process: it may be closed here, or name
/// an unrelated file. The only thing to do with it is to ask the kernel for a
/// copy, with [`Pidfd::get_fd`] or [`FdHandle::import`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ForeignFd(i32);

impl ForeignFd {
    /// Wraps a descriptor number of another process.
    pub const fn new(raw: i32) -> ForeignFd {
        ForeignFd(raw)
    }

    /// The number, as it is in the other process.
    pub const fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Display for ForeignFd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "foreign fd {}", self.0)
    }
}

/// Who may `pidfd_getfd` (ptrace-attach to) this process under Yama's
/// `ptrace_scope = 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ptracer {
    /// Only this process (and its descendants).
    Process(u32),
    /// Any process of the same user.
    Any,
    /// Back to the default: ancestors only.
    None,
}

/// Lets `tracer` import this process's descriptors when Yama restricts ptrace
/// (`prctl(PR_SET_PTRACER)`). Without Yama there is nothing to allow and this
/// does nothing.
///
/// # Errors
/// [`Error::ProcessGone`] for a pid that cannot name a process (0, or past
/// `i32::MAX`) and, under Yama, for one that names no live process;
/// [`Error::Io`] if the kernel refuses otherwise.
#[doc(alias = "PR_SET_PTRACER")]
pub fn allow_ptracer(tracer: Ptracer) -> Result<()> {
    let tracer = match tracer {
        Ptracer::Process(pid) => {
            PTracer::ProcessID(i32::try_from(pid).ok().and_then(Pid::from_raw).ok_or(
                Error::ProcessGone {
                    pid,
                    reason: "not a valid pid",
                },
            )?)
        }
        Ptracer::Any => PTracer::Any,
        Ptracer::None => PTracer::None,
    };
    match rustix::process::set_ptracer(tracer) {
        Ok(()) => Ok(()),
        // Without Yama the call is EINVAL and ptrace is not restricted by
        // it; with Yama, EINVAL means the pid names no live process, and
        // nothing was allowed.
        Err(Errno::INVAL) if !yama_loaded() => Ok(()),
        Err(Errno::INVAL) => match tracer {
            PTracer::ProcessID(pid) => Err(Error::ProcessGone {
                pid: pid.as_raw_nonzero().get() as u32,
                reason: "no such process to allow as ptracer",
            }),
            _ => Err(Error::io("prctl(PR_SET_PTRACER)", Errno::INVAL)),
        },
        Err(e) => Err(Error::io("prctl(PR_SET_PTRACER)", e)),
    }
}

/// Whether the Yama security module is loaded (it has a sysctl then).
fn yama_loaded() -> bool {
    std::path::Path::new("/proc/sys/kernel/yama/ptrace_scope").exists()
}

/// A descriptor of one process, as a fixed-size value any channel can carry
/// (shared memory, a pipe, MPI, a file): its pid, the descriptor number, and
/// the process's start time.
///
/// Another process turns it into a descriptor of its own with
/// [`import`](FdHandle::import): `pidfd_open`, a check that the process
/// behind the pid still has the recorded start time (a recycled pid is
/// refused), then `pidfd_getfd`.
///
/// The exporting process must keep the descriptor open, under the same
/// number, until every importer is done: the handle holds no reference to
/// the file, only its number.
///
/// # Examples
/// ```
/// use std::os::fd::AsFd;
/// use nodeipc_fdpass::FdHandle;
/// let (reader, _writer) = std::io::pipe()?;
/// let bytes = FdHandle::export(&reader)?.to_bytes(); // send these anywhere
/// let copy = FdHandle::from_bytes(&bytes)?.import()?; // in the other process
/// # drop(copy);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FdHandle {
    /// The exporting process.
    pub pid: u32,
    /// The descriptor in it.
    pub fd: ForeignFd,
    /// Its start time, in clock ticks since boot (`/proc/<pid>/stat`, field 22).
    pub start_time: u64,
}

const MAGIC: [u8; 4] = *b"NIFH";
const VERSION: u16 = 1;

impl FdHandle {
    /// Bytes in [`to_bytes`](FdHandle::to_bytes): magic, version, reserved,
    /// pid, fd, start time, little-endian.
    pub const SIZE: usize = 24;

    /// A handle for one of this process's descriptors.
    ///
    /// # Errors
    /// [`Error::ProcessIo`] when our own start time cannot be read from
    /// `/proc/self/stat` (out of descriptors, say; it is read once).
    pub fn export(fd: &impl AsFd) -> Result<FdHandle> {
        Ok(FdHandle {
            pid: std::process::id(),
            fd: ForeignFd::new(fd.as_fd().as_raw_fd()),
            start_time: own_start_time()?,
        })
    }

    /// The handle as bytes: always [`FdHandle::SIZE`] of them.
    pub fn to_bytes(&self) -> [u8; FdHandle::SIZE] {
        let mut out = [0u8; FdHandle::SIZE];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[8..12].copy_from_slice(&self.pid.to_le_bytes());
        out[12..16].copy_from_slice(&self.fd.raw().to_le_bytes());
        out[16..24].copy_from_slice(&self.start_time.to_le_bytes());
        out
    }

    /// Reads a handle written by [`to_bytes`](FdHandle::to_bytes), checking
    /// every field; any bytes at all give a handle or an error, never a panic.
    ///
    /// # Errors
    /// [`Error::BadHandle`] naming what is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Result<FdHandle> {
        let bad = |reason: String| Err(Error::BadHandle { reason });
        let Ok(bytes) = <&[u8; FdHandle::SIZE]>::try_from(bytes) else {
            return bad(format!(
                "{} bytes, expected {}",
                bytes.len(),
                FdHandle::SIZE
            ));
        };
        let field = |range: std::ops::Range<usize>| &bytes[range];
        if field(0..4) != MAGIC {
            return bad(format!("magic {:02x?}, expected {MAGIC:02x?}", field(0..4)));
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != VERSION {
            return bad(format!(
                "layout version {version}, this build reads {VERSION}"
            ));
        }
        if field(6..8) != [0, 0] {
            return bad("reserved bytes are not zero".to_owned());
        }
        let word = |at: usize| [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]];
        let pid = u32::from_le_bytes(word(8));
        if pid == 0 || pid > i32::MAX as u32 {
            return bad(format!("pid {pid} is not a valid pid"));
        }
        let fd = i32::from_le_bytes(word(12));
        if fd < 0 {
            return bad(format!("descriptor {fd} is negative"));
        }
        let mut start = [0u8; 8];
        start.copy_from_slice(field(16..24));
        Ok(FdHandle {
            pid,
            fd: ForeignFd::new(fd),
            start_time: u64::from_le_bytes(start),
        })
    }

    /// Opens a pidfd for the exporting process, and checks that it is the
    /// same process that exported (same start time).
    ///
    /// # Errors
    /// [`Error::ProcessGone`] if it exited or its pid now names a later
    /// process; as [`Pidfd::open`] otherwise.
    pub fn open_process(&self) -> Result<Pidfd> {
        open_verified(self.pid, self.start_time)
    }

    /// Makes a descriptor of our own that refers to the same open file.
    ///
    /// # Errors
    /// [`Error::ProcessGone`] (exited, or pid reused), [`Error::NoSuchFd`]
    /// (the exporter closed it), [`Error::NotPermitted`] (with the ways out),
    /// [`Error::Unsupported`] before Linux 5.6.
    pub fn import(&self) -> Result<OwnedFd> {
        self.open_process()?.get_fd(self.fd)
    }
}

/// A pidfd for `pid`, refused unless the process behind it started at
/// `start_time`. The pidfd is opened first: if the pid was recycled before
/// that, it names the newcomer, whose start time gives it away.
///
/// Only the kernel saying so (`ESRCH`, `ENOENT`) or a different start time
/// makes the process gone: failing to look (out of descriptors, say) is
/// reported as that failure, never as a death.
///
/// # Errors
/// [`Error::ProcessGone`] (exited, or its pid now names a later process);
/// [`Error::ProcessIo`] naming the pid and the errno when `pidfd_open` or
/// reading `/proc/<pid>/stat` fails for another reason (`EMFILE`, say); as
/// [`Pidfd::open`] otherwise.
pub fn open_verified(pid: u32, start_time: u64) -> Result<Pidfd> {
    let pidfd = Pidfd::open(pid)?;
    if crate::procstat::start_time(pid)? == start_time {
        Ok(pidfd)
    } else {
        Err(Error::ProcessGone {
            pid,
            reason: "its pid now belongs to a process started later",
        })
    }
}

/// The start time of a live process (`/proc/<pid>/stat`, field 22), to record
/// beside its pid.
///
/// # Errors
/// [`Error::ProcessGone`] only when the kernel says there is no such process
/// (`ENOENT`, `ESRCH`); [`Error::ProcessIo`] naming the pid, the file and the
/// errno for any other failure to read it (`EMFILE`, `ENFILE`, `/proc` not
/// mounted): that is our trouble, not a sign the process died.
pub fn process_start_time(pid: u32) -> Result<u64> {
    start_time(pid)
}

/// How a descriptor gets from one process to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The importer copies it with `pidfd_getfd`: no socket, one system call.
    Pidfd,
    /// It travels in an `SCM_RIGHTS` message over a Unix socket.
    ScmRights,
}

/// Whether this process may `pidfd_getfd` from `peer_pid`: probes with a
/// descriptor number no process has, so the kernel answers with its
/// permission check (`EPERM`) or, past it, with `EBADF`. Nothing is copied.
pub fn pidfd_getfd_available(peer_pid: u32) -> bool {
    let Ok(pidfd) = Pidfd::open(peer_pid) else {
        return false;
    };
    matches!(
        pidfd.get_fd(ForeignFd::new(i32::MAX)),
        Err(Error::NoSuchFd { .. })
    )
}

impl Transport {
    /// [`Transport::Pidfd`] if the kernel lets us `pidfd_getfd` from
    /// `peer_pid`, [`Transport::ScmRights`] otherwise.
    pub fn probe(peer_pid: u32) -> Transport {
        if pidfd_getfd_available(peer_pid) {
            Transport::Pidfd
        } else {
            Transport::ScmRights
        }
    }
}
