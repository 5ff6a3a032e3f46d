//! `nodeipc ls` and `nodeipc clean`: what is under `/dev/shm` and in the
//! temporary directory, and removing what crashed runs left.
//!
//! Besides shared-memory objects and semaphores, the project makes
//! directories under the temporary directory: the demo's
//! (`nodeipc-demo-<random>`, formerly `nodeipc-demo-<pid>-<nonce>`),
//! `nodeipc bench`'s monitor (`nodeipc-bench-monitor-…`, same two forms),
//! the rank group's `SCM_RIGHTS` mesh (`nodeipc-group-<uid>-<nonce>`,
//! removed right after set-up) and the tests'
//! (`nodeipc-test-…-<pid>-<n>-<nanos>`). A run killed from outside leaves
//! them with their sockets and logs.
//!
//! `clean` removes only what it can prove abandoned; everything else stays,
//! listed with the reason ("in use by pid …", "in use or unknown: …").
//! Objects under `/dev/shm`: see `nodeipc_shm::remove_stale` (the kernel's
//! write lease is the proof). Directories: see [`dirs`].
//!
//! Whatever happens to its output (a closed pipe, say), `clean` does all its
//! work: it never stops half-way because a line could not be written.

mod dirs;

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nodeipc_shm::{ObjectKind, ProcessScan, ShmObject};
use nodeipc_text::Printable;

use crate::CmdResult;
use crate::human::{self, Owners};

/// The prefix every name the CLI, the demo and the tests create starts with.
pub(crate) const DEFAULT_PREFIX: &str = "/nodeipc-";

/// How long a directory must have been left unchanged before it can go: a
/// creator may be between `mkdir` and binding its first socket.
const DEFAULT_MIN_AGE_SECS: u64 = 10;

#[derive(Args)]
#[command(
    after_help = "USED BY: the pids seen using it; \"-\": nobody (for a region or semaphore, \
                  the kernel says so); \"?\": in use by a process ls cannot see, or unknown \
                  (`nodeipc clean --dry-run` says why)."
)]
pub(crate) struct LsArgs {
    /// Only objects and directories whose name starts with this ("/" for all).
    #[arg(long, default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// One JSON object a line, one line an object (fields in the README);
    /// sizes in bytes.
    #[arg(long)]
    json: bool,
    /// Sizes in bytes, not KiB, MiB or GiB.
    #[arg(long)]
    bytes: bool,
    /// Look in DIR too (repeatable): where `nodeipc launch --run-dir DIR`
    /// made its run directory. $TMPDIR, /tmp and $XDG_RUNTIME_DIR are
    /// always looked in.
    #[arg(long, value_name = "DIR")]
    run_dir: Vec<PathBuf>,
}

#[derive(Args)]
pub(crate) struct CleanArgs {
    /// Only objects and directories whose name starts with this.
    #[arg(long, default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object a line, one line an object (fields in the README),
    /// and no summary line.
    #[arg(long)]
    json: bool,
    /// Keep directories changed less than this many seconds ago.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_MIN_AGE_SECS,
          value_parser = crate::limits::u64_in(0, MAX_MIN_AGE_SECS))]
    min_age: u64,
    /// Take processes whose /proc entries clean may not read (EACCES,
    /// EPERM: other users', or ones a security module protects) to use no
    /// directory of ours. Objects, files and sockets never need this: the
    /// kernel proves them unused.
    #[arg(long)]
    ignore_unreadable: bool,
    /// Look in DIR too (repeatable): where `nodeipc launch --run-dir DIR`
    /// made its run directory. $TMPDIR, /tmp and $XDG_RUNTIME_DIR are
    /// always looked in.
    #[arg(long, value_name = "DIR")]
    run_dir: Vec<PathBuf>,
}

/// The longest `--min-age`: ten years, far past any run, well inside what
/// the clock arithmetic on a directory's age can hold.
const MAX_MIN_AGE_SECS: u64 = 10 * 365 * 24 * 3600;

pub(crate) fn ls(args: LsArgs) -> CmdResult {
    let scan = ProcessScan::run();
    let objects = nodeipc_shm::list_with(&args.prefix, &scan)?;
    let rules = dirs::Rules {
        ignore_unreadable: false,
        min_age: Duration::from_secs(DEFAULT_MIN_AGE_SECS),
    };
    let found = dirs::our_dirs(&args.prefix, &args.run_dir, &scan, &rules)?;
    let mut listed = Vec::with_capacity(objects.len() + found.len());
    for object in &objects {
        // Nobody seen: the kernel says whether somebody unseen holds it.
        let unseen = object.users.is_empty()
            && !matches!(
                nodeipc_shm::Unheld::prove(&object.path, None),
                Ok(_) | Err(nodeipc_shm::NotProved::Gone)
            );
        let detail = detail(object);
        listed.push(Listed {
            kind: detail
                .as_ref()
                .map_or_else(|| kind(object), |(kind, _)| kind),
            name: object.name.clone(),
            size: object.size,
            mode: object.mode,
            uid: object.owner,
            users: &object.users,
            unseen,
            detail: detail.map(|(_, line)| line),
        });
    }
    for dir in &found {
        let unseen = dir
            .keep()
            .is_some_and(|why| why.starts_with("in use or unknown"));
        listed.push(Listed {
            kind: "directory",
            name: dir.path.to_string_lossy().into_owned(),
            size: dir.size,
            mode: dir.mode,
            uid: dir.owner,
            users: &dir.users,
            unseen,
            detail: None,
        });
    }
    let mut owners = Owners::default();
    if args.json {
        for entry in &listed {
            outln!("{}", entry.to_json(&mut owners));
        }
        return Ok(());
    }
    outln!(
        "{:<10} {:>12} {:>5} {:<8}  {:<24} NAME",
        "KIND",
        "SIZE",
        "MODE",
        "OWNER",
        "USED BY"
    );
    for entry in &listed {
        let size = if args.bytes {
            entry.size.to_string()
        } else {
            human::size(entry.size)
        };
        outln!(
            "{:<10} {:>12} {:>5o} {:<8}  {:<24} {}",
            entry.kind,
            size,
            entry.mode,
            owners.name(entry.uid),
            users(entry.users, entry.unseen),
            Printable(&entry.name)
        );
        if let Some(line) = &entry.detail {
            outln!("{:<10} {}", "", Printable(line));
        }
    }
    Ok(())
}

/// One line of `ls`: an object under `/dev/shm` or a directory of ours.
struct Listed<'a> {
    kind: &'static str,
    name: String,
    size: u64,
    mode: u32,
    uid: u32,
    users: &'a [u32],
    /// Someone `ls` cannot see uses it, or may.
    unseen: bool,
    /// A queue's or pool's header, in words (a line under its row).
    detail: Option<String>,
}

impl Listed<'_> {
    /// The JSON object `ls --json` prints (fields in the README).
    fn to_json(&self, owners: &mut Owners) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind,
            "name": self.name,
            "size": self.size,
            "mode": format!("{:04o}", self.mode),
            "uid": self.uid,
            "owner": owners.name(self.uid),
            "users": self.users,
            "unseen": self.unseen,
            "detail": self.detail,
        })
    }
}

pub(crate) fn clean(args: CleanArgs) -> CmdResult {
    let scan = ProcessScan::run();
    let outcome = if args.dry_run {
        nodeipc_shm::plan_cleanup_with(&args.prefix, &scan)?
    } else {
        nodeipc_shm::remove_stale_with(&args.prefix, &scan)?
    };
    let rules = dirs::Rules {
        ignore_unreadable: args.ignore_unreadable,
        min_age: Duration::from_secs(args.min_age),
    };
    let found = dirs::our_dirs(&args.prefix, &args.run_dir, &scan, &rules)?;
    let done = if args.dry_run {
        Done::WouldRemove
    } else {
        Done::Removed
    };
    let say = |done: Done, kind: &str, name: &str, reason: Option<&str>| {
        if args.json {
            outln!(
                "{}",
                serde_json::json!({
                    "action": done.json(),
                    "kind": kind,
                    "name": name,
                    "reason": reason,
                })
            );
        } else if let Some(reason) = reason {
            outln!(
                "{} {kind} {} ({})",
                done.words(),
                Printable(name),
                Printable(reason)
            );
        } else {
            outln!("{} {kind} {}", done.words(), Printable(name));
        }
    };
    for object in &outcome.removed {
        say(done, kind(object), &object.name, None);
    }
    let mut kept = outcome.kept.len();
    for (object, reason) in &outcome.kept {
        say(
            Done::Kept,
            kind(object),
            &object.name,
            Some(&reason.to_string()),
        );
    }
    let mut removed = outcome.removed.len();
    for dir in &found {
        let name = dir.path.to_string_lossy();
        let why = match dir.keep() {
            Some(why) => why.to_owned(),
            None if args.dry_run => {
                say(done, "directory", &name, None);
                removed += 1;
                continue;
            }
            None => match dir.remove() {
                Ok(()) => {
                    say(done, "directory", &name, None);
                    removed += 1;
                    continue;
                }
                Err(why) => why,
            },
        };
        say(Done::Kept, "directory", &name, Some(&why));
        kept += 1;
    }
    if !args.json {
        outln!("{removed} {}, {kept} kept", done.words());
    }
    Ok(())
}

/// What `clean` did with one object or directory.
#[derive(Clone, Copy)]
enum Done {
    Removed,
    WouldRemove,
    Kept,
}

impl Done {
    fn words(self) -> &'static str {
        match self {
            Done::Removed => "removed",
            Done::WouldRemove => "would remove",
            Done::Kept => "kept",
        }
    }

    /// The `action` field of `clean --json`.
    fn json(self) -> &'static str {
        match self {
            Done::Removed => "removed",
            Done::WouldRemove => "would_remove",
            Done::Kept => "kept",
        }
    }
}

/// A named queue's or pool's header, shown under its row: capacity,
/// length, producer and consumer pids; occupancy per handle. Read through a
/// mapping opened with the owner and mode checks of `Region::open`.
fn detail(object: &ShmObject) -> Option<(&'static str, String)> {
    if object.kind != ObjectKind::Region {
        return None;
    }
    let region = nodeipc_shm::Region::open(
        &object.name,
        nodeipc_shm::OpenOptions::default().read_only(),
    )
    .ok()?;
    if let Some(q) = nodeipc_queue::inspect(&region) {
        return Some((
            "queue",
            format!(
                "capacity {}, length {}, {}-byte messages, producer {}, consumer {}",
                q.capacity,
                q.len,
                q.element_size,
                pid_or_dash(q.producer),
                pid_or_dash(q.consumer)
            ),
        ));
    }
    let handles = nodeipc_pool::inspect(&region)?;
    let held: Vec<String> = handles
        .iter()
        .filter(|h| h.pid != 0 || h.blocks != 0)
        .map(|h| {
            format!(
                "handle {} pid {} blocks {}",
                h.handle,
                pid_or_dash(h.pid),
                h.blocks
            )
        })
        .collect();
    Some((
        "pool",
        format!(
            "{} handles; {}",
            handles.len(),
            if held.is_empty() {
                "none held".to_owned()
            } else {
                held.join(", ")
            }
        ),
    ))
}

fn pid_or_dash(pid: u32) -> String {
    if pid == 0 {
        "-".to_owned()
    } else {
        pid.to_string()
    }
}

fn kind(object: &ShmObject) -> &'static str {
    match object.kind {
        ObjectKind::Region => "region",
        ObjectKind::Semaphore => "semaphore",
    }
}

/// The USED BY column: the pids seen; else `?` when someone unseen may use
/// it, `-` when nobody does.
fn users(pids: &[u32], unseen: bool) -> String {
    if pids.is_empty() {
        if unseen { "?" } else { "-" }.to_owned()
    } else {
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}
