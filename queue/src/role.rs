//! Roles: who holds each end of a queue, taking one, handing it back, and
//! telling a live holder from a dead one.
//!
//! A role is a pid and that process's start time (together they name one
//! process for good: a recycled pid comes with a later start time). A role
//! is taken with a compare-and-swap on the pid: from 0, or from a holder
//! confirmed dead. The start time follows the pid; a holder seen with start
//! time 0 is in the middle of joining, and counts as alive while its pid is.

use nodeipc_fdpass::{Pidfd, open_verified, process_start_time};

use crate::error::Role;
use crate::layout::RoleWord;
use crate::sync::Ordering;
use crate::{Error, Result};

/// What became of the holder of a role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// Nobody has taken the role yet.
    NotJoined,
    /// A live process holds it.
    Alive(u32),
    /// Its holder dropped its end.
    Left,
    /// Its holder died (pid named) without handing the role back.
    Died(u32),
}

/// Our own identity, as a role records it.
pub(crate) fn me() -> Result<(u32, u64)> {
    let pid = std::process::id();
    Ok((pid, process_start_time(pid)?))
}

/// Whether the process `pid` with start time `start` (0: not yet recorded)
/// still runs. Only the kernel saying "no such process" is a death.
fn holder_alive(pid: u32, start: u64) -> Result<bool> {
    if start == 0 {
        // Still joining: its start time is not written yet.
        return match process_start_time(pid) {
            Ok(_) => Ok(true),
            Err(nodeipc_fdpass::Error::ProcessGone { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        };
    }
    // A zombie keeps its pid and start time but has exited: the pidfd
    // says so, so its roles can be taken over before its parent reaps it.
    match open_verified(pid, start) {
        Ok(fd) => Ok(fd.is_alive()),
        Err(nodeipc_fdpass::Error::ProcessGone { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Takes `role` for us; `true` when it was taken over from a dead holder.
pub(crate) fn claim(queue: &str, word: &RoleWord, role: Role, me: (u32, u64)) -> Result<bool> {
    let mut current = word.pid.load(Ordering::Acquire);
    loop {
        if current != 0 {
            let start = word.start.load(Ordering::Acquire);
            if holder_alive(current, start)? {
                return Err(Error::RoleTaken {
                    queue: queue.to_owned(),
                    role,
                    pid: current,
                });
            }
        }
        match word
            .pid
            .compare_exchange(current, me.0, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                word.start.store(me.1, Ordering::Release);
                word.joins.fetch_add(1, Ordering::AcqRel);
                return Ok(current != 0);
            }
            Err(now) => current = now,
        }
    }
}

/// Hands `role` back if we still hold it.
pub(crate) fn release(word: &RoleWord, me: (u32, u64)) {
    if word.pid.load(Ordering::Acquire) == me.0 && word.start.load(Ordering::Acquire) == me.1 {
        word.start.store(0, Ordering::Release);
        let _ = word
            .pid
            .compare_exchange(me.0, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Watches the peer's role: keeps a pidfd to the holder last seen, so a
/// liveness check is one `poll`, not a read of `/proc`.
#[derive(Debug, Default)]
pub(crate) struct PeerWatch {
    seen: Option<(u32, u64, Option<Pidfd>)>,
}

impl PeerWatch {
    pub(crate) fn state(&mut self, word: &RoleWord) -> PeerState {
        let pid = word.pid.load(Ordering::Acquire);
        if pid == 0 {
            return if word.joins.load(Ordering::Acquire) == 0 {
                PeerState::NotJoined
            } else {
                PeerState::Left
            };
        }
        let start = word.start.load(Ordering::Acquire);
        if start == 0 {
            // Joining right now: alive while its pid is.
            return match holder_alive(pid, 0) {
                Ok(false) => PeerState::Died(pid),
                _ => PeerState::Alive(pid),
            };
        }
        match &self.seen {
            Some((p, s, Some(fd))) if *p == pid && *s == start => {
                if fd.is_alive() {
                    PeerState::Alive(pid)
                } else {
                    PeerState::Died(pid)
                }
            }
            Some((p, s, None)) if *p == pid && *s == start => PeerState::Died(pid),
            _ => {
                let fd = match open_verified(pid, start) {
                    Ok(fd) => Some(fd),
                    Err(nodeipc_fdpass::Error::ProcessGone { .. }) => None,
                    // Our own trouble (EMFILE, say) says nothing of the peer.
                    Err(_) => return PeerState::Alive(pid),
                };
                // A zombie's pidfd opens: it has exited all the same, so
                // ask the pidfd, as every later look does.
                let alive = fd.as_ref().is_some_and(|fd| fd.is_alive());
                self.seen = Some((pid, start, fd));
                if alive {
                    PeerState::Alive(pid)
                } else {
                    PeerState::Died(pid)
                }
            }
        }
    }
}
