//! The trait both kinds of semaphore implement.

use std::time::Duration;

use nodeipc_shm::wait::Spin;

use crate::Result;

/// A counting semaphore shared between processes.
///
/// Upper layers take `impl Semaphore` and so run on glibc named semaphores
/// (C peers can join) or on futex semaphores in a region (the fast path);
/// `tests/conformance.rs` holds both to the same contract.
pub trait Semaphore {
    /// Increments the count, waking one waiter if any.
    ///
    /// # Errors
    /// [`Error::Overflow`](crate::Error::Overflow) at the maximum count.
    fn post(&self) -> Result<()>;

    /// Decrements the count if it is positive; `Ok(false)` if it is zero.
    ///
    /// # Errors
    /// A system error only.
    fn try_wait(&self) -> Result<bool>;

    /// Waits up to `timeout` for a positive count and decrements it.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when the time runs out.
    fn wait_timeout(&self, timeout: Duration) -> Result<()>;

    /// As [`wait_timeout`](Semaphore::wait_timeout), polling and yielding
    /// as `spin` says before the wait sleeps: [`Spin::OVERSUBSCRIBED`]
    /// when the waiter shares its core with the thread or process that
    /// will post. A semaphore that has no polling phase of its own (a glibc
    /// named one) ignores `spin`.
    ///
    /// # Errors
    /// As [`wait_timeout`](Semaphore::wait_timeout).
    fn wait_timeout_spin(&self, timeout: Duration, spin: Spin) -> Result<()> {
        let _ = spin;
        self.wait_timeout(timeout)
    }

    /// Waits for a positive count and decrements it, with no time limit.
    /// Prefer [`wait_timeout`](Semaphore::wait_timeout) across processes: a
    /// dead poster leaves this waiting forever.
    ///
    /// # Errors
    /// A system error only.
    fn wait(&self) -> Result<()>;

    /// The current count (a snapshot: other processes change it at any time).
    ///
    /// # Errors
    /// A system error only.
    fn value(&self) -> Result<u32>;
}
