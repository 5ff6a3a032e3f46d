//! Roles: who holds each end of a queue, taking one, handing it back, and
//! telling a live holder from a dead one.
//!
//! A role is a [`PeerRecord`] (pid, joins, start time), taken and handed
//! back by its protocol, and its holder's liveness is what
//! `nodeipc-fdpass`'s one policy says: a zombie is dead on the first look,
//! and failing to look is never a death.

use nodeipc_fdpass::{Identity, PeerRecord, Taken};

use crate::error::Role;
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
pub(crate) fn me() -> Result<Identity> {
    Ok(Identity::current()?)
}

/// Takes `role` for us; `true` when it was taken over from a dead holder.
pub(crate) fn claim(queue: &str, record: &PeerRecord, role: Role, me: Identity) -> Result<bool> {
    match record.take(me, true)? {
        Taken::Vacant => Ok(false),
        Taken::FromDead(_) => Ok(true),
        Taken::Refused(pid) => Err(Error::RoleTaken {
            queue: queue.to_owned(),
            role,
            pid,
        }),
    }
}

/// Watches the peer's role: keeps a pidfd to the holder last seen, so a
/// liveness check is one `poll`, not a read of `/proc`.
#[derive(Debug, Default)]
pub(crate) struct PeerWatch {
    watch: nodeipc_fdpass::PeerWatch,
}

impl PeerWatch {
    pub(crate) fn state(&mut self, record: &PeerRecord) -> PeerState {
        let Some(holder) = record.holder() else {
            return if record.joins.load(Ordering::Acquire) == 0 {
                PeerState::NotJoined
            } else {
                PeerState::Left
            };
        };
        match self.watch.alive(holder) {
            Ok(false) => PeerState::Died(holder.pid),
            // Our own trouble (EMFILE, say) says nothing of the peer.
            Ok(true) | Err(_) => PeerState::Alive(holder.pid),
        }
    }
}
