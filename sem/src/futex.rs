//! [`ShmSemaphore`]: a counting semaphore that is one futex word in shared
//! memory; and the crate's one futex wrapper, which both kinds of semaphore use.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use nodeipc_shm::ShmSafe;
use rustix::io::Errno;
use rustix::thread::futex;
use rustix::time::{ClockId, Timespec};

use crate::{Error, Result, Semaphore};

/// How a futex wait ended without an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parked {
    /// Woken, or the word no longer held the expected value (`EAGAIN`), or a
    /// signal arrived (`EINTR`): the caller looks at the word again.
    Woken,
    /// The timeout or deadline passed (`ETIMEDOUT`).
    TimedOut,
}

/// What a futex wait returned: the three outcomes every waiter handles the
/// same way, or any other errno as an error (never an abort, as glibc's own
/// futex wrappers do on an errno they do not expect, `EINVAL` included).
fn parked(result: rustix::io::Result<()>) -> std::result::Result<Parked, Errno> {
    match result {
        Ok(()) | Err(Errno::AGAIN | Errno::INTR) => Ok(Parked::Woken),
        Err(Errno::TIMEDOUT) => Ok(Parked::TimedOut),
        Err(e) => Err(e),
    }
}

/// Sleeps while `word` holds `expected`, for at most `timeout` (`None`: no
/// limit): `FUTEX_WAIT` on a shared futex (never `FUTEX_PRIVATE_FLAG`), so
/// waiters of other processes, mapping the word at other addresses, meet on
/// the same kernel futex.
pub(crate) fn park_for(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> std::result::Result<Parked, Errno> {
    let timespec = timeout.map(|t| Timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(t.subsec_nanos()),
    });
    parked(futex::wait(
        word,
        futex::Flags::empty(),
        expected,
        timespec.as_ref(),
    ))
}

/// As [`park_for`], until an absolute `deadline` on the monotonic clock
/// (`FUTEX_WAIT_BITSET` matching any waker, as glibc's semaphores wait):
/// a wait interrupted and resumed keeps its deadline.
pub(crate) fn park_until(
    word: &AtomicU32,
    expected: u32,
    deadline: Option<&Timespec>,
) -> std::result::Result<Parked, Errno> {
    const MATCH_ANY: NonZeroU32 = NonZeroU32::MAX;
    parked(futex::wait_bitset(
        word,
        futex::Flags::empty(),
        expected,
        deadline,
        MATCH_ANY,
    ))
}

/// Wakes up to `count` waiters parked on `word` (shared futex).
pub(crate) fn unpark(word: &AtomicU32, count: u32) -> std::result::Result<usize, Errno> {
    futex::wake(word, futex::Flags::empty(), count)
}

/// The monotonic clock `timeout` from now, for [`park_until`]; a timeout past
/// what a `timespec` holds becomes the latest time it holds (no overflow, no
/// panic: in effect, no limit).
pub(crate) fn deadline_after(timeout: Duration) -> Timespec {
    let now = rustix::time::clock_gettime(ClockId::Monotonic);
    let nanos = now.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
    let secs = i64::try_from(timeout.as_secs())
        .ok()
        .and_then(|s| now.tv_sec.checked_add(s))
        .and_then(|s| s.checked_add((nanos / 1_000_000_000) as i64));
    match secs {
        Some(tv_sec) => Timespec {
            tv_sec,
            tv_nsec: (nanos % 1_000_000_000) as i64,
        },
        None => Timespec {
            tv_sec: i64::MAX,
            tv_nsec: 999_999_999,
        },
    }
}

/// How error messages name a futex semaphore (it has no name of its own).
const LABEL: &str = "futex semaphore";

/// How many times a waiter looks at the count before it starts yielding:
/// a few microseconds of `PAUSE`, far less than one futex wake-up costs.
const SPIN_POLLS: u32 = 128;

/// How long a waiter keeps yielding before it parks: about what one futex
/// wake-up costs on a virtual machine (a parked waiter pays the wake-up on
/// top of the wait). Yielding, unlike spinning, gives the core away at once
/// when another process wants it, so more processes than cores lose little.
const YIELD_FOR: Duration = Duration::from_micros(50);

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

    /// Waits up to `timeout`; `None` waits without limit.
    ///
    /// Three phases, cheapest first. A peer on another core usually posts
    /// within a few cache-line transfers, so the waiter first polls the count
    /// with plain loads at a constant interval (an exponential back-off would
    /// leave gaps of microseconds between looks and miss the post by that
    /// much). Then it yields (crossbeam's `Backoff`) for up to
    /// [`YIELD_FOR`], which lets the poster run when there are more processes
    /// than cores and catches a post that is a few microseconds of work away
    /// (a large request being encoded) without paying a wake-up. Then it
    /// parks. The clock is read only once polling has failed: on this kind of
    /// machine a clock read costs as much as a cache-line round trip.
    fn wait_for(&self, timeout: Option<Duration>) -> Result<()> {
        if self.take() {
            return Ok(());
        }
        for _ in 0..SPIN_POLLS {
            std::hint::spin_loop();
            if self.count.load(Ordering::Relaxed) != 0 && self.take() {
                return Ok(());
            }
        }
        let start = Instant::now();
        // A timeout past what an `Instant` can hold is no limit at all.
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let backoff = Backoff::new();
        loop {
            if self.take() {
                return Ok(());
            }
            let now = Instant::now();
            let left = match deadline {
                Some(deadline) if now >= deadline => {
                    return Err(Error::Timeout {
                        name: LABEL.to_owned(),
                        waited: now - start,
                    });
                }
                Some(deadline) => Some(deadline - now),
                None => None,
            };
            if backoff.is_completed() && now - start >= YIELD_FOR {
                self.park(left)?;
            } else {
                backoff.snooze();
            }
        }
    }

    /// Announces a waiter, then sleeps while the count is still 0.
    ///
    /// The waiter's increment of `waiters` and the poster's increment of
    /// `count` are both SeqCst, as are the loads that follow them: either the
    /// poster sees the waiter (and wakes it), or the waiter sees the count
    /// (and does not sleep). `FUTEX_WAIT` itself rechecks the count atomically.
    fn park(&self, timeout: Option<Duration>) -> Result<()> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = if self.count.load(Ordering::SeqCst) == 0 {
            // Woken, count changed before we slept, timed out, or a signal:
            // the caller re-checks the count and the deadline either way.
            park_for(&self.count, 0, timeout)
                .map(drop)
                .map_err(|e| Error::io("futex(FUTEX_WAIT)", LABEL, e))
        } else {
            Ok(())
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
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
        if self.waiters.load(Ordering::SeqCst) > 0 {
            unpark(&self.count, 1).map_err(|e| Error::io("futex(FUTEX_WAKE)", LABEL, e))?;
        }
        Ok(())
    }

    fn try_wait(&self) -> Result<bool> {
        Ok(self.take())
    }

    fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        self.wait_for(Some(timeout))
    }

    fn wait(&self) -> Result<()> {
        self.wait_for(None)
    }

    fn value(&self) -> Result<u32> {
        Ok(self.count.load(Ordering::Acquire))
    }
}
