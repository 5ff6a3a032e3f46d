//! Taking connections and letting them go: accepting (paused, not spun on,
//! when descriptors run out), the peer's uid check, the control slots (an
//! idle connection gives its slot up first), the queue for the rank slot,
//! and closing connections whose deadlines passed.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nodeipc_fdpass::Credentials;

use super::MonitorServer;
use crate::Result;
use crate::bind::{self, Accepted};
use crate::conn::{Conn, Overdue, start_time_of};
use crate::refusal::{Refusal, RefusalCode};

/// Most control connections served at once. More wait in the kernel's
/// queue until a slot frees (an idle connection gives its slot up to them).
pub(super) const MAX_CONTROL_CONNECTIONS: usize = 16;

/// Most clients waiting for the rank slot at once; more are refused at once.
pub(super) const MAX_WAITING: usize = 16;

/// Most connections taken from one listener in one turn of the loop, so
/// that a flood of connections does not starve the rank.
const MAX_ACCEPTS_PER_TURN: usize = 64;

/// How long accepting pauses when descriptors or memory run out. The
/// listening socket stays readable meanwhile: polling it would spin.
pub(super) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What one accept gave the loop.
enum Take {
    /// A connection whose peer runs as our uid.
    Took(UnixStream, Credentials),
    /// One refused or lost: try the next.
    Skipped,
    /// Nothing more to take this turn.
    Stop,
}

/// Which listening socket.
#[derive(Clone, Copy)]
enum Socket {
    Rank,
    Control,
}

impl Socket {
    fn name(self) -> &'static str {
        match self {
            Socket::Rank => "rank",
            Socket::Control => "control",
        }
    }
}

impl MonitorServer {
    pub(super) fn accept_controls(&mut self) -> Result<()> {
        for _ in 0..MAX_ACCEPTS_PER_TURN {
            if !self.control_room(Instant::now()) {
                // Left in the kernel's queue until a slot frees.
                return Ok(());
            }
            let (stream, peer) = match self.accept_one(Socket::Control)? {
                Take::Took(stream, peer) => (stream, peer),
                Take::Skipped => continue,
                Take::Stop => return Ok(()),
            };
            // A slot is given up only for a newcomer that is really there.
            if !self.free_control_slot(Instant::now()) {
                let refusal = Refusal::new(
                    RefusalCode::ControlSlotsBusy,
                    format!(
                        "refused: all {MAX_CONTROL_CONNECTIONS} control connections are busy; retry later"
                    ),
                );
                self.refuse(stream, peer, refusal);
                continue;
            }
            let conn = Conn::control(stream, peer, self.deadlines(), Instant::now());
            self.controls.push(conn);
        }
        Ok(())
    }

    pub(super) fn accept_ranks(&mut self) -> Result<()> {
        for _ in 0..MAX_ACCEPTS_PER_TURN {
            let (stream, peer) = match self.accept_one(Socket::Rank)? {
                Take::Took(stream, peer) => (stream, peer),
                Take::Skipped => continue,
                Take::Stop => return Ok(()),
            };
            let now = Instant::now();
            if self.conn.is_none() && self.waiting.is_empty() {
                self.log.info_limited(
                    "rank connection",
                    &format!("rank connection from pid {}", peer.pid),
                );
                let start = start_time_of(&peer);
                let conn = Conn::rank(stream, peer, start, false, self.deadlines(), now);
                self.conn = Some(conn);
            } else if self.waiting.len() >= MAX_WAITING {
                let refusal = Refusal::new(
                    RefusalCode::RankSlotBusy,
                    format!(
                        "refused: {MAX_WAITING} clients already wait for the rank connection, which {}",
                        self.holder()
                    ),
                );
                self.refuse(stream, peer, refusal);
            } else {
                let start = start_time_of(&peer);
                let conn = Conn::rank(stream, peer, start, true, self.deadlines(), now);
                self.waiting.push_back(conn);
            }
        }
        Ok(())
    }

    /// One `accept` on `socket`. Every attempt counts against the turn's
    /// budget, refused and lost ones too, so no run of failures keeps the
    /// loop here.
    fn accept_one(&mut self, socket: Socket) -> Result<Take> {
        let listener = match socket {
            Socket::Rank => &self.rank_socket,
            Socket::Control => &self.control_socket,
        };
        Ok(match bind::accept(listener)? {
            Accepted::Stream(stream) => {
                self.end_shortage();
                match self.check_peer(stream, socket) {
                    Some((stream, peer)) => Take::Took(stream, peer),
                    None => Take::Skipped,
                }
            }
            Accepted::Empty => {
                self.end_shortage();
                Take::Stop
            }
            Accepted::Exhausted(e) => {
                self.start_shortage(socket, &e);
                Take::Stop
            }
            Accepted::Lost(why) => {
                self.log.warn_limited(
                    "lost connection",
                    &format!(
                        "{} socket: a connection was lost as it was accepted: {why}",
                        socket.name()
                    ),
                );
                Take::Skipped
            }
        })
    }

    /// Out of descriptors or memory: accepting pauses for [`ACCEPT_BACKOFF`]
    /// (the connection waits in the kernel's queue), everything else goes
    /// on: timeouts fire, connections are served, and the deadlines of idle
    /// connections free descriptors. Logged once for the whole shortage.
    fn start_shortage(&mut self, socket: Socket, e: &std::io::Error) {
        let now = Instant::now();
        self.accept_paused_until = now.checked_add(ACCEPT_BACKOFF);
        match &mut self.shortage {
            Some((_, refused)) => *refused += 1,
            None => {
                self.shortage = Some((now, 1));
                self.log.warn_limited(
                    "accept failure",
                    &format!(
                        "accept on the {} socket failed: {e}; accepting pauses for {} ms at a time (connections wait in the kernel's queue) until it succeeds, while everything else is served",
                        socket.name(),
                        ACCEPT_BACKOFF.as_millis()
                    ),
                );
            }
        }
    }

    fn end_shortage(&mut self) {
        if let Some((since, refused)) = self.shortage.take() {
            self.log.info_limited(
                "accept failure",
                &format!(
                    "accepting again after {} ms ({refused} tries failed)",
                    since.elapsed().as_millis()
                ),
            );
        }
    }

    /// The peer's credentials if it runs as our uid; refused (with the
    /// reason sent to it) otherwise.
    fn check_peer(
        &mut self,
        stream: UnixStream,
        socket: Socket,
    ) -> Option<(UnixStream, Credentials)> {
        match nodeipc_fdpass::require_peer_uid(&stream, &[]) {
            Ok(peer) => Some((stream, peer)),
            Err(e) => {
                self.log.warn_limited(
                    "refused connection",
                    &format!("{} socket: {e}", socket.name()),
                );
                Conn::refuse(
                    stream,
                    Refusal::new(RefusalCode::PermissionDenied, e.to_string()),
                );
                None
            }
        }
    }

    fn refuse(&mut self, stream: UnixStream, peer: Credentials, refusal: Refusal) {
        self.log.warn_limited(
            "refused connection",
            &format!("client pid {}: {refusal}", peer.pid),
        );
        Conn::refuse(stream, refusal);
    }

    /// Who holds the rank slot, for refusals.
    fn holder(&self) -> String {
        match (&self.conn, self.tracker.rank()) {
            (Some(_), Some(rank)) => {
                format!("global rank {} (pid {}) holds", rank.global_rank, rank.pid)
            }
            (Some(conn), None) => format!("pid {} holds (not yet registered)", conn.peer.pid),
            (None, _) => "nobody holds yet".to_owned(),
        }
    }

    /// Whether a newcomer on the control socket can be taken now: a slot is
    /// free, or an idle connection can give its slot up.
    pub(super) fn control_room(&self, now: Instant) -> bool {
        self.controls.len() < MAX_CONTROL_CONNECTIONS
            || self.control_slot_frees_at(now).is_some_and(|at| at <= now)
    }

    /// With every control slot taken, when the idlest settled connection
    /// will have been idle for the first-message timeout (and may give its
    /// slot up to a newcomer); `None` while a slot is free or none is idle.
    pub(super) fn control_slot_frees_at(&self, now: Instant) -> Option<Instant> {
        if self.controls.len() < MAX_CONTROL_CONNECTIONS {
            return None;
        }
        let limit = self.config().first_message_timeout;
        self.controls
            .iter()
            .filter_map(|c| c.idle_for(now))
            .max()
            .and_then(|idle| now.checked_add(limit.saturating_sub(idle)))
    }

    /// Frees a control slot for a newcomer if one is free or can be given
    /// up: the idlest connection idle for at least the first-message timeout
    /// is closed, with a reason. `false`: every slot is busy.
    fn free_control_slot(&mut self, now: Instant) -> bool {
        if self.controls.len() < MAX_CONTROL_CONNECTIONS {
            return true;
        }
        let limit = self.config().first_message_timeout;
        let idlest = self
            .controls
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.idle_for(now).map(|idle| (idle, i)))
            .filter(|(idle, _)| *idle >= limit)
            .max();
        let Some((idle, i)) = idlest else {
            return false;
        };
        let conn = self.controls.swap_remove(i);
        let refusal = Refusal::new(
            RefusalCode::ControlSlotsBusy,
            format!(
                "closed: idle for {} ms while all {MAX_CONTROL_CONNECTIONS} control connections were taken and another client needed one",
                idle.as_millis()
            ),
        );
        self.log.info_limited(
            "closed connection",
            &format!("control connection of pid {}: {refusal}", conn.peer.pid),
        );
        conn.close_with(refusal);
        true
    }

    /// Closes every connection whose deadline passed: one that did not
    /// prove itself in time, or left a reply unread too long.
    pub(super) fn expire_connections(&mut self, now: Instant) {
        if let Some(overdue) = self.conn.as_mut().and_then(|c| c.overdue(now)) {
            let refusal = describe(&overdue, "rank");
            if let Some(conn) = self.conn.as_mut() {
                let pid = conn.peer.pid;
                self.log.warn_limited(
                    "closed connection",
                    &format!("rank connection of pid {pid} {refusal}"),
                );
                conn.send(&refusal.to_message(), None);
            }
            self.connection_lost("the monitor closed the rank connection");
        }
        let mut i = 0;
        while i < self.controls.len() {
            match self.controls[i].overdue(now) {
                None => i += 1,
                Some(overdue) => {
                    let conn = self.controls.swap_remove(i);
                    self.close_overdue(conn, &overdue, "control");
                }
            }
        }
        let mut i = 0;
        while i < self.waiting.len() {
            match self.waiting[i].overdue(now) {
                None => i += 1,
                Some(overdue) => {
                    if let Some(conn) = self.waiting.remove(i) {
                        self.close_overdue(conn, &overdue, "waiting");
                    }
                }
            }
        }
    }

    fn close_overdue(&mut self, conn: Conn, overdue: &Overdue, what: &str) {
        let refusal = describe(overdue, what);
        self.log.warn_limited(
            "closed connection",
            &format!("{what} connection of pid {} {refusal}", conn.peer.pid),
        );
        conn.close_with(refusal);
    }

    pub(super) fn drop_hung_up_waiters(&mut self, ready: &[bool]) {
        let mut i = 0;
        self.waiting.retain(|_| {
            let keep = !ready.get(i).copied().unwrap_or(false);
            i += 1;
            keep
        });
    }

    pub(super) fn promote_waiter(&mut self) {
        // A promoted client may turn out to be gone already: then the next.
        while self.conn.is_none() {
            let Some(mut conn) = self.waiting.pop_front() else {
                return;
            };
            let now = Instant::now();
            self.log.info_limited(
                "rank connection",
                &format!(
                    "rank connection from pid {} (waited {} ms)",
                    conn.peer.pid,
                    now.saturating_duration_since(conn.since).as_millis()
                ),
            );
            conn.unpark(now);
            conn.fill();
            self.conn = Some(conn);
            // Frames it sent while waiting are answered now.
            self.serve_rank();
        }
    }

    pub(super) fn expire_waiters(&mut self, now: Instant) {
        let limit = self.config().connection_wait;
        while self
            .waiting
            .front()
            .is_some_and(|w| now.saturating_duration_since(w.since) >= limit)
        {
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            let refusal = Refusal::new(
                RefusalCode::RankSlotBusy,
                format!(
                    "refused: the monitor serves one rank connection at a time and {} it; this connection waited {} ms (limit {} ms)",
                    self.holder(),
                    now.saturating_duration_since(w.since).as_millis(),
                    limit.as_millis()
                ),
            );
            self.log.warn_limited(
                "refused connection",
                &format!("client pid {}: {refusal}", w.peer.pid),
            );
            w.close_with(refusal);
        }
    }
}

/// Why an overdue connection is closed, for it and for the log.
fn describe(overdue: &Overdue, what: &str) -> Refusal {
    match overdue {
        Overdue::Unsettled { waited, limit } => {
            let expected = match what {
                "rank" => "register (Init) within",
                "control" => "send a request within",
                _ => "send anything within",
            };
            Refusal::new(
                RefusalCode::FirstMessageDeadline,
                format!(
                    "closed: it did not {expected} {} ms of getting its connection (first_message_timeout_ms; {} ms since it connected)",
                    limit.as_millis(),
                    waited.as_millis()
                ),
            )
        }
        Overdue::Unread { waited, limit } => Refusal::new(
            RefusalCode::ReplyDeadline,
            format!(
                "closed: a reply waited {} ms for it to be read (reply_timeout_ms {})",
                waited.as_millis(),
                limit.as_millis()
            ),
        ),
    }
}
