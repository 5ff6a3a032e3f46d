//! [`ForkGeneration`]: which process a handle belongs to, once `fork(2)`
//! has copied it into a child.
//!
//! A child made by `fork` gets a copy of every handle of its parent — the
//! descriptors, the mappings, the memory of each Rust value — but only the
//! thread that called `fork`. A thread the parent started for a handle (a
//! handshake server's, a coordinator's response thread) does not exist
//! there, and a lock another thread of the parent held at the fork stays
//! held forever. So in a child a handle of its parent must never join a
//! thread, take a lock, shut a socket down (the parent's connection would
//! go with it), remove a name, or tell its peers it left: all of that is
//! the parent's. Dropping it there closes its descriptors and unmaps its
//! memory; the rest is leaked.
//!
//! How a handle knows: a `pthread_atfork` child handler, registered the
//! first time a [`ForkGeneration`] is taken, bumps a process-wide counter
//! in every child `fork(3)` makes (and so `os.fork()`, `multiprocessing`'s
//! fork start method, a C program's `fork()`). A handle keeps the count of
//! the process that made it; [`is_forked`](ForkGeneration::is_forked) is one
//! relaxed load and a compare — no `getpid` per call. A child made by a
//! raw `clone(2)` or glibc's `_Fork`, which run no fork handlers, is not
//! seen.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Forks this process has gone through: bumped in each child.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Whether the child handler is registered (`pthread_atfork` may fail with
/// `ENOMEM`; handles made then compare pids instead).
static WATCHING: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

/// What a handle made while no child handler could be registered holds as
/// its generation: it then compares pids (a `getpid` per check), which the
/// registered handler spares everyone else.
const UNWATCHED: u64 = u64::MAX;

/// The child handler: one atomic add, async-signal-safe as a fork handler
/// must be.
extern "C" fn child_after_fork() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn watch_forks() -> bool {
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only does an atomic add; it stays
        // valid for the process's life (a static function of ours).
        let rc = unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
        WATCHING.store(rc == 0, Ordering::Relaxed);
    });
    WATCHING.load(Ordering::Relaxed)
}

/// The fork generation a handle was made in, and the pid that made it.
///
/// Take one when a handle is made ([`current`](ForkGeneration::current));
/// ask [`is_forked`](ForkGeneration::is_forked) before anything that only
/// the making process may do (joining its threads, taking its locks,
/// removing its names, shutting its sockets down, telling its peers it
/// left).
///
/// # Examples
/// ```
/// use nodeipc_shm::ForkGeneration;
/// let born = ForkGeneration::current();
/// assert!(!born.is_forked());
/// assert!(born.check("this region").is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkGeneration {
    generation: u64,
    pid: u32,
}

impl ForkGeneration {
    /// This process's generation now (registering the child handler on
    /// first use).
    pub fn current() -> ForkGeneration {
        let generation = if watch_forks() {
            GENERATION.load(Ordering::Relaxed)
        } else {
            UNWATCHED
        };
        ForkGeneration {
            generation,
            pid: std::process::id(),
        }
    }

    /// Whether this process is a child forked (at any depth) since the
    /// handle was made: then the handle is its parent's.
    #[inline]
    pub fn is_forked(&self) -> bool {
        if self.generation == UNWATCHED {
            return std::process::id() != self.pid;
        }
        GENERATION.load(Ordering::Relaxed) != self.generation
    }

    /// The pid of the process that made the handle.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `Ok` in the process that made the handle; in a forked child,
    /// [`Forked`] naming `what` (the handle, for the message).
    ///
    /// # Errors
    /// [`Forked`] in a forked child.
    #[inline]
    pub fn check(&self, what: &str) -> Result<(), Forked> {
        if self.is_forked() {
            return Err(Forked {
                what: what.to_owned(),
                parent: self.pid,
                child: std::process::id(),
            });
        }
        Ok(())
    }
}

/// A handle used in a child forked after it was made: only freeing it is
/// allowed there (which closes its descriptors, unmaps its memory and
/// leaves everything else to the parent).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} belongs to process {parent}; this is process {child}, forked from it since: a forked \
     child may only free its parent's handles (make or open its own after the fork)"
)]
pub struct Forked {
    /// The handle (its kind and name).
    pub what: String,
    /// The process that made it.
    pub parent: u32,
    /// This process.
    pub child: u32,
}
