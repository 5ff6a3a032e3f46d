//! The trait both kinds of semaphore implement.

use std::time::Duration;

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
