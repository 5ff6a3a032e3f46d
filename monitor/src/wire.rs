//! The client side of a monitor connection: a bounded connect, and framed
//! requests whose every failure names the request and the monitor's socket
//! (a timeout is a timeout, never a bare `EAGAIN`).

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodeipc_proto::monitor as pb;
use nodeipc_proto::{read_frame, write_frame};
use prost::Message;

use crate::conn::MAX_FRAME;
use crate::{Error, MonitorStatus, RefusalCode, Result};

/// Connects, retrying while the socket is missing, nobody listens yet or
/// its backlog is full (a stopped monitor), for at most `timeout`.
pub(crate) fn connect_retrying(path: &Path, timeout: Duration) -> Result<UnixStream> {
    check_timeout(path, timeout)?;
    let stream = nodeipc_fdpass::connect_unix_when_up(path, timeout).map_err(|e| match e {
        nodeipc_fdpass::Error::ConnectTimeout { path, waited, last } => {
            Error::ConnectTimeout { path, waited, last }
        }
        other => Error::Fdpass(other),
    })?;
    // Only a monitor of our own uid gets our Init (and hands us a region): a
    // stranger may have bound the path.
    nodeipc_fdpass::require_peer_uid(&stream, &[])?;
    set_timeouts(&stream, path, timeout)?;
    Ok(stream)
}

/// A zero timeout cannot bound a reply (the socket takes 0 as "forever").
pub(crate) fn check_timeout(path: &Path, timeout: Duration) -> Result<()> {
    if timeout.is_zero() {
        return Err(Error::config(format!(
            "a client timeout of 0 leaves the monitor at {} no time to answer; give at least 1 ms",
            path.display()
        )));
    }
    Ok(())
}

pub(crate) fn set_timeouts(stream: &UnixStream, path: &Path, timeout: Duration) -> Result<()> {
    let io = |e| Error::io("set socket timeout", path.display(), e);
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)
}

/// A socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`) shows as `EAGAIN`.
pub(crate) fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// One end of a framed stream to a monitor, with the socket's path for errors.
#[derive(Debug)]
pub(crate) struct Wire {
    pub(crate) stream: UnixStream,
    pub(crate) path: PathBuf,
    pub(crate) scratch: Vec<u8>,
}

impl Wire {
    pub(crate) fn error(
        &self,
        op: String,
        started: Instant,
        source: nodeipc_proto::Error,
    ) -> Error {
        match source {
            nodeipc_proto::Error::Io(e) if timed_out(&e) => {
                self.timeout(op, started, String::new())
            }
            source => Error::Frame {
                op,
                path: self.path.clone(),
                source,
            },
        }
    }

    pub(crate) fn timeout(&self, op: String, started: Instant, detail: String) -> Error {
        Error::Timeout {
            op,
            path: self.path.clone(),
            waited: started.elapsed(),
            detail,
        }
    }

    pub(crate) fn send<Q: Message>(&mut self, what: &'static str, request: &Q) -> Result<()> {
        let started = Instant::now();
        write_frame(&mut self.stream, request)
            .map_err(|e| self.error(format!("sending {what}"), started, e))
    }

    /// One request, one reply.
    pub(crate) fn call<Q: Message>(
        &mut self,
        what: &'static str,
        request: &Q,
    ) -> Result<pb::server_message::Msg> {
        if let Err(sent) = self.send(what, request) {
            return Err(self.refusal_after_hang_up(what, sent));
        }
        self.read_reply(what)
    }

    /// A monitor that refuses a client outright (too many waiting for the
    /// rank slot, say) answers and closes without reading: the write fails,
    /// yet its reasons wait to be read. They beat a bare broken pipe.
    pub(crate) fn refusal_after_hang_up(&mut self, what: &'static str, sent: Error) -> Error {
        let hung_up = matches!(
            &sent,
            Error::Frame { source: nodeipc_proto::Error::Io(e), .. }
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                )
        );
        if !hung_up {
            return sent;
        }
        match self.read_reply(what) {
            Ok(pb::server_message::Msg::Error(e)) => self.refused(what, e),
            _ => sent,
        }
    }

    pub(crate) fn read_reply(&mut self, what: &'static str) -> Result<pb::server_message::Msg> {
        let started = Instant::now();
        let reply: pb::ServerMessage =
            read_frame(&mut self.stream, MAX_FRAME, &mut self.scratch)
                .map_err(|e| self.error(format!("waiting for the reply to {what}"), started, e))?;
        reply.msg.ok_or_else(|| self.empty_reply(what))
    }

    pub(crate) fn empty_reply(&self, what: &str) -> Error {
        Error::Protocol {
            reason: format!(
                "the monitor at {} answered {what} with an empty ServerMessage",
                self.path.display()
            ),
        }
    }

    pub(crate) fn expect_ok(
        &self,
        what: &'static str,
        reply: pb::server_message::Msg,
    ) -> Result<pb::Ok> {
        match reply {
            pb::server_message::Msg::Ok(ok) => Ok(ok),
            pb::server_message::Msg::Error(e) => Err(self.refused(what, e)),
            pb::server_message::Msg::Status(_) => Err(Error::Protocol {
                reason: format!(
                    "the monitor at {} answered {what} with Status, not Ok or Error",
                    self.path.display()
                ),
            }),
        }
    }

    pub(crate) fn expect_status(
        &self,
        what: &'static str,
        reply: pb::server_message::Msg,
    ) -> Result<MonitorStatus> {
        match reply {
            pb::server_message::Msg::Status(s) => {
                MonitorStatus::from_proto(&s).ok_or_else(|| Error::Protocol {
                    reason: format!(
                        "the monitor at {} sent a Status with unknown state {}",
                        self.path.display(),
                        s.state
                    ),
                })
            }
            pb::server_message::Msg::Error(e) => Err(self.refused(what, e)),
            pb::server_message::Msg::Ok(_) => Err(Error::Protocol {
                reason: format!(
                    "the monitor at {} answered {what} with Ok, not Status",
                    self.path.display()
                ),
            }),
        }
    }

    pub(crate) fn refused(&self, what: &'static str, error: pb::Error) -> Error {
        Error::Refused {
            what,
            path: self.path.clone(),
            code: RefusalCode::from_proto(error.code),
            cause: error.cause,
        }
    }
}
