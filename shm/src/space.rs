//! Backing a region with memory when it is made, so that a full tmpfs is an
//! error at creation instead of a `SIGBUS` at the first write past the room.
//!
//! `ftruncate` only sets a size: the pages come when first touched, and when
//! the tmpfs (or memory) has none left the touching process gets `SIGBUS`.
//! `fallocate` takes them now, or fails with `ENOSPC` while nothing else has
//! happened yet.

use std::io;
use std::os::fd::BorrowedFd;

use rustix::fs::{self, FallocateFlags, Stat};
use rustix::io::Errno;

use crate::{Error, Result};

/// Bytes reserved per `fallocate` call. The kernel gives up a call when a
/// signal arrives and frees what that call took; smaller calls keep what the
/// earlier ones took, so a process that receives signals often (a profiler's
/// timer) still gets through a large region.
const CHUNK: u64 = 16 << 20;

/// Takes the memory for bytes `0..len` of `fd` now, without changing its
/// size (`fallocate(FALLOC_FL_KEEP_SIZE)`): a creator sets the size only
/// once everything is reserved, so no opener ever maps a region the
/// filesystem could not hold.
///
/// Refused before any allocation when `len` is more than the filesystem has
/// free or the system has memory for (a memfd's filesystem has no limit of
/// its own: only memory bounds it, and running that out wakes the OOM killer).
/// `huge` regions come from the huge page pool, which the kernel checks itself.
///
/// # Errors
/// [`Error::NoSpace`] naming `object` and `len`, errno kept (`ENOSPC`, or
/// `ENOMEM` from a memory cgroup's limit); [`Error::Io`] for anything else.
pub(crate) fn reserve(fd: BorrowedFd<'_>, len: u64, object: &str, huge: bool) -> Result<()> {
    // Pages an earlier reservation (or writes) took need no room again.
    let backed = fs::fstat(fd)
        .map(|stat| (stat.st_blocks as u64).saturating_mul(512))
        .map_err(|e| Error::io("fstat", object, e))?;
    if let Some(room) = Room::measure(fd, huge)
        && room.bytes < page_round(len).saturating_sub(backed)
    {
        return Err(room.refusal(object, len, Errno::NOSPC));
    }
    let mut offset = 0;
    while offset < len {
        let step = CHUNK.min(len - offset);
        match fs::fallocate(fd, FallocateFlags::KEEP_SIZE, offset, step) {
            Ok(()) => offset += step,
            // Only this call's pages were given back: ask again.
            Err(Errno::INTR) => {}
            Err(e @ (Errno::NOSPC | Errno::NOMEM)) => {
                let room = Room::measure(fd, huge).unwrap_or(Room {
                    bytes: 0,
                    what: "left (the kernel refused the reservation)",
                });
                return Err(room.refusal(object, len, e));
            }
            Err(e) => return Err(Error::io("fallocate", object, e)),
        }
    }
    Ok(())
}

/// Whether every byte of a file is already backed by memory (`st_blocks`
/// counts 512-byte units), so [`reserve`] has nothing to do.
pub(crate) fn fully_backed(stat: &Stat) -> bool {
    (stat.st_blocks as u64).saturating_mul(512) >= stat.st_size as u64
}

fn page_round(len: u64) -> u64 {
    let page = rustix::param::page_size() as u64;
    len.div_ceil(page).saturating_mul(page)
}

/// The smallest of the limits a reservation must fit under, and which one it is.
struct Room {
    bytes: u64,
    what: &'static str,
}

impl Room {
    fn measure(fd: BorrowedFd<'_>, huge: bool) -> Option<Room> {
        if huge {
            return None;
        }
        let mut room: Option<Room> = None;
        let mut consider = |bytes: u64, what| {
            if room.as_ref().is_none_or(|r| bytes < r.bytes) {
                room = Some(Room { bytes, what });
            }
        };
        // A tmpfs mounted with a size (every /dev/shm) says what it has left;
        // the memfds' internal mount has no size (f_blocks 0).
        if let Ok(vfs) = fs::fstatvfs(fd)
            && vfs.f_blocks > 0
        {
            consider(
                vfs.f_bavail.saturating_mul(vfs.f_frsize),
                "free in its tmpfs",
            );
        }
        let info = MemInfo::read();
        if let (Some(available), Some(swap)) =
            (info.field("MemAvailable:"), info.field("SwapFree:"))
        {
            consider(
                available.saturating_add(swap).saturating_mul(1024),
                "of memory and swap available",
            );
        }
        room
    }

    fn refusal(&self, object: &str, size: u64, errno: Errno) -> Error {
        Error::NoSpace {
            name: object.to_owned(),
            size,
            available: self.bytes,
            what: self.what,
            source: io::Error::from(errno),
        }
    }
}

/// `/proc/meminfo`, read once, for the fields of the moment.
pub(crate) struct MemInfo(String);

impl MemInfo {
    pub(crate) fn read() -> MemInfo {
        MemInfo(std::fs::read_to_string("/proc/meminfo").unwrap_or_default())
    }

    /// The number after `key` (a count, or kB for sizes).
    pub(crate) fn field(&self, key: &str) -> Option<u64> {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    }
}

/// What `/proc/meminfo` says about huge pages, for error messages.
pub(crate) struct HugePages {
    pub(crate) free: u64,
    pub(crate) page_size: Option<usize>,
}

impl HugePages {
    pub(crate) fn read() -> HugePages {
        let info = MemInfo::read();
        HugePages {
            free: info.field("HugePages_Free:").unwrap_or(0),
            page_size: info.field("Hugepagesize:").map(|kb| kb as usize * 1024),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self.page_size {
            Some(size) => format!(
                "{} free huge pages of {} KiB (raise /proc/sys/vm/nr_hugepages)",
                self.free,
                size / 1024
            ),
            None => "this kernel reports no huge page support".to_owned(),
        }
    }
}
