//! [`Group`]: what a rank holds, and what it tells about the group.
//!
//! The group's work lies in submodules along its seams: [`join`] (meeting
//! the other ranks and agreeing on a transport), [`wait`] (the barriers and
//! everything that ends a wait early: poison, dead or departed peers) and
//! [`collectives`] (the slot buffers: all-gather, broadcast, descriptor
//! handles).

mod collectives;
mod join;
mod wait;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nodeipc_fdpass::{ForkGeneration, Pidfd, Transport};
use nodeipc_shm::Region;

use crate::Result;
use crate::mesh::{Members, Mesh};
use crate::vault::{Layout, flags};

/// One rank's membership of a group of processes on this node.
///
/// [`join`](Group::join) meets the other ranks by the group's name; then
/// [`barrier`](Group::barrier), [`all_gather`](Group::all_gather),
/// [`broadcast`](Group::broadcast), [`exchange_fds`](Group::exchange_fds) and
/// [`broadcast_fd`](Group::broadcast_fd) are collective: every rank calls
/// them in the same order.
///
/// Nothing waits forever. Every rank registers its pid at join; a waiter
/// that has parked for a moment checks its peers' pidfds, and a dead rank
/// poisons the group: every pending and later call returns
/// [`Error::PeerDied`](crate::Error::PeerDied) (or
/// [`Error::Poisoned`](crate::Error::Poisoned)) within a fraction of a
/// second. A wait that outlasts the timeout poisons the group too: a rank
/// missing from a collective is a failed job, as in MPI or NCCL.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_barrier::{Group, GroupOptions};
///
/// let name = format!("/nodeipc-doc-group-{}", std::process::id());
/// // A group of one, to keep the example in one process; real groups have
/// // one rank per process, each calling `join` with its own rank.
/// let mut group = Group::join(GroupOptions::new(&name, 0, 1).timeout(Duration::from_secs(5)))?;
/// group.barrier()?;
/// let handles = group.all_gather(b"my 64-byte GPU IPC handle")?;
/// assert_eq!(handles, vec![b"my 64-byte GPU IPC handle".to_vec()]);
/// # Ok::<(), nodeipc_barrier::Error>(())
/// ```
#[derive(Debug)]
pub struct Group {
    name: String,
    rank: u32,
    world_size: u32,
    layout: Layout,
    region: Region,
    /// Peers' pidfds, verified against their start time; `None` for ourselves.
    peers: Vec<Option<Pidfd>>,
    transport: Transport,
    mesh: Option<Mesh>,
    timeout: Duration,
    /// Collectives so far: picks which of the two slot buffers the next uses.
    epoch: u64,
    /// Cores this process may run on: with more ranks waiting than that,
    /// polling only delays the ranks that still have to arrive.
    cores: u32,
    /// The process that joined: in a child forked since, the membership is
    /// the parent's, and dropping the copy tells the peers nothing.
    born: ForkGeneration,
    /// Set while a thread is in a barrier: a second thread's call on the
    /// same rank is refused ([`Error::Busy`](crate::Error::Busy)) rather
    /// than counted as a second arrival of this rank. (The other
    /// collectives take `&mut self`: the compiler already keeps them to
    /// one thread.)
    in_use: AtomicBool,
}

/// A thread's turn in a call on the group, given back when it drops.
pub(crate) struct InUse<'g>(&'g AtomicBool);

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Group {
    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// How many ranks the group has.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// The slot size of all-gathers and broadcasts.
    pub fn slot_size(&self) -> usize {
        self.layout.slot_size
    }

    /// How descriptors travel in this group, as agreed at join.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The timeout collective calls use unless given one.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Takes this thread's turn for `op`, or refuses it while another
    /// thread is in a call on the group.
    pub(crate) fn enter(&self, op: &'static str) -> Result<InUse<'_>> {
        if self.in_use.swap(true, Ordering::Acquire) {
            return Err(crate::Error::Busy {
                group: self.name.clone(),
                rank: self.rank,
                op,
            });
        }
        Ok(InUse(&self.in_use))
    }

    /// The pids of every rank, by rank.
    pub fn pids(&self) -> Vec<u32> {
        (0..self.world_size)
            .map(|r| {
                self.layout
                    .rank(&self.region, r)
                    .pid
                    .load(Ordering::Relaxed)
            })
            .collect()
    }
}

/// The mesh sees the group only through this: who we are, a meeting of all
/// ranks, and whether the group still stands.
impl Members for Group {
    fn name(&self) -> &str {
        &self.name
    }

    fn rank(&self) -> u32 {
        self.rank
    }

    fn world_size(&self) -> u32 {
        self.world_size
    }

    fn meet(&self) -> Result<()> {
        self.barrier_timeout(self.timeout)
    }

    fn check_alive(&self) -> Result<()> {
        self.check_poison()?;
        self.check_peers()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.born.is_forked() {
            // A child's copy of its parent's membership: the rank is the
            // parent's, which stays; unmap and close only.
            return;
        }
        // Peers still waiting on us learn we are gone instead of timing out.
        self.layout
            .rank(&self.region, self.rank)
            .flags
            .fetch_or(flags::LEFT, Ordering::AcqRel);
    }
}
