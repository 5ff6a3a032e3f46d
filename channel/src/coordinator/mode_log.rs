//! The mode each request was sent in, for a [`Raw`](crate::Raw)
//! coordinator's response thread: written by the sending thread, read by
//! the response thread, neither taking a lock.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::mode::Mode;

/// A ring of `(request, mode)` entries, one per request, at the request's
/// index modulo the ring's length.
///
/// The sender records a request's mode before it announces the request
/// (`sent`, stored with release ordering); the response thread looks it up
/// after it saw the request sent (acquire), so the entry is there. Entries
/// carry their request's index (plus one: 0 is "none"), so a request sent
/// before recording began is told from a neighbour's entry, and answers
/// the caller's fallback.
///
/// The ring holds twice what can be outstanding (sent, not gathered):
/// `depth` requests in the ring, `depth` answers in each worker's slots,
/// and the one a worker copying requests out holds; an entry is so never
/// overwritten before it is read.
pub(super) struct ModeLog {
    entries: Box<[AtomicU64]>,
}

/// The low byte holds the mode, the rest the request's index plus one.
const MODE_BITS: u32 = 8;

impl ModeLog {
    pub(super) fn new(depth: u32) -> ModeLog {
        let len = 2 * (2 * depth as usize + 1);
        ModeLog {
            entries: (0..len).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn at(&self, index: u64) -> &AtomicU64 {
        &self.entries[(index % self.entries.len() as u64) as usize]
    }

    fn tag(index: u64) -> u64 {
        index.wrapping_add(1) << MODE_BITS
    }

    /// Forgets every entry (no request is being sent meanwhile).
    pub(super) fn clear(&self) {
        for entry in &self.entries {
            entry.store(0, Ordering::Relaxed);
        }
    }

    /// Request `index` is sent in `mode` (before it is announced).
    pub(super) fn record(&self, index: u64, mode: Mode) {
        self.at(index)
            .store(ModeLog::tag(index) | mode as u64, Ordering::Release);
    }

    /// The mode request `index` was recorded in, if it was.
    pub(super) fn mode_of(&self, index: u64) -> Option<Mode> {
        let entry = self.at(index).load(Ordering::Acquire);
        if entry == 0 || entry >> MODE_BITS != ModeLog::tag(index) >> MODE_BITS {
            return None;
        }
        Mode::from_number((entry & ((1 << MODE_BITS) - 1)) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_gets_the_mode_it_was_recorded_in_and_no_other_s() {
        let log = ModeLog::new(4);
        assert_eq!(log.mode_of(0), None, "nothing recorded yet");
        log.record(0, Mode::First);
        log.record(1, Mode::All);
        assert_eq!(log.mode_of(0), Some(Mode::First));
        assert_eq!(log.mode_of(1), Some(Mode::All));
        // The entry request 0 left is not request 18's (same place in the ring).
        assert_eq!(log.entries.len(), 18);
        assert_eq!(log.mode_of(18), None);
        log.record(18, Mode::Rank0AfterAll);
        assert_eq!(log.mode_of(18), Some(Mode::Rank0AfterAll));
        assert_eq!(
            log.mode_of(0),
            None,
            "overwritten: not taken for request 0's"
        );
        // Far indices keep their tags apart too.
        let far = u64::MAX - 3;
        log.record(far, Mode::Aggregated);
        assert_eq!(log.mode_of(far), Some(Mode::Aggregated));
        log.clear();
        assert_eq!(log.mode_of(1), None);
        assert_eq!(log.mode_of(far), None);
    }
}
