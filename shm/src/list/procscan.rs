//! [`ProcessScan`]: what every process we can see holds, from `/proc` — and,
//! as carefully, what we could not see.
//!
//! A scan is evidence for people ("in use by pid 4242") and, for what only
//! `/proc` can tell (working and root directories, directory descriptors),
//! the one proof there is — but only when it saw every process. Anything
//! that hides a process is a [`Gap`]: running in a pid namespace that is not
//! the initial one, a `hidepid` mount, a `/proc` entry we may not read
//! (another user's process, one an LSM protects), and any failure of our own
//! (`EMFILE`, `ENFILE`, `ENOMEM`). Only `ENOENT` and `ESRCH` mean a process
//! (or one of its descriptors) is gone, and are not gaps.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The inode of the initial pid namespace (`PROC_PID_INIT_INO`).
const INITIAL_PID_NAMESPACE: &str = "pid:[4026531836]";

/// `kcmp(2)` types: whether two tasks share their descriptor table, or
/// their working and root directories.
const KCMP_FILES: libc::c_int = 2;
const KCMP_FS: libc::c_int = 3;

/// Something that kept a scan from seeing every process, or everything a
/// process holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gap {
    /// The scan runs in a pid namespace other than the initial one: `/proc`
    /// shows only that namespace's processes.
    PidNamespace {
        /// Ours, as `/proc/self/ns/pid` names it (`pid:[…]`).
        namespace: String,
    },
    /// `/proc` is mounted with a `hidepid` option that hides processes.
    HiddenPids {
        /// The option (`hidepid=invisible`, say).
        option: String,
    },
    /// The kernel refused to show a `/proc` entry (`EACCES`, `EPERM`): a
    /// process of another user, or one a security module protects.
    Denied {
        /// The entry.
        path: PathBuf,
        /// The errno.
        errno: i32,
        /// How many more entries were refused.
        more: usize,
    },
    /// Reading a `/proc` entry failed for a reason of ours (`EMFILE`,
    /// `ENFILE`, `ENOMEM`, …): nothing can be concluded from it.
    Failed {
        /// The entry.
        path: PathBuf,
        /// The errno.
        errno: i32,
        /// How many more entries failed.
        more: usize,
    },
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let more = |more: usize| {
            if more == 0 {
                String::new()
            } else {
                format!(" (and {more} more /proc entries)")
            }
        };
        match self {
            Gap::PidNamespace { namespace } => write!(
                f,
                "the scan of /proc runs in pid namespace {namespace}, not the initial one, and cannot see every process"
            ),
            Gap::HiddenPids { option } => write!(
                f,
                "/proc is mounted with {option}, which hides other users' processes"
            ),
            Gap::Denied {
                path,
                errno,
                more: n,
            } => write!(
                f,
                "may not read {}: {}{} (another user's process, or one a security module protects)",
                path.display(),
                io::Error::from_raw_os_error(*errno),
                more(*n)
            ),
            Gap::Failed {
                path,
                errno,
                more: n,
            } => write!(
                f,
                "cannot read {}: {}{}",
                path.display(),
                io::Error::from_raw_os_error(*errno),
                more(*n)
            ),
        }
    }
}

/// What the processes in `/proc` hold: mapped files, open descriptors,
/// working and root directories (by device and inode, so the same file seen
/// through another mount namespace is the same), and sockets.
///
/// Threads are looked at too, where one has a descriptor table or working
/// directory of its own (`unshare(CLONE_FILES)`, `unshare(CLONE_FS)`).
///
/// # Examples
/// ```
/// use std::os::unix::fs::MetadataExt;
/// let file = std::fs::File::open("/proc/self/stat")?;
/// let meta = file.metadata()?;
/// let scan = nodeipc_shm::ProcessScan::run();
/// assert!(scan.users_of(meta.dev(), meta.ino()).contains(&std::process::id()));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct ProcessScan {
    /// `(dev, ino)` → pids that map it, hold it open, or have it as working
    /// or root directory.
    holders: HashMap<(u64, u64), Vec<u32>>,
    /// Socket inode → pids holding it.
    sockets: HashMap<u64, Vec<u32>>,
    /// Every pid of every live process seen, in each of its pid namespaces
    /// (`NSpid`).
    pids: HashSet<u32>,
    gaps: Vec<Gap>,
}

impl ProcessScan {
    /// Walks `/proc` once. Never fails: what it could not see is in
    /// [`gaps`](ProcessScan::gaps).
    pub fn run() -> ProcessScan {
        let mut scan = ProcessScan::default();
        scan.check_namespace();
        scan.check_hidepid();
        let procs = match std::fs::read_dir("/proc") {
            Ok(procs) => procs,
            Err(e) => {
                scan.note(Path::new("/proc"), &e);
                return scan;
            }
        };
        for entry in procs {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    scan.note(Path::new("/proc"), &e);
                    break;
                }
            };
            if let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
                scan.process(pid);
            }
        }
        scan
    }

    /// Live processes seen mapping the file `(dev, ino)`, holding it open, or
    /// working in it (or rooted there), sorted.
    pub fn users_of(&self, dev: u64, ino: u64) -> Vec<u32> {
        sorted(self.holders.get(&(dev, ino)))
    }

    /// Live processes seen holding the socket with inode `ino`, sorted.
    pub fn socket_holders(&self, ino: u64) -> Vec<u32> {
        sorted(self.sockets.get(&ino))
    }

    /// Whether a live process seen has `pid` as its pid in any of its pid
    /// namespaces: a pid written by a process in a container names that
    /// process in the container's namespace.
    pub fn has_pid(&self, pid: u32) -> bool {
        self.pids.contains(&pid)
    }

    /// What kept this scan from seeing everything; empty when it saw every
    /// process and all each holds.
    pub fn gaps(&self) -> &[Gap] {
        &self.gaps
    }

    /// The first gap that leaves room for a process the scan did not see,
    /// skipping refused entries ([`Gap::Denied`]) when `ignore_denied`.
    pub fn blind_spot(&self, ignore_denied: bool) -> Option<&Gap> {
        self.gaps
            .iter()
            .find(|gap| !(ignore_denied && matches!(gap, Gap::Denied { .. })))
    }

    fn check_namespace(&mut self) {
        let path = Path::new("/proc/self/ns/pid");
        match std::fs::read_link(path) {
            Ok(ns) if ns.as_os_str() == INITIAL_PID_NAMESPACE => {}
            Ok(ns) => self.gaps.push(Gap::PidNamespace {
                namespace: ns.to_string_lossy().into_owned(),
            }),
            // Even a missing /proc/self is a gap: /proc is not ours to read.
            Err(e) => self.push_failed(path, &e),
        }
    }

    /// `hidepid=invisible` (2) and `hidepid=ptraceable` (4) drop other
    /// processes from `/proc` silently; `noaccess` (1) leaves them listed
    /// and refuses their entries, which the walk notes itself.
    fn check_hidepid(&mut self) {
        let path = Path::new("/proc/self/mountinfo");
        let mountinfo = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => return self.push_failed(path, &e),
        };
        // The last mount at /proc is the one on top.
        let options = mountinfo.lines().rev().find_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            let point = mount.split(' ').nth(4)?;
            let mut fs = fs.split(' ');
            (point == "/proc" && fs.next()? == "proc").then(|| fs.nth(1).map(str::to_owned))?
        });
        let Some(options) = options else {
            // Whatever is at /proc, it is not the process table.
            return self.push_failed(
                Path::new("/proc"),
                &io::Error::from_raw_os_error(libc::ENOENT),
            );
        };
        if let Some(option) = options.split(',').find(|o| {
            matches!(
                *o,
                "hidepid=2" | "hidepid=invisible" | "hidepid=4" | "hidepid=ptraceable"
            )
        }) {
            self.gaps.push(Gap::HiddenPids {
                option: option.to_owned(),
            });
        }
    }

    fn process(&mut self, pid: u32) {
        let base = PathBuf::from(format!("/proc/{pid}"));
        // Every pid it has, in each namespace: world-readable.
        match std::fs::read_to_string(base.join("status")) {
            Ok(status) => {
                if let Some(line) = status.lines().find(|l| l.starts_with("NSpid:")) {
                    self.pids.extend(
                        line[6..]
                            .split_whitespace()
                            .filter_map(|p| p.parse::<u32>().ok()),
                    );
                }
                self.pids.insert(pid);
            }
            Err(e) => return self.note(&base.join("status"), &e),
        }
        // The mappings belong to the whole process.
        let maps = base.join("maps");
        match std::fs::read_to_string(&maps) {
            Ok(text) => {
                for key in text.lines().filter_map(parse_maps_line) {
                    let (major, minor, ino) = key;
                    add(
                        &mut self.holders,
                        (rustix::fs::makedev(major, minor), ino),
                        pid,
                    );
                }
            }
            Err(e) => self.note(&maps, &e),
        }
        // The thread group leader, then each thread with a table or working
        // directory of its own.
        self.task(pid, &base, true, true);
        let tasks = base.join("task");
        let entries = match std::fs::read_dir(&tasks) {
            Ok(entries) => entries,
            Err(e) => return self.note(&tasks, &e),
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return self.note(&tasks, &e),
            };
            let Some(tid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if tid == pid {
                continue;
            }
            let files = !shares(pid, tid, KCMP_FILES);
            let fs = !shares(pid, tid, KCMP_FS);
            if files || fs {
                self.task(pid, &entry.path(), files, fs);
            }
        }
    }

    /// What one task holds: its descriptors (`files`), its working and root
    /// directories (`fs`). `dir` is `/proc/<pid>` or `/proc/<pid>/task/<tid>`.
    fn task(&mut self, pid: u32, dir: &Path, files: bool, fs: bool) {
        if fs {
            for link in ["cwd", "root"] {
                let path = dir.join(link);
                match std::fs::metadata(&path) {
                    Ok(meta) => add(&mut self.holders, (meta.dev(), meta.ino()), pid),
                    Err(e) => self.note(&path, &e),
                }
            }
        }
        if !files {
            return;
        }
        let fd_dir = dir.join("fd");
        let fds = match std::fs::read_dir(&fd_dir) {
            Ok(fds) => fds,
            Err(e) => return self.note(&fd_dir, &e),
        };
        for fd in fds {
            let fd = match fd {
                Ok(fd) => fd,
                Err(e) => return self.note(&fd_dir, &e),
            };
            // `metadata` follows the magic link to the open file itself,
            // whatever mount namespace it was opened in.
            match std::fs::metadata(fd.path()) {
                Ok(meta) if meta.file_type().is_socket() => add(&mut self.sockets, meta.ino(), pid),
                Ok(meta) => add(&mut self.holders, (meta.dev(), meta.ino()), pid),
                Err(e) => self.note(&fd.path(), &e),
            }
        }
    }

    /// Records what a failed read of `path` means: nothing when the process
    /// or descriptor is gone, a gap otherwise.
    fn note(&mut self, path: &Path, e: &io::Error) {
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::ESRCH) => {}
            Some(errno @ (libc::EACCES | libc::EPERM)) => {
                if let Some(Gap::Denied { more, .. }) = self
                    .gaps
                    .iter_mut()
                    .find(|g| matches!(g, Gap::Denied { .. }))
                {
                    *more += 1;
                } else {
                    self.gaps.push(Gap::Denied {
                        path: path.to_owned(),
                        errno,
                        more: 0,
                    });
                }
            }
            _ => self.push_failed(path, e),
        }
    }

    fn push_failed(&mut self, path: &Path, e: &io::Error) {
        if let Some(Gap::Failed { more, .. }) = self
            .gaps
            .iter_mut()
            .find(|g| matches!(g, Gap::Failed { .. }))
        {
            *more += 1;
        } else {
            self.gaps.push(Gap::Failed {
                path: path.to_owned(),
                errno: e.raw_os_error().unwrap_or(libc::EIO),
                more: 0,
            });
        }
    }
}

fn add<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Vec<u32>>, key: K, pid: u32) {
    let pids = map.entry(key).or_default();
    if !pids.contains(&pid) {
        pids.push(pid);
    }
}

fn sorted(pids: Option<&Vec<u32>>) -> Vec<u32> {
    let mut pids = pids.cloned().unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// Whether task `tid` shares the resource `kind` with `pid` (`kcmp`). On
/// any failure, `false`: the task is then read on its own.
fn shares(pid: u32, tid: u32, kind: libc::c_int) -> bool {
    let (Ok(pid), Ok(tid)) = (libc::pid_t::try_from(pid), libc::pid_t::try_from(tid)) else {
        return false;
    };
    // SAFETY: kcmp takes two pids, a type and two integer arguments unused
    // for these types; it reads no memory of ours.
    let same = unsafe { libc::syscall(libc::SYS_kcmp, pid, tid, kind, 0usize, 0usize) };
    same == 0
}

/// `(major, minor, inode)` of one `/proc/<pid>/maps` line.
pub(crate) fn parse_maps_line(line: &str) -> Option<(u32, u32, u64)> {
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
    use super::{Gap, parse_maps_line};

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

    #[test]
    fn a_gap_names_the_entry_and_the_errno() {
        let gap = Gap::Failed {
            path: "/proc/42/maps".into(),
            errno: libc::EMFILE,
            more: 3,
        };
        let text = gap.to_string();
        assert!(text.contains("/proc/42/maps"), "{text}");
        assert!(text.contains("Too many open files"), "{text}");
        assert!(text.contains("3 more"), "{text}");
    }
}
