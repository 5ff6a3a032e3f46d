//! Where everything sits in the two regions, and the checks a header passes
//! before it is trusted. The layout is a contract with C peers: `README.md`
//! spells it out, and `integration-tests/c/channel_worker.c` follows it.
//!
//! Request region (written by the coordinator only):
//! ```text
//!   0  RequestHeader (128 bytes)
//! 128  ring: `depth` frames, each `request_capacity` rounded up to 64
//! ```
//! Response region (workers write their own parts):
//! ```text
//!   0  ResponseHeader (64 bytes)
//!  64  WorkerEntry × workers (32 bytes each)
//!   …  in-region semaphores: per worker 4 × 64-byte lines, in the order
//!      request produce, request consume, response produce, response consume
//!   …  response slots: per worker `depth` slots of `response_slot_size`
//!      rounded up to 64, answer `i` in slot `i % depth`
//!   …  init slots: per worker `depth` slots of `init_slot_size` rounded
//!      up to 64, indexed as the response slots
//! ```
//!
//! Version 2 gave each worker a ring of `depth` answers (version 1 had one
//! slot each): a worker answers request `k + 1` while the coordinator (its
//! response thread) still reads answer `k`, so neither waits for the other
//! once a request. Answers are counted per worker; a request's answer and
//! an init answer share the count, each in its own kind of slot.
//! Every section starts on a 64-byte boundary.
//!
//! Cache lines crossing between the cores in one 64-byte round trip (one
//! worker, in-region semaphores): each of the worker's four semaphore lines
//! twice (taken on one side, posted on the other), the two frame lines
//! four times (a 4-byte prefix and 64 bytes span two lines: the coordinator
//! takes them back to write, the worker reads them), the response slot's
//! line twice: 14, against 2 for a bare cache-line ping-pong. Packing the
//! four semaphores into one line makes it 8 on paper, and was measured
//! slower (2026-11-24: 64-byte in-place round trip 473 ns against 395 ns):
//! a side polling the shared line pulls it back after each of the other
//! side's posts, so the line crosses more often, not less.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nodeipc_shm::{Region, ShmSafe};

use crate::sem_kind::{Direction, Role, SemKind};
use crate::{Error, Result};

pub(crate) const REQUEST_MAGIC: u64 = u64::from_le_bytes(*b"NIPCREQ1");
pub(crate) const RESPONSE_MAGIC: u64 = u64::from_le_bytes(*b"NIPCRSP1");
pub(crate) const LAYOUT_VERSION: u32 = 2;
const LINE: usize = 64;
/// How much of its next frame or slot a side prefetches after writing one
/// (the coordinator its next request frame, a worker its next answer
/// slot): a hint's worth, for a next message about this one's size.
pub(crate) const PREFETCH_NEXT: usize = 1024;
pub(crate) const REQUEST_HEADER: usize = 128;
pub(crate) const RESPONSE_HEADER: usize = 64;
const WORKER_ENTRY: usize = 32;

/// The request region's header. The coordinator writes it, `init` last with
/// release ordering.
#[repr(C)]
pub(crate) struct RequestHeader {
    // First cache line: read on every receive, written once (or at close).
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    pub(crate) workers: AtomicU32,
    pub(crate) depth: AtomicU32,
    /// 1: named semaphores, 2: in-region.
    pub(crate) sems: AtomicU32,
    pub(crate) request_capacity: AtomicU64,
    pub(crate) response_slot_size: AtomicU64,
    pub(crate) init_slot_size: AtomicU64,
    pub(crate) coordinator_pid: AtomicU32,
    /// 1 once the coordinator has shut the channel down.
    pub(crate) closed: AtomicU32,
    pub(crate) init: AtomicU32,
    _pad: AtomicU32,
    // Second cache line: `sent` changes on every send; keeping it off the
    // first line spares receivers a transfer of the words they read.
    pub(crate) coordinator_start: AtomicU64,
    /// Requests sent so far (stored after each send): tells a worker a real
    /// request from the wake-up of a close.
    pub(crate) sent: AtomicU64,
}

const _: () = assert!(std::mem::offset_of!(RequestHeader, coordinator_start) == 64);
const _: () = assert!(size_of::<RequestHeader>() <= REQUEST_HEADER);

// SAFETY: `#[repr(C)]`, atomics only, any bit pattern valid, no pointers.
unsafe impl ShmSafe for RequestHeader {}

/// The response region's header, written by the coordinator.
#[repr(C)]
pub(crate) struct ResponseHeader {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    pub(crate) workers: AtomicU32,
    pub(crate) response_slot_size: AtomicU64,
    pub(crate) init_slot_size: AtomicU64,
    pub(crate) init: AtomicU32,
}

// The offsets the crate's README documents for C peers.
const _: () = assert!(std::mem::offset_of!(ResponseHeader, magic) == 0);
const _: () = assert!(std::mem::offset_of!(ResponseHeader, version) == 8);
const _: () = assert!(std::mem::offset_of!(ResponseHeader, workers) == 12);
const _: () = assert!(std::mem::offset_of!(ResponseHeader, response_slot_size) == 16);
const _: () = assert!(std::mem::offset_of!(ResponseHeader, init_slot_size) == 24);
const _: () = assert!(std::mem::offset_of!(ResponseHeader, init) == 32);
const _: () = assert!(size_of::<ResponseHeader>() <= RESPONSE_HEADER);

// SAFETY: `#[repr(C)]`, atomics only, any bit pattern valid, no pointers.
unsafe impl ShmSafe for ResponseHeader {}

/// What a worker registers about itself.
#[repr(C)]
pub(crate) struct WorkerEntry {
    pub(crate) pid: AtomicU32,
    pub(crate) flags: AtomicU32,
    pub(crate) start_time: AtomicU64,
    /// Requests this rank has received: where a worker rejoining the rank
    /// resumes in the ring.
    pub(crate) received: AtomicU64,
    /// Answers this rank has announced: where a worker rejoining the rank
    /// resumes in its ring of answers.
    pub(crate) answered: AtomicU64,
}

// The offsets `Layout::worker_entry` documents; entries are packed at a
// stride of `WORKER_ENTRY`, so the size must be exactly that.
const _: () = assert!(std::mem::offset_of!(WorkerEntry, pid) == 0);
const _: () = assert!(std::mem::offset_of!(WorkerEntry, flags) == 4);
const _: () = assert!(std::mem::offset_of!(WorkerEntry, start_time) == 8);
const _: () = assert!(std::mem::offset_of!(WorkerEntry, received) == 16);
const _: () = assert!(std::mem::offset_of!(WorkerEntry, answered) == 24);
const _: () = assert!(size_of::<WorkerEntry>() == WORKER_ENTRY);
const _: () = assert!(WORKER_ENTRY.is_multiple_of(align_of::<WorkerEntry>()));
const _: () = assert!(RESPONSE_HEADER.is_multiple_of(align_of::<WorkerEntry>()));

// SAFETY: `#[repr(C)]`, atomics only, any bit pattern valid, no pointers.
unsafe impl ShmSafe for WorkerEntry {}

/// Bits of [`WorkerEntry::flags`].
pub(crate) mod worker_flags {
    /// The worker registered its pid and start time.
    pub(crate) const JOINED: u32 = 1;
    /// The worker closed its end cleanly; the rank may be taken again.
    pub(crate) const LEFT: u32 = 2;
    /// A worker is registering its pid (set with JOINED, cleared when done).
    pub(crate) const CLAIMING: u32 = 4;
}

/// Offsets and sizes of both regions of a channel: the contract a C or C++
/// worker follows to take part (see the crate's README), and what tests use
/// to play a misbehaving worker. Get one with
/// [`ChannelConfig::layout`](crate::ChannelConfig::layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub(crate) workers: u32,
    pub(crate) depth: u32,
    pub(crate) request_capacity: usize,
    pub(crate) response_slot_size: usize,
    pub(crate) init_slot_size: usize,
}

impl Layout {
    /// Whether this shape can be a channel's, the offsets computed from it
    /// included: every count and size in its range, an error naming the
    /// first that is not.
    pub(crate) fn check(&self, channel: &str) -> Result<()> {
        let invalid = |reason: String| {
            Err(Error::InvalidConfig {
                channel: channel.to_owned(),
                reason,
            })
        };
        if self.workers == 0 || self.workers > crate::MAX_WORKERS {
            return invalid(format!(
                "{} workers is not in 1..={}",
                self.workers,
                crate::MAX_WORKERS
            ));
        }
        if self.depth == 0 || self.depth > crate::MAX_DEPTH {
            return invalid(format!(
                "depth {} is not in 1..={}",
                self.depth,
                crate::MAX_DEPTH
            ));
        }
        for (what, bytes) in [
            ("request capacity", self.request_capacity),
            ("response slot size", self.response_slot_size),
            ("init slot size", self.init_slot_size),
        ] {
            if !(nodeipc_proto::LEN_PREFIX + 1..=crate::MAX_SLOT).contains(&bytes) {
                return invalid(format!("{what} {bytes} is not in 5..={}", crate::MAX_SLOT));
            }
        }
        Ok(())
    }

    fn frame_stride(&self) -> usize {
        self.request_capacity.next_multiple_of(LINE)
    }

    /// Offset in the request region of the frame request `index` (0, 1, …) uses.
    pub fn frame(&self, index: u64) -> usize {
        REQUEST_HEADER + (index % u64::from(self.depth)) as usize * self.frame_stride()
    }

    /// Size of the request region.
    pub fn request_size(&self) -> usize {
        REQUEST_HEADER + self.depth as usize * self.frame_stride()
    }

    fn sems_at(&self) -> usize {
        (RESPONSE_HEADER + self.workers as usize * WORKER_ENTRY).next_multiple_of(LINE)
    }

    /// Offset in the response region of an in-region semaphore.
    pub fn semaphore(&self, direction: Direction, role: Role, rank: u32) -> usize {
        let index = match (direction, role) {
            (Direction::Request, Role::Produce) => 0,
            (Direction::Request, Role::Consume) => 1,
            (Direction::Response, Role::Produce) => 2,
            (Direction::Response, Role::Consume) => 3,
        };
        self.sems_at() + (rank as usize * 4 + index) * LINE
    }

    fn responses_at(&self) -> usize {
        self.sems_at() + self.workers as usize * 4 * LINE
    }

    /// The slots of one kind for every worker: `depth` each.
    fn slots(&self) -> usize {
        self.workers as usize * self.depth as usize
    }

    /// Where slot `answer % depth` of worker `rank` sits among the slots
    /// of one kind, counted in slots.
    fn slot_index(&self, rank: u32, answer: u64) -> usize {
        rank as usize * self.depth as usize + (answer % u64::from(self.depth)) as usize
    }

    /// Offset in the response region of the response slot worker `rank`
    /// writes its answer `answer` (0, 1, …) to: slot `answer % depth` of
    /// its ring.
    pub fn response_slot(&self, rank: u32, answer: u64) -> usize {
        self.responses_at()
            + self.slot_index(rank, answer) * self.response_slot_size.next_multiple_of(LINE)
    }

    fn inits_at(&self) -> usize {
        self.responses_at() + self.slots() * self.response_slot_size.next_multiple_of(LINE)
    }

    /// Offset in the response region of the init slot worker `rank` writes
    /// its answer `answer` to, when that answer is an init answer.
    pub fn init_slot(&self, rank: u32, answer: u64) -> usize {
        self.inits_at() + self.slot_index(rank, answer) * self.init_slot_size.next_multiple_of(LINE)
    }

    /// Size of the response region.
    pub fn response_size(&self) -> usize {
        self.inits_at() + self.slots() * self.init_slot_size.next_multiple_of(LINE)
    }

    /// Offset in the response region of worker `rank`'s entry: `u32` pid,
    /// `u32` flags (1: joined, 2: left), `u64` start time (field 22 of
    /// `/proc/<pid>/stat`), `u64` requests received, `u64` answers announced.
    pub fn worker_entry(&self, rank: u32) -> usize {
        RESPONSE_HEADER + rank as usize * WORKER_ENTRY
    }

    pub(crate) fn worker<'r>(&self, region: &'r Region, rank: u32) -> &'r WorkerEntry {
        region
            .view(self.worker_entry(rank))
            .expect("the response region was checked to hold every entry")
    }

    /// The coordinator: writes both headers, `init` last.
    pub(crate) fn publish(
        &self,
        request: &Region,
        response: &Region,
        sems: SemKind,
        coordinator_pid: u32,
        coordinator_start: u64,
    ) {
        let r = request_header(request);
        r.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        r.workers.store(self.workers, Ordering::Relaxed);
        r.depth.store(self.depth, Ordering::Relaxed);
        r.sems.store(sems_code(sems), Ordering::Relaxed);
        r.request_capacity
            .store(self.request_capacity as u64, Ordering::Relaxed);
        r.response_slot_size
            .store(self.response_slot_size as u64, Ordering::Relaxed);
        r.init_slot_size
            .store(self.init_slot_size as u64, Ordering::Relaxed);
        r.coordinator_pid.store(coordinator_pid, Ordering::Relaxed);
        r.coordinator_start
            .store(coordinator_start, Ordering::Relaxed);
        r.magic.store(REQUEST_MAGIC, Ordering::Relaxed);
        let s = response_header(response);
        s.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        s.workers.store(self.workers, Ordering::Relaxed);
        s.response_slot_size
            .store(self.response_slot_size as u64, Ordering::Relaxed);
        s.init_slot_size
            .store(self.init_slot_size as u64, Ordering::Relaxed);
        s.magic.store(RESPONSE_MAGIC, Ordering::Relaxed);
        s.init.store(1, Ordering::Release);
        r.init.store(1, Ordering::Release);
    }

    /// A worker: checks what the coordinator published against its own
    /// configuration and the regions' sizes, naming both values on a mismatch.
    pub(crate) fn validate(
        &self,
        channel: &str,
        request: &Region,
        response: &Region,
        sems: SemKind,
    ) -> Result<()> {
        let mismatch = |what: &'static str, ours: u64, theirs: u64| Error::Mismatch {
            channel: channel.to_owned(),
            what,
            ours,
            theirs,
        };
        let r = request_header(request);
        let s = response_header(response);
        for (what, magic, expected) in [
            (
                "request region magic",
                r.magic.load(Ordering::Relaxed),
                REQUEST_MAGIC,
            ),
            (
                "response region magic",
                s.magic.load(Ordering::Relaxed),
                RESPONSE_MAGIC,
            ),
        ] {
            if magic != expected {
                return Err(mismatch(what, expected, magic));
            }
        }
        let checks = [
            (
                "layout version",
                LAYOUT_VERSION.into(),
                r.version.load(Ordering::Relaxed).into(),
            ),
            (
                "layout version (response region)",
                LAYOUT_VERSION.into(),
                s.version.load(Ordering::Relaxed).into(),
            ),
            (
                "worker count",
                self.workers.into(),
                r.workers.load(Ordering::Relaxed).into(),
            ),
            (
                "worker count (response region)",
                self.workers.into(),
                s.workers.load(Ordering::Relaxed).into(),
            ),
            (
                "depth",
                self.depth.into(),
                r.depth.load(Ordering::Relaxed).into(),
            ),
            (
                "semaphore kind",
                sems_code(sems).into(),
                r.sems.load(Ordering::Relaxed).into(),
            ),
            (
                "request capacity",
                self.request_capacity as u64,
                r.request_capacity.load(Ordering::Relaxed),
            ),
            (
                "response slot size",
                self.response_slot_size as u64,
                s.response_slot_size.load(Ordering::Relaxed),
            ),
            (
                "init slot size",
                self.init_slot_size as u64,
                s.init_slot_size.load(Ordering::Relaxed),
            ),
            (
                "request region size",
                self.request_size() as u64,
                (request.len() as u64).min(self.request_size() as u64),
            ),
            (
                "response region size",
                self.response_size() as u64,
                (response.len() as u64).min(self.response_size() as u64),
            ),
        ];
        for (what, ours, theirs) in checks {
            if ours != theirs {
                return Err(mismatch(what, ours, theirs));
            }
        }
        Ok(())
    }
}

/// Writes `body` as a frame exactly filling `out`: its `u32` length prefix,
/// then the bytes. Callers size `out` from a frame they checked against its
/// slot or ring frame (at most [`MAX_SLOT`](crate::MAX_SLOT), 1 GiB), so the
/// length fits the prefix.
pub(crate) fn write_bytes_frame(body: &[u8], out: &mut [u8]) {
    let (prefix, rest) = out.split_at_mut(nodeipc_proto::LEN_PREFIX);
    prefix.copy_from_slice(&(body.len() as u32).to_le_bytes());
    rest.copy_from_slice(body);
}

pub(crate) fn request_header(region: &Region) -> &RequestHeader {
    region.view(0).expect("a request region holds its header")
}

pub(crate) fn response_header(region: &Region) -> &ResponseHeader {
    region.view(0).expect("a response region holds its header")
}

/// How the headers record the semaphore kind.
pub(crate) fn sems_code(sems: SemKind) -> u32 {
    match sems {
        SemKind::Named => 1,
        SemKind::InRegion => 2,
    }
}

/// Reads the shape and semaphore kind a coordinator published, for workers
/// that received the regions without a configuration (through the
/// handshake). Only the headers' presence and initialisation are checked
/// here: the caller range-checks the shape (with the rest of its
/// configuration) before computing anything from it.
pub(crate) fn read_published(
    name: &str,
    request: &Region,
    response: &Region,
) -> Result<(Layout, SemKind)> {
    if request.len() < REQUEST_HEADER || response.len() < RESPONSE_HEADER {
        return Err(Error::Mismatch {
            channel: name.to_owned(),
            what: "region size (smaller than a header)",
            ours: REQUEST_HEADER as u64,
            theirs: request.len().min(response.len()) as u64,
        });
    }
    let r = request_header(request);
    let initialised = r.init.load(Ordering::Acquire);
    if initialised != 1 {
        return Err(Error::Mismatch {
            channel: name.to_owned(),
            what: "header initialised flag",
            ours: 1,
            theirs: initialised.into(),
        });
    }
    let s = response_header(response);
    let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let layout = Layout {
        workers: r.workers.load(Ordering::Relaxed),
        depth: r.depth.load(Ordering::Relaxed),
        request_capacity: size(r.request_capacity.load(Ordering::Relaxed)),
        response_slot_size: size(s.response_slot_size.load(Ordering::Relaxed)),
        init_slot_size: size(s.init_slot_size.load(Ordering::Relaxed)),
    };
    let sems = match r.sems.load(Ordering::Relaxed) {
        1 => SemKind::Named,
        _ => SemKind::InRegion,
    };
    Ok((layout, sems))
}
