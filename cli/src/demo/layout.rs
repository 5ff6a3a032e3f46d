//! Where everything sits in the demo's region, checked before it is trusted.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nodeipc_sem::ShmSemaphore;
use nodeipc_shm::Region;

use crate::Failure;

const MAGIC: u64 = u64::from_le_bytes(*b"nipcdemo");
const LAYOUT_VERSION: u32 = 1;
const LINE: usize = 64;

// Header words, one per 8 bytes.
const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 8;
const WORKERS_AT: usize = 16;
const PAYLOAD_AT: usize = 24;
const ATTACHED_AT: usize = 32;
const STOP_AT: usize = 40;

/// The demo region: a header line, then per worker a request and a response
/// semaphore on lines of their own, then per worker a request and a response
/// buffer.
pub(super) struct Layout {
    workers: u32,
    payload: usize,
}

impl Layout {
    /// Bytes of the header, all a worker needs to read the rest.
    pub(super) const HEADER: usize = LINE;

    pub(super) fn new(workers: u32, payload: u32) -> Layout {
        Layout {
            workers,
            payload: payload as usize,
        }
    }

    fn buffer_stride(&self) -> usize {
        self.payload.next_multiple_of(LINE)
    }

    fn buffers_at(&self) -> usize {
        Self::HEADER + self.workers as usize * 2 * LINE
    }

    pub(super) fn size(&self) -> usize {
        self.buffers_at() + self.workers as usize * 2 * self.buffer_stride()
    }

    pub(super) fn workers(&self) -> u32 {
        self.workers
    }

    pub(super) fn payload(&self) -> usize {
        self.payload
    }

    pub(super) fn request_sem<'r>(
        &self,
        region: &'r Region,
        rank: u32,
    ) -> Result<&'r ShmSemaphore, Failure> {
        Ok(region.view(Self::HEADER + rank as usize * 2 * LINE)?)
    }

    pub(super) fn response_sem<'r>(
        &self,
        region: &'r Region,
        rank: u32,
    ) -> Result<&'r ShmSemaphore, Failure> {
        Ok(region.view(Self::HEADER + (rank as usize * 2 + 1) * LINE)?)
    }

    pub(super) fn request_buf(&self, rank: u32) -> usize {
        self.buffers_at() + rank as usize * 2 * self.buffer_stride()
    }

    pub(super) fn response_buf(&self, rank: u32) -> usize {
        self.request_buf(rank) + self.buffer_stride()
    }

    /// Writes the header and the semaphores; the magic word last, with
    /// release ordering, so a worker that sees it sees everything else.
    pub(super) fn init(&self, region: &Region) -> Result<(), Failure> {
        for rank in 0..self.workers {
            self.request_sem(region, rank)?.init(0);
            self.response_sem(region, rank)?.init(0);
        }
        region
            .view::<AtomicU32>(VERSION_AT)?
            .store(LAYOUT_VERSION, Ordering::Relaxed);
        region
            .view::<AtomicU32>(WORKERS_AT)?
            .store(self.workers, Ordering::Relaxed);
        region
            .view::<AtomicU64>(PAYLOAD_AT)?
            .store(self.payload as u64, Ordering::Relaxed);
        region
            .view::<AtomicU64>(MAGIC_AT)?
            .store(MAGIC, Ordering::Release);
        Ok(())
    }

    /// Reads and checks the header a coordinator wrote: magic, version, and
    /// sizes that fit the region as mapped.
    pub(super) fn read(region: &Region) -> Result<Layout, Failure> {
        let magic = region.view::<AtomicU64>(MAGIC_AT)?.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(Failure::Error(format!(
                "{}: not a demo region (magic {magic:#x})",
                region.label()
            )));
        }
        let version = region
            .view::<AtomicU32>(VERSION_AT)?
            .load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return Err(Failure::Error(format!(
                "{}: layout version {version}, this worker speaks {LAYOUT_VERSION}",
                region.label()
            )));
        }
        let workers = region
            .view::<AtomicU32>(WORKERS_AT)?
            .load(Ordering::Relaxed);
        let payload = region
            .view::<AtomicU64>(PAYLOAD_AT)?
            .load(Ordering::Relaxed);
        let fits = payload >= 8
            && payload <= region.len() as u64
            && workers >= 1
            && Layout::new(workers, payload as u32).size() <= region.len();
        if !fits {
            return Err(Failure::Error(format!(
                "{}: header says {workers} workers of {payload} bytes, which do not fit its {} bytes",
                region.label(),
                region.len()
            )));
        }
        Ok(Layout::new(workers, payload as u32))
    }

    pub(super) fn attach(&self, region: &Region) -> Result<(), Failure> {
        region
            .view::<AtomicU32>(ATTACHED_AT)?
            .fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    pub(super) fn attached(&self, region: &Region) -> Result<u32, Failure> {
        Ok(region
            .view::<AtomicU32>(ATTACHED_AT)?
            .load(Ordering::Acquire))
    }

    pub(super) fn stop(&self, region: &Region) -> Result<(), Failure> {
        region
            .view::<AtomicU32>(STOP_AT)?
            .store(1, Ordering::Release);
        Ok(())
    }

    pub(super) fn stopping(&self, region: &Region) -> Result<bool, Failure> {
        Ok(region.view::<AtomicU32>(STOP_AT)?.load(Ordering::Acquire) != 0)
    }
}
