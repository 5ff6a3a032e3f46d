//! Errors of the queue layer: each names the queue and what was wrong.

use std::time::Duration;

/// Which end of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The one process that pushes.
    Producer,
    /// The one process that pops.
    Consumer,
}

impl Role {
    /// The end across the ring from this one.
    pub(crate) fn other(self) -> Role {
        match self {
            Role::Producer => Role::Consumer,
            Role::Consumer => Role::Producer,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Producer => "producer",
            Role::Consumer => "consumer",
        })
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The region under the queue (open, map, bounds).
    #[error(transparent)]
    Shm(#[from] nodeipc_shm::Error),
    /// A bad argument of ours (capacity, element size).
    #[error("queue {queue}: {what} is {value}, {limit}")]
    InvalidArgument {
        /// The queue.
        queue: String,
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The rule it breaks.
        limit: &'static str,
    },
    /// The region is not a queue of ours (magic, version, size).
    #[error("queue {queue}: not a queue this build can join: {reason}")]
    BadHeader {
        /// The queue.
        queue: String,
        /// What was found.
        reason: String,
    },
    /// The region's queue differs from what the joiner expects.
    #[error("queue {queue}: {field} is {found} in the region, {expected} expected by this joiner")]
    Mismatch {
        /// The queue.
        queue: String,
        /// Element size, alignment or schema id.
        field: &'static str,
        /// The region's value.
        found: u64,
        /// The joiner's value.
        expected: u64,
    },
    /// A memfd whose size is not sealed: its sender could truncate it under
    /// our mapping (a `SIGBUS` at the next access).
    #[error("queue {queue}: the memfd is not sealed against shrinking (F_SEAL_SHRINK|F_SEAL_GROW)")]
    NotSealed {
        /// The queue.
        queue: String,
    },
    /// The role is held by a live process.
    #[error("queue {queue}: the {role} role is held by live process {pid}")]
    RoleTaken {
        /// The queue.
        queue: String,
        /// The role asked for.
        role: Role,
        /// Its holder.
        pid: u32,
    },
    /// Every place of the role (an MPMC ring's producers or consumers,
    /// fixed at creation) is held by a live process.
    #[error(
        "queue {queue}: all {places} {role} places are held by live processes (pids {holders:?})"
    )]
    NoPlace {
        /// The queue.
        queue: String,
        /// The role asked for.
        role: Role,
        /// How many places of it the ring has.
        places: u32,
        /// Their holders.
        holders: Vec<u32>,
    },
    /// An index in shared memory that the protocol cannot produce: the peer
    /// (or something else) wrote it. Nothing was read or written past it.
    #[error("queue {queue}: corrupt index: {what}")]
    Corrupt {
        /// The queue.
        queue: String,
        /// Which index, its value and what it should have been.
        what: String,
    },
    /// A received message holds an invalid value (a `bool` that is not 0 or
    /// 1, an enum discriminant not declared), found on the consumer's own
    /// copy. The message was taken off the queue (it would fail again);
    /// the next pop goes on with the one after it.
    #[error("queue {queue}: message {index} (slot {slot}): {invalid}")]
    Invalid {
        /// The queue.
        queue: String,
        /// The message's number (messages published before it, wrapping).
        index: u32,
        /// The slot it was read from.
        slot: u32,
        /// The field, its offset and the value found.
        invalid: crate::Invalid,
    },
    /// The peer died; everything it published before dying has been returned.
    #[error("queue {queue}: the {role} (pid {pid}) died")]
    PeerDied {
        /// The queue.
        queue: String,
        /// The dead peer's role.
        role: Role,
        /// Its pid.
        pid: u32,
    },
    /// The peer left (dropped its end); everything it published has been returned.
    #[error("queue {queue}: the {role} left")]
    PeerLeft {
        /// The queue.
        queue: String,
        /// The peer's role.
        role: Role,
    },
    /// A timed operation ran out of time.
    #[error("queue {queue}: {op} timed out after {waited:?}")]
    TimedOut {
        /// The queue.
        queue: String,
        /// `push` or `pop`.
        op: &'static str,
        /// How long it waited.
        waited: Duration,
    },
    /// The thread's cancellation hook (`nodeipc_shm::wait::with_cancel_hook`:
    /// a signal in a Python rank, say) ended a timed operation.
    #[error("queue {queue}: {op} interrupted after {waited:?}")]
    Interrupted {
        /// The queue.
        queue: String,
        /// `push` or `pop`.
        op: &'static str,
        /// How long it had waited.
        waited: Duration,
    },
    /// `futex` failed with an errno a waiter does not expect.
    #[error("queue {queue}: futex failed: {errno}")]
    Futex {
        /// The queue.
        queue: String,
        /// The errno.
        errno: rustix::io::Errno,
    },
    /// Reading a peer's process state failed for a reason of our own.
    #[error(transparent)]
    Process(#[from] nodeipc_fdpass::Error),
}

/// The queue layer's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a wait ended, as the queue sees it: `Ok(None)` when the word moved,
/// `Ok(Some(why))` when the caller's own check stopped it (the caller
/// decides what a gone peer means), else the queue's error for a wait cut
/// short (`op` timed out or was interrupted, or the futex failed).
pub(crate) fn wait_ended<E>(
    queue: &str,
    op: &'static str,
    waited: std::result::Result<(), nodeipc_shm::wait::WaitError<E>>,
) -> Result<Option<E>> {
    use nodeipc_shm::wait::WaitError;
    match waited {
        Ok(()) => Ok(None),
        Err(WaitError::Stopped(why)) => Ok(Some(why)),
        Err(WaitError::Interrupted(waited)) => Err(Error::Interrupted {
            queue: queue.to_owned(),
            op,
            waited,
        }),
        Err(WaitError::TimedOut(waited)) => Err(Error::TimedOut {
            queue: queue.to_owned(),
            op,
            waited,
        }),
        Err(WaitError::Futex(errno)) => Err(Error::Futex {
            queue: queue.to_owned(),
            errno,
        }),
    }
}
