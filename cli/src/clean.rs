//! `nodeipc ls` and `nodeipc clean`: what is under `/dev/shm` and in the
//! temporary directory, and removing what crashed runs left.
//!
//! Besides shared-memory objects and semaphores, the project makes socket
//! directories under the temporary directory: the demo's private directory
//! (`nodeipc-demo-<pid>-<nonce>`), the rank group's `SCM_RIGHTS` mesh
//! (`nodeipc-group-<uid>-<nonce>`, removed right after set-up) and the tests'
//! (`nodeipc-test-…-<pid>-<n>-<nanos>`). A run killed from outside leaves
//! them with their sockets; `clean` removes those that are ours and that no
//! live process uses: the creator whose pid the name carries is gone, no
//! socket in them is bound by a live process (`/proc/net/unix`), no process
//! has its working directory or an open file there.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use clap::Args;
use nodeipc_shm::{KeepReason, ObjectKind, ShmObject};

use crate::{CmdResult, Failure};

/// The prefix every name the CLI, the demo and the tests create starts with.
pub(crate) const DEFAULT_PREFIX: &str = "/nodeipc-";

/// A mesh directory carries no creator pid: one this fresh may be in the
/// middle of its set-up (made, sockets not yet bound) and is left alone.
const SETUP_GRACE: Duration = Duration::from_secs(10);

#[derive(Args)]
pub(crate) struct LsArgs {
    /// Only objects and directories whose name starts with this ("/" for all).
    #[arg(long, default_value = DEFAULT_PREFIX)]
    prefix: String,
}

#[derive(Args)]
pub(crate) struct CleanArgs {
    /// Only objects and directories whose name starts with this.
    #[arg(long, default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn ls(args: LsArgs) -> CmdResult {
    let objects = nodeipc_shm::list(&args.prefix)?;
    let dirs = socket_dirs(&args.prefix)?;
    outln!(
        "{:<10} {:>12} {:>5} {:>6}  {:<24} NAME",
        "KIND",
        "SIZE",
        "MODE",
        "OWNER",
        "USED BY"
    );
    for object in &objects {
        outln!(
            "{:<10} {:>12} {:>5o} {:>6}  {:<24} {}",
            kind(object),
            object.size,
            object.mode,
            object.owner,
            users(&object.users),
            object.name
        );
    }
    for dir in &dirs {
        outln!(
            "{:<10} {:>12} {:>5o} {:>6}  {:<24} {}",
            "directory",
            dir.size,
            dir.mode,
            dir.owner,
            users(&dir.users),
            dir.path.display()
        );
    }
    Ok(())
}

pub(crate) fn clean(args: CleanArgs) -> CmdResult {
    let outcome = if args.dry_run {
        nodeipc_shm::plan_cleanup(&args.prefix)?
    } else {
        nodeipc_shm::remove_stale(&args.prefix)?
    };
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for object in &outcome.removed {
        outln!("{verb} {} {}", kind(object), object.name);
    }
    let mut kept = outcome.kept.len();
    for (object, reason) in &outcome.kept {
        let why = match reason {
            KeepReason::InUse { pids } => format!("in use by pid {}", join(pids)),
            KeepReason::OtherOwner { uid } => format!("owned by uid {uid}"),
            KeepReason::RemoveFailed { errno } => {
                format!(
                    "remove failed: {}",
                    std::io::Error::from_raw_os_error(*errno)
                )
            }
        };
        outln!("kept {} {} ({why})", kind(object), object.name);
    }
    let mut removed = outcome.removed.len();
    for dir in socket_dirs(&args.prefix)? {
        let why = match dir.keep() {
            Some(why) => why,
            None if args.dry_run => {
                outln!("{verb} directory {}", dir.path.display());
                removed += 1;
                continue;
            }
            None => match std::fs::remove_dir_all(&dir.path) {
                Ok(()) => {
                    outln!("{verb} directory {}", dir.path.display());
                    removed += 1;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    removed += 1;
                    continue;
                }
                Err(e) => format!("remove failed: {e}"),
            },
        };
        outln!("kept directory {} ({why})", dir.path.display());
        kept += 1;
    }
    outln!("{removed} {verb}, {kept} kept");
    Ok(())
}

fn kind(object: &ShmObject) -> &'static str {
    match object.kind {
        ObjectKind::Region => "region",
        ObjectKind::Semaphore => "semaphore",
    }
}

fn users(pids: &[u32]) -> String {
    if pids.is_empty() {
        "-".to_owned()
    } else {
        join(pids)
    }
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// One socket directory of ours (by its name) under the temporary directory.
struct SocketDir {
    path: PathBuf,
    owner: u32,
    mode: u32,
    /// Bytes of the files in it.
    size: u64,
    /// Live processes that use it: its creator, processes with their
    /// working directory or a file there, holders of a socket bound there.
    users: Vec<u32>,
    /// Sockets in it bound by a live process (maybe one we cannot see).
    live_sockets: usize,
    /// For directories whose name carries no creator: modified lately.
    fresh: bool,
}

impl SocketDir {
    /// Why `clean` keeps it, or `None` when it is a leftover.
    fn keep(&self) -> Option<String> {
        let euid = rustix::process::geteuid().as_raw();
        if self.owner != euid {
            Some(format!("owned by uid {}", self.owner))
        } else if !self.users.is_empty() {
            Some(format!("in use by pid {}", join(&self.users)))
        } else if self.live_sockets > 0 {
            Some(format!("{} live socket(s) in it", self.live_sockets))
        } else if self.fresh {
            Some("made in the last seconds: may be being set up".to_owned())
        } else {
            None
        }
    }
}

/// Which of our directory kinds `name` (a file name in the temporary
/// directory) is, and the pid of its creator when the name carries one.
fn classify(name: &str) -> Option<Option<u32>> {
    let fields: Vec<&str> = name.split('-').collect();
    let number = |s: &str| s.parse::<u32>().ok();
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    match fields.as_slice() {
        // nodeipc demo: nodeipc-demo-<pid>-<nonce>
        ["nodeipc", "demo", pid, nonce] if hex(nonce) => number(pid).map(Some),
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

/// The temporary directories to look in: `$TMPDIR` (the demo's) and `/tmp`
/// (the group mesh's and the tests').
fn temp_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![std::env::temp_dir(), PathBuf::from("/tmp")];
    dirs.dedup();
    dirs
}

/// Our socket directories whose name starts with `prefix` (its leading `/`
/// dropped), with what uses them.
fn socket_dirs(prefix: &str) -> Result<Vec<SocketDir>, Failure> {
    let prefix = prefix.strip_prefix('/').unwrap_or(prefix);
    if prefix.contains('/') {
        return Err(Failure::Error(format!(
            "prefix {prefix:?}: a prefix may hold no '/' past the first byte"
        )));
    }
    let mut found = Vec::new();
    for temp in temp_dirs() {
        let Ok(entries) = std::fs::read_dir(&temp) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with(prefix) {
                continue;
            }
            let Some(creator) = classify(name) else {
                continue;
            };
            // Not following links: a symlink here is nothing of ours.
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            found.push((entry.path(), creator, meta));
        }
    }
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let bound = bound_socket_paths();
    let usage = ProcessUsage::scan();
    let now = SystemTime::now();
    let mut dirs = Vec::new();
    for (path, creator, meta) in found {
        let mut users: BTreeSet<u32> = usage.users_of(&path).into_iter().collect();
        if let Some(pid) = creator.filter(|&pid| alive(pid)) {
            users.insert(pid);
        }
        let mut size = 0;
        let mut live_sockets = 0;
        if let Ok(files) = std::fs::read_dir(&path) {
            for file in files.flatten() {
                let file_path = file.path();
                if let Ok(m) = file_path.symlink_metadata() {
                    size += m.len();
                }
                if let Some(holders) = bound.get(&file_path) {
                    live_sockets += 1;
                    users.extend(
                        holders
                            .iter()
                            .flat_map(|inode| usage.socket_holders(*inode)),
                    );
                }
            }
        }
        let fresh = creator.is_none()
            && meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_none_or(|age| age < SETUP_GRACE);
        dirs.push(SocketDir {
            path,
            owner: meta.uid(),
            mode: meta.permissions().mode() & 0o7777,
            size,
            users: users.into_iter().collect(),
            live_sockets,
            fresh,
        });
    }
    dirs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(dirs)
}

/// Whether `pid` is a live process (a zombie holds nothing and counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Paths of the Unix sockets bound in this network namespace, with the
/// inodes bound there (`/proc/net/unix`: a socket closed by its last holder,
/// or by the death of its process, is gone from it).
fn bound_socket_paths() -> BTreeMap<PathBuf, Vec<u64>> {
    let mut bound: BTreeMap<PathBuf, Vec<u64>> = BTreeMap::new();
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return bound;
    };
    for line in table.lines().skip(1) {
        // Num RefCount Protocol Flags Type St Inode [Path]
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(inode), Some(path)) = (fields.get(6), fields.get(7)) else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        if let Ok(inode) = inode.parse() {
            bound.entry(PathBuf::from(path)).or_default().push(inode);
        }
    }
    bound
}

/// What every live process we may look at holds: its working and root
/// directories, and where its descriptors point.
struct ProcessUsage {
    /// `(pid, path)` of each cwd, root and open file.
    paths: Vec<(u32, PathBuf)>,
    /// Socket inode → the pids holding it.
    sockets: BTreeMap<u64, Vec<u32>>,
}

impl ProcessUsage {
    fn scan() -> ProcessUsage {
        let mut usage = ProcessUsage {
            paths: Vec::new(),
            sockets: BTreeMap::new(),
        };
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return usage;
        };
        for entry in procs.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let dir = entry.path();
            for link in ["cwd", "root"] {
                if let Ok(target) = std::fs::read_link(dir.join(link)) {
                    usage.paths.push((pid, target));
                }
            }
            let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                let Ok(target) = std::fs::read_link(fd.path()) else {
                    continue;
                };
                let text = target.to_string_lossy();
                if let Some(inode) = text
                    .strip_prefix("socket:[")
                    .and_then(|s| s.strip_suffix(']'))
                    .and_then(|s| s.parse::<u64>().ok())
                {
                    usage.sockets.entry(inode).or_default().push(pid);
                } else if target.is_absolute() {
                    usage.paths.push((pid, target));
                }
            }
        }
        usage
    }

    /// Processes whose cwd, root or an open file is `dir` or inside it.
    fn users_of(&self, dir: &Path) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .paths
            .iter()
            .filter(|(_, path)| path.starts_with(dir))
            .map(|(pid, _)| *pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn socket_holders(&self, inode: u64) -> Vec<u32> {
        self.sockets.get(&inode).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn names_of_our_directories_and_their_creators() {
        assert_eq!(classify("nodeipc-demo-4242-9f3a"), Some(Some(4242)));
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
        assert_eq!(classify("nodeipc-monitor-readme-12"), None);
        assert_eq!(classify("something-else"), None);
    }
}
