//! Finding and removing objects under `/dev/shm`: what crashed runs left behind.

use std::collections::HashMap;
use std::fs as stdfs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use crate::{Error, Result, SHM_DIR};

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
/// Users are found by walking `/proc/*/maps` and `/proc/*/fd`; processes of
/// other users are only visible to root.
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
    let file_prefix = prefix.strip_prefix('/').unwrap_or(prefix);
    if file_prefix.contains('/') {
        return Err(Error::InvalidName {
            name: prefix.to_owned(),
            reason: "a prefix may hold no '/' past the first byte",
        });
    }
    let entries = stdfs::read_dir(SHM_DIR).map_err(|e| Error::io("read_dir", SHM_DIR, e))?;
    let mut objects = Vec::new();
    for entry in entries.flatten() {
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
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if !meta.file_type().is_file() {
            continue;
        }
        objects.push((
            ShmObject {
                name: format!("/{bare}"),
                kind,
                path: entry.path(),
                owner: meta.uid(),
                mode: meta.permissions().mode() & 0o7777,
                size: meta.size(),
                users: Vec::new(),
            },
            (meta.dev(), meta.ino()),
        ));
    }
    if !objects.is_empty() {
        let ids: HashMap<(u64, u64), usize> = objects
            .iter()
            .enumerate()
            .map(|(i, (_, id))| (*id, i))
            .collect();
        for (pid, index) in users_of(&ids) {
            let users = &mut objects[index].0.users;
            if !users.contains(&pid) {
                users.push(pid);
            }
        }
    }
    let mut objects: Vec<ShmObject> = objects.into_iter().map(|(o, _)| o).collect();
    objects.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(objects)
}

/// What [`remove_stale`] would do now, removing nothing.
///
/// # Errors
/// As [`list`].
pub fn plan_cleanup(prefix: &str) -> Result<Cleanup> {
    let euid = rustix::process::geteuid().as_raw();
    let mut plan = Cleanup::default();
    for object in list(prefix)? {
        if object.owner != euid {
            let uid = object.owner;
            plan.kept.push((object, KeepReason::OtherOwner { uid }));
        } else if object.in_use() {
            let pids = object.users.clone();
            plan.kept.push((object, KeepReason::InUse { pids }));
        } else {
            plan.removed.push(object);
        }
    }
    Ok(plan)
}

/// Removes the objects under `prefix` that are ours (owned by our effective
/// uid) and that no live process maps or holds open: the leftovers of crashed
/// runs. Objects in use or of other users are kept, with the reason.
///
/// # Errors
/// As [`list`]; a failure to remove one object is reported in
/// [`Cleanup::kept`] and does not stop the others.
pub fn remove_stale(prefix: &str) -> Result<Cleanup> {
    let plan = plan_cleanup(prefix)?;
    let mut done = Cleanup {
        removed: Vec::new(),
        kept: plan.kept,
    };
    for object in plan.removed {
        match stdfs::remove_file(&object.path) {
            Ok(()) => done.removed.push(object),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => done.removed.push(object),
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                done.kept.push((object, KeepReason::RemoveFailed { errno }));
            }
        }
    }
    Ok(done)
}

/// `(pid, object index)` for every process that maps or holds one of `ids`.
fn users_of(ids: &HashMap<(u64, u64), usize>) -> Vec<(u32, usize)> {
    // `/proc/<pid>/maps` names the device as hex "major:minor".
    let by_maps_key: HashMap<(u32, u32, u64), usize> = ids
        .iter()
        .map(|(&(dev, ino), &i)| ((rustix::fs::major(dev), rustix::fs::minor(dev), ino), i))
        .collect();
    let mut found = Vec::new();
    let Ok(procs) = stdfs::read_dir("/proc") else {
        return found;
    };
    for proc_entry in procs.flatten() {
        let Some(pid) = proc_entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = proc_entry.path();
        if let Ok(maps) = stdfs::read_to_string(dir.join("maps")) {
            for line in maps.lines() {
                if let Some(index) = parse_maps_line(line).and_then(|k| by_maps_key.get(&k)) {
                    found.push((pid, *index));
                }
            }
        }
        if let Ok(fds) = stdfs::read_dir(dir.join("fd")) {
            for fd in fds.flatten() {
                // `metadata` follows the magic link to the open file itself.
                if let Ok(meta) = stdfs::metadata(fd.path())
                    && let Some(index) = ids.get(&(meta.dev(), meta.ino()))
                {
                    found.push((pid, *index));
                }
            }
        }
    }
    found
}

/// `(major, minor, inode)` of one `/proc/<pid>/maps` line.
fn parse_maps_line(line: &str) -> Option<(u32, u32, u64)> {
    let mut fields = line.split_ascii_whitespace();
    let dev = fields.nth(3)?;
    let inode: u64 = fields.next()?.parse().ok()?;
    if inode == 0 {
        return None;
    }
    let (major, minor) = dev.split_once(':')?;
    Some((
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
        inode,
    ))
}

#[cfg(test)]
mod tests {
    use super::parse_maps_line;

    #[test]
    fn maps_line_with_deleted_object() {
        let line =
            "7f1c2a000000-7f1c2a001000 rw-s 00000000 00:1a 4242   /dev/shm/nodeipc-x (deleted)";
        assert_eq!(parse_maps_line(line), Some((0, 0x1a, 4242)));
    }

    #[test]
    fn maps_line_of_anonymous_memory_is_skipped() {
        let line = "7ffd1000-7ffd2000 rw-p 00000000 00:00 0  [stack]";
        assert_eq!(parse_maps_line(line), None);
    }
}
