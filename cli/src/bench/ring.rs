//! A token passed around a ring of processes, by one hand-off mechanism:
//! with two members it is a round trip (ping-pong); with more members than
//! cores every hand-off has to wake a sleeping process.
//!
//! Each mechanism is written the simplest honest way; ours
//! ([`Handoff::ShmSemaphore`]) runs the same loop as the baselines.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_sem::{Semaphore, ShmSemaphore};

use crate::bench::glibc_sem::GlibcSemaphore;
use nodeipc_shm::Region;
use rustix::io::Errno;
use rustix::thread::futex;

use crate::bench::machine::{self, Pinned};
use crate::bench::peer::{self, Peers};

/// How long any one hand-off may take before the benchmark is declared hung.
const WAIT: Duration = Duration::from_secs(10);
/// Each member's word sits on its own pair of cache lines.
const SLOT: usize = 128;
const READY_AT: usize = 0;

/// How the token moves from one process to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handoff {
    /// Spinning on one shared counter: the physical floor of the machine.
    CacheLine,
    /// A bare futex word per member: set, then `FUTEX_WAKE` every time.
    Futex,
    /// glibc `sem_post` / `sem_wait` on named semaphores.
    GlibcSemaphore,
    /// nodeipc's `ShmSemaphore` (ours).
    ShmSemaphore,
    /// One byte through a pipe.
    Pipe,
    /// One byte through a Unix stream socket.
    UnixStream,
}

impl Handoff {
    /// Every mechanism, ours first.
    pub const ALL: [Handoff; 6] = [
        Handoff::ShmSemaphore,
        Handoff::CacheLine,
        Handoff::Futex,
        Handoff::GlibcSemaphore,
        Handoff::Pipe,
        Handoff::UnixStream,
    ];

    /// A short name, as printed in tables and passed to peers.
    pub fn name(self) -> &'static str {
        match self {
            Handoff::CacheLine => "cache-line",
            Handoff::Futex => "futex",
            Handoff::GlibcSemaphore => "glibc-sem",
            Handoff::ShmSemaphore => "shm-sem",
            Handoff::Pipe => "pipe",
            Handoff::UnixStream => "unix-stream",
        }
    }

    fn parse(name: &str) -> io::Result<Handoff> {
        Handoff::ALL
            .into_iter()
            .find(|h| h.name() == name)
            .ok_or_else(|| io::Error::other(format!("unknown hand-off {name:?}")))
    }
}

/// A ring of processes ready to pass the token: this process is member 0,
/// the others are spawned peers. Peers run a fixed number of laps, so every
/// lap this side runs must be accounted for in `total_laps`.
pub struct Ring {
    handoff: Handoff,
    members: usize,
    region: Region,
    owned: Owned,
    peers: Peers,
    hops: u64,
    _pinned: Option<Pinned>,
}

/// What member 0 holds besides the region: semaphores or stream ends.
enum Owned {
    Nothing,
    Glibc {
        mine: GlibcSemaphore,
        next: GlibcSemaphore,
    },
    Stream {
        read: OwnedFd,
        write: OwnedFd,
    },
}

impl Ring {
    /// Spawns `members - 1` peers that will pass the token `total_laps`
    /// times, and waits until they are ready. With two members and `pin`,
    /// this thread runs on core 0 and the peer on core 1.
    ///
    /// # Errors
    /// Any failure to set up or spawn; a peer that does not get ready in time.
    pub fn new(handoff: Handoff, members: usize, total_laps: u64, pin: bool) -> io::Result<Ring> {
        if members < 2 {
            return Err(io::Error::other("a ring needs at least two members"));
        }
        let pin = pin && members == 2 && machine::cores() >= 2;
        let region = Region::anonymous(SLOT * (members + 1))?;
        for i in 0..members {
            region.view::<ShmSemaphore>(slot(i))?.init(0);
        }
        let mut peers = Peers::default();
        let mut semaphores = Vec::new();
        let mut streams = Vec::new();
        let base = format!(
            "/nodeipc-bench-{}-{:x}",
            std::process::id(),
            crate::bench::nonce()
        );
        match handoff {
            Handoff::GlibcSemaphore => {
                for i in 0..members {
                    semaphores.push(GlibcSemaphore::create(&format!("{base}-{i}"), 0)?);
                }
            }
            Handoff::Pipe => {
                for _ in 0..members {
                    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
                    streams.push((read, write));
                }
            }
            Handoff::UnixStream => {
                for _ in 0..members {
                    let (read, write) = peer::stream_pair()?;
                    streams.push((read, write));
                }
            }
            _ => {}
        }
        for index in 1..members {
            let next = (index + 1) % members;
            let mut role = format!(
                "ring {} {members} {index} {total_laps} {}",
                handoff.name(),
                std::os::fd::AsRawFd::as_raw_fd(&region.as_fd())
            );
            let mut fds = vec![region.as_fd()];
            match handoff {
                Handoff::GlibcSemaphore => role.push_str(&format!(" {base}")),
                Handoff::Pipe | Handoff::UnixStream => {
                    let (read, write) = (streams[index].0.as_fd(), streams[next].1.as_fd());
                    role.push_str(&format!(
                        " {} {}",
                        std::os::fd::AsRawFd::as_raw_fd(&read),
                        std::os::fd::AsRawFd::as_raw_fd(&write)
                    ));
                    fds.extend([read, write]);
                }
                _ => {}
            }
            peers.spawn(&role, &fds, pin.then_some(1))?;
        }
        wait_ready(&region, members, &mut peers)?;
        let owned = match handoff {
            Handoff::GlibcSemaphore => {
                // Every peer has opened its pair: the names can go.
                for sem in &semaphores {
                    sem.unlink_now()?;
                }
                let mut ours = semaphores.into_iter();
                let mine = ours.next().expect("members >= 2");
                let next = ours.next().expect("members >= 2");
                Owned::Glibc { mine, next }
            }
            Handoff::Pipe | Handoff::UnixStream => {
                let mut streams = streams.into_iter();
                let (read, _) = streams.next().expect("members >= 2");
                let (_, write) = streams.next().expect("members >= 2");
                // Dropping the peers' ends: a dead peer shows as end-of-file.
                drop(streams);
                Owned::Stream { read, write }
            }
            _ => Owned::Nothing,
        };
        let pinned = if pin { Some(Pinned::to(0)?) } else { None };
        Ok(Ring {
            handoff,
            members,
            region,
            owned,
            peers,
            hops: 0,
            _pinned: pinned,
        })
    }

    /// Passes the token around the ring `laps` times; returns the time taken.
    ///
    /// # Errors
    /// A peer that died or stopped answering.
    pub fn run(&mut self, laps: u64) -> io::Result<Duration> {
        let link = Link::bind(self.handoff, &self.region, &self.owned, 0, self.members)?;
        let start = Instant::now();
        for _ in 0..laps {
            self.hops = lap(&link, 0, self.members as u64, self.hops)?;
        }
        Ok(start.elapsed())
    }

    /// Waits for the peers to finish their laps and exit.
    ///
    /// # Errors
    /// A peer that failed or did not exit.
    pub fn finish(self) -> io::Result<()> {
        self.peers.finish(WAIT)
    }
}

fn slot(i: usize) -> usize {
    SLOT * (i + 1)
}

fn wait_ready(region: &Region, members: usize, peers: &mut Peers) -> io::Result<()> {
    let ready = region.view::<AtomicU32>(READY_AT)?;
    let deadline = Instant::now() + WAIT;
    while (ready.load(Ordering::Acquire) as usize) < members - 1 {
        peers.check_alive()?;
        if Instant::now() >= deadline {
            return Err(io::Error::other("benchmark peers did not get ready"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// One member's view of the ring: where it receives, where it passes.
enum Link<'a> {
    CacheLine {
        turn: &'a AtomicU64,
    },
    Futex {
        mine: &'a AtomicU32,
        next: &'a AtomicU32,
    },
    Shm {
        mine: &'a ShmSemaphore,
        next: &'a ShmSemaphore,
    },
    Glibc {
        mine: &'a GlibcSemaphore,
        next: &'a GlibcSemaphore,
    },
    Stream {
        read: BorrowedFd<'a>,
        write: BorrowedFd<'a>,
    },
}

impl<'a> Link<'a> {
    fn bind(
        handoff: Handoff,
        region: &'a Region,
        owned: &'a Owned,
        index: usize,
        members: usize,
    ) -> io::Result<Link<'a>> {
        let next = (index + 1) % members;
        Ok(match (handoff, owned) {
            (Handoff::CacheLine, _) => Link::CacheLine {
                turn: region.view(slot(0))?,
            },
            (Handoff::Futex, _) => Link::Futex {
                mine: region.view(slot(index))?,
                next: region.view(slot(next))?,
            },
            (Handoff::ShmSemaphore, _) => Link::Shm {
                mine: region.view(slot(index))?,
                next: region.view(slot(next))?,
            },
            (Handoff::GlibcSemaphore, Owned::Glibc { mine, next }) => Link::Glibc { mine, next },
            (Handoff::Pipe | Handoff::UnixStream, Owned::Stream { read, write }) => Link::Stream {
                read: read.as_fd(),
                write: write.as_fd(),
            },
            _ => return Err(io::Error::other("hand-off and resources do not match")),
        })
    }

    /// Waits for the token; `hop` is the hop number that hands it to us.
    fn receive(&self, hop: u64) -> io::Result<()> {
        match self {
            Link::CacheLine { turn } => {
                let mut spins = 0u32;
                let start = Instant::now();
                while turn.load(Ordering::Acquire) != hop {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(1 << 16) && start.elapsed() > WAIT {
                        return Err(io::Error::other("cache-line peer stopped"));
                    }
                }
                Ok(())
            }
            Link::Futex { mine, .. } => {
                let start = Instant::now();
                while mine.swap(0, Ordering::Acquire) == 0 {
                    let timeout = rustix::time::Timespec {
                        tv_sec: 1,
                        tv_nsec: 0,
                    };
                    match futex::wait(mine, futex::Flags::empty(), 0, Some(&timeout)) {
                        Ok(()) | Err(Errno::AGAIN | Errno::INTR | Errno::TIMEDOUT) => {}
                        Err(e) => return Err(e.into()),
                    }
                    if start.elapsed() > WAIT {
                        return Err(io::Error::other("futex peer stopped"));
                    }
                }
                Ok(())
            }
            Link::Shm { mine, .. } => Ok(mine.wait_timeout(WAIT)?),
            Link::Glibc { mine, .. } => Ok(mine.wait_timeout(WAIT)?),
            Link::Stream { read, .. } => {
                let mut byte = [0u8];
                loop {
                    match rustix::io::read(read, &mut byte) {
                        Ok(1) => return Ok(()),
                        Ok(_) => return Err(io::Error::other("peer closed its end")),
                        Err(Errno::INTR) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }

    /// Hands the token on; `hop` is the hop number this hand-off makes.
    fn pass(&self, hop: u64) -> io::Result<()> {
        match self {
            Link::CacheLine { turn } => {
                turn.store(hop, Ordering::Release);
                Ok(())
            }
            Link::Futex { next, .. } => {
                next.store(1, Ordering::Release);
                futex::wake(next, futex::Flags::empty(), 1)?;
                Ok(())
            }
            Link::Shm { next, .. } => Ok(next.post()?),
            Link::Glibc { next, .. } => Ok(next.post()?),
            Link::Stream { write, .. } => loop {
                match rustix::io::write(write, &[1]) {
                    Ok(1) => return Ok(()),
                    Ok(_) => return Err(io::Error::other("short write")),
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            },
        }
    }
}

/// One lap for member `index` of `members`, starting at hop count `hops`;
/// returns the hop count after the lap.
fn lap(link: &Link<'_>, index: u64, members: u64, hops: u64) -> io::Result<u64> {
    let base = hops;
    if index == 0 {
        link.pass(base + 1)?;
        link.receive(base + members)?;
    } else {
        link.receive(base + index)?;
        link.pass(base + index + 1)?;
    }
    Ok(base + members)
}

/// A peer's side: `handoff members index laps region_fd [base | read_fd write_fd]`.
pub(crate) fn peer_main(args: &[&str]) -> io::Result<()> {
    let [handoff, members, index, laps, region_fd, rest @ ..] = args else {
        return Err(io::Error::other(format!(
            "bad ring peer arguments {args:?}"
        )));
    };
    let handoff = Handoff::parse(handoff)?;
    let parse = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| io::Error::other(format!("bad number {s:?}")))
    };
    let (members, index, laps) = (parse(members)?, parse(index)?, parse(laps)?);
    // SAFETY: the parent passed the region's descriptor down for our sole use.
    let region = Region::from_fd(unsafe { peer::inherited(region_fd)? })?;
    let owned = match (handoff, rest) {
        (Handoff::GlibcSemaphore, [base]) => {
            let next = (index + 1) % members;
            Owned::Glibc {
                mine: GlibcSemaphore::open_wait(&format!("{base}-{index}"), WAIT)?,
                next: GlibcSemaphore::open_wait(&format!("{base}-{next}"), WAIT)?,
            }
        }
        (Handoff::Pipe | Handoff::UnixStream, [read, write]) => Owned::Stream {
            // SAFETY: both ends were passed down for our sole use.
            read: unsafe { peer::inherited(read)? },
            // SAFETY: as above.
            write: unsafe { peer::inherited(write)? },
        },
        _ => Owned::Nothing,
    };
    let link = Link::bind(handoff, &region, &owned, index as usize, members as usize)?;
    region
        .view::<AtomicU32>(READY_AT)?
        .fetch_add(1, Ordering::AcqRel);
    let mut hops = 0;
    for _ in 0..laps {
        hops = lap(&link, index, members, hops)?;
    }
    Ok(())
}
