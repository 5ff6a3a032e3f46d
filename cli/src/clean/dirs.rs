//! Our directories under the temporary directory (and `$XDG_RUNTIME_DIR`,
//! and the directories named with `--run-dir`), and the proof that one is
//! abandoned before `clean` removes it.
//!
//! A directory is removed only when all of this holds (the first that
//! fails is the reason it is kept):
//!
//! 1. it is a directory (not a link) owned by our effective uid, named like
//!    ours, and holds only directories, regular files, sockets and links —
//!    at most [`MAX_DEPTH`] deep and [`MAX_ENTRIES`] entries, all readable;
//! 2. no process the scan saw has its working or root directory there, or a
//!    descriptor or mapping of anything in it; the creator pid a legacy name
//!    carries is no live process's pid in any pid namespace;
//! 3. no socket in it is bound, in any network namespace: a datagram
//!    `connect` answers `ECONNREFUSED` (a bound stream socket answers
//!    `EPROTOTYPE`, a bound datagram socket accepts; nothing is sent);
//! 4. the kernel grants a write lease on every regular file in it: no open
//!    file description of any exists, anywhere;
//! 5. the scan saw every process (the initial pid namespace, no `hidepid`,
//!    every `/proc` entry readable; with `--ignore-unreadable`, refused
//!    entries of other users' or LSM-protected processes are let pass):
//!    working directories and directory descriptors are known from `/proc`
//!    only;
//! 6. it has not changed for `--min-age` (its ctime, which nobody can set):
//!    a creator may be between `mkdir` and its first socket or file.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nodeipc_shm::{NotProved, ProcessScan, Unheld};
use rustix::io::Errno;

use crate::Failure;

/// Deepest nesting looked into; our directories are flat.
const MAX_DEPTH: usize = 8;
/// Most entries looked at in one directory tree.
const MAX_ENTRIES: usize = 4096;

/// One directory of ours (by its name) under the temporary directory.
pub(super) struct OurDir {
    pub(super) path: PathBuf,
    pub(super) owner: u32,
    pub(super) mode: u32,
    /// Bytes of the regular files in it.
    pub(super) size: u64,
    /// Live processes seen using it.
    pub(super) users: Vec<u32>,
    /// `(dev, ino)` when listed, so a directory put in its place since is
    /// not removed.
    id: (u64, u64),
    /// Why it must stay; `None` when it is proved abandoned.
    keep: Option<String>,
}

impl OurDir {
    /// Why `clean` keeps it, or `None` when it is proved abandoned.
    pub(super) fn keep(&self) -> Option<&str> {
        self.keep.as_deref()
    }

    /// Removes it, if it is still the directory that was proved abandoned.
    pub(super) fn remove(&self) -> Result<(), String> {
        match self.path.symlink_metadata() {
            Ok(meta) if meta.is_dir() && (meta.dev(), meta.ino()) == self.id => {}
            Ok(_) => return Err("another file took its place since it was checked".to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("lstat failed: {e}")),
        }
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("remove failed: {e}")),
        }
    }
}

/// How the directories are judged.
pub(super) struct Rules {
    /// Let `/proc` entries we may not read pass (see the module docs, 5).
    pub(super) ignore_unreadable: bool,
    /// Younger than this is kept (6).
    pub(super) min_age: Duration,
}

/// Which of our directory kinds `name` (a file name in the temporary
/// directory) is, and the pid of its creator when the name carries one.
pub(super) fn classify(name: &str) -> Option<Option<u32>> {
    let fields: Vec<&str> = name.split('-').collect();
    let number = |s: &str| s.parse::<u32>().ok();
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    match fields.as_slice() {
        // nodeipc demo, bench monitor and launch: nodeipc-demo-<random>,
        // or the older nodeipc-demo-<pid>-<nonce>.
        ["nodeipc", "demo", random]
        | ["nodeipc", "bench", "monitor", random]
        | ["nodeipc", "launch", random]
            if hex(random) =>
        {
            Some(None)
        }
        ["nodeipc", "demo", pid, nonce] | ["nodeipc", "bench", "monitor", pid, nonce]
            if hex(nonce) =>
        {
            number(pid).map(Some)
        }
        // rank group mesh: nodeipc-group-<uid>-<nonce>, only our uid's
        ["nodeipc", "group", uid, nonce] if hex(nonce) => {
            let ours = rustix::process::geteuid().as_raw();
            (number(uid) == Some(ours)).then_some(None)
        }
        // tests: nodeipc-test-<tag…>-<pid>-<counter>-<nanos>
        ["nodeipc", "test", .., pid, counter, nanos] if number(counter).is_some() && hex(nanos) => {
            number(pid).map(Some)
        }
        _ => None,
    }
}

/// The directories to look in: `$TMPDIR` (the demo's), `/tmp` (the group
/// mesh's and the tests'), `$XDG_RUNTIME_DIR` (where `nodeipc launch` makes
/// its run directory by default) and those the user named (`--run-dir`).
fn temp_dirs(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = vec![std::env::temp_dir(), PathBuf::from("/tmp")];
    dirs.extend(
        std::env::var_os("XDG_RUNTIME_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from),
    );
    dirs.extend(extra.iter().cloned());
    let mut seen = Vec::new();
    dirs.retain(|d| {
        let new = !seen.contains(d);
        seen.push(d.clone());
        new
    });
    dirs
}

/// Our directories whose name starts with `prefix` (its leading `/`
/// dropped), each judged.
pub(super) fn our_dirs(
    prefix: &str,
    extra: &[PathBuf],
    scan: &ProcessScan,
    rules: &Rules,
) -> Result<Vec<OurDir>, Failure> {
    let prefix = prefix.strip_prefix('/').unwrap_or(prefix);
    if prefix.contains('/') {
        return Err(Failure::Error(format!(
            "prefix {prefix:?}: a prefix may hold no '/' past the first byte"
        )));
    }
    let bound = bound_sockets();
    let mut dirs = Vec::new();
    for temp in temp_dirs(extra) {
        let entries = match std::fs::read_dir(&temp) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(Failure::Error(format!(
                    "cannot list {}: {e}",
                    temp.display()
                )));
            }
        };
        for entry in entries {
            // A listing cut short would hide leftovers: say so.
            let entry = entry
                .map_err(|e| Failure::Error(format!("cannot list {}: {e}", temp.display())))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with(prefix) {
                continue;
            }
            let Some(creator) = classify(name) else {
                continue;
            };
            // Not following links: a symlink here is nothing of ours.
            let meta = match entry.path().symlink_metadata() {
                Ok(meta) if meta.is_dir() => meta,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(Failure::Error(format!(
                        "cannot lstat {}: {e}",
                        entry.path().display()
                    )));
                }
            };
            dirs.push(judge(entry.path(), &meta, creator, scan, &bound, rules));
        }
    }
    dirs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(dirs)
}

/// What a directory holds, walked without following links.
#[derive(Default)]
struct Tree {
    /// `(dev, ino)` of it, every directory and every file in it.
    ids: Vec<(u64, u64)>,
    /// Regular files, with `(dev, ino)`.
    files: Vec<(PathBuf, (u64, u64))>,
    sockets: Vec<PathBuf>,
    size: u64,
}

fn walk(dir: &Path, depth: usize, tree: &mut Tree) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("{} is nested too deep to check", dir.display()));
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        if tree.ids.len() >= MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries to check"));
        }
        let path = entry.path();
        let meta = match path.symlink_metadata() {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot lstat {}: {e}", path.display())),
        };
        let id = (meta.dev(), meta.ino());
        let kind = meta.file_type();
        if kind.is_dir() {
            tree.ids.push(id);
            walk(&path, depth + 1, tree)?;
        } else if kind.is_file() {
            tree.ids.push(id);
            tree.size += meta.len();
            tree.files.push((path, id));
        } else if kind.is_socket() {
            tree.sockets.push(path);
        } else if !kind.is_symlink() {
            // A FIFO or a device may be open, and no lease can tell.
            return Err(format!(
                "{} is a {}, which clean cannot prove unused",
                path.display(),
                if kind.is_fifo() { "FIFO" } else { "device" }
            ));
        }
    }
    Ok(())
}

fn judge(
    path: PathBuf,
    meta: &std::fs::Metadata,
    creator: Option<u32>,
    scan: &ProcessScan,
    bound: &[(PathBuf, u64)],
    rules: &Rules,
) -> OurDir {
    let mut dir = OurDir {
        owner: meta.uid(),
        mode: meta.permissions().mode() & 0o7777,
        size: 0,
        users: Vec::new(),
        id: (meta.dev(), meta.ino()),
        keep: None,
        path,
    };
    let euid = rustix::process::geteuid().as_raw();
    if dir.owner != euid {
        dir.keep = Some(format!("owned by uid {}", dir.owner));
        return dir;
    }
    let mut tree = Tree {
        ids: vec![dir.id],
        ..Tree::default()
    };
    let walked = walk(&dir.path, 0, &mut tree);
    dir.size = tree.size;
    let mut users: BTreeSet<u32> = tree
        .ids
        .iter()
        .flat_map(|&(dev, ino)| scan.users_of(dev, ino))
        .collect();
    for socket in &tree.sockets {
        for inode in bound.iter().filter(|(p, _)| p == socket).map(|(_, i)| *i) {
            users.extend(scan.socket_holders(inode));
        }
    }
    if let Some(pid) = creator.filter(|&pid| scan.has_pid(pid)) {
        users.insert(pid);
    }
    dir.users = users.into_iter().collect();
    dir.keep = why_keep(&dir, &tree, walked, meta, scan, rules);
    dir
}

fn why_keep(
    dir: &OurDir,
    tree: &Tree,
    walked: Result<(), String>,
    meta: &std::fs::Metadata,
    scan: &ProcessScan,
    rules: &Rules,
) -> Option<String> {
    let unknown = |why: String| Some(format!("in use or unknown: {why}"));
    if !dir.users.is_empty() {
        let pids: Vec<String> = dir.users.iter().map(u32::to_string).collect();
        return Some(format!("in use by pid {}", pids.join(",")));
    }
    if let Err(why) = walked {
        return unknown(why);
    }
    for socket in &tree.sockets {
        match socket_bound(socket) {
            Ok(false) => {}
            Ok(true) => {
                return unknown(format!(
                    "socket {} is bound by a process clean cannot see",
                    socket.display()
                ));
            }
            Err(e) => {
                return unknown(format!("cannot probe socket {}: {e}", socket.display()));
            }
        }
    }
    for (file, id) in &tree.files {
        match Unheld::prove(file, Some(*id)) {
            Ok(_) | Err(NotProved::Gone) => {}
            Err(why) => return unknown(format!("{}: {why}", file.display())),
        }
    }
    if let Some(gap) = scan.blind_spot(rules.ignore_unreadable) {
        return unknown(format!(
            "{gap}; a working directory or directory descriptor there would go unseen"
        ));
    }
    let changed = SystemTime::UNIX_EPOCH
        + Duration::new(
            meta.ctime().max(0) as u64,
            meta.ctime_nsec().clamp(0, 999_999_999) as u32,
        );
    let age = SystemTime::now()
        .duration_since(changed)
        .unwrap_or_default();
    if age < rules.min_age {
        return Some(format!(
            "changed {} s ago, less than --min-age {} s: it may be being set up",
            age.as_secs(),
            rules.min_age.as_secs()
        ));
    }
    None
}

/// Whether a socket is bound at `path`, in any network namespace: a
/// datagram `connect` finds the socket through the file. It sends nothing.
fn socket_bound(path: &Path) -> Result<bool, String> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("socket failed: {}", std::io::Error::from(e)))?;
    let address = SocketAddrUnix::new(path).map_err(|e| std::io::Error::from(e).to_string())?;
    match rustix::net::connect(&socket, &address) {
        // A datagram socket took the address, or one of another type has it.
        Ok(()) | Err(Errno::PROTOTYPE) => Ok(true),
        Err(Errno::CONNREFUSED | Errno::NOENT) => Ok(false),
        Err(e) => Err(format!("connect failed: {}", std::io::Error::from(e))),
    }
}

/// Paths of the Unix sockets bound in our network namespace, with their
/// socket inodes (`/proc/net/unix`): only to name the processes holding
/// them; whether a socket is bound is asked of the kernel itself.
fn bound_sockets() -> Vec<(PathBuf, u64)> {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return Vec::new();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode [Path]
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (inode, path) = (fields.get(6)?, fields.get(7)?);
            path.starts_with('/')
                .then(|| Some((PathBuf::from(path), inode.parse().ok()?)))?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn names_of_our_directories_and_their_creators() {
        assert_eq!(classify("nodeipc-demo-4242-9f3a"), Some(Some(4242)));
        assert_eq!(classify("nodeipc-demo-00ab00cd00ef0011"), Some(None));
        assert_eq!(classify("nodeipc-bench-monitor-77-1f"), Some(Some(77)));
        assert_eq!(
            classify("nodeipc-bench-monitor-00ab00cd00ef0011"),
            Some(None)
        );
        assert_eq!(classify("nodeipc-test-crash-17-3-12d395ac"), Some(Some(17)));
        assert_eq!(classify("nodeipc-test-fuzz-mon-900-0-1f"), Some(Some(900)));
        let uid = rustix::process::geteuid().as_raw();
        assert_eq!(
            classify(&format!("nodeipc-group-{uid}-00ab00cd00ef0011")),
            Some(None)
        );
        assert_eq!(
            classify(&format!("nodeipc-group-{}-00ab", uid + 1)),
            None,
            "another user's mesh"
        );
        assert_eq!(classify("nodeipc-demo-notapid-9f"), None);
        assert_eq!(classify("nodeipc-demo-"), None);
        assert_eq!(classify("nodeipc-bench-monitor-x"), None);
        assert_eq!(classify("nodeipc-monitor-readme-12"), None);
        assert_eq!(classify("nodeipc-launch-00ab00cd00ef0011"), Some(None));
        assert_eq!(classify("nodeipc-launch-x"), None);
        assert_eq!(classify("something-else"), None);
    }
}
