//! What the Rust response-thread rows' handler reports to the sending
//! thread.

use std::io;
use std::sync::{Condvar, Mutex, MutexGuard};

use super::TIMEOUT;
use super::open_loop::now_ns;

/// What a response thread has heard: how many requests were answered, the
/// first thing that was wrong, and (for an open-loop batch) when each
/// request's answers were heard.
#[derive(Default)]
pub(crate) struct Progress {
    heard: Mutex<Heard>,
    changed: Condvar,
}

#[derive(Default)]
struct Heard {
    answered: u64,
    wrong: Option<String>,
    /// The first recorded request's id.
    first: u64,
    /// Per request from `first` on, `CLOCK_MONOTONIC` nanoseconds when the
    /// handler heard its answers (0 until then); empty when not recording.
    answered_ns: Vec<u64>,
    /// The count the sending thread waits for (0: nobody waits). The
    /// handler wakes it only then: std's `notify_all` is a futex system
    /// call even with nobody waiting, which would charge one to every
    /// request of the row.
    awaited: u64,
}

impl Progress {
    /// Request `id` was answered (`wrong` says what was wrong with it).
    pub(super) fn hear(&self, id: u64, wrong: Option<String>) {
        let now = now_ns();
        let mut heard = self.lock();
        heard.answered += 1;
        if heard.wrong.is_none() {
            heard.wrong = wrong;
        }
        let first = heard.first;
        if let Some(at) = id
            .checked_sub(first)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| heard.answered_ns.get_mut(i))
        {
            *at = now;
        }
        let wake = heard.awaited != 0 && (heard.answered >= heard.awaited || heard.wrong.is_some());
        drop(heard);
        if wake {
            self.changed.notify_all();
        }
    }

    /// From now on, stamps when the `n` requests from id `first` on are
    /// heard.
    pub(super) fn record(&self, first: u64, n: usize) {
        let mut heard = self.lock();
        heard.first = first;
        heard.answered_ns = vec![0; n];
    }

    /// Waits until `target` requests were answered, then returns the
    /// recorded times and stops recording.
    pub(super) fn collect(&self, target: u64) -> io::Result<Vec<u64>> {
        self.wait_for(target)?;
        Ok(std::mem::take(&mut self.lock().answered_ns))
    }

    fn lock(&self) -> MutexGuard<'_, Heard> {
        self.heard.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (within the channel's timeout) until `target` requests were
    /// answered.
    pub(super) fn wait_for(&self, target: u64) -> io::Result<()> {
        let mut heard = self.lock();
        heard.awaited = target;
        let (mut heard, _) = self
            .changed
            .wait_timeout_while(heard, TIMEOUT, |h| h.answered < target && h.wrong.is_none())
            .unwrap_or_else(|e| e.into_inner());
        heard.awaited = 0;
        if let Some(wrong) = &heard.wrong {
            return Err(io::Error::other(wrong.clone()));
        }
        if heard.answered < target {
            return Err(io::Error::other(format!(
                "{} of {target} requests answered within {TIMEOUT:?}",
                heard.answered
            )));
        }
        Ok(())
    }
}
