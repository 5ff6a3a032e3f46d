//! The client's side of the handshake.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nodeipc_fdpass::Credentials;
use nodeipc_proto::LEN_PREFIX;
use nodeipc_proto::handshake::{
    Accept, FdKind, Logon, LogonReply, PROTOCOL_VERSION, RejectCode, logon_reply,
};

use super::{MAX_PASSED_FDS, MAX_REPLY};
use crate::{Error, Result, Worker};

/// An accepted logon: what the server said, and the descriptors it passed,
/// each with the kind `Accept.fds` gave it.
#[derive(Debug)]
pub struct Session {
    /// The server's `Accept`.
    pub accept: Accept,
    /// The descriptors, in the order `accept.fds` describes them.
    pub fds: Vec<(FdKind, OwnedFd)>,
    /// Who the server is (it runs as our uid: checked).
    pub server: Credentials,
}

impl Session {
    /// Takes the descriptor of `kind` out of the session.
    pub fn take(&mut self, kind: FdKind) -> Option<OwnedFd> {
        let index = self.fds.iter().position(|(k, _)| *k == kind)?;
        Some(self.fds.remove(index).1)
    }

    /// The channel's name, as the server's `Accept` gives it (its semaphore
    /// prefix): named semaphores are found by it.
    pub fn channel_name(&self) -> Option<&str> {
        self.accept
            .geometry
            .as_ref()
            .map(|g| g.semaphore_prefix.as_str())
    }

    /// Joins the channel as worker `rank` over the passed regions, under the
    /// name the server gave.
    ///
    /// # Errors
    /// [`Error::Handshake`] if the server passed no request or response
    /// region, or no channel geometry; otherwise as [`Worker::from_fds`].
    pub fn into_worker(self, rank: u32, timeout: Duration) -> Result<Worker> {
        self.into_worker_typed(rank, timeout)
    }

    /// [`into_worker`](Session::into_worker) for a channel of other messages.
    ///
    /// # Errors
    /// As [`into_worker`](Session::into_worker).
    pub fn into_worker_typed<Req, Resp>(
        mut self,
        rank: u32,
        timeout: Duration,
    ) -> Result<Worker<Req, Resp>>
    where
        Req: prost::Message + Default,
        Resp: prost::Message + Default,
    {
        let server_pid = self.server.pid;
        let missing = |what: &str| Error::Handshake {
            peer: format!("server pid {server_pid}"),
            reason: format!("the accept carries no {what}"),
        };
        let name = self
            .channel_name()
            .ok_or_else(|| missing("channel geometry"))?
            .to_owned();
        let request = self
            .take(FdKind::RequestRegion)
            .ok_or_else(|| missing("request region"))?;
        let response = self
            .take(FdKind::ResponseRegion)
            .ok_or_else(|| missing("response region"))?;
        Worker::from_fds_typed(&name, rank, request, response, timeout)
    }
}

/// Logs on to the handshake server at `path`: connects (retrying while the
/// server is not up yet or its backlog is full, within `timeout`), checks that the server runs as
/// our uid, sends `logon` and reads the reply with the descriptors attached.
///
/// # Errors
/// [`Error::Rejected`] with the server's code and reason; [`Error::Handshake`]
/// for a server of another uid, a protocol version other than ours, a reply
/// that is not one, descriptors that do not match their description, or a
/// server that closed early; [`Error::Timeout`] naming what was awaited
/// (the connection, the logon's sending, the reply); [`Error::FdPass`] for a
/// socket that cannot be connected to (`EACCES`, say).
pub fn connect(path: impl AsRef<Path>, logon: &Logon, timeout: Duration) -> Result<Session> {
    let path = path.as_ref();
    let peer = || format!("handshake server at {}", path.display());
    let handshake = |reason: String| Error::Handshake {
        peer: peer(),
        reason,
    };
    let start = Instant::now();
    let timed_out = |op: &str| Error::Timeout {
        channel: peer(),
        op: op.to_owned(),
        waited: start.elapsed(),
    };
    // Non-blocking underneath: a server stopped with its backlog full costs
    // `timeout`, not forever.
    let mut stream = nodeipc_fdpass::connect_unix_when_up(path, timeout).map_err(|e| match e {
        nodeipc_fdpass::Error::ConnectTimeout { waited, last, .. } => Error::Timeout {
            channel: peer(),
            op: format!(
                "connecting ({})",
                nodeipc_fdpass::connect_failure_reason(&last)
            ),
            waited,
        },
        source => Error::FdPass {
            context: peer(),
            source,
        },
    })?;
    let server =
        nodeipc_fdpass::require_peer_uid(&stream, &[]).map_err(|source| Error::FdPass {
            context: peer(),
            source,
        })?;
    let left = timeout
        .saturating_sub(start.elapsed())
        .max(Duration::from_millis(1));
    let io = |op, source| Error::Io {
        context: peer(),
        op,
        source,
    };
    stream
        .set_read_timeout(Some(left))
        .map_err(|e| io("set_read_timeout", e))?;
    stream
        .set_write_timeout(Some(left))
        .map_err(|e| io("set_write_timeout", e))?;
    let closed_early = || handshake("the server closed the connection before answering".to_owned());
    let hung_up = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        )
    };
    match nodeipc_proto::write_frame(&mut stream, logon) {
        Ok(()) => {}
        // A server that refuses us outright (too many clients) answers and
        // closes without reading the logon: its answer may be waiting for us
        // even though the write failed. The read below tells.
        Err(nodeipc_proto::Error::Io(e)) if hung_up(&e) => {}
        Err(nodeipc_proto::Error::Io(e)) if is_timeout(&e) => {
            return Err(timed_out("sending the logon (the server is not reading)"));
        }
        Err(source) => {
            return Err(Error::Proto {
                context: peer(),
                source,
            });
        }
    }

    // The descriptors ride on the reply's first byte.
    let mut prefix = [0u8; LEN_PREFIX];
    let fds = nodeipc_fdpass::recv_fds_exact(&stream, &mut prefix, MAX_PASSED_FDS).map_err(
        |e| match e {
            nodeipc_fdpass::Error::Closed { .. } => closed_early(),
            nodeipc_fdpass::Error::Io { source, .. } if hung_up(&source) => closed_early(),
            nodeipc_fdpass::Error::Io { source, .. } if is_timeout(&source) => {
                timed_out("waiting for the logon reply")
            }
            source => Error::FdPass {
                context: peer(),
                source,
            },
        },
    )?;
    let len = u32::from_le_bytes(prefix) as usize;
    if len > MAX_REPLY {
        return Err(handshake(format!(
            "a {len}-byte reply; at most {MAX_REPLY} bytes are read"
        )));
    }
    let mut body = vec![0u8; len];
    std::io::Read::read_exact(&mut stream, &mut body).map_err(|e| {
        if is_timeout(&e) {
            timed_out("waiting for the rest of the logon reply")
        } else {
            handshake(format!("the reply was cut short: {e}"))
        }
    })?;
    // Through the schema's wire-type check, as every frame we read.
    let reply = nodeipc_proto::decode_message::<LogonReply>(&body).map_err(|e| {
        let cause = match e {
            nodeipc_proto::Error::Decode(e) => e.to_string(),
            other => other.to_string(),
        };
        handshake(format!("the reply is not a LogonReply: {cause}"))
    })?;
    match reply.reply {
        Some(logon_reply::Reply::Reject(reject)) => Err(Error::Rejected {
            code: RejectCode::try_from(reject.code)
                .map(|c| c.as_str_name().to_owned())
                .unwrap_or_else(|_| format!("code {}", reject.code)),
            reason: reject.reason,
        }),
        Some(logon_reply::Reply::Accept(accept)) => {
            if accept.protocol_version != PROTOCOL_VERSION {
                return Err(handshake(format!(
                    "the server speaks protocol version {}, we speak {PROTOCOL_VERSION}",
                    accept.protocol_version
                )));
            }
            if accept.fds.len() != fds.len() {
                return Err(handshake(format!(
                    "the accept describes {} descriptors but {} arrived",
                    accept.fds.len(),
                    fds.len()
                )));
            }
            // The server is trusted only as far as we check it: every
            // descriptor must have a known role and be at least as large as
            // the accept says, since that size is what gets mapped.
            let fds = accept
                .fds
                .iter()
                .zip(fds)
                .enumerate()
                .map(|(index, (described, fd))| {
                    let kind = match FdKind::try_from(described.kind) {
                        Ok(FdKind::Unspecified) | Err(_) => {
                            return Err(handshake(format!(
                                "descriptor {index} of the accept has no known role (kind {})",
                                described.kind
                            )));
                        }
                        Ok(kind) => kind,
                    };
                    let actual = rustix::fs::fstat(&fd)
                        .map_err(|e| handshake(format!("fstat of descriptor {index}: {e}")))?
                        .st_size;
                    if u64::try_from(actual).map_or(true, |actual| actual < described.size) {
                        return Err(handshake(format!(
                            "descriptor {index} ({}) holds {actual} bytes, the accept says {}",
                            kind.as_str_name(),
                            described.size
                        )));
                    }
                    Ok((kind, fd))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Session {
                accept,
                fds,
                server,
            })
        }
        None => Err(handshake(
            "the reply holds neither an accept nor a reject".to_owned(),
        )),
    }
}

/// A socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`) shows as `EAGAIN`.
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// A worker's logon for `rank`, expecting nothing in particular of the channel.
pub fn worker_logon(rank: u32) -> Logon {
    Logon {
        protocol_version: PROTOCOL_VERSION,
        kind: nodeipc_proto::handshake::ClientKind::Worker as i32,
        worker_rank: rank,
        ..Logon::default()
    }
}
