//! The atomics the ring uses, from one place: std's, or loom's under
//! `cfg(loom)` so the models check the very code the queue runs.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// A futex for the loom models: `wait` sleeps only while the word holds the
/// expected value, checked under the same lock `wake` takes, which is what
/// the kernel guarantees (the check and the sleep are one step for a waker).
#[cfg(loom)]
#[derive(Debug, Default)]
pub(crate) struct MockFutex {
    lock: loom::sync::Mutex<()>,
    cv: loom::sync::Condvar,
}

#[cfg(loom)]
impl MockFutex {
    pub(crate) fn wait(&self, word: &AtomicU32, expected: u32) {
        let guard = self.lock.lock().unwrap();
        if word.load(Ordering::SeqCst) == expected {
            drop(self.cv.wait(guard).unwrap());
        }
    }

    pub(crate) fn wake(&self) {
        let _guard = self.lock.lock().unwrap();
        self.cv.notify_all();
    }
}
