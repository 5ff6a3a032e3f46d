//! A peer's liveness, decided in one place: whether the process recorded as
//! `{pid, start time}` still runs, and the record shared layouts keep of
//! who holds a place in them.
//!
//! The policy, for every layer that asks (queue roles, pool handles, a
//! rank group's vault, a channel's worker and coordinator entries):
//!
//! - **A zombie is dead on the first look.** A process killed and not yet
//!   reaped keeps its pid and its `/proc/<pid>/stat` start time; its pidfd
//!   is readable all the same. Every answer goes through a pidfd, so what a
//!   parent has not reaped yet is not taken for alive.
//! - **A pidfd where one is held.** A [`PeerWatch`] keeps the pidfd it
//!   opened for the holder it last saw: each later look is one `poll`, and
//!   it cannot come to mean a later process that got the pid.
//! - **Failing to look is an error, never a death.** Only the kernel saying
//!   there is no such process (`ESRCH`, `ENOENT`) or a start time that
//!   changed makes a peer dead; `EMFILE`, an unmounted `/proc` or a failed
//!   `poll` come back as [`Error::ProcessIo`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;

use crate::procstat::start_time;
use crate::{Error, Pidfd, Result, open_verified};

/// A process, named for good: its pid and its start time (clock ticks since
/// boot, `/proc/<pid>/stat` field 22). A recycled pid comes with a later
/// start time, so the pair never names two processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The pid.
    pub pid: u32,
    /// Its start time; 0 in a [`PeerRecord`] whose holder is still joining.
    pub start_time: u64,
}

impl Identity {
    /// This process: its pid and start time, read from `/proc/<pid>/stat`
    /// now (not cached, so a forked child names itself).
    ///
    /// # Errors
    /// [`Error::ProcessIo`] when the stat file cannot be read (`EMFILE`, say).
    ///
    /// # References
    /// - [Linux `proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html), field 22 `starttime`
    #[doc(alias = "starttime")]
    pub fn current() -> Result<Identity> {
        let pid = std::process::id();
        Ok(Identity {
            pid,
            start_time: start_time(pid)?,
        })
    }
}

/// Whether the process recorded as `pid`, started at `start_time`, still
/// runs. `start_time` 0 means the record's holder is still joining (its
/// start time not written yet): the pid alone is asked about then.
///
/// Opens a pidfd (`pidfd_open`), checks the start time in
/// `/proc/<pid>/stat` against the record, and polls the pidfd: readable
/// means exited, which a zombie has.
///
/// # Errors
/// [`Error::ProcessIo`] naming the pid when the kernel could not be asked
/// (`EMFILE`, `/proc` not mounted, a failed `poll`): never reported as a
/// death. [`Error::Unsupported`] before Linux 5.3.
///
/// # Examples
/// ```
/// let me = nodeipc_fdpass::Identity::current()?;
/// assert!(nodeipc_fdpass::peer_alive(me.pid, me.start_time)?);
/// // A start time this process does not have: another process, long gone.
/// assert!(!nodeipc_fdpass::peer_alive(me.pid, me.start_time + 1)?);
/// # Ok::<(), nodeipc_fdpass::Error>(())
/// ```
///
/// # References
/// - [Linux `pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
/// - [Linux `proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)
#[doc(alias = "pidfd_open")]
#[doc(alias = "zombie")]
pub fn peer_alive(pid: u32, start_time: u64) -> Result<bool> {
    Ok(open_if_alive(pid, start_time)?.is_some())
}

/// A pidfd for the process recorded as `pid`, started at `start_time`, if
/// [`peer_alive`] would say it runs; `None` if it is gone (exited, a
/// zombie, or its pid now names a later process). For a layer that keeps
/// the pidfd to ask [`Pidfd::has_exited`] (or [`first_exited`]) later.
///
/// # Errors
/// As [`peer_alive`].
///
/// # References
/// - [Linux `pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
#[doc(alias = "pidfd_open")]
pub fn open_if_alive(pid: u32, start_time: u64) -> Result<Option<Pidfd>> {
    match open(pid, start_time)? {
        Some(pidfd) if !pidfd.has_exited()? => Ok(Some(pidfd)),
        _ => Ok(None),
    }
}

/// A pidfd for the recorded process, `None` when the kernel says it is gone
/// (or its pid now names a later process).
fn open(pid: u32, start_time: u64) -> Result<Option<Pidfd>> {
    let opened = if start_time == 0 {
        Pidfd::open(pid)
    } else {
        open_verified(pid, start_time)
    };
    match opened {
        Ok(pidfd) => Ok(Some(pidfd)),
        Err(Error::ProcessGone { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Which of `pidfds` names a process that has exited (a zombie has), by
/// one `poll` that does not wait: the index of the first, or `None`.
///
/// # Errors
/// [`Error::Io`] from `poll` (`ENOMEM`, say): never reported as a death.
///
/// # References
/// - [Linux `pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html), "Use cases for PID file descriptors"
/// - [Linux `poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
#[doc(alias = "poll")]
pub fn first_exited(pidfds: &[&Pidfd]) -> Result<Option<usize>> {
    let mut polls: Vec<PollFd<'_>> = pidfds
        .iter()
        .map(|p| PollFd::new(*p, PollFlags::IN))
        .collect();
    let ready = loop {
        match rustix::event::poll(&mut polls, Some(&Timespec::default())) {
            Err(Errno::INTR) => continue,
            other => break other.map_err(|e| Error::io("poll(pidfds)", e))?,
        }
    };
    Ok(if ready == 0 {
        None
    } else {
        polls.iter().position(|p| exited(p.revents()))
    })
}

/// What a pidfd's `poll` events say: readable (exited) or hung up (exited
/// and reaped) is an exit; any other event is no news about the process.
pub(crate) fn exited(revents: PollFlags) -> bool {
    revents.intersects(PollFlags::IN | PollFlags::HUP)
}

/// A watch on one place's holder that keeps the pidfd it opened: asked
/// again about the same `{pid, start time}`, it polls that pidfd instead of
/// reading `/proc`. A holder once seen dead stays dead; a new holder gets a
/// new pidfd. A holder still joining (start time 0) is asked about afresh
/// each time.
#[derive(Debug, Default)]
pub struct PeerWatch {
    /// The holder last seen and its pidfd (`None`: gone).
    seen: Option<(Identity, Option<Pidfd>)>,
}

impl PeerWatch {
    /// A watch that has seen nobody yet.
    pub fn new() -> PeerWatch {
        PeerWatch::default()
    }

    /// Whether `holder` still runs, as [`peer_alive`] decides.
    ///
    /// # Errors
    /// As [`peer_alive`]; a failure is not remembered, the next look asks again.
    ///
    /// # References
    /// - [Linux `pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
    /// - [Linux `poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
    #[doc(alias = "pidfd_open")]
    #[doc(alias = "poll")]
    pub fn alive(&mut self, holder: Identity) -> Result<bool> {
        if holder.start_time == 0 {
            return peer_alive(holder.pid, 0);
        }
        match &self.seen {
            Some((seen, Some(pidfd))) if *seen == holder => return Ok(!pidfd.has_exited()?),
            Some((seen, None)) if *seen == holder => return Ok(false),
            _ => {}
        }
        let pidfd = open(holder.pid, holder.start_time)?;
        let alive = match &pidfd {
            Some(pidfd) => !pidfd.has_exited()?,
            None => false,
        };
        self.seen = Some((holder, pidfd));
        Ok(alive)
    }

    /// The pidfd of the holder last seen alive or dead, if one is held.
    pub fn pidfd(&self) -> Option<&Pidfd> {
        self.seen.as_ref().and_then(|(_, pidfd)| pidfd.as_ref())
    }
}

/// Who holds a place in a shared layout (a queue's role, a pool's handle):
/// 16 bytes, `#[repr(C)]`, native-endian words.
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 4 | pid (0: vacant) |
/// | 4 | 4 | joins: times the place was taken (0: never) |
/// | 8 | 8 | start time of the pid (0: its holder is still joining) |
///
/// Made of atomics only: any bit pattern is a valid value and it holds no
/// pointer, so it can live in memory other processes write. Its protocol,
/// for peers in any language:
///
/// - **Take** ([`take`](PeerRecord::take)): read the pid. Not 0: read the
///   start time, ask [`peer_alive`]; a live holder refuses. A dead one is
///   taken over: first the start time is set from its value to 0 with a
///   compare-and-swap (so nobody takes us, mid-join, for a process with
///   the dead one's start time), then the pid is swapped from the dead
///   holder's (or 0) to ours, then our start time is stored (release), then
///   `joins` is incremented. Any compare-and-swap that fails starts over.
/// - **Leave** ([`leave`](PeerRecord::leave)): the start time set to 0,
///   then the pid swapped from ours to 0. `joins` stays, so a vacant place
///   with `joins` > 0 was left (a queue reports `PeerLeft`).
/// - **Vacate a dead holder** ([`vacate`](PeerRecord::vacate)): take the
///   place over (as above, so `joins` counts it), then leave it. Never by
///   writing its words directly: two processes may start within one clock
///   tick, so a start time alone does not tell the dead holder from a
///   process that took its place meanwhile.
/// - **Read**: pid (acquire), then start time (acquire). Pid 0: vacant.
///   Start time 0: the holder is joining; it is alive while its pid is.
#[repr(C)]
#[derive(Debug, Default)]
pub struct PeerRecord {
    /// The holder's pid; 0: vacant.
    pub pid: AtomicU32,
    /// Times the place was taken.
    pub joins: AtomicU32,
    /// The holder's start time; 0 while it joins.
    pub start: AtomicU64,
}

const _: () = {
    assert!(size_of::<PeerRecord>() == 16);
    assert!(std::mem::offset_of!(PeerRecord, pid) == 0);
    assert!(std::mem::offset_of!(PeerRecord, joins) == 4);
    assert!(std::mem::offset_of!(PeerRecord, start) == 8);
};

/// What [`PeerRecord::take`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// The place was vacant; it is ours.
    Vacant,
    /// Its holder was dead (pid named); the place is ours.
    FromDead(u32),
    /// A live process holds it (pid named; with `take_over` false, any holder).
    Refused(u32),
}

/// Compare-and-swaps a hostile writer can make fail forever: past this
/// many, [`PeerRecord::take`] gives up and names the holder last seen.
const TAKE_ATTEMPTS: u32 = 1000;

impl PeerRecord {
    /// The holder, if any: pid, then start time (0: still joining).
    pub fn holder(&self) -> Option<Identity> {
        let pid = self.pid.load(Ordering::Acquire);
        (pid != 0).then(|| Identity {
            pid,
            start_time: self.start.load(Ordering::Acquire),
        })
    }

    /// Takes the place for `me`: vacant, or (with `take_over`) from a
    /// holder [`peer_alive`] says is dead. See the type's protocol.
    ///
    /// # Errors
    /// As [`peer_alive`]: a holder we could not look at is never taken over.
    pub fn take(&self, me: Identity, take_over: bool) -> Result<Taken> {
        let mut pid = 0;
        for _ in 0..TAKE_ATTEMPTS {
            pid = self.pid.load(Ordering::Acquire);
            if pid != 0 {
                if !take_over {
                    return Ok(Taken::Refused(pid));
                }
                let start = self.start.load(Ordering::Acquire);
                if peer_alive(pid, start)? {
                    return Ok(Taken::Refused(pid));
                }
                // Its start time to 0 first (see the protocol). Should a
                // process that took the place meanwhile have the same start
                // time (started in the same clock tick), this zeroes its
                // start time instead: it then reads as joining, judged by
                // its pid alone: alive while it runs, never taken over.
                if start != 0
                    && self
                        .start
                        .compare_exchange(start, 0, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                {
                    continue;
                }
            }
            if self
                .pid
                .compare_exchange(pid, me.pid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.start.store(me.start_time, Ordering::Release);
                self.joins.fetch_add(1, Ordering::AcqRel);
                return Ok(if pid == 0 {
                    Taken::Vacant
                } else {
                    Taken::FromDead(pid)
                });
            }
        }
        Ok(Taken::Refused(pid))
    }

    /// Hands the place back if `me` still holds it.
    pub fn leave(&self, me: Identity) {
        if self.holder() == Some(me) {
            self.start.store(0, Ordering::Release);
            let _ = self
                .pid
                .compare_exchange(me.pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Makes the place of `dead` (a holder [`peer_alive`] said is dead)
    /// vacant, by taking it over as `me` and leaving it; `false` when it
    /// held someone else by then (taken over, or left, meanwhile).
    ///
    /// # Errors
    /// As [`peer_alive`].
    pub fn vacate(&self, dead: Identity, me: Identity) -> Result<bool> {
        let taken = self.take(me, true)?;
        if matches!(taken, Taken::Vacant | Taken::FromDead(_)) {
            self.leave(me);
        }
        Ok(taken == Taken::FromDead(dead.pid))
    }
}

#[cfg(test)]
mod tests {
    use super::{Identity, PeerRecord, PeerWatch, Taken, peer_alive};

    fn exited_child() -> Identity {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start_time = crate::process_start_time(pid).unwrap();
        child.wait().unwrap();
        Identity { pid, start_time }
    }

    #[test]
    fn we_are_alive_and_a_later_start_time_is_not_us() {
        let me = Identity::current().unwrap();
        assert!(peer_alive(me.pid, me.start_time).unwrap());
        assert!(peer_alive(me.pid, 0).unwrap(), "joining: the pid alone");
        assert!(!peer_alive(me.pid, me.start_time + 1).unwrap());
        let mut watch = PeerWatch::new();
        assert!(watch.alive(me).unwrap());
        assert_eq!(watch.pidfd().map(|p| p.pid()), Some(me.pid));
    }

    #[test]
    fn a_reaped_process_and_no_process_are_dead() {
        let gone = exited_child();
        assert!(!peer_alive(gone.pid, gone.start_time).unwrap());
        assert!(!peer_alive(i32::MAX as u32, 0).unwrap());
        assert!(!peer_alive(0, 0).unwrap());
        let mut watch = PeerWatch::new();
        assert!(!watch.alive(gone).unwrap());
        assert!(!watch.alive(gone).unwrap(), "dead stays dead");
    }

    #[test]
    fn a_record_is_taken_left_taken_over_and_vacated() {
        let record = PeerRecord::default();
        let me = Identity::current().unwrap();
        assert_eq!(record.holder(), None);
        assert_eq!(record.take(me, true).unwrap(), Taken::Vacant);
        assert_eq!(record.holder(), Some(me));
        assert_eq!(record.joins.load(super::Ordering::Relaxed), 1);
        assert_eq!(record.take(me, true).unwrap(), Taken::Refused(me.pid));
        record.leave(me);
        assert_eq!(record.holder(), None);
        assert_eq!(record.joins.load(super::Ordering::Relaxed), 1, "left");
        // A dead holder: refused without take-over, taken over with it.
        let gone = exited_child();
        assert_eq!(record.take(gone, false).unwrap(), Taken::Vacant);
        assert_eq!(record.take(me, false).unwrap(), Taken::Refused(gone.pid));
        assert_eq!(record.take(me, true).unwrap(), Taken::FromDead(gone.pid));
        assert_eq!(record.holder(), Some(me));
        // Leaving needs the same process: another start time is not us.
        record.leave(Identity {
            start_time: me.start_time + 1,
            ..me
        });
        assert_eq!(record.holder(), Some(me));
        record.leave(me);
        // Vacating a dead holder; not a live one that took its place
        // meanwhile, even with the same start time (a child started within
        // the clock tick this test started in has it: a start time alone
        // never tells them apart).
        assert_eq!(record.take(gone, false).unwrap(), Taken::Vacant);
        assert!(record.vacate(gone, me).unwrap());
        assert_eq!(record.holder(), None);
        assert_eq!(record.take(me, false).unwrap(), Taken::Vacant);
        assert!(!record.vacate(gone, me).unwrap());
        assert_eq!(record.holder(), Some(me));
        assert_eq!(record.joins.load(super::Ordering::Relaxed), 6);
    }
}
