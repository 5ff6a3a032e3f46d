//! Joining: the vault, registration, and the transport vote.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use nodeipc_fdpass::{Transport, open_if_alive, peer_alive, process_start_time};
use nodeipc_shm::wait::{Pacer, WaitError};
use nodeipc_shm::{OpenOptions, Region};

use super::Group;
use crate::mesh::Mesh;
use crate::options::{GroupOptions, TransportChoice};
use crate::vault::{self, LAYOUT_VERSION, Layout, MAGIC, flags};
use crate::{Error, Result};

/// The first pause of the join waits: rank 0 and the peers are usually
/// microseconds away.
const FIRST_PAUSE: Duration = Duration::from_micros(20);
/// The longest pause waiting for the other ranks to register.
const REGISTER_CEILING: Duration = Duration::from_millis(5);
/// The longest pause waiting for rank 0 to publish the header.
const HEADER_CEILING: Duration = Duration::from_millis(2);

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
    /// that died meanwhile; [`Error::Interrupted`] by this thread's
    /// cancellation hook (nothing is left behind); [`Error::Transport`] when `Pidfd` was forced and
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
                        missing: Vec::new(),
                    }
                }
                nodeipc_shm::Error::Interrupted { waited, .. } => Error::Interrupted {
                    group: name.clone(),
                    rank: options.rank,
                    op: "join (waiting for rank 0 to create the vault)",
                    waited,
                },
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
            born: nodeipc_fdpass::ForkGeneration::current(),
            in_use: std::sync::atomic::AtomicBool::new(false),
            timeout: options.timeout,
            epoch: 0,
        };
        if let Err(e) = group.register(start) {
            // A rank died or never came: the group can never form. Rank 0's
            // name goes when its region drops, but rank 0 may be the one
            // that died, so a joiner removes the name too (only while it
            // still names this very vault).
            if matches!(
                e,
                Error::PeerDied { .. } | Error::Timeout { .. } | Error::Interrupted { .. }
            ) {
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

        // The join's timeout runs from its start, vault and header included.
        let left = self.timeout.saturating_sub(start.elapsed());
        let mut pacer = Pacer::new(FIRST_PAUSE, REGISTER_CEILING, Some(left));
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
            match pacer.pause_interruptible() {
                Ok(()) => {}
                Err(WaitError::Interrupted(_)) => {
                    return Err(Error::Interrupted {
                        group: self.name.clone(),
                        rank: self.rank,
                        op: "join",
                        waited: start.elapsed(),
                    });
                }
                Err(_) => {
                    return Err(Error::Timeout {
                        group: self.name.clone(),
                        rank: self.rank,
                        op: "join",
                        waited: start.elapsed(),
                        arrived: joined,
                        expected: self.world_size,
                        missing: self.unjoined(),
                    });
                }
            }
        }
        for rank in 0..self.world_size {
            if rank == self.rank {
                self.peers.push(None);
                continue;
            }
            let entry = self.layout.rank(&self.region, rank);
            let pid = entry.pid.load(Ordering::Relaxed);
            let pidfd = open_if_alive(pid, entry.start_time.load(Ordering::Relaxed))
                .map_err(|source| Error::FdPass {
                    group: self.name.clone(),
                    source,
                })?
                .ok_or_else(|| self.died(rank, pid))?;
            self.peers.push(Some(pidfd));
        }
        Ok(())
    }

    /// The ranks whose entry in the vault has no `JOINED` flag yet, in
    /// order: who a timed-out join waited for. (A rank setting its flag
    /// just now may or may not be listed; the list is read once, after the
    /// wait gave up.)
    fn unjoined(&self) -> Vec<u32> {
        (0..self.world_size)
            .filter(|&rank| {
                self.layout
                    .rank(&self.region, rank)
                    .flags
                    .load(Ordering::Acquire)
                    & flags::JOINED
                    == 0
            })
            .collect()
    }

    /// Fails with [`Error::PeerDied`] when registered rank `rank` is gone,
    /// as fdpass's one liveness policy says: no process `pid`, a later
    /// start time, or one that has exited and is not reaped yet (a zombie).
    /// Failing to look (out of descriptors, say) is that failure,
    /// [`Error::FdPass`], not a death.
    fn check_registered(&self, rank: u32, pid: u32, start_time: u64) -> Result<()> {
        match peer_alive(pid, start_time) {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.died(rank, pid)),
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
            let nonce = vault::header(&self.region).nonce.load(Ordering::Relaxed);
            self.mesh = Some(Mesh::connect(self, nonce)?);
        }
        Ok(())
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

/// Joiners: waits (bounded, from the join's `start`) for rank 0's `init` word.
fn wait_for_header(
    name: &str,
    region: &Region,
    options: &GroupOptions,
    start: Instant,
) -> Result<()> {
    let header = vault::header(region);
    let left = options.timeout.saturating_sub(start.elapsed());
    let mut pacer = Pacer::new(FIRST_PAUSE, HEADER_CEILING, Some(left));
    while header.init.load(Ordering::Acquire) != 1 {
        match pacer.pause_interruptible() {
            Ok(()) => {}
            Err(WaitError::Interrupted(_)) => {
                return Err(Error::Interrupted {
                    group: name.to_owned(),
                    rank: options.rank,
                    op: "join (waiting for rank 0 to publish the vault)",
                    waited: start.elapsed(),
                });
            }
            Err(_) => {
                return Err(Error::Timeout {
                    group: name.to_owned(),
                    rank: options.rank,
                    op: "join (waiting for rank 0 to publish the vault)",
                    waited: start.elapsed(),
                    arrived: 0,
                    expected: options.world_size,
                    missing: Vec::new(),
                });
            }
        }
    }
    Ok(())
}
