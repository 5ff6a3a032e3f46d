//! What the writer knows of its readers: their positions (checked), who
//! is behind and by how much, who joined, and who is still alive.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nodeipc_fdpass::Identity;

use super::super::layout;
use super::super::{Behind, Error, Result};
use super::Writer;

impl Writer {
    /// Reads every followed reader's position, checked, and the minimum.
    pub(super) fn refresh_tails(&mut self) -> Result<()> {
        let mut min = self.head;
        for rank in 0..self.layout.readers {
            let follower = &self.followers[rank as usize];
            if follower.dropped {
                continue;
            }
            let slot = self.layout.slot(&self.region, rank);
            let tail = slot.tail.load(Ordering::Acquire);
            if tail < follower.tail || tail > self.head {
                return Err(Error::Corrupt {
                    name: self.config.name.clone(),
                    what: format!(
                        "reader {rank}'s position reads {tail}, but it was {} and {} chunks \
                         are written: another process wrote it",
                        follower.tail, self.head
                    ),
                });
            }
            self.followers[rank as usize].tail = tail;
            min = min.min(tail);
        }
        self.min_tail = min;
        Ok(())
    }

    /// The followed readers that keep `need` chunks from being free.
    pub(super) fn behind_by(&self, need: u64) -> Vec<Behind> {
        let ring = u64::from(self.layout.chunks);
        let mut behind = Vec::new();
        for (rank, follower) in self.followers.iter().enumerate() {
            if follower.dropped || self.head + need - follower.tail.min(self.head) <= ring {
                continue;
            }
            behind.push(self.describe(rank as u32));
        }
        behind
    }

    pub(super) fn describe(&self, rank: u32) -> Behind {
        let follower = &self.followers[rank as usize];
        let chunks = self.head - follower.tail;
        let messages = if chunks == 0 {
            0
        } else {
            let oldest = self.chunk_msg[(follower.tail % u64::from(self.layout.chunks)) as usize];
            self.msgs - oldest
        };
        Behind {
            rank,
            pid: follower.who.map_or(0, |who| who.pid),
            messages,
            chunks,
        }
    }

    pub(super) fn full(&self, need: u64, waited: Duration) -> Error {
        Error::Full {
            name: self.config.name.clone(),
            behind: self.behind_by(need),
            waited,
        }
    }

    /// Reader `rank`'s identity once it has joined (cached privately the
    /// first time it is seen).
    pub(super) fn joined(&mut self, rank: u32) -> Option<Identity> {
        if let Some(who) = self.followers[rank as usize].who {
            return Some(who);
        }
        let slot = self.layout.slot(&self.region, rank);
        if slot.state.load(Ordering::Acquire) < layout::JOINED {
            return None;
        }
        let who = Identity {
            pid: slot.pid.load(Ordering::Relaxed),
            start_time: slot.start_time.load(Ordering::Relaxed),
        };
        self.followers[rank as usize].who = Some(who);
        Some(who)
    }

    /// Whether reader `rank` is still there: joined and alive, or not yet
    /// joined (then only the timeout ends the wait).
    pub(super) fn check_alive(&mut self, rank: u32) -> Result<()> {
        let Some(who) = self.joined(rank) else {
            return Ok(());
        };
        let messages = self.describe(rank).messages;
        let name = self.config.name.clone();
        let state = self
            .layout
            .slot(&self.region, rank)
            .state
            .load(Ordering::Acquire);
        let alive = self.followers[rank as usize]
            .watch
            .alive(who)
            .map_err(|source| Error::FdPass {
                name: name.clone(),
                source,
            })?;
        if !alive {
            return Err(Error::ReaderDied {
                name,
                rank,
                pid: who.pid,
                messages,
            });
        }
        if state == layout::LEFT {
            return Err(Error::ReaderLeft {
                name,
                rank,
                messages,
            });
        }
        Ok(())
    }
}
