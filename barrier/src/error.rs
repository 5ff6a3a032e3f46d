//! The one error type of this crate.

use std::io;
use std::time::Duration;

use nodeipc_text::InWords;

/// What can go wrong in a rank group. Every variant names the group, and the
/// rank or values involved, so a log line says which job failed and why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The options cannot describe a group.
    #[error("group {group}: invalid options: {reason}")]
    InvalidOptions {
        /// The group name.
        group: String,
        /// What is wrong.
        reason: String,
    },

    /// The vault was made for another group shape than this rank expects.
    #[error("group {group}: {what} is {theirs} in the vault but {ours} for this rank")]
    Mismatch {
        /// The group name.
        group: String,
        /// Which value differs (world size, layout version, slot size).
        what: &'static str,
        /// This rank's value.
        ours: u64,
        /// The vault's value.
        theirs: u64,
    },

    /// The name holds something that is not a group vault.
    #[error("group {group}: the shared object is not a group vault (magic {magic:#018x})")]
    NotAVault {
        /// The group name.
        group: String,
        /// The magic word found.
        magic: u64,
    },

    /// A vault of this name already exists: another group runs under it, or a
    /// crashed join left it behind.
    #[error(
        "group {group}: a vault of this name already exists (another job uses the name, or a crashed run left it: `nodeipc clean` removes unused ones)"
    )]
    NameTaken {
        /// The group name.
        group: String,
    },

    /// A peer's process died (or exited): the group is poisoned.
    #[error("group {group}: rank {rank} (pid {pid}) died; the group is unusable")]
    PeerDied {
        /// The group name.
        group: String,
        /// The dead rank.
        rank: u32,
        /// Its pid.
        pid: u32,
    },

    /// A peer dropped its handle to the group while others still needed it.
    #[error("group {group}: rank {rank} left the group; the group is unusable")]
    PeerLeft {
        /// The group name.
        group: String,
        /// The rank that left.
        rank: u32,
    },

    /// A bounded wait ran out: not every rank arrived.
    #[error(
        "group {group}: rank {rank} timed out in {op} after {} with {arrived} of {expected} ranks arrived{}; the group is unusable",
        InWords(*waited),
        never_joined(missing)
    )]
    Timeout {
        /// The group name.
        group: String,
        /// This rank.
        rank: u32,
        /// The operation (join, barrier, all_gather, …).
        op: &'static str,
        /// How long it waited.
        waited: Duration,
        /// Ranks that had arrived.
        arrived: u32,
        /// Ranks expected.
        expected: u32,
        /// The ranks that had not joined, in order, when a join timed out
        /// waiting for the others to register; empty where it is not known
        /// (every other operation, and a join still waiting for rank 0's
        /// vault). The message names the first 16 of them and counts the rest.
        missing: Vec<u32>,
    },

    /// This thread's cancellation hook
    /// ([`nodeipc_shm::wait::with_cancel_hook`]: Ctrl-C in a binding) ended
    /// a wait. An interrupted collective poisons the group (this rank is
    /// going down); an interrupted join leaves nothing behind.
    #[error("group {group}: rank {rank} was interrupted in {op} after {}", InWords(*waited))]
    Interrupted {
        /// The group name.
        group: String,
        /// This rank.
        rank: u32,
        /// The operation (join, barrier, …).
        op: &'static str,
        /// How long it had waited.
        waited: Duration,
    },

    /// An earlier failure (a death, a departure, a timeout) made the group
    /// unusable; every later call returns this.
    #[error("group {group}: unusable since rank {rank} {cause}")]
    Poisoned {
        /// The group name.
        group: String,
        /// The rank at fault.
        rank: u32,
        /// What happened to it ("died", "timed out waiting for the
        /// others", … or "poisoned the group with unknown cause N" for a
        /// cause word this version does not know).
        cause: String,
    },

    /// Data larger than a slot.
    #[error("group {group}: {len} bytes do not fit a {slot_size}-byte slot")]
    TooLarge {
        /// The group name.
        group: String,
        /// Bytes given.
        len: usize,
        /// Slot size.
        slot_size: usize,
    },

    /// A peer's slot holds a length beyond the slot: never read past it.
    #[error(
        "group {group}: rank {rank}'s slot claims {len} bytes, beyond its {slot_size}-byte slot"
    )]
    Corrupt {
        /// The group name.
        group: String,
        /// Whose slot.
        rank: u32,
        /// The length found.
        len: u64,
        /// The slot size.
        slot_size: usize,
    },

    /// Another thread of this process is in a call on this rank's group: a
    /// group is used by one thread at a time (every rank makes the same
    /// calls in the same order). Nothing was done; the group is intact.
    #[error(
        "group {group}: rank {rank}: {op} refused: another thread of this process is in a call \
         on this group, and a group is used by one thread at a time"
    )]
    Busy {
        /// The group name.
        group: String,
        /// This rank.
        rank: u32,
        /// The call refused.
        op: &'static str,
    },

    /// A barrier of the first `n` ranks with an `n` that names none or
    /// more than the group has, or called by a rank not among them.
    #[error("group {group}: rank {rank}: {}", subset_reason(*n, *world_size))]
    SubsetOutOfRange {
        /// The group name.
        group: String,
        /// This rank.
        rank: u32,
        /// The `n` of the call.
        n: u32,
        /// The group's size.
        world_size: u32,
    },

    /// A rank argument outside the group.
    #[error("group {group}: rank {rank} is outside a group of {world_size}")]
    RankOutOfRange {
        /// The group name.
        group: String,
        /// The rank given.
        rank: u32,
        /// The group's size.
        world_size: u32,
    },

    /// The descriptor transport asked for is not available.
    #[error("group {group}: {reason}")]
    Transport {
        /// The group name.
        group: String,
        /// Why.
        reason: String,
    },

    /// A descriptor exchange received something other than what the protocol sends.
    #[error("group {group}: descriptor exchange: {reason}")]
    Protocol {
        /// The group name.
        group: String,
        /// What arrived.
        reason: String,
    },

    /// The vault region failed.
    #[error("group {group}: {source}")]
    Shm {
        /// The group name.
        group: String,
        /// The region error.
        #[source]
        source: nodeipc_shm::Error,
    },

    /// Moving a descriptor failed.
    #[error("group {group}: {source}")]
    FdPass {
        /// The group name.
        group: String,
        /// The fdpass error.
        #[source]
        source: nodeipc_fdpass::Error,
    },

    /// A system call failed; the errno is kept in `source`.
    #[error("group {group}: {op} failed: {source}")]
    Io {
        /// The group name.
        group: String,
        /// The call.
        op: &'static str,
        /// The error with its raw errno.
        #[source]
        source: io::Error,
    },
}

/// How many of a timed-out join's missing ranks its message names; the
/// rest are counted ("and 5 more"), so a huge group's line stays short.
const NAMED_MISSING: usize = 16;

/// The part of a timeout's message that names the ranks that never joined
/// (nothing when none are known).
fn never_joined(missing: &[u32]) -> String {
    let Some((&first, _)) = missing.split_first() else {
        return String::new();
    };
    if missing.len() == 1 {
        return format!(" (rank {first} never joined)");
    }
    let named: Vec<String> = missing
        .iter()
        .take(NAMED_MISSING)
        .map(u32::to_string)
        .collect();
    let more = missing.len().saturating_sub(NAMED_MISSING);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(" (ranks {}{tail} never joined)", named.join(", "))
}

/// What is wrong with a barrier of the first `n` ranks (the caller being
/// at or past `n` when `n` itself is right).
fn subset_reason(n: u32, world_size: u32) -> String {
    if n == 0 || n > world_size {
        format!(
            "a barrier of the first {n} ranks in a group of {world_size}: it takes 1 to \
             {world_size} ranks"
        )
    } else {
        format!(
            "not among the first {n} ranks (0..{n}), the only ones that may call a barrier \
             of the first {n}"
        )
    }
}

impl Error {
    /// Whether the group is unusable after this error (every error from a
    /// collective operation but a caller mistake).
    pub fn poisons(&self) -> bool {
        !matches!(
            self,
            Error::InvalidOptions { .. }
                | Error::TooLarge { .. }
                | Error::RankOutOfRange { .. }
                | Error::SubsetOutOfRange { .. }
                | Error::Busy { .. }
        )
    }
}

impl From<Error> for io::Error {
    /// An `io::Error` of the closest kind (a failed system call's own kind)
    /// that wraps this error whole: `get_ref()` and a downcast give it back,
    /// and `source()` is its source — for a failed system call, the kernel's
    /// error with its errno (`raw_os_error()`).
    fn from(error: Error) -> io::Error {
        let kind = match &error {
            Error::Io { source, .. } => source.kind(),
            Error::Timeout { .. } => io::ErrorKind::TimedOut,
            Error::Interrupted { .. } => io::ErrorKind::Interrupted,
            Error::PeerDied { .. } | Error::PeerLeft { .. } | Error::Poisoned { .. } => {
                io::ErrorKind::BrokenPipe
            }
            Error::InvalidOptions { .. }
            | Error::TooLarge { .. }
            | Error::RankOutOfRange { .. }
            | Error::SubsetOutOfRange { .. } => io::ErrorKind::InvalidInput,
            Error::Busy { .. } => io::ErrorKind::ResourceBusy,
            Error::NameTaken { .. } => io::ErrorKind::AlreadyExists,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, error)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
