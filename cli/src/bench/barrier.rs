//! Barriers across processes: nodeipc's `Group` beside a process-shared
//! `pthread_barrier` and a hand-written spin barrier, each with one rank per
//! process; and the CPU a rank burns while parked in a barrier.

use std::cell::UnsafeCell;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodeipc_barrier::{Group, GroupOptions};
use nodeipc_shm::Region;

use crate::bench::peer::{self, Peers};

/// Which barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierKind {
    /// nodeipc-barrier (ours).
    Nodeipc,
    /// glibc `pthread_barrier_wait` with `PTHREAD_PROCESS_SHARED`.
    Pthread,
    /// A count and a generation in shared memory, waiters spinning (and
    /// yielding every 64 polls so more ranks than cores still progress).
    Spin,
}

impl BarrierKind {
    /// Every kind, ours first.
    pub const ALL: [BarrierKind; 3] = [
        BarrierKind::Nodeipc,
        BarrierKind::Pthread,
        BarrierKind::Spin,
    ];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            BarrierKind::Nodeipc => "nodeipc",
            BarrierKind::Pthread => "pthread_barrier",
            BarrierKind::Spin => "spin",
        }
    }

    fn parse(s: &str) -> io::Result<BarrierKind> {
        BarrierKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| io::Error::other(format!("unknown barrier {s:?}")))
    }
}

// The shared region: the spin barrier's words, then the pthread barrier.
const SPIN_COUNT_AT: usize = 0;
const SPIN_GENERATION_AT: usize = 128;
const PARKED_CPU_AT: usize = 256;
const PTHREAD_AT: usize = 512;

/// `ranks` processes (this one is rank 0) pass `iters` barriers after a
/// warm-up; returns rank 0's time for the `iters`.
///
/// # Errors
/// A peer that failed to start or died, or a barrier error.
pub fn barriers(kind: BarrierKind, ranks: u32, iters: u64) -> io::Result<Duration> {
    let session = Session::start(kind, ranks, iters, false)?;
    let elapsed = session.run(iters)?;
    session.finish()?;
    Ok(elapsed)
}

/// `batches` batches of `iters` barriers with one set of ranks; nanoseconds
/// per barrier over the batches.
///
/// # Errors
/// As [`barriers`].
pub fn barrier_batches(
    kind: BarrierKind,
    ranks: u32,
    batches: usize,
    iters: u64,
) -> io::Result<crate::bench::Summary> {
    let session = Session::start(kind, ranks, iters * batches as u64, false)?;
    let mut per_barrier = Vec::with_capacity(batches);
    for _ in 0..batches {
        per_barrier.push(session.run(iters)?.as_nanos() as f64 / iters as f64);
    }
    session.finish()?;
    Ok(crate::bench::Summary::of(&per_barrier).expect("at least one batch"))
}

/// The CPU time one peer rank uses while parked for `parked` in a nodeipc
/// barrier that rank 0 enters late.
///
/// # Errors
/// As [`barriers`].
pub fn parked_cpu(parked: Duration) -> io::Result<Duration> {
    let session = Session::start(BarrierKind::Nodeipc, 2, 1, true)?;
    std::thread::sleep(parked);
    session.run(1)?;
    let Session {
        region,
        peers,
        group,
        ..
    } = session;
    // The peer writes its figure after its barrier returns: wait for it to exit.
    peers.finish(Duration::from_secs(30))?;
    drop(group);
    let nanos = region
        .view::<AtomicU64>(PARKED_CPU_AT)?
        .load(Ordering::Acquire);
    Ok(Duration::from_nanos(nanos))
}

struct Session {
    kind: BarrierKind,
    ranks: u32,
    region: Region,
    group: Option<Group>,
    peers: Peers,
    /// With two ranks on a machine of two cores or more: this one on core 0,
    /// the peer on core 1, as for every two-process measurement.
    _pinned: Option<crate::bench::machine::Pinned>,
}

const WARM_UP: u64 = 100;

impl Session {
    fn start(
        kind: BarrierKind,
        ranks: u32,
        iters: u64,
        measure_parked: bool,
    ) -> io::Result<Session> {
        let region = Region::anonymous(4096)?;
        if kind == BarrierKind::Pthread {
            init_pthread_barrier(&region, ranks)?;
        }
        let name = format!(
            "/nodeipc-bench-barrier-{}-{:x}",
            std::process::id(),
            crate::bench::nonce()
        );
        let pin = ranks == 2 && crate::bench::machine::cores() >= 2;
        let mut peers = Peers::default();
        for rank in 1..ranks {
            let role = format!(
                "barrier {} {name} {rank} {ranks} {} {} {}",
                kind.name(),
                iters + WARM_UP,
                region.as_fd().as_raw_fd(),
                u8::from(measure_parked)
            );
            peers.spawn(&role, &[region.as_fd()], pin.then_some(1))?;
        }
        let group = match kind {
            BarrierKind::Nodeipc => Some(join(&name, 0, ranks)?),
            _ => None,
        };
        let pinned = if pin {
            Some(crate::bench::machine::Pinned::to(0)?)
        } else {
            None
        };
        let session = Session {
            kind,
            ranks,
            region,
            group,
            peers,
            _pinned: pinned,
        };
        if !measure_parked {
            session.run(WARM_UP)?;
        }
        Ok(session)
    }

    fn run(&self, iters: u64) -> io::Result<Duration> {
        let start = Instant::now();
        for _ in 0..iters {
            wait(self.kind, &self.region, self.group.as_ref(), self.ranks)?;
        }
        Ok(start.elapsed())
    }

    fn finish(self) -> io::Result<()> {
        let Session { peers, group, .. } = self;
        // Peers may still be leaving the last barrier: keep our group until they exit.
        let result = peers.finish(Duration::from_secs(30));
        drop(group);
        result
    }
}

fn join(name: &str, rank: u32, ranks: u32) -> io::Result<Group> {
    Ok(Group::join(
        GroupOptions::new(name, rank, ranks).timeout(Duration::from_secs(30)),
    )?)
}

fn wait(kind: BarrierKind, region: &Region, group: Option<&Group>, ranks: u32) -> io::Result<()> {
    match kind {
        BarrierKind::Nodeipc => Ok(group.expect("a nodeipc session has a group").barrier()?),
        BarrierKind::Pthread => {
            let barrier = pthread_barrier(region)?;
            // SAFETY: the barrier was initialised process-shared by rank 0
            // before any peer started, and the mapping outlives the call.
            let rc = unsafe { libc::pthread_barrier_wait(barrier) };
            if rc != 0 && rc != libc::PTHREAD_BARRIER_SERIAL_THREAD {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(())
        }
        BarrierKind::Spin => {
            let count = region.view::<AtomicU32>(SPIN_COUNT_AT)?;
            let generation = region.view::<AtomicU32>(SPIN_GENERATION_AT)?;
            let seen = generation.load(Ordering::Acquire);
            if count.fetch_add(1, Ordering::AcqRel) + 1 == ranks {
                count.store(0, Ordering::Relaxed);
                generation.store(seen.wrapping_add(1), Ordering::Release);
                return Ok(());
            }
            let start = Instant::now();
            let mut polls = 0u32;
            while generation.load(Ordering::Acquire) == seen {
                std::hint::spin_loop();
                polls = polls.wrapping_add(1);
                if polls.is_multiple_of(64) {
                    std::thread::yield_now();
                    if start.elapsed() > Duration::from_secs(30) {
                        return Err(io::Error::other("spin barrier: a peer stopped"));
                    }
                }
            }
            Ok(())
        }
    }
}

/// The pthread barrier placed in the region, as a raw pointer for glibc.
fn pthread_barrier(region: &Region) -> io::Result<*mut libc::pthread_barrier_t> {
    region.check_range(PTHREAD_AT, size_of::<libc::pthread_barrier_t>())?;
    Ok(region
        .as_ptr()
        .wrapping_add(PTHREAD_AT)
        .cast::<libc::pthread_barrier_t>())
}

fn init_pthread_barrier(region: &Region, ranks: u32) -> io::Result<()> {
    let barrier = pthread_barrier(region)?;
    let attr = UnsafeCell::new(std::mem::MaybeUninit::<libc::pthread_barrierattr_t>::uninit());
    // SAFETY: `attr` is initialised by pthread_barrierattr_init before use and
    // destroyed after; `barrier` points into the live mapping, suitably
    // aligned (offset 512 of a page-aligned map), and no peer exists yet.
    let rc = unsafe {
        let attr = (*attr.get()).as_mut_ptr();
        libc::pthread_barrierattr_init(attr);
        libc::pthread_barrierattr_setpshared(attr, libc::PTHREAD_PROCESS_SHARED);
        let rc = libc::pthread_barrier_init(barrier, attr, ranks);
        libc::pthread_barrierattr_destroy(attr);
        rc
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// A peer rank: `barrier KIND NAME RANK RANKS ITERS REGION_FD MEASURE_PARKED`.
pub(crate) fn peer_main(args: &[&str]) -> io::Result<()> {
    let [kind, name, rank, ranks, iters, region_fd, measure_parked] = args else {
        return Err(io::Error::other(format!(
            "bad barrier peer arguments {args:?}"
        )));
    };
    let kind = BarrierKind::parse(kind)?;
    let number = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| io::Error::other(format!("bad number {s:?}")))
    };
    let (rank, ranks, iters) = (number(rank)? as u32, number(ranks)? as u32, number(iters)?);
    // SAFETY: the parent passed the region down for our sole use.
    let region = Region::from_fd(unsafe { peer::inherited(region_fd)? })?;
    let group = match kind {
        BarrierKind::Nodeipc => Some(join(name, rank, ranks)?),
        _ => None,
    };
    if *measure_parked == "1" {
        let cpu = || rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let before = cpu();
        wait(kind, &region, group.as_ref(), ranks)?;
        let after = cpu();
        let nanos =
            (after.tv_sec - before.tv_sec) * 1_000_000_000 + (after.tv_nsec - before.tv_nsec);
        region
            .view::<AtomicU64>(PARKED_CPU_AT)?
            .store(nanos.max(0) as u64, Ordering::Release);
        return Ok(());
    }
    for _ in 0..iters {
        wait(kind, &region, group.as_ref(), ranks)?;
    }
    Ok(())
}
