//! [`ShmSemaphore`]: a counting semaphore that is one futex word in shared
//! memory, waited on with `nodeipc_shm::wait` like every other waiter.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nodeipc_shm::ShmSafe;
use nodeipc_shm::wait::{Deadline, Spin, WaitError, wait_while, wake_if_parked};

use crate::{Error, Result, Semaphore};

/// How error messages name a futex semaphore (it has no name of its own).
const LABEL: &str = "futex semaphore";

/// A counting semaphore that lives inside a shared region: the count is a
/// 32-bit futex word, beside it the number of parked waiters.
///
/// Place it with [`Region::view`](nodeipc_shm::Region::view) at an offset
/// every process agrees on, [`init`](ShmSemaphore::init) it once before
/// any peer uses it, then share the region.
///
/// - `wait` takes the count if positive; otherwise it polls it briefly (a
///   peer on another core often posts within a cache-line round trip), then
///   yields (crossbeam's `Backoff`) for up to 50 µs — about what a wake-up
///   costs — then parks with `FUTEX_WAIT` for the time left.
/// - `post` increments the count and issues `FUTEX_WAKE` only when a waiter
///   is parked: an uncontended post is one atomic add and one load.
///
/// The futex operations are process-shared (never `FUTEX_PRIVATE_FLAG`), so
/// waiters in different processes, mapping the region at different
/// addresses, meet on the same kernel futex.
///
/// A waiter that dies while parked leaves the waiter count raised; later posts
/// then make one needless `FUTEX_WAKE` call each, and nothing else goes wrong.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use nodeipc_sem::{Semaphore, ShmSemaphore};
///
/// let region = nodeipc_shm::Region::anonymous(4096)?;
/// let sem: &ShmSemaphore = region.view(0)?;
/// sem.init(0);
/// sem.post()?;
/// sem.wait_timeout(Duration::from_millis(100))?;
/// assert!(!sem.try_wait()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[repr(C)]
#[derive(Debug)]
pub struct ShmSemaphore {
    count: AtomicU32,
    waiters: AtomicU32,
}

// SAFETY: `#[repr(C)]`, two atomic words: any bit pattern is a valid state,
// all access is atomic, and there are no pointers.
unsafe impl ShmSafe for ShmSemaphore {}

impl ShmSemaphore {
    /// Bytes a semaphore occupies in a region.
    pub const SIZE: usize = size_of::<ShmSemaphore>();

    /// The largest count, as glibc's `SEM_VALUE_MAX`: a post beyond it is refused.
    pub const MAX: u32 = i32::MAX as u32;

    /// Sets the initial count and clears the waiter count. Call it once,
    /// before the region is shared or before any peer may use this semaphore.
    pub fn init(&self, count: u32) {
        self.waiters.store(0, Ordering::Relaxed);
        self.count.store(count, Ordering::Release);
    }

    /// Waits up to `timeout`; `None` waits without limit (so does a timeout
    /// too large for the clock).
    ///
    /// Takes the count if positive; otherwise waits while it is 0 as every
    /// waiter does (`nodeipc_shm::wait`: polls, yields for about one
    /// wake-up's cost, then parks on the count), and tries again. The clock
    /// is read only once polling has failed.
    fn wait_for(&self, timeout: Option<Duration>, spin: Spin) -> Result<()> {
        let mut deadline = Deadline::after(timeout);
        loop {
            if self.take() {
                return Ok(());
            }
            let waited = wait_while(&self.count, &self.waiters, 0, &mut deadline, spin, || {
                Ok::<(), Infallible>(())
            });
            match waited {
                Ok(()) => {}
                Err(WaitError::TimedOut(waited)) => {
                    return Err(Error::Timeout {
                        name: LABEL.to_owned(),
                        waited,
                    });
                }
                Err(WaitError::Futex(e)) => return Err(Error::io("futex(FUTEX_WAIT)", LABEL, e)),
                Err(WaitError::Interrupted(waited)) => {
                    return Err(Error::Interrupted {
                        name: LABEL.to_owned(),
                        waited,
                    });
                }
                Err(WaitError::Stopped(never)) => match never {},
            }
        }
    }

    /// Takes one from a positive count.
    fn take(&self) -> bool {
        let mut count = self.count.load(Ordering::Relaxed);
        while count > 0 {
            match self.count.compare_exchange_weak(
                count,
                count - 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => count = now,
            }
        }
        false
    }
}

impl Semaphore for ShmSemaphore {
    fn post(&self) -> Result<()> {
        // One atomic add, no compare loop: a refused post takes its add back.
        // The count stays far below wrapping: it would need 2^31 posters
        // racing past the limit at once.
        let before = self.count.fetch_add(1, Ordering::SeqCst);
        if before >= ShmSemaphore::MAX {
            self.count.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::Overflow {
                name: LABEL.to_owned(),
                max: ShmSemaphore::MAX,
            });
        }
        wake_if_parked(&self.count, &self.waiters, 1)
            .map_err(|e| Error::io("futex(FUTEX_WAKE)", LABEL, e))?;
        Ok(())
    }

    fn try_wait(&self) -> Result<bool> {
        Ok(self.take())
    }

    fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        self.wait_for(Some(timeout), Spin::DEFAULT)
    }

    fn wait_timeout_spin(&self, timeout: Duration, spin: Spin) -> Result<()> {
        self.wait_for(Some(timeout), spin)
    }

    fn wait(&self) -> Result<()> {
        self.wait_for(None, Spin::DEFAULT)
    }

    fn value(&self) -> Result<u32> {
        Ok(self.count.load(Ordering::Acquire))
    }
}
