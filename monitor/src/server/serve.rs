//! Reading and answering the rank connection and the control connections:
//! the frames go to the [`RankTracker`](crate::tracker::RankTracker), what
//! it cannot do alone (checking a registering process, reading the
//! heartbeat region) is done here.

use std::os::fd::OwnedFd;
use std::time::Instant;

use nodeipc_proto::monitor as pb;

use super::MonitorServer;
use crate::conn::{Conn, Incoming};
use crate::refusal::{Refusal, RefusalCode};
use crate::tracker::{Handled, ok, status_reply};

impl MonitorServer {
    /// Reads, answers and, when it is done, drops the rank connection.
    pub(super) fn serve_rank(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.flush();
        conn.fill();
        loop {
            let now = Instant::now();
            let Some(conn) = self.conn.as_mut() else {
                return;
            };
            let Some(incoming) = conn.next::<pb::ClientMessage>(now) else {
                break;
            };
            let reply = match incoming {
                Incoming::Message(msg) => self.on_rank_message(msg, now),
                Incoming::Malformed(refusal) | Incoming::Oversize(refusal) => {
                    let pid = self.conn.as_ref().map_or(0, |c| c.peer.pid);
                    self.log.warn_limited(
                        "malformed frame",
                        &format!("rank connection (pid {pid}): {refusal}"),
                    );
                    Some((refusal.to_message(), None))
                }
            };
            self.drain_notes();
            if let (Some((msg, fd)), Some(conn)) = (reply, self.conn.as_mut()) {
                conn.send(&msg, fd);
            }
        }
        if self.conn.as_ref().is_some_and(Conn::finished) {
            self.connection_lost("the rank closed its connection");
        }
    }

    /// One message of the rank connection: the tracker's answer (`None`:
    /// none is sent), after the registering process is checked for an `Init`.
    fn on_rank_message(
        &mut self,
        msg: pb::ClientMessage,
        now: Instant,
    ) -> Option<(pb::ServerMessage, Option<OwnedFd>)> {
        if matches!(msg.msg, Some(pb::client_message::Msg::StatusQuery(_))) {
            self.sample_region(now);
        }
        match self.tracker.handle(msg, now) {
            Handled::Reply(reply) => Some((*reply, None)),
            Handled::NoReply => None,
            Handled::Register(registration) => Some(self.register(registration)),
        }
    }

    pub(super) fn serve_controls(&mut self, ready: &[bool]) {
        for i in 0..self.controls.len() {
            if !ready.get(i).copied().unwrap_or(false) {
                continue;
            }
            self.controls[i].flush();
            self.controls[i].fill();
            while let Some(incoming) = self.controls[i].next::<pb::ControlRequest>(Instant::now()) {
                let reply = match incoming {
                    Incoming::Message(msg) => self.handle_control(msg),
                    Incoming::Malformed(refusal) | Incoming::Oversize(refusal) => {
                        let pid = self.controls[i].peer.pid;
                        self.log.warn_limited(
                            "malformed frame",
                            &format!("control connection (pid {pid}): {refusal}"),
                        );
                        refusal.to_message()
                    }
                };
                self.controls[i].send(&reply, None);
            }
        }
        self.controls.retain(|c| !c.finished());
    }

    fn handle_control(&mut self, request: pb::ControlRequest) -> pb::ServerMessage {
        use pb::control_request::Request;
        match request.request {
            Some(Request::Status(_)) => status_reply(&self.status(Instant::now())),
            Some(Request::CloseConnection(_)) => {
                if self.conn.is_none() {
                    return Refusal::new(
                        RefusalCode::NoRankConnection,
                        "no rank connection to close",
                    )
                    .to_message();
                }
                self.connection_lost("the launcher closed the rank connection");
                ok(pb::Ok::default())
            }
            None => Refusal::new(
                RefusalCode::UnknownMessage,
                "empty ControlRequest: exactly one of close_connection, status must be set",
            )
            .to_message(),
        }
    }

    /// The rank connection is gone (closed, lost, or dropped by the
    /// launcher): the tracker moves on, and a rank it forgets is let go.
    pub(super) fn connection_lost(&mut self, why: &str) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let pid = conn.peer.pid;
        drop(conn);
        self.tracker.connection_lost(why, pid, Instant::now());
        self.drain_notes();
        self.sync_process();
    }
}
