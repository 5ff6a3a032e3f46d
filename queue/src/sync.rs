//! The atomics the ring uses, from one place: std's, or loom's under
//! `cfg(loom)` so the models check the very code the queue runs.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// Where the rings' sleepers park, one per header: the kernel's futex on
/// the word itself (nothing stored: a zero-sized field), or, in the loom
/// models, a mock that sleeps only while the word holds the expected value,
/// checked under the same lock `wake_all` takes, which is what the kernel
/// guarantees (the check and the sleep are one step for a waker).
#[derive(Debug, Default)]
pub(crate) struct Futex {
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cv: loom::sync::Condvar,
}

impl Futex {
    /// The waker's half of the park protocol: our store (done), then a
    /// SeqCst fence, then the parked count. A waiter announces itself
    /// (SeqCst read-modify-write) before it rechecks the word, so either it
    /// sees our store or we see its announcement.
    #[inline]
    pub(crate) fn wake(&self, word: &AtomicU32, parked: &AtomicU32) {
        fence(Ordering::SeqCst);
        if parked.load(Ordering::Relaxed) != 0 {
            self.wake_all(word);
        }
    }

    /// Wakes every sleeper on `word`.
    #[cfg(not(loom))]
    #[cold]
    pub(crate) fn wake_all(&self, word: &AtomicU32) {
        // EFAULT/EINVAL cannot happen on a live mapping; a lost wake-up
        // would still end at the waiter's next slice.
        let _ = nodeipc_shm::wait::unpark(word, u32::MAX);
    }

    /// Wakes every sleeper (on any word: the mock has one queue).
    #[cfg(loom)]
    pub(crate) fn wake_all(&self, _word: &AtomicU32) {
        let _guard = self.lock.lock().unwrap();
        self.cv.notify_all();
    }

    /// The waiter's half, as `nodeipc_shm::wait::wait_while` parks:
    /// announce, recheck, sleep while unchanged, withdraw. For the loom
    /// models, which cannot run the real one's clock and spin phases.
    #[cfg(loom)]
    pub(crate) fn park_while(&self, word: &AtomicU32, parked: &AtomicU32, expected: u32) {
        parked.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let guard = self.lock.lock().unwrap();
        if word.load(Ordering::SeqCst) == expected {
            drop(self.cv.wait(guard).unwrap());
        }
        parked.fetch_sub(1, Ordering::SeqCst);
    }
}
