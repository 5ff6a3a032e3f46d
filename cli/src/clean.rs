//! `nodeipc ls` and `nodeipc clean`: what is under `/dev/shm`, and removing
//! what crashed runs left.

use clap::Args;
use nodeipc_shm::{KeepReason, ObjectKind, ShmObject};

use crate::CmdResult;

/// The prefix every name the CLI, the demo and the tests create starts with.
pub(crate) const DEFAULT_PREFIX: &str = "/nodeipc-";

#[derive(Args)]
pub(crate) struct LsArgs {
    /// Only objects whose name starts with this ("/" for all).
    #[arg(long, default_value = DEFAULT_PREFIX)]
    prefix: String,
}

#[derive(Args)]
pub(crate) struct CleanArgs {
    /// Only objects whose name starts with this.
    #[arg(long, default_value = DEFAULT_PREFIX)]
    prefix: String,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn ls(args: LsArgs) -> CmdResult {
    let objects = nodeipc_shm::list(&args.prefix)?;
    println!(
        "{:<10} {:>12} {:>5} {:>6}  {:<24} NAME",
        "KIND", "SIZE", "MODE", "OWNER", "USED BY"
    );
    for object in &objects {
        println!(
            "{:<10} {:>12} {:>5o} {:>6}  {:<24} {}",
            kind(object),
            object.size,
            object.mode,
            object.owner,
            users(object),
            object.name
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
        println!("{verb} {} {}", kind(object), object.name);
    }
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
        println!("kept {} {} ({why})", kind(object), object.name);
    }
    println!(
        "{} {verb}, {} kept",
        outcome.removed.len(),
        outcome.kept.len()
    );
    Ok(())
}

fn kind(object: &ShmObject) -> &'static str {
    match object.kind {
        ObjectKind::Region => "region",
        ObjectKind::Semaphore => "semaphore",
    }
}

fn users(object: &ShmObject) -> String {
    if object.users.is_empty() {
        "-".to_owned()
    } else {
        join(&object.users)
    }
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
