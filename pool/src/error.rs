//! Errors of the pool: each names the pool and what was wrong.

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The region under the pool.
    #[error(transparent)]
    Shm(#[from] nodeipc_shm::Error),
    /// Reading a process's state failed for a reason of our own.
    #[error(transparent)]
    Process(#[from] nodeipc_fdpass::Error),
    /// A bad configuration.
    #[error("pool {pool}: {what} is {value}: {limit}")]
    InvalidArgument {
        /// The pool.
        pool: String,
        /// Which setting.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The rule it breaks.
        limit: &'static str,
    },
    /// The region is not a pool this build can join.
    #[error("pool {pool}: not a pool this build can join: {reason}")]
    BadHeader {
        /// The pool.
        pool: String,
        /// What was found.
        reason: String,
    },
    /// Every handle is held by a live process.
    #[error("pool {pool}: all {handles} handles are held by live processes (pids {holders:?})")]
    NoHandleFree {
        /// The pool.
        pool: String,
        /// How many handles it has.
        handles: u32,
        /// Their holders.
        holders: Vec<u32>,
    },
    /// The handle asked for by id is held by a live process.
    #[error("pool {pool}: handle {handle} is held by live process {pid}")]
    HandleTaken {
        /// The pool.
        pool: String,
        /// The handle asked for.
        handle: u32,
        /// Its holder.
        pid: u32,
    },
    /// No slab is left for a new block of this class.
    #[error("pool {pool}: no free slab for a block of {class} bytes (asked {size})")]
    Full {
        /// The pool.
        pool: String,
        /// Bytes asked for.
        size: usize,
        /// The class it falls in.
        class: u32,
    },
    /// Larger than the largest class.
    #[error("pool {pool}: {size} bytes is more than the largest block ({largest})")]
    TooLarge {
        /// The pool.
        pool: String,
        /// Bytes asked for.
        size: usize,
        /// The largest class.
        largest: u32,
    },
    /// An offset that is not the start of a block of this pool.
    #[error("pool {pool}: offset {offset} is not a block: {reason}")]
    NotABlock {
        /// The pool.
        pool: String,
        /// The offset.
        offset: u64,
        /// Why.
        reason: String,
    },
    /// The block was freed and reused since the reference was made.
    #[error(
        "pool {pool}: block at {offset} is generation {found}, the reference names {generation} (stale)"
    )]
    Stale {
        /// The pool.
        pool: String,
        /// The block's offset.
        offset: u64,
        /// The reference's generation.
        generation: u32,
        /// The block's.
        found: u32,
    },
    /// The block is not allocated: freed already (a double free), or never handed out.
    #[error("pool {pool}: block at {offset} is not allocated ({state}): a double free?")]
    NotAllocated {
        /// The pool.
        pool: String,
        /// The block's offset.
        offset: u64,
        /// Its state.
        state: &'static str,
    },
    /// A word in shared memory contradicts what this handle knows of its
    /// own slabs (which blocks it handed out, which slabs it holds): only
    /// another process's write makes that. Refused where it was read;
    /// a clean-up that meets one finishes first, then names the first.
    #[error("pool {pool}: block at {offset} is {found}, but {known}: another process wrote it")]
    Forged {
        /// The pool.
        pool: String,
        /// The block's offset (a slab's first block, for a slab's owner word).
        offset: u64,
        /// What shared memory says.
        found: String,
        /// What the handle knows.
        known: &'static str,
    },
    /// A read or write past the end of a block.
    #[error("pool {pool}: {len} bytes at {at} do not fit a block of {size} at {offset}")]
    OutOfBlock {
        /// The pool.
        pool: String,
        /// The block's offset.
        offset: u64,
        /// Where in the block.
        at: usize,
        /// How many bytes.
        len: usize,
        /// The block's size.
        size: u32,
    },
}

/// The pool layer's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
