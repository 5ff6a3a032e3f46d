//! What the Rust response-thread rows' handler reports to the sending
//! thread.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::TIMEOUT;
use super::open_loop::now_ns;

/// What a response thread has heard: how many requests were answered, the
/// first thing that was wrong, and (for an open-loop batch) when each
/// request's answers were heard.
///
/// The handler's common case (a right answer, nobody recording or
/// waiting) is one atomic add and two loads: a mutex and a clock read a
/// request would be most of what the handler costs, charged to the thread
/// row alone (lock-step checks its answers inline).
#[derive(Default)]
pub(crate) struct Progress {
    answered: AtomicU64,
    /// The count the sending thread waits for (0: nobody waits).
    awaited: AtomicU64,
    /// Set while open-loop times are recorded.
    recording: AtomicBool,
    heard: Mutex<Heard>,
    changed: Condvar,
}

#[derive(Default)]
struct Heard {
    wrong: Option<String>,
    /// The first recorded request's id.
    first: u64,
    /// Per request from `first` on, `CLOCK_MONOTONIC` nanoseconds when the
    /// handler heard its answers (0 until then); empty when not recording.
    answered_ns: Vec<u64>,
}

impl Progress {
    /// Request `id` was answered (`wrong` says what was wrong with it).
    pub(super) fn hear(&self, id: u64, wrong: Option<String>) {
        // Stamped before the count: a waiter that sees the count sees the stamp.
        if self.recording.load(Ordering::SeqCst) {
            let now = now_ns();
            let mut heard = self.lock();
            let first = heard.first;
            if let Some(at) = id
                .checked_sub(first)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| heard.answered_ns.get_mut(i))
            {
                *at = now;
            }
        }
        let wrong = wrong.is_some_and(|wrong| {
            self.lock().wrong.get_or_insert(wrong);
            true
        });
        // Counted, then the waiter looked for (both SeqCst): either it sees
        // this count before it sleeps, or this sees it waiting.
        let answered = self.answered.fetch_add(1, Ordering::SeqCst) + 1;
        let awaited = self.awaited.load(Ordering::SeqCst);
        if awaited != 0 && (answered >= awaited || wrong) {
            // Taken so the wake cannot fall between its look and its sleep.
            drop(self.lock());
            self.changed.notify_all();
        }
    }

    /// From now on, stamps when the `n` requests from id `first` on are
    /// heard.
    pub(super) fn record(&self, first: u64, n: usize) {
        let mut heard = self.lock();
        heard.first = first;
        heard.answered_ns = vec![0; n];
        self.recording.store(true, Ordering::SeqCst);
    }

    /// Waits until `target` requests were answered, then returns the
    /// recorded times and stops recording.
    pub(super) fn collect(&self, target: u64) -> io::Result<Vec<u64>> {
        self.wait_for(target)?;
        self.recording.store(false, Ordering::SeqCst);
        Ok(std::mem::take(&mut self.lock().answered_ns))
    }

    fn lock(&self) -> MutexGuard<'_, Heard> {
        self.heard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (within the channel's timeout) until `target` requests were
    /// answered.
    pub(super) fn wait_for(&self, target: u64) -> io::Result<()> {
        let heard = self.lock();
        self.awaited.store(target, Ordering::SeqCst);
        let (heard, _) = self
            .changed
            .wait_timeout_while(heard, TIMEOUT, |h| {
                self.answered.load(Ordering::SeqCst) < target && h.wrong.is_none()
            })
            .unwrap_or_else(|e| e.into_inner());
        self.awaited.store(0, Ordering::SeqCst);
        if let Some(wrong) = &heard.wrong {
            return Err(io::Error::other(wrong.clone()));
        }
        let answered = self.answered.load(Ordering::SeqCst);
        if answered < target {
            return Err(io::Error::other(format!(
                "{answered} of {target} requests answered within {TIMEOUT:?}"
            )));
        }
        Ok(())
    }
}
