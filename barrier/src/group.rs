//! [`Group`]: joining, the barrier, and the collectives over slots.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Pidfd, Transport, open_verified, process_start_time};
use nodeipc_shm::wait::{Deadline, Spin, WaitError, unpark, wait_while, wake_if_parked};
use nodeipc_shm::{OpenOptions, Region};
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

use crate::mesh::Mesh;
use crate::options::{GroupOptions, TransportChoice};
use crate::vault::{self, BarrierWords, Cause, LAYOUT_VERSION, Layout, MAGIC, flags};
use crate::{Error, Result};

/// How many times a rank that finds the group poisoned but no cause stored
/// yet yields before it reports the cause as unknown (0): the poisoner
/// stores it right after the poison word, unless it died in between.
const CAUSE_GRACE_YIELDS: u32 = 100;

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
/// [`Error::PeerDied`] (or [`Error::Poisoned`]) within a fraction of a
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
}

impl Group {
    /// Joins the group `options.name` as `options.rank` of `options.world_size`,
    /// waiting (up to `options.timeout`) for every other rank.
    ///
    /// Rank 0 creates the vault (exclusive, 0600) and publishes its header
    /// with release ordering; the others open it with a bounded wait, acquire
    /// the header, and refuse one whose magic, layout version, world size or
    /// slot size differs from theirs. Every rank registers its pid and start
    /// time; once all have, the first to see it removes the name (a joiner
    /// that finds the group dead before then removes it too), so nothing
    /// survives a crash. Then the ranks agree on a descriptor transport.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`]; [`Error::NameTaken`] (rank 0);
    /// [`Error::NotAVault`], [`Error::Mismatch`]; [`Error::Timeout`] when not
    /// every rank joins in time; [`Error::PeerDied`] for a registered rank
    /// that died meanwhile; [`Error::Transport`] when `Pidfd` was forced and
    /// is refused.
    pub fn join(options: GroupOptions) -> Result<Group> {
        options.check()?;
        let start = Instant::now();
        let name = options.name.clone();
        let layout = Layout {
            world_size: options.world_size,
            slot_size: options.slot_size,
        };
        let shm = |source| Error::Shm {
            group: name.clone(),
            source,
        };
        let region = if options.rank == 0 {
            let region = Region::create(&name, layout.size()).map_err(|e| match e {
                nodeipc_shm::Error::AlreadyExists { .. } => Error::NameTaken {
                    group: name.clone(),
                },
                e => shm(e),
            })?;
            publish_header(&region, layout)?;
            region
        } else {
            let region = Region::open(
                &name,
                OpenOptions::wait(Layout::HEADER_BYTES, options.timeout),
            )
            .map_err(|e| match e {
                nodeipc_shm::Error::Timeout { waited, what, .. } => {
                    if what != "appear" {
                        // The vault is there but never got its size or mode
                        // in all that time: rank 0 died making it, and
                        // cannot remove it any more.
                        let _ = nodeipc_shm::unlink(&name);
                    }
                    Error::Timeout {
                        group: name.clone(),
                        rank: options.rank,
                        op: "join (waiting for rank 0 to create the vault)",
                        waited,
                        arrived: 0,
                        expected: options.world_size,
                    }
                }
                e => shm(e),
            })?;
            if let Err(e) = wait_for_header(&name, &region, &options, start) {
                // Rank 0 died (or never got going) before publishing: nobody
                // will meet here, and a dead creator cannot remove its name.
                let _ = region.unlink_now();
                return Err(e);
            }
            vault::validate(&name, &region, layout)?;
            region
        };
        let mut group = Group {
            name,
            rank: options.rank,
            world_size: options.world_size,
            layout,
            region,
            peers: Vec::new(),
            transport: Transport::Pidfd,
            mesh: None,
            cores: thread::available_parallelism().map_or(1, |n| n.get() as u32),
            timeout: options.timeout,
            epoch: 0,
        };
        if let Err(e) = group.register(start) {
            // A rank died or never came: the group can never form. Rank 0's
            // name goes when its region drops, but rank 0 may be the one
            // that died, so a joiner removes the name too (only while it
            // still names this very vault).
            if matches!(e, Error::PeerDied { .. } | Error::Timeout { .. }) {
                let _ = group.region.unlink_now();
            }
            return Err(e);
        }
        // Every rank has mapped the vault: from here on nothing can leak.
        // Each rank removes the name (the first one does it, the others find
        // it gone), so rank 0 being killed right now leaves nothing either.
        group.region.unlink_now().map_err(|source| Error::Shm {
            group: group.name.clone(),
            source,
        })?;
        group.choose_transport(options.transport, start)?;
        Ok(group)
    }

    /// Registers our pid and start time, waits for every rank to do the same,
    /// then opens a verified pidfd for each peer.
    fn register(&mut self, start: Instant) -> Result<()> {
        let pid = std::process::id();
        let me = self.layout.rank(&self.region, self.rank);
        // Not knowing our own start time is our failure: recording 0 would
        // make every peer take us for dead.
        let start_time = process_start_time(pid).map_err(|source| Error::FdPass {
            group: self.name.clone(),
            source,
        })?;
        me.start_time.store(start_time, Ordering::Relaxed);
        me.pid.store(pid, Ordering::Relaxed);
        let previous = me.flags.fetch_or(flags::JOINED, Ordering::AcqRel);
        if previous & flags::JOINED != 0 {
            return Err(Error::InvalidOptions {
                group: self.name.clone(),
                reason: format!(
                    "rank {} joined twice (two processes claim the same rank)",
                    self.rank
                ),
            });
        }
        let header = vault::header(&self.region);
        header.joined.fetch_add(1, Ordering::AcqRel);

        let mut pause = Duration::from_micros(20);
        loop {
            let joined = header.joined.load(Ordering::Acquire);
            if joined >= self.world_size {
                break;
            }
            // A registered rank that died while we wait means a broken start
            // (or a vault a crashed run left behind): say so now.
            for rank in 0..self.world_size {
                let entry = self.layout.rank(&self.region, rank);
                if entry.flags.load(Ordering::Acquire) & flags::JOINED != 0 {
                    let pid = entry.pid.load(Ordering::Relaxed);
                    self.check_registered(rank, pid, entry.start_time.load(Ordering::Relaxed))?;
                }
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                return Err(Error::Timeout {
                    group: self.name.clone(),
                    rank: self.rank,
                    op: "join",
                    waited,
                    arrived: joined,
                    expected: self.world_size,
                });
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
        for rank in 0..self.world_size {
            if rank == self.rank {
                self.peers.push(None);
                continue;
            }
            let entry = self.layout.rank(&self.region, rank);
            let pid = entry.pid.load(Ordering::Relaxed);
            let pidfd = open_verified(pid, entry.start_time.load(Ordering::Relaxed)).map_err(
                |e| match e {
                    nodeipc_fdpass::Error::ProcessGone { .. } => self.died(rank, pid),
                    source => Error::FdPass {
                        group: self.name.clone(),
                        source,
                    },
                },
            )?;
            self.peers.push(Some(pidfd));
        }
        Ok(())
    }

    /// Fails with [`Error::PeerDied`] when registered rank `rank` is gone:
    /// the kernel has no process `pid` (`ENOENT`, `ESRCH`) or it started at
    /// another time than the rank recorded. Failing to look (out of
    /// descriptors, say) is that failure, [`Error::FdPass`], not a death.
    fn check_registered(&self, rank: u32, pid: u32, start_time: u64) -> Result<()> {
        match process_start_time(pid) {
            Ok(found) if found == start_time => Ok(()),
            Ok(_) | Err(nodeipc_fdpass::Error::ProcessGone { .. }) => Err(self.died(rank, pid)),
            Err(source) => Err(Error::FdPass {
                group: self.name.clone(),
                source,
            }),
        }
    }

    /// Every rank probes whether it may `pidfd_getfd` from every peer and
    /// votes; `Auto` takes pidfds only if every vote says yes.
    fn choose_transport(&mut self, choice: TransportChoice, start: Instant) -> Result<()> {
        let me = self.layout.rank(&self.region, self.rank);
        let can_pidfd = self
            .peers
            .iter()
            .flatten()
            .all(|p| nodeipc_fdpass::pidfd_getfd_available(p.pid()));
        let vote = flags::PROBED | if can_pidfd { flags::PIDFD_OK } else { 0 };
        me.flags.fetch_or(vote, Ordering::AcqRel);
        let left = self.timeout.saturating_sub(start.elapsed());
        self.barrier_timeout(left)?;
        let all_can = (0..self.world_size).all(|r| {
            self.layout
                .rank(&self.region, r)
                .flags
                .load(Ordering::Acquire)
                & flags::PIDFD_OK
                != 0
        });
        self.transport = match (choice, all_can) {
            (TransportChoice::Pidfd, false) => {
                return Err(Error::Transport {
                    group: self.name.clone(),
                    reason: "pidfd_getfd was asked for, but the kernel refuses it between some ranks \
                             (different users, Yama ptrace_scope, or seccomp); use TransportChoice::Auto \
                             or ScmRights"
                        .to_owned(),
                });
            }
            (TransportChoice::ScmRights, _) | (TransportChoice::Auto, false) => {
                Transport::ScmRights
            }
            (_, true) => Transport::Pidfd,
        };
        if self.transport == Transport::ScmRights {
            self.mesh = Some(Mesh::connect(self)?);
        }
        Ok(())
    }

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

    /// Waits until every rank has called `barrier`, up to the group's timeout.
    ///
    /// # Errors
    /// [`Error::PeerDied`], [`Error::PeerLeft`], [`Error::Poisoned`],
    /// [`Error::Timeout`] (with how many ranks arrived).
    pub fn barrier(&self) -> Result<()> {
        self.barrier_timeout(self.timeout)
    }

    /// Waits until every rank has called a barrier, up to `timeout`.
    ///
    /// # Errors
    /// As [`barrier`](Group::barrier).
    pub fn barrier_timeout(&self, timeout: Duration) -> Result<()> {
        self.arrive_and_wait(
            self.layout.barrier(&self.region),
            self.world_size,
            "barrier",
            timeout,
        )
    }

    /// A barrier among ranks `0..n` only (a sub-group sync); ranks `n..` must
    /// not call it.
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`] if this rank is not below `n` or `n` is
    /// beyond the world; otherwise as [`barrier`](Group::barrier).
    pub fn barrier_subset(&self, n: u32) -> Result<()> {
        self.barrier_subset_timeout(n, self.timeout)
    }

    /// [`barrier_subset`](Group::barrier_subset) with its own timeout.
    ///
    /// # Errors
    /// As [`barrier_subset`](Group::barrier_subset).
    pub fn barrier_subset_timeout(&self, n: u32, timeout: Duration) -> Result<()> {
        if n == 0 || n > self.world_size || self.rank >= n {
            return Err(Error::RankOutOfRange {
                group: self.name.clone(),
                rank: self.rank,
                world_size: n,
            });
        }
        self.arrive_and_wait(
            self.layout.subset(&self.region),
            n,
            "barrier_subset",
            timeout,
        )
    }

    /// Arrives at a barrier of `parties` ranks and waits for the others.
    ///
    /// The last arriver resets the count and then bumps the generation
    /// (release), which is what the others wait for (acquire): a rank that
    /// passes and arrives again always finds the count reset. Waiting polls
    /// the generation, then yields, then parks on it as a shared futex in
    /// slices, checking the peers' pidfds between slices.
    fn arrive_and_wait(
        &self,
        words: &BarrierWords,
        parties: u32,
        op: &'static str,
        timeout: Duration,
    ) -> Result<()> {
        self.check_poison()?;
        let wake = &words.wake;
        let generation = wake.generation.load(Ordering::Acquire);
        // The count lies in memory every rank maps: whatever a broken or
        // hostile rank left there, no arithmetic on it may overflow.
        let arrived = words.count.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        if arrived >= parties {
            words.count.store(0, Ordering::Relaxed);
            wake.generation
                .store(generation.wrapping_add(1), Ordering::SeqCst);
            let _ = wake_if_parked(&wake.generation, &wake.sleepers, i32::MAX as u32);
            return Ok(());
        }
        // With more ranks than cores, the others need our core to arrive: poll
        // briefly and yield it, since a futex wake-up per rank costs more than
        // the whole barrier then. Parked, check the peers every slice.
        let spin = if parties > self.cores {
            Spin::OVERSUBSCRIBED
        } else {
            Spin::BARRIER
        };
        let mut deadline = Deadline::after(Some(timeout));
        let waited = wait_while(
            &wake.generation,
            &wake.sleepers,
            generation,
            &mut deadline,
            spin,
            || {
                self.check_poison()?;
                self.check_peers()
            },
        );
        match waited {
            Ok(()) => Ok(()),
            Err(WaitError::Stopped(e)) => Err(e),
            Err(WaitError::Futex(e)) => Err(self.io("futex(FUTEX_WAIT)", e)),
            Err(WaitError::TimedOut(waited)) => {
                // Our arrival cannot be taken back: the barrier is broken for all.
                self.poison(self.rank, Cause::TimedOut);
                Err(Error::Timeout {
                    group: self.name.clone(),
                    rank: self.rank,
                    op,
                    waited,
                    arrived: words.count.load(Ordering::Relaxed),
                    expected: parties,
                })
            }
        }
    }

    /// Fails if the group was poisoned, naming who and why.
    pub(crate) fn check_poison(&self) -> Result<()> {
        let header = vault::header(&self.region);
        let poison = header.poison.load(Ordering::Acquire);
        if poison == 0 {
            return Ok(());
        }
        let rank = poison - 1;
        // The poisoner stores the cause just after winning the poison word:
        // give it a moment before calling a missing cause unknown.
        let mut raw = header.poison_cause.load(Ordering::Acquire);
        for _ in 0..CAUSE_GRACE_YIELDS {
            if raw != 0 {
                break;
            }
            thread::yield_now();
            raw = header.poison_cause.load(Ordering::Acquire);
        }
        let cause = Cause::from_raw(raw);
        Err(match cause {
            Cause::Died if rank < self.world_size => {
                let pid = self
                    .layout
                    .rank(&self.region, rank)
                    .pid
                    .load(Ordering::Relaxed);
                Error::PeerDied {
                    group: self.name.clone(),
                    rank,
                    pid,
                }
            }
            Cause::Left => Error::PeerLeft {
                group: self.name.clone(),
                rank,
            },
            cause => Error::Poisoned {
                group: self.name.clone(),
                rank,
                cause: cause.describe(),
            },
        })
    }

    /// Checks every peer's pidfd (one `poll`) and departure flag; poisons the
    /// group and fails on the first that is gone.
    pub(crate) fn check_peers(&self) -> Result<()> {
        let pidfds: Vec<(u32, &Pidfd)> = self
            .peers
            .iter()
            .enumerate()
            .filter_map(|(r, p)| p.as_ref().map(|p| (r as u32, p)))
            .collect();
        let mut polls: Vec<PollFd<'_>> = pidfds
            .iter()
            .map(|(_, p)| PollFd::new(*p, PollFlags::IN))
            .collect();
        let ready = loop {
            match rustix::event::poll(
                &mut polls,
                Some(&rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                }),
            ) {
                Err(Errno::INTR) => continue,
                other => break other.map_err(|e| self.io("poll(pidfds)", e))?,
            }
        };
        // Readable (exited) or hung up (exited and reaped) is a death; any
        // other event is no news about the process.
        if ready > 0
            && let Some(i) = polls
                .iter()
                .position(|p| p.revents().intersects(PollFlags::IN | PollFlags::HUP))
        {
            let (rank, pidfd) = pidfds[i];
            self.poison(rank, Cause::Died);
            return Err(self.died(rank, pidfd.pid()));
        }
        for (rank, _) in &pidfds {
            if self
                .layout
                .rank(&self.region, *rank)
                .flags
                .load(Ordering::Acquire)
                & flags::LEFT
                != 0
            {
                self.poison(*rank, Cause::Left);
                return Err(Error::PeerLeft {
                    group: self.name.clone(),
                    rank: *rank,
                });
            }
        }
        Ok(())
    }

    /// Marks the group unusable (the first cause sticks) and wakes every sleeper.
    pub(crate) fn poison(&self, rank: u32, cause: Cause) {
        let header = vault::header(&self.region);
        if header
            .poison
            .compare_exchange(0, rank + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            header.poison_cause.store(cause.to_raw(), Ordering::Release);
        }
        for words in [
            self.layout.barrier(&self.region),
            self.layout.subset(&self.region),
        ] {
            let _ = unpark(&words.wake.generation, i32::MAX as u32);
        }
    }

    pub(crate) fn died(&self, rank: u32, pid: u32) -> Error {
        Error::PeerDied {
            group: self.name.clone(),
            rank,
            pid,
        }
    }

    pub(crate) fn io(&self, op: &'static str, errno: Errno) -> Error {
        Error::Io {
            group: self.name.clone(),
            op,
            source: errno.into(),
        }
    }

    /// Every rank's `data` (at most the slot size), in rank order.
    ///
    /// # Errors
    /// [`Error::TooLarge`] before anything is shared; [`Error::Corrupt`] for
    /// a slot whose length is beyond the slot; as [`barrier`](Group::barrier).
    pub fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.all_gather_timeout(data, self.timeout)
    }

    /// [`all_gather`](Group::all_gather) with its own timeout.
    ///
    /// # Errors
    /// As [`all_gather`](Group::all_gather).
    pub fn all_gather_timeout(&mut self, data: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>> {
        let parity = self.next_parity_for(data.len())?;
        self.write_slot(parity, data)?;
        self.barrier_timeout(timeout)?;
        (0..self.world_size)
            .map(|rank| self.read_slot(parity, rank))
            .collect()
    }

    /// `root`'s `data` to every rank (the others pass anything, `&[]` say).
    ///
    /// # Errors
    /// [`Error::RankOutOfRange`] for a root outside the group; otherwise as
    /// [`all_gather`](Group::all_gather).
    pub fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>> {
        self.broadcast_timeout(root, data, self.timeout)
    }

    /// [`broadcast`](Group::broadcast) with its own timeout.
    ///
    /// # Errors
    /// As [`broadcast`](Group::broadcast).
    pub fn broadcast_timeout(
        &mut self,
        root: u32,
        data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.check_rank(root)?;
        let mine = if self.rank == root { data.len() } else { 0 };
        let parity = self.next_parity_for(mine)?;
        if self.rank == root {
            self.write_slot(parity, data)?;
        }
        self.barrier_timeout(timeout)?;
        self.read_slot(parity, root)
    }

    pub(crate) fn check_rank(&self, rank: u32) -> Result<()> {
        if rank >= self.world_size {
            return Err(Error::RankOutOfRange {
                group: self.name.clone(),
                rank,
                world_size: self.world_size,
            });
        }
        Ok(())
    }

    /// Which slot buffer this collective uses. Two buffers alternate: a rank
    /// writes buffer `p` again only after the barrier of the collective in
    /// between, which every rank reaches only after reading buffer `p`.
    pub(crate) fn next_parity_for(&mut self, len: usize) -> Result<usize> {
        if len > self.layout.slot_size {
            return Err(Error::TooLarge {
                group: self.name.clone(),
                len,
                slot_size: self.layout.slot_size,
            });
        }
        let parity = (self.epoch & 1) as usize;
        self.epoch += 1;
        Ok(parity)
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Poisons the group because this rank failed inside a collective, so
    /// the others stop waiting for it, and returns the error.
    pub(crate) fn fail(&self, error: Error) -> Error {
        if error.poisons() {
            self.poison(self.rank, Cause::Failed);
        }
        error
    }

    pub(crate) fn entry_identity(&self, rank: u32) -> (u32, u64) {
        let entry = self.layout.rank(&self.region, rank);
        (
            entry.pid.load(Ordering::Relaxed),
            entry.start_time.load(Ordering::Relaxed),
        )
    }

    fn write_slot(&self, parity: usize, data: &[u8]) -> Result<()> {
        let at = self.layout.data_slot(parity, self.rank);
        self.region
            .write_at(at + 8, data)
            .map_err(|source| Error::Shm {
                group: self.name.clone(),
                source,
            })?;
        self.region
            .view::<AtomicU64>(at)
            .expect("slots lie in the vault")
            .store(data.len() as u64, Ordering::Release);
        Ok(())
    }

    fn read_slot(&self, parity: usize, rank: u32) -> Result<Vec<u8>> {
        let at = self.layout.data_slot(parity, rank);
        let len = self
            .region
            .view::<AtomicU64>(at)
            .expect("slots lie in the vault")
            .load(Ordering::Acquire);
        if len > self.layout.slot_size as u64 {
            return Err(Error::Corrupt {
                group: self.name.clone(),
                rank,
                len,
                slot_size: self.layout.slot_size,
            });
        }
        let mut out = vec![0u8; len as usize];
        self.region
            .read_at(at + 8, &mut out)
            .map_err(|source| Error::Shm {
                group: self.name.clone(),
                source,
            })?;
        Ok(out)
    }

    pub(crate) fn region(&self) -> &Region {
        &self.region
    }

    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    pub(crate) fn peer(&self, rank: u32) -> Option<&Pidfd> {
        self.peers.get(rank as usize).and_then(Option::as_ref)
    }

    pub(crate) fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_ref()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Peers still waiting on us learn we are gone instead of timing out.
        self.layout
            .rank(&self.region, self.rank)
            .flags
            .fetch_or(flags::LEFT, Ordering::AcqRel);
    }
}

/// Rank 0: the header, last the `init` word with release ordering.
fn publish_header(region: &Region, layout: Layout) -> Result<()> {
    let header = vault::header(region);
    header.version.store(LAYOUT_VERSION, Ordering::Relaxed);
    header
        .world_size
        .store(layout.world_size, Ordering::Relaxed);
    header
        .slot_size
        .store(layout.slot_size as u32, Ordering::Relaxed);
    let mut nonce = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut nonce, rustix::rand::GetRandomFlags::empty());
    header
        .nonce
        .store(u64::from_le_bytes(nonce), Ordering::Relaxed);
    header.magic.store(MAGIC, Ordering::Relaxed);
    header.init.store(1, Ordering::Release);
    Ok(())
}

/// Joiners: waits (bounded) for rank 0's `init` word.
fn wait_for_header(
    name: &str,
    region: &Region,
    options: &GroupOptions,
    start: Instant,
) -> Result<()> {
    let header = vault::header(region);
    let mut pause = Duration::from_micros(20);
    while header.init.load(Ordering::Acquire) != 1 {
        let waited = start.elapsed();
        if waited >= options.timeout {
            return Err(Error::Timeout {
                group: name.to_owned(),
                rank: options.rank,
                op: "join (waiting for rank 0 to publish the vault)",
                waited,
                arrived: 0,
                expected: options.world_size,
            });
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
    Ok(())
}
