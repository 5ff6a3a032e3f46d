//! Finding and removing objects under `/dev/shm`: what crashed runs left behind.
//!
//! # What is proved before an object is removed
//!
//! [`remove_stale`] removes an object only when all of this holds:
//!
//! 1. it is a regular file (not a link) owned by our effective uid;
//! 2. no process the [`ProcessScan`] saw maps it, holds it open, or works in
//!    it (this names the users; it is not the proof, since a scan may miss
//!    processes);
//! 3. the kernel grants a write lease on it ([`Unheld`]): there is no open
//!    file description of it anywhere but ours — no descriptor in any
//!    process of any namespace, no mapping (a mapping keeps its file open),
//!    no descriptor in flight in an `SCM_RIGHTS` message — whether or not
//!    `/proc` shows the process, whatever our pid namespace or descriptor
//!    limit; and the name still refers to the file listed;
//! 4. while the lease is held, the name is checked once more and removed.
//!    An open that starts in that instant waits for the lease and then gets
//!    the object, no longer named.
//!
//! Anything else keeps the object, with the reason ([`KeepReason`]): a
//! refused lease is "in use or unknown", a failed step (`EMFILE` opening it,
//! leases disabled) is "cannot prove".

use std::fmt;
use std::fs as stdfs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use crate::{Error, Result, SHM_DIR};

// The forensics the proof below needs, beside the listing that is their
// one user in this crate (the CLI's `clean` uses them for its directories).
mod lease;
mod procscan;

pub use lease::{NotProved, Unheld};
pub use procscan::{Gap, ProcessScan};

/// The file name glibc gives a named semaphore: `sem.` then its name.
const SEMAPHORE_FILE_PREFIX: &str = "sem.";

/// What kind of object a file under `/dev/shm` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// A shared-memory region (`shm_open`).
    Region,
    /// A glibc named semaphore (`sem_open`), stored as `sem.<name>`.
    Semaphore,
}

/// One object under `/dev/shm`, as `list` found it.
#[derive(Clone, Debug)]
pub struct ShmObject {
    /// Its POSIX name, leading `/` included (for a semaphore, the name given
    /// to `sem_open`).
    pub name: String,
    /// Region or semaphore.
    pub kind: ObjectKind,
    /// The file under `/dev/shm`.
    pub path: PathBuf,
    /// Owner uid.
    pub owner: u32,
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Processes that map it or hold it open (those whose `/proc` we may read).
    pub users: Vec<u32>,
}

impl ShmObject {
    /// Whether a live process maps it or holds it open.
    pub fn in_use(&self) -> bool {
        !self.users.is_empty()
    }
}

/// Why [`remove_stale`] left an object in place.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeepReason {
    /// Live processes map it or hold it open.
    InUse {
        /// Their pids.
        pids: Vec<u32>,
    },
    /// It belongs to another user.
    OtherOwner {
        /// Its owner.
        uid: u32,
    },
    /// Removing it failed.
    RemoveFailed {
        /// The errno.
        errno: i32,
    },
    /// The kernel refused a write lease: a process holds it open or mapped,
    /// though none the scan saw (one in another pid namespace, one whose
    /// `/proc` we may not read, a descriptor in flight).
    HeldUnseen {
        /// Why the scan may have missed its users, if it saw a gap.
        gap: Option<Gap>,
    },
    /// A step of the proof that nobody uses it failed: not proved, kept.
    Unproven {
        /// The call that failed (`open`, `fcntl(F_SETLEASE, F_WRLCK)`).
        step: &'static str,
        /// The errno.
        errno: i32,
    },
    /// Its name refers to another object than the one listed.
    Replaced,
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pids = |pids: &[u32]| {
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            KeepReason::InUse { pids: users } => write!(f, "in use by pid {}", pids(users)),
            KeepReason::OtherOwner { uid } => write!(f, "owned by uid {uid}"),
            KeepReason::RemoveFailed { errno } => write!(
                f,
                "remove failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            KeepReason::HeldUnseen { gap } => {
                write!(
                    f,
                    "in use or unknown: the kernel refused a write lease, so a process holds it open or mapped, but clean cannot see which"
                )?;
                match gap {
                    Some(gap) => write!(f, " ({gap})"),
                    None => write!(
                        f,
                        " (one in another pid namespace, or a descriptor in flight)"
                    ),
                }
            }
            KeepReason::Unproven { step, errno } => write!(
                f,
                "in use or unknown: {}",
                NotProved::Failed {
                    step,
                    errno: *errno
                }
            ),
            KeepReason::Replaced => write!(
                f,
                "in use or unknown: {} since it was listed",
                NotProved::Replaced
            ),
        }
    }
}

/// What a clean-up removed and what it kept, with the reason.
#[derive(Clone, Debug, Default)]
pub struct Cleanup {
    /// Objects removed (or, for a plan, that would be).
    pub removed: Vec<ShmObject>,
    /// Objects left in place.
    pub kept: Vec<(ShmObject, KeepReason)>,
}

/// Lists regions and named semaphores whose names start with `prefix`
/// (`"/nodeipc-"`, say; `"/"` lists everything), with owner, size, mode and
/// the live processes that map them or hold them open.
///
/// Users are found by a [`ProcessScan`] of `/proc`: processes it cannot see
/// (see [`ProcessScan::gaps`]) are missing from the list.
///
/// # Errors
/// [`Error::InvalidName`] if the prefix has a `/` past the first byte;
/// [`Error::Io`] if `/dev/shm` cannot be read.
///
/// # Examples
/// ```
/// let name = format!("/nodeipc-doc-list-{}", std::process::id());
/// let region = nodeipc_shm::Region::create(&name, 4096)?;
/// let found = nodeipc_shm::list(&name)?;
/// assert_eq!(found.len(), 1);
/// assert!(found[0].users.contains(&std::process::id()));
/// # Ok::<(), nodeipc_shm::Error>(())
/// ```
pub fn list(prefix: &str) -> Result<Vec<ShmObject>> {
    list_with(prefix, &ProcessScan::run())
}

/// [`list`] with the users from `scan`, a scan the caller made (and may use
/// for more).
///
/// # Errors
/// As [`list`].
pub fn list_with(prefix: &str, scan: &ProcessScan) -> Result<Vec<ShmObject>> {
    Ok(listed(prefix, scan)?.into_iter().map(|(o, _)| o).collect())
}

/// What [`remove_stale`] would do now, removing nothing: the same proof is
/// made (and the lease let go at once).
///
/// # Errors
/// As [`list`].
pub fn plan_cleanup(prefix: &str) -> Result<Cleanup> {
    plan_cleanup_with(prefix, &ProcessScan::run())
}

/// [`plan_cleanup`] with the users from `scan`.
///
/// # Errors
/// As [`list`].
pub fn plan_cleanup_with(prefix: &str, scan: &ProcessScan) -> Result<Cleanup> {
    cleanup(prefix, scan, false)
}

/// Removes the objects under `prefix` that are ours (owned by our effective
/// uid) and that provably no process maps or holds open (see the module
/// documentation for the proof): the leftovers of crashed runs. Everything
/// else is kept, with the reason.
///
/// # Errors
/// As [`list`]; a failure with one object is reported in
/// [`Cleanup::kept`] and does not stop the others.
pub fn remove_stale(prefix: &str) -> Result<Cleanup> {
    remove_stale_with(prefix, &ProcessScan::run())
}

/// [`remove_stale`] with the users from `scan`.
///
/// # Errors
/// As [`list`].
pub fn remove_stale_with(prefix: &str, scan: &ProcessScan) -> Result<Cleanup> {
    cleanup(prefix, scan, true)
}

fn cleanup(prefix: &str, scan: &ProcessScan, remove: bool) -> Result<Cleanup> {
    let euid = rustix::process::geteuid().as_raw();
    let mut done = Cleanup::default();
    for (object, id) in listed(prefix, scan)? {
        if object.owner != euid {
            let uid = object.owner;
            done.kept.push((object, KeepReason::OtherOwner { uid }));
            continue;
        }
        if object.in_use() {
            let pids = object.users.clone();
            done.kept.push((object, KeepReason::InUse { pids }));
            continue;
        }
        let proved = Unheld::prove(&object.path, Some(id)).and_then(|proof| {
            if remove {
                proof.unlink(&object.path)
            } else {
                Ok(())
            }
        });
        let reason = match proved {
            Ok(()) => {
                done.removed.push(object);
                continue;
            }
            // Someone else removed it meanwhile: nothing to report.
            Err(NotProved::Gone) => continue,
            Err(NotProved::Held) => KeepReason::HeldUnseen {
                gap: scan.blind_spot(false).cloned(),
            },
            Err(NotProved::Replaced) => KeepReason::Replaced,
            Err(NotProved::Failed {
                step: "unlink",
                errno,
            }) => KeepReason::RemoveFailed { errno },
            Err(NotProved::Failed { step, errno }) => KeepReason::Unproven { step, errno },
        };
        done.kept.push((object, reason));
    }
    Ok(done)
}

/// The objects under `prefix`, sorted by name, each with its `(dev, ino)`.
fn listed(prefix: &str, scan: &ProcessScan) -> Result<Vec<(ShmObject, (u64, u64))>> {
    let file_prefix = prefix.strip_prefix('/').unwrap_or(prefix);
    if file_prefix.contains('/') {
        return Err(Error::InvalidName {
            name: prefix.to_owned(),
            reason: "a prefix may hold no '/' past the first byte",
        });
    }
    let entries = stdfs::read_dir(SHM_DIR).map_err(|e| Error::io("read_dir", SHM_DIR, e))?;
    let mut objects = Vec::new();
    for entry in entries {
        // A listing cut short would hide leftovers: say so.
        let entry = entry.map_err(|e| Error::io("read_dir", SHM_DIR, e))?;
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        let (kind, bare) = match file_name.strip_prefix(SEMAPHORE_FILE_PREFIX) {
            Some(bare) => (ObjectKind::Semaphore, bare),
            None => (ObjectKind::Region, file_name),
        };
        if !bare.starts_with(file_prefix) {
            continue;
        }
        // Not following links: a symlink or directory here is no object of ours.
        let meta = match entry.path().symlink_metadata() {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("lstat", &entry.path().to_string_lossy(), e)),
        };
        if !meta.file_type().is_file() {
            continue;
        }
        let (dev, ino) = (meta.dev(), meta.ino());
        objects.push((
            ShmObject {
                name: format!("/{bare}"),
                kind,
                path: entry.path(),
                owner: meta.uid(),
                mode: meta.permissions().mode() & 0o7777,
                size: meta.size(),
                users: scan.users_of(dev, ino),
            },
            (dev, ino),
        ));
    }
    objects.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(objects)
}
