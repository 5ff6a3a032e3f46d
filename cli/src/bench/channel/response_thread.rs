//! What the Rust response-thread rows' handler reports to the sending
//! thread.

use std::io;
use std::sync::{Condvar, Mutex};

use super::TIMEOUT;

/// What a response thread has heard: how many requests were answered, and
/// the first thing that was wrong.
#[derive(Default)]
pub(crate) struct Progress {
    heard: Mutex<(u64, Option<String>)>,
    changed: Condvar,
}

impl Progress {
    pub(super) fn hear(&self, wrong: Option<String>) {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        heard.0 += 1;
        if heard.1.is_none() {
            heard.1 = wrong;
        }
        self.changed.notify_all();
    }

    /// Waits (within the channel's timeout) until `target` requests were
    /// answered.
    pub(super) fn wait_for(&self, target: u64) -> io::Result<()> {
        let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        let (heard, _) = self
            .changed
            .wait_timeout_while(heard, TIMEOUT, |h| h.0 < target && h.1.is_none())
            .unwrap_or_else(|e| e.into_inner());
        if let Some(wrong) = &heard.1 {
            return Err(io::Error::other(wrong.clone()));
        }
        if heard.0 < target {
            return Err(io::Error::other(format!(
                "{} of {target} requests answered within {TIMEOUT:?}",
                heard.0
            )));
        }
        Ok(())
    }
}
